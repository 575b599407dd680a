/*-------------------------------------------------------------------------
 *
 * test_core.c
 *	  Unit tests of the server-independent core of pmhash (src/pmh_core.c):
 *	  pool header, segment words, tags, the directory helpers, persistence
 *	  accounting and batches, insert and lookup with splits and overflow
 *	  chains, duplicates, delete, the backup log, D-buckets and their
 *	  relocation, and recovery after a clean shutdown, after simulated
 *	  crashes and after corruption.
 *
 * Pools are real files in a temporary directory (mkdtemp under $TMPDIR or
 * /tmp) mapped with libpmem's pmem_map_file, grown with ftruncate + remap
 * before an operation that may need more segments.  The volatile metadata
 * (one PmhSegMeta per segment, the directory with its global depth, the
 * free-segment list) is kept here the way the server keeps it in shared
 * memory, and every phase is checked against a reference model: the
 * multiset of (hash, TID) pairs that were inserted and not deleted.
 *
 * Crash images are made by copying the pool file's bytes into a new pool
 * file and undoing, in the copy, the one persistent store that had not
 * happened yet at the simulated crash (the publish word of a split, the
 * link word of a new overflow segment, the tag word of an entry).
 *
 * The suite runs twice:
 *	- "flush" pass, in this process, with PMEM_IS_PMEM_FORCE=1: pmem_map_file
 *	  reports is_pmem = 1 and pmh_persist flushes CPU cache lines; full size
 *	  (200k entries);
 *	- "msync" pass, in a re-executed child running concurrently, with
 *	  PMEM_IS_PMEM_FORCE=0: is_pmem = 0 and pmh_persist calls pmem_msync;
 *	  reduced size, since one msync costs ~0.3 ms on a disk file system.
 * libpmem reads PMEM_IS_PMEM_FORCE once, at its first is_pmem query, so the
 * two modes need two processes.  "--pass=flush" or "--pass=msync" runs one
 * pass only.
 *
 * Output: "ok N - name" / "not ok N - name" per test (diagnostics on lines
 * starting with '#'), then a last line "N passed, N failed".  The exit
 * status is 0 iff no test failed.  PMH_TEST_SEED overrides the random seed.
 *
 *-------------------------------------------------------------------------
 */
/* REG_EFL and friends of <ucontext.h>, for the store tracer */
#define _GNU_SOURCE 1

#include "test_core.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <libpmem.h>

/* ---------------------------------------------------------------------
 * The harness
 * ---------------------------------------------------------------------
 */

static const Scale scale_flush = {"flush", 1, 200000, 20000, 5000, 50000, 50000,
500, false};
static const Scale scale_msync = {"msync", 0, 3000, 1500, 1200, 1000, 3000,
100, true};

/* run one test and print its TAP line */
static void
run_test(const TestDef *t, int index)
{
	double		t0 = now_seconds();

	unit_test_failures = 0;
	g_rng = g_seed ^ ((uint64) index * UINT64CONST(0x100000001B3));
	t->fn();
	ntests++;
	if (unit_test_failures == 0)
	{
		npassed++;
		printf("ok %d - %s [%s]\n", ntests, t->name, S->pass);
	}
	else
	{
		nfailed++;
		printf("#   %d failed check(s)\n", unit_test_failures);
		printf("not ok %d - %s [%s]\n", ntests, t->name, S->pass);
	}
	printf("#   %s: %.2f s\n", t->name, now_seconds() - t0);
	fflush(stdout);
}

/* directory helpers */
static void
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
static void
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
static void
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

/* pmh_meta_load of a copy of segment segno, after a change to one slot */
static uint32
nlive_after(TPool *tp, uint32 segno, int slot, uint64 hash, uint64 tag,
			uint16 *occ_out)
{
	TPool		img;
	PmhSegMeta *m = pg_malloc(sizeof(PmhSegMeta));
	uint32		n;

	if (!tpool_copy(&img, tp, "torn"))
	{
		free(m);
		return UINT32_MAX;
	}
	pmh_seg_entries(&img.pool, segno)[slot].hash = hash;
	pmh_seg_entries(&img.pool, segno)[slot].tag = tag;
	pmh_meta_load(&img.pool, segno, tp->meta[segno].word, m);
	n = m->nlive;
	*occ_out = m->occ[slot / PMH_BUCKET_SLOTS];
	free(m);
	tpool_close(&img);
	return n;
}

/*
 * A primary segment holding entries and a never-used slot (hash and tag 0)
 * that is the first free slot of its bucket: segments fill from their first
 * bucket on, so the upper half of a split has one, the lower half may not.
 */
static uint32
primary_with_unused_slot(const TPool *tp)
{
	uint64		d;

	for (d = 0; d < (UINT64CONST(1) << tp->gd); d++)
	{
		uint32		p = tp->dir[d];
		int			b;

		if (tp->meta[p].nlive == 0)
			continue;
		for (b = 0; b < PMH_SEG_BUCKETS; b++)
		{
			uint32		freebits = (~(uint32) tp->meta[p].occ[b]) & 0xffff;
			const PmhEntry *e;

			if (freebits == 0)
				continue;
			e = &pmh_seg_entries(&tp->pool, p)[b * PMH_BUCKET_SLOTS +
											   __builtin_ctz(freebits)];
			if (e->hash == 0 && e->tag == 0)
				return p;
		}
	}
	return PMH_NO_SEGMENT;
}

/* torn entries are not counted by pmh_meta_load */
static void
test_torn_entries(void)
{
	TPool		tp;
	Model		m;
	uint32		p;
	uint64		w;
	int			slot = -1;
	int			dslot = -1;
	int			k;
	uint64		h;
	uint64		old_hash;
	uint32		nlive;
	uint16		occ;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "torn", 4))
		return;
	workload_random(&tp, &m, 3000, true);
	p = primary_with_unused_slot(&tp);
	if (!CHECK(p != PMH_NO_SEGMENT))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	w = tp.meta[p].word;
	nlive = tp.meta[p].nlive;

	/* a never-used slot (tag 0) and a live slot to delete */
	for (k = 0; k < PMH_SEG_SLOTS; k++)
	{
		const PmhEntry *e = &pmh_seg_entries(&tp.pool, p)[k];
		bool		occupied = pmh_meta_is_live(&tp.meta[p], k);

		if (!occupied && e->hash == 0 && e->tag == 0 && slot < 0)
			slot = k;
		if (occupied && dslot < 0)
			dslot = k;
	}
	if (!CHECK(slot >= 0 && dslot >= 0))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	h = (rnd() >> pmh_segword_depth(w) >> 1) |
		(pmh_segword_depth(w) ? pmh_segword_prefix(w) << (64 - pmh_segword_depth(w)) : 0);
	CHECK(pmh_hash_in_segment(h, w));

	/* hash written, tag not (still 0) */
	CHECK(nlive_after(&tp, p, slot, h, 0, &occ) == nlive);
	CHECK((occ & (1 << (slot % PMH_BUCKET_SLOTS))) == 0);
	/* a tag whose fingerprint copy does not match the hash */
	CHECK(nlive_after(&tp, p, slot, h, pmh_tag_make(h ^ 0x5a, 1, 1), &occ) == nlive);
	/* a tag without the live marker */
	CHECK(nlive_after(&tp, p, slot, h,
					  pmh_tag_make(h, 1, 1) & ~(UINT64CONST(0xff) << 56), &occ) == nlive);
	/* a tag with offset 0 */
	CHECK(nlive_after(&tp, p, slot, h, pmh_tag_make(h, 1, 0), &occ) == nlive);
	/* the complete entry is counted: the probe itself is sound */
	CHECK(nlive_after(&tp, p, slot, h, pmh_tag_make(h, 1, 1), &occ) == nlive + 1);
	CHECK((occ & (1 << (slot % PMH_BUCKET_SLOTS))) != 0);

	/*
	 * A deleted slot (tag 0) being reused: new hash without tag, and old
	 * hash with the new tag (fingerprints differ).
	 */
	CHECK(pmh_delete_slots(&tp.pool, &tp.meta[p], p, dslot / PMH_BUCKET_SLOTS,
						   (uint16) (1 << (dslot % PMH_BUCKET_SLOTS))) == 0);
	nlive = tp.meta[p].nlive;
	old_hash = pmh_seg_entries(&tp.pool, p)[dslot].hash;
	h = (old_hash & ~UINT64CONST(0xffff)) | (rnd() & 0xffff);
	if (pmh_fingerprint(h) == pmh_fingerprint(old_hash))
		h ^= 1;
	CHECK(nlive_after(&tp, p, dslot, h, 0, &occ) == nlive);
	CHECK(nlive_after(&tp, p, dslot, old_hash, pmh_tag_make(h, 3, 3), &occ) == nlive);
	model_free(&m);
	tpool_close(&tp);
}

/* ---------------------------------------------------------------------
 * Store tracing: every intermediate state of one bucket line during an
 * operation.  The line's page is made read-only; a store faults, the
 * SIGSEGV handler makes the page writable and sets the trap flag, the store
 * executes, and the SIGTRAP handler snapshots the line and protects the
 * page again.  Under x86-TSO the contents of one cache line that can reach
 * the media (by write-back at any moment, or by msync of the page) are
 * always one of these snapshots, so each is a possible crash image.
 * ---------------------------------------------------------------------
 */
#if defined(__x86_64__) && defined(__linux__)
#define HAVE_STORE_TRACE 1
#define MAX_TRACE		64
#define X86_EFLAGS_TF	0x100

typedef struct StoreTrace
{
	char	   *page;
	size_t		pagesize;
	const PmhEntry *line;		/* the watched bucket (16 entries) */
	PmhEntry	states[MAX_TRACE][PMH_BUCKET_SLOTS];
	int			nstates;
	int			faults;
	volatile sig_atomic_t active;
} StoreTrace;

static StoreTrace trace;

/* a store to the protected page: let it run for one instruction */
static void
trace_segv(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = (ucontext_t *) ucv;
	char	   *a = (char *) si->si_addr;

	if (!trace.active || a < trace.page || a >= trace.page + trace.pagesize)
	{
		/* not ours: die with the default action on return */
		signal(SIGSEGV, SIG_DFL);
		return;
	}
	trace.faults++;
	mprotect(trace.page, trace.pagesize, PROT_READ | PROT_WRITE);
	uc->uc_mcontext.gregs[REG_EFL] |= X86_EFLAGS_TF;
}

/* after the store: snapshot the line, protect the page again */
static void
trace_trap(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = (ucontext_t *) ucv;

	uc->uc_mcontext.gregs[REG_EFL] &= ~(greg_t) X86_EFLAGS_TF;
	if (trace.nstates < MAX_TRACE)
		memcpy(trace.states[trace.nstates++], trace.line,
			   sizeof(PmhEntry) * PMH_BUCKET_SLOTS);
	if (trace.active)
		mprotect(trace.page, trace.pagesize, PROT_READ);
}

/* start tracing the stores to one bucket line of a pool */
static bool
trace_start(const PmhEntry *line, struct sigaction *old_segv,
			struct sigaction *old_trap)
{
	struct sigaction sa;

	memset(&trace, 0, sizeof(trace));
	trace.pagesize = (size_t) sysconf(_SC_PAGESIZE);
	trace.page = (char *) ((uintptr_t) line & ~(uintptr_t) (trace.pagesize - 1));
	trace.line = line;
	memcpy(trace.states[0], line, sizeof(PmhEntry) * PMH_BUCKET_SLOTS);
	trace.nstates = 1;

	memset(&sa, 0, sizeof(sa));
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sa.sa_sigaction = trace_segv;
	if (!CHECKF(sigaction(SIGSEGV, &sa, old_segv) == 0, "sigaction: %m"))
		return false;
	sa.sa_sigaction = trace_trap;
	if (!CHECKF(sigaction(SIGTRAP, &sa, old_trap) == 0, "sigaction: %m"))
		return false;
	trace.active = 1;
	return CHECKF(mprotect(trace.page, trace.pagesize, PROT_READ) == 0,
				  "mprotect: %m");
}

/* stop tracing; the states are in trace.states[0 .. nstates) */
static void
trace_stop(const struct sigaction *old_segv, const struct sigaction *old_trap)
{
	trace.active = 0;
	CHECKF(mprotect(trace.page, trace.pagesize, PROT_READ | PROT_WRITE) == 0,
		   "mprotect: %m");
	sigaction(SIGSEGV, old_segv, NULL);
	sigaction(SIGTRAP, old_trap, NULL);
	CHECKF(trace.nstates < MAX_TRACE, "more than %d stores traced", MAX_TRACE);
	CHECKF(trace.faults == trace.nstates - 1, "%d faults, %d snapshots",
		   trace.faults, trace.nstates - 1);
}
#endif							/* x86-64 Linux */

/*
 * Insert (h, TID) into slot "slot" of primary p (the slot the insert will
 * choose), tracing the stores to its bucket line.  Every traced state, put
 * into a crash image of the pool taken before the insert, must recover to
 * either the old contents (h not found, nlive unchanged) or the complete new
 * entry (h found once with its TID, nlive + 1): never anything else.
 */
static void
check_insert_states(TPool *tp, uint32 p, int slot, uint64 h, uint32 block,
					uint16 offset, const char *what)
{
#ifdef HAVE_STORE_TRACE
	TPool		before;
	const PmhEntry *line = &pmh_seg_entries(&tp->pool, p)[slot - slot % PMH_BUCKET_SLOTS];
	PmhEntry	old = pmh_seg_entries(&tp->pool, p)[slot];
	uint32		nlive = tp->meta[p].nlive;
	struct sigaction old_segv;
	struct sigaction old_trap;
	PmhInsertResult r;
	uint64	   *tags = NULL;
	int			cap = 0;
	int			i;

	if (!tpool_copy(&before, tp, "states"))
		return;
	if (trace_start(line, &old_segv, &old_trap))
	{
		r = pmh_insert(&tp->pool, &tp->cb, p, h, block, offset);
		trace_stop(&old_segv, &old_trap);
		CHECKF(r == PMH_INSERT_DONE, "%s: insert: %d", what, (int) r);
	}
	CHECKF(pmh_seg_entries(&tp->pool, p)[slot].hash == h &&
		   pmh_seg_entries(&tp->pool, p)[slot].tag == pmh_tag_make(h, block, offset),
		   "%s: the insert did not use segment %u slot %d", what, p, slot);
	printf("#   %s: %d stores to the bucket traced\n", what, trace.nstates - 1);

	for (i = 0; i < trace.nstates; i++)
	{
		TPool		img;
		PmhRecoveryResult res;
		const PmhEntry *st = &trace.states[i][slot % PMH_BUCKET_SLOTS];
		int			n;
		bool		as_old;
		bool		as_new;

		if (!tpool_copy(&img, &before, "states-img"))
			break;
		memcpy(&pmh_seg_entries(&img.pool, p)[slot - slot % PMH_BUCKET_SLOTS],
			   trace.states[i], sizeof(PmhEntry) * PMH_BUCKET_SLOTS);
		if (CHECK(tpool_recover(&img, &res, NULL, NULL) == 0))
		{
			n = tpool_lookup(&img, h, &tags, &cap);
			as_old = n == 0 && img.meta[p].nlive == nlive;
			as_new = n == 1 && tid_of_tag(tags[0]) == tid_of(block, offset) &&
				img.meta[p].nlive == nlive + 1;
			CHECKF(as_old || as_new,
				   "%s: crash after store %d of %d: slot %d holds (hash %016llx, tag %016llx), "
				   "was (%016llx, %016llx); recovery counts nlive %u (before %u) and "
				   "hash %016llx finds %d entr%s%s%u,%u%s",
				   what, i, trace.nstates - 1, slot,
				   (unsigned long long) st->hash, (unsigned long long) st->tag,
				   (unsigned long long) old.hash, (unsigned long long) old.tag,
				   img.meta[p].nlive, nlive, (unsigned long long) h, n,
				   n == 1 ? "y" : "ies", n > 0 ? ", TID (" : "",
				   n > 0 ? pmh_tag_block(tags[0]) : 0,
				   n > 0 ? pmh_tag_offset(tags[0]) : 0, n > 0 ? ")" : "");
		}
		tpool_close(&img);
	}
	free(tags);
	tpool_close(&before);
#else
	printf("#   %s: store tracing needs x86-64 Linux; not checked\n", what);
	CHECK(pmh_insert(&tp->pool, &tp->cb, p, h, block, offset) == PMH_INSERT_DONE);
#endif
}

/* a hash of primary p with b in bits 13..8 and whose low byte is fp */
static uint64
hash_for(TPool *tp, uint32 p, int b, uint8 fp)
{
	uint64		w = tp->meta[p].word;
	int			d = pmh_segword_depth(w);
	uint64		h = rnd();

	if (d > 0)
		h = (h >> d) | (pmh_segword_prefix(w) << (64 - d));
	return (h & ~UINT64CONST(0x3fff)) | ((uint64) b << 8) | fp;
}

/*
 * Every state an insert passes through is safe to crash in, whatever the
 * slot held before: a slot never used (tag 0), a slot VACUUM freed (tag 0,
 * old hash), and a slot a split left behind (old hash of the other half and
 * its complete, live-looking tag).  For the last, a crash after the new hash
 * is stored but before the tag is leaves (new hash, old tag); when the new
 * hash has the old one's low byte the fingerprint copy matches and the
 * entry is taken for live: a (hash, TID) that was never inserted.
 */
static void
test_torn_insert_states(void)
{
	TPool		tp;
	Model		m;
	uint64		s;
	uint32		p = PMH_NO_SEGMENT;
	int			slot = -1;
	int			k;
	PmhEntry	old;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "states", 4))
		return;
	workload_random(&tp, &m, Min(S->n_small, 5000), true);
	CHECK(tp.splits > 0);

	/* a primary's bucket whose first free slot holds an entry moved away */
	for (s = 0; s < tp.nseg && slot < 0; s++)
	{
		int			b;

		if (tp.role[s] != T_PRIMARY)
			continue;
		for (b = 0; b < PMH_SEG_BUCKETS && slot < 0; b++)
		{
			uint32		freebits = (~(uint32) tp.meta[s].occ[b]) & 0xffff;
			const PmhEntry *e;

			if (freebits == 0)
				continue;
			k = b * PMH_BUCKET_SLOTS + __builtin_ctz(freebits);
			e = &pmh_seg_entries(&tp.pool, (uint32) s)[k];
			if ((e->tag >> 56) == PMH_TAG_LIVE && pmh_tag_offset(e->tag) != 0 &&
				((e->tag >> 48) & 0xff) == pmh_fingerprint(e->hash) &&
				!pmh_hash_in_segment(e->hash, tp.meta[s].word))
			{
				p = (uint32) s;
				slot = k;
			}
		}
	}
	if (CHECKF(slot >= 0, "no slot left behind by a split found"))
	{
		old = pmh_seg_entries(&tp.pool, p)[slot];
		/* same low byte as the entry that moved away */
		check_insert_states(&tp, p, slot,
							hash_for(&tp, p, slot / PMH_BUCKET_SLOTS,
									 pmh_fingerprint(old.hash)),
							4242, 42, "slot left by a split, same fingerprint");
	}

	/*
	 * A slot freed by VACUUM, reused by a hash with the same low byte: slot
	 * 0 of a bucket whose slot 0 is live, deleted, is the bucket's first
	 * free slot.
	 */
	p = primary_with_unused_slot(&tp);
	if (!CHECK(p != PMH_NO_SEGMENT))
		p = tp.dir[0];
	for (k = 0; k < PMH_SEG_SLOTS; k += PMH_BUCKET_SLOTS)
		if (tp.meta[p].occ[k / PMH_BUCKET_SLOTS] & 1)
			break;
	if (CHECK(k < PMH_SEG_SLOTS))
	{
		int			b = k / PMH_BUCKET_SLOTS;

		old = pmh_seg_entries(&tp.pool, p)[k];
		CHECK(pmh_delete_slots(&tp.pool, &tp.meta[p], p, b, 1) == 0);
		check_insert_states(&tp, p, k,
							hash_for(&tp, p, b, pmh_fingerprint(old.hash)),
							4343, 43, "slot freed by VACUUM");
	}

	/* a slot never used */
	for (s = 0, slot = -1; s < PMH_SEG_SLOTS && slot < 0; s++)
	{
		const PmhEntry *e = &pmh_seg_entries(&tp.pool, p)[s];
		int			b = (int) s / PMH_BUCKET_SLOTS;
		uint32		freebits = (~(uint32) tp.meta[p].occ[b]) & 0xffff;

		if (freebits && b * PMH_BUCKET_SLOTS + __builtin_ctz(freebits) == (int) s &&
			e->hash == 0 && e->tag == 0)
			slot = (int) s;
	}
	if (CHECK(slot >= 0))
		check_insert_states(&tp, p, slot,
							hash_for(&tp, p, slot / PMH_BUCKET_SLOTS, 0x5a),
							4444, 44, "slot never used");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Every state VACUUM's pmh_delete_slots passes through recovers to each
 * touched entry either still there or deleted, and the others untouched.
 */
static void
test_torn_delete_states(void)
{
	TPool		tp;
	TPool		before;
	Model		m;
	uint32		p;
	int			b;
	uint16		mask;
	uint16		occ;
	PmhEntry	orig[PMH_BUCKET_SLOTS];
	uint64	   *tags = NULL;
	int			cap = 0;
	int			i;
	int			k;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "delstates", 4))
		return;
	workload_random(&tp, &m, 2000, true);
	p = tp.dir[0];
	for (b = 0; b < PMH_SEG_BUCKETS; b++)
		if (__builtin_popcount(tp.meta[p].occ[b]) >= 4)
			break;
	if (!CHECK(b < PMH_SEG_BUCKETS) || !tpool_copy(&before, &tp, "delstates"))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	occ = tp.meta[p].occ[b];
	mask = occ & 0x5555;		/* every other live slot */
	if (mask == 0)
		mask = occ & (uint16) -occ;
	memcpy(orig, &pmh_seg_entries(&tp.pool, p)[b * PMH_BUCKET_SLOTS], sizeof(orig));

#ifdef HAVE_STORE_TRACE
	{
		struct sigaction old_segv;
		struct sigaction old_trap;

		if (trace_start(&pmh_seg_entries(&tp.pool, p)[b * PMH_BUCKET_SLOTS],
						&old_segv, &old_trap))
		{
			CHECK(pmh_delete_slots(&tp.pool, &tp.meta[p], p, b, mask) == 0);
			trace_stop(&old_segv, &old_trap);
		}
		CHECK(trace.nstates - 1 >= __builtin_popcount(mask));
		for (i = 0; i < trace.nstates; i++)
		{
			TPool		img;
			PmhRecoveryResult res;

			if (!tpool_copy(&img, &before, "delstates-img"))
				break;
			memcpy(&pmh_seg_entries(&img.pool, p)[b * PMH_BUCKET_SLOTS],
				   trace.states[i], sizeof(orig));
			if (CHECK(tpool_recover(&img, &res, NULL, NULL) == 0))
			{
				for (k = 0; k < PMH_BUCKET_SLOTS; k++)
				{
					int			n;

					if (!(occ & (1 << k)))
						continue;
					n = tpool_lookup(&img, orig[k].hash, &tags, &cap);
					if (mask & (1 << k))
						CHECKF(n == 0 || (n == 1 && tags[0] == orig[k].tag),
							   "store %d: deleted slot %d: %d found", i, k, n);
					else
						CHECKF(n == 1 && tags[0] == orig[k].tag,
							   "store %d: kept slot %d: %d found", i, k, n);
				}
			}
			tpool_close(&img);
		}
	}
#else
	CHECK(pmh_delete_slots(&tp.pool, &tp.meta[p], p, b, mask) == 0);
	printf("#   store tracing needs x86-64 Linux; not checked\n");
#endif
	free(tags);
	tpool_close(&before);
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
static void
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
 * Every state a relocation passes through is safe to crash in, even over
 * slots a split left behind with live-looking tags whose fingerprint copies
 * match the new hashes: each slot of the line is its old entry (dead), the
 * old entry with its tag cleared, the new hash alone, or the complete new
 * entry; recovery finds each new entry at most once with its own TID, the
 * moved entries once in their new segment, and the log recovery brings
 * back exactly the new entries that are not complete.
 */
static void
test_torn_relocate_states(void)
{
	TPool		tp;
	TPool		before;
	Model		m;
	PmhPending	up[PMH_BUCKET_SLOTS];
	PmhPending	low[2 * PMH_BUCKET_SLOTS];
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	PmhEntry	old[PMH_BUCKET_SLOTS];
	uint32		released[PMH_DBUCKET_SLOTS];
	uint32		newseg;
	uint64		w0;
	int			nrel = 0;
	int			ndup = 0;
	int			i;
	PmhInsertResult r = PMH_INSERT_IOERROR;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "relocstates", 4))
		return;
	/* bucket 0: 16 entries of the upper half; buckets 1, 2: the lower half */
	for (i = 0; i < PMH_BUCKET_SLOTS; i++)
	{
		up[i] = pending_of(rnd() | (UINT64CONST(1) << 63), 800, (uint16) (i + 1));
		CHECK(tpool_insert(&tp, up[i].hash, 800, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add_pending(&m, &up[i]);
	}
	for (i = 0; i < 2 * PMH_BUCKET_SLOTS; i++)
	{
		low[i] = pending_of(rnd() >> 1, 801, (uint16) (i + 1));
		CHECK(tpool_insert(&tp, low[i].hash, 801, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add_pending(&m, &low[i]);
	}
	newseg = tpool_split(&tp, 0);
	if (!CHECK(newseg != PMH_NO_SEGMENT))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}
	w0 = tp.meta[0].word;
	CHECKF(tp.meta[0].occ[0] == 0 && tp.meta[0].occ[1] == 0xffff &&
		   tp.meta[0].occ[2] == 0xffff && tp.meta[newseg].occ[0] == 0xffff,
		   "after the split: occ %04x %04x %04x, new half %04x",
		   tp.meta[0].occ[0], tp.meta[0].occ[1], tp.meta[0].occ[2],
		   tp.meta[newseg].occ[0]);
	memcpy(old, pmh_seg_entries(&tp.pool, 0), sizeof(old));
	for (i = 0; i < PMH_BUCKET_SLOTS; i++)
		CHECK(old[i].hash == up[i].hash && old[i].tag == up[i].tag &&
			  !pmh_entry_is_live(&old[i], w0));

	/* new entries of the lower half with the fingerprints of the old ones */
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
	{
		uint64		h = ((rnd() >> 1) & ~UINT64CONST(0xff)) | pmh_fingerprint(old[i].hash);

		ents[i] = pending_of(h, 802, (uint16) (i + 1));
		CHECK((ents[i].tag >> 48) == (old[i].tag >> 48));
	}
	pend_entries(&tp, 0, 0, 0, ents, PMH_DBUCKET_SLOTS);
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		model_add_pending(&m, &ents[i]);
	if (!tpool_copy(&before, &tp, "relocstates-before"))
	{
		model_free(&m);
		tpool_close(&tp);
		return;
	}

#ifdef HAVE_STORE_TRACE
	{
		struct sigaction old_segv;
		struct sigaction old_trap;
		uint64	   *tags = NULL;
		int			cap = 0;
		int			s;
		int			k;

		if (trace_start(pmh_seg_entries(&tp.pool, 0), &old_segv, &old_trap))
		{
			r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true,
							 released, &nrel, &ndup);
			trace_stop(&old_segv, &old_trap);
		}
		CHECKF(r == PMH_INSERT_DONE && nrel == PMH_DBUCKET_SLOTS && ndup == 0,
			   "relocate: %d, released %d, duplicates %d", (int) r, nrel, ndup);
		check_line_holds(&tp, 0, 0, 0xffff, ents, "over left-behind slots");
		/* 16 old tags cleared, 16 hashes, 16 tags */
		CHECKF(trace.nstates - 1 == 3 * PMH_BUCKET_SLOTS,
			   "%d stores to the line traced", trace.nstates - 1);
		printf("#   %d stores to the line traced\n", trace.nstates - 1);

		for (s = 0; s < trace.nstates; s++)
		{
			TPool		img;
			PmhRecoveryResult res;
			int			ncomplete = 0;

			for (k = 0; k < PMH_BUCKET_SLOTS; k++)
			{
				const PmhEntry *e = &trace.states[s][k];
				bool		is_old = e->hash == old[k].hash && e->tag == old[k].tag;
				bool		cleared = e->hash == old[k].hash && e->tag == 0;
				bool		hash_only = e->hash == ents[k].hash && e->tag == 0;
				bool		complete = e->hash == ents[k].hash && e->tag == ents[k].tag;

				CHECKF(is_old || cleared || hash_only || complete,
					   "store %d: slot %d holds (%016llx, %016llx)", s, k,
					   (unsigned long long) e->hash, (unsigned long long) e->tag);
				CHECKF(pmh_entry_is_live(e, w0) == complete,
					   "store %d: slot %d (%016llx, %016llx) live %d, complete %d",
					   s, k, (unsigned long long) e->hash,
					   (unsigned long long) e->tag, (int) pmh_entry_is_live(e, w0),
					   (int) complete);
				ncomplete += complete;
			}
			if (s == trace.nstates - 1)
				CHECK(ncomplete == PMH_BUCKET_SLOTS);

			if (!tpool_copy(&img, &before, "relocstates-img"))
				break;
			memcpy(pmh_seg_entries(&img.pool, 0), trace.states[s], sizeof(old));
			if (CHECK(tpool_recover(&img, &res, NULL, NULL) == 0))
			{
				int			back;
				int			nd;

				CHECKF(img.meta[0].nlive == 2 * PMH_BUCKET_SLOTS + (uint32) ncomplete,
					   "store %d: nlive %u with %d complete", s, img.meta[0].nlive,
					   ncomplete);
				for (k = 0; k < PMH_BUCKET_SLOTS; k++)
				{
					int			n = tpool_lookup(&img, ents[k].hash, &tags, &cap);

					CHECKF(n == 0 || (n == 1 && tags[0] == ents[k].tag),
						   "store %d: new entry %d found %d times", s, k, n);
					n = tpool_lookup(&img, up[k].hash, &tags, &cap);
					CHECKF(n == 1 && tags[0] == up[k].tag,
						   "store %d: moved entry %d found %d times", s, k, n);
				}
				back = log_recover(&img);
				CHECKF(back == PMH_DBUCKET_SLOTS - ncomplete,
					   "store %d: log recovery put %d back, %d complete", s, back,
					   ncomplete);
				CHECK(tpool_relocate_all(&img, &nd) == back && nd == 0);
				for (k = 0; k < PMH_BUCKET_SLOTS; k++)
					check_found(&img, &ents[k], 1, "after log recovery");
				if (s == 0 || s == trace.nstates - 1)
					verify_model(&img, &m, 20, "relocation states");
			}
			tpool_close(&img);
		}
		free(tags);
	}
#else
	r = pmh_relocate(&tp.pool, &tp.cb, 0, true, true, released, &nrel, &ndup);
	CHECK(r == PMH_INSERT_DONE && nrel == PMH_DBUCKET_SLOTS && ndup == 0);
	printf("#   store tracing needs x86-64 Linux; not checked\n");
#endif
	verify_model(&tp, &m, 100, "relocation over left-behind slots");
	tpool_close(&before);
	model_free(&m);
	tpool_close(&tp);
}

/*
 * Splits and new overflow segments flush only what they fill, trusting
 * that a free segment is zero on the media: recovery zeroes (and
 * persists) any free segment that is not, e.g. the unpublished half of a
 * split whose word never reached the media.
 */
static void
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

static const TestDef tests[] = {
	{"header", test_header},
	{"header_file", test_header_file},
	{"segment_words", test_segment_words},
	{"tags", test_tags},
	{"directory", test_directory},
	{"persist_stats", test_persist_stats},
	{"insert_lookup", test_insert_lookup},
	{"rank_lines", test_rank_lines},
	{"fpt_crowd", test_fpt_crowd},
	{"fpt_full", test_fpt_full},
	{"fingerprints", test_fingerprints},
	{"duplicates", test_duplicates},
	{"delete_reinsert", test_delete_reinsert},
	{"recovery_clean", test_recovery_clean},
	{"crash_split_unpublished", test_crash_split_unpublished},
	{"crash_split_unpublished_chain", test_crash_split_chain},
	{"crash_overflow_unlinked", test_crash_overflow_unlinked},
	{"corruption", test_corruption},
	{"torn_entries", test_torn_entries},
	{"torn_insert_states", test_torn_insert_states},
	{"torn_delete_states", test_torn_delete_states},
	{"split_usefulness", test_split_usefulness},
	{"split_enospc", test_split_enospc},
	{"split_reserved", test_split_reserved},
	{"max_depth", test_max_depth},
	{"batch", test_batch},
	{"batch_msync", test_batch_msync},
	{"batch_error", test_batch_error},
	{"log_find_free", test_log_find_free},
	{"log_clear_slots", test_log_clear_slots},
	{"log_write", test_log_write},
	{"pending_bookkeeping", test_pending_bookkeeping},
	{"relocate_full_dbucket", test_relocate_full_dbucket},
	{"relocate_duplicates", test_relocate_duplicates},
	{"relocate_best_fit", test_relocate_best_fit},
	{"relocate_no_room_split", test_relocate_no_room_split},
	{"relocate_no_room_overflow", test_relocate_no_room_overflow},
	{"relocate_recovery", test_relocate_recovery},
	{"torn_relocate_states", test_torn_relocate_states},
	{"pool_state", test_pool_state},
	{"relocate_unchecked", test_relocate_unchecked},
	{"recover_zeroes_free", test_recover_zeroes_free},
	{"log_segments", test_log_segments},
	{"optimistic_lookups", test_optimistic_lookups},
};

/* ---------------------------------------------------------------------
 * Driver
 * ---------------------------------------------------------------------
 */

/* run every test once with the given sizes */
static void
run_suite(const Scale *scale)
{
	size_t		i;
	double		t0 = now_seconds();

	S = scale;
	printf("# %s pass: seed %016llx, %d entries in the main workload\n",
		   S->pass, (unsigned long long) g_seed, S->n_random);
	for (i = 0; i < lengthof(tests); i++)
		run_test(&tests[i], (int) i + 1);
	printf("# %s pass: %.2f s\n", S->pass, now_seconds() - t0);
	fflush(stdout);
}

/* start the msync pass in a child process writing to outpath */
static pid_t
start_msync_child(const char *argv0, const char *outpath)
{
	pid_t		pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0)
	{
		int			fd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd < 0)
			_exit(126);
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		execl("/proc/self/exe", argv0, "--pass=msync", (char *) NULL);
		execl(argv0, argv0, "--pass=msync", (char *) NULL);
		_exit(127);
	}
	return pid;
}

/*
 * Wait for the msync pass and merge its output: its test lines are
 * renumbered after ours and counted, its summary line is dropped.
 */
static void
finish_msync_child(pid_t pid, const char *outpath)
{
	int			status = 0;
	FILE	   *f;
	char		line[4096];
	int			child_tests = 0;
	int			child_failed = 0;

	if (waitpid(pid, &status, 0) != pid)
		status = -1;
	f = fopen(outpath, "r");
	while (f && fgets(line, sizeof(line), f))
	{
		int			num;
		int			pos = 0;
		int			a;
		int			b;

		if (sscanf(line, "ok %d - %n", &num, &pos) == 1 && pos > 0)
		{
			ntests++;
			npassed++;
			child_tests++;
			printf("ok %d - %s", ntests, line + pos);
		}
		else if (sscanf(line, "not ok %d - %n", &num, &pos) == 1 && pos > 0)
		{
			ntests++;
			nfailed++;
			child_tests++;
			child_failed++;
			printf("not ok %d - %s", ntests, line + pos);
		}
		else if (sscanf(line, "%d passed, %d failed", &a, &b) == 2 ||
				 strncmp(line, "# total", 7) == 0)
			continue;
		else
			fputs(line, stdout);
	}
	if (f)
		fclose(f);
	unlink(outpath);

	/* a child that died, or failed without saying why, is a failure */
	if (status == -1 || !WIFEXITED(status) ||
		(WEXITSTATUS(status) != 0) != (child_failed > 0) ||
		child_tests != (int) lengthof(tests))
	{
		ntests++;
		nfailed++;
		printf("#   msync pass: wait status %d, %d tests reported\n", status, child_tests);
		printf("not ok %d - msync pass completed\n", ntests);
	}
}

/* remove the temporary directory (and anything a failed test left there) */
static void
remove_tmpdir(void)
{
	char		cmd[MAXPGPATH + 32];
	int			rc;

	if (rmdir(g_tmpdir) == 0)
		return;
	printf("# note: %s was not empty; removing it\n", g_tmpdir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmpdir);
	rc = system(cmd);
	(void) rc;
}

/* run both passes (or the one asked for) and print the summary */
int
main(int argc, char **argv)
{
	const char *only = NULL;
	const char *tmp = getenv("TMPDIR");
	const char *seed = getenv("PMH_TEST_SEED");
	char		outpath[MAXPGPATH];
	pid_t		child = -1;
	int			i;
	double		t0 = now_seconds();

	for (i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--pass=flush") == 0)
			only = "flush";
		else if (strcmp(argv[i], "--pass=msync") == 0)
			only = "msync";
		else
		{
			fprintf(stderr, "usage: %s [--pass=flush|--pass=msync]\n", argv[0]);
			return 2;
		}
	}
	if (seed)
		g_seed = strtoull(seed, NULL, 0);

	/* before the first libpmem call: libpmem reads it once */
	setenv("PMEM_IS_PMEM_FORCE", (only && strcmp(only, "msync") == 0) ? "0" : "1", 1);

	snprintf(g_tmpdir, sizeof(g_tmpdir), "%s/pmh_test_XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp");
	if (mkdtemp(g_tmpdir) == NULL)
	{
		fprintf(stderr, "mkdtemp(%s): %s\n", g_tmpdir, strerror(errno));
		return 2;
	}

	if (only == NULL)
	{
		snprintf(outpath, sizeof(outpath), "%s/msync-pass.out", g_tmpdir);
		child = start_msync_child(argv[0], outpath);
		if (child < 0)
		{
			ntests++;
			nfailed++;
			printf("#   fork: %s\n", strerror(errno));
			printf("not ok %d - msync pass started\n", ntests);
		}
	}

	run_suite(only && strcmp(only, "msync") == 0 ? &scale_msync : &scale_flush);
	if (child > 0)
		finish_msync_child(child, outpath);

	remove_tmpdir();
	printf("# total %.2f s\n", now_seconds() - t0);
	printf("%d passed, %d failed\n", npassed, nfailed);
	return nfailed == 0 ? 0 : 1;
}
