/*-------------------------------------------------------------------------
 *
 * pmhashinsert.c
 *	  Inserting entries into a pmhash index.
 *
 * aminsert appends to the transaction's collecting log (pmhashlog.c); the
 * entries reach the pool at commit or when they fill a backup-log line (at
 * once for an index that backs an exclusion constraint).
 *
 * pmhash_insert_entry puts an entry straight into its segment: CREATE INDEX
 * uses it (with persistence deferred to the end of the build).  It takes
 * the target segment's lock exclusive under the index lock; when the
 * segment has no room, it retakes the index lock exclusively and splits the
 * segment or extends its overflow chain, then retries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "utils/rel.h"

#include "pmhash.h"

/*
 * Insert (hash, tid) into an attached index (any lock mode; the index lock
 * is held in the same mode on return).
 */
void
pmhash_insert_entry(PmhashIndex *idx, uint64 hash, ItemPointer tid)
{
	LWLockMode	entry_mode = idx->mode;
	uint32		block = ItemPointerGetBlockNumber(tid);
	uint16		offset = ItemPointerGetOffsetNumber(tid);

	for (;;)
	{
		uint32		segno = pmhash_lock_hash(idx, hash, LW_EXCLUSIVE);
		PmhInsertResult r;

		r = pmh_insert_new(&idx->local->pool, &idx->cb, segno, hash, block,
						   offset);
		pmhash_unlock_segment(idx, segno);

		switch (r)
		{
			case PMH_INSERT_DONE:
				pg_atomic_fetch_add_u64(&idx->shared->entries, 1);
				/* FALLTHROUGH */
			case PMH_INSERT_EXISTS:
				if (idx->mode != entry_mode)
					pmhash_relock(idx, entry_mode);
				return;
			case PMH_INSERT_IOERROR:
				pmhash_report_io_error(idx->rel, "persist entry in");
				break;
			case PMH_INSERT_FULL:
				/* pmh_insert_new always chooses */
				elog(ERROR, "no remedy chosen for a full pmhash segment");
				break;
			case PMH_INSERT_SPLIT:
			case PMH_INSERT_OVERFLOW:
				if (idx->mode != LW_EXCLUSIVE)
				{
					/* structure changes need the whole index; look again */
					pmhash_relock(idx, LW_EXCLUSIVE);
					continue;
				}
				if (r == PMH_INSERT_SPLIT)
					pmhash_split_segment(idx, segno);
				else
					pmhash_add_overflow_segment(idx, segno);
				break;
		}
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * aminsert: NULL keys are not indexed (as in a hash index); anything else
 * becomes one entry of the transaction's collecting log, persistent by the
 * time the transaction commits or prepares.
 *
 * An index that backs an exclusion constraint is different: after the
 * insert, the executor looks for conflicting rows with a dirty snapshot,
 * which must see the uncommitted rows of concurrent inserters (one of two
 * racing inserts then waits for the other).  Other backends cannot see a
 * collecting log, so there each entry is flushed to the pool at once.
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

	if (isnull[0])
		return false;

	hash = pmhash_hash_datum(index_getprocinfo(index, 1, PMHASH_EXTENDED_PROC),
							 index->rd_indcollation[0], values[0]);

	/* most rows only join the collecting log: no need to attach */
	if (!exclusion && pmhash_log_append_unattached(index, hash, ht_ctid))
		return false;
	/* a flush is due: after INSERT ... ON CONFLICT, check what it takes */
	pmhash_log_settle_index(index, heapRel, ht_ctid);
	pmhash_attach(index, LW_SHARED, &idx);
	pmhash_log_append(&idx, hash, ht_ctid, exclusion);
	pmhash_detach(&idx);
	return false;
}
