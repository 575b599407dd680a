/*-------------------------------------------------------------------------
 *
 * pmhashrebuild.c
 *	  Refilling a pool from the heap, in the background, while the index
 *	  stays in use for writes.
 *
 * A pool whose contents cannot be trusted -- copied by a base backup
 * (pg_basebackup, a PITR, pg_rewind), missing on a standby, or left by a
 * redo that failed -- is replaced at load by an empty pool flagged
 * PMH_STATE_REBUILD (pmhash_load), and the storage's shared state says
 * "rebuild".  Inserts, VACUUM and redo go on into the new pool; scans
 * refuse it (pmhash_check_complete) and the planner avoids it
 * (pmhash_known_rebuilding).  The rebuild worker then scans the heap as
 * CREATE INDEX does (every tuple not dead to everybody, HOT chains by their
 * root) and stores each entry unless the pool holds it already, so that
 * racing with inserts and redo stores nothing twice.  Its own stores are
 * not persisted one by one: a crash before the end leaves the flag, and
 * the pool is started again from nothing.  At the end the pool is
 * persisted whole, then flagged stale (an entry the scan stored after
 * VACUUM or redo removed it is stale, as after a crash) instead of
 * "rebuild", and the index serves scans again -- once no snapshot older
 * than the scan's is left, since such a snapshot may need versions that a
 * broken HOT chain kept out of the pool.
 *
 * It runs on a primary and on a hot standby alike: it reads the heap under
 * AccessShareLock and writes only the pool, which is this server's own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "pmhash.h"

/* entries the heap scan hands over per lock acquisition */
#define PMHASH_REBUILD_BATCH	32

typedef struct PmhashRebuildState
{
	PmhashIndex idx;
	FmgrInfo   *proc;
	Oid			collation;
	uint64		hashes[PMHASH_REBUILD_BATCH];
	ItemPointerData tids[PMHASH_REBUILD_BATCH];
	int			nwaiting;
	double		stored;
} PmhashRebuildState;

/* store the waiting entries, unless the pool has them already */
static void
pmhash_rebuild_flush(PmhashRebuildState *rs)
{
	int			i;

	if (rs->nwaiting == 0)
		return;
	pmhash_attach(rs->idx.rel, LW_SHARED, &rs->idx);
	for (i = 0; i < rs->nwaiting; i++)
		if (pmhash_insert_entry_checked(&rs->idx, rs->hashes[i], &rs->tids[i],
										true))
			rs->stored++;
	rs->idx.shared->rebuild_blocks_done =
		ItemPointerGetBlockNumber(&rs->tids[rs->nwaiting - 1]) + 1;
	pmhash_detach(&rs->idx);
	rs->nwaiting = 0;
}

/* heap scan callback: one entry per non-NULL key */
static void
pmhash_rebuild_callback(Relation index, ItemPointer tid, Datum *values,
						bool *isnull, bool tupleIsAlive, void *state)
{
	PmhashRebuildState *rs = (PmhashRebuildState *) state;

	if (isnull[0])
		return;
	rs->hashes[rs->nwaiting] = pmhash_hash_datum(rs->proc, rs->collation,
												 values[0]);
	rs->tids[rs->nwaiting] = *tid;
	if (++rs->nwaiting == PMHASH_REBUILD_BATCH)
		pmhash_rebuild_flush(rs);
}

/* give the claim back when the rebuild fails (it is tried again later) */
static void
pmhash_rebuild_unclaim(PmhashShared *shared, uint64 generation)
{
	LWLockAcquire(&shared->lock, LW_EXCLUSIVE);
	if (shared->generation == generation && shared->rebuild_pid == MyProcPid)
		shared->rebuild_pid = 0;
	LWLockRelease(&shared->lock);
}

/*
 * Rebuild the pool of an index that awaits it, in the caller's transaction
 * (which holds AccessShareLock on the index).  Returns false if there was
 * nothing to do (no rebuild due, or another worker has it).
 */
bool
pmhash_rebuild_index(Relation index)
{
	PmhashRebuildState rs;
	Relation	heap;
	IndexInfo  *indexInfo;
	PmhashShared *shared;
	uint64		generation;
	TransactionId limit_xmin;

	memset(&rs, 0, sizeof(rs));
	pmhash_attach(index, LW_EXCLUSIVE, &rs.idx);
	shared = rs.idx.shared;
	/* a worker that died (FATAL) without giving its claim back */
	if (shared->rebuild_pid != 0 && shared->rebuild_pid != MyProcPid &&
		kill(shared->rebuild_pid, 0) != 0 && errno == ESRCH)
		shared->rebuild_pid = 0;
	if (!shared->rebuild || shared->rebuild_pid != 0)
	{
		pmhash_detach(&rs.idx);
		return false;
	}
	shared->rebuild_pid = MyProcPid;
	generation = shared->generation;
	pmhash_detach(&rs.idx);

	PG_TRY();
	{
		heap = table_open(index->rd_index->indrelid, AccessShareLock);
		indexInfo = BuildIndexInfo(index);
		rs.proc = index_getprocinfo(index, 1, PMHASH_EXTENDED_PROC);
		rs.collation = index->rd_indcollation[0];
		shared->rebuild_blocks_total = RelationGetNumberOfBlocks(heap);
		shared->rebuild_blocks_done = 0;
		limit_xmin = GetActiveSnapshot()->xmin;

		pgstat_progress_start_command(PROGRESS_COMMAND_CREATE_INDEX,
									  RelationGetRelid(heap));
		pgstat_progress_update_param(PROGRESS_CREATEIDX_COMMAND,
									 PROGRESS_CREATEIDX_COMMAND_REINDEX);
		pgstat_progress_update_param(PROGRESS_CREATEIDX_INDEX_OID,
									 RelationGetRelid(index));
		pgstat_progress_update_param(PROGRESS_CREATEIDX_PHASE,
									 PROGRESS_CREATEIDX_PHASE_BUILD);

		/*
		 * The scan warns of every tuple a running transaction inserts or
		 * deletes ("concurrent insert in progress"): expected here, where
		 * the table is not locked against writers.
		 */
		(void) set_config_option("log_min_messages", "error", PGC_SUSET,
								 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0,
								 false);

		/* our own stores are persisted once, at the end */
		pmhash_attach(index, LW_SHARED, &rs.idx);
		rs.idx.local->pool.no_persist = 1;
		pmhash_detach(&rs.idx);

		(void) table_index_build_scan(heap, index, indexInfo, false, true,
									  pmhash_rebuild_callback, &rs, NULL);
		pmhash_rebuild_flush(&rs);

		/* snapshots from before the scan may need what it left out */
		WaitForOlderSnapshots(limit_xmin, false);

		pmhash_attach(index, LW_EXCLUSIVE, &rs.idx);
		if (shared->generation == generation && shared->rebuild_pid == MyProcPid)
		{
			PmhPool    *pool = &rs.idx.local->pool;

			pool->no_persist = 0;
			if (pmh_persist(pool, pool->base + PMH_SEG_OFFSET,
							pool->mapped_len - PMH_SEG_OFFSET) != 0 ||
				pmh_pool_state_set(pool, PMH_STATE_STALE, PMH_STATE_REBUILD) != 0)
				pmhash_report_io_error(index, "persist");
			shared->stale = true;
			pmhash_set_rebuild(shared, false);
		}
		rs.idx.local->pool.no_persist = 0;
		pmhash_detach(&rs.idx);
		pgstat_progress_end_command();
		table_close(heap, AccessShareLock);
	}
	PG_CATCH();
	{
		pmhash_rebuild_unclaim(shared, generation);
		PG_RE_THROW();
	}
	PG_END_TRY();

	ereport(LOG,
			(errmsg("pmhash index \"%s\": pool rebuilt from the table, %.0f entries stored",
					RelationGetRelationName(index), rs.stored)));
	return true;
}

/*
 * pmhash_rebuild_progress(index): whether the index's pool awaits or
 * undergoes a rebuild, and how far the heap scan is.  Loads the index if
 * it is not loaded yet (which is what finds a copied pool out).
 */
PG_FUNCTION_INFO_V1(pmhash_rebuild_progress);
Datum
pmhash_rebuild_progress(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Relation	rel;
	PmhashIndex idx;
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	bool		rebuilding;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rel = pmhash_open_index(relid, GetUserId());
	pmhash_attach(rel, LW_SHARED, &idx);
	rebuilding = idx.shared->rebuild;
	values[0] = BoolGetDatum(rebuilding);
	values[1] = Int64GetDatum(rebuilding ?
							  (int64) idx.shared->rebuild_blocks_total : 0);
	values[2] = Int64GetDatum(rebuilding ?
							  (int64) idx.shared->rebuild_blocks_done : 0);
	pmhash_detach(&idx);
	relation_close(rel, AccessShareLock);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
