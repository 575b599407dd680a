/*-------------------------------------------------------------------------
 *
 * pmh_core.h
 *	  The server-independent core of pmhash: the on-pool layout, the
 *	  persistence choke point, and the operations on segments of an
 *	  extendible hash table whose volatile metadata (directory, fingerprints,
 *	  occupancy) is kept by the caller.
 *
 * Nothing in the core allocates memory, takes locks or reports errors
 * through elog: callers (the PostgreSQL access method in pmhash*.c, and the
 * unit tests in test/unit) provide the locking and turn return codes into
 * errors.  See src/README.pmhash for the layout and the protocols.
 *
 * This is the core's public header.  Its code is in src/core, one file per
 * layer, declared below in this order:
 *	pmh_pool.c		segment words, the pool header, the persistence choke point
 *	pmh_segment.c	segment metadata and fingerprints, lookup, insert, overflow
 *					(its inline helpers: pmh_segment.h, included from here)
 *	pmh_split.c		failure-atomic splits
 *	pmh_dbucket.c	the backup log and D-buckets, relocation
 *	pmh_recover.c	the directory, recovery
 * pmh_core_int.h is internal to those files.  pmh_media.c/.h, beside them,
 * model the device's media traffic for statistics and benchmarks.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMH_CORE_H
#define PMH_CORE_H

#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "port/pg_bitutils.h"

/*
 * Layout constants.  A pool is a 4 kB header, the backup log (PMH_LOG_LINES
 * lines of 256 B, PMH_BUCKET_SLOTS entries each), then segments.  A segment
 * is one 256 B header line followed by PMH_SEG_BUCKETS buckets of 256 B (one
 * Optane media line each), each holding PMH_BUCKET_SLOTS entries of 16 B.
 */
#define PMH_MAGIC				UINT64CONST(0x0031485341484d50) /* "PMHASH1" */
#define PMH_LAYOUT_VERSION		2
#define PMH_HEADER_BYTES		4096
#define PMH_LINE_BYTES			256
#define PMH_CACHELINE_BYTES		64
#define PMH_ENTRY_BYTES			16
#define PMH_BUCKET_SLOTS		(PMH_LINE_BYTES / PMH_ENTRY_BYTES)	/* 16 */
#define PMH_SEG_BUCKETS			64
#define PMH_SEG_SLOTS			(PMH_BUCKET_SLOTS * PMH_SEG_BUCKETS)	/* 1024 */
#define PMH_SEG_BYTES			(PMH_LINE_BYTES * (PMH_SEG_BUCKETS + 1))

/*
 * Where an entry may live inside its segment, recorded in the pool header:
 * layout 2 pools written before whole-line relocation kept every entry within
 * 8 buckets of a home bucket; since then an entry may be in any bucket.  A
 * reader that searches the whole segment reads both.
 */
#define PMH_PLACEMENT_ANY		PMH_SEG_BUCKETS
#define PMH_PLACEMENT_WINDOW8	8
#define PMH_MAX_DEPTH			48
#define PMH_NO_SEGMENT			UINT32_MAX

/*
 * The backup log: whole lines, written by one backend at a time each.  The
 * fixed log is a region of PMH_LOG_LINES lines, of which a pool uses the
 * first PmhPoolHeader.log_lines (a multiple of 64); the rest is never
 * written, and a new pool leaves it a hole in the file.  A pool made by
 * pmh_header_init uses PMH_LOG_LINES; the server's new pools use
 * PMH_LOG_LINES_SMALL and grow the log by log segments as the index grows.
 */
#define PMH_LOG_LINES			2048
#define PMH_LOG_LINES_SMALL		64
#define PMH_LOG_OFFSET			PMH_HEADER_BYTES
#define PMH_LOG_BYTES			((size_t) PMH_LOG_LINES * PMH_LINE_BYTES)
#define PMH_LOG_SLOTS			(PMH_LOG_LINES * PMH_BUCKET_SLOTS)
#define PMH_SEG_OFFSET			(PMH_LOG_OFFSET + PMH_LOG_BYTES)

/*
 * The backup log grows with the table: a log segment (extension k) adds
 * PMH_LOG_EXT_LINES lines, numbered PMH_LOG_LINES + k * PMH_LOG_EXT_LINES
 * on; its buckets are the lines.  The caller's map of extensions to
 * segments is PmhPool.log_ext_segs.
 */
#define PMH_LOG_EXT_LINES		PMH_SEG_BUCKETS
#define PMH_LOG_MAX_EXTS		2048
#define PMH_LOG_MAX_LINES		(PMH_LOG_LINES + PMH_LOG_MAX_EXTS * PMH_LOG_EXT_LINES)

/*
 * A D-bucket: entries whose backup-log copy is persistent but which are not
 * yet in the segment's buckets.  One per primary segment, in shared memory;
 * when it is full its entries are relocated into the segment in one batch.
 */
#define PMH_DBUCKET_SLOTS		16

/*
 * A full primary segment splits when a split would leave each half a useful
 * share of its entries; else it gets an overflow segment (many entries with
 * one hash, which no split can separate).
 */
#define PMH_SPLIT_MIN_SHARE		16	/* each half keeps >= 1/16 */

/*
 * An index entry: the 64-bit hash of the key and a tag word holding the heap
 * TID.  The tag word carries a marker and a copy of the hash's low byte, so
 * that a torn write (new tag, old hash) is not taken for a live entry.
 *
 *	bits 63..56  PMH_TAG_LIVE marker
 *	bits 55..48  hash & 0xff
 *	bits 47..16  heap block number
 *	bits 15..0	 heap offset number (never 0 in a live entry)
 */
typedef struct PmhEntry
{
	uint64		hash;
	uint64		tag;
} PmhEntry;

#define PMH_TAG_LIVE			UINT64CONST(0xA5)

/*
 * The header line of every segment.  "word" is the 8-byte publish word;
 * "ovf_next" links a primary segment to its first overflow segment and an
 * overflow segment to the next one (PMH_NO_SEGMENT + 1 == 0 means none: the
 * stored value is segno + 1).
 *
 * Segment word:
 *	bit  63		 valid
 *	bit  62		 overflow segment (owned through a chain, carries no prefix)
 *	bits 61..56  local depth (0..48)
 *	bits 55..8	 prefix (the top "depth" bits of the hashes it holds)
 *	bits 7..0	 check byte over bits 63..8
 * A log segment has bit 62 set, depth 63 and its extension number as the
 * prefix.
 */
typedef struct PmhSegHeader
{
	uint64		word;
	uint64		ovf_next;
	char		pad[PMH_LINE_BYTES - 2 * sizeof(uint64)];
} PmhSegHeader;

/* The pool header: first PMH_HEADER_BYTES of the file; only this is used. */
typedef struct PmhPoolHeader
{
	uint64		magic;
	uint32		version;
	uint32		header_bytes;
	uint64		pool_id;		/* random; also stored in the index metapage */
	uint32		db_oid;
	uint32		spc_oid;		/* 0 = the database's default tablespace */
	uint32		rel_node;
	uint32		index_oid;
	uint32		line_bytes;
	uint32		entry_bytes;
	uint32		bucket_slots;
	uint32		seg_buckets;
	uint32		placement;		/* PMH_PLACEMENT_* */
	uint32		seg_bytes;
	uint64		seg_offset;
	uint64		log_offset;
	uint32		log_lines;
	uint32		timeline;		/* WAL timeline the pool was created on */
	uint32		epoch;			/* pool directory epoch, see pmhashpooldir.c */
	uint32		flags;
	uint32		checksum;		/* CRC-32C of everything before this field */
} PmhPoolHeader;

/*
 * The pool's mutable state: one cache line in the header page, after the
 * header (which is written once, at creation, and checksummed).
 *
 * crash_count is the server's count of crashes (see pmhashpooldir.c) when the
 * pool was last opened.  When an open finds it behind, a crash happened
 * while the pool may have been in use, and the pool may hold entries whose
 * heap insert never reached the WAL: their heap slot can be reused by a row
 * with the same key, and the same (hash, TID) inserted again.  The
 * PMH_STATE_STALE flag then stays set for the life of the pool, and
 * relocation looks for such duplicates in the segment before it writes.
 */
#define PMH_STATE_OFFSET		2048
#define PMH_STATE_STALE			UINT64CONST(1)
#define PMH_STATE_KEPT			UINT64CONST(2)	/* the count is kept: a pool
												 * made before the state
												 * line has 0, whose history
												 * is unknown */
#define PMH_STATE_REBUILD		UINT64CONST(4)	/* incomplete: being refilled
												 * from the heap */
#define PMH_STATE_WALBUILD		UINT64CONST(8)	/* filled by the redo of a
												 * build, persisted only at
												 * its end */

typedef struct PmhPoolState
{
	uint64		crash_count;
	uint64		flags;			/* PMH_STATE_*; anything but KEPT alone
								 * counts as stale */
} PmhPoolState;

/*
 * The write-back mark: the next cache line of the header page.  With
 * deferred write-back (an ordinary file, see pmh_persist), stores reach the
 * file when the kernel writes the pages back, in any order, and nothing
 * orders them before a crash of the operating system; a crash of the
 * server alone loses none of them (they are in the page cache).  So before
 * the first store that is not written back at once, the pool is marked
 * with the identity of the running kernel (its boot id), durably; the
 * mark is cleared only once everything stored before is on the device.
 * A pool whose mark names another boot may be torn: it is rebuilt from
 * the heap.  All zero: everything in the pool is on the device.
 */
#define PMH_MARK_OFFSET			2112

typedef struct PmhPoolMark
{
	uint64		boot[2];		/* boot id of the kernel that deferred
								 * writes, or zero */
} PmhPoolMark;

/* Persist-traffic counters kept by the choke point (per mapping). */
typedef struct PmhPersistStats
{
	uint64		persists;		/* ranges flushed */
	uint64		bytes;			/* bytes covered by those ranges */
	uint64		cachelines;		/* 64 B lines flushed */
	uint64		lines_whole;	/* 256 B lines flushed whole */
	uint64		lines_partial;	/* 256 B lines flushed in part */
	uint64		fences;
	uint64		syncs;			/* msync calls (ordinary file only) */
	uint64		sync_bytes;		/* bytes those calls covered */
	uint64		deferred;		/* ranges left to lazy write-back */
} PmhPersistStats;

/*
 * Called by the choke point for every range it flushes (offset from the
 * start of the pool, length rounded out to 64 B lines) and, with len 0, for
 * every fence: the caller's media accounting.  The read hook, when set,
 * hears of every entry a probe reads from the pool.
 */
typedef void (*PmhFlushHook) (void *arg, uint64 offset, size_t len);

/*
 * Called by the choke point with lazy write-back on, when the pool's
 * write-back mark is not known to be set: set it durably (pmh_pool_mark)
 * before returning.  Returns 0, or -1 with errno set.
 */
struct PmhPool;
typedef int (*PmhMarkHook) (struct PmhPool *pool, void *arg);

#define PMH_BATCH_RANGES		64

/*
 * With msync, ranges of one batch at most this far apart are made
 * persistent by one call (a segment and its neighbours, a good part of the
 * fixed backup log): a call costs a device flush, a clean page nothing.
 */
#define PMH_MSYNC_MERGE_GAP		(256 * 1024)

/* One mapping of a pool file. */
typedef struct PmhPool
{
	char	   *base;
	size_t		mapped_len;
	int			is_pmem;		/* CPU flush (1) or msync (0) */
	int			no_persist;		/* bulk build: persist later, in one go */
	int			batching;		/* collect flushes until pmh_batch_end */
	int			nbatch;
	int			fail_errno;		/* tests: the next flush fails (0: none) */

	/*
	 * Lazy write-back (ordinary files only): a persist writes nothing back
	 * and only makes sure that the pool's write-back mark is set (*marked
	 * true, else mark_hook), see PmhPoolMark.
	 */
	int			lazy;
	const volatile bool *marked;
	PmhMarkHook mark_hook;
	void	   *mark_hook_arg;
	struct
	{
		const void *addr;
		size_t		len;
	}			batch[PMH_BATCH_RANGES];
	const uint32 *log_ext_segs; /* segment of each log extension, or NULL */
	PmhFlushHook flush_hook;
	PmhFlushHook read_hook;
	void	   *flush_hook_arg;	/* argument of both hooks */
	PmhPersistStats stats;
} PmhPool;

/* An entry waiting in a D-bucket, with the backup-log slot holding its copy. */
typedef struct PmhPending
{
	uint64		hash;
	uint64		tag;
	uint32		logslot;		/* line * PMH_BUCKET_SLOTS + slot */
	uint32		pad;
} PmhPending;

/*
 * The fingerprint table of a segment: where each live slot's 16-bit
 * fingerprint is kept, organised by hash so that a lookup reads one cache
 * line of it (rarely two) instead of all 1024 fingerprints.  A slot with
 * hash h goes into bucket pmh_fpt_bucket(h) or, when that is full, into the
 * next bucket with room (bucketised linear probing); every full bucket it
 * passes is marked "passed", and a lookup goes on past each passed bucket.
 * The marks are cleared only when the table is rebuilt.  A bucket is one
 * 64 B cache line: 16 fingerprints, then the 16 slot numbers (plus one;
 * 0 = unused way); 72 buckets, 1152 ways for at most 1024 slots.  (Two
 * choices of bucket per hash, as in a cuckoo filter, made the table fuller
 * before it spills, but cost a second random cache line on every insert
 * and lookup where linear probing's second line is the adjacent one: it
 * measured slower on both.)
 */
#define PMH_FPT_BUCKETS			72
#define PMH_FPT_WAYS			16

typedef struct PmhFpBucket
{
	uint16		fp[PMH_FPT_WAYS];	/* pmh_meta_fp(hash) of the slot */
	uint16		slot[PMH_FPT_WAYS]; /* 1 + slot number; 0 = unused; may
									 * carry PMH_FPT_DEAD */
} PmhFpBucket;

/*
 * A hint in a way's slot number: the entry's heap row is dead to every
 * snapshot there is or will be (pmh_mark_dead; the server sets it when a
 * scan or a unique check finds so, as btree sets LP_DEAD).  Lookups skip
 * such a way; probes for one exact entry (pmh_find_slot, and pmh_contains,
 * which clears the hint it finds), deletes and checks see through it.  It
 * is volatile like the rest of the table: a rebuild drops it, and the
 * entry stays in the pool until VACUUM removes it.
 */
#define PMH_FPT_DEAD			0x8000
StaticAssertDecl(PMH_SEG_SLOTS < PMH_FPT_DEAD,
				 "slot numbers leave the dead hint's bit free");

/*
 * Volatile metadata of one segment (primary or overflow), kept by the
 * caller in shared memory.  "word" mirrors the segment's persistent word
 * (the entries of an overflow segment are validated against the word of
 * the primary segment that owns its chain).  The first cache line holds
 * what every lookup reads besides its fingerprint bucket: the word, the
 * chain, the version of optimistic reads (pmh_version_read_begin; a
 * primary's covers its chain and D-bucket), the counts and the D-bucket's
 * fingerprints, so that a lookup of an absent key reads two lines of it.
 * The size is a multiple of 64 B, so that in an array starting on a cache
 * line (the server's chunks) every fingerprint bucket is one cache line.
 */
typedef struct PmhSegMeta
{
	uint64		word;
	uint32		ovf_next;		/* segno or PMH_NO_SEGMENT */
	uint32		version;		/* odd while a writer changes the segment;
								 * kept by pmh_meta_reset */
	uint16		nlive;			/* at most PMH_SEG_SLOTS */
	uint8		npending;		/* D-bucket entries: only in primaries */
	uint8		fpt_any_passed; /* some bit of fpt_passed is set */
	uint16		pending_fp[PMH_DBUCKET_SLOTS];	/* pmh_meta_fp(pending[i].hash) */
	uint8		fpt_passed[(PMH_FPT_BUCKETS + 7) / 8];	/* bit b: an entry went
														 * past full bucket b */
	uint8		pad[3];
	PmhFpBucket fpt[PMH_FPT_BUCKETS];	/* fingerprints of the live slots */
	uint16		occ[PMH_SEG_BUCKETS];	/* bit i: slot i of the bucket is live */
	PmhPending	pending[PMH_DBUCKET_SLOTS]; /* the D-bucket */
} PmhSegMeta;

StaticAssertDecl(offsetof(PmhSegMeta, fpt) == PMH_CACHELINE_BYTES,
				 "the fingerprint table starts on the second cache line");
StaticAssertDecl(PMH_SEG_SLOTS <= UINT16_MAX && PMH_DBUCKET_SLOTS <= UINT8_MAX,
				 "the counts of a segment fit their fields");
StaticAssertDecl(sizeof(PmhSegMeta) % PMH_CACHELINE_BYTES == 0,
				 "segment metadata is a whole number of cache lines");
StaticAssertDecl(sizeof(PmhFpBucket) == PMH_CACHELINE_BYTES,
				 "a fingerprint bucket is one cache line");
StaticAssertDecl(PMH_FPT_BUCKETS * PMH_FPT_WAYS >= PMH_SEG_SLOTS + PMH_SEG_SLOTS / 8,
				 "the fingerprint table needs room to spare");

/*
 * Access to the caller's metadata and free segments.  get_meta returns the
 * metadata of a segment; alloc_segment hands out a free segment number
 * (already inside the mapping: the caller grows the pool before the
 * operation, see pmh_segments_needed_for_split) or PMH_NO_SEGMENT.  A
 * segment handed out must read as zero on the media (new file space, or
 * pmh_prepare_free_segment): the core writes and flushes only what it
 * fills.
 */
typedef struct PmhCallbacks
{
	PmhSegMeta *(*get_meta) (void *arg, uint32 segno);
	uint32		(*alloc_segment) (void *arg);
	void	   *arg;
} PmhCallbacks;

/* Results of pool header validation. */
typedef enum PmhHeaderStatus
{
	PMH_HEADER_OK = 0,
	PMH_HEADER_TRUNCATED,
	PMH_HEADER_BAD_MAGIC,
	PMH_HEADER_BAD_VERSION,
	PMH_HEADER_BAD_CHECKSUM,
	PMH_HEADER_BAD_LAYOUT,
	PMH_HEADER_FOREIGN
} PmhHeaderStatus;

/* Results of an insert attempt into one segment and its chain. */
typedef enum PmhInsertResult
{
	PMH_INSERT_DONE = 0,
	PMH_INSERT_EXISTS,			/* the same (hash, TID) is already there */
	PMH_INSERT_SPLIT,			/* no room: the primary segment should split */
	PMH_INSERT_OVERFLOW,		/* no room: add an overflow segment */
	PMH_INSERT_IOERROR,			/* persisting failed (errno is set) */
	PMH_INSERT_FULL				/* no room; which remedy was not asked
								 * (pmh_relocate without "decide") */
} PmhInsertResult;

/* ---- hash bit slicing ---- */

/* directory index of a hash at global depth gd */
static inline uint64
pmh_dir_index(uint64 hash, int gd)
{
	return gd == 0 ? 0 : hash >> (64 - gd);
}

/* the copy of the hash that a tag word carries (bits 55..48) */
static inline uint8
pmh_fingerprint(uint64 hash)
{
	return (uint8) (hash & 0xff);
}

/*
 * The fingerprint of a slot in the volatile metadata (PmhSegMeta.fp): the
 * hash's low 16 bits.  No directory index or segment prefix uses them (the
 * depth is at most PMH_MAX_DEPTH = 48), so they vary freely among the
 * entries of one segment: a lookup that is not for the slot's hash matches
 * it with probability 1/65536.  Its low byte is the tag's copy.
 */
static inline uint16
pmh_meta_fp(uint64 hash)
{
	return (uint16) (hash & 0xffff);
}

/* ---- segment words ---- */
extern uint64 pmh_segword_make(int depth, uint64 prefix);
extern uint64 pmh_segword_make_overflow(void);
extern uint64 pmh_segword_make_log(uint32 ext);
extern bool pmh_segword_is_valid(uint64 word);
extern bool pmh_segword_is_overflow(uint64 word);
extern bool pmh_segword_is_log(uint64 word);

static inline int
pmh_segword_depth(uint64 word)
{
	return (int) ((word >> 56) & 0x3f);
}

static inline uint64
pmh_segword_prefix(uint64 word)
{
	return (word >> 8) & ((UINT64CONST(1) << 48) - 1);
}

/* does a hash belong to the primary segment with this word? */
static inline bool
pmh_hash_in_segment(uint64 hash, uint64 word)
{
	int			depth = pmh_segword_depth(word);

	return depth == 0 || (hash >> (64 - depth)) == pmh_segword_prefix(word);
}

/* the first and last hash of the primary segment with this word */
static inline void
pmh_segword_range(uint64 word, uint64 *lo, uint64 *hi)
{
	int			depth = pmh_segword_depth(word);

	*lo = depth == 0 ? 0 : pmh_segword_prefix(word) << (64 - depth);
	*hi = depth == 0 ? PG_UINT64_MAX :
		*lo + ((UINT64CONST(1) << (64 - depth)) - 1);
}

/* ---- entries ---- */
extern uint64 pmh_tag_make(uint64 hash, uint32 block, uint16 offset);

static inline uint32
pmh_tag_block(uint64 tag)
{
	return (uint32) ((tag >> 16) & 0xffffffff);
}

static inline uint16
pmh_tag_offset(uint64 tag)
{
	return (uint16) (tag & 0xffff);
}

/*
 * Is this entry live in a segment whose (owner) primary word is owner_word?
 * Entries left behind by a split fail the prefix test; torn entries fail the
 * marker or the fingerprint copy.
 */
static inline bool
pmh_entry_is_live(const PmhEntry *e, uint64 owner_word)
{
	uint64		tag = e->tag;

	if ((tag >> 56) != PMH_TAG_LIVE)
		return false;
	if (((tag >> 48) & 0xff) != pmh_fingerprint(e->hash))
		return false;
	if (pmh_tag_offset(tag) == 0)
		return false;
	return pmh_hash_in_segment(e->hash, owner_word);
}

/* does a backup-log slot hold an entry (no prefix test: it has no owner) */
static inline bool
pmh_log_entry_is_live(const PmhEntry *e)
{
	uint64		tag = e->tag;

	return (tag >> 56) == PMH_TAG_LIVE &&
		((tag >> 48) & 0xff) == pmh_fingerprint(e->hash) &&
		pmh_tag_offset(tag) != 0;
}

/* ---- the pool (pmh_pool.c) ---- */
extern void pmh_header_init(PmhPoolHeader *hdr, uint64 pool_id,
							uint32 db_oid, uint32 spc_oid, uint32 rel_node,
							uint32 index_oid);
extern uint32 pmh_header_checksum(const PmhPoolHeader *hdr);
extern PmhHeaderStatus pmh_header_validate(const PmhPoolHeader *hdr,
										   size_t file_len);
extern const char *pmh_header_status_string(PmhHeaderStatus status);
extern size_t pmh_pool_bytes(uint64 nsegments);
extern uint64 pmh_pool_nsegments(const PmhPool *pool);

static inline PmhSegHeader *
pmh_seg_header(const PmhPool *pool, uint32 segno)
{
	return (PmhSegHeader *) (pool->base + PMH_SEG_OFFSET +
							 (size_t) segno * PMH_SEG_BYTES);
}

/* the pool's mutable state line */
static inline PmhPoolState *
pmh_pool_state(const PmhPool *pool)
{
	return (PmhPoolState *) (pool->base + PMH_STATE_OFFSET);
}

/* the pool's write-back mark */
static inline PmhPoolMark *
pmh_pool_mark_line(const PmhPool *pool)
{
	return (PmhPoolMark *) (pool->base + PMH_MARK_OFFSET);
}

static inline PmhEntry *
pmh_seg_entries(const PmhPool *pool, uint32 segno)
{
	return (PmhEntry *) ((char *) pmh_seg_header(pool, segno) + PMH_LINE_BYTES);
}

/*
 * Optimistic lookups.  Each primary segment's metadata has a version word
 * (PmhSegMeta.version, in the line a lookup reads first), which the
 * caller's segment lock keeps: even while nobody holds the lock
 * exclusively, odd while someone does; it goes up by one when the lock is taken exclusively
 * (pmh_version_write_begin) and again before it is let go
 * (pmh_version_write_end; a lock released without it leaves the version
 * odd, which the next writer's pmh_version_write_begin copes with).
 * Everything that changes a segment, its chain, its D-bucket or its
 * metadata does so under that lock.  A lookup may then read without the
 * lock: it notes the version (pmh_version_read_begin), runs
 * pmh_lookup_all, and keeps what it found only if the version was even and
 * is unchanged (pmh_version_read_valid); otherwise it looks again under the
 * lock.  pmh_lookup_meta and pmh_pending_lookup are written to survive a
 * segment that changes under them: every field they read is stored whole
 * and always holds a value in range, and every loop is bounded.  The
 * lookup takes no atomic operation and writes no shared cache line.
 * (Chains change only with the index lock exclusive, which an optimistic
 * lookup's shared index lock excludes.)
 */
static inline uint32
pmh_version_read_begin(const uint32 *version)
{
	return __atomic_load_n(version, __ATOMIC_ACQUIRE);
}

/* did the reads since pmh_version_read_begin returned "begin" see no writer? */
static inline bool
pmh_version_read_valid(const uint32 *version, uint32 begin)
{
	/* the reads before this fence are done before the version is read */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return (begin & 1) == 0 &&
		__atomic_load_n(version, __ATOMIC_RELAXED) == begin;
}

/*
 * Just after taking the segment lock exclusively: the version turns odd.
 * (It may be odd already, if a holder failed and its lock was released
 * without pmh_version_write_end, as PostgreSQL's error recovery releases
 * LWLocks: then it goes up by two, to another odd value.)
 */
static inline void
pmh_version_write_begin(uint32 *version)
{
	__atomic_store_n(version, (*version + 1) | 1, __ATOMIC_RELAXED);
	/* the odd version is stored before anything the writer changes */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

/* just before letting the exclusive segment lock go: even again */
static inline void
pmh_version_write_end(uint32 *version)
{
	__atomic_store_n(version, (*version | 1) + 1, __ATOMIC_RELEASE);
}

/* the extension number of a log segment's word */
static inline uint32
pmh_segword_log_ext(uint64 word)
{
	return (uint32) pmh_segword_prefix(word);
}

/*
 * The entries of backup-log line "line": in the fixed log, or in a log
 * segment (whose extension the caller has mapped in pool->log_ext_segs).
 */
static inline PmhEntry *
pmh_log_line(const PmhPool *pool, uint32 line)
{
	uint32		ext;

	if (line < PMH_LOG_LINES)
		return (PmhEntry *) (pool->base + PMH_LOG_OFFSET +
							 (size_t) line * PMH_LINE_BYTES);
	ext = (line - PMH_LOG_LINES) / PMH_LOG_EXT_LINES;
	Assert(pool->log_ext_segs != NULL && ext < PMH_LOG_MAX_EXTS &&
		   pool->log_ext_segs[ext] != PMH_NO_SEGMENT);
	return pmh_seg_entries(pool, pool->log_ext_segs[ext]) +
		(size_t) ((line - PMH_LOG_LINES) % PMH_LOG_EXT_LINES) * PMH_BUCKET_SLOTS;
}

/* a backup-log slot */
static inline PmhEntry *
pmh_log_entry(const PmhPool *pool, uint32 logslot)
{
	return pmh_log_line(pool, logslot / PMH_BUCKET_SLOTS) +
		logslot % PMH_BUCKET_SLOTS;
}

/* the persistence choke point: every flush of the pool goes through here */
extern int	pmh_persist(PmhPool *pool, const void *addr, size_t len);
extern void pmh_batch_begin(PmhPool *pool);
extern int	pmh_batch_end(PmhPool *pool);
extern int	pmh_pool_format(PmhPool *pool, const PmhPoolHeader *hdr);
extern int	pmh_pool_state_init(PmhPool *pool, uint64 crash_count);
extern int	pmh_pool_state_set(PmhPool *pool, uint64 set, uint64 clear);
extern int	pmh_pool_note_crashes(PmhPool *pool, uint64 crash_count,
								  bool *stale);
extern int	pmh_sync_now(PmhPool *pool, const void *addr, size_t len);
extern int	pmh_pool_mark(PmhPool *pool, const uint64 *boot);
extern bool pmh_pool_mark_ok(const PmhPoolMark *mark, const uint64 *boot);

/* ---- segments (pmh_segment.c) ---- */
extern void pmh_meta_reset(PmhSegMeta *meta, uint64 word);
extern int	pmh_find_slot(const PmhPool *pool, const PmhSegMeta *meta,
						  uint32 segno, uint64 hash, uint64 tag);
extern int	pmh_fpt_sequence(const PmhSegMeta *meta, uint64 hash, int *seq);
extern void pmh_fpt_add(PmhSegMeta *meta, uint64 hash, int slot);
extern void pmh_fpt_remove(PmhSegMeta *meta, uint64 hash, int slot);
extern void pmh_fpt_rebuild(const PmhPool *pool, PmhSegMeta *meta,
							uint32 segno);
extern bool pmh_fpt_verify(const PmhPool *pool, const PmhSegMeta *meta,
						   uint32 segno, char *msg, size_t msglen);
extern void pmh_meta_load(const PmhPool *pool, uint32 segno, uint64 owner_word,
						  PmhSegMeta *meta);
extern PmhInsertResult pmh_insert(PmhPool *pool, const PmhCallbacks *cb,
								  uint32 segno, uint64 hash, uint32 block,
								  uint16 offset);
extern PmhInsertResult pmh_insert_new(PmhPool *pool, const PmhCallbacks *cb,
									  uint32 segno, uint64 hash, uint32 block,
									  uint16 offset);
extern void pmh_insert_prefetch_slot(const PmhPool *pool,
									 const PmhSegMeta *meta, uint32 segno);
extern int	pmh_add_overflow(PmhPool *pool, const PmhCallbacks *cb,
							 uint32 segno, uint32 newseg);
extern int	pmh_add_log_segment(PmhPool *pool, uint32 segno, uint32 ext);
extern int	pmh_lookup(const PmhPool *pool, const PmhCallbacks *cb,
					   uint32 segno, uint64 hash, uint64 *tags, int maxtags);
extern int	pmh_lookup_meta(const PmhPool *pool, const PmhCallbacks *cb,
							const PmhSegMeta *meta, uint32 segno, uint64 hash,
							uint64 *tags, int maxtags);
extern int	pmh_delete_chain(PmhPool *pool, const PmhCallbacks *cb,
							 uint32 segno, const uint16 *dead, int nsegs);
extern int	pmh_delete_slots(PmhPool *pool, PmhSegMeta *meta, uint32 segno,
							 int bucket, uint16 mask);
extern bool pmh_contains(const PmhPool *pool, const PmhCallbacks *cb,
						 uint32 segno, uint64 hash, uint64 tag);
extern int	pmh_mark_dead(const PmhPool *pool, const PmhCallbacks *cb,
						  uint32 segno, uint64 hash,
						  bool (*is_dead) (uint64 tag, void *arg), void *arg);
extern int	pmh_chain_hinted(const PmhCallbacks *cb, uint32 segno,
							 uint16 *dead, int nsegs);

/* the segment layer's inline helpers: fingerprints and prefetch hints */
#include "pmh_segment.h"

/* ---- splits (pmh_split.c) ---- */
extern int	pmh_segments_needed_for_split(const PmhCallbacks *cb, uint32 segno);
extern int	pmh_split(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
					  uint32 *newsegno);
/*
 * The most free segments a caller sets aside for pmh_split_reserved: the
 * new primary and an overflow chain of up to 7 (a segment with a longer
 * chain splits the way pmh_split does, taking what it needs as it goes).
 */
#define PMH_SPLIT_RESERVE_MAX	8
extern int	pmh_split_reserved(PmhPool *pool, const PmhCallbacks *cb,
							   uint32 segno, const uint32 *seg, int *nseg,
							   uint32 *newsegno);

/* ---- the backup log and D-buckets (pmh_dbucket.c) ---- */
extern int	pmh_log_write(PmhPool *pool, uint32 line, int first,
						  const PmhEntry *entries, int n);
extern int	pmh_log_clear_slots(PmhPool *pool, const uint32 *slots, int n);

/* word w of a caller's masks of free backup-log lines (64 lines a word) */
typedef uint64 (*PmhMaskWordFn) (const void *arg, uint32 w);

extern int32 pmh_log_find_free(PmhMaskWordFn word, const void *arg,
							   uint32 nwords, uint32 cursor);
extern void pmh_pending_add(PmhSegMeta *meta, uint64 hash, uint64 tag,
							uint32 logslot);
extern void pmh_pending_remove(PmhSegMeta *meta, int i);
extern int	pmh_pending_lookup(const PmhSegMeta *meta, uint64 hash,
							   uint64 *tags, int n, int maxtags);
extern void pmh_pending_prefetch(const PmhPool *pool, const PmhCallbacks *cb,
								 uint32 segno);
extern void pmh_rank_lines(const PmhSegMeta *m, int want, int *fit,
						   int *fit_free, int *most, int *most_free);
extern void pmh_relocate_prefetch(const PmhPool *pool, const PmhCallbacks *cb,
								  uint32 segno);
extern PmhInsertResult pmh_relocate(PmhPool *pool, const PmhCallbacks *cb,
									uint32 segno, bool check_segment,
									bool decide, uint32 *released,
									int *nreleased, int *nduplicates);

/*
 * Collect the tag words of every entry with this hash that a scan finds in
 * the shared state: primary segment segno and its overflow chain
 * (pmh_lookup_meta), then its D-bucket (pmh_pending_lookup; meta is the
 * primary's metadata, from which both start).  Stores at most maxtags and
 * returns the number found, which may exceed maxtags.  (Inline, so that a
 * lookup runs no call beyond the two it makes: see pmh_probe_segment on why
 * that counts.)
 */
static inline int
pmh_lookup_all(const PmhPool *pool, const PmhCallbacks *cb,
			   const PmhSegMeta *meta, uint32 segno, uint64 hash,
			   uint64 *tags, int maxtags)
{
	int			n = pmh_lookup_meta(pool, cb, meta, segno, hash, tags, maxtags);

	return pmh_pending_lookup(meta, hash, tags, n, maxtags);
}

/* ---- the directory (pmh_recover.c) ---- */
extern void pmh_dir_assign(uint32 *dir, int gd, uint64 word, uint32 segno);
extern void pmh_dir_double(const uint32 *olddir, int gd, uint32 *newdir);

/* ---- recovery (pmh_recover.c) ---- */

/* What recovery found in one segment slot. */
typedef enum PmhSegRole
{
	PMH_SEG_FREE = 0,
	PMH_SEG_PRIMARY,
	PMH_SEG_OVERFLOW,
	PMH_SEG_LOG					/* extension of the backup log */
} PmhSegRole;

typedef struct PmhRecoveryResult
{
	int			global_depth;
	uint64		primaries;
	uint64		overflows;
	uint32		log_exts;		/* log segments (extensions 0 .. n-1) */
	uint64		orphans_cleared;	/* half-done splits/overflows undone */
	uint64		free_zeroed;	/* free segments that were not zero */
	char		error[256];		/* non-empty: the pool is corrupt */
} PmhRecoveryResult;

/* uint64 words of scratch space recovery needs for a pool of n segments */
#define PMH_RECOVER_SCRATCH(n)	(4 * (uint64) (n))

extern int	pmh_recover_words(PmhPool *pool, PmhSegRole *roles,
							  uint32 *owner, uint64 *scratch,
							  PmhRecoveryResult *res);
extern int	pmh_recover(PmhPool *pool, PmhSegRole *roles, uint32 *owner,
						uint64 *scratch, PmhRecoveryResult *res);
extern bool pmh_segment_is_zero(const PmhPool *pool, uint32 segno);
extern int	pmh_prepare_free_segment(PmhPool *pool, uint32 segno);

#endif							/* PMH_CORE_H */
