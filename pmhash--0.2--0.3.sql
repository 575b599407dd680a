/* pmhash--0.2--0.3.sql: segments loaded lazily after a restart */

\echo Use "ALTER EXTENSION pmhash UPDATE TO '0.3'" to load this file. \quit

-- how much of an index's shared state is rebuilt since the last restart
-- (same privileges as pmhash_stats: the index owner, pg_read_all_stats)
CREATE FUNCTION pmhash_load_progress(index regclass,
	OUT segments bigint, OUT segments_loaded bigint,
	OUT log_entries_unsorted bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_load_progress'
LANGUAGE C STRICT;
