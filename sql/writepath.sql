-- The write path: collecting logs, backup log, D-buckets, relocation, and
-- the persist-traffic counters that prove what touched the pool.
CREATE EXTENSION IF NOT EXISTS pmhash;
SET enable_seqscan = off;
SET enable_bitmapscan = off;

CREATE TABLE wp (id int, k int);
CREATE INDEX wp_k ON wp USING pmhash (k);

-- counters of a fresh index: a build of an empty table writes no entries
SELECT entries, pending_entries, user_bytes, write_amplification IS NULL AS no_ratio
FROM pmhash_stats('wp_k');

-- a transaction sees its own inserts before anything reaches the pool
BEGIN;
INSERT INTO wp VALUES (1, 10), (2, 20), (3, 10);
SELECT id FROM wp WHERE k = 10 ORDER BY id;
SELECT user_bytes FROM pmhash_stats('wp_k');
SELECT fences AS n0, flushes AS f0 FROM pmhash_stats('wp_k') \gset
COMMIT;
-- commit wrote 3 entries (48 user bytes, one 64 B line) with one fence
SELECT entries, pending_entries, user_bytes, fences - :n0 AS fences,
       flushes - :f0 AS flushes, log_lines_in_use
FROM pmhash_stats('wp_k');
SELECT id FROM wp WHERE k = 10 ORDER BY id;

-- an aborted transaction leaves no trace in the pool: no flush, no fence
SELECT flushes AS f0, fences AS n0, user_bytes AS u0 FROM pmhash_stats('wp_k') \gset
BEGIN;
INSERT INTO wp SELECT g, 1000 + g FROM generate_series(1, 10) g;
SELECT count(*) FROM wp WHERE k = 1005;
ROLLBACK;
SELECT flushes - :f0 AS flushes, fences - :n0 AS fences, user_bytes - :u0 AS user_bytes,
       entries
FROM pmhash_stats('wp_k');
SELECT count(*) FROM wp WHERE k = 1005;

-- a transaction's flushes count in its own session before it commits (the
-- counters are published at transaction end, and before a session reads
-- them): 29 of the 40 entries fill this backend's line (13 left) and the
-- next one; the other 11 wait in the collecting log until COMMIT
SELECT user_bytes AS u0 FROM pmhash_stats('wp_k') \gset
BEGIN;
INSERT INTO wp SELECT g, 2000 + g FROM generate_series(1, 40) g;
SELECT user_bytes - :u0 AS user_bytes_before_commit FROM pmhash_stats('wp_k');
COMMIT;
SELECT user_bytes - :u0 AS user_bytes FROM pmhash_stats('wp_k');

-- subtransactions: a rolled-back savepoint's entries are dropped unwritten,
-- a released one's are kept
SELECT user_bytes AS u0 FROM pmhash_stats('wp_k') \gset
BEGIN;
INSERT INTO wp VALUES (10, 77);
SAVEPOINT a;
INSERT INTO wp VALUES (11, 77), (12, 77);
SELECT id FROM wp WHERE k = 77 ORDER BY id;
ROLLBACK TO SAVEPOINT a;
SELECT id FROM wp WHERE k = 77 ORDER BY id;
SAVEPOINT b;
INSERT INTO wp VALUES (13, 77);
RELEASE SAVEPOINT b;
COMMIT;
SELECT id FROM wp WHERE k = 77 ORDER BY id;
SELECT (user_bytes - :u0) / 16 AS entries_written FROM pmhash_stats('wp_k');

-- a bulk load: lines fill mid-transaction, D-buckets fill and relocate,
-- segments split; every row is found, and the structure checks out
INSERT INTO wp SELECT g, g % 5000 FROM generate_series(1, 40000) g;
SELECT count(*) FROM wp WHERE k = 4242;
SELECT entries, segments > 1 AS split, pending_entries <= 16 * segments AS bounded,
       user_bytes >= 40000 * 16 AS counted
FROM pmhash_stats('wp_k');
SELECT * FROM pmhash_check('wp_k');

-- one commit of 20 rows: a whole line (16) flushed mid-transaction, the
-- rest at commit; the counters see 20 entries
SELECT user_bytes AS u0 FROM pmhash_stats('wp_k') \gset
INSERT INTO wp SELECT g, 7 FROM generate_series(1, 20) g;
SELECT (user_bytes - :u0) / 16 AS entries_written FROM pmhash_stats('wp_k');

-- a join that probes the index for the transaction's own unflushed rows
BEGIN;
INSERT INTO wp VALUES (-1, -5);
SELECT count(*) FROM wp a JOIN wp b ON a.k = b.k WHERE a.id = -1;
COMMIT;

-- VACUUM removes dead entries from segments and D-buckets alike
DELETE FROM wp WHERE k = 4242 OR k = 77;
VACUUM wp;
SELECT count(*) FROM wp WHERE k = 4242;
SELECT * FROM pmhash_check('wp_k');
SET enable_indexscan = off;
SET enable_seqscan = on;
SELECT count(*) AS seqscan_rows FROM wp;
RESET enable_indexscan;
SET enable_seqscan = off;
SELECT entries = (SELECT count(*) FROM wp WHERE k IS NOT NULL) AS exact
FROM pmhash_stats('wp_k');

-- media counters: cluster-wide view and reset
SELECT user_bytes > 0 AS some_user_bytes, media_bytes_written > 0 AS some_media,
       buffer_lines
FROM pmhash_media_stats();
SELECT pmhash_reset_stats();
SELECT user_bytes, media_bytes_written, flushes, fences FROM pmhash_media_stats();
SELECT user_bytes, media_bytes_written FROM pmhash_stats('wp_k');

-- privileges: counters need pg_read_all_stats, reset is not for PUBLIC
CREATE ROLE wp_nobody;
SET ROLE wp_nobody;
SELECT * FROM pmhash_media_stats();
SELECT pmhash_reset_stats();
RESET ROLE;
DROP ROLE wp_nobody;

-- two-phase commit: PREPARE makes the entries persistent and visible,
-- COMMIT PREPARED needs nothing more
BEGIN;
INSERT INTO wp VALUES (500, 5005);
PREPARE TRANSACTION 'wp_2pc';
SELECT pending_entries >= 1 AS pending FROM pmhash_stats('wp_k');
COMMIT PREPARED 'wp_2pc';
SELECT id FROM wp WHERE k = 5005;

DROP TABLE wp;

-- a build counts 16 user bytes per entry it writes, NULL keys not indexed;
-- the building session sees them before COMMIT, and the index answers as
-- a sequential scan does
CREATE TABLE wpb (id int, k int);
INSERT INTO wpb SELECT g, CASE WHEN g % 10 = 0 THEN NULL ELSE g % 7 END
FROM generate_series(1, 60) g;
BEGIN;
CREATE INDEX wpb_k ON wpb USING pmhash (k);
SELECT entries, user_bytes FROM pmhash_stats('wpb_k');
COMMIT;
SELECT entries, user_bytes FROM pmhash_stats('wpb_k');
SELECT array_agg(id ORDER BY id) AS by_index FROM wpb WHERE k = 3;
SET enable_indexscan = off;
SET enable_seqscan = on;
SELECT array_agg(id ORDER BY id) AS by_seqscan FROM wpb WHERE k = 3;
RESET enable_indexscan;
SET enable_seqscan = off;
DROP TABLE wpb;

-- INSERT ... ON CONFLICT: from the first such statement on, a transaction's
-- entries are checked against their heap tuples before they reach the
-- pool, so that a super-deleted tuple's entry never does (the isolation
-- spec upsert-superdelete races one).  Every row that upserts insert or
-- update, and plain rows after them, keeps its entry: the index finds what
-- a sequential scan finds, before and after COMMIT, and holds one entry
-- per row once VACUUM has removed the updated rows' old versions
CREATE TABLE wpu (id int PRIMARY KEY, k int);
CREATE INDEX wpu_k ON wpu USING pmhash (k);
INSERT INTO wpu SELECT g, g % 7 FROM generate_series(1, 50) g;
BEGIN;
-- ids 1 to 50 conflict and are updated (new row versions), 51 to 100 are new
INSERT INTO wpu SELECT g, g % 7 + 100 FROM generate_series(1, 100) g
ON CONFLICT (id) DO UPDATE SET k = excluded.k;
INSERT INTO wpu SELECT g, 200 FROM generate_series(91, 140) g ON CONFLICT DO NOTHING;
INSERT INTO wpu SELECT g, 201 FROM generate_series(141, 160) g;
SAVEPOINT s;
INSERT INTO wpu SELECT g, 202 FROM generate_series(161, 170) g ON CONFLICT DO NOTHING;
ROLLBACK TO SAVEPOINT s;
WITH w AS (
	INSERT INTO wpu SELECT g, 203 FROM generate_series(171, 190) g
	ON CONFLICT DO NOTHING RETURNING 1
)
SELECT count(*) AS cte_rows FROM w;
SELECT k, count(*) FROM wpu WHERE k IN (3, 103, 200, 201, 202, 203)
GROUP BY k ORDER BY k;
COMMIT;
SELECT k, count(*) FROM wpu WHERE k IN (3, 103, 200, 201, 202, 203)
GROUP BY k ORDER BY k;
-- k + 0 cannot use the index
SELECT k, count(*) FROM wpu WHERE k + 0 IN (3, 103, 200, 201, 202, 203)
GROUP BY k ORDER BY k;
VACUUM (INDEX_CLEANUP ON) wpu;
SELECT entries, (SELECT count(*) FROM wpu) AS rows FROM pmhash_stats('wpu_k');
SELECT * FROM pmhash_check('wpu_k');
DROP TABLE wpu;
