/*-------------------------------------------------------------------------
 *
 * test_torn.c
 *	  Unit tests of torn writes: every intermediate state of a bucket line
 *	  during an insert, a delete (VACUUM's pmh_delete_slots) or a relocation
 *	  is safe to crash in, and torn entries are not counted as live.
 *
 * The states are caught by the store tracer below (x86-64 Linux only;
 * elsewhere the state tests check the operation alone): each one, put
 * into a crash image of the pool taken before the operation, must
 * recover to the old contents or the complete new ones.
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
/* REG_EFL and friends of <ucontext.h>, for the store tracer */
#define _GNU_SOURCE 1

#include "test_core.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

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
void
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
void
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
void
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
 * Every state a relocation passes through is safe to crash in, even over
 * slots a split left behind with live-looking tags whose fingerprint copies
 * match the new hashes: each slot of the line is its old entry (dead), the
 * old entry with its tag cleared, the new hash alone, or the complete new
 * entry; recovery finds each new entry at most once with its own TID, the
 * moved entries once in their new segment, and the log recovery brings
 * back exactly the new entries that are not complete.
 */
void
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
