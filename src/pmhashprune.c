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
 * naming the TIDs reaches the disk before the pool changes.  It carries a
 * horizon for a hot standby's queries (PmhashSegSlot.hint_fxid), which the
 * heap is not read for: a hinted row was deleted, or inserted by an
 * aborted transaction, before its hint was set.
 *
 * Not in a stale pool: there an entry's TID may have been taken by a row
 * inserted after a crash (see "The TID-reuse hazard" in README.pmhash), and
 * only unique checks, which hold the hash's unique-check lock, hint there.
 * See "Dead hints" in README.pmhash.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xlog.h"
#include "miscadmin.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

/* hinted entries a prune needs, as a fraction of its chain's slots */
#define PMHASH_PRUNE_FRACTION	8

/*
 * Raise a primary segment's hint_fxid to next_fxid (the next transaction
 * id, read before the hints were set).  Segment lock held shared at least.
 */
void
pmhash_raise_hint_fxid(PmhashSegSlot *slot, uint64 next_fxid)
{
	uint64		old = pg_atomic_read_u64(&slot->hint_fxid);

	while (old < next_fxid &&
		   !pg_atomic_compare_exchange_u64(&slot->hint_fxid, &old, next_fxid))
		;
}

/*
 * The conflict horizon of a primary segment's hinted entries: the
 * transaction id before the next one when the last was hinted.
 */
static TransactionId
pmhash_prune_horizon(PmhashSegSlot *slot)
{
	uint64		fxid = pg_atomic_read_u64(&slot->hint_fxid);
	TransactionId xid;

	/* (never set with hints present; be safe: the next id now) */
	if (fxid == 0)
		fxid = U64FromFullTransactionId(ReadNextFullTransactionId());
	xid = XidFromFullTransactionId(FullTransactionIdFromU64(fxid));
	TransactionIdRetreat(xid);
	return xid;
}

/*
 * Delete the entries hinted dead in primary segment segno and its overflow
 * chain, if they are at least PMHASH_PRUNE_FRACTION-th of its slots and no
 * fewer than a D-bucket: the write path's "prune" callback, called with
 * the segment's lock held exclusively (or the index lock) when relocating
 * into it found no room.  True if it deleted them.
 */
bool
pmhash_prune_chain(PmhashIndex *idx, uint32 segno)
{
	PmhashShared *shared = idx->shared;
	PmhPool    *pool = &idx->local->pool;
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	uint64		word = meta->word;
	int			nsegs = 0;
	int			hinted;
	uint16	   *dead;
	ItemPointerData *tids;
	int			ntids = 0;
	uint32		seg;
	int			k;

	if (shared->stale || RecoveryInProgress() || idx->redo_pool_id != 0)
		return false;
	for (seg = segno; seg != PMH_NO_SEGMENT;
		 seg = pmhash_seg_meta(idx, seg)->ovf_next)
		nsegs++;
	hinted = pmh_chain_hinted(&idx->cb, segno, NULL, 0);
	if (hinted < PMH_DBUCKET_SLOTS ||
		hinted < nsegs * PMH_SEG_SLOTS / PMHASH_PRUNE_FRACTION)
		return false;

	dead = palloc(sizeof(uint16) * PMH_SEG_BUCKETS * nsegs);
	tids = palloc(sizeof(ItemPointerData) * hinted);
	hinted = pmh_chain_hinted(&idx->cb, segno, dead, nsegs);
	for (seg = segno, k = 0; k < nsegs;
		 seg = pmhash_seg_meta(idx, seg)->ovf_next, k++)
	{
		const PmhEntry *e = pmh_seg_entries(pool, seg);
		int			b;

		for (b = 0; b < PMH_SEG_BUCKETS; b++)
		{
			uint32		m = dead[k * PMH_SEG_BUCKETS + b];

			while (m)
			{
				const PmhEntry *ent = &e[b * PMH_BUCKET_SLOTS +
										 pg_rightmost_one_pos32(m)];

				m &= m - 1;
				Assert(ntids < hinted);
				/* (ItemPointerSet names its pointer more than once) */
				ItemPointerSet(&tids[ntids], pmh_tag_block(ent->tag),
							   pmh_tag_offset(ent->tag));
				ntids++;
			}
		}
	}

	if (pmhash_xlog_wanted(idx->rel))
	{
		int			depth = pmh_segword_depth(word);
		uint64		lo = depth == 0 ? 0 :
			pmh_segword_prefix(word) << (64 - depth);
		uint64		hi = depth == 0 ? PG_UINT64_MAX :
			lo + ((UINT64CONST(1) << (64 - depth)) - 1);
		int			n = pmhash_sort_tids(tids, ntids);
		TransactionId horizon = XLogStandbyInfoActive() ?
			pmhash_prune_horizon(pmhash_seg_slot(idx, segno)) :
			InvalidTransactionId;

		/*
		 * The record reaches the disk before the deletions reach the pool,
		 * as VACUUM's (pmhash_vacuum_segment): else a crash could leave a
		 * standby with entries that nothing ever deletes there.
		 */
		XLogFlush(pmhash_xlog_prune(idx->rel, shared->pool_id, lo, hi,
									tids, n, horizon));
	}
	if (pmh_delete_chain(pool, &idx->cb, segno, dead, nsegs) != 0)
		pmhash_report_io_error(idx->rel, "persist deletion in");
	/* every hinted entry is gone: later hints start the horizon anew */
	pg_atomic_write_u64(&pmhash_seg_slot(idx, segno)->hint_fxid, 0);
	pg_atomic_fetch_sub_u64(&shared->entries, (uint64) hinted);
	pfree(dead);
	pfree(tids);
	return true;
}
