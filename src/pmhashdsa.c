/*-------------------------------------------------------------------------
 *
 * pmhashdsa.c
 *	  pmhash's DSA area: allocating and freeing an index's shared memory,
 *	  growing the area past its place into dynamic shared memory, and
 *	  mapping what it grew into.
 *
 * The area starts in place in the main shared memory (pmhash.shared_memory,
 * set up by pmhashshmem.c) and grows into DSM segments up to
 * pmhash.max_shared_memory.  Mapping a DSM segment can fail and allocates
 * backend memory, which neither a critical section nor a lookup without the
 * lock may do: allocations are counted per segment, a segment's first
 * allocation announces it, and every index-lock holder and lookup maps what
 * was announced first (see "Growth" in README.pmhash).
 *
 * Also here: an index's shared state freed whole, and its per-segment
 * arrays grown (pmhash_free_shared, pmhash_extend_shared).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "miscadmin.h"
#include "storage/shmem.h"

#include "pmhash.h"

/*
 * The area's segments beyond the place: how many pmhash allocations each
 * holds (a segment with one cannot be freed by the area), and a count of
 * segments that gained their first, which tells backends to map them
 * (pmhash_dsa_map_segments).  The counts change, with the free that may let
 * the area give a segment back, under pmhash_dsa_free_lock held
 * exclusively; the mapping holds it shared.
 */
typedef struct PmhashDsaControl
{
	pg_atomic_uint32 segments_added;
	uint32		segment_allocs[PMHASH_DSA_SEGMENTS];	/* under the lock */
	pg_atomic_uint32 grew;		/* the growth WARNING was given */
	size_t		dsa_limit;		/* the area's size limit as last set */
	int			seg_tranche;	/* of the segments' locks */
} PmhashDsaControl;

static PmhashDsaControl *pmhash_dsa_ctl = NULL;
static LWLock *pmhash_dsa_free_lock = NULL;

size_t		pmhash_dsa_inplace_bytes = 0;
pg_atomic_uint32 *pmhash_dsa_segments_added = NULL;
uint32		pmhash_dsa_segments_seen = 0;

/* the area's size limit this backend set last (pmhash_shared_alloc) */
static size_t pmhash_dsa_limit_here = 0;

static size_t pmhash_dsa_limit(void);

/* shared memory of the growth bookkeeping */
Size
pmhash_dsa_shmem_size(void)
{
	return MAXALIGN(sizeof(PmhashDsaControl));
}

/*
 * Set up the growth bookkeeping (shmem startup, after the area was created
 * in place as pm_area, when it was): the area's size limit, the segments'
 * lock tranche, the free lock.
 */
void
pmhash_dsa_shmem_init(dsa_area *pm_area, int seg_tranche, LWLock *free_lock)
{
	bool		found;

	pmhash_dsa_ctl = ShmemInitStruct("pmhash dsa growth",
									 sizeof(PmhashDsaControl), &found);
	if (!found)
	{
		pg_atomic_init_u32(&pmhash_dsa_ctl->segments_added, 0);
		for (int i = 0; i < PMHASH_DSA_SEGMENTS; i++)
			pmhash_dsa_ctl->segment_allocs[i] = 0;
		pg_atomic_init_u32(&pmhash_dsa_ctl->grew, 0);
		pmhash_dsa_ctl->seg_tranche = seg_tranche;
		pmhash_dsa_ctl->dsa_limit = pmhash_dsa_limit();
		dsa_set_size_limit(pm_area, pmhash_dsa_ctl->dsa_limit);
	}
	pmhash_dsa_inplace_bytes = pmhash_dsa_size();
	pmhash_dsa_segments_added = &pmhash_dsa_ctl->segments_added;
	pmhash_dsa_free_lock = free_lock;
}

/* a backend attached to the area: the limit it has set is the shared one */
void
pmhash_dsa_backend_init(void)
{
	pmhash_dsa_limit_here = pmhash_dsa_ctl->dsa_limit;
}

/* size of the DSA area's place in the main shared memory, from the GUC */
size_t
pmhash_dsa_size(void)
{
	return (size_t) pmhash_shared_memory_mb * 1024 * 1024;
}

/*
 * The size the DSA area may grow to, from pmhash.max_shared_memory: by
 * default (-1) a quarter of the machine's physical memory, never less than
 * the place.
 */
static size_t
pmhash_dsa_limit(void)
{
	size_t		limit;

	if (pmhash_max_shared_memory_mb >= 0)
		limit = (size_t) pmhash_max_shared_memory_mb * 1024 * 1024;
	else
	{
		static size_t quarter = 0;

		if (quarter == 0)
		{
			long		pages = sysconf(_SC_PHYS_PAGES);
			long		pagesize = sysconf(_SC_PAGESIZE);

			quarter = (pages > 0 && pagesize > 0) ?
				(size_t) pages * (size_t) pagesize / 4 : 1;
		}
		limit = quarter;
	}
	return Max(limit, pmhash_dsa_size());
}

/* the area segment a dsa_pointer is in (0: the place) */
static inline uint32
pmhash_dsa_segment(dsa_pointer dp)
{
	return (uint32) (dp >> PMHASH_DSA_OFFSET_WIDTH);
}

/* error context of an allocation that makes the area grow */
static void
pmhash_alloc_context(void *arg)
{
	errcontext("growing pmhash shared memory beyond pmhash.shared_memory (%d MB)",
			   pmhash_shared_memory_mb);
}

/*
 * Allocate DSA memory for an index, zeroed or not, or fail with a clear
 * ERROR.  Past the place in the main shared memory the area grows
 * into dynamic shared memory up to pmhash.max_shared_memory; the first
 * time it does, a WARNING says so.
 */
static dsa_pointer
pmhash_shared_alloc_extended(PmhashShared *shared, size_t size, bool zero)
{
	dsa_pointer dp;
	size_t		limit = pmhash_dsa_limit();
	ErrorContextCallback errctx;
	uint32		seg;

	/*
	 * A reload changed the limit: set it once, when this backend sees the
	 * change (a backend that has not read the new setting yet must not
	 * put the old one back)
	 */
	if (limit != pmhash_dsa_limit_here)
	{
		dsa_set_size_limit(pmhash_area, limit);
		pmhash_dsa_ctl->dsa_limit = limit;
		pmhash_dsa_limit_here = limit;
	}
	errctx.callback = pmhash_alloc_context;
	errctx.arg = NULL;
	errctx.previous = error_context_stack;
	error_context_stack = &errctx;
	dp = dsa_allocate_extended(pmhash_area, size,
							   DSA_ALLOC_NO_OOM | DSA_ALLOC_HUGE |
							   (zero ? DSA_ALLOC_ZERO : 0));
	error_context_stack = errctx.previous;
	if (!DsaPointerIsValid(dp))
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of pmhash shared memory"),
				 errdetail("Failed on request of size %zu for an index with %llu segments; pmhash may use %zu MB of shared memory.",
						   size, (unsigned long long) shared->nsegments,
						   limit / (1024 * 1024)),
				 errhint("Increase pmhash.max_shared_memory and reload the configuration.")));
	shared->shmem_bytes += size;

	seg = pmhash_dsa_segment(dp);
	if (seg != 0)
	{
		Assert(seg < PMHASH_DSA_SEGMENTS);

		/*
		 * The first allocation in a segment announces it, in one step with
		 * the count: a backend that counted a later one cannot publish its
		 * memory before the announcement.
		 */
		LWLockAcquire(pmhash_dsa_free_lock, LW_EXCLUSIVE);
		if (pmhash_dsa_ctl->segment_allocs[seg]++ == 0)
			pg_atomic_fetch_add_u32(&pmhash_dsa_ctl->segments_added, 1);
		LWLockRelease(pmhash_dsa_free_lock);
		if (pg_atomic_read_u32(&pmhash_dsa_ctl->grew) == 0 &&
			pg_atomic_exchange_u32(&pmhash_dsa_ctl->grew, 1) == 0)
			ereport(WARNING,
					(errmsg("pmhash shared memory grew beyond pmhash.shared_memory"),
					 errdetail("The %d MB set aside at server start had no room for a request of %zu bytes; "
							   "pmhash now takes dynamic shared memory, up to %zu MB in all (pmhash.max_shared_memory).",
							   pmhash_shared_memory_mb, size, limit / (1024 * 1024)),
					 errhint("Set pmhash.shared_memory higher at the next restart; see \"Sizing\" in pmhash's README.")));
	}
	return dp;
}

/* allocate zeroed DSA memory for an index, or fail with a clear ERROR */
dsa_pointer
pmhash_shared_alloc(PmhashShared *shared, size_t size)
{
	return pmhash_shared_alloc_extended(shared, size, true);
}

/* free a DSA allocation of known size held by an index */
void
pmhash_shared_free(PmhashShared *shared, dsa_pointer dp, size_t size)
{
	uint32		seg;

	if (!DsaPointerIsValid(dp))
		return;
	seg = pmhash_dsa_segment(dp);
	if (seg == 0)
		dsa_free(pmhash_area, dp);
	else
	{
		/*
		 * The segment may go away: not while someone maps the segments,
		 * and uncounted in the same hold of the lock, so that a new segment
		 * that takes its number counts from zero.  Uncounted after the free:
		 * a free that fails leaves its allocation counted, and the segment
		 * mapped by those who map what holds pmhash memory.
		 */
		LWLockAcquire(pmhash_dsa_free_lock, LW_EXCLUSIVE);
		Assert(pmhash_dsa_ctl->segment_allocs[seg] > 0);
		dsa_free(pmhash_area, dp);
		pmhash_dsa_ctl->segment_allocs[seg]--;
		LWLockRelease(pmhash_dsa_free_lock);
	}
	shared->shmem_bytes -= size;
}

/*
 * The address of DSA memory outside the area's place (pmhash_dsa_address):
 * dsa_get_address maps the segment in this backend if need be.
 */
void *
pmhash_dsa_address_slow(dsa_pointer dp)
{
	if (!pmhash_backend_attached())
		pmhash_backend_init();
	return dsa_get_address(pmhash_area, dp);
}

/*
 * Map every segment of the area that holds pmhash memory.  Mapping one
 * can fail, and allocates backend memory, which neither a critical section
 * nor a lookup without the lock may do: so every holder of an index lock
 * maps what the area gained since this backend last looked
 * (pmhash_index_lock), as does a lookup before it starts, and nothing
 * inside meets an unmapped segment.  A segment that holds an allocation
 * cannot be freed, and frees wait for pmhash_dsa_free_lock.
 */
void
pmhash_dsa_map_segments(void)
{
	uint32		added;
	int			i;

	if (pmhash_dsa_ctl == NULL)
		return;
	added = pg_atomic_read_u32(&pmhash_dsa_ctl->segments_added);
	pg_read_barrier();
	if (added == pmhash_dsa_segments_seen && pmhash_backend_attached())
		return;					/* nothing new (the usual case) */
	if (!pmhash_backend_attached())
		pmhash_backend_init();
	LWLockAcquire(pmhash_dsa_free_lock, LW_SHARED);
	for (i = 1; i < PMHASH_DSA_SEGMENTS; i++)
		if (pmhash_dsa_ctl->segment_allocs[i] > 0)
			(void) dsa_get_address(pmhash_area,
								   (dsa_pointer) i << PMHASH_DSA_OFFSET_WIDTH);
	LWLockRelease(pmhash_dsa_free_lock);
	pmhash_dsa_segments_seen = added;
}

/* an index's shared state with nothing loaded (DSA memory not touched) */
void
pmhash_clear_shared(PmhashShared *shared)
{
	shared->state = PMHASH_STATE_EMPTY;
	shared->chunks = InvalidDsaPointer;
	shared->dir = InvalidDsaPointer;
	shared->freesegs = InvalidDsaPointer;
	shared->logchunks = InvalidDsaPointer;
	shared->logexts = InvalidDsaPointer;
	shared->logcap = 0;
	shared->logold = InvalidDsaPointer;
	shared->log.nexts = 0;
	shared->nchunks = 0;
	shared->chunkcap = 0;
	shared->nfree = 0;
	shared->freecap = 0;
	shared->nsegments = 0;
	shared->global_depth = 0;
	shared->primaries = 0;
	shared->overflows = 0;
	shared->free_unchecked = 0;
	shared->reclist = InvalidDsaPointer;
	shared->reclen = 0;
	shared->log_unverified = 0;
	shared->load_blocked = false;
	shared->all_loaded = false;
	shared->blocked_segno = 0;
	/* set by the load from the pool's state, or by pmhash_attach_new */
	shared->stale = false;
	pg_atomic_write_u64(&shared->unloaded, 0);
}

/*
 * Release everything an index holds in the DSA area.  The caller holds the
 * index lock exclusively (or no backend can use the index any more), so no
 * lookup starts on what is freed; those under way are waited for.
 */
void
pmhash_free_shared(PmhashShared *shared)
{
	if (DsaPointerIsValid(shared->chunks) || DsaPointerIsValid(shared->dir))
		pmhash_readers_wait();

	/*
	 * Not loaded from here on: if a free fails half way (an ERROR mapping a
	 * DSM segment), the index lock is let go with the pointers partly
	 * forgotten, and no reader, with the lock or without, may take them for
	 * a loaded index's; the next user loads it again (and the rest leaks).
	 */
	shared->state = PMHASH_STATE_EMPTY;
	if (DsaPointerIsValid(shared->chunks))
	{
		dsa_pointer *chunks = pmhash_dsa_address(shared->chunks);
		uint32		i;

		dsa_pointer dp;

		/*
		 * Each pointer is forgotten before its memory is freed: after a
		 * failure half way (mapping a DSM segment can fail) a later call
		 * leaks the rest rather than freeing anything twice.
		 */
		for (i = 0; i < shared->nchunks; i++)
		{
			dp = chunks[i];
			chunks[i] = InvalidDsaPointer;
			pmhash_shared_free(shared, dp, pmhash_chunk_bytes(i));
		}
		dp = shared->chunks;
		shared->chunks = InvalidDsaPointer;
		pmhash_shared_free(shared, dp, sizeof(dsa_pointer) * shared->chunkcap);
	}
	if (DsaPointerIsValid(shared->dir))
	{
		dsa_pointer dp = shared->dir;

		shared->dir = InvalidDsaPointer;
		pmhash_shared_free(shared, dp,
						sizeof(uint32) * ((size_t) 1 << shared->global_depth));
	}
	if (DsaPointerIsValid(shared->freesegs))
	{
		dsa_pointer dp = shared->freesegs;

		shared->freesegs = InvalidDsaPointer;
		pmhash_shared_free(shared, dp, sizeof(uint32) * shared->freecap);
	}
	pmhash_log_free_shared(shared);
	pmhash_recover_free_list(shared);

	/*
	 * Everything the index held is given back now; a count left over is a
	 * leak (or a free of the wrong size) somewhere in pmhash: say so in the
	 * server log, where the tests look for it.
	 */
	if (shared->shmem_bytes != 0)
	{
		elog(LOG, "pmhash index storage %u/%u/%u freed its shared state with %llu bytes unaccounted for",
			 shared->key.spcid, shared->key.dbid, shared->key.relnode,
			 (unsigned long long) shared->shmem_bytes);
		shared->shmem_bytes = 0;	/* (said once) */
	}
	pmhash_clear_shared(shared);
	pg_atomic_write_u64(&shared->entries, 0);
}

/*
 * Make room for nsegments segments in the shared arrays: the chunk table,
 * the chunks themselves, and the free stack.  New segments are pushed on
 * the free stack.  Called with the index lock held exclusively.
 */
void
pmhash_extend_shared(PmhashShared *shared, uint64 nsegments)
{
	uint32		nchunks = pmhash_chunks_for(nsegments);
	uint64		old = shared->nsegments;
	dsa_pointer *chunks;
	uint32	   *stack;
	uint64		i;

	if (nchunks > shared->chunkcap)
	{
		uint32		cap = Max(nchunks, shared->chunkcap * 2);
		dsa_pointer newchunks = pmhash_shared_alloc(shared,
												 sizeof(dsa_pointer) * cap);
		dsa_pointer *nc = pmhash_dsa_address(newchunks);

		for (i = 0; i < cap; i++)
			nc[i] = InvalidDsaPointer;
		if (DsaPointerIsValid(shared->chunks))
		{
			memcpy(nc, pmhash_dsa_address(shared->chunks),
				   sizeof(dsa_pointer) * shared->nchunks);
			/* lookups without the lock may be reading the old table */
			pmhash_readers_wait();
			pmhash_shared_free(shared, shared->chunks,
							sizeof(dsa_pointer) * shared->chunkcap);
		}
		shared->chunks = newchunks;
		shared->chunkcap = cap;
	}
	chunks = pmhash_dsa_address(shared->chunks);
	while (shared->nchunks < nchunks)
	{
		PmhashSegChunk *chunk;
		int			j;

		/*
		 * Not zeroed, and only the slots are written: a free segment's
		 * metadata is reset by whoever takes it (pmh_meta_reset).  Writing
		 * all of every chunk took most of the time to attach a large index
		 * (a page fault per 4 kB of fresh shared memory).
		 */
		chunks[shared->nchunks] =
			pmhash_shared_alloc_extended(shared,
										 pmhash_chunk_bytes(shared->nchunks),
										 false);
		chunk = pmhash_dsa_address(chunks[shared->nchunks]);
		shared->nchunks++;
		for (j = 0; j < PMHASH_CHUNK_SEGS; j++)
		{
			LWLockInitialize(&chunk->slot[j].lock, pmhash_dsa_ctl->seg_tranche);
			chunk->slot[j].loaded = true;
			chunk->slot[j].meta_valid = false;
			chunk->slot[j].rec_first = 0;
			chunk->slot[j].rec_count = 0;
		}
	}

	if (nsegments - old + shared->nfree > shared->freecap)
	{
		uint32		cap = (uint32) Max(nsegments, 16);
		dsa_pointer newstack = pmhash_shared_alloc(shared, sizeof(uint32) * cap);

		if (DsaPointerIsValid(shared->freesegs))
		{
			memcpy(pmhash_dsa_address(newstack),
				   pmhash_dsa_address(shared->freesegs),
				   sizeof(uint32) * shared->nfree);
			pmhash_shared_free(shared, shared->freesegs,
							sizeof(uint32) * shared->freecap);
		}
		shared->freesegs = newstack;
		shared->freecap = cap;
	}

	/* push new segments so that the lowest numbers are handed out first */
	stack = pmhash_dsa_address(shared->freesegs);
	for (i = nsegments; i > old; i--)
		stack[shared->nfree++] = (uint32) (i - 1);
	shared->nsegments = nsegments;
}
