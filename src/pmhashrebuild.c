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
 * root; tuples of running transactions without waiting for them), a chunk
 * of blocks per transaction, and stores each entry unless the pool holds
 * it already, so that racing with inserts and redo stores nothing twice.
 * It is correct because the pool was replaced (loaded) before the scan
 * began: whatever changed the heap before that is in the heap the scan
 * reads, whatever after goes into the new pool too.  Its own stores are
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
#include "access/transam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "pmhash.h"

/* entries the heap scan hands over per lock acquisition */
#define PMHASH_REBUILD_BATCH	32

/* heap blocks scanned per transaction (32 MB) */
#define PMHASH_REBUILD_CHUNK	4096

/* the fourth key of the rebuild's advisory lock ("MM"; 1 and 2 are SQL's) */
#define PMHASH_REBUILD_LOCK_KEY	0x4D4D

typedef struct PmhashRebuildState
{
	PmhashIndex idx;
	PmhashShared *shared;		/* claimed: the storage's state */
	PmhashLocal *local;
	uint64		generation;
	Oid			heapoid;
	TransactionId limit_xid;
	uint64		hashes[PMHASH_REBUILD_BATCH];
	ItemPointerData tids[PMHASH_REBUILD_BATCH];
	int			nwaiting;
	double		stored;
} PmhashRebuildState;

/* store the waiting entries, unless the pool has them already */
static void
pmhash_rebuild_flush(PmhashRebuildState *rs)
{
	BlockNumber done;
	int			i;

	if (rs->nwaiting == 0)
		return;
	pmhash_attach(rs->idx.rel, LW_SHARED, &rs->idx);
	for (i = 0; i < rs->nwaiting; i++)
		if (pmhash_insert_entry_checked(&rs->idx, rs->hashes[i], &rs->tids[i],
										true))
			rs->stored++;
	done = ItemPointerGetBlockNumber(&rs->tids[rs->nwaiting - 1]) + 1;
	rs->idx.shared->rebuild_blocks_done = done;
	pmhash_detach(&rs->idx);
	pgstat_progress_update_param(PROGRESS_SCAN_BLOCKS_DONE, done);
	rs->nwaiting = 0;
}

/* heap scan callback: one entry per indexed row (pmhash_hash_row) */
static void
pmhash_rebuild_callback(Relation index, ItemPointer tid, Datum *values,
						bool *isnull, bool tupleIsAlive, void *state)
{
	PmhashRebuildState *rs = (PmhashRebuildState *) state;

	if (!pmhash_hash_row(index, values, isnull, &rs->hashes[rs->nwaiting]))
		return;
	rs->tids[rs->nwaiting] = *tid;
	if (++rs->nwaiting == PMHASH_REBUILD_BATCH)
		pmhash_rebuild_flush(rs);
}

/*
 * Is the rebuild of this storage still ours (index lock held)?  A DROP, a
 * REINDEX or redo of a failure replaced the state, or somebody took over.
 */
static bool
pmhash_rebuild_mine(PmhashShared *shared, uint64 generation)
{
	return shared->generation == generation && shared->rebuild &&
		shared->rebuild_pid == MyProcPid;
}

/*
 * Claim the rebuild of the index's pool, in a transaction of its own.
 * Returns false if there is nothing to do: the index is gone, no rebuild
 * is due, or another live worker has it.
 */
static bool
pmhash_rebuild_claim(Oid indexoid, PmhashRebuildState *rs)
{
	Relation	index;
	Relation	heap;
	PmhashShared *shared;
	bool		claimed = false;

	StartTransactionCommand();
	index = try_relation_open(indexoid, AccessShareLock);
	if (index == NULL)
	{
		CommitTransactionCommand();
		return false;
	}
	pmhash_attach(index, LW_EXCLUSIVE, &rs->idx);
	shared = rs->idx.shared;
	/* a worker that died (FATAL) without giving its claim back */
	if (shared->rebuild_pid != 0 && shared->rebuild_pid != MyProcPid &&
		kill(shared->rebuild_pid, 0) != 0 && errno == ESRCH)
		shared->rebuild_pid = 0;
	if (shared->rebuild && shared->rebuild_pid == 0)
	{
		shared->rebuild_pid = MyProcPid;
		rs->shared = shared;
		rs->local = rs->idx.local;
		rs->generation = shared->generation;
		claimed = true;
	}
	pmhash_detach(&rs->idx);
	if (claimed)
	{
		heap = table_open(index->rd_index->indrelid, AccessShareLock);
		rs->heapoid = RelationGetRelid(heap);
		/* every snapshot older than the scan has an xmin below this */
		rs->limit_xid = ReadNextTransactionId();
		shared->rebuild_blocks_total = RelationGetNumberOfBlocks(heap);
		shared->rebuild_blocks_done = 0;
		table_close(heap, AccessShareLock);
	}
	relation_close(index, AccessShareLock);
	CommitTransactionCommand();
	return claimed;
}

/*
 * Scan heap blocks start .. start + PMHASH_REBUILD_CHUNK - 1 into the pool,
 * in a transaction of its own (so that a hot standby's replay conflicts
 * with one chunk's snapshot at most).  Returns false when there is nothing
 * left to scan, or the rebuild is no longer ours.
 */
static bool
pmhash_rebuild_chunk(Oid indexoid, PmhashRebuildState *rs, BlockNumber start)
{
	Relation	index;
	Relation	heap;
	IndexInfo  *indexInfo;
	BlockNumber nblocks;
	bool		more = false;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	index = try_relation_open(indexoid, AccessShareLock);
	if (index != NULL)
	{
		heap = table_open(index->rd_index->indrelid, AccessShareLock);
		nblocks = RelationGetNumberOfBlocks(heap);
		pmhash_attach(index, LW_SHARED, &rs->idx);
		more = pmhash_rebuild_mine(rs->idx.shared, rs->generation) &&
			start < nblocks;
		/* our own stores are persisted once, at the end */
		if (more)
			rs->idx.local->pool.no_persist = 1;
		pmhash_detach(&rs->idx);
		if (more)
		{
			indexInfo = BuildIndexInfo(index);
			/* the rows were checked when they came: never wait for one */
			indexInfo->ii_Unique = false;
			rs->idx.shared->rebuild_blocks_total = nblocks;
			pgstat_progress_update_param(PROGRESS_SCAN_BLOCKS_TOTAL, nblocks);

			/*
			 * anyvisible: index tuples that running transactions insert or
			 * delete without waiting for them (a standby would wait for
			 * their replay while it holds a buffer pin replay may need);
			 * entries too many are dead entries, as after a crash.
			 */
			(void) table_index_build_range_scan(heap, index, indexInfo, false,
												true, false, start,
												Min(PMHASH_REBUILD_CHUNK,
													nblocks - start),
												pmhash_rebuild_callback, rs,
												NULL);
			pmhash_rebuild_flush(rs);
		}
		table_close(heap, AccessShareLock);
		relation_close(index, AccessShareLock);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	return more;
}

/*
 * Finish a rebuild whose scan is done: wait for the snapshots older than
 * the scan, persist the pool whole, flag it stale instead of "rebuild",
 * and let scans use it.
 */
static void
pmhash_rebuild_finish(Oid indexoid, PmhashRebuildState *rs)
{
	Relation	index;

	StartTransactionCommand();
	/* they may need versions a broken HOT chain kept out of the pool */
	WaitForOlderSnapshots(rs->limit_xid, false);
	index = try_relation_open(indexoid, AccessShareLock);
	if (index != NULL)
	{
		pmhash_attach(index, LW_EXCLUSIVE, &rs->idx);
		if (pmhash_rebuild_mine(rs->idx.shared, rs->generation))
		{
			PmhPool    *pool = &rs->idx.local->pool;

			pool->no_persist = 0;
			if (pmh_persist(pool, pool->base + PMH_SEG_OFFSET,
							pool->mapped_len - PMH_SEG_OFFSET) != 0 ||
				pmh_pool_state_set(pool, PMH_STATE_STALE, PMH_STATE_REBUILD) != 0)
				pmhash_report_io_error(index, "persist");
			rs->idx.shared->stale = true;
			pmhash_set_rebuild(rs->idx.shared, false);
			ereport(LOG,
					(errmsg("pmhash index \"%s\": pool rebuilt from the table, %.0f entries stored",
							RelationGetRelationName(index), rs->stored)));
		}
		rs->idx.local->pool.no_persist = 0;
		pmhash_detach(&rs->idx);
		relation_close(index, AccessShareLock);
	}
	CommitTransactionCommand();
}

/*
 * After an ERROR (the caller aborts the transaction): let go of the pmhash
 * locks, persist our stores again, and give the claim back, so that the
 * launcher tries again later.
 */
static void
pmhash_rebuild_unclaim(PmhashRebuildState *rs)
{
	LWLockReleaseAll();
	if (rs->shared == NULL)
		return;
	rs->local->pool.no_persist = 0;
	pmhash_index_lock(rs->shared, LW_EXCLUSIVE);
	if (rs->shared->generation == rs->generation &&
		rs->shared->rebuild_pid == MyProcPid)
		rs->shared->rebuild_pid = 0;
	pmhash_index_unlock(rs->shared);
}

/*
 * The heavyweight lock that the worker rebuilding an index's pool holds,
 * for its session, from before its claim to the end of its heap scan: an
 * advisory lock of the index's database, keyed by the index's OID and
 * PMHASH_REBUILD_LOCK_KEY (pg_locks shows it as advisory, objsubid 19789).
 * A unique insert that must wait for the rebuild waits for this lock
 * (pmhash_wait_rebuilt), so that the deadlock detector sees the wait.
 */
void
pmhash_rebuild_locktag(LOCKTAG *tag, Oid indexoid)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, indexoid, 0,
						 PMHASH_REBUILD_LOCK_KEY);
}

/*
 * Rebuild the pool of an index that awaits it (outside a transaction:
 * it runs its own).  Returns false if there was nothing to do.  An ERROR
 * gives the claim and the rebuild lock back before it propagates; the
 * caller aborts.
 */
bool
pmhash_rebuild(Oid indexoid)
{
	PmhashRebuildState rs;
	BlockNumber start = 0;
	LOCKTAG		tag;
	bool		locked = true;

	memset(&rs, 0, sizeof(rs));
	/* taken before the claim: whoever sees the claim finds the lock held */
	pmhash_rebuild_locktag(&tag, indexoid);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	if (!pmhash_rebuild_claim(indexoid, &rs))
	{
		LockRelease(&tag, ExclusiveLock, true);
		return false;
	}
	pgstat_progress_start_command(PROGRESS_COMMAND_CREATE_INDEX, rs.heapoid);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_COMMAND,
								 PROGRESS_CREATEIDX_COMMAND_REINDEX);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_INDEX_OID, indexoid);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_PHASE,
								 PROGRESS_CREATEIDX_PHASE_BUILD);
	PG_TRY();
	{
		while (pmhash_rebuild_chunk(indexoid, &rs, start))
			start += PMHASH_REBUILD_CHUNK;

		/*
		 * Every row has its entry now: unique and exclusion checks may go
		 * on, while the rebuild waits for older snapshots (which such a
		 * check's own statement may hold)
		 */
		pmhash_index_lock(rs.shared, LW_EXCLUSIVE);
		if (rs.shared->generation == rs.generation &&
			rs.shared->rebuild_pid == MyProcPid)
			rs.shared->rebuild_scanned = true;
		pmhash_index_unlock(rs.shared);
		locked = false;
		LockRelease(&tag, ExclusiveLock, true);
		pmhash_rebuild_finish(indexoid, &rs);
	}
	PG_CATCH();
	{
		pmhash_rebuild_unclaim(&rs);
		if (locked)
			LockRelease(&tag, ExclusiveLock, true);
		pgstat_progress_end_command();
		PG_RE_THROW();
	}
	PG_END_TRY();
	pgstat_progress_end_command();
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
