-- VACUUM removes the entries of dead tuples and their space is reused.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;

CREATE TABLE vt (id int, k int4);
INSERT INTO vt SELECT g, g % 3000 FROM generate_series(1, 60000) g;
CREATE INDEX vt_k ON vt USING pmhash (k);
SELECT entries FROM pmhash_stats('vt_k');
SELECT segments AS full_segments FROM pmhash_stats('vt_k') \gset

DELETE FROM vt WHERE id % 2 = 0;
VACUUM vt;
SELECT entries FROM pmhash_stats('vt_k');
SELECT * FROM pmhash_check('vt_k');

-- reltuples of the index follows the count VACUUM reported
SELECT reltuples FROM pg_class WHERE relname = 'vt_k';

-- answers still match a sequential scan
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM vt WHERE k = 11;
SELECT count(*) FROM generate_series(0, 2999) p JOIN vt ON vt.k = p;
RESET ALL;
SELECT count(*) FROM vt WHERE k = 11;

-- refilling reuses the freed slots: the index ends up about as large as it
-- was before the delete, not half as large again
INSERT INTO vt SELECT g, g % 3000 FROM generate_series(60001, 90000) g;
SELECT entries FROM pmhash_stats('vt_k');
SELECT segments < :full_segments * 1.2 AS reused FROM pmhash_stats('vt_k');
SELECT * FROM pmhash_check('vt_k');

-- updates: old versions' entries go away with VACUUM
UPDATE vt SET k = k + 1 WHERE id <= 1000;
VACUUM vt;
SELECT entries = (SELECT count(*) FROM vt) AS exact FROM pmhash_stats('vt_k');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM vt WHERE k = 1;
RESET ALL;
SELECT count(*) FROM vt WHERE k = 1;

-- deleting everything, then VACUUM, leaves an empty, consistent index
DELETE FROM vt;
VACUUM vt;
SELECT entries FROM pmhash_stats('vt_k');
SELECT * FROM pmhash_check('vt_k');

-- VACUUM with nothing to remove reports the count (amvacuumcleanup)
INSERT INTO vt SELECT g, g FROM generate_series(1, 500) g;
VACUUM vt;
SELECT reltuples FROM pg_class WHERE relname = 'vt_k';

-- duplicates spread over an overflow chain are vacuumed too
INSERT INTO vt SELECT g, 42 FROM generate_series(1, 5000) g;
DELETE FROM vt WHERE k = 42 AND id % 3 <> 0;
VACUUM vt;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM vt WHERE k = 42;
RESET ALL;
SELECT count(*) FROM vt WHERE k = 42;
SELECT entries = (SELECT count(*) FROM vt) AS exact FROM pmhash_stats('vt_k');
SELECT * FROM pmhash_check('vt_k');

DROP TABLE vt;
