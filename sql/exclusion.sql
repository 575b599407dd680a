-- Exclusion constraints on pmhash indexes (the concurrent cases are in
-- test/isolation/specs/exclusion.spec).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
CREATE EXTENSION IF NOT EXISTS pageinspect;
RESET client_min_messages;

CREATE TABLE ex (k int4, s int4, v int4)
	WITH (autovacuum_enabled = off, fillfactor = 50);
-- the rows with keys 1, 2, 3 and 5 (and the predicate "pred") through an
-- index scan of ex_k against a sequential scan (k + 0)
CREATE FUNCTION ex_verify(pred text DEFAULT 'true') RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	q text := 'SELECT coalesce(array_agg(ctid ORDER BY ctid), ''{}'') FROM ex '
		'WHERE %s = ANY (''{1,2,3,5}'') AND ' || pred;
	plan text := '';
	line text;
	by_index tid[];
	by_seqscan tid[];
BEGIN
	PERFORM set_config('enable_seqscan', 'off', true);
	PERFORM set_config('enable_bitmapscan', 'off', true);
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || format(q, 'k') LOOP
		plan := plan || line;
	END LOOP;
	IF position('Index Scan using ex_k' IN plan) = 0 THEN
		RETURN 'no index scan: ' || plan;
	END IF;
	EXECUTE format(q, 'k') INTO by_index;
	EXECUTE format(q, 'k + 0') INTO by_seqscan;
	RETURN format('%s rows, index scan %s', cardinality(by_seqscan),
		CASE WHEN by_index = by_seqscan THEN 'ok' ELSE 'differs' END);
END $$;
ALTER TABLE ex ADD CONSTRAINT ex_k EXCLUDE USING pmhash (k WITH =);
INSERT INTO ex VALUES (1, 1, 0), (2, 1, 0);
INSERT INTO ex VALUES (1, 0, 0);				-- conflicts
INSERT INTO ex VALUES (3, 1, 0), (3, 1, 0);	-- conflicts within the statement
INSERT INTO ex VALUES (NULL, 1, 0), (NULL, 1, 0);	-- NULLs never conflict
INSERT INTO ex VALUES (1, 1, 0) ON CONFLICT DO NOTHING;
SELECT k, count(*) FROM ex GROUP BY k ORDER BY k;
-- an UPDATE to a conflicting key, and one that keeps its own
UPDATE ex SET k = 1 WHERE k = 2;
UPDATE ex SET v = v + 1 WHERE k = 1;
-- a deferred constraint checks at commit
ALTER TABLE ex DROP CONSTRAINT ex_k;
ALTER TABLE ex ADD CONSTRAINT ex_k EXCLUDE USING pmhash (k WITH =)
	DEFERRABLE INITIALLY DEFERRED;
BEGIN;
INSERT INTO ex VALUES (2, 1, 0);				-- a conflict until the update
UPDATE ex SET k = 5 WHERE ctid = (SELECT max(ctid) FROM ex WHERE k = 2);
COMMIT;
BEGIN;
INSERT INTO ex VALUES (5, 1, 0);
COMMIT;										-- conflicts
-- adding the constraint checks the rows already there
ALTER TABLE ex DROP CONSTRAINT ex_k;
INSERT INTO ex VALUES (5, 0, 0);
ALTER TABLE ex ADD CONSTRAINT ex_k EXCLUDE USING pmhash (k WITH =);	-- fails
DELETE FROM ex WHERE k = 5 AND s = 0;
ALTER TABLE ex ADD CONSTRAINT ex_k EXCLUDE USING pmhash (k WITH =);
SELECT k, s, v FROM ex ORDER BY k, s, v;
SELECT ex_verify();

-- a partial constraint: only rows with s = 1 conflict.  The scan checks
-- the predicate on what its snapshot sees, so rows outside it are no
-- conflict, and rows inside it are, however their HOT chain looks.
ALTER TABLE ex DROP CONSTRAINT ex_k;
TRUNCATE ex;
ALTER TABLE ex ADD CONSTRAINT ex_k EXCLUDE USING pmhash (k WITH =)
	WHERE (s = 1);
INSERT INTO ex VALUES (1, 1, 0), (1, 0, 0), (1, 0, 0);
INSERT INTO ex VALUES (1, 1, 0);				-- conflicts
-- a HOT update, then VACUUM: the entry's TID is a redirect to the row
UPDATE ex SET v = 1 WHERE k = 1 AND s = 1;
VACUUM ex;
SELECT lp, lp_flags FROM heap_page_items(get_raw_page('ex', 0)) WHERE lp_flags = 2;
INSERT INTO ex VALUES (1, 1, 0);				-- conflicts
-- a row moving out of the predicate frees its key, one moving in takes it
UPDATE ex SET s = 0 WHERE k = 1 AND s = 1;
INSERT INTO ex VALUES (1, 1, 7);
UPDATE ex SET s = 1 WHERE k = 1 AND s = 0 AND v = 0;	-- conflicts
SELECT k, s, v FROM ex ORDER BY k, s, v;
SELECT ex_verify('s = 1');

-- a broken HOT chain: the row became part of the predicate by an update
-- made before the index existed, so the chain's first member (dead, not
-- pruned) fails the predicate and the live heap-only tuple satisfies it
ALTER TABLE ex DROP CONSTRAINT ex_k;
TRUNCATE ex;
INSERT INTO ex VALUES (1, 0, 0);
UPDATE ex SET s = 1 WHERE k = 1;
SELECT lp, t_ctid, (t_infomask2 & 16384) <> 0 AS hot_updated
	FROM heap_page_items(get_raw_page('ex', 0)) ORDER BY lp;
ALTER TABLE ex ADD CONSTRAINT ex_k EXCLUDE USING pmhash (k WITH =)
	WHERE (s = 1);
INSERT INTO ex VALUES (1, 1, 0);				-- conflicts
INSERT INTO ex VALUES (1, 0, 0);
SELECT k, s, v FROM ex ORDER BY k, s, v;
SELECT ex_verify('s = 1');
DROP TABLE ex;
DROP FUNCTION ex_verify(text);
