/* pmhash--0.5--0.6.sql: lookups without the index lock */

\echo Use "ALTER EXTENSION pmhash UPDATE TO '0.6'" to load this file. \quit

-- pmhash_stats gains the number of hashes that scans looked up, and how
-- many of them took the index lock (the rest went without: see "Lookups
-- without the index lock" in src/README.pmhash)
DROP FUNCTION pmhash_stats(regclass);
CREATE FUNCTION pmhash_stats(index regclass,
	OUT entries bigint, OUT pool_path text, OUT pool_bytes bigint,
	OUT shmem_bytes bigint, OUT load_factor float8, OUT global_depth int,
	OUT segments bigint, OUT pending_entries bigint, OUT log_lines_in_use int,
	OUT user_bytes bigint, OUT media_bytes_written bigint,
	OUT media_bytes_read bigint, OUT flushes bigint, OUT fences bigint,
	OUT lines_whole bigint, OUT lines_partial bigint,
	OUT write_amplification float8, OUT syncs bigint, OUT sync_bytes bigint,
	OUT writeback_pending bool, OUT lookups bigint, OUT lookups_locked bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_stats'
LANGUAGE C STRICT;
