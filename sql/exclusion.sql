-- Exclusion constraints on pmhash indexes (the concurrent cases are in
-- test/isolation/specs/exclusion.spec).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
CREATE EXTENSION IF NOT EXISTS pageinspect;
RESET client_min_messages;

CREATE TABLE ex (k int4, s int4, v int4)
	WITH (autovacuum_enabled = off, fillfactor = 50);
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
DROP TABLE ex;
