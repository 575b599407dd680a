-- pgbench script (test/bench/sql_bench.sh): single-row insert.
-- One row with a new random key into table "pgb" (one transaction, one
-- index entry).
\set k random(:rows + 1, 1000000000000)
INSERT INTO pgb (k, payload) VALUES (:k, 'pgbench insert');
