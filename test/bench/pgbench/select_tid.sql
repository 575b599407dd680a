-- pgbench script (test/bench/read_bench.sh): the same row as
-- select_only.sql fetches, found without any index.  Table "pgb" holds
-- keys 1 .. :rows in order, :per rows on every page, so key k is at
-- (block (k - 1) / :per, item (k - 1) % :per + 1): a Tid Scan, the heap
-- fetch that every index's lookup ends with.  (Building the tid from text
-- costs a little more than a tid parameter would.)
\set k random(1, :rows)
\set b (:k - 1) / :per
\set o (:k - 1) % :per + 1
SELECT payload FROM pgb WHERE ctid = ('(' || :b || ',' || :o || ')')::tid;
