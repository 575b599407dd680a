/*-------------------------------------------------------------------------
 *
 * fuzz_common.c
 *	  The harness shared by the fuzz targets: see fuzz_common.h.
 *
 * The pool is driven the way the server drives it (pmhashshmem.c,
 * pmhashlog.c): recovery then pmh_meta_load of every segment in use, the
 * directory from the segment words, the backup log back into D-buckets,
 * relocation of a full D-bucket before a new entry, and a split or a new
 * overflow segment whenever the core answers so, after growing the pool
 * by what pmh_segments_needed_for_split announced.
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

/* release everything, the image too */
void
fz_pool_free(FzPool *fp)
{
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
}

/*
 * What the server does when it loads an index: pmh_recover, then the
 * metadata of every segment in use (an overflow segment's entries are
 * judged by its owner's word), the free list, the log extensions and the
 * directory.  D-buckets start empty.  Returns pmh_recover's result.
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
	fp->nlogexts = 0;
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
	fp->nlogexts = res->log_exts;
	for (i = 0; i < fp->nlogexts; i++)
		FZ_ASSERT(fp->log_exts[i] != PMH_NO_SEGMENT,
				  "recovery counted %u log extensions but %llu has no segment",
				  res->log_exts, (unsigned long long) i);
	fz_dir_build(fp, res->global_depth);
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

/* act on a SPLIT or OVERFLOW answer; false for any other answer */
bool
fz_handle_no_room(FzPool *fp, uint32 segno, PmhInsertResult r)
{
	if (r == PMH_INSERT_SPLIT)
	{
		FZ_ASSERT(pmh_segword_depth(fp->meta[segno].word) < PMH_MAX_DEPTH,
				  "the core asks to split segment %u at the maximum depth", segno);
		(void) fz_split(fp, segno);
		return true;
	}
	if (r == PMH_INSERT_OVERFLOW)
	{
		(void) fz_add_overflow(fp, segno);
		return true;
	}
	return false;
}

/* lines of the backup log: the fixed ones and those of the extensions */
uint32
fz_log_nlines(const FzPool *fp)
{
	return PMH_LOG_LINES + fp->nlogexts * PMH_LOG_EXT_LINES;
}

/* add the next log extension; returns its segment */
uint32
fz_add_log_segment(FzPool *fp)
{
	uint32		s;
	uint32		ext = fp->nlogexts;

	FZ_ASSERT(ext < PMH_LOG_MAX_EXTS, "too many log extensions");
	fz_pool_ensure_free(fp, 1);
	s = fz_cb_alloc_segment(fp);
	FZ_ASSERT(pmh_add_log_segment(&fp->pool, s, ext) == 0,
			  "pmh_add_log_segment(%u, %u): %m", s, ext);
	pmh_meta_reset(&fp->meta[s], pmh_segword_make_log(ext));
	fp->role[s] = PMH_SEG_LOG;
	fp->log_exts[ext] = s;
	fp->nlogexts++;
	return s;
}

/*
 * Relocate the D-bucket of primary segno until it is empty, splitting or
 * adding overflow segments as the core asks; released log slots go to
 * "release".  The first try is the server's under a segment lock (no
 * "decide"): no room then means try again with the choice.
 */
void
fz_relocate(FzPool *fp, uint32 segno, bool check_segment,
			FzReleaseFn release, void *arg)
{
	int			round;

	for (round = 0; round < 200; round++)
	{
		uint32		released[PMH_DBUCKET_SLOTS];
		int			nrel = -1;
		int			ndup = -1;
		uint32		before = fp->meta[segno].npending;
		PmhInsertResult r;

		r = pmh_relocate(&fp->pool, &fp->cb, segno, check_segment,
						 round > 0, released, &nrel, &ndup);
		FZ_ASSERT(nrel >= 0 && nrel <= (int) before && ndup >= 0 && ndup <= nrel &&
				  fp->meta[segno].npending == before - (uint32) nrel,
				  "pmh_relocate(%u): %u pending, %d released, %d duplicates, %u left",
				  segno, before, nrel, ndup, fp->meta[segno].npending);
		if (nrel > 0 && release)
			release(arg, released, nrel);
		if (r == PMH_INSERT_DONE)
		{
			FZ_ASSERT(fp->meta[segno].npending == 0,
					  "pmh_relocate(%u) is done with %u entries pending",
					  segno, fp->meta[segno].npending);
			return;
		}
		if (r == PMH_INSERT_FULL && round == 0)
			continue;
		if (!fz_handle_no_room(fp, segno, r))
			fz_fail("pmh_relocate(%u): result %d: %m", segno, (int) r);
	}
	fz_fail("relocation of segment %u did not finish after 200 rounds", segno);
}

/* relocate every D-bucket */
void
fz_relocate_all(FzPool *fp, bool check_segment, FzReleaseFn release, void *arg)
{
	uint64		s;

	/* a split hands new segments their share: they sit anywhere */
	for (s = 0; s < fp->nseg; s++)
		if (fp->role[s] == PMH_SEG_PRIMARY && fp->meta[s].npending > 0)
		{
			fz_relocate(fp, (uint32) s, check_segment, release, arg);
			s = (uint64) -1;	/* start over */
		}
}

/*
 * Put an entry whose log copy is persistent into the D-bucket of its
 * primary, relocating a full D-bucket first (pmhash_place_pending).
 */
void
fz_place_pending(FzPool *fp, uint64 hash, uint64 tag, uint32 logslot,
				 bool check_segment, FzReleaseFn release, void *arg)
{
	int			round;

	for (round = 0; round < 100; round++)
	{
		uint32		p = fz_primary_of(fp, hash);

		if (fp->meta[p].npending < PMH_DBUCKET_SLOTS)
		{
			pmh_pending_add(&fp->meta[p], hash, tag, logslot);
			return;
		}
		fz_relocate(fp, p, check_segment, release, arg);
	}
	fz_fail("no room in a D-bucket for %016llx after 100 rounds",
			(unsigned long long) hash);
}

/*
 * The server's log recovery (pmhash_log_recover): every live backup-log
 * slot whose entry its segment does not hold goes back into a D-bucket.
 * At most "max" entries are restored (a bound on the fuzzer's work);
 * "note" hears of each restored slot before it is placed.  Returns the
 * number restored.
 */
uint32
fz_log_recover(FzPool *fp, bool check_segment, uint32 max, FzReleaseFn note,
			   FzReleaseFn release, void *arg)
{
	uint32		nlines = fz_log_nlines(fp);
	uint32		restored = 0;
	uint32		l;

	for (l = 0; l < nlines && restored < max; l++)
	{
		int			s;

		for (s = 0; s < PMH_BUCKET_SLOTS && restored < max; s++)
		{
			/* placing may grow (and move) the image: copy the entry */
			PmhEntry	e = pmh_log_line(&fp->pool, l)[s];
			uint32		slot = l * PMH_BUCKET_SLOTS + (uint32) s;
			uint32		p;

			if (!pmh_log_entry_is_live(&e))
				continue;
			p = fz_primary_of(fp, e.hash);
			if (pmh_contains(&fp->pool, &fp->cb, p, e.hash, e.tag))
				continue;
			if (note)
				note(arg, &slot, 1);
			fz_place_pending(fp, e.hash, e.tag, slot, check_segment, release, arg);
			restored++;
		}
	}
	return restored;
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
							  ext < fp->nlogexts && fp->log_exts[ext] == s,
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
	FZ_ASSERT(nlog == fp->nlogexts, "%s: %u log segments for %u extensions", what,
			  nlog, fp->nlogexts);

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
