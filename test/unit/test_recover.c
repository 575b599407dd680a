/*-------------------------------------------------------------------------
 *
 * test_recover.c
 *	  Unit tests of the directory and of recovery: the directory helpers,
 *	  the metadata rebuilt from a cleanly written pool, corrupt pools
 *	  refused with a reason, crashes around a relocation with the backup log
 *	  recovered as the server does, and free segments zeroed by recovery.
 *
 * Crash images are copies of the pool file changed the way the crash
 * would have left them; test_torn.c covers the states of single bucket
 * lines, test_split.c unpublished splits and unlinked overflow segments.
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

#include <errno.h>

/* directory helpers */
void
test_directory(void)
{
	uint32		d1[1] = {3};
	uint32		d2[2];
	uint32		old[2] = {5, 7};
	uint32		d4[4];
	uint32		d8[8];
	int			i;
	uint64		h = UINT64CONST(0xB123456789abcdef);

	pmh_dir_double(d1, 0, d2);
	CHECK(d2[0] == 3 && d2[1] == 3);
	pmh_dir_double(old, 1, d4);
	CHECK(d4[0] == 5 && d4[1] == 5 && d4[2] == 7 && d4[3] == 7);

	for (i = 0; i < 8; i++)
		d8[i] = 0;
	pmh_dir_assign(d8, 3, pmh_segword_make(1, 1), 9);
	for (i = 0; i < 8; i++)
		CHECKF(d8[i] == (i >= 4 ? 9u : 0u), "entry %d = %u", i, d8[i]);
	pmh_dir_assign(d8, 3, pmh_segword_make(3, 5), 2);
	CHECK(d8[5] == 2 && d8[4] == 9 && d8[6] == 9);
	pmh_dir_assign(d8, 3, pmh_segword_make(2, 0), 4);
	CHECK(d8[0] == 4 && d8[1] == 4 && d8[2] == 0);
	pmh_dir_assign(d8, 3, pmh_segword_make(0, 0), 1);
	for (i = 0; i < 8; i++)
		CHECK(d8[i] == 1);
	pmh_dir_assign(d1, 0, pmh_segword_make(0, 0), 6);
	CHECK(d1[0] == 6);

	CHECK(pmh_dir_index(h, 0) == 0);
	CHECK(pmh_dir_index(h, 1) == 1);
	CHECK(pmh_dir_index(h, 4) == 0xB);
	CHECK(pmh_dir_index(h, 12) == 0xB12);
	CHECK(pmh_dir_index(h, 48) == (h >> 16));
}

/*
 * Compare the metadata rebuilt by recovery with the live metadata: roles,
 * owners, words, links, occupancy, fingerprints of live slots, nlive, and
 * the directory.
 */
static void
compare_recovered(TPool *live, TPool *rec, const PmhSegRole *roles,
				  const uint32 *owner, const PmhRecoveryResult *res)
{
	uint32	   *live_owner = pg_malloc(live->nseg * sizeof(uint32));
	uint64		i;
	uint64		nprim;
	uint64		novf;
	int			b;

	tpool_count(live, &nprim, &novf);
	CHECKF(res->primaries == nprim && res->overflows == novf,
		   "recovery found %llu primaries, %llu overflow segments; live %llu, %llu",
		   (unsigned long long) res->primaries, (unsigned long long) res->overflows,
		   (unsigned long long) nprim, (unsigned long long) novf);
	CHECK(res->orphans_cleared == 0);
	CHECK(res->error[0] == '\0');
	CHECKF(res->global_depth == live->gd, "global depth %d, live %d",
		   res->global_depth, live->gd);
	if (!CHECK(rec->nseg == live->nseg && rec->gd == live->gd))
	{
		free(live_owner);
		return;
	}

	for (i = 0; i < live->nseg; i++)
		live_owner[i] = PMH_NO_SEGMENT;
	for (i = 0; i < live->nseg; i++)
	{
		uint32		s;

		if (live->role[i] != T_PRIMARY)
			continue;
		for (s = live->meta[i].ovf_next; s != PMH_NO_SEGMENT; s = live->meta[s].ovf_next)
			live_owner[s] = (uint32) i;
	}

	for (i = 0; i < live->nseg; i++)
	{
		PmhSegMeta *a = &live->meta[i];
		PmhSegMeta *c = &rec->meta[i];
		PmhSegRole	want = live->role[i] == T_PRIMARY ? PMH_SEG_PRIMARY :
			live->role[i] == T_OVERFLOW ? PMH_SEG_OVERFLOW : PMH_SEG_FREE;

		if (!CHECKF(roles[i] == want, "segment %llu: role %d, live %d",
					(unsigned long long) i, (int) roles[i], (int) want))
			continue;
		if (want == PMH_SEG_FREE)
			continue;
		if (want == PMH_SEG_OVERFLOW)
			CHECKF(owner[i] == live_owner[i], "overflow %llu: owner %u, live %u",
				   (unsigned long long) i, owner[i], live_owner[i]);
		CHECKF(a->word == c->word, "segment %llu: word %016llx, live %016llx",
			   (unsigned long long) i, (unsigned long long) c->word,
			   (unsigned long long) a->word);
		CHECKF(a->ovf_next == c->ovf_next, "segment %llu: ovf_next %u, live %u",
			   (unsigned long long) i, c->ovf_next, a->ovf_next);
		CHECKF(a->nlive == c->nlive, "segment %llu: nlive %u, live %u",
			   (unsigned long long) i, c->nlive, a->nlive);
		for (b = 0; b < PMH_SEG_BUCKETS; b++)
			CHECKF(a->occ[b] == c->occ[b],
				   "segment %llu bucket %d: occ %04x, live %04x",
				   (unsigned long long) i, b, c->occ[b], a->occ[b]);
		/* both fingerprint tables agree with the pool (ways may differ) */
		{
			char		msg[160];

			CHECKF(pmh_fpt_verify(&live->pool, a, (uint32) i, msg, sizeof(msg)),
				   "live: %s", msg);
			CHECKF(pmh_fpt_verify(&rec->pool, c, (uint32) i, msg, sizeof(msg)),
				   "recovered: %s", msg);
		}
	}
	for (i = 0; i < (UINT64CONST(1) << live->gd); i++)
		if (!CHECKF(live->dir[i] == rec->dir[i], "directory %llu: %u, live %u",
					(unsigned long long) i, rec->dir[i], live->dir[i]))
			break;
	CHECK(rec->nfree == live->nfree);
	free(live_owner);
}

/* recovery of a cleanly written pool rebuilds the same metadata */
void
test_recovery_clean(void)
{
	TPool		tp;
	TPool		img;
	Model		m;
	PmhRecoveryResult res;
	PmhSegRole *roles = NULL;
	uint32	   *owner = NULL;
	uint64		H = rnd();
	PmhPersistStats before;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "recover", 2))
		return;
	workload_random(&tp, &m, S->n_random, true);
	/* and a long chain, so that overflow segments take part */
	insert_dups(&tp, &m, H, 2200, 9000000, true);

	if (tpool_copy(&img, &tp, "recover-img"))
	{
		int			rc = tpool_recover(&img, &res, &roles, &owner);

		if (CHECKF(rc == 0, "pmh_recover: rc %d: %s", rc, res.error))
		{
			compare_recovered(&tp, &img, roles, owner, &res);
			verify_model(&img, &m, S->n_absent / 4, "recovered");
			/* the recovered pool takes more inserts like the live one */
			workload_random(&img, &m, S->n_random / 10, true);
			verify_model(&img, &m, 1000, "recovered + inserts");
		}
		free(roles);
		free(owner);
	}
	tpool_close(&img);

	/* recovery in place of a clean pool writes nothing */
	before = tp.pool.stats;
	{
		uint64		nseg = tp.nseg;
		PmhSegRole *r = pg_malloc(nseg * sizeof(PmhSegRole));
		uint32	   *o = pg_malloc(nseg * sizeof(uint32));
		uint64	   *sc = pg_malloc(PMH_RECOVER_SCRATCH(nseg) * sizeof(uint64));

		CHECK(pmh_recover(&tp.pool, r, o, sc, &res) == 0);
		CHECK(res.orphans_cleared == 0 && res.error[0] == '\0');
		CHECK(tp.pool.stats.persists == before.persists);
		free(r);
		free(o);
		free(sc);
	}
	model_free(&m);
	tpool_close(&tp);
}

/* a corruption applied to a copy must make pmh_recover fail with a reason */
static void
expect_corrupt(TPool *src, const char *what, int kind, uint32 a, uint32 b)
{
	TPool		img;
	PmhRecoveryResult res;
	PmhSegHeader *h;
	int			rc;

	if (!tpool_copy(&img, src, what))
		return;
	h = pmh_seg_header(&img.pool, a);
	switch (kind)
	{
		case 0:					/* a's word := b's word */
			h->word = pmh_seg_header(&img.pool, b)->word;
			h->ovf_next = 0;
			break;
		case 1:					/* a's word := 0 */
			h->word = 0;
			break;
		case 2:					/* a's link := segment b */
			h->ovf_next = (uint64) b + 1;
			break;
		case 3:					/* a's word := garbage (with the valid bit) */
			h->word = T_WORD_VALID | (rnd() >> 1);
			if (pmh_segword_is_valid(h->word))
				h->word ^= 1;
			break;
		case 4:					/* flip bit b of a's word */
			h->word ^= UINT64CONST(1) << b;
			break;
	}
	memset(&res, 0, sizeof(res));
	rc = tpool_recover(&img, &res, NULL, NULL);
	CHECKF(rc == -1 && res.error[0] != '\0',
		   "%s: pmh_recover returned %d with error \"%s\"", what, rc, res.error);
	if (res.error[0])
		printf("#     %s: \"%s\"\n", what, res.error);
	tpool_close(&img);
}

/* corrupt pools are refused, with an error message */
void
test_corruption(void)
{
	TPool		tp;
	Model		m;
	uint64		H = rnd();
	uint32		p;
	uint32		q;
	uint32		last;
	uint32		ovfseg;
	uint32		freeseg;
	uint64		i;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "corrupt", 4))
		return;
	workload_random(&tp, &m, S->n_small, true);
	insert_dups(&tp, &m, H, 1200, 100, true);
	CHECK(tpool_ensure_free(&tp, 1));
	freeseg = tp.freesegs[tp.nfree - 1];
	p = tp.dir[pmh_dir_index(H, tp.gd)];
	ovfseg = tp.meta[p].ovf_next;
	last = tp.dir[(UINT64CONST(1) << tp.gd) - 1];
	q = tp.dir[0] == p ? last : tp.dir[0];
	if (!CHECK(ovfseg != PMH_NO_SEGMENT && p != q && tp.gd >= 1))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	/* the untouched pool is fine */
	{
		TPool		img;
		PmhRecoveryResult res;

		if (tpool_copy(&img, &tp, "corrupt-none"))
		{
			CHECK(tpool_recover(&img, &res, NULL, NULL) == 0);
			CHECK(res.error[0] == '\0' && res.orphans_cleared == 0);
		}
		tpool_close(&img);
	}

	expect_corrupt(&tp, "two primaries with the same depth and prefix", 0, freeseg, p);
	expect_corrupt(&tp, "two primaries with the same depth and prefix (first)", 0,
				   freeseg, tp.dir[0]);
	expect_corrupt(&tp, "gap: a primary cleared", 1, p, 0);
	expect_corrupt(&tp, "gap at the end of the hash space", 1, last, 0);
	expect_corrupt(&tp, "gap at the start of the hash space", 1, tp.dir[0], 0);
	expect_corrupt(&tp, "chain pointer past the end", 2, p, (uint32) tp.nseg + 5);
	expect_corrupt(&tp, "chain pointer far past the end", 2, p, UINT32_MAX - 1);
	expect_corrupt(&tp, "chain pointer at a primary", 2, p, q);
	expect_corrupt(&tp, "chain pointer at itself", 2, p, p);
	expect_corrupt(&tp, "chain pointer at a free segment", 2, p, freeseg);
	expect_corrupt(&tp, "chain cycle", 2, ovfseg, ovfseg);
	expect_corrupt(&tp, "overflow segment on two chains", 2, q, ovfseg);
	expect_corrupt(&tp, "garbage word in a free segment", 3, freeseg, 0);
	expect_corrupt(&tp, "garbage word in a primary", 3, q, 0);
	for (i = 0; i < 64; i += 9)
		expect_corrupt(&tp, "bit flip in a primary's word", 4, p, (uint32) i);
	expect_corrupt(&tp, "bit flip in an overflow segment's word", 4, ovfseg, 40);
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Crashes around a relocation, with the backup log recovered as the server
 * does: after the relocation every entry is in its segment (nothing goes
 * back to a D-bucket); before it every entry comes back from the log; with
 * the line torn (slots complete, hash-only or as before) the complete ones
 * are live and the others come back from the log.  Every entry is found
 * exactly once in the end.
 */
void
test_relocate_recovery(void)
{
	TPool		tp;
	TPool		img;
	TPool		pre;
	Model		m;
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	PmhEntry	oldline[PMH_BUCKET_SLOTS];
	PmhRecoveryResult res;
	PmhSegRole *roles = NULL;
	uint32	   *owner = NULL;
	uint32		p = PMH_NO_SEGMENT;
	uint32		nlive;
	uint64		d;
	int			fb = -1;
	int			back;
	int			nrel;
	int			ndup;
	int			i;
	int			t;
	PmhInsertResult r;
	static const uint16 masks[] = {
		0x0000, 0x0001, 0x000f, 0x1111, 0x00ff, 0x7777, 0x3f1f, 0x7fff,
	};

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "relocrec", 4))
		return;
	/* one split: the upper half is filled from its first line on */
	workload_random(&tp, &m, 1500, true);
	CHECK(tp.splits > 0);

	/* a primary with a wholly free line */
	for (d = 0; d < (UINT64CONST(1) << tp.gd) && fb < 0; d++)
	{
		int			b;

		p = tp.dir[d];
		for (b = 0; b < PMH_SEG_BUCKETS && fb < 0; b++)
			if (tp.meta[p].occ[b] == 0)
				fb = b;
	}
	if (!CHECK(fb >= 0))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	nlive = tp.meta[p].nlive;
	memcpy(oldline, &pmh_seg_entries(&tp.pool, p)[fb * PMH_BUCKET_SLOTS],
		   sizeof(oldline));

	/* 16 entries of p in backup-log line 3, waiting in p's D-bucket */
	make_entries(&tp, p, PMH_DBUCKET_SLOTS, 600, ents);
	pend_entries(&tp, p, 3, 0, ents, PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
	{
		model_add_pending(&m, &ents[i]);
		CHECK(pmh_log_entry_is_live(pmh_log_entry(&tp.pool, ents[i].logslot)));
	}
	if (!tpool_copy(&pre, &tp, "relocrec-pre"))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}

	r = pmh_relocate(&tp.pool, &tp.cb, p, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == PMH_DBUCKET_SLOTS && ndup == 0);
	CHECKF(tp.meta[p].occ[fb] == 0xffff, "segment %u bucket %d: occ %04x", p, fb,
		   tp.meta[p].occ[fb]);
	check_line_holds(&tp, p, fb, 0xffff, ents, "relocated");

	/* a crash right after the relocation (released or not: nothing written) */
	if (tpool_copy(&img, &tp, "relocrec-after"))
	{
		int			rc = tpool_recover(&img, &res, &roles, &owner);

		if (CHECKF(rc == 0, "pmh_recover: rc %d: %s", rc, res.error))
		{
			compare_recovered(&tp, &img, roles, owner, &res);
			CHECK(res.free_zeroed == 0);
			CHECK(img.meta[p].nlive == nlive + PMH_DBUCKET_SLOTS);
			CHECK(img.meta[p].occ[fb] == 0xffff);
			for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
				check_found(&img, &ents[i], 1, "recovered after relocation");
			back = log_recover(&img);
			CHECKF(back == 0,
				   "log recovery after the relocation put %d entries back", back);
			verify_model(&img, &m, 200, "recovered after relocation");
		}
		free(roles);
		free(owner);
		roles = NULL;
		owner = NULL;
	}
	tpool_close(&img);

	/* a crash before it: the log brings all 16 back */
	if (CHECK(tpool_recover(&pre, &res, NULL, NULL) == 0))
	{
		int			ndup2;

		for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
			check_found(&pre, &ents[i], 0, "not yet relocated");
		back = log_recover(&pre);
		CHECKF(back == PMH_DBUCKET_SLOTS,
			   "log recovery before the relocation put %d entries back", back);
		CHECK(pre.meta[p].npending == PMH_DBUCKET_SLOTS);
		for (i = 0; i < (int) pre.meta[p].npending; i++)
			CHECK(pending_equal(&pre.meta[p].pending[i], &ents[i]));
		CHECK(tpool_relocate_all(&pre, &ndup2) == PMH_DBUCKET_SLOTS && ndup2 == 0);
		verify_model(&pre, &m, 200, "recovered before relocation");
	}
	tpool_close(&pre);

	/* torn relocations: each slot of the line complete, hash-only or old */
	for (t = 0; t < (int) lengthof(masks); t++)
	{
		uint16		mask = masks[t];
		int			ncomplete = __builtin_popcount(mask);
		PmhEntry   *line;
		char		what[64];

		snprintf(what, sizeof(what), "torn relocation %04x", mask);
		if (!tpool_copy(&img, &tp, "relocrec-torn"))
			break;
		line = &pmh_seg_entries(&img.pool, p)[fb * PMH_BUCKET_SLOTS];
		for (i = 0; i < PMH_BUCKET_SLOTS; i++)
		{
			if (mask & (1 << i))
				continue;
			if (i % 2 == 0)
				line[i].tag = 0;
			else
				line[i] = oldline[i];
		}
		if (CHECK(tpool_recover(&img, &res, NULL, NULL) == 0))
		{
			int			ndup2;

			CHECKF(img.meta[p].nlive == nlive + (uint32) ncomplete &&
				   img.meta[p].occ[fb] == mask,
				   "%s: nlive %u (expected %u), occ %04x", what,
				   img.meta[p].nlive, nlive + (uint32) ncomplete,
				   img.meta[p].occ[fb]);
			back = log_recover(&img);
			CHECKF(back == PMH_DBUCKET_SLOTS - ncomplete,
				   "%s: log recovery put %d entries back, expected %d", what,
				   back, PMH_DBUCKET_SLOTS - ncomplete);
			CHECK(tpool_relocate_all(&img, &ndup2) == back && ndup2 == 0);
			for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
				check_found(&img, &ents[i], 1, what);
			verify_model(&img, &m, 50, what);
		}
		tpool_close(&img);
	}
	verify_model(&tp, &m, 200, "relocation recovery, live");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Splits and new overflow segments flush only what they fill, trusting
 * that a free segment is zero on the media: recovery zeroes (and
 * persists) any free segment that is not, e.g. the unpublished half of a
 * split whose word never reached the media.
 */
void
test_recover_zeroes_free(void)
{
	TPool		tp;
	Model		m;
	PmhRecoveryResult res;
	uint32		f;
	uint64		i;
	char	   *segbytes;
	bool		zero = true;
	PmhPersistStats before;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "zero-free", 4))
		return;
	workload_random(&tp, &m, 3000, true);
	if (!CHECK(tpool_ensure_free(&tp, 2)))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	f = tp.freesegs[tp.nfree - 1];
	segbytes = (char *) pmh_seg_header(&tp.pool, f);
	/* a free segment (word 0) holding what a torn split left: live tags */
	memcpy(segbytes + PMH_LINE_BYTES,
		   pmh_seg_entries(&tp.pool, tp.dir[0]), 4 * PMH_LINE_BYTES);
	CHECK(tpool_recover(&tp, &res, NULL, NULL) == 0);
	CHECKF(res.free_zeroed == 1, "%llu free segments zeroed",
		   (unsigned long long) res.free_zeroed);
	for (i = 0; i < PMH_SEG_BYTES; i++)
		zero = zero && segbytes[i] == 0;
	CHECK(zero);
	verify_model(&tp, &m, 500, "after zeroing a free segment");

	/* a second recovery finds nothing to do */
	CHECK(tpool_recover(&tp, &res, NULL, NULL) == 0);
	CHECK(res.free_zeroed == 0);

	/*
	 * The server's way: recovery reads only the words and leaves the dirty
	 * free segment as it is; taking it zeroes it, once.
	 */
	memcpy(segbytes + PMH_LINE_BYTES,
		   pmh_seg_entries(&tp.pool, tp.dir[0]), 4 * PMH_LINE_BYTES);
	tp.lazy_free = true;
	CHECK(tpool_recover(&tp, &res, NULL, NULL) == 0);
	CHECK(res.free_zeroed == 0);
	CHECK(segbytes[PMH_LINE_BYTES] != 0 || segbytes[PMH_LINE_BYTES + 8] != 0);
	verify_model(&tp, &m, 500, "after recovery that left a dirty free segment");

	/*
	 * A failed persist leaves the mapping zeroed but the media maybe not:
	 * the retry must not take the segment for clean, and must persist all
	 * of it.
	 */
	tp.pool.fail_errno = EIO;
	before = tp.pool.stats;
	errno = 0;
	CHECK(pmh_prepare_free_segment(&tp.pool, f) == -1);
	CHECKF(errno == EIO, "errno %d after a failed zeroing", errno);
	CHECK(tp.pool.stats.persists == before.persists);
	CHECK(!pmh_segment_is_zero(&tp.pool, f));
	CHECK(pmh_prepare_free_segment(&tp.pool, f) == 1);
	CHECKF(tp.pool.stats.bytes - before.bytes == PMH_SEG_BYTES,
		   "the retry persisted %llu bytes",
		   (unsigned long long) (tp.pool.stats.bytes - before.bytes));
	/* an injected failure reaches a batch as well */
	tp.pool.fail_errno = EIO;
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_persist(&tp.pool, segbytes, PMH_LINE_BYTES) == 0);
	errno = 0;
	CHECK(pmh_batch_end(&tp.pool) == -1 && errno == EIO);
	CHECK(tp.pool.fail_errno == 0);
	zero = true;
	for (i = 0; i < PMH_SEG_BYTES; i++)
		zero = zero && segbytes[i] == 0;
	CHECK(zero);
	CHECK(pmh_prepare_free_segment(&tp.pool, f) == 0);
	/* and the workload goes on, taking free segments as it needs */
	workload_random(&tp, &m, 3000, true);
	verify_model(&tp, &m, 500, "after more work on a lazily recovered pool");
	model_free(&m);
	tpool_close(&tp);
}
