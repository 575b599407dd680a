/*-------------------------------------------------------------------------
 *
 * pmhashattach.c
 *	  Attaching a backend to an index: finding the shared state of its
 *	  storage, loading that from the pool after a restart, and mapping the
 *	  pool in this backend.
 *
 * Every use of an index starts with pmhash_attach, which returns with the
 * index lock held in the mode asked for (pmhash_detach lets it go,
 * pmhash_relock trades it for another mode).  The first backend to need an
 * index after a server start (or crash) loads its shared state from the
 * pool (pmhash_load): it validates the file, undoes half-done splits, and
 * builds the directory and the free list from the segment words; the
 * segments' entries are read when each is first locked (pmhashrecover.c).
 * A load that finds the pool itself unusable marks the index for the
 * planner (pmhash_known_unusable).  ambuild starts the shared state of a
 * new pool with pmhash_attach_new.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "pmhash.h"

/* what an index relation remembers in rd_amcache */
typedef struct PmhashRelCache
{
	PmhashKey	key;
	PmhashShared *shared;
	PmhashLocal *local;
} PmhashRelCache;

/* core callback: metadata of a segment */
static PmhSegMeta *
pmhash_cb_get_meta(void *arg, uint32 segno)
{
	return pmhash_seg_meta((PmhashIndex *) arg, segno);
}

/* make sure the local mapping is of the current pool and long enough */
static void
pmhash_check_local(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	PmhashLocal *local = idx->local;
	size_t		need = pmh_pool_bytes(shared->nsegments);

	if (local->generation != shared->generation)
	{
		pmhash_pool_close(local);
		pmhash_pool_open(idx->rel, &shared->key, shared->pool_id, local, NULL);
		local->generation = shared->generation;
	}
	if (local->pool.mapped_len < need)
		pmhash_pool_remap(idx->rel, local, need);
	if (local->stats_slot != shared->stats_slot ||
		local->stats_pool != shared->pool_id ||
		local->pool.flush_hook == NULL)
		pmhash_stats_attach_pool(local, shared);
	local->pool.log_ext_segs = pmhash_dsa_address(shared->logexts);
	pmhash_writeback_setup(shared, local);
}

/*
 * Does a load error say that the pool itself cannot be used (as opposed
 * to a lack of memory or another passing condition)?
 */
static bool
pmhash_error_is_pool_fault(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_DATA_CORRUPTED ||
		sqlerrcode == ERRCODE_UNDEFINED_FILE ||
		sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE ||
		sqlerrcode == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
}

/* error context of a load: which pool of which index */
static void
pmhash_load_context(void *arg)
{
	PmhashIndex *idx = (PmhashIndex *) arg;
	char		path[MAXPGPATH];

	pmhash_pool_path(&idx->shared->key, path, sizeof(path));
	errcontext("loading pool file \"%s\" of pmhash index \"%s\"",
			   path, RelationGetRelationName(idx->rel));
}

/*
 * Open the pool of the index being loaded.  Returns false when it must be
 * replaced by an empty pool and rebuilt from the heap: its contents cannot
 * be trusted (pmhash_pool_open), or, during recovery or in a server started
 * from a base backup, it is missing or unusable -- a standby cannot
 * REINDEX, and its pools come from a base backup (which may not have
 * copied them whole) or from redo.  Otherwise a missing or corrupt pool
 * stays an ERROR with a REINDEX hint.
 */
static bool
pmhash_open_or_rebuild(PmhashIndex *idx, uint64 pool_id, PmhPoolHeader *hdr)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		trusted = false;

	pmhash_pool_distrust = NULL;

	if (!RecoveryInProgress() && !pmhash_started_from_backup)
		trusted = pmhash_pool_open(idx->rel, &idx->shared->key, pool_id,
								   idx->local, hdr);
	else
	{
		PG_TRY();
		{
			trusted = pmhash_pool_open(idx->rel, &idx->shared->key, pool_id,
									   idx->local, hdr);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			if (!pmhash_error_is_pool_fault(edata->sqlerrcode))
				PG_RE_THROW();
			FlushErrorState();
			ereport(LOG,
					(errmsg("pmhash index \"%s\": %s", RelationGetRelationName(idx->rel),
							edata->message)));
			FreeErrorData(edata);
		}
		PG_END_TRY();
	}
	if (!trusted)
		pmhash_pool_close(idx->local);
	return trusted;
}

/*
 * Build the shared state of an index from its pool: validate the file,
 * undo half-done splits, and load directory, fingerprints and occupancy.
 * An unlogged index whose main fork was reset from its init fork by crash
 * recovery gets an empty pool.  Called with the index lock exclusive.
 */
static void
pmhash_load(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	PmhashLocal *local = idx->local;
	Relation	rel = idx->rel;
	PmhashMetaPageData meta;
	PmhPoolHeader hdr;
	PmhRecoveryResult res;
	PmhSegRole *roles;
	uint32	   *owner;
	uint64	   *scratch;
	uint64		nseg;
	uint64		nunloaded = 0;
	uint32	   *dir;
	uint32	   *stack;
	PmhashSegChunk *chunk = NULL;
	uint64		i;

	pmhash_free_shared(shared);
	pmhash_pool_close(local);
	shared->generation = pmhash_next_generation();

	if (idx->redo_pool_id != 0)
	{
		/* redo names the pool itself: no metapage reads during recovery */
		memset(&meta, 0, sizeof(meta));
		meta.pool_id = idx->redo_pool_id;
	}
	else if (!pmhash_read_metapage(rel, &meta))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmhash index \"%s\" has not been built",
						RelationGetRelationName(rel)),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(rel))));

	if (meta.flags & PMHASH_META_INIT)
	{
		/* unlogged index after a crash: start over, empty */
		uint64		pool_id = meta.pool_id;

		if (pool_id == 0)
			pool_id = pmhash_new_pool_id();
		pmhash_pool_create(rel, pool_id, local, 0);
		pmhash_write_metapage(rel, MAIN_FORKNUM, pool_id, 0);
		meta.pool_id = pool_id;
		hdr.pool_id = pool_id;
	}
	else if (!pmhash_open_or_rebuild(idx, meta.pool_id, &hdr))
	{
		/*
		 * A copy from before a base backup, a pool a standby lacks or could
		 * not keep: an empty pool in its place, which the rebuild worker
		 * fills from the heap while inserts (and redo) go on into it.
		 */
		pmhash_pool_create(rel, meta.pool_id, local, PMH_STATE_REBUILD);
		pmhash_set_rebuild(shared, true);
		hdr.pool_id = meta.pool_id;
		ereport(LOG,
				(errmsg("pmhash index \"%s\": its pool will be rebuilt from the table in the background",
						RelationGetRelationName(rel)),
				 pmhash_pool_distrust ?
				 errdetail("The pool was not trusted: %s.", pmhash_pool_distrust) : 0));
	}
	pmhash_writeback_loaded(shared, &local->pool);

	shared->pool_id = meta.pool_id;
	shared->indexoid = RelationGetRelid(rel);
	local->generation = shared->generation;
	if (pmh_pool_note_crashes(&local->pool, pmhash_crash_count,
							  &shared->stale) != 0)
		pmhash_report_io_error(rel, "persist the state of");

	/*
	 * A pool loaded during recovery may have been a primary's: one that
	 * wrote entries of transactions it then aborted or lost, which no WAL
	 * record of the new history ever deletes.  Treat them as the entries
	 * of lost inserts after a crash (see "The TID-reuse hazard").
	 */
	if (RecoveryInProgress() && !shared->stale)
	{
		if (pmh_pool_state_set(&local->pool, PMH_STATE_STALE, 0) != 0)
			pmhash_report_io_error(rel, "persist the state of");
		shared->stale = true;
	}

	nseg = pmh_pool_nsegments(&local->pool);
	roles = palloc(sizeof(PmhSegRole) * nseg);
	owner = palloc(sizeof(uint32) * nseg);
	scratch = palloc_extended(sizeof(uint64) * PMH_RECOVER_SCRATCH(nseg),
							  MCXT_ALLOC_HUGE);
	if (pmh_recover_words(&local->pool, roles, owner, scratch, &res) != 0)
	{
		if (res.error[0] == '\0')
			pmhash_report_io_error(rel, "repair");
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pool of pmhash index \"%s\" is corrupt", RelationGetRelationName(rel)),
				 errdetail("%s.", res.error),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(rel))));
	}
	if (res.orphans_cleared > 0)
		ereport(LOG,
				(errmsg("pmhash index \"%s\": discarded %llu segments of interrupted splits",
						RelationGetRelationName(rel),
						(unsigned long long) res.orphans_cleared)));

	/*
	 * Shared arrays, the free stack (its segments are checked for zero only
	 * when taken: pmhash_reserve_segments), and the directory from the
	 * primaries' words.  A primary segment's metadata and its chain's are
	 * read when the segment is first used (pmhash_lock_segment) or by the
	 * prewarm worker: here only the words, so that the index is usable at
	 * once.
	 */
	pmhash_extend_shared(shared, nseg);
	shared->nfree = 0;
	stack = pmhash_dsa_address(shared->freesegs);
	for (i = nseg; i > 0; i--)
		if (roles[i - 1] == PMH_SEG_FREE)
			stack[shared->nfree++] = (uint32) (i - 1);
	shared->free_unchecked = shared->nfree;

	shared->dir = pmhash_shared_alloc(shared,
								   sizeof(uint32) * ((size_t) 1 << res.global_depth));
	shared->global_depth = res.global_depth;
	dir = pmhash_dsa_address(shared->dir);
	for (i = 0; i < nseg; i++)
	{
		PmhashSegSlot *slot;
		PmhSegHeader *h;

		if (pmhash_chunk_place((uint32) i) == 0)
			chunk = pmhash_seg_chunk(idx, pmhash_chunk_no((uint32) i));
		if (roles[i] == PMH_SEG_FREE)
			continue;
		slot = &chunk->slot[pmhash_chunk_place((uint32) i)];
		h = pmh_seg_header(&local->pool, (uint32) i);
		if (roles[i] == PMH_SEG_LOG)
		{
			pmh_meta_reset(&chunk->meta[pmhash_chunk_place((uint32) i)], h->word);
			slot->meta_valid = true;
		}
		else if (roles[i] == PMH_SEG_PRIMARY)
		{
			/* its chain's metadata is read with it */
			slot->loaded = false;
			nunloaded++;
			pmh_dir_assign(dir, res.global_depth, h->word, (uint32) i);
		}
	}
	pg_atomic_write_u64(&shared->unloaded, nunloaded);
	shared->all_loaded = nunloaded == 0;

	shared->primaries = res.primaries;
	shared->overflows = res.overflows;
	pg_atomic_write_u64(&shared->entries, 0);

	/* the live slots of the backup log, sorted by segment */
	pmhash_check_local(idx);
	pmhash_log_recover(idx);
	shared->state = PMHASH_STATE_READY;

	pfree(roles);
	pfree(owner);
	pfree(scratch);
}

/*
 * Redo persists nothing into a pool that is being rebuilt from the heap or
 * filled by the redo of a build (see pmhashredo.c): decided under the
 * index lock, every time redo takes it, since the rebuild ends under it.
 */
static void
pmhash_redo_persist_mode(PmhashIndex *idx)
{
	PmhPool    *pool = &idx->local->pool;

	pool->no_persist = (idx->shared->rebuild ||
						(pmh_pool_state(pool)->flags & PMH_STATE_WALBUILD) != 0);
}

/*
 * With the index lock held in mode: load the index's shared state from its
 * pool if that has not been done, and make this backend's mapping current.
 * A failure that says the pool itself is unusable marks the index for the
 * planner (pmhash_known_unusable); a failed load gives back the shared
 * memory it took.  A success clears the mark.
 */
static void
pmhash_make_ready(PmhashIndex *idx, LWLockMode mode)
{
	PmhashShared *shared = idx->shared;
	volatile bool loading = false;

	/* the common case: loaded, and mapped here */
	if (likely(pmhash_ready_here(shared, idx->local)))
	{
		pmhash_check_local(idx);
		if (unlikely(idx->redo_pool_id != 0))
			pmhash_redo_persist_mode(idx);
		return;
	}

	PG_TRY();
	{
		if (shared->state != PMHASH_STATE_READY)
		{
			/*
			 * The load runs with the lock exclusive, and idx->mode must say
			 * so: rebuilding the backup log can split segments, and with a
			 * shared mode there it would trade the lock (pmhash_relock) in
			 * the middle of the load, and load again inside it.
			 */
			if (mode != LW_EXCLUSIVE)
			{
				pmhash_index_unlock(shared);
				pmhash_index_lock(shared, LW_EXCLUSIVE);
				idx->mode = LW_EXCLUSIVE;
			}
			if (shared->state != PMHASH_STATE_READY)
			{
				ErrorContextCallback errcb;

				errcb.callback = pmhash_load_context;
				errcb.arg = idx;
				errcb.previous = error_context_stack;
				error_context_stack = &errcb;
				loading = true;
				pmhash_load(idx);
				loading = false;
				error_context_stack = errcb.previous;
			}
			if (mode != LW_EXCLUSIVE)
			{
				pmhash_index_unlock(shared);
				pmhash_index_lock(shared, mode);
				idx->mode = mode;
			}
		}
		pmhash_check_local(idx);
	}
	PG_CATCH();
	{
		/* a failed load holds the index lock exclusively */
		if (loading)
			pmhash_free_shared(shared);
		if (pmhash_error_is_pool_fault(geterrcode()))
		{
			PmhashFileSig sig;

			pmhash_pool_file_sig(&shared->key, &sig);
			pmhash_set_unusable(shared, &sig);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (unlikely(shared->unusable))
		pmhash_set_unusable(shared, NULL);
	if (unlikely(idx->redo_pool_id != 0))
		pmhash_redo_persist_mode(idx);
}

/* fill in the parts of an attached-index handle */
static void
pmhash_init_handle(Relation index, PmhashShared *shared, PmhashLocal *local,
				   LWLockMode mode, PmhashIndex *idx)
{
	idx->rel = index;
	idx->shared = shared;
	idx->local = local;
	idx->mode = mode;
	idx->cb.get_meta = pmhash_cb_get_meta;
	idx->cb.alloc_segment = pmhash_cb_alloc_segment;
	idx->cb.arg = idx;
	idx->redo_pool_id = 0;
	idx->heap = NULL;
}

/*
 * Attach to an index: find its shared state (loading it from the pool if
 * needed), map its pool in this backend, and return with the index lock
 * held in "mode".  Release with pmhash_detach().
 */
void
pmhash_attach(Relation index, LWLockMode mode, PmhashIndex *idx)
{
	PmhashKey	key;
	PmhashShared *shared;
	PmhashLocal *local;

	PmhashRelCache *cache;

	if (!pmhash_attached_before(index, &shared, &local))
	{
		cache = (PmhashRelCache *) index->rd_amcache;
		pmhash_key_for_rel(index, &key);
		pmhash_require_preload();
		if (index->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("pmhash indexes on temporary tables are not supported")));
		pmhash_backend_init();
		(void) pmhash_adopt_pool(index, &key);
		shared = pmhash_shared_entry(&key, RelationGetRelid(index));
		local = pmhash_local_entry(&key);
		if (cache == NULL)
			cache = MemoryContextAlloc(index->rd_indexcxt, sizeof(PmhashRelCache));
		cache->key = key;
		cache->shared = shared;
		cache->local = local;
		index->rd_amcache = cache;
	}
	pmhash_init_handle(index, shared, local, mode, idx);

	pmhash_index_lock(shared, mode);
	pmhash_make_ready(idx, mode);
}

/*
 * Attach for redo (the startup process): index is a fake relation
 * (CreateFakeRelcacheEntry) naming the storage, pool_id the pool the
 * record is about.  Returns false, without the index lock, when the
 * storage's current pool is another one (the record is older than the
 * pool, which redo of a later CREATE or a rebuild made).
 */
bool
pmhash_attach_redo(Relation index, uint64 pool_id, LWLockMode mode,
				   PmhashIndex *idx)
{
	PmhashKey	key;
	PmhashShared *shared;
	PmhashLocal *local;

	pmhash_backend_init();
	pmhash_key_for_rel(index, &key);
	shared = pmhash_shared_entry(&key, InvalidOid);
	local = pmhash_local_entry(&key);
	pmhash_init_handle(index, shared, local, mode, idx);
	idx->redo_pool_id = pool_id;
	pmhash_index_lock(shared, mode);
	pmhash_make_ready(idx, mode);
	if (shared->pool_id != pool_id)
	{
		pmhash_index_unlock(shared);
		return false;
	}
	return true;
}

/*
 * ERROR if the index's pool is being rebuilt: a scan must not answer from
 * a pool that lacks entries.  The planner avoids such an index
 * (pmhash_known_rebuilding); this catches a plan made before the rebuild
 * began, or a forced one.  A dirty scan (an exclusion or ON CONFLICT
 * check) may go on once the rebuild's heap scan is over: every row then
 * has its entry, and what the rebuild still waits for (older snapshots,
 * which may need versions it left out) is no concern of a dirty snapshot.
 */
void
pmhash_check_complete(PmhashIndex *idx, bool dirty)
{
	if (unlikely(dirty ? pmhash_rebuild_unscanned(idx->shared) :
				 idx->shared->rebuild))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmhash index \"%s\" is being rebuilt",
						RelationGetRelationName(idx->rel)),
				 errdetail("Its pool came with a base backup, or this server could not keep it, and is being refilled from the table in the background."),
				 errhint("Retry when pmhash_rebuild_progress('%s') no longer reports it rebuilding; the planner avoids the index meanwhile.",
						 RelationGetRelationName(idx->rel))));
}

/*
 * Has this backend attached to the index's current storage before?  If so,
 * return its shared entry and this backend's mapping, as remembered in the
 * relcache entry, without taking any lock: the shared entry of a storage
 * the caller holds a relation lock on cannot go away under it.  What the
 * caller reads there without the index lock must be fixed for the entry's
 * life (the key) or be only a hint.
 */
bool
pmhash_attached_before(Relation index, PmhashShared **shared,
					   PmhashLocal **local)
{
	PmhashRelCache *cache = (PmhashRelCache *) index->rd_amcache;
	PmhashKey	key;

	if (cache == NULL || !pmhash_backend_attached())
		return false;
	pmhash_key_for_rel(index, &key);
	if (memcmp(&cache->key, &key, sizeof(key)) != 0)
		return false;
	*shared = cache->shared;
	*local = cache->local;
	return true;
}

/*
 * Set up fresh shared state for a pool that was just created for index
 * (ambuild), replacing whatever the same storage had.  Returns with the
 * index lock exclusive.
 */
void
pmhash_attach_new(Relation index, uint64 pool_id, uint64 state_flags,
				  PmhashIndex *idx)
{
	PmhashKey	key;
	PmhashShared *shared;
	PmhashLocal *local;
	uint32	   *dir;

	pmhash_require_preload();
	if (index->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pmhash indexes on temporary tables are not supported"),
				 errhint("Use a btree or hash index on temporary tables.")));
	pmhash_backend_init();
	pmhash_key_for_rel(index, &key);
	shared = pmhash_shared_entry(&key, RelationGetRelid(index));
	local = pmhash_local_entry(&key);
	pmhash_init_handle(index, shared, local, LW_EXCLUSIVE, idx);

	/* entries collected for the storage's earlier contents are void */
	pmhash_log_forget_storage(&key);

	pmhash_index_lock(shared, LW_EXCLUSIVE);
	pmhash_free_shared(shared);
	pmhash_pool_close(local);
	if (shared->unusable)
		pmhash_set_unusable(shared, NULL);
	/* a new pool: whatever rebuild the old one awaited is moot */
	if (shared->rebuild)
		pmhash_set_rebuild(shared, false);
	shared->generation = pmhash_next_generation();
	shared->indexoid = RelationGetRelid(index);
	shared->pool_id = pool_id;

	/*
	 * A pool that redo makes is stale, as one loaded during recovery is
	 * (pmhash_load): an upsert's entries reach the WAL before they are
	 * placed, and if placing fails and its transaction aborts, this pool
	 * holds entries the primary never had, which no record of the new
	 * history deletes.
	 */
	if (RecoveryInProgress())
		state_flags |= PMH_STATE_STALE;
	pmhash_pool_create(index, pool_id, local, state_flags);
	shared->stale = (state_flags & PMH_STATE_STALE) != 0;
	pmhash_writeback_loaded(shared, &local->pool);
	/* the build persists without taking the index lock again */
	pmhash_writeback_setup(shared, local);
	local->generation = shared->generation;

	pmhash_extend_shared(shared, 1);
	(void) pmhash_cb_alloc_segment(idx);	/* segment 0 is the root */
	pmh_meta_reset(pmhash_seg_meta(idx, 0), pmh_segword_make(0, 0));
	shared->dir = pmhash_shared_alloc(shared, sizeof(uint32));
	dir = pmhash_dsa_address(shared->dir);
	dir[0] = 0;
	shared->global_depth = 0;
	shared->primaries = 1;
	shared->overflows = 0;
	pg_atomic_write_u64(&shared->entries, 0);
	pmhash_log_init_shared(idx);
	pmhash_stats_attach_pool(local, shared);
	shared->all_loaded = true;	/* (a new pool's segments need no load) */
	shared->state = PMHASH_STATE_READY;
}

/* release the index lock taken by pmhash_attach */
void
pmhash_detach(PmhashIndex *idx)
{
	pmhash_index_unlock(idx->shared);
}

/*
 * Trade the index lock for one of another mode.  Everything read under the
 * old lock must be looked up again afterwards.
 */
void
pmhash_relock(PmhashIndex *idx, LWLockMode mode)
{
	pmhash_index_unlock(idx->shared);
	pmhash_index_lock(idx->shared, mode);
	idx->mode = mode;
	pmhash_make_ready(idx, mode);
}

/*
 * Let go of the index lock for a moment, answering interrupts (holding an
 * LWLock holds them off), and take it again in the same mode: a long
 * operation under the shared lock lets splits through, and can be
 * cancelled.  Everything read under the lock must be looked up again.
 */
void
pmhash_relock_interruptible(PmhashIndex *idx)
{
	pmhash_index_unlock(idx->shared);
	CHECK_FOR_INTERRUPTS();
	pmhash_index_lock(idx->shared, idx->mode);
	pmhash_make_ready(idx, idx->mode);
}
