-- pgbench script (test/bench/sql_bench.sh): 50 % lookups by key, 50 %
-- single-row inserts into table "pgb".
\set r random(0, 1)
\if :r = 0
\set k random(1, :rows)
SELECT payload FROM pgb WHERE k = :k;
\else
\set k random(:rows + 1, 1000000000000)
INSERT INTO pgb (k, payload) VALUES (:k, 'pgbench mixed');
\endif
