-- Index and bitmap scans through pmhash, compared with sequential scans.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;

CREATE TABLE sc (id serial, k int8, t text);
-- duplicates (up to 2000 rows per key), NULLs, and a wide spread of keys
INSERT INTO sc (k, t)
	SELECT CASE WHEN g % 97 = 0 THEN NULL ELSE g % 5000 END, 'row ' || g
	FROM generate_series(1, 30000) g;
INSERT INTO sc (k, t) SELECT 7, 'hot ' || g FROM generate_series(1, 2000) g;
CREATE INDEX sc_k ON sc USING pmhash (k);
CREATE INDEX sc_t ON sc USING pmhash (t);
ANALYZE sc;

-- the planner picks the index for a selective equality without coaxing
EXPLAIN (COSTS OFF) SELECT * FROM sc WHERE k = 42;
EXPLAIN (COSTS OFF) SELECT * FROM sc WHERE t = 'row 42';

-- answers through the index equal answers from a sequential scan
CREATE FUNCTION sc_compare(probe int8) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	via_index bigint[];
	via_bitmap bigint[];
	via_seq bigint[];
BEGIN
	SET LOCAL enable_seqscan = off;
	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_indexscan = on;
	SELECT array_agg(id ORDER BY id) INTO via_index FROM sc WHERE k = probe;
	SET LOCAL enable_indexscan = off;
	SET LOCAL enable_bitmapscan = on;
	SELECT array_agg(id ORDER BY id) INTO via_bitmap FROM sc WHERE k = probe;
	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_seqscan = on;
	SELECT array_agg(id ORDER BY id) INTO via_seq FROM sc WHERE k = probe;
	IF via_index IS DISTINCT FROM via_seq OR via_bitmap IS DISTINCT FROM via_seq THEN
		RETURN format('MISMATCH for %s: index %s bitmap %s seq %s', probe,
					  cardinality(via_index), cardinality(via_bitmap), cardinality(via_seq));
	END IF;
	RETURN format('%s: %s rows', probe, coalesce(cardinality(via_seq), 0));
END $$;

SELECT sc_compare(p) FROM unnest(ARRAY[0, 1, 7, 42, 97, 4999, 5000, -1, 123456789]) p;

-- every key at once: index nested loop vs hash join
SET enable_seqscan = off; SET enable_bitmapscan = off;
SET enable_hashjoin = off; SET enable_mergejoin = off;
EXPLAIN (COSTS OFF)
	SELECT count(*) FROM generate_series(-10, 5010) p JOIN sc ON sc.k = p;
SELECT count(*) FROM generate_series(-10, 5010) p JOIN sc ON sc.k = p;
RESET ALL;
SELECT count(*) FROM generate_series(-10, 5010) p JOIN sc ON sc.k = p;

-- each TID exactly once
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*), count(DISTINCT ctid) FROM sc WHERE k = 7;
RESET ALL;

-- NULLs are not indexed; IS NULL and = NULL are not index quals
EXPLAIN (COSTS OFF) SELECT count(*) FROM sc WHERE k IS NULL;
SELECT count(*) FROM sc WHERE k IS NULL;
SET enable_seqscan = off;
SELECT count(*) FROM sc WHERE k = NULL;
SELECT entries FROM pmhash_stats('sc_k');
SELECT count(*) FROM sc WHERE k IS NOT NULL;
RESET ALL;

-- cross-type probes on an int8 column use the index
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM sc WHERE k = 42::int4;
SELECT count(*) FROM sc WHERE k = 42::int4;
SELECT count(*) FROM sc WHERE k = 42::int2;
SELECT count(*) FROM sc WHERE k = 42::int8;
-- contradictory keys find nothing; equal keys are fine
SELECT count(*) FROM sc WHERE k = 42 AND k = 43;
SELECT count(*) FROM sc WHERE k = 42 AND k = 42::int4;
RESET ALL;

-- text keys
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT id, k FROM sc WHERE t = 'row 4242';
SELECT count(*) FROM sc WHERE t = 'no such row';
RESET ALL;

-- a transaction sees its own inserts; an aborted insert leaves nothing
BEGIN;
INSERT INTO sc (k, t) VALUES (-5, 'mine');
SET LOCAL enable_seqscan = off;
SELECT t FROM sc WHERE k = -5;
ROLLBACK;
SET enable_seqscan = off;
SELECT count(*) FROM sc WHERE k = -5;
RESET ALL;

-- scans are counted in pg_stat_user_indexes
SELECT pg_stat_force_next_flush();
SELECT idx_scan > 0 AS scanned FROM pg_stat_user_indexes WHERE indexrelname = 'sc_k';

-- the structure is consistent
SELECT * FROM pmhash_check('sc_k');
SELECT * FROM pmhash_check('sc_t');
SELECT entries, global_depth > 0 AS grew, segments > 1 AS split
	FROM pmhash_stats('sc_k');

DROP TABLE sc;
DROP FUNCTION sc_compare(int8);
