/*-------------------------------------------------------------------------
 *
 * pmhashshmem.c
 *	  pmhash's shared memory: setting it up, the DSA area in it, and the
 *	  table of index storages.
 *
 * At server start, and after every crash reinitialisation, the shared
 * memory hooks set up a control block, a DSA area created in place in
 * pmhash's shared memory, and a fixed hash table with one entry
 * (PmhashShared) per index storage; each index's directory, per-segment
 * locks, fingerprints, occupancy bitmaps and backup-log state live in the
 * DSA area, which grows past its place into dynamic shared memory
 * (allocation, growth and mapping: pmhashdsa.c).  Everything there is a
 * cache of the pool, rebuilt from it by the first backend that needs an
 * index (pmhash_load, pmhashattach.c).
 *
 * Also here: finding, marking unusable and dropping a storage's entry;
 * and this backend's table of pool mappings
 * (PmhashLocal), kept beside the shared table: a mapping is current while
 * its generation matches its shared entry's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "pmhash.h"

/* control block in the main shared memory segment */
typedef struct PmhashControl
{
	int			index_tranche;
	int			seg_tranche;
	int			dsa_tranche;
	int			log_tranche;
	int			free_tranche;
	pg_atomic_uint64 next_generation;
	pg_atomic_uint64 drops;		/* counts removed shared entries */
	pg_atomic_uint32 nunusable; /* entries marked unusable: 0 lets the
								 * planner skip looking */
	pg_atomic_uint32 nrebuild;	/* entries whose pool awaits a rebuild */
	size_t		dsa_size;
	char	   *dsa_place;

} PmhashControl;

static PmhashControl *pmhash_ctl = NULL;
static LWLock *pmhash_htab_lock = NULL;

/* serialises the write-back marks of all pools (pmhashwriteback.c) */
LWLock	   *pmhash_writeback_lock = NULL;

/* serialises pmhash_forget: see there */
static LWLock *pmhash_forget_lock = NULL;
static HTAB *pmhash_htab = NULL;
dsa_area   *pmhash_area = NULL;	/* this backend's attachment */
static dsa_area *pmhash_pm_area = NULL; /* the postmaster's (creator's) */
static HTAB *pmhash_local_htab = NULL;
static pid_t pmhash_area_pid = 0;

/* where the DSA area lives in this process: see pmhash_dsa_address */
char	   *pmhash_dsa_base = NULL;

static uint64 pmhash_seen_drops = 0;

static void pmhash_local_forget(const PmhashKey *key);
static void pmhash_release_lines(int code, Datum arg);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* total shared memory pmhash asks for at startup */
static Size
pmhash_shmem_size(void)
{
	Size		size;

	size = MAXALIGN(sizeof(PmhashControl));
	size = add_size(size, BUFFERALIGN(1));
	size = add_size(size, pmhash_dsa_size());
	size = add_size(size, hash_estimate_size(pmhash_max_indexes,
											 sizeof(PmhashShared)));
	size = add_size(size, pmhash_stats_shmem_size());
	size = add_size(size, pmhash_readers_shmem_size());
	size = add_size(size, pmhash_dsa_shmem_size());
	return size;
}

/* shmem_request_hook: reserve our shared memory and the table lock */
static void
pmhash_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(pmhash_shmem_size());
	RequestNamedLWLockTranche("pmhash", 4);
	RequestNamedLWLockTranche(PMHASH_UNIQUE_TRANCHE, PMHASH_UNIQUE_LOCKS);
}

/*
 * shmem_startup_hook: set up the control block, the DSA area and the
 * hash table of index storages.  Runs in the postmaster at start and after
 * every crash reinitialisation, so shared state always starts empty.
 */
static void
pmhash_shmem_startup_hook(void)
{
	bool		found;
	HASHCTL		info;
	char	   *place;
	dsa_pointer dp;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);

	pmhash_ctl = ShmemInitStruct("pmhash control",
								 MAXALIGN(sizeof(PmhashControl)) +
								 BUFFERALIGN(1) + pmhash_dsa_size(),
								 &found);
	place = (char *) BUFFERALIGN((char *) pmhash_ctl +
								 MAXALIGN(sizeof(PmhashControl)));
	if (!found)
	{
		pmhash_ctl->index_tranche = LWLockNewTrancheId();
		pmhash_ctl->seg_tranche = LWLockNewTrancheId();
		pmhash_ctl->dsa_tranche = LWLockNewTrancheId();
		pmhash_ctl->log_tranche = LWLockNewTrancheId();
		pmhash_ctl->free_tranche = LWLockNewTrancheId();
		pg_atomic_init_u64(&pmhash_ctl->next_generation, 1);
		pg_atomic_init_u64(&pmhash_ctl->drops, 0);
		pg_atomic_init_u32(&pmhash_ctl->nunusable, 0);
		pg_atomic_init_u32(&pmhash_ctl->nrebuild, 0);
		pmhash_ctl->dsa_size = pmhash_dsa_size();
		pmhash_ctl->dsa_place = place;
		pmhash_pm_area = dsa_create_in_place(place, pmhash_ctl->dsa_size,
											 pmhash_ctl->dsa_tranche, NULL);

		/*
		 * pmhash_dsa_address relies on the area's first segment starting
		 * at the place
		 */
		dp = dsa_allocate(pmhash_pm_area, sizeof(uint64));
		if (dsa_get_address(pmhash_pm_area, dp) != place + dp)
			elog(FATAL, "pmhash: DSA pointers are not offsets from the area's place");
		dsa_free(pmhash_pm_area, dp);
	}
	pmhash_dsa_base = place;
	pmhash_htab_lock = &(GetNamedLWLockTranche("pmhash"))[0].lock;
	pmhash_writeback_lock = &(GetNamedLWLockTranche("pmhash"))[1].lock;
	pmhash_forget_lock = &(GetNamedLWLockTranche("pmhash"))[3].lock;
	pmhash_dsa_shmem_init(pmhash_pm_area, pmhash_ctl->seg_tranche,
						  &(GetNamedLWLockTranche("pmhash"))[2].lock);

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(PmhashKey);
	info.entrysize = sizeof(PmhashShared);
	pmhash_htab = ShmemInitHash("pmhash indexes", pmhash_max_indexes,
								pmhash_max_indexes, &info,
								HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	pmhash_stats_shmem_init();
	pmhash_readers_shmem_init();

	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
		pmhash_pool_dir_init();
}

/* install the shared memory hooks (from _PG_init) */
void
pmhash_shmem_request(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = pmhash_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = pmhash_shmem_startup_hook;
}

/*
 * Attach this backend to the DSA area and name the lock tranches (once per
 * backend; nothing to do where pmhash's shared memory does not exist).
 */
void
pmhash_backend_init(void)
{
	HASHCTL		info;
	MemoryContext oldcxt;

	if (pmhash_ctl == NULL ||
		(pmhash_area != NULL && pmhash_area_pid == MyProcPid))
		return;

	LWLockRegisterTranche(pmhash_ctl->index_tranche, "pmhash_index");
	LWLockRegisterTranche(pmhash_ctl->seg_tranche, "pmhash_segment");
	LWLockRegisterTranche(pmhash_ctl->dsa_tranche, "pmhash_dsa");
	LWLockRegisterTranche(pmhash_ctl->log_tranche, "pmhash_log");
	LWLockRegisterTranche(pmhash_ctl->free_tranche, "pmhash_free");
	pmhash_stats_backend_init();

	/* the area's backend-local bookkeeping must outlive this statement */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	pmhash_area = dsa_attach_in_place(pmhash_ctl->dsa_place, NULL);
	MemoryContextSwitchTo(oldcxt);
	dsa_pin_mapping(pmhash_area);
	on_shmem_exit(dsa_on_shmem_exit_release_in_place,
				  PointerGetDatum(pmhash_ctl->dsa_place));
	pmhash_area_pid = MyProcPid;
	pmhash_dsa_backend_init();
	before_shmem_exit(pmhash_release_lines, (Datum) 0);

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(PmhashKey);
	info.entrysize = sizeof(PmhashLocal);
	info.hcxt = TopMemoryContext;
	pmhash_local_htab = hash_create("pmhash local mappings", 64, &info,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* has this process attached to the DSA area (pmhash_backend_init)? */
bool
pmhash_backend_attached(void)
{
	return pmhash_area_pid == MyProcPid;
}

/*
 * A generation number no index storage's shared state had before: a
 * backend's mapping of a pool is current while its generation matches.
 */
uint64
pmhash_next_generation(void)
{
	return pg_atomic_fetch_add_u64(&pmhash_ctl->next_generation, 1);
}

/*
 * At backend exit: publish this backend's persist traffic, and give up the
 * backup-log lines it appends to, so that other backends can take them
 * once their entries are relocated.
 */
static void
pmhash_release_lines(int code, Datum arg)
{
	HASH_SEQ_STATUS status;
	PmhashLocal *local;

	if (pmhash_local_htab == NULL || pmhash_area_pid != MyProcPid)
		return;
	pmhash_stats_publish_all(true);
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	hash_seq_init(&status, pmhash_local_htab);
	while ((local = hash_seq_search(&status)) != NULL)
	{
		PmhashShared *shared;

		if (local->log_line < 0)
			continue;
		shared = hash_search(pmhash_htab, &local->key, HASH_FIND, NULL);
		if (shared == NULL || shared->generation != local->log_generation ||
			!DsaPointerIsValid(shared->logchunks))
			continue;
		LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
		/* (pmhash_log_free_shared takes the tables away under this lock) */
		if (shared->generation == local->log_generation &&
			DsaPointerIsValid(shared->logchunks) &&
			(uint32) local->log_line < pmhash_log_nlines(shared) &&
			pmhash_log_line_state(shared, local->log_line)->owner == MyProc->pgprocno)
			pmhash_log_disown(shared, local->log_line);
		LWLockRelease(&shared->loglock);
		local->log_line = -1;
	}
	LWLockRelease(pmhash_htab_lock);
}

/* find this backend's mapping entry for a key, creating an empty one */
PmhashLocal *
pmhash_local_entry(const PmhashKey *key)
{
	bool		found;
	PmhashLocal *local;

	local = hash_search(pmhash_local_htab, key, HASH_ENTER, &found);
	if (!found)
	{
		local->generation = 0;
		local->pool_dev = 0;
		local->pool_ino = 0;
		memset(&local->pool, 0, sizeof(local->pool));
		local->log_line = -1;
		local->log_used = 0;
		local->log_generation = 0;
		local->stats_slot = -1;
		local->stats_tag = 0;
		local->stats_pool = 0;
		memset(&local->stats_pending, 0, sizeof(local->stats_pending));
	}
	return local;
}

/* find (or create) the shared entry of an index storage */
PmhashShared *
pmhash_shared_entry(const PmhashKey *key, Oid indexoid)
{
	PmhashShared *shared;
	bool		found;

	shared = pmhash_shared_entry_if_any(key);
	if (shared)
		return shared;

	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	shared = hash_search(pmhash_htab, key, HASH_ENTER_NULL, &found);
	if (shared == NULL)
	{
		LWLockRelease(pmhash_htab_lock);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("too many pmhash indexes in use"),
				 errdetail("pmhash keeps shared state for at most %d index storages.",
						   pmhash_max_indexes),
				 errhint("Increase pmhash.max_indexes and restart the server.")));
	}
	if (!found)
	{
		LWLockInitialize(&shared->lock, pmhash_ctl->index_tranche);
		shared->ixversion = 0;
		LWLockInitialize(&shared->loglock, pmhash_ctl->log_tranche);
		LWLockInitialize(&shared->freelock, pmhash_ctl->free_tranche);
		pg_atomic_init_u64(&shared->entries, 0);
		pg_atomic_init_u64(&shared->vacuums_begun, 0);
		pg_atomic_init_u64(&shared->vacuums_ended, 0);
		pg_atomic_init_u64(&shared->unloaded, 0);
		pmhash_clear_shared(shared);
		shared->stats_slot = pmhash_stats_slot_acquire();
		shared->generation = pmhash_next_generation();
		shared->indexoid = indexoid;
		shared->pool_id = 0;
		shared->shmem_bytes = 0;
		shared->unusable = false;
		shared->rebuild = false;
		shared->rebuild_pid = 0;
		shared->rebuild_blocks_total = 0;
		shared->rebuild_blocks_done = 0;
		shared->wb_marked = false;
		shared->wb_sets = 0;
		shared->wb_seen_activity = 0;
		shared->wb_seen_at = 0;
	}
	LWLockRelease(pmhash_htab_lock);
	return shared;
}

/* the shared entry of an index storage, or NULL (never creates one) */
PmhashShared *
pmhash_shared_entry_if_any(const PmhashKey *key)
{
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return NULL;
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, key, HASH_FIND, NULL);
	LWLockRelease(pmhash_htab_lock);
	return shared;
}

/* does the storage have loaded shared state (someone attached since)? */
bool
pmhash_shared_ready(const PmhashKey *key)
{
	PmhashShared *shared;
	bool		ready;

	if (pmhash_ctl == NULL)
		return false;
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, key, HASH_FIND, NULL);
	ready = shared != NULL && shared->state == PMHASH_STATE_READY;
	LWLockRelease(pmhash_htab_lock);
	return ready;
}

/*
 * Mark an index storage's pool as awaiting (or done with) a rebuild from
 * its heap.  Takes the hash-table lock; the caller may hold the index
 * lock.
 */
void
pmhash_set_rebuild(PmhashShared *shared, bool on)
{
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	if (on && !shared->rebuild)
		pg_atomic_fetch_add_u32(&pmhash_ctl->nrebuild, 1);
	else if (!on && shared->rebuild)
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nrebuild, 1);
	shared->rebuild = on;
	shared->rebuild_scanned = false;
	if (!on)
		shared->rebuild_pid = 0;
	LWLockRelease(pmhash_htab_lock);
}

/* how many index storages await a rebuild (0 without shared memory) */
uint32
pmhash_rebuilds_pending(void)
{
	if (pmhash_ctl == NULL)
		return 0;
	return pg_atomic_read_u32(&pmhash_ctl->nrebuild);
}

/*
 * Is the index's pool known to be awaiting or undergoing a rebuild?  For
 * the planner: cheap when no pool is (one atomic read).  A pool not loaded
 * yet is judged by its file (pmhash_pool_needs_rebuild), so that a plan
 * made before anything touched a copied pool avoids it too.
 */
bool
pmhash_known_rebuilding(Relation index)
{
	PmhashKey	key;
	PmhashShared *shared;
	bool		known = false;
	bool		rebuilding = false;

	PmhashLocal *local;

	if (pmhash_ctl == NULL)
		return false;
	/* the usual case: this backend used the index before (no lock) */
	if (pmhash_attached_before(index, &shared, &local) &&
		shared->state == PMHASH_STATE_READY)
		return shared->rebuild;
	pmhash_key_for_rel(index, &key);
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, &key, HASH_FIND, NULL);
	if (shared != NULL && shared->state == PMHASH_STATE_READY)
	{
		known = true;
		rebuilding = shared->rebuild;
	}
	LWLockRelease(pmhash_htab_lock);
	if (known)
		return rebuilding;
	return pmhash_pool_needs_rebuild(&key);
}

/*
 * Mark an index storage unusable (sig: its pool file as the failed load
 * saw it), or clear the mark (sig NULL).  Takes the hash-table lock; the
 * caller may hold the index lock.
 */
void
pmhash_set_unusable(PmhashShared *shared, const PmhashFileSig *sig)
{
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	if (sig != NULL)
	{
		if (!shared->unusable)
			pg_atomic_fetch_add_u32(&pmhash_ctl->nunusable, 1);
		shared->unusable = true;
		shared->unusable_sig = *sig;
	}
	else if (shared->unusable)
	{
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nunusable, 1);
		shared->unusable = false;
	}
	LWLockRelease(pmhash_htab_lock);
}

/* drop the mark of an entry being removed (hash-table lock exclusive) */
static void
pmhash_unmark_removed(PmhashShared *shared)
{
	if (shared->unusable)
	{
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nunusable, 1);
		shared->unusable = false;
	}
	if (shared->rebuild)
	{
		pg_atomic_fetch_sub_u32(&pmhash_ctl->nrebuild, 1);
		shared->rebuild = false;
		shared->rebuild_pid = 0;
	}
}

/*
 * Does the planner know that an index cannot be used?  True when the last
 * attempt to load it failed on its pool (missing, unreadable, corrupt,
 * foreign) and the pool file has not changed since: lstat() only, the pool
 * is never opened here.  REINDEX gives the index a new storage (and pool),
 * which has no mark; a later successful load clears it.
 */
bool
pmhash_known_unusable(Relation index)
{
	PmhashKey	key;
	PmhashShared *shared;
	PmhashFileSig then;
	PmhashFileSig now;
	bool		marked = false;

	if (pmhash_ctl == NULL || pg_atomic_read_u32(&pmhash_ctl->nunusable) == 0)
		return false;
	pmhash_key_for_rel(index, &key);
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, &key, HASH_FIND, NULL);
	if (shared != NULL && shared->unusable)
	{
		marked = true;
		then = shared->unusable_sig;
	}
	LWLockRelease(pmhash_htab_lock);
	if (!marked)
		return false;
	pmhash_pool_file_sig(&key, &now);
	return memcmp(&then, &now, sizeof(now)) == 0;
}

/*
 * Drop the shared state of an index storage whose pool is going away
 * (its storage was dropped, or its creation rolled back).
 */
void
pmhash_forget(const PmhashKey *key)
{
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return;
	pmhash_local_forget(key);

	/*
	 * Two backends may forget one storage at once (sessions that both
	 * resolve a prepared transaction's state file).  Between finding the
	 * entry and taking its lock, the other one could remove it, and a new
	 * storage reuse it (and initialise the lock being waited for): forgets
	 * take turns.  Lock order: forget lock, index lock, hash-table lock.
	 */
	LWLockAcquire(pmhash_forget_lock, LW_EXCLUSIVE);
	shared = pmhash_shared_entry_if_any(key);
	if (shared == NULL)
	{
		LWLockRelease(pmhash_forget_lock);
		return;
	}
	pmhash_backend_init();		/* to free DSA memory */

	/*
	 * Nobody can start using a dropped storage, but a backend that attached
	 * before the drop (e.g. pmhash_stats on an index that REINDEX
	 * CONCURRENTLY is dropping) may still hold the index lock: wait for it.
	 * Not through pmhash_index_lock, which maps new DSM segments: that can
	 * fail, and this runs in the commit and abort callbacks.
	 */
	LWLockAcquire(&shared->lock, LW_EXCLUSIVE);
	pmh_version_write_begin(&shared->ixversion);
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	pmhash_free_shared(shared);
	shared->generation = pmhash_next_generation();
	pmhash_stats_forget_pool(shared->pool_id);
	pmhash_stats_slot_release(shared->stats_slot);
	pmhash_unmark_removed(shared);
	hash_search(pmhash_htab, key, HASH_REMOVE, NULL);
	pg_atomic_fetch_add_u64(&pmhash_ctl->drops, 1);
	/* (before the entry can be reused: nobody finds it meanwhile) */
	pmhash_index_unlock(shared);
	LWLockRelease(pmhash_htab_lock);
	LWLockRelease(pmhash_forget_lock);
}

/*
 * Throw away the shared state of a storage whose redo or write-back failed,
 * keeping its entry (hot-standby backends remember it in their relcache,
 * and may hold it), and mark it as awaiting a rebuild: the next user loads
 * it again, and its pool is replaced and rebuilt.  With mark_file, flag the
 * pool file for the rebuild first (pmhash_pool_mark_rebuild), under the
 * index lock, so that no rebuild ending meanwhile clears the flag.
 */
void
pmhash_reset_for_rebuild(const PmhashKey *key, bool mark_file)
{
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return;
	pmhash_backend_init();

	/*
	 * As in pmhash_forget: a forget between finding the entry and locking
	 * it (a DROP's commit, a DROP DATABASE) could free the entry and a new
	 * storage reuse it, whose state this would throw away
	 */
	LWLockAcquire(pmhash_forget_lock, LW_EXCLUSIVE);
	shared = pmhash_shared_entry_if_any(key);
	if (shared == NULL)
	{
		LWLockRelease(pmhash_forget_lock);
		if (mark_file)
			pmhash_pool_mark_rebuild(key);
		return;
	}
	pmhash_index_lock(shared, LW_EXCLUSIVE);
	if (mark_file)
		pmhash_pool_mark_rebuild(key);
	pmhash_free_shared(shared);
	shared->generation = pmhash_next_generation();
	pmhash_set_rebuild(shared, true);
	pmhash_index_unlock(shared);
	LWLockRelease(pmhash_forget_lock);
}

/*
 * Close this backend's mappings of pools that were dropped or replaced by
 * other backends, so that their space is freed.  Cheap unless some pool
 * was dropped since the last call (at transaction end).
 */
void
pmhash_local_sweep(void)
{
	HASH_SEQ_STATUS status;
	PmhashLocal *local;
	uint64		drops;

	if (pmhash_local_htab == NULL || pmhash_area_pid != MyProcPid)
		return;
	drops = pg_atomic_read_u64(&pmhash_ctl->drops);
	if (drops == pmhash_seen_drops)
		return;
	pmhash_seen_drops = drops;

	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	hash_seq_init(&status, pmhash_local_htab);
	while ((local = hash_seq_search(&status)) != NULL)
	{
		PmhashShared *shared;

		if (local->pool.base == NULL)
			continue;
		shared = hash_search(pmhash_htab, &local->key, HASH_FIND, NULL);
		if (shared == NULL || shared->generation != local->generation)
			pmhash_pool_close(local);
	}
	LWLockRelease(pmhash_htab_lock);
}

/* drop the shared state of every index storage of a database */
void
pmhash_forget_database(Oid dbid)
{
	HASH_SEQ_STATUS status;
	PmhashShared *shared;

	if (pmhash_ctl == NULL)
		return;
	pmhash_backend_init();
	/* forgets take turns (pmhash_forget, pmhash_reset_for_rebuild) */
	LWLockAcquire(pmhash_forget_lock, LW_EXCLUSIVE);
	LWLockAcquire(pmhash_htab_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, pmhash_htab);
	while ((shared = hash_seq_search(&status)) != NULL)
	{
		if (shared->key.dbid == dbid)
		{
			/*
			 * No backend can be connected to the database; still, no
			 * lookup without the lock starts on what is freed here
			 */
			pmh_version_write_begin(&shared->ixversion);
			pmhash_free_shared(shared);
			pmhash_stats_forget_pool(shared->pool_id);
			pmhash_stats_slot_release(shared->stats_slot);
			pmhash_unmark_removed(shared);
			hash_search(pmhash_htab, &shared->key, HASH_REMOVE, NULL);
			pg_atomic_fetch_add_u64(&pmhash_ctl->drops, 1);
		}
	}
	LWLockRelease(pmhash_htab_lock);
	LWLockRelease(pmhash_forget_lock);
}

/* close this backend's mapping of a pool */
static void
pmhash_local_forget(const PmhashKey *key)
{
	PmhashLocal *local;

	if (pmhash_local_htab == NULL)
		return;
	local = hash_search(pmhash_local_htab, key, HASH_FIND, NULL);
	if (local)
	{
		/*
		 * Keep the (closed) entry: a relcache entry may still point at it;
		 * closing resets its generation, which matches no shared entry.
		 */
		pmhash_pool_close(local);
	}
}

/*
 * The pools a write-back pass should look at: loaded ones whose write-back
 * mark is set, all of them (force) or those whose write traffic has not
 * changed for delay_us.  The latter case updates what the launcher saw
 * (only the launcher asks without force).  Returns how many, at most max.
 */
int
pmhash_writeback_candidates(PmhashWritebackItem *items, int max, bool force,
							int64 delay_us)
{
	HASH_SEQ_STATUS status;
	PmhashShared *shared;
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	if (pmhash_ctl == NULL)
		return 0;
	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	hash_seq_init(&status, pmhash_htab);
	while ((shared = hash_seq_search(&status)) != NULL)
	{
		uint64		activity;

		if (shared->state != PMHASH_STATE_READY || !shared->wb_marked)
			continue;
		if (!force)
		{
			activity = pmhash_stats_activity(shared->stats_slot);
			if (activity != shared->wb_seen_activity ||
				shared->wb_seen_at == 0)
			{
				shared->wb_seen_activity = activity;
				shared->wb_seen_at = now;
				continue;
			}
			if (now - shared->wb_seen_at < delay_us)
				continue;
		}
		if (n < max)
		{
			items[n].key = shared->key;
			items[n].pool_id = shared->pool_id;
			n++;
			/* a full delay again before the next pass over it */
			if (!force)
				shared->wb_seen_at = now;
		}
	}
	LWLockRelease(pmhash_htab_lock);
	return n;
}

/*
 * A step of a write-back pass (pmhashwriteback.c), with the write-back
 * lock held: is the storage's current pool still pool_id, loaded?  With
 * clear, also clear its flag (every persist from then on sets the mark
 * again) and return in *sets how often the mark was set so far; without,
 * say whether the mark was not set again since (the flag alone cannot
 * tell: another pass may have cleared it after a persist set it).
 */
bool
pmhash_writeback_flag(const PmhashKey *key, uint64 pool_id, bool clear,
					  uint64 *sets)
{
	PmhashShared *shared;
	bool		ok = false;

	LWLockAcquire(pmhash_htab_lock, LW_SHARED);
	shared = hash_search(pmhash_htab, key, HASH_FIND, NULL);
	if (shared != NULL && shared->state == PMHASH_STATE_READY &&
		shared->pool_id == pool_id)
	{
		if (clear)
		{
			shared->wb_marked = false;
			*sets = shared->wb_sets;
			ok = true;
		}
		else
			ok = !shared->wb_marked && shared->wb_sets == *sets;
	}
	LWLockRelease(pmhash_htab_lock);
	return ok;
}
