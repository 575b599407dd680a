/*-------------------------------------------------------------------------
 *
 * test_writepath.c
 *	  Unit tests of the core's write-path protocol (src/core/
 *	  pmh_writepath.c) and of the chain deletion VACUUM uses: line states
 *	  through reservations and releases, and every failure the protocol
 *	  reports -- a full log, a failed write, a failed clearing (fatal or
 *	  not), a VACUUM whose clearing fails, room that cannot be made.  The
 *	  crash simulator (test_crashsim.c) runs the same code under crashes;
 *	  these tests pin its bookkeeping and its errors down one by one.
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

#include <errno.h>

/* a pool of 4 segments whose log uses fixed_lines lines, no log segments */
static bool
wp_pool(TPool *tp, const char *name, uint32 fixed_lines)
{
	if (!tpool_create(tp, name, 4))
		return false;
	tlog_setup(tp, fixed_lines, 0);
	return true;
}

/* n entries of primary segment 0 (the only one), TIDs from block on */
static void
wp_entries(TPool *tp, int n, uint32 block, PmhEntry *out)
{
	PmhPending	p[PMH_BUCKET_SLOTS];
	int			i;

	make_entries(tp, 0, n, block, p);
	for (i = 0; i < n; i++)
	{
		out[i].hash = p[i].hash;
		out[i].tag = p[i].tag;
	}
}

/* the slots line * 16 + first .. + n - 1 */
static void
wp_slots(uint32 line, int first, int n, uint32 *slots)
{
	int			i;

	for (i = 0; i < n; i++)
		slots[i] = line * PMH_BUCKET_SLOTS + (uint32) (first + i);
}

/*
 * Reservations fill the writer's own line, then take the next free one
 * (zeroed in the mapping, marked zeroed); a line is free again only when
 * nobody owns it and nothing in it is pending; unused fixed lines are
 * never free.
 */
void
test_wp_reserve_release(void)
{
	TPool		tp;
	PmhWriter  *w;
	uint32		line;
	int			first;
	uint32		slots[PMH_BUCKET_SLOTS];

	if (!wp_pool(&tp, "wp-reserve", 2))
		return;
	w = tlog_writer(&tp);
	CHECK(pmh_wp_lines_in_use(w) == 0);
	CHECK(pmh_wp_line(w, 2)->owner == PMH_LOG_UNUSABLE);
	CHECK(!pmh_wp_line_marked_free(w, 2));
	CHECK(pmh_wp_line_marked_free(w, 0) && pmh_wp_line_marked_free(w, 1));

	/* a line taken: owned, zeroed in the mapping, the slots pending */
	pmh_log_line(&tp.pool, 0)[12].tag = 0x1234;
	CHECK(pmh_wp_reserve(w, 10, &line, &first) == PMH_WP_OK);
	CHECK(line == 0 && first == 0);
	CHECK(pmh_wp_line(w, 0)->pending == 0x03ff);
	CHECK(pmh_wp_line(w, 0)->owner == 1 && pmh_wp_line(w, 0)->zeroed);
	CHECK(pmh_log_line(&tp.pool, 0)[12].tag == 0);
	CHECK(!pmh_wp_line_marked_free(w, 0));
	CHECK(tp.log.pending == 10 && pmh_wp_lines_in_use(w) == 1);

	/* the rest of the line, then a new one */
	CHECK(pmh_wp_reserve(w, 6, &line, &first) == PMH_WP_OK);
	CHECK(line == 0 && first == 10 && tp.own_used == 16);
	CHECK(pmh_wp_line(w, 0)->pending == 0xffff);
	CHECK(pmh_wp_reserve(w, 1, &line, &first) == PMH_WP_OK);
	CHECK(line == 1 && first == 0);
	CHECK(pmh_wp_line(w, 0)->owner == -1 && !pmh_wp_line_marked_free(w, 0));
	CHECK(pmh_wp_lines_in_use(w) == 2);

	/* releasing line 0's slots frees it; line 1 stays owned */
	wp_slots(0, 0, PMH_BUCKET_SLOTS, slots);
	CHECK(pmh_wp_release(w, slots, PMH_BUCKET_SLOTS, false, false) == PMH_WP_OK);
	CHECK(pmh_wp_line(w, 0)->pending == 0 && pmh_wp_line_marked_free(w, 0));
	CHECK(tp.log.pending == 1 && pmh_wp_lines_in_use(w) == 1);

	/* no room for 16 in line 1: it is given up, line 0 taken again */
	CHECK(pmh_wp_reserve(w, PMH_BUCKET_SLOTS, &line, &first) == PMH_WP_OK);
	CHECK(line == 0 && first == 0);
	CHECK(pmh_wp_line(w, 1)->owner == -1 && pmh_wp_line(w, 1)->pending == 1);
	pmh_wp_close_full_line(w);
	CHECK(tp.own_line == -1 && pmh_wp_line(w, 0)->owner == -1);
	CHECK(tp.log.pending == 17 && pmh_wp_lines_in_use(w) == 2);
	tpool_close(&tp);
}

/*
 * With every line held by other writers and nothing to relocate, a
 * reservation gives up with PMH_WP_LOG_FULL (not fatal) after trying to
 * empty the log; once the other writer lets go, it succeeds.
 */
void
test_wp_log_full(void)
{
	TPool		tp;
	PmhWriter  *w;
	uint32		line;
	int			first;

	if (!wp_pool(&tp, "wp-full", 1))
		return;
	w = tlog_writer(&tp);
	pmh_wp_line(w, 0)->owner = 7;	/* another writer's line */
	pmh_wp_note_line(w, 0);
	tp.wp_expect_errors = true;
	CHECK(pmh_wp_reserve(w, 1, &line, &first) == PMH_WP_LOG_FULL);
	CHECK(tp.wp_errors == 1 && tp.wp_last_status == PMH_WP_LOG_FULL &&
		  !tp.wp_last_fatal);
	CHECK(tp.log.pending == 0 && tp.own_line == -1);
	pmh_wp_disown(w, 0);
	CHECK(pmh_wp_reserve(w, 1, &line, &first) == PMH_WP_OK && line == 0);
	CHECK(tp.wp_errors == 1);
	tpool_close(&tp);
}

/*
 * Lines owned by other writers (a session keeps its line until the line is
 * full) are not freed by relocating everything: a log with room to grow
 * then grows, even when it has lines enough for the table, rather than
 * report itself full.
 */
void
test_wp_log_grows_for_owners(void)
{
	TPool		tp;
	PmhWriter  *w;
	uint32		line;
	int			first;
	uint32		l;

	if (!tpool_create(&tp, "wp-owners", 4))
		return;
	tlog_setup(&tp, 128, 2);	/* more than 1.5 lines per primary + 64 */
	w = tlog_writer(&tp);
	for (l = 0; l < 128; l++)
	{
		pmh_wp_line(w, l)->owner = 7;
		pmh_wp_note_line(w, l);
	}
	CHECK(pmh_wp_reserve(w, 1, &line, &first) == PMH_WP_OK);
	CHECK(tp.log.nexts == 1 && line == PMH_LOG_LINES && first == 0);
	CHECK(tp.wp_errors == 0 && tp.log.pending == 1);
	tpool_close(&tp);
}

/*
 * A log write that cannot be persisted returns PMH_WP_IOERROR with errno,
 * not fatal, and gives its slots up; the next write works.  A failed
 * clearing of released slots is fatal or not as the caller says, and
 * leaves the slots pending.
 */
void
test_wp_write_failure(void)
{
	TPool		tp;
	PmhWriter  *w;
	PmhEntry	e[PMH_BUCKET_SLOTS];
	uint32		slots[PMH_BUCKET_SLOTS];
	uint32		line;
	int			first;

	if (!wp_pool(&tp, "wp-write", 2))
		return;
	w = tlog_writer(&tp);
	wp_entries(&tp, 5, 100, e);
	tp.wp_expect_errors = true;
	tp.pool.fail_errno = EIO;
	errno = 0;
	CHECK(pmh_wp_write(w, e, 5, &line, &first) == PMH_WP_IOERROR);
	CHECK(errno == EIO);
	CHECK(tp.wp_errors == 1 && tp.wp_last_status == PMH_WP_IOERROR &&
		  !tp.wp_last_fatal);
	CHECK(tp.log.pending == 0 && pmh_wp_line(w, 0)->pending == 0);

	CHECK(pmh_wp_write(w, e, 5, &line, &first) == PMH_WP_OK);
	CHECK(line == 0 && first == 5 && tp.log.pending == 5);
	CHECK(pmh_log_entry_is_live(pmh_log_entry(&tp.pool, line * PMH_BUCKET_SLOTS + 5)));

	/* clearing fails: fatal as asked, the slots stay pending */
	wp_slots(line, first, 5, slots);
	tp.pool.fail_errno = EIO;
	CHECK(pmh_wp_release(w, slots, 2, true, true) == PMH_WP_IOERROR);
	CHECK(tp.wp_errors == 2 && tp.wp_last_fatal);
	CHECK(tp.log.pending == 5);
	tp.pool.fail_errno = EIO;
	CHECK(pmh_wp_release(w, slots, 2, true, false) == PMH_WP_IOERROR);
	CHECK(tp.wp_errors == 3 && !tp.wp_last_fatal);
	CHECK(pmh_wp_release(w, slots, 2, true, false) == PMH_WP_OK);
	CHECK(tp.log.pending == 3);
	CHECK(pmh_log_entry(&tp.pool, slots[0])->tag == 0 &&
		  pmh_log_entry(&tp.pool, slots[2])->tag != 0);
	tpool_close(&tp);
}

/* pmh_wp_vacuum_pending's judge: the entries of blocks 400 on are dead */
static bool
wp_dead_block_400(uint64 tag, void *arg)
{
	return pmh_tag_block(tag) >= 400;
}

/*
 * VACUUM's start: when its clearing cannot be persisted, nothing is marked
 * (no VACUUM counts as running, reused lines still count as zeroed);
 * otherwise every released copy is cleared, reused lines lose their mark,
 * and releases clear their copies until VACUUM ends.  Dead entries of a
 * D-bucket go with their copies cleared.
 */
void
test_wp_vacuum(void)
{
	TPool		tp;
	PmhWriter  *w;
	PmhEntry	e[PMH_BUCKET_SLOTS];
	uint32		nremoved;
	uint32		nremaining;
	int			ndup;
	int			i;

	if (!wp_pool(&tp, "wp-vacuum", 2))
		return;
	w = tlog_writer(&tp);
	wp_entries(&tp, 8, 200, e);
	CHECK(pmh_wp_flush(w, e, 8) == PMH_WP_OK);
	CHECK(tp.meta[0].npending == 8 && tp.own_line == 0);
	/* relocated: the slots are released, their copies stay in the log */
	CHECK(tpool_relocate_all(&tp, &ndup) == 8 && ndup == 0);
	CHECK(tp.log.pending == 0 && pmh_log_line(&tp.pool, 0)[3].tag != 0);

	tp.wp_expect_errors = true;
	tp.pool.fail_errno = EIO;
	CHECK(pmh_wp_vacuum_begin(w) == PMH_WP_IOERROR);
	CHECK(tp.log.vacuum_active == 0 && pmh_wp_line(w, 0)->zeroed);
	CHECK(!tp.wp_last_fatal);

	CHECK(pmh_wp_vacuum_begin(w) == PMH_WP_OK);
	CHECK(tp.log.vacuum_active == 1 && !pmh_wp_line(w, 0)->zeroed);
	for (i = 0; i < 8; i++)
		CHECK(pmh_log_line(&tp.pool, 0)[i].tag == 0);

	/* while it runs, a relocation's release clears the copy */
	wp_entries(&tp, 4, 300, e);
	CHECK(pmh_wp_flush(w, e, 4) == PMH_WP_OK);
	CHECK(pmh_log_line(&tp.pool, 0)[8].tag != 0);
	CHECK(tpool_relocate_all(&tp, &ndup) == 4);
	CHECK(pmh_log_line(&tp.pool, 0)[8].tag == 0);

	/* dead D-bucket entries: removed, their copies cleared */
	wp_entries(&tp, 3, 400, e);
	CHECK(pmh_wp_flush(w, e, 3) == PMH_WP_OK);
	CHECK(tp.meta[0].npending == 3);
	pmh_wp_vacuum_end(w);
	CHECK(tp.log.vacuum_active == 0);
	CHECK(pmh_wp_vacuum_pending(w, 0, wp_dead_block_400, NULL, &nremoved,
								&nremaining) == PMH_WP_OK);
	CHECK(nremoved == 3 && nremaining == 0 && tp.meta[0].npending == 0);
	CHECK(tp.log.pending == 0);
	for (i = 12; i < 15; i++)
		CHECK(pmh_log_line(&tp.pool, 0)[i].tag == 0);
	tpool_close(&tp);
}

/*
 * Room that the caller cannot make (a split, an overflow segment or a log
 * segment refused) is PMH_WP_NO_ROOM, from pmh_wp_make_room and from a
 * reservation that needed the log to grow; a verdict that needs nothing
 * is not.
 */
void
test_wp_no_room(void)
{
	TPool		tp;
	PmhWriter  *w;
	uint32		line;
	int			first;

	if (!tpool_create(&tp, "wp-noroom", 4))
		return;
	tlog_setup(&tp, 1, 1);
	w = tlog_writer(&tp);
	tp.wp_deny_room = true;
	CHECK(pmh_wp_make_room(w, 0, PMH_INSERT_SPLIT) == PMH_WP_NO_ROOM);
	CHECK(pmh_wp_make_room(w, 0, PMH_INSERT_OVERFLOW) == PMH_WP_NO_ROOM);
	CHECK(pmh_wp_make_room(w, 0, PMH_INSERT_DONE) == PMH_WP_OK);

	/* the only line is another writer's; growing the log is refused */
	pmh_wp_line(w, 0)->owner = 7;
	pmh_wp_note_line(w, 0);
	CHECK(pmh_wp_reserve(w, 1, &line, &first) == PMH_WP_NO_ROOM);
	CHECK(tp.log.nexts == 0 && tp.log.pending == 0);

	/* allowed: a log segment, and its first line */
	tp.wp_deny_room = false;
	CHECK(pmh_wp_reserve(w, 1, &line, &first) == PMH_WP_OK);
	CHECK(tp.log.nexts == 1 && line == PMH_LOG_LINES && first == 0);
	CHECK(tp.role[tp.log_exts[0]] == T_LOG);
	tpool_close(&tp);
}

/*
 * pmh_delete_chain: the marked slots of a primary and its overflow chain
 * go in one batch with one fence, the fingerprint tables stay right, and a
 * failed persist is reported with errno.
 */
void
test_delete_chain(void)
{
	TPool		tp;
	Model		m;
	uint64		hash = rnd();
	uint16		dead[4 * PMH_SEG_BUCKETS];
	uint16		dead2[4 * PMH_SEG_BUCKETS];
	uint64		fences;
	uint64	   *tags = NULL;
	int			cap = 0;
	uint32		seg;
	int			nsegs = 0;
	int			ndead = 0;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "delchain", 4))
		return;
	/* one key, more rows than a segment holds: an overflow chain */
	insert_dups(&tp, &m, hash, PMH_SEG_SLOTS + 300, 10, false);
	seg = tp.dir[pmh_dir_index(hash, tp.gd)];
	if (!CHECK(tp.meta[seg].ovf_next != PMH_NO_SEGMENT))
		goto done;
	/* every other slot of each first bucket; then all of each last one */
	memset(dead, 0, sizeof(dead));
	memset(dead2, 0, sizeof(dead2));
	for (; seg != PMH_NO_SEGMENT && nsegs < 4; seg = tp.meta[seg].ovf_next)
	{
		dead[nsegs * PMH_SEG_BUCKETS] = tp.meta[seg].occ[0] & 0x5555;
		dead2[nsegs * PMH_SEG_BUCKETS + PMH_SEG_BUCKETS - 1] =
			tp.meta[seg].occ[PMH_SEG_BUCKETS - 1];
		ndead += __builtin_popcount(dead[nsegs * PMH_SEG_BUCKETS]) +
			__builtin_popcount(dead2[nsegs * PMH_SEG_BUCKETS + PMH_SEG_BUCKETS - 1]);
		nsegs++;
	}
	seg = tp.dir[pmh_dir_index(hash, tp.gd)];

	/* a failed persist: -1 with errno (the mapping says deleted) */
	tp.pool.fail_errno = EIO;
	errno = 0;
	CHECK(pmh_delete_chain(&tp.pool, &tp.cb, seg, dead, nsegs) == -1);
	CHECK(errno == EIO);

	/* the other slots: one batch, one fence */
	fences = tp.pool.stats.fences;
	CHECK(pmh_delete_chain(&tp.pool, &tp.cb, seg, dead2, nsegs) == 0);
	CHECKF(tp.pool.stats.fences == fences + 1, "%llu fences",
		   (unsigned long long) (tp.pool.stats.fences - fences));
	CHECK(tpool_lookup(&tp, hash, &tags, &cap) == PMH_SEG_SLOTS + 300 - ndead);
	(void) check_structure(&tp, "chain deletion");
	free(tags);
done:
	model_free(&m);
	tpool_close(&tp);
}
