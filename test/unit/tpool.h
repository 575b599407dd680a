/*-------------------------------------------------------------------------
 *
 * tpool.h
 *	  The harness shared by the unit-test programs of the core: test pools
 *	  (a pool file, its mapping and the volatile metadata the server keeps in
 *	  shared memory), the reference model of (hash, TID) entries, the
 *	  structure and model checks, the record of the flushes and fences an
 *	  operation made, and the backup-log helpers that do what the server's
 *	  write path and log recovery do.
 *
 * The programs set g_tmpdir (where pool files go), S (the sizes of the
 * running pass) and g_rng (the per-test random state) before using them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TPOOL_H
#define TPOOL_H

#include "pmh_core.h"
#include "pmh_writepath.h"
#include "unit_util.h"

/* sizes of one pass of a test program */
typedef struct Scale
{
	const char *pass;			/* "flush" or "msync" */
	int			expect_pmem;	/* is_pmem pmem_map_file should report */
	int			n_random;		/* entries of the main workload */
	int			n_small;		/* entries of the crash-test workloads */
	int			n_dups;			/* TIDs under one hash */
	int			n_others;		/* other entries of the duplicates test */
	int			n_absent;		/* absent hashes probed per verification */
	int			n_after;		/* inserts after a simulated crash */
	bool		bulk_setup;		/* build test set-ups with no_persist */
} Scale;

extern const Scale *S;
extern uint64 g_seed;
extern uint64 g_rng;			/* per-test random state */
extern char g_tmpdir[MAXPGPATH];
extern int	g_poolno;

typedef enum TRole
{
	T_FREE = 0,
	T_PRIMARY,
	T_OVERFLOW,
	T_LOG						/* a log segment (backup-log extension) */
} TRole;

typedef struct TPool
{
	char		path[MAXPGPATH];
	PmhPool		pool;
	uint64		nseg;			/* segments in the file and the mapping */
	PmhSegMeta *meta;			/* nseg entries */
	uint8	   *role;			/* nseg entries, TRole */
	uint32	   *freesegs;		/* stack of free segments, nseg capacity */
	uint32		nfree;
	uint32	   *dir;			/* 1 << gd entries */
	int			gd;
	int			alloc_budget;	/* < 0: unlimited */
	bool		lazy_free;		/* as the server: recovery leaves free
								 * segments alone, taking one zeroes it */
	int			allocs;			/* allocations since last reset */
	uint32		last_alloc;
	uint64		splits;
	uint64		overflows_added;
	uint64		grows;
	uint32	   *log_exts;		/* segment of each log extension (set by
								 * tpool_recover), or NULL */
	uint32		nlog_exts;
	PmhCallbacks cb;
	/* the backup log's line states, as the server keeps them (tlog.c) */
	PmhLogState log;
	PmhLogChunk **logchunks;	/* NULL until tlog_setup */
	int32		own_line;		/* the test's writer: its line, or -1 */
	int			own_used;
	int			faults;			/* PmhWriter.faults */
	int64		entries_delta;	/* what the protocol said of the count */
	PmhWriter	w;
	/* tests of the protocol's failures (test_writepath.c) */
	bool		wp_expect_errors;	/* count errors instead of failing */
	int			wp_errors;
	PmhWpStatus wp_last_status;
	bool		wp_last_fatal;
	bool		wp_deny_room;	/* splits, overflows, log growth refused */
} TPool;

#define STOP_SPLIT		0x1
#define STOP_OVERFLOW	0x2

typedef struct ModelEntry
{
	uint64		hash;
	uint64		tid;			/* block << 16 | offset */
} ModelEntry;

typedef struct Model
{
	ModelEntry *e;
	size_t		n;
	size_t		cap;
} Model;

/* what a flush hook heard, in order: ranges (len > 0) and fences (len 0) */
#define MAX_HOOK_EVENTS		8

typedef struct HookLog
{
	int			nevents;
	int			nranges;
	int			nfences;
	uint64		off[MAX_HOOK_EVENTS];
	size_t		len[MAX_HOOK_EVENTS];
} HookLog;

/* TID as one number */
static inline uint64
tid_of(uint32 block, uint16 offset)
{
	return ((uint64) block << 16) | offset;
}

/* TID of a tag word, decoded with the core's accessors */
static inline uint64
tid_of_tag(uint64 tag)
{
	return tid_of(pmh_tag_block(tag), pmh_tag_offset(tag));
}

extern uint64 rnd(void);
extern void rnd_tid(uint32 *block, uint16 *offset);
extern PmhSegMeta *cb_get_meta(void *arg, uint32 segno);
extern uint32 cb_alloc_segment(void *arg);
extern bool tpool_map(TPool *tp);
extern void tpool_resize_meta(TPool *tp, uint64 oldn, uint64 newn);
extern void tpool_init_struct(TPool *tp, const char *name);
extern bool tpool_create(TPool *tp, const char *name, uint64 nseg);
extern bool tpool_grow(TPool *tp, uint64 newn);
extern bool tpool_ensure_free(TPool *tp, int n);
extern void tpool_close(TPool *tp);
extern uint32 hdr_next(const TPool *tp, uint32 segno);
extern int chain_length(const TPool *tp, uint32 segno);
extern uint64 tpool_used(const TPool *tp);
extern void tpool_count(const TPool *tp, uint64 *nprim, uint64 *novf);
extern void tpool_publish_split(TPool *tp, uint32 segno, uint32 newseg);
extern uint32 tpool_split(TPool *tp, uint32 segno);
extern uint32 tpool_add_overflow(TPool *tp, uint32 segno);
extern PmhInsertResult tpool_insert_ex(TPool *tp, uint64 hash, uint32 block, uint16 offset, int stop, uint32 *stopseg);
extern PmhInsertResult tpool_insert(TPool *tp, uint64 hash, uint32 block, uint16 offset);
extern int tpool_lookup(TPool *tp, uint64 hash, uint64 **tags, int *cap);
extern bool tpool_from_bytes(TPool *dst, const char *bytes, size_t len, const char *name);
extern bool tpool_copy(TPool *dst, const TPool *src, const char *name);
extern int tpool_recover(TPool *tp, PmhRecoveryResult *res, PmhSegRole **roles_out, uint32 **owner_out);
extern void model_add(Model *m, uint64 hash, uint32 block, uint16 offset);
extern void model_free(Model *m);
extern int cmp_model(const void *a, const void *b);
extern int cmp_u64(const void *a, const void *b);
extern bool model_has_hash(const Model *m, uint64 hash);
extern uint64 check_structure(TPool *tp, const char *what);
extern void verify_model(TPool *tp, Model *m, int nabsent, const char *what);
extern void hook_start(TPool *tp, HookLog *hl);
extern void hook_stop(TPool *tp);
extern void check_stats(const PmhPersistStats *st, uint64 persists, uint64 bytes, uint64 cachelines, uint64 whole, uint64 partial, uint64 fences, const char *what);
extern void setup_begin(TPool *tp, bool setup);
extern void setup_end(TPool *tp);
extern void workload_random(TPool *tp, Model *m, int n, bool setup);
extern bool insert_until(TPool *tp, Model *m, PmhInsertResult what, int stop, uint64 *hash, uint32 *block, uint16 *offset, uint32 *segno, bool setup);
extern void insert_dups(TPool *tp, Model *m, uint64 hash, int n, uint32 base, bool setup);
extern uint64 bucket_offset(const TPool *tp, uint32 s, int b);
extern bool bucket_is_zero(const TPool *tp, uint32 s, int b);
extern uint64 hash_in_segment(const TPool *tp, uint32 p);
extern void make_entries(const TPool *tp, uint32 p, int n, uint32 block, PmhPending *out);
extern PmhPending pending_of(uint64 hash, uint32 block, uint16 offset);
extern void pend_entries(TPool *tp, uint32 p, uint32 line, int first, PmhPending *ents, int n);
extern void model_add_pending(Model *m, const PmhPending *p);
extern bool pending_equal(const PmhPending *a, const PmhPending *b);
extern bool slot_holds(const TPool *tp, uint32 s, int b, int k, const PmhPending *p);
extern void check_line_holds(const TPool *tp, uint32 s, int b, uint16 mask, const PmhPending *ents, const char *what);
extern void check_found(TPool *tp, const PmhPending *p, int count, const char *what);
extern void delete_slots_model(TPool *tp, Model *m, uint32 s, int b, uint16 mask);

/* tlog.c: the core's write path over a test pool */
extern void tlog_setup(TPool *tp, uint32 fixed_lines, uint32 max_exts);
extern void tlog_free(TPool *tp);
extern PmhWriter *tlog_writer(TPool *tp);
extern void tlog_mark_pending(TPool *tp, uint32 line, int first, int n);
extern int tpool_relocate_all(TPool *tp, int *ndup);
extern int log_recover(TPool *tp);

#endif							/* TPOOL_H */
