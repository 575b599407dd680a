/*-------------------------------------------------------------------------
 *
 * pmhashprune.c
 *	  Deleting entries hinted dead when their segment runs out of room.
 *
 * Scans and unique checks hint dead the entries of rows that no snapshot
 * can see (PMH_FPT_DEAD; pmhashsearch.c).  Until VACUUM removes them they
 * take slots, so a key updated many times fills its segment, and then
 * overflow segments, with entries that every lookup skips.  btree and the
 * hash AM delete such items when an insert finds their page full; pmhash
 * does the same when a relocation finds no room in a segment and its
 * chain: before it splits the segment or adds an overflow segment, it
 * deletes the chain's hinted entries, provided they are at least an eighth
 * of the chain's slots.  The deletion is VACUUM's (pmh_delete_chain, one
 * batch, one fence), and so is the order with the WAL: a PRUNE record
 * naming the TIDs reaches the disk before the pool changes.  It carries
 * the horizon a hot standby's queries conflict with, the newest xmax of
 * the removed rows' HOT chains, read from the heap as btree's and hash's
 * deletions read it (here without the table AM's checks, which raise an
 * error for a TID that names nothing): under the segment lock, as theirs
 * under the page's, so only an inserter that has the table open and
 * locked prunes where a standby needs the horizon (PmhashIndex.heap).
 *
 * Not in a stale pool: there an entry's TID may have been taken by a row
 * inserted after a crash, or belong to a primary's aborted upsert that a
 * standby kept (see "The TID-reuse hazard" in README.pmhash), and only
 * unique checks, which hold the hash's unique-check lock, hint there.
 * See "Dead hints" in README.pmhash.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam_xlog.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

/* hinted entries a prune needs, as a fraction of its chain's slots */
#define PMHASH_PRUNE_FRACTION	8

/*
 * Advance *horizon past the newest transaction that deleted a row of the
 * HOT chain starting at offset off of a heap page (share-locked): the
 * walk heap_index_delete_tuples makes for btree's and hash's deletions
 * (HeapTupleHeaderAdvanceLatestRemovedXid).  A slot that is unused, dead
 * or past the page's end adds nothing: heap pruning that made it so had
 * its own record, and a TID that names nothing (an entry a standby kept
 * of a primary's aborted upsert, after promotion) is garbage to remove,
 * not an error.
 */
static void
pmhash_prune_chain_horizon(Page page, BlockNumber blkno, OffsetNumber off,
						   TransactionId *horizon)
{
	OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
	TransactionId prior_xmax = InvalidTransactionId;
	int			steps;

	for (steps = 0; steps <= maxoff; steps++)
	{
		ItemId		lp;
		HeapTupleHeader htup;

		if (off < FirstOffsetNumber || off > maxoff)
			return;
		lp = PageGetItemId(page, off);
		if (ItemIdIsRedirected(lp))
		{
			off = ItemIdGetRedirect(lp);
			continue;
		}
		if (!ItemIdIsNormal(lp))
			return;
		htup = (HeapTupleHeader) PageGetItem(page, lp);
		if (TransactionIdIsValid(prior_xmax) &&
			!TransactionIdEquals(HeapTupleHeaderGetXmin(htup), prior_xmax))
			return;
		HeapTupleHeaderAdvanceLatestRemovedXid(htup, horizon);
		if (!HeapTupleHeaderIsHotUpdated(htup) ||
			ItemPointerGetBlockNumber(&htup->t_ctid) != blkno)
			return;
		off = ItemPointerGetOffsetNumber(&htup->t_ctid);
		prior_xmax = HeapTupleHeaderGetUpdateXid(htup);
	}
}

/*
 * The conflict horizon of removing the entries of these heap TIDs (sorted),
 * whose rows are dead to every snapshot: the newest xmax of their HOT
 * chains, read a heap page at a time.  Blocks past the heap's end add
 * nothing.
 */
static TransactionId
pmhash_prune_horizon(Relation heap, const ItemPointerData *tids, int n)
{
	TransactionId horizon = InvalidTransactionId;
	BlockNumber nblocks = RelationGetNumberOfBlocks(heap);
	int			i = 0;

	while (i < n)
	{
		BlockNumber blkno = ItemPointerGetBlockNumber(&tids[i]);
		Buffer		buf;
		Page		page;

		if (blkno >= nblocks)
		{
			i++;
			continue;
		}
		buf = ReadBuffer(heap, blkno);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (; i < n && ItemPointerGetBlockNumber(&tids[i]) == blkno; i++)
			pmhash_prune_chain_horizon(page, blkno,
									   ItemPointerGetOffsetNumber(&tids[i]),
									   &horizon);
		UnlockReleaseBuffer(buf);
	}
	return horizon;
}

/* live slots of primary segment segno and its chain */
static uint64
pmhash_chain_live(PmhashIndex *idx, uint32 segno)
{
	uint64		n = 0;
	uint32		seg;

	for (seg = segno; seg != PMH_NO_SEGMENT;
		 seg = pmhash_seg_meta(idx, seg)->ovf_next)
		n += pmhash_seg_meta(idx, seg)->nlive;
	return n;
}

/*
 * Delete the entries hinted dead in primary segment segno and its overflow
 * chain, if they are at least PMHASH_PRUNE_FRACTION-th of its slots and no
 * fewer than a D-bucket: the write path's "prune" callback, called with
 * the segment's lock held exclusively (or the index lock) when relocating
 * into it found no room.  True if it freed a D-bucket's worth of slots at
 * least (the write path then relocates again).  Nothing is done in a stale
 * pool, in recovery, when a standby needs the conflict horizon and the
 * table is not at hand or not a heap (whose pages the horizon is read
 * from), or when memory for the TIDs is short: a prune is never needed,
 * only useful.
 */
bool
pmhash_prune_chain(PmhashIndex *idx, uint32 segno)
{
	PmhashShared *shared = idx->shared;
	PmhPool    *pool = &idx->local->pool;
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	uint64		word = meta->word;
	bool		wal;
	int			nsegs = 0;
	int			hinted;
	int			freed = 0;
	uint16	   *dead;
	ItemPointerData *tids;
	int			ntids = 0;
	uint32		seg;
	int			k;

	if (shared->stale || RecoveryInProgress() || idx->redo_pool_id != 0)
		return false;
	wal = pmhash_xlog_wanted(idx->rel);
	if (wal && XLogStandbyInfoActive() &&
		(idx->heap == NULL ||
		 idx->heap->rd_tableam != GetHeapamTableAmRoutine()))
		return false;
	for (seg = segno; seg != PMH_NO_SEGMENT;
		 seg = pmhash_seg_meta(idx, seg)->ovf_next)
		nsegs++;
	hinted = pmh_chain_hinted(&idx->cb, segno, NULL, 0);
	if (hinted < PMH_DBUCKET_SLOTS ||
		hinted < nsegs * PMH_SEG_SLOTS / PMHASH_PRUNE_FRACTION)
		return false;

	dead = palloc_extended(sizeof(uint16) * PMH_SEG_BUCKETS * nsegs,
						   MCXT_ALLOC_NO_OOM);
	tids = palloc_extended(sizeof(ItemPointerData) * hinted,
						   MCXT_ALLOC_NO_OOM);
	if (dead == NULL || tids == NULL)
	{
		if (dead != NULL)
			pfree(dead);
		if (tids != NULL)
			pfree(tids);
		return false;
	}
	/* (the same count: hints are set under the segment lock shared) */
	(void) pmh_chain_hinted(&idx->cb, segno, dead, nsegs);
	for (seg = segno, k = 0; k < nsegs;
		 seg = pmhash_seg_meta(idx, seg)->ovf_next, k++)
	{
		PmhSegMeta *m = pmhash_seg_meta(idx, seg);
		const PmhEntry *e = pmh_seg_entries(pool, seg);
		int			b;

		for (b = 0; b < PMH_SEG_BUCKETS; b++)
		{
			uint32		mask;

			/* (only live slots: pmh_delete_slots deletes no others) */
			dead[k * PMH_SEG_BUCKETS + b] &= m->occ[b];
			mask = dead[k * PMH_SEG_BUCKETS + b];
			while (mask)
			{
				int			slot = pg_rightmost_one_pos32(mask);
				const PmhEntry *ent = &e[b * PMH_BUCKET_SLOTS + slot];

				mask &= mask - 1;
				if (ntids == hinted)
				{
					/* (cannot happen; delete nothing the WAL does not name) */
					dead[k * PMH_SEG_BUCKETS + b] &= (uint16) ~(1 << slot);
					continue;
				}
				/* (ItemPointerSet names its pointer more than once) */
				ItemPointerSet(&tids[ntids], pmh_tag_block(ent->tag),
							   pmh_tag_offset(ent->tag));
				ntids++;
			}
		}
	}

	if (ntids >= PMH_DBUCKET_SLOTS && wal)
	{
		uint64		lo;
		uint64		hi;
		int			n = pmhash_sort_tids(tids, ntids);
		TransactionId horizon = XLogStandbyInfoActive() ?
			pmhash_prune_horizon(idx->heap, tids, n) :
			InvalidTransactionId;

		pmh_segword_range(word, &lo, &hi);

		/*
		 * The record reaches the disk before the deletions reach the pool,
		 * as VACUUM's (pmhash_vacuum_segment): else a crash could leave a
		 * standby with entries that nothing ever deletes there.
		 */
		XLogFlush(pmhash_xlog_prune(idx->rel, shared->pool_id, lo, hi,
									tids, n, horizon));
	}
	if (ntids >= PMH_DBUCKET_SLOTS)
	{
		uint64		before = pmhash_chain_live(idx, segno);
		int			rc = pmh_delete_chain(pool, &idx->cb, segno, dead, nsegs);

		/* (the metadata says deleted even if the persist failed) */
		freed = (int) (before - pmhash_chain_live(idx, segno));
		pg_atomic_fetch_sub_u64(&shared->entries, (uint64) freed);
		if (rc != 0)
			pmhash_report_io_error(idx->rel, "persist deletion in");
	}
	pfree(dead);
	pfree(tids);
	return freed >= PMH_DBUCKET_SLOTS;
}
