/*-------------------------------------------------------------------------
 *
 * test_log.c
 *	  Unit tests of the backup log in the pool: finding a free line,
 *	  writing entries into log slots and clearing them, and log segments
 *	  (the log's extensions) through recovery.
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

/* word w of an array of free-line masks */
static uint64
mask_word(const void *arg, uint32 w)
{
	return ((const uint64 *) arg)[w];
}

/*
 * pmh_log_find_free: the first free line at or after the cursor, going
 * round; the cursor's word counts first from the cursor on and last before
 * it; nothing free, -1.  Checked against a walk over every line.
 */
void
test_log_find_free(void)
{
	uint64		m[4];
	uint32		nwords;
	int			round;

	memset(m, 0, sizeof(m));
	CHECK(pmh_log_find_free(mask_word, m, 4, 0) == -1);
	CHECK(pmh_log_find_free(mask_word, m, 4, 200) == -1);
	/* only line 5 free: found from before it, and around from after it */
	m[0] = UINT64CONST(1) << 5;
	CHECK(pmh_log_find_free(mask_word, m, 4, 0) == 5);
	CHECK(pmh_log_find_free(mask_word, m, 4, 5) == 5);
	CHECK(pmh_log_find_free(mask_word, m, 4, 6) == 5);
	CHECK(pmh_log_find_free(mask_word, m, 4, 255) == 5);
	CHECK(pmh_log_find_free(mask_word, m, 1, 63) == 5);
	/* lines 5 and 130: the cursor's side wins */
	m[2] = UINT64CONST(1) << 2;
	CHECK(pmh_log_find_free(mask_word, m, 4, 6) == 130);
	CHECK(pmh_log_find_free(mask_word, m, 4, 131) == 5);
	CHECK(pmh_log_find_free(mask_word, m, 3, 131) == 5);

	for (round = 0; round < 2000; round++)
	{
		uint32		cursor;
		int32		want = -1;
		uint32		i;

		nwords = 1 + (uint32) (rnd() % 4);
		for (i = 0; i < nwords; i++)
			m[i] = rnd() & rnd() & rnd() & rnd() & rnd() & rnd();
		cursor = (uint32) (rnd() % (nwords * 64));
		for (i = 0; i < nwords * 64 && want < 0; i++)
		{
			uint32		l = (cursor + i) % (nwords * 64);

			if ((m[l / 64] >> (l % 64)) & 1)
				want = (int32) l;
		}
		if (!CHECKF(pmh_log_find_free(mask_word, m, nwords, cursor) == want,
					"%u words, cursor %u: want %d", nwords, cursor, want))
			break;
	}
}

/*
 * pmh_log_clear_slots: the tags of the given slots become 0 (their hashes
 * and every other slot stay), one range per touched line from its first
 * cleared tag to its last, one fence; no slots, nothing at all.
 */
void
test_log_clear_slots(void)
{
	/* lines 5 (slots 9, 2, 14), 0 (slot 0), 700 (slot 15), in this order */
	static const uint32 slots[] = {
		5 * PMH_BUCKET_SLOTS + 9, 0, 5 * PMH_BUCKET_SLOTS + 2,
		700 * PMH_BUCKET_SLOTS + 15, 5 * PMH_BUCKET_SLOTS + 14,
	};
	static const uint32 lines[] = {0, 5, 700};
	TPool		tp;
	PmhPersistStats *st;
	HookLog		hl;
	int			i;
	int			k;

	if (!tpool_create(&tp, "logclear", 1))
		return;
	st = &tp.pool.stats;
	for (i = 0; i < (int) lengthof(lines); i++)
		for (k = 0; k < PMH_BUCKET_SLOTS; k++)
		{
			PmhEntry   *e = &pmh_log_line(&tp.pool, lines[i])[k];

			e->hash = 1000 * lines[i] + (uint64) k + 1;
			e->tag = pmh_tag_make(e->hash, lines[i], (uint16) (k + 1));
		}

	hook_start(&tp, &hl);
	CHECK(pmh_log_clear_slots(&tp.pool, slots, 0) == 0);
	check_stats(st, 0, 0, 0, 0, 0, 0, "clearing no slots");

	CHECK(pmh_log_clear_slots(&tp.pool, slots, lengthof(slots)) == 0);
	for (i = 0; i < (int) lengthof(lines); i++)
		for (k = 0; k < PMH_BUCKET_SLOTS; k++)
		{
			uint32		slot = lines[i] * PMH_BUCKET_SLOTS + (uint32) k;
			const PmhEntry *e = &pmh_log_line(&tp.pool, lines[i])[k];
			bool		cleared = false;
			size_t		j;

			for (j = 0; j < lengthof(slots); j++)
				cleared |= slots[j] == slot;
			CHECKF(e->hash == 1000 * lines[i] + (uint64) k + 1,
				   "line %u slot %d: hash changed", lines[i], k);
			CHECKF(cleared ? e->tag == 0 :
				   e->tag == pmh_tag_make(e->hash, lines[i], (uint16) (k + 1)),
				   "line %u slot %d: tag %016llx", lines[i], k,
				   (unsigned long long) e->tag);
		}
	/*
	 * line 5: tags of slots 2..14 (200 bytes, cache lines 0..3: whole);
	 * line 0: slot 0's tag; line 700: slot 15's tag
	 */
	check_stats(st, 3, 200 + 8 + 8, 4 + 1 + 1, 1, 2, 1, "clearing 5 slots");
	CHECKF(hl.nranges == 3 && hl.nfences == 1 &&
		   hl.off[0] == PMH_LOG_OFFSET + 5 * PMH_LINE_BYTES && hl.len[0] == 256 &&
		   hl.off[1] == PMH_LOG_OFFSET && hl.len[1] == 64 &&
		   hl.off[2] == PMH_LOG_OFFSET + 700 * PMH_LINE_BYTES + 192 &&
		   hl.len[2] == 64,
		   "hook: %d ranges, %d fences", hl.nranges, hl.nfences);
	hook_stop(&tp);
	tpool_close(&tp);
}

/*
 * pmh_log_entry_is_live, and pmh_log_write: the entries land in the given
 * slots (nothing else of the line changes) and cost one flush of exactly the
 * covered bytes and one fence.
 */
void
test_log_write(void)
{
	static const struct
	{
		uint32		line;
		int			first;
		int			n;
	}			cases[] = {
		{0, 0, 16}, {1, 0, 1}, {2, 3, 5}, {3, 15, 1}, {4, 4, 4},
		{5, 2, 12}, {6, 4, 8}, {PMH_LOG_LINES - 1, 0, 16},
	};
	TPool		tp;
	PmhPersistStats *st;
	HookLog		hl;
	PmhEntry	e;
	PmhEntry	ents[PMH_BUCKET_SLOTS];
	uint64		h;
	size_t		c;
	int			k;

	/* liveness of a log slot: marker, fingerprint copy, offset; no prefix */
	memset(&e, 0, sizeof(e));
	CHECK(!pmh_log_entry_is_live(&e));
	h = rnd() | 0x100;
	e.hash = h;
	CHECK(!pmh_log_entry_is_live(&e));	/* hash only */
	e.tag = pmh_tag_make(h ^ 0x01, 5, 7);
	CHECK(!pmh_log_entry_is_live(&e));	/* fingerprint copy mismatch */
	e.tag = pmh_tag_make(h ^ 0x80, 5, 7);
	CHECK(!pmh_log_entry_is_live(&e));
	e.tag = pmh_tag_make(h, 5, 0);
	CHECK(!pmh_log_entry_is_live(&e));	/* offset 0 */
	e.tag = pmh_tag_make(h, 5, 7) & ~(UINT64CONST(0xff) << 56);
	CHECK(!pmh_log_entry_is_live(&e));	/* no marker */
	e.tag = pmh_tag_make(h, 5, 7) ^ (UINT64CONST(0x01) << 56);
	CHECK(!pmh_log_entry_is_live(&e));	/* a wrong marker */
	e.tag = pmh_tag_make(h, 5, 7);
	CHECK(pmh_log_entry_is_live(&e));
	e.tag = pmh_tag_make(h, 0, 1);
	CHECK(pmh_log_entry_is_live(&e));
	e.tag = pmh_tag_make(h, UINT32_MAX, UINT16_MAX);
	CHECK(pmh_log_entry_is_live(&e));
	/* no prefix test: live in the log, dead in a segment of the other half */
	e.hash = h | (UINT64CONST(1) << 63);
	e.tag = pmh_tag_make(e.hash, 5, 7);
	CHECK(pmh_log_entry_is_live(&e));
	CHECK(!pmh_entry_is_live(&e, pmh_segword_make(1, 0)));
	CHECK(pmh_entry_is_live(&e, pmh_segword_make(1, 1)));

	if (!tpool_create(&tp, "logwrite", 1))
		return;
	st = &tp.pool.stats;
	for (c = 0; c < lengthof(cases); c++)
	{
		uint32		line = cases[c].line;
		int			first = cases[c].first;
		int			n = cases[c].n;
		const PmhEntry *l = pmh_log_line(&tp.pool, line);
		uint64		start = (uint64) (first * PMH_ENTRY_BYTES) &
			~(uint64) (PMH_CACHELINE_BYTES - 1);
		uint64		end = ((uint64) ((first + n) * PMH_ENTRY_BYTES) +
						   PMH_CACHELINE_BYTES - 1) &
			~(uint64) (PMH_CACHELINE_BYTES - 1);
		uint64		ncl = (end - start) / PMH_CACHELINE_BYTES;
		char		what[64];

		snprintf(what, sizeof(what), "log line %u slots %d..%d", line, first,
				 first + n - 1);
		for (k = 0; k < n; k++)
		{
			ents[k].hash = rnd();
			ents[k].tag = pmh_tag_make(ents[k].hash, 1000 + (uint32) c, (uint16) (k + 1));
		}
		hook_start(&tp, &hl);
		CHECKF(pmh_log_write(&tp.pool, line, first, ents, n) == 0, "%s: %m", what);
		check_stats(st, 1, (uint64) n * PMH_ENTRY_BYTES, ncl, ncl == 4, ncl < 4, 1,
					what);
		CHECKF(hl.nranges == 1 && hl.nfences == 1 &&
			   hl.off[0] == PMH_LOG_OFFSET + (uint64) line * PMH_LINE_BYTES + start &&
			   hl.len[0] == end - start && hl.len[1] == 0,
			   "%s: hook heard %d ranges (first at %llu, %zu bytes), %d fences",
			   what, hl.nranges, (unsigned long long) hl.off[0], hl.len[0],
			   hl.nfences);
		for (k = 0; k < PMH_BUCKET_SLOTS; k++)
		{
			if (k >= first && k < first + n)
				CHECKF(l[k].hash == ents[k - first].hash &&
					   l[k].tag == ents[k - first].tag &&
					   pmh_log_entry_is_live(&l[k]) &&
					   pmh_log_entry(&tp.pool, line * PMH_BUCKET_SLOTS + k) == &l[k],
					   "%s: slot %d", what, k);
			else
				CHECKF(l[k].hash == 0 && l[k].tag == 0 && !pmh_log_entry_is_live(&l[k]),
					   "%s: slot %d outside the write changed", what, k);
		}
	}

	/* appending to a line leaves its earlier slots alone */
	for (k = 0; k < 3; k++)
	{
		ents[k].hash = rnd();
		ents[k].tag = pmh_tag_make(ents[k].hash, 77, (uint16) (k + 1));
	}
	{
		PmhEntry	before[PMH_BUCKET_SLOTS];

		memcpy(before, pmh_log_line(&tp.pool, 2), sizeof(before));
		hook_start(&tp, &hl);
		CHECK(pmh_log_write(&tp.pool, 2, 8, ents, 3) == 0);
		check_stats(st, 1, 48, 1, 0, 1, 1, "append to log line 2");
		CHECK(memcmp(before, pmh_log_line(&tp.pool, 2), 8 * sizeof(PmhEntry)) == 0);
		CHECK(memcmp(&before[11], &pmh_log_line(&tp.pool, 2)[11],
					 5 * sizeof(PmhEntry)) == 0);
		for (k = 0; k < 3; k++)
			CHECK(pmh_log_line(&tp.pool, 2)[8 + k].tag == ents[k].tag);
	}

	/* nothing to write: no flush, no fence */
	hook_start(&tp, &hl);
	CHECK(pmh_log_write(&tp.pool, 7, 0, ents, 0) == 0);
	check_stats(st, 0, 0, 0, 0, 0, 0, "empty log write");
	/* the log is not a segment: segment 0 is still empty */
	CHECK(tp.meta[0].nlive == 0 && bucket_is_zero(&tp, 0, 0));
	hook_stop(&tp);
	tpool_close(&tp);
}

/* recover a copy of tp that is expected to be corrupt with this message */
static void
expect_corrupt_copy(TPool *tp, const char *name, const char *msg)
{
	TPool		img;
	PmhRecoveryResult res;

	if (!tpool_copy(&img, tp, name))
		return;
	CHECKF(tpool_recover(&img, &res, NULL, NULL) != 0 &&
		   strstr(res.error, msg) != NULL,
		   "%s: expected \"%s\", got \"%s\"", name, msg, res.error);
	tpool_close(&img);
}

/*
 * Log segments: adding one persists its header line only (its buckets are
 * zero already); its buckets are log lines PMH_LOG_LINES + 64 k on;
 * recovery keeps them (role PMH_SEG_LOG) with their entries, counts the
 * extensions, and refuses two segments for one extension or a gap.
 */
void
test_log_segments(void)
{
	TPool		tp;
	Model		m;
	PmhPersistStats *st;
	PmhRecoveryResult res;
	PmhSegRole *roles = NULL;
	uint32		exts[PMH_LOG_MAX_EXTS];
	PmhEntry	e[PMH_BUCKET_SLOTS];
	uint32		a;
	uint32		b;
	uint32		c;
	uint32		line = PMH_LOG_LINES + 5;
	uint64		w;
	int			i;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "logseg", 4))
		return;
	st = &tp.pool.stats;
	workload_random(&tp, &m, 2000, true);
	if (!CHECK(tpool_ensure_free(&tp, 3)))
		goto done;
	for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
		exts[i] = PMH_NO_SEGMENT;
	tp.pool.log_ext_segs = exts;

	/* the word */
	w = pmh_segword_make_log(7);
	CHECK(pmh_segword_is_valid(w) && pmh_segword_is_log(w) &&
		  pmh_segword_is_overflow(w) && pmh_segword_log_ext(w) == 7);
	CHECK(!pmh_segword_is_log(pmh_segword_make_overflow()));
	CHECK(!pmh_segword_is_log(pmh_segword_make(5, 3)));
	CHECK(!pmh_segword_is_valid(w ^ (UINT64CONST(1) << 20)));
	CHECK(pmh_segword_is_valid(pmh_segword_make_log(PMH_LOG_MAX_EXTS - 1)));

	/* extension 0 */
	a = tp.freesegs[--tp.nfree];
	memset(st, 0, sizeof(*st));
	CHECK(pmh_add_log_segment(&tp.pool, a, 0) == 0);
	CHECK(st->persists == 1 && st->bytes == PMH_LINE_BYTES && st->fences == 1);
	CHECK(pmh_seg_header(&tp.pool, a)->word == pmh_segword_make_log(0));
	pmh_meta_reset(&tp.meta[a], pmh_segword_make_log(0));
	tp.role[a] = T_LOG;
	exts[0] = a;

	/* its line 5 is log line PMH_LOG_LINES + 5 */
	CHECK(pmh_log_line(&tp.pool, line) == pmh_seg_entries(&tp.pool, a) + 5 * PMH_BUCKET_SLOTS);
	CHECK(pmh_log_entry(&tp.pool, line * PMH_BUCKET_SLOTS + 3) ==
		  pmh_seg_entries(&tp.pool, a) + 5 * PMH_BUCKET_SLOTS + 3);
	CHECK(pmh_log_line(&tp.pool, PMH_LOG_LINES - 1) ==
		  (PmhEntry *) (tp.pool.base + PMH_LOG_OFFSET) +
		  (PMH_LOG_LINES - 1) * PMH_BUCKET_SLOTS);
	for (i = 0; i < PMH_BUCKET_SLOTS; i++)
	{
		e[i].hash = rnd();
		e[i].tag = pmh_tag_make(e[i].hash, 77, (uint16) (i + 1));
	}
	CHECK(pmh_log_write(&tp.pool, line, 0, e, PMH_BUCKET_SLOTS) == 0);
	for (i = 0; i < PMH_BUCKET_SLOTS; i++)
		CHECK(pmh_log_entry_is_live(pmh_log_entry(&tp.pool,
												  line * PMH_BUCKET_SLOTS + i)));

	/* recovery keeps it, with its entries */
	CHECK(tpool_recover(&tp, &res, &roles, NULL) == 0);
	CHECKF(res.log_exts == 1 && res.free_zeroed == 0 && res.orphans_cleared == 0,
		   "log_exts %u free_zeroed %llu orphans %llu", res.log_exts,
		   (unsigned long long) res.free_zeroed,
		   (unsigned long long) res.orphans_cleared);
	if (roles)
		CHECK(roles[a] == PMH_SEG_LOG);
	free(roles);
	CHECK(tp.role[a] == T_LOG);
	CHECK(memcmp(pmh_log_line(&tp.pool, line), e, sizeof(e)) == 0);
	verify_model(&tp, &m, 200, "with a log segment");

	/* extension 2 without 1: a gap */
	if (!CHECK(tpool_ensure_free(&tp, 2)))
		goto done;
	b = tp.freesegs[--tp.nfree];
	CHECK(pmh_add_log_segment(&tp.pool, b, 2) == 0);
	expect_corrupt_copy(&tp, "logseg-gap", "log extension 1 is missing");

	/* as extension 1 it is fine; a second extension 1 is not */
	CHECK(pmh_add_log_segment(&tp.pool, b, 1) == 0);
	c = tp.freesegs[--tp.nfree];
	CHECK(pmh_add_log_segment(&tp.pool, c, 1) == 0);
	expect_corrupt_copy(&tp, "logseg-twice", "second log segment for extension 1");
	memset(pmh_seg_header(&tp.pool, c), 0, PMH_SEG_BYTES);
	CHECK(tpool_recover(&tp, &res, NULL, NULL) == 0);
	CHECK(res.log_exts == 2);

	/* a log segment is no overflow segment: a chain through it is broken */
	pmh_seg_header(&tp.pool, tp.dir[0])->ovf_next = (uint64) a + 1;
	expect_corrupt_copy(&tp, "logseg-chain", "overflow chain");
done:
	model_free(&m);
	tpool_close(&tp);
}
