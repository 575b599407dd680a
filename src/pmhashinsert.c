/*-------------------------------------------------------------------------
 *
 * pmhashinsert.c
 *	  aminsert: where an entry enters a pmhash index.
 *
 * aminsert hashes the key and appends the entry to the transaction's
 * collecting log (pmhashxact.c); the entries reach the pool at commit or
 * when they fill a backup-log line (at once for an index that backs an
 * exclusion constraint).  CREATE INDEX does not come this way: see
 * pmhashbuild.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/execnodes.h"
#include "utils/rel.h"

#include "pmhash.h"

/*
 * aminsert: a row with a NULL key column is not indexed (as in a hash
 * index; a UNIQUE NULLS NOT DISTINCT index indexes it: pmhash_hash_row);
 * anything else becomes one entry of the transaction's collecting log,
 * persistent by the time the transaction commits or prepares.
 *
 * An index that backs an exclusion constraint is different: after the
 * insert, the executor looks for conflicting rows with a dirty snapshot,
 * which must see the uncommitted rows of concurrent inserters (one of two
 * racing inserts then waits for the other).  Other backends cannot see a
 * collecting log, so there each entry is flushed to the pool at once.  A
 * unique index's entries are too, after the check (pmhashunique.c).
 *
 * The result matters only for UNIQUE_CHECK_PARTIAL: is the key known to
 * be unique?
 */
bool
pmhashinsert(Relation index, Datum *values, bool *isnull,
			 ItemPointer ht_ctid, Relation heapRel,
			 IndexUniqueCheck checkUnique, bool indexUnchanged,
			 IndexInfo *indexInfo)
{
	PmhashIndex idx;
	uint64		hash;
	bool		exclusion = indexInfo != NULL &&
		indexInfo->ii_ExclusionOps != NULL;

	if (!pmhash_hash_row(index, values, isnull, &hash))
		return checkUnique == UNIQUE_CHECK_PARTIAL;
	if (checkUnique != UNIQUE_CHECK_NO)
		return pmhash_unique_insert(index, hash, values, isnull, ht_ctid,
									heapRel, checkUnique, indexInfo);

	/* most rows only join the collecting log: no need to attach */
	if (!exclusion && pmhash_log_append_unattached(index, hash, ht_ctid))
		return false;
	/* a flush is due: after INSERT ... ON CONFLICT, check what it takes */
	pmhash_log_settle_index(index, heapRel, ht_ctid);
	pmhash_attach(index, LW_SHARED, &idx);
	idx.heap = heapRel;
	pmhash_log_append(&idx, hash, ht_ctid, exclusion);
	pmhash_detach(&idx);
	return false;
}
