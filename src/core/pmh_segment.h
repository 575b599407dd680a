/*-------------------------------------------------------------------------
 *
 * pmh_segment.h
 *	  The inline half of the segment layer (pmh_segment.c): matching
 *	  fingerprints, the buckets and ways of a segment's fingerprint table,
 *	  and the prefetch hints of lookups, bulk inserts and relocations.
 *
 * Part of pmh_core.h, which includes it after the types and accessors these
 * helpers use: include pmh_core.h, not this file.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMH_SEGMENT_H
#define PMH_SEGMENT_H

#ifndef PMH_CORE_H
#error "include pmh_core.h, not pmh_segment.h"
#endif

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/*
 * Which of a bucket's 16 slots (bits of occ, the live ones) have the 16-bit
 * fingerprint fp: the only slots a probe reads from the pool.  With SSE2,
 * two compares of 8 fingerprints each, packed to one bit per slot.
 */
static inline uint32
pmh_fp_candidates(const uint16 *fps, uint32 occ, uint16 fp)
{
	uint32		match = 0;

	if (occ == 0)
		return 0;
#ifdef __SSE2__
	{
		__m128i		v = _mm_set1_epi16((short) fp);
		__m128i		lo = _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *) fps), v);
		__m128i		hi = _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *) (fps + 8)), v);

		/* 0xffff / 0 words saturate to 0xff / 0 bytes: one bit per slot */
		match = (uint32) _mm_movemask_epi8(_mm_packs_epi16(lo, hi));
	}
#else
	{
		int			i;

		for (i = 0; i < PMH_BUCKET_SLOTS; i++)
			if (fps[i] == fp)
				match |= (uint32) 1 << i;
	}
#endif
	return match & occ;
}

/* start loading an address that is going to be read */
static inline void
pmh_prefetch(const void *addr)
{
#if defined(__GNUC__) || defined(__clang__)
	__builtin_prefetch(addr);
#endif
}

/* start loading an address that is going to be written */
static inline void
pmh_prefetch_write(const void *addr)
{
#if defined(__GNUC__) || defined(__clang__)
	__builtin_prefetch(addr, 1);
#endif
}

/*
 * The fingerprint bucket of a hash: mixes hash bits 16..47, which the
 * fingerprint does not use and, below the top "depth" bits, vary among the
 * entries of one segment.
 */
static inline int
pmh_fpt_bucket(uint64 hash)
{
	uint32		x = (uint32) (hash >> 16) * 0x9E3779B1U;

	return (int) (((uint64) x * PMH_FPT_BUCKETS) >> 32);
}

/* is slot "slot" of a segment live, as its metadata's occupancy says? */
static inline bool
pmh_meta_is_live(const PmhSegMeta *meta, int slot)
{
	return (meta->occ[slot / PMH_BUCKET_SLOTS] >> (slot % PMH_BUCKET_SLOTS)) & 1;
}

/* is fingerprint bucket b marked passed (see PmhFpBucket)? */
static inline bool
pmh_fpt_is_passed(const PmhSegMeta *meta, int b)
{
	return (meta->fpt_passed[b >> 3] >> (b & 7)) & 1;
}

/*
 * The fingerprint bucket a lookup reads after bucket b: the next one (the
 * table wraps around) if b is marked passed, else -1, the lookup's end.
 * pmh_fpt_sequence and pmh_probe_segment walk the buckets with it.
 */
static inline int
pmh_fpt_next(const PmhSegMeta *meta, int b)
{
	if (likely(!pmh_fpt_is_passed(meta, b)))
		return -1;
	return b + 1 < PMH_FPT_BUCKETS ? b + 1 : 0;
}

/*
 * Ways of a fingerprint bucket holding fingerprint fp, as a bit mask (the
 * unused ways have slot 0; a match there is dropped by the caller, which
 * looks at the slot anyway).  With SSE2: two compares of 8 fingerprints.
 */
static inline uint32
pmh_fpt_match(const PmhFpBucket *bk, uint16 fp)
{
	return pmh_fp_candidates(bk->fp, 0xffff, fp);
}

/*
 * Ways of a fingerprint bucket hinted dead (PMH_FPT_DEAD), as a bit mask.
 * With SSE2: the slot numbers packed to bytes with signed saturation keep
 * their top bit, which a movemask gathers.
 */
static inline uint32
pmh_fpt_dead_ways(const PmhFpBucket *bk)
{
#ifdef __SSE2__
	__m128i		lo = _mm_loadu_si128((const __m128i *) bk->slot);
	__m128i		hi = _mm_loadu_si128((const __m128i *) (bk->slot + 8));

	StaticAssertStmt(PMH_FPT_DEAD == 0x8000, "the hint is the sign bit");
	return (uint32) _mm_movemask_epi8(_mm_packs_epi16(lo, hi));
#else
	uint32		dead = 0;
	int			w;

	for (w = 0; w < PMH_FPT_WAYS; w++)
		if (bk->slot[w] & PMH_FPT_DEAD)
			dead |= (uint32) 1 << w;
	return dead;
#endif
}

/*
 * The slot number (plus one; 0 = unused) of way w of a fingerprint bucket,
 * read once: lookups without the segment lock (pmh_lookup_prefetch, an
 * optimistic pmh_lookup) check the value they use, and the compiler must
 * not read it again.
 */
static inline uint16
pmh_fpt_way_slot(const PmhFpBucket *bk, int w)
{
	return __atomic_load_n(&bk->slot[w], __ATOMIC_RELAXED);
}

/*
 * Start loading the fingerprint bucket of hash in a segment's table, to be
 * written: a relocation does this for all of its entries first, so that
 * the 16 misses overlap instead of each stalling an insert.
 */
static inline void
pmh_fpt_prefetch(const PmhSegMeta *meta, uint64 hash)
{
	pmh_prefetch_write(&meta->fpt[pmh_fpt_bucket(hash)]);
}

/*
 * Start loading what a lookup of hash reads of a segment's metadata: its
 * first cache line and the hash's fingerprint bucket.  A lookup calls this
 * before it takes the segment's lock, so that these misses overlap the
 * lock's and each other.
 */
static inline void
pmh_meta_prefetch(const PmhSegMeta *meta, uint64 hash)
{
	pmh_prefetch(meta);
	pmh_prefetch(&meta->fpt[pmh_fpt_bucket(hash)]);
}

/*
 * Keys a batched lookup (a scan of "= ANY (array)") works on together:
 * enough for their cache misses to overlap, few enough for their lines to
 * stay in cache until used.
 */
#define PMH_LOOKUP_BATCH		16

/*
 * Start loading the entries that a lookup of hash in segment segno will
 * compare: those whose fingerprint matches in the hash's own fingerprint
 * bucket.  Batched lookups call this after pmh_meta_prefetch and before the
 * locked lookup (pmh_lookup), so that the entry misses of several lookups
 * overlap.  It reads the bucket without the segment's lock: what it reads
 * may be changing, but it only chooses lines to prefetch (a slot number
 * out of range is skipped), and the lookup reads everything again under
 * the lock.
 */
static inline void
pmh_lookup_prefetch(const PmhPool *pool, const PmhSegMeta *meta,
					uint32 segno, uint64 hash)
{
	const PmhFpBucket *bk = &meta->fpt[pmh_fpt_bucket(hash)];
	const PmhEntry *entries = pmh_seg_entries(pool, segno);
	uint32		c = pmh_fpt_match(bk, pmh_meta_fp(hash));

	while (c)
	{
		int			w = pg_rightmost_one_pos32(c);
		uint32		slot = (uint32) pmh_fpt_way_slot(bk, w) - 1;

		c &= c - 1;
		if (slot < PMH_SEG_SLOTS)
			pmh_prefetch(&entries[slot]);
	}
}

/*
 * Start loading what a bulk insert of hash into a segment reads and writes
 * of its metadata: the first line, the hash's fingerprint bucket and the
 * occupancy masks (two lines) that pmh_insert_new searches for a free slot.
 * CREATE INDEX calls this for a batch of entries, then
 * pmh_insert_prefetch_slot, then inserts them.
 */
static inline void
pmh_insert_prefetch_meta(const PmhSegMeta *meta, uint64 hash)
{
	StaticAssertStmt(sizeof(meta->occ) == 2 * PMH_CACHELINE_BYTES,
					 "the occupancy masks are two cache lines");
	pmh_prefetch_write(meta);
	pmh_fpt_prefetch(meta, hash);
	pmh_prefetch_write(&meta->occ[0]);
	pmh_prefetch_write(&meta->occ[PMH_SEG_BUCKETS / 2]);
}

#endif							/* PMH_SEGMENT_H */
