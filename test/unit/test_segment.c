/*-------------------------------------------------------------------------
 *
 * test_segment.c
 *	  Unit tests of segments and their fingerprints: insert and lookup,
 *	  the fingerprint table (what a probe reads, a crowd of one hash's
 *	  neighbours, a full segment), duplicates under one hash, delete and
 *	  re-insert, dead hints, and optimistic lookups racing a writer.
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

#include <pthread.h>

/* PmhPool.read_hook: count the pool entries a probe reads */
static void
hook_count_reads(void *arg, uint64 offset, size_t len)
{
	(*(uint64 *) arg)++;
}

/*
 * How many live slots of segment seg and its chain a probe of hash must
 * read: those in the buckets it looks at (its own, and on past each passed
 * one) whose fingerprint is the hash's low 16 bits.  Also counts in
 * *home the model's entries with that fingerprint and bucket, which must
 * be among them.
 */
static uint64
expected_reads(const TPool *tp, const Model *m, uint32 seg, uint64 hash,
			   uint64 *home, uint64 *found)
{
	uint64		want = 0;
	uint32		s;
	size_t		j;

	*home = 0;
	*found = 0;
	for (j = 0; j < m->n; j++)
	{
		if (tp->dir[pmh_dir_index(m->e[j].hash, tp->gd)] != seg ||
			(m->e[j].hash & 0xffff) != (hash & 0xffff))
			continue;
		*home += pmh_fpt_bucket(m->e[j].hash) == pmh_fpt_bucket(hash);
		*found += m->e[j].hash == hash;
	}
	for (s = seg; s != PMH_NO_SEGMENT; s = tp->meta[s].ovf_next)
	{
		const PmhSegMeta *sm = &tp->meta[s];
		int			seq[PMH_FPT_BUCKETS];
		int			nseq = pmh_fpt_sequence(sm, hash, seq);
		int			i;
		int			w;

		for (i = 0; i < nseq; i++)
			for (w = 0; w < PMH_FPT_WAYS; w++)
				want += sm->fpt[seq[i]].slot[w] != 0 &&
					sm->fpt[seq[i]].fp[w] == (uint16) (hash & 0xffff);
	}
	return want;
}

/*
 * Probe with the model's hashes and with absent hashes near them, counting
 * the pool entries each probe reads: exactly the live entries of the
 * probed segment (and its chain) in the fingerprint buckets a lookup looks
 * at whose fingerprint is the hash's low 16 bits (expected_reads).  The
 * absent hashes differ from a live one in one of bits 8..15 (the same low
 * byte, the tag's copy: an 8-bit fingerprint would read it) or in one of
 * bits 48..55 (the same fingerprint and bucket, the same segment at this
 * depth: read, and rejected).
 */
static void
check_probe_reads(TPool *tp, const Model *m, int nprobes, const char *what)
{
	int			cap = 64;		/* more than any probe finds: one call each */
	uint64	   *tags = pg_malloc(cap * sizeof(uint64));
	uint64		reads = 0;
	uint64		sum_reads = 0;
	uint64		false_reads = 0;
	int			i;

	CHECK(tp->gd < 40);
	tp->pool.read_hook = hook_count_reads;
	tp->pool.flush_hook_arg = &reads;
	for (i = 0; i < nprobes && m->n > 0; i++)
	{
		const ModelEntry *me = &m->e[(size_t) i * 7919 % m->n];
		uint64		q[3];
		int			k;

		q[0] = me->hash;
		q[1] = me->hash ^ (UINT64CONST(1) << (8 + i % 8));
		q[2] = me->hash ^ (UINT64CONST(1) << (48 + i % 8));
		for (k = 0; k < 3; k++)
		{
			uint32		seg = tp->dir[pmh_dir_index(q[k], tp->gd)];
			uint64		home;
			uint64		want_found;
			uint64		want_reads = expected_reads(tp, m, seg, q[k], &home,
													&want_found);
			int			n;

			reads = 0;
			n = tpool_lookup(tp, q[k], &tags, &cap);
			CHECKF(n == (int) want_found && reads == want_reads && home <= reads,
				   "%s: probe %d.%d (%016llx): found %d, read %llu; want %llu, %llu (at least %llu)",
				   what, i, k, (unsigned long long) q[k], n,
				   (unsigned long long) reads, (unsigned long long) want_found,
				   (unsigned long long) want_reads, (unsigned long long) home);
			sum_reads += reads;
			false_reads += reads - want_found;
		}
	}
	tp->pool.read_hook = NULL;
	tp->pool.flush_hook_arg = NULL;
	printf("#   %s: %d x 3 probes read %llu pool entries: %llu false matches besides the %d planted ones\n",
		   what, nprobes, (unsigned long long) sum_reads,
		   (unsigned long long) (false_reads - (uint64) nprobes), nprobes);
	free(tags);
}

/*
 * The metadata's fingerprints are the hashes' low 16 bits, through direct
 * inserts, splits, relocation of D-buckets, deletes and recovery (every
 * verify_model checks each live slot's fingerprint), and a probe reads the
 * pool only for slots whose 16 bits match (check_probe_reads).
 */
void
test_fingerprints(void)
{
	TPool		tp;
	TPool		img;
	Model		m;
	PmhPending	ents[PMH_DBUCKET_SLOTS];
	PmhRecoveryResult res;
	PmhSegRole *roles = NULL;
	uint32	   *owner = NULL;
	uint64		nprim;
	uint64		novf;
	int			ndup;
	int			i;
	int			b;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "fingerprints", 2))
		return;

	/* one segment, 600 entries */
	for (i = 0; i < 600; i++)
	{
		uint64		h = rnd();

		CHECK(tpool_insert(&tp, h, 100, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add(&m, h, 100, (uint16) (i + 1));
	}
	CHECK(tp.gd == 0);
	verify_model(&tp, &m, 200, "fingerprints, inserted");
	check_probe_reads(&tp, &m, 200, "one segment");

	/* splits */
	for (i = 0; i < 3000; i++)
	{
		uint64		h = rnd();

		CHECK(tpool_insert(&tp, h, 200, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add(&m, h, 200, (uint16) (i + 1));
	}
	tpool_count(&tp, &nprim, &novf);
	CHECKF(tp.splits >= 2 && nprim >= 3, "%llu splits, %llu primaries",
		   (unsigned long long) tp.splits, (unsigned long long) nprim);
	verify_model(&tp, &m, 200, "fingerprints, split");
	check_probe_reads(&tp, &m, 200, "after splits");

	/* relocated D-buckets: whole lines and holes */
	for (i = 0; i < 4; i++)
	{
		uint32		p = tp.dir[(rnd() >> 8) & ((UINT64CONST(1) << tp.gd) - 1)];
		int			k;

		make_entries(&tp, p, PMH_DBUCKET_SLOTS, 300 + (uint32) i, ents);
		pend_entries(&tp, p, (uint32) i, 0, ents, PMH_DBUCKET_SLOTS);
		for (k = 0; k < PMH_DBUCKET_SLOTS; k++)
			model_add_pending(&m, &ents[k]);
		CHECK(tpool_relocate_all(&tp, &ndup) == PMH_DBUCKET_SLOTS && ndup == 0);
	}
	verify_model(&tp, &m, 200, "fingerprints, relocated");
	check_probe_reads(&tp, &m, 200, "after relocation");

	/* deletes: a deleted slot is never read again */
	for (b = 0; b < PMH_SEG_BUCKETS; b += 3)
	{
		uint32		s = tp.dir[0];
		uint16		mask = tp.meta[s].occ[b] & 0x5555;

		if (mask != 0)
			delete_slots_model(&tp, &m, s, b, mask);
	}
	verify_model(&tp, &m, 200, "fingerprints, deleted");
	check_probe_reads(&tp, &m, 200, "after deletes");

	/* recovery (pmh_meta_load) rebuilds the same fingerprints */
	if (tpool_copy(&img, &tp, "fingerprints-img"))
	{
		int			rc = tpool_recover(&img, &res, &roles, &owner);

		if (CHECKF(rc == 0, "pmh_recover: rc %d: %s", rc, res.error))
		{
			verify_model(&img, &m, 200, "fingerprints, recovered");
			check_probe_reads(&img, &m, 200, "recovered");
		}
		free(roles);
		free(owner);
	}
	tpool_close(&img);
	model_free(&m);
	tpool_close(&tp);
}

/*
 * A crowd in the fingerprint table: 48 entries whose hashes share bits
 * 0..47 (the fingerprint and the bucket, as rows with one key do) have 16
 * ways in their bucket; the rest go on to the next buckets, which are
 * marked passed.  Lookups find everything; deletes keep it right; a split
 * rebuilds the table without the marks it no longer needs.
 */
void
test_fpt_crowd(void)
{
	TPool		tp;
	Model		m;
	uint64		low = rnd() & ((UINT64CONST(1) << 48) - 1);
	uint32		s;
	int			i;
	int			b;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "fpt_crowd", 2))
		return;
	workload_random(&tp, &m, 300, false);
	s = tp.dir[0];
	CHECK(!tp.meta[s].fpt_any_passed);
	/*
	 * The top bit is clear for 4 of them only: the split below leaves those
	 * 4 and the random entries of their bucket behind, few enough to fit in
	 * it whatever the random ones are.
	 */
	for (i = 0; i < 48; i++)
	{
		uint64		h = ((uint64) (i * 2 + 1 + (i % 12 != 0) * 0x8000) << 48) | low;

		CHECK(tpool_insert(&tp, h, 200, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add(&m, h, 200, (uint16) (i + 1));
	}
	CHECK(tp.gd == 0);
	CHECK(tp.meta[s].fpt_any_passed);
	verify_model(&tp, &m, 200, "fpt_crowd, crowded");
	check_probe_reads(&tp, &m, 200, "crowded");

	/* delete every other slot of a few lines, crowd or not */
	for (b = 0; b < PMH_SEG_BUCKETS; b += 5)
		delete_slots_model(&tp, &m, s, b, tp.meta[s].occ[b] & 0x5555);
	verify_model(&tp, &m, 200, "fpt_crowd, deleted");

	/* a split parts the crowd and rebuilds the table */
	CHECK(tpool_split(&tp, s) != PMH_NO_SEGMENT);
	CHECK(!tp.meta[s].fpt_any_passed);
	verify_model(&tp, &m, 200, "fpt_crowd, split");
	check_probe_reads(&tp, &m, 200, "split");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * A full segment (1024 live slots, random hashes) fits in the fingerprint
 * table, and lookups find every entry.
 */
void
test_fpt_full(void)
{
	TPool		tp;
	Model		m;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "fpt_full", 2))
		return;
	workload_random(&tp, &m, PMH_SEG_SLOTS, false);
	CHECK(tp.gd == 0);
	CHECK(tp.meta[tp.dir[0]].nlive == PMH_SEG_SLOTS);
	verify_model(&tp, &m, 200, "fpt_full");
	check_probe_reads(&tp, &m, 200, "full segment");
	model_free(&m);
	tpool_close(&tp);
}

/* insert + lookup of many random entries, with splits */
void
test_insert_lookup(void)
{
	TPool		tp;
	Model		m;
	uint64		nprim;
	uint64		novf;
	double		lf;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "insert", 2))
		return;
	workload_random(&tp, &m, S->n_random, false);
	verify_model(&tp, &m, S->n_absent, "insert");

	tpool_count(&tp, &nprim, &novf);
	lf = (double) m.n / ((double) nprim * PMH_SEG_SLOTS);
	printf("#   %zu entries: %llu primaries, %llu overflow segments, global depth %d, "
		   "%llu splits, %llu pool grows; load factor %.3f\n",
		   m.n, (unsigned long long) nprim, (unsigned long long) novf, tp.gd,
		   (unsigned long long) tp.splits, (unsigned long long) tp.grows, lf);
	CHECK(m.n == (size_t) S->n_random);
	CHECK(tp.gd >= 1);
	CHECKF((UINT64CONST(1) << tp.gd) >= nprim, "global depth %d, %llu primaries",
		   tp.gd, (unsigned long long) nprim);
	CHECK(tp.splits == nprim - 1);
	CHECK(tp.grows > 0);
	/* at a few thousand entries the load factor is too noisy to bound */
	if (m.n >= 50000)
		CHECKF(lf > 0.5, "load factor %.3f", lf);
	model_free(&m);
	tpool_close(&tp);
}

/* one hash with thousands of TIDs (overflow chains) among many others */
void
test_duplicates(void)
{
	TPool		tp;
	Model		m;
	uint64		H = rnd();
	int			total = S->n_dups + S->n_others;
	int			ndup = 0;
	int			i;
	uint64	   *tags = NULL;
	int			cap = 0;
	int			n;
	uint64		tags10[10];
	uint32		segno;
	PmhPersistStats before;
	uint64		used;
	uint64		live;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "dups", 4))
		return;
	/* interleave the duplicates with the others */
	for (i = 0; i < total; i++)
	{
		bool		dup = ndup < S->n_dups &&
			(rnd() % (uint64) (total - i)) < (uint64) (S->n_dups - ndup);

		if (dup)
		{
			uint32		block = 7000000 + (uint32) (ndup / 1000);
			uint16		offset = (uint16) (1 + ndup % 1000);

			if (!CHECKF(tpool_insert(&tp, H, block, offset) == PMH_INSERT_DONE,
						"dup %d", ndup))
				break;
			model_add(&m, H, block, offset);
			ndup++;
		}
		else
		{
			uint64		h = rnd();
			uint32		block;
			uint16		offset;

			rnd_tid(&block, &offset);
			if (!CHECKF(tpool_insert(&tp, h, block, offset) == PMH_INSERT_DONE,
						"other %d", i))
				break;
			model_add(&m, h, block, offset);
		}
	}
	CHECK(ndup == S->n_dups);
	verify_model(&tp, &m, S->n_absent / 4, "dups");

	n = tpool_lookup(&tp, H, &tags, &cap);
	CHECKF(n == S->n_dups, "lookup of the duplicated hash: %d", n);
	/* too small a buffer: the count is still returned */
	segno = tp.dir[pmh_dir_index(H, tp.gd)];
	memset(tags10, 0, sizeof(tags10));
	CHECK(pmh_lookup(&tp.pool, &tp.cb, segno, H, tags10, 10) == S->n_dups);
	for (i = 0; i < 10; i++)
		CHECK((tags10[i] >> 56) == PMH_TAG_LIVE && pmh_tag_block(tags10[i]) >= 7000000);
	CHECKF(chain_length(&tp, segno) >= (S->n_dups - 64) / PMH_SEG_SLOTS,
		   "chain of %u: %d overflow segments for %d duplicates", segno,
		   chain_length(&tp, segno), S->n_dups);
	printf("#   duplicated hash in segment %u with a chain of %d; %llu splits, "
		   "%llu overflow segments added\n", segno, chain_length(&tp, segno),
		   (unsigned long long) tp.splits, (unsigned long long) tp.overflows_added);

	/* inserting existing pairs again: EXISTS, nothing written or added */
	before = tp.pool.stats;
	used = tpool_used(&tp);
	live = check_structure(&tp, "dups");
	for (i = 0; i < (int) m.n; i += (m.e[i].hash == H ? 1 : 7))
	{
		PmhInsertResult r = tpool_insert(&tp, m.e[i].hash,
										 (uint32) (m.e[i].tid >> 16),
										 (uint16) m.e[i].tid);

		if (!CHECKF(r == PMH_INSERT_EXISTS, "re-insert %d: result %d", i, (int) r))
			break;
	}
	CHECK(tp.pool.stats.persists == before.persists);
	CHECK(tpool_used(&tp) == used);
	CHECK(check_structure(&tp, "dups") == live);
	verify_model(&tp, &m, 100, "dups again");
	free(tags);
	model_free(&m);
	tpool_close(&tp);
}

/* delete half of the entries should go?  a pure function of (hash, TID) */
static bool
chosen_for_delete(uint64 hash, uint64 tid)
{
	uint64		s = hash ^ (tid * UINT64CONST(0xff51afd7ed558ccd));

	return (rng_next(&s) & 1) != 0;
}

/* delete a random half by slots, check, re-insert, check the space reuse */
void
test_delete_reinsert(void)
{
	TPool		tp;
	TPool		img;
	Model		m;
	Model		del;
	size_t		i;
	size_t		n;
	uint64		s;
	uint64		used;
	uint64		splits;
	uint64		ovf;
	size_t		want_del = 0;
	PmhRecoveryResult res;

	memset(&m, 0, sizeof(m));
	memset(&del, 0, sizeof(del));
	if (!tpool_create(&tp, "delete", 16))
		return;
	workload_random(&tp, &m, S->n_random, true);
	for (i = 0; i < m.n; i++)
		if (chosen_for_delete(m.e[i].hash, m.e[i].tid))
			want_del++;

	/* find the slots through the metadata's occupancy bits */
	for (s = 0; s < tp.nseg; s++)
	{
		const PmhEntry *e;
		int			b;

		if (tp.role[s] == T_FREE)
			continue;
		e = pmh_seg_entries(&tp.pool, (uint32) s);
		for (b = 0; b < PMH_SEG_BUCKETS; b++)
		{
			uint16		occ = tp.meta[s].occ[b];
			uint16		mask = 0;
			int			k;

			for (k = 0; k < PMH_BUCKET_SLOTS; k++)
			{
				const PmhEntry *x = &e[b * PMH_BUCKET_SLOTS + k];

				if ((occ & (1 << k)) &&
					chosen_for_delete(x->hash, tid_of_tag(x->tag)))
				{
					mask |= (uint16) (1 << k);
					model_add(&del, x->hash, pmh_tag_block(x->tag),
							  pmh_tag_offset(x->tag));
				}
			}
			if (mask == 0)
				continue;
			CHECK(pmh_delete_slots(&tp.pool, &tp.meta[s], (uint32) s, b, mask) == 0);
			CHECK((tp.meta[s].occ[b] & mask) == 0);
			for (k = 0; k < PMH_BUCKET_SLOTS; k++)
				if (mask & (1 << k))
					CHECK(e[b * PMH_BUCKET_SLOTS + k].tag == 0);
		}
	}
	CHECKF(del.n == want_del, "deleted %zu slots, wanted %zu", del.n, want_del);
	for (i = n = 0; i < m.n; i++)
		if (!chosen_for_delete(m.e[i].hash, m.e[i].tid))
			m.e[n++] = m.e[i];
	m.n = n;
	verify_model(&tp, &m, S->n_absent / 4, "after delete");
	/* the deleted pairs are gone (their hashes find only kept TIDs, if any) */
	{
		uint64	   *tags = NULL;
		int			cap = 0;

		for (i = 0; i < del.n; i++)
		{
			int			k;
			int			n = tpool_lookup(&tp, del.e[i].hash, &tags, &cap);

			for (k = 0; k < n; k++)
				if (!CHECKF(tid_of_tag(tags[k]) != del.e[i].tid,
							"deleted (%016llx, (%u,%u)) still found",
							(unsigned long long) del.e[i].hash,
							(uint32) (del.e[i].tid >> 16), (uint16) del.e[i].tid))
					break;
		}
		free(tags);
	}

	/* the deletes are persistent: a copy recovers to the same */
	if (tpool_copy(&img, &tp, "delete-img"))
	{
		CHECK(tpool_recover(&img, &res, NULL, NULL) == 0);
		CHECK(res.orphans_cleared == 0);
		verify_model(&img, &m, 1000, "after delete, recovered");
	}
	tpool_close(&img);

	/* re-insert the same pairs: the freed slots are reused */
	used = tpool_used(&tp);
	splits = tp.splits;
	ovf = tp.overflows_added;
	for (i = 0; i < del.n; i++)
	{
		PmhInsertResult r = tpool_insert(&tp, del.e[i].hash,
										 (uint32) (del.e[i].tid >> 16),
										 (uint16) del.e[i].tid);

		if (!CHECKF(r == PMH_INSERT_DONE, "re-insert %zu: %d", i, (int) r))
			break;
		model_add(&m, del.e[i].hash, (uint32) (del.e[i].tid >> 16),
				  (uint16) del.e[i].tid);
	}
	printf("#   deleted and re-inserted %zu of %d entries; segments in use %llu -> %llu, "
		   "splits +%llu, overflow segments +%llu\n", del.n, S->n_random,
		   (unsigned long long) used, (unsigned long long) tpool_used(&tp),
		   (unsigned long long) (tp.splits - splits),
		   (unsigned long long) (tp.overflows_added - ovf));
	CHECKF(tpool_used(&tp) == used, "segments in use grew from %llu to %llu",
		   (unsigned long long) used, (unsigned long long) tpool_used(&tp));
	verify_model(&tp, &m, S->n_absent / 4, "re-inserted");
	model_free(&m);
	model_free(&del);
	tpool_close(&tp);
}

/* ---------------------------------------------------------------------
 * Optimistic lookups (pmh_version_read_begin)
 * ---------------------------------------------------------------------
 */

#define OPT_STABLE		200		/* entries never touched after set-up */
#define OPT_CHURN		400		/* at most this many others at a time */

typedef struct OptShared
{
	TPool	   *tp;
	uint32		version;		/* a version word for its rules */
	pthread_mutex_t lock;		/* the segment's lock (exclusive only) */
	uint64		stable_hash[OPT_STABLE];
	uint64		stable_tag[OPT_STABLE];
	uint64		absent_hash[OPT_STABLE];
	volatile int done;			/* the writer has finished */
	/* the reader's counts */
	uint64		lookups;
	uint64		retries;
	uint64		wrong;			/* validated answers that were wrong */
	uint64		wrong_locked;	/* answers under the lock that were wrong */
	char		first_wrong[128];
} OptShared;

/*
 * The reader: look stable and absent hashes up without the lock, as the
 * server's scans do, until the writer is done (and at least 10000 times).
 * An answer kept after the version check must be exact; else the lookup is
 * done again under the lock, which must be exact too.
 */
static void *
opt_reader(void *arg)
{
	OptShared  *o = (OptShared *) arg;
	TPool	   *tp = o->tp;
	uint64		x = 0x9E3779B97F4A7C15;

	while (!__atomic_load_n(&o->done, __ATOMIC_ACQUIRE) || o->lookups < 10000)
	{
		int			i;
		bool		absent;
		uint64		hash;
		uint64		tags[PMH_BUCKET_SLOTS];
		uint32		v;
		int			n;
		bool		kept;
		bool		ok;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		i = (int) (x % OPT_STABLE);
		absent = (x >> 40) & 1;
		hash = absent ? o->absent_hash[i] : o->stable_hash[i];
		o->lookups++;

		v = pmh_version_read_begin(&tp->meta[0].version);
		n = pmh_lookup_all(&tp->pool, &tp->cb, &tp->meta[0], 0, hash, tags,
						   PMH_BUCKET_SLOTS);
		kept = (v & 1) == 0 && pmh_version_read_valid(&tp->meta[0].version, v);
		if (!kept)
		{
			o->retries++;
			pthread_mutex_lock(&o->lock);
			n = pmh_lookup_all(&tp->pool, &tp->cb, &tp->meta[0], 0, hash,
							   tags, PMH_BUCKET_SLOTS);
			pthread_mutex_unlock(&o->lock);
		}
		ok = absent ? n == 0 : (n == 1 && tags[0] == o->stable_tag[i]);
		if (ok)
			continue;
		if (!kept)
			o->wrong_locked++;
		else if (o->wrong++ == 0)
			snprintf(o->first_wrong, sizeof(o->first_wrong),
					 "%s hash %016llx: %d entries",
					 absent ? "absent" : "stable",
					 (unsigned long long) hash, n);
	}
	return NULL;
}

/*
 * Optimistic lookups: the version word's rules, then a reader without the
 * lock racing a writer that fills and relocates the D-bucket, deletes
 * from the segment and the D-bucket and rebuilds the fingerprint table
 * (as VACUUM does), each under the lock with the version odd.  Every
 * answer the version check keeps must be exact, and the lookup must
 * survive whatever state it reads.
 */
void
test_optimistic_lookups(void)
{
	TPool		tp;
	OptShared  *o = pg_malloc0(sizeof(OptShared));
	PmhSegMeta *m;
	uint64		churn_hash[OPT_CHURN];
	uint64		churn_tag[OPT_CHURN];
	int			nchurn = 0;
	uint32		released[PMH_DBUCKET_SLOTS];
	uint32		v;
	uint32		v2;
	pthread_t	reader;
	int			iters = S->n_random;
	int			relocations = 0;
	int			deletes = 0;
	int			i;

	/* the version word: odd during a write, changed by every write */
	v = pmh_version_read_begin(&o->version);
	CHECK(pmh_version_read_valid(&o->version, v));
	pmh_version_write_begin(&o->version);
	CHECK(!pmh_version_read_valid(&o->version, v));
	v2 = pmh_version_read_begin(&o->version);
	CHECK((v2 & 1) == 1 && !pmh_version_read_valid(&o->version, v2));
	pmh_version_write_end(&o->version);
	CHECK(!pmh_version_read_valid(&o->version, v));
	CHECK(!pmh_version_read_valid(&o->version, v2));
	v = pmh_version_read_begin(&o->version);
	CHECK((v & 1) == 0 && pmh_version_read_valid(&o->version, v));
	/* a writer that failed and never ended: the next one still goes odd */
	pmh_version_write_begin(&o->version);
	v2 = pmh_version_read_begin(&o->version);
	pmh_version_write_begin(&o->version);
	CHECKF((o->version & 1) == 1 && o->version != v2,
		   "version %u after %u", o->version, v2);
	CHECK(!pmh_version_read_valid(&o->version, v));
	pmh_version_write_end(&o->version);
	v = pmh_version_read_begin(&o->version);
	CHECK((v & 1) == 0 && pmh_version_read_valid(&o->version, v));

	/* the version lives in the metadata: a reset leaves it as it was */
	m = pg_malloc(sizeof(PmhSegMeta));
	m->version = 7;
	m->nlive = 3;
	pmh_meta_reset(m, 42);
	CHECK(m->version == 7 && m->word == 42 && m->nlive == 0 &&
		  m->npending == 0 && m->ovf_next == PMH_NO_SEGMENT);
	free(m);

	if (!tpool_create(&tp, "optimistic", 1))
	{
		free(o);
		return;
	}
	m = &tp.meta[0];
	o->tp = &tp;
	pthread_mutex_init(&o->lock, NULL);
	for (i = 0; i < OPT_STABLE; i++)
	{
		uint32		block;
		uint16		offset;

		o->stable_hash[i] = rnd() >> 1;
		o->absent_hash[i] = rnd() | 1;	/* odd: never a stable or churn hash */
		rnd_tid(&block, &offset);
		o->stable_tag[i] = pmh_tag_make(o->stable_hash[i], block, offset);
		CHECK(tpool_insert(&tp, o->stable_hash[i], block, offset) == PMH_INSERT_DONE);
	}

	if (pthread_create(&reader, NULL, opt_reader, o) != 0)
	{
		CHECKF(false, "pthread_create: %m");
		tpool_close(&tp);
		free(o);
		return;
	}
	for (i = 0; i < iters; i++)
	{
		uint64		r = rnd();

		pthread_mutex_lock(&o->lock);
		pmh_version_write_begin(&m->version);
		if (i % 64 == 63)
			pmh_fpt_rebuild(&tp.pool, m, 0);
		else if (nchurn < OPT_CHURN && r % 3 != 0)
		{
			uint32		block;
			uint16		offset;
			uint64		hash = (rnd() >> 1) & ~UINT64CONST(1);

			rnd_tid(&block, &offset);
			churn_hash[nchurn] = hash;
			churn_tag[nchurn] = pmh_tag_make(hash, block, offset);
			pmh_pending_add(m, hash, churn_tag[nchurn],
							(uint32) i % PMH_LOG_SLOTS);
			nchurn++;
			if (m->npending == PMH_DBUCKET_SLOTS)
			{
				int			nrel;
				int			ndup;
				PmhInsertResult res;

				res = pmh_relocate(&tp.pool, &tp.cb, 0, false, true, released,
								   &nrel, &ndup);
				CHECKF(res == PMH_INSERT_DONE, "relocate: %d", (int) res);
				relocations++;
			}
		}
		else if (nchurn > 0)
		{
			int			c = (int) (r % (uint64) nchurn);
			int			slot;
			uint32		j;
			bool		pending = false;

			for (j = 0; j < m->npending; j++)
				if (m->pending[j].hash == churn_hash[c] &&
					m->pending[j].tag == churn_tag[c])
				{
					pmh_pending_remove(m, (int) j);
					pending = true;
					break;
				}
			if (!pending)
			{
				slot = pmh_find_slot(&tp.pool, m, 0, churn_hash[c], churn_tag[c]);
				CHECKF(slot >= 0, "churn entry %d not found", c);
				if (slot >= 0)
					CHECK(pmh_delete_slots(&tp.pool, m, 0, slot / PMH_BUCKET_SLOTS,
										   (uint16) (1 << (slot % PMH_BUCKET_SLOTS))) == 0);
			}
			churn_hash[c] = churn_hash[nchurn - 1];
			churn_tag[c] = churn_tag[nchurn - 1];
			nchurn--;
			deletes++;
		}
		pmh_version_write_end(&m->version);
		pthread_mutex_unlock(&o->lock);
	}
	__atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
	pthread_join(reader, NULL);

	CHECKF(o->wrong == 0, "%llu answers kept after the version check were wrong; first: %s",
		   (unsigned long long) o->wrong, o->first_wrong);
	CHECKF(o->wrong_locked == 0, "%llu answers under the lock were wrong",
		   (unsigned long long) o->wrong_locked);
	CHECK(o->lookups >= 10000 && relocations > 0 && deletes > 0);
	CHECK(pmh_fpt_verify(&tp.pool, m, 0, NULL, 0));
	printf("#   %d writes (%d relocations, %d deletes); %llu lookups, %llu looked again under the lock\n",
		   iters, relocations, deletes, (unsigned long long) o->lookups,
		   (unsigned long long) o->retries);
	pthread_mutex_destroy(&o->lock);
	tpool_close(&tp);
	free(o);
}

/* pmh_mark_dead's is_dead: TIDs with an even offset are dead */
static bool
even_offset_is_dead(uint64 tag, void *arg)
{
	(*(int *) arg)++;
	return (pmh_tag_offset(tag) & 1) == 0;
}

/* how many of tags[0..n-1] have an even offset */
static int
count_even(const uint64 *tags, int n)
{
	int			even = 0;
	int			i;

	for (i = 0; i < n; i++)
		even += (pmh_tag_offset(tags[i]) & 1) == 0;
	return even;
}

/*
 * Dead hints (PMH_FPT_DEAD): one hash with enough TIDs for an overflow
 * chain among others.  Marking the even offsets dead hides them from
 * lookups of that hash, and from nothing else: the exact probes still find
 * them, the table still verifies, a re-insert of one finds it and clears
 * its hint (pmh_contains), a slot deleted with its way hinted goes, and a
 * rebuild of the table shows the hinted entries again.
 */
void
test_dead_hints(void)
{
	TPool		tp;
	Model		m;
	uint64		H = rnd();
	int			ndups = 2 * PMH_SEG_SLOTS + 300;
	uint64	   *tags = NULL;
	int			cap = 0;
	int			asked = 0;
	int			n;
	int			marked;
	uint32		segno;
	uint32		s;
	uint64		live;
	size_t		j;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "dead_hints", 2))
		return;
	workload_random(&tp, &m, 3000, false);
	insert_dups(&tp, &m, H, ndups, 9000000, false);
	live = check_structure(&tp, "dead hints, before");
	segno = tp.dir[pmh_dir_index(H, tp.gd)];
	CHECKF(chain_length(&tp, segno) >= 1, "chain of %d", chain_length(&tp, segno));

	n = tpool_lookup(&tp, H, &tags, &cap);
	CHECK(n == ndups);
	marked = pmh_mark_dead(&tp.pool, &tp.cb, segno, H, even_offset_is_dead, &asked);
	CHECKF(marked == count_even(tags, n), "marked %d of %d even", marked,
		   count_even(tags, n));
	CHECK(asked == ndups);

	/* lookups skip them */
	n = tpool_lookup(&tp, H, &tags, &cap);
	CHECKF(n == ndups - marked, "lookup after marking: %d", n);
	CHECK(count_even(tags, n) == 0);
	/* marking again finds nothing new, and asks about the unmarked only */
	asked = 0;
	CHECK(pmh_mark_dead(&tp.pool, &tp.cb, segno, H, even_offset_is_dead, &asked) == 0);
	CHECK(asked == ndups - marked);

	/* the checks and the exact probes see through the hint */
	CHECK(check_structure(&tp, "dead hints, marked") == live);
	CHECK(tpool_lookup(&tp, H, &tags, &cap) == ndups - marked);
	/* a re-insert of a hinted entry finds it, and clears its hint */
	CHECK(tpool_insert(&tp, H, 9000000, 2) == PMH_INSERT_EXISTS);
	CHECK(tpool_insert(&tp, H, 9000000, 3) == PMH_INSERT_EXISTS);
	n = tpool_lookup(&tp, H, &tags, &cap);
	CHECKF(n == ndups - marked + 1, "lookup after the re-insert: %d", n);
	CHECK(count_even(tags, n) == 1);
	CHECK(pmh_contains(&tp.pool, &tp.cb, segno, H, pmh_tag_make(H, 9000000, 2)));
	marked--;
	/* other hashes are untouched */
	for (j = 0; j < m.n; j += 97)
		if (m.e[j].hash != H)
			CHECK(tpool_lookup(&tp, m.e[j].hash, &tags, &cap) >= 1);

	/* a hinted slot found and deleted is gone from every probe */
	{
		uint64		tag = pmh_tag_make(H, 9000000, 4);
		int			slot = -1;

		for (s = segno; s != PMH_NO_SEGMENT && slot < 0; s = tp.meta[s].ovf_next)
			slot = pmh_find_slot(&tp.pool, &tp.meta[s], s, H, tag);
		if (CHECKF(slot >= 0, "hinted entry not found by pmh_find_slot"))
		{
			s = segno;
			while (pmh_find_slot(&tp.pool, &tp.meta[s], s, H, tag) < 0)
				s = tp.meta[s].ovf_next;
			CHECK(pmh_delete_slots(&tp.pool, &tp.meta[s], s,
								   slot / PMH_BUCKET_SLOTS,
								   (uint16) (1 << (slot % PMH_BUCKET_SLOTS))) == 0);
			CHECK(!pmh_contains(&tp.pool, &tp.cb, segno, H, tag));
			CHECK(tpool_lookup(&tp, H, &tags, &cap) == ndups - marked);
			CHECK(check_structure(&tp, "dead hints, one deleted") == live - 1);
		}
	}

	/*
	 * a prune (the server's pmhash_prune_chain) finds the chain's hinted
	 * slots, in masks that delete exactly them and nothing the lookups
	 * return: marked - 1 are left (one was revived, one deleted)
	 */
	{
		int			nsegs = chain_length(&tp, segno) + 1;
		uint16	   *dead = calloc((size_t) nsegs * PMH_SEG_BUCKETS,
								  sizeof(uint16));
		int			nmask = 0;
		int			k;

		CHECKF(pmh_chain_hinted(&tp.cb, segno, NULL, 0) == marked - 1,
			   "hinted in the chain: %d, %d expected",
			   pmh_chain_hinted(&tp.cb, segno, NULL, 0), marked - 1);
		CHECK(pmh_chain_hinted(&tp.cb, segno, dead, nsegs) == marked - 1);
		for (k = 0; k < nsegs * PMH_SEG_BUCKETS; k++)
			nmask += pg_popcount32(dead[k]);
		CHECK(nmask == marked - 1);
		/* only the segments asked for get masks; the count is the chain's */
		CHECK(pmh_chain_hinted(&tp.cb, segno, dead, 1) == marked - 1);
		CHECK(pmh_chain_hinted(&tp.cb, segno, dead, nsegs) == marked - 1);
		CHECK(pmh_delete_chain(&tp.pool, &tp.cb, segno, dead, nsegs) == 0);
		CHECK(pmh_chain_hinted(&tp.cb, segno, NULL, 0) == 0);
		n = tpool_lookup(&tp, H, &tags, &cap);
		CHECKF(n == ndups - marked, "lookup after the prune: %d", n);
		CHECK(count_even(tags, n) == 1);
		CHECK(!pmh_contains(&tp.pool, &tp.cb, segno, H,
							pmh_tag_make(H, 9000000, 6)));
		CHECK(pmh_contains(&tp.pool, &tp.cb, segno, H,
						   pmh_tag_make(H, 9000000, 1)));
		CHECK(check_structure(&tp, "dead hints, pruned") == live - marked);
		free(dead);
	}

	/* a rebuilt table has no hints, and the pruned entries stay gone */
	for (s = segno; s != PMH_NO_SEGMENT; s = tp.meta[s].ovf_next)
		pmh_fpt_rebuild(&tp.pool, &tp.meta[s], s);
	n = tpool_lookup(&tp, H, &tags, &cap);
	CHECKF(n == ndups - marked, "lookup after the rebuild: %d", n);
	CHECK(check_structure(&tp, "dead hints, rebuilt") == live - marked);
	free(tags);
	model_free(&m);
	tpool_close(&tp);
}
