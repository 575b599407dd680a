-- test/stress/insert.sql: 23 rows in one transaction (more than one
-- backup-log line: entries reach the D-buckets before commit), two of them
-- with a hot key (long overflow chains, one D-bucket shared by all
-- clients), and 5 more rolled back in a subtransaction
\set k random(1, :keys)
\set hot random(1, 8)
BEGIN;
INSERT INTO s (k) SELECT :k + g FROM generate_series(0, 19) g;
INSERT INTO s (k) VALUES (:hot), (:hot);
SAVEPOINT sp;
INSERT INTO s (k) SELECT :k + g FROM generate_series(20, 24) g;
ROLLBACK TO SAVEPOINT sp;
INSERT INTO s (k) VALUES (:k);
COMMIT;
