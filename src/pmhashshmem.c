/*-------------------------------------------------------------------------
 *
 * pmhashshmem.c
 *	  pmhash's shared memory: setting it up, the DSA area in it, and the
 *	  table of index storages.
 *
 * At server start, and after every crash reinitialisation, the shared
 * memory hooks set up a control block, a DSA area created in place in
 * pmhash's shared memory, and a fixed hash table with one entry
 * (PmhashShared) per index storage; each index's directory, per-segment
 * locks, fingerprints, occupancy bitmaps and backup-log state live in the
 * DSA area.  The area grows past its place into dynamic shared memory
 * segments, up to pmhash.max_shared_memory (see "Shared memory" in
 * README.pmhash).  Everything there is a cache of the pool, rebuilt from it by
 * the first backend that needs an index (pmhash_load, pmhashattach.c).
 *
 * Also here: allocating and freeing an index's DSA memory and growing its
 * per-segment arrays (pmhash_extend_shared); finding, marking unusable and
 * dropping a storage's entry; and this backend's table of pool mappings
 * (PmhashLocal), kept beside the shared table: a mapping is current while
 * its generation matches its shared entry's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/relation.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "pmhash.h"

/* control block in the main shared memory segment */
typedef struct PmhashControl
{
	int			index_tranche;
	int			seg_tranche;
	int			dsa_tranche;
	int			log_tranche;
	int			free_tranche;
	pg_atomic_uint64 next_generation;
	pg_atomic_uint64 drops;		/* counts removed shared entries */
	pg_atomic_uint32 nunusable; /* entries marked unusable: 0 lets the
								 * planner skip looking */
	pg_atomic_uint32 nrebuild;	/* entries whose pool awaits a rebuild */
	size_t		dsa_size;
	char	   *dsa_place;

	/*
	 * The area's segments beyond the place: how many pmhash allocations
	 * each holds (a segment with one cannot be freed by the area), and a
	 * count of segments that gained their first, which tells backends to
	 * map them (pmhash_dsa_map_segments).  The counts change, with the
	 * free that may let the area give a segment back, under
	 * pmhash_dsa_free_lock held exclusively; the mapping holds it shared.
	 */
	pg_atomic_uint32 segments_added;
	uint32		segment_allocs[PMHASH_DSA_SEGMENTS];	/* under the lock */
	pg_atomic_uint32 grew;		/* the growth WARNING was given */
	size_t		dsa_limit;		/* the area's size limit as last set */
} PmhashControl;

static PmhashControl *pmhash_ctl = NULL;
static LWLock *pmhash_htab_lock = NULL;

/* serialises the write-back marks of all pools (pmhashwriteback.c) */
LWLock	   *pmhash_writeback_lock = NULL;

/* serialises frees with pmhash_dsa_map_segments */
static LWLock *pmhash_dsa_free_lock = NULL;

/* serialises pmhash_forget: see there */
static LWLock *pmhash_forget_lock = NULL;
static HTAB *pmhash_htab = NULL;
static dsa_area *pmhash_area = NULL;	/* this backend's attachment */
static dsa_area *pmhash_pm_area = NULL; /* the postmaster's (creator's) */
static HTAB *pmhash_local_htab = NULL;
static pid_t pmhash_area_pid = 0;

/* where the DSA area lives in this process: see pmhash_dsa_address */
char	   *pmhash_dsa_base = NULL;
size_t		pmhash_dsa_inplace_bytes = 0;
pg_atomic_uint32 *pmhash_dsa_segments_added = NULL;
uint32		pmhash_dsa_segments_seen = 0;

static uint64 pmhash_seen_drops = 0;

/* the area's size limit this backend set last (pmhash_shared_alloc) */
static size_t pmhash_dsa_limit_here = 0;

static void pmhash_local_forget(const PmhashKey *key);
static void pmhash_release_lines(int code, Datum arg);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* size of the DSA area's place in the main shared memory, from the GUC */
static size_t
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

/* total shared memory pmhash asks for at startup */
static Size
pmhash_shmem_size(void)
{
	Size		size;

	size = MAXALIGN(sizeof(PmhashControl));
	size = add_size(size, BUFFERALIGN(1));
	size = add_size(size, pmhash_dsa_size());
	size = add_size(size, hash_estimate_size(pmhash_max_indexes,
											 sizeof(PmhashShared)));
	size = add_size(size, pmhash_stats_shmem_size());
	size = add_size(size, pmhash_readers_shmem_size());
	return size;
}

/* shmem_request_hook: reserve our shared memory and the table lock */
static void
pmhash_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(pmhash_shmem_size());
	RequestNamedLWLockTranche("pmhash", 4);
	RequestNamedLWLockTranche(PMHASH_UNIQUE_TRANCHE, PMHASH_UNIQUE_LOCKS);
}

/*
 * shmem_startup_hook: set up the control block, the DSA area and the
 * hash table of index storages.  Runs in the postmaster at start and after
 * every crash reinitialisation, so shared state always starts empty.
 */
static void
pmhash_shmem_startup_hook(void)
{
	bool		found;
	HASHCTL		info;
	char	   *place;
	dsa_pointer dp;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);

	pmhash_ctl = ShmemInitStruct("pmhash control",
								 MAXALIGN(sizeof(PmhashControl)) +
								 BUFFERALIGN(1) + pmhash_dsa_size(),
								 &found);
	place = (char *) BUFFERALIGN((char *) pmhash_ctl +
								 MAXALIGN(sizeof(PmhashControl)));
	if (!found)
	{
		pmhash_ctl->index_tranche = LWLockNewTrancheId();
		pmhash_ctl->seg_tranche = LWLockNewTrancheId();
		pmhash_ctl->dsa_tranche = LWLockNewTrancheId();
		pmhash_ctl->log_tranche = LWLockNewTrancheId();
		pmhash_ctl->free_tranche = LWLockNewTrancheId();
		pg_atomic_init_u64(&pmhash_ctl->next_generation, 1);
		pg_atomic_init_u64(&pmhash_ctl->drops, 0);
		pg_atomic_init_u32(&pmhash_ctl->nunusable, 0);
		pg_atomic_init_u32(&pmhash_ctl->nrebuild, 0);
		pmhash_ctl->dsa_size = pmhash_dsa_size();
		pmhash_ctl->dsa_place = place;
		pg_atomic_init_u32(&pmhash_ctl->segments_added, 0);
		for (int i = 0; i < PMHASH_DSA_SEGMENTS; i++)
			pmhash_ctl->segment_allocs[i] = 0;
		pg_atomic_init_u32(&pmhash_ctl->grew, 0);
		pmhash_pm_area = dsa_create_in_place(place, pmhash_ctl->dsa_size,
											 pmhash_ctl->dsa_tranche, NULL);
		pmhash_ctl->dsa_limit = pmhash_dsa_limit();
		dsa_set_size_limit(pmhash_pm_area, pmhash_ctl->dsa_limit);

		/*
		 * pmhash_dsa_address relies on the area's first segment starting
		 * at the place
		 */
		dp = dsa_allocate(pmhash_pm_area, sizeof(uint64));
		if (dsa_get_address(pmhash_pm_area, dp) != place + dp)
			elog(FATAL, "pmhash: DSA pointers are not offsets from the area's place");
		dsa_free(pmhash_pm_area, dp);
	}
	pmhash_dsa_base = place;
	pmhash_dsa_inplace_bytes = pmhash_ctl->dsa_size;
	pmhash_dsa_segments_added = &pmhash_ctl->segments_added;
	pmhash_htab_lock = &(GetNamedLWLockTranche("pmhash"))[0].lock;
	pmhash_writeback_lock = &(GetNamedLWLockTranche("pmhash"))[1].lock;
	pmhash_dsa_free_lock = &(GetNamedLWLockTranche("pmhash"))[2].lock;
	pmhash_forget_lock = &(GetNamedLWLockTranche("pmhash"))[3].lock;

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(PmhashKey);
	info.entrysize = sizeof(PmhashShared);
	pmhash_htab = ShmemInitHash("pmhash indexes", pmhash_max_indexes,
								pmhash_max_indexes, &info,
								HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	pmhash_stats_shmem_init();
	pmhash_readers_shmem_init();

	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
		pmhash_pool_dir_init();
}

/* install the shared memory hooks (from _PG_init) */
void
pmhash_shmem_request(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = pmhash_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = pmhash_shmem_startup_hook;
}

/*
 * Attach this backend to the DSA area and name the lock tranches (once per
 * backend; nothing to do where pmhash's shared memory does not exist).
 */
void
pmhash_backend_init(void)
{
	HASHCTL		info;
	MemoryContext oldcxt;

	if (pmhash_ctl == NULL ||
		(pmhash_area != NULL && pmhash_area_pid == MyProcPid))
		return;

	LWLockRegisterTranche(pmhash_ctl->index_tranche, "pmhash_index");
	LWLockRegisterTranche(pmhash_ctl->seg_tranche, "pmhash_segment");
	LWLockRegisterTranche(pmhash_ctl->dsa_tranche, "pmhash_dsa");
	LWLockRegisterTranche(pmhash_ctl->log_tranche, "pmhash_log");
	LWLockRegisterTranche(pmhash_ctl->free_tranche, "pmhash_free");
	pmhash_stats_backend_init();

	/* the area's backend-local bookkeeping must outlive this statement */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	pmhash_area = dsa_attach_in_place(pmhash_ctl->dsa_place, NULL);
	MemoryContextSwitchTo(oldcxt);
	dsa_pin_mapping(pmhash_area);
	on_shmem_exit(dsa_on_shmem_exit_release_in_place,
				  PointerGetDatum(pmhash_ctl->dsa_place));
	pmhash_area_pid = MyProcPid;
	pmhash_dsa_limit_here = pmhash_ctl->dsa_limit;
	before_shmem_exit(pmhash_release_lines, (Datum) 0);

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(PmhashKey);
	info.entrysize = sizeof(PmhashLocal);
	info.hcxt = TopMemoryContext;
	pmhash_local_htab = hash_create("pmhash local mappings", 64, &info,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* has this process attached to the DSA area (pmhash_backend_init)? */
bool
pmhash_backend_attached(void)
{
	return pmhash_area_pid == MyProcPid;
}

/*
 * A generation number no index storage's shared state had before: a
 * backend's mapping of a pool is current while its generation matches.
 */
uint64
pmhash_next_generation(void)
{
	return pg_atomic_fetch_add_u64(&pmhash_ctl->next_generation, 1);
}

/*
 * At backend exit: publish this backend's persist traffic, and give up the
 * backup-log lines it appends to, so that other backends can take them
 * once their entries are relocated.
 */
static void
pmhash_release_lines(int code, Datum arg)
{
	HASH_SEQ_STATUS status;
	PmhashLocal *local;

	if (pmhash_local_htab == NULL || pmhash_area_pid != MyProcPid)
		return;
	pmhash_stats_publish_all(true);
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	hash_seq_init(&status, pmhash_local_htab);
	while ((local = hash_seq_search(&status)) != NULL)
	{
		PmhashShared *shared;

		if (local->log_line < 0)
			continue;
		shared = hash_search(pmhash_htab, &local->key, HASH_FIND, NULL);
		if (shared == NULL || shared->generation != local->log_generation ||
			!DsaPointerIsValid(shared->logchunks))
			continue;
		LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
		if (shared->generation == local->log_generation &&
			(uint32) local->log_line < pmhash_log_nlines(shared) &&
			pmhash_log_line_state(shared, local->log_line)->owner == MyProc->pgprocno)
			pmhash_log_disown(shared, local->log_line);
		LWLockRelease(&shared->loglock);
		local->log_line = -1;
	}
	LWLockRelease(pmhash_htab_lock);
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
		pmhash_ctl->dsa_limit = limit;
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
		if (pmhash_ctl->segment_allocs[seg]++ == 0)
			pg_atomic_fetch_add_u32(&pmhash_ctl->segments_added, 1);
		LWLockRelease(pmhash_dsa_free_lock);
		if (pg_atomic_read_u32(&pmhash_ctl->grew) == 0 &&
			pg_atomic_exchange_u32(&pmhash_ctl->grew, 1) == 0)
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
		 * and uncounted first, so that a new segment that takes its number
		 * counts from zero
		 */
		LWLockAcquire(pmhash_dsa_free_lock, LW_EXCLUSIVE);
		Assert(pmhash_ctl->segment_allocs[seg] > 0);
		pmhash_ctl->segment_allocs[seg]--;
		dsa_free(pmhash_area, dp);
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
	if (pmhash_area_pid != MyProcPid)
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

	if (pmhash_ctl == NULL)
		return;
	added = pg_atomic_read_u32(&pmhash_ctl->segments_added);
	pg_read_barrier();
	if (added == pmhash_dsa_segments_seen && pmhash_area_pid == MyProcPid)
		return;					/* nothing new (the usual case) */
	if (pmhash_area_pid != MyProcPid)
		pmhash_backend_init();
	LWLockAcquire(pmhash_dsa_free_lock, LW_SHARED);
	for (i = 1; i < PMHASH_DSA_SEGMENTS; i++)
		if (pmhash_ctl->segment_allocs[i] > 0)
			(void) dsa_get_address(pmhash_area,
								   (dsa_pointer) i << PMHASH_DSA_OFFSET_WIDTH);
	LWLockRelease(pmhash_dsa_free_lock);
	pmhash_dsa_segments_seen = added;
}

/* an index's shared state with nothing loaded (DSA memory not touched) */
static void
pmhash_clear_shared(PmhashShared *shared)
{
	shared->state = PMHASH_STATE_EMPTY;
	shared->chunks = InvalidDsaPointer;
	shared->dir = InvalidDsaPointer;
	shared->freesegs = InvalidDsaPointer;
	shared->logchunks = InvalidDsaPointer;
	shared->logexts = InvalidDsaPointer;
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
	/* set by the load from the pool's state; a new pool is never stale */
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
			LWLockInitialize(&chunk->slot[j].lock, pmhash_ctl->seg_tranche);
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

/* find this backend's mapping entry for a key, creating an empty one */
PmhashLocal *
pmhash_local_entry(const PmhashKey *key)
{
	bool		found;
	PmhashLocal *local;

	local = hash_search(pmhash_local_htab, key, HASH_ENTER, &found);
	if (!found)
	{
		local->generation = 0;
		local->pool_dev = 0;
		local->pool_ino = 0;
		memset(&local->pool, 0, sizeof(local->pool));
		local->log_line = -1;
		local->log_used = 0;
		local->log_generation = 0;
		local->stats_slot = -1;
		local->stats_tag = 0;
		local->stats_pool = 0;
		memset(&local->stats_pending, 0, sizeof(local->stats_pending));
	}
	return local;
}

/* find (or create) the shared entry of an index storage */
PmhashShared *
pmhash_shared_entry(const PmhashKey *key, Oid indexoid)
{
	PmhashShared *shared;
	bool		found;

	shared = pmhash_shared_entry_if_any(key);
	if (shared)
		return shared;

	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	shared = hash_search(pmhash_htab, key, HASH_ENTER_NULL, &found);
	if (shared == NULL)
	{
		LWLockRelease(pmhash_htab_lock);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("too many pmhash indexes in use"),
				 errdetail("pmhash keeps shared state for at most %d index storages.",
						   pmhash_max_indexes),
				 errhint("Increase pmhash.max_indexes and restart the server.")));
	}
	if (!found)
	{
		LWLockInitialize(&shared->lock, pmhash_ctl->index_tranche);
		shared->ixversion = 0;
		LWLockInitialize(&shared->loglock, pmhash_ctl->log_tranche);
		LWLockInitialize(&shared->freelock, pmhash_ctl->free_tranche);
		pg_atomic_init_u64(&shared->entries, 0);
		pg_atomic_init_u64(&shared->unloaded, 0);
		pmhash_clear_shared(shared);
		shared->stats_slot = pmhash_stats_slot_acquire();
		shared->generation = pmhash_next_generation();
		shared->indexoid = indexoid;
		shared->pool_id = 0;
		shared->shmem_bytes = 0;
		shared->unusable = false;
		shared->rebuild = false;
		shared->rebuild_pid = 0;
		shared->rebuild_blocks_total = 0;
		shared->rebuild_blocks_done = 0;
		shared->wb_marked = false;
		shared->wb_sets = 0;
		shared->wb_seen_activity = 0;
		shared->wb_seen_at = 0;
	}
	LWLockRelease(pmhash_htab_lock);
	return shared;
}

/* the shared entry of an index storage, or NULL (never creates one) */
PmhashShared *
pmhash_shared_entry_if_any(const PmhashKey *key)
{
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return NULL;
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, key, HASH_FIND, NULL);
	LWLockRelease(pmhash_htab_lock);
	return shared;
}

/* does the storage have loaded shared state (someone attached since)? */
bool
pmhash_shared_ready(const PmhashKey *key)
{
	PmhashShared *shared;
	bool		ready;

	if (pmhash_ctl == NULL)
		return false;
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, key, HASH_FIND, NULL);
	ready = shared != NULL && shared->state == PMHASH_STATE_READY;
	LWLockRelease(pmhash_htab_lock);
	return ready;
}

/*
 * Mark an index storage's pool as awaiting (or done with) a rebuild from
 * its heap.  Takes the hash-table lock; the caller may hold the index
 * lock.
 */
void
pmhash_set_rebuild(PmhashShared *shared, bool on)
{
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	if (on && !shared->rebuild)
		pg_atomic_fetch_add_u32(&pmhash_ctl->nrebuild, 1);
	else if (!on && shared->rebuild)
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nrebuild, 1);
	shared->rebuild = on;
	shared->rebuild_scanned = false;
	if (!on)
		shared->rebuild_pid = 0;
	LWLockRelease(pmhash_htab_lock);
}

/* how many index storages await a rebuild (0 without shared memory) */
uint32
pmhash_rebuilds_pending(void)
{
	if (pmhash_ctl == NULL)
		return 0;
	return pg_atomic_read_u32(&pmhash_ctl->nrebuild);
}

/*
 * Is the index's pool known to be awaiting or undergoing a rebuild?  For
 * the planner: cheap when no pool is (one atomic read).  A pool not loaded
 * yet is judged by its file (pmhash_pool_needs_rebuild), so that a plan
 * made before anything touched a copied pool avoids it too.
 */
bool
pmhash_known_rebuilding(Relation index)
{
	PmhashKey	key;
	PmhashShared *shared;
	bool		known = false;
	bool		rebuilding = false;

	PmhashLocal *local;

	if (pmhash_ctl == NULL)
		return false;
	/* the usual case: this backend used the index before (no lock) */
	if (pmhash_attached_before(index, &shared, &local) &&
		shared->state == PMHASH_STATE_READY)
		return shared->rebuild;
	pmhash_key_for_rel(index, &key);
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, &key, HASH_FIND, NULL);
	if (shared != NULL && shared->state == PMHASH_STATE_READY)
	{
		known = true;
		rebuilding = shared->rebuild;
	}
	LWLockRelease(pmhash_htab_lock);
	if (known)
		return rebuilding;
	return pmhash_pool_needs_rebuild(&key);
}

/*
 * Mark an index storage unusable (sig: its pool file as the failed load
 * saw it), or clear the mark (sig NULL).  Takes the hash-table lock; the
 * caller may hold the index lock.
 */
void
pmhash_set_unusable(PmhashShared *shared, const PmhashFileSig *sig)
{
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	if (sig != NULL)
	{
		if (!shared->unusable)
			pg_atomic_fetch_add_u32(&pmhash_ctl->nunusable, 1);
		shared->unusable = true;
		shared->unusable_sig = *sig;
	}
	else if (shared->unusable)
	{
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nunusable, 1);
		shared->unusable = false;
	}
	LWLockRelease(pmhash_htab_lock);
}

/* drop the mark of an entry being removed (hash-table lock exclusive) */
static void
pmhash_unmark_removed(PmhashShared *shared)
{
	if (shared->unusable)
	{
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nunusable, 1);
		shared->unusable = false;
	}
	if (shared->rebuild)
	{
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nrebuild, 1);
		shared->rebuild = false;
		shared->rebuild_pid = 0;
	}
}

/*
 * Does the planner know that an index cannot be used?  True when the last
 * attempt to load it failed on its pool (missing, unreadable, corrupt,
 * foreign) and the pool file has not changed since: lstat() only, the pool
 * is never opened here.  REINDEX gives the index a new storage (and pool),
 * which has no mark; a later successful load clears it.
 */
bool
pmhash_known_unusable(Relation index)
{
	PmhashKey	key;
	PmhashShared *shared;
	PmhashFileSig then;
	PmhashFileSig now;
	bool		marked = false;

	if (pmhash_ctl == NULL || pg_atomic_read_u32(&pmhash_ctl->nunusable) == 0)
		return false;
	pmhash_key_for_rel(index, &key);
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, &key, HASH_FIND, NULL);
	if (shared != NULL && shared->unusable)
	{
		marked = true;
		then = shared->unusable_sig;
	}
	LWLockRelease(pmhash_htab_lock);
	if (!marked)
		return false;
	pmhash_pool_file_sig(&key, &now);
	return memcmp(&then, &now, sizeof(now)) == 0;
}

/*
 * Drop the shared state of an index storage whose pool is going away
 * (its storage was dropped, or its creation rolled back).
 */
void
pmhash_forget(const PmhashKey *key)
{
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return;
	pmhash_local_forget(key);

	/*
	 * Two backends may forget one storage at once (sessions that both
	 * resolve a prepared transaction's state file).  Between finding the
	 * entry and taking its lock, the other one could remove it, and a new
	 * storage reuse it (and initialise the lock being waited for): forgets
	 * take turns.  Lock order: forget lock, index lock, hash-table lock.
	 */
	LWLockAcquire(pmhash_forget_lock, LW_EXCLUSIVE);
	shared = pmhash_shared_entry_if_any(key);
	if (shared == NULL)
	{
		LWLockRelease(pmhash_forget_lock);
		return;
	}
	pmhash_backend_init();		/* to free DSA memory */

	/*
	 * Nobody can start using a dropped storage, but a backend that attached
	 * before the drop (e.g. pmhash_stats on an index that REINDEX
	 * CONCURRENTLY is dropping) may still hold the index lock: wait for it.
	 * Not through pmhash_index_lock, which maps new DSM segments: that can
	 * fail, and this runs in the commit and abort callbacks.
	 */
	LWLockAcquire(&shared->lock, LW_EXCLUSIVE);
	pmh_version_write_begin(&shared->ixversion);
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	pmhash_free_shared(shared);
	shared->generation = pmhash_next_generation();
	pmhash_stats_forget_pool(shared->pool_id);
	pmhash_stats_slot_release(shared->stats_slot);
	pmhash_unmark_removed(shared);
	hash_search(pmhash_htab, key, HASH_REMOVE, NULL);
	pg_atomic_fetch_add_u64(&pmhash_ctl->drops, 1);
	/* (before the entry can be reused: nobody finds it meanwhile) */
	pmhash_index_unlock(shared);
	LWLockRelease(pmhash_htab_lock);
	LWLockRelease(pmhash_forget_lock);
}

/*
 * Throw away the shared state of a storage whose redo or write-back failed,
 * keeping its entry (hot-standby backends remember it in their relcache,
 * and may hold it), and mark it as awaiting a rebuild: the next user loads
 * it again, and its pool is replaced and rebuilt.  With mark_file, flag the
 * pool file for the rebuild first (pmhash_pool_mark_rebuild), under the
 * index lock, so that no rebuild ending meanwhile clears the flag.
 */
void
pmhash_reset_for_rebuild(const PmhashKey *key, bool mark_file)
{
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return;
	pmhash_backend_init();
	shared = pmhash_shared_entry_if_any(key);
	if (shared == NULL)
	{
		if (mark_file)
			pmhash_pool_mark_rebuild(key);
		return;
	}
	pmhash_index_lock(shared, LW_EXCLUSIVE);
	if (mark_file)
		pmhash_pool_mark_rebuild(key);
	pmhash_free_shared(shared);
	shared->generation = pmhash_next_generation();
	pmhash_set_rebuild(shared, true);
	pmhash_index_unlock(shared);
}

/*
 * Close this backend's mappings of pools that were dropped or replaced by
 * other backends, so that their space is freed.  Cheap unless some pool
 * was dropped since the last call (at transaction end).
 */
void
pmhash_local_sweep(void)
{
	HASH_SEQ_STATUS status;
	PmhashLocal *local;
	uint64		drops;

	if (pmhash_local_htab == NULL || pmhash_area_pid != MyProcPid)
		return;
	drops = pg_atomic_read_u64(&pmhash_ctl->drops);
	if (drops == pmhash_seen_drops)
		return;
	pmhash_seen_drops = drops;

	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	hash_seq_init(&status, pmhash_local_htab);
	while ((local = hash_seq_search(&status)) != NULL)
	{
		PmhashShared *shared;

		if (local->pool.base == NULL)
			continue;
		shared = hash_search(pmhash_htab, &local->key, HASH_FIND, NULL);
		if (shared == NULL || shared->generation != local->generation)
			pmhash_pool_close(local);
	}
	LWLockRelease(pmhash_htab_lock);
}

/* drop the shared state of every index storage of a database */
void
pmhash_forget_database(Oid dbid)
{
	HASH_SEQ_STATUS status;
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return;
	pmhash_backend_init();
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, pmhash_htab);
	while ((shared = hash_seq_search(&status)) != NULL)
	{
		if (shared->key.dbid == dbid)
		{
			/*
			 * No backend can be connected to the database; still, no
			 * lookup without the lock starts on what is freed here
			 */
			pmh_version_write_begin(&shared->ixversion);
			pmhash_free_shared(shared);
			pmhash_stats_forget_pool(shared->pool_id);
			pmhash_stats_slot_release(shared->stats_slot);
			pmhash_unmark_removed(shared);
			hash_search(pmhash_htab, &shared->key, HASH_REMOVE, NULL);
			pg_atomic_fetch_add_u64(&pmhash_ctl->drops, 1);
		}
	}
	LWLockRelease(pmhash_htab_lock);
}

/* close this backend's mapping of a pool */
static void
pmhash_local_forget(const PmhashKey *key)
{
	PmhashLocal *local;

	if (pmhash_local_htab == NULL)
		return;
	local = hash_search(pmhash_local_htab, key, HASH_FIND, NULL);
	if (local)
	{
		/*
		 * Keep the (closed) entry: a relcache entry may still point at it;
		 * closing resets its generation, which matches no shared entry.
		 */
		pmhash_pool_close(local);
	}
}

/*
 * The pools a write-back pass should look at: loaded ones whose write-back
 * mark is set, all of them (force) or those whose write traffic has not
 * changed for delay_us.  The latter case updates what the launcher saw
 * (only the launcher asks without force).  Returns how many, at most max.
 */
int
pmhash_writeback_candidates(PmhashWritebackItem *items, int max, bool force,
							int64 delay_us)
{
	HASH_SEQ_STATUS status;
	PmhashShared *shared;
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	if (pmhash_ctl == NULL)
		return 0;
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	hash_seq_init(&status, pmhash_htab);
	while ((shared = hash_seq_search(&status)) != NULL)
	{
		uint64		activity;

		if (shared->state != PMHASH_STATE_READY || !shared->wb_marked)
			continue;
		if (!force)
		{
			activity = pmhash_stats_activity(shared->stats_slot);
			if (activity != shared->wb_seen_activity ||
				shared->wb_seen_at == 0)
			{
				shared->wb_seen_activity = activity;
				shared->wb_seen_at = now;
				continue;
			}
			if (now - shared->wb_seen_at < delay_us)
				continue;
		}
		if (n < max)
		{
			items[n].key = shared->key;
			items[n].pool_id = shared->pool_id;
			n++;
			/* a full delay again before the next pass over it */
			if (!force)
				shared->wb_seen_at = now;
		}
	}
	LWLockRelease(pmhash_htab_lock);
	return n;
}

/*
 * A step of a write-back pass (pmhashwriteback.c), with the write-back
 * lock held: is the storage's current pool still pool_id, loaded?  With
 * clear, also clear its flag (every persist from then on sets the mark
 * again) and return in *sets how often the mark was set so far; without,
 * say whether the mark was not set again since (the flag alone cannot
 * tell: another pass may have cleared it after a persist set it).
 */
bool
pmhash_writeback_flag(const PmhashKey *key, uint64 pool_id, bool clear,
					  uint64 *sets)
{
	PmhashShared *shared;
	bool		ok = false;

	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, key, HASH_FIND, NULL);
	if (shared != NULL && shared->state == PMHASH_STATE_READY &&
		shared->pool_id == pool_id)
	{
		if (clear)
		{
			shared->wb_marked = false;
			*sets = shared->wb_sets;
			ok = true;
		}
		else
			ok = !shared->wb_marked && shared->wb_sets == *sets;
	}
	LWLockRelease(pmhash_htab_lock);
	return ok;
}
