/*-------------------------------------------------------------------------
 *
 * pmh_segment.c
 *	  Segments: their volatile metadata and fingerprint table, probing a
 *	  segment and its overflow chain (lookup, contains, find_slot),
 *	  inserting an entry, adding an overflow or a log segment, and
 *	  deleting slots (VACUUM).
 *
 * When a segment and its chain are full, an insert says whether to split
 * it (pmh_split.c) or to add an overflow segment.
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

/* the fingerprint's bits are never part of a directory index or prefix */
StaticAssertDecl(PMH_MAX_DEPTH <= 64 - 8 * sizeof(((PmhFpBucket *) 0)->fp[0]),
				 "the metadata fingerprint overlaps the segment prefix");

/* empty metadata for a segment with the given word (its version kept) */
void
pmh_meta_reset(PmhSegMeta *meta, uint64 word)
{
	/*
	 * The version stays: the segment's writer holds it odd, and readers
	 * without the lock must see it odd (or changed) throughout
	 */
	memset(&meta->nlive, 0, sizeof(*meta) - offsetof(PmhSegMeta, nlive));
	meta->word = word;
	meta->ovf_next = PMH_NO_SEGMENT;
}

/*
 * Rebuild the volatile metadata of a segment from the pool.  owner_word is
 * the word of the primary segment whose entries this segment holds (the
 * segment's own word for a primary).
 */
void
pmh_meta_load(const PmhPool *pool, uint32 segno, uint64 owner_word,
			  PmhSegMeta *meta)
{
	const PmhSegHeader *hdr = pmh_seg_header(pool, segno);
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	int			slot;

	pmh_meta_reset(meta, hdr->word);
	meta->ovf_next = hdr->ovf_next == 0 ? PMH_NO_SEGMENT :
		(uint32) (hdr->ovf_next - 1);
	for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
	{
		if (pmh_entry_is_live(&e[slot], owner_word))
			pmh_meta_set_live(meta, e[slot].hash, slot);
	}
}

/* unused ways of a fingerprint bucket, as a bit mask */
static inline uint32
pmh_fpt_free_ways(const PmhFpBucket *bk)
{
	return pmh_fp_candidates(bk->slot, 0xffff, 0);
}

/*
 * The buckets a lookup of hash reads, in order, into seq: its own, then the
 * next one as long as the one before is marked passed (pmh_fpt_next).
 * Returns how many.
 */
int
pmh_fpt_sequence(const PmhSegMeta *meta, uint64 hash, int *seq)
{
	int			b = pmh_fpt_bucket(hash);
	int			n = 0;

	do
		seq[n++] = b;
	while (n < PMH_FPT_BUCKETS && (b = pmh_fpt_next(meta, b)) >= 0);
	return n;
}

/*
 * Add slot "slot" with this hash to a segment's fingerprint table: into its
 * bucket or, when that is full, into the next bucket with room, marking the
 * full ones on the way passed.  There is always room: the table has more
 * ways than a segment has slots.
 */
void
pmh_fpt_add(PmhSegMeta *meta, uint64 hash, int slot)
{
	int			b = pmh_fpt_bucket(hash);
	uint32		f = pmh_fpt_free_ways(&meta->fpt[b]);
	int			n;

	Assert(slot >= 0 && slot < PMH_SEG_SLOTS);
	for (n = 1; f == 0 && n < PMH_FPT_BUCKETS; n++)
	{
		meta->fpt_passed[b >> 3] |= (uint8) (1 << (b & 7));
		meta->fpt_any_passed = 1;
		b = (b + 1) % PMH_FPT_BUCKETS;
		f = pmh_fpt_free_ways(&meta->fpt[b]);
	}
	Assert(f != 0);
	meta->fpt[b].fp[pg_rightmost_one_pos32(f)] = pmh_meta_fp(hash);
	meta->fpt[b].slot[pg_rightmost_one_pos32(f)] = (uint16) (slot + 1);
}

/*
 * The way of slot "slot" with this hash in a segment's fingerprint table,
 * hinted dead or not: its bucket in *bkp and its number, or -1 if absent.
 */
static int
pmh_fpt_find_way(PmhSegMeta *meta, uint64 hash, int slot, PmhFpBucket **bkp)
{
	uint16		fp = pmh_meta_fp(hash);
	int			seq[PMH_FPT_BUCKETS];
	int			n = pmh_fpt_sequence(meta, hash, seq);
	int			i;

	for (i = 0; i < n; i++)
	{
		PmhFpBucket *bk = &meta->fpt[seq[i]];
		uint32		c = pmh_fpt_match(bk, fp);

		while (c)
		{
			int			w = pg_rightmost_one_pos32(c);

			c &= c - 1;
			if ((bk->slot[w] & ~PMH_FPT_DEAD) == slot + 1)
			{
				*bkp = bk;
				return w;
			}
		}
	}
	return -1;
}

/* drop slot "slot" with this hash from a segment's fingerprint table */
void
pmh_fpt_remove(PmhSegMeta *meta, uint64 hash, int slot)
{
	PmhFpBucket *bk;
	int			w = pmh_fpt_find_way(meta, hash, slot, &bk);

	Assert(w >= 0);
	if (w < 0)
		return;
	bk->slot[w] = 0;
	bk->fp[w] = 0;
}

/*
 * Rebuild a segment's fingerprint table from its live slots (occ) and the
 * hashes in the pool, without passed marks no entry needs any more (after
 * a split took entries away).
 */
void
pmh_fpt_rebuild(const PmhPool *pool, PmhSegMeta *meta, uint32 segno)
{
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	int			b;

	memset(meta->fpt, 0, sizeof(meta->fpt));
	memset(meta->fpt_passed, 0, sizeof(meta->fpt_passed));
	meta->fpt_any_passed = 0;
	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		uint32		occ = meta->occ[b];

		while (occ)
		{
			int			slot = b * PMH_BUCKET_SLOTS + pg_rightmost_one_pos32(occ);

			occ &= occ - 1;
			pmh_fpt_add(meta, e[slot].hash, slot);
		}
	}
}

/*
 * Check a segment's fingerprint table against its live slots (occ) and the
 * pool: every live slot is in a bucket a lookup of its hash reads, exactly
 * once, with its fingerprint, and no way names a free slot.  Returns true
 * if so; else false, with the first problem in msg.
 */
bool
pmh_fpt_verify(const PmhPool *pool, const PmhSegMeta *meta, uint32 segno,
			   char *msg, size_t msglen)
{
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	uint8		seen[PMH_SEG_SLOTS];
	int			seq[PMH_FPT_BUCKETS];
	int			nseq;
	int			b;
	int			w;
	int			i;
	int			slot;

	memset(seen, 0, sizeof(seen));
	for (b = 0; b < PMH_FPT_BUCKETS; b++)
	{
		for (w = 0; w < PMH_FPT_WAYS; w++)
		{
			int			sl = meta->fpt[b].slot[w] & ~PMH_FPT_DEAD;
			uint64		h;

			if (sl == 0)
				continue;
			slot = sl - 1;
			if (slot >= PMH_SEG_SLOTS || !pmh_meta_is_live(meta, slot))
			{
				snprintf(msg, msglen, "segment %u: fingerprint bucket %d way %d names slot %d, which is not live",
						 segno, b, w, slot);
				return false;
			}
			h = e[slot].hash;
			if (meta->fpt[b].fp[w] != pmh_meta_fp(h))
			{
				snprintf(msg, msglen, "segment %u slot %d: fingerprint %04x does not match hash %016llx",
						 segno, slot, meta->fpt[b].fp[w], (unsigned long long) h);
				return false;
			}
			nseq = pmh_fpt_sequence(meta, h, seq);
			for (i = 0; i < nseq && seq[i] != b; i++)
				;
			if (i == nseq)
			{
				snprintf(msg, msglen, "segment %u slot %d: in fingerprint bucket %d, where a lookup of its hash does not look",
						 segno, slot, b);
				return false;
			}
			if (seen[slot]++)
			{
				snprintf(msg, msglen, "segment %u slot %d: twice in the fingerprint table",
						 segno, slot);
				return false;
			}
		}
	}
	for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
	{
		if (pmh_meta_is_live(meta, slot) && !seen[slot])
		{
			snprintf(msg, msglen, "segment %u slot %d: live but not in the fingerprint table",
					 segno, slot);
			return false;
		}
	}
	return true;
}

/* call fn for every live slot whose fingerprint matches; true stops */
typedef bool (*pmh_slot_fn) (const PmhEntry *e, void *arg);

/* tell the read hook (statistics mode) that a probe read this slot */
static inline void
pmh_note_read(const PmhPool *pool, const PmhEntry *e)
{
	pool->read_hook(pool->flush_hook_arg,
					(uint64) ((const char *) e - pool->base), sizeof(PmhEntry));
}

/*
 * Probe one segment for hash: the fingerprint table gives the live slots
 * whose fingerprint matches, from the hash's bucket (one cache line) and
 * any after it that entries went on to; their entries start loading
 * together, then are compared.  Ways hinted dead (PMH_FPT_DEAD) are
 * skipped unless with_dead.  An optimistic lookup (see
 * pmh_version_read_begin) runs this while the segment may change: each
 * slot number is read once and checked, and the candidates have room for
 * every way of the table, in case a rebuild shows a slot in two buckets.
 * Inlined with its callback, as with pmh_probe:
 * how many instructions a lookup runs after its last miss decides whether
 * the next lookup's misses start under it: with the calls through function
 * pointers, pmh_bench's one-at-a-time lookups ran about 30 % slower.
 */
static pg_attribute_always_inline bool
pmh_probe_segment(const PmhPool *pool, const PmhSegMeta *meta, uint32 segno,
				  uint64 hash, bool with_dead, pmh_slot_fn fn, void *arg)
{
	uint16		fp = pmh_meta_fp(hash);
	uint16		slot_mask = with_dead ? (uint16) ~PMH_FPT_DEAD : (uint16) 0xffff;
	const PmhEntry *entries = pmh_seg_entries(pool, segno);
	uint16		cand[PMH_FPT_BUCKETS * PMH_FPT_WAYS];	/* every way once */
	int			ncand = 0;
	int			b = pmh_fpt_bucket(hash);
	int			nb;
	int			i;

	if (meta->nlive == 0)
		return false;
	/* the buckets of pmh_fpt_sequence, walked without an array */
	for (nb = 0; nb < PMH_FPT_BUCKETS && b >= 0; nb++)
	{
		const PmhFpBucket *bk = &meta->fpt[b];
		uint32		c = pmh_fpt_match(bk, fp);

		/* (many ways of one hash hinted dead: skip them at once) */
		if (c != 0 && !with_dead)
			c &= ~pmh_fpt_dead_ways(bk);
		while (c)
		{
			int			w = pg_rightmost_one_pos32(c);
			uint32		slot;

			c &= c - 1;
			/*
			 * (0, an unused way, wraps around and is skipped; so does a
			 * way hinted dead, unless with_dead masks the hint off)
			 */
			slot = (uint32) (pmh_fpt_way_slot(bk, w) & slot_mask) - 1;
			if (slot >= PMH_SEG_SLOTS)
				continue;
			cand[ncand] = (uint16) slot;
			pmh_prefetch(&entries[slot]);
			ncand++;
		}
		b = pmh_fpt_next(meta, b);
	}
	for (i = 0; i < ncand; i++)
	{
		const PmhEntry *e = &entries[cand[i]];

		if (pool->read_hook)
			pmh_note_read(pool, e);
		if (e->hash == hash && fn(e, arg))
			return true;
	}
	return false;
}

/*
 * Probe primary segment segno, whose metadata is meta, and its overflow
 * chain (whose metadata comes through cb: most segments have none, and
 * their lookups make no call)
 */
static pg_attribute_always_inline bool
pmh_probe(const PmhPool *pool, const PmhCallbacks *cb,
		  const PmhSegMeta *meta, uint32 segno, uint64 hash, bool with_dead,
		  pmh_slot_fn fn, void *arg)
{
	for (;;)
	{
		if (pmh_probe_segment(pool, meta, segno, hash, with_dead, fn, arg))
			return true;
		segno = meta->ovf_next;
		if (likely(segno == PMH_NO_SEGMENT))
			return false;
		meta = cb->get_meta(cb->arg, segno);
	}
}

typedef struct PmhCollect
{
	uint64	   *tags;
	int			max;
	int			n;
} PmhCollect;

static bool
pmh_collect_fn(const PmhEntry *e, void *arg)
{
	PmhCollect *c = (PmhCollect *) arg;

	if (c->n < c->max)
		c->tags[c->n] = e->tag;
	c->n++;
	return false;
}

/*
 * Collect the tag words of all live entries with this hash in primary
 * segment segno and its overflow chain, except those hinted dead.  Stores
 * at most maxtags and returns the number found (which may exceed maxtags:
 * call again with more room).
 */
int
pmh_lookup(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
		   uint64 hash, uint64 *tags, int maxtags)
{
	if (segno == PMH_NO_SEGMENT)
		return 0;
	return pmh_lookup_meta(pool, cb, cb->get_meta(cb->arg, segno), segno,
						   hash, tags, maxtags);
}

/* pmh_lookup, meta being the metadata of primary segment segno */
int
pmh_lookup_meta(const PmhPool *pool, const PmhCallbacks *cb,
				const PmhSegMeta *meta, uint32 segno, uint64 hash,
				uint64 *tags, int maxtags)
{
	PmhCollect	c;

	c.tags = tags;
	c.max = maxtags;
	c.n = 0;
	(void) pmh_probe(pool, cb, meta, segno, hash, false, pmh_collect_fn, &c);
	return c.n;
}

/* clear the dead hint of slot "slot" with this hash, if it has one */
static void
pmh_fpt_revive(PmhSegMeta *meta, uint64 hash, int slot)
{
	PmhFpBucket *bk;
	int			w = pmh_fpt_find_way(meta, hash, slot, &bk);

	if (w >= 0 && (bk->slot[w] & PMH_FPT_DEAD))
		bk->slot[w] = (uint16) (slot + 1);
}

/*
 * Is exactly this (hash, tag) a live entry of segment segno or its chain,
 * hinted dead or not?  The caller is about to insert it (a relocation's or
 * an insert's duplicate test, log recovery), so a row at its TID is live
 * again: a dead hint on the entry is cleared, and the caller must hold the
 * segment's lock exclusively.  (In a stale pool an entry of an insert that
 * a crash lost names a heap slot that a new row with the same key can
 * take; the hint a scan gave the old entry must not hide the new row.)
 */
bool
pmh_contains(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
			 uint64 hash, uint64 tag)
{
	while (segno != PMH_NO_SEGMENT)
	{
		PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
		int			slot = pmh_find_slot(pool, meta, segno, hash, tag);

		if (slot >= 0)
		{
			pmh_fpt_revive(meta, hash, slot);
			return true;
		}
		segno = meta->ovf_next;
	}
	return false;
}

typedef struct PmhFind
{
	uint64		want;
	const PmhEntry *found;
} PmhFind;

static bool
pmh_find_fn(const PmhEntry *e, void *arg)
{
	PmhFind    *f = (PmhFind *) arg;

	if (e->tag != f->want)
		return false;
	f->found = e;
	return true;
}

/*
 * The slot of segment segno (alone, not its chain) that holds exactly this
 * (hash, tag), or -1: for a caller that deletes one entry.
 */
int
pmh_find_slot(const PmhPool *pool, const PmhSegMeta *meta, uint32 segno,
			  uint64 hash, uint64 tag)
{
	PmhFind		f;

	f.want = tag;
	f.found = NULL;
	if (!pmh_probe_segment(pool, meta, segno, hash, true, pmh_find_fn, &f))
		return -1;
	return (int) (f.found - pmh_seg_entries(pool, segno));
}

/*
 * Hint dead the entries with this hash in primary segment segno and its
 * chain whose tag is_dead says are (PMH_FPT_DEAD), so that later lookups
 * skip them.  Returns how many it marked.  The caller holds the segment's
 * lock shared at least: no writer changes the table meanwhile, and other
 * holders only read it or set the same bit, each way with one atomic
 * operation (lookups without the lock read a way's slot once, and either
 * value is right for them: the row is dead to every snapshot).
 */
int
pmh_mark_dead(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
			  uint64 hash, bool (*is_dead) (uint64 tag, void *arg), void *arg)
{
	uint16		fp = pmh_meta_fp(hash);
	int			marked = 0;

	while (segno != PMH_NO_SEGMENT)
	{
		PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
		const PmhEntry *entries = pmh_seg_entries(pool, segno);
		int			seq[PMH_FPT_BUCKETS];
		int			n = pmh_fpt_sequence(meta, hash, seq);
		int			i;

		for (i = 0; i < n && meta->nlive > 0; i++)
		{
			PmhFpBucket *bk = &meta->fpt[seq[i]];
			uint32		c = pmh_fpt_match(bk, fp) & ~pmh_fpt_dead_ways(bk);

			while (c)
			{
				int			w = pg_rightmost_one_pos32(c);
				uint32		slot = (uint32) pmh_fpt_way_slot(bk, w) - 1;

				c &= c - 1;
				/* (an unused way) */
				if (slot >= PMH_SEG_SLOTS)
					continue;
				if (entries[slot].hash == hash &&
					is_dead(entries[slot].tag, arg))
				{
					__atomic_fetch_or(&bk->slot[w], (uint16) PMH_FPT_DEAD,
									  __ATOMIC_RELAXED);
					marked++;
				}
			}
		}
		segno = meta->ovf_next;
	}
	return marked;
}

/*
 * The slots hinted dead (PMH_FPT_DEAD) in primary segment segno and its
 * overflow chain: with dead not NULL, a mask of them per bucket for each
 * of the chain's first nsegs segments, PMH_SEG_BUCKETS masks a segment in
 * chain order, as pmh_delete_chain takes them.  Returns how many slots
 * are hinted in the whole chain.  The caller holds the segment's lock
 * (exclusively, to delete what this finds: hints are set under the lock
 * shared).
 */
int
pmh_chain_hinted(const PmhCallbacks *cb, uint32 segno, uint16 *dead,
				 int nsegs)
{
	int			n = 0;
	int			k;

	for (k = 0; segno != PMH_NO_SEGMENT; k++)
	{
		const PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
		uint16	   *mask = dead != NULL && k < nsegs ?
			&dead[k * PMH_SEG_BUCKETS] : NULL;
		int			b;

		if (mask != NULL)
			memset(mask, 0, sizeof(uint16) * PMH_SEG_BUCKETS);
		for (b = 0; b < PMH_FPT_BUCKETS && meta->nlive > 0; b++)
		{
			const PmhFpBucket *bk = &meta->fpt[b];
			uint32		d = pmh_fpt_dead_ways(bk);

			while (d)
			{
				int			w = pg_rightmost_one_pos32(d);
				uint32		slot = (uint32) (bk->slot[w] & ~PMH_FPT_DEAD) - 1;

				d &= d - 1;
				/* (a free way never keeps the bit; be safe all the same) */
				if (slot >= PMH_SEG_SLOTS)
					continue;
				n++;
				if (mask != NULL)
					mask[slot / PMH_BUCKET_SLOTS] |=
						(uint16) (1 << (slot % PMH_BUCKET_SLOTS));
			}
		}
		segno = meta->ovf_next;
	}
	return n;
}

/* write one entry into a free slot and persist it; update the metadata */
static PmhInsertResult
pmh_write_slot(PmhPool *pool, PmhSegMeta *meta, uint32 segno, int slot,
			   uint64 hash, uint64 tag)
{
	PmhEntry   *e = &pmh_seg_entries(pool, segno)[slot];

	/*
	 * A reused slot may still hold an entry a split left behind, with a live
	 * tag.  Clear that tag first: all three stores hit one cache line, which
	 * reaches the media as a prefix of them, so a crash leaves either the
	 * old (dead) slot or the complete new entry, never the new hash with the
	 * old TID.
	 */
	if (e->tag != 0)
	{
		e->tag = 0;
		pmh_store_barrier();
	}
	e->hash = hash;
	pmh_store_barrier();
	e->tag = tag;
	if (pmh_persist(pool, e, sizeof(PmhEntry)) != 0)
	{
		int			save_errno = errno;

		/* the slot stays free in the metadata; do not leave it looking live */
		e->tag = 0;
		errno = save_errno;
		return PMH_INSERT_IOERROR;
	}
	pmh_meta_set_live(meta, hash, slot);
	return PMH_INSERT_DONE;
}

/*
 * Insert (hash, TID) into primary segment segno (first, if "check", unless
 * the same entry is there already): into its first free slot,
 * else into the first free slot of its overflow chain, so that a segment
 * fills line by line.  The entry is persistent when PMH_INSERT_DONE is
 * returned.  When there is no room the caller either splits the segment or
 * adds an overflow segment, as told, and calls again.
 */
static PmhInsertResult
pmh_insert_internal(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
					uint64 hash, uint32 block, uint16 offset, bool check)
{
	uint64		tag = pmh_tag_make(hash, block, offset);
	uint32		seg;

	/* the same (hash, TID) is never stored twice */
	if (check && pmh_contains(pool, cb, segno, hash, tag))
		return PMH_INSERT_EXISTS;

	for (seg = segno; seg != PMH_NO_SEGMENT;)
	{
		PmhSegMeta *m = cb->get_meta(cb->arg, seg);
		int			slot = pmh_segment_free_slot(m);

		if (slot >= 0)
			return pmh_write_slot(pool, m, seg, slot, hash, tag);
		seg = m->ovf_next;
	}
	return pmh_no_room(pool, cb, segno);
}

/*
 * Insert (hash, TID) into primary segment segno, unless it is there
 * already (PMH_INSERT_EXISTS): see pmh_insert_internal.
 */
PmhInsertResult
pmh_insert(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
		   uint64 hash, uint32 block, uint16 offset)
{
	return pmh_insert_internal(pool, cb, segno, hash, block, offset, true);
}

/*
 * The same, for a caller that knows the (hash, TID) is not stored yet
 * (CREATE INDEX, which sees every heap TID once): no probe first.
 */
PmhInsertResult
pmh_insert_new(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
			   uint64 hash, uint32 block, uint16 offset)
{
	return pmh_insert_internal(pool, cb, segno, hash, block, offset, false);
}

/*
 * Start loading, to be written, the pool slot that pmh_insert_new would
 * fill in segment segno (itself, not its overflow chain): the second step
 * of a bulk insert's prefetching, once pmh_insert_prefetch_meta's lines
 * have arrived.  Only a hint: the insert finds its slot again.
 */
void
pmh_insert_prefetch_slot(const PmhPool *pool, const PmhSegMeta *meta,
						 uint32 segno)
{
	int			slot = pmh_segment_free_slot(meta);

	if (slot >= 0)
		pmh_prefetch_write(&pmh_seg_entries(pool, segno)[slot]);
}

/*
 * Prepare free segment newseg as an empty overflow segment and link it at
 * the head of the chain of primary segment segno.  The new segment is
 * persistent before the 8-byte link that publishes it.
 */
int
pmh_add_overflow(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
				 uint32 newseg)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	PmhSegMeta *nmeta = cb->get_meta(cb->arg, newseg);
	PmhSegHeader *nh = pmh_seg_header(pool, newseg);
	PmhSegHeader *ph = pmh_seg_header(pool, segno);

	/* its buckets are zero already (see pmh_prepare_free_segment) */
	nh->ovf_next = ph->ovf_next;
	nh->word = pmh_segword_make_overflow();
	if (pmh_persist(pool, nh, PMH_LINE_BYTES) != 0)
		return -1;

	ph->ovf_next = (uint64) newseg + 1;
	if (pmh_persist(pool, &ph->ovf_next, sizeof(uint64)) != 0)
		return -1;

	pmh_meta_reset(nmeta, nh->word);
	nmeta->ovf_next = meta->ovf_next;
	meta->ovf_next = newseg;
	return 0;
}

/*
 * Make free segment segno log extension "ext": its buckets are zero on the
 * media already (a free segment always is), so persisting the header line
 * with the log word publishes 64 empty log lines.  Returns 0, or -1 with
 * errno set.
 */
int
pmh_add_log_segment(PmhPool *pool, uint32 segno, uint32 ext)
{
	PmhSegHeader *h = pmh_seg_header(pool, segno);

	h->ovf_next = 0;
	h->word = pmh_segword_make_log(ext);
	return pmh_persist(pool, h, PMH_LINE_BYTES);
}

/*
 * Invalidate the slots in "mask" of one bucket (vacuum): each tag word is
 * cleared with one 8-byte store, then the bucket's touched lines are
 * persisted once.  Returns 0, or -1 with errno set.
 */
int
pmh_delete_slots(PmhPool *pool, PmhSegMeta *meta, uint32 segno, int bucket,
				 uint16 mask)
{
	PmhEntry   *e = &pmh_seg_entries(pool, segno)[bucket * PMH_BUCKET_SLOTS];
	uint32		m = mask & meta->occ[bucket];
	int			first = -1;
	int			last = -1;

	if (m == 0)
		return 0;
	while (m)
	{
		int			s = pg_rightmost_one_pos32(m);

		m &= m - 1;
		e[s].tag = 0;
		if (first < 0)
			first = s;
		last = s;
		meta->occ[bucket] &= (uint16) ~(1 << s);
		pmh_fpt_remove(meta, e[s].hash, bucket * PMH_BUCKET_SLOTS + s);
		meta->nlive--;
	}
	return pmh_persist(pool, &e[first], (size_t) (last - first + 1) * PMH_ENTRY_BYTES);
}

/*
 * Delete the marked slots of primary segment segno and of its overflow
 * chain (VACUUM), all persisted in one batch with one fence.  dead holds
 * PMH_SEG_BUCKETS masks per segment of the chain, in chain order, nsegs
 * segments' worth (the caller judged the entries under the segment lock
 * and keeps holding it).  A segment whose fingerprint table has "passed"
 * marks is rebuilt, so that the marks the deleted entries needed go.
 * Each deletion is one 8-byte store, failure-atomic on its own, so a
 * crash inside the batch leaves any subset of them, each entry whole or
 * gone.  Returns 0, or -1 with errno set (the metadata and the mapping
 * then say deleted, the media any subset).
 */
int
pmh_delete_chain(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
				 const uint16 *dead, int nsegs)
{
	uint32		seg = segno;
	int			rc = 0;
	int			k;

	pmh_batch_begin(pool);
	for (k = 0; k < nsegs && seg != PMH_NO_SEGMENT && rc == 0; k++)
	{
		PmhSegMeta *meta = cb->get_meta(cb->arg, seg);
		bool		deleted = false;
		int			b;

		for (b = 0; b < PMH_SEG_BUCKETS && rc == 0; b++)
			if (dead[k * PMH_SEG_BUCKETS + b] != 0)
			{
				rc = pmh_delete_slots(pool, meta, seg, b,
									  dead[k * PMH_SEG_BUCKETS + b]);
				deleted = true;
			}
		if (deleted && meta->fpt_any_passed)
			pmh_fpt_rebuild(pool, meta, seg);
		seg = meta->ovf_next;
	}
	if (rc != 0)
	{
		int			save_errno = errno;

		(void) pmh_batch_end(pool);
		errno = save_errno;
		return rc;
	}
	return pmh_batch_end(pool);
}
