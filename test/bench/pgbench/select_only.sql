-- pgbench script (test/bench/sql_bench.sh): select-only by key.
-- One lookup of a loaded key (uniform over 1 .. :rows) through the index
-- of table "pgb".
\set k random(1, :rows)
SELECT payload FROM pgb WHERE k = :k;
