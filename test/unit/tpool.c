/*-------------------------------------------------------------------------
 *
 * tpool.c
 *	  The harness shared by the core's unit-test programs: see tpool.h.
 *
 * Pools are real files in g_tmpdir mapped with libpmem's pmem_map_file,
 * grown with ftruncate + remap before an operation that may need more
 * segments.  The volatile metadata (one PmhSegMeta per segment, the
 * directory with its global depth, the free-segment list) is kept here the
 * way the server keeps it in shared memory.
 *
 *-------------------------------------------------------------------------
 */
#include "tpool.h"
#include "unit_check.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <libpmem.h>

const Scale *S;
uint64		g_seed = UINT64CONST(0x706d686173683135);
uint64		g_rng;
char		g_tmpdir[MAXPGPATH];
int			g_poolno;

/* a random hash from the per-test generator */
uint64
rnd(void)
{
	return rng_next(&g_rng);
}

/* a random TID: any block, offset 1..65535 */
void
rnd_tid(uint32 *block, uint16 *offset)
{
	uint64		r = rnd();

	*block = (uint32) r;
	*offset = (uint16) (1 + (r >> 32) % 65535);
}


/* ---------------------------------------------------------------------
 * Test pools: a pool file, its mapping and the volatile metadata
 * ---------------------------------------------------------------------
 */


static PmhSegMeta bogus_meta;	/* handed out for out-of-range segnos */

/* PmhCallbacks.get_meta */
PmhSegMeta *
cb_get_meta(void *arg, uint32 segno)
{
	TPool	   *tp = (TPool *) arg;

	if (!CHECKF(segno < tp->nseg, "get_meta(%u) past the %llu segments",
				segno, (unsigned long long) tp->nseg))
	{
		pmh_meta_reset(&bogus_meta, 0);
		return &bogus_meta;
	}
	return &tp->meta[segno];
}

/* PmhCallbacks.alloc_segment: pop the free list; never remaps */
uint32
cb_alloc_segment(void *arg)
{
	TPool	   *tp = (TPool *) arg;
	uint32		segno;

	if (tp->alloc_budget == 0)
		return PMH_NO_SEGMENT;
	if (!CHECKF(tp->nfree > 0,
				"alloc_segment with no free segment left (the pool was grown to the announced need)"))
		return PMH_NO_SEGMENT;
	if (tp->alloc_budget > 0)
		tp->alloc_budget--;
	segno = tp->freesegs[--tp->nfree];
	if (tp->lazy_free)
		CHECK(pmh_prepare_free_segment(&tp->pool, segno) >= 0);
	/* the core writes only what it fills of a segment it takes */
	CHECKF(pmh_segment_is_zero(&tp->pool, segno),
		   "alloc_segment hands out segment %u, which is not zero", segno);
	tp->role[segno] = T_OVERFLOW;	/* until told otherwise */
	tp->allocs++;
	tp->last_alloc = segno;
	return segno;
}

/* map (or remap) the pool file; is_pmem comes from libpmem */
bool
tpool_map(TPool *tp)
{
	size_t		len;
	int			is_pmem;
	char	   *base;

	base = pmem_map_file(tp->path, 0, 0, 0, &len, &is_pmem);
	if (!CHECKF(base != NULL, "pmem_map_file(%s): %s", tp->path, pmem_errormsg()))
		return false;
	tp->pool.base = base;
	tp->pool.mapped_len = len;
	tp->pool.is_pmem = is_pmem;
	tp->nseg = pmh_pool_nsegments(&tp->pool);
	return true;
}

/* size the metadata arrays for nseg segments; new segments are free */
void
tpool_resize_meta(TPool *tp, uint64 oldn, uint64 newn)
{
	uint64		i;

	tp->meta = pg_realloc(tp->meta, newn * sizeof(PmhSegMeta));
	tp->role = pg_realloc(tp->role, newn);
	tp->freesegs = pg_realloc(tp->freesegs, newn * sizeof(uint32));
	/* push the highest first so that the lowest is handed out first */
	for (i = newn; i > oldn; i--)
	{
		pmh_meta_reset(&tp->meta[i - 1], 0);
		tp->role[i - 1] = T_FREE;
		tp->freesegs[tp->nfree++] = (uint32) (i - 1);
	}
}

/* zero everything and set the callbacks */
void
tpool_init_struct(TPool *tp, const char *name)
{
	memset(tp, 0, sizeof(*tp));
	snprintf(tp->path, sizeof(tp->path), "%s/%03d-%s.pool", g_tmpdir,
			 ++g_poolno, name);
	tp->alloc_budget = -1;
	tp->last_alloc = PMH_NO_SEGMENT;
	tp->cb.get_meta = cb_get_meta;
	tp->cb.alloc_segment = cb_alloc_segment;
	tp->cb.arg = tp;
}

/* create and format a pool of nseg segments: one primary of depth 0 */
bool
tpool_create(TPool *tp, const char *name, uint64 nseg)
{
	PmhPoolHeader hdr;
	size_t		len;
	int			is_pmem;
	char	   *base;

	tpool_init_struct(tp, name);
	base = pmem_map_file(tp->path, pmh_pool_bytes(nseg),
						 PMEM_FILE_CREATE | PMEM_FILE_EXCL, 0600,
						 &len, &is_pmem);
	if (!CHECKF(base != NULL, "pmem_map_file(%s): %s", tp->path, pmem_errormsg()))
		return false;
	tp->pool.base = base;
	tp->pool.mapped_len = len;
	tp->pool.is_pmem = is_pmem;
	tp->nseg = pmh_pool_nsegments(&tp->pool);
	CHECK(len == pmh_pool_bytes(nseg));
	CHECK(tp->nseg == nseg);

	pmh_header_init(&hdr, rnd(), 16384, 0, 40000 + g_poolno, 50000 + g_poolno);
	if (!CHECKF(pmh_pool_format(&tp->pool, &hdr) == 0, "pmh_pool_format: %m"))
		return false;

	tpool_resize_meta(tp, 0, tp->nseg);
	/* segment 0 is the primary of depth 0 */
	CHECK(tp->freesegs[tp->nfree - 1] == 0);
	tp->nfree--;
	tp->role[0] = T_PRIMARY;
	pmh_meta_reset(&tp->meta[0], pmh_seg_header(&tp->pool, 0)->word);
	tp->gd = 0;
	tp->dir = pg_malloc(sizeof(uint32));
	tp->dir[0] = 0;
	return true;
}

/* grow the pool file to newn segments: ftruncate, then remap */
bool
tpool_grow(TPool *tp, uint64 newn)
{
	uint64		oldn = tp->nseg;
	int			fd;
	int			rc;

	if (newn <= oldn)
		return true;
	if (!CHECKF(pmem_unmap(tp->pool.base, tp->pool.mapped_len) == 0,
				"pmem_unmap: %m"))
		return false;
	tp->pool.base = NULL;
	fd = open(tp->path, O_RDWR);
	if (!CHECKF(fd >= 0, "open(%s): %m", tp->path))
		return false;
	rc = ftruncate(fd, (off_t) pmh_pool_bytes(newn));
	close(fd);
	if (!CHECKF(rc == 0, "ftruncate(%s): %m", tp->path))
		return false;
	if (!tpool_map(tp))
		return false;
	CHECK(tp->nseg == newn);
	tpool_resize_meta(tp, oldn, tp->nseg);
	tp->grows++;
	return true;
}

/* make sure at least n segments are free, growing the pool if needed */
bool
tpool_ensure_free(TPool *tp, int n)
{
	if (tp->nfree >= (uint32) n)
		return true;
	return tpool_grow(tp, Max(tp->nseg * 2, tp->nseg + n - tp->nfree + 4));
}

/* unmap, delete the file, free the metadata */
void
tpool_close(TPool *tp)
{
	if (tp->pool.base)
		pmem_unmap(tp->pool.base, tp->pool.mapped_len);
	if (tp->path[0])
		unlink(tp->path);
	free(tp->meta);
	free(tp->role);
	free(tp->freesegs);
	free(tp->dir);
	free(tp->log_exts);
	tlog_free(tp);
	memset(tp, 0, sizeof(*tp));
}

/* decode a persistent ovf_next */
uint32
hdr_next(const TPool *tp, uint32 segno)
{
	uint64		v = pmh_seg_header(&tp->pool, segno)->ovf_next;

	return v == 0 ? PMH_NO_SEGMENT : (uint32) (v - 1);
}

/* number of overflow segments chained to a primary (volatile metadata) */
int
chain_length(const TPool *tp, uint32 segno)
{
	int			n = 0;
	uint32		s;

	for (s = tp->meta[segno].ovf_next; s != PMH_NO_SEGMENT && n <= (int) tp->nseg;
		 s = tp->meta[s].ovf_next)
		n++;
	return n;
}

/* number of segments in use */
uint64
tpool_used(const TPool *tp)
{
	return tp->nseg - tp->nfree;
}

/* count primaries and overflow segments */
void
tpool_count(const TPool *tp, uint64 *nprim, uint64 *novf)
{
	uint64		i;

	*nprim = *novf = 0;
	for (i = 0; i < tp->nseg; i++)
	{
		if (tp->role[i] == T_PRIMARY)
			(*nprim)++;
		else if (tp->role[i] == T_OVERFLOW)
			(*novf)++;
	}
}

/*
 * After a successful pmh_split of segno into (segno, newseg): update the
 * directory as pmh_core.h documents (double first if the new local depth
 * exceeds the global depth, then assign both halves) and the roles.
 */
void
tpool_publish_split(TPool *tp, uint32 segno, uint32 newseg)
{
	uint64		w0 = tp->meta[segno].word;
	uint64		w1 = tp->meta[newseg].word;
	int			depth = pmh_segword_depth(w0);
	uint32		s;

	CHECKF(depth == pmh_segword_depth(w1), "split halves have depths %d and %d",
		   depth, pmh_segword_depth(w1));
	CHECKF(pmh_segword_prefix(w1) == (pmh_segword_prefix(w0) | 1),
		   "split halves have prefixes %llx and %llx",
		   (unsigned long long) pmh_segword_prefix(w0),
		   (unsigned long long) pmh_segword_prefix(w1));
	CHECK(pmh_seg_header(&tp->pool, segno)->word == w0);
	CHECK(pmh_seg_header(&tp->pool, newseg)->word == w1);
	if (depth > tp->gd)
	{
		uint32	   *newdir;

		CHECKF(depth == tp->gd + 1, "split to depth %d at global depth %d",
			   depth, tp->gd);
		newdir = pg_malloc(sizeof(uint32) << (tp->gd + 1));
		pmh_dir_double(tp->dir, tp->gd, newdir);
		free(tp->dir);
		tp->dir = newdir;
		tp->gd++;
	}
	pmh_dir_assign(tp->dir, tp->gd, w0, segno);
	pmh_dir_assign(tp->dir, tp->gd, w1, newseg);
	tp->role[newseg] = T_PRIMARY;
	for (s = tp->meta[newseg].ovf_next; s != PMH_NO_SEGMENT; s = tp->meta[s].ovf_next)
		tp->role[s] = T_OVERFLOW;
	tp->splits++;
}

/* split a primary after pre-growing; returns the new segment or NO_SEGMENT */
uint32
tpool_split(TPool *tp, uint32 segno)
{
	int			need = pmh_segments_needed_for_split(&tp->cb, segno);
	uint32		newseg = PMH_NO_SEGMENT;
	int			rc;

	if (!tpool_ensure_free(tp, need))
		return PMH_NO_SEGMENT;
	tp->allocs = 0;
	rc = pmh_split(&tp->pool, &tp->cb, segno, &newseg);
	if (!CHECKF(rc == 0, "pmh_split(%u): rc %d: %m", segno, rc))
		return PMH_NO_SEGMENT;
	CHECKF(tp->allocs <= need,
		   "split of %u took %d segments; pmh_segments_needed_for_split said %d",
		   segno, tp->allocs, need);
	tpool_publish_split(tp, segno, newseg);
	return newseg;
}

/* add an overflow segment at the head of a primary's chain */
uint32
tpool_add_overflow(TPool *tp, uint32 segno)
{
	uint32		newseg;
	int			rc;

	if (!tpool_ensure_free(tp, 1))
		return PMH_NO_SEGMENT;
	newseg = cb_alloc_segment(tp);
	if (newseg == PMH_NO_SEGMENT)
		return PMH_NO_SEGMENT;
	rc = pmh_add_overflow(&tp->pool, &tp->cb, segno, newseg);
	if (!CHECKF(rc == 0, "pmh_add_overflow(%u, %u): %m", segno, newseg))
		return PMH_NO_SEGMENT;
	tp->role[newseg] = T_OVERFLOW;
	CHECK(tp->meta[segno].ovf_next == newseg);
	CHECK(hdr_next(tp, segno) == newseg);
	tp->overflows_added++;
	return newseg;
}


/*
 * Insert one (hash, TID), following pmh_insert's answers: split or add an
 * overflow segment and retry.  When the answer is SPLIT or OVERFLOW and the
 * matching bit is in "stop", return it (with *stopseg) without acting.
 */
PmhInsertResult
tpool_insert_ex(TPool *tp, uint64 hash, uint32 block, uint16 offset,
				int stop, uint32 *stopseg)
{
	int			round;

	for (round = 0; round < 100; round++)
	{
		uint32		segno = tp->dir[pmh_dir_index(hash, tp->gd)];
		PmhInsertResult r;

		r = pmh_insert(&tp->pool, &tp->cb, segno, hash, block, offset);
		switch (r)
		{
			case PMH_INSERT_DONE:
			case PMH_INSERT_EXISTS:
				return r;
			case PMH_INSERT_IOERROR:
				CHECKF(false, "pmh_insert: I/O error: %m");
				return r;
			case PMH_INSERT_FULL:
				CHECKF(false, "pmh_insert did not choose a remedy for no room");
				return PMH_INSERT_IOERROR;
			case PMH_INSERT_SPLIT:
				if (stop & STOP_SPLIT)
				{
					*stopseg = segno;
					return r;
				}
				if (tpool_split(tp, segno) == PMH_NO_SEGMENT)
					return PMH_INSERT_IOERROR;
				break;
			case PMH_INSERT_OVERFLOW:
				if (stop & STOP_OVERFLOW)
				{
					*stopseg = segno;
					return r;
				}
				if (tpool_add_overflow(tp, segno) == PMH_NO_SEGMENT)
					return PMH_INSERT_IOERROR;
				break;
		}
	}
	CHECKF(false, "insert of %016llx did not finish after 100 rounds",
		   (unsigned long long) hash);
	return PMH_INSERT_IOERROR;
}

/* insert, handling splits and overflows */
PmhInsertResult
tpool_insert(TPool *tp, uint64 hash, uint32 block, uint16 offset)
{
	return tpool_insert_ex(tp, hash, block, offset, 0, NULL);
}

/* look up every TID of a hash, growing the buffer as needed */
int
tpool_lookup(TPool *tp, uint64 hash, uint64 **tags, int *cap)
{
	uint32		segno = tp->dir[pmh_dir_index(hash, tp->gd)];
	int			n;

	n = pmh_lookup(&tp->pool, &tp->cb, segno, hash, *tags, *cap);
	if (n > *cap)
	{
		*cap = n * 2;
		*tags = pg_realloc(*tags, *cap * sizeof(uint64));
		n = pmh_lookup(&tp->pool, &tp->cb, segno, hash, *tags, *cap);
	}
	return n;
}

/* a new pool file holding "len" bytes from "bytes": a crash image */
bool
tpool_from_bytes(TPool *dst, const char *bytes, size_t len, const char *name)
{
	size_t		maplen;
	int			is_pmem;
	char	   *base;

	tpool_init_struct(dst, name);
	base = pmem_map_file(dst->path, len,
						 PMEM_FILE_CREATE | PMEM_FILE_EXCL | PMEM_FILE_SPARSE,
						 0600, &maplen, &is_pmem);
	if (!CHECKF(base != NULL, "pmem_map_file(%s): %s", dst->path, pmem_errormsg()))
		return false;
	memcpy(base, bytes, len);
	dst->pool.base = base;
	dst->pool.mapped_len = maplen;
	dst->pool.is_pmem = is_pmem;
	dst->nseg = pmh_pool_nsegments(&dst->pool);
	return CHECK(maplen == len);
}

/* byte-for-byte copy of a pool into a new pool file: a crash image */
bool
tpool_copy(TPool *dst, const TPool *src, const char *name)
{
	return tpool_from_bytes(dst, src->pool.base, src->pool.mapped_len, name) &&
		CHECK(dst->nseg == src->nseg);
}

/*
 * Build the volatile metadata of a pool from the pool alone, as the server
 * does when it attaches: pmh_recover, then pmh_meta_load of every segment in
 * use (an overflow segment with its owner primary's word), then the
 * directory by pmh_dir_assign.  Returns pmh_recover's result code.  The
 * caller may keep the roles and owners arrays (else they are freed).
 */
int
tpool_recover(TPool *tp, PmhRecoveryResult *res, PmhSegRole **roles_out,
			  uint32 **owner_out)
{
	uint64		nseg = pmh_pool_nsegments(&tp->pool);
	PmhSegRole *roles = pg_malloc0(Max(nseg, 1) * sizeof(PmhSegRole));
	uint32	   *owner = pg_malloc0(Max(nseg, 1) * sizeof(uint32));
	uint64	   *scratch = pg_malloc0(PMH_RECOVER_SCRATCH(Max(nseg, 1)) * sizeof(uint64));
	uint64		i;
	int			rc;

	if (tp->lazy_free)
		rc = pmh_recover_words(&tp->pool, roles, owner, scratch, res);
	else
		rc = pmh_recover(&tp->pool, roles, owner, scratch, res);
	free(scratch);
	if (rc == 0)
	{
		free(tp->meta);
		free(tp->role);
		free(tp->freesegs);
		free(tp->dir);
		tp->meta = NULL;
		tp->role = NULL;
		tp->freesegs = NULL;
		tp->nfree = 0;
		tp->nseg = nseg;
		tpool_resize_meta(tp, 0, nseg);
		tp->nfree = 0;
		if (tp->log_exts == NULL)
			tp->log_exts = pg_malloc(PMH_LOG_MAX_EXTS * sizeof(uint32));
		for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
			tp->log_exts[i] = PMH_NO_SEGMENT;
		tp->nlog_exts = res->log_exts;
		tp->pool.log_ext_segs = tp->log_exts;
		tlog_free(tp);
		for (i = nseg; i > 0; i--)
		{
			uint32		s = (uint32) (i - 1);
			const PmhSegHeader *h = pmh_seg_header(&tp->pool, s);

			switch (roles[s])
			{
				case PMH_SEG_PRIMARY:
					pmh_meta_load(&tp->pool, s, h->word, &tp->meta[s]);
					tp->role[s] = T_PRIMARY;
					break;
				case PMH_SEG_OVERFLOW:
					if (!CHECKF(owner[s] < nseg, "overflow segment %u has owner %u",
								s, owner[s]))
						break;
					pmh_meta_load(&tp->pool, s,
								  pmh_seg_header(&tp->pool, owner[s])->word,
								  &tp->meta[s]);
					tp->role[s] = T_OVERFLOW;
					break;
				case PMH_SEG_FREE:
					pmh_meta_reset(&tp->meta[s], 0);
					tp->role[s] = T_FREE;
					tp->freesegs[tp->nfree++] = s;
					break;
				case PMH_SEG_LOG:
					pmh_meta_reset(&tp->meta[s], h->word);
					tp->role[s] = T_LOG;
					if (CHECKF(pmh_segword_log_ext(h->word) < PMH_LOG_MAX_EXTS,
							   "log segment %u has extension %u", s,
							   pmh_segword_log_ext(h->word)))
						tp->log_exts[pmh_segword_log_ext(h->word)] = s;
					break;
			}
		}
		tp->gd = res->global_depth;
		tp->dir = pg_malloc(sizeof(uint32) << tp->gd);
		for (i = 0; i < (UINT64CONST(1) << tp->gd); i++)
			tp->dir[i] = PMH_NO_SEGMENT;
		for (i = 0; i < nseg; i++)
			if (roles[i] == PMH_SEG_PRIMARY)
				pmh_dir_assign(tp->dir, tp->gd, tp->meta[i].word, (uint32) i);
		for (i = 0; i < (UINT64CONST(1) << tp->gd); i++)
			if (!CHECKF(tp->dir[i] != PMH_NO_SEGMENT,
						"recovered directory entry %llu unassigned",
						(unsigned long long) i))
				break;
	}
	if (roles_out)
		*roles_out = roles;
	else
		free(roles);
	if (owner_out)
		*owner_out = owner;
	else
		free(owner);
	return rc;
}

/* ---------------------------------------------------------------------
 * The reference model: a multiset of (hash, TID)
 * ---------------------------------------------------------------------
 */


/* append an entry */
void
model_add(Model *m, uint64 hash, uint32 block, uint16 offset)
{
	if (m->n == m->cap)
	{
		m->cap = Max(1024, m->cap * 2);
		m->e = pg_realloc(m->e, m->cap * sizeof(ModelEntry));
	}
	m->e[m->n].hash = hash;
	m->e[m->n].tid = tid_of(block, offset);
	m->n++;
}

/* release the model */
void
model_free(Model *m)
{
	free(m->e);
	memset(m, 0, sizeof(*m));
}

/* qsort: by hash, then TID */
int
cmp_model(const void *a, const void *b)
{
	const ModelEntry *x = a;
	const ModelEntry *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return 0;
}

/* qsort: uint64 */
int
cmp_u64(const void *a, const void *b)
{
	uint64		x = *(const uint64 *) a;
	uint64		y = *(const uint64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* is a hash in a sorted model? */
bool
model_has_hash(const Model *m, uint64 hash)
{
	size_t		lo = 0;
	size_t		hi = m->n;

	while (lo < hi)
	{
		size_t		mid = (lo + hi) / 2;

		if (m->e[mid].hash < hash)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->n && m->e[lo].hash == hash;
}

/*
 * Every slot the metadata of segment segno calls live holds an entry live
 * in the pool against owner_word (the word of the primary that owns the
 * segment), and its fingerprint is the low 16 bits of that entry's hash.
 * Written out here rather than through pmh_meta_fp, so that the test says
 * which bits the fingerprint must be.
 */
static void
check_slots(TPool *tp, uint32 segno, uint64 owner_word, const char *what)
{
	const PmhSegMeta *m = &tp->meta[segno];
	const PmhEntry *e = pmh_seg_entries(&tp->pool, segno);
	int			slot;

	for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
	{
		if (!pmh_meta_is_live(m, slot))
			continue;
		if (!CHECKF(pmh_entry_is_live(&e[slot], owner_word),
					"%s: segment %u slot %d is live in the metadata, not in the pool",
					what, segno, slot))
			continue;
	}
	{
		char		msg[160];

		CHECKF(pmh_fpt_verify(&tp->pool, m, segno, msg, sizeof(msg)),
			   "%s: %s", what, msg);
	}
}

/*
 * Check the structure of a pool's metadata against the pool and itself:
 * primaries' words and links mirror the pool, chains lead to overflow
 * segments, nlive matches occ, every overflow segment is on one chain, the
 * directory points every index at the primary that covers it.  Returns the
 * total of nlive.
 */
uint64
check_structure(TPool *tp, const char *what)
{
	uint64		total = 0;
	uint64		chained = 0;
	uint64		novf = 0;
	uint64		i;
	uint64		ndir = UINT64CONST(1) << tp->gd;
	uint64	   *covered = pg_malloc0(tp->nseg * sizeof(uint64));

	for (i = 0; i < tp->nseg; i++)
	{
		PmhSegMeta *m = &tp->meta[i];
		int			b;
		uint32		pop = 0;

		if (tp->role[i] == T_FREE || tp->role[i] == T_LOG)
			continue;
		for (b = 0; b < PMH_SEG_BUCKETS; b++)
			pop += __builtin_popcount(m->occ[b]);
		CHECKF(pop == m->nlive, "%s: segment %llu: nlive %u, occ bits %u", what,
			   (unsigned long long) i, m->nlive, pop);
		CHECKF(hdr_next(tp, (uint32) i) == m->ovf_next,
			   "%s: segment %llu: ovf_next %u in metadata, %u in pool", what,
			   (unsigned long long) i, m->ovf_next, hdr_next(tp, (uint32) i));
		total += m->nlive;
		if (tp->role[i] == T_OVERFLOW)
		{
			novf++;
			CHECKF(pmh_seg_header(&tp->pool, (uint32) i)->word ==
				   pmh_segword_make_overflow(),
				   "%s: overflow segment %llu has word %016llx", what,
				   (unsigned long long) i,
				   (unsigned long long) pmh_seg_header(&tp->pool, (uint32) i)->word);
		}
		else
		{
			uint32		s;
			uint64		steps = 0;

			CHECKF(m->word == pmh_seg_header(&tp->pool, (uint32) i)->word,
				   "%s: segment %llu: word %016llx in metadata, %016llx in pool",
				   what, (unsigned long long) i, (unsigned long long) m->word,
				   (unsigned long long) pmh_seg_header(&tp->pool, (uint32) i)->word);
			CHECKF(pmh_segword_is_valid(m->word) && !pmh_segword_is_overflow(m->word),
				   "%s: primary %llu has word %016llx", what,
				   (unsigned long long) i, (unsigned long long) m->word);
			check_slots(tp, (uint32) i, m->word, what);
			for (s = m->ovf_next; s != PMH_NO_SEGMENT; s = tp->meta[s].ovf_next)
			{
				if (!CHECKF(s < tp->nseg && tp->role[s] == T_OVERFLOW &&
							++steps <= tp->nseg,
							"%s: chain of %llu reaches segment %u", what,
							(unsigned long long) i, s))
					break;
				check_slots(tp, s, m->word, what);
				chained++;
			}
		}
	}
	CHECKF(chained == novf, "%s: %llu overflow segments, %llu on chains", what,
		   (unsigned long long) novf, (unsigned long long) chained);

	for (i = 0; i < ndir; i++)
	{
		uint32		s = tp->dir[i];
		uint64		w;
		int			d;

		if (!CHECKF(s < tp->nseg && tp->role[s] == T_PRIMARY,
					"%s: directory entry %llu -> %u, not a primary", what,
					(unsigned long long) i, s))
			continue;
		w = tp->meta[s].word;
		d = pmh_segword_depth(w);
		CHECKF(d <= tp->gd && (i >> (tp->gd - d)) == pmh_segword_prefix(w),
			   "%s: directory entry %llu -> segment %u of depth %d prefix %llx",
			   what, (unsigned long long) i, s, d,
			   (unsigned long long) pmh_segword_prefix(w));
		covered[s]++;
	}
	for (i = 0; i < tp->nseg; i++)
	{
		if (tp->role[i] != T_PRIMARY)
			continue;
		CHECKF(covered[i] == UINT64CONST(1) << (tp->gd -
												 pmh_segword_depth(tp->meta[i].word)),
			   "%s: primary %llu has %llu directory entries", what,
			   (unsigned long long) i, (unsigned long long) covered[i]);
	}
	free(covered);
	return total;
}

/*
 * Compare the pool with the model: every (hash, TID) of the model is found
 * by pmh_lookup exactly once and nothing else is found under its hash;
 * nabsent random hashes that are not in the model find nothing; the live
 * entries counted by the metadata equal the model's size.
 */
void
verify_model(TPool *tp, Model *m, int nabsent, const char *what)
{
	uint64	   *tags = NULL;
	uint64	   *got = NULL;
	int			cap = 0;
	int			gotcap = 0;
	size_t		i;
	size_t		j;
	int			k;
	uint64		total;

	qsort(m->e, m->n, sizeof(ModelEntry), cmp_model);
	for (i = 0; i < m->n; i = j)
	{
		uint64		hash = m->e[i].hash;
		int			n;

		for (j = i; j < m->n && m->e[j].hash == hash; j++)
			;
		n = tpool_lookup(tp, hash, &tags, &cap);
		if (!CHECKF(n == (int) (j - i),
					"%s: hash %016llx: lookup found %d entries, the model has %d",
					what, (unsigned long long) hash, n, (int) (j - i)))
			continue;
		if (n > gotcap)
		{
			gotcap = n * 2;
			got = pg_realloc(got, gotcap * sizeof(uint64));
		}
		for (k = 0; k < n; k++)
		{
			CHECKF((tags[k] >> 56) == PMH_TAG_LIVE &&
				   ((tags[k] >> 48) & 0xff) == pmh_fingerprint(hash),
				   "%s: hash %016llx: tag %016llx", what,
				   (unsigned long long) hash, (unsigned long long) tags[k]);
			got[k] = tid_of_tag(tags[k]);
		}
		qsort(got, n, sizeof(uint64), cmp_u64);
		for (k = 0; k < n; k++)
		{
			if (!CHECKF(got[k] == m->e[i + k].tid,
						"%s: hash %016llx: found TID (%u,%u), expected (%u,%u)",
						what, (unsigned long long) hash,
						(uint32) (got[k] >> 16), (uint16) got[k],
						(uint32) (m->e[i + k].tid >> 16),
						(uint16) m->e[i + k].tid))
				break;
		}
	}

	for (k = 0; k < nabsent; k++)
	{
		uint64		hash = rnd();
		int			n;

		if (model_has_hash(m, hash))
			continue;
		n = tpool_lookup(tp, hash, &tags, &cap);
		CHECKF(n == 0, "%s: absent hash %016llx: lookup found %d entries",
			   what, (unsigned long long) hash, n);
	}

	total = check_structure(tp, what);
	CHECKF(total == m->n, "%s: metadata counts %llu live entries, the model %llu",
		   what, (unsigned long long) total, (unsigned long long) m->n);
	free(tags);
	free(got);
}

/* ---------------------------------------------------------------------
 * Persist accounting: the flushes and fences of one operation
 * ---------------------------------------------------------------------
 */

/* PmhPool.flush_hook: record the call */
static void
hook_record(void *arg, uint64 offset, size_t len)
{
	HookLog    *hl = (HookLog *) arg;

	if (len == 0)
		hl->nfences++;
	else
		hl->nranges++;
	if (hl->nevents < MAX_HOOK_EVENTS)
	{
		hl->off[hl->nevents] = offset;
		hl->len[hl->nevents] = len;
	}
	hl->nevents++;
}

/* start recording a pool's flushes and fences afresh (counters too) */
void
hook_start(TPool *tp, HookLog *hl)
{
	memset(hl, 0, sizeof(*hl));
	memset(&tp->pool.stats, 0, sizeof(tp->pool.stats));
	tp->pool.flush_hook = hook_record;
	tp->pool.flush_hook_arg = hl;
}

/* stop recording */
void
hook_stop(TPool *tp)
{
	tp->pool.flush_hook = NULL;
	tp->pool.flush_hook_arg = NULL;
}

/* compare every persist counter with what the operation "what" must cost */
void
check_stats(const PmhPersistStats *st, uint64 persists, uint64 bytes,
			uint64 cachelines, uint64 whole, uint64 partial, uint64 fences,
			const char *what)
{
	CHECKF(st->persists == persists && st->bytes == bytes &&
		   st->cachelines == cachelines && st->lines_whole == whole &&
		   st->lines_partial == partial && st->fences == fences,
		   "%s: persists %llu bytes %llu cachelines %llu whole %llu partial %llu "
		   "fences %llu; expected %llu %llu %llu %llu %llu %llu", what,
		   (unsigned long long) st->persists, (unsigned long long) st->bytes,
		   (unsigned long long) st->cachelines,
		   (unsigned long long) st->lines_whole,
		   (unsigned long long) st->lines_partial,
		   (unsigned long long) st->fences,
		   (unsigned long long) persists, (unsigned long long) bytes,
		   (unsigned long long) cachelines, (unsigned long long) whole,
		   (unsigned long long) partial, (unsigned long long) fences);
}

/*
 * Start the bulk set-up of a test: in the msync pass (where every persist
 * is an msync of ~0.2 ms) the pool is filled with no_persist set, as the
 * server's bulk build does, and persisted in one go by setup_end.  The
 * operations under test always persist one by one.
 */
void
setup_begin(TPool *tp, bool setup)
{
	if (setup && S->bulk_setup)
		tp->pool.no_persist = 1;
}

/* end of the bulk set-up: persist the whole mapping once */
void
setup_end(TPool *tp)
{
	if (tp->pool.no_persist)
	{
		tp->pool.no_persist = 0;
		CHECKF(pmh_persist(&tp->pool, tp->pool.base, tp->pool.mapped_len) == 0,
			   "persisting the pool: %m");
	}
}

/* insert n random entries, expecting DONE each time */
void
workload_random(TPool *tp, Model *m, int n, bool setup)
{
	int			i;
	int			bad = 0;

	setup_begin(tp, setup);
	for (i = 0; i < n; i++)
	{
		uint64		hash = rnd();
		uint32		block;
		uint16		offset;
		PmhInsertResult r;

		rnd_tid(&block, &offset);
		r = tpool_insert(tp, hash, block, offset);
		if (r == PMH_INSERT_DONE)
			model_add(m, hash, block, offset);
		else if (!CHECKF(r == PMH_INSERT_DONE, "insert %d: result %d", i, (int) r) &&
				 ++bad > 10)
			break;
	}
	setup_end(tp);
}

/*
 * Insert random entries until pmh_insert answers "what" (SPLIT or
 * OVERFLOW); return that entry, not inserted, in hash, block, offset and the
 * segment in *segno.  Entries inserted meanwhile go into the model.
 */
bool
insert_until(TPool *tp, Model *m, PmhInsertResult what, int stop,
			 uint64 *hash, uint32 *block, uint16 *offset, uint32 *segno,
			 bool setup)
{
	int			i;
	bool		found = false;

	setup_begin(tp, setup);
	for (i = 0; i < 1000000; i++)
	{
		PmhInsertResult r;

		*hash = rnd();
		rnd_tid(block, offset);
		r = tpool_insert_ex(tp, *hash, *block, *offset, stop, segno);
		if (r == what)
		{
			found = true;
			break;
		}
		if (!CHECKF(r == PMH_INSERT_DONE, "insert: result %d", (int) r))
			break;
		model_add(m, *hash, *block, *offset);
	}
	setup_end(tp);
	if (i == 1000000)
		CHECKF(false, "no insert answered %d", (int) what);
	return found;
}

/* insert n TIDs under one hash; TIDs are (base + i / 1000, 1 + i % 1000) */
void
insert_dups(TPool *tp, Model *m, uint64 hash, int n, uint32 base, bool setup)
{
	int			i;

	setup_begin(tp, setup);
	for (i = 0; i < n; i++)
	{
		uint32		block = base + (uint32) (i / 1000);
		uint16		offset = (uint16) (1 + i % 1000);
		PmhInsertResult r = tpool_insert(tp, hash, block, offset);

		if (!CHECKF(r == PMH_INSERT_DONE, "dup insert %d: result %d", i, (int) r))
			break;
		model_add(m, hash, block, offset);
	}
	setup_end(tp);
}


/* offset of bucket b of segment s from the start of the pool */
uint64
bucket_offset(const TPool *tp, uint32 s, int b)
{
	return (uint64) ((const char *) &pmh_seg_entries(&tp->pool, s)[b * PMH_BUCKET_SLOTS] -
					 tp->pool.base);
}

/* are all 256 bytes of bucket b of segment s zero? */
bool
bucket_is_zero(const TPool *tp, uint32 s, int b)
{
	const PmhEntry *e = &pmh_seg_entries(&tp->pool, s)[b * PMH_BUCKET_SLOTS];
	int			k;

	for (k = 0; k < PMH_BUCKET_SLOTS; k++)
		if (e[k].hash != 0 || e[k].tag != 0)
			return false;
	return true;
}

/* a random hash that primary segment p holds: its prefix in the top bits */
uint64
hash_in_segment(const TPool *tp, uint32 p)
{
	uint64		w = tp->meta[p].word;
	int			d = pmh_segword_depth(w);
	uint64		h = rnd();

	if (d > 0)
		h = (h >> d) | (pmh_segword_prefix(w) << (64 - d));
	return h;
}

/* n new entries of primary p: random hashes, TIDs (block, 1 .. n) */
void
make_entries(const TPool *tp, uint32 p, int n, uint32 block, PmhPending *out)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		out[i].hash = hash_in_segment(tp, p);
		out[i].tag = pmh_tag_make(out[i].hash, block, (uint16) (i + 1));
		out[i].logslot = 0;
		out[i].pad = 0;
	}
}

/* a pending entry with this hash and TID */
PmhPending
pending_of(uint64 hash, uint32 block, uint16 offset)
{
	PmhPending	p;

	p.hash = hash;
	p.tag = pmh_tag_make(hash, block, offset);
	p.logslot = 0;
	p.pad = 0;
	return p;
}

/*
 * What a flushing backend does with n entries of primary p: write them into
 * backup-log line "line" from slot "first" on (one pmh_log_write), then
 * append them to p's D-bucket.  Sets ents[i].logslot.
 */
void
pend_entries(TPool *tp, uint32 p, uint32 line, int first, PmhPending *ents,
			 int n)
{
	PmhEntry	e[PMH_BUCKET_SLOTS];
	int			i;

	if (!CHECKF(first >= 0 && n >= 0 && first + n <= PMH_BUCKET_SLOTS,
				"pend_entries(first %d, n %d)", first, n))
		return;
	for (i = 0; i < n; i++)
	{
		e[i].hash = ents[i].hash;
		e[i].tag = ents[i].tag;
		ents[i].logslot = line * PMH_BUCKET_SLOTS + (uint32) (first + i);
	}
	CHECKF(pmh_log_write(&tp->pool, line, first, e, n) == 0, "pmh_log_write: %m");
	tlog_mark_pending(tp, line, first, n);
	for (i = 0; i < n; i++)
	{
		if (!CHECKF(tp->meta[p].npending < PMH_DBUCKET_SLOTS,
					"D-bucket of %u is full", p))
			break;
		pmh_pending_add(&tp->meta[p], ents[i].hash, ents[i].tag, ents[i].logslot);
	}
}

/* add a pending entry to the model */
void
model_add_pending(Model *m, const PmhPending *p)
{
	model_add(m, p->hash, pmh_tag_block(p->tag), pmh_tag_offset(p->tag));
}

/* is pending entry a the same (hash, tag, logslot) as b? */
bool
pending_equal(const PmhPending *a, const PmhPending *b)
{
	return a->hash == b->hash && a->tag == b->tag && a->logslot == b->logslot;
}

/*
 * Is slot "slot" in a fingerprint bucket that a lookup of hash looks at,
 * with the hash's low 16 bits as its fingerprint?
 */
static bool
fpt_holds(const PmhSegMeta *m, uint64 hash, int slot)
{
	uint16		fp = (uint16) (hash & 0xffff);
	int			seq[PMH_FPT_BUCKETS];
	int			nseq = pmh_fpt_sequence(m, hash, seq);
	int			i;
	int			w;

	for (i = 0; i < nseq; i++)
		for (w = 0; w < PMH_FPT_WAYS; w++)
			if (m->fpt[seq[i]].slot[w] == slot + 1 && m->fpt[seq[i]].fp[w] == fp)
				return true;
	return false;
}

/* does slot k of bucket b of segment s hold exactly this entry? */
bool
slot_holds(const TPool *tp, uint32 s, int b, int k, const PmhPending *p)
{
	const PmhEntry *e = &pmh_seg_entries(&tp->pool, s)[b * PMH_BUCKET_SLOTS + k];

	return e->hash == p->hash && e->tag == p->tag &&
		(tp->meta[s].occ[b] & (1 << k)) != 0 &&
		fpt_holds(&tp->meta[s], p->hash, b * PMH_BUCKET_SLOTS + k);
}

/* the slots in "mask" of bucket b of segment s hold ents[0 ..], in slot order */
void
check_line_holds(const TPool *tp, uint32 s, int b, uint16 mask,
				 const PmhPending *ents, const char *what)
{
	int			i = 0;
	int			k;

	for (k = 0; k < PMH_BUCKET_SLOTS; k++)
	{
		if (!(mask & (1 << k)))
			continue;
		CHECKF(slot_holds(tp, s, b, k, &ents[i]),
			   "%s: segment %u bucket %d slot %d does not hold entry %d "
			   "(%016llx, %016llx)", what, s, b, k, i,
			   (unsigned long long) ents[i].hash, (unsigned long long) ents[i].tag);
		i++;
	}
}

/* does pmh_lookup find this entry exactly "count" times (0 or 1)? */
void
check_found(TPool *tp, const PmhPending *p, int count, const char *what)
{
	uint64		tags[8];
	uint32		segno = tp->dir[pmh_dir_index(p->hash, tp->gd)];
	int			n = pmh_lookup(&tp->pool, &tp->cb, segno, p->hash, tags, 8);
	int			hits = 0;
	int			i;

	for (i = 0; i < Min(n, 8); i++)
		hits += tags[i] == p->tag;
	CHECKF(hits == count, "%s: hash %016llx tag %016llx found %d times (of %d "
		   "entries under the hash), expected %d", what,
		   (unsigned long long) p->hash, (unsigned long long) p->tag, hits, n,
		   count);
}

/*
 * Delete the slots in "mask" of bucket b of segment s (pmh_delete_slots, as
 * VACUUM does) and drop their entries from the model.
 */
void
delete_slots_model(TPool *tp, Model *m, uint32 s, int b, uint16 mask)
{
	const PmhEntry *e = &pmh_seg_entries(&tp->pool, s)[b * PMH_BUCKET_SLOTS];
	int			k;

	CHECKF((tp->meta[s].occ[b] & mask) == mask,
		   "segment %u bucket %d: deleting %04x, occupied %04x", s, b, mask,
		   tp->meta[s].occ[b]);
	for (k = 0; k < PMH_BUCKET_SLOTS; k++)
	{
		size_t		j;
		bool		found = false;

		if (!(mask & (1 << k)))
			continue;
		for (j = 0; j < m->n && !found; j++)
		{
			if (m->e[j].hash == e[k].hash && m->e[j].tid == tid_of_tag(e[k].tag))
			{
				m->e[j] = m->e[--m->n];
				found = true;
			}
		}
		CHECKF(found, "deleted entry %016llx is not in the model",
			   (unsigned long long) e[k].hash);
	}
	CHECKF(pmh_delete_slots(&tp->pool, &tp->meta[s], s, b, mask) == 0,
		   "pmh_delete_slots: %m");
}
