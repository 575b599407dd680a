/* pmhash--0.3--0.4.sql: pools rebuilt from the heap in the background */

\echo Use "ALTER EXTENSION pmhash UPDATE TO '0.4'" to load this file. \quit

-- whether an index's pool awaits or undergoes a rebuild from its table (a
-- copy that came with a base backup, or one a standby could not keep), and
-- how far the heap scan is (same privileges as pmhash_stats: the index
-- owner, pg_read_all_stats)
CREATE FUNCTION pmhash_rebuild_progress(index regclass,
	OUT rebuilding bool, OUT blocks_total bigint, OUT blocks_done bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_rebuild_progress'
LANGUAGE C STRICT;
