/*-------------------------------------------------------------------------
 *
 * pmh_recover.c
 *	  The directory (pointing its entries at a segment, doubling it) and
 *	  recovery: a consistent segment table rebuilt from the segment words
 *	  after a crash, and free segments made fit for use.
 *
 * The caller holds whatever locks the operation needs (see the locking
 * protocol in src/README.pmhash) and keeps the volatile metadata.  Every
 * write that must reach the device goes through pmh_persist() (pmh_pool.c).
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_core_int.h"

#include <errno.h>
#include <string.h>

/* ---------------------------------------------------------------------
 * The directory
 * ---------------------------------------------------------------------
 */

/* point the directory entries covered by a primary segment's word at it */
void
pmh_dir_assign(uint32 *dir, int gd, uint64 word, uint32 segno)
{
	int			depth = pmh_segword_depth(word);
	uint64		first;
	uint64		count;
	uint64		i;

	Assert(depth <= gd);
	first = pmh_segword_prefix(word) << (gd - depth);
	count = UINT64CONST(1) << (gd - depth);
	/* one store each: a caller may publish while others read (see README) */
	for (i = 0; i < count; i++)
		__atomic_store_n(&dir[first + i], segno, __ATOMIC_RELAXED);
}

/* double a directory of global depth gd into newdir (2^(gd+1) entries) */
void
pmh_dir_double(const uint32 *olddir, int gd, uint32 *newdir)
{
	uint64		n = UINT64CONST(1) << gd;
	uint64		i;

	for (i = 0; i < n; i++)
	{
		newdir[2 * i] = olddir[i];
		newdir[2 * i + 1] = olddir[i];
	}
}

/* ---------------------------------------------------------------------
 * Recovery
 * ---------------------------------------------------------------------
 */

/* clear the word of a segment that a crash left half-published */
static int
pmh_clear_orphan(PmhPool *pool, uint32 segno, PmhRecoveryResult *res)
{
	PmhSegHeader *h = pmh_seg_header(pool, segno);

	h->word = 0;
	h->ovf_next = 0;
	res->orphans_cleared++;
	return pmh_persist(pool, h, 2 * sizeof(uint64));
}

/* does a whole segment (header line and buckets) read as zero? */
bool
pmh_segment_is_zero(const PmhPool *pool, uint32 segno)
{
	const uint64 *w = (const uint64 *) pmh_seg_header(pool, segno);
	size_t		i;

	for (i = 0; i < PMH_SEG_BYTES / sizeof(uint64); i++)
		if (w[i] != 0)
			return false;
	return true;
}

/*
 * Sort n (start, depth << 32 | segno) pairs by start, then shallower first:
 * an LSD radix sort on (start << 6 | depth), below 2^54, in four passes of
 * 14 bits, through tmp (2 n words).  Returns the sorted array (a or tmp).
 * Recovery sorts every primary segment: a comparison sort of 65536 of them
 * took a fifth of the time to attach a 50-million-entry index.
 */
#define PMH_RADIX_BITS		14
#define PMH_RADIX_PASSES	4

static uint64 *
pmh_sort_primaries(uint64 *a, uint64 *tmp, uint64 n)
{
	uint32		count[1 << PMH_RADIX_BITS];
	int			pass;

	for (pass = 0; pass < PMH_RADIX_PASSES; pass++)
	{
		int			shift = pass * PMH_RADIX_BITS;
		uint32		sum = 0;
		uint64		i;
		uint64	   *t;

		memset(count, 0, sizeof(count));
		for (i = 0; i < n; i++)
		{
			uint64		key = (a[2 * i] << 6) | (a[2 * i + 1] >> 32);

			count[(key >> shift) & ((1 << PMH_RADIX_BITS) - 1)]++;
		}
		if (count[0] == n)
			continue;			/* this digit is 0 everywhere */
		for (i = 0; i < (1 << PMH_RADIX_BITS); i++)
		{
			uint32		c = count[i];

			count[i] = sum;
			sum += c;
		}
		for (i = 0; i < n; i++)
		{
			uint64		key = (a[2 * i] << 6) | (a[2 * i + 1] >> 32);
			uint32		to = count[(key >> shift) & ((1 << PMH_RADIX_BITS) - 1)]++;

			tmp[2 * to] = a[2 * i];
			tmp[2 * to + 1] = a[2 * i + 1];
		}
		t = a;
		a = tmp;
		tmp = t;
	}
	return a;
}

/*
 * Make a free segment fit for use: a free segment must read as zero on the
 * media, because splits, new overflow segments and log segments write and
 * flush only the lines they fill.  A half-built segment that a crash cut
 * off (or an orphan recovery cleared) still holds entries: zero and persist
 * it.  Returns 1 if it was zeroed, 0 if it was zero, -1 (errno set) if the
 * persist failed.
 *
 * After a failed persist the mapping reads zero while the media may not:
 * a retry must not take the segment for clean.  So the failure leaves a
 * mark in the header line's padding, and the next call zeroes and
 * persists the whole segment again.  The mark may itself reach the media
 * (a neighbour's flush, an evicted cache line): that is harmless, since
 * nothing reads the padding of a free segment, recovery goes by the word,
 * and the segment is prepared again before it is handed out.
 */
int
pmh_prepare_free_segment(PmhPool *pool, uint32 segno)
{
	PmhSegHeader *h = pmh_seg_header(pool, segno);

	if (pmh_segment_is_zero(pool, segno))
		return 0;
	memset(h, 0, PMH_SEG_BYTES);
	if (pmh_persist(pool, h, PMH_SEG_BYTES) != 0)
	{
		int			save_errno = errno;

		h->pad[0] = 1;
		errno = save_errno;
		return -1;
	}
	return 1;
}

/*
 * The last step of pmh_recover_words, once the primaries are known: follow
 * their overflow chains, noting the owner of each overflow segment, and
 * clear the overflow segments no chain reaches.  Returns 0 or -1, as
 * pmh_recover_words does.
 */
static int
pmh_recover_chains(PmhPool *pool, PmhSegRole *roles, uint32 *owner,
				   uint64 nseg, PmhRecoveryResult *res)
{
	uint64		i;

	for (i = 0; i < nseg; i++)
	{
		uint64		link;
		uint64		steps = 0;

		if (roles[i] != PMH_SEG_PRIMARY)
			continue;
		for (link = pmh_seg_header(pool, (uint32) i)->ovf_next; link != 0;
			 link = pmh_seg_header(pool, (uint32) (link - 1))->ovf_next)
		{
			uint64		o = link - 1;

			if (o >= nseg || roles[o] != PMH_SEG_OVERFLOW ||
				owner[o] != PMH_NO_SEGMENT || ++steps > nseg)
			{
				snprintf(res->error, sizeof(res->error),
						 "overflow chain of segment %llu is broken at segment %llu",
						 (unsigned long long) i, (unsigned long long) o);
				return -1;
			}
			owner[o] = (uint32) i;
			res->overflows++;
		}
	}
	for (i = 0; i < nseg; i++)
	{
		if (roles[i] == PMH_SEG_OVERFLOW && owner[i] == PMH_NO_SEGMENT)
		{
			roles[i] = PMH_SEG_FREE;
			if (pmh_clear_orphan(pool, (uint32) i, res) != 0)
				return -1;
		}
	}

	return 0;
}

/*
 * Work out, from the segment words alone, which segments are in use: the
 * primaries must tile the hash space; a primary nested inside a shallower
 * one is the unpublished half of a split and is cleared, as is an overflow
 * segment no chain reaches; log segments must number their extensions
 * 0 .. n-1 once each.  Reads one word (and chain link) per segment, nothing
 * else: free segments are left as they are (pmh_prepare_free_segment makes
 * one fit for use when it is taken).  On return roles[] and owner[] (one
 * per segment of the mapping) tell each segment's role and, for overflow
 * segments, the owning primary.  "scratch" must hold
 * PMH_RECOVER_SCRATCH(nsegments) uint64 values.
 *
 * Returns 0, or -1 with res->error set when the pool is corrupt, or -1 with
 * errno set (and res->error empty) when persisting a repair failed.
 */
int
pmh_recover_words(PmhPool *pool, PmhSegRole *roles, uint32 *owner,
				  uint64 *scratch, PmhRecoveryResult *res)
{
	uint64		nseg = pmh_pool_nsegments(pool);
	uint64		nprim = 0;
	uint64		cover_end = 0;
	int			accepted_depth = 0;
	uint8		ext_seen[PMH_LOG_MAX_EXTS / 8];
	uint64	   *sorted;
	uint64		i;

	memset(res, 0, sizeof(*res));
	memset(ext_seen, 0, sizeof(ext_seen));

	for (i = 0; i < nseg; i++)
	{
		uint64		w = pmh_seg_header(pool, (uint32) i)->word;

		roles[i] = PMH_SEG_FREE;
		owner[i] = PMH_NO_SEGMENT;
		if (w == 0)
			continue;
		if (!pmh_segword_is_valid(w))
		{
			snprintf(res->error, sizeof(res->error),
					 "segment %llu has a corrupt header word %016llx",
					 (unsigned long long) i, (unsigned long long) w);
			return -1;
		}
		if (pmh_segword_is_log(w))
		{
			uint32		ext = pmh_segword_log_ext(w);

			if (ext_seen[ext / 8] & (1 << (ext % 8)))
			{
				snprintf(res->error, sizeof(res->error),
						 "segment %llu is a second log segment for extension %u",
						 (unsigned long long) i, ext);
				return -1;
			}
			ext_seen[ext / 8] |= (uint8) (1 << (ext % 8));
			if (ext + 1 > res->log_exts)
				res->log_exts = ext + 1;
			roles[i] = PMH_SEG_LOG;
			continue;
		}
		if (pmh_segword_is_overflow(w))
		{
			roles[i] = PMH_SEG_OVERFLOW;
			continue;
		}
		/* start of its range in a 48-bit hash space, then depth, segno */
		scratch[2 * nprim] = pmh_segword_prefix(w) <<
			(PMH_MAX_DEPTH - pmh_segword_depth(w));
		scratch[2 * nprim + 1] = ((uint64) pmh_segword_depth(w) << 32) | i;
		nprim++;
	}

	sorted = pmh_sort_primaries(scratch, scratch + 2 * nseg, nprim);

	for (i = 0; i < nprim; i++)
	{
		uint64		lo = sorted[2 * i];
		int			depth = (int) (sorted[2 * i + 1] >> 32);
		uint32		segno = (uint32) (sorted[2 * i + 1] & 0xffffffff);

		if (lo < cover_end)
		{
			if (depth <= accepted_depth)
			{
				snprintf(res->error, sizeof(res->error),
						 "segment %u overlaps another segment of the same depth",
						 segno);
				return -1;
			}
			if (pmh_clear_orphan(pool, segno, res) != 0)
				return -1;
			continue;
		}
		if (lo != cover_end)
		{
			snprintf(res->error, sizeof(res->error),
					 "no segment covers hash prefix %012llx (48 bits)",
					 (unsigned long long) cover_end);
			return -1;
		}
		roles[segno] = PMH_SEG_PRIMARY;
		cover_end = lo + (UINT64CONST(1) << (PMH_MAX_DEPTH - depth));
		accepted_depth = depth;
		if (depth > res->global_depth)
			res->global_depth = depth;
		res->primaries++;
	}
	if (cover_end != PMH_HASH_SPACE)
	{
		snprintf(res->error, sizeof(res->error),
				 "no segment covers hash prefix %012llx (48 bits)",
				 (unsigned long long) cover_end);
		return -1;
	}

	/* log extensions are added one after the other: no gaps */
	for (i = 0; i < res->log_exts; i++)
	{
		if ((ext_seen[i / 8] & (1 << (i % 8))) == 0)
		{
			snprintf(res->error, sizeof(res->error),
					 "log extension %llu is missing (%u extensions)",
					 (unsigned long long) i, res->log_exts);
			return -1;
		}
	}

	return pmh_recover_chains(pool, roles, owner, nseg, res);
}

/*
 * pmh_recover_words, then make every free segment fit for use at once (the
 * server defers that to pmh_prepare_free_segment when it takes one).
 */
int
pmh_recover(PmhPool *pool, PmhSegRole *roles, uint32 *owner,
			uint64 *scratch, PmhRecoveryResult *res)
{
	uint64		nseg = pmh_pool_nsegments(pool);
	uint64		i;

	if (pmh_recover_words(pool, roles, owner, scratch, res) != 0)
		return -1;
	for (i = 0; i < nseg; i++)
	{
		int			rc;

		if (roles[i] != PMH_SEG_FREE)
			continue;
		rc = pmh_prepare_free_segment(pool, (uint32) i);
		if (rc < 0)
			return -1;
		res->free_zeroed += rc;
	}
	return 0;
}
