/*-------------------------------------------------------------------------
 *
 * pmhashseglock.c
 *	  Segment locks and optimistic reads.
 *
 * Under the index lock held shared, each primary segment with its
 * overflow chain and D-bucket is guarded by the segment's own lock.
 * pmhash_lock_hash finds the segment that holds a hash in the directory and
 * locks it, reading the directory again when the segment split under its
 * own lock in between (pmhash_split_segment_shared).  The first lock of a
 * segment since the restart loads it (pmhashrecover.c).  With the index
 * lock exclusive no segment lock is taken: nobody else can hold one.
 *
 * A lookup first reads a segment without its lock, and keeps what it
 * found only if the segment's version shows that no writer held or took
 * the lock meanwhile (pmhash_lookup_optimistic).
 *
 * The index's log lock and free lock are held briefly: pmhash_lock_short
 * takes them for writers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "utils/rel.h"

#include "pmhash.h"

/*
 * Lock primary segment segno in mode, loading it first if this is its
 * first use since the restart.  With the index lock exclusive no segment
 * lock is taken (nobody else can hold one).  Returns true with the segment
 * locked and loaded.  Returns false, with nothing locked, when the load
 * needed the index lock exclusively: the structure may have changed, and
 * the caller must look the segment up again (the index lock is held in the
 * caller's mode again).
 */
bool
pmhash_lock_segment(PmhashIndex *idx, uint32 segno, LWLockMode mode)
{
	PmhashShared *shared = idx->shared;
	PmhashSegSlot *slot = pmhash_seg_slot(idx, segno);
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	LWLockMode	entry_mode = idx->mode;

	if (entry_mode == LW_EXCLUSIVE)
	{
		if (likely(!shared->load_blocked || pmhash_loading_tail) &&
			likely(slot->loaded))
			return true;
		pmhash_load_exclusive(idx, segno);
		return false;
	}

	/* "blocked" is set and cleared under the index lock exclusive */
	if (likely(!shared->load_blocked))
	{
		pmhash_seg_acquire(slot, meta, mode);
		if (likely(slot->loaded))
			return true;
		if (mode != LW_EXCLUSIVE)
		{
			pmhash_seg_release(slot, meta);
			pmhash_seg_acquire(slot, meta, LW_EXCLUSIVE);
		}
		if (slot->loaded || pmhash_load_segment_shared(idx, segno, slot))
		{
			if (mode != LW_EXCLUSIVE)
			{
				/* loaded stays loaded while the index lock is held */
				pmhash_seg_release(slot, meta);
				pmhash_seg_acquire(slot, meta, mode);
			}
			return true;
		}
		pmhash_seg_release(slot, meta);
	}

	/* load with the index lock exclusive, then look again */
	pmhash_relock(idx, LW_EXCLUSIVE);
	pmhash_load_exclusive(idx, segno);
	pmhash_relock(idx, entry_mode);
	return false;
}

/* release what pmhash_lock_segment took */
void
pmhash_unlock_segment(PmhashIndex *idx, uint32 segno)
{
	if (idx->mode != LW_EXCLUSIVE)
		pmhash_seg_release(pmhash_seg_slot(idx, segno),
						   pmhash_seg_meta(idx, segno));
}

/*
 * Lock, in mode, the primary segment that holds hash, loading it first if
 * this is its first use since the restart, and return its number (index
 * lock held; in the same mode on return).  The directory may name a
 * segment that split under its own lock after the directory was read and
 * before the segment was locked (pmhash_split_segment_shared): its word,
 * read under the lock, no longer covers the hash, and the directory, which
 * the split updated before letting the segment go, is read again.
 */
uint32
pmhash_lock_hash(PmhashIndex *idx, uint64 hash, LWLockMode mode)
{
	int			moved = 0;

	for (;;)
	{
		uint32		segno = pmhash_lookup_segment(idx, hash);
		uint64		word;

		if (!pmhash_lock_segment(idx, segno, mode))
			continue;
		word = pmhash_seg_meta(idx, segno)->word;
		if (likely(pmh_hash_in_segment(hash, word)))
			return segno;
		pmhash_unlock_segment(idx, segno);
		elog(DEBUG2, "pmhash index \"%s\": segment %u split after the directory was read; reading it again",
			 RelationGetRelationName(idx->rel), segno);

		/*
		 * Each retry follows a split that happened meanwhile, and a hash
		 * can move at most PMH_MAX_DEPTH times: more means a directory
		 * entry that stays wrong, which must not hang the backend (it
		 * holds LWLocks, so it could not be cancelled).
		 */
		if (++moved > 4 * PMH_MAX_DEPTH)
			elog(ERROR, "pmhash index \"%s\": directory entry for hash %016llx names segment %u, which holds depth %d prefix %llx",
				 RelationGetRelationName(idx->rel),
				 (unsigned long long) hash, segno, pmh_segword_depth(word),
				 (unsigned long long) pmh_segword_prefix(word));
	}
}

/*
 * Look hash up in primary segment segno without its lock, with the index
 * lock shared: pmhash_probe_unlocked.  Returns false when that fails, when
 * loads are blocked, and when media reads are counted (each is counted once,
 * under the lock); the caller then looks again under the segment lock
 * (pmhash_lock_hash).
 */
bool
pmhash_lookup_optimistic(PmhashIndex *idx, uint32 segno, uint64 hash,
						 uint64 *tags, int max, int *n)
{
	Assert(idx->mode == LW_SHARED);
	if (idx->local->pool.read_hook != NULL || idx->shared->load_blocked)
		return false;
	return pmhash_probe_unlocked(&idx->local->pool, &idx->cb,
								 idx->shared->all_loaded ? NULL :
								 pmhash_seg_slot(idx, segno),
								 pmhash_seg_meta(idx, segno), segno, hash,
								 tags, max, n);
}

/*
 * Take an LWLock that its holders keep briefly (the index's log lock, its
 * free lock; pmh_writepath.h says how briefly) exclusively.  LWLockAcquire
 * puts a backend that finds the lock taken to sleep at once, and the
 * holder's release wakes it: two context switches, some microseconds, many
 * times what the holder needed.  So try again a few times first, a few
 * spin delays apart (PMH_SHORT_LOCK_TRIES; pmh_writepath.h), and sleep
 * only if the lock is still taken then (its holder may be descheduled).
 */
void
pmhash_lock_short(LWLock *lock)
{
	int			tries;

	for (tries = 0; tries < PMH_SHORT_LOCK_TRIES; tries++)
	{
		int			i;

		if (LWLockConditionalAcquire(lock, LW_EXCLUSIVE))
			return;
		for (i = 0; i < PMH_SHORT_LOCK_DELAYS; i++)
			pg_spin_delay();
	}
	LWLockAcquire(lock, LW_EXCLUSIVE);
}
