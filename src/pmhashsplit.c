/*-------------------------------------------------------------------------
 *
 * pmhashsplit.c
 *	  Segments: growth, splits and overflow chains.
 *
 * When a primary segment and its overflow chain have no room for an entry,
 * the core's placement says what makes room: a split of the segment
 * (pmhash_split_segment) or one more overflow segment
 * (pmhash_add_overflow_segment).  Both run the core's failure-atomic
 * operation (pmh_split, pmh_add_overflow) and then bring the shared state
 * up to date: the directory, the counts of primaries and overflows.  The
 * segments they take come from the free stack, which
 * pmhash_reserve_segments fills first (growing the pool file and the
 * shared arrays), so that the operation itself cannot fail for lack of
 * space.  Both hold the index lock exclusively; a split that needs
 * neither a larger directory nor a larger pool can instead run under the
 * segment's own lock (pmhash_split_segment_shared).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/rel.h"

#include "pmhash.h"

static void pmhash_check_free_top(PmhashIndex *idx, int nsegs);

/* core callback: pop a free segment (never grows: see reserve) */
uint32
pmhash_cb_alloc_segment(void *arg)
{
	PmhashIndex *idx = (PmhashIndex *) arg;
	PmhashShared *shared = idx->shared;
	uint32	   *stack;
	uint32		segno;

	if (shared->nfree == 0)
		return PMH_NO_SEGMENT;
	stack = pmhash_dsa_address(shared->freesegs);
	shared->nfree--;
	/* pushed back later, this position holds a segment known to be zero */
	if (shared->free_unchecked > shared->nfree)
		shared->free_unchecked = shared->nfree;
	segno = stack[shared->nfree];
	pmh_meta_reset(pmhash_seg_meta(idx, segno), 0);
	pmhash_seg_slot(idx, segno)->meta_valid = true;
	return segno;
}

/*
 * Prepare, under the exclusive index lock, for an operation that takes up
 * to nsegs free segments: grow the pool file and the shared arrays first,
 * so that the operation itself cannot fail for lack of space.
 */
void
pmhash_reserve_segments(PmhashIndex *idx, int nsegs)
{
	PmhashShared *shared = idx->shared;
	uint64		grow;

	Assert(idx->mode == LW_EXCLUSIVE);
	if (shared->nfree < (uint32) nsegs)
	{
		grow = Max((uint64) nsegs + 15, shared->nsegments / 2);
		grow = Min(grow, Max((uint64) nsegs, 65536));

		/*
		 * Lookups without the index lock go on while the file grows (an
		 * fallocate and an fsync of up to 1 GB): nothing they read changes
		 * meanwhile, as every operation under the lock exclusive reserves
		 * its segments here before it changes anything, and the lock
		 * holds off all writers.  So the index's version is even during
		 * the growth, and odd again before the shared arrays change.
		 */
		pmh_version_write_end(&shared->ixversion);
		pmhash_pool_grow(idx->rel, idx->local, shared->nsegments + grow);
		pmh_version_write_begin(&shared->ixversion);
		pmhash_extend_shared(shared, shared->nsegments + grow);
	}
	pmhash_check_free_top(idx, nsegs);
}

/*
 * Make sure the nsegs segments on top of the free stack are zero on the
 * media (see pmh_prepare_free_segment): those left by the last load were
 * not checked yet.  Index lock exclusive, or shared with the free lock.
 */
static void
pmhash_check_free_top(PmhashIndex *idx, int nsegs)
{
	PmhashShared *shared = idx->shared;
	uint32	   *stack = pmhash_dsa_address(shared->freesegs);
	uint32		p;

	Assert(shared->nfree >= (uint32) nsegs);
	for (p = shared->nfree - (uint32) nsegs; p < shared->nfree; p++)
	{
		if (p >= shared->free_unchecked)
			break;
		if (pmh_prepare_free_segment(&idx->local->pool, stack[p]) < 0)
			pmhash_report_io_error(idx->rel, "zero a free segment of");
	}
	shared->free_unchecked = Min(shared->free_unchecked,
								 shared->nfree - (uint32) nsegs);
}

/*
 * Double the directory ahead of a split of a segment at the global depth,
 * so that nothing after the split's publish can fail.
 */
static void
pmhash_prepare_directory(PmhashIndex *idx, uint32 segno)
{
	PmhashShared *shared = idx->shared;
	int			depth = pmh_segword_depth(pmhash_seg_meta(idx, segno)->word);
	dsa_pointer newdir;

	if (depth < shared->global_depth)
		return;
	if (shared->global_depth >= PMH_MAX_DEPTH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("pmhash index \"%s\" cannot grow its directory further",
						RelationGetRelationName(idx->rel))));
	newdir = pmhash_shared_alloc(shared,
							  sizeof(uint32) * ((size_t) 2 << shared->global_depth));
	pmh_dir_double(pmhash_dsa_address(shared->dir),
				   shared->global_depth,
				   pmhash_dsa_address(newdir));
	/* lookups without the lock may be reading the old directory */
	pmhash_readers_wait();
	pmhash_shared_free(shared, shared->dir,
					sizeof(uint32) * ((size_t) 1 << shared->global_depth));
	shared->dir = newdir;
	shared->global_depth++;
}

/*
 * Split primary segment segno: reserve space, then run the core's
 * failure-atomic split in a critical section, then point the directory at
 * both halves.  Index lock exclusive.
 */
void
pmhash_split_segment(PmhashIndex *idx, uint32 segno)
{
	PmhashShared *shared = idx->shared;
	uint32		newseg;
	uint32	   *dir;
	uint32		before;

	Assert(pmhash_seg_slot(idx, segno)->loaded);
	pmhash_reserve_segments(idx, pmh_segments_needed_for_split(&idx->cb, segno));
	pmhash_prepare_directory(idx, segno);

	before = shared->nfree;
	START_CRIT_SECTION();
	if (pmh_split(&idx->local->pool, &idx->cb, segno, &newseg) != 0)
		pmhash_report_io_error(idx->rel, "split segment in");
	dir = pmhash_dsa_address(shared->dir);
	pmh_dir_assign(dir, shared->global_depth,
				   pmhash_seg_meta(idx, segno)->word, segno);
	pmh_dir_assign(dir, shared->global_depth,
				   pmhash_seg_meta(idx, newseg)->word, newseg);
	shared->primaries++;
	shared->overflows += before - shared->nfree - 1;
	END_CRIT_SECTION();
}

/*
 * Split primary segment segno with the index lock shared and only the
 * segment's own lock (held exclusively), as CCEH and Dash split, so that
 * other backends go on inserting into and reading other segments.  That
 * takes a directory that need not double, free segments that need no
 * growth of the pool, and no blocked segment load; without them this
 * changes nothing and returns false, and the caller splits with the index
 * lock exclusive (pmhash_split_segment).  Returns true once split.
 *
 * The free segments are taken under the free lock.  The split itself is
 * the same failure-atomic pmh_split; the new half and its chain are
 * reachable by nobody until the directory names the new half, which
 * happens after a write barrier and under the new half's lock, and this
 * backend does not touch them after that.  The old half's entries keep
 * naming it; its word, changed under its lock, tells a reader that read
 * the directory before the split that the hash moved (pmhash_lock_hash,
 * pmhash_lookup_optimistic).
 */
bool
pmhash_split_segment_shared(PmhashIndex *idx, uint32 segno)
{
	PmhashShared *shared = idx->shared;
	uint32		seg[PMH_SPLIT_RESERVE_MAX];
	uint32	   *stack;
	uint32		newseg;
	int			need;
	int			left;
	int			i;

	Assert(idx->mode == LW_SHARED && pmhash_seg_slot(idx, segno)->loaded);
	if (shared->load_blocked ||
		pmh_segword_depth(pmhash_seg_meta(idx, segno)->word) >=
		shared->global_depth)
		return false;
	need = pmh_segments_needed_for_split(&idx->cb, segno);
	/* (a longer chain splits with the whole index) */
	if (need > PMH_SPLIT_RESERVE_MAX)
		return false;

	pmhash_lock_short(&shared->freelock);
	if (shared->nfree < (uint32) need)
	{
		LWLockRelease(&shared->freelock);
		return false;
	}
	pmhash_check_free_top(idx, need);
	stack = pmhash_dsa_address(shared->freesegs);
	shared->nfree -= (uint32) need;
	memcpy(seg, stack + shared->nfree, sizeof(uint32) * need);
	LWLockRelease(&shared->freelock);

	START_CRIT_SECTION();
	left = need;
	if (pmh_split_reserved(&idx->local->pool, &idx->cb, segno, seg, &left,
						   &newseg) != 0)
		pmhash_report_io_error(idx->rel, "split segment in");
	/* (reachable by nobody before the directory names the new half) */
	for (i = left; i < need; i++)
		pmhash_seg_slot(idx, seg[i])->meta_valid = true;

	/*
	 * Publish the new half.  Its lock is held across the directory stores:
	 * a backend that finds one of them early must not split the new half
	 * (and publish a half of its own) before the rest are stored, or this
	 * loop would overwrite that publication.  Nobody can wait for the lock
	 * yet, so taking it cannot deadlock.
	 */
	pmhash_seg_acquire(pmhash_seg_slot(idx, newseg),
					   pmhash_seg_meta(idx, newseg), LW_EXCLUSIVE);
	pg_write_barrier();
	pmh_dir_assign(pmhash_dsa_address(shared->dir), shared->global_depth,
				   pmhash_seg_meta(idx, newseg)->word, newseg);
	pmhash_seg_release(pmhash_seg_slot(idx, newseg),
					   pmhash_seg_meta(idx, newseg));

	/* give back what the split did not take, in the order it was taken */
	pmhash_lock_short(&shared->freelock);
	stack = pmhash_dsa_address(shared->freesegs);
	for (i = 0; i < left; i++)
		stack[shared->nfree++] = seg[i];
	shared->primaries++;
	shared->overflows += (uint64) (need - left - 1);
	LWLockRelease(&shared->freelock);
	END_CRIT_SECTION();
	elog(DEBUG2, "pmhash index \"%s\": split segment %u into %u under the segment lock",
		 RelationGetRelationName(idx->rel), segno, newseg);
	return true;
}

/*
 * Give primary segment segno one more (empty) overflow segment.  Index
 * lock exclusive.
 */
void
pmhash_add_overflow_segment(PmhashIndex *idx, uint32 segno)
{
	uint32		newseg;

	pmhash_reserve_segments(idx, 1);
	newseg = pmhash_cb_alloc_segment(idx);
	START_CRIT_SECTION();
	if (pmh_add_overflow(&idx->local->pool, &idx->cb, segno, newseg) != 0)
		pmhash_report_io_error(idx->rel, "extend overflow chain in");
	idx->shared->overflows++;
	END_CRIT_SECTION();
}
