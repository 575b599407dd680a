/*-------------------------------------------------------------------------
 *
 * pmh_bench.c
 *	  Benchmark driver for the pmhash data structure alone (no server):
 *	  the core (src/core) with the server's write path -- the core's own
 *	  protocol, src/core/pmh_writepath.c -- driven by YCSB-style workloads like ElimDA's Exp#1, #2
 *	  and #6, so that the numbers compare with Dash and CCEH.
 *
 * What it keeps the way the server keeps it (see src/README.pmhash):
 *	- one pool file (pmem_map_file), unlinked right after it is mapped, so
 *	  that no file is left behind whatever happens;
 *	- the volatile metadata: one PmhSegMeta per segment (occupancy,
 *	  fingerprints, D-bucket), the directory, the free segments;
 *	- the backup log: the core's line states (PmhLogChunk), log segments
 *	  added when the log runs out of free lines (pmh_wp_reserve);
 *	- locks: an index lock (shared for every operation, exclusive for
 *	  splits, overflow segments and log growth), one lock per segment
 *	  (exclusive to add to or relocate a D-bucket and to delete; shared for
 *	  a lookup that a writer got in the way of) with its version word for
 *	  optimistic lookups (pmh_version_read_begin), and a log lock for the
 *	  line states.
 *
 * Operations:
 *	insert		ElimDA's write path, as aminsert + commit do it: the entry goes
 *				to the thread's collecting log (16 entries, backend memory);
 *				a full one is written to a backup-log line (pmh_wp_flush: one
 *				flush, one fence) and its entries go to the D-buckets of their
 *				segments (pmh_wp_place); a full D-bucket is relocated into
 *				one free 256 B line of its segment (pmh_relocate), splitting
 *				the segment or adding an overflow segment when told to
 *	insert-direct  pmh_insert (probe, then one persisted 16 B write per
 *				entry): the ADR-style path, for comparison
 *	search+		lookup of an inserted key: segment and chain (pmh_lookup: the
 *				hash's fingerprint bucket), D-bucket, own collecting log;
 *				must find exactly the key's TID
 *	search-		lookup of a key never inserted; must find nothing
 *	search+ batch, search- batch  the same keys PMH_LOOKUP_BATCH at a time,
 *				as a scan of "= ANY (array)" looks them up: every lookup's
 *				lines start loading before any is read (op_lookup_batch)
 *	delete		find the key's slot by its fingerprint and clear it
 *				(pmh_delete_slots: one persisted 8-byte store), or drop it
 *				from its D-bucket (its log copy cleared and persisted)
 * Keys are drawn uniformly or from a scrambled Zipf(theta) distribution
 * over the key set; hashes are a bijective mix of the key number, so
 * distinct keys have distinct hashes.  Every answer is checked; a wrong one
 * makes the exit status 1.  Each thread count gets a fresh table; inserts
 * are of distinct keys (an index of (hash, TID) entries has no "update").
 * After the search phases of the first thread count come the probe
 * experiments (see probe_exp): alternative lookups, measured on the same
 * table against the lookup of src/ to weigh ideas for the probe cost, and
 * the same keys looked up in a CCEH-shaped table (one miss per lookup) to
 * show what the layout of the reference figures gives on this machine.
 *
 * Media traffic: the choke point's flush hook traces every flushed range
 * with the number of the fence that ends it; after each phase the traces
 * are fed, in fence order, into the write-combining buffer model of
 * src/core/pmh_media.c (64 lines of 256 B, LRU; one model for all threads) and
 * the model is drained.  The model's work is not timed, only the trace's
 * recording (an atomic add per fence, a store per range): the server runs it
 * at each fence, but Dash's and CCEH's figures carry no such instrument.
 * Write amplification = media bytes written / 16 B
 * per entry inserted (or deleted).  The read hook counts the pool entries
 * each lookup reads: the fraction of negative lookups that read the pool at
 * all is ElimDA's point about fingerprints in DRAM.
 *
 * Output: a markdown table on stdout (with the reference figures of Dash
 * and CCEH), and with --tsv FILE one tab-separated row per measurement.
 * "--help" lists the options.
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_core.h"
#include "pmh_writepath.h"
#include "pmh_media.h"
#include "../unit/unit_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <libpmem.h>

#include "port/pg_bitutils.h"

#define BENCH_MAX_THREADS	64
#define BENCH_KEY_SEED		UINT64CONST(0x2545F4914F6CDD1D)
#define BENCH_HUGE_PAGE		((size_t) 2 * 1024 * 1024)

/* ---------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------
 */

typedef struct BenchOptions
{
	uint64		entries;		/* keys inserted */
	uint64		ops;			/* operations per search phase */
	uint64		del_ops;		/* operations per delete phase */
	int			threads[8];
	int			nthreads;
	bool		uniform;
	bool		zipf;
	double		theta;
	const char *dir;
	bool		msync;
	int			media_lines;	/* 0: no media model */
	bool		direct;			/* also the insert-direct run */
	bool		verify;			/* look every key up after load/delete */
	bool		experiments;	/* also the probe experiments */
	bool		huge_meta;		/* metadata in 2 MB pages */
	const char *tsv;
	uint64		seed;
	double		pool_factor;	/* segments reserved per 1024 entries */
} BenchOptions;

static BenchOptions opt = {
	.entries = 10000000,
	.ops = 0,
	.del_ops = 0,
	.threads = {1, 2},
	.nthreads = 2,
	.uniform = true,
	.zipf = true,
	.theta = 0.99,
	.dir = "/dev/shm",
	.msync = false,
	.media_lines = PMH_MEDIA_DEFAULT_LINES,
	.direct = true,
	.verify = false,
	.experiments = true,
	.tsv = NULL,
	.seed = UINT64CONST(0x706d68617368),
	.pool_factor = 3.0,
};

static uint64 bench_errors;	/* wrong answers, in all phases */
static uint64 bench_lookups;	/* lookups of the search phases */
static uint64 bench_retries;	/* of them, looked again under the lock */

/* print a message and exit with status 2 */
static void
die(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	fprintf(stderr, "pmh_bench: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

/* CPU seconds the calling thread has used */
static double
thread_cpu_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* uniform double in [0, 1) */
static double
rng_double(uint64 *state)
{
	return (rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* the hash of key k: a bijection of 64-bit values (splitmix64's mixer) */
static inline uint64
key_hash(uint64 k)
{
	uint64		z = k ^ BENCH_KEY_SEED;

	z = (z ^ (z >> 30)) * UINT64CONST(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64CONST(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* the heap TID of key k, as a tag word: unique per key, offset never 0 */
static inline uint64
key_tag(uint64 k)
{
	return pmh_tag_make(key_hash(k), (uint32) (k >> 8), (uint16) ((k & 0xff) + 1));
}

/* ---------------------------------------------------------------------
 * Workload streams: arrays of key numbers, generated before the clock runs
 * ---------------------------------------------------------------------
 */

/*
 * Zipf(theta) ranks over n items, by the method of Gray et al. ("Quickly
 * generating billion-record synthetic databases"), the one YCSB uses.
 */
typedef struct Zipf
{
	uint64		n;
	double		theta;
	double		alpha;
	double		zetan;
	double		eta;
	double		half_pow_theta;
} Zipf;

/* sum of 1/i^theta for i = 1..n */
static double
zeta(uint64 n, double theta)
{
	double		sum = 0;
	uint64		i;

	for (i = 1; i <= n; i++)
		sum += pow((double) i, -theta);
	return sum;
}

/* set up a generator of ranks 0..n-1, rank 0 the most frequent */
static void
zipf_init(Zipf *z, uint64 n, double theta)
{
	double		zeta2 = zeta(2, theta);

	z->n = n;
	z->theta = theta;
	z->alpha = 1.0 / (1.0 - theta);
	z->zetan = zeta(n, theta);
	z->eta = (1.0 - pow(2.0 / (double) n, 1.0 - theta)) /
		(1.0 - zeta2 / z->zetan);
	z->half_pow_theta = 1.0 + pow(0.5, theta);
}

/* the next rank */
static uint64
zipf_next(const Zipf *z, uint64 *state)
{
	double		u = rng_double(state);
	double		uz = u * z->zetan;
	uint64		r;

	if (uz < 1.0)
		return 0;
	if (uz < z->half_pow_theta)
		return 1;
	r = (uint64) ((double) z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
	return r < z->n ? r : z->n - 1;
}

/* a random permutation of 0..n-1 (Fisher-Yates) */
static uint32 *
make_permutation(uint64 n, uint64 *state)
{
	uint32	   *p = pg_malloc(sizeof(uint32) * n);
	uint64		i;

	for (i = 0; i < n; i++)
		p[i] = (uint32) i;
	for (i = n; i > 1; i--)
	{
		uint64		j = rng_next(state) % i;
		uint32		t = p[i - 1];

		p[i - 1] = p[j];
		p[j] = t;
	}
	return p;
}

/*
 * A stream of "count" key numbers base + x, x in 0..n-1: uniform, or Zipf
 * ranks mapped through a random permutation (so that the hot keys are
 * spread over the table, as YCSB's scrambled Zipf does).
 */
static uint32 *
make_stream(uint64 count, uint64 base, uint64 n, bool zipf, uint64 seed)
{
	uint32	   *s = pg_malloc(sizeof(uint32) * Max(count, 1));
	uint64		state = seed;
	uint64		i;

	if (!zipf)
	{
		for (i = 0; i < count; i++)
			s[i] = (uint32) (base + rng_next(&state) % n);
	}
	else
	{
		Zipf		z;
		uint32	   *perm = make_permutation(n, &state);

		zipf_init(&z, n, opt.theta);
		for (i = 0; i < count; i++)
			s[i] = (uint32) (base + perm[zipf_next(&z, &state)]);
		free(perm);
	}
	return s;
}

/* ---------------------------------------------------------------------
 * The table: pool, metadata, directory, backup-log state, locks
 * ---------------------------------------------------------------------
 */

/*
 * A segment's lock, one cache line, as the server's PmhashSegSlot; its
 * version (pmh_version_read_begin) is in the metadata's first line, which a
 * lookup reads anyway.  The lock is shared or exclusive, as the server's
 * LWLock, in one word: SEG_EXCLUSIVE, or the number of holders sharing it.
 * (A glibc rwlock cost an atomic operation more and about 80 instructions
 * per placement: a tenth of an insert.)
 */
typedef struct SegLock
{
	uint32		state;
} __attribute__((aligned(PMH_CACHELINE_BYTES))) SegLock;

#define SEG_EXCLUSIVE	UINT32_C(0x80000000)
#define SEG_SPINS		64		/* spins before a waiter yields the CPU */

typedef struct Table
{
	char	   *base;
	size_t		mapped_len;
	int			is_pmem;
	uint32		nseg;			/* segments in the mapping */
	PmhSegMeta *meta;
	SegLock    *seglock;
	uint32	   *freesegs;		/* stack, lowest segment on top */
	uint32		nfree;
	/* the stack and the counts below, while the index lock is shared */
	pthread_mutex_t freelock;
	uint32		primaries;
	uint32		overflows;
	uint64		splits;
	uint64		splits_shared;	/* of them, under the segment lock alone */
	pthread_rwlock_t idxlock;
	uint32	  **retired;		/* directories replaced: freed at the end */
	int			nretired;

	/*
	 * What a lookup reads without the index lock (lookup_unlocked), on a
	 * line of its own: the index's version, odd while the index lock is
	 * held exclusively (the server's PmhashShared.ixversion), and the
	 * directory, which changes only then.
	 */
	uint32		ixversion __attribute__((aligned(PMH_CACHELINE_BYTES)));
	int			gd;
	uint32	   *dir;
	char		ix_pad[PMH_CACHELINE_BYTES - 2 * sizeof(uint32) - sizeof(uint32 *)];

	pthread_mutex_t loglock;
	PmhLogChunk *logchunks;		/* line states of PMH_LOG_MAX_LINES lines */
	PmhLogState log;			/* the core's counters (pmh_writepath.h) */
	uint32		log_ext_segs[PMH_LOG_MAX_EXTS];

	PmhMediaModel *media;		/* NULL: no model */
	/* fences traced in this phase (atomic): on a line of its own */
	uint64		fence_seq __attribute__((aligned(PMH_CACHELINE_BYTES)));
	char		fence_pad[PMH_CACHELINE_BYTES - sizeof(uint64)];
	PmhCallbacks cb;
} Table;

/* a flushed range and the number of the fence that ended it */
typedef struct TraceRange
{
	uint64		offset;
	uint32		len;
	uint32		seq;
} TraceRange;

/* per-thread state: its own mapping view, collecting log, counters */
typedef struct Worker
{
	Table	   *t;
	int			id;
	PmhPool		pool;
	bool		exclusive;		/* holds the index lock exclusively */
	/* collecting log (backend memory) */
	PmhEntry	clog[PMH_BUCKET_SLOTS];
	int			nclog;
	int32		log_line;		/* owned backup-log line, or -1 */
	int			log_used;
	PmhWriter	wr;				/* the core's write path, as this thread */
	/*
	 * The phase's flushed ranges, in order, replayed into the media model
	 * after it; those from nfenced on wait for their fence's number
	 */
	TraceRange *trace;
	uint64		ntrace;
	uint64		nfenced;
	uint64		trace_cap;
	/* counters of the running phase */
	uint64		reads;			/* pool entries read by lookups */
	uint64		cur_reads;
	uint64		ops_reading;	/* lookups that read the pool at all */
	uint64		retries;		/* optimistic lookups a writer got in the way of */
	/* a lookup without the index lock: its metadata callbacks and walk */
	PmhCallbacks rcb;
	uint32		steps;			/* segments it may still visit */
	bool		bad;			/* it met a chain longer than the pool */
	uint64		hits;
	uint64		errors;
	/* the phase's work */
	const uint32 *keys;
	uint64		nkeys;
	int			op;
	double		cpu_secs;		/* CPU time the thread spent on the phase */
	double		wall_start;		/* when it started and ended the phase */
	double		wall_end;
} Worker;

static void worker_init(Worker *w, Table *t, int id);
static void writer_init(Worker *w);
static PmhSegMeta *cb_get_meta_unlocked(void *arg, uint32 segno);

/* PmhCallbacks.get_meta */
static PmhSegMeta *
cb_get_meta(void *arg, uint32 segno)
{
	Table	   *t = (Table *) arg;

	if (segno >= t->nseg)
		die("get_meta(%u) past the %u segments", segno, t->nseg);
	return &t->meta[segno];
}

/* PmhCallbacks.alloc_segment, with the index lock exclusive */
static uint32
cb_alloc_segment(void *arg)
{
	Table	   *t = (Table *) arg;

	if (t->nfree == 0)
		return PMH_NO_SEGMENT;
	return t->freesegs[--t->nfree];
}

/*
 * A fence ended the ranges a worker flushed since the last one: give them
 * the fence's number, shared by all workers.  The model gets every fence's
 * ranges after the phase, in fence order (bench_replay_traces): in the
 * server it is fed at each fence, under a lock, but here its work would be
 * timed as the structure's.
 */
static void
bench_trace_fence(Worker *w)
{
	uint32		seq;

	if (w->nfenced == w->ntrace)
		return;
	seq = (uint32) __atomic_fetch_add(&w->t->fence_seq, 1, __ATOMIC_RELAXED);
	for (; w->nfenced < w->ntrace; w->nfenced++)
		w->trace[w->nfenced].seq = seq;
}

/*
 * After a phase: feed every worker's traced ranges to the media model in
 * the order of their fences, then empty the traces.
 */
static void
bench_replay_traces(Table *t, Worker *workers, int nthreads)
{
	uint64		next[BENCH_MAX_THREADS];
	int			i;

	for (i = 0; i < nthreads; i++)
	{
		bench_trace_fence(&workers[i]);
		next[i] = 0;
	}
	for (;;)
	{
		int			best = -1;
		uint32		seq;

		for (i = 0; i < nthreads; i++)
			if (next[i] < workers[i].ntrace &&
				(best < 0 || workers[i].trace[next[i]].seq <
				 workers[best].trace[next[best]].seq))
				best = i;
		if (best < 0)
			break;
		/* the ranges of one fence, together */
		seq = workers[best].trace[next[best]].seq;
		while (next[best] < workers[best].ntrace &&
			   workers[best].trace[next[best]].seq == seq)
		{
			TraceRange *r = &workers[best].trace[next[best]++];

			pmh_media_write(t->media, 1, r->offset, r->len, 0, NULL, NULL);
		}
	}
	for (i = 0; i < nthreads; i++)
		workers[i].ntrace = workers[i].nfenced = 0;
}

/*
 * The flush hook: trace a flushed range, numbered by the fence (len 0)
 * that ends it.
 */
static void
bench_flush_hook(void *arg, uint64 offset, size_t len)
{
	Worker	   *w = (Worker *) arg;
	TraceRange *r;

	if (w->t->media == NULL)
		return;
	if (len == 0)
	{
		bench_trace_fence(w);
		return;
	}
	if (w->ntrace == w->trace_cap)
	{
		w->trace_cap = Max(w->trace_cap * 2, 65536);
		w->trace = pg_realloc(w->trace, sizeof(TraceRange) * w->trace_cap);
	}
	r = &w->trace[w->ntrace++];
	r->offset = offset;
	r->len = (uint32) len;
}

/* the read hook: count what lookups read from the pool */
static void
bench_read_hook(void *arg, uint64 offset, size_t len)
{
	Worker	   *w = (Worker *) arg;

	w->cur_reads++;
}

/* the mapping of the pool is too small: tell how to make it bigger */
static void
pool_full(void)
{
	die("the pool has no free segment left: raise --pool-factor (now %.1f)",
		opt.pool_factor);
}

/*
 * Memory for the segments' metadata, on cache lines as the server's chunks
 * are (a fingerprint bucket is one).  With --huge-meta, in 2 MB pages
 * (transparent huge pages asked for with madvise), as the server's is when
 * its main shared memory is in huge pages (huge_pages = on).
 */
static void *
meta_alloc(size_t size)
{
	void	   *p;

	if (!opt.huge_meta)
		return aligned_alloc(PMH_CACHELINE_BYTES, size);
	size = TYPEALIGN(BENCH_HUGE_PAGE, size);
	p = aligned_alloc(BENCH_HUGE_PAGE, size);
	if (p != NULL && madvise(p, size, MADV_HUGEPAGE) != 0)
		die("madvise(MADV_HUGEPAGE) on the metadata: %m");
	return p;
}

/* megabytes of this process's memory in transparent huge pages; -1 unknown */
static long
anon_huge_mb(void)
{
	FILE	   *f = fopen("/proc/self/smaps_rollup", "r");
	char		line[256];
	long		kb = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? -1 : kb / 1024;
}

/*
 * Create the pool file in opt.dir, map it (allocated up front, as the
 * server's posix_fallocate does), unlink it, and format it: one primary
 * segment of depth 0.  The metadata starts empty, every other segment free.
 */
static Table *
table_create(uint64 entries)
{
	/* on a cache line: its fence counter has one to itself */
	Table	   *t = aligned_alloc(PMH_CACHELINE_BYTES,
								  TYPEALIGN(PMH_CACHELINE_BYTES, sizeof(Table)));
	uint64		nseg = (uint64) (opt.pool_factor * (double) entries / PMH_SEG_SLOTS) + 256;
	char		path[MAXPGPATH];
	size_t		len;
	int			is_pmem;
	PmhPoolHeader hdr;
	PmhPool		p;
	pthread_rwlockattr_t ra;
	uint64		i;

	if (t == NULL)
		die("out of memory for the table");
	memset(t, 0, sizeof(Table));
	if (nseg >= PMH_NO_SEGMENT)
		die("too many entries for one pool");
	snprintf(path, sizeof(path), "%s/pmh_bench.%d.pool", opt.dir, (int) getpid());
	t->base = pmem_map_file(path, pmh_pool_bytes(nseg),
							PMEM_FILE_CREATE | PMEM_FILE_EXCL, 0600,
							&len, &is_pmem);
	if (t->base == NULL)
		die("pmem_map_file(%s): %s", path, pmem_errormsg());
	if (unlink(path) != 0)
		die("unlink(%s): %m", path);
	t->mapped_len = len;
	t->is_pmem = is_pmem;

	memset(&p, 0, sizeof(p));
	p.base = t->base;
	p.mapped_len = len;
	p.is_pmem = is_pmem;
	pmh_header_init(&hdr, opt.seed | 1, 0, 0, 0, 0);
	if (pmh_pool_format(&p, &hdr) != 0 || pmh_pool_state_init(&p, 0) != 0)
		die("formatting the pool: %m");
	t->nseg = (uint32) pmh_pool_nsegments(&p);

	t->meta = meta_alloc(sizeof(PmhSegMeta) * t->nseg);
	if (t->meta == NULL)
		die("out of memory for %u segments' metadata", t->nseg);
	t->seglock = aligned_alloc(PMH_CACHELINE_BYTES, sizeof(SegLock) * t->nseg);
	if (t->seglock == NULL)
		die("out of memory for %u segments' locks", t->nseg);
	t->freesegs = pg_malloc(sizeof(uint32) * t->nseg);
	for (i = 0; i < t->nseg; i++)
	{
		t->meta[i].version = 0;
		pmh_meta_reset(&t->meta[i], 0);
		t->seglock[i].state = 0;
	}
	for (i = t->nseg; i > 1; i--)
		t->freesegs[t->nfree++] = (uint32) (i - 1);
	t->meta[0].word = pmh_seg_header(&p, 0)->word;
	t->dir = pg_malloc(sizeof(uint32));
	t->dir[0] = 0;
	t->gd = 0;
	t->primaries = 1;

	/* a waiting split must not starve behind a stream of readers */
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&t->idxlock, &ra);
	pthread_rwlockattr_destroy(&ra);

	pthread_mutex_init(&t->loglock, NULL);
	pthread_mutex_init(&t->freelock, NULL);
	t->logchunks = pg_malloc(sizeof(PmhLogChunk) * (PMH_LOG_MAX_LINES / PMH_LOG_CHUNK));
	for (i = 0; i < PMH_LOG_MAX_LINES / PMH_LOG_CHUNK; i++)
		pmh_wp_chunk_init(&t->logchunks[i]);
	for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
		t->log_ext_segs[i] = PMH_NO_SEGMENT;

	if (opt.media_lines > 0)
	{
		t->media = pg_malloc(sizeof(PmhMediaModel));
		pmh_media_init(t->media, opt.media_lines);
	}
	t->cb.get_meta = cb_get_meta;
	t->cb.alloc_segment = cb_alloc_segment;
	t->cb.arg = t;
	{
		Worker		setup;

		worker_init(&setup, t, 0);
		pmh_wp_log_init(&setup.wr, PMH_LOG_LINES, PMH_LOG_MAX_EXTS);
	}
	return t;
}

/* unmap the pool and free everything */
static void
table_destroy(Table *t)
{
	pmem_unmap(t->base, t->mapped_len);
	free(t->meta);
	free(t->seglock);
	free(t->freesegs);
	free(t->dir);
	while (t->nretired > 0)
		free(t->retired[--t->nretired]);
	free(t->retired);
	free(t->logchunks);
	free(t->media);
	free(t);
}

/* a worker's view of the table: its own PmhPool (stats, batches) */
static void
worker_init(Worker *w, Table *t, int id)
{
	memset(w, 0, sizeof(*w));
	w->t = t;
	w->id = id;
	w->pool.base = t->base;
	w->pool.mapped_len = t->mapped_len;
	w->pool.is_pmem = t->is_pmem;
	w->pool.log_ext_segs = t->log_ext_segs;
	w->pool.flush_hook = bench_flush_hook;
	w->pool.read_hook = bench_read_hook;
	w->pool.flush_hook_arg = w;
	w->log_line = -1;
	w->rcb.get_meta = cb_get_meta_unlocked;
	w->rcb.alloc_segment = NULL;
	w->rcb.arg = w;
	writer_init(w);
}

/* free the workers and their traces */
static void
workers_free(Worker *workers, int nthreads)
{
	int			i;

	for (i = 0; i < nthreads; i++)
		free(workers[i].trace);
	free(workers);
}

/* ---------------------------------------------------------------------
 * Locks
 * ---------------------------------------------------------------------
 */

/*
 * Take the index lock in the given mode; exclusively, the index's version
 * turns odd (pmhash_index_lock)
 */
static inline void
idx_lock(Worker *w, bool exclusive)
{
	if (exclusive)
	{
		pthread_rwlock_wrlock(&w->t->idxlock);
		pmh_version_write_begin(&w->t->ixversion);
	}
	else
		pthread_rwlock_rdlock(&w->t->idxlock);
	w->exclusive = exclusive;
}

/* release the index lock (pmhash_index_unlock) */
static inline void
idx_unlock(Worker *w)
{
	if (w->exclusive)
		pmh_version_write_end(&w->t->ixversion);
	pthread_rwlock_unlock(&w->t->idxlock);
	w->exclusive = false;
}

/*
 * One spin delay, as the server's pg_spin_delay (port/atomics.h, which
 * frontend code may not include): the CPU's pause where there is one
 */
static inline void
cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/*
 * Take a mutex that its holders keep briefly (the log lock, the free
 * lock) as the server takes such an LWLock (pmhash_lock_short): try again
 * a few times, some pauses apart, before sleeping on it.
 */
static inline void
short_lock(pthread_mutex_t *m)
{
	int			tries;

	for (tries = 0; tries < PMH_SHORT_LOCK_TRIES; tries++)
	{
		int			i;

		if (pthread_mutex_trylock(m) == 0)
			return;
		for (i = 0; i < PMH_SHORT_LOCK_DELAYS; i++)
			cpu_pause();
	}
	pthread_mutex_lock(m);
}

/* wait a little for a segment lock: spin, and now and then yield the CPU */
static void
seg_backoff(int *spins)
{
	if (++*spins < SEG_SPINS)
	{
		cpu_pause();
		return;
	}
	*spins = 0;
	sched_yield();
}

/* lock segment segno shared: a lookup that a writer got in the way of */
static inline void
seg_rdlock(Table *t, uint32 segno)
{
	uint32	   *state = &t->seglock[segno].state;
	int			spins = 0;

	for (;;)
	{
		uint32		s = __atomic_load_n(state, __ATOMIC_RELAXED);

		if ((s & SEG_EXCLUSIVE) == 0 &&
			__atomic_compare_exchange_n(state, &s, s + 1, false,
										__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return;
		seg_backoff(&spins);
	}
}

/* lock segment segno exclusively: its version turns odd (pmhash_seg_acquire) */
static inline void
seg_wrlock(Table *t, uint32 segno)
{
	uint32	   *state = &t->seglock[segno].state;
	int			spins = 0;

	for (;;)
	{
		uint32		s = 0;

		/* read before trying: a failed CAS would take the line away */
		if (__atomic_load_n(state, __ATOMIC_RELAXED) == 0 &&
			__atomic_compare_exchange_n(state, &s, SEG_EXCLUSIVE, false,
										__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			break;
		seg_backoff(&spins);
	}
	pmh_version_write_begin(&t->meta[segno].version);
}

/* unlock segment segno, locked in either mode (pmhash_seg_release) */
static inline void
seg_unlock(Table *t, uint32 segno)
{
	/* odd: held exclusively, so by this thread */
	if (t->meta[segno].version & 1)
	{
		pmh_version_write_end(&t->meta[segno].version);
		__atomic_store_n(&t->seglock[segno].state, 0, __ATOMIC_RELEASE);
	}
	else
		__atomic_fetch_sub(&t->seglock[segno].state, 1, __ATOMIC_RELEASE);
}

/* change the index lock's mode (released in between, as pmhash_relock) */
static void
idx_relock(Worker *w, bool exclusive)
{
	idx_unlock(w);
	idx_lock(w, exclusive);
}

/* the primary segment the directory names for hash (index lock held) */
static inline uint32
dir_lookup(const Table *t, uint64 hash)
{
	/* a split under a segment lock stores entries as others read them */
	return __atomic_load_n(&t->dir[pmh_dir_index(hash, t->gd)],
						   __ATOMIC_ACQUIRE);
}

/*
 * Lock the primary segment that holds hash (index lock shared), as
 * pmhash_lock_hash: a split under the segment's own lock may narrow the
 * segment between the directory read and the lock; its word then no longer
 * covers the hash, and the directory is read again.
 */
static inline uint32
seg_lock_hash(Table *t, uint64 hash, bool exclusive)
{
	for (;;)
	{
		uint32		segno = dir_lookup(t, hash);

		if (exclusive)
			seg_wrlock(t, segno);
		else
			seg_rdlock(t, segno);
		if (pmh_hash_in_segment(hash, t->meta[segno].word))
			return segno;
		seg_unlock(t, segno);
	}
}

/* ---------------------------------------------------------------------
 * The write path: backup log, D-buckets, relocation, splits
 * ---------------------------------------------------------------------
 */

/* split primary segno and update the directory; index lock exclusive */
static void
split_segment(Worker *w, uint32 segno)
{
	Table	   *t = w->t;
	uint32		before = t->nfree;
	uint32		newseg;

	if (t->nfree < (uint32) pmh_segments_needed_for_split(&t->cb, segno))
		pool_full();
	if (pmh_segword_depth(t->meta[segno].word) >= t->gd)
	{
		uint32	   *newdir = pg_malloc(sizeof(uint32) << (t->gd + 1));

		pmh_dir_double(t->dir, t->gd, newdir);
		/* lookups without the lock may still read the old one */
		t->retired = pg_realloc(t->retired, sizeof(uint32 *) * (t->nretired + 1));
		t->retired[t->nretired++] = t->dir;
		__atomic_store_n(&t->dir, newdir, __ATOMIC_RELAXED);
		__atomic_store_n(&t->gd, t->gd + 1, __ATOMIC_RELAXED);
	}
	if (pmh_split(&w->pool, &t->cb, segno, &newseg) != 0)
		die("pmh_split: %m");
	pmh_dir_assign(t->dir, t->gd, t->meta[segno].word, segno);
	pmh_dir_assign(t->dir, t->gd, t->meta[newseg].word, newseg);
	t->primaries++;
	t->overflows += before - t->nfree - 1;
	t->splits++;
}

/*
 * Split primary segno with the index lock shared and the segment locked
 * exclusively (pmhash_split_segment_shared): only when the directory need
 * not double; the free segments come from the stack under its own lock.
 * The directory entries of the new half are stored once it is complete,
 * under its lock (so that nobody splits it before they all are).
 * Returns false, having changed nothing, when the whole index is needed.
 */
static bool
split_segment_shared(Worker *w, uint32 segno)
{
	Table	   *t = w->t;
	uint32		seg[PMH_SPLIT_RESERVE_MAX];
	uint32		newseg;
	int			need;
	int			left;

	if (pmh_segword_depth(t->meta[segno].word) >= t->gd)
		return false;
	need = pmh_segments_needed_for_split(&t->cb, segno);
	if (need > PMH_SPLIT_RESERVE_MAX)
		return false;
	short_lock(&t->freelock);
	if (t->nfree < (uint32) need)
	{
		pthread_mutex_unlock(&t->freelock);
		return false;
	}
	t->nfree -= (uint32) need;
	memcpy(seg, t->freesegs + t->nfree, sizeof(uint32) * need);
	pthread_mutex_unlock(&t->freelock);

	left = need;
	if (pmh_split_reserved(&w->pool, &t->cb, segno, seg, &left, &newseg) != 0)
		die("pmh_split_reserved: %m");
	/* the new half is locked until all its entries are stored */
	seg_wrlock(t, newseg);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	pmh_dir_assign(t->dir, t->gd, t->meta[newseg].word, newseg);
	seg_unlock(t, newseg);

	short_lock(&t->freelock);
	memcpy(t->freesegs + t->nfree, seg, sizeof(uint32) * left);
	t->nfree += (uint32) left;
	t->primaries++;
	t->overflows += (uint32) (need - left - 1);
	t->splits++;
	t->splits_shared++;
	pthread_mutex_unlock(&t->freelock);
	return true;
}

/* give primary segno another overflow segment; index lock exclusive */
static void
add_overflow(Worker *w, uint32 segno)
{
	Table	   *t = w->t;
	uint32		newseg = cb_alloc_segment(t);

	if (newseg == PMH_NO_SEGMENT)
		pool_full();
	if (pmh_add_overflow(&w->pool, &t->cb, segno, newseg) != 0)
		die("pmh_add_overflow: %m");
	t->overflows++;
}

/*
 * The core's write path (src/core/pmh_writepath.c) as one thread drives
 * it: the callbacks through which it takes this table's locks and makes
 * room.  Their argument is the Worker.
 */

static void
wp_log_lock(void *arg)
{
	short_lock(&((Worker *) arg)->t->loglock);
}

static void
wp_log_unlock(void *arg)
{
	pthread_mutex_unlock(&((Worker *) arg)->t->loglock);
}

static PmhLogChunk *
wp_log_chunk(void *arg, uint32 c)
{
	return &((Worker *) arg)->t->logchunks[c];
}

static bool
wp_index_exclusive(void *arg)
{
	return ((Worker *) arg)->exclusive;
}

static void
wp_relock(void *arg, bool exclusive)
{
	idx_relock((Worker *) arg, exclusive);
}

/* the primary of hash, locked unless the index lock is exclusive */
static uint32
wp_lock_hash(void *arg, uint64 hash, PmhSegMeta **meta)
{
	Worker	   *w = (Worker *) arg;
	uint32		segno = w->exclusive ? dir_lookup(w->t, hash) :
		seg_lock_hash(w->t, hash, true);

	*meta = &w->t->meta[segno];
	return segno;
}

static void
wp_unlock_segment(void *arg, uint32 segno)
{
	Worker	   *w = (Worker *) arg;

	if (!w->exclusive)
		seg_unlock(w->t, segno);
}

/* for prefetching: the segment and its lock word */
static uint32
wp_lookup_segment(void *arg, uint64 hash, PmhSegMeta **meta)
{
	Worker	   *w = (Worker *) arg;
	uint32		segno = dir_lookup(w->t, hash);

	pmh_prefetch_write(&w->t->seglock[segno].state);
	*meta = &w->t->meta[segno];
	return segno;
}

static bool
wp_split_shared(void *arg, uint32 segno)
{
	return split_segment_shared((Worker *) arg, segno);
}

static bool
wp_split(void *arg, uint32 segno)
{
	split_segment((Worker *) arg, segno);
	return true;
}

static bool
wp_add_overflow(void *arg, uint32 segno)
{
	add_overflow((Worker *) arg, segno);
	return true;
}

/* a log segment of 64 lines (their states are set up in advance) */
static bool
wp_add_log_segment(void *arg)
{
	Worker	   *w = (Worker *) arg;
	uint32		segno = cb_alloc_segment(w->t);

	if (segno == PMH_NO_SEGMENT)
		pool_full();
	return pmh_wp_log_extend(&w->wr, segno, w->t->log_ext_segs) == PMH_WP_OK;
}

static uint32
wp_nsegments(void *arg)
{
	return ((Worker *) arg)->t->nseg;
}

static uint64
wp_primaries(void *arg)
{
	return ((Worker *) arg)->t->primaries;
}

static void
wp_error(void *arg, PmhWpStatus status, const char *what, bool fatal)
{
	die("could not %s pool (status %d): %m", what, (int) status);
}

static const PmhWriteOps bench_write_ops = {
	.log_lock = wp_log_lock,
	.log_unlock = wp_log_unlock,
	.log_chunk = wp_log_chunk,
	.index_exclusive = wp_index_exclusive,
	.relock = wp_relock,
	.lock_hash = wp_lock_hash,
	.unlock_segment = wp_unlock_segment,
	.lookup_segment = wp_lookup_segment,
	.split_shared = wp_split_shared,
	.split = wp_split,
	.add_overflow = wp_add_overflow,
	.add_log_segment = wp_add_log_segment,
	.nsegments = wp_nsegments,
	.primaries = wp_primaries,
	.error = wp_error,
};

/* the worker's writer of the core's write path */
static void
writer_init(Worker *w)
{
	pmh_wp_writer_init(&w->wr, &w->pool, &w->t->cb, &bench_write_ops, w,
					   &w->t->log, w->id, &w->log_line, &w->log_used);
}

/*
 * Write the collecting log to the backup log (one persist, one fence), then
 * put its entries into their D-buckets (pmh_wp_flush, as the server's
 * flush).  Index lock held (any mode).
 */
static void
log_flush(Worker *w)
{
	int			n = w->nclog;

	if (n == 0)
		return;
	w->nclog = 0;
	(void) pmh_wp_flush(&w->wr, w->clog, n);
}

/* ---------------------------------------------------------------------
 * Operations
 * ---------------------------------------------------------------------
 */

/*
 * Insert key k through the collecting log (aminsert).  The collecting log
 * is the thread's own: as the server's aminsert joins it without the index
 * lock when no flush is due (pmhash_log_append_unattached), only the row
 * that flushes takes the lock.
 */
static void
op_insert(Worker *w, uint64 k)
{
	int			room;

	w->clog[w->nclog].hash = key_hash(k);
	w->clog[w->nclog].tag = key_tag(k);
	w->nclog++;
	/* flush when the log would complete this thread's backup-log line */
	room = PMH_BUCKET_SLOTS - (w->log_line >= 0 ? w->log_used : 0);
	if (w->nclog >= room)
	{
		idx_lock(w, false);
		log_flush(w);
		idx_unlock(w);
	}
}

/* the end of a transaction: flush what the collecting log holds */
static void
op_commit(Worker *w)
{
	idx_lock(w, false);
	log_flush(w);
	idx_unlock(w);
}

/* insert key k straight into its segment (pmh_insert: probe, persist) */
static void
op_insert_direct(Worker *w, uint64 k)
{
	Table	   *t = w->t;
	uint64		hash = key_hash(k);

	idx_lock(w, false);
	for (;;)
	{
		bool		locked = !w->exclusive;
		uint32		segno = locked ? seg_lock_hash(t, hash, true) :
			dir_lookup(t, hash);
		PmhInsertResult r;

		r = pmh_insert(&w->pool, &t->cb, segno, hash, (uint32) (k >> 8),
					   (uint16) ((k & 0xff) + 1));
		if (r == PMH_INSERT_SPLIT && locked && split_segment_shared(w, segno))
		{
			seg_unlock(t, segno);
			continue;
		}
		if (locked)
			seg_unlock(t, segno);
		if (r == PMH_INSERT_DONE || r == PMH_INSERT_EXISTS)
			break;
		if (r == PMH_INSERT_IOERROR)
			die("pmh_insert: %m");
		if (!w->exclusive)
		{
			idx_relock(w, true);
			continue;
		}
		if (pmh_wp_make_room(&w->wr, segno, r) != PMH_WP_OK)
			die("no remedy for segment %u: verdict %d", segno, (int) r);
	}
	idx_unlock(w);
}

/*
 * The end of a lookup that found n entries: is "want" among them, and
 * count the pool reads.  Returns n.
 */
static int
lookup_done(Worker *w, const uint64 *tags, int n, uint64 want, bool *found)
{
	int			i;

	*found = false;
	for (i = 0; i < Min(n, PMH_BUCKET_SLOTS); i++)
		*found |= tags[i] == want;
	if (w->cur_reads > 0)
	{
		w->reads += w->cur_reads;
		w->ops_reading++;
	}
	return n;
}

/* metadata of no segment: what a lookup without the lock ends a walk with */
static PmhSegMeta no_meta = {.ovf_next = PMH_NO_SEGMENT};

/*
 * PmhCallbacks.get_meta of a lookup without the index lock (the server's
 * pmhash_view_meta): a chain longer than the pool has segments changed
 * under the walk, which then ends, marked bad
 */
static PmhSegMeta *
cb_get_meta_unlocked(void *arg, uint32 segno)
{
	Worker	   *w = (Worker *) arg;

	if (unlikely(segno >= w->t->nseg || w->steps == 0))
	{
		w->bad = true;
		return &no_meta;
	}
	w->steps--;
	return &w->t->meta[segno];
}

/*
 * The segment and its chain and the D-bucket, without the segment lock
 * (pmhash_lookup_optimistic), their metadata through cb: false if a writer
 * got in the way, else the number of entries with this hash in *n.
 */
static inline bool
lookup_optimistic(Worker *w, const PmhCallbacks *cb, uint64 hash,
				  uint32 segno, uint64 *tags, int *n)
{
	Table	   *t = w->t;
	uint32		version = pmh_version_read_begin(&t->meta[segno].version);
	int			found;

	if ((version & 1) != 0)
		return false;
	/* split since the directory was read (pmhash_lookup_optimistic) */
	if (!pmh_hash_in_segment(hash, __atomic_load_n(&t->meta[segno].word,
												   __ATOMIC_RELAXED)))
		return false;
	found = pmh_lookup_all(&w->pool, cb, &t->meta[segno], segno, hash,
						   tags, PMH_BUCKET_SLOTS);
	if (!pmh_version_read_valid(&t->meta[segno].version, version))
		return false;
	*n = found;
	return true;
}

/*
 * The same under the segment lock (a writer got in the way, or for
 * comparison), reading the directory again (pmhash_lock_hash)
 */
static int
lookup_locked(Worker *w, uint64 hash, uint64 *tags)
{
	Table	   *t = w->t;
	uint32		segno = seg_lock_hash(t, hash, false);
	int			n;

	n = pmh_lookup_all(&w->pool, &t->cb, &t->meta[segno], segno, hash, tags,
					   PMH_BUCKET_SLOTS);
	seg_unlock(t, segno);
	return n;
}

/* add the thread's own collecting log's entries with this hash to tags[n..] */
static inline int
add_own(Worker *w, uint64 hash, uint64 *tags, int n)
{
	int			i;

	for (i = 0; i < w->nclog; i++)
	{
		if (w->clog[i].hash != hash)
			continue;
		if (n < PMH_BUCKET_SLOTS)
			tags[n] = w->clog[i].tag;
		n++;
	}
	return n;
}

/*
 * The entries with this hash, segno being its segment, with the index lock
 * held, as pmhash_lookup_hash finds them: the segment and its chain and
 * the D-bucket (optimistically, else under the segment lock), then the own
 * collecting log.  Stores up to PMH_BUCKET_SLOTS tag words and returns how
 * many there are.
 */
static int
collect(Worker *w, uint64 hash, uint32 segno, uint64 *tags)
{
	int			n;

	if (!lookup_optimistic(w, &w->t->cb, hash, segno, tags, &n))
	{
		w->retries++;
		n = lookup_locked(w, hash, tags);
	}
	return add_own(w, hash, tags, n);
}

/*
 * Read the directory without the index lock (pmhash_read_begin): its depth
 * and place as they were at a moment with no exclusive holder, and the
 * index's version then, which is even; false if there was none just now.
 */
static inline bool
view_begin(Table *t, uint32 *version, const uint32 **dir, int *gd)
{
	*version = pmh_version_read_begin(&t->ixversion);
	if ((*version & 1) != 0)
		return false;
	*gd = __atomic_load_n(&t->gd, __ATOMIC_RELAXED);
	*dir = __atomic_load_n(&t->dir, __ATOMIC_RELAXED);
	return pmh_version_read_valid(&t->ixversion, *version);
}

/*
 * Look hash up without any lock (pmhash_read_lookup): in segno, which dir
 * names, optimistically, with a bounded walk of its chain.  False if a
 * writer got in the way; the caller then checks the index's version.
 */
static inline bool
lookup_unlocked(Worker *w, uint64 hash, uint32 segno, uint64 *tags, int *n)
{
	w->steps = w->t->nseg;
	w->bad = false;
	return lookup_optimistic(w, &w->rcb, hash, segno, tags, n) && !w->bad;
}

/*
 * Look key k up as a scan does (pmhash_collect): without the index lock
 * (the directory read between two reads of the index's version, the
 * segment checked by its own version, the version read again at the end),
 * else as before under the index lock shared; then the own collecting log.
 * Returns the number of entries with its hash; *found tells whether one is
 * exactly the key's entry.
 */
static int
op_lookup(Worker *w, uint64 k, bool *found)
{
	Table	   *t = w->t;
	uint64		hash = key_hash(k);
	uint64		tags[PMH_BUCKET_SLOTS];
	uint32		version;
	const uint32 *dir;
	int			gd;
	uint32		segno;
	int			n;

	w->cur_reads = 0;
	if (view_begin(t, &version, &dir, &gd))
	{
		segno = __atomic_load_n(&dir[pmh_dir_index(hash, gd)], __ATOMIC_ACQUIRE);
		/* the metadata's misses overlap the version's */
		pmh_meta_prefetch(&t->meta[segno], hash);
		if (lookup_unlocked(w, hash, segno, tags, &n) &&
			pmh_version_read_valid(&t->ixversion, version))
			return lookup_done(w, tags, add_own(w, hash, tags, n),
							   key_tag(k), found);
		w->retries++;
		w->cur_reads = 0;
	}
	idx_lock(w, false);
	segno = dir_lookup(t, hash);
	pmh_meta_prefetch(&t->meta[segno], hash);
	n = collect(w, hash, segno, tags);
	idx_unlock(w);
	return lookup_done(w, tags, n, key_tag(k), found);
}

/*
 * Look up nk keys (at most PMH_LOOKUP_BATCH) as a scan of "= ANY (array)"
 * does (pmhash_collect_batch): first every key's segment version and
 * metadata start loading, then every key's candidate entries
 * (pmh_lookup_prefetch), then each key is looked up as op_lookup does, its
 * lines by then in cache: without the index lock, else (if a writer got in
 * the way) the whole batch again under it.  Sets n[i] and found[i] as
 * op_lookup returns them.
 */
static void
op_lookup_batch(Worker *w, const uint32 *keys, int nk, int *n, bool *found)
{
	Table	   *t = w->t;
	uint64		hash[PMH_LOOKUP_BATCH];
	uint32		segno[PMH_LOOKUP_BATCH];
	uint64		tags[PMH_BUCKET_SLOTS];
	uint32		version;
	const uint32 *dir;
	int			gd;
	int			i;

	Assert(nk <= PMH_LOOKUP_BATCH);
	for (i = 0; i < nk; i++)
		hash[i] = key_hash(keys[i]);
	if (view_begin(t, &version, &dir, &gd))
	{
		bool		ok = true;

		for (i = 0; i < nk; i++)
		{
			segno[i] = __atomic_load_n(&dir[pmh_dir_index(hash[i], gd)],
									   __ATOMIC_ACQUIRE);
			pmh_meta_prefetch(&t->meta[segno[i]], hash[i]);
		}
		for (i = 0; i < nk; i++)
			pmh_lookup_prefetch(&w->pool, &t->meta[segno[i]], segno[i], hash[i]);
		for (i = 0; i < nk && ok; i++)
		{
			w->cur_reads = 0;
			ok = lookup_unlocked(w, hash[i], segno[i], tags, &n[i]);
			if (ok)
				n[i] = lookup_done(w, tags, add_own(w, hash[i], tags, n[i]),
								   key_tag(keys[i]), &found[i]);
		}
		if (ok && pmh_version_read_valid(&t->ixversion, version))
			return;
		w->retries++;
	}
	idx_lock(w, false);
	for (i = 0; i < nk; i++)
	{
		segno[i] = dir_lookup(t, hash[i]);
		pmh_meta_prefetch(&t->meta[segno[i]], hash[i]);
	}
	for (i = 0; i < nk; i++)
		pmh_lookup_prefetch(&w->pool, &t->meta[segno[i]], segno[i], hash[i]);
	for (i = 0; i < nk; i++)
	{
		w->cur_reads = 0;
		n[i] = lookup_done(w, tags, collect(w, hash[i], segno[i], tags),
						   key_tag(keys[i]), &found[i]);
	}
	idx_unlock(w);
}

/*
 * Delete key k's entry: find its slot by fingerprint in the segment or its
 * chain and clear it (pmh_delete_slots, one persisted 8-byte store), or
 * drop it from the D-bucket, its log copy cleared and persisted
 * (pmhash_vacuum_pending).  Returns whether it was there.
 */
static bool
op_delete(Worker *w, uint64 k, uint8 *deleted)
{
	Table	   *t = w->t;
	uint64		hash = key_hash(k);
	uint64		want = key_tag(k);
	uint32		segno;
	uint32		s;
	bool		found = false;
	uint32		i;

	idx_lock(w, false);
	segno = seg_lock_hash(t, hash, true);
	w->cur_reads = 0;
	for (s = segno; s != PMH_NO_SEGMENT && !found; s = t->meta[s].ovf_next)
	{
		PmhSegMeta *m = &t->meta[s];
		int			slot = pmh_find_slot(&w->pool, m, s, hash, want);

		if (slot >= 0)
		{
			if (pmh_delete_slots(&w->pool, m, s, slot / PMH_BUCKET_SLOTS,
								 (uint16) (1 << (slot % PMH_BUCKET_SLOTS))) != 0)
				die("pmh_delete_slots: %m");
			found = true;
		}
	}
	w->reads += w->cur_reads;
	if (!found)
	{
		PmhSegMeta *m = &t->meta[segno];

		for (i = 0; i < m->npending; i++)
		{
			if (m->pending[i].hash == hash && m->pending[i].tag == want)
			{
				uint32		logslot = m->pending[i].logslot;

				pmh_pending_remove(m, (int) i);
				(void) pmh_wp_release(&w->wr, &logslot, 1, true, true);
				found = true;
				break;
			}
		}
	}
	seg_unlock(t, segno);
	idx_unlock(w);
	if (found && deleted)
		deleted[k] = 1;
	return found;
}

/*
 * Before deletes: clear and persist every released log slot that still
 * holds a copy, and have releases clear theirs (pmh_wp_vacuum_begin, as
 * the server's VACUUM).
 */
static void
vacuum_begin(Worker *w)
{
	(void) pmh_wp_vacuum_begin(&w->wr);
}

typedef enum BenchOp
{
	OP_INSERT,
	OP_INSERT_DIRECT,
	OP_SEARCH_POS,
	OP_SEARCH_NEG,
	OP_DELETE,
	OP_SEARCH_POS_BATCH,
	OP_SEARCH_NEG_BATCH,
	/* probe experiments: alternative lookups (see probe_exp) */
	OP_EXP_BASE_POS,
	OP_EXP_BASE_NEG,
	OP_EXP_LOCKED_POS,
	OP_EXP_LOCKED_NEG,
	OP_EXP_INDEXLOCK_POS,
	OP_EXP_INDEXLOCK_NEG,
	OP_EXP_ONEMISS_POS,
	OP_EXP_ONEMISS_NEG,
	OP_EXP_TWOMISS_POS,
	OP_EXP_TWOMISS_NEG
} BenchOp;

static const char *const op_names[] = {
	"insert", "insert-direct", "search+", "search-", "delete",
	"search+ batch", "search- batch", "search+ baseline", "search- baseline",
	"search+ locked", "search- locked",
	"search+ index lock", "search- index lock",
	"search+ one-miss reference", "search- one-miss reference",
	"search+ two-miss reference", "search- two-miss reference"
};

#define OP_IS_EXPERIMENT(op) ((op) >= OP_EXP_BASE_POS)
#define OP_IS_POSITIVE(op) ((op) == OP_SEARCH_POS || (op) == OP_EXP_BASE_POS || \
	(op) == OP_EXP_LOCKED_POS || (op) == OP_EXP_INDEXLOCK_POS || \
	(op) == OP_EXP_ONEMISS_POS || (op) == OP_EXP_TWOMISS_POS || \
	(op) == OP_SEARCH_POS_BATCH)
#define OP_IS_BATCH(op) ((op) == OP_SEARCH_POS_BATCH || (op) == OP_SEARCH_NEG_BATCH)
#define OP_IS_LOOKUP(op) ((op) == OP_SEARCH_POS || (op) == OP_SEARCH_NEG || \
	OP_IS_BATCH(op) || OP_IS_EXPERIMENT(op))

/* ---------------------------------------------------------------------
 * Probe experiments: alternative lookups on the same loaded table, to
 * measure ideas for the probe cost without changing src/.  The baseline is
 * the lookup of src/ (the collecting log aside).
 *
 *	locked		the segment's lock taken shared around pmh_lookup, as src/
 *				did before optimistic lookups: what the version check saves
 *				(an earlier "no locks" row here, pmh_lookup without the
 *				index and segment locks, measured it beforehand)
 *	index lock	the optimistic lookup inside the index lock taken
 *				shared, as src/ did before its lookups went without it
 *				(pmhashread.c): what the lock's two atomic operations on
 *				a line that every reader writes cost
 *	one-miss reference	not pmhash: the same keys in a table shaped as
 *				CCEH keeps them (ref_build), found from the hash alone, so
 *				that a lookup of a present key waits for one miss, not
 *				two: what this machine gives the layout that the
 *				reference figures of CCEH and Dash come from
 *	two-miss reference	the same table with a fingerprint table in
 *				front of it, shaped as src/'s (PmhFpBucket, one per
 *				hash range of a segment, in ordinary memory): a lookup
 *				reads the hash's fingerprint line, then the entry whose
 *				slot that line names.  Nothing else of pmhash (no
 *				locks, versions, segment words or D-bucket): what any
 *				layout gives whose lookup waits for two dependent
 *				misses, the bound of src/'s lookup on this machine
 *
 * (Earlier experiments here weighed 8-bit fingerprints, a line group per
 * quarter segment and a 64-fingerprint compare against the scan of all
 * 1024 fingerprints; the hash-organised fingerprint table of src/ came out
 * of them.  Their numbers are in the results of 2026-11-23.)
 * ---------------------------------------------------------------------
 */

#define EXP_ROUNDS 3

/*
 * The one-miss reference table.  Entries (hash, tag) of 16 B, four to a
 * 64 B line, in segments of 256 lines (16 kB, CCEH's segment size) found
 * through a directory by the hash's top bits; an entry goes to the first
 * free slot from the line that the hash's low bits name, onwards within
 * its segment (CCEH probes a few lines and splits when they are full; the
 * reference is sized up front instead, to a load factor of at most 0.6).
 * A lookup reads lines from that one until it finds the hash or a free
 * slot, and takes no lock, as CCEH's searches take none.  The table is
 * mapped from a file in opt.dir, as the pool is, so that its pages are the
 * pool's kind.
 */
#define REF_SEG_LINES	256
#define REF_LINE_SLOTS	(PMH_CACHELINE_BYTES / PMH_ENTRY_BYTES)
#define REF_SEG_SLOTS	(REF_SEG_LINES * REF_LINE_SLOTS)
#define REF_MAX_LOAD	0.6

typedef struct RefTable
{
	char	   *base;			/* the mapping */
	size_t		len;
	PmhEntry  **dir;			/* segment of each top-bits prefix */
	int			depth;			/* bits of the prefix, >= 1 */
	PmhFpBucket *fpt;			/* two-miss reference: PMH_FPT_BUCKETS per
								 * segment, in segment order */
} RefTable;

static RefTable ref;
static double ref_load;			/* its load factor, for the report */

/* the number of the reference table's segment of a hash */
static inline uint64
ref_segno(uint64 hash)
{
	return hash >> (64 - ref.depth);
}

/* the reference table's segment of a hash */
static inline PmhEntry *
ref_segment(uint64 hash)
{
	return ref.dir[ref_segno(hash)];
}

/*
 * The slot of the reference table that holds hash, or the free slot where
 * its probe sequence ends; NULL when the whole segment is full.  Adds the
 * number of slots compared to *probed.
 */
static inline PmhEntry *
ref_find(uint64 hash, uint64 *probed)
{
	PmhEntry   *seg = ref_segment(hash);
	uint32		home = (uint32) (hash % REF_SEG_LINES) * REF_LINE_SLOTS;
	uint32		j;

	for (j = 0; j < REF_SEG_SLOTS; j++)
	{
		PmhEntry   *e = &seg[(home + j) % REF_SEG_SLOTS];

		(*probed)++;
		if (e->tag == 0 || e->hash == hash)
			return e;
	}
	return NULL;
}

/*
 * Note in the two-miss reference's fingerprint table that hash is in slot
 * "slot" of its segment: in the first way free from the hash's bucket on
 * (ways fill in order; a lookup goes on past full buckets only).
 */
static void
ref_fpt_add(uint64 hash, uint32 slot)
{
	uint64		segi = ref_segno(hash);
	PmhFpBucket *fpt = &ref.fpt[segi * PMH_FPT_BUCKETS];
	int			b = pmh_fpt_bucket(hash);
	int			i;
	int			w;

	for (i = 0; i < PMH_FPT_BUCKETS; i++)
	{
		PmhFpBucket *bk = &fpt[(b + i) % PMH_FPT_BUCKETS];

		for (w = 0; w < PMH_FPT_WAYS; w++)
		{
			if (bk->slot[w] == 0)
			{
				bk->fp[w] = pmh_meta_fp(hash);
				bk->slot[w] = (uint16) (slot + 1);
				return;
			}
		}
	}
	die("two-miss reference: the fingerprint table of segment " UINT64_FORMAT " is full",
		segi);
}

/* load keys 0..n-1 into a fresh reference table (see RefTable) */
static void
ref_build(uint64 n)
{
	uint64		nseg = pg_nextpower2_64(Max((uint64) ceil((double) n /
													  (REF_SEG_SLOTS * REF_MAX_LOAD)),
										2));
	char		path[MAXPGPATH];
	int			is_pmem;
	uint64		k;
	uint64		i;

	snprintf(path, sizeof(path), "%s/pmh_bench.%d.ref", opt.dir, (int) getpid());
	ref.base = pmem_map_file(path, nseg * REF_SEG_SLOTS * sizeof(PmhEntry),
							 PMEM_FILE_CREATE | PMEM_FILE_EXCL, 0600,
							 &ref.len, &is_pmem);
	if (ref.base == NULL)
		die("pmem_map_file(%s): %s", path, pmem_errormsg());
	if (unlink(path) != 0)
		die("unlink(%s): %m", path);
	ref_load = (double) n / (nseg * REF_SEG_SLOTS);
	ref.depth = pg_leftmost_one_pos64(nseg);
	ref.dir = pg_malloc(sizeof(PmhEntry *) * nseg);
	for (i = 0; i < nseg; i++)
		ref.dir[i] = (PmhEntry *) ref.base + i * REF_SEG_SLOTS;
	/* allocated as the driver's segment metadata is (table_create) */
	ref.fpt = aligned_alloc(PMH_CACHELINE_BYTES,
							sizeof(PmhFpBucket) * PMH_FPT_BUCKETS * nseg);
	if (ref.fpt == NULL)
		die("out of memory for the two-miss reference's fingerprints");
	memset(ref.fpt, 0, sizeof(PmhFpBucket) * PMH_FPT_BUCKETS * nseg);
	for (k = 0; k < n; k++)
	{
		uint64		hash = key_hash(k);
		uint64		probed = 0;
		PmhEntry   *e = ref_find(hash, &probed);

		/* (distinct keys have distinct hashes: the slot found is free) */
		if (e == NULL)
			die("one-miss reference: a segment of %d slots is full (" UINT64_FORMAT " keys in " UINT64_FORMAT " segments)",
				REF_SEG_SLOTS, n, nseg);
		e->hash = hash;
		e->tag = key_tag(k);
		ref_fpt_add(hash, (uint32) (e - ref_segment(hash)));
	}
}

/* unmap the reference table */
static void
ref_destroy(void)
{
	pmem_unmap(ref.base, ref.len);
	pg_free(ref.dir);
	free(ref.fpt);
	memset(&ref, 0, sizeof(ref));
}

/*
 * Look a hash up in the reference table: 1 and its tag in *tag if it is
 * there, else 0.  Every slot compared counts as a pool read.
 */
static inline int
ref_lookup(Worker *w, uint64 hash, uint64 *tag)
{
	const PmhEntry *e = ref_find(hash, &w->cur_reads);

	if (e == NULL || e->tag == 0)
		return 0;
	*tag = e->tag;
	return 1;
}

/*
 * Look a hash up in the two-miss reference: its fingerprint buckets (from
 * the hash's own, on past full ones), then the entries they name.  Returns
 * what ref_lookup returns; every entry compared counts as a pool read.
 */
static inline int
ref_lookup_twomiss(Worker *w, uint64 hash, uint64 *tag)
{
	const PmhFpBucket *fpt = &ref.fpt[ref_segno(hash) * PMH_FPT_BUCKETS];
	const PmhEntry *seg = ref_segment(hash);
	uint16		fp = pmh_meta_fp(hash);
	int			b = pmh_fpt_bucket(hash);
	int			i;

	for (i = 0; i < PMH_FPT_BUCKETS; i++)
	{
		const PmhFpBucket *bk = &fpt[(b + i) % PMH_FPT_BUCKETS];
		uint32		c = pmh_fpt_match(bk, fp);

		while (c)
		{
			int			way = pg_rightmost_one_pos32(c);
			uint32		slot = (uint32) bk->slot[way] - 1;

			c &= c - 1;
			/* (0, an unused way, wraps around and is skipped) */
			if (slot >= REF_SEG_SLOTS)
				continue;
			w->cur_reads++;
			if (seg[slot].hash == hash)
			{
				*tag = seg[slot].tag;
				return 1;
			}
		}
		if (bk->slot[PMH_FPT_WAYS - 1] == 0)
			break;
	}
	return 0;
}

/*
 * One experimental lookup of key k: the segment chain and the D-bucket.
 * Returns the number of entries with the hash; *found tells whether one is
 * the key's.
 */
static int
probe_exp(Worker *w, BenchOp op, uint64 k, bool *found)
{
	Table	   *t = w->t;
	uint64		hash = key_hash(k);
	uint64		want = key_tag(k);
	uint64		tags[PMH_BUCKET_SLOTS];
	bool		locked = op == OP_EXP_LOCKED_POS || op == OP_EXP_LOCKED_NEG;
	bool		indexlock = op == OP_EXP_INDEXLOCK_POS || op == OP_EXP_INDEXLOCK_NEG;
	uint32		segno;
	int			n;

	w->cur_reads = 0;
	if (op == OP_EXP_ONEMISS_POS || op == OP_EXP_ONEMISS_NEG)
		return lookup_done(w, tags, ref_lookup(w, hash, &tags[0]), want, found);
	if (op == OP_EXP_TWOMISS_POS || op == OP_EXP_TWOMISS_NEG)
		return lookup_done(w, tags, ref_lookup_twomiss(w, hash, &tags[0]),
						   want, found);
	/* (one thread: nothing changes the directory meanwhile) */
	if (indexlock)
		idx_lock(w, false);
	segno = dir_lookup(t, hash);
	pmh_meta_prefetch(&t->meta[segno], hash);
	if (locked || !lookup_optimistic(w, &t->cb, hash, segno, tags, &n))
		n = lookup_locked(w, hash, tags);
	if (indexlock)
		idx_unlock(w);
	return lookup_done(w, tags, n, want, found);
}

/* ---------------------------------------------------------------------
 * Phases: the threads, the clock, the counters
 * ---------------------------------------------------------------------
 */


/* one measurement */
typedef struct Result
{
	int			threads;
	BenchOp		op;
	const char *dist;
	uint64		ops;
	double		secs;
	double		mops;
	double		mops_cpu;		/* per CPU second of the threads: less noisy */
	double		wa;				/* media bytes written / 16 B per entry; < 0: n/a */
	double		fences_per_op;
	double		reads_per_op;	/* pool entries read per operation */
	double		frac_reading;	/* operations that read the pool at all */
	uint64		hits;
	uint64		errors;
} Result;

#define MAX_RESULTS 128
static Result results[MAX_RESULTS];
static int	nresults;

typedef struct WorkerArg
{
	Worker	   *w;
	pthread_barrier_t *barrier;
	uint8	   *deleted;
	uint64		first;			/* without a key stream: keys first.. */
} WorkerArg;

/* one thread of a phase: its share of the operations */
static void *
worker_main(void *arg)
{
	WorkerArg  *a = (WorkerArg *) arg;
	Worker	   *w = a->w;
	uint64		i;
	double		c0;

	pthread_barrier_wait(a->barrier);
	w->wall_start = now_seconds();
	c0 = thread_cpu_seconds();
	for (i = 0; OP_IS_BATCH(w->op) && i < w->nkeys; i += PMH_LOOKUP_BATCH)
	{
		int			nk = (int) Min(w->nkeys - i, PMH_LOOKUP_BATCH);
		int			n[PMH_LOOKUP_BATCH];
		bool		found[PMH_LOOKUP_BATCH];
		int			j;

		op_lookup_batch(w, w->keys + i, nk, n, found);
		for (j = 0; j < nk; j++)
		{
			bool		ok;

			if (w->op == OP_SEARCH_POS_BATCH)
			{
				w->hits += found[j];
				ok = n[j] == 1 && found[j];
			}
			else
			{
				w->hits += n[j] > 0;
				ok = n[j] == 0;
			}
			w->errors += !ok;
		}
	}
	for (i = 0; !OP_IS_BATCH(w->op) && i < w->nkeys; i++)
	{
		uint64		k = w->keys ? w->keys[i] : a->first + i;
		bool		found;
		int			n;

		switch ((BenchOp) w->op)
		{
			case OP_INSERT:
				op_insert(w, k);
				break;
			case OP_INSERT_DIRECT:
				op_insert_direct(w, k);
				break;
			case OP_SEARCH_POS:
				n = op_lookup(w, k, &found);
				w->hits += found;
				if (n != 1 || !found)
					w->errors++;
				break;
			case OP_SEARCH_NEG:
				n = op_lookup(w, k, &found);
				w->hits += n > 0;
				if (n != 0)
					w->errors++;
				break;
			case OP_DELETE:
				w->hits += op_delete(w, k, a->deleted);
				break;
			default:
				n = probe_exp(w, (BenchOp) w->op, k, &found);
				if (OP_IS_POSITIVE(w->op))
				{
					w->hits += found;
					if (n != 1 || !found)
						w->errors++;
				}
				else
				{
					w->hits += n > 0;
					if (n != 0)
						w->errors++;
				}
				break;
		}
	}
	if (w->op == OP_INSERT)
		op_commit(w);
	w->cpu_secs = thread_cpu_seconds() - c0;
	w->wall_end = now_seconds();
	return NULL;
}

/*
 * Run one phase on nthreads threads: thread i does the i-th share of the
 * key stream (or of keys 0 .. nkeys-1 when keys is NULL).  Records and
 * returns the result.
 */
static Result *
run_phase(Table *t, Worker *workers, int nthreads, BenchOp op,
		  const uint32 *keys, uint64 nkeys, const char *dist, uint8 *deleted)
{
	pthread_t	tid[BENCH_MAX_THREADS];
	WorkerArg	args[BENCH_MAX_THREADS];
	pthread_barrier_t barrier;
	Result	   *r;
	PmhPersistStats st;
	double		t0;
	double		t1;
	uint64		reads = 0;
	uint64		reading = 0;
	double		cpu = 0;
	int			i;

	if (nresults == MAX_RESULTS)
		die("too many results");
	r = &results[nresults++];
	memset(r, 0, sizeof(*r));
	if (t->media)
		pmh_media_init(t->media, opt.media_lines);
	/* what was flushed between phases is not this phase's */
	for (i = 0; i < nthreads; i++)
		workers[i].ntrace = workers[i].nfenced = 0;
	t->fence_seq = 0;
	pthread_barrier_init(&barrier, NULL, (unsigned) nthreads + 1);
	for (i = 0; i < nthreads; i++)
	{
		Worker	   *w = &workers[i];
		uint64		lo = nkeys * (uint64) i / (uint64) nthreads;
		uint64		hi = nkeys * (uint64) (i + 1) / (uint64) nthreads;

		memset(&w->pool.stats, 0, sizeof(w->pool.stats));
		w->reads = w->ops_reading = w->retries = w->hits = w->errors = 0;
		w->op = op;
		w->keys = keys ? keys + lo : NULL;
		w->nkeys = hi - lo;
		args[i].w = w;
		args[i].barrier = &barrier;
		args[i].deleted = deleted;
		args[i].first = lo;
		if (pthread_create(&tid[i], NULL, worker_main, &args[i]) != 0)
			die("pthread_create: %m");
	}
	pthread_barrier_wait(&barrier);
	for (i = 0; i < nthreads; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&barrier);
	/* the threads' own clocks: this thread may not run when they start */
	t0 = workers[0].wall_start;
	t1 = workers[0].wall_end;
	for (i = 1; i < nthreads; i++)
	{
		t0 = Min(t0, workers[i].wall_start);
		t1 = Max(t1, workers[i].wall_end);
	}

	memset(&st, 0, sizeof(st));
	for (i = 0; i < nthreads; i++)
	{
		st.fences += workers[i].pool.stats.fences;
		reads += workers[i].reads;
		cpu += workers[i].cpu_secs;
		reading += workers[i].ops_reading;
		bench_retries += workers[i].retries;
		r->hits += workers[i].hits;
		r->errors += workers[i].errors;
	}
	bench_errors += r->errors;
	if (op == OP_SEARCH_POS || op == OP_SEARCH_NEG || OP_IS_BATCH(op))
		bench_lookups += nkeys;
	r->threads = nthreads;
	r->op = op;
	r->dist = dist;
	r->ops = nkeys;
	r->secs = t1 - t0;
	r->mops = nkeys / Max(r->secs, 1e-9) / 1e6;
	r->mops_cpu = nkeys / Max(cpu, 1e-9) / 1e6;
	r->fences_per_op = (double) st.fences / Max(nkeys, 1);
	r->reads_per_op = (double) reads / Max(nkeys, 1);
	r->frac_reading = (double) reading / Max(nkeys, 1);
	r->wa = -1;
	if (t->media && (op == OP_INSERT || op == OP_INSERT_DIRECT || op == OP_DELETE))
	{
		uint64		entries = op == OP_DELETE ? r->hits : nkeys;

		bench_replay_traces(t, workers, nthreads);
		pmh_media_drain(t->media, NULL, NULL);
		if (entries > 0)
			r->wa = (double) t->media->total.media_bytes_written /
				(double) (entries * PMH_ENTRY_BYTES);
	}
	fprintf(stderr, "  %d thread(s) %-13s %-7s %10llu ops %8.3f s %8.3f Mops/s %8.3f Mops/CPU-s%s\n",
			nthreads, op_names[op], dist, (unsigned long long) nkeys, r->secs,
			r->mops, r->mops_cpu, r->errors ? "  WRONG ANSWERS" : "");
	return r;
}

/* entries the table holds: live slots of segments, and D-buckets */
static uint64
count_entries(const Table *t, uint64 *in_segments, uint64 *slots)
{
	uint64		n = 0;
	uint64		pending = 0;
	uint32		s;

	*slots = 0;
	for (s = 0; s < t->nseg; s++)
	{
		const PmhSegMeta *m = &t->meta[s];

		if (!pmh_segword_is_valid(m->word) || pmh_segword_is_log(m->word))
			continue;
		n += m->nlive;
		pending += m->npending;
		*slots += PMH_SEG_SLOTS;
	}
	*in_segments = n;
	return n + pending;
}

/* check the entry count against what should be there */
static void
check_count(const Table *t, uint64 expect, const char *when)
{
	uint64		inseg;
	uint64		slots;
	uint64		n = count_entries(t, &inseg, &slots);

	if (n != expect)
	{
		fprintf(stderr, "pmh_bench: %s: the table holds %llu entries, expected %llu\n",
				when, (unsigned long long) n, (unsigned long long) expect);
		bench_errors++;
	}
}

/*
 * Look every key up (one thread, not timed): inserted keys not deleted
 * must be found exactly once, deleted and never-inserted keys not at all.
 */
static void
verify_all(Worker *w, uint64 entries, const uint8 *deleted)
{
	uint64		k;
	uint64		wrong = 0;

	for (k = 0; k < entries + Min(entries, 100000); k++)
	{
		bool		found;
		int			n = op_lookup(w, k, &found);
		bool		present = k < entries && !(deleted && deleted[k]);

		if (present ? (n != 1 || !found) : n != 0)
			wrong++;
	}
	if (wrong > 0)
	{
		fprintf(stderr, "pmh_bench: verification: %llu of %llu keys answered wrongly\n",
				(unsigned long long) wrong,
				(unsigned long long) (entries + Min(entries, 100000)));
		bench_errors++;
	}
	else
		fprintf(stderr, "  verified: %llu keys\n",
				(unsigned long long) (entries + Min(entries, 100000)));
}

/* what the table looks like after the load, for the report */
typedef struct LoadShape
{
	uint32		primaries;
	uint32		overflows;
	uint32		log_segments;
	int			gd;
	uint64		splits;
	uint64		splits_shared;
	double		load_factor;
	double		pool_bytes_per_entry;
	double		meta_bytes_per_entry;
	long		huge_mb;		/* anon_huge_mb() then */
	bool		valid;
} LoadShape;

static LoadShape load_shape;

/* note the shape of a freshly loaded table */
static void
note_shape(const Table *t, uint64 entries)
{
	uint64		inseg;
	uint64		slots;
	uint32		used = t->nseg - t->nfree;

	(void) count_entries(t, &inseg, &slots);
	load_shape.primaries = t->primaries;
	load_shape.overflows = t->overflows;
	load_shape.log_segments = t->log.nexts;
	load_shape.gd = t->gd;
	load_shape.splits = t->splits;
	load_shape.splits_shared = t->splits_shared;
	load_shape.load_factor = slots ? (double) inseg / slots : 0;
	load_shape.pool_bytes_per_entry = (double) pmh_pool_bytes(used) / entries;
	load_shape.meta_bytes_per_entry =
		((double) used * sizeof(PmhSegMeta) + sizeof(uint32) * ((size_t) 1 << t->gd)) / entries;
	load_shape.huge_mb = opt.huge_meta ? anon_huge_mb() : -1;
	load_shape.valid = true;
}

/*
 * The probe experiments on the loaded table, one thread, uniform keys: the
 * baseline again, then each alternative lookup (probe_exp).
 */
static void
run_experiments(Table *t, Worker *workers)
{
	static const BenchOp pos[] = {OP_EXP_BASE_POS, OP_EXP_LOCKED_POS,
	OP_EXP_INDEXLOCK_POS, OP_EXP_ONEMISS_POS, OP_EXP_TWOMISS_POS};
	static const BenchOp neg[] = {OP_EXP_BASE_NEG, OP_EXP_LOCKED_NEG,
	OP_EXP_INDEXLOCK_NEG, OP_EXP_ONEMISS_NEG, OP_EXP_TWOMISS_NEG};
	uint32	   *ps = make_stream(opt.ops, 0, opt.entries, false, opt.seed + 41);
	uint32	   *ns = make_stream(opt.ops, opt.entries, opt.entries, false, opt.seed + 42);
	int			i;
	Result	   *first[lengthof(pos) + lengthof(neg)];
	int			round;

	fprintf(stderr, "  probe experiments (1 thread, uniform, best of %d rounds)\n",
			EXP_ROUNDS);
	ref_build(opt.entries);
	/* interleaved rounds, the best of each kept: the machine's load drifts */
	for (round = 0; round < EXP_ROUNDS; round++)
	{
		for (i = 0; i < (int) (lengthof(pos) + lengthof(neg)); i++)
		{
			bool		isneg = i >= (int) lengthof(pos);
			Result	   *r = run_phase(t, workers, 1,
									  isneg ? neg[i - lengthof(pos)] : pos[i],
									  isneg ? ns : ps, opt.ops, "uniform", NULL);

			if (round == 0)
				first[i] = r;
			else
			{
				if (r->mops_cpu > first[i]->mops_cpu)
					*first[i] = *r;
				nresults--;
			}
		}
	}
	ref_destroy();
	free(ps);
	free(ns);
}

/*
 * Everything for one thread count: load a fresh table through the write
 * path, search it (positive, negative; each distribution), delete from it.
 */
static void
run_suite(int nthreads)
{
	Table	   *t = table_create(opt.entries);
	Worker	   *workers = pg_malloc(sizeof(Worker) * nthreads);
	uint8	   *deleted = pg_malloc0(opt.entries);
	uint64		n = opt.entries;
	uint64		ndeleted = 0;
	double		t0;
	int			d;
	int			i;

	for (i = 0; i < nthreads; i++)
		worker_init(&workers[i], t, i);
	fprintf(stderr, "%d thread(s): pool %s (%s)\n", nthreads, opt.dir,
			t->is_pmem ? "CPU flushes" : "msync");

	run_phase(t, workers, nthreads, OP_INSERT, NULL, n, "-", NULL);
	check_count(t, n, "after the load");
	if (nthreads == opt.threads[0])
		note_shape(t, n);
	if (opt.verify)
		verify_all(&workers[0], n, NULL);

	for (d = 0; d < 2; d++)
	{
		bool		zipf = d == 1;
		const char *dist = zipf ? "zipf" : "uniform";
		uint32	   *s;

		if (!(zipf ? opt.zipf : opt.uniform))
			continue;
		s = make_stream(opt.ops, 0, n, zipf, opt.seed + 11 + d);
		run_phase(t, workers, nthreads, OP_SEARCH_POS, s, opt.ops, dist, NULL);
		run_phase(t, workers, nthreads, OP_SEARCH_POS_BATCH, s, opt.ops, dist,
				  NULL);
		free(s);
		s = make_stream(opt.ops, n, n, zipf, opt.seed + 21 + d);
		run_phase(t, workers, nthreads, OP_SEARCH_NEG, s, opt.ops, dist, NULL);
		run_phase(t, workers, nthreads, OP_SEARCH_NEG_BATCH, s, opt.ops, dist,
				  NULL);
		free(s);
	}

	if (opt.experiments && nthreads == opt.threads[0])
		run_experiments(t, workers);

	t0 = now_seconds();
	vacuum_begin(&workers[0]);
	fprintf(stderr, "  clearing released backup-log copies before deletes: %.3f s\n",
			now_seconds() - t0);
	for (d = 0; d < 2; d++)
	{
		bool		zipf = d == 1;
		uint32	   *s;
		Result	   *r;

		if (!(zipf ? opt.zipf : opt.uniform))
			continue;
		/* uniform deletes draw from the first half, Zipf from the second */
		s = make_stream(opt.del_ops, zipf ? n / 2 : 0, zipf ? n - n / 2 : n / 2,
						zipf, opt.seed + 31 + d);
		r = run_phase(t, workers, nthreads, OP_DELETE, s, opt.del_ops,
					  zipf ? "zipf" : "uniform", deleted);
		ndeleted += r->hits;
		free(s);
	}
	check_count(t, n - ndeleted, "after the deletes");
	if (opt.verify)
		verify_all(&workers[0], n, deleted);

	free(deleted);
	workers_free(workers, nthreads);
	table_destroy(t);

	if (opt.direct)
	{
		t = table_create(opt.entries);
		workers = pg_malloc(sizeof(Worker) * nthreads);
		for (i = 0; i < nthreads; i++)
			worker_init(&workers[i], t, i);
		run_phase(t, workers, nthreads, OP_INSERT_DIRECT, NULL, n, "-", NULL);
		check_count(t, n, "after the direct load");
		if (opt.verify)
			verify_all(&workers[0], n, NULL);
		workers_free(workers, nthreads);
		table_destroy(t);
	}
}

/* ---------------------------------------------------------------------
 * Report
 * ---------------------------------------------------------------------
 */

/* the first line of /proc/cpuinfo's "model name", or "?" */
static void
cpu_model(char *buf, size_t len)
{
	FILE	   *f = fopen("/proc/cpuinfo", "r");
	char		line[512];

	snprintf(buf, len, "?");
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f))
	{
		char	   *c = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && c != NULL)
		{
			c++;
			while (*c == ' ' || *c == '\t')
				c++;
			c[strcspn(c, "\n")] = '\0';
			snprintf(buf, len, "%s", c);
			break;
		}
	}
	fclose(f);
}

/* "0.62x" in a static buffer */
static const char *
psprintf_ratio(double x)
{
	static char buf[32];

	snprintf(buf, sizeof(buf), "%.2fx", x);
	return buf;
}

/* the best (highest Mops/s) result of one kind at a thread count, or NULL */
static const Result *
find_result(BenchOp op, const char *dist, int threads)
{
	const Result *best = NULL;
	int			i;

	for (i = 0; i < nresults; i++)
	{
		const Result *r = &results[i];

		if (r->op == op && r->threads == threads && strcmp(r->dist, dist) == 0 &&
			(best == NULL || r->mops > best->mops))
			best = r;
	}
	return best;
}

/* the table of the probe experiments, relative to their baseline run */
static void
report_experiments(void)
{
	const Result *bpos = NULL;
	const Result *bneg = NULL;
	int			i;

	for (i = 0; i < nresults; i++)
	{
		if (results[i].op == OP_EXP_BASE_POS)
			bpos = &results[i];
		if (results[i].op == OP_EXP_BASE_NEG)
			bneg = &results[i];
	}
	if (bpos == NULL && bneg == NULL)
		return;
	printf("\nProbe experiments (1 thread, uniform keys, on the table loaded above, best of %d interleaved rounds; alternative lookups, measured to weigh ideas for the probe cost; the baseline is the optimistic lookup of src/, run again here; \"locked\" takes the segment lock shared; \"index lock\" takes the index lock shared around the optimistic lookup, as src/ did before its lookups went without it; \"one-miss reference\" is not pmhash but the same keys in a CCEH-shaped table, entries in 64 B lines found from the hash alone, without locks, load factor %.2f: what one miss per lookup gives on this machine; \"two-miss reference\" is that table behind a fingerprint table shaped as pmhash's, read first: what two dependent misses per lookup give):\n\n",
		   EXP_ROUNDS, ref_load);
	printf("| lookup | Mops/s | Mops / CPU-s | CPU time vs baseline | pool reads / lookup | lookups reading PMem |\n");
	printf("| --- | --- | --- | --- | --- | --- |\n");
	for (i = 0; i < nresults; i++)
	{
		const Result *r = &results[i];
		const Result *b;

		if (!OP_IS_EXPERIMENT(r->op))
			continue;
		b = OP_IS_POSITIVE(r->op) ? bpos : bneg;
		printf("| %s | %.2f | %.2f | %s | %.2f | %.1f %% |\n",
			   op_names[r->op], r->mops, r->mops_cpu,
			   b && r->mops_cpu > 0 ? psprintf_ratio(b->mops_cpu / r->mops_cpu) : "",
			   r->reads_per_op, 100.0 * r->frac_reading);
	}
}

/* print the markdown report, and the TSV file if asked */
static void
report(int is_pmem)
{
	char		cpu[256];
	char		date[64];
	struct utsname un;
	time_t		now = time(NULL);
	const Result *r;
	int			i;

	cpu_model(cpu, sizeof(cpu));
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M", localtime(&now));
	if (uname(&un) != 0)
		snprintf(un.machine, sizeof(un.machine), "?");

	printf("## pmhash core benchmark (pmh_bench)\n\n");
	printf("- date: %s; machine: %s, %ld CPUs, %s\n", date, cpu,
		   sysconf(_SC_NPROCESSORS_ONLN), un.machine);
	printf("- pool: %s, %s\n", opt.dir,
		   is_pmem ? "emulated PMem (PMEM_IS_PMEM_FORCE=1: CPU cache flushes + fence; not durable)" :
		   "ordinary file (msync per persist)");
	if (opt.huge_meta)
		printf("- segment metadata in 2 MB pages asked for (--huge-meta); after the load the process had %ld MB in such pages\n",
			   load_shape.valid ? load_shape.huge_mb : -1);
	else
		printf("- segment metadata in 4 kB pages\n");
	printf("- %llu keys loaded; %llu operations per search phase, %llu per delete phase; ",
		   (unsigned long long) opt.entries, (unsigned long long) opt.ops,
		   (unsigned long long) opt.del_ops);
	/* the distributions the run drew its keys from, and no other */
	if (opt.zipf)
		printf("%sZipf(%.2f), scrambled\n",
			   opt.uniform ? "keys uniform and " : "keys ", opt.theta);
	else
		printf("keys uniform\n");
	if (opt.media_lines > 0)
		printf("- media model: %d lines of 256 B, LRU (src/core/pmh_media.c); fed after each phase from a trace of the fenced ranges (the model not timed); WA = media bytes written / 16 B per entry inserted (deleted), dirty lines drained at the end of the phase\n",
			   opt.media_lines);
	if (load_shape.valid)
		printf("- after the load (%d thread(s)): %u primary segments, %u overflow, %u log segments, global depth %d, %llu splits (%llu of them under the segment lock alone), load factor %.2f, pool %.1f B/entry, volatile metadata %.1f B/entry (this driver's PmhSegMeta; the server's is smaller)\n",
			   opt.threads[0], load_shape.primaries, load_shape.overflows,
			   load_shape.log_segments, load_shape.gd,
			   (unsigned long long) load_shape.splits,
			   (unsigned long long) load_shape.splits_shared,
			   load_shape.load_factor,
			   load_shape.pool_bytes_per_entry, load_shape.meta_bytes_per_entry);
	printf("\n| threads | operation | keys | ops | Mops/s | Mops / CPU-s | media WA | fences / op | pool reads / op | ops reading PMem | hits |\n");
	printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
	for (i = 0; i < nresults; i++)
	{
		char		wa[32] = "";
		char		rd[32] = "";
		char		fr[32] = "";

		r = &results[i];
		if (OP_IS_EXPERIMENT(r->op))
			continue;
		if (r->wa >= 0)
			snprintf(wa, sizeof(wa), "%.2f", r->wa);
		if (OP_IS_LOOKUP(r->op) || r->op == OP_DELETE)
		{
			snprintf(rd, sizeof(rd), "%.2f", r->reads_per_op);
			if (r->op != OP_DELETE)
				snprintf(fr, sizeof(fr), "%.1f %%", 100.0 * r->frac_reading);
		}
		printf("| %d | %s | %s | %llu | %.2f | %.2f | %s | %.3f | %s | %s | %.1f %% |\n",
			   r->threads, op_names[r->op], r->dist, (unsigned long long) r->ops,
			   r->mops, r->mops_cpu, wa, r->fences_per_op, rd, fr,
			   100.0 * r->hits / Max(r->ops, 1));
	}
	printf("\nDash-EH and CCEH are not run here: test/bench/peers_bench.sh builds them from source and runs them beside this driver, at the same key count, in the same run.\n\n");

	printf("| target (uniform) | wanted | measured | |\n| --- | --- | --- | --- |\n");
	for (i = 0; i < 2; i++)
	{
		BenchOp		op = i == 0 ? OP_SEARCH_POS : OP_SEARCH_NEG;
		const Result *r1 = find_result(op, "uniform", 1);
		const Result *r2 = find_result(op, "uniform", 2);

		if (r1 != NULL && r2 != NULL && r1->mops > 0)
			printf("| %s one key at a time, speed-up from 1 to 2 threads | >= 1.8 | %.2f | %s |\n",
				   op_names[op], r2->mops / r1->mops,
				   r2->mops / r1->mops >= 1.8 ? "met" : "missed");
	}
	if ((r = find_result(OP_SEARCH_NEG, "uniform", 1)) != NULL)
		printf("| negative search probing PMem | <= 10 %% of lookups | %.1f %% | %s |\n",
			   100.0 * r->frac_reading, r->frac_reading <= 0.10 ? "met" : "missed");
	report_experiments();
	printf("\nwrong answers: %llu\n", (unsigned long long) bench_errors);
	printf("\nlookups read without the segment lock (pmh_version_read_begin): %llu; looked again under the lock because a writer got in the way: %llu\n",
		   (unsigned long long) (bench_lookups - bench_retries),
		   (unsigned long long) bench_retries);

	if (opt.tsv)
	{
		FILE	   *f = fopen(opt.tsv, "w");

		if (f == NULL)
			die("could not write %s: %m", opt.tsv);
		fprintf(f, "threads\top\tdist\tops\tsecs\tmops\tmops_cpu\twa\tfences_per_op\treads_per_op\tfrac_reading\thits\terrors\n");
		for (i = 0; i < nresults; i++)
		{
			r = &results[i];
			fprintf(f, "%d\t%s\t%s\t%llu\t%.4f\t%.4f\t%.4f\t%.3f\t%.4f\t%.4f\t%.4f\t%llu\t%llu\n",
					r->threads, op_names[r->op], r->dist,
					(unsigned long long) r->ops, r->secs, r->mops, r->mops_cpu, r->wa,
					r->fences_per_op, r->reads_per_op, r->frac_reading,
					(unsigned long long) r->hits, (unsigned long long) r->errors);
		}
		fclose(f);
	}
}

/* ---------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------
 */

static void
usage(void)
{
	printf("Usage: pmh_bench [options]\n"
		   "  --entries N       keys to load (default 10000000)\n"
		   "  --quick           1000000 keys\n"
		   "  --ops N           operations per search phase (default: --entries,\n"
		   "                    at most 2000000)\n"
		   "  --del-ops N       operations per delete phase (default: --entries / 4,\n"
		   "                    at most 1000000)\n"
		   "  --threads LIST    thread counts, e.g. 1,2,4 (default 1,2)\n"
		   "  --dist LIST       uniform,zipf (default both)\n"
		   "  --theta X         Zipf parameter (default 0.99)\n"
		   "  --dir DIR         directory of the pool file (default /dev/shm)\n"
		   "  --msync           ordinary-file mode: PMEM_IS_PMEM_FORCE=0, msync per persist\n"
		   "                    (default: PMEM_IS_PMEM_FORCE=1, CPU cache flushes)\n"
		   "  --media-lines N   lines of the media buffer model (default 64; 0: off)\n"
		   "  --no-direct       skip the insert-direct runs\n"
		   "  --no-experiments  skip the probe experiments (alternative lookups that\n"
		   "                    src/ does not have, on the loaded table, 1st thread count)\n"
		   "  --verify          look every key up after the load and the deletes\n"
		   "  --tsv FILE        also write the results as tab-separated values\n"
		   "  --seed N          workload seed\n"
		   "  --pool-factor X   pool segments reserved per 1024 keys (default 3)\n"
		   "  --huge-meta       segment metadata in transparent 2 MB pages, as the\n"
		   "                    server's shared memory under huge_pages = on\n"
		   "Exit status: 0, or 1 if any answer was wrong, 2 on errors.\n");
}

/* parse a comma-separated list of thread counts */
static void
parse_threads(const char *s)
{
	char	   *copy = pg_strdup(s);
	char	   *tok;
	char	   *save;

	opt.nthreads = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		int			n = atoi(tok);

		if (n < 1 || n > BENCH_MAX_THREADS || opt.nthreads == lengthof(opt.threads))
			die("bad --threads list: %s", s);
		opt.threads[opt.nthreads++] = n;
	}
	if (opt.nthreads == 0)
		die("bad --threads list: %s", s);
	free(copy);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"entries", required_argument, NULL, 'n'},
		{"quick", no_argument, NULL, 'q'},
		{"ops", required_argument, NULL, 'o'},
		{"del-ops", required_argument, NULL, 'D'},
		{"threads", required_argument, NULL, 't'},
		{"dist", required_argument, NULL, 'd'},
		{"theta", required_argument, NULL, 'z'},
		{"dir", required_argument, NULL, 'p'},
		{"msync", no_argument, NULL, 'm'},
		{"media-lines", required_argument, NULL, 'M'},
		{"no-direct", no_argument, NULL, 'x'},
		{"no-experiments", no_argument, NULL, 'X'},
		{"verify", no_argument, NULL, 'v'},
		{"tsv", required_argument, NULL, 'T'},
		{"seed", required_argument, NULL, 's'},
		{"pool-factor", required_argument, NULL, 'f'},
		{"huge-meta", no_argument, NULL, 'H'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	int			i;
	int			is_pmem = 0;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'n':
				opt.entries = strtoull(optarg, NULL, 10);
				break;
			case 'q':
				opt.entries = 1000000;
				break;
			case 'o':
				opt.ops = strtoull(optarg, NULL, 10);
				break;
			case 'D':
				opt.del_ops = strtoull(optarg, NULL, 10);
				break;
			case 't':
				parse_threads(optarg);
				break;
			case 'd':
				opt.uniform = strstr(optarg, "uniform") != NULL;
				opt.zipf = strstr(optarg, "zipf") != NULL;
				if (!opt.uniform && !opt.zipf)
					die("bad --dist: %s", optarg);
				break;
			case 'z':
				opt.theta = atof(optarg);
				if (opt.theta <= 0 || opt.theta >= 1)
					die("--theta must be in (0, 1)");
				break;
			case 'p':
				opt.dir = optarg;
				break;
			case 'm':
				opt.msync = true;
				break;
			case 'M':
				opt.media_lines = atoi(optarg);
				if (opt.media_lines < 0 || opt.media_lines > PMH_MEDIA_MAX_LINES)
					die("--media-lines must be 0 to %d", PMH_MEDIA_MAX_LINES);
				break;
			case 'x':
				opt.direct = false;
				break;
			case 'X':
				opt.experiments = false;
				break;
			case 'v':
				opt.verify = true;
				break;
			case 'T':
				opt.tsv = optarg;
				break;
			case 's':
				opt.seed = strtoull(optarg, NULL, 0);
				break;
			case 'f':
				opt.pool_factor = atof(optarg);
				if (opt.pool_factor < 1.5)
					die("--pool-factor must be at least 1.5");
				break;
			case 'H':
				opt.huge_meta = true;
				break;
			case 'h':
				usage();
				return 0;
			default:
				usage();
				return 2;
		}
	}
	if (optind < argc)
		die("unexpected argument: %s", argv[optind]);
	if (opt.entries < 1024 || opt.entries > UINT32_MAX / 2)
		die("--entries must be between 1024 and %u", UINT32_MAX / 2);
	if (opt.ops == 0)
		opt.ops = Min(opt.entries, 2000000);
	if (opt.del_ops == 0)
		opt.del_ops = Max(Min(opt.entries / 4, 1000000), 1);

	/* libpmem reads this once, at its first is_pmem query */
	setenv("PMEM_IS_PMEM_FORCE", opt.msync ? "0" : "1", 1);

	for (i = 0; i < opt.nthreads; i++)
	{
		Table	   *probe;

		if (i == 0)
		{
			probe = table_create(1024);
			is_pmem = probe->is_pmem;
			table_destroy(probe);
		}
		run_suite(opt.threads[i]);
	}
	report(is_pmem);
	return bench_errors > 0 ? 1 : 0;
}
