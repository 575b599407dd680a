/*-------------------------------------------------------------------------
 *
 * pmhashcheck.c
 *	  pmhash_check(), the SQL function that verifies an index's pool
 *	  against shared memory and the structure's own invariants (like
 *	  amcheck, index only).  The other SQL functions are in pmhashstats.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_authid.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "pmhash.h"

PG_FUNCTION_INFO_V1(pmhash_check);

typedef struct PmhashCheckState
{
	Tuplestorestate *store;
	TupleDesc	desc;
	uint64		problems;
} PmhashCheckState;

/* report one inconsistency */
static void
pmhash_problem(PmhashCheckState *st, const char *fmt,...)
pg_attribute_printf(2, 3);

static void
pmhash_problem(PmhashCheckState *st, const char *fmt,...)
{
	va_list		args;
	char		buf[512];
	Datum		value;
	bool		isnull = false;

	/* a badly broken index could report millions: keep the first ones */
	if (++st->problems > 1000)
		return;
	va_start(args, fmt);
	vsnprintf(buf, sizeof(buf), fmt, args);
	va_end(args);
	value = CStringGetTextDatum(buf);
	tuplestore_putvalues(st->store, st->desc, &value, &isnull);
}

/* compare one segment's slots with its shared metadata */
static uint64
pmhash_check_segment(PmhashIndex *idx, PmhashCheckState *st, uint32 segno,
					 uint64 owner_word, bool primary)
{
	PmhPool    *pool = &idx->local->pool;
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	uint64		live = 0;
	char		msg[160];
	int			slot;

	for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
	{
		bool		in_pool = pmh_entry_is_live(&e[slot], owner_word);
		bool		in_meta = pmh_meta_is_live(meta, slot);

		if (in_pool != in_meta)
			pmhash_problem(st, "segment %u slot %d: pool says %s, shared memory says %s",
						   segno, slot, in_pool ? "live" : "free",
						   in_meta ? "live" : "free");
		if (in_pool)
			live++;
	}
	if (meta->nlive != live)
		pmhash_problem(st, "segment %u: shared memory counts %u live entries, pool has %llu",
					   segno, meta->nlive, (unsigned long long) live);
	if (!pmh_fpt_verify(pool, meta, segno, msg, sizeof(msg)))
		pmhash_problem(st, "%s", msg);
	return live;
}

/* (hash, tag) pairs of a primary segment and its chain, for duplicates */
static int
pmhash_entry_cmp(const void *a, const void *b)
{
	const PmhEntry *x = a;
	const PmhEntry *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (x->tag != y->tag)
		return x->tag < y->tag ? -1 : 1;
	return 0;
}

/* look for the same (hash, TID) stored twice under one primary segment */
static void
pmhash_check_duplicates(PmhashIndex *idx, PmhashCheckState *st, uint32 segno,
						uint64 owner_word)
{
	PmhPool    *pool = &idx->local->pool;
	PmhEntry   *all = NULL;
	int			n = 0;
	int			cap = 0;
	uint32		seg = segno;
	int			i;

	while (seg != PMH_NO_SEGMENT)
	{
		const PmhEntry *e = pmh_seg_entries(pool, seg);
		int			slot;

		for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
		{
			if (!pmh_entry_is_live(&e[slot], owner_word))
				continue;
			if (n == cap)
			{
				cap = cap == 0 ? PMH_SEG_SLOTS : cap * 2;
				all = all ? repalloc(all, sizeof(PmhEntry) * cap) :
					palloc(sizeof(PmhEntry) * cap);
			}
			all[n++] = e[slot];
		}
		seg = pmhash_seg_meta(idx, seg)->ovf_next;
	}
	if (n > 1)
	{
		qsort(all, n, sizeof(PmhEntry), pmhash_entry_cmp);
		for (i = 1; i < n; i++)
			if (pmhash_entry_cmp(&all[i - 1], &all[i]) == 0)
				pmhash_problem(st, "segment %u: entry (hash %016llx, tid (%u,%u)) is stored twice",
							   segno, (unsigned long long) all[i].hash,
							   pmh_tag_block(all[i].tag), pmh_tag_offset(all[i].tag));
	}
	if (all)
		pfree(all);
}

/*
 * The D-bucket of a primary segment against the backup log: each pending
 * entry belongs to the segment, sits in the log slot it names, and that
 * slot is marked pending.  Returns the number of pending entries.
 */
static uint64
pmhash_check_pending(PmhashIndex *idx, PmhashCheckState *st, uint32 segno,
					 uint64 word, uint16 *seen_pending)
{
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	uint32		i;

	for (i = 0; i < meta->npending; i++)
	{
		const PmhPending *p = &meta->pending[i];
		const PmhEntry *le;
		uint16		bit = (uint16) (1 << (p->logslot % PMH_BUCKET_SLOTS));

		if (!pmh_hash_in_segment(p->hash, word))
			pmhash_problem(st, "segment %u: pending entry with hash %016llx belongs to another segment",
						   segno, (unsigned long long) p->hash);
		if (meta->pending_fp[i] != pmh_meta_fp(p->hash))
			pmhash_problem(st, "segment %u pending entry %u: fingerprint %04x does not match hash %016llx",
						   segno, i, meta->pending_fp[i],
						   (unsigned long long) p->hash);
		if (p->logslot >= pmhash_log_nlines(idx->shared) * PMH_BUCKET_SLOTS)
		{
			pmhash_problem(st, "segment %u: pending entry names backup-log slot %u past the log",
						   segno, p->logslot);
			continue;
		}
		le = pmh_log_entry(&idx->local->pool, p->logslot);
		if (le->hash != p->hash || le->tag != p->tag)
			pmhash_problem(st, "segment %u: pending entry (%u,%u) is not in backup-log slot %u",
						   segno, pmh_tag_block(p->tag), pmh_tag_offset(p->tag),
						   p->logslot);
		if (!(pmhash_log_line_state(idx->shared,
									p->logslot / PMH_BUCKET_SLOTS)->pending & bit))
			pmhash_problem(st, "backup-log slot %u holds a pending entry but is not marked pending",
						   p->logslot);
		if (seen_pending[p->logslot / PMH_BUCKET_SLOTS] & bit)
			pmhash_problem(st, "backup-log slot %u is pending in two D-buckets",
						   p->logslot);
		seen_pending[p->logslot / PMH_BUCKET_SLOTS] |= bit;
	}
	return meta->npending;
}

/*
 * The log extensions: each names a log segment of its number (marked 3 in
 * seen[]), and none past those in use names any.  Returns false if one in
 * use does not, or the log counts more extensions than its tables have
 * room for: then the log's lines cannot be read.
 */
static bool
pmhash_check_log_exts(PmhashIndex *idx, PmhashCheckState *st, uint8 *seen)
{
	PmhashShared *shared = idx->shared;
	PmhPool    *pool = &idx->local->pool;
	const uint32 *exts = pmhash_dsa_address(shared->logexts);
	uint64		nseg = shared->nsegments;
	uint64		i;
	bool		ok = true;

	if (shared->log.nexts > shared->logcap)
	{
		pmhash_problem(st, "%u log extensions in use, the tables have room for %u",
					   shared->log.nexts, shared->logcap);
		return false;
	}
	for (i = 0; i < shared->logcap; i++)
	{
		uint64		w;

		if (i >= shared->log.nexts)
		{
			if (exts[i] != PMH_NO_SEGMENT)
				pmhash_problem(st, "log extension %llu past the %u in use names segment %u",
							   (unsigned long long) i, shared->log.nexts, exts[i]);
			continue;
		}
		if (exts[i] >= nseg)
		{
			pmhash_problem(st, "log extension %llu names segment %u past the pool",
						   (unsigned long long) i, exts[i]);
			ok = false;
			continue;
		}
		w = pmh_seg_header(pool, exts[i])->word;
		if (!pmh_segword_is_valid(w) || !pmh_segword_is_log(w) ||
			pmh_segword_log_ext(w) != i)
		{
			pmhash_problem(st, "log extension %llu: segment %u has word %016llx",
						   (unsigned long long) i, exts[i], (unsigned long long) w);
			ok = false;
		}
		else
			seen[exts[i]] = 3;
	}
	return ok;
}

/*
 * The backup-log line states: pending masks as the D-buckets hold them
 * (seen_pending), and free masks that match the states.
 */
static void
pmhash_check_log_lines(PmhashIndex *idx, PmhashCheckState *st,
					   const uint16 *seen_pending)
{
	PmhashShared *shared = idx->shared;
	uint64		i;

	/* owners change under the log lock alone (a backend exiting) */
	LWLockAcquire(&shared->loglock, LW_SHARED);
	for (i = 0; i < pmhash_log_nlines(shared); i++)
	{
		PmhLogLine *ls = pmhash_log_line_state(shared, (uint32) i);
		bool		marked_free = pmhash_log_line_marked_free(shared, (uint32) i);

		if (ls->pending != seen_pending[i])
			pmhash_problem(st, "backup-log line %llu: marked pending %04x, D-buckets hold %04x",
						   (unsigned long long) i, ls->pending, seen_pending[i]);
		if (marked_free != (ls->pending == 0 && ls->owner == -1))
			pmhash_problem(st, "backup-log line %llu: the free mask says %s, its state says otherwise",
						   (unsigned long long) i, marked_free ? "free" : "in use");
	}
	LWLockRelease(&shared->loglock);
}

/* every check, with the index lock held exclusively */
static void
pmhash_check_index(PmhashIndex *idx, PmhashCheckState *st)
{
	PmhashShared *shared = idx->shared;
	PmhPool    *pool = &idx->local->pool;
	const PmhPoolHeader *hdr = (const PmhPoolHeader *) pool->base;
	uint64		nseg = shared->nsegments;
	uint8	   *seen;
	uint64		total = 0;
	uint64		primaries = 0;
	uint64		overflows = 0;
	uint64		ndir = UINT64CONST(1) << shared->global_depth;
	uint64		i;
	PmhHeaderStatus hs;
	uint16	   *seen_pending;
	uint64		pending = 0;
	bool		log_ok;

	hs = pmh_header_validate(hdr, pool->mapped_len);
	if (hs != PMH_HEADER_OK)
		pmhash_problem(st, "pool header: %s", pmh_header_status_string(hs));
	if (hdr->db_oid != shared->key.dbid || hdr->rel_node != shared->key.relnode ||
		hdr->spc_oid != shared->key.spcid || hdr->pool_id != shared->pool_id)
		pmhash_problem(st, "pool header names another index storage");
	if (pool->mapped_len < pmh_pool_bytes(nseg))
		pmhash_problem(st, "pool mapping is shorter than its %llu segments",
					   (unsigned long long) nseg);

	/* 0 = unseen, 1 = primary, 2 = overflow reached by a chain, 3 = log */
	seen = palloc0(nseg);
	log_ok = pmhash_check_log_exts(idx, st, seen);
	seen_pending = palloc0(sizeof(uint16) * pmhash_log_nlines(shared));

	/* the directory: each entry names a primary covering it */
	for (i = 0; i < ndir; i++)
	{
		uint32		segno = pmhash_lookup_segment(idx, shared->global_depth == 0 ?
												  0 : i << (64 - shared->global_depth));
		uint64		w;
		int			d;

		if (segno >= nseg)
		{
			pmhash_problem(st, "directory entry %llu points past the pool (segment %u)",
						   (unsigned long long) i, segno);
			continue;
		}
		w = pmh_seg_header(pool, segno)->word;
		d = pmh_segword_depth(w);
		if (!pmh_segword_is_valid(w) || pmh_segword_is_overflow(w) ||
			d > shared->global_depth ||
			(d > 0 && (i >> (shared->global_depth - d)) != pmh_segword_prefix(w)))
			pmhash_problem(st, "directory entry %llu points at segment %u whose word %016llx does not cover it",
						   (unsigned long long) i, segno, (unsigned long long) w);
		else
			seen[segno] = 1;
	}

	/* segments: words, chains, and slots */
	for (i = 0; i < nseg; i++)
	{
		PmhashSegSlot *slot = pmhash_seg_slot(idx, (uint32) i);
		PmhSegHeader *h = pmh_seg_header(pool, (uint32) i);
		PmhSegMeta *meta = pmhash_seg_meta(idx, (uint32) i);

		/* a free segment's metadata is set only when it is taken */
		uint64		mword = slot->meta_valid ? meta->word : 0;
		uint32		o;

		if (h->word != mword)
			pmhash_problem(st, "segment %llu: pool word %016llx, shared memory word %016llx",
						   (unsigned long long) i, (unsigned long long) h->word,
						   (unsigned long long) mword);
		if (seen[i] != 1)
			continue;
		primaries++;
		if (!slot->loaded || !slot->meta_valid)
		{
			/* its metadata was never written: nothing to compare */
			pmhash_problem(st, "segment %llu is not loaded", (unsigned long long) i);
			continue;
		}
		total += pmhash_check_segment(idx, st, (uint32) i, h->word, true);
		if (log_ok)
			pending += pmhash_check_pending(idx, st, (uint32) i, h->word,
											seen_pending);
		for (o = meta->ovf_next; o != PMH_NO_SEGMENT;
			 o = pmhash_seg_meta(idx, o)->ovf_next)
		{
			if (o >= nseg || seen[o] != 0 ||
				!pmh_segword_is_overflow(pmh_seg_header(pool, o)->word))
			{
				pmhash_problem(st, "overflow chain of segment %llu is broken at segment %u",
							   (unsigned long long) i, o);
				break;
			}
			seen[o] = 2;
			overflows++;
			total += pmhash_check_segment(idx, st, o, h->word, false);
		}
		if ((meta->ovf_next == PMH_NO_SEGMENT ? 0 :
			 (uint64) meta->ovf_next + 1) != h->ovf_next)
			pmhash_problem(st, "segment %llu: pool and shared memory disagree on its overflow chain",
						   (unsigned long long) i);
		pmhash_check_duplicates(idx, st, (uint32) i, h->word);
	}
	for (i = 0; i < nseg; i++)
		if (seen[i] == 0 && pmh_seg_header(pool, (uint32) i)->word != 0)
			pmhash_problem(st, "segment %llu is in use in the pool but unreachable",
						   (unsigned long long) i);

	if (primaries != shared->primaries || overflows != shared->overflows)
		pmhash_problem(st, "shared memory counts %llu primary and %llu overflow segments, found %llu and %llu",
					   (unsigned long long) shared->primaries,
					   (unsigned long long) shared->overflows,
					   (unsigned long long) primaries,
					   (unsigned long long) overflows);
	/* (the log's lines cannot be read: the pending entries are not known) */
	if (!log_ok)
	{
		pfree(seen);
		pfree(seen_pending);
		return;
	}
	pmhash_check_log_lines(idx, st, seen_pending);
	if (pg_atomic_read_u64(&shared->unloaded) != 0 ||
		shared->log_unverified != 0 || DsaPointerIsValid(shared->reclist))
		pmhash_problem(st, "after loading every segment, %llu are counted as not loaded and %u log entries as not sorted out",
					   (unsigned long long) pg_atomic_read_u64(&shared->unloaded),
					   shared->log_unverified);
	if (pending != shared->log.pending)
		pmhash_problem(st, "shared memory counts %u pending entries, D-buckets hold %llu",
					   shared->log.pending, (unsigned long long) pending);
	if (total + pending != pg_atomic_read_u64(&shared->entries))
		pmhash_problem(st, "shared memory counts %llu entries, pool has %llu (%llu of them pending)",
					   (unsigned long long) pg_atomic_read_u64(&shared->entries),
					   (unsigned long long) (total + pending),
					   (unsigned long long) pending);
	pfree(seen);
	pfree(seen_pending);
}

/* pmhash_check(regclass): one row per inconsistency, none when consistent */
Datum
pmhash_check(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			relid = PG_GETARG_OID(0);
	Relation	rel;
	PmhashIndex idx;
	PmhashCheckState st;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	st.store = rsinfo->setResult;
	st.desc = rsinfo->setDesc;
	st.problems = 0;

	rel = pmhash_open_index(relid, ROLE_PG_MONITOR);
	pmhash_attach(rel, LW_EXCLUSIVE, &idx);
	pmhash_load_all(&idx, false);
	pmhash_check_index(&idx, &st);
	pmhash_detach(&idx);
	relation_close(rel, AccessShareLock);

	if (st.problems > 1000)
	{
		Datum		value;
		bool		isnull = false;
		char		buf[128];

		snprintf(buf, sizeof(buf), "... and %llu more problems",
				 (unsigned long long) (st.problems - 1000));
		value = CStringGetTextDatum(buf);
		tuplestore_putvalues(st.store, st.desc, &value, &isnull);
	}
	return (Datum) 0;
}
