/*-------------------------------------------------------------------------
 *
 * test_media.c
 *	  Unit tests of the media-traffic model (src/core/pmh_media.c): the device's
 *	  write-combining buffer of 256 B lines that turns flushed 64 B cache
 *	  lines into media bytes written and read.
 *
 * Every test drives the model with a short script of writes, reads,
 * drains and pool removals whose outcome was computed by hand from the
 * rules at the top of pmh_media.c.  The computation is written out in the
 * comment above each test, and the test asserts the exact value of every
 * counter, what the charge callback received (per step and per owner) and
 * the state of the buffer entries.
 *
 * Notation of the comments:
 *	- a line's state is "dirty/valid" as sub-line bit masks with sub-line 0
 *	  on the right: 0001 = bytes 0..63 of the line only;
 *	- the counters, always in this order: F = flushed_sublines, WH / WM =
 *	  write hits / misses, RH / RM = read hits / misses, WL =
 *	  whole_line_writes, PL = partial_line_writes, MW / MR = media bytes
 *	  written / read;
 *	- "lru n" is the model's clock stamped on an entry by its last access
 *	  (the clock starts at 0 and ticks once per line accessed);
 *	- "o2: 256/0" is one call of the charge callback for owner 2 with
 *	  256 bytes written and 0 bytes read.
 *
 * Output: "ok N - name" / "not ok N - name" per test (diagnostics on lines
 * starting with '#'), then a last line "N passed, N failed".  The exit
 * status is 0 iff no test failed.
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_media.h"
#include "unit_check.h"

#include <limits.h>
#include <stdarg.h>

/* the hand computations below assume this geometry */
StaticAssertDecl(PMH_MEDIA_LINE_BYTES == 256, "media line is not 256 B");
StaticAssertDecl(PMH_MEDIA_SUB_BYTES == 64, "sub-line is not 64 B");
StaticAssertDecl(PMH_MEDIA_ALL_SUBS == 0xF, "a line is not 4 sub-lines");

/* owners used by the tests are 0..MAX_OWNERS-1 */
#define MAX_OWNERS			8

/* charge calls remembered between two EXPECT_EVENTS */
#define MAX_EVENTS			64

/* ---------------------------------------------------------------------
 * The harness
 * ---------------------------------------------------------------------
 */

/* run one test and print its TAP line */
static void
run_test(const TestDef *t)
{
	unit_test_failures = 0;
	t->fn();
	ntests++;
	if (unit_test_failures == 0)
	{
		npassed++;
		printf("ok %d - %s\n", ntests, t->name);
	}
	else
	{
		nfailed++;
		printf("#   %d failed check(s)\n", unit_test_failures);
		printf("not ok %d - %s\n", ntests, t->name);
	}
	fflush(stdout);
}

/* ---------------------------------------------------------------------
 * The model under test and a recorder of its charges
 * ---------------------------------------------------------------------
 */

/* one call of the charge callback */
typedef struct ChargeEvent
{
	uint32		owner;
	uint64		written;
	uint64		read;
} ChargeEvent;

/* everything the charge callback received */
typedef struct ChargeLog
{
	int			ncalls;			/* calls since the test started */
	int			nbad_owner;		/* calls with owner >= MAX_OWNERS */
	uint64		written[MAX_OWNERS];	/* per-owner sums */
	uint64		read[MAX_OWNERS];
	int			nev;			/* calls since the last EXPECT_EVENTS */
	ChargeEvent ev[MAX_EVENTS];
} ChargeLog;

static PmhMediaModel g_model;
static PmhMediaModel g_snap;	/* copy taken around pmh_media_pending */
static ChargeLog g_log;

/* the charge callback: arg is the ChargeLog to fill */
static void
charge_cb(void *arg, uint32 owner, uint64 bytes_written, uint64 bytes_read)
{
	ChargeLog  *log = (ChargeLog *) arg;

	log->ncalls++;
	if (log->nev < MAX_EVENTS)
	{
		log->ev[log->nev].owner = owner;
		log->ev[log->nev].written = bytes_written;
		log->ev[log->nev].read = bytes_read;
	}
	log->nev++;
	if (owner >= MAX_OWNERS)
	{
		log->nbad_owner++;
		return;
	}
	log->written[owner] += bytes_written;
	log->read[owner] += bytes_read;
}

/* start a test: an empty model of nlines lines and an empty charge log */
static void
start(int nlines)
{
	/* garbage in every entry, to see that init really clears */
	memset(&g_model, 0x5A, sizeof(g_model));
	pmh_media_init(&g_model, nlines);
	memset(&g_log, 0, sizeof(g_log));
}

/* a flush of [offset, offset + len) of pool by owner */
static void
mwrite(uint64 pool, uint64 offset, size_t len, uint32 owner)
{
	pmh_media_write(&g_model, pool, offset, len, owner, charge_cb, &g_log);
}

/* a read of [offset, offset + len) of pool by owner */
static void
mread(uint64 pool, uint64 offset, size_t len, uint32 owner)
{
	pmh_media_read(&g_model, pool, offset, len, owner, charge_cb, &g_log);
}

/* drain the buffer */
static void
mdrain(void)
{
	pmh_media_drain(&g_model, charge_cb, &g_log);
}

/* the resident entry of (pool, line), or NULL */
static const PmhMediaLine *
find_entry(uint64 pool, uint64 line)
{
	int			i;

	for (i = 0; i < g_model.nlines; i++)
		if (g_model.lines[i].lru != 0 && g_model.lines[i].pool == pool &&
			g_model.lines[i].line == line)
			return &g_model.lines[i];
	return NULL;
}

/* number of resident entries */
static int
resident_count(void)
{
	int			i;
	int			n = 0;

	for (i = 0; i < g_model.nlines; i++)
		if (g_model.lines[i].lru != 0)
			n++;
	return n;
}

#define EXPECT_COUNTERS(what, f, wh, wm, rh, rm, wl, pl, mw, mr) \
	expect_counters(__FILE__, __LINE__, (what), (f), (wh), (wm), (rh), \
					(rm), (wl), (pl), (mw), (mr))

/*
 * Compare every counter with the expected values (in the column order
 * F WH WM RH RM WL PL MW MR), and check what follows from the rules: each
 * eviction writes 256 B, each partial one and each read miss reads 256 B,
 * and the charge callback received exactly the media traffic.
 */
static void
expect_counters(const char *file, int line, const char *what,
				uint64 f, uint64 wh, uint64 wm, uint64 rh, uint64 rm,
				uint64 wl, uint64 pl, uint64 mw, uint64 mr)
{
	const PmhMediaCounters *c = &g_model.total;
	uint64		sum_w = 0;
	uint64		sum_r = 0;
	int			i;

#define CMP(field, want) \
	check_at(c->field == (want), file, line, "%s: %s = %llu, expected %llu", \
			 what, #field, (unsigned long long) c->field, \
			 (unsigned long long) (want))
	CMP(flushed_sublines, f);
	CMP(write_hits, wh);
	CMP(write_misses, wm);
	CMP(read_hits, rh);
	CMP(read_misses, rm);
	CMP(whole_line_writes, wl);
	CMP(partial_line_writes, pl);
	CMP(media_bytes_written, mw);
	CMP(media_bytes_read, mr);
#undef CMP

	check_at(c->media_bytes_written ==
			 256 * (c->whole_line_writes + c->partial_line_writes),
			 file, line, "%s: media_bytes_written %llu != 256 * evictions",
			 what, (unsigned long long) c->media_bytes_written);
	check_at(c->media_bytes_read ==
			 256 * (c->partial_line_writes + c->read_misses),
			 file, line,
			 "%s: media_bytes_read %llu != 256 * (partial + read misses)",
			 what, (unsigned long long) c->media_bytes_read);

	for (i = 0; i < MAX_OWNERS; i++)
	{
		sum_w += g_log.written[i];
		sum_r += g_log.read[i];
	}
	check_at(g_log.nbad_owner == 0, file, line,
			 "%s: %d charge(s) to an unexpected owner", what,
			 g_log.nbad_owner);
	check_at(sum_w == c->media_bytes_written && sum_r == c->media_bytes_read,
			 file, line, "%s: charged %llu/%llu, media traffic %llu/%llu",
			 what, (unsigned long long) sum_w, (unsigned long long) sum_r,
			 (unsigned long long) c->media_bytes_written,
			 (unsigned long long) c->media_bytes_read);
}

#define EXPECT_CHARGED(owner, w, r) \
	expect_charged(__FILE__, __LINE__, (owner), (w), (r))

/* the sums the charge callback received for one owner so far */
static void
expect_charged(const char *file, int line, uint32 owner, uint64 w, uint64 r)
{
	check_at(g_log.written[owner] == w && g_log.read[owner] == r,
			 file, line, "owner %u charged %llu/%llu, expected %llu/%llu",
			 owner, (unsigned long long) g_log.written[owner],
			 (unsigned long long) g_log.read[owner],
			 (unsigned long long) w, (unsigned long long) r);
}

#define EXPECT_EVENTS(what, n, events) \
	expect_events(__FILE__, __LINE__, (what), (n), (events))

/*
 * The charge calls made since the last call are exactly the n given ones
 * (in any order); forget them.
 */
static void
expect_events(const char *file, int line, const char *what, int n,
			  const ChargeEvent *events)
{
	bool		used[MAX_EVENTS] = {0};
	int			i;
	int			j;

	if (!check_at(g_log.nev == n, file, line,
				  "%s: %d charge call(s), expected %d", what, g_log.nev, n))
	{
		for (i = 0; i < g_log.nev && i < MAX_EVENTS; i++)
			printf("#     got o%u: %llu/%llu\n", g_log.ev[i].owner,
				   (unsigned long long) g_log.ev[i].written,
				   (unsigned long long) g_log.ev[i].read);
	}
	else
	{
		for (i = 0; i < n; i++)
		{
			for (j = 0; j < n; j++)
				if (!used[j] && g_log.ev[j].owner == events[i].owner &&
					g_log.ev[j].written == events[i].written &&
					g_log.ev[j].read == events[i].read)
					break;
			if (check_at(j < n, file, line, "%s: no charge o%u: %llu/%llu",
						 what, events[i].owner,
						 (unsigned long long) events[i].written,
						 (unsigned long long) events[i].read))
				used[j] = true;
		}
	}
	g_log.nev = 0;
}

#define EXPECT_NO_EVENTS(what) EXPECT_EVENTS((what), 0, NULL)

#define EXPECT_ENTRY(pool, ln, dirty, valid, owner) \
	expect_entry(__FILE__, __LINE__, (pool), (ln), (dirty), (valid), (owner))

/* (pool, line) is resident with these dirty and valid masks and owner */
static void
expect_entry(const char *file, int line, uint64 pool, uint64 ln,
			 uint8 dirty, uint8 valid, uint32 owner)
{
	const PmhMediaLine *e = find_entry(pool, ln);

	if (!check_at(e != NULL, file, line, "pool %llu line %llu not resident",
				  (unsigned long long) pool, (unsigned long long) ln))
		return;
	check_at(e->dirty == dirty && e->valid == valid && e->owner == owner,
			 file, line,
			 "pool %llu line %llu: dirty/valid/owner %x/%x/%u, expected %x/%x/%u",
			 (unsigned long long) pool, (unsigned long long) ln,
			 e->dirty, e->valid, e->owner, dirty, valid, owner);
}

#define EXPECT_ABSENT(pool, ln) \
	check_at(find_entry((pool), (ln)) == NULL, __FILE__, __LINE__, \
			 "pool %llu line %llu still resident", \
			 (unsigned long long) (pool), (unsigned long long) (ln))

#define EXPECT_PENDING(filter, w, r) \
	expect_pending(__FILE__, __LINE__, (filter), (w), (r))

/*
 * pmh_media_pending for one owner (or PMH_MEDIA_ANY_OWNER) reports w bytes
 * written and r read, and leaves the model byte for byte as it was.
 */
static void
expect_pending(const char *file, int line, uint32 filter, uint64 w, uint64 r)
{
	uint64		got_w = 12345;
	uint64		got_r = 12345;
	int			ncalls = g_log.ncalls;

	memcpy(&g_snap, &g_model, sizeof(g_model));
	pmh_media_pending(&g_model, filter, &got_w, &got_r);
	check_at(got_w == w && got_r == r, file, line,
			 "pending(%s%u) = %llu/%llu, expected %llu/%llu",
			 filter == PMH_MEDIA_ANY_OWNER ? "any=" : "", filter,
			 (unsigned long long) got_w, (unsigned long long) got_r,
			 (unsigned long long) w, (unsigned long long) r);
	check_at(memcmp(&g_snap, &g_model, sizeof(g_model)) == 0, file, line,
			 "pmh_media_pending changed the model");
	check_at(g_log.ncalls == ncalls, file, line,
			 "pmh_media_pending charged someone");
}

/* ---------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------
 */

/*
 * One 256 B write covering line 2 of pool 1 ([512, 768)), then drain.
 *
 *	write o1 [512,768)  miss, line 2 enters 1111/1111   F4 WM1
 *	pending(any)        whole dirty line: 256/0
 *	drain               whole: o1: 256/0               WL1 MW256
 */
static void
test_whole_line(void)
{
	start(4);
	mwrite(1, 512, 256, 1);
	EXPECT_COUNTERS("after write", 4, 0, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 2, 0xF, 0xF, 1);
	CHECK(resident_count() == 1);
	EXPECT_NO_EVENTS("write");
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 0);

	mdrain();
	EXPECT_COUNTERS("after drain", 4, 0, 1, 0, 0, 1, 0, 256, 0);
	EXPECT_EVENTS("drain", 1, ((const ChargeEvent[]) {{1, 256, 0}}));
	EXPECT_CHARGED(1, 256, 0);
	CHECK(resident_count() == 0);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 0, 0);
}

/*
 * Four 64 B writes to line 0, out of order; they coalesce in the buffer.
 *
 *	write [128,192)  miss  0100/0100  F1 WH0 WM1  pending 256/256 (partial)
 *	write [0,64)     hit   0101/0101  F2 WH1 WM1  pending 256/256
 *	write [192,256)  hit   1101/1101  F3 WH2 WM1  pending 256/256
 *	write [64,128)   hit   1111/1111  F4 WH3 WM1  pending 256/0 (whole)
 *	drain            o1: 256/0        WL1 MW256 MR0
 */
static void
test_coalesce(void)
{
	start(4);
	mwrite(1, 128, 64, 1);
	EXPECT_COUNTERS("write 1", 1, 0, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0x4, 0x4, 1);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 256);
	mwrite(1, 0, 64, 1);
	EXPECT_COUNTERS("write 2", 2, 1, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0x5, 0x5, 1);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 256);
	mwrite(1, 192, 64, 1);
	EXPECT_COUNTERS("write 3", 3, 2, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0xD, 0xD, 1);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 256);
	mwrite(1, 64, 64, 1);
	EXPECT_COUNTERS("write 4", 4, 3, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0xF, 0xF, 1);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 0);
	CHECK(resident_count() == 1);
	EXPECT_NO_EVENTS("writes");

	mdrain();
	EXPECT_COUNTERS("drain", 4, 3, 1, 0, 0, 1, 0, 256, 0);
	EXPECT_EVENTS("drain", 1, ((const ChargeEvent[]) {{1, 256, 0}}));
	EXPECT_CHARGED(1, 256, 0);
}

/*
 * A single 64 B write, [64,128) = sub-line 1 of line 0, then drain: the
 * device reads the line first (read-modify-write).
 *
 *	write    miss  0010/0010          F1 WM1
 *	drain    partial: o3: 256/256     PL1 MW256 MR256
 */
static void
test_single_subline(void)
{
	start(4);
	mwrite(1, 64, 64, 3);
	EXPECT_COUNTERS("write", 1, 0, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0x2, 0x2, 3);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 256);
	EXPECT_PENDING(3, 256, 256);

	mdrain();
	EXPECT_COUNTERS("drain", 1, 0, 1, 0, 0, 0, 1, 256, 256);
	EXPECT_EVENTS("drain", 1, ((const ChargeEvent[]) {{3, 256, 256}}));
	EXPECT_CHARGED(3, 256, 256);
}

/*
 * Byte ranges that are not sub-line aligned touch every sub-line they
 * overlap (all in line 0):
 *
 *	write [63,65)    subs 0,1  miss  0011/0011  F2 WM1
 *	write [130,131)  sub 2     hit   0111/0111  F3 WH1
 *	write [255,256)  sub 3     hit   1111/1111  F4 WH2
 *	drain            whole, o1: 256/0           WL1 MW256
 */
static void
test_subline_masks(void)
{
	start(4);
	mwrite(1, 63, 2, 1);
	EXPECT_COUNTERS("write [63,65)", 2, 0, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0x3, 0x3, 1);
	mwrite(1, 130, 1, 1);
	EXPECT_COUNTERS("write [130,131)", 3, 1, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0x7, 0x7, 1);
	mwrite(1, 255, 1, 1);
	EXPECT_COUNTERS("write [255,256)", 4, 2, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0xF, 0xF, 1);
	CHECK(resident_count() == 1);

	mdrain();
	EXPECT_COUNTERS("drain", 4, 2, 1, 0, 0, 1, 0, 256, 0);
	EXPECT_EVENTS("drain", 1, ((const ChargeEvent[]) {{1, 256, 0}}));
}

/*
 * An unaligned 100 B write [200,300) straddles lines 0 and 1: sub-line 3 of
 * line 0 ([192,256)) and sub-line 0 of line 1 ([256,320)), one access (and
 * one miss) per line.  Then a 256 B write [128,384): subs 2,3 of line 0 and
 * subs 0,1 of line 1, hits on both.
 *
 *	write [200,300)  line 0 miss 1000/1000, line 1 miss 0001/0001  F2 WM2
 *	pending          both partial: 512/512
 *	write [128,384)  line 0 hit 1100/1100, line 1 hit 0011/0011
 *	                                                       F6 WH2 WM2
 *	drain            both partial: o2: 256/256 twice       PL2 MW512 MR512
 */
static void
test_straddle_two_lines(void)
{
	start(4);
	mwrite(1, 200, 100, 2);
	EXPECT_COUNTERS("write [200,300)", 2, 0, 2, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0x8, 0x8, 2);
	EXPECT_ENTRY(1, 1, 0x1, 0x1, 2);
	CHECK(resident_count() == 2);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 512, 512);

	mwrite(1, 128, 256, 2);
	EXPECT_COUNTERS("write [128,384)", 6, 2, 2, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0xC, 0xC, 2);
	EXPECT_ENTRY(1, 1, 0x3, 0x3, 2);
	EXPECT_NO_EVENTS("writes");

	mdrain();
	EXPECT_COUNTERS("drain", 6, 2, 2, 0, 0, 0, 2, 512, 512);
	EXPECT_EVENTS("drain", 2,
				  ((const ChargeEvent[]) {{2, 256, 256}, {2, 256, 256}}));
	EXPECT_CHARGED(2, 512, 512);
}

/*
 * A 384 B write [192,576) spans three lines: sub 3 of line 0, all of line
 * 1, sub 0 of line 2.  With nlines = 2 the write itself evicts its first
 * line: line 0 (lru 1) is the LRU when line 2 misses.
 *
 *	line 0  miss, 1000/1000, lru 1                 F1 WM1
 *	line 1  miss, 1111/1111, lru 2                 F5 WM2
 *	line 2  miss, buffer full: evict line 0, partial: o1: 256/256
 *	        0001/0001, lru 3                       F6 WM3 PL1 MW256 MR256
 *	drain   line 1 whole o1: 256/0, line 2 partial o1: 256/256
 *	                                               WL1 PL2 MW768 MR512
 */
static void
test_straddle_three_lines(void)
{
	start(2);
	mwrite(1, 192, 384, 1);
	EXPECT_COUNTERS("write", 6, 0, 3, 0, 0, 0, 1, 256, 256);
	EXPECT_EVENTS("write", 1, ((const ChargeEvent[]) {{1, 256, 256}}));
	EXPECT_ABSENT(1, 0);
	EXPECT_ENTRY(1, 1, 0xF, 0xF, 1);
	EXPECT_ENTRY(1, 2, 0x1, 0x1, 1);

	mdrain();
	EXPECT_COUNTERS("drain", 6, 0, 3, 0, 0, 1, 2, 768, 512);
	EXPECT_EVENTS("drain", 2,
				  ((const ChargeEvent[]) {{1, 256, 0}, {1, 256, 256}}));
	EXPECT_CHARGED(1, 768, 512);
}

/*
 * LRU eviction with nlines = 2 (pool 1; A = line 0, B = line 1, C = line 2,
 * D = line 3):
 *
 *	write o1 A whole      miss  A 1111/1111 lru 1   F4  WM1
 *	write o2 B [256,320)  miss  B 0001/0001 lru 2   F5  WM2
 *	write o1 A [0,64)     hit   A lru 3             F6  WH1 WM2
 *	write o3 C whole      miss; LRU is B (lru 2 < 3): B evicted, partial,
 *	                      o2: 256/256; C 1111/1111 lru 4
 *	                                        F10 WH1 WM3 PL1 MW256 MR256
 *	write o4 D whole      miss; LRU is A (lru 3 < 4): A evicted, whole,
 *	                      o1: 256/0; D lru 5
 *	                                        F14 WH1 WM4 WL1 PL1 MW512 MR256
 *	drain                 C, D whole: o3: 256/0, o4: 256/0
 *	                                        WL3 PL1 MW1024 MR256
 */
static void
test_lru_eviction(void)
{
	start(2);
	mwrite(1, 0, 256, 1);
	EXPECT_COUNTERS("write A", 4, 0, 1, 0, 0, 0, 0, 0, 0);
	mwrite(1, 256, 64, 2);
	EXPECT_COUNTERS("write B", 5, 0, 2, 0, 0, 0, 0, 0, 0);
	mwrite(1, 0, 64, 1);
	EXPECT_COUNTERS("touch A", 6, 1, 2, 0, 0, 0, 0, 0, 0);
	EXPECT_NO_EVENTS("A, B, A");

	mwrite(1, 512, 256, 3);
	EXPECT_COUNTERS("write C", 10, 1, 3, 0, 0, 0, 1, 256, 256);
	EXPECT_EVENTS("write C", 1, ((const ChargeEvent[]) {{2, 256, 256}}));
	EXPECT_ABSENT(1, 1);
	EXPECT_ENTRY(1, 0, 0xF, 0xF, 1);
	EXPECT_ENTRY(1, 2, 0xF, 0xF, 3);
	EXPECT_PENDING(1, 256, 0);
	EXPECT_PENDING(2, 0, 0);
	EXPECT_PENDING(3, 256, 0);

	mwrite(1, 768, 256, 4);
	EXPECT_COUNTERS("write D", 14, 1, 4, 0, 0, 1, 1, 512, 256);
	EXPECT_EVENTS("write D", 1, ((const ChargeEvent[]) {{1, 256, 0}}));
	EXPECT_ABSENT(1, 0);
	EXPECT_ENTRY(1, 2, 0xF, 0xF, 3);
	EXPECT_ENTRY(1, 3, 0xF, 0xF, 4);

	mdrain();
	EXPECT_COUNTERS("drain", 14, 1, 4, 0, 0, 3, 1, 1024, 256);
	EXPECT_EVENTS("drain", 2,
				  ((const ChargeEvent[]) {{3, 256, 0}, {4, 256, 0}}));
	EXPECT_CHARGED(1, 256, 0);
	EXPECT_CHARGED(2, 256, 256);
	EXPECT_CHARGED(3, 256, 0);
	EXPECT_CHARGED(4, 256, 0);
}

/*
 * Reads: a hit needs the read's sub-lines valid; a miss reads 256 B
 * (charged to the reader, even on a line someone else owns) and makes the
 * line wholly valid, so a later partly dirty eviction needs no RMW read.
 * nlines = 4, pool 1, line 0 unless said otherwise.
 *
 *	write o1 [0,64)       miss 0001/0001                   F1 WM1
 *	read o2 [0,64)        sub 0 valid: hit                 RH1
 *	read o2 [0,256)       subs 1..3 not valid: miss, o2: 0/256
 *	                      0001/1111, owner stays o1        RM1 MR256
 *	read o2 [0,256)       hit                              RH2
 *	pending               dirty|valid covers the line: whole, 256/0
 *	                      (o1: 256/0, o2: 0/0)
 *	read o2 [1000,1016)   line 3, not resident: miss, o2: 0/256, enters
 *	                      clean 0000/1111 owner o2         RM2 MR512
 *	pending               unchanged: a clean line costs nothing
 *	drain                 line 0 whole, o1: 256/0; line 3 silent
 *	                                                       WL1 MW256 MR512
 */
static void
test_read_hit_miss(void)
{
	start(4);
	mwrite(1, 0, 64, 1);
	EXPECT_COUNTERS("write", 1, 0, 1, 0, 0, 0, 0, 0, 0);
	mread(1, 0, 64, 2);
	EXPECT_COUNTERS("read sub 0", 1, 0, 1, 1, 0, 0, 0, 0, 0);
	EXPECT_NO_EVENTS("read hit");
	EXPECT_ENTRY(1, 0, 0x1, 0x1, 1);

	mread(1, 0, 256, 2);
	EXPECT_COUNTERS("read line", 1, 0, 1, 1, 1, 0, 0, 0, 256);
	EXPECT_EVENTS("read miss", 1, ((const ChargeEvent[]) {{2, 0, 256}}));
	EXPECT_ENTRY(1, 0, 0x1, 0xF, 1);

	mread(1, 0, 256, 2);
	EXPECT_COUNTERS("read line again", 1, 0, 1, 2, 1, 0, 0, 0, 256);
	EXPECT_NO_EVENTS("read hit");
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 0);
	EXPECT_PENDING(1, 256, 0);
	EXPECT_PENDING(2, 0, 0);

	mread(1, 1000, 16, 2);
	EXPECT_COUNTERS("read line 3", 1, 0, 1, 2, 2, 0, 0, 0, 512);
	EXPECT_EVENTS("read line 3", 1, ((const ChargeEvent[]) {{2, 0, 256}}));
	EXPECT_ENTRY(1, 3, 0x0, 0xF, 2);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 0);
	EXPECT_PENDING(2, 0, 0);

	mdrain();
	EXPECT_COUNTERS("drain", 1, 0, 1, 2, 2, 1, 0, 256, 512);
	EXPECT_EVENTS("drain", 1, ((const ChargeEvent[]) {{1, 256, 0}}));
	EXPECT_CHARGED(1, 256, 0);
	EXPECT_CHARGED(2, 0, 512);
	CHECK(resident_count() == 0);
}

/*
 * Clean lines brought in by reads leave silently, also when evicted by
 * LRU; a read hit refreshes the LRU position.  nlines = 2, pool 5, owner 1.
 *
 *	read [0,256)      line 0 miss, clean, lru 1, o1: 0/256      RM1 MR256
 *	read [256,320)    line 1 miss, clean, lru 2, o1: 0/256      RM2 MR512
 *	read [10,20)      line 0 hit, lru 3                         RH1
 *	read [512,513)    line 2 miss, o1: 0/256; LRU is line 1 (2 < 3):
 *	                  evicted silently                          RM3 MR768
 *	write [0,64)      line 0 hit (still resident): 0001/1111    F1 WH1
 *	drain             line 0 whole (no RMW), o1: 256/0; line 2 silent
 *	                                                  WL1 MW256 MR768
 */
static void
test_read_clean_eviction(void)
{
	start(2);
	mread(5, 0, 256, 1);
	mread(5, 256, 64, 1);
	EXPECT_COUNTERS("two reads", 0, 0, 0, 0, 2, 0, 0, 0, 512);
	mread(5, 10, 10, 1);
	EXPECT_COUNTERS("read hit", 0, 0, 0, 1, 2, 0, 0, 0, 512);
	mread(5, 512, 1, 1);
	EXPECT_COUNTERS("read line 2", 0, 0, 0, 1, 3, 0, 0, 0, 768);
	EXPECT_EVENTS("reads", 3,
				  ((const ChargeEvent[]) {{1, 0, 256}, {1, 0, 256},
				  {1, 0, 256}}));
	EXPECT_ABSENT(5, 1);
	EXPECT_ENTRY(5, 0, 0x0, 0xF, 1);
	EXPECT_ENTRY(5, 2, 0x0, 0xF, 1);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 0, 0);

	mwrite(5, 0, 64, 1);
	EXPECT_COUNTERS("write line 0", 1, 1, 0, 1, 3, 0, 0, 0, 768);
	EXPECT_ENTRY(5, 0, 0x1, 0xF, 1);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 256, 0);

	mdrain();
	EXPECT_COUNTERS("drain", 1, 1, 0, 1, 3, 1, 0, 256, 768);
	EXPECT_EVENTS("drain", 1, ((const ChargeEvent[]) {{1, 256, 0}}));
	EXPECT_CHARGED(1, 256, 768);
}

/*
 * pmh_media_pending with and without an owner filter; drain empties the
 * buffer and charges the owners.  nlines = 8, pool 1.
 *
 *	write o1 [0,256)      line 0 1111/1111 (whole)        F4  WM1
 *	write o1 [256,320)    line 1 0001/0001 (partial)      F5  WM2
 *	write o2 [1280,1408)  line 5 0011/0011 (partial)      F7  WM3
 *	read o3 [1792,2048)   line 7 clean, o3: 0/256         RM1 MR256
 *	pending any: 768/512; o1: 512/256; o2: 256/256; o3: 0/0; o6: 0/0
 *	drain   o1: 256/0 + 256/256, o2: 256/256, line 7 silent
 *	                                        WL1 PL2 MW768 MR768
 *	pending any: 0/0; a second drain charges nothing; line 0 is gone, so
 *	write o1 [0,64) is a miss                F8 WM4
 */
static void
test_pending_drain(void)
{
	int			i;

	start(8);
	mwrite(1, 0, 256, 1);
	mwrite(1, 256, 64, 1);
	mwrite(1, 1280, 128, 2);
	mread(1, 1792, 256, 3);
	EXPECT_COUNTERS("set-up", 7, 0, 3, 0, 1, 0, 0, 0, 256);
	EXPECT_EVENTS("set-up", 1, ((const ChargeEvent[]) {{3, 0, 256}}));

	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 768, 512);
	EXPECT_PENDING(1, 512, 256);
	EXPECT_PENDING(2, 256, 256);
	EXPECT_PENDING(3, 0, 0);
	EXPECT_PENDING(6, 0, 0);
	/* asking twice gives the same answer */
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 768, 512);
	EXPECT_COUNTERS("after pending", 7, 0, 3, 0, 1, 0, 0, 0, 256);
	CHECK(resident_count() == 4);

	mdrain();
	EXPECT_COUNTERS("drain", 7, 0, 3, 0, 1, 1, 2, 768, 768);
	EXPECT_EVENTS("drain", 3,
				  ((const ChargeEvent[]) {{1, 256, 0}, {1, 256, 256},
				  {2, 256, 256}}));
	EXPECT_CHARGED(1, 512, 256);
	EXPECT_CHARGED(2, 256, 256);
	EXPECT_CHARGED(3, 0, 256);
	CHECK(resident_count() == 0);
	for (i = 0; i < g_model.nlines; i++)
		CHECKF(g_model.lines[i].dirty == 0 && g_model.lines[i].valid == 0,
			   "entry %d not cleared by drain", i);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 0, 0);
	EXPECT_PENDING(1, 0, 0);

	mdrain();
	EXPECT_NO_EVENTS("second drain");
	EXPECT_COUNTERS("second drain", 7, 0, 3, 0, 1, 1, 2, 768, 768);

	mwrite(1, 0, 64, 1);
	EXPECT_COUNTERS("write after drain", 8, 0, 4, 0, 1, 1, 2, 768, 768);
	EXPECT_ENTRY(1, 0, 0x1, 0x1, 1);
}

/*
 * pmh_media_forget_pool drops one pool's lines without charging anyone
 * (the pool is deleted, its dirty data never reaches the media) and frees
 * their entries.  nlines = 4.
 *
 *	write o1 pool 1 [0,256)    p1 line 0 whole,   lru 1   F4  WM1
 *	write o2 pool 2 [0,64)     p2 line 0 partial, lru 2   F5  WM2
 *	write o1 pool 1 [256,320)  p1 line 1 partial, lru 3   F6  WM3
 *	write o2 pool 2 [768,1024) p2 line 3 whole,   lru 4   F10 WM4
 *	forget pool 9 (no lines)   nothing
 *	forget pool 1              p1 lines gone, no charge, counters unchanged;
 *	                           pending any: 512/256 (pool 2 only); o1: 0/0
 *	write o3 pool 3 [0,512)    p3 lines 0 and 1 whole, lru 5 and 6: they
 *	                           take the two freed entries, no eviction
 *	                                        F18 WM6
 *	write o1 pool 1 [0,64)     miss (forgotten); full: LRU is p2 line 0
 *	                           (lru 2), partial, o2: 256/256
 *	                                        F19 WM7 PL1 MW256 MR256
 *	drain  p2 line 3 o2: 256/0, p3 lines o3: 256/0 twice, p1 line 0
 *	       o1: 256/256                      WL3 PL2 MW1280 MR512
 */
static void
test_forget_pool(void)
{
	start(4);
	mwrite(1, 0, 256, 1);
	mwrite(2, 0, 64, 2);
	mwrite(1, 256, 64, 1);
	mwrite(2, 768, 256, 2);
	EXPECT_COUNTERS("set-up", 10, 0, 4, 0, 0, 0, 0, 0, 0);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 1024, 512);

	pmh_media_forget_pool(&g_model, 9);
	CHECK(resident_count() == 4);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 1024, 512);

	pmh_media_forget_pool(&g_model, 1);
	EXPECT_NO_EVENTS("forget");
	EXPECT_COUNTERS("forget", 10, 0, 4, 0, 0, 0, 0, 0, 0);
	CHECK(resident_count() == 2);
	EXPECT_ABSENT(1, 0);
	EXPECT_ABSENT(1, 1);
	EXPECT_ENTRY(2, 0, 0x1, 0x1, 2);
	EXPECT_ENTRY(2, 3, 0xF, 0xF, 2);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 512, 256);
	EXPECT_PENDING(1, 0, 0);
	EXPECT_PENDING(2, 512, 256);

	mwrite(3, 0, 512, 3);
	EXPECT_COUNTERS("pool 3", 18, 0, 6, 0, 0, 0, 0, 0, 0);
	EXPECT_NO_EVENTS("pool 3");
	CHECK(resident_count() == 4);

	mwrite(1, 0, 64, 1);
	EXPECT_COUNTERS("pool 1 again", 19, 0, 7, 0, 0, 0, 1, 256, 256);
	EXPECT_EVENTS("pool 1 again", 1, ((const ChargeEvent[]) {{2, 256, 256}}));
	EXPECT_ABSENT(2, 0);
	EXPECT_ENTRY(1, 0, 0x1, 0x1, 1);

	mdrain();
	EXPECT_COUNTERS("drain", 19, 0, 7, 0, 0, 3, 2, 1280, 512);
	EXPECT_EVENTS("drain", 4,
				  ((const ChargeEvent[]) {{2, 256, 0}, {3, 256, 0},
				  {3, 256, 0}, {1, 256, 256}}));
	EXPECT_CHARGED(1, 256, 256);
	EXPECT_CHARGED(2, 512, 256);
	EXPECT_CHARGED(3, 512, 0);
}

/*
 * A line belongs to its last writer, who pays for its eviction; reads do
 * not change the owner (the reader pays for the read only).  nlines = 2,
 * pool 1.
 *
 *	write o1 [0,256)     line 0 miss 1111/1111 o1           F4 WM1
 *	write o2 [64,128)    line 0 hit, owner now o2           F5 WH1 WM1
 *	                     pending o1: 0/0, o2: 256/0
 *	write o1 [256,320)   line 1 miss 0001/0001 o1           F6 WH1 WM2
 *	read o2 [256,512)    line 1 miss, o2: 0/256, 0001/1111, owner o1
 *	                                                        RM1 MR256
 *	                     pending o1: 256/0 (now whole), o2: 256/0
 *	drain                o2: 256/0, o1: 256/0               WL2 MW512 MR256
 *	totals               o1: 256/0, o2: 256/256
 */
static void
test_owner_charging(void)
{
	start(2);
	mwrite(1, 0, 256, 1);
	EXPECT_PENDING(1, 256, 0);
	mwrite(1, 64, 64, 2);
	EXPECT_COUNTERS("overwrite", 5, 1, 1, 0, 0, 0, 0, 0, 0);
	EXPECT_ENTRY(1, 0, 0xF, 0xF, 2);
	EXPECT_PENDING(1, 0, 0);
	EXPECT_PENDING(2, 256, 0);

	mwrite(1, 256, 64, 1);
	mread(1, 256, 256, 2);
	EXPECT_COUNTERS("read line 1", 6, 1, 2, 0, 1, 0, 0, 0, 256);
	EXPECT_EVENTS("read line 1", 1, ((const ChargeEvent[]) {{2, 0, 256}}));
	EXPECT_ENTRY(1, 1, 0x1, 0xF, 1);
	EXPECT_PENDING(1, 256, 0);
	EXPECT_PENDING(2, 256, 0);

	mdrain();
	EXPECT_COUNTERS("drain", 6, 1, 2, 0, 1, 2, 0, 512, 256);
	EXPECT_EVENTS("drain", 2,
				  ((const ChargeEvent[]) {{2, 256, 0}, {1, 256, 0}}));
	EXPECT_CHARGED(1, 256, 0);
	EXPECT_CHARGED(2, 256, 256);
}

/*
 * pmh_media_init clamps nlines to 1..PMH_MEDIA_MAX_LINES and empties the
 * model; the capacity is what evictions show:
 *	- nlines 0: capacity 1, writing line 1 after line 0 evicts line 0;
 *	- nlines huge: capacity PMH_MEDIA_MAX_LINES (1024): 1024 whole-line
 *	  writes of distinct lines evict nothing (F4096 WM1024), the 1025th
 *	  evicts line 0, the LRU (F4100 WM1025 WL1 MW256).
 */
static void
test_init_clamp(void)
{
	int			i;

	start(0);
	CHECK(g_model.nlines == 1);
	start(-7);
	CHECK(g_model.nlines == 1);
	start(INT_MIN);
	CHECK(g_model.nlines == 1);
	start(1);
	CHECK(g_model.nlines == 1);
	start(PMH_MEDIA_MAX_LINES + 1);
	CHECK(g_model.nlines == PMH_MEDIA_MAX_LINES);
	start(INT_MAX);
	CHECK(g_model.nlines == PMH_MEDIA_MAX_LINES);
	start(PMH_MEDIA_MAX_LINES);
	CHECK(g_model.nlines == PMH_MEDIA_MAX_LINES);
	start(PMH_MEDIA_DEFAULT_LINES);
	CHECK(g_model.nlines == PMH_MEDIA_DEFAULT_LINES);
	CHECK(g_model.clock == 0);
	CHECK(resident_count() == 0);
	EXPECT_COUNTERS("fresh", 0, 0, 0, 0, 0, 0, 0, 0, 0);

	/* capacity 1 */
	start(0);
	mwrite(1, 0, 256, 1);
	mwrite(1, 256, 256, 1);
	EXPECT_COUNTERS("nlines 0", 8, 0, 2, 0, 0, 1, 0, 256, 0);
	EXPECT_ABSENT(1, 0);
	EXPECT_ENTRY(1, 1, 0xF, 0xF, 1);

	/* re-init after use: empty again, nothing charged */
	pmh_media_init(&g_model, 3);
	CHECK(g_model.nlines == 3);
	CHECK(g_model.clock == 0);
	CHECK(resident_count() == 0);
	memset(&g_log, 0, sizeof(g_log));
	EXPECT_COUNTERS("re-init", 0, 0, 0, 0, 0, 0, 0, 0, 0);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 0, 0);

	/* capacity PMH_MEDIA_MAX_LINES */
	start(INT_MAX);
	for (i = 0; i < PMH_MEDIA_MAX_LINES; i++)
		mwrite(1, (uint64) i * 256, 256, 1);
	EXPECT_COUNTERS("1024 lines", 4096, 0, 1024, 0, 0, 0, 0, 0, 0);
	CHECK(resident_count() == PMH_MEDIA_MAX_LINES);
	EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, 1024 * 256, 0);
	mwrite(1, (uint64) PMH_MEDIA_MAX_LINES * 256, 256, 1);
	EXPECT_COUNTERS("1025 lines", 4100, 0, 1025, 0, 0, 1, 0, 256, 0);
	EXPECT_ABSENT(1, 0);
	EXPECT_ENTRY(1, 1, 0xF, 0xF, 1);
}

/*
 * Accesses of zero bytes do nothing (not even tick the clock); without a
 * charge callback the counters are kept all the same.  nlines = 1.
 *
 *	write/read len 0       nothing, clock 0
 *	write [0,64) no cb     miss                             F1 WM1
 *	read [512,576) no cb   line 2 miss, evicts line 0 partial
 *	                                               RM1 PL1 MW256 MR512
 *	drain no cb            line 2 clean: nothing
 */
static void
test_no_callback(void)
{
	PmhMediaCounters *c = &g_model.total;

	start(1);
	pmh_media_write(&g_model, 1, 100, 0, 1, charge_cb, &g_log);
	pmh_media_read(&g_model, 1, 100, 0, 1, charge_cb, &g_log);
	CHECK(g_model.clock == 0);
	CHECK(resident_count() == 0);
	EXPECT_COUNTERS("len 0", 0, 0, 0, 0, 0, 0, 0, 0, 0);

	pmh_media_write(&g_model, 1, 0, 64, 1, NULL, NULL);
	pmh_media_read(&g_model, 1, 512, 64, 1, NULL, NULL);
	pmh_media_drain(&g_model, NULL, NULL);
	CHECK(g_log.ncalls == 0);
	CHECK(c->flushed_sublines == 1);
	CHECK(c->write_hits == 0 && c->write_misses == 1);
	CHECK(c->read_hits == 0 && c->read_misses == 1);
	CHECK(c->whole_line_writes == 0 && c->partial_line_writes == 1);
	CHECK(c->media_bytes_written == 256);
	CHECK(c->media_bytes_read == 512);
	CHECK(resident_count() == 0);
}

/* one step of a scripted trace and the state expected after it */
typedef struct TraceStep
{
	char		op;				/* 'W' write, 'R' read, 'D' drain */
	uint32		owner;
	uint64		offset;
	uint32		len;
	uint64		c[9];			/* F WH WM RH RM WL PL MW MR after it */
	uint64		pend_w;			/* pending(any) after it */
	uint64		pend_r;
	int			nev;			/* charges made by the step */
	ChargeEvent ev[2];
} TraceStep;

/*
 * A longer trace: nlines = 2, pool 7, lines A = 0 ([0,256)), B = 1
 * ([256,512)), C = 2 ([512,768)), owners o1..o3.  State of the two entries
 * after each step; "pend" is pending(any) after the step.
 *
 *  #  op               what happens              entries after (dirty/valid
 *                                                   owner lru)
 *  1  W o1 [0,64)      A miss                    A 0001/0001 o1 1
 *  2  W o1 [64,192)    A hit, subs 1,2           A 0111/0111 o1 2
 *  3  W o2 [256,512)   B miss                    A; B 1111/1111 o2 3
 *  4  R o3 [0,64)      A hit (sub 0 valid)       A lru 4; B
 *  5  W o3 [512,576)   C miss; evict B (lru 3<4), whole, o2: 256/0
 *                                                A; C 0001/0001 o3 5
 *  6  R o1 [300,308)   B miss, o1: 0/256; evict A (lru 4<5), partial
 *                      (0111), o1: 256/256       C; B 0000/1111 o1 6
 *  7  W o2 [448,512)   B hit, sub 3              C; B 1000/1111 o2 7
 *  8  R o2 [512,768)   C miss (0001 valid), o2: 0/256
 *                                                C 0001/1111 o3 8; B
 *  9  W o1 [0,256)     A miss; evict B (lru 7<8), whole, o2: 256/0
 *                                                C; A 1111/1111 o1 9
 * 10  W o3 [600,601)   C hit, sub 1              C 0011/1111 o3 10; A
 * 11  R o1 [100,200)   A hit (subs 1..3 valid)   A lru 11; C
 * 12  W o2 [256,288)   B miss; evict C (lru 10<11), whole, o3: 256/0
 *                                                A; B 0001/0001 o2 12
 * 13  W o3 [320,384)   B hit, sub 1              A; B 0011/0011 o3 13
 * 14  W o1 [700,768)   C miss, subs 2,3; evict A (lru 11<13), whole,
 *                      o1: 256/0                 B; C 1100/1100 o1 14
 * 15  R o2 [0,256)     A miss, o2: 0/256; evict B (lru 13<14), partial,
 *                      o3: 256/256               C; A 0000/1111 o2 15
 * 16  W o3 [128,256)   A hit, subs 2,3           C; A 1100/1111 o3 16
 * 17  D                A whole, o3: 256/0; C partial, o1: 256/256
 *
 * Counters after each step (F WH WM RH RM WL PL MW MR) and pending:
 *
 *  #   F WH WM RH RM WL PL   MW   MR   pend
 *  1   1  0  1  0  0  0  0    0    0   256/256  (A partial)
 *  2   3  1  1  0  0  0  0    0    0   256/256
 *  3   7  1  2  0  0  0  0    0    0   512/256  (A partial, B whole)
 *  4   7  1  2  1  0  0  0    0    0   512/256
 *  5   8  1  3  1  0  1  0  256    0   512/512  (A, C partial)
 *  6   8  1  3  1  1  1  1  512  512   256/256  (C partial, B clean)
 *  7   9  2  3  1  1  1  1  512  512   512/256  (B whole: dirty|valid)
 *  8   9  2  3  1  2  1  1  512  768   512/0
 *  9  13  2  4  1  2  2  1  768  768   512/0
 * 10  14  3  4  1  2  2  1  768  768   512/0
 * 11  14  3  4  2  2  2  1  768  768   512/0
 * 12  15  3  5  2  2  3  1 1024  768   512/256  (A whole, B partial)
 * 13  16  4  5  2  2  3  1 1024  768   512/256
 * 14  18  4  6  2  2  4  1 1280  768   512/512  (B, C partial)
 * 15  18  4  6  2  3  4  2 1536 1280   256/256  (A clean, C partial)
 * 16  20  5  6  2  3  4  2 1536 1280   512/256  (A whole, C partial)
 * 17  20  5  6  2  3  5  3 2048 1536     0/0
 *
 * Also after step 8: pending o1 0/0, o2 256/0 (B), o3 256/0 (C); after
 * step 16: pending o1 256/256 (C), o2 0/0, o3 256/0 (A).
 * Charges in total: o1 768/768 (steps 6, 6, 14, 17), o2 512/512 (5, 8, 9,
 * 15), o3 768/256 (12, 15, 17); they add up to MW 2048 and MR 1536.
 */
static const TraceStep long_trace[] = {
	{'W', 1, 0, 64, {1, 0, 1, 0, 0, 0, 0, 0, 0}, 256, 256, 0, {{0}}},
	{'W', 1, 64, 128, {3, 1, 1, 0, 0, 0, 0, 0, 0}, 256, 256, 0, {{0}}},
	{'W', 2, 256, 256, {7, 1, 2, 0, 0, 0, 0, 0, 0}, 512, 256, 0, {{0}}},
	{'R', 3, 0, 64, {7, 1, 2, 1, 0, 0, 0, 0, 0}, 512, 256, 0, {{0}}},
	{'W', 3, 512, 64, {8, 1, 3, 1, 0, 1, 0, 256, 0}, 512, 512,
	1, {{2, 256, 0}}},
	{'R', 1, 300, 8, {8, 1, 3, 1, 1, 1, 1, 512, 512}, 256, 256,
	2, {{1, 0, 256}, {1, 256, 256}}},
	{'W', 2, 448, 64, {9, 2, 3, 1, 1, 1, 1, 512, 512}, 512, 256, 0, {{0}}},
	{'R', 2, 512, 256, {9, 2, 3, 1, 2, 1, 1, 512, 768}, 512, 0,
	1, {{2, 0, 256}}},
	{'W', 1, 0, 256, {13, 2, 4, 1, 2, 2, 1, 768, 768}, 512, 0,
	1, {{2, 256, 0}}},
	{'W', 3, 600, 1, {14, 3, 4, 1, 2, 2, 1, 768, 768}, 512, 0, 0, {{0}}},
	{'R', 1, 100, 100, {14, 3, 4, 2, 2, 2, 1, 768, 768}, 512, 0, 0, {{0}}},
	{'W', 2, 256, 32, {15, 3, 5, 2, 2, 3, 1, 1024, 768}, 512, 256,
	1, {{3, 256, 0}}},
	{'W', 3, 320, 64, {16, 4, 5, 2, 2, 3, 1, 1024, 768}, 512, 256, 0, {{0}}},
	{'W', 1, 700, 68, {18, 4, 6, 2, 2, 4, 1, 1280, 768}, 512, 512,
	1, {{1, 256, 0}}},
	{'R', 2, 0, 256, {18, 4, 6, 2, 3, 4, 2, 1536, 1280}, 256, 256,
	2, {{2, 0, 256}, {3, 256, 256}}},
	{'W', 3, 128, 128, {20, 5, 6, 2, 3, 4, 2, 1536, 1280}, 512, 256, 0, {{0}}},
	{'D', 0, 0, 0, {20, 5, 6, 2, 3, 5, 3, 2048, 1536}, 0, 0,
	2, {{3, 256, 0}, {1, 256, 256}}},
};

/* run steps [from, to) of a trace, checking the state after each */
static void
run_trace(const TraceStep *steps, int from, int to)
{
	int			i;
	char		what[32];

	for (i = from; i < to; i++)
	{
		const TraceStep *s = &steps[i];
		const uint64 *c = s->c;

		snprintf(what, sizeof(what), "step %d (%c)", i + 1, s->op);
		if (s->op == 'W')
			mwrite(7, s->offset, s->len, s->owner);
		else if (s->op == 'R')
			mread(7, s->offset, s->len, s->owner);
		else
			mdrain();
		EXPECT_COUNTERS(what, c[0], c[1], c[2], c[3], c[4], c[5], c[6],
						c[7], c[8]);
		EXPECT_EVENTS(what, s->nev, s->ev);
		EXPECT_PENDING(PMH_MEDIA_ANY_OWNER, s->pend_w, s->pend_r);
		/* only A until step 3, then the buffer stays full until the drain */
		CHECKF(resident_count() == (s->op == 'D' ? 0 : i < 2 ? 1 : 2),
			   "%s: %d resident", what, resident_count());
	}
}

/* the trace of the comment above long_trace */
static void
test_long_trace(void)
{
	start(2);
	run_trace(long_trace, 0, 8);
	EXPECT_ENTRY(7, 1, 0x8, 0xF, 2);
	EXPECT_ENTRY(7, 2, 0x1, 0xF, 3);
	EXPECT_PENDING(1, 0, 0);
	EXPECT_PENDING(2, 256, 0);
	EXPECT_PENDING(3, 256, 0);

	run_trace(long_trace, 8, 16);
	EXPECT_ENTRY(7, 0, 0xC, 0xF, 3);
	EXPECT_ENTRY(7, 2, 0xC, 0xC, 1);
	EXPECT_ABSENT(7, 1);
	EXPECT_PENDING(1, 256, 256);
	EXPECT_PENDING(2, 0, 0);
	EXPECT_PENDING(3, 256, 0);

	run_trace(long_trace, 16, lengthof(long_trace));
	EXPECT_CHARGED(1, 768, 768);
	EXPECT_CHARGED(2, 512, 512);
	EXPECT_CHARGED(3, 768, 256);
	/* 16 accesses of one line each; a drain does not tick */
	CHECK(g_model.clock == 16);
}

/* ---------------------------------------------------------------------
 * A reference of the rules, for random traces
 * ---------------------------------------------------------------------
 */

/* the reference's entries: the rules as written, with linear searches */
typedef struct RefLine
{
	uint64		pool;
	uint64		line;
	uint32		owner;
	uint8		dirty;
	uint8		valid;
	uint64		lru;			/* 0 = unused */
} RefLine;

typedef struct RefModel
{
	int			nlines;
	uint64		clock;
	PmhMediaCounters total;
	uint64		written[MAX_OWNERS];
	uint64		read[MAX_OWNERS];
	RefLine		lines[PMH_MEDIA_MAX_LINES];
} RefModel;

static RefModel g_ref;

/* the reference's eviction of entry l */
static void
ref_evict(RefLine *l)
{
	if (l->dirty != 0)
	{
		bool		whole = ((l->dirty | l->valid) & PMH_MEDIA_ALL_SUBS) ==
			PMH_MEDIA_ALL_SUBS;

		g_ref.total.media_bytes_written += PMH_MEDIA_LINE_BYTES;
		g_ref.written[l->owner] += PMH_MEDIA_LINE_BYTES;
		if (whole)
			g_ref.total.whole_line_writes++;
		else
		{
			g_ref.total.partial_line_writes++;
			g_ref.total.media_bytes_read += PMH_MEDIA_LINE_BYTES;
			g_ref.read[l->owner] += PMH_MEDIA_LINE_BYTES;
		}
	}
	memset(l, 0, sizeof(*l));
}

/* the reference's entry for (pool, line): found, else a new one */
static RefLine *
ref_entry(uint64 pool, uint64 line, bool *hit)
{
	RefLine    *victim = NULL;
	int			i;

	for (i = 0; i < g_ref.nlines; i++)
		if (g_ref.lines[i].lru != 0 && g_ref.lines[i].pool == pool &&
			g_ref.lines[i].line == line)
		{
			*hit = true;
			return &g_ref.lines[i];
		}
	*hit = false;
	for (i = 0; i < g_ref.nlines; i++)
	{
		if (g_ref.lines[i].lru == 0)
		{
			victim = &g_ref.lines[i];
			break;
		}
		if (victim == NULL || g_ref.lines[i].lru < victim->lru)
			victim = &g_ref.lines[i];
	}
	if (victim->lru != 0)
		ref_evict(victim);
	victim->pool = pool;
	victim->line = line;
	return victim;
}

/* the reference's write (read) of [offset, offset + len) */
static void
ref_access(bool write, uint64 pool, uint64 offset, size_t len, uint32 owner)
{
	uint64		ln;

	for (ln = offset / PMH_MEDIA_LINE_BYTES;
		 ln * PMH_MEDIA_LINE_BYTES < offset + len; ln++)
	{
		uint64		lo = ln * PMH_MEDIA_LINE_BYTES;
		uint64		first = (Max(offset, lo) - lo) / PMH_MEDIA_SUB_BYTES;
		uint64		last = (Min(offset + len, lo + PMH_MEDIA_LINE_BYTES) - 1 - lo) /
			PMH_MEDIA_SUB_BYTES;
		uint8		subs = (uint8) (((1 << (last + 1)) - 1) & ~((1 << first) - 1));
		bool		hit;
		RefLine    *l = ref_entry(pool, ln, &hit);

		if (write)
		{
			g_ref.total.flushed_sublines += last - first + 1;
			if (hit)
				g_ref.total.write_hits++;
			else
				g_ref.total.write_misses++;
			l->dirty |= subs;
			l->valid |= subs;
			l->owner = owner;
		}
		else if (hit && (l->valid & subs) == subs)
			g_ref.total.read_hits++;
		else
		{
			g_ref.total.read_misses++;
			g_ref.total.media_bytes_read += PMH_MEDIA_LINE_BYTES;
			g_ref.read[owner] += PMH_MEDIA_LINE_BYTES;
			if (!hit)
				l->owner = owner;
			l->valid = PMH_MEDIA_ALL_SUBS;
		}
		l->lru = ++g_ref.clock;
	}
}

/* does the model under test agree with the reference, entry by entry? */
static bool
ref_agrees(const char *what, int step)
{
	int			i;
	int			nref = 0;

	if (memcmp(&g_model.total, &g_ref.total, sizeof(g_ref.total)) != 0 ||
		g_model.clock != g_ref.clock ||
		memcmp(g_log.written, g_ref.written, sizeof(g_ref.written)) != 0 ||
		memcmp(g_log.read, g_ref.read, sizeof(g_ref.read)) != 0)
	{
		CHECKF(false, "%s, step %d: counters or charges differ", what, step);
		return false;
	}
	for (i = 0; i < g_ref.nlines; i++)
	{
		const RefLine *r = &g_ref.lines[i];
		const PmhMediaLine *l;

		if (r->lru == 0)
			continue;
		nref++;
		l = find_entry(r->pool, r->line);
		if (l == NULL || l->dirty != r->dirty || l->valid != r->valid ||
			l->owner != r->owner || l->lru != r->lru)
		{
			CHECKF(false, "%s, step %d: pool %llu line %llu differs", what, step,
					  (unsigned long long) r->pool,
					  (unsigned long long) r->line);
			return false;
		}
	}
	if (resident_count() != nref)
	{
		CHECKF(false, "%s, step %d: %d resident, reference %d", what, step,
				  resident_count(), nref);
		return false;
	}
	return true;
}

/*
 * Random traces against the reference: writes and reads over a few pools
 * (a span of lines a little larger than the buffer, so that hits, misses
 * and evictions all happen, and the index sees long probe runs), with the
 * odd drain and pool removal.  The model must agree with the reference
 * after every step, for buffers of 1 line to the largest.
 */
static void
test_random_vs_reference(void)
{
	static const int sizes[] = {1, 2, 3, 8, 64, PMH_MEDIA_MAX_LINES};
	uint64		seed = 0x5EED;
	size_t		z;

	for (z = 0; z < lengthof(sizes); z++)
	{
		int			nlines = sizes[z];
		uint64		span = (uint64) nlines + nlines / 2 + 2;
		int			step;
		char		what[32];

		snprintf(what, sizeof(what), "%d lines", nlines);
		start(nlines);
		memset(&g_ref, 0, sizeof(g_ref));
		g_ref.nlines = nlines;
		for (step = 0; step < 20000; step++)
		{
			uint64		r;
			uint64		pool;
			uint64		offset;
			size_t		len;
			uint32		owner;

			seed = seed * UINT64CONST(6364136223846793005) + 1442695040888963407;
			r = seed >> 16;
			pool = 1 + r % 3;
			offset = (r >> 2) % (span * PMH_MEDIA_LINE_BYTES);
			len = 1 + (r >> 24) % (2 * PMH_MEDIA_LINE_BYTES);
			owner = (uint32) ((r >> 40) % MAX_OWNERS);
			switch ((r >> 44) % 1000)
			{
				case 0:
					mdrain();
					for (int i = 0; i < g_ref.nlines; i++)
						if (g_ref.lines[i].lru != 0)
							ref_evict(&g_ref.lines[i]);
					break;
				case 1:
					pmh_media_forget_pool(&g_model, pool);
					for (int i = 0; i < g_ref.nlines; i++)
						if (g_ref.lines[i].lru != 0 &&
							g_ref.lines[i].pool == pool)
							memset(&g_ref.lines[i], 0, sizeof(RefLine));
					break;
				default:
					if ((r >> 54) % 3 == 0)
					{
						mread(pool, offset, len, owner);
						ref_access(false, pool, offset, len, owner);
					}
					else
					{
						mwrite(pool, offset, len, owner);
						ref_access(true, pool, offset, len, owner);
					}
			}
			if (!ref_agrees(what, step))
				break;
		}
	}
}

static const TestDef tests[] = {
	{"whole_line", test_whole_line},
	{"coalesce_four_writes", test_coalesce},
	{"single_subline_rmw", test_single_subline},
	{"subline_masks", test_subline_masks},
	{"straddle_two_lines", test_straddle_two_lines},
	{"straddle_three_lines", test_straddle_three_lines},
	{"lru_eviction", test_lru_eviction},
	{"read_hit_miss", test_read_hit_miss},
	{"read_clean_eviction", test_read_clean_eviction},
	{"pending_drain", test_pending_drain},
	{"forget_pool", test_forget_pool},
	{"owner_charging", test_owner_charging},
	{"init_clamp", test_init_clamp},
	{"no_callback", test_no_callback},
	{"long_trace", test_long_trace},
	{"random_vs_reference", test_random_vs_reference},
};

/* run every test and print the summary */
int
main(int argc, char **argv)
{
	int			i;

	if (argc > 1)
	{
		fprintf(stderr, "usage: %s\n", argv[0]);
		return 2;
	}
	printf("# test_media: media-traffic model, %d tests\n",
		   (int) lengthof(tests));
	for (i = 0; i < (int) lengthof(tests); i++)
		run_test(&tests[i]);
	printf("%d passed, %d failed\n", npassed, nfailed);
	return nfailed == 0 ? 0 : 1;
}
