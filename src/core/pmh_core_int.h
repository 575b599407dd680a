/*-------------------------------------------------------------------------
 *
 * pmh_core_int.h
 *	  Internal to the core (src/core/pmh_*.c): what more than one of its
 *	  files uses and no caller should.  Everything outside src/core
 *	  includes pmh_core.h instead.
 *
 * The helpers on the insert and relocation paths are static inline here,
 * as they were static in one file before the core was split: the server
 * module is built with -fPIC, under which GCC does not inline a function
 * that other files can call, not even within its own file.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMH_CORE_INT_H
#define PMH_CORE_INT_H

#include "pmh_core.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* how many 48-bit hash prefixes there are: the primaries tile them */
#define PMH_HASH_SPACE			(UINT64CONST(1) << PMH_MAX_DEPTH)

static inline void
pmh_store_barrier(void)
{
	/* order stores to the mapping as the program wrote them */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

/* note in a segment's metadata that slot "slot" now holds an entry of hash */
static inline void
pmh_meta_set_live(PmhSegMeta *meta, uint64 hash, int slot)
{
	meta->occ[slot / PMH_BUCKET_SLOTS] |= (uint16) (1 << (slot % PMH_BUCKET_SLOTS));
	pmh_fpt_add(meta, hash, slot);
	meta->nlive++;
}

/*
 * The first line of a segment whose occupancy mask equals "mask" (equal)
 * or differs from it (!equal), or -1.  With SSE2: 8 lines per compare.
 */
static inline int
pmh_find_line(const PmhSegMeta *m, uint16 mask, bool equal)
{
	int			b;

#ifdef __SSE2__
	__m128i		want = _mm_set1_epi16((short) mask);

	StaticAssertStmt(PMH_SEG_BUCKETS % 8 == 0, "lines come in groups of 8");
	for (b = 0; b < PMH_SEG_BUCKETS; b += 8)
	{
		__m128i		occ = _mm_loadu_si128((const __m128i *) &m->occ[b]);
		uint32		same = (uint32) _mm_movemask_epi8(_mm_cmpeq_epi16(occ, want));
		uint32		hit = equal ? same : ~same & 0xffff;

		if (hit != 0)
			return b + pg_rightmost_one_pos32(hit) / 2;
	}
#else
	for (b = 0; b < PMH_SEG_BUCKETS; b++)
		if ((m->occ[b] == mask) == equal)
			return b;
#endif
	return -1;
}

/* first free slot of a segment (lowest bucket first), or -1 */
static inline int
pmh_segment_free_slot(const PmhSegMeta *meta)
{
	int			b;

	if (meta->nlive >= PMH_SEG_SLOTS)
		return -1;
	/* the first line that is not full (a building segment fills in order) */
	b = pmh_find_line(meta, 0xffff, false);
	if (b < 0)
		return -1;
	return b * PMH_BUCKET_SLOTS +
		pg_rightmost_one_pos32((~(uint32) meta->occ[b]) & 0xffff);
}

/* pmh_split.c */
extern PmhInsertResult pmh_no_room(const PmhPool *pool,
								   const PmhCallbacks *cb, uint32 segno);

#endif							/* PMH_CORE_INT_H */
