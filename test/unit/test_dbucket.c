/*-------------------------------------------------------------------------
 *
 * test_dbucket.c
 *	  Unit tests of D-buckets and their relocation into P-buckets: the
 *	  pending-entry bookkeeping, ranking a segment's lines, a full D-bucket
 *	  into a free line, duplicates, best fit into lines VACUUM left holes
 *	  in, no room left (SPLIT or OVERFLOW), and relocation that does not
 *	  probe the segment.
 *
 * Crashes during a relocation are in test_recover.c and test_torn.c.
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

/*
 * pmh_pending_add appends (hash, tag, log slot) to a D-bucket;
 * pmh_pending_remove moves the last entry into the removed one's place.
 * Checked against a reference array through random adds and removes.
 */
void
test_pending_bookkeeping(void)
{
	PmhSegMeta *m = pg_malloc(sizeof(PmhSegMeta));
	PmhPending	ref[PMH_DBUCKET_SLOTS];
	int			nref = 0;
	int			step;
	int			i;

	memset(m, 0x7f, sizeof(*m));
	pmh_meta_reset(m, pmh_segword_make(0, 0));
	CHECK(m->npending == 0 && m->nlive == 0 && m->ovf_next == PMH_NO_SEGMENT);

	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
	{
		uint64		h = rnd();

		m->pending[i].pad = 0xdeadbeef;
		pmh_pending_add(m, h, pmh_tag_make(h, 1, (uint16) (i + 1)), 100 + (uint32) i);
		CHECK(m->npending == (uint32) (i + 1));
		CHECK(m->pending[i].hash == h &&
			  m->pending[i].tag == pmh_tag_make(h, 1, (uint16) (i + 1)) &&
			  m->pending[i].logslot == 100 + (uint32) i && m->pending[i].pad == 0);
		ref[nref++] = m->pending[i];
	}

	/* a middle entry: the last one takes its place */
	pmh_pending_remove(m, 5);
	CHECK(m->npending == 15);
	CHECK(pending_equal(&m->pending[5], &ref[15]));
	for (i = 0; i < 15; i++)
		if (i != 5)
			CHECK(pending_equal(&m->pending[i], &ref[i]));
	ref[5] = ref[15];
	nref = 15;
	/* the last entry: nothing moves */
	pmh_pending_remove(m, 14);
	CHECK(m->npending == 14);
	nref = 14;
	for (i = 0; i < nref; i++)
		CHECK(pending_equal(&m->pending[i], &ref[i]));
	/* the first */
	pmh_pending_remove(m, 0);
	ref[0] = ref[--nref];
	CHECK(m->npending == (uint32) nref);
	CHECK(pending_equal(&m->pending[0], &ref[0]));

	/* random adds and removes against the reference */
	for (step = 0; step < 2000; step++)
	{
		bool		add = nref == 0 ||
			(nref < PMH_DBUCKET_SLOTS && (rnd() & 1));

		if (add)
		{
			uint64		h = rnd();
			uint32		slot = (uint32) (rnd() % PMH_LOG_SLOTS);

			pmh_pending_add(m, h, pmh_tag_make(h, 2, 1), slot);
			ref[nref].hash = h;
			ref[nref].tag = pmh_tag_make(h, 2, 1);
			ref[nref].logslot = slot;
			ref[nref].pad = 0;
			nref++;
		}
		else
		{
			int			j = (int) (rnd() % (uint64) nref);

			pmh_pending_remove(m, j);
			ref[j] = ref[--nref];
		}
		if (!CHECKF(m->npending == (uint32) nref, "step %d: npending %u, expected %d",
					step, m->npending, nref))
			break;
		for (i = 0; i < nref; i++)
			if (!CHECKF(pending_equal(&m->pending[i], &ref[i]) &&
						m->pending_fp[i] == pmh_meta_fp(ref[i].hash),
						"step %d: pending[%d] differs", step, i))
				break;
		/* a lookup finds an entry that waits, and not one that does not */
		if (nref > 0)
		{
			const PmhPending *want = &ref[rnd() % (uint64) nref];
			uint64		tags[PMH_DBUCKET_SLOTS];

			CHECKF(pmh_pending_lookup(m, want->hash, tags, 0,
									  PMH_DBUCKET_SLOTS) == 1 &&
				   tags[0] == want->tag, "step %d: lookup", step);
			CHECKF(pmh_pending_lookup(m, want->hash ^ UINT64CONST(0x10000),
									  tags, 0, PMH_DBUCKET_SLOTS) == 0,
				   "step %d: lookup of an absent hash", step);
		}
	}

	/*
	 * Entries with one hash, and one whose hash differs only above the
	 * fingerprint: all of the first and none of the other are found, past
	 * maxtags they are counted only, and the tags go after the n given.
	 */
	while (m->npending > 0)
		pmh_pending_remove(m, 0);
	{
		uint64		h1 = UINT64CONST(0xabc0000001234);
		uint64		h2 = UINT64CONST(0xabd0000001234);
		uint64		tags[PMH_DBUCKET_SLOTS];
		int			n;

		for (i = 0; i < 5; i++)
			pmh_pending_add(m, h1, pmh_tag_make(h1, 4, (uint16) (i + 1)),
							(uint32) i);
		pmh_pending_add(m, h2, pmh_tag_make(h2, 5, 1), 5);
		tags[0] = 42;
		n = pmh_pending_lookup(m, h1, tags, 1, 4);
		CHECKF(n == 6 && tags[0] == 42 && tags[1] == pmh_tag_make(h1, 4, 1) &&
			   tags[3] == pmh_tag_make(h1, 4, 3),
			   "same hash: %d found", n);
		n = pmh_pending_lookup(m, h2, tags, 0, 4);
		CHECKF(n == 1 && tags[0] == pmh_tag_make(h2, 5, 1),
			   "hash differing above the fingerprint: %d found", n);
	}

	/* emptied one by one, then filled again to the brim */
	while (m->npending > 0)
		pmh_pending_remove(m, 0);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		pmh_pending_add(m, (uint64) i + 1, pmh_tag_make((uint64) i + 1, 3, 1), (uint32) i);
	CHECK(m->npending == PMH_DBUCKET_SLOTS);
	/* a reset forgets the D-bucket; the rest of the metadata too */
	pmh_meta_reset(m, pmh_segword_make(1, 1));
	CHECK(m->npending == 0 && m->word == pmh_segword_make(1, 1));
	free(m);

	/* the D-bucket is volatile: loading a segment from the pool starts empty */
	{
		TPool		tp;
		PmhPending	ents[4];

		if (!tpool_create(&tp, "pending", 1))
			return;
		make_entries(&tp, 0, 4, 9, ents);
		pend_entries(&tp, 0, 0, 0, ents, 4);
		CHECK(tp.meta[0].npending == 4);
		for (i = 0; i < 4; i++)
			CHECK(pending_equal(&tp.meta[0].pending[i], &ents[i]) &&
				  ents[i].logslot == (uint32) i);
		pmh_meta_load(&tp.pool, 0, tp.meta[0].word, &tp.meta[0]);
		CHECK(tp.meta[0].npending == 0 && tp.meta[0].nlive == 0);
		tpool_close(&tp);
	}
}

/*
 * A full D-bucket goes into one wholly free line of its segment: one
 * whole-line flush (4 cache lines) and one fence; the 16 log slots are
 * released in D-bucket order, and every entry is found.
 */
void
test_relocate_full_dbucket(void)
{
	TPool		tp;
	PmhPersistStats *st;
	HookLog		hl;
	Model		m;
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	int			nrel;
	int			ndup;
	int			i;
	int			b;
	PmhInsertResult r;
	uint64		h;
	PmhSegMeta *loaded;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "relocfull", 2))
		return;
	st = &tp.pool.stats;

	/* an empty D-bucket: nothing to do, not even a fence */
	hook_start(&tp, &hl);
	nrel = ndup = -1;
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == 0 && ndup == 0);
	check_stats(st, 0, 0, 0, 0, 0, 0, "empty D-bucket");
	CHECK(hl.nevents == 0);

	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 7000, ents);
	pend_entries(&tp, 0, 0, 0, ents, PMH_DBUCKET_SLOTS);
	CHECK(tp.meta[0].npending == PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
	{
		model_add_pending(&m, &ents[i]);
		/* waiting in the D-bucket: not in the segment yet */
		check_found(&tp, &ents[i], 0, "pending");
	}

	hook_start(&tp, &hl);
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECKF(r == PMH_INSERT_DONE, "relocate: %d", (int) r);
	CHECK(nrel == PMH_DBUCKET_SLOTS && ndup == 0);
	for (i = 0; i < nrel; i++)
		CHECKF(released[i] == (uint32) i && released[i] == ents[i].logslot,
			   "released[%d] = %u", i, released[i]);
	CHECK(tp.meta[0].npending == 0);
	check_stats(st, 1, PMH_LINE_BYTES, PMH_LINE_BYTES / PMH_CACHELINE_BYTES, 1, 0, 1,
				"full D-bucket");
	CHECKF(hl.nranges == 1 && hl.nfences == 1 && hl.off[0] == bucket_offset(&tp, 0, 0) &&
		   hl.len[0] == PMH_LINE_BYTES && hl.len[1] == 0,
		   "hook: %d ranges (first at %llu, %zu bytes), %d fences", hl.nranges,
		   (unsigned long long) hl.off[0], hl.len[0], hl.nfences);
	CHECKF(tp.meta[0].occ[0] == 0xffff, "occ[0] %04x", tp.meta[0].occ[0]);
	for (b = 1; b < PMH_SEG_BUCKETS; b++)
		CHECKF(tp.meta[0].occ[b] == 0 && bucket_is_zero(&tp, 0, b),
			   "bucket %d touched", b);
	CHECK(tp.meta[0].nlive == PMH_DBUCKET_SLOTS);
	check_line_holds(&tp, 0, 0, 0xffff, ents, "full D-bucket");
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		check_found(&tp, &ents[i], 1, "relocated");
	/* the log keeps its copies: releasing writes nothing */
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		CHECK(pmh_log_entry(&tp.pool, ents[i].logslot)->tag == ents[i].tag);

	/* a second one takes the next free line */
	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 7001, ents);
	pend_entries(&tp, 0, 1, 0, ents, PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		model_add_pending(&m, &ents[i]);
	hook_start(&tp, &hl);
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == PMH_DBUCKET_SLOTS && ndup == 0);
	for (i = 0; i < nrel; i++)
		CHECK(released[i] == PMH_BUCKET_SLOTS + (uint32) i);
	check_stats(st, 1, PMH_LINE_BYTES, 4, 1, 0, 1, "second full D-bucket");
	CHECK(hl.off[0] == bucket_offset(&tp, 0, 1));
	CHECK(tp.meta[0].occ[1] == 0xffff && tp.meta[0].occ[2] == 0);
	check_line_holds(&tp, 0, 1, 0xffff, ents, "second full D-bucket");

	/* a direct insert fills from the first free slot: bucket 2, slots 0, 1 */
	for (i = 0; i < 2; i++)
	{
		h = rnd();
		CHECK(tpool_insert(&tp, h, 7100, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add(&m, h, 7100, (uint16) (i + 1));
	}
	CHECKF(tp.meta[0].occ[2] == 0x0003, "occ[2] %04x", tp.meta[0].occ[2]);

	/* a full D-bucket skips the partly used line for the next free one */
	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 7002, ents);
	pend_entries(&tp, 0, 2, 0, ents, PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		model_add_pending(&m, &ents[i]);
	hook_start(&tp, &hl);
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == PMH_DBUCKET_SLOTS && ndup == 0);
	check_stats(st, 1, PMH_LINE_BYTES, 4, 1, 0, 1, "full D-bucket, partial line present");
	CHECK(hl.off[0] == bucket_offset(&tp, 0, 3));
	CHECKF(tp.meta[0].occ[2] == 0x0003 && tp.meta[0].occ[3] == 0xffff,
		   "occ[2] %04x occ[3] %04x", tp.meta[0].occ[2], tp.meta[0].occ[3]);
	check_line_holds(&tp, 0, 3, 0xffff, ents, "third full D-bucket");
	hook_stop(&tp);

	/* what the pool says agrees with the metadata */
	loaded = pg_malloc(sizeof(PmhSegMeta));
	pmh_meta_load(&tp.pool, 0, tp.meta[0].word, loaded);
	CHECK(loaded->nlive == tp.meta[0].nlive && loaded->nlive == 50);
	CHECK(memcmp(loaded->occ, tp.meta[0].occ, sizeof(loaded->occ)) == 0);
	free(loaded);
	verify_model(&tp, &m, 200, "relocate full");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Entries the segment holds already, and a (hash, tag) waiting twice, are
 * released as duplicates without being written; an entry with the same hash
 * and another TID is not a duplicate.  A D-bucket of duplicates only writes
 * nothing and does not fence.
 */
void
test_relocate_duplicates(void)
{
	TPool		tp;
	PmhPersistStats *st;
	Model		m;
	PmhPending	seg[20];
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	PmhPending	written[PMH_DBUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	uint64		tags[8];
	int			nrel;
	int			ndup;
	int			nw = 0;
	int			i;
	PmhInsertResult r;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "relocdup", 2))
		return;
	st = &tp.pool.stats;

	/* 20 entries: bucket 0 full, slots 0..3 of bucket 1 */
	make_entries(&tp, 0, 20, 100, seg);
	for (i = 0; i < 20; i++)
	{
		CHECK(tpool_insert(&tp, seg[i].hash, 100, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add_pending(&m, &seg[i]);
	}
	CHECK(tp.meta[0].occ[0] == 0xffff && tp.meta[0].occ[1] == 0x000f);

	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 200, ents);
	ents[3] = seg[4];			/* in the segment */
	ents[9] = seg[17];			/* in the segment */
	ents[12] = ents[5];			/* waits twice */
	ents[14] = pending_of(ents[5].hash, 201, 1);	/* same hash, other TID */
	pend_entries(&tp, 0, 0, 0, ents, PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
	{
		if (i == 3 || i == 9 || i == 12)
			continue;
		model_add_pending(&m, &ents[i]);
		written[nw++] = ents[i];
	}
	CHECK(nw == 13);

	/*
	 * 13 entries to write: bucket 1 has 12 free slots, so the best fit is
	 * the first free line, bucket 2: slots 0..12, one flush of 208 bytes
	 * (4 cache lines: the whole line).
	 */
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECKF(r == PMH_INSERT_DONE, "relocate: %d", (int) r);
	CHECKF(nrel == PMH_DBUCKET_SLOTS && ndup == 3, "released %d, duplicates %d",
		   nrel, ndup);
	for (i = 0; i < nrel; i++)
		CHECK(released[i] == ents[i].logslot);
	CHECK(tp.meta[0].npending == 0);
	check_stats(st, 1, 13 * PMH_ENTRY_BYTES, 4, 1, 0, 1, "13 of 16 written");
	CHECKF(tp.meta[0].occ[1] == 0x000f && tp.meta[0].occ[2] == 0x1fff &&
		   tp.meta[0].occ[3] == 0,
		   "occ %04x %04x %04x", tp.meta[0].occ[1], tp.meta[0].occ[2],
		   tp.meta[0].occ[3]);
	CHECK(tp.meta[0].nlive == 33);
	check_line_holds(&tp, 0, 2, 0x1fff, written, "duplicates");

	/* stored once each; the hash with two TIDs has both */
	check_found(&tp, &seg[4], 1, "duplicate of a segment entry");
	check_found(&tp, &seg[17], 1, "duplicate of a segment entry");
	check_found(&tp, &ents[5], 1, "pending twice");
	check_found(&tp, &ents[14], 1, "same hash, other TID");
	CHECK(pmh_lookup(&tp.pool, &tp.cb, 0, ents[5].hash, tags, 8) == 2);
	CHECK(pmh_lookup(&tp.pool, &tp.cb, 0, seg[4].hash, tags, 8) == 1);

	/* a D-bucket of entries the segment holds: released, nothing written */
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		ents[i] = written[i % nw];
	ents[15] = seg[0];
	pend_entries(&tp, 0, 1, 0, ents, PMH_DBUCKET_SLOTS);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == PMH_DBUCKET_SLOTS &&
		  ndup == PMH_DBUCKET_SLOTS);
	for (i = 0; i < nrel; i++)
		CHECK(released[i] == PMH_BUCKET_SLOTS + (uint32) i);
	check_stats(st, 0, 0, 0, 0, 0, 0, "duplicates only");
	CHECK(tp.meta[0].nlive == 33 && tp.meta[0].npending == 0);
	verify_model(&tp, &m, 200, "relocate duplicates");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * pmh_rank_lines (SIMD where there is SSE2) against the rule written out
 * plainly: the first line with the fewest free slots >= want, the first
 * line with the most.  Random occupancy of every density, every want.
 */
void
test_rank_lines(void)
{
	PmhSegMeta *m = pg_malloc0(sizeof(PmhSegMeta));
	int			iter;

	for (iter = 0; iter < 20000; iter++)
	{
		/* density: a slot is taken with probability k / 8, k = 0..8 */
		int			k = (int) (rnd() % 9);
		int			want = 1 + (int) (rnd() % PMH_BUCKET_SLOTS);
		int			fit,
					fit_free,
					most,
					most_free;
		int			rfit = -1,
					rfit_free = 0x7fff,
					rmost = -1,
					rmost_free = 0;
		int			b;

		for (b = 0; b < PMH_SEG_BUCKETS; b++)
		{
			uint16		occ = 0;
			int			s;
			int			nfree;

			for (s = 0; s < PMH_BUCKET_SLOTS; s++)
				if ((int) (rnd() % 8) < k)
					occ |= (uint16) (1 << s);
			/* now and then a line that is wholly free or wholly taken */
			if (rnd() % 16 == 0)
				occ = rnd() % 2 ? 0 : 0xffff;
			m->occ[b] = occ;
			nfree = PMH_BUCKET_SLOTS - pg_popcount32(occ);
			if (nfree >= want && nfree < rfit_free)
			{
				rfit = b;
				rfit_free = nfree;
			}
			if (nfree > rmost_free)
			{
				rmost = b;
				rmost_free = nfree;
			}
		}
		pmh_rank_lines(m, want, &fit, &fit_free, &most, &most_free);
		if (!CHECKF(fit == rfit && fit_free == rfit_free &&
					most == rmost && most_free == rmost_free,
					"want %d, density %d/8: fit %d (%d free), most %d (%d free); "
					"expected %d (%d), %d (%d)", want, k, fit, fit_free, most,
					most_free, rfit, rfit_free, rmost, rmost_free))
			break;
	}
	free(m);
}

/*
 * Fewer than 16 entries go to the fullest line with room for all of them
 * (holes VACUUM left), never to a wholly free line while such a line
 * exists; ties go to the first line.  16 go to the first wholly free line.
 */
void
test_relocate_best_fit(void)
{
	TPool		tp;
	PmhPersistStats *st;
	Model		m;
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	int			nrel;
	int			ndup;
	int			i;
	int			b;
	uint64		h;
	PmhInsertResult r;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "bestfit", 2))
		return;
	st = &tp.pool.stats;
	for (i = 0; i < 4 * PMH_BUCKET_SLOTS; i++)
	{
		h = rnd();
		CHECK(tpool_insert(&tp, h, 300, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add(&m, h, 300, (uint16) (i + 1));
	}
	for (b = 0; b < 4; b++)
		CHECK(tp.meta[0].occ[b] == 0xffff);

	/* holes: 7, 5, 6 and 4 free slots in buckets 0..3 */
	delete_slots_model(&tp, &m, 0, 0, 0x00fe);
	delete_slots_model(&tp, &m, 0, 1, 0x0ad0);	/* slots 4, 6, 7, 9, 11 */
	delete_slots_model(&tp, &m, 0, 2, 0x0fc0);	/* slots 6..11 */
	delete_slots_model(&tp, &m, 0, 3, 0x8421);	/* slots 0, 5, 10, 15 */
	CHECK(tp.meta[0].nlive == 64 - 22);

	/* 5 entries: exactly bucket 1's holes; slots 4..11 flushed, 2 cache lines */
	make_entries(&tp, 0, 5, 310, ents);
	pend_entries(&tp, 0, 0, 0, ents, 5);
	for (i = 0; i < 5; i++)
		model_add_pending(&m, &ents[i]);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == 5 && ndup == 0);
	for (i = 0; i < 5; i++)
		CHECK(released[i] == (uint32) i);
	check_stats(st, 1, 8 * PMH_ENTRY_BYTES, 2, 0, 1, 1, "exact fit");
	CHECKF(tp.meta[0].occ[0] == 0xff01 && tp.meta[0].occ[1] == 0xffff &&
		   tp.meta[0].occ[2] == 0xf03f && tp.meta[0].occ[3] == 0x7bde &&
		   tp.meta[0].occ[4] == 0,
		   "occ %04x %04x %04x %04x %04x", tp.meta[0].occ[0], tp.meta[0].occ[1],
		   tp.meta[0].occ[2], tp.meta[0].occ[3], tp.meta[0].occ[4]);
	check_line_holds(&tp, 0, 1, 0x0ad0, ents, "exact fit");
	for (b = 4; b < PMH_SEG_BUCKETS; b++)
		CHECKF(bucket_is_zero(&tp, 0, b), "exact fit: free bucket %d touched", b);

	/*
	 * 5 more: bucket 0 has 7 free, bucket 2 has 6, bucket 3 has 4: the
	 * fullest that fits is bucket 2 (slots 6..10; slot 11 stays free).
	 */
	make_entries(&tp, 0, 5, 311, ents);
	pend_entries(&tp, 0, 0, 5, ents, 5);
	for (i = 0; i < 5; i++)
		model_add_pending(&m, &ents[i]);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == 5 && ndup == 0);
	for (i = 0; i < 5; i++)
		CHECK(released[i] == 5 + (uint32) i);
	check_stats(st, 1, 5 * PMH_ENTRY_BYTES, 2, 0, 1, 1, "best fit");
	CHECKF(tp.meta[0].occ[0] == 0xff01 && tp.meta[0].occ[2] == 0xf7ff &&
		   tp.meta[0].occ[3] == 0x7bde && tp.meta[0].occ[4] == 0,
		   "occ %04x %04x %04x %04x", tp.meta[0].occ[0], tp.meta[0].occ[2],
		   tp.meta[0].occ[3], tp.meta[0].occ[4]);
	check_line_holds(&tp, 0, 2, 0x07c0, ents, "best fit");
	for (b = 4; b < PMH_SEG_BUCKETS; b++)
		CHECKF(bucket_is_zero(&tp, 0, b), "best fit: free bucket %d touched", b);

	/* 12: no partly used line has room for them all; the first free line */
	make_entries(&tp, 0, 12, 312, ents);
	pend_entries(&tp, 0, 1, 0, ents, 12);
	for (i = 0; i < 12; i++)
		model_add_pending(&m, &ents[i]);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == 12 && ndup == 0);
	check_stats(st, 1, 12 * PMH_ENTRY_BYTES, 3, 0, 1, 1, "12 into a free line");
	CHECKF(tp.meta[0].occ[0] == 0xff01 && tp.meta[0].occ[4] == 0x0fff &&
		   tp.meta[0].occ[5] == 0,
		   "occ %04x %04x %04x", tp.meta[0].occ[0], tp.meta[0].occ[4],
		   tp.meta[0].occ[5]);
	check_line_holds(&tp, 0, 4, 0x0fff, ents, "12 into a free line");

	/* 4: buckets 3 and 4 both have exactly 4 free; the first one wins */
	make_entries(&tp, 0, 4, 313, ents);
	pend_entries(&tp, 0, 1, 12, ents, 4);
	for (i = 0; i < 4; i++)
		model_add_pending(&m, &ents[i]);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == 4 && ndup == 0);
	for (i = 0; i < 4; i++)
		CHECK(released[i] == PMH_BUCKET_SLOTS + 12 + (uint32) i);
	check_stats(st, 1, 16 * PMH_ENTRY_BYTES, 4, 1, 0, 1, "tie");
	CHECKF(tp.meta[0].occ[3] == 0xffff && tp.meta[0].occ[4] == 0x0fff,
		   "occ %04x %04x", tp.meta[0].occ[3], tp.meta[0].occ[4]);
	check_line_holds(&tp, 0, 3, 0x8421, ents, "tie");
	for (b = 5; b < PMH_SEG_BUCKETS; b++)
		CHECKF(bucket_is_zero(&tp, 0, b), "free bucket %d touched", b);

	/*
	 * A whole D-bucket: the first wholly free line (5), never the holes of
	 * lines 0, 2 and 4.  pmh_pending_prefetch, only a hint, changes nothing
	 * whether the D-bucket has room or is full.
	 */
	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 314, ents);
	pend_entries(&tp, 0, 2, 0, ents, PMH_DBUCKET_SLOTS - 1);
	pmh_pending_prefetch(&tp.pool, &tp.cb, 0);
	pend_entries(&tp, 0, 2, PMH_DBUCKET_SLOTS - 1,
				 &ents[PMH_DBUCKET_SLOTS - 1], 1);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		model_add_pending(&m, &ents[i]);
	pmh_pending_prefetch(&tp.pool, &tp.cb, 0);
	pmh_relocate_prefetch(&tp.pool, &tp.cb, 0);
	CHECK(tp.meta[0].npending == PMH_DBUCKET_SLOTS &&
		  tp.meta[0].occ[5] == 0 && tp.meta[0].occ[0] == 0xff01);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == PMH_DBUCKET_SLOTS && ndup == 0);
	check_stats(st, 1, PMH_LINE_BYTES, PMH_LINE_BYTES / PMH_CACHELINE_BYTES, 1, 0, 1,
				"whole D-bucket");
	CHECKF(tp.meta[0].occ[0] == 0xff01 && tp.meta[0].occ[2] == 0xf7ff &&
		   tp.meta[0].occ[4] == 0x0fff && tp.meta[0].occ[5] == 0xffff &&
		   tp.meta[0].occ[6] == 0,
		   "occ %04x %04x %04x %04x %04x", tp.meta[0].occ[0],
		   tp.meta[0].occ[2], tp.meta[0].occ[4], tp.meta[0].occ[5],
		   tp.meta[0].occ[6]);
	check_line_holds(&tp, 0, 5, 0xffff, ents, "whole D-bucket");
	verify_model(&tp, &m, 200, "best fit");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Fill segment 0 of a fresh pool with n random entries (bulk in the msync
 * pass); hashes are shifted right by "shift" bits.
 */
static void
fill_segment0(TPool *tp, Model *m, int n, int shift, uint32 block)
{
	int			i;

	setup_begin(tp, true);
	for (i = 0; i < n; i++)
	{
		uint64		h = rnd() >> shift;
		uint16		off = (uint16) (1 + i % 1000);
		uint32		blk = block + (uint32) (i / 1000);

		if (!CHECKF(pmh_insert(&tp->pool, &tp->cb, 0, h, blk, off) == PMH_INSERT_DONE,
					"fill %d", i))
			break;
		model_add(m, h, blk, off);
	}
	setup_end(tp);
	CHECK(tp->meta[0].nlive == (uint32) n);
}

/*
 * A segment with fewer free slots than waiting entries: a D-bucket that fits
 * in no line spills, the line with the most room first, then the best fit;
 * when no slot is left pmh_relocate answers SPLIT, releases exactly the
 * D-bucket prefix it placed and leaves the rest waiting in order.  After the
 * split the pending entries follow their hashes and a second relocation
 * finishes (a copy already placed counts as a duplicate then).
 */
void
test_relocate_no_room_split(void)
{
	TPool		tp;
	PmhPersistStats *st;
	Model		m;
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	bool		seen[PMH_DBUCKET_SLOTS];
	int			nrel;
	int			ndup;
	int			i;
	int			j;
	int			half;
	uint32		newseg;
	PmhInsertResult r;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "noroom", 4))
		return;
	st = &tp.pool.stats;
	fill_segment0(&tp, &m, PMH_SEG_SLOTS, 0, 400);
	delete_slots_model(&tp, &m, 0, 5, 0x0070);	/* 3 free */
	delete_slots_model(&tp, &m, 0, 9, 0x3f00);	/* 6 free */
	delete_slots_model(&tp, &m, 0, 20, 0x000f); /* 4 free */
	delete_slots_model(&tp, &m, 0, 40, 0x8000); /* 1 free */
	CHECK(tp.meta[0].nlive == PMH_SEG_SLOTS - 14);

	/* 10: 6 into bucket 9 (most room), then 4 into bucket 20 (exact fit) */
	make_entries(&tp, 0, 10, 410, ents);
	pend_entries(&tp, 0, 0, 0, ents, 10);
	for (i = 0; i < 10; i++)
		model_add_pending(&m, &ents[i]);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == 10 && ndup == 0);
	check_stats(st, 2, 10 * PMH_ENTRY_BYTES, 2 + 1, 0, 2, 1, "spill over two lines");
	CHECKF(tp.meta[0].occ[9] == 0xffff && tp.meta[0].occ[20] == 0xffff &&
		   tp.meta[0].occ[5] == 0xff8f && tp.meta[0].occ[40] == 0x7fff,
		   "occ %04x %04x %04x %04x", tp.meta[0].occ[5], tp.meta[0].occ[9],
		   tp.meta[0].occ[20], tp.meta[0].occ[40]);
	check_line_holds(&tp, 0, 9, 0x3f00, ents, "spill, first line");
	check_line_holds(&tp, 0, 20, 0x000f, &ents[6], "spill, second line");

	/*
	 * 16 with 4 free slots left: ents[6] is ents[1] again and ents[9] an
	 * entry the segment holds.  Placed: ents[0..2] in bucket 5, ents[3] in
	 * bucket 40; ents[4] finds no room.
	 */
	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 420, ents);
	ents[6] = ents[1];
	{
		const PmhEntry *e = &pmh_seg_entries(&tp.pool, 0)[33 * PMH_BUCKET_SLOTS + 3];

		ents[9] = pending_of(e->hash, pmh_tag_block(e->tag), pmh_tag_offset(e->tag));
	}
	pend_entries(&tp, 0, 1, 0, ents, PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		if (i != 6 && i != 9)
			model_add_pending(&m, &ents[i]);
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECKF(r == PMH_INSERT_SPLIT, "relocate into a full segment: %d", (int) r);
	CHECKF(nrel == 4 && ndup == 0, "released %d, duplicates %d", nrel, ndup);
	for (i = 0; i < Min(nrel, 4); i++)
		CHECK(released[i] == ents[i].logslot);
	check_stats(st, 2, 4 * PMH_ENTRY_BYTES, 2, 0, 2, 1, "partial relocation");
	CHECK(tp.meta[0].nlive == PMH_SEG_SLOTS);
	CHECK(tp.meta[0].occ[5] == 0xffff && tp.meta[0].occ[40] == 0xffff);
	check_line_holds(&tp, 0, 5, 0x0070, ents, "no room, bucket 5");
	check_line_holds(&tp, 0, 40, 0x8000, &ents[3], "no room, bucket 40");
	CHECKF(tp.meta[0].npending == 12, "npending %u", tp.meta[0].npending);
	for (i = 0; i < 12; i++)
		CHECKF(pending_equal(&tp.meta[0].pending[i], &ents[4 + i]),
			   "pending[%d] is not D-bucket entry %d", i, 4 + i);
	for (i = 4; i < PMH_DBUCKET_SLOTS; i++)
		if (i != 6 && i != 9)
			check_found(&tp, &ents[i], 0, "still waiting");
	check_found(&tp, &ents[1], 1, "placed before the split");

	/* without a choice of remedy: only "no room", and nothing changes */
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, false, released, &nrel, &ndup);
	CHECKF(r == PMH_INSERT_FULL && nrel == 0 && ndup == 0,
		   "relocate into a full segment again: %d, released %d", (int) r, nrel);
	check_stats(st, 0, 0, 0, 0, 0, 0, "no room, no choice");
	CHECK(tp.meta[0].npending == 12);

	/* a split: the waiting entries follow their hash bit */
	newseg = tpool_split(&tp, 0);
	if (!CHECK(newseg != PMH_NO_SEGMENT))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	CHECKF(tp.meta[0].npending + tp.meta[newseg].npending == 12,
		   "after the split: %u + %u pending", tp.meta[0].npending,
		   tp.meta[newseg].npending);
	memset(seen, 0, sizeof(seen));
	for (half = 0; half < 2; half++)
	{
		uint32		s = half ? newseg : 0;

		for (i = 0; i < (int) tp.meta[s].npending; i++)
		{
			const PmhPending *p = &tp.meta[s].pending[i];

			CHECKF(pmh_hash_in_segment(p->hash, tp.meta[s].word),
				   "pending %016llx in the wrong half", (unsigned long long) p->hash);
			for (j = 4; j < PMH_DBUCKET_SLOTS; j++)
				if (!seen[j] && pending_equal(p, &ents[j]))
				{
					seen[j] = true;
					break;
				}
			CHECKF(j < PMH_DBUCKET_SLOTS, "pending entry %016llx unknown",
				   (unsigned long long) p->hash);
		}
	}
	for (j = 4; j < PMH_DBUCKET_SLOTS; j++)
		CHECKF(seen[j], "D-bucket entry %d lost in the split", j);

	/* the rest goes in; the copies of ents[1] and of the segment entry are dups */
	{
		int			total = 0;
		int			dups = 0;

		memset(seen, 0, sizeof(seen));
		for (half = 0; half < 2; half++)
		{
			uint32		s = half ? newseg : 0;

			r = pmh_relocate(&tp.pool, &tp.cb, s, true, true,
							 released, &nrel, &ndup);
			CHECKF(r == PMH_INSERT_DONE, "relocate after the split (%u): %d", s,
				   (int) r);
			CHECK(tp.meta[s].npending == 0);
			total += nrel;
			dups += ndup;
			for (i = 0; i < nrel; i++)
			{
				for (j = 4; j < PMH_DBUCKET_SLOTS; j++)
					if (!seen[j] && released[i] == ents[j].logslot)
						break;
				if (CHECKF(j < PMH_DBUCKET_SLOTS, "released %u twice or unknown",
						   released[i]))
					seen[j] = true;
			}
		}
		CHECKF(total == 12 && dups == 2, "after the split: released %d, duplicates %d",
			   total, dups);
	}
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		check_found(&tp, &ents[i], 1, "after the split");
	verify_model(&tp, &m, 300, "no room, split");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * A full segment whose entries all share the next hash bit: pmh_relocate
 * answers OVERFLOW; after an overflow segment is added the rest goes there.
 */
void
test_relocate_no_room_overflow(void)
{
	TPool		tp;
	PmhPersistStats *st;
	Model		m;
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	int			nrel;
	int			ndup;
	int			i;
	uint32		ovf;
	PmhInsertResult r;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "noroomovf", 4))
		return;
	st = &tp.pool.stats;
	/* 1021 entries, all with bit 63 clear: bucket 63 has 3 free slots */
	fill_segment0(&tp, &m, PMH_SEG_SLOTS - 3, 1, 500);
	CHECK(tp.meta[0].occ[63] == 0x1fff);

	/* 16 with bit 63 clear; ents[1] is an entry of the segment */
	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 510, ents);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		ents[i] = pending_of(ents[i].hash >> 1, 510, (uint16) (i + 1));
	{
		const PmhEntry *e = &pmh_seg_entries(&tp.pool, 0)[100];

		ents[1] = pending_of(e->hash, pmh_tag_block(e->tag), pmh_tag_offset(e->tag));
	}
	pend_entries(&tp, 0, 0, 0, ents, PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		if (i != 1)
			model_add_pending(&m, &ents[i]);

	/*
	 * ents[0], [2], [3] fill bucket 63; ents[1] is released as a duplicate.
	 * Asked as a caller holding only the segment asks: no room, and no
	 * choice of remedy.
	 */
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, false, released, &nrel, &ndup);
	CHECKF(r == PMH_INSERT_FULL, "relocate into a skewed full segment: %d", (int) r);
	CHECKF(nrel == 4 && ndup == 1, "released %d, duplicates %d", nrel, ndup);
	for (i = 0; i < Min(nrel, 4); i++)
		CHECK(released[i] == (uint32) i);
	check_stats(st, 1, 3 * PMH_ENTRY_BYTES, 1, 0, 1, 1, "skewed, partial");
	CHECK(tp.meta[0].nlive == PMH_SEG_SLOTS && tp.meta[0].occ[63] == 0xffff);
	CHECK(slot_holds(&tp, 0, 63, 13, &ents[0]) && slot_holds(&tp, 0, 63, 14, &ents[2]) &&
		  slot_holds(&tp, 0, 63, 15, &ents[3]));
	CHECKF(tp.meta[0].npending == 12, "npending %u", tp.meta[0].npending);
	for (i = 0; i < 12; i++)
		CHECKF(pending_equal(&tp.meta[0].pending[i], &ents[4 + i]),
			   "pending[%d] is not D-bucket entry %d", i, 4 + i);

	/* asked again with a choice: an overflow segment; nothing written */
	memset(st, 0, sizeof(*st));
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECKF(r == PMH_INSERT_OVERFLOW && nrel == 0 && ndup == 0,
		   "relocate into a skewed full segment: %d", (int) r);
	CHECK(tp.meta[0].npending == 12);
	check_stats(st, 0, 0, 0, 0, 0, 0, "no room at all");

	ovf = tpool_add_overflow(&tp, 0);
	if (CHECK(ovf != PMH_NO_SEGMENT))
	{
		memset(st, 0, sizeof(*st));
		r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true,
						 released, &nrel, &ndup);
		CHECK(r == PMH_INSERT_DONE && nrel == 12 && ndup == 0);
		for (i = 0; i < nrel; i++)
			CHECK(released[i] == 4 + (uint32) i);
		check_stats(st, 1, 12 * PMH_ENTRY_BYTES, 3, 0, 1, 1, "into the overflow segment");
		CHECK(tp.meta[0].npending == 0);
		CHECKF(tp.meta[ovf].occ[0] == 0x0fff && tp.meta[ovf].nlive == 12,
			   "overflow segment: occ[0] %04x nlive %u", tp.meta[ovf].occ[0],
			   tp.meta[ovf].nlive);
		check_line_holds(&tp, ovf, 0, 0x0fff, &ents[4], "overflow segment");
		CHECK(chain_length(&tp, 0) == 1 && tp.splits == 0);
	}
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		check_found(&tp, &ents[i], 1, "after the overflow");
	verify_model(&tp, &m, 300, "no room, overflow");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Without check_segment, relocation does not probe the segment: an entry
 * it holds already is written again (only a crash can make that happen),
 * while an entry waiting twice in the D-bucket is still written once.
 */
void
test_relocate_unchecked(void)
{
	TPool		tp;
	PmhPending	seg[4];
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	uint64		tags[4];
	int			nrel;
	int			ndup;
	int			i;
	PmhInsertResult r;

	if (!tpool_create(&tp, "unchecked", 2))
		return;
	make_entries(&tp, 0, 4, 100, seg);
	for (i = 0; i < 4; i++)
		CHECK(tpool_insert(&tp, seg[i].hash, 100, (uint16) (i + 1)) == PMH_INSERT_DONE);

	make_entries(&tp, 0, PMH_DBUCKET_SLOTS, 200, ents);
	ents[2] = seg[1];			/* in the segment */
	ents[7] = ents[4];			/* waits twice */
	pend_entries(&tp, 0, 0, 0, ents, PMH_DBUCKET_SLOTS);

	r = pmh_relocate(&tp.pool, &tp.cb, 0, false, true, released, &nrel, &ndup);
	CHECKF(r == PMH_INSERT_DONE, "relocate: %d", (int) r);
	CHECKF(nrel == PMH_DBUCKET_SLOTS && ndup == 1, "released %d, duplicates %d",
		   nrel, ndup);
	CHECK(tp.meta[0].nlive == 4 + PMH_DBUCKET_SLOTS - 1);
	CHECK(pmh_lookup(&tp.pool, &tp.cb, 0, seg[1].hash, tags, 4) == 2);
	CHECK(pmh_lookup(&tp.pool, &tp.cb, 0, ents[4].hash, tags, 4) == 1);
	/* 15 written: bucket 0 has room for 12 only, so the first free line */
	CHECK(tp.meta[0].occ[0] == 0x000f && tp.meta[0].occ[1] == 0x7fff);
	tpool_close(&tp);
}
