-- test/stress/abort.sql: 30 rows rolled back; the first ones fill this
-- client's backup-log line, so they reach the pool and the D-buckets before
-- the abort and stay behind as dead entries
\set k random(1, :keys)
BEGIN;
INSERT INTO s (k) SELECT :k + g FROM generate_series(0, 29) g;
ROLLBACK;
