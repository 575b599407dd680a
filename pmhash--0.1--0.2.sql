/* pmhash--0.1--0.2.sql: the write path with a backup log (pool layout 2) */

\echo Use "ALTER EXTENSION pmhash UPDATE TO '0.2'" to load this file. \quit

-- Pools of layout 1 are refused by this version: REINDEX every pmhash index
-- after the update.

DROP FUNCTION pmhash_stats(regclass);

CREATE FUNCTION pmhash_stats(index regclass,
	OUT entries bigint, OUT pool_path text, OUT pool_bytes bigint,
	OUT shmem_bytes bigint, OUT load_factor float8, OUT global_depth int,
	OUT segments bigint, OUT pending_entries bigint, OUT log_lines_in_use int,
	OUT user_bytes bigint, OUT media_bytes_written bigint,
	OUT media_bytes_read bigint, OUT flushes bigint, OUT fences bigint,
	OUT lines_whole bigint, OUT lines_partial bigint,
	OUT write_amplification float8)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_stats'
LANGUAGE C STRICT;

-- persist traffic of all pmhash pools and what the media model makes of it
-- (needs pg_read_all_stats); pmhash_reset_stats() zeroes it all
CREATE FUNCTION pmhash_media_stats(
	OUT user_bytes bigint, OUT media_bytes_written bigint,
	OUT media_bytes_read bigint, OUT flushes bigint, OUT fences bigint,
	OUT lines_whole bigint, OUT lines_partial bigint,
	OUT write_amplification float8, OUT buffer_lines int,
	OUT track_reads bool, OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_media_stats'
LANGUAGE C STRICT;

CREATE FUNCTION pmhash_reset_stats()
RETURNS void
AS 'MODULE_PATHNAME', 'pmhash_reset_stats'
LANGUAGE C STRICT;

REVOKE EXECUTE ON FUNCTION pmhash_reset_stats() FROM PUBLIC;
