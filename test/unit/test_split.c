/*-------------------------------------------------------------------------
 *
 * test_split.c
 *	  Unit tests of splits and overflow chains: when a split is useful,
 *	  running out of segments (ENOSPC, reserved segments), the maximum
 *	  depth, and crashes before a split is published or an overflow segment
 *	  is linked.
 *
 * Crash images are made by copying the pool file's bytes into a new pool
 * file and undoing, in the copy, the one persistent store that had not
 * happened yet at the simulated crash (the publish word of a split, the
 * link word of a new overflow segment).
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

#include <errno.h>

/* crash image of a split that wrote the new segment but not the publish */
static void
crash_split(TPool *tp, Model *m, const char *what, int expect_chain_min)
{
	TPool		img;
	uint64		hash;
	uint32		block;
	uint16		offset;
	uint32		segno;
	uint32		newseg;
	uint32		s;
	uint64		old_word;
	uint64		nprim;
	uint64		novf;
	int			lnew;
	PmhRecoveryResult res;
	PmhSegRole *roles = NULL;
	int			rc;
	int			i;

	if (!insert_until(tp, m, PMH_INSERT_SPLIT, STOP_SPLIT, &hash, &block, &offset,
					  &segno, true))
		return;
	old_word = pmh_seg_header(&tp->pool, segno)->word;
	newseg = tpool_split(tp, segno);
	if (newseg == PMH_NO_SEGMENT)
		return;
	lnew = chain_length(tp, newseg);
	CHECKF(lnew >= expect_chain_min, "%s: the new half has a chain of %d", what, lnew);
	tpool_count(tp, &nprim, &novf);

	/* the image: everything of the split persisted except the publish */
	if (!tpool_copy(&img, tp, what))
		return;
	CHECK(pmh_seg_header(&img.pool, segno)->word != old_word);
	pmh_seg_header(&img.pool, segno)->word = old_word;

	rc = tpool_recover(&img, &res, &roles, NULL);
	if (CHECKF(rc == 0, "%s: pmh_recover: rc %d: %s", what, rc, res.error))
	{
		CHECKF(res.orphans_cleared == (uint64) (1 + lnew),
			   "%s: %llu orphans cleared, expected the new segment and its %d overflow segments",
			   what, (unsigned long long) res.orphans_cleared, lnew);
		CHECK(res.primaries == nprim - 1);
		CHECK(pmh_seg_header(&img.pool, newseg)->word == 0);
		CHECK(roles[newseg] == PMH_SEG_FREE);
		for (s = tp->meta[newseg].ovf_next; s != PMH_NO_SEGMENT; s = tp->meta[s].ovf_next)
			CHECK(roles[s] == PMH_SEG_FREE && pmh_seg_header(&img.pool, s)->word == 0);
		CHECK(img.meta[segno].word == old_word);
		verify_model(&img, m, 1000, what);

		/* a second recovery finds nothing more to do */
		CHECK(tpool_recover(&img, &res, NULL, NULL) == 0);
		CHECK(res.orphans_cleared == 0);

		/* both pools go on: the pending entry and more, same results */
		CHECK(tpool_insert(&img, hash, block, offset) == PMH_INSERT_DONE);
		CHECK(tpool_insert(tp, hash, block, offset) == PMH_INSERT_DONE);
		model_add(m, hash, block, offset);
		for (i = 0; i < S->n_after; i++)
		{
			uint64		h = rnd();

			rnd_tid(&block, &offset);
			CHECK(tpool_insert(&img, h, block, offset) == PMH_INSERT_DONE);
			CHECK(tpool_insert(tp, h, block, offset) == PMH_INSERT_DONE);
			model_add(m, h, block, offset);
		}
		verify_model(&img, m, 1000, what);
		verify_model(tp, m, 1000, what);
	}
	free(roles);
	tpool_close(&img);
}

/* recovery clears the new half of a split that was not published */
void
test_crash_split_unpublished(void)
{
	TPool		tp;
	Model		m;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "crash-split", 4))
		return;
	workload_random(&tp, &m, S->n_small, true);
	crash_split(&tp, &m, "crash-split", 0);
	model_free(&m);
	tpool_close(&tp);
}

/* the same, where the new half has an overflow chain of its own */
void
test_crash_split_chain(void)
{
	TPool		tp;
	Model		m;
	uint64		H = rnd() | (UINT64CONST(1) << 63);

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "crash-split-chain", 4))
		return;
	/* duplicates whose top bit is 1 move to the new half at the first split */
	insert_dups(&tp, &m, H, S->n_dups, 100, true);
	CHECK(chain_length(&tp, 0) >= 1);
	CHECK(tp.splits == 0);
	crash_split(&tp, &m, "crash-split-chain", 1);
	model_free(&m);
	tpool_close(&tp);
}

/* crash image of pmh_add_overflow before the link; check recovery */
static void
crash_overflow(TPool *tp, Model *m, uint64 H, uint32 base, const char *what)
{
	TPool		img;
	uint32		segno = PMH_NO_SEGMENT;
	uint32		newseg;
	uint64		old_link;
	PmhRecoveryResult res;
	PmhSegRole *roles = NULL;
	int			i;
	int			rc;
	PmhInsertResult r = PMH_INSERT_DONE;

	/* more duplicates until one needs an overflow segment */
	setup_begin(tp, true);
	for (i = 0; i < 100000; i++)
	{
		uint32		block = base + (uint32) (i / 1000);
		uint16		offset = (uint16) (1 + i % 1000);

		r = tpool_insert_ex(tp, H, block, offset, STOP_OVERFLOW, &segno);
		if (r == PMH_INSERT_OVERFLOW)
			break;
		if (!CHECKF(r == PMH_INSERT_DONE, "%s: insert: %d", what, (int) r))
			break;
		model_add(m, H, block, offset);
	}
	setup_end(tp);
	if (!CHECK(r == PMH_INSERT_OVERFLOW))
		return;
	old_link = pmh_seg_header(&tp->pool, segno)->ovf_next;
	newseg = tpool_add_overflow(tp, segno);
	if (newseg == PMH_NO_SEGMENT)
		return;
	CHECK(pmh_seg_header(&tp->pool, newseg)->ovf_next == old_link);

	if (!tpool_copy(&img, tp, what))
		return;
	pmh_seg_header(&img.pool, segno)->ovf_next = old_link;
	rc = tpool_recover(&img, &res, &roles, NULL);
	if (CHECKF(rc == 0, "%s: pmh_recover: rc %d: %s", what, rc, res.error))
	{
		CHECKF(res.orphans_cleared == 1, "%s: %llu orphans cleared", what,
			   (unsigned long long) res.orphans_cleared);
		CHECK(roles[newseg] == PMH_SEG_FREE);
		CHECK(pmh_seg_header(&img.pool, newseg)->word == 0);
		CHECK(img.meta[segno].ovf_next ==
			  (old_link == 0 ? PMH_NO_SEGMENT : (uint32) (old_link - 1)));
		verify_model(&img, m, 200, what);
	}
	free(roles);
	tpool_close(&img);

	/* the live pool goes on */
	CHECK(tpool_insert(tp, H, base + 999, 999) == PMH_INSERT_DONE);
	model_add(m, H, base + 999, 999);
}

/* recovery clears an overflow segment that was persisted but not linked */
void
test_crash_overflow_unlinked(void)
{
	TPool		tp;
	Model		m;
	uint64		H = rnd();

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "crash-ovf", 4))
		return;
	workload_random(&tp, &m, 200, true);
	/* the first overflow segment of a chain, then one in front of it */
	crash_overflow(&tp, &m, H, 1000, "crash-ovf-first");
	crash_overflow(&tp, &m, H, 2000, "crash-ovf-second");
	CHECK(chain_length(&tp, tp.dir[pmh_dir_index(H, tp.gd)]) == 2);
	verify_model(&tp, &m, 1000, "crash-ovf live");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * A full primary whose entries would all stay on one side of a split gets
 * an overflow segment instead (pmh_split_is_useful); once the other side
 * holds a useful share, it splits.
 */
void
test_split_usefulness(void)
{
	TPool		tp;
	Model		m;
	int			i;
	int			n = S->bulk_setup ? 1500 : 3000;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "useful", 4))
		return;
	/* every hash has top bit 0: a split at depth 0 would move nothing */
	setup_begin(&tp, true);
	for (i = 0; i < n; i++)
	{
		uint64		h = rnd() >> 1;
		uint32		block;
		uint16		offset;

		rnd_tid(&block, &offset);
		if (!CHECKF(tpool_insert(&tp, h, block, offset) == PMH_INSERT_DONE,
					"skewed insert %d", i))
			break;
		model_add(&m, h, block, offset);
	}
	setup_end(&tp);
	CHECKF(tp.splits == 0, "%llu splits of a segment whose entries all share bit 63",
		   (unsigned long long) tp.splits);
	CHECK(tp.meta[0].nlive == PMH_SEG_SLOTS);
	CHECK(chain_length(&tp, 0) >= 1);
	verify_model(&tp, &m, 500, "skewed");

	/* hashes with top bit 1: the split becomes useful and happens */
	setup_begin(&tp, true);
	for (i = 0; i < n && tp.splits == 0; i++)
	{
		uint64		h = rnd() | (UINT64CONST(1) << 63);
		uint32		block;
		uint16		offset;

		rnd_tid(&block, &offset);
		if (!CHECKF(tpool_insert(&tp, h, block, offset) == PMH_INSERT_DONE,
					"insert %d", i))
			break;
		model_add(&m, h, block, offset);
	}
	setup_end(&tp);
	CHECKF(tp.splits >= 1, "no split after %d entries with top bit 1", i);
	printf("#   %d skewed entries: %d overflow segments, no split; split after %d "
		   "entries of the other half\n", n, (int) tp.overflows_added, i);
	verify_model(&tp, &m, 500, "skewed, then split");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Set up pool "name" for a split whose new half needs an overflow segment:
 * 1500 entries of one hash with its top bit set, then inserts until one
 * finds no room (it is returned in *hash, *block, *offset, its segment in
 * *segno).  Returns false, with everything freed, if that fails.
 */
static bool
setup_split_with_overflow(TPool *tp, Model *m, const char *name,
						  uint64 *hash, uint32 *block, uint16 *offset,
						  uint32 *segno)
{
	uint64		H = rnd() | (UINT64CONST(1) << 63);

	memset(m, 0, sizeof(*m));
	if (!tpool_create(tp, name, 4))
		return false;
	insert_dups(tp, m, H, 1500, 100, true);
	if (!insert_until(tp, m, PMH_INSERT_SPLIT, STOP_SPLIT, hash, block, offset,
					  segno, true))
	{
		model_free(m);
		tpool_close(tp);
		return false;
	}
	return true;
}

/*
 * A split that runs out of free segments fails with ENOSPC and leaves the
 * segment as it was.
 */
void
test_split_enospc(void)
{
	TPool		tp;
	TPool		img;
	Model		m;
	uint64		hash;
	uint32		block;
	uint16		offset;
	uint32		segno;
	uint32		newseg = PMH_NO_SEGMENT;
	uint64		word;
	uint32		nlive;
	int			rc;
	int			save_errno;
	PmhRecoveryResult res;

	if (!setup_split_with_overflow(&tp, &m, "enospc", &hash, &block, &offset,
								   &segno))
		return;
	CHECK(segno == 0);
	CHECK(tpool_ensure_free(&tp, pmh_segments_needed_for_split(&tp.cb, segno)));
	word = tp.meta[segno].word;
	nlive = tp.meta[segno].nlive;

	/* room for the new segment only, not for its overflow segment */
	tp.alloc_budget = 1;
	tp.allocs = 0;
	errno = 0;
	rc = pmh_split(&tp.pool, &tp.cb, segno, &newseg);
	save_errno = errno;
	tp.alloc_budget = -1;
	CHECKF(rc == -1, "pmh_split without enough free segments: rc %d", rc);
	CHECKF(save_errno == ENOSPC,
		   "pmh_split failed for want of a segment with errno %d (%s), not ENOSPC",
		   save_errno, strerror(save_errno));
	CHECK(tp.meta[segno].word == word && tp.meta[segno].nlive == nlive);
	CHECK(pmh_seg_header(&tp.pool, segno)->word == word);
	CHECK(tp.allocs == 1);

	/* give the segment it took back; its metadata is scrap */
	if (tp.allocs == 1 && tp.last_alloc != PMH_NO_SEGMENT)
	{
		pmh_meta_reset(&tp.meta[tp.last_alloc], 0);
		tp.role[tp.last_alloc] = T_FREE;
		tp.freesegs[tp.nfree++] = tp.last_alloc;

		/* a crash now: the unpublished half is an orphan */
		if (tpool_copy(&img, &tp, "enospc-img"))
		{
			CHECK(tpool_recover(&img, &res, NULL, NULL) == 0);
			CHECKF(res.orphans_cleared == 1, "%llu orphans",
				   (unsigned long long) res.orphans_cleared);
			verify_model(&img, &m, 200, "enospc recovered");
		}
		tpool_close(&img);

		/*
		 * The failed split wrote into it, and a segment is taken as it is:
		 * zero it first, as recovery does to free segments.
		 */
		CHECK(pmh_prepare_free_segment(&tp.pool, tp.last_alloc) == 1);
	}
	verify_model(&tp, &m, 200, "enospc");

	/* with room, the split and the insert go through */
	CHECK(tpool_insert(&tp, hash, block, offset) == PMH_INSERT_DONE);
	model_add(&m, hash, block, offset);
	verify_model(&tp, &m, 200, "enospc then split");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * pmh_split_reserved takes its segments from the given ones, the last
 * first, and never from alloc_segment; those it leaves are untouched.  Too
 * few fail with ENOSPC before anything is published.
 */
void
test_split_reserved(void)
{
	TPool		tp;
	Model		m;
	uint64		hash;
	uint32		block;
	uint16		offset;
	uint32		segno;
	uint32		newseg = PMH_NO_SEGMENT;
	uint32		seg[PMH_SPLIT_RESERVE_MAX];
	uint64		word;
	int			need;
	int			left;
	int			i;

	if (!setup_split_with_overflow(&tp, &m, "reserved", &hash, &block, &offset,
								   &segno))
		return;
	need = pmh_segments_needed_for_split(&tp.cb, segno) + 1;
	if (!CHECK(need <= (int) lengthof(seg) && tpool_ensure_free(&tp, need)))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	word = tp.meta[segno].word;
	tp.nfree -= (uint32) need;
	memcpy(seg, tp.freesegs + tp.nfree, sizeof(uint32) * need);
	tp.alloc_budget = 0;		/* alloc_segment must not be asked */

	/* none given: ENOSPC, nothing taken, nothing published */
	left = 0;
	errno = 0;
	CHECK(pmh_split_reserved(&tp.pool, &tp.cb, segno, seg, &left, &newseg) == -1 &&
		  errno == ENOSPC);
	CHECK(left == 0 && pmh_seg_header(&tp.pool, segno)->word == word);

	left = need;
	tp.allocs = 0;
	if (!CHECK(pmh_split_reserved(&tp.pool, &tp.cb, segno, seg, &left,
								  &newseg) == 0))
	{
		tp.alloc_budget = -1;
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	tp.alloc_budget = -1;
	CHECK(tp.allocs == 0);
	CHECKF(newseg == seg[need - 1], "new half %u, not the last given (%u)",
		   newseg, seg[need - 1]);
	/* the new half's overflow segment came from the rest, one at least left */
	CHECKF(need - left == 2, "the split took %d of %d segments", need - left,
		   need);
	for (i = 0; i < left; i++)
		CHECKF(pmh_segment_is_zero(&tp.pool, seg[i]),
			   "segment %u, not taken, was written", seg[i]);
	for (i = left; i < need; i++)
		tp.role[seg[i]] = T_OVERFLOW;
	for (i = 0; i < left; i++)
		tp.freesegs[tp.nfree++] = seg[i];
	tpool_publish_split(&tp, segno, newseg);
	verify_model(&tp, &m, 200, "reserved split");

	CHECK(tpool_insert(&tp, hash, block, offset) == PMH_INSERT_DONE);
	model_add(&m, hash, block, offset);
	verify_model(&tp, &m, 200, "reserved split then insert");
	model_free(&m);
	tpool_close(&tp);
}

/* a segment at the maximum depth overflows instead of splitting */
void
test_max_depth(void)
{
	TPool		tp;
	Model		m;
	uint64		P = rnd() >> 16;
	uint64		w = pmh_segword_make(PMH_MAX_DEPTH, P);
	uint32		newseg;
	int			i;
	int			splits = 0;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "maxdepth", 8))
		return;
	/* make segment 0 cover one 48-bit prefix (directory bypassed) */
	pmh_seg_header(&tp.pool, 0)->word = w;
	tp.meta[0].word = w;
	setup_begin(&tp, true);
	for (i = 0; i < 3000; i++)
	{
		uint64		h = (P << 16) | (rnd() & 0xffff);
		uint32		block = (uint32) i;
		PmhInsertResult r;
		int			round;

		for (round = 0; round < 10; round++)
		{
			r = pmh_insert(&tp.pool, &tp.cb, 0, h, block, 1);
			if (r == PMH_INSERT_SPLIT)
				splits++;
			if (r != PMH_INSERT_OVERFLOW)
				break;
			if (tpool_add_overflow(&tp, 0) == PMH_NO_SEGMENT)
				break;
		}
		if (!CHECKF(r == PMH_INSERT_DONE, "insert %d: %d", i, (int) r))
			break;
		model_add(&m, h, block, 1);
	}
	setup_end(&tp);
	CHECKF(splits == 0, "pmh_insert asked for %d splits at depth %d", splits,
		   PMH_MAX_DEPTH);
	CHECK(tp.meta[0].nlive == PMH_SEG_SLOTS);
	CHECK(chain_length(&tp, 0) >= 1);
	errno = 0;
	CHECK(pmh_split(&tp.pool, &tp.cb, 0, &newseg) == -1 && errno == ENOSPC);
	CHECK(pmh_seg_header(&tp.pool, 0)->word == w);

	/* every entry is found, through segment 0 */
	qsort(m.e, m.n, sizeof(ModelEntry), cmp_model);
	{
		size_t		j;
		size_t		k;
		uint64	   *tags = pg_malloc(m.n * sizeof(uint64));

		for (j = 0; j < m.n; j = k)
		{
			int			n;

			for (k = j; k < m.n && m.e[k].hash == m.e[j].hash; k++)
				;
			n = pmh_lookup(&tp.pool, &tp.cb, 0, m.e[j].hash, tags, (int) m.n);
			if (!CHECKF(n == (int) (k - j), "hash %016llx: %d found, %d expected",
						(unsigned long long) m.e[j].hash, n, (int) (k - j)))
				break;
		}
		free(tags);
	}
	model_free(&m);
	tpool_close(&tp);
}
