/*-------------------------------------------------------------------------
 *
 * pmhashlifecycle.c
 *	  Keeping exactly one pool per pmhash index storage through every DDL.
 *
 * A pool is named after its storage's relfilenode, so it follows storage
 * changes by piggy-backing on PostgreSQL's own bookkeeping of storage to
 * delete (catalog/storage.c's pending deletes):
 *
 *	- ambuild creates the pool of a new storage (CREATE INDEX, REINDEX,
 *	  TRUNCATE, CLUSTER, VACUUM FULL, table rewrites, CREATE INDEX
 *	  CONCURRENTLY);
 *	- at commit, the pools of the storages PostgreSQL deletes at commit are
 *	  removed (DROP, and the old storage of every rewrite);
 *	- at (sub)transaction abort, the pools of the storages PostgreSQL
 *	  deletes at abort are removed (the new storages of the aborted work);
 *	- a storage copied block by block (ALTER INDEX ... SET TABLESPACE) gets
 *	  a copy of the pool of the storage it was copied from, found among the
 *	  storages deleted at commit by the index OID in their pool headers;
 *	- DROP DATABASE removes the database's pool directory, and CREATE
 *	  DATABASE copies the template's.
 *
 * A prepared transaction's pending deletes are carried out by COMMIT or
 * ROLLBACK PREPARED, in any session, without a callback: its storages are
 * written down at PREPARE and their pools removed after that statement
 * (pmhashtwophase.c).
 *
 * The transaction callbacks also drive the write path (pmhashxact.c): the
 * collecting logs are flushed at PRE_COMMIT and PRE_PREPARE and dropped at
 * the end of the transaction; a subtransaction's entries follow its fate.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/genam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/heapam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "catalog/pg_class.h"
#include "catalog/pg_tablespace.h"
#include "catalog/storage.h"
#include "commands/dbcommands.h"
#include "commands/dbcommands_xlog.h"
#include "commands/defrem.h"
#include "executor/executor.h"
#include "common/string.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/plannodes.h"
#include "storage/bufmgr.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/md.h"
#include "tcop/utility.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relfilenodemap.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
#include "common/relpath.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;
static ExecutorStart_hook_type prev_ExecutorStart = NULL;

/* is this relation a pmhash index? */
static bool
pmhash_rel_is_pmhash(Relation rel)
{
	Oid			amoid;

	if (rel->rd_rel->relkind != RELKIND_INDEX)
		return false;
	amoid = get_index_am_oid("pmhash", true);
	return OidIsValid(amoid) && rel->rd_rel->relam == amoid;
}

/*
 * If index's storage was created in this transaction without the access
 * method's help (a block copy, which carried the metapage along) and has no
 * pool of its own yet, copy the pool that the metapage names from the
 * storage being replaced.  The source is found by pool id, not index OID:
 * an index can keep its storage under a new OID (ALTER TABLE ... TYPE that
 * needs no rebuild).  A file of the right name with another pool id is a
 * leftover of a crash and is replaced.  Returns false if the storage still
 * has no valid pool afterwards.  Cheap when there is nothing to do.
 */
bool
pmhash_adopt_pool(Relation index, const PmhashKey *key)
{
	PmhashMetaPageData meta;
	PmhPoolHeader hdr;
	RelFileNode *dropped;
	int			ndropped;
	bool		found = false;
	int			i;

	if (index->rd_createSubid == InvalidSubTransactionId &&
		index->rd_firstRelfilenodeSubid == InvalidSubTransactionId)
		return true;
	if (!pmhash_read_metapage(index, &meta) || (meta.flags & PMHASH_META_INIT))
		return true;			/* not built yet, or to be started empty */
	if (pmhash_pool_read_header(key, &hdr) && hdr.pool_id == meta.pool_id)
		return true;

	ndropped = smgrGetPendingDeletes(true, &dropped);
	for (i = 0; i < ndropped && !found; i++)
	{
		PmhashKey	from;

		pmhash_key_for_node(&dropped[i], &from);
		if (from.dbid != key->dbid)
			continue;
		if (pmhash_pool_read_header(&from, &hdr) && hdr.pool_id == meta.pool_id)
		{
			/* what a standby needs of the source comes before the copy */
			pmhash_log_wal_all();
			pmhash_pool_copy(RelationGetRelationName(index), &from, key);
			pmhash_xlog_copy(&from, key);
			found = true;
		}
	}
	if (dropped)
		pfree(dropped);
	return found;
}

/*
 * Before commit: every new storage of a pmhash index that was made by
 * copying blocks gets its pool now, before the old storage (and its pool)
 * is deleted at commit.
 */
static void
pmhash_pre_commit(void)
{
	RelFileNode *created;
	int			ncreated;
	int			i;

	ncreated = smgrGetPendingDeletes(false, &created);
	for (i = 0; i < ncreated; i++)
	{
		PmhashKey	key;
		Oid			relid;
		Relation	rel;

		if (created[i].dbNode != MyDatabaseId)
			continue;
		pmhash_key_for_node(&created[i], &key);
		relid = RelidByRelfilenode(key.spcid, key.relnode);
		if (!OidIsValid(relid))
			continue;
		rel = try_relation_open(relid, NoLock);
		if (rel == NULL)
			continue;
		if (pmhash_rel_is_pmhash(rel) &&
			RelFileNodeEquals(rel->rd_node, created[i]) &&
			!pmhash_adopt_pool(rel, &key))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FILE),
					 errmsg("pmhash index \"%s\" has new storage but no pool to carry over",
							RelationGetRelationName(rel)),
					 errdetail("The pool of the storage it was copied from was not found."),
					 errhint("REINDEX INDEX %s; in this transaction, or roll it back.",
							 RelationGetRelationName(rel))));
		relation_close(rel, NoLock);
	}
	if (created)
		pfree(created);
}

/* remove the pools (and shared state) of storages being deleted */
static void
pmhash_remove_pools(bool forCommit)
{
	RelFileNode *nodes;
	int			n;
	int			i;

	n = smgrGetPendingDeletes(forCommit, &nodes);
	for (i = 0; i < n; i++)
	{
		PmhashKey	key;

		pmhash_key_for_node(&nodes[i], &key);
		if (pmhash_pool_unlink(&key))
			pmhash_xlog_drop(&key);
		pmhash_forget(&key);
	}
	if (nodes)
		pfree(nodes);
}

/* transaction callback: see the file header */
static void
pmhash_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			pmhash_pre_commit();
			/* the collecting logs reach the pool before the commit record */
			pmhash_log_flush_all(false);
			pmhash_log_wal_all();
			/*
			 * Allocate now what the commit callback needs: no ERROR there.
			 * That includes mapping the DSM segments the shared memory grew
			 * into (the frees of a DROP read what is in them).
			 */
			pmhash_backend_init();
			pmhash_dsa_map_segments();
			break;
		case XACT_EVENT_PRE_PREPARE:
			/* block-copied storages get their pools, as at commit */
			pmhash_pre_commit();
			pmhash_log_flush_all(false);
			pmhash_log_wal_all();
			pmhash_backend_init();
			pmhash_dsa_map_segments();
			/* last: nothing of pmhash's fails after it */
			pmhash_twophase_prepare();
			break;
		case XACT_EVENT_COMMIT:
			pmhash_log_xact_end();
			pmhash_stats_publish_all(false);
			pmhash_remove_pools(true);
			pmhash_local_sweep();
			pmhash_twophase_end(false);
			break;
		case XACT_EVENT_ABORT:
			/* an aborted transaction's unflushed entries never touch PMem */
			pmhash_log_xact_end();
			pmhash_stats_publish_all(false);
			pmhash_remove_pools(false);
			pmhash_local_sweep();
			pmhash_twophase_end(false);
			break;
		case XACT_EVENT_PREPARE:
			pmhash_twophase_end(true);
			pmhash_log_xact_end();
			pmhash_stats_publish_all(false);
			break;
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			pmhash_log_xact_end();
			pmhash_stats_publish_all(false);
			break;
		default:
			break;
	}
}

/* subtransaction callback: a rolled-back subtransaction's new storages */
static void
pmhash_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		pmhash_log_subxact_abort(mySubid);
		pmhash_remove_pools(false);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		pmhash_log_subxact_commit(mySubid, parentSubid);
}

/* is this plan (a statement's, or a data-modifying WITH's) an upsert? */
static bool
pmhash_plan_upserts(Plan *plan)
{
	return plan != NULL && IsA(plan, ModifyTable) &&
		((ModifyTable *) plan)->onConflictAction != ONCONFLICT_NONE;
}

/*
 * ExecutorStart hook: parallel workers cannot see this backend's
 * collecting logs, so flush them before a parallel plan starts (the
 * transaction must see its own inserts through the index everywhere).
 * And note INSERT ... ON CONFLICT, whose entries need settling
 * (pmhash_log_settle).
 */
static void
pmhash_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	PlannedStmt *stmt = queryDesc->plannedstmt;
	bool		upserts = false;

	if (stmt->commandType == CMD_INSERT || stmt->hasModifyingCTE)
	{
		ListCell   *lc;

		upserts = pmhash_plan_upserts(stmt->planTree);
		foreach(lc, stmt->subplans)
		{
			if (upserts)
				break;
			upserts = pmhash_plan_upserts((Plan *) lfirst(lc));
		}
		if (upserts && (eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0)
			pmhash_log_note_upsert();
	}
	if (stmt->parallelModeNeeded &&
		pmhash_log_have_unflushed())
		pmhash_log_flush_all(true);
	if (upserts)
		pmhash_upsert_executor_start(queryDesc, eflags,
									 prev_ExecutorStart ? prev_ExecutorStart :
									 standard_ExecutorStart);
	else if (prev_ExecutorStart)
		prev_ExecutorStart(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/* remove a database's pool directory and everything in it */
void
pmhash_remove_db_dir(Oid dbid)
{
	char		dir[MAXPGPATH];

	pmhash_db_dir(dbid, dir, sizeof(dir));
	if (!rmtree(dir, true))
		ereport(WARNING,
				(errmsg("could not remove pmhash pool directory \"%s\"", dir)));
	pmhash_forget_database(dbid);
}

/* a pool file's storage: its tablespace (0: the default) and file */
typedef struct PmhashPoolNode
{
	Oid			spc;
	Oid			relnode;
} PmhashPoolNode;

/* is name a pool file's ("<spc>_<relnode>.pool")?  Then *node says whose */
static bool
pmhash_pool_file_node(const char *name, PmhashPoolNode *node)
{
	unsigned int spc;
	unsigned int relnode;
	char		tail;

	if (sscanf(name, "%u_%u.poo%c", &spc, &relnode, &tail) != 3 ||
		tail != 'l')
		return false;
	node->spc = spc;
	node->relnode = relnode;
	return true;
}

/* copy every pool of a template database into a new database */
void
pmhash_copy_db_pools(Oid srcdb, Oid dstdb)
{
	char		dir[MAXPGPATH];
	DIR		   *d;
	struct dirent *de;

	pmhash_db_dir(srcdb, dir, sizeof(dir));
	d = AllocateDir(dir);
	if (d == NULL)
		return;					/* the template has no pmhash indexes */
	/* free the DIR on error: redo runs this outside a transaction */
	PG_TRY();
	{
		while ((de = ReadDirExtended(d, dir, LOG)) != NULL)
		{
			PmhashKey	from;
			PmhashKey	to;
			PmhashPoolNode node;

			if (!pmhash_pool_file_node(de->d_name, &node))
				continue;
			memset(&from, 0, sizeof(from));
			from.dbid = srcdb;
			from.spcid = node.spc;
			from.relnode = node.relnode;
			to = from;
			to.dbid = dstdb;
			pmhash_pool_copy(NULL, &from, &to);
		}
	}
	PG_FINALLY();
	{
		FreeDir(d);
	}
	PG_END_TRY();
}

/*
 * Undo what CREATE DATABASE made when copying its template's pools fails:
 * PostgreSQL's own clean-up (createdb_failure_callback) is over by then,
 * and the aborted transaction would leave the new database's directories
 * behind, which nothing removes.  Does what that callback does: drop the
 * new database's buffers and pending sync requests, then remove its
 * directory in every tablespace and log their removal (the creation is in
 * the WAL already: a standby, or a crash recovery, would make them again),
 * and remove the pools copied so far.
 */
static void
pmhash_createdb_failure(int code, Datum arg)
{
	Oid			newdb = DatumGetObjectId(arg);
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	List	   *removed = NIL;
	ListCell   *lc;

	pmhash_remove_db_dir(newdb);
	DropDatabaseBuffers(newdb);
	ForgetDatabaseSyncRequests(newdb);
	rel = table_open(TableSpaceRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_tablespace spc = (Form_pg_tablespace) GETSTRUCT(tuple);
		char	   *path;
		struct stat st;

		if (spc->oid == GLOBALTABLESPACE_OID)
			continue;
		path = GetDatabasePath(newdb, spc->oid);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
		{
			if (!rmtree(path, true))
				ereport(WARNING,
						(errmsg("could not remove directory \"%s\"", path)));
			removed = lappend_oid(removed, spc->oid);
		}
		pfree(path);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	/* as remove_dbtablespaces logs it */
	if (removed != NIL)
	{
		xl_dbase_drop_rec xlrec;
		Oid		   *spcs = palloc(sizeof(Oid) * list_length(removed));
		int			n = 0;

		foreach(lc, removed)
			spcs[n++] = lfirst_oid(lc);
		xlrec.db_id = newdb;
		xlrec.ntablespaces = n;
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, MinSizeOfDbaseDropRec);
		XLogRegisterData((char *) spcs, sizeof(Oid) * n);

		/*
		 * Flushed: an aborting transaction flushes nothing, and a crash
		 * would replay the creation without this
		 */
		XLogFlush(XLogInsert(RM_DBASE_ID,
							 XLOG_DBASE_DROP | XLR_SPECIAL_REL_UPDATE));
	}
}

/* does a pg_class row that snapshot sees name storage (spc, relnode)? */
static bool
pmhash_catalog_names_in(Relation pg_class, Snapshot snapshot,
						const PmhashPoolNode *node)
{
	ScanKeyData keys[2];
	SysScanDesc scan;
	bool		found;

	ScanKeyInit(&keys[0], Anum_pg_class_reltablespace, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(node->spc));
	ScanKeyInit(&keys[1], Anum_pg_class_relfilenode, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(node->relnode));
	scan = systable_beginscan(pg_class, ClassTblspcRelfilenodeIndexId, true,
							  snapshot, 2, keys);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	return found;
}

/*
 * Does pg_class name storage (spc, relnode) of this database in a row that
 * is live, or that an unfinished (running or prepared) transaction
 * inserted or deletes?  Looked up by the storage, through a dirty snapshot
 * (the rows of unfinished transactions), then through a snapshot taken now
 * (committed rows).  Both by index: a sequential scan of pg_class can miss
 * a row that an update moves behind it while it runs (ALTER INDEX ...
 * RENAME during the sweep), where an MVCC snapshot finds the version that
 * was live when it was taken.
 */
static bool
pmhash_catalog_names(const PmhashPoolNode *node)
{
	Relation	pg_class;
	SnapshotData dirty;
	Snapshot	now;
	bool		found;

	pg_class = table_open(RelationRelationId, AccessShareLock);
	InitDirtySnapshot(dirty);
	found = pmhash_catalog_names_in(pg_class, &dirty, node);
	if (!found)
	{
		now = RegisterSnapshot(GetLatestSnapshot());
		found = pmhash_catalog_names_in(pg_class, now, node);
		UnregisterSnapshot(now);
	}
	table_close(pg_class, AccessShareLock);
	return found;
}

/* pmhash.sweep_pause: see pmhash_sweep_wait */
int			pmhash_sweep_pause = 0;

/*
 * Wait pmhash.sweep_pause between the sweep's listing of npools pool files
 * and its reading of the catalog, saying so in the server log first: a
 * developer option, with which a test creates an index in between.
 */
static void
pmhash_sweep_wait(int npools)
{
	TimestampTz until;

	ereport(LOG,
			(errmsg("pmhash: orphan sweep of database %u listed %d pool file(s), pausing %d ms",
					MyDatabaseId, npools, pmhash_sweep_pause),
			 errdetail("pmhash.sweep_pause is set.")));
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), pmhash_sweep_pause);
	for (;;)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
														   until);

		if (left <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Remove this database's orphan pools.  A pool is an orphan when its index
 * storage has no relation file (neither its main fork nor, for an
 * unlogged index on a standby, its init fork): a crash between a DROP's
 * commit and the removal of its pool leaves one; so does, on a standby, a
 * primary that crashed before it logged the removal, or a point-in-time
 * recovery that stopped right after the commit.  A pool is made after its
 * storage's file (ambuild, adoption, redo of CREATE after the file's own
 * redo) and removed before it (the commit and abort callbacks run before
 * PostgreSQL unlinks the files), so a pool without a file is never one
 * that is being made or used.
 *
 * On a primary a pool is also an orphan when no pg_class row names its
 * storage, neither in a dirty snapshot nor in one taken then
 * (pmhash_catalog_names): a crash while
 * the transaction that created the storage was open.  PostgreSQL keeps
 * that relation file (8 kB for a pmhash index), and a pool can be large.
 * The pools are listed first and the catalog read after: a pool listed
 * was made after its storage's row was inserted, so the catalog read
 * afterwards sees that row, even while the transaction making the index
 * runs.  (Read before the listing, it could miss the row of an index
 * created in between, and the sweep would remove the pool of an index
 * being built.)
 *
 * Run by the background worker once per database at every start.
 */
void
pmhash_sweep_orphans(void)
{
	char		dir[MAXPGPATH];
	DIR		   *d;
	struct dirent *de;
	int			removed = 0;
	List	   *pools = NIL;
	ListCell   *lc;

	pmhash_db_dir(MyDatabaseId, dir, sizeof(dir));
	d = AllocateDir(dir);
	if (d == NULL)
		return;
	while ((de = ReadDirExtended(d, dir, LOG)) != NULL)
	{
		PmhashPoolNode node;
		PmhashPoolNode *pool;

		if (!pmhash_pool_file_node(de->d_name, &node))
			continue;
		pool = palloc(sizeof(PmhashPoolNode));
		*pool = node;
		pools = lappend(pools, pool);
	}
	FreeDir(d);
	if (pmhash_sweep_pause > 0)
		pmhash_sweep_wait(list_length(pools));

	/* the catalog read after the listing: see the function's comment */
	foreach(lc, pools)
	{
		PmhashPoolNode *pool = (PmhashPoolNode *) lfirst(lc);
		RelFileNode rnode;
		PmhashKey	key;

		rnode.spcNode = OidIsValid(pool->spc) ? pool->spc : MyDatabaseTableSpace;
		rnode.dbNode = MyDatabaseId;
		rnode.relNode = pool->relnode;
		if (!pmhash_storage_gone(&rnode, false) &&
			(RecoveryInProgress() || pmhash_catalog_names(pool)))
			continue;
		memset(&key, 0, sizeof(key));
		key.dbid = MyDatabaseId;
		key.spcid = pool->spc;
		key.relnode = pool->relnode;
		pmhash_forget(&key);
		if (pmhash_pool_unlink(&key))
			removed++;
	}
	list_free_deep(pools);
	if (removed > 0)
		ereport(LOG,
				(errmsg("pmhash: removed %d orphan pool file(s) of database %u",
						removed, MyDatabaseId)));
}

/* the template named by a CREATE DATABASE statement */
static char *
pmhash_createdb_template(CreatedbStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, "template") == 0 && def->arg != NULL)
			return defGetString(def);
	}
	return "template1";
}

/*
 * ProcessUtility hook: DROP DATABASE and CREATE DATABASE act on whole
 * directories of relation files without per-relation callbacks; do the same
 * to pool directories once PostgreSQL has done its part.  ALTER TABLE ...
 * REPLICA IDENTITY USING INDEX of a pmhash index is refused before it runs
 * (pmhash_refuse_replica_identity).
 */
static void
pmhash_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	Oid			dropped_db = InvalidOid;
	Oid			template_db = InvalidOid;

	/*
	 * ALTER ... SET TABLESPACE copies the pool as it is: put this
	 * transaction's entries into it first.
	 */
	if ((IsA(parsetree, AlterTableStmt) || IsA(parsetree, AlterTableMoveAllStmt)) &&
		pmhash_log_have_unflushed())
		pmhash_log_flush_all(false);

	if (IsA(parsetree, AlterTableStmt))
		pmhash_refuse_replica_identity((AlterTableStmt *) parsetree);
	if (IsA(parsetree, TransactionStmt) &&
		((TransactionStmt *) parsetree)->kind == TRANS_STMT_PREPARE)
		pmhash_twophase_note_gid(((TransactionStmt *) parsetree)->gid);
	if (IsA(parsetree, DropdbStmt))
		dropped_db = get_database_oid(((DropdbStmt *) parsetree)->dbname, true);
	else if (IsA(parsetree, CreatedbStmt))
		template_db = get_database_oid(pmhash_createdb_template((CreatedbStmt *) parsetree),
									   true);

	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
							queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	/*
	 * ALTER ... SET TABLESPACE copied index storage block by block: give
	 * the copies their pools now, at the nesting level of the DDL (a later
	 * savepoint could not see the storage it replaced).
	 */
	if (IsA(parsetree, AlterTableStmt) || IsA(parsetree, AlterTableMoveAllStmt))
		pmhash_pre_commit();

	/* the prepared transaction's deleted storages lose their pools */
	if (IsA(parsetree, TransactionStmt) &&
		(((TransactionStmt *) parsetree)->kind == TRANS_STMT_COMMIT_PREPARED ||
		 ((TransactionStmt *) parsetree)->kind == TRANS_STMT_ROLLBACK_PREPARED))
		pmhash_twophase_finish();

	if (OidIsValid(dropped_db))
	{
		pmhash_remove_db_dir(dropped_db);
		pmhash_xlog_db(XLOG_PMHASH_DROP_DB, dropped_db, InvalidOid);
	}
	if (OidIsValid(template_db))
	{
		Oid			newdb = get_database_oid(((CreatedbStmt *) parsetree)->dbname,
											 true);

		if (OidIsValid(newdb))
		{
			PG_ENSURE_ERROR_CLEANUP(pmhash_createdb_failure,
									ObjectIdGetDatum(newdb));
			{
				pmhash_copy_db_pools(template_db, newdb);
			}
			PG_END_ENSURE_ERROR_CLEANUP(pmhash_createdb_failure,
										ObjectIdGetDatum(newdb));
			pmhash_xlog_db(XLOG_PMHASH_COPY_DB, template_db, newdb);
		}
	}
}

/* install the callbacks and hooks (from _PG_init) */
void
pmhash_lifecycle_init(void)
{
	RegisterXactCallback(pmhash_xact_callback, NULL);
	RegisterSubXactCallback(pmhash_subxact_callback, NULL);
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = pmhash_ProcessUtility;
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = pmhash_ExecutorStart;
}
