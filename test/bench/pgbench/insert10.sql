-- pgbench script (test/bench/sql_bench.sh): ten-row insert.
-- Ten rows with new random keys into table "pgb" in one INSERT (one
-- transaction, ten index entries, one commit).
\set k0 random(:rows + 1, 1000000000000)
\set k1 random(:rows + 1, 1000000000000)
\set k2 random(:rows + 1, 1000000000000)
\set k3 random(:rows + 1, 1000000000000)
\set k4 random(:rows + 1, 1000000000000)
\set k5 random(:rows + 1, 1000000000000)
\set k6 random(:rows + 1, 1000000000000)
\set k7 random(:rows + 1, 1000000000000)
\set k8 random(:rows + 1, 1000000000000)
\set k9 random(:rows + 1, 1000000000000)
INSERT INTO pgb (k, payload) VALUES
  (:k0, 'pgbench insert10'), (:k1, 'pgbench insert10'), (:k2, 'pgbench insert10'),
  (:k3, 'pgbench insert10'), (:k4, 'pgbench insert10'), (:k5, 'pgbench insert10'),
  (:k6, 'pgbench insert10'), (:k7, 'pgbench insert10'), (:k8, 'pgbench insert10'),
  (:k9, 'pgbench insert10');
