/*-------------------------------------------------------------------------
 *
 * fuzz_common.h
 *	  The harness shared by the fuzz targets of test/fuzz: an in-memory pool
 *	  image driven through the server-independent core (src/pmh_core.c) and
 *	  its write-path protocol (src/core/pmh_writepath.c), the volatile
 *	  metadata and backup-log line states the server keeps in shared memory,
 *	  a shadow copy of what was persisted (for simulated power failures),
 *	  the byte reader that decodes fuzz inputs, and compact checkers of the
 *	  structure and of the log's bookkeeping.
 *
 * The image is one heap block of exactly the pool's length (4 kB aligned),
 * so that AddressSanitizer reports any read or write past its end.  Every
 * range the core persists is checked against the image and, when a shadow
 * is kept, copied into the shadow at the next fence.
 *
 * A failed check prints a message and aborts: libFuzzer keeps the input as
 * a crash.
 *
 *-------------------------------------------------------------------------
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include "pmh_writepath.h"

/* the harness grows a pool to at most this many segments */
#define FZ_MAX_SEGMENTS		1024

/* directories are built and checked up to this global depth */
#define FZ_MAX_DIR_DEPTH	16

/* flushed ranges remembered until the next fence */
#define FZ_MAX_RANGES		256

/* chunks of backup-log line states a log can have (PmhLogChunk) */
#define FZ_LOG_CHUNKS		(PMH_LOG_MAX_LINES / PMH_LOG_CHUNK)

/* ---- fuzz input reader ---- */

typedef struct FzIn
{
	const uint8 *p;
	size_t		n;
} FzIn;

extern uint8 fz_u8(FzIn *in);
extern uint16 fz_u16(FzIn *in);
extern uint32 fz_u32(FzIn *in);
extern uint64 fz_u64(FzIn *in);

/* ---- reporting ---- */

extern bool fz_verbose;

extern bool fz_env_flag(const char *name);

/* the entry points libFuzzer calls */
extern int	LLVMFuzzerInitialize(int *argc, char ***argv);
extern int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern void fz_fail(const char *fmt,...) pg_attribute_printf(1, 2)
			pg_attribute_noreturn();
extern void fz_trace(const char *fmt,...) pg_attribute_printf(1, 2);

#define FZ_ASSERT(cond, ...) \
	do { if (!(cond)) fz_fail(__VA_ARGS__); } while (0)

/* splitmix64 */
extern uint64 fz_mix(uint64 x);

/* ---- pools ---- */

typedef struct FzRange
{
	uint64		off;
	size_t		len;
} FzRange;

typedef struct FzPool
{
	PmhPool		pool;			/* base is the image */
	uint64		nseg;
	PmhSegMeta *meta;			/* nseg entries */
	PmhSegRole *role;			/* nseg entries */
	uint32	   *owner;			/* overflow segment -> its primary */
	uint32	   *freesegs;		/* stack; the lowest segment on top */
	uint32		nfree;
	uint32		log_exts[PMH_LOG_MAX_EXTS]; /* log extension -> segment */
	uint64		max_segments;	/* growth limit */
	uint32	   *dir;			/* directory, when dir_valid */
	int			gd;				/* its global depth */
	bool		dir_valid;		/* else primaries are found by a scan */
	int			allocs;			/* segments handed out by the callback */
	PmhCallbacks cb;

	/*
	 * The backup log's line states, as the server keeps them in shared
	 * memory, and the one writer that drives the core's write path over them
	 * (fz_writer).  log.nexts counts the log segments in the pool.
	 */
	PmhLogState log;
	PmhLogChunk **chunks;		/* FZ_LOG_CHUNKS; NULL past the log, or all
								 * of it before fz_log_setup */
	uint32		log_fixed;		/* fixed lines used (kept across restarts) */
	uint32		log_max_exts;	/* log segments it may grow to (likewise) */
	int32		own_line;		/* the writer's line, or -1 */
	int			own_used;		/* its slots used */
	bool		stale;			/* a crash happened: relocation looks for
								 * copies in the segment */
	int			faults;			/* PmhWriter.faults (PMH_WP_FAULT_*) */
	PmhWriter	w;

	/* shadow image: the bytes persisted so far (NULL: not kept) */
	char	   *shadow;
	FzRange		ranges[FZ_MAX_RANGES];	/* flushed since the last fence */
	int			nranges;
	bool		ranges_overflow;	/* too many: copy the whole image */
	int			crash_after;	/* > 0: freeze the shadow at that fence */
	bool		frozen;			/* the shadow no longer follows */
	uint64		fences;
} FzPool;

extern char *fz_image_alloc(size_t len);
extern void fz_pool_init(FzPool *fp, char *image, size_t len, bool shadow);
extern void fz_pool_free(FzPool *fp);
extern void fz_pool_grow(FzPool *fp, uint64 newnseg);
extern void fz_pool_ensure_free(FzPool *fp, int n);
extern void fz_pool_create(FzPool *fp, uint64 nseg, bool shadow);
extern int	fz_pool_load(FzPool *fp, PmhRecoveryResult *res);
extern void fz_pool_restart_from_shadow(FzPool *fp);
extern void fz_arm_crash(FzPool *fp, int fences);

extern uint32 fz_primary_of(const FzPool *fp, uint64 hash);
extern int	fz_chain_length(const FzPool *fp, uint32 segno);
extern uint32 fz_split(FzPool *fp, uint32 segno);
extern uint32 fz_add_overflow(FzPool *fp, uint32 segno);
extern uint32 fz_add_log_segment(FzPool *fp);

/* the core's write path (src/core/pmh_writepath.c) over the pool */
extern void fz_log_setup(FzPool *fp, uint32 fixed_lines, uint32 max_exts);
extern PmhWriter *fz_writer(FzPool *fp);
extern PmhInsertResult fz_relocate(FzPool *fp, uint32 segno);

/* an entry as a (hash, tag) pair, and comparators for qsort */
typedef struct FzPair
{
	uint64		hash;
	uint64		tag;
} FzPair;

extern int	fz_cmp_pair(const void *a, const void *b);
extern int	fz_cmp_u64(const void *a, const void *b);
extern FzPair *fz_collect(const FzPool *fp, bool pending, size_t *n);

/* lookups: the segments and chain, then the D-bucket of the primary */
extern int	fz_lookup(const FzPool *fp, uint64 hash, uint64 *tags, int max,
					  int *nsegpart);

extern uint64 fz_check_structure(const FzPool *fp, const char *what);
extern uint32 fz_check_log(FzPool *fp, const char *what);

static inline uint64
fz_tid_of_tag(uint64 tag)
{
	return ((uint64) pmh_tag_block(tag) << 16) | pmh_tag_offset(tag);
}

#endif							/* FUZZ_COMMON_H */
