/*-------------------------------------------------------------------------
 *
 * pmhash.h
 *	  Declarations shared by the PostgreSQL side of the pmhash access method.
 *
 * The index storage in the relation itself is one metapage; the entries
 * live in a pool file per index storage (see pmhashpool.c), and the
 * directory, fingerprints and locks in shared memory (pmhashshmem.c).
 * src/README.pmhash describes the design.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMHASH_H
#define PMHASH_H

#include "access/amapi.h"
#include "access/genam.h"
#include "access/itup.h"
#include "executor/execdesc.h"
#include "nodes/parsenodes.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "nodes/pathnodes.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/relfilenode.h"
#include "utils/dsa.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

#include "pmh_core.h"
#include "pmh_writepath.h"

/* support procedures */
#define PMHASH_STANDARD_PROC	1	/* 32-bit hash, optional */
#define PMHASH_EXTENDED_PROC	2	/* 64-bit seeded hash, required */
#define PMHASH_NPROCS			2

/* the only strategy: equality */
#define PMHASH_EQUAL_STRATEGY	1
#define PMHASH_NSTRATEGIES		1

/*
 * What a NULL key column hashes to in a UNIQUE NULLS NOT DISTINCT index
 * (elsewhere rows with a NULL key column are not indexed)
 */
#define PMHASH_NULL_HASH		UINT64CONST(0x9e3779b97f4a7c15)

/* build phases for pg_stat_progress_create_index */
#define PMHASH_BUILD_PHASE_SCAN		2
#define PMHASH_BUILD_PHASE_PERSIST	3

/* the metapage: block 0 of the main fork (and of the init fork) */
#define PMHASH_METAPAGE_BLKNO	0
#define PMHASH_META_MAGIC		0x504d4831	/* "PMH1" */
#define PMHASH_META_VERSION		1
#define PMHASH_META_INIT		0x0001	/* init fork image: pool is empty */

typedef struct PmhashMetaPageData
{
	uint32		magic;
	uint32		version;
	uint64		pool_id;		/* must equal the pool header's pool_id */
	uint32		flags;
} PmhashMetaPageData;

#define PmhashPageGetMeta(page) \
	((PmhashMetaPageData *) PageGetContents(page))

/* key of an index storage in shared memory */
typedef struct PmhashKey
{
	Oid			dbid;
	Oid			spcid;			/* 0: the database's default tablespace */
	Oid			relnode;
} PmhashKey;

/* a pool a write-back pass looks at */
typedef struct PmhashWritebackItem
{
	PmhashKey	key;
	uint64		pool_id;
} PmhashWritebackItem;

#define PMHASH_CHUNK_SEGS		16

/*
 * How PostgreSQL's DSA (utils/mmgr/dsa.c) composes a dsa_pointer with
 * 64-bit pointers: a segment number above a 40-bit offset, at most 1024
 * segments.  pmhash counts its allocations per segment (pmhashshmem.c).
 */
#if SIZEOF_DSA_POINTER != 8
#error "pmhash needs 64-bit dsa_pointers"
#endif
#define PMHASH_DSA_OFFSET_WIDTH	40
#define PMHASH_DSA_SEGMENTS		1024

/*
 * Per-segment shared state: a lock and the core's volatile metadata.  After
 * a restart a primary segment's metadata (and its overflow chain's) is
 * loaded from the pool when the segment is first used ("loaded" false until
 * then; see "Recovery" in README.pmhash); rec_first and rec_count name its
 * share of the backup-log slots that recovery found live (PmhashShared.
 * reclist), which its load sorts into the D-bucket or releases.
 */
typedef struct PmhashSegSlot
{
	LWLock		lock;
	bool		loaded;			/* false for primaries not loaded since the
								 * restart */
	bool		meta_valid;		/* the metadata was set: false for the free
								 * segments found at the restart, until one
								 * is taken, and for unloaded primaries */
	uint32		rec_first;
	uint32		rec_count;
	/* one segment per cache line: a writer's lock is not its neighbour's */
	char		pad[PMH_CACHELINE_BYTES - sizeof(LWLock) - 2 * sizeof(bool) -
					2 * sizeof(uint32) - 2];
} PmhashSegSlot;

StaticAssertDecl(sizeof(PmhashSegSlot) == PMH_CACHELINE_BYTES,
				 "a segment's lock fills one cache line");

/*
 * Sixteen segments' slots, then their metadata (5 kB each):
 * setting up the slots at a restart touches only the first page of a
 * chunk, and a segment's metadata is first written when it is loaded or
 * taken (fresh pages of shared memory cost a page fault each).
 *
 * The first PMHASH_SMALL_CHUNKS chunks are shorter, for 2, 2, 4 and 8
 * segments (their metadata arrays end early), so that a small index takes
 * little shared memory; from segment 16 on every chunk holds 16.  Each is
 * still larger than DSA's largest size class, so a page-aligned
 * allocation.
 */
typedef struct PmhashSegChunk
{
	PmhashSegSlot slot[PMHASH_CHUNK_SEGS];
	PmhSegMeta	meta[PMHASH_CHUNK_SEGS];
} PmhashSegChunk;

#define PMHASH_SMALL_CHUNKS		4

/* the chunk that holds segment segno */
static inline uint32
pmhash_chunk_no(uint32 segno)
{
	if (likely(segno >= PMHASH_CHUNK_SEGS))
		return segno / PMHASH_CHUNK_SEGS + (PMHASH_SMALL_CHUNKS - 1);
	return segno < 2 ? 0 : (uint32) pg_leftmost_one_pos32(segno);
}

/* segment segno's place in its chunk */
static inline uint32
pmhash_chunk_place(uint32 segno)
{
	if (likely(segno >= PMHASH_CHUNK_SEGS))
		return segno % PMHASH_CHUNK_SEGS;
	return segno < 2 ? segno : segno - (1U << pg_leftmost_one_pos32(segno));
}

/* how many segments chunk c holds */
static inline uint32
pmhash_chunk_segs(uint32 c)
{
	if (c >= PMHASH_SMALL_CHUNKS)
		return PMHASH_CHUNK_SEGS;
	return c == 0 ? 2 : 1U << c;
}

/* the size of chunk c */
static inline size_t
pmhash_chunk_bytes(uint32 c)
{
	return offsetof(PmhashSegChunk, meta) +
		sizeof(PmhSegMeta) * pmhash_chunk_segs(c);
}

StaticAssertDecl(offsetof(PmhashSegChunk, meta) + 2 * sizeof(PmhSegMeta) > 8192,
				 "the smallest chunk is a large (page-aligned) DSA allocation");

/* the number of chunks that hold nsegments segments */
static inline uint32
pmhash_chunks_for(uint64 nsegments)
{
	return nsegments == 0 ? 0 : pmhash_chunk_no((uint32) (nsegments - 1)) + 1;
}

/*
 * A chunk is a large DSA allocation, which starts on a page: with the slots
 * a whole number of cache lines, every metadata block, and so every
 * fingerprint bucket, starts on a cache line.
 */
StaticAssertDecl(offsetof(PmhashSegChunk, meta) % PMH_CACHELINE_BYTES == 0,
				 "segment metadata starts on a cache line");


typedef enum PmhashState
{
	PMHASH_STATE_EMPTY = 0,		/* nothing loaded yet */
	PMHASH_STATE_READY			/* directory and metadata match the pool */
} PmhashState;

/*
 * What lstat() said of a pool file.  A load that failed because the pool
 * is unusable remembers it, and the planner avoids the index while the
 * file still looks the same (see "Unusable pools" in README.pmhash).
 */
typedef struct PmhashFileSig
{
	bool		exists;
	uint32		mode;
	uint64		dev;
	uint64		ino;
	uint64		size;
	int64		mtime_ns;
	int64		ctime_ns;
} PmhashFileSig;

/*
 * Shared state of one index storage.  Lives in a fixed-size shared hash
 * table; its variable-size parts live in pmhash's DSA area.
 */
typedef struct PmhashShared
{
	PmhashKey	key;

	/*
	 * What a lookup without the index lock reads (pmhashread.c), kept apart
	 * from the fields that writers change often: all of it changes only
	 * under the index lock exclusive, while ixversion is odd (see
	 * pmhash_index_lock).
	 */
	uint32		ixversion;
	PmhashState state;
	uint64		generation;		/* changes whenever the pool is replaced */
	uint64		nsegments;		/* segments in the pool file */
	int			global_depth;
	dsa_pointer dir;			/* uint32[1 << global_depth] */
	dsa_pointer chunks;			/* dsa_pointer[chunkcap], PmhashSegSlot[16] each */
	bool		stale;			/* the pool's PMH_STATE_STALE (pmh_core.h) */
	bool		load_blocked;	/* a segment load with the index lock
								 * exclusive failed half way: finish it
								 * before anything else (index lock) */
	bool		all_loaded;		/* every segment is loaded since the
								 * restart (set once, see
								 * pmhash_segment_loaded) */
	/*
	 * Bulk deletes begun and ended, which every scan reads (see
	 * pmhash_hint_allowed).  Not part of the view, and changed without the
	 * index lock, but only twice a VACUUM: so here, away from what inserts
	 * change.
	 */
	pg_atomic_uint64 vacuums_begun;
	pg_atomic_uint64 vacuums_ended;

	/* changed rarely */
	Oid			indexoid;
	uint64		pool_id;
	uint32		nchunks;
	uint32		chunkcap;
	int			stats_slot;		/* its counters (pmhashstats.c) */
	uint32		blocked_segno;
	/* the last load failed on the pool itself (under the hash-table lock) */
	bool		unusable;
	PmhashFileSig unusable_sig; /* the pool file as that load saw it */

	LWLock		lock;			/* see "Locking" in README.pmhash */
	/*
	 * The free stack, nfree, free_unchecked, primaries and overflows change
	 * under the index lock exclusive, or under freelock with the index lock
	 * shared (a split under its segment's lock); freecap and freesegs only
	 * under the index lock exclusive.
	 */
	LWLock		freelock;
	dsa_pointer freesegs;		/* uint32[freecap]: a stack of free segments */
	uint32		nfree;
	uint32		freecap;
	uint64		primaries;
	uint64		overflows;
	uint64		shmem_bytes;	/* DSA bytes held for this index */
	pg_atomic_uint64 entries;	/* in segments and D-buckets (of the loaded
								 * segments) */
	uint32		free_unchecked; /* free-stack positions below this may hold
								 * segments not yet known to be zero */

	/* lazy loading after a restart (see "Recovery" in README.pmhash) */
	pg_atomic_uint64 unloaded;	/* primary segments not loaded yet */
	dsa_pointer reclist;		/* uint32[reclen]: live backup-log slots by
								 * primary segment, or invalid */
	uint32		reclen;
	uint32		log_unverified; /* log slots marked pending whose segment
								 * is not loaded yet (under loglock) */

	/* the backup log (pmhashblog.c) */
	LWLock		loglock;		/* protects the fields below */
	dsa_pointer logchunks;		/* dsa_pointer[PMH_LOG_LINES / 64 +
								 * logcap]: a PmhLogChunk each, for the
								 * lines in use (fixed log, then
								 * extensions) */
	dsa_pointer logexts;		/* uint32[logcap]: the segment of each log
								 * extension (after the chunk table, in
								 * its allocation) */
	uint32		logcap;			/* extensions the two arrays have room
								 * for; they grow with the index lock
								 * exclusive (pmhash_log_make_room) */
	dsa_pointer logold;			/* the smaller tables they grew from, kept
								 * until the shared state is freed */
	PmhLogState log;			/* the core's counters (pmh_writepath.h) */

	/*
	 * The pool is being refilled from the heap (a copy from a base backup,
	 * or one a standby could not keep): see "Rebuilding a pool" in
	 * README.pmhash.  rebuild changes under the hash-table lock; a worker
	 * claims the work (rebuild_pid) under the index lock exclusive.
	 */
	bool		rebuild;
	int			rebuild_pid;
	bool		rebuild_scanned;	/* the claim's heap scan is over: every
									 * row has its entry (index lock) */
	uint64		rebuild_blocks_total;	/* progress, written by the worker */
	uint64		rebuild_blocks_done;

	/*
	 * Deferred write-back (pmhashwriteback.c): wb_marked says that the
	 * pool's write-back mark is set on the device; it changes under
	 * pmhash_writeback_lock only, and the choke point reads it without a
	 * lock.  The launcher alone keeps wb_seen_*: the write traffic it last
	 * saw, and when.
	 */
	bool		wb_marked;
	uint64		wb_sets;		/* times the mark was set (same lock) */
	uint64		wb_seen_activity;
	TimestampTz wb_seen_at;
} PmhashShared;

/*
 * Does the pool lack rows' entries: is it being rebuilt, and the rebuild's
 * heap scan not over yet?  (Unique and exclusion checks wait while it is.)
 */
static inline bool
pmhash_rebuild_unscanned(const PmhashShared *shared)
{
	return shared->rebuild && !shared->rebuild_scanned;
}

/* lines of an index's backup log: the fixed ones and its extensions' */
static inline uint32
pmhash_log_nlines(const PmhashShared *shared)
{
	return pmh_log_nlines(&shared->log);
}

/*
 * Persist traffic of one mapping not yet added to the shared counters, and
 * the flushes since its last fence not yet fed to the media model
 * (pmhashstats.c).  Like PostgreSQL's own statistics, the counters are
 * published at transaction end (or when much has gathered), not one
 * shared atomic per flush.
 */
#define PMHASH_STATS_RANGES	32

typedef struct PmhashStatsPending
{
	uint64		user_bytes;
	uint64		flushes;		/* 64 B lines */
	uint64		lines_whole;
	uint64		lines_partial;
	uint64		fences;
	uint64		lookups;		/* hashes looked up by scans */
	uint64		lookups_locked; /* of them, under the index lock */
	uint64		syncs_seen;		/* the mapping's sync counts published */
	uint64		sync_bytes_seen;
	struct PmhashLocal *next_dirty; /* list of mappings with counts */
	bool		dirty;
	int			nranges;
	struct
	{
		uint64		offset;
		uint64		len;
	}			ranges[PMHASH_STATS_RANGES];
} PmhashStatsPending;

/* backend-local mapping of a pool */
typedef struct PmhashLocal
{
	PmhashKey	key;
	uint64		generation;
	uint64		pool_dev;		/* the mapped file (no descriptor is kept) */
	uint64		pool_ino;
	PmhPool		pool;
	/* the backup-log line this backend appends to (valid for log_generation) */
	int32		log_line;
	int			log_used;
	uint64		log_generation;
	int			stats_slot;		/* counters the flush hook charges */
	uint32		stats_tag;
	uint64		stats_pool;		/* pool id, the media model's key */
	PmhashStatsPending stats_pending;
} PmhashLocal;

/* an attached index: shared state, local mapping, and the lock mode held */
typedef struct PmhashIndex
{
	Relation	rel;
	PmhashShared *shared;
	PmhashLocal *local;
	LWLockMode	mode;
	PmhCallbacks cb;
	uint64		redo_pool_id;	/* redo: the record's pool, not the metapage's */
	Relation	heap;			/* the table, for an inserter that has it open
								 * and locked (else NULL): see pmhashprune.c */
} PmhashIndex;

extern char *pmhash_dsa_base;
extern dsa_area *pmhash_area;
extern size_t pmhash_dsa_inplace_bytes;
extern pg_atomic_uint32 *pmhash_dsa_segments_added;
extern uint32 pmhash_dsa_segments_seen;
extern void *pmhash_dsa_address_slow(dsa_pointer dp);
extern void pmhash_dsa_map_segments(void);
extern size_t pmhash_dsa_size(void);
extern Size pmhash_dsa_shmem_size(void);
extern void pmhash_dsa_shmem_init(dsa_area *pm_area, int seg_tranche,
								  LWLock *free_lock);
extern void pmhash_dsa_backend_init(void);
extern void pmhash_clear_shared(PmhashShared *shared);

/*
 * The address of pmhash's DSA memory in this backend.  The area's first
 * segment lives in place in the main shared memory, at the same address in
 * every backend, and its dsa_pointers are offsets from the place: no need
 * for dsa_get_address's segment table there.  Memory beyond it, in the
 * dynamic shared memory segments the area grows into
 * (pmhash.max_shared_memory), goes through dsa_get_address.
 */
static inline void *
pmhash_dsa_address(dsa_pointer dp)
{
	if (!DsaPointerIsValid(dp))
		return NULL;
	if (likely((dp >> PMHASH_DSA_OFFSET_WIDTH) == 0))
		return pmhash_dsa_base + dp;
	return pmhash_dsa_address_slow(dp);
}

/*
 * Has the area grown segments this backend has not mapped yet?  Mapping one
 * can fail (and allocates), so it is done before a critical section or a
 * lookup without the lock can meet one: see pmhash_dsa_map_segments.
 */
static inline bool
pmhash_dsa_unmapped_segments(void)
{
	return pmhash_dsa_segments_added != NULL &&
		unlikely(pg_atomic_read_u32(pmhash_dsa_segments_added) !=
				 pmhash_dsa_segments_seen);
}

/* is the index loaded, and mapped in this backend as it is now? */
static inline bool
pmhash_ready_here(const PmhashShared *shared, const PmhashLocal *local)
{
	return shared->state == PMHASH_STATE_READY &&
		local->generation == shared->generation;
}

/* chunk c of the segments' shared slots and metadata */
static inline PmhashSegChunk *
pmhash_seg_chunk(PmhashIndex *idx, uint32 c)
{
	dsa_pointer *chunks = pmhash_dsa_address(idx->shared->chunks);

	Assert(c < idx->shared->nchunks);
	return pmhash_dsa_address(chunks[c]);
}

/* the shared slot (lock, load state) of a segment */
static inline PmhashSegSlot *
pmhash_seg_slot(PmhashIndex *idx, uint32 segno)
{
	Assert(segno < idx->shared->nsegments);
	return &pmhash_seg_chunk(idx, pmhash_chunk_no(segno))->slot[pmhash_chunk_place(segno)];
}

/*
 * The core's metadata of a segment: valid once the segment is loaded (a
 * primary and its chain), taken (a free one), or set up (a log segment).
 */
static inline PmhSegMeta *
pmhash_seg_meta(PmhashIndex *idx, uint32 segno)
{
	Assert(segno < idx->shared->nsegments);
	return &pmhash_seg_chunk(idx, pmhash_chunk_no(segno))->meta[pmhash_chunk_place(segno)];
}

/*
 * Take a segment's lock in mode.  Taken exclusively, the segment's version
 * (in its metadata's first line) turns odd until pmhash_seg_release:
 * optimistic lookups (pmhash_lookup_optimistic) that overlap the holder
 * see that and look again under the lock.
 */
static inline void
pmhash_seg_acquire(PmhashSegSlot *slot, PmhSegMeta *meta, LWLockMode mode)
{
	LWLockAcquire(&slot->lock, mode);
	if (mode == LW_EXCLUSIVE)
		pmh_version_write_begin(&meta->version);
}

/*
 * Let go of a segment's lock taken by pmhash_seg_acquire.  (An ERROR while
 * the lock is held exclusively releases it without this, and leaves the
 * version odd: optimistic lookups use the lock until the next writer.)
 */
static inline void
pmhash_seg_release(PmhashSegSlot *slot, PmhSegMeta *meta)
{
	if (LWLockHeldByMeInMode(&slot->lock, LW_EXCLUSIVE))
		pmh_version_write_end(&meta->version);
	LWLockRelease(&slot->lock);
}

/*
 * Look hash up in primary segment segno (slot, meta) without the segment
 * lock, as pmh_version_read_begin describes: the segment and its chain
 * (their metadata through cb), then its D-bucket, into tags[0..max-1].
 * Returns false when a writer held or took the segment meanwhile, the
 * segment is not loaded yet, or it no longer holds the hash (it split
 * after the directory was read): then nothing it found may be used.  Else
 * sets *n to the number of entries, which may exceed max.  slot is NULL
 * when every segment is known to be loaded (PmhashShared.all_loaded): then
 * the lookup reads no line beside the metadata's.  For
 * pmhash_lookup_optimistic (index lock shared) and pmhash_read_lookup
 * (no index lock).
 */
static inline bool
pmhash_probe_unlocked(const PmhPool *pool, const PmhCallbacks *cb,
					  const PmhashSegSlot *slot, PmhSegMeta *meta,
					  uint32 segno, uint64 hash, uint64 *tags, int max,
					  int *n)
{
	uint32		version = pmh_version_read_begin(&meta->version);
	int			found;

	/*
	 * (An odd version fails the check below anyway: skip the reads.  The
	 * metadata of a segment not loaded is not set up, its version
	 * included, but is not used then.)
	 */
	if ((version & 1) != 0 || (slot != NULL && !slot->loaded))
		return false;
	/* the metadata is read after "loaded" (set after a write barrier) */
	pg_read_barrier();
	/* split since the directory was read: look again */
	if (!pmh_hash_in_segment(hash, __atomic_load_n(&meta->word,
												   __ATOMIC_RELAXED)))
		return false;
	found = pmh_lookup_all(pool, cb, meta, segno, hash, tags, max);
	if (!pmh_version_read_valid(&meta->version, version))
		return false;
	*n = found;
	return true;
}

/*
 * Take an index's lock in mode.  Taken exclusively, the index's version
 * (PmhashShared.ixversion) turns odd until pmhash_index_unlock: lookups
 * without the index lock (pmhashread.c) that overlap the holder see that
 * and look again under the lock.  Every holder of the index lock takes it
 * here.
 */
static inline void
pmhash_index_lock(PmhashShared *shared, LWLockMode mode)
{
	LWLockAcquire(&shared->lock, mode);
	/* (what an exclusive holder allocated is mapped before anything starts) */
	if (pmhash_dsa_unmapped_segments())
		pmhash_dsa_map_segments();
	if (mode == LW_EXCLUSIVE)
		pmh_version_write_begin(&shared->ixversion);
	else
	{
		uint32		v = __atomic_load_n(&shared->ixversion, __ATOMIC_RELAXED);

		/*
		 * Odd with the lock held shared: an exclusive holder failed and
		 * its lock was released without pmhash_index_unlock.  Nobody holds
		 * it exclusively now, and what that holder left is what a locked
		 * lookup reads anyway: make it even, or every lookup would take
		 * the lock until the next exclusive holder.
		 */
		if (unlikely((v & 1) != 0))
			(void) __atomic_compare_exchange_n(&shared->ixversion, &v, v + 1,
											   false, __ATOMIC_RELEASE,
											   __ATOMIC_RELAXED);
	}
}

/*
 * Let go of an index's lock taken by pmhash_index_lock.  (An ERROR while
 * it is held exclusively releases it without this, and leaves the version
 * odd: lookups take the lock until the next holder.)
 */
static inline void
pmhash_index_unlock(PmhashShared *shared)
{
	if (LWLockHeldByMeInMode(&shared->lock, LW_EXCLUSIVE))
		pmh_version_write_end(&shared->ixversion);
	LWLockRelease(&shared->lock);
}

/*
 * The primary segment that the directory names for a hash (index lock
 * held).  With the index lock shared, a split under the segment's own lock
 * may narrow that segment at any time, even before the caller locks it:
 * whoever acts on the answer locks the segment and checks that its word
 * still covers the hash (pmhash_lock_hash), or checks the word within a
 * version-checked read (pmhash_lookup_optimistic).
 */
static inline uint32
pmhash_lookup_segment(PmhashIndex *idx, uint64 hash)
{
	uint32	   *dir = pmhash_dsa_address(idx->shared->dir);
	uint64		i = pmh_dir_index(hash, idx->shared->global_depth);
	uint32		segno = __atomic_load_n(&dir[i], __ATOMIC_RELAXED);

	/*
	 * A split publishes a new half's entries after a write barrier: what
	 * the caller reads of the segment next is read after its entry.
	 */
	pg_read_barrier();
	return segno;
}

/*
 * A view of an index for lookups without its lock (pmhashread.c): what
 * pmhash_read_begin read between two reads of the index's version.
 */
typedef struct PmhashReadView
{
	PmhashShared *shared;
	PmhashLocal *local;
	uint32		ixversion;		/* the index's version, even */
	uint64		nsegments;		/* segments the view covers */
	int			depth;
	const uint32 *dir;
	const dsa_pointer *chunks;
	bool		stale;
	bool		all_loaded;		/* every segment is loaded */
	uint64		steps;			/* segments a lookup may still visit */
	bool		bad;			/* a lookup met a segment outside the view */
	PmhCallbacks cb;
} PmhashReadView;

/* GUCs */
extern char *pmhash_pool_dir;
extern int	pmhash_shared_memory_mb;
extern int	pmhash_max_indexes;
extern int	pmhash_max_shared_memory_mb;
extern bool pmhash_preloaded;

/* pmhash.c */
extern Datum pmhash_handler(PG_FUNCTION_ARGS);
extern void pmhash_require_preload(void);
extern uint64 pmhash_hash_datum(FmgrInfo *proc, Oid collation, Datum value);
extern uint64 pmhash_hash_combine(uint64 hash, uint64 column_hash);
extern bool pmhash_hash_row(Relation index, const Datum *values,
							const bool *isnull, uint64 *hash);

/* pmhashbuild.c */
extern IndexBuildResult *pmhashbuild(Relation heap, Relation index,
									 IndexInfo *indexInfo);
extern void pmhashbuildempty(Relation index);
extern char *pmhashbuildphasename(int64 phasenum);
extern bool pmhash_insert_entry_checked(PmhashIndex *idx, uint64 hash,
										ItemPointer tid, bool check);
extern void pmhash_insert_entry(PmhashIndex *idx, uint64 hash,
								ItemPointer tid);

/* pmhashpage.c: the metapage */
extern void pmhash_write_metapage(Relation index, ForkNumber fork,
								  uint64 pool_id, uint32 flags);
extern bool pmhash_read_metapage(Relation index, PmhashMetaPageData *meta);

/* pmhashinsert.c */
extern bool pmhashinsert(Relation index, Datum *values, bool *isnull,
						 ItemPointer ht_ctid, Relation heapRel,
						 IndexUniqueCheck checkUnique, bool indexUnchanged,
						 struct IndexInfo *indexInfo);

/* pmhashunique.c: UNIQUE indexes */
#define PMHASH_UNIQUE_TRANCHE	"pmhash unique"
#define PMHASH_UNIQUE_LOCKS		512 /* unique-check locks, by hash */
typedef struct PmhashBuildUnique PmhashBuildUnique;
extern bool pmhash_unique_insert(Relation index, uint64 hash, Datum *values,
								 bool *isnull, ItemPointer tid, Relation heap,
								 IndexUniqueCheck check,
								 struct IndexInfo *indexInfo);
extern void pmhash_wait_rebuilt(Relation index, Relation heap);
extern PmhashBuildUnique *pmhash_build_unique_begin(Relation index,
													Relation heap);
extern bool pmhash_build_unique_note(PmhashBuildUnique *bu, ItemPointer tid,
									 const uint64 *tags, int n);
extern void pmhash_build_unique_check(PmhashBuildUnique *bu);
extern void pmhash_build_unique_end(PmhashBuildUnique *bu);
extern void pmhash_upsert_executor_start(QueryDesc *queryDesc, int eflags,
										 void (*start) (QueryDesc *, int));
extern void pmhash_refuse_replica_identity(AlterTableStmt *stmt);

/* the state of a scan (pmhashscankey.c makes its hashes, pmhashsearch.c
 * looks them up) */
typedef struct PmhashScanOpaqueData
{
	bool		valid;			/* have the TIDs been collected? */
	bool		empty;			/* the keys cannot match anything */
	uint64	   *hashes;			/* distinct hashes to look up, sorted */
	int			nhashes;
	uint64		hash1;			/* storage of a single scalar key's hash */
	MemoryContext keycxt;		/* array keys' hashes, made on first need
								 * (pmhash_scan_keycxt); reset by rescan */
	bool		keycxt_used;
	uint64	   *tags;			/* tag words found, room for cap */
	ItemPointerData *tids;		/* the TIDs to return, room for cap */
	int			ntids;
	int			next;
	int			cap;
	int			last;			/* tids[] index last returned, or -1 */
	/* TIDs the executor found dead to all (kill_prior_tuple), to hint */
	ItemPointerData *killed;	/* room for ntids; NULL until first needed */
	int			nkilled;
	int			killed_cap;
	bool		hint_ok;		/* may this round's TIDs be hinted? */
	bool		hint_noted;		/* hint_ok and vacuums read this round */
	uint64		vacuums;		/* bulk deletes begun, read before lookups */
	BlockNumber heap_nblocks;	/* heap length as last seen */
	MemoryContext scancxt;		/* the scan's: lives as long as it */
	/* checking rows in the scan (pmhash_tid_check) */
	bool		check_pred;		/* must this round's predicate be checked? */
	bool		check_key;		/* does the scan compare keys itself? */
	EState	   *pred_estate;	/* NULL until first needed */
	ExprState  *pred;			/* the partial index's predicate, or NULL */
	IndexInfo  *pred_ii;		/* to compute keys */
	TupleTableSlot *pred_slot;
	struct IndexFetchTableData *pred_fetch;	/* pins the last TID's heap page */
	SnapshotData pred_dirty;	/* a dirty scan's own, for the check */
} PmhashScanOpaqueData;

typedef PmhashScanOpaqueData *PmhashScanOpaque;

/*
 * TIDs sorted and distinct (pmhash_sort_tids): the dead TIDs of a DELETE
 * record, those of a dead hint
 */
typedef struct PmhashTidSet
{
	ItemPointerData *tids;
	int			n;
} PmhashTidSet;

/* pmhashsearch.c */
extern int	pmhash_sort_tids(ItemPointerData *tids, int n);
extern bool pmhash_tid_set_has(const PmhashTidSet *set, ItemPointer tid);
extern IndexScanDesc pmhashbeginscan(Relation rel, int nkeys, int norderbys);
extern void pmhashrescan(IndexScanDesc scan, ScanKey scankey, int nscankeys,
						 ScanKey orderbys, int norderbys);
extern bool pmhashgettuple(IndexScanDesc scan, ScanDirection dir);
extern int64 pmhashgetbitmap(IndexScanDesc scan, TIDBitmap *tbm);
extern void pmhashendscan(IndexScanDesc scan);
extern int	pmhash_lookup_hash(PmhashIndex *idx, uint64 hash, uint64 *tags,
							   int max);
extern int	pmhash_lookup_hash_all(PmhashIndex *idx, uint64 hash, uint64 *buf,
								   int cap, uint64 **tags);
extern bool pmhash_hint_allowed(PmhashShared *shared, bool unique_check,
								uint64 *vacuums);
extern int	pmhash_hint_dead_hash(PmhashIndex *idx, uint64 hash,
								  ItemPointerData *tids, int ntids,
								  uint64 vacuums);
extern void pmhash_scan_hint_killed(IndexScanDesc scan);
extern BlockNumber pmhash_heap_length_hint(Relation heap);
extern bool pmhash_heap_has_block(Relation heap, BlockNumber *nblocks,
								  BlockNumber blk);

/* pmhashprune.c */
extern bool pmhash_prune_chain(PmhashIndex *idx, uint32 segno);

/* pmhashvacuum.c */
extern IndexBulkDeleteResult *pmhashbulkdelete(IndexVacuumInfo *info,
											   IndexBulkDeleteResult *stats,
											   IndexBulkDeleteCallback callback,
											   void *callback_state);
extern uint64 pmhash_vacuum_redo(PmhashIndex *idx, uint64 lo, uint64 hi,
								 PmhashTidSet *dead);
extern IndexBulkDeleteResult *pmhashvacuumcleanup(IndexVacuumInfo *info,
												  IndexBulkDeleteResult *stats);

/* pmhashvalidate.c */
extern bool pmhashvalidate(Oid opclassoid);
extern void pmhashadjustmembers(Oid opfamilyoid, Oid opclassoid,
								List *operators, List *functions);

/* pmhashpooldir.c: the pool directory, its owner, epoch and crash count */
extern void pmhash_ensure_dir(const char *path, bool top);
extern void pmhash_pool_dir_init(void);
extern uint32 pmhash_epoch;
extern uint64 pmhash_crash_count;
extern bool pmhash_started_from_backup;
extern void pmhash_backup_recovery_done(void);

/* pmhashpool.c: pool files */
extern void pmhash_key_for_node(const RelFileNode *node, PmhashKey *key);
extern void pmhash_key_for_rel(Relation rel, PmhashKey *key);
extern void pmhash_pool_path(const PmhashKey *key, char *path, size_t len);
extern uint64 pmhash_new_pool_id(void);
extern void pmhash_pool_create(Relation index, uint64 pool_id,
							   PmhashLocal *local, uint64 state_flags);
extern const char *pmhash_pool_distrust;
extern bool pmhash_pool_open(Relation index, const PmhashKey *key,
							 uint64 expect_pool_id, PmhashLocal *local,
							 PmhPoolHeader *hdr_out);
extern void pmhash_pool_remap(Relation index, PmhashLocal *local,
							  size_t len);
extern void pmhash_pool_grow(Relation index, PmhashLocal *local,
							 uint64 nsegments);
extern void pmhash_pool_close(PmhashLocal *local);
extern bool pmhash_pool_unlink(const PmhashKey *key);
extern bool pmhash_pool_exists(const PmhashKey *key);
extern bool pmhash_pool_needs_rebuild(const PmhashKey *key);
extern void pmhash_pool_mark_rebuild(const PmhashKey *key);
extern void pmhash_pool_copy(const char *indexname, const PmhashKey *from,
							 const PmhashKey *to);
extern void pmhash_db_dir(Oid dbid, char *path, size_t len);
extern bool pmhash_pool_read_header(const PmhashKey *key, PmhPoolHeader *hdr);
struct stat;
extern int	pmhash_pool_open_head(const PmhashKey *key, PmhPoolHeader *hdr,
								  struct stat *st);
extern void pmhash_persist_or_error(PmhashIndex *idx, const void *addr,
									size_t len);
extern void pmhash_report_io_error(Relation index, const char *what);
extern void pmhash_pool_file_sig(const PmhashKey *key, PmhashFileSig *sig);

/* pmhashshmem.c: shared memory, the DSA area, the table of storages */
extern void pmhash_shmem_request(void);
extern PmhashShared *pmhash_shared_entry(const PmhashKey *key, Oid indexoid);
extern PmhashShared *pmhash_shared_entry_if_any(const PmhashKey *key);
extern PmhashLocal *pmhash_local_entry(const PmhashKey *key);
extern void pmhash_free_shared(PmhashShared *shared);
extern void pmhash_extend_shared(PmhashShared *shared, uint64 nsegments);
extern void pmhash_set_unusable(PmhashShared *shared,
								const PmhashFileSig *sig);
extern dsa_pointer pmhash_shared_alloc(PmhashShared *shared, size_t size);
extern void pmhash_shared_free(PmhashShared *shared, dsa_pointer dp,
							   size_t size);
extern void pmhash_forget(const PmhashKey *key);
extern void pmhash_reset_for_rebuild(const PmhashKey *key, bool mark_file);
extern void pmhash_forget_database(Oid dbid);
extern void pmhash_local_sweep(void);
extern void pmhash_backend_init(void);
extern bool pmhash_backend_attached(void);
extern uint64 pmhash_next_generation(void);
extern bool pmhash_known_unusable(Relation index);
extern void pmhash_set_rebuild(PmhashShared *shared, bool on);
extern bool pmhash_shared_ready(const PmhashKey *key);
extern uint32 pmhash_rebuilds_pending(void);
extern bool pmhash_known_rebuilding(Relation index);
extern int	pmhash_writeback_candidates(PmhashWritebackItem *items, int max,
										bool force, int64 delay_us);
extern bool pmhash_writeback_flag(const PmhashKey *key, uint64 pool_id,
								  bool clear, uint64 *sets);

/* pmhashattach.c: attaching to an index, loading it after a restart */
extern void pmhash_attach(Relation index, LWLockMode mode, PmhashIndex *idx);
extern bool pmhash_attached_before(Relation index, PmhashShared **shared,
								   PmhashLocal **local);
extern void pmhash_attach_new(Relation index, uint64 pool_id,
							  uint64 state_flags, PmhashIndex *idx);
extern void pmhash_detach(PmhashIndex *idx);
extern bool pmhash_attach_redo(Relation index, uint64 pool_id,
							   LWLockMode mode, PmhashIndex *idx);
extern void pmhash_check_complete(PmhashIndex *idx, bool dirty);
extern void pmhash_relock(PmhashIndex *idx, LWLockMode mode);
extern void pmhash_relock_interruptible(PmhashIndex *idx);

/* pmhashsplit.c: segments: growth, splits and overflow chains */
extern uint32 pmhash_cb_alloc_segment(void *arg);
extern void pmhash_reserve_segments(PmhashIndex *idx, int nsegs);
extern void pmhash_split_segment(PmhashIndex *idx, uint32 segno);
extern bool pmhash_split_segment_shared(PmhashIndex *idx, uint32 segno);
extern void pmhash_add_overflow_segment(PmhashIndex *idx, uint32 segno);

/* pmhashrecover.c: loading an index's segments after a restart */
extern void pmhash_log_recover(PmhashIndex *idx);
extern void pmhash_recover_free_list(PmhashShared *shared);
extern bool pmhash_loading_tail;
extern bool pmhash_load_segment_shared(PmhashIndex *idx, uint32 segno,
									   PmhashSegSlot *slot);
extern void pmhash_load_exclusive(PmhashIndex *idx, uint32 segno);
extern void pmhash_load_all(PmhashIndex *idx, bool yield);

/* pmhashseglock.c: segment locks and optimistic reads */
extern bool pmhash_lock_segment(PmhashIndex *idx, uint32 segno,
								LWLockMode mode);
extern void pmhash_unlock_segment(PmhashIndex *idx, uint32 segno);
extern uint32 pmhash_lock_hash(PmhashIndex *idx, uint64 hash, LWLockMode mode);
extern void pmhash_lock_short(LWLock *lock);
extern bool pmhash_lookup_optimistic(PmhashIndex *idx, uint32 segno,
									 uint64 hash, uint64 *tags, int max,
									 int *n);

/* pmhashread.c: lookups without the index lock */
extern void pmhash_count_lookups(PmhashLocal *local, int n, bool locked);
extern Size pmhash_readers_shmem_size(void);
extern void pmhash_readers_shmem_init(void);
extern void pmhash_readers_wait(void);
extern bool pmhash_read_begin(Relation index, PmhashReadView *v);
extern uint32 pmhash_read_segment(PmhashReadView *v, uint64 hash);
extern void pmhash_read_prefetch(PmhashReadView *v, uint32 segno,
								 uint64 hash);
extern bool pmhash_read_lookup(PmhashReadView *v, uint32 segno, uint64 hash,
							   uint64 *tags, int max, int *n);
extern bool pmhash_read_end(PmhashReadView *v);

/* pmhashworker.c: loading every index after a start */
extern bool pmhash_prewarm;
extern void pmhash_prewarm_register(void);

/* pmhashwriteback.c: deferred write-back of pools on ordinary files */
extern bool pmhash_lazy_writeback;
extern int	pmhash_writeback_delay;
extern char *pmhash_boot_id_path;
extern uint64 pmhash_boot_id[2];
extern bool pmhash_boot_known;
extern LWLock *pmhash_writeback_lock;
extern void pmhash_boot_id_init(void);
extern void pmhash_writeback_setup(PmhashShared *shared, PmhashLocal *local);
extern bool pmhash_mark_trusted(const PmhPoolMark *mark);
extern void pmhash_mark_new_pool(PmhPool *pool);
extern void pmhash_writeback_loaded(PmhashShared *shared, const PmhPool *pool);
extern int	pmhash_writeback_run(bool force);
extern Datum pmhash_writeback(PG_FUNCTION_ARGS);


/* pmhashrebuild.c */
extern bool pmhash_rebuild(Oid indexoid);
extern void pmhash_rebuild_locktag(LOCKTAG *tag, Oid indexoid);

/* pmhashxact.c: collecting logs */
extern void pmhash_log_append(PmhashIndex *idx, uint64 hash, ItemPointer tid,
							  bool flush_now);
extern void pmhash_log_note_upsert(void);
extern void pmhash_log_settle_index(Relation index, Relation heap,
									ItemPointer newtid);
extern void pmhash_log_forget_storage(const PmhashKey *key);
extern bool pmhash_log_append_unattached(Relation index, uint64 hash,
										 ItemPointer tid);
extern void pmhash_log_flush_all(bool for_parallel);
extern void pmhash_log_wal_all(void);
extern void pmhash_log_xact_end(void);
extern void pmhash_log_subxact_commit(SubTransactionId mysub,
									  SubTransactionId parentsub);
extern void pmhash_log_subxact_abort(SubTransactionId mysub);
extern bool pmhash_log_have_unflushed(void);
extern int	pmhash_log_own_matches(const PmhashKey *key, uint64 hash,
								   ItemPointerData *tids, int max);

/* pmhashblog.c: the backup log and D-buckets (the core's write path) */
extern void pmhash_writer(PmhashIndex *idx, PmhWriter *w);
extern void pmhash_log_init_shared(PmhashIndex *idx);
extern PmhLogLine *pmhash_log_line_state(PmhashShared *shared, uint32 line);
extern bool pmhash_log_line_marked_free(PmhashShared *shared, uint32 line);
extern void pmhash_log_disown(PmhashShared *shared, uint32 line);
extern void pmhash_log_free_shared(PmhashShared *shared);
extern int	pmhash_log_lines_in_use(PmhashIndex *idx);
extern int	pmhash_log_room(const PmhashShared *shared,
							const PmhashLocal *local);
extern void pmhash_log_write(PmhashIndex *idx, const PmhEntry *entries, int n,
							 uint32 *line, int *first);
extern void pmhash_log_place_written(PmhashIndex *idx,
									 const PmhEntry *entries, int n,
									 uint32 line, int first, int *placed);
extern void pmhash_log_recover_slot(PmhashIndex *idx, uint32 logslot);
extern void pmhash_log_release(PmhashIndex *idx, const uint32 *slots, int n);
extern void pmhash_log_vacuum_begin(PmhashIndex *idx);
extern void pmhash_log_vacuum_end(PmhashShared *shared, uint64 generation);
extern uint64 pmhash_vacuum_pending(PmhashIndex *idx, uint32 segno,
									bool (*dead) (ItemPointer tid, void *arg),
									void *arg, uint64 *remaining);

/* pmhashstats.c: persist traffic and the media model */
extern Size pmhash_stats_shmem_size(void);
extern void pmhash_stats_shmem_init(void);
extern int	pmhash_stats_slot_acquire(void);
extern void pmhash_stats_slot_release(int slot);
extern void pmhash_stats_attach_pool(PmhashLocal *local,
									 const PmhashShared *shared);
extern void pmhash_stats_backend_init(void);
extern void pmhash_stats_add_user_bytes(PmhashLocal *local, uint64 bytes);
extern void pmhash_stats_add_syncs(const PmhashKey *key, uint64 syncs,
								   uint64 bytes);
extern uint64 pmhash_stats_activity(int slot);
extern void pmhash_stats_publish_all(bool force);
extern void pmhash_stats_forget_pool(uint64 pool_id);
extern Datum pmhash_media_stats(PG_FUNCTION_ARGS);
extern Datum pmhash_reset_stats(PG_FUNCTION_ARGS);
extern void pmhash_stats_index_values(int slot, Datum *values);
extern Relation pmhash_open_index(Oid relid, Oid role);
extern Datum pmhash_stats(PG_FUNCTION_ARGS);
extern Datum pmhash_load_progress(PG_FUNCTION_ARGS);

#define PMHASH_STATS_INDEX_COLS 10

/* GUCs of the media model */
extern int	pmhash_media_buffer_lines;
extern bool pmhash_track_media_reads;

/* pmhashlifecycle.c: pools follow the index storage */
extern void pmhash_lifecycle_init(void);
extern bool pmhash_adopt_pool(Relation index, const PmhashKey *key);
extern void pmhash_remove_db_dir(Oid dbid);
extern int	pmhash_sweep_pause;
extern void pmhash_sweep_orphans(void);

/* pmhashtwophase.c: pools of prepared transactions' storages */
extern bool pmhash_storage_gone(const RelFileNode *node, bool empty_is_gone);
extern void pmhash_twophase_note_gid(const char *gid);
extern void pmhash_twophase_end(bool prepared);
extern void pmhash_twophase_prepare(void);
extern void pmhash_twophase_finish(void);
extern void pmhash_twophase_sweep(void);
extern void pmhash_copy_db_pools(Oid srcdb, Oid dstdb);

/* pmhashcheck.c: pmhash_check() */
extern Datum pmhash_check(PG_FUNCTION_ARGS);

#endif							/* PMHASH_H */
