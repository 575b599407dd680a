-- Indexes on several key columns: entries hash all key columns together;
-- the index serves scans with an equality condition on every key column.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;

CREATE TABLE mc (a int4, b text, c int8);
INSERT INTO mc SELECT g % 200, 'k' || (g % 7), g FROM generate_series(1, 20000) g;
INSERT INTO mc VALUES (NULL, 'k1', -1), (1, NULL, -2), (NULL, NULL, -3);
CREATE INDEX mc_ab ON mc USING pmhash (a, b);
CREATE INDEX mc_abc ON mc USING pmhash (a, b, c);
ANALYZE mc;

-- the probes: every pair present, and some absent; mc_counts(t, how)
-- makes table t of each probe's count of rows, found by "index" scans,
-- "bitmap" scans or "seq" scans
CREATE TABLE mc_probe AS
	SELECT a, 'k' || b AS b FROM generate_series(-2, 202) a, generate_series(0, 8) b;
CREATE FUNCTION mc_counts(tab text, how text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	plan text;
	want text := CASE how WHEN 'index' THEN 'Index Scan using mc_ab'
						  WHEN 'bitmap' THEN 'Bitmap Heap Scan'
						  ELSE 'Seq Scan' END;
BEGIN
	PERFORM set_config('enable_indexscan', (how = 'index')::text, true),
			set_config('enable_bitmapscan', (how = 'bitmap')::text, true),
			set_config('enable_seqscan', (how = 'seq')::text, true);
	EXECUTE $q$EXPLAIN (COSTS OFF) SELECT * FROM mc WHERE a = 1 AND b = 'k1'$q$
		INTO plan;
	IF plan !~ want THEN
		RAISE EXCEPTION 'mc_counts(%, %): plan %', tab, how, plan;
	END IF;
	EXECUTE format('CREATE TABLE %I AS SELECT p.a, p.b,
		(SELECT count(*) FROM mc WHERE mc.a = p.a AND mc.b = p.b) AS n
		FROM mc_probe p', tab);
END $$;

-- with all keys the index is used, as an index scan and as a bitmap scan
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM mc WHERE a = 5 AND b = 'k3';
RESET enable_bitmapscan;
SET enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM mc WHERE a = 5 AND b = 'k3';
RESET ALL;
SELECT mc_counts('mc_idx', 'index'), mc_counts('mc_bmp', 'bitmap'),
	   mc_counts('mc_seq', 'seq');
-- every probe agrees with the sequential scan
SELECT count(*) AS probes, sum(s.n) AS rows,
	   count(*) FILTER (WHERE i.n <> s.n) AS index_wrong,
	   count(*) FILTER (WHERE b.n <> s.n) AS bitmap_wrong
FROM mc_seq s JOIN mc_idx i USING (a, b) JOIN mc_bmp b USING (a, b);

-- three columns
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT c FROM mc WHERE a = 7 AND b = 'k0' AND c = 1407;
SELECT c FROM mc WHERE a = 7 AND b = 'k0' AND c = 1407;
SELECT count(*) FROM mc WHERE a = 7 AND b = 'k0' AND c = 1408;

-- "= ANY" on one key column, on both, and several conditions on one
EXPLAIN (COSTS OFF) SELECT count(*) FROM mc WHERE a = ANY ('{1,2,3}') AND b = 'k2';
SELECT count(*) FROM mc WHERE a = ANY ('{1,2,3}') AND b = 'k2';
SELECT count(*) FROM mc WHERE a = 4 AND b = ANY ('{k1,k2,k9}');
SELECT count(*) FROM mc WHERE a = ANY ('{1,2,3,NULL}') AND b = ANY ('{k1,k2,NULL}');
SELECT count(*) FROM mc WHERE a = ANY ('{1,2,3}') AND a = ANY ('{3,4}') AND b = 'k3';
SELECT count(*) FROM mc WHERE a = ANY ('{}') AND b = 'k3';
RESET enable_seqscan;
SELECT count(*) FROM mc WHERE a = ANY ('{1,2,3}') AND b = 'k2';
SELECT count(*) FROM mc WHERE a = 4 AND b = ANY ('{k1,k2,k9}');
SELECT count(*) FROM mc WHERE a IN (1, 2, 3) AND b IN ('k1', 'k2');

-- cross-type conditions work per column
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM mc WHERE a = 5::int8 AND b = 'k5' AND c = 5::int4;
SELECT count(*) FROM mc WHERE a = 5::int8 AND b = 'k5' AND c = 5::int4;
SELECT count(*) FROM mc WHERE a = 5::int2 AND b = 'k5'::varchar;

-- without a condition on every key column the index is never chosen, even
-- with sequential scans disabled, and the answer stays right
EXPLAIN (COSTS OFF) SELECT count(*) FROM mc WHERE a = 5;
SELECT count(*) FROM mc WHERE a = 5;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM mc WHERE a = 5 AND c = 5;
SELECT count(*) FROM mc WHERE a = 5 AND c = 5;
-- NULL keys are not indexed, and IS NULL is never an index condition
EXPLAIN (COSTS OFF) SELECT count(*) FROM mc WHERE a = 1 AND b IS NULL;
SELECT count(*) FROM mc WHERE a = 1 AND b IS NULL;
SELECT count(*) FROM mc WHERE a = NULL AND b = 'k1';
RESET ALL;

-- a scan that would look up too many combinations says so
SET enable_seqscan = off;
SELECT count(*) FROM mc
WHERE a = ANY (array(SELECT generate_series(1, 2048)))
  AND b = ANY (array(SELECT 'k' || generate_series(1, 2049)));
RESET enable_seqscan;

-- inserts, deletes and VACUUM keep it right
DELETE FROM mc WHERE c % 3 = 0;
VACUUM (INDEX_CLEANUP ON) mc;
INSERT INTO mc SELECT g % 200, 'k' || (g % 7), g FROM generate_series(20001, 23000) g;
SELECT mc_counts('mc_idx2', 'index'), mc_counts('mc_seq2', 'seq');
SELECT count(*) AS probes, sum(s.n) AS rows,
	   count(*) FILTER (WHERE i.n <> s.n) AS wrong
FROM mc_seq2 s JOIN mc_idx2 i USING (a, b);
SELECT * FROM pmhash_check('mc_ab');

-- expressions as key columns
CREATE INDEX mc_expr ON mc USING pmhash (lower(b), (a + 1));
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM mc WHERE lower(b) = 'k4' AND a + 1 = 11;
SELECT count(*) FROM mc WHERE lower(b) = 'k4' AND a + 1 = 11;
RESET enable_seqscan;
SELECT count(*) FROM mc WHERE lower(b) = 'k4' AND a + 1 = 11;

-- the planner folds "flag = true" into "flag", and matches a bare boolean
-- condition only to its built-in boolean families: a pmhash index with a
-- bool key column serves a value the planner cannot fold
CREATE TABLE mb (flag bool, k int);
INSERT INTO mb SELECT g % 2 = 0, g FROM generate_series(1, 1000) g;
CREATE INDEX mb_fk ON mb USING pmhash (flag, k);
ANALYZE mb;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM mb WHERE flag AND k = 10;
EXPLAIN (COSTS OFF) SELECT * FROM mb WHERE flag = true AND k = 10;
EXPLAIN (COSTS OFF) SELECT * FROM mb WHERE flag = (SELECT true) AND k = 10;
SELECT * FROM mb WHERE flag = (SELECT true) AND k = 10;
RESET enable_seqscan;

DROP TABLE mc, mc_probe, mc_idx, mc_bmp, mc_seq, mc_idx2, mc_seq2, mb;
DROP FUNCTION mc_counts(text, text);
