/*-------------------------------------------------------------------------
 *
 * pmhashxact.c
 *	  Collecting logs: the first layer of pmhash's write path, in backend
 *	  memory, scoped to the transaction.
 *
 * aminsert (pmhashinsert.c) appends (hash, TID) to this backend's
 * collecting log of the index.  When the entries would complete the
 * backup-log line this backend appends to, and at PRE_COMMIT /
 * PRE_PREPARE, they are written to the backup log and placed into the
 * D-buckets (pmhashblog.c).  An aborted (sub)transaction's entries that
 * are still here are simply dropped; so are those of an index whose
 * storage was replaced.  Entries of a transaction that ran INSERT ... ON
 * CONFLICT are checked against their heap tuples before they leave.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

/* one entry waiting in a collecting log */
typedef struct PmhashXactEntry
{
	uint64		hash;
	ItemPointerData tid;
	SubTransactionId subid;
	CommandId	cid;			/* the command current at the append */
	bool		unsettled;		/* appended while upserts ran: see below */
} PmhashXactEntry;

/*
 * The collecting log of one index storage in the current transaction, and
 * its flushed entries that wait for the WAL (for an index that needs WAL):
 * a standby needs them before the commit record, not at each flush, so
 * they go into the WAL PMHASH_XLOG_BATCH at a time, and at PRE_COMMIT and
 * PRE_PREPARE (pmhash_log_wal_all).  An aborted transaction's never do,
 * nor an aborted subtransaction's: they are dead entries, which VACUUM
 * removes on the primary, and a standby never had.  They must not reach
 * the WAL after the DELETE of such a VACUUM, which can come as soon as
 * they are dead; so, too, a transaction that ran INSERT ... ON CONFLICT
 * (whose speculative tuples die at once when super-deleted) logs its
 * entries at every flush.
 */
typedef struct PmhashXactLog
{
	PmhashKey	key;
	Oid			indexoid;
	int			n;
	PmhashXactEntry e[PMH_BUCKET_SLOTS];
	uint64		wal_pool_id;	/* the pool the waiting entries went to */
	int			nwal;
	uint64		wal_hashes[PMHASH_XLOG_BATCH];
	ItemPointerData wal_tids[PMHASH_XLOG_BATCH];
	SubTransactionId wal_subids[PMHASH_XLOG_BATCH];
} PmhashXactLog;

static HTAB *pmhash_xact_logs = NULL;
static int	pmhash_xact_unflushed = 0;	/* entries in all collecting logs */
static int	pmhash_xact_unlogged = 0;	/* flushed entries waiting for WAL */

/*
 * Has this transaction run INSERT ... ON CONFLICT?  Such an insert can
 * super-delete its heap tuple after the index entries are made (a
 * concurrent insert of the same key won the race after the precheck);
 * the tuple is then dead to everyone, and VACUUM can free its slot while
 * the entry still waits in the collecting log, out of its sight.  So from
 * the first such statement to the end of the transaction, entries are
 * marked unsettled, and before a flush takes them to the pool each is
 * checked against its heap tuple (pmhash_log_settle).
 */
static bool pmhash_xact_upserts = false;

/*
 * The collecting log found last: a statement inserting many rows appends
 * to the same one again and again.  Entries of pmhash_xact_logs stay where
 * they are until transaction end removes them all, which clears this.
 */
static PmhashXactLog *pmhash_xact_last = NULL;

/* put a log's flushed entries that wait for the WAL into it */
static void
pmhash_log_wal(PmhashXactLog *xl)
{
	if (xl->nwal == 0)
		return;
	pmhash_xlog_insert_key(&xl->key, xl->wal_pool_id, xl->wal_hashes,
						   xl->wal_tids, xl->nwal);
	pmhash_xact_unlogged -= xl->nwal;
	xl->nwal = 0;
}

/*
 * Write a collecting log to the backup log (one persist, one fence), then
 * make its entries visible in the D-buckets (pmhashblog.c).  Once written
 * they are out of the collecting log.  An error while placing them puts
 * those not placed back, to be flushed again: a savepoint may catch the
 * error, and the rows of the transaction around it, which lives on, must
 * be found (the subtransaction's abort drops its own entries from the log
 * as usual).  Their first copies in the backup log were released; a crash
 * would bring them back as the same (hash, TID), which placing twice
 * stores once.
 */
static void
pmhash_log_flush(PmhashIndex *idx, PmhashXactLog *xl)
{
	PmhEntry	entries[PMH_BUCKET_SLOTS];
	uint32		line;
	int			first;
	int			n = xl->n;
	int			i;
	int			wal_end = -1;	/* xl->nwal after this flush's entries, if
								 * they wait for the WAL there */
	volatile int placed = 0;

	if (n == 0)
		return;
	for (i = 0; i < n; i++)
	{
		entries[i].hash = xl->e[i].hash;
		entries[i].tag = pmh_tag_make(xl->e[i].hash,
									  ItemPointerGetBlockNumber(&xl->e[i].tid),
									  ItemPointerGetOffsetNumber(&xl->e[i].tid));
	}
	pmhash_log_write(idx, entries, n, &line, &first);
	/* (listed only once written: a failed write leaves them in the log) */
	if (pmhash_xlog_wanted(idx->rel))
	{
		/* a standby needs the entries before the commit record too */
		if (xl->nwal > 0 && (xl->nwal + n > PMHASH_XLOG_BATCH ||
							 xl->wal_pool_id != idx->shared->pool_id))
			pmhash_log_wal(xl);
		xl->wal_pool_id = idx->shared->pool_id;
		for (i = 0; i < n; i++)
		{
			xl->wal_hashes[xl->nwal] = xl->e[i].hash;
			xl->wal_tids[xl->nwal] = xl->e[i].tid;
			xl->wal_subids[xl->nwal++] = xl->e[i].subid;
		}
		pmhash_xact_unlogged += n;
		if (pmhash_xact_upserts)
			pmhash_log_wal(xl);
		else
			wal_end = xl->nwal;
	}
	pmhash_xact_unflushed -= n;
	xl->n = 0;
	PG_TRY();
	{
		pmhash_log_place_written(idx, entries, n, line, first,
								 unvolatize(int *, &placed));
	}
	PG_CATCH();
	{
		int			left = n - placed;

		memmove(&xl->e[0], &xl->e[placed], sizeof(PmhashXactEntry) * left);
		xl->n = left;
		pmhash_xact_unflushed += left;
		/* the next flush lists them for the WAL again */
		if (wal_end >= 0 && xl->nwal == wal_end)
		{
			xl->nwal -= left;
			pmhash_xact_unlogged -= left;
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* the collecting log of an index storage, created on first use */
static PmhashXactLog *
pmhash_xact_log(const PmhashKey *key, Oid indexoid, bool create)
{
	PmhashXactLog *xl;
	bool		found;

	if (pmhash_xact_last != NULL &&
		memcmp(&pmhash_xact_last->key, key, sizeof(PmhashKey)) == 0)
		return pmhash_xact_last;
	if (pmhash_xact_logs == NULL)
	{
		HASHCTL		info;

		if (!create)
			return NULL;
		memset(&info, 0, sizeof(info));
		info.keysize = sizeof(PmhashKey);
		info.entrysize = sizeof(PmhashXactLog);
		info.hcxt = TopMemoryContext;
		pmhash_xact_logs = hash_create("pmhash collecting logs", 16, &info,
									   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	xl = hash_search(pmhash_xact_logs, key, create ? HASH_ENTER : HASH_FIND,
					 &found);
	if (create && !found)
	{
		xl->indexoid = indexoid;
		xl->n = 0;
		xl->nwal = 0;
	}
	if (xl != NULL)
		pmhash_xact_last = xl;
	return xl;
}

/* add (hash, tid) of the current subtransaction to a collecting log */
static void
pmhash_xact_log_add(PmhashXactLog *xl, uint64 hash, ItemPointer tid)
{
	PmhashXactEntry *e = &xl->e[xl->n++];

	e->hash = hash;
	e->tid = *tid;
	e->subid = GetCurrentSubTransactionId();
	e->cid = GetCurrentCommandId(false);
	e->unsettled = pmhash_xact_upserts;
	pmhash_xact_unflushed++;
}

/*
 * aminsert's work: append (hash, tid) to this transaction's collecting log
 * of the index, and flush the log when it would complete this backend's
 * backup-log line, or at once if flush_now (the entry must be visible to
 * other backends' scans before aminsert returns).
 */
void
pmhash_log_append(PmhashIndex *idx, uint64 hash, ItemPointer tid,
				  bool flush_now)
{
	PmhashXactLog *xl = pmhash_xact_log(&idx->shared->key,
										RelationGetRelid(idx->rel), true);

	/* (a failed flush can leave the log full: see pmhash_log_flush) */
	if (xl->n == PMH_BUCKET_SLOTS)
		pmhash_log_flush(idx, xl);
	pmhash_xact_log_add(xl, hash, tid);
	if (flush_now || xl->n >= pmhash_log_room(idx->shared, idx->local))
		pmhash_log_flush(idx, xl);
}

/* INSERT ... ON CONFLICT runs in this transaction: entries need settling */
void
pmhash_log_note_upsert(void)
{
	pmhash_xact_upserts = true;
}

/*
 * Is the heap tuple at e->tid the one this transaction inserted when it
 * appended e?  Not if the slot is past the end, unused, dead or
 * redirected, or holds a heap-only tuple (no index entry points at one), a
 * tuple of another transaction (VACUUM freed the slot and someone reused
 * it), one whose xmin was cleared (a super-deleted speculative insertion),
 * or one that a later command of this transaction put into the freed slot
 * (its cmin is past the command of the append).
 */
static bool
pmhash_heap_tuple_is_entrys(Relation heap, BlockNumber *nblocks,
							const PmhashXactEntry *e)
{
	BlockNumber blk = ItemPointerGetBlockNumber(&e->tid);
	OffsetNumber off = ItemPointerGetOffsetNumber(&e->tid);
	Buffer		buf;
	Page		page;
	ItemId		lp;
	HeapTupleHeader htup;
	bool		ours = false;

	if (!pmhash_heap_has_block(heap, nblocks, blk))
		return false;
	buf = ReadBuffer(heap, blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (off < FirstOffsetNumber || off > PageGetMaxOffsetNumber(page))
		goto done;
	lp = PageGetItemId(page, off);
	if (!ItemIdIsNormal(lp))
		goto done;
	htup = (HeapTupleHeader) PageGetItem(page, lp);
	/* raw: a tuple that COPY FREEZE wrote still shows our xid */
	if (HeapTupleHeaderIsHeapOnly(htup) ||
		!TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(htup)))
		goto done;
	/* (the command id of a frozen tuple is not worth resolving) */
	ours = HeapTupleHeaderXminFrozen(htup) ||
		HeapTupleHeaderGetCmin(htup) <= e->cid;
done:
	UnlockReleaseBuffer(buf);
	return ours;
}

/*
 * Check a collecting log's unsettled entries against their heap tuples and
 * drop those whose tuple is not this transaction's (any more): the entry
 * of a super-deleted tuple must not reach the pool, where it would point
 * at a slot that VACUUM never saw it for, or double the entry of the row
 * that reuses the slot.  Reuse by this transaction shows as another entry
 * in the same log with the same TID, as newtid (the row aminsert is
 * inserting; NULL elsewhere), or as a later command id.  An entry whose
 * tuple is still a speculative insertion being decided is kept (only a
 * flush in the middle of a row meets one, and it takes the entry to the
 * pool before the super-deletion, where VACUUM finds it).  It reads heap
 * buffers, so the caller holds no pmhash lock, and it decides for every
 * entry before it changes the log, so that an error (a cancel while it
 * waits for a read) leaves the log as it was.  Only heap tables make
 * speculative insertions this way; other table access methods' entries
 * are taken as they are.
 */
static void
pmhash_log_settle(PmhashXactLog *xl, Relation heap, ItemPointer newtid)
{
	BlockNumber nblocks = pmhash_heap_length_hint(heap);
	bool		is_heap = heap->rd_tableam == GetHeapamTableAmRoutine();
	bool		keep[PMH_BUCKET_SLOTS];
	int			nkept = 0;
	int			i;

	for (i = 0; i < xl->n; i++)
	{
		PmhashXactEntry *e = &xl->e[i];
		bool		reused;
		int			j;

		keep[i] = true;
		if (!e->unsettled || !is_heap)
			continue;
		reused = newtid != NULL && ItemPointerEquals(newtid, &e->tid);
		for (j = i + 1; j < xl->n && !reused; j++)
			reused = ItemPointerEquals(&xl->e[j].tid, &e->tid);
		keep[i] = !reused && pmhash_heap_tuple_is_entrys(heap, &nblocks, e);
	}

	/* nothing from here on can fail */
	for (i = 0; i < xl->n; i++)
	{
		if (!keep[i])
			continue;
		xl->e[nkept] = xl->e[i];
		xl->e[nkept].unsettled = false;
		nkept++;
	}
	pmhash_xact_unflushed -= xl->n - nkept;
	xl->n = nkept;
}

/*
 * aminsert, before it attaches to flush: settle the index's collecting log
 * if this transaction has run INSERT ... ON CONFLICT.  newtid is the row
 * being inserted, whose entry is not in the log yet.
 */
void
pmhash_log_settle_index(Relation index, Relation heap, ItemPointer newtid)
{
	PmhashKey	key;
	PmhashXactLog *xl;

	if (!pmhash_xact_upserts || pmhash_xact_unflushed == 0)
		return;
	pmhash_key_for_rel(index, &key);
	xl = pmhash_xact_log(&key, InvalidOid, false);
	if (xl != NULL)
		pmhash_log_settle(xl, heap, newtid);
}

/*
 * aminsert's work when no flush is due, without attaching to the index
 * (no index lock, no check of the mapping): the collecting log is this
 * backend's memory.  Returns false, having done nothing, when this
 * backend has not attached to the index's storage before or when the
 * entry would call for a flush; the caller then attaches and calls
 * pmhash_log_append.
 */
bool
pmhash_log_append_unattached(Relation index, uint64 hash, ItemPointer tid)
{
	PmhashShared *shared;
	PmhashLocal *local;
	PmhashXactLog *xl;

	if (!pmhash_attached_before(index, &shared, &local))
		return false;

	/*
	 * Only while the index is loaded and mapped here, as the last attach
	 * left it: a load that failed (a damaged pool, no memory) must fail
	 * every insert again, not let rows gather until the flush.  Read
	 * without the lock, these can only send the row to the attach.
	 */
	if (!pmhash_ready_here(shared, local) || shared->unusable)
		return false;
	xl = pmhash_xact_log(&shared->key, RelationGetRelid(index), true);
	if (xl->n + 1 >= pmhash_log_room(shared, local))
		return false;
	pmhash_xact_log_add(xl, hash, tid);
	return true;
}

/*
 * A storage is being built from its heap again: what this transaction
 * collected for its earlier contents must not reach the new pool.  (A
 * TRUNCATE of a table created in the same transaction rebuilds its
 * indexes in place, under the same relfilenode, so the key is the same.)
 */
void
pmhash_log_forget_storage(const PmhashKey *key)
{
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0 && pmhash_xact_unlogged == 0)
		return;
	xl = pmhash_xact_log(key, InvalidOid, false);
	if (xl == NULL)
		return;
	pmhash_xact_unflushed -= xl->n;
	xl->n = 0;
	/* the storage's earlier pool is gone: so is what a standby needed */
	pmhash_xact_unlogged -= xl->nwal;
	xl->nwal = 0;
}

/* are there entries in collecting logs? */
bool
pmhash_log_have_unflushed(void)
{
	return pmhash_xact_unflushed > 0;
}

/*
 * Flush every collecting log of this transaction: at PRE_COMMIT and
 * PRE_PREPARE (so the entries are persistent before the commit record),
 * before a parallel query (workers cannot see this backend's memory), and
 * before utility statements (which may copy a pool).  Logs of indexes
 * that were dropped, or whose storage was replaced, in this transaction
 * are dropped: nothing can ever find those entries.
 */
void
pmhash_log_flush_all(bool for_parallel)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0 || pmhash_xact_logs == NULL)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
	{
		Relation	rel;
		PmhashKey	key;

		if (xl->n == 0)
			continue;
		rel = try_relation_open(xl->indexoid, NoLock);
		if (rel != NULL)
		{
			pmhash_key_for_rel(rel, &key);
			if (memcmp(&key, &xl->key, sizeof(key)) == 0)
			{
				PmhashIndex idx;

				/* this transaction inserted into it: the table is locked */
				Relation	heap = table_open(rel->rd_index->indrelid, NoLock);

				if (pmhash_xact_upserts)
					pmhash_log_settle(xl, heap, NULL);
				pmhash_attach(rel, LW_SHARED, &idx);
				idx.heap = heap;
				pmhash_log_flush(&idx, xl);
				pmhash_detach(&idx);
				table_close(heap, NoLock);
			}
			relation_close(rel, NoLock);
		}
		pmhash_xact_unflushed -= xl->n;
		xl->n = 0;
	}
	(void) for_parallel;
}

/* transaction end (commit, abort or prepare): forget the collecting logs */
void
pmhash_log_xact_end(void)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	pmhash_xact_last = NULL;
	pmhash_xact_upserts = false;
	if (pmhash_xact_logs == NULL)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
		(void) hash_search(pmhash_xact_logs, &xl->key, HASH_REMOVE, NULL);
	pmhash_xact_unflushed = 0;
	pmhash_xact_unlogged = 0;
}

/*
 * Put every flushed entry that waits for the WAL into it: at PRE_COMMIT
 * and PRE_PREPARE, after the last flush, so before the commit (or
 * PREPARE) record.
 */
void
pmhash_log_wal_all(void)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	if (pmhash_xact_unlogged == 0 || pmhash_xact_logs == NULL)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
		pmhash_log_wal(xl);
}

/* subtransaction commit: its entries now belong to the parent */
void
pmhash_log_subxact_commit(SubTransactionId mysub, SubTransactionId parentsub)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0 && pmhash_xact_unlogged == 0)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
	{
		int			i;

		for (i = 0; i < xl->n; i++)
			if (xl->e[i].subid == mysub)
				xl->e[i].subid = parentsub;
		for (i = 0; i < xl->nwal; i++)
			if (xl->wal_subids[i] == mysub)
				xl->wal_subids[i] = parentsub;
	}
}

/*
 * Subtransaction abort: drop its entries (and those of its children, which
 * have larger ids) that are still in collecting logs, or that wait for the
 * WAL.
 */
void
pmhash_log_subxact_abort(SubTransactionId mysub)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0 && pmhash_xact_unlogged == 0)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
	{
		int			i;
		int			keep = 0;

		for (i = 0; i < xl->n; i++)
		{
			if (xl->e[i].subid >= mysub)
				continue;
			xl->e[keep++] = xl->e[i];
		}
		pmhash_xact_unflushed -= xl->n - keep;
		xl->n = keep;

		/* flushed, so dead entries in the pool: never for the WAL */
		keep = 0;
		for (i = 0; i < xl->nwal; i++)
		{
			if (xl->wal_subids[i] >= mysub)
				continue;
			xl->wal_hashes[keep] = xl->wal_hashes[i];
			xl->wal_tids[keep] = xl->wal_tids[i];
			xl->wal_subids[keep++] = xl->wal_subids[i];
		}
		pmhash_xact_unlogged -= xl->nwal - keep;
		xl->nwal = keep;
	}
}

/*
 * TIDs with this hash in this transaction's collecting log of an index
 * storage (its own inserts not flushed yet).  Stores at most max and
 * returns the number found.
 */
int
pmhash_log_own_matches(const PmhashKey *key, uint64 hash,
					   ItemPointerData *tids, int max)
{
	PmhashXactLog *xl;
	int			found = 0;
	int			i;

	if (pmhash_xact_unflushed == 0)
		return 0;
	xl = pmhash_xact_log(key, InvalidOid, false);
	if (xl == NULL)
		return 0;
	for (i = 0; i < xl->n; i++)
	{
		if (xl->e[i].hash != hash)
			continue;
		if (found < max)
			tids[found] = xl->e[i].tid;
		found++;
	}
	return found;
}
