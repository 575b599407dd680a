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

-- "col = ANY (array)": the index takes the whole array in one scan
-- (amsearcharray) and looks its elements up in batches; answers equal a
-- sequential scan's whatever the array holds
CREATE FUNCTION sc_compare_any(probe int8[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	via_index bigint[];
	via_bitmap bigint[];
	via_seq bigint[];
	dups bigint;
BEGIN
	SET LOCAL enable_seqscan = off;
	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_indexscan = on;
	SELECT array_agg(id ORDER BY id) INTO via_index FROM sc WHERE k = ANY (probe);
	SELECT count(*) - count(DISTINCT ctid) INTO dups FROM sc WHERE k = ANY (probe);
	SET LOCAL enable_indexscan = off;
	SET LOCAL enable_bitmapscan = on;
	SELECT array_agg(id ORDER BY id) INTO via_bitmap FROM sc WHERE k = ANY (probe);
	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_seqscan = on;
	SELECT array_agg(id ORDER BY id) INTO via_seq FROM sc WHERE k = ANY (probe);
	IF via_index IS DISTINCT FROM via_seq OR via_bitmap IS DISTINCT FROM via_seq
		OR dups <> 0 THEN
		RETURN format('MISMATCH: index %s bitmap %s seq %s, %s returned twice',
					  cardinality(via_index), cardinality(via_bitmap),
					  cardinality(via_seq), dups);
	END IF;
	RETURN format('%s keys: %s rows', coalesce(cardinality(probe)::text, 'NULL'),
				  coalesce(cardinality(via_seq), 0));
END $$;

SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM sc WHERE k = ANY ('{1,2,3}');
RESET ALL;
SET enable_seqscan = off; SET enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM sc WHERE k = ANY ('{1,2,3}');
RESET ALL;
SELECT sc_compare_any(ARRAY[1, 2, 3]);
-- repeated elements, a hot key (over 2000 rows), NULL elements, absent keys
SELECT sc_compare_any(ARRAY[7, 7, 42, NULL, -1, 7, 123456789]);
-- nothing to look for
SELECT sc_compare_any(ARRAY[]::int8[]);
SELECT sc_compare_any(ARRAY[NULL, NULL]::int8[]);
SELECT sc_compare_any(NULL);
-- many batches: 1734 keys, most present, some absent
SELECT sc_compare_any(ARRAY(SELECT g FROM generate_series(-100, 5100, 3) g));
-- a two-dimensional array is just its elements
SELECT sc_compare_any('{{1,2},{3,7}}');

SET enable_seqscan = off; SET enable_bitmapscan = off;
-- an array of another type of the operator family
EXPLAIN (COSTS OFF) SELECT count(*) FROM sc WHERE k = ANY (ARRAY[42, 43]::int4[]);
SELECT count(*) FROM sc WHERE k = ANY (ARRAY[42, 43]::int4[]);
SELECT count(*) FROM sc WHERE k = ANY (ARRAY[42, 43]::int2[]);
-- with other keys: only what every key allows
SELECT count(*) FROM sc WHERE k = 42 AND k = ANY ('{41,42}');
SELECT count(*) FROM sc WHERE k = 42 AND k = ANY ('{41,43}');
SELECT count(*) FROM sc WHERE k = ANY ('{1,2,3}') AND k = ANY ('{3,4}');
SELECT count(*) FROM sc WHERE k = ANY ('{1,2,3}') AND k = ANY ('{}');
-- text keys
SELECT id, k FROM sc WHERE t = ANY (ARRAY['row 4242', 'row 17', 'no such row'])
	ORDER BY id;
-- a new array on every rescan of a nested loop
SET enable_hashjoin = off; SET enable_mergejoin = off;
SET enable_material = off; SET enable_memoize = off;
EXPLAIN (COSTS OFF)
	SELECT v.n, count(sc.id) FROM (VALUES (1, '{1,2}'::int8[]), (2, '{3}'),
		(3, '{}'), (4, NULL), (5, '{7,7}')) v(n, p)
	LEFT JOIN sc ON sc.k = ANY (v.p) GROUP BY v.n ORDER BY v.n;
SELECT v.n, count(sc.id) FROM (VALUES (1, '{1,2}'::int8[]), (2, '{3}'),
		(3, '{}'), (4, NULL), (5, '{7,7}')) v(n, p)
	LEFT JOIN sc ON sc.k = ANY (v.p) GROUP BY v.n ORDER BY v.n;
-- a transaction's own inserts, not flushed yet, are found too
BEGIN;
INSERT INTO sc (k, t) VALUES (-5, 'mine'), (-6, 'mine too');
SELECT t FROM sc WHERE k = ANY ('{-6,-5,-4}') ORDER BY t;
ROLLBACK;
SELECT count(*) FROM sc WHERE k = ANY ('{-6,-5,-4}');
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
DROP FUNCTION sc_compare_any(int8[]);

-- CREATE INDEX splits the empty index up front for the rows the table is
-- estimated to hold, as the hash AM sizes its buckets.  The estimate here
-- is stale on purpose: ANALYZE saw 200000 rows, 100 are left.
CREATE TABLE sz (k int8, n int8);
INSERT INTO sz SELECT g, CASE WHEN g <= 100 THEN g END
	FROM generate_series(1, 200000) g;
ANALYZE sz;
DELETE FROM sz WHERE k > 100;
CREATE INDEX sz_k ON sz USING pmhash (k);
SELECT entries, segments, global_depth FROM pmhash_stats('sz_k');
-- a partial index gets no estimate (its predicate's selectivity is unknown)
CREATE INDEX sz_p ON sz USING pmhash (k) WHERE k > 0;
SELECT entries, segments, global_depth FROM pmhash_stats('sz_p');
-- neither do the keys ANALYZE saw NULL
CREATE INDEX sz_n ON sz USING pmhash (n);
SELECT entries, segments, global_depth FROM pmhash_stats('sz_n');
-- the presized index answers like the others
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM generate_series(-5, 105) p JOIN sz ON sz.k = p;
SELECT count(*) FROM generate_series(-5, 105) p JOIN sz ON sz.n = p;
RESET ALL;
SELECT * FROM pmhash_check('sz_k');
DROP TABLE sz;
