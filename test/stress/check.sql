-- test/stress/check.sql: after the run, with no other session.  Every
-- key's rows through pmhash index scans and bitmap scans (nested loops over
-- the distinct keys) against a sequential scan, as TID lists; prints
-- "name|value" lines that pgbench_stress.sh judges:
--   plan_index, plan_bitmap    the join plans use s_k (t/f)
--   rows, keys                 rows and distinct keys in s
--   index_missing, index_extra TIDs a seqscan finds and the index scans
--   bitmap_missing, bitmap_extra  do not, and vice versa (duplicates count)
--   check                      rows pmhash_check reports
--   example_*                  up to 5 differing TIDs, 10 findings
-- All in one REPEATABLE READ snapshot (autovacuum may still be running).
\set ON_ERROR_STOP 1
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET enable_hashjoin = off; SET enable_mergejoin = off;
SET enable_material = off; SET enable_memoize = off;
SET enable_seqscan = off;

CREATE TEMP TABLE probe_keys AS SELECT DISTINCT k FROM s;
CREATE FUNCTION pg_temp.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	line text;
	plan text := '';
BEGIN
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
		plan := plan || line || ' ';
	END LOOP;
	RETURN plan;
END $$;
\set join 'SELECT t.k, t.ctid FROM probe_keys p JOIN s t ON t.k = p.k'

SET enable_bitmapscan = off;
SELECT 'plan_index', position('Index Scan using s_k on s' IN pg_temp.plan_of(:'join')) > 0;
CREATE TEMP TABLE via_index (k, tid) AS :join;

SET enable_bitmapscan = on; SET enable_indexscan = off;
SELECT 'plan_bitmap', position('Bitmap Index Scan on s_k' IN pg_temp.plan_of(:'join')) > 0;
CREATE TEMP TABLE via_bitmap (k, tid) AS :join;

RESET ALL;
SET enable_indexscan = off; SET enable_bitmapscan = off;
CREATE TEMP TABLE via_seq AS SELECT k, ctid AS tid FROM s;

SELECT 'rows', count(*) FROM via_seq;
SELECT 'keys', count(*) FROM probe_keys;
SELECT 'index_missing', count(*) FROM (TABLE via_seq EXCEPT ALL TABLE via_index) x;
SELECT 'index_extra', count(*) FROM (TABLE via_index EXCEPT ALL TABLE via_seq) x;
SELECT 'bitmap_missing', count(*) FROM (TABLE via_seq EXCEPT ALL TABLE via_bitmap) x;
SELECT 'bitmap_extra', count(*) FROM (TABLE via_bitmap EXCEPT ALL TABLE via_seq) x;
SELECT 'check', count(*) FROM pmhash_check('s_k');
-- a few examples of what differs, and what pmhash_check found
(SELECT 'example_index_missing', k, tid FROM (TABLE via_seq EXCEPT ALL TABLE via_index) x LIMIT 5)
UNION ALL
(SELECT 'example_index_extra', k, tid FROM (TABLE via_index EXCEPT ALL TABLE via_seq) x LIMIT 5);
SELECT 'example_check', c FROM pmhash_check('s_k') c LIMIT 10;
COMMIT;
