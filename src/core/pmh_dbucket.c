/*-------------------------------------------------------------------------
 *
 * pmh_dbucket.c
 *	  The backup log and D-buckets: writing and clearing backup-log
 *	  slots, finding a free log line, the D-bucket of each primary
 *	  segment, ranking the lines of a segment, and relocating a D-bucket
 *	  into its segment a whole line at a time.
 *
 * A backup-log slot holds an entry in the same 16 B format as a bucket
 * slot; it is live when its tag has the marker, a matching fingerprint copy
 * and a non-zero offset.  Whether a live log entry still waits for
 * relocation is not recorded in the pool: it waits iff the segment that
 * owns its hash does not contain it (see README.pmhash, "Backup log").
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
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/*
 * Write n entries into backup-log line "line" from slot "first" on and
 * persist them: one flush of the covered cache lines and one fence.  The
 * slots must be zero (a line is zeroed when a backend takes it), so each
 * slot goes from empty to complete through its hash store then its tag
 * store: a crash leaves it empty, hash-only (dead) or complete.  Returns 0,
 * or -1 with errno set.
 */
int
pmh_log_write(PmhPool *pool, uint32 line, int first, const PmhEntry *entries,
			  int n)
{
	PmhEntry   *dst = pmh_log_line(pool, line) + first;
	int			i;

	Assert(first >= 0 && first + n <= PMH_BUCKET_SLOTS);
	for (i = 0; i < n; i++)
		dst[i].hash = entries[i].hash;
	pmh_store_barrier();
	for (i = 0; i < n; i++)
		dst[i].tag = entries[i].tag;
	return pmh_persist(pool, dst, (size_t) n * PMH_ENTRY_BYTES);
}

/*
 * Clear the tags of n backup-log slots (released ones whose copies must
 * not come back after a crash) and persist them: one flush per touched
 * line, from its first cleared tag to its last, and one fence.  Each
 * clearing is one 8-byte store, failure-atomic on its own.  The caller
 * keeps the slots from being reused or written meanwhile.  Returns 0, or
 * -1 with errno set.
 */
int
pmh_log_clear_slots(PmhPool *pool, const uint32 *slots, int n)
{
	int			i;

	if (n == 0)
		return 0;
	pmh_batch_begin(pool);
	for (i = 0; i < n; i++)
	{
		uint32		line = slots[i] / PMH_BUCKET_SLOTS;
		uint32		lo = slots[i] % PMH_BUCKET_SLOTS;
		uint32		hi = lo;
		PmhEntry   *e = pmh_log_line(pool, line);
		int			j;

		/* a line seen before is done */
		for (j = 0; j < i; j++)
			if (slots[j] / PMH_BUCKET_SLOTS == line)
				break;
		if (j < i)
			continue;
		for (j = i; j < n; j++)
		{
			uint32		s = slots[j] % PMH_BUCKET_SLOTS;

			if (slots[j] / PMH_BUCKET_SLOTS != line)
				continue;
			e[s].tag = 0;
			lo = Min(lo, s);
			hi = Max(hi, s);
		}
		if (pmh_persist(pool, &e[lo].tag,
						(size_t) (hi - lo) * PMH_ENTRY_BYTES + sizeof(uint64)) != 0)
		{
			int			save_errno = errno;

			(void) pmh_batch_end(pool);
			errno = save_errno;
			return -1;
		}
	}
	return pmh_batch_end(pool);
}

/*
 * The first free backup-log line at or after line "cursor", going round a
 * log of nwords * 64 lines, or -1 when none is free.  The caller keeps a
 * mask of free lines per 64 (bit k of word w: line 64 w + k is free) and
 * hands out word w as word(arg, w).  The word of the cursor is read twice:
 * for the lines from the cursor on first, whole last (by then only lines
 * before the cursor can be free in it).
 */
int32
pmh_log_find_free(PmhMaskWordFn word, const void *arg, uint32 nwords,
				  uint32 cursor)
{
	uint32		first = cursor / 64;
	uint64		after = ~UINT64CONST(0) << (cursor % 64);
	uint32		i;

	Assert(first < nwords);
	for (i = 0; i <= nwords; i++)
	{
		uint32		w = (first + i) % nwords;
		uint64		mask = word(arg, w);

		if (i == 0)
			mask &= after;
		if (mask != 0)
			return (int32) (w * 64 + pg_rightmost_one_pos64(mask));
	}
	return -1;
}

/* append an entry to a segment's D-bucket (the caller checked for room) */
void
pmh_pending_add(PmhSegMeta *meta, uint64 hash, uint64 tag, uint32 logslot)
{
	PmhPending *p;

	Assert(meta->npending < PMH_DBUCKET_SLOTS);
	meta->pending_fp[meta->npending] = pmh_meta_fp(hash);
	p = &meta->pending[meta->npending++];
	p->hash = hash;
	p->tag = tag;
	p->logslot = logslot;
	p->pad = 0;
}

/* drop entry i of a D-bucket (order is not kept) */
void
pmh_pending_remove(PmhSegMeta *meta, int i)
{
	Assert(i >= 0 && (uint32) i < meta->npending);
	meta->npending--;
	meta->pending[i] = meta->pending[meta->npending];
	meta->pending_fp[i] = meta->pending_fp[meta->npending];
}

/*
 * Add the tags of a D-bucket's entries with this hash to tags[n...] (room
 * for maxtags in all) and return the new count, which may exceed maxtags.
 * Only the entries whose fingerprint matches are read: a lookup reads the
 * cache line of the D-bucket's fingerprints, not its 384 bytes of entries.
 */
int
pmh_pending_lookup(const PmhSegMeta *meta, uint64 hash, uint64 *tags,
				   int n, int maxtags)
{
	/* read once and bounded: an optimistic lookup reads it as it changes */
	uint32		np = Min(__atomic_load_n(&meta->npending, __ATOMIC_RELAXED),
						 PMH_DBUCKET_SLOTS);
	uint32		c;

	c = pmh_fp_candidates(meta->pending_fp, ((uint32) 1 << np) - 1,
						  pmh_meta_fp(hash));
	while (c)
	{
		const PmhPending *p = &meta->pending[pg_rightmost_one_pos32(c)];

		c &= c - 1;
		if (p->hash != hash)
			continue;
		if (n < maxtags)
			tags[n] = p->tag;
		n++;
	}
	return n;
}

#ifdef __SSE2__
/* the smallest 16-bit lane of v */
static inline int
pmh_min_lane16(__m128i v)
{
	v = _mm_min_epi16(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
	v = _mm_min_epi16(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
	v = _mm_min_epi16(v, _mm_shufflelo_epi16(v, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(v) & 0xffff;
}

/* the first of a segment's 8 groups of 8 lanes that holds "val": its line */
static inline int
pmh_first_lane16(const __m128i *groups, int val)
{
	__m128i		want = _mm_set1_epi16((short) val);
	int			g;

	for (g = 0; g < PMH_SEG_BUCKETS / 8; g++)
	{
		uint32		hit = (uint32) _mm_movemask_epi8(_mm_cmpeq_epi16(groups[g], want));

		if (hit != 0)
			return g * 8 + pg_rightmost_one_pos32(hit) / 2;
	}
	return -1;
}
#endif

/*
 * Rank the lines of one segment for "want" entries: *fit is the first line
 * with the fewest free slots that are still >= want (-1 if none), *most the
 * first line with the most free slots (-1 if the segment is full); their
 * free slots go to *fit_free and *most_free (0x7fff and 0 when there is
 * no such line).  With SSE2 the 64 occupancy masks are counted 8 at a time
 * (a popcount per 16-bit lane, by halves).
 */
void
pmh_rank_lines(const PmhSegMeta *m, int want, int *fit, int *fit_free,
			   int *most, int *most_free)
{
#ifdef __SSE2__
	__m128i		fitv[PMH_SEG_BUCKETS / 8];
	__m128i		freev[PMH_SEG_BUCKETS / 8];
	__m128i		minv = _mm_set1_epi16(0x7fff);
	__m128i		maxv = _mm_setzero_si128();
	__m128i		below = _mm_set1_epi16((short) (want - 1));
	__m128i		none = _mm_set1_epi16(0x7fff);
	int			g;

	StaticAssertStmt(PMH_SEG_BUCKETS % 8 == 0, "lines come in groups of 8");
	for (g = 0; g < PMH_SEG_BUCKETS / 8; g++)
	{
		__m128i		x = _mm_loadu_si128((const __m128i *) &m->occ[g * 8]);
		__m128i		ok;

		x = _mm_sub_epi16(x, _mm_and_si128(_mm_srli_epi16(x, 1),
										   _mm_set1_epi16(0x5555)));
		x = _mm_add_epi16(_mm_and_si128(x, _mm_set1_epi16(0x3333)),
						  _mm_and_si128(_mm_srli_epi16(x, 2),
										_mm_set1_epi16(0x3333)));
		x = _mm_and_si128(_mm_add_epi16(x, _mm_srli_epi16(x, 4)),
						  _mm_set1_epi16(0x0f0f));
		x = _mm_and_si128(_mm_add_epi16(x, _mm_srli_epi16(x, 8)),
						  _mm_set1_epi16(0x001f));
		freev[g] = _mm_sub_epi16(_mm_set1_epi16(PMH_BUCKET_SLOTS), x);
		ok = _mm_cmpgt_epi16(freev[g], below);
		fitv[g] = _mm_or_si128(_mm_and_si128(ok, freev[g]),
							   _mm_andnot_si128(ok, none));
		minv = _mm_min_epi16(minv, fitv[g]);
		maxv = _mm_max_epi16(maxv, freev[g]);
	}
	*fit_free = pmh_min_lane16(minv);
	*fit = *fit_free == 0x7fff ? -1 : pmh_first_lane16(fitv, *fit_free);
	/* the largest lane is the smallest of its negation */
	*most_free = -(int16) pmh_min_lane16(_mm_sub_epi16(_mm_setzero_si128(), maxv));
	*most = *most_free == 0 ? -1 : pmh_first_lane16(freev, *most_free);
#else
	int			b;

	*fit = -1;
	*fit_free = 0x7fff;
	*most = -1;
	*most_free = 0;
	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		int			nfree = PMH_BUCKET_SLOTS - pg_popcount32(m->occ[b]);

		if (nfree >= want && nfree < *fit_free)
		{
			*fit_free = nfree;
			*fit = b;
		}
		if (nfree > *most_free)
		{
			*most_free = nfree;
			*most = b;
		}
	}
#endif
}

/*
 * Choose the line (bucket) of primary segment segno or its chain that
 * "want" entries should go to: the fullest line with room for all of them,
 * so that wholly free lines are kept for whole D-buckets; if no line has
 * that much room, the line with the most (the first such line in chain
 * order, either way).  Returns false when the segment and its chain have no
 * free slot at all.
 */
static bool
pmh_choose_line(const PmhCallbacks *cb, uint32 segno, int want,
				uint32 *segout, int *bucketout)
{
	int			fit_free = PMH_BUCKET_SLOTS + 1;
	int			most_free = 0;
	uint32		fit_seg = PMH_NO_SEGMENT;
	uint32		most_seg = PMH_NO_SEGMENT;
	int			fit_bucket = -1;
	int			most_bucket = -1;
	uint32		seg;

	/*
	 * A full D-bucket wants a free line: the first one in chain order is
	 * what the search below would choose, found without counting bits.
	 */
	if (want == PMH_BUCKET_SLOTS)
	{
		for (seg = segno; seg != PMH_NO_SEGMENT;)
		{
			PmhSegMeta *m = cb->get_meta(cb->arg, seg);
			int			b = m->nlive < PMH_SEG_SLOTS ? pmh_find_line(m, 0, true) : -1;

			if (b >= 0)
			{
				*segout = seg;
				*bucketout = b;
				return true;
			}
			seg = m->ovf_next;
		}
	}

	for (seg = segno; seg != PMH_NO_SEGMENT;)
	{
		PmhSegMeta *m = cb->get_meta(cb->arg, seg);

		if (m->nlive < PMH_SEG_SLOTS)
		{
			int			fit;
			int			ffree;
			int			most;
			int			mfree;

			pmh_rank_lines(m, want, &fit, &ffree, &most, &mfree);
			if (fit >= 0 && ffree < fit_free)
			{
				fit_free = ffree;
				fit_seg = seg;
				fit_bucket = fit;
				if (ffree == want)
					break;
			}
			if (mfree > most_free)
			{
				most_free = mfree;
				most_seg = seg;
				most_bucket = most;
			}
		}
		seg = m->ovf_next;
	}
	if (fit_bucket >= 0)
	{
		*segout = fit_seg;
		*bucketout = fit_bucket;
		return true;
	}
	if (most_bucket >= 0)
	{
		*segout = most_seg;
		*bucketout = most_bucket;
		return true;
	}
	return false;
}

/*
 * Write entries into the free slots of one line (bucket) of segment segno,
 * in slot order, as many as fit; the covered range is handed to the choke
 * point (the caller batches).  Each slot goes from free to complete by its
 * own cache line's store order: the old tag (an entry a split left behind)
 * is cleared first, then every hash is stored, then every tag.  Returns the
 * number of entries written, or -1 (errno set) if the choke point failed.
 */
static int
pmh_write_line(PmhPool *pool, PmhSegMeta *meta, uint32 segno, int bucket,
			   const PmhPending *const *src, int n)
{
	PmhEntry   *line = &pmh_seg_entries(pool, segno)[bucket * PMH_BUCKET_SLOTS];
	uint32		freebits = (~(uint32) meta->occ[bucket]) & 0xffff;
	int			slots[PMH_BUCKET_SLOTS];
	int			k = 0;
	int			i;

	while (freebits && k < n)
	{
		slots[k++] = pg_rightmost_one_pos32(freebits);
		freebits &= freebits - 1;
	}

	/*
	 * Clear every tag, not only those that are set: reading them first would
	 * wait for the line to arrive, where stores let the fingerprint inserts
	 * below go on while it loads.
	 */
	for (i = 0; i < k; i++)
		line[slots[i]].tag = 0;
	pmh_store_barrier();
	for (i = 0; i < k; i++)
		line[slots[i]].hash = src[i]->hash;
	pmh_store_barrier();
	for (i = 0; i < k; i++)
	{
		line[slots[i]].tag = src[i]->tag;
		pmh_meta_set_live(meta, src[i]->hash, bucket * PMH_BUCKET_SLOTS + slots[i]);
	}
	if (k > 0 &&
		pmh_persist(pool, &line[slots[0]],
					(size_t) (slots[k - 1] - slots[0] + 1) * PMH_ENTRY_BYTES) != 0)
		return -1;
	return k;
}

/*
 * Start loading what placing an entry into segment segno's D-bucket will
 * write: the D-bucket slot it takes or, when the D-bucket is full, what its
 * relocation reads first (the D-bucket's entries and the occupancy masks).
 * A caller about to place several entries (a collecting log's) calls this
 * for each of their segments, after starting to load their metadata's
 * first line, then pmh_relocate_prefetch for each, so that the cache
 * misses of the placements overlap instead of each stalling its insert (a
 * lock release waits for every store before it).  Only a hint: it reads
 * the metadata without the segment's lock and changes nothing, and a
 * concurrent change makes it load the wrong line.  The caller keeps the
 * overflow chains still (the server: the index lock, in any mode).
 */
void
pmh_pending_prefetch(const PmhPool *pool, const PmhCallbacks *cb,
					 uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	uint32		npending = meta->npending;
	size_t		off;

	if (npending < PMH_DBUCKET_SLOTS)
	{
		pmh_prefetch_write(&meta->pending[npending]);
		return;
	}
	for (off = 0; off < sizeof(meta->pending); off += PMH_CACHELINE_BYTES)
		pmh_prefetch_write((const char *) meta->pending + off);
	pmh_prefetch(&meta->occ[0]);
	pmh_prefetch(&meta->occ[PMH_SEG_BUCKETS / 2]);
}

/*
 * The second step of pmh_pending_prefetch, once what it started is loaded:
 * for a full D-bucket, start loading the pool line its relocation fills
 * and the fingerprint buckets its entries go to.  A hint, as above.
 */
void
pmh_relocate_prefetch(const PmhPool *pool, const PmhCallbacks *cb,
					  uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	uint32		seg;
	int			bucket;
	const char *line;
	int			i;

	if (meta->npending < PMH_DBUCKET_SLOTS)
		return;
	if (pmh_choose_line(cb, segno, PMH_DBUCKET_SLOTS, &seg, &bucket))
	{
		line = (const char *) &pmh_seg_entries(pool, seg)[bucket * PMH_BUCKET_SLOTS];
		for (i = 0; i < PMH_LINE_BYTES; i += PMH_CACHELINE_BYTES)
			pmh_prefetch_write(line + i);
	}
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		pmh_fpt_prefetch(meta, meta->pending[i].hash);
}

/*
 * Relocate the D-bucket of primary segment segno into the segment, a whole
 * line at a time: a full D-bucket fills one free 256 B line and costs one
 * whole-line flush; fewer entries go to the fullest line with room for them
 * (holes that VACUUM or a split left).  All flushes are fenced once, and
 * only then do the entries leave the D-bucket.  The log slots of the
 * relocated entries (also of duplicates, counted in *nduplicates) are
 * returned in released[] (room for PMH_DBUCKET_SLOTS): the caller may reuse
 * them once this returns.
 *
 * An entry waiting twice in the D-bucket is written once.  An entry the
 * segment holds already is looked for only with check_segment: that needs
 * a crash (PMH_STATE_STALE), and costs a probe per entry.
 *
 * Without "decide" an entry that finds no room ends the relocation with
 * PMH_INSERT_FULL: choosing between a split and an overflow segment reads
 * every entry of the segment and its chain, which a caller that cannot
 * act on the choice would waste.
 *
 * Returns PMH_INSERT_DONE when the D-bucket is empty, PMH_INSERT_SPLIT or
 * PMH_INSERT_OVERFLOW (with "decide", else PMH_INSERT_FULL) when an entry
 * found no room (the ones before it are relocated and released), or
 * PMH_INSERT_IOERROR (errno set; nothing is released, the D-bucket is
 * unchanged, and slots written in the segment are not trusted: the caller
 * must treat the segment's metadata as lost).
 */
PmhInsertResult
pmh_relocate(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
			 bool check_segment, bool decide, uint32 *released,
			 int *nreleased, int *nduplicates)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	PmhInsertResult r = PMH_INSERT_DONE;
	const PmhPending *place[PMH_DBUCKET_SLOTS];
	int			placeidx[PMH_DBUCKET_SLOTS];
	bool		dup[PMH_DBUCKET_SLOTS];
	int			nplace = 0;
	int			placed = 0;
	uint32		done;
	uint32		i;

	*nreleased = 0;
	*nduplicates = 0;

	/* start loading the fingerprint buckets the entries will go to */
	for (i = 0; i < meta->npending; i++)
		pmh_fpt_prefetch(meta, meta->pending[i].hash);

	/*
	 * Entries the segment holds already, or that wait twice, are done.  An
	 * earlier copy in the D-bucket has the same fingerprint: only those are
	 * compared.
	 */
	for (i = 0; i < meta->npending; i++)
	{
		PmhPending *p = &meta->pending[i];
		uint32		c = pmh_fp_candidates(meta->pending_fp,
										  ((uint32) 1 << i) - 1,
										  meta->pending_fp[i]);

		dup[i] = false;
		while (c && !dup[i])
		{
			int			j = pg_rightmost_one_pos32(c);

			c &= c - 1;
			dup[i] = !dup[j] && meta->pending[j].hash == p->hash &&
				meta->pending[j].tag == p->tag;
		}
		if (!dup[i] && check_segment)
			dup[i] = pmh_contains(pool, cb, segno, p->hash, p->tag);
		if (!dup[i])
		{
			placeidx[nplace] = (int) i;
			place[nplace++] = p;
		}
	}

	pmh_batch_begin(pool);
	while (placed < nplace)
	{
		uint32		seg;
		int			bucket;
		int			k;

		if (!pmh_choose_line(cb, segno, nplace - placed, &seg, &bucket))
		{
			r = decide ? pmh_no_room(pool, cb, segno) : PMH_INSERT_FULL;
			break;
		}
		k = pmh_write_line(pool, cb->get_meta(cb->arg, seg), seg, bucket,
						   &place[placed], nplace - placed);
		if (k < 0)
		{
			int			save_errno = errno;

			(void) pmh_batch_end(pool);
			errno = save_errno;
			return PMH_INSERT_IOERROR;
		}
		placed += k;
	}
	if (pmh_batch_end(pool) != 0)
		return PMH_INSERT_IOERROR;

	/* D-bucket entries before the first one that found no room are done */
	done = placed < nplace ? (uint32) placeidx[placed] : meta->npending;
	for (i = 0; i < done; i++)
	{
		released[i] = meta->pending[i].logslot;
		if (dup[i])
			(*nduplicates)++;
	}
	*nreleased = (int) done;
	memmove(&meta->pending[0], &meta->pending[done],
			(meta->npending - done) * sizeof(PmhPending));
	memmove(&meta->pending_fp[0], &meta->pending_fp[done],
			(meta->npending - done) * sizeof(uint16));
	meta->npending -= done;
	return r;
}
