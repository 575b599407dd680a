/*-------------------------------------------------------------------------
 *
 * pmh_split.c
 *	  Splitting a full primary segment, failure-atomically (pmh_split,
 *	  pmh_split_reserved), and deciding whether a split can make room at
 *	  all or an overflow segment must (pmh_no_room).
 *
 * The caller holds whatever locks the operation needs (see the locking
 * protocol in src/README.pmhash) and keeps the volatile metadata.  Every
 * write that must reach the device goes through pmh_persist() (pmh_pool.c).
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_core_int.h"

#include <errno.h>

/*
 * The slots of a bucket, among those set in occ, whose hash has bit bitpos
 * set: the entries a split moves to the new segment.  Half of a full
 * segment's entries move, at random, so a branch per slot would be
 * mispredicted half the time; this reads all 16 hashes (one pool line)
 * without branching.  *count, if given, is set to the number of slots.
 */
static inline uint32
pmh_split_bucket_mask(const PmhEntry *bucket, uint32 occ, int bitpos,
					  int *count)
{
	uint32		mask = 0;
	int			n = 0;
	int			s;

	for (s = 0; s < PMH_BUCKET_SLOTS; s++)
	{
		uint32		bit = (uint32) ((bucket[s].hash >> bitpos) & 1) &
			(occ >> s);

		mask |= bit << s;
		n += (int) bit;
	}
	if (count)
		*count = n;
	return mask;
}

/* count the live entries of a segment, and those whose bit "bitpos" is set */
static void
pmh_count_split(const PmhPool *pool, const PmhSegMeta *m, uint32 segno,
				int bitpos, uint64 *total, uint64 *ones)
{
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	int			b;

	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		int			nset;

		(void) pmh_split_bucket_mask(&e[b * PMH_BUCKET_SLOTS], m->occ[b],
									 bitpos, &nset);
		*total += pg_popcount32(m->occ[b]);
		*ones += nset;
	}
}

/*
 * Would splitting primary segment segno leave each half with a useful share
 * of its entries?  Not when most entries share the next hash bit (many
 * duplicates of one key): splitting again and again would not make room.
 */
static bool
pmh_split_is_useful(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	int			bitpos = 63 - pmh_segword_depth(meta->word);
	uint64		total = 0;
	uint64		ones = 0;
	uint32		seg;

	pmh_count_split(pool, meta, segno, bitpos, &total, &ones);
	for (seg = meta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
		pmh_count_split(pool, cb->get_meta(cb->arg, seg), seg, bitpos,
						&total, &ones);
	return ones >= total / PMH_SPLIT_MIN_SHARE &&
		total - ones >= total / PMH_SPLIT_MIN_SHARE;
}

/*
 * What to do when primary segment segno and its chain are full: split,
 * unless that cannot make room (maximum depth, or most entries on one side).
 */
PmhInsertResult
pmh_no_room(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);

	if (pmh_segword_depth(meta->word) < PMH_MAX_DEPTH &&
		pmh_split_is_useful(pool, cb, segno))
		return PMH_INSERT_SPLIT;
	return PMH_INSERT_OVERFLOW;
}

/* length of the overflow chain of a primary segment */
static int
pmh_chain_length(const PmhCallbacks *cb, uint32 segno)
{
	int			n = 0;
	uint32		ovf = cb->get_meta(cb->arg, segno)->ovf_next;

	while (ovf != PMH_NO_SEGMENT)
	{
		n++;
		ovf = cb->get_meta(cb->arg, ovf)->ovf_next;
	}
	return n;
}

/*
 * Upper bound of the free segments pmh_split may take: the new primary, and
 * an overflow chain no longer than the old one plus one.
 */
int
pmh_segments_needed_for_split(const PmhCallbacks *cb, uint32 segno)
{
	return 2 + pmh_chain_length(cb, segno);
}

/*
 * The next free slot of a segment being built, or -1 when it is full: it
 * fills in slot order and nothing else writes it, so its live slots are
 * exactly the first nlive.
 */
static inline int
pmh_building_free_slot(const PmhSegMeta *meta)
{
	int			slot = (int) meta->nlive;

	if (slot >= PMH_SEG_SLOTS)
		return -1;
	Assert(pmh_segment_free_slot(meta) == slot);
	return slot;
}

/*
 * Place an entry into a segment being built (no persist: done in bulk),
 * filling it from its first bucket on, then its overflow chain.
 */
static int
pmh_place_unpersisted(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
					  const PmhEntry *src)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	PmhSegHeader *hdr;
	PmhEntry   *dst;
	int			slot;
	uint32		target = segno;
	PmhSegMeta *tmeta = meta;

	slot = pmh_building_free_slot(meta);
	if (slot < 0)
	{
		/* the head of the chain is the only one that can have room */
		target = meta->ovf_next;
		tmeta = target == PMH_NO_SEGMENT ? NULL : cb->get_meta(cb->arg, target);
		if (tmeta == NULL || tmeta->nlive >= PMH_SEG_SLOTS)
		{
			uint32		newseg = cb->alloc_segment(cb->arg);

			if (newseg == PMH_NO_SEGMENT)
			{
				errno = ENOSPC;
				return -1;
			}
			hdr = pmh_seg_header(pool, newseg);
			hdr->word = pmh_segword_make_overflow();
			hdr->ovf_next = meta->ovf_next == PMH_NO_SEGMENT ? 0 :
				(uint64) meta->ovf_next + 1;
			tmeta = cb->get_meta(cb->arg, newseg);
			pmh_meta_reset(tmeta, hdr->word);
			tmeta->ovf_next = meta->ovf_next;
			meta->ovf_next = newseg;
			pmh_seg_header(pool, segno)->ovf_next = (uint64) newseg + 1;
			target = newseg;
		}
		slot = pmh_building_free_slot(tmeta);
		Assert(slot >= 0);
	}

	dst = &pmh_seg_entries(pool, target)[slot];
	*dst = *src;
	pmh_meta_set_live(tmeta, src->hash, slot);
	return 0;
}

/* move the entries of one source segment whose split bit is set */
static int
pmh_split_move(PmhPool *pool, const PmhCallbacks *cb, uint32 from,
			   uint64 old_word, int bitpos, uint32 newseg)
{
	PmhSegMeta *fm = cb->get_meta(cb->arg, from);
	const PmhEntry *e = pmh_seg_entries(pool, from);
	int			b;

	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		uint32		moving = pmh_split_bucket_mask(&e[b * PMH_BUCKET_SLOTS],
												   fm->occ[b], bitpos, NULL);

		while (moving)
		{
			int			slot = b * PMH_BUCKET_SLOTS + pg_rightmost_one_pos32(moving);

			moving &= moving - 1;
			if (!pmh_entry_is_live(&e[slot], old_word))
				continue;
			if (pmh_place_unpersisted(pool, cb, newseg, &e[slot]) != 0)
				return -1;
		}
	}
	return 0;
}

/* forget, in the volatile metadata, the entries that moved to the sibling */
static void
pmh_split_forget(const PmhPool *pool, PmhSegMeta *fm, uint32 from, int bitpos)
{
	const PmhEntry *e = pmh_seg_entries(pool, from);
	int			b;

	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		int			nmoved;
		uint32		moved = pmh_split_bucket_mask(&e[b * PMH_BUCKET_SLOTS],
												  fm->occ[b], bitpos, &nmoved);

		fm->occ[b] &= (uint16) ~moved;
		fm->nlive -= nmoved;
	}

	/*
	 * About half the entries are gone: building the fingerprint table anew
	 * from the slots that stay costs no more than removing the others one
	 * by one, and drops the passed marks that no entry needs now.
	 */
	pmh_fpt_rebuild(pool, fm, from);
}

/*
 * Persist a segment just built from its first slot on (by a split or as an
 * overflow segment): its header line and the lines that hold its entries.
 * The rest of the segment is zero on the media already: a free segment
 * always is (new file space reads as zero, and pmh_recover zeroes any free
 * segment that is not), so its zeros need no flush.
 */
static int
pmh_persist_built_segment(PmhPool *pool, const PmhSegMeta *meta, uint32 segno)
{
	size_t		lines = (meta->nlive + PMH_BUCKET_SLOTS - 1) / PMH_BUCKET_SLOTS;

	return pmh_persist(pool, pmh_seg_header(pool, segno),
					   (1 + lines) * PMH_LINE_BYTES);
}

/*
 * Split primary segment segno (depth d, prefix p) into itself (depth d+1,
 * prefix p0) and a new segment (depth d+1, prefix p1), failure-atomically:
 *
 *	1. build the new segment and its overflow chain from the entries whose
 *	   bit 63-d is set, and persist them (the new segment's word says
 *	   (d+1, p1), but recovery discards it while segno still says (d, p));
 *	2. publish by overwriting segno's word with (d+1, p0): one 8-byte store,
 *	   persisted.  The moved entries stay behind in segno and its chain; the
 *	   prefix test makes them dead.
 *
 * The caller holds the segment exclusively, has made sure that
 * pmh_segments_needed_for_split() free segments exist, and updates the
 * directory afterwards.  Returns 0, or -1 with errno set; the segments a
 * failed split took are written, and must be zeroed
 * (pmh_prepare_free_segment) before they are handed out again.
 */
int
pmh_split(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
		  uint32 *newsegno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	uint64		old_word = meta->word;
	int			depth = pmh_segword_depth(old_word);
	uint64		prefix = pmh_segword_prefix(old_word);
	int			bitpos = 63 - depth;
	uint64		w0;
	uint64		w1;
	uint32		newseg;
	PmhSegHeader *nh;
	PmhSegMeta *nmeta;
	uint32		seg;

	if (depth >= PMH_MAX_DEPTH)
	{
		errno = ENOSPC;
		return -1;
	}
	w0 = pmh_segword_make(depth + 1, prefix << 1);
	w1 = pmh_segword_make(depth + 1, (prefix << 1) | 1);

	newseg = cb->alloc_segment(cb->arg);
	if (newseg == PMH_NO_SEGMENT)
	{
		errno = ENOSPC;
		return -1;
	}
	/* a free segment reads as zero (pmh_prepare_free_segment) */
	nh = pmh_seg_header(pool, newseg);
	nh->ovf_next = 0;
	nh->word = w1;
	nmeta = cb->get_meta(cb->arg, newseg);
	pmh_meta_reset(nmeta, w1);

	/* 1. copy out */
	if (pmh_split_move(pool, cb, segno, old_word, bitpos, newseg) != 0)
		return -1;
	for (seg = meta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
	{
		if (pmh_split_move(pool, cb, seg, old_word, bitpos, newseg) != 0)
			return -1;
	}
	for (seg = nmeta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
	{
		if (pmh_persist_built_segment(pool, cb->get_meta(cb->arg, seg),
									  seg) != 0)
			return -1;
	}
	if (pmh_persist_built_segment(pool, nmeta, newseg) != 0)
		return -1;

	/* 2. publish */
	pmh_seg_header(pool, segno)->word = w0;
	if (pmh_persist(pool, &pmh_seg_header(pool, segno)->word,
					sizeof(uint64)) != 0)
		return -1;

	/* volatile metadata of the old half; pending entries follow their hash */
	{
		uint32		i = 0;

		while (i < meta->npending)
		{
			if ((meta->pending[i].hash >> bitpos) & 1)
			{
				pmh_pending_add(nmeta, meta->pending[i].hash,
								meta->pending[i].tag, meta->pending[i].logslot);
				pmh_pending_remove(meta, (int) i);
			}
			else
				i++;
		}
	}
	pmh_split_forget(pool, meta, segno, bitpos);
	for (seg = meta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
		pmh_split_forget(pool, cb->get_meta(cb->arg, seg), seg, bitpos);
	meta->word = w0;

	*newsegno = newseg;
	return 0;
}

/* pmh_split_reserved's callbacks: the caller's metadata, the given segments */
typedef struct PmhReserve
{
	const PmhCallbacks *cb;
	const uint32 *seg;
	int			n;				/* seg[0..n-1] are left, the next at n-1 */
} PmhReserve;

static PmhSegMeta *
pmh_reserve_get_meta(void *arg, uint32 segno)
{
	const PmhCallbacks *cb = ((PmhReserve *) arg)->cb;

	return cb->get_meta(cb->arg, segno);
}

static uint32
pmh_reserve_alloc(void *arg)
{
	PmhReserve *res = (PmhReserve *) arg;

	return res->n == 0 ? PMH_NO_SEGMENT : res->seg[--res->n];
}

/*
 * pmh_split, taking its free segments from seg[0..*nseg-1] (the last
 * first) instead of cb->alloc_segment: for a caller that set them aside
 * beforehand, as a split holding only its segment's lock takes them off a
 * shared free list first.  On return *nseg is the number left, untouched;
 * seg[*nseg] and on were taken.  Fails with ENOSPC, as pmh_split does, when
 * they are not enough.
 */
int
pmh_split_reserved(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
				   const uint32 *seg, int *nseg, uint32 *newsegno)
{
	PmhReserve	res;
	PmhCallbacks rcb;
	int			rc;

	res.cb = cb;
	res.seg = seg;
	res.n = *nseg;
	rcb.get_meta = pmh_reserve_get_meta;
	rcb.alloc_segment = pmh_reserve_alloc;
	rcb.arg = &res;
	rc = pmh_split(pool, &rcb, segno, newsegno);
	*nseg = res.n;
	return rc;
}
