/*-------------------------------------------------------------------------
 *
 * pmhashbuild.c
 *	  Building a pmhash index: a fresh pool, and a bulk load of the heap's
 *	  entries that persists the pool once at the end.
 *
 * The build bypasses the write path's logs: pmhash_insert_entry puts each
 * entry straight into its segment, with persistence deferred to the end
 * of the build.  It takes the target segment's lock exclusive under the
 * index lock; when the segment has no room, it retakes the index lock
 * exclusively and splits the segment or extends its overflow chain, then
 * retries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/tableam.h"
#include "catalog/pg_statistic.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "optimizer/plancat.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

/* entries the heap scan hands over per lock acquisition */
#define PMHASH_BUILD_BATCH		32

/*
 * The share of a segment's slots that the estimated entries are assumed to
 * fill when the build sizes the directory up front: a little below the load
 * that splitting reaches on its own (0.88 to 0.9 at 1M uniform keys), so
 * that an accurate estimate never costs space.
 */
#define PMHASH_BUILD_PRESIZE_LOAD	0.9

/*
 * Presizing takes at most 1 / this of pmhash.shared_memory for the segments'
 * shared state: the estimate may be stale (rows deleted since ANALYZE), and
 * the build must not fail for lack of memory that the real entries would
 * not have needed.
 */
#define PMHASH_BUILD_PRESIZE_SHMEM_SHARE	4

typedef struct PmhashBuildState
{
	PmhashIndex idx;
	double		indtuples;
	/* entries waiting to go in together (pmhash_build_flush) */
	uint64		hashes[PMHASH_BUILD_BATCH];
	ItemPointerData tids[PMHASH_BUILD_BATCH];
	bool		alive[PMHASH_BUILD_BATCH];
	int			nwaiting;
	PmhashBuildUnique *unique;	/* a UNIQUE index's duplicate check */
	bool		wal;			/* log the entries (pmhash_xlog_wanted) */
	/* entries stored but not logged yet, PMHASH_XLOG_BATCH to a record */
	uint64		wal_hashes[PMHASH_XLOG_BATCH];
	ItemPointerData wal_tids[PMHASH_XLOG_BATCH];
	int			nwal;
} PmhashBuildState;

/* is (hash, tag) waiting in the D-bucket of primary segment segno? */
static bool
pmhash_pending_contains(PmhashIndex *idx, uint32 segno, uint64 hash,
						uint64 tag)
{
	uint64		tags[PMH_DBUCKET_SLOTS];
	int			n;
	int			i;

	n = pmh_pending_lookup(pmhash_seg_meta(idx, segno), hash, tags, 0,
						   PMH_DBUCKET_SLOTS);
	for (i = 0; i < Min(n, PMH_DBUCKET_SLOTS); i++)
		if (tags[i] == tag)
			return true;
	return false;
}

/*
 * Insert (hash, tid) into an attached index (any lock mode; the index lock
 * is held in the same mode on return).  With check, nothing is stored if
 * the segment, its chain or its D-bucket holds the same (hash, TID)
 * already (redo, and a rebuild racing inserts); without, the caller knows
 * it does not (CREATE INDEX sees every heap TID once).  Returns whether
 * the entry was stored.
 */
bool
pmhash_insert_entry_checked(PmhashIndex *idx, uint64 hash, ItemPointer tid,
							bool check)
{
	LWLockMode	entry_mode = idx->mode;
	uint32		block = ItemPointerGetBlockNumber(tid);
	uint16		offset = ItemPointerGetOffsetNumber(tid);

	for (;;)
	{
		uint32		segno = pmhash_lock_hash(idx, hash, LW_EXCLUSIVE);
		PmhInsertResult r;

		if (!check)
			r = pmh_insert_new(&idx->local->pool, &idx->cb, segno, hash,
							   block, offset);
		else if (pmhash_pending_contains(idx, segno, hash,
										 pmh_tag_make(hash, block, offset)))
			r = PMH_INSERT_EXISTS;
		else
			r = pmh_insert(&idx->local->pool, &idx->cb, segno, hash, block,
						   offset);
		pmhash_unlock_segment(idx, segno);

		switch (r)
		{
			case PMH_INSERT_DONE:
				pg_atomic_fetch_add_u64(&idx->shared->entries, 1);
				if (idx->mode != entry_mode)
					pmhash_relock(idx, entry_mode);
				return true;
			case PMH_INSERT_EXISTS:
				if (idx->mode != entry_mode)
					pmhash_relock(idx, entry_mode);
				return false;
			case PMH_INSERT_IOERROR:
				pmhash_report_io_error(idx->rel, "persist entry in");
				break;
			case PMH_INSERT_FULL:
				/* pmh_insert_new always chooses */
				elog(ERROR, "no remedy chosen for a full pmhash segment");
				break;
			case PMH_INSERT_SPLIT:
			case PMH_INSERT_OVERFLOW:
				if (idx->mode != LW_EXCLUSIVE)
				{
					/* structure changes need the whole index; look again */
					pmhash_relock(idx, LW_EXCLUSIVE);
					continue;
				}
				{
					PmhWriter	w;

					pmhash_writer(idx, &w);
					if (pmh_wp_make_room(&w, segno, r) != PMH_WP_OK)
						elog(ERROR, "could not make room in pmhash segment %u", segno);
				}
				break;
		}
		CHECK_FOR_INTERRUPTS();
	}
}

/* insert (hash, tid), known not to be stored yet: see above */
void
pmhash_insert_entry(PmhashIndex *idx, uint64 hash, ItemPointer tid)
{
	(void) pmhash_insert_entry_checked(idx, hash, tid, false);
}

/* log the stored entries that wait for the WAL (one INSERT record) */
static void
pmhash_build_wal(PmhashBuildState *bs)
{
	if (bs->nwal == 0)
		return;
	pmhash_xlog_insert(bs->idx.rel, bs->idx.shared->pool_id, bs->wal_hashes,
					   bs->wal_tids, bs->nwal);
	bs->nwal = 0;
}

/*
 * A unique build, before it inserts waiting entry i (a live row's): note
 * the rows whose entries have its hash already, for the duplicate check.
 * Returns whether the pairs noted should be checked now.
 */
static bool
pmhash_build_note_same_hash(PmhashBuildState *bs, int i)
{
	uint64		buf[PMH_BUCKET_SLOTS];
	uint64	   *found;
	int			n;
	bool		full = false;

	n = pmhash_lookup_hash_all(&bs->idx, bs->hashes[i], buf, PMH_BUCKET_SLOTS,
							   &found);
	if (n > 0)
		full = pmhash_build_unique_note(bs->unique, &bs->tids[i], found, n);
	if (found != buf)
		pfree(found);
	return full;
}

/*
 * Insert the entries the heap scan has handed over, in their order.  First
 * the metadata each will touch (first line, fingerprint bucket, occupancy
 * masks) starts loading for all of them, then the pool slot each will
 * fill, so that their cache misses overlap instead of each stalling its
 * insert.
 *
 * The index lock is held only around a batch, not across the heap scan:
 * the scan runs user code (expressions, predicates) and must stay
 * cancellable.  Nobody else can see the new storage anyway.
 */
static void
pmhash_build_flush(PmhashBuildState *bs)
{
	uint32		segno[PMHASH_BUILD_BATCH];
	PmhSegMeta *meta[PMHASH_BUILD_BATCH];
	bool		suspects = false;
	int			i;

	if (bs->nwaiting == 0)
		return;
	pmhash_index_lock(bs->idx.shared, LW_EXCLUSIVE);
	bs->idx.mode = LW_EXCLUSIVE;
	for (i = 0; i < bs->nwaiting; i++)
	{
		segno[i] = pmhash_lookup_segment(&bs->idx, bs->hashes[i]);
		meta[i] = pmhash_seg_meta(&bs->idx, segno[i]);
		pmh_insert_prefetch_meta(meta[i], bs->hashes[i]);
	}
	for (i = 0; i < bs->nwaiting; i++)
		pmh_insert_prefetch_slot(&bs->idx.local->pool, meta[i], segno[i]);
	for (i = 0; i < bs->nwaiting; i++)
	{
		if (bs->unique != NULL && bs->alive[i])
			suspects |= pmhash_build_note_same_hash(bs, i);
		pmhash_insert_entry(&bs->idx, bs->hashes[i], &bs->tids[i]);
	}
	pmhash_index_unlock(bs->idx.shared);
	if (suspects)
		pmhash_build_unique_check(bs->unique);
	if (bs->wal)
	{
		if (bs->nwal + bs->nwaiting > PMHASH_XLOG_BATCH)
			pmhash_build_wal(bs);
		memcpy(&bs->wal_hashes[bs->nwal], bs->hashes,
			   sizeof(uint64) * bs->nwaiting);
		memcpy(&bs->wal_tids[bs->nwal], bs->tids,
			   sizeof(ItemPointerData) * bs->nwaiting);
		bs->nwal += bs->nwaiting;
	}
	bs->indtuples += bs->nwaiting;
	bs->nwaiting = 0;
	if (((uint64) bs->indtuples) % 4096 == 0)
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE,
									 (int64) bs->indtuples);
}

/*
 * The share of the heap's rows whose first key column is NULL (and so not
 * indexed), as ANALYZE last saw it: only for a plain column, and not in a
 * NULLS NOT DISTINCT index, which indexes NULLs; 0 when unknown.
 */
static double
pmhash_build_null_fraction(Relation heap, IndexInfo *indexInfo)
{
	AttrNumber	attnum = indexInfo->ii_IndexAttrNumbers[0];
	HeapTuple	tuple;
	double		frac = 0.0;

	if (attnum <= 0 || indexInfo->ii_NullsNotDistinct)
		return 0.0;
	tuple = SearchSysCache3(STATRELATTINH,
							ObjectIdGetDatum(RelationGetRelid(heap)),
							Int16GetDatum(attnum), BoolGetDatum(false));
	if (HeapTupleIsValid(tuple))
	{
		frac = ((Form_pg_statistic) GETSTRUCT(tuple))->stanullfrac;
		ReleaseSysCache(tuple);
	}
	return frac;
}

/*
 * Split the new index's empty segments until the directory has as many as
 * the heap's estimated rows will need, as the hash AM sizes its buckets
 * before a build: splitting an empty segment moves nothing, while each of
 * the splits the load would otherwise make moves half a segment.  The
 * estimate leaves out the rows ANALYZE saw with a NULL key, and the
 * presized segments take at most a quarter of pmhash.shared_memory.  A
 * partial index gets no estimate (its predicate's selectivity is
 * unknown), nor does a table too small to fill two segments.
 */
static void
pmhash_build_presize(PmhashIndex *idx, Relation heap, IndexInfo *indexInfo)
{
	BlockNumber relpages;
	BlockNumber actual;
	double		reltuples;
	double		allvisfrac;
	double		nsegs;
	int			depth = 0;
	uint32		i;

	if (indexInfo->ii_Predicate != NIL)
		return;
	estimate_rel_size(heap, NULL, &relpages, &reltuples, &allvisfrac);
	/* the planner assumes 10 pages of a small table never vacuumed: not us */
	actual = RelationGetNumberOfBlocks(heap);
	if (actual < relpages)
		reltuples *= (double) actual / relpages;
	reltuples *= 1.0 - pmhash_build_null_fraction(heap, indexInfo);
	nsegs = reltuples / (PMH_SEG_SLOTS * PMHASH_BUILD_PRESIZE_LOAD);
	/* an estimate can be stale: never more than a quarter of the memory */
	nsegs = Min(nsegs, (double) pmhash_shared_memory_mb * 1024 * 1024 /
				PMHASH_BUILD_PRESIZE_SHMEM_SHARE /
				(sizeof(PmhSegMeta) + sizeof(PmhashSegSlot)));
	while (depth < PMH_MAX_DEPTH && nsegs >= 2.0)
	{
		depth++;
		nsegs /= 2;
	}
	if (depth == 0)
		return;

	pmhash_index_lock(idx->shared, LW_EXCLUSIVE);
	idx->mode = LW_EXCLUSIVE;
	for (i = 0; i < ((uint32) 1 << idx->shared->global_depth); i++)
	{
		for (;;)
		{
			int			gd = idx->shared->global_depth;
			uint32		segno = pmhash_lookup_segment(idx, gd == 0 ? 0 :
													  (uint64) i << (64 - gd));

			if (pmh_segword_depth(pmhash_seg_meta(idx, segno)->word) >= depth)
				break;
			pmhash_split_segment(idx, segno);
		}
	}
	pmhash_index_unlock(idx->shared);
}

/* heap scan callback: one entry per indexed row (pmhash_hash_row) */
static void
pmhash_build_callback(Relation index, ItemPointer tid, Datum *values,
					  bool *isnull, bool tupleIsAlive, void *state)
{
	PmhashBuildState *bs = (PmhashBuildState *) state;

	if (!pmhash_hash_row(index, values, isnull, &bs->hashes[bs->nwaiting]))
		return;
	bs->tids[bs->nwaiting] = *tid;
	bs->alive[bs->nwaiting] = tupleIsAlive;
	if (++bs->nwaiting == PMHASH_BUILD_BATCH)
		pmhash_build_flush(bs);
}

/*
 * ambuild: a new pool for the index's (new) storage, filled from the heap
 * with persistence deferred, then persisted in one go.
 */
IndexBuildResult *
pmhashbuild(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result;
	PmhashBuildState bs;
	double		reltuples;
	uint64		pool_id = pmhash_new_pool_id();
	PmhPool    *pool;

	memset(&bs, 0, sizeof(bs));
	pmhash_attach_new(index, pool_id, 0, &bs.idx);
	bs.wal = pmhash_xlog_wanted(index);
	if (bs.wal)
		pmhash_xlog_create(index, pool_id, true);
	pmhash_write_metapage(index, MAIN_FORKNUM, pool_id, 0);

	if (indexInfo->ii_Unique)
		bs.unique = pmhash_build_unique_begin(index, heap);

	pool = &bs.idx.local->pool;
	pool->no_persist = 1;
	pmhash_detach(&bs.idx);
	pmhash_build_presize(&bs.idx, heap, indexInfo);

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE,
								 PMHASH_BUILD_PHASE_SCAN);
	reltuples = table_index_build_scan(heap, index, indexInfo, true, true,
									   pmhash_build_callback, &bs, NULL);
	pmhash_build_flush(&bs);
	if (bs.unique != NULL)
		pmhash_build_unique_end(bs.unique);

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE,
								 PMHASH_BUILD_PHASE_PERSIST);
	pool = &bs.idx.local->pool; /* the pool may have been remapped */
	pool->no_persist = 0;

	/* the segments, sequentially, as whole lines (header and log are) */
	if (pmh_persist(pool, pool->base + PMH_SEG_OFFSET,
					pool->mapped_len - PMH_SEG_OFFSET) != 0)
		pmhash_report_io_error(index, "persist");
	pmhash_stats_add_user_bytes(bs.idx.local,
								(uint64) bs.indtuples * PMH_ENTRY_BYTES);
	if (bs.wal)
	{
		pmhash_build_wal(&bs);
		pmhash_xlog_build_end(index, pool_id);
	}

	result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = bs.indtuples;
	return result;
}

/*
 * ambuildempty: the init fork of an unlogged index.  Its metapage carries
 * PMHASH_META_INIT, so that after crash recovery has copied it over the
 * main fork, the first backend to use the index starts an empty pool.
 */
void
pmhashbuildempty(Relation index)
{
	PmhashMetaPageData meta;
	uint64		pool_id = 0;

	if (RelationGetNumberOfBlocks(index) > 0 &&
		pmhash_read_metapage(index, &meta))
		pool_id = meta.pool_id;
	pmhash_write_metapage(index, INIT_FORKNUM, pool_id, PMHASH_META_INIT);
}

/* names of pmhash's build phases */
char *
pmhashbuildphasename(int64 phasenum)
{
	switch (phasenum)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case PMHASH_BUILD_PHASE_SCAN:
			return "loading entries into pool";
		case PMHASH_BUILD_PHASE_PERSIST:
			return "persisting pool";
		default:
			return NULL;
	}
}
