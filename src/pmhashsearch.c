/*-------------------------------------------------------------------------
 *
 * pmhashsearch.c
 *	  Index and bitmap scans of a pmhash index.
 *
 * A scan's keys become hashes (pmhashscankey.c).  It collects the TIDs of
 * every live entry with those hashes, without the index lock
 * (pmhashread.c) or, when that fails, with it shared: in the segment and
 * its chain (the fingerprints in shared memory tell which slots to read),
 * in the segment's D-bucket, and in this transaction's own collecting log.
 * The TIDs are
 * sorted and de-duplicated, so that each is returned once even if a crash
 * left the same entry twice, and every result is rechecked by the executor
 * (entries hold hashes, not keys).
 *
 * A key "col = ANY (array)" (amsearcharray) is hashed element by element;
 * the distinct hashes are looked up PMH_LOOKUP_BATCH at a time, each batch
 * first starting to load every lookup's lines and only then reading them
 * (pmhash_collect_batch), so that the cache misses of the batch overlap.
 *
 * Rows that the executor finds dead to every snapshot (kill_prior_tuple),
 * and that the scan's own checks find so, have their entries hinted dead
 * when the scan has returned its TIDs (pmhash_scan_hint_killed), so that
 * later lookups skip them, as btree and hash skip LP_DEAD items.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_index.h"
#include "executor/executor.h"
#include "lib/qunique.h"
#include "miscadmin.h"
#include "nodes/tidbitmap.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "pmhash.h"


/* ambeginscan */
IndexScanDesc
pmhashbeginscan(Relation rel, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(rel, nkeys, norderbys);
	PmhashScanOpaque so = palloc0(sizeof(PmhashScanOpaqueData));

	so->cap = 64;
	so->last = -1;
	so->heap_nblocks = 0;		/* read on first need */
	so->scancxt = CurrentMemoryContext;
	so->tags = palloc(sizeof(uint64) * so->cap);
	so->tids = palloc(sizeof(ItemPointerData) * so->cap);
	scan->opaque = so;
	return scan;
}

/* qsort/qunique comparator of TIDs */
static int
pmhash_tid_cmp(const void *a, const void *b)
{
	return ItemPointerCompare((ItemPointer) a, (ItemPointer) b);
}

/* make room for at least want tag words and TIDs */
static void
pmhash_grow_results(PmhashScanOpaque so, int64 want)
{
	int64		cap = want + want / 2;

	if (cap > MaxAllocHugeSize / sizeof(uint64) || cap > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("pmhash scan matches too many entries"),
				 errdetail("The scan found more than %lld entries.",
						   (long long) want),
				 errhint("Look up fewer keys at a time.")));
	so->tags = repalloc_huge(so->tags, sizeof(uint64) * cap);
	so->tids = repalloc_huge(so->tids, sizeof(ItemPointerData) * cap);
	so->cap = (int) cap;
}

/*
 * Add to tags[n..] the entries with this hash in this transaction's own
 * collecting log (not flushed yet), storing below max.  Returns the new
 * count, which may exceed max.
 */
static int
pmhash_add_own(PmhashShared *shared, uint64 hash, uint64 *tags, int n, int max)
{
	ItemPointerData own[PMH_BUCKET_SLOTS];
	int			nown;
	int			i;

	nown = pmhash_log_own_matches(&shared->key, hash, own, PMH_BUCKET_SLOTS);
	for (i = 0; i < nown; i++)
	{
		if (n < max)
			tags[n] = pmh_tag_make(hash, ItemPointerGetBlockNumber(&own[i]),
								   ItemPointerGetOffsetNumber(&own[i]));
		n++;
	}
	return n;
}

/*
 * Look one hash up with the index lock held (shared) and store the tag
 * words found at tags[0..max-1]: the segment and its chain, its D-bucket,
 * the own collecting log.  Returns how many there are, which may exceed
 * max.  The segment is read without its lock first, and again under it
 * only if a writer got in the way (pmhash_lookup_optimistic).
 */
int
pmhash_lookup_hash(PmhashIndex *idx, uint64 hash, uint64 *tags, int max)
{
	uint32		segno = pmhash_lookup_segment(idx, hash);
	int			n;

	/*
	 * Start loading the metadata, so that its misses overlap the version's;
	 * if a writer gets in the way, look again under the segment lock (the
	 * first use since a restart loads the segment there, and a split may
	 * have moved the hash: pmhash_lock_hash reads the directory again).
	 */
	pmh_meta_prefetch(pmhash_seg_meta(idx, segno), hash);
	if (pmhash_lookup_optimistic(idx, segno, hash, tags, max, &n))
		return pmhash_add_own(idx->shared, hash, tags, n, max);
	segno = pmhash_lock_hash(idx, hash, LW_SHARED);
	n = pmh_lookup_all(&idx->local->pool, &idx->cb,
					   pmhash_seg_meta(idx, segno), segno, hash, tags, max);
	pmhash_unlock_segment(idx, segno);
	return pmhash_add_own(idx->shared, hash, tags, n, max);
}

/*
 * pmhash_lookup_hash, into buf (room for cap) when the entries fit, else
 * into an array palloc'd to their number; *tags says which.  Returns how
 * many there are.  Index lock held.
 */
int
pmhash_lookup_hash_all(PmhashIndex *idx, uint64 hash, uint64 *buf, int cap,
					   uint64 **tags)
{
	int			n;

	*tags = buf;
	while ((n = pmhash_lookup_hash(idx, hash, *tags, cap)) > cap)
	{
		cap = n;
		if (*tags != buf)
			pfree(*tags);
		*tags = palloc(sizeof(uint64) * cap);
	}
	return n;
}

/* sort and de-duplicate TIDs; returns how many distinct ones there are */
int
pmhash_sort_tids(ItemPointerData *tids, int n)
{
	if (n < 2)
		return n;
	qsort(tids, n, sizeof(ItemPointerData), pmhash_tid_cmp);
	return (int) qunique(tids, n, sizeof(ItemPointerData), pmhash_tid_cmp);
}

/* is tid in the set? */
bool
pmhash_tid_set_has(const PmhashTidSet *set, ItemPointer tid)
{
	return bsearch(tid, set->tids, set->n, sizeof(ItemPointerData),
				   pmhash_tid_cmp) != NULL;
}

/* pmh_mark_dead's test: is the tag's TID in the hint's set? */
static bool
pmhash_tag_is_dead(uint64 tag, void *arg)
{
	ItemPointerData tid;

	ItemPointerSet(&tid, pmh_tag_block(tag), pmh_tag_offset(tag));
	return pmhash_tid_set_has((const PmhashTidSet *) arg, &tid);
}

/*
 * May the TIDs that lookups are about to find be hinted dead later, and
 * with what count of bulk deletes begun (*vacuums, for
 * pmhash_hint_dead_hash)?  Read before the lookups.  A heap TID is freed
 * for another row only after every index's bulk delete removed its
 * entries; a hint applied after that could hide the new row's entry with
 * the same hash and TID.  So a hint is set only if no bulk delete ran
 * since the lookups: none is running now, and none has begun when the
 * hint takes the segment's lock (a bulk delete counts itself begun before
 * its first deletion, which takes that lock).
 *
 * In a stale pool an entry of an insert that a crash lost names a heap
 * slot that a new row can take without any VACUUM.  A new entry that
 * finds an equal one clears its hint (pmh_contains), but a hint set later
 * by a scan that found the slot empty would hide the new row: so only
 * when unique_check (a unique check holds the hash's unique-check lock
 * from its lookup to its hint, and every insert of the hash takes it).
 */
bool
pmhash_hint_allowed(PmhashShared *shared, bool unique_check, uint64 *vacuums)
{
	uint64		ended = pg_atomic_read_u64(&shared->vacuums_ended);

	pg_read_barrier();
	*vacuums = pg_atomic_read_u64(&shared->vacuums_begun);
	pg_read_barrier();
	return (unique_check || !shared->stale) && *vacuums == ended;
}

/* pmhash_hint_dead_hash, tids sorted and distinct */
static int
pmhash_hint_dead_sorted(PmhashIndex *idx, uint64 hash,
						const ItemPointerData *tids, int ntids,
						bool unique_check, uint64 vacuums)
{
	PmhashTidSet set;
	uint32		segno;
	int			marked = 0;

	Assert(idx->mode == LW_SHARED);
	if (ntids == 0)
		return 0;
	set.tids = unconstify(ItemPointerData *, tids);
	set.n = ntids;
	segno = pmhash_lock_hash(idx, hash, LW_SHARED);
	if ((unique_check || !idx->shared->stale) &&
		pg_atomic_read_u64(&idx->shared->vacuums_begun) == vacuums)
		marked = pmh_mark_dead(&idx->local->pool, &idx->cb, segno, hash,
							   pmhash_tag_is_dead, &set);
	pmhash_unlock_segment(idx, segno);
	return marked;
}

/*
 * Hint dead the entries with this hash whose TIDs are among tids (which
 * this sorts): their rows are dead to every snapshot, and lookups need not
 * return them (PMH_FPT_DEAD).  For a unique check, which holds the hash's
 * unique-check lock, with what pmhash_hint_allowed gave it before its
 * lookup.  Index lock held shared; takes the segment's lock shared.
 * Returns how many it hinted.  Entries still in a D-bucket or a collecting
 * log are not hinted: at most a D-bucket's worth per segment.
 *
 * The hint is the shared memory's own, like the rest of the fingerprint
 * table: it is not logged, and a restart, a split or a VACUUM of the
 * segment forgets it.  It is set only outside recovery, from a horizon
 * that covers every snapshot of this server, so a scan never needs to see
 * a hinted entry (unlike btree's LP_DEAD bits, which reach standbys with
 * the primary's horizon); redo, which must see every entry, runs where
 * no hint has been set since the shared memory was made.
 */
int
pmhash_hint_dead_hash(PmhashIndex *idx, uint64 hash, ItemPointerData *tids,
					  int ntids, uint64 vacuums)
{
	return pmhash_hint_dead_sorted(idx, hash, tids,
								   pmhash_sort_tids(tids, ntids), true,
								   vacuums);
}

/*
 * Hint dead the entries with one of these hashes whose TIDs are among tids
 * (pmhash_hint_dead_hash), which this sorts and de-duplicates.  Takes the
 * index lock shared, PMH_LOOKUP_BATCH hashes at a time.  Nothing for more
 * than PMHASH_HINT_MAX_HASHES hashes (the TIDs do not say which hash
 * each came from, and every hash is walked), nor outside a running
 * transaction (a cursor's end in an abort).
 */
#define PMHASH_HINT_MAX_HASHES	64

static void
pmhash_hint_dead(Relation index, const uint64 *hashes, int nhashes,
				 ItemPointerData *tids, int ntids, uint64 vacuums)
{
	PmhashShared *shared;
	PmhashLocal *local;
	int			base;

	if (ntids == 0 || nhashes == 0 || nhashes > PMHASH_HINT_MAX_HASHES ||
		RecoveryInProgress() || !IsTransactionState())
		return;

	/*
	 * Only an index that is loaded and mapped here as the scan saw it: a
	 * hint is not worth loading it again, which can fail (this runs at a
	 * cursor's close, and so at COMMIT)
	 */
	if (!pmhash_attached_before(index, &shared, &local) ||
		!pmhash_ready_here(shared, local))
		return;
	ntids = pmhash_sort_tids(tids, ntids);
	for (base = 0; base < nhashes; base += PMH_LOOKUP_BATCH)
	{
		int			nk = Min(PMH_LOOKUP_BATCH, nhashes - base);
		PmhashIndex idx;
		int			i;

		pmhash_attach(index, LW_SHARED, &idx);
		for (i = 0; i < nk; i++)
			(void) pmhash_hint_dead_sorted(&idx, hashes[base + i], tids,
										   ntids, false, vacuums);
		pmhash_detach(&idx);
	}
}

/* note the TID at tids[i] as dead to all, for pmhash_scan_hint_killed */
static void
pmhash_scan_note_killed(PmhashScanOpaque so, int i)
{
	if (so->killed_cap < so->ntids)
	{
		Size		size = sizeof(ItemPointerData) * so->ntids;

		so->killed = so->killed == NULL ?
			MemoryContextAllocHuge(so->scancxt, size) :
			repalloc_huge(so->killed, size);
		so->killed_cap = so->ntids;
	}
	Assert(so->nkilled < so->killed_cap);
	so->killed[so->nkilled++] = so->tids[i];
}

/*
 * Hint dead the entries of the TIDs this scan found dead to all since it
 * last collected (pmhash_hint_dead).  Called when the scan has returned
 * its last TID, at rescan and at the scan's end.
 */
void
pmhash_scan_hint_killed(IndexScanDesc scan)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	int			n = so->nkilled;

	if (n == 0)
		return;
	so->nkilled = 0;
	if (so->hint_ok)
		pmhash_hint_dead(scan->indexRelation, so->hashes, so->nhashes,
						 so->killed, n, so->vacuums);
}

/* read, once a round and before its lookups, whether it may hint */
static inline void
pmhash_scan_note_hints(PmhashScanOpaque so, PmhashShared *shared)
{
	if (!so->hint_noted)
	{
		so->hint_ok = pmhash_hint_allowed(shared, false, &so->vacuums);
		so->hint_noted = true;
	}
}

/*
 * Look up so->hashes[base..base+nk-1] (nk at most PMH_LOOKUP_BATCH) without
 * the index lock (pmhashread.c), storing their tag words from so->tags[ntags]
 * on.  A batch first starts loading every lookup's segment version and
 * metadata, then (from a read of the fingerprints) its candidate entries,
 * and only then looks each hash up: by then its lines are in cache or on
 * their way, and the batch's misses have overlapped instead of following
 * one another.  Returns false when the lookups must be done under the lock;
 * else sets *found to the number of tag words added and *stale to whether
 * the pool may hold entries of inserts a crash lost.
 */
static bool
pmhash_collect_unlocked(IndexScanDesc scan, int base, int nk, int ntags,
						int *found, bool *stale)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	const uint64 *hash = so->hashes + base;

	Assert(nk <= PMH_LOOKUP_BATCH);
	for (;;)
	{
		PmhashReadView v;
		uint32		segno[PMH_LOOKUP_BATCH];
		int			total = 0;
		bool		ok = true;
		int			i;

		if (!pmhash_read_begin(scan->indexRelation, &v))
			return false;
		pmhash_scan_note_hints(so, v.shared);
		if (nk == 1)
			segno[0] = PMH_NO_SEGMENT;	/* (the lookup reads it) */
		else
		{
			for (i = 0; i < nk; i++)
				segno[i] = pmhash_read_segment(&v, hash[i]);
			for (i = 0; i < nk; i++)
				pmhash_read_prefetch(&v, segno[i], hash[i]);
		}
		for (i = 0; i < nk && ok; i++)
		{
			int			room = Max(so->cap - ntags - total, 0);
			int			n;

			ok = pmhash_read_lookup(&v, segno[i], hash[i],
									so->tags + ntags + total, room, &n);
			if (ok)
				total += pmhash_add_own(v.shared, hash[i],
										so->tags + ntags + total, n, room);
		}
		*stale = v.stale;
		if (!pmhash_read_end(&v))
		{
			elog(DEBUG2, "pmhash index \"%s\" changed during a lookup without its lock; looking again under the lock",
				 RelationGetRelationName(scan->indexRelation));
			return false;
		}
		if (!ok)
			return false;
		if (ntags + total <= so->cap)
		{
			pmhash_count_lookups(v.local, nk, false);
			*found = total;
			return true;
		}
		/* more entries than room: make room and look again */
		pmhash_grow_results(so, (int64) ntags + total);
	}
}

/*
 * Look up hashes[0..nhashes-1], PMH_LOOKUP_BATCH at a time, appending their
 * tag words to so->tags: each batch without the index lock
 * (pmhash_collect_unlocked) when it can, else with it.  A batch under the
 * lock goes the same way: first every lookup's segment lock and metadata
 * start loading, then (from a read of the fingerprints taken without the
 * segment lock) its candidate entries, and only then is each hash looked
 * up.  The index lock is taken per batch, so that a long array does not
 * hold off splits, and interrupts are served between batches.
 * Returns the number of tag words; *stale tells whether the pool may hold
 * entries of inserts a crash lost.
 */
static int
pmhash_collect_batch(IndexScanDesc scan, bool *stale)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	int			ntags = 0;
	int			base;

	for (base = 0; base < so->nhashes; base += PMH_LOOKUP_BATCH)
	{
		const uint64 *hash = so->hashes + base;
		int			nk = Min(PMH_LOOKUP_BATCH, so->nhashes - base);
		uint32		segno[PMH_LOOKUP_BATCH];
		PmhashIndex idx;
		int			found;
		int			i;

		if (pmhash_collect_unlocked(scan, base, nk, ntags, &found, stale))
		{
			ntags += found;
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		pmhash_attach(scan->indexRelation, LW_SHARED, &idx);
		pmhash_check_complete(&idx, !IsMVCCSnapshot(scan->xs_snapshot));
		pmhash_scan_note_hints(so, idx.shared);
		*stale = idx.shared->stale;
		for (i = 0; i < nk; i++)
		{
			segno[i] = pmhash_lookup_segment(&idx, hash[i]);
			pmh_meta_prefetch(pmhash_seg_meta(&idx, segno[i]), hash[i]);
			pmh_prefetch(&pmhash_seg_slot(&idx, segno[i])->loaded);
		}
		/* (the metadata of a segment not loaded yet is not initialised) */
		for (i = 0; i < nk; i++)
			if (pmhash_seg_slot(&idx, segno[i])->loaded)
				pmh_lookup_prefetch(&idx.local->pool,
									pmhash_seg_meta(&idx, segno[i]),
									segno[i], hash[i]);
		for (i = 0; i < nk; i++)
		{
			int			n;

			/* (it reads the directory again: a load may have changed it) */
			while ((n = pmhash_lookup_hash(&idx, hash[i], so->tags + ntags,
										   so->cap - ntags)) > so->cap - ntags)
				pmhash_grow_results(so, (int64) ntags + n);
			ntags += n;
		}
		pmhash_count_lookups(idx.local, nk, true);
		pmhash_detach(&idx);
		CHECK_FOR_INTERRUPTS();
	}
	return ntags;
}

/*
 * A length of the heap that its blocks below are known to exist in, without
 * a system call, or 0: the size this backend's storage manager last saw
 * (smgr_cached_nblocks).  It can be short (other backends extend the heap
 * without telling), never long: no one truncates the heap while a scan
 * holds its lock; the backend that truncates it keeps the new size, and
 * the truncation's invalidation makes every other backend drop the size
 * it had before it can lock the heap again (smgrtruncate).  Only for heap
 * tables, whose length is the main fork's.
 */
BlockNumber
pmhash_heap_length_hint(Relation heap)
{
	BlockNumber known;

	if (heap->rd_tableam != GetHeapamTableAmRoutine())
		return 0;
	known = RelationGetSmgr(heap)->smgr_cached_nblocks[MAIN_FORKNUM];
	return known == InvalidBlockNumber ? 0 : known;
}

/*
 * Does the heap have block blk?  *nblocks is a length known to be no
 * longer than the heap's (a hint, or a length read before); it is read
 * afresh, and kept, only when blk is not below it.
 */
bool
pmhash_heap_has_block(Relation heap, BlockNumber *nblocks, BlockNumber blk)
{
	if (blk < *nblocks)
		return true;
	*nblocks = RelationGetNumberOfBlocks(heap);
	return blk < *nblocks;
}

/*
 * Must the scan check a partial index's predicate itself?  An entry whose
 * heap insert a crash lost can stay in the pool, and its slot can be taken
 * by a row with the same key that fails the predicate, for which the index
 * has no entry of its own (src/README.pmhash, "The TID-reuse hazard").  The
 * executor rechecks the key of every row an index scan returns, but not
 * always the predicate: the planner may drop the quals it implies (the
 * planner of the 15.15 sources does so for plain index scans; Debian's
 * 15.20 keeps them for index AMs that need a key, as pmhash does), and an
 * exclusion constraint's check takes every row the index returns with a
 * conflicting key.  So a scan returning tuples one at a time (a bitmap
 * heap scan rechecks the predicate) leaves out rows that fail the
 * predicate when the pool is stale.  A scan with a non-MVCC snapshot (an
 * exclusion check's dirty snapshot) does so always: VACUUM can remove an
 * entry and hand its slot to such a row after the scan collected the TID,
 * and that row is visible to the scan.
 */
static bool
pmhash_scan_needs_predicate(IndexScanDesc scan, bool stale)
{
	Relation	index = scan->indexRelation;

	if (scan->heapRelation == NULL)
		return false;
	if (heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, NULL))
		return false;
	return stale || !IsMVCCSnapshot(scan->xs_snapshot);
}

/*
 * Does the key of the row in pred_slot equal the scan's keys?  Only for
 * the scalar keys of the executor's constraint checks (check_key): a NULL
 * matches "IS NULL", a value the key's operator.
 */
static bool
pmhash_row_matches_keys(IndexScanDesc scan)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];
	int			i;

	FormIndexDatum(so->pred_ii, so->pred_slot, so->pred_estate, values, isnull);
	for (i = 0; i < scan->numberOfKeys; i++)
	{
		ScanKey		key = &scan->keyData[i];
		int			col = key->sk_attno - 1;

		if (key->sk_flags & SK_ISNULL)
		{
			if (!isnull[col])
				return false;
		}
		else if (isnull[col] ||
				 !DatumGetBool(FunctionCall2Coll(&key->sk_func,
												 key->sk_collation,
												 values[col],
												 key->sk_argument)))
			return false;
	}
	return true;
}

/*
 * Check a row the scan's snapshot sees at tid: does it satisfy a partial
 * index's predicate (check_pred, see pmhash_scan_needs_predicate), and
 * does its key equal the scan's (check_key)?  The check reads what the
 * executor will read: the member of the HOT chain that the snapshot sees
 * (not the chain's first member, which can be a dead version that CREATE
 * INDEX skipped over, and whose TOASTed values may be gone), or, for a
 * non-MVCC snapshot, which can see several, any of them.  A TID that
 * leads to nothing visible gives false: the executor would find nothing
 * there either; if what it leads to is dead to all, the TID is noted for
 * a hint, as the executor's kill_prior_tuple would be.
 *
 * The heap page stays pinned (by the heap AM's fetch state) until the next
 * check, the scan's end or rescan.  A row was found through a slot that is
 * a live root or a redirect; VACUUM frees only dead slots, and making one
 * dead takes pruning, which needs a cleanup lock that the pin denies.  So
 * the slot cannot be freed, and taken by another row, before the executor
 * has fetched what it leads to.
 */
static bool
pmhash_tid_check(IndexScanDesc scan, int i)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	ItemPointerData chain = so->tids[i];	/* the fetch moves it along the
											 * chain */
	Snapshot	snapshot = scan->xs_snapshot;
	ExprContext *econtext;
	bool		call_again = false;
	bool		found = false;
	bool		all_dead = false;

	if (so->pred_estate == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(so->scancxt);
		EState	   *estate = CreateExecutorState();
		List	   *pred = RelationGetIndexPredicate(scan->indexRelation);

		/* (pred_estate is set last: an error here leaves nothing half-made) */
		MemoryContextSwitchTo(estate->es_query_cxt);
		so->pred = pred != NIL ? ExecPrepareQual(pred, estate) : NULL;
		so->pred_ii = BuildIndexInfo(scan->indexRelation);
		so->pred_slot = table_slot_create(scan->heapRelation, NULL);
		so->pred_fetch = table_index_fetch_begin(scan->heapRelation);
		MemoryContextSwitchTo(old);
		so->pred_estate = estate;
	}
	/* a dirty snapshot reports in-progress transactions: not in the caller's */
	if (snapshot->snapshot_type == SNAPSHOT_DIRTY)
	{
		InitDirtySnapshot(so->pred_dirty);
		snapshot = &so->pred_dirty;
	}
	econtext = GetPerTupleExprContext(so->pred_estate);
	econtext->ecxt_scantuple = so->pred_slot;
	do
	{
		ResetExprContext(econtext);
		/* (all_dead says so for the whole chain after a first call only) */
		if (!table_index_fetch_tuple(so->pred_fetch, &chain, snapshot,
									 so->pred_slot, &call_again, &all_dead))
		{
			if (all_dead && !scan->xactStartedInRecovery)
				pmhash_scan_note_killed(so, i);
			break;
		}
		found = (!so->check_pred || so->pred == NULL ||
				 ExecQual(so->pred, econtext)) &&
			(!so->check_key || pmhash_row_matches_keys(scan));
		ExecClearTuple(so->pred_slot);
	} while (!found && call_again);
	return found;
}

/* collect, sort and de-duplicate the TIDs with the scan's hashes */
static void
pmhash_collect(IndexScanDesc scan)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	Relation	heap = scan->heapRelation;
	bool		stale = false;
	int			n;
	int			kept = 0;
	int			i;

	so->valid = true;
	so->ntids = 0;
	so->next = 0;
	so->last = -1;
	so->nkilled = 0;
	so->hint_ok = false;
	so->hint_noted = false;
	pgstat_count_index_scan(scan->indexRelation);
	if (so->empty)
		return;

	/*
	 * The check of an exclusion constraint or an ON CONFLICT arbiter (a
	 * dirty snapshot) waits for a rebuild of the pool, as a unique insert
	 * does, rather than fail like a query (pmhash_check_complete)
	 */
	if (!IsMVCCSnapshot(scan->xs_snapshot) &&
		pmhash_known_rebuilding(scan->indexRelation))
		pmhash_wait_rebuilt(scan->indexRelation, scan->heapRelation);

	if (so->nhashes > 1)
		n = pmhash_collect_batch(scan, &stale);
	else if (!pmhash_collect_unlocked(scan, 0, 1, 0, &n, &stale))
	{
		PmhashIndex idx;

		pmhash_attach(scan->indexRelation, LW_SHARED, &idx);
		pmhash_check_complete(&idx, !IsMVCCSnapshot(scan->xs_snapshot));
		pmhash_scan_note_hints(so, idx.shared);
		while ((n = pmhash_lookup_hash(&idx, so->hashes[0], so->tags,
									   so->cap)) > so->cap)
			pmhash_grow_results(so, n);
		stale = idx.shared->stale;
		pmhash_count_lookups(idx.local, 1, true);
		pmhash_detach(&idx);
	}

	/*
	 * An entry can outlive a crash that lost its heap insert; once VACUUM
	 * has truncated the heap, its TID points past the end.  Skip such TIDs
	 * (VACUUM removes their entries): the heap length is read again before
	 * a TID is skipped, as the heap may have grown since it was cached.
	 *
	 * A bitmap scan has no heap relation here: its heap scan skips blocks
	 * past the length it saw at its start, except under SERIALIZABLE, where
	 * it reads every block the bitmap names (heapam_scan_bitmap_next_block)
	 * and so is given only TIDs inside the heap.  The executor holds the
	 * heap's lock.
	 */
	if (heap == NULL && n > 0 && IsolationIsSerializable())
		heap = table_open(scan->indexRelation->rd_index->indrelid, NoLock);
	if (heap != NULL && so->heap_nblocks == 0)
		so->heap_nblocks = pmhash_heap_length_hint(heap);
	for (i = 0; i < n; i++)
	{
		BlockNumber blk = pmh_tag_block(so->tags[i]);

		if (heap != NULL && !pmhash_heap_has_block(heap, &so->heap_nblocks, blk))
			continue;
		/* (ItemPointerSet is a macro: no side effects in its arguments) */
		ItemPointerSet(&so->tids[kept], blk, pmh_tag_offset(so->tags[i]));
		kept++;
	}
	n = kept;
	if (heap != NULL && heap != scan->heapRelation)
		table_close(heap, NoLock);

	n = pmhash_sort_tids(so->tids, n);
	so->check_pred = n > 0 && pmhash_scan_needs_predicate(scan, stale);
	/* a bitmap scan (no heap relation) never has check_key's keys */
	so->check_key = so->check_key && scan->heapRelation != NULL;
	so->ntids = n;
}

/* amgettuple: the next TID, always to be rechecked */
bool
pmhashgettuple(IndexScanDesc scan, ScanDirection dir)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;

	if (!ScanDirectionIsForward(dir))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pmhash indexes support only forward scans")));
	if (!so->valid)
		pmhash_collect(scan);
	else if (scan->kill_prior_tuple && so->last >= 0)
		pmhash_scan_note_killed(so, so->last);
	so->last = -1;
	while (so->next < so->ntids)
	{
		int			i = so->next++;
		ItemPointer tid = &so->tids[i];

		if ((so->check_pred || so->check_key) && !pmhash_tid_check(scan, i))
			continue;
		scan->xs_heaptid = *tid;
		scan->xs_recheck = !so->check_key;
		so->last = i;
		return true;
	}
	/* the last page checked may be one the executor never pinned */
	if (so->pred_estate != NULL)
		table_index_fetch_reset(so->pred_fetch);
	pmhash_scan_hint_killed(scan);
	return false;
}

/* amgetbitmap: all matching TIDs, lossy by hash (recheck) */
int64
pmhashgetbitmap(IndexScanDesc scan, TIDBitmap *tbm)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;

	pmhash_collect(scan);
	if (so->ntids > 0)
		tbm_add_tuples(tbm, so->tids, so->ntids, true);
	return so->ntids;
}

/* amendscan */
void
pmhashendscan(IndexScanDesc scan)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;

	pmhash_scan_hint_killed(scan);
	if (so->pred_estate != NULL)
	{
		table_index_fetch_end(so->pred_fetch);
		ExecDropSingleTupleTableSlot(so->pred_slot);
		FreeExecutorState(so->pred_estate);
	}
	if (so->keycxt != NULL)
		MemoryContextDelete(so->keycxt);
	pfree(so->tags);
	pfree(so->tids);
	if (so->killed != NULL)
		pfree(so->killed);
	pfree(so);
	scan->opaque = NULL;
}
