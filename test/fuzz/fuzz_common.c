/*-------------------------------------------------------------------------
 *
 * fuzz_common.c
 *	  The harness shared by the fuzz targets: see fuzz_common.h.
 *
 * The pool is driven the way the server drives it (pmhashshmem.c,
 * pmhashblog.c): recovery then pmh_meta_load of every segment in use, the
 * directory from the segment words, and a split or a new overflow segment
 * whenever the core answers so, after growing the pool by what
 * pmh_segments_needed_for_split announced.  The backup log and the
 * D-buckets -- reserving and releasing log slots, placing entries, making
 * room, relocating everything, VACUUM's clearing, log recovery -- are the
 * core's write-path protocol (src/core/pmh_writepath.c), the code the
 * server runs, driven by one writer: PmhWriteOps below, without locks (the
 * writer always holds the index "exclusively").
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz_common.h"

#include <stdarg.h>
#include <stdlib.h>

bool		fz_verbose = false;

/* ---------------------------------------------------------------------
 * Input, reporting
 * ---------------------------------------------------------------------
 */

/* next byte of the input; 0 once it is used up */
uint8
fz_u8(FzIn *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

/* little-endian 16 bits */
uint16
fz_u16(FzIn *in)
{
	uint16		v = fz_u8(in);

	return v | (uint16) (fz_u8(in) << 8);
}

/* little-endian 32 bits */
uint32
fz_u32(FzIn *in)
{
	uint32		v = fz_u16(in);

	return v | ((uint32) fz_u16(in) << 16);
}

/* little-endian 64 bits */
uint64
fz_u64(FzIn *in)
{
	uint64		v = fz_u32(in);

	return v | ((uint64) fz_u32(in) << 32);
}

/* is an environment variable set to something other than "" or "0"? */
bool
fz_env_flag(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* report a failed check and abort: libFuzzer keeps the input */
void
fz_fail(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "pmhash fuzz check failed: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	fflush(stderr);
	abort();
}

/* print a line of the decoded input when FUZZ_VERBOSE is set */
void
fz_trace(const char *fmt,...)
{
	va_list		ap;

	if (!fz_verbose)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

/* splitmix64 */
uint64
fz_mix(uint64 x)
{
	uint64		z = x + UINT64CONST(0x9E3779B97F4A7C15);

	z = (z ^ (z >> 30)) * UINT64CONST(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64CONST(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* ---------------------------------------------------------------------
 * The image and the persistence hooks
 * ---------------------------------------------------------------------
 */

/* a zeroed, 4 kB aligned block of exactly len bytes (at least 1) */
char *
fz_image_alloc(size_t len)
{
	void	   *p = NULL;

	if (posix_memalign(&p, 4096, Max(len, 1)) != 0)
		fz_fail("out of memory for a %zu-byte image", len);
	memset(p, 0, Max(len, 1));
	return p;
}

/* copy the ranges flushed since the last fence into the shadow */
static void
fz_apply_ranges(FzPool *fp)
{
	int			i;

	if (fp->ranges_overflow)
	{
		memcpy(fp->shadow, fp->pool.base, fp->pool.mapped_len);
		return;
	}
	for (i = 0; i < fp->nranges; i++)
		memcpy(fp->shadow + fp->ranges[i].off,
			   fp->pool.base + fp->ranges[i].off, fp->ranges[i].len);
}

/*
 * PmhPool.flush_hook: every flushed range must lie inside the pool; a
 * fence (len 0) makes the ranges flushed since the last one persistent,
 * in the shadow, unless a simulated power failure has frozen it.
 */
static void
fz_flush_hook(void *arg, uint64 off, size_t len)
{
	FzPool	   *fp = (FzPool *) arg;

	if (len == 0)
	{
		fp->fences++;
		if (fp->shadow && !fp->frozen)
			fz_apply_ranges(fp);
		fp->nranges = 0;
		fp->ranges_overflow = false;
		if (fp->crash_after > 0 && --fp->crash_after == 0)
			fp->frozen = true;
		return;
	}
	FZ_ASSERT(off <= fp->pool.mapped_len && len <= fp->pool.mapped_len - off,
			  "persist of [%llu, +%zu) outside the %zu-byte pool",
			  (unsigned long long) off, len, fp->pool.mapped_len);
	if (fp->nranges < FZ_MAX_RANGES)
	{
		fp->ranges[fp->nranges].off = off;
		fp->ranges[fp->nranges].len = len;
		fp->nranges++;
	}
	else
		fp->ranges_overflow = true;
}

/* PmhPool.read_hook: a probe reads an entry of a segment inside the pool */
static void
fz_read_hook(void *arg, uint64 off, size_t len)
{
	FzPool	   *fp = (FzPool *) arg;

	FZ_ASSERT(off >= PMH_SEG_OFFSET && off <= fp->pool.mapped_len &&
			  len <= fp->pool.mapped_len - off,
			  "probe read [%llu, +%zu) outside the segments of the %zu-byte pool",
			  (unsigned long long) off, len, fp->pool.mapped_len);
}

/* ---------------------------------------------------------------------
 * Callbacks and metadata
 * ---------------------------------------------------------------------
 */

/* PmhCallbacks.get_meta */
static PmhSegMeta *
fz_cb_get_meta(void *arg, uint32 segno)
{
	FzPool	   *fp = (FzPool *) arg;

	FZ_ASSERT(segno < fp->nseg, "get_meta(%u) past the %llu segments",
			  segno, (unsigned long long) fp->nseg);
	return &fp->meta[segno];
}

/* PmhCallbacks.alloc_segment: the caller has grown the pool beforehand */
static uint32
fz_cb_alloc_segment(void *arg)
{
	FzPool	   *fp = (FzPool *) arg;
	uint32		segno;

	FZ_ASSERT(fp->nfree > 0,
			  "alloc_segment with no free segment left (the pool was grown to the announced need)");
	segno = fp->freesegs[--fp->nfree];
	FZ_ASSERT(fp->role[segno] == PMH_SEG_FREE, "free list hands out segment %u of role %d",
			  segno, (int) fp->role[segno]);
	FZ_ASSERT(pmh_segment_is_zero(&fp->pool, segno),
			  "free list hands out segment %u, which is not zero", segno);
	fp->role[segno] = PMH_SEG_OVERFLOW; /* until told otherwise */
	fp->owner[segno] = PMH_NO_SEGMENT;
	fp->allocs++;
	return segno;
}

/* size the metadata arrays for newn segments; the new ones are free */
static void
fz_resize_meta(FzPool *fp, uint64 oldn, uint64 newn)
{
	uint64		i;
	size_t		n = Max(newn, 1);

	fp->meta = pg_realloc(fp->meta, n * sizeof(PmhSegMeta));
	fp->role = pg_realloc(fp->role, n * sizeof(PmhSegRole));
	fp->owner = pg_realloc(fp->owner, n * sizeof(uint32));
	fp->freesegs = pg_realloc(fp->freesegs, n * sizeof(uint32));
	/* push the highest first so that the lowest is handed out first */
	for (i = newn; i > oldn; i--)
	{
		pmh_meta_reset(&fp->meta[i - 1], 0);
		fp->role[i - 1] = PMH_SEG_FREE;
		fp->owner[i - 1] = PMH_NO_SEGMENT;
		fp->freesegs[fp->nfree++] = (uint32) (i - 1);
	}
	fp->nseg = newn;
}

/*
 * Take over an image of len bytes (from fz_image_alloc): no segment is in
 * use until fz_pool_load or fz_pool_create says otherwise.  With "shadow",
 * keep a copy of what is persisted, starting from the image as it is.
 */
void
fz_pool_init(FzPool *fp, char *image, size_t len, bool shadow)
{
	uint32		i;

	memset(fp, 0, sizeof(*fp));
	fp->pool.base = image;
	fp->pool.mapped_len = len;
	fp->pool.is_pmem = 1;
	fp->pool.flush_hook = fz_flush_hook;
	fp->pool.read_hook = fz_read_hook;
	fp->pool.flush_hook_arg = fp;
	for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
		fp->log_exts[i] = PMH_NO_SEGMENT;
	fp->pool.log_ext_segs = fp->log_exts;
	fp->log_fixed = PMH_LOG_LINES;
	fp->log_max_exts = PMH_LOG_MAX_EXTS;
	fp->own_line = -1;
	fp->max_segments = FZ_MAX_SEGMENTS;
	fp->cb.get_meta = fz_cb_get_meta;
	fp->cb.alloc_segment = fz_cb_alloc_segment;
	fp->cb.arg = fp;
	fz_resize_meta(fp, 0, pmh_pool_nsegments(&fp->pool));
	if (shadow)
	{
		fp->shadow = fz_image_alloc(len);
		memcpy(fp->shadow, image, len);
	}
}

/* give back the line states of the backup log (fz_log_setup) */
static void
fz_log_free(FzPool *fp)
{
	uint32		c;

	if (fp->chunks == NULL)
		return;
	for (c = 0; c < FZ_LOG_CHUNKS; c++)
		free(fp->chunks[c]);
	free(fp->chunks);
	fp->chunks = NULL;
}

/* release everything, the image too */
void
fz_pool_free(FzPool *fp)
{
	fz_log_free(fp);
	free(fp->pool.base);
	free(fp->shadow);
	free(fp->meta);
	free(fp->role);
	free(fp->owner);
	free(fp->freesegs);
	free(fp->dir);
	memset(fp, 0, sizeof(*fp));
}

/*
 * Grow the pool to newnseg segments, as ftruncate and a new mapping do:
 * the image moves (the core keeps no pointer across calls), the new
 * segments read as zero, in the image and in the shadow.
 */
void
fz_pool_grow(FzPool *fp, uint64 newnseg)
{
	size_t		oldlen = fp->pool.mapped_len;
	size_t		newlen = pmh_pool_bytes(newnseg);
	char	   *img;

	if (newnseg <= fp->nseg)
		return;
	FZ_ASSERT(newnseg <= fp->max_segments,
			  "the pool would grow to %llu segments (limit %llu)",
			  (unsigned long long) newnseg, (unsigned long long) fp->max_segments);
	FZ_ASSERT(!fp->pool.batching, "pool grown inside a batch");
	img = fz_image_alloc(newlen);
	memcpy(img, fp->pool.base, oldlen);
	free(fp->pool.base);
	fp->pool.base = img;
	fp->pool.mapped_len = newlen;
	if (fp->shadow)
	{
		img = fz_image_alloc(newlen);
		memcpy(img, fp->shadow, oldlen);
		free(fp->shadow);
		fp->shadow = img;
	}
	fz_resize_meta(fp, fp->nseg, newnseg);
}

/* make sure n segments are free, growing the pool if needed */
void
fz_pool_ensure_free(FzPool *fp, int n)
{
	uint64		want;

	if (fp->nfree >= (uint32) n)
		return;
	want = Max(fp->nseg + fp->nseg / 2, fp->nseg + n - fp->nfree + 2);
	want = Min(want, fp->max_segments);
	fz_pool_grow(fp, Max(want, fp->nseg + n - fp->nfree));
}

/* (re)build the directory from the primaries' words, if not too deep */
static void
fz_dir_build(FzPool *fp, int gd)
{
	uint64		i;

	free(fp->dir);
	fp->dir = NULL;
	fp->gd = gd;
	fp->dir_valid = gd <= FZ_MAX_DIR_DEPTH;
	if (!fp->dir_valid)
		return;
	fp->dir = pg_malloc(sizeof(uint32) << gd);
	for (i = 0; i < (UINT64CONST(1) << gd); i++)
		fp->dir[i] = PMH_NO_SEGMENT;
	for (i = 0; i < fp->nseg; i++)
		if (fp->role[i] == PMH_SEG_PRIMARY)
			pmh_dir_assign(fp->dir, gd, fp->meta[i].word, (uint32) i);
}

/* a fresh pool of nseg segments: the header and one primary of depth 0 */
void
fz_pool_create(FzPool *fp, uint64 nseg, bool shadow)
{
	PmhPoolHeader hdr;
	size_t		len = pmh_pool_bytes(Max(nseg, 1));

	fz_pool_init(fp, fz_image_alloc(len), len, shadow);
	pmh_header_init(&hdr, UINT64CONST(0x1234567890abcdef), 5, 0, 16384, 16385);
	FZ_ASSERT(pmh_pool_format(&fp->pool, &hdr) == 0, "pmh_pool_format: %m");
	FZ_ASSERT(pmh_pool_state_init(&fp->pool, 0) == 0, "pmh_pool_state_init: %m");
	/* segment 0, on top of the free stack, is the primary */
	FZ_ASSERT(fp->freesegs[fp->nfree - 1] == 0, "free stack does not start at 0");
	fp->nfree--;
	fp->role[0] = PMH_SEG_PRIMARY;
	pmh_meta_reset(&fp->meta[0], pmh_seg_header(&fp->pool, 0)->word);
	fz_dir_build(fp, 0);
	fz_log_setup(fp, fp->log_fixed, fp->log_max_exts);
}

/*
 * What the server does when it loads an index: pmh_recover, then the
 * metadata of every segment in use (an overflow segment's entries are
 * judged by its owner's word), the free list, the log extensions and the
 * directory.  D-buckets start empty, and so do the backup log's line
 * states (fz_log_setup with the log's configuration): the caller recovers
 * the log through the core (pmh_wp_recover_all, or pmh_wp_log_recover and
 * pmh_wp_recover_slot).  Returns pmh_recover's result.
 */
int
fz_pool_load(FzPool *fp, PmhRecoveryResult *res)
{
	uint64		nseg = pmh_pool_nsegments(&fp->pool);
	PmhSegRole *roles = pg_malloc(Max(nseg, 1) * sizeof(PmhSegRole));
	uint32	   *owner = pg_malloc(Max(nseg, 1) * sizeof(uint32));
	uint64	   *scratch = pg_malloc(PMH_RECOVER_SCRATCH(Max(nseg, 1)) * sizeof(uint64));
	uint64		i;
	int			rc;

	rc = pmh_recover(&fp->pool, roles, owner, scratch, res);
	free(scratch);
	if (rc != 0)
	{
		free(roles);
		free(owner);
		return rc;
	}
	fp->nfree = 0;
	fp->nseg = 0;
	fz_resize_meta(fp, 0, nseg);
	fp->nfree = 0;
	fp->log.nexts = 0;
	for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
		fp->log_exts[i] = PMH_NO_SEGMENT;
	for (i = nseg; i > 0; i--)
	{
		uint32		s = (uint32) (i - 1);
		uint64		w = pmh_seg_header(&fp->pool, s)->word;

		fp->role[s] = roles[s];
		fp->owner[s] = PMH_NO_SEGMENT;
		switch (roles[s])
		{
			case PMH_SEG_PRIMARY:
				pmh_meta_load(&fp->pool, s, w, &fp->meta[s]);
				break;
			case PMH_SEG_OVERFLOW:
				FZ_ASSERT(owner[s] < nseg && roles[owner[s]] == PMH_SEG_PRIMARY,
						  "recovery gave overflow segment %u the owner %u", s, owner[s]);
				fp->owner[s] = owner[s];
				pmh_meta_load(&fp->pool, s,
							  pmh_seg_header(&fp->pool, owner[s])->word,
							  &fp->meta[s]);
				break;
			case PMH_SEG_LOG:
				{
					uint32		ext = pmh_segword_log_ext(w);

					FZ_ASSERT(pmh_segword_is_log(w) && ext < res->log_exts &&
							  fp->log_exts[ext] == PMH_NO_SEGMENT,
							  "recovery kept log segment %u with word %016llx (%u extensions)",
							  s, (unsigned long long) w, res->log_exts);
					fp->log_exts[ext] = s;
					pmh_meta_reset(&fp->meta[s], w);
					break;
				}
			case PMH_SEG_FREE:
				pmh_meta_reset(&fp->meta[s], 0);
				fp->freesegs[fp->nfree++] = s;
				break;
			default:
				fz_fail("recovery gave segment %u the role %d", s, (int) roles[s]);
		}
	}
	fp->log.nexts = res->log_exts;
	for (i = 0; i < fp->log.nexts; i++)
		FZ_ASSERT(fp->log_exts[i] != PMH_NO_SEGMENT,
				  "recovery counted %u log extensions but %llu has no segment",
				  res->log_exts, (unsigned long long) i);
	fz_dir_build(fp, res->global_depth);
	fz_log_setup(fp, fp->log_fixed, fp->log_max_exts);
	free(roles);
	free(owner);
	return 0;
}

/*
 * A power failure: the image becomes what was persisted (the shadow).  The
 * caller loads it again.
 */
void
fz_pool_restart_from_shadow(FzPool *fp)
{
	FZ_ASSERT(fp->shadow != NULL, "no shadow kept");
	memcpy(fp->pool.base, fp->shadow, fp->pool.mapped_len);
	fp->frozen = false;
	fp->crash_after = 0;
	fp->nranges = 0;
	fp->ranges_overflow = false;
}

/* freeze the shadow after the given number of fences from now */
void
fz_arm_crash(FzPool *fp, int fences)
{
	fp->crash_after = fences;
	fp->frozen = false;
}

/* ---------------------------------------------------------------------
 * Structure changes
 * ---------------------------------------------------------------------
 */

/* the primary segment that holds a hash: directory, or scan of the words */
uint32
fz_primary_of(const FzPool *fp, uint64 hash)
{
	uint64		s;

	if (fp->dir_valid)
		return fp->dir[pmh_dir_index(hash, fp->gd)];
	for (s = 0; s < fp->nseg; s++)
		if (fp->role[s] == PMH_SEG_PRIMARY &&
			pmh_hash_in_segment(hash, fp->meta[s].word))
			return (uint32) s;
	fz_fail("no primary segment covers hash %016llx", (unsigned long long) hash);
}

/* number of overflow segments on a primary's chain (metadata) */
int
fz_chain_length(const FzPool *fp, uint32 segno)
{
	int			n = 0;
	uint32		s;

	for (s = fp->meta[segno].ovf_next; s != PMH_NO_SEGMENT; s = fp->meta[s].ovf_next)
	{
		FZ_ASSERT(s < fp->nseg && (uint64) n <= fp->nseg,
				  "chain of segment %u is broken at %u", segno, s);
		n++;
	}
	return n;
}

/*
 * Split primary segnp as the server does: grow by the announced need,
 * pmh_split, then the roles and the directory (doubled first when the new
 * depth exceeds the global depth).  Returns the new segment.
 */
uint32
fz_split(FzPool *fp, uint32 segno)
{
	int			need = pmh_segments_needed_for_split(&fp->cb, segno);
	uint32		newseg = PMH_NO_SEGMENT;
	uint64		w0;
	uint64		w1;
	int			depth;
	uint32		s;

	fz_pool_ensure_free(fp, need);
	fp->allocs = 0;
	FZ_ASSERT(pmh_split(&fp->pool, &fp->cb, segno, &newseg) == 0,
			  "pmh_split(%u): %m", segno);
	FZ_ASSERT(fp->allocs <= need,
			  "split of %u took %d segments; pmh_segments_needed_for_split said %d",
			  segno, fp->allocs, need);
	FZ_ASSERT(newseg < fp->nseg, "pmh_split returned segment %u", newseg);
	w0 = fp->meta[segno].word;
	w1 = fp->meta[newseg].word;
	depth = pmh_segword_depth(w0);
	FZ_ASSERT(depth == pmh_segword_depth(w1) &&
			  pmh_segword_prefix(w1) == (pmh_segword_prefix(w0) | 1) &&
			  pmh_seg_header(&fp->pool, segno)->word == w0 &&
			  pmh_seg_header(&fp->pool, newseg)->word == w1,
			  "split halves %u, %u have words %016llx, %016llx",
			  segno, newseg, (unsigned long long) w0, (unsigned long long) w1);
	fp->role[newseg] = PMH_SEG_PRIMARY;
	for (s = fp->meta[newseg].ovf_next; s != PMH_NO_SEGMENT; s = fp->meta[s].ovf_next)
	{
		FZ_ASSERT(s < fp->nseg && fp->role[s] == PMH_SEG_OVERFLOW &&
				  fp->owner[s] == PMH_NO_SEGMENT,
				  "split of %u chained segment %u to the new half", segno, s);
		fp->owner[s] = newseg;
	}
	if (fp->dir_valid && depth > fp->gd)
	{
		if (depth > FZ_MAX_DIR_DEPTH)
		{
			free(fp->dir);
			fp->dir = NULL;
			fp->dir_valid = false;
		}
		else
		{
			uint32	   *newdir = pg_malloc(sizeof(uint32) << (fp->gd + 1));

			FZ_ASSERT(depth == fp->gd + 1, "split to depth %d at global depth %d",
					  depth, fp->gd);
			pmh_dir_double(fp->dir, fp->gd, newdir);
			free(fp->dir);
			fp->dir = newdir;
			fp->gd++;
		}
	}
	if (fp->dir_valid)
	{
		pmh_dir_assign(fp->dir, fp->gd, w0, segno);
		pmh_dir_assign(fp->dir, fp->gd, w1, newseg);
	}
	else
		fp->gd = Max(fp->gd, depth);
	return newseg;
}

/* link a new overflow segment at the head of a primary's chain */
uint32
fz_add_overflow(FzPool *fp, uint32 segno)
{
	uint32		newseg;

	fz_pool_ensure_free(fp, 1);
	newseg = fz_cb_alloc_segment(fp);
	FZ_ASSERT(pmh_add_overflow(&fp->pool, &fp->cb, segno, newseg) == 0,
			  "pmh_add_overflow(%u, %u): %m", segno, newseg);
	fp->owner[newseg] = segno;
	return newseg;
}

/* ---------------------------------------------------------------------
 * The write path: the core's protocol, one writer
 * ---------------------------------------------------------------------
 */

/* PmhWriteOps.log_lock and log_unlock: one writer takes no lock */
static void
fz_wp_nolock(void *arg)
{
}

/* PmhWriteOps.log_chunk */
static PmhLogChunk *
fz_wp_chunk(void *arg, uint32 c)
{
	FzPool	   *fp = (FzPool *) arg;

	FZ_ASSERT(fp->chunks != NULL && c < FZ_LOG_CHUNKS && fp->chunks[c] != NULL,
			  "the core asks for backup-log chunk %u, which is not set up", c);
	return fp->chunks[c];
}

/* PmhWriteOps.index_exclusive: the one writer has the index to itself */
static bool
fz_wp_exclusive(void *arg)
{
	return true;
}

/* PmhWriteOps.relock */
static void
fz_wp_relock(void *arg, bool exclusive)
{
	fz_fail("the core changes the lock mode of a writer that holds the index exclusively");
}

/* PmhWriteOps.lock_hash and lookup_segment: no segment lock is needed */
static uint32
fz_wp_lock_hash(void *arg, uint64 hash, PmhSegMeta **meta)
{
	FzPool	   *fp = (FzPool *) arg;
	uint32		segno = fz_primary_of(fp, hash);

	*meta = &fp->meta[segno];
	return segno;
}

/* PmhWriteOps.unlock_segment */
static void
fz_wp_unlock_segment(void *arg, uint32 segno)
{
}

/* PmhWriteOps.split: the core's verdict, acted on at once */
static bool
fz_wp_split(void *arg, uint32 segno)
{
	FzPool	   *fp = (FzPool *) arg;

	FZ_ASSERT(pmh_segword_depth(fp->meta[segno].word) < PMH_MAX_DEPTH,
			  "the core asks to split segment %u at the maximum depth", segno);
	(void) fz_split(fp, segno);
	return true;
}

/* PmhWriteOps.add_overflow */
static bool
fz_wp_add_overflow(void *arg, uint32 segno)
{
	(void) fz_add_overflow((FzPool *) arg, segno);
	return true;
}

/* PmhWriteOps.add_log_segment */
static bool
fz_wp_add_log_segment(void *arg)
{
	(void) fz_add_log_segment((FzPool *) arg);
	return true;
}

/* PmhWriteOps.nsegments */
static uint32
fz_wp_nsegments(void *arg)
{
	return (uint32) ((FzPool *) arg)->nseg;
}

/* PmhWriteOps.primaries (the log's growth policy) */
static uint64
fz_wp_primaries(void *arg)
{
	const FzPool *fp = (const FzPool *) arg;
	uint64		n = 0;
	uint64		s;

	for (s = 0; s < fp->nseg; s++)
		n += fp->role[s] == PMH_SEG_PRIMARY;
	return n;
}

/* PmhWriteOps.error: the image never fails a write, so this is a bug */
static void
fz_wp_error(void *arg, PmhWpStatus status, const char *what, bool fatal)
{
	fz_fail("the write path could not %s the pool (status %d%s): %m", what,
			(int) status, fatal ? ", fatal" : "");
}

static const PmhWriteOps fz_wp_ops = {
	.log_lock = fz_wp_nolock,
	.log_unlock = fz_wp_nolock,
	.log_chunk = fz_wp_chunk,
	.index_exclusive = fz_wp_exclusive,
	.relock = fz_wp_relock,
	.lock_hash = fz_wp_lock_hash,
	.unlock_segment = fz_wp_unlock_segment,
	.lookup_segment = fz_wp_lock_hash,
	.split = fz_wp_split,
	.add_overflow = fz_wp_add_overflow,
	.add_log_segment = fz_wp_add_log_segment,
	.nsegments = fz_wp_nsegments,
	.primaries = fz_wp_primaries,
	.error = fz_wp_error,
};

/*
 * The pool's writer, for the core's pmh_wp_* calls: filled in afresh from
 * the pool (stale, faults), as the server fills in a backend's.
 */
PmhWriter *
fz_writer(FzPool *fp)
{
	FZ_ASSERT(fp->chunks != NULL, "the backup log's line states are not set up");
	fp->w = (PmhWriter) {
		.pool = &fp->pool,
		.cb = &fp->cb,
		.ops = &fz_wp_ops,
		.arg = fp,
		.log = &fp->log,
		.id = 1,
		.own_line = &fp->own_line,
		.own_used = &fp->own_used,
		.check_segment = fp->stale,
		.faults = fp->faults,
	};
	return &fp->w;
}

/*
 * Set up the line states of the backup log the pool has (its fixed lines
 * and fp->log.nexts log segments), every line free and unowned: the first
 * fixed_lines lines of the fixed log are used, the rest never (few make
 * reuse and growth frequent); the log grows to at most max_exts log
 * segments.  Both are kept for the restarts to come (fz_pool_load).
 */
void
fz_log_setup(FzPool *fp, uint32 fixed_lines, uint32 max_exts)
{
	uint32		c;

	FZ_ASSERT(fixed_lines > 0 && fixed_lines <= PMH_LOG_LINES &&
			  fp->log.nexts <= PMH_LOG_MAX_EXTS,
			  "a backup log of %u fixed lines and %u log segments", fixed_lines,
			  fp->log.nexts);
	fz_log_free(fp);
	fp->chunks = pg_malloc0(FZ_LOG_CHUNKS * sizeof(PmhLogChunk *));
	for (c = 0; c < pmh_log_nlines(&fp->log) / PMH_LOG_CHUNK; c++)
	{
		fp->chunks[c] = pg_malloc(sizeof(PmhLogChunk));
		pmh_wp_chunk_init(fp->chunks[c]);
	}
	fp->log_fixed = fixed_lines;
	fp->log_max_exts = Min(Max(max_exts, fp->log.nexts), PMH_LOG_MAX_EXTS);
	fp->own_line = -1;
	fp->own_used = 0;
	pmh_wp_log_init(fz_writer(fp), fp->log_fixed, fp->log_max_exts);
}

/*
 * Add the next log segment (the core's pmh_wp_log_extend) with the chunk of
 * its line states; returns its segment.  Asked for past the growth limit
 * (a fuzz operation, a seed), it raises the limit to what the log has.
 */
uint32
fz_add_log_segment(FzPool *fp)
{
	uint32		c = pmh_log_nlines(&fp->log) / PMH_LOG_CHUNK;
	uint32		segno;

	FZ_ASSERT(fp->log.nexts < PMH_LOG_MAX_EXTS && c < FZ_LOG_CHUNKS,
			  "too many log segments");
	if (fp->log.nexts >= fp->log.max_exts)
		fp->log.max_exts = fp->log_max_exts = fp->log.nexts + 1;
	fz_pool_ensure_free(fp, 1);
	segno = fz_cb_alloc_segment(fp);
	fp->chunks[c] = pg_malloc(sizeof(PmhLogChunk));
	pmh_wp_chunk_init(fp->chunks[c]);
	FZ_ASSERT(pmh_wp_log_extend(fz_writer(fp), segno, fp->log_exts) == PMH_WP_OK,
			  "pmh_wp_log_extend(%u): %m", segno);
	fp->role[segno] = PMH_SEG_LOG;
	return segno;
}

/*
 * The core's relocation primitive alone, as the protocol never calls it:
 * one pmh_relocate of primary segno's D-bucket without "decide", which
 * moves what fits and answers PMH_INSERT_FULL where an entry finds no room
 * (no split or overflow verdict).  Checks what it reports, releases the
 * log slots of what it relocated (pmh_wp_release) and returns its answer.
 */
PmhInsertResult
fz_relocate(FzPool *fp, uint32 segno)
{
	uint32		released[PMH_DBUCKET_SLOTS];
	int			nrel = -1;
	int			ndup = -1;
	uint32		before = fp->meta[segno].npending;
	uint32		pending = fp->log.pending;
	PmhInsertResult r;

	r = pmh_relocate(&fp->pool, &fp->cb, segno, fp->stale, false,
					 released, &nrel, &ndup);
	FZ_ASSERT(nrel >= 0 && nrel <= (int) before && ndup >= 0 && ndup <= nrel &&
			  fp->meta[segno].npending == before - (uint32) nrel,
			  "pmh_relocate(%u): %u pending, %d released, %d duplicates, %u left",
			  segno, before, nrel, ndup, fp->meta[segno].npending);
	FZ_ASSERT(r == PMH_INSERT_DONE || r == PMH_INSERT_FULL,
			  "pmh_relocate(%u) without \"decide\": result %d: %m", segno, (int) r);
	FZ_ASSERT(r != PMH_INSERT_DONE || fp->meta[segno].npending == 0,
			  "pmh_relocate(%u) is done with %u entries pending",
			  segno, fp->meta[segno].npending);
	FZ_ASSERT(pmh_wp_release(fz_writer(fp), released, nrel, false, true) == PMH_WP_OK &&
			  fp->log.pending == pending - (uint32) nrel,
			  "releasing the %d log slots relocation freed left %u of %u pending",
			  nrel, fp->log.pending, pending);
	return r;
}

/*
 * All TIDs stored under a hash: pmh_lookup in the primary and its chain
 * (*nsegpart of them), then the primary's D-bucket.  Stores at most max
 * tags; returns how many there are.
 */
int
fz_lookup(const FzPool *fp, uint64 hash, uint64 *tags, int max, int *nsegpart)
{
	uint32		p = fz_primary_of(fp, hash);
	const PmhSegMeta *m = &fp->meta[p];
	int			n;
	uint32		i;

	n = pmh_lookup(&fp->pool, &fp->cb, p, hash, tags, max);
	*nsegpart = n;
	for (i = 0; i < m->npending; i++)
	{
		if (m->pending[i].hash != hash)
			continue;
		if (n < max)
			tags[n] = m->pending[i].tag;
		n++;
	}
	return n;
}

/* qsort: pairs by hash, then tag */
int
fz_cmp_pair(const void *a, const void *b)
{
	const FzPair *x = a;
	const FzPair *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->tag < y->tag ? -1 : (x->tag > y->tag ? 1 : 0);
}

/* qsort: uint64 */
int
fz_cmp_u64(const void *a, const void *b)
{
	uint64		x = *(const uint64 *) a;
	uint64		y = *(const uint64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * Every entry the metadata says is live in a primary or overflow segment
 * (and with "pending", every D-bucket entry too), sorted; *n of them.
 */
FzPair *
fz_collect(const FzPool *fp, bool pending, size_t *n)
{
	FzPair	   *v = NULL;
	size_t		cap = 0;
	uint64		s;

	*n = 0;
	for (s = 0; s < fp->nseg; s++)
	{
		const PmhSegMeta *m = &fp->meta[s];
		const PmhEntry *e = pmh_seg_entries(&fp->pool, (uint32) s);
		int			slot;

		if (fp->role[s] != PMH_SEG_PRIMARY && fp->role[s] != PMH_SEG_OVERFLOW)
			continue;
		if (cap - *n < PMH_SEG_SLOTS + PMH_DBUCKET_SLOTS)
		{
			cap = Max(cap * 2, *n + PMH_SEG_SLOTS + PMH_DBUCKET_SLOTS);
			v = pg_realloc(v, cap * sizeof(FzPair));
		}
		for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
		{
			if (!pmh_meta_is_live(m, slot))
				continue;
			v[*n].hash = e[slot].hash;
			v[*n].tag = e[slot].tag;
			(*n)++;
		}
		if (pending && fp->role[s] == PMH_SEG_PRIMARY)
		{
			uint32		k;

			for (k = 0; k < m->npending; k++)
			{
				v[*n].hash = m->pending[k].hash;
				v[*n].tag = m->pending[k].tag;
				(*n)++;
			}
		}
	}
	if (*n > 0)
		qsort(v, *n, sizeof(FzPair), fz_cmp_pair);
	return v;
}

/* ---------------------------------------------------------------------
 * The checker
 * ---------------------------------------------------------------------
 */

/* qsort: (start, depth) pairs */
static int
fz_cmp_range(const void *a, const void *b)
{
	const uint64 *x = a;
	const uint64 *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : (x[1] > y[1] ? 1 : 0);
}

/* does a whole segment, header line included, read as zero? */
static bool
fz_segment_is_zero(const FzPool *fp, uint32 segno)
{
	const uint64 *w = (const uint64 *) pmh_seg_header(&fp->pool, segno);
	size_t		i;

	for (i = 0; i < PMH_SEG_BYTES / sizeof(uint64); i++)
		if (w[i] != 0)
			return false;
	return true;
}

/*
 * The entries of a primary or overflow segment: a slot is marked live in
 * the occupancy bitmap exactly when its entry is live under the owner's
 * word, fingerprints match, nlive counts the bits.
 */
static void
fz_check_entries(const FzPool *fp, uint32 s, uint64 owner_word, const char *what)
{
	const PmhSegMeta *m = &fp->meta[s];
	const PmhEntry *e = pmh_seg_entries(&fp->pool, s);
	uint32		pop = 0;
	int			slot;

	for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
	{
		bool		occ = pmh_meta_is_live(m, slot);
		bool		live = pmh_entry_is_live(&e[slot], owner_word);

		FZ_ASSERT(occ == live,
				  "%s: segment %u slot %d: occupancy bit %d, but the entry (%016llx, %016llx) is %s",
				  what, s, slot, (int) occ, (unsigned long long) e[slot].hash,
				  (unsigned long long) e[slot].tag, live ? "live" : "dead");
		if (occ)
			pop++;
	}
	{
		char		msg[160];

		FZ_ASSERT(pmh_fpt_verify(&fp->pool, m, s, msg, sizeof(msg)),
				  "%s: %s", what, msg);
	}
	FZ_ASSERT(pop == m->nlive, "%s: segment %u: nlive %u, %u occupancy bits",
			  what, s, m->nlive, pop);
}

/*
 * Check the pool and its metadata (the invariants test/unit/test_core.c's
 * check_structure checks, and those of recovery): every segment's word
 * fits its role; the primaries tile the 48-bit hash space; every overflow
 * segment is on exactly one chain, its owner's; chains mirror the pool and
 * end; log segments number the extensions once each; free segments read
 * as zero; occupancy mirrors the entries; D-buckets hold entries of their
 * segment; the directory points every index at the primary covering it.
 * Returns the number of live entries in segments.
 */
uint64
fz_check_structure(const FzPool *fp, const char *what)
{
	uint64		total = 0;
	uint64		novf = 0;
	uint64		chained = 0;
	uint64		nprim = 0;
	uint64		cover = 0;
	uint64	   *ranges = pg_malloc(Max(fp->nseg, 1) * 2 * sizeof(uint64));
	uint32	   *covered = NULL;
	uint32		nlog = 0;
	uint64		i;

	FZ_ASSERT(fp->nseg == pmh_pool_nsegments(&fp->pool),
			  "%s: %llu segments in the metadata, %llu in the pool", what,
			  (unsigned long long) fp->nseg,
			  (unsigned long long) pmh_pool_nsegments(&fp->pool));
	for (i = 0; i < fp->nseg; i++)
	{
		uint32		s = (uint32) i;
		const PmhSegMeta *m = &fp->meta[s];
		const PmhSegHeader *h = pmh_seg_header(&fp->pool, s);
		uint32		next = h->ovf_next == 0 ? PMH_NO_SEGMENT : (uint32) (h->ovf_next - 1);

		switch (fp->role[s])
		{
			case PMH_SEG_FREE:
				FZ_ASSERT(fz_segment_is_zero(fp, s),
						  "%s: free segment %u does not read as zero", what, s);
				FZ_ASSERT(m->nlive == 0 && m->npending == 0,
						  "%s: free segment %u has metadata", what, s);
				break;
			case PMH_SEG_LOG:
				{
					uint32		ext = pmh_segword_log_ext(h->word);

					FZ_ASSERT(pmh_segword_is_valid(h->word) && pmh_segword_is_log(h->word) &&
							  ext < fp->log.nexts && fp->log_exts[ext] == s,
							  "%s: log segment %u has word %016llx", what, s,
							  (unsigned long long) h->word);
					nlog++;
					break;
				}
			case PMH_SEG_OVERFLOW:
				FZ_ASSERT(h->word == pmh_segword_make_overflow(),
						  "%s: overflow segment %u has word %016llx", what, s,
						  (unsigned long long) h->word);
				FZ_ASSERT(fp->owner[s] < fp->nseg && fp->role[fp->owner[s]] == PMH_SEG_PRIMARY,
						  "%s: overflow segment %u has owner %u", what, s, fp->owner[s]);
				FZ_ASSERT(m->ovf_next == next,
						  "%s: segment %u: ovf_next %u in metadata, %u in the pool",
						  what, s, m->ovf_next, next);
				FZ_ASSERT(m->npending == 0, "%s: overflow segment %u has a D-bucket",
						  what, s);
				fz_check_entries(fp, s, fp->meta[fp->owner[s]].word, what);
				total += m->nlive;
				novf++;
				break;
			case PMH_SEG_PRIMARY:
				{
					uint32		o;
					uint64		steps = 0;
					uint32		k;
					int			depth = pmh_segword_depth(h->word);

					FZ_ASSERT(m->word == h->word && pmh_segword_is_valid(h->word) &&
							  !pmh_segword_is_overflow(h->word),
							  "%s: primary %u: word %016llx in metadata, %016llx in the pool",
							  what, s, (unsigned long long) m->word,
							  (unsigned long long) h->word);
					FZ_ASSERT(m->ovf_next == next,
							  "%s: segment %u: ovf_next %u in metadata, %u in the pool",
							  what, s, m->ovf_next, next);
					fz_check_entries(fp, s, h->word, what);
					total += m->nlive;
					for (o = m->ovf_next; o != PMH_NO_SEGMENT; o = fp->meta[o].ovf_next)
					{
						FZ_ASSERT(o < fp->nseg && fp->role[o] == PMH_SEG_OVERFLOW &&
								  fp->owner[o] == s && ++steps <= fp->nseg,
								  "%s: chain of primary %u reaches segment %u", what, s, o);
						chained++;
					}
					FZ_ASSERT(m->npending <= PMH_DBUCKET_SLOTS,
							  "%s: primary %u has %u pending entries", what, s, m->npending);
					for (k = 0; k < m->npending; k++)
					{
						PmhEntry	pe;

						FZ_ASSERT(m->pending_fp[k] == pmh_meta_fp(m->pending[k].hash),
								  "%s: primary %u: pending entry %u has fingerprint %04x, its hash %04x",
								  what, s, k, m->pending_fp[k],
								  pmh_meta_fp(m->pending[k].hash));
						pe.hash = m->pending[k].hash;
						pe.tag = m->pending[k].tag;
						FZ_ASSERT(pmh_hash_in_segment(pe.hash, h->word) &&
								  pmh_log_entry_is_live(&pe),
								  "%s: D-bucket of %u holds (%016llx, %016llx)", what, s,
								  (unsigned long long) pe.hash,
								  (unsigned long long) pe.tag);
					}
					ranges[2 * nprim] = pmh_segword_prefix(h->word) << (PMH_MAX_DEPTH - depth);
					ranges[2 * nprim + 1] = (uint64) depth;
					nprim++;
					break;
				}
			default:
				fz_fail("%s: segment %u has role %d", what, s, (int) fp->role[s]);
		}
	}
	FZ_ASSERT(chained == novf, "%s: %llu overflow segments, %llu on chains", what,
			  (unsigned long long) novf, (unsigned long long) chained);
	FZ_ASSERT(nlog == fp->log.nexts, "%s: %u log segments for %u extensions", what,
			  nlog, fp->log.nexts);

	/* the primaries tile the hash space */
	qsort(ranges, nprim, 2 * sizeof(uint64), fz_cmp_range);
	for (i = 0; i < nprim; i++)
	{
		FZ_ASSERT(ranges[2 * i] == cover,
				  "%s: hash prefix %012llx is covered %s", what,
				  (unsigned long long) cover, ranges[2 * i] > cover ? "by no primary" : "twice");
		cover += UINT64CONST(1) << (PMH_MAX_DEPTH - ranges[2 * i + 1]);
	}
	FZ_ASSERT(cover == (UINT64CONST(1) << PMH_MAX_DEPTH),
			  "%s: the primaries cover up to %012llx only", what,
			  (unsigned long long) cover);
	free(ranges);

	/* the directory */
	if (fp->dir_valid)
	{
		uint64		ndir = UINT64CONST(1) << fp->gd;

		covered = pg_malloc0(Max(fp->nseg, 1) * sizeof(uint32));
		for (i = 0; i < ndir; i++)
		{
			uint32		s = fp->dir[i];
			uint64		w;
			int			d;

			FZ_ASSERT(s < fp->nseg && fp->role[s] == PMH_SEG_PRIMARY,
					  "%s: directory entry %llu -> %u, not a primary", what,
					  (unsigned long long) i, s);
			w = fp->meta[s].word;
			d = pmh_segword_depth(w);
			FZ_ASSERT(d <= fp->gd && (i >> (fp->gd - d)) == pmh_segword_prefix(w),
					  "%s: directory entry %llu -> segment %u of depth %d prefix %llx",
					  what, (unsigned long long) i, s, d,
					  (unsigned long long) pmh_segword_prefix(w));
			covered[s]++;
		}
		for (i = 0; i < fp->nseg; i++)
			if (fp->role[i] == PMH_SEG_PRIMARY)
				FZ_ASSERT(covered[i] == UINT64CONST(1) << (fp->gd - pmh_segword_depth(fp->meta[i].word)),
						  "%s: primary %llu has %u directory entries at global depth %d",
						  what, (unsigned long long) i, covered[i], fp->gd);
		free(covered);
	}
	return total;
}

/*
 * Check the backup log's bookkeeping, the core's line states, against the
 * pool and the D-buckets (between operations: no VACUUM runs):
 *	- the lines of the fixed log past those in use are unusable, and no
 *	  other line is; only the writer's line has an owner; each line's bit
 *	  in its chunk's free mask says whether it is free; the log's count of
 *	  pending slots and of lines in use agree with the lines;
 *	- the writer's line is not full, and past its used slots nothing is
 *	  reserved and the entries read as zero (as taking the line left them);
 *	- every D-bucket entry has a log slot of its own, pending, which holds
 *	  it;
 *	- every live log slot that is not pending holds an entry its segment
 *	  has: else a restart would bring back what VACUUM deleted.
 * Returns the pending slots that no D-bucket entry has (reserved, or found
 * by log recovery and not settled yet).
 */
uint32
fz_check_log(FzPool *fp, const char *what)
{
	PmhWriter  *w = fz_writer(fp);
	const PmhLogState *log = &fp->log;
	uint32		nlines = pmh_log_nlines(log);
	uint16	   *claimed = pg_malloc0(nlines * sizeof(uint16));
	uint32		bits = 0;
	uint32		inuse = 0;
	uint32		npend = 0;
	uint32		l;
	uint64		s;

	FZ_ASSERT(log->vacuum_active == 0 && log->cursor < nlines,
			  "%s: %d VACUUMs running, search cursor at line %u of %u", what,
			  log->vacuum_active, log->cursor, nlines);
	FZ_ASSERT(fp->own_line < 0 ||
			  ((uint32) fp->own_line < nlines && fp->own_used >= 0 &&
			   fp->own_used < PMH_BUCKET_SLOTS),
			  "%s: the writer owns line %d with %d slots used", what,
			  fp->own_line, fp->own_used);
	for (l = 0; l < nlines; l++)
	{
		const PmhLogLine *ls = pmh_wp_line(w, l);
		const PmhEntry *e = pmh_log_line(&fp->pool, l);
		bool		unusable = l >= log->fixed_lines && l < PMH_LOG_LINES;
		int32		owner = (int32) l == fp->own_line ? w->id : -1;
		int			k;

		FZ_ASSERT((ls->owner == PMH_LOG_UNUSABLE) == unusable &&
				  (unusable || ls->owner == owner),
				  "%s: log line %u has owner %d (%u fixed lines used, the writer's line %d)",
				  what, l, ls->owner, log->fixed_lines, fp->own_line);
		if (unusable)
		{
			FZ_ASSERT(ls->pending == 0, "%s: unusable log line %u has pending slots %04x",
					  what, l, ls->pending);
			continue;
		}
		FZ_ASSERT(pmh_wp_line_marked_free(w, l) == (ls->pending == 0 && ls->owner == -1),
				  "%s: log line %u (pending %04x, owner %d) is %smarked free", what,
				  l, ls->pending, ls->owner, pmh_wp_line_marked_free(w, l) ? "" : "not ");
		bits += (uint32) pg_popcount32(ls->pending);
		inuse += ls->pending != 0 || ls->owner != -1;
		for (k = 0; k < PMH_BUCKET_SLOTS; k++)
		{
			uint32		p;

			if (owner >= 0 && k >= fp->own_used)
				FZ_ASSERT(!(ls->pending & (1 << k)) && e[k].hash == 0 && e[k].tag == 0,
						  "%s: slot %d of the writer's log line %u (%d used) is %s", what,
						  k, l, fp->own_used,
						  ls->pending & (1 << k) ? "pending" : "not zero");
			if ((ls->pending & (1 << k)) || !pmh_log_entry_is_live(&e[k]))
				continue;
			p = fz_primary_of(fp, e[k].hash);
			FZ_ASSERT(pmh_contains(&fp->pool, &fp->cb, p, e[k].hash, e[k].tag),
					  "%s: released log slot %u holds (%016llx, %016llx), which segment %u lacks",
					  what, l * PMH_BUCKET_SLOTS + (uint32) k,
					  (unsigned long long) e[k].hash, (unsigned long long) e[k].tag, p);
		}
	}
	FZ_ASSERT(bits == log->pending && inuse == pmh_wp_lines_in_use(w),
			  "%s: the lines have %u slots pending and %u lines in use; the log counts %u and %u",
			  what, bits, inuse, log->pending, pmh_wp_lines_in_use(w));

	for (s = 0; s < fp->nseg; s++)
	{
		const PmhSegMeta *m = &fp->meta[s];
		uint32		k;

		if (fp->role[s] != PMH_SEG_PRIMARY)
			continue;
		for (k = 0; k < m->npending; k++)
		{
			const PmhPending *pe = &m->pending[k];
			uint32		line = pe->logslot / PMH_BUCKET_SLOTS;
			uint16		bit = (uint16) (1 << (pe->logslot % PMH_BUCKET_SLOTS));
			const PmhEntry *le;

			FZ_ASSERT(line < nlines && pmh_wp_line(w, line)->owner != PMH_LOG_UNUSABLE,
					  "%s: D-bucket entry of segment %llu has log slot %u, outside the log in use",
					  what, (unsigned long long) s, pe->logslot);
			FZ_ASSERT(pmh_wp_line(w, line)->pending & bit,
					  "%s: D-bucket entry of segment %llu has log slot %u, which is not pending",
					  what, (unsigned long long) s, pe->logslot);
			FZ_ASSERT(!(claimed[line] & bit),
					  "%s: log slot %u belongs to two D-bucket entries", what, pe->logslot);
			claimed[line] |= bit;
			le = pmh_log_entry(&fp->pool, pe->logslot);
			FZ_ASSERT(le->hash == pe->hash && le->tag == pe->tag,
					  "%s: log slot %u holds (%016llx, %016llx), its D-bucket entry (%016llx, %016llx)",
					  what, pe->logslot, (unsigned long long) le->hash,
					  (unsigned long long) le->tag, (unsigned long long) pe->hash,
					  (unsigned long long) pe->tag);
			npend++;
		}
	}
	free(claimed);
	return bits - npend;
}
