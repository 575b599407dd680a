-- pgbench script (test/bench/unique_bench.sh): INSERT ... ON CONFLICT DO
-- UPDATE through a unique index on "k" of table "pgb", which holds the
-- keys 1..:rows; half of the keys drawn are there (an update), half not
-- (an insert, until pgbench has inserted them).
\set k random(1, 2 * :rows)
INSERT INTO pgb (k, n) VALUES (:k, 1)
	ON CONFLICT (k) DO UPDATE SET n = pgb.n + 1;
