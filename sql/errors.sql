-- Bad input gets a clear error and loses nothing.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;

CREATE TABLE er (a int4, b int4, t text, p point);
INSERT INTO er SELECT g, g, 'v' || g, point(g, g) FROM generate_series(1, 1000) g;

-- no INCLUDE columns (a hash entry has no room for them)
CREATE INDEX ON er USING pmhash (a) INCLUDE (b);
-- a type without a pmhash operator class
CREATE INDEX ON er USING pmhash (p);
-- reloptions: none exist, unknown ones are rejected
CREATE INDEX ON er USING pmhash (a) WITH (fillfactor = 50);
CREATE INDEX ON er USING pmhash (a) WITH (nonsense = 1);
-- ordering is not something a hash index offers
CREATE INDEX er_a ON er USING pmhash (a);
CREATE INDEX er_a_desc ON er USING pmhash (a DESC);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT a FROM er ORDER BY a LIMIT 1;
EXPLAIN (COSTS OFF) SELECT a FROM er WHERE a < 5;
RESET enable_seqscan;
-- nothing was lost along the way
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM er WHERE a = 500;
RESET ALL;

-- expression and partial indexes work
CREATE INDEX er_lower ON er USING pmhash (lower(t));
CREATE INDEX er_part ON er USING pmhash (b) WHERE b > 900;
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT a FROM er WHERE lower(t) = 'v10';
SELECT a FROM er WHERE lower(t) = 'v10';
EXPLAIN (COSTS OFF) SELECT a FROM er WHERE b = 950 AND b > 900;
SELECT a FROM er WHERE b = 950 AND b > 900;
RESET ALL;

-- huge keys are hashed like any other
INSERT INTO er (a, t) VALUES (-1, repeat('x', 1000000));
CREATE INDEX er_t ON er USING pmhash (t);
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT a FROM er WHERE t = repeat('x', 1000000);
RESET ALL;

-- the SQL functions check their argument
SELECT * FROM pmhash_stats('er');
CREATE INDEX er_bt ON er USING btree (a);
SELECT * FROM pmhash_stats('er_bt');
SELECT * FROM pmhash_check('er_bt');
SELECT * FROM pmhash_load_progress('er_bt');
SELECT * FROM pmhash_stats(NULL);
-- an index built in this server is loaded through and through
SELECT segments = segments_loaded AS all_loaded, log_entries_unsorted
  FROM pmhash_load_progress('er_a');

-- and are not for everybody
CREATE ROLE regress_pmhash_nobody;
GRANT SELECT ON er TO regress_pmhash_nobody;
SET ROLE regress_pmhash_nobody;
SELECT entries FROM pmhash_stats('er_a');
SELECT * FROM pmhash_check('er_a');
SELECT * FROM pmhash_load_progress('er_a');
RESET ROLE;
-- pg_read_all_stats reads statistics, but may not lock the index to check it
CREATE ROLE regress_pmhash_stats IN ROLE pg_read_all_stats;
SET ROLE regress_pmhash_stats;
SELECT entries FROM pmhash_stats('er_a');
SELECT * FROM pmhash_check('er_a');
SELECT buffer_lines FROM pmhash_media_stats();
RESET ROLE;
DROP ROLE regress_pmhash_stats;
-- pg_monitor may do both
CREATE ROLE regress_pmhash_monitor IN ROLE pg_monitor;
SET ROLE regress_pmhash_monitor;
SELECT entries FROM pmhash_stats('er_a');
SELECT * FROM pmhash_check('er_a');
RESET ROLE;
DROP ROLE regress_pmhash_monitor;
-- the owner of an index may inspect it, and only it
CREATE ROLE regress_pmhash_owner;
GRANT CREATE ON SCHEMA public TO regress_pmhash_owner;
SET ROLE regress_pmhash_owner;
CREATE TABLE er_own (k int4);
INSERT INTO er_own SELECT generate_series(1, 10);
CREATE INDEX er_own_k ON er_own USING pmhash (k);
SELECT entries FROM pmhash_stats('er_own_k');
SELECT * FROM pmhash_check('er_own_k');
SELECT entries FROM pmhash_stats('er_a');
SELECT pmhash_reset_stats();
RESET ROLE;
DROP TABLE er_own;
REVOKE CREATE ON SCHEMA public FROM regress_pmhash_owner;
DROP ROLE regress_pmhash_owner;

-- GUCs: most are read at server start only
SET pmhash.pool_dir = '/tmp';
SET pmhash.shared_memory = '1GB';
SET pmhash.max_indexes = 10;
SET pmhash.max_shared_memory = '1GB';
SET pmhash.media_buffer_lines = 10;
-- bad values are rejected with the valid range (and nothing is written)
ALTER SYSTEM SET pmhash.shared_memory = '512kB';
ALTER SYSTEM SET pmhash.shared_memory = '3TB';
ALTER SYSTEM SET pmhash.shared_memory = 'lots';
ALTER SYSTEM SET pmhash.max_indexes = 0;
ALTER SYSTEM SET pmhash.max_indexes = 100000;
ALTER SYSTEM SET pmhash.max_shared_memory = -2;
ALTER SYSTEM SET pmhash.max_shared_memory = 'lots';
ALTER SYSTEM SET pmhash.media_buffer_lines = -1;
ALTER SYSTEM SET pmhash.media_buffer_lines = 1025;
ALTER SYSTEM SET pmhash.track_media_reads = 'maybe';
ALTER SYSTEM SET pmhash.pool_dir = '';
SELECT repeat('p', 980) AS long_dir \gset
ALTER SYSTEM SET pmhash.pool_dir = :'long_dir';
SET pmhash.track_media_reads = 'maybe';
-- the prefix is reserved: misspelt settings are errors
SET pmhash.pooldir = '/tmp';
-- only superusers see or set the pool directory and the read tracking
SET ROLE regress_pmhash_nobody;
SHOW pmhash.pool_dir;
SET pmhash.track_media_reads = on;
ALTER SYSTEM SET pmhash.pool_dir = '/tmp';
SHOW pmhash.max_indexes;
RESET ROLE;
REVOKE ALL ON er FROM regress_pmhash_nobody;
DROP ROLE regress_pmhash_nobody;
-- reloptions: pmhash has none, in ALTER INDEX either
ALTER INDEX er_a SET (fillfactor = 50);
ALTER INDEX er_a SET (pmhash.anything = 1);

DROP TABLE er;
