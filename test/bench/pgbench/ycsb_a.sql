-- pgbench script (test/bench/sql_bench.sh): YCSB-A-like, 50 % lookups by
-- key and 50 % updates of one row's payload by key (uniform over the loaded
-- keys).  An update that is not HOT adds an index entry.
\set r random(0, 1)
\set k random(1, :rows)
\if :r = 0
SELECT payload FROM pgb WHERE k = :k;
\else
UPDATE pgb SET payload = md5(random()::text) WHERE k = :k;
\endif
