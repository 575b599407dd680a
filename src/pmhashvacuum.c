/*-------------------------------------------------------------------------
 *
 * pmhashvacuum.c
 *	  VACUUM support: removing the entries of dead heap tuples.
 *
 * The pass walks the hash space in order, one primary segment (with its
 * overflow chain) at a time, under the index lock shared and the segment
 * lock exclusive.  Walking by hash range rather than by segment number
 * keeps the pass complete while concurrent inserts split segments: a range
 * already visited only ever splits into clean halves.  A dead entry is
 * removed by clearing its tag word (one failure-atomic 8-byte store); the
 * deletions of a segment and its chain are persisted in one batch before
 * the segment lock is released.  The freed slots are reused by later
 * inserts.  For a WAL-logged index each segment's dead TIDs go into a
 * DELETE record that is flushed before the deletions reach the pool; the
 * pass judges and logs a batch of segments, flushes once, and then removes
 * what the records name (pmhash_vacuum_apply).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

/* what the pass needs besides the index */
typedef struct PmhashVacState
{
	IndexBulkDeleteCallback callback;
	void	   *callback_state;
	Relation	heap;			/* NULL in redo: the TIDs are given */
	BlockNumber nblocks;		/* heap length, refreshed when exceeded */
	uint16	   *dead;			/* per bucket of a chain: slots to delete */
	int			deadsegs;		/* segments "dead" has room for */
	bool		wal;			/* log each segment's dead TIDs */
	ItemPointerData *tids;		/* the current segment's, for the WAL */
	int			ntids;
	int			tidcap;
	bool		past_end;		/* a TID was judged dead by the heap length */
} PmhashVacState;

/*
 * A logged bulk delete judges and logs a batch of segments first, flushes
 * the WAL once, and then removes what the records name (see "VACUUM" in
 * pmhashbulkdelete): one record's range and TIDs.
 */
typedef struct PmhashVacLogged
{
	uint64		lo;
	uint64		hi;
	PmhashTidSet dead;
} PmhashVacLogged;

/* records per WAL flush of a logged bulk delete, and TIDs at most */
#define PMHASH_VACUUM_BATCH_RECORDS	256
#define PMHASH_VACUUM_BATCH_TIDS	(64 * 1024)

/*
 * Is this TID dead?  Besides what VACUUM reports, a TID past the end of
 * the heap is dead: its entry was persisted before a crash lost the heap
 * insert's WAL, and VACUUM has since truncated the heap.  The heap length
 * is read afresh before such a verdict, under the segment lock, so that a
 * concurrent insert into a newly extended block is never taken for one.
 */
static bool
pmhash_tid_is_dead(PmhashVacState *vs, ItemPointer tid)
{
	if (vs->heap != NULL &&
		!pmhash_heap_has_block(vs->heap, &vs->nblocks,
							   ItemPointerGetBlockNumber(tid)))
	{
		vs->past_end = true;
		return true;
	}
	return vs->callback(tid, vs->callback_state);
}

/* remember a dead TID of the current segment for its WAL record */
static void
pmhash_vac_note(PmhashVacState *vs, ItemPointer tid)
{
	if (!vs->wal)
		return;
	if (vs->ntids == vs->tidcap)
	{
		vs->tidcap *= 2;
		vs->tids = repalloc_huge(vs->tids, sizeof(ItemPointerData) * vs->tidcap);
	}
	vs->tids[vs->ntids++] = *tid;
}

/* pmhash_tid_is_dead in the shape pmhash_vacuum_pending wants */
static bool
pmhash_vac_dead(ItemPointer tid, void *arg)
{
	return pmhash_tid_is_dead((PmhashVacState *) arg, tid);
}

/* what the error cleanup of a bulk delete needs */
typedef struct PmhashVacCleanup
{
	PmhashShared *shared;
	uint64		generation;
} PmhashVacCleanup;

/* end the backup-log side of a bulk delete, also when it fails */
static void
pmhash_vacuum_log_end(int code, Datum arg)
{
	PmhashVacCleanup *c = (PmhashVacCleanup *) DatumGetPointer(arg);

	pmhash_log_vacuum_end(c->shared, c->generation);
	pg_atomic_fetch_add_u64(&c->shared->vacuums_ended, 1);
}

/*
 * Find the dead entries of one segment: a mask of slots per bucket into
 * dead[]; returns their number and counts the others in *remaining.
 */
static uint64
pmhash_vacuum_judge(PmhashIndex *idx, uint32 segno, uint64 owner_word,
					PmhashVacState *vs, uint16 *dead, uint64 *remaining)
{
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	PmhEntry   *e = pmh_seg_entries(&idx->local->pool, segno);
	uint64		ndead = 0;
	int			b;

	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		uint32		occ = meta->occ[b];

		dead[b] = 0;
		while (occ)
		{
			int			s = pg_rightmost_one_pos32(occ);
			PmhEntry   *ent = &e[b * PMH_BUCKET_SLOTS + s];
			ItemPointerData tid;

			occ &= occ - 1;
			Assert(pmh_entry_is_live(ent, owner_word));
			ItemPointerSet(&tid, pmh_tag_block(ent->tag),
						   pmh_tag_offset(ent->tag));
			if (pmhash_tid_is_dead(vs, &tid))
			{
				dead[b] |= (uint16) (1 << s);
				ndead++;
				pmhash_vac_note(vs, &tid);
			}
			else
				(*remaining)++;
		}
	}
	return ndead;
}

/*
 * Judge every entry of primary segment segno's overflow chain (the segment
 * first) into vs->dead; returns the number of dead ones and counts the
 * others into *remaining.  Nothing is changed: the callback and the heap
 * length can fail.
 */
static uint64
pmhash_vacuum_judge_chain(PmhashIndex *idx, uint32 segno, uint64 owner_word,
						  PmhashVacState *vs, uint64 *remaining, int *nsegs)
{
	uint64		ndead = 0;
	uint32		seg;

	*nsegs = 0;
	for (seg = segno; seg != PMH_NO_SEGMENT;
		 seg = pmhash_seg_meta(idx, seg)->ovf_next)
	{
		if (*nsegs == vs->deadsegs)
		{
			vs->deadsegs *= 2;
			vs->dead = repalloc(vs->dead, sizeof(uint16) * PMH_SEG_BUCKETS *
								vs->deadsegs);
		}
		ndead += pmhash_vacuum_judge(idx, seg, owner_word, vs,
									 &vs->dead[*nsegs * PMH_SEG_BUCKETS],
									 remaining);
		(*nsegs)++;
	}
	return ndead;
}

/*
 * Remove the dead entries of the primary segment that covers hash pos,
 * with its overflow chain and D-bucket (index lock shared).  Every entry is
 * judged first (the callback and the heap length can fail: nothing is
 * changed yet); then, for a logged index, the dead TIDs go into one WAL
 * record before any deletion; then the D-bucket's dead entries are
 * removed, and the chain's deletions made and persisted in one batch
 * (pmh_delete_chain: one fence, and with msync about one call per
 * segment).  Returns the entries removed; *word gets the segment's word.
 * With logged (a batch of a logged bulk delete), a segment whose record
 * can wait for the batch's flush is only judged and logged: the record's
 * range and TIDs go into *logged (logged->dead.n > 0), nothing is removed
 * and 0 is returned.
 */
static uint64
pmhash_vacuum_segment(PmhashIndex *idx, uint64 pos, PmhashVacState *vs,
					  uint64 *remaining, uint64 *word,
					  PmhashVacLogged *logged)
{
	uint32		segno = pmhash_lock_hash(idx, pos, LW_EXCLUSIVE);
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	uint64		chain_remaining = 0;
	uint64		ndead;
	uint64		got;
	int			nsegs;
	XLogRecPtr	end = InvalidXLogRecPtr;
	uint64		pending_live = 0;

	*word = meta->word;
	vs->ntids = 0;
	vs->past_end = false;
	if (logged != NULL)
		logged->dead.n = 0;
	if (vs->wal)
	{
		uint32		p;

		for (p = 0; p < meta->npending; p++)
		{
			ItemPointerData tid;

			ItemPointerSet(&tid, pmh_tag_block(meta->pending[p].tag),
						   pmh_tag_offset(meta->pending[p].tag));
			if (pmhash_tid_is_dead(vs, &tid))
				pmhash_vac_note(vs, &tid);
			else
				pending_live++;
		}
	}
	ndead = pmhash_vacuum_judge_chain(idx, segno, *word, vs, &chain_remaining,
									  &nsegs);
	if (vs->ntids > 0)
	{
		uint64		lo;
		uint64		hi;

		pmh_segword_range(*word, &lo, &hi);
		vs->ntids = pmhash_sort_tids(vs->tids, vs->ntids);
		end = pmhash_xlog_delete(idx->rel, idx->shared->pool_id, lo, hi,
								 vs->tids, vs->ntids);

		/*
		 * A batch leaves the removal to after its WAL flush (the caller
		 * keeps the record's TIDs), unless a TID was judged dead by the
		 * heap's length: a concurrent insert could extend the heap and
		 * take that slot once the segment lock is let go, so that verdict
		 * holds only while it is held.
		 */
		if (logged != NULL && !vs->past_end)
		{
			logged->lo = lo;
			logged->hi = hi;
			logged->dead.n = vs->ntids;
			logged->dead.tids = palloc(sizeof(ItemPointerData) * vs->ntids);
			memcpy(logged->dead.tids, vs->tids,
				   sizeof(ItemPointerData) * vs->ntids);
			pmhash_unlock_segment(idx, segno);
			*remaining += chain_remaining + pending_live;
			return 0;
		}

		/*
		 * The record reaches the disk before the deletions reach the pool:
		 * a crash in between would leave the pool without the entries and
		 * the WAL without the record, and a standby with entries the next
		 * VACUUM never deletes (it finds nothing here), whose heap slots
		 * then take other rows.
		 */
		XLogFlush(end);
	}
	got = pmhash_vacuum_pending(idx, segno, pmhash_vac_dead, vs, remaining);
	if (ndead > 0 &&
		pmh_delete_chain(&idx->local->pool, &idx->cb, segno, vs->dead, nsegs) != 0)
		pmhash_report_io_error(idx->rel, "persist deletion in");
	pmhash_unlock_segment(idx, segno);
	*remaining += chain_remaining;
	got += ndead;
	if (got > 0)
		pg_atomic_fetch_sub_u64(&idx->shared->entries, got);
	return got;
}

/*
 * The first hash past a segment's range, or 0 when the range ends the
 * hash space.
 */
static uint64
pmhash_vacuum_next(uint64 word)
{
	uint64		lo;
	uint64		hi;

	pmh_segword_range(word, &lo, &hi);
	return hi == PG_UINT64_MAX ? 0 : hi + 1;
}

/*
 * The end of the WAL inserted so far, as XLogFlush accepts it.  The insert
 * position right at a page boundary points past the header of a page that
 * holds nothing yet, and XLogFlush fails ("xlog flush request ... is not
 * satisfied") for a position it cannot write up to: back off to the end of
 * the previous page.
 */
static XLogRecPtr
pmhash_wal_inserted_end(void)
{
	XLogRecPtr	ptr = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(ptr, wal_segment_size) == SizeOfXLogLongPHD)
		ptr -= SizeOfXLogLongPHD;
	else if (ptr % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		ptr -= SizeOfXLogShortPHD;
	return ptr;
}

/*
 * The second half of a batch of a logged bulk delete: flush the WAL past
 * its records, then remove the entries they name as their redo does, by
 * range and TID (wherever splits have moved them since they were judged;
 * dead TIDs get no new entries while VACUUM runs).  Frees the records'
 * TIDs; returns the entries removed.
 */
static uint64
pmhash_vacuum_apply(Relation index, PmhashVacLogged *batch, int n)
{
	uint64		removed = 0;
	int			i;

	XLogFlush(pmhash_wal_inserted_end());
	for (i = 0; i < n; i++)
	{
		PmhashIndex idx;

		vacuum_delay_point();
		pmhash_attach(index, LW_SHARED, &idx);
		removed += pmhash_vacuum_redo(&idx, batch[i].lo, batch[i].hi,
									  &batch[i].dead);
		pmhash_detach(&idx);
		pfree(batch[i].dead.tids);
	}
	return removed;
}

/*
 * ambulkdelete: remove the entries whose TIDs the callback reports dead,
 * and count the rest.  An index that is WAL-logged is done in batches: a
 * pass judges up to PMHASH_VACUUM_BATCH_RECORDS segments and logs each
 * one's dead TIDs without removing them, the WAL is flushed once, and then
 * the records are carried out (pmhash_vacuum_apply).  A record must be on
 * disk before its deletions reach the pool (see pmhash_vacuum_segment),
 * and one flush per segment doubled the time of a VACUUM.
 */
IndexBulkDeleteResult *
pmhashbulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				 IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	uint64		pos = 0;
	uint64		removed = 0;
	uint64		remaining = 0;
	uint64		segments = 0;
	PmhashVacCleanup cleanup;
	PmhashVacState vs;
	PmhashVacLogged *batch = NULL;
	int			nbatch = 0;
	int			batch_tids = 0;

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	/*
	 * The deletions below are persistent at once.  Make sure the WAL that
	 * made these tuples dead (a commit written with synchronous_commit =
	 * off, say) is on disk first, or a crash could bring the rows back
	 * without their entries.
	 */
	XLogFlush(pmhash_wal_inserted_end());

	vs.callback = callback;
	vs.callback_state = callback_state;
	vs.heap = table_open(index->rd_index->indrelid, NoLock);
	vs.nblocks = RelationGetNumberOfBlocks(vs.heap);
	vs.deadsegs = 4;
	vs.dead = palloc(sizeof(uint16) * PMH_SEG_BUCKETS * vs.deadsegs);
	vs.wal = pmhash_xlog_wanted(index);
	vs.tidcap = 256;
	vs.tids = palloc(sizeof(ItemPointerData) * vs.tidcap);
	if (vs.wal)
		batch = palloc(sizeof(PmhashVacLogged) * PMHASH_VACUUM_BATCH_RECORDS);

	/* released backup-log copies must not outlive what we delete */
	{
		PmhashIndex idx;

		pmhash_attach(index, LW_SHARED, &idx);
		pmhash_log_vacuum_begin(&idx);
		cleanup.shared = idx.shared;
		cleanup.generation = idx.shared->generation;
		pmhash_detach(&idx);
	}

	/*
	 * Counted begun before the first deletion, and ended by the clean-up
	 * whatever happens after this (see pmhash_hint_allowed)
	 */
	pg_atomic_fetch_add_u64(&cleanup.shared->vacuums_begun, 1);
	PG_ENSURE_ERROR_CLEANUP(pmhash_vacuum_log_end, PointerGetDatum(&cleanup));
	{
	for (;;)
	{
		PmhashIndex idx;
		uint64		word;
		PmhashVacLogged *slot = NULL;

		vacuum_delay_point();

		if (vs.wal)
			slot = &batch[nbatch];
		pmhash_attach(index, LW_SHARED, &idx);
		removed += pmhash_vacuum_segment(&idx, pos, &vs, &remaining, &word,
										 slot);
		pmhash_detach(&idx);
		segments++;
		if (slot != NULL && slot->dead.n > 0)
		{
			nbatch++;
			batch_tids += slot->dead.n;
		}

		/* next range: just past this segment's prefix */
		pos = pmhash_vacuum_next(word);
		if (nbatch > 0 &&
			(pos == 0 || nbatch == PMHASH_VACUUM_BATCH_RECORDS ||
			 batch_tids >= PMHASH_VACUUM_BATCH_TIDS))
		{
			removed += pmhash_vacuum_apply(index, batch, nbatch);
			nbatch = 0;
			batch_tids = 0;
		}
		if (pos == 0)
			break;				/* the last range is done */
	}
	}
	PG_END_ENSURE_ERROR_CLEANUP(pmhash_vacuum_log_end, PointerGetDatum(&cleanup));
	pmhash_vacuum_log_end(0, PointerGetDatum(&cleanup));

	table_close(vs.heap, NoLock);
	pfree(vs.dead);
	pfree(vs.tids);
	if (batch != NULL)
		pfree(batch);

	stats->tuples_removed += (double) removed;
	stats->num_index_tuples = (double) remaining;
	stats->num_pages = RelationGetNumberOfBlocks(index);
	stats->estimated_count = false;
	return stats;
}

/*
 * amvacuumcleanup: report the number of entries when no bulk delete ran
 * (the counter in shared memory is exact once every segment is loaded).
 */
IndexBulkDeleteResult *
pmhashvacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	PmhashIndex idx;

	if (info->analyze_only)
		return stats;

	if (stats == NULL)
	{
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));
		pmhash_attach(info->index, LW_SHARED, &idx);
		/* the counter covers the segments loaded since the restart */
		pmhash_load_all(&idx, true);
		stats->num_index_tuples = (double) pg_atomic_read_u64(&idx.shared->entries);
		pmhash_detach(&idx);
		stats->num_pages = RelationGetNumberOfBlocks(info->index);
		stats->estimated_count = false;
	}
	return stats;
}

/* redo's judge: is the TID among the record's (sorted) dead TIDs? */
static bool
pmhash_redo_tid_dead(ItemPointer tid, void *state)
{
	return pmhash_tid_set_has((const PmhashTidSet *) state, tid);
}

/*
 * Redo of a DELETE record: remove every entry whose TID is among the
 * record's dead TIDs from the segments that cover hashes lo..hi (the
 * primary's segment; this server's may be shaped differently), as
 * ambulkdelete did.  Entries already gone are simply not found, so a
 * replay twice removes nothing more.  The caller holds the index lock
 * shared and has started VACUUM's backup-log clearing.
 */
uint64
pmhash_vacuum_redo(PmhashIndex *idx, uint64 lo, uint64 hi,
				   PmhashTidSet *dead)
{
	PmhashVacState vs;
	uint64		pos = lo;
	uint64		remaining = 0;
	uint64		removed = 0;

	memset(&vs, 0, sizeof(vs));
	vs.callback = pmhash_redo_tid_dead;
	vs.callback_state = dead;
	vs.deadsegs = 4;
	vs.dead = palloc(sizeof(uint16) * PMH_SEG_BUCKETS * vs.deadsegs);
	for (;;)
	{
		uint64		word;

		removed += pmhash_vacuum_segment(idx, pos, &vs, &remaining, &word,
										 NULL);
		pos = pmhash_vacuum_next(word);
		if (pos == 0 || pos > hi)
			break;
	}
	pfree(vs.dead);
	return removed;
}
