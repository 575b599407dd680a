-- Exactly one pool per pmhash index storage, through every DDL.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;

CREATE FUNCTION pools() RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM pg_ls_dir('pmhash/' || (SELECT oid FROM pg_database
			WHERE datname = current_database()), true, false) f
	WHERE f LIKE '%.pool'
$$;
-- each pmhash index's pool file exists and nothing else is there
CREATE FUNCTION pools_match() RETURNS boolean LANGUAGE sql AS $$
	SELECT pools() = (SELECT count(*) FROM pg_class c JOIN pg_am a ON a.oid = c.relam
					  WHERE a.amname = 'pmhash' AND c.relkind = 'i'
					  AND c.relpersistence <> 't')
$$;
CREATE FUNCTION probe(v int8, tbl text DEFAULT 'lc') RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
	SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
	EXECUTE format('SELECT count(*) FROM %I WHERE k = $1', tbl) INTO n USING v;
	RETURN n;
END $$;

SELECT pools() AS base \gset
CREATE TABLE lc (k int8, pad text);
INSERT INTO lc SELECT g % 1000, 'x' FROM generate_series(1, 5000) g;
CREATE INDEX lc_k ON lc USING pmhash (k);
SELECT pools() - :base AS pools, pools_match();

-- CREATE INDEX rolled back, also in a subtransaction
BEGIN; CREATE INDEX lc_k2 ON lc USING pmhash (k); ROLLBACK;
SELECT pools() - :base AS pools, pools_match();
BEGIN; SAVEPOINT s; CREATE INDEX lc_k2 ON lc USING pmhash (k); ROLLBACK TO s; COMMIT;
SELECT pools() - :base AS pools, pools_match();
BEGIN; SAVEPOINT s; CREATE INDEX lc_k2 ON lc USING pmhash (k); RELEASE s; COMMIT;
SELECT pools() - :base AS pools, pools_match();
DROP INDEX lc_k2;
SELECT pools() - :base AS pools, pools_match();

-- TRUNCATE, committed and rolled back
BEGIN; TRUNCATE lc; ROLLBACK;
SELECT pools() - :base AS pools, pools_match(), probe(5);
TRUNCATE lc;
SELECT pools() - :base AS pools, pools_match(), probe(5);
INSERT INTO lc SELECT g % 1000, 'x' FROM generate_series(1, 5000) g;
-- a table created and truncated in the same transaction
BEGIN;
CREATE TABLE lc_new (k int8);
CREATE INDEX lc_new_k ON lc_new USING pmhash (k);
INSERT INTO lc_new SELECT generate_series(1, 100);
TRUNCATE lc_new;
INSERT INTO lc_new VALUES (5);
COMMIT;
SELECT pools() - :base AS pools, pools_match();
SET enable_seqscan = off; SELECT count(*) FROM lc_new WHERE k = 5; RESET enable_seqscan;
-- the TRUNCATE rebuilt the index in place (same relfilenode): entries the
-- transaction still held for the old rows (97 to 100) were dropped
SELECT entries FROM pmhash_stats('lc_new_k');
-- and the index answers as a sequential scan does, old keys included
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT k FROM lc_new WHERE k = ANY ('{5,97,98,99,100}') ORDER BY k;
RESET ALL;
SET enable_indexscan = off; SET enable_bitmapscan = off;
SELECT k FROM lc_new WHERE k = ANY ('{5,97,98,99,100}') ORDER BY k;
RESET ALL;
DROP TABLE lc_new;

-- REINDEX, VACUUM FULL, CLUSTER-like rewrites, ALTER TYPE
REINDEX INDEX lc_k;
SELECT pools() - :base AS pools, pools_match(), probe(5);
REINDEX TABLE lc;
SELECT pools() - :base AS pools, pools_match(), probe(5);
BEGIN; REINDEX INDEX lc_k; ROLLBACK;
SELECT pools() - :base AS pools, pools_match(), probe(5);
VACUUM FULL lc;
SELECT pools() - :base AS pools, pools_match(), probe(5);
CREATE INDEX lc_bt ON lc USING btree (k);
CLUSTER lc USING lc_bt;
DROP INDEX lc_bt;
SELECT pools() - :base AS pools, pools_match(), probe(5);
ALTER TABLE lc ALTER COLUMN k TYPE int4;
SELECT pools() - :base AS pools, pools_match(), probe(5);
ALTER TABLE lc ALTER COLUMN k TYPE int8;

-- CREATE INDEX CONCURRENTLY and REINDEX CONCURRENTLY
CREATE INDEX CONCURRENTLY lc_c ON lc USING pmhash (k);
SELECT pools() - :base AS pools, pools_match();
REINDEX INDEX CONCURRENTLY lc_c;
SELECT pools() - :base AS pools, pools_match();
SELECT * FROM pmhash_check('lc_c');
DROP INDEX CONCURRENTLY lc_c;
SELECT pools() - :base AS pools, pools_match();

-- entries inserted after each rewrite are found
INSERT INTO lc VALUES (123456, 'new');
SELECT probe(123456);

-- DROP INDEX / DROP TABLE, rolled back and committed
BEGIN; DROP INDEX lc_k; ROLLBACK;
SELECT pools() - :base AS pools, pools_match(), probe(123456);
BEGIN; DROP TABLE lc; ROLLBACK;
SELECT pools() - :base AS pools, pools_match(), probe(123456);
DROP INDEX lc_k;
SELECT pools() - :base AS pools, pools_match();
CREATE INDEX lc_k ON lc USING pmhash (k);
DROP TABLE lc;
SELECT pools() - :base AS pools, pools_match();

-- unlogged tables work; temporary tables are refused clearly
CREATE UNLOGGED TABLE lc_u (k int4);
INSERT INTO lc_u SELECT generate_series(1, 1000);
CREATE INDEX lc_u_k ON lc_u USING pmhash (k);
SET enable_seqscan = off; SELECT count(*) FROM lc_u WHERE k = 10; RESET enable_seqscan;
SELECT pools() - :base AS pools, pools_match();
DROP TABLE lc_u;
CREATE TEMP TABLE lc_t (k int4);
CREATE INDEX ON lc_t USING pmhash (k);
SELECT pools() - :base AS pools, pools_match();

-- two-phase commit of DDL on pmhash storage: the pools follow COMMIT and
-- ROLLBACK PREPARED (pmhashtwophase.c)
CREATE TABLE lc2 (k int4);
CREATE INDEX lc2_k ON lc2 USING pmhash (k);
BEGIN; CREATE INDEX lc2_k2 ON lc2 USING pmhash (k); PREPARE TRANSACTION 'pmhash_ddl';
-- prepared: the new storage has its pool (it is a storage, uncommitted)
SELECT pools() - :base AS pools;
ROLLBACK PREPARED 'pmhash_ddl';
SELECT pools() - :base AS pools, pools_match();
BEGIN; CREATE INDEX lc2_k2 ON lc2 USING pmhash (k); PREPARE TRANSACTION 'pmhash_ddl';
COMMIT PREPARED 'pmhash_ddl';
SELECT pools() - :base AS pools, pools_match();
BEGIN; INSERT INTO lc2 VALUES (1), (2); PREPARE TRANSACTION 'pmhash_data';
COMMIT PREPARED 'pmhash_data';
SET enable_seqscan = off; SELECT count(*) FROM lc2 WHERE k = 2; RESET enable_seqscan;
-- REINDEX and TRUNCATE replace storages; DROP removes one
BEGIN; REINDEX INDEX lc2_k; PREPARE TRANSACTION 'pmhash_reindex';
ROLLBACK PREPARED 'pmhash_reindex';
SELECT pools() - :base AS pools, pools_match();
BEGIN; REINDEX TABLE lc2; INSERT INTO lc2 VALUES (3); PREPARE TRANSACTION 'pmhash_reindex';
COMMIT PREPARED 'pmhash_reindex';
SELECT pools() - :base AS pools, pools_match();
SET enable_seqscan = off; SELECT count(*) FROM lc2 WHERE k = 3; RESET enable_seqscan;
BEGIN; TRUNCATE lc2; INSERT INTO lc2 VALUES (4); PREPARE TRANSACTION 'pmhash_truncate';
COMMIT PREPARED 'pmhash_truncate';
SELECT pools() - :base AS pools, pools_match();
SET enable_seqscan = off; SELECT count(*) FROM lc2 WHERE k = 4; SELECT count(*) FROM lc2 WHERE k = 3; RESET enable_seqscan;
BEGIN; DROP INDEX lc2_k2; PREPARE TRANSACTION 'pmhash_drop';
SELECT pools() - :base AS pools;
COMMIT PREPARED 'pmhash_drop';
SELECT pools() - :base AS pools, pools_match();
BEGIN; DROP TABLE lc2; PREPARE TRANSACTION 'pmhash_drop';
COMMIT PREPARED 'pmhash_drop';
SELECT pools() - :base AS pools, pools_match();
-- every prepared transaction's state file is gone once it ended
SELECT count(*) AS state_files FROM pg_ls_dir('pmhash/twophase', true, false) f
  WHERE f ~ '^[0-9]+$';

-- SET TABLESPACE copies the index blocks without the access method: the
-- pool follows, also inside a transaction that then uses the index
SET allow_in_place_tablespaces = true;
CREATE TABLESPACE regress_pmhash_ts LOCATION '';
CREATE TABLE lt (k int8);
INSERT INTO lt SELECT g FROM generate_series(1, 3000) g;
CREATE INDEX lt_k ON lt USING pmhash (k);
ALTER INDEX lt_k SET TABLESPACE regress_pmhash_ts;
SELECT pools() - :base AS pools, pools_match(), probe(77, 'lt');
SELECT * FROM pmhash_check('lt_k');
BEGIN;
ALTER INDEX lt_k SET TABLESPACE pg_default;
INSERT INTO lt VALUES (77);
SELECT probe(77, 'lt');
ROLLBACK;
SELECT pools() - :base AS pools, pools_match(), probe(77, 'lt');
BEGIN;
ALTER INDEX lt_k SET TABLESPACE pg_default;
INSERT INTO lt VALUES (77);
COMMIT;
SELECT pools() - :base AS pools, pools_match(), probe(77, 'lt');
ALTER TABLE lt SET TABLESPACE regress_pmhash_ts;
ALTER INDEX ALL IN TABLESPACE pg_default SET TABLESPACE regress_pmhash_ts;
SELECT pools() - :base AS pools, pools_match(), probe(77, 'lt');
SELECT * FROM pmhash_check('lt_k');
DROP TABLE lt;
-- an index that keeps its storage under a new OID (a type change that
-- needs no rebuild), then moves: the pool is found by its pool id
CREATE TABLE lv (k varchar(10));
INSERT INTO lv SELECT g::text FROM generate_series(1, 2000) g;
CREATE INDEX lv_k ON lv USING pmhash (k);
ALTER TABLE lv ALTER COLUMN k TYPE varchar(20);
ALTER INDEX lv_k SET TABLESPACE regress_pmhash_ts;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM lv WHERE k = '77';
RESET ALL;
SELECT pools() - :base AS pools, pools_match();
SELECT * FROM pmhash_check('lv_k');
DROP TABLE lv;
-- the moved index is usable inside a later savepoint
CREATE TABLE lw (k int4);
INSERT INTO lw SELECT generate_series(1, 1000);
CREATE INDEX lw_k ON lw USING pmhash (k);
BEGIN;
ALTER INDEX lw_k SET TABLESPACE regress_pmhash_ts;
SAVEPOINT s;
INSERT INTO lw VALUES (5);
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
SELECT count(*) FROM lw WHERE k = 5;
RELEASE s;
COMMIT;
SELECT pools() - :base AS pools, pools_match();
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM lw WHERE k = 5;
RESET ALL;
DROP TABLE lw;
DROP TABLESPACE regress_pmhash_ts;
SELECT pools() - :base AS pools, pools_match();

-- a storage rebuilt in the transaction that created it (TRUNCATE) gives
-- back all the shared memory the first build took: it ends with what an
-- index filled the same way from empty has
CREATE TABLE sm_a (k int4);
CREATE INDEX sm_a_k ON sm_a USING pmhash (k);
INSERT INTO sm_a SELECT generate_series(1, 100000);
BEGIN;
CREATE TABLE sm_b (k int4);
INSERT INTO sm_b SELECT generate_series(1, 100000);
CREATE INDEX sm_b_k ON sm_b USING pmhash (k);
TRUNCATE sm_b;
INSERT INTO sm_b SELECT generate_series(1, 100000);
COMMIT;
SELECT a.shmem_bytes = b.shmem_bytes AS same_shmem
  FROM pmhash_stats('sm_a_k') a, pmhash_stats('sm_b_k') b;
DROP TABLE sm_a, sm_b;

DROP FUNCTION probe(int8, text);
DROP FUNCTION pools_match();
DROP FUNCTION pools();
