/* pmhash--0.4--0.5.sql: deferred write-back of pools on ordinary files */

\echo Use "ALTER EXTENSION pmhash UPDATE TO '0.5'" to load this file. \quit

-- pmhash_stats and pmhash_media_stats gain the pool syncs (msync and
-- fdatasync calls, and the bytes they covered); pmhash_stats also says
-- whether the pool has writes the kernel has not written back yet
DROP FUNCTION pmhash_stats(regclass);
CREATE FUNCTION pmhash_stats(index regclass,
	OUT entries bigint, OUT pool_path text, OUT pool_bytes bigint,
	OUT shmem_bytes bigint, OUT load_factor float8, OUT global_depth int,
	OUT segments bigint, OUT pending_entries bigint, OUT log_lines_in_use int,
	OUT user_bytes bigint, OUT media_bytes_written bigint,
	OUT media_bytes_read bigint, OUT flushes bigint, OUT fences bigint,
	OUT lines_whole bigint, OUT lines_partial bigint,
	OUT write_amplification float8, OUT syncs bigint, OUT sync_bytes bigint,
	OUT writeback_pending bool)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_stats'
LANGUAGE C STRICT;

DROP FUNCTION pmhash_media_stats();
CREATE FUNCTION pmhash_media_stats(
	OUT user_bytes bigint, OUT media_bytes_written bigint,
	OUT media_bytes_read bigint, OUT flushes bigint, OUT fences bigint,
	OUT lines_whole bigint, OUT lines_partial bigint,
	OUT write_amplification float8, OUT buffer_lines int,
	OUT track_reads bool, OUT stats_reset timestamptz,
	OUT syncs bigint, OUT sync_bytes bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_media_stats'
LANGUAGE C STRICT;

-- write back every pool with deferred writes now and clear its write-back
-- mark, as the background pass does for idle pools; returns how many
-- (superusers and members of pg_checkpoint)
CREATE FUNCTION pmhash_writeback()
RETURNS int
AS 'MODULE_PATHNAME', 'pmhash_writeback'
LANGUAGE C STRICT;
