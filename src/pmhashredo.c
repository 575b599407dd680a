/*-------------------------------------------------------------------------
 *
 * pmhashredo.c
 *	  Redo of pmhash's WAL records: on a standby, in archive recovery, and
 *	  in the primary's own crash recovery.
 *
 * The startup process applies each record to this server's pool of the
 * storage, through the same shared state the backends use (a hot
 * standby's scans run meanwhile, under the usual locks).  Every record is
 * idempotent:
 *
 *	CREATE		keeps a pool that already is the record's (same pool id,
 *				this epoch, complete); else makes a new, empty one.  A
 *				build's pool is flagged PMH_STATE_WALBUILD and filled
 *				without persisting until BUILD_END persists it whole
 *	INSERT		stores each entry unless the segment, its chain or its
 *				D-bucket holds the same (hash, TID)
 *	DELETE		removes the entries of the record's dead TIDs that are
 *				there
 *	DROP		removes the pool, if any
 *	COPY		copies the pool of one storage for another (SET
 *				TABLESPACE), replacing what is there
 *
 * so that replaying WAL twice from any point (a standby restarted from its
 * restart point, the primary's crash recovery after a pool already took
 * the changes) ends as one replay does: each (hash, TID) ends as the last
 * record about it left it.
 *
 * A record whose pool is another one (the storage's pool is newer than the
 * record) is skipped.  A pool that is missing or cannot be used during
 * recovery is replaced by an empty one marked for a rebuild from the heap
 * (pmhash_load), which the rebuild worker does once the server accepts
 * connections; redo goes on into it meanwhile.  A record that cannot be
 * applied (out of disk, out of pmhash shared memory) is reported, its pool
 * marked for a rebuild, and recovery goes on: an ERROR here would stop
 * the server.  The storage's records are then skipped until its pool is
 * loaded again (pmhash_redo_skip).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/standby.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

/* per-record memory, reset after each */
static MemoryContext pmhash_redo_cxt = NULL;

/*
 * The storages whose VACUUM clearing redo started (pmh_wp_vacuum_begin):
 * released backup-log copies must not outlive a deletion, so redo of
 * DELETE starts it once per storage and keeps it until the end of
 * recovery.
 */
typedef struct PmhashRedoVacuum
{
	PmhashKey	key;
	PmhashShared *shared;
	uint64		generation;
} PmhashRedoVacuum;

static HTAB *pmhash_redo_vacuums = NULL;

/*
 * The storages whose redo failed: their records are skipped until someone
 * (the rebuild worker, a query) loads the storage again, which replaces
 * the pool by an empty one to rebuild; from then on redo applies to it.
 * The heap scan of the rebuild starts after that load, so what was
 * skipped before is in the heap it reads.
 */
static HTAB *pmhash_redo_failed = NULL;

/* a table of storages in the startup process's memory */
static HTAB *
pmhash_redo_table(const char *name, Size entrysize)
{
	HASHCTL		info;

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(PmhashKey);
	info.entrysize = entrysize;
	info.hcxt = TopMemoryContext;
	return hash_create(name, 16, &info, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* should redo skip records of this storage (its redo failed)? */
static bool
pmhash_redo_skip(const PmhashKey *key)
{
	if (pmhash_redo_failed == NULL ||
		hash_search(pmhash_redo_failed, key, HASH_FIND, NULL) == NULL)
		return false;
	if (!pmhash_shared_ready(key))
		return true;
	hash_search(pmhash_redo_failed, key, HASH_REMOVE, NULL);
	return false;
}

/* remember that redo of a storage failed */
static void
pmhash_redo_note_failure(const PmhashKey *key)
{
	if (pmhash_redo_failed == NULL)
		pmhash_redo_failed = pmhash_redo_table("pmhash redo failures",
											   sizeof(PmhashKey));
	(void) hash_search(pmhash_redo_failed, key, HASH_ENTER, NULL);
}

/* the storage key a record names */
static void
pmhash_redo_key(const xl_pmhash_pool *xlp, PmhashKey *key)
{
	memset(key, 0, sizeof(*key));
	key->dbid = xlp->dbid;
	key->spcid = xlp->spcid;
	key->relnode = xlp->relnode;
}

/* the storage a key names, as PostgreSQL names it */
static RelFileNode
pmhash_redo_node(const PmhashKey *key)
{
	RelFileNode rnode;

	rnode.spcNode = key->spcid;
	rnode.dbNode = key->dbid;
	rnode.relNode = key->relnode;
	return rnode;
}

/*
 * A fake relation for the storage (redo has no catalog): it names the
 * storage (pmhash_key_for_rel gives the key back, since the startup
 * process has no database and so no default tablespace) and is the name
 * errors show.
 */
static Relation
pmhash_redo_rel(const PmhashKey *key)
{
	return CreateFakeRelcacheEntry(pmhash_redo_node(key));
}

/* redo of CREATE */
static void
pmhash_redo_create(const xl_pmhash_pool *xlp)
{
	PmhashKey	key;
	PmhPoolHeader hdr;
	Relation	rel;
	PmhashIndex idx;

	pmhash_redo_key(xlp, &key);
	if (pmhash_redo_failed != NULL)
		hash_search(pmhash_redo_failed, &key, HASH_REMOVE, NULL);
	if (pmhash_pool_read_header(&key, &hdr) && hdr.pool_id == xlp->pool_id &&
		!pmhash_pool_needs_rebuild(&key))
		return;					/* replayed before: keep what it holds */

	rel = pmhash_redo_rel(&key);
	/* a build's pool is persisted whole at BUILD_END; a crash discards it */
	pmhash_attach_new(rel, xlp->pool_id,
					  (xlp->flags & XLP_PMHASH_BUILD) ? PMH_STATE_WALBUILD : 0,
					  &idx);
	if (xlp->flags & XLP_PMHASH_BUILD)
		idx.local->pool.no_persist = 1;
	pmhash_detach(&idx);
	FreeFakeRelcacheEntry(rel);
}

/*
 * Does the index hold (hash, tid) already (index lock shared)?  The lookup
 * skips entries hinted dead, and none is: hints are set only outside
 * recovery (pmhash_hint_dead_hash).
 */
static bool
pmhash_redo_present(PmhashIndex *idx, uint64 hash, uint64 tag)
{
	uint64		buf[PMH_DBUCKET_SLOTS];
	uint64	   *tags = buf;
	int			max = PMH_DBUCKET_SLOTS;
	int			n;
	int			i;
	bool		found = false;

	while ((n = pmhash_lookup_hash(idx, hash, tags, max)) > max)
	{
		max = n;
		tags = (tags == buf) ? palloc(sizeof(uint64) * max) :
			repalloc(tags, sizeof(uint64) * max);
	}
	for (i = 0; i < n && !found; i++)
		found = tags[i] == tag;
	if (tags != buf)
		pfree(tags);
	return found;
}

/*
 * Store entries that the index does not hold yet the way a collecting log
 * does: into this process's backup-log line (one persist for up to 16),
 * then into their D-buckets, whose full lines relocation persists whole.
 * Only the startup process writes to a trusted pool during recovery, so
 * an entry found absent stays absent until it is written.
 */
static void
pmhash_redo_insert_logged(PmhashIndex *idx, const uint64 *hashes,
						  const ItemPointerData *tids, int n)
{
	PmhEntry	entries[PMH_BUCKET_SLOTS];
	int			i = 0;

	while (i < n)
	{
		int			room = pmhash_log_room(idx->shared, idx->local);
		int			k = 0;
		uint32		line;
		int			first;

		for (; i < n && k < room; i++)
		{
			uint64		tag = pmh_tag_make(hashes[i],
										   ItemPointerGetBlockNumber(&tids[i]),
										   ItemPointerGetOffsetNumber(&tids[i]));

			if (pmhash_redo_present(idx, hashes[i], tag))
				continue;
			entries[k].hash = hashes[i];
			entries[k].tag = tag;
			k++;
		}
		if (k == 0)
			continue;
		pmhash_log_write(idx, entries, k, &line, &first);
		pmhash_log_place_written(idx, entries, k, line, first, NULL);
	}
}

/*
 * Redo of INSERT.  A pool that is being rebuilt from the heap, or filled
 * by the redo of a build, is not persisted entry by entry: a crash makes
 * it start over anyway, and its rebuild (or BUILD_END) persists it whole,
 * writes of this process included.  There the entries go straight into
 * their segments (the rebuild worker stores into them at the same time;
 * pmhash_insert_entry_checked looks under the segment lock).  Elsewhere
 * they take the backup log, as on the primary.  pmhash_make_ready decides
 * anew (no_persist) every time redo takes the index lock, so a rebuild
 * that ends while redo waits for the lock (a split) is seen before redo
 * writes again.
 */
static void
pmhash_redo_insert(XLogReaderState *record)
{
	xl_pmhash_entries *xle = (xl_pmhash_entries *) XLogRecGetData(record);
	const char *p = (const char *) xle + SizeOfPmhashEntries;
	PmhashKey	key;
	Relation	rel;
	PmhashIndex idx;
	uint64	   *hashes;
	ItemPointerData *tids;
	uint32		i;

	pmhash_redo_key(&xle->pool, &key);
	if (pmhash_redo_skip(&key))
		return;
	hashes = palloc(sizeof(uint64) * Max(xle->nentries, 1));
	tids = palloc(sizeof(ItemPointerData) * Max(xle->nentries, 1));
	for (i = 0; i < xle->nentries; i++)
	{
		uint32		block;
		uint16		offset;

		memcpy(&hashes[i], p, sizeof(uint64));
		memcpy(&block, p + sizeof(uint64), sizeof(uint32));
		memcpy(&offset, p + sizeof(uint64) + sizeof(uint32), sizeof(uint16));
		p += PMHASH_XLOG_ENTRY_BYTES;
		ItemPointerSet(&tids[i], block, offset);
	}

	rel = pmhash_redo_rel(&key);
	if (pmhash_attach_redo(rel, xle->pool.pool_id, LW_SHARED, &idx))
	{
		PmhPool    *pool = &idx.local->pool;

		/* pmhash_make_ready set no_persist from the same state */
		if (pool->no_persist)
		{
			for (i = 0; i < xle->nentries; i++)
				(void) pmhash_insert_entry_checked(&idx, hashes[i], &tids[i],
												   true);
		}
		else
		{
			int			done;

			/* the log takes at most a line per write */
			for (done = 0; done < (int) xle->nentries; done += PMH_BUCKET_SLOTS)
				pmhash_redo_insert_logged(&idx, hashes + done, tids + done,
										  Min(PMH_BUCKET_SLOTS,
											  (int) xle->nentries - done));
		}
		pmhash_detach(&idx);
	}
	FreeFakeRelcacheEntry(rel);
}

/* start VACUUM's backup-log clearing for a storage, once per recovery */
static void
pmhash_redo_vacuum_begin(PmhashIndex *idx)
{
	PmhashRedoVacuum *v;
	bool		found;

	if (pmhash_redo_vacuums == NULL)
		pmhash_redo_vacuums = pmhash_redo_table("pmhash redo vacuums",
												sizeof(PmhashRedoVacuum));
	v = hash_search(pmhash_redo_vacuums, &idx->shared->key, HASH_ENTER, &found);
	if (found && v->shared == idx->shared &&
		v->generation == idx->shared->generation)
		return;
	pmhash_log_vacuum_begin(idx);
	v->shared = idx->shared;
	v->generation = idx->shared->generation;
}

/*
 * Redo of DELETE and of PRUNE, which first resolves the conflicts of a hot
 * standby's queries with its horizon, as the hash AM's redo of deleting
 * dead items from a page does: the entries go, and a query whose snapshot
 * may still see one of their rows must not run on without them.
 */
static void
pmhash_redo_delete(XLogReaderState *record, bool prune)
{
	char	   *rec = XLogRecGetData(record);
	xl_pmhash_delete *xld = (xl_pmhash_delete *) rec;	/* (PRUNE's begins so) */
	const char *p = rec + (prune ? SizeOfPmhashPrune : SizeOfPmhashDelete);
	PmhashTidSet dead;
	PmhashKey	key;
	Relation	rel;
	PmhashIndex idx;
	uint32		i;

	pmhash_redo_key(&xld->pool, &key);
	if (prune && InHotStandby)
		ResolveRecoveryConflictWithSnapshot(((xl_pmhash_prune *) rec)->snapshotConflictHorizon,
											pmhash_redo_node(&key));

	dead.n = (int) xld->ntids;
	dead.tids = palloc(sizeof(ItemPointerData) * Max(dead.n, 1));
	for (i = 0; i < xld->ntids; i++)
	{
		uint32		block;
		uint16		offset;

		memcpy(&block, p, sizeof(uint32));
		memcpy(&offset, p + sizeof(uint32), sizeof(uint16));
		p += PMHASH_XLOG_TID_BYTES;
		ItemPointerSet(&dead.tids[i], block, offset);
	}

	if (pmhash_redo_skip(&key))
		return;
	rel = pmhash_redo_rel(&key);
	if (pmhash_attach_redo(rel, xld->pool.pool_id, LW_SHARED, &idx))
	{
		pmhash_redo_vacuum_begin(&idx);
		(void) pmhash_vacuum_redo(&idx, xld->lo, xld->hi, &dead);
		pmhash_detach(&idx);
	}
	FreeFakeRelcacheEntry(rel);
}

/* redo of BUILD_END: persist a pool the redo of a build filled */
static void
pmhash_redo_build_end(const xl_pmhash_pool *xlp)
{
	PmhashKey	key;
	Relation	rel;
	PmhashIndex idx;

	pmhash_redo_key(xlp, &key);
	rel = pmhash_redo_rel(&key);
	if (pmhash_attach_redo(rel, xlp->pool_id, LW_EXCLUSIVE, &idx))
	{
		PmhPool    *pool = &idx.local->pool;

		if (pmh_pool_state(pool)->flags & PMH_STATE_WALBUILD)
		{
			pool->no_persist = 0;
			if (pmh_persist(pool, pool->base + PMH_SEG_OFFSET,
							pool->mapped_len - PMH_SEG_OFFSET) != 0 ||
				pmh_pool_state_set(pool, 0, PMH_STATE_WALBUILD) != 0)
				pmhash_report_io_error(rel, "persist");
			/* a pool being rebuilt stays unpersisted until the rebuild ends */
			pool->no_persist = idx.shared->rebuild;
		}
		pmhash_detach(&idx);
	}
	FreeFakeRelcacheEntry(rel);
}

/* redo of DROP: the storage is gone, and its pool with it */
static void
pmhash_redo_drop(const xl_pmhash_pool *xlp)
{
	PmhashKey	key;

	pmhash_redo_key(xlp, &key);
	if (pmhash_redo_vacuums != NULL)
		hash_search(pmhash_redo_vacuums, &key, HASH_REMOVE, NULL);
	if (pmhash_redo_failed != NULL)
		hash_search(pmhash_redo_failed, &key, HASH_REMOVE, NULL);
	pmhash_backend_init();
	pmhash_forget(&key);
	(void) pmhash_pool_unlink(&key);
}

/* apply one record (errors are the caller's) */
static void
pmhash_redo_record(XLogReaderState *record, uint8 info)
{
	char	   *rec = XLogRecGetData(record);

	switch (info)
	{
		case XLOG_PMHASH_CREATE:
			pmhash_redo_create((xl_pmhash_pool *) rec);
			break;
		case XLOG_PMHASH_INSERT:
			pmhash_redo_insert(record);
			break;
		case XLOG_PMHASH_DELETE:
			pmhash_redo_delete(record, false);
			break;
		case XLOG_PMHASH_PRUNE:
			pmhash_redo_delete(record, true);
			break;
		case XLOG_PMHASH_BUILD_END:
			pmhash_redo_build_end((xl_pmhash_pool *) rec);
			break;
		case XLOG_PMHASH_DROP:
			pmhash_redo_drop((xl_pmhash_pool *) rec);
			break;
		case XLOG_PMHASH_COPY:
			{
				xl_pmhash_copy *xlc = (xl_pmhash_copy *) rec;
				PmhashKey	from;
				PmhashKey	to;
				char		name[32];

				pmhash_redo_key(&xlc->from, &from);
				pmhash_redo_key(&xlc->to, &to);
				snprintf(name, sizeof(name), "%u", to.relnode);
				pmhash_backend_init();
				pmhash_forget(&to);
				if (pmhash_pool_exists(&from))
					pmhash_pool_copy(name, &from, &to);
				break;
			}
		case XLOG_PMHASH_DROP_DB:
			pmhash_backend_init();
			pmhash_remove_db_dir(((xl_pmhash_db *) rec)->srcdb);
			break;
		case XLOG_PMHASH_COPY_DB:
			pmhash_copy_db_pools(((xl_pmhash_db *) rec)->srcdb,
								 ((xl_pmhash_db *) rec)->dstdb);
			break;
		default:
			elog(PANIC, "pmhash_redo: unknown op code %u", info);
	}
}

/*
 * rm_redo.  An ERROR would end recovery (the startup process exits and the
 * server with it), for a problem of one index: report it, mark the pool
 * for a rebuild and go on.  A PANIC (a failed persist inside a split)
 * stays a PANIC.
 */
void
pmhash_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	MemoryContext oldcxt;

	/*
	 * Crash recovery of this server's own WAL: its pools already hold what
	 * the records say (entries are persistent before the commit record,
	 * deletions before VACUUM frees the heap slots).  Replaying would only
	 * load them early.  A data directory restored from a base backup replays
	 * them even without archive recovery, also in a start that continues
	 * such a recovery (pmhash_started_from_backup): pools created while
	 * the backup ran are not in it, or not whole.
	 */
	if (!ArchiveRecoveryRequested && !pmhash_started_from_backup)
		return;

	if (pmhash_redo_cxt == NULL)
		pmhash_redo_cxt = AllocSetContextCreate(TopMemoryContext,
												"pmhash redo",
												ALLOCSET_DEFAULT_SIZES);
	oldcxt = MemoryContextSwitchTo(pmhash_redo_cxt);
	PG_TRY();
	{
		pmhash_redo_record(record, info);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(pmhash_redo_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		LWLockReleaseAll();
		ereport(WARNING,
				(errmsg("pmhash: could not replay %s record: %s",
						pmhash_identify(info), edata->message),
				 errdetail("The index's pool will be rebuilt from its table once the server accepts connections.")));
		if (info != XLOG_PMHASH_DROP_DB && info != XLOG_PMHASH_COPY_DB)
		{
			PmhashKey	key;

			/* COPY: the pool it made */
			pmhash_redo_key(info == XLOG_PMHASH_COPY ?
							&((xl_pmhash_copy *) XLogRecGetData(record))->to :
							(xl_pmhash_pool *) XLogRecGetData(record), &key);
			pmhash_reset_for_rebuild(&key, true);
			pmhash_redo_note_failure(&key);
		}
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(pmhash_redo_cxt);
}

/* rm_startup: nothing yet; the state is made on first use */
void
pmhash_redo_startup(void)
{
}

/*
 * rm_cleanup, at the end of recovery: end the VACUUM clearing that redo
 * started (a promoted server relocates without clearing again).
 */
void
pmhash_redo_cleanup(void)
{
	HASH_SEQ_STATUS status;
	PmhashRedoVacuum *v;

	if (pmhash_redo_vacuums == NULL)
		return;
	hash_seq_init(&status, pmhash_redo_vacuums);
	while ((v = hash_seq_search(&status)) != NULL)
		pmhash_log_vacuum_end(v->shared, v->generation);
	hash_destroy(pmhash_redo_vacuums);
	pmhash_redo_vacuums = NULL;
}
