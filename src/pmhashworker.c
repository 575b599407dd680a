/*-------------------------------------------------------------------------
 *
 * pmhashworker.c
 *	  Background work on every pmhash index: load them into shared memory
 *	  after a server start or a crash reinitialisation, so that the first
 *	  query does not pay for it, and rebuild from the heap the pools that
 *	  need it (pmhashrebuild.c).
 *
 * A launcher (a static background worker) starts once the server accepts
 * read-only connections: at the end of recovery, or on a hot standby as
 * soon as it is consistent.  It lists the databases that accept
 * connections, and for each starts a worker connected to it, one at a
 * time.  With pmhash.prewarm on, the first run's workers attach to every
 * pmhash index of their database, one transaction per index:
 * pmhash_attach() rebuilds the shared state from the pool exactly as a
 * backend's first use would, under the exclusive index lock, so a backend
 * that needs the index meanwhile waits for it (or, if it came first, the
 * worker waits and finds the index ready).  An index that fails to load
 * (a corrupt or missing pool) is reported with its ERROR, downgraded to a
 * WARNING, and skipped; it stays unloaded, and its next user gets the
 * ERROR.  Every run (also with prewarm off) rebuilds the pools that await
 * a rebuild: loaded ones the shared state marks, and ones not loaded yet
 * whose file says so (a copy from a base backup).
 *
 * The launcher also writes back pools on ordinary files whose writes were
 * deferred (pmhashwriteback.c): every poll, those idle for
 * pmhash.writeback_delay, and all of them when the server stops.
 *
 * The launcher then stays, and starts another run whenever some pool
 * awaits a rebuild (one marked by redo or by a first use), polling once a
 * second and backing off to once a minute while a rebuild keeps failing
 * (on a standby, a replay conflict can cancel it).  Staying also makes
 * the postmaster restart it (and it loads everything again) after every
 * crash reinitialisation: a background worker that exits is not
 * restarted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>

#include "access/heapam.h"
#include "access/relation.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "pmhash.h"

PGDLLEXPORT void pmhash_prewarm_launcher_main(Datum arg);
PGDLLEXPORT void pmhash_prewarm_worker_main(Datum arg);

/* GUC: load every index in the background after a start */
bool		pmhash_prewarm = true;

/* most databases one launcher run looks at */
#define PMHASH_PREWARM_MAX_DBS	1024

/* how often the launcher looks for pools awaiting a rebuild (ms) */
#define PMHASH_REBUILD_POLL_MS		1000
#define PMHASH_REBUILD_POLL_MAX_MS	60000

/* fill in what the launcher and the workers have in common */
static void
pmhash_prewarm_worker_init(BackgroundWorker *w, const char *function,
						   const char *name)
{
	memset(w, 0, sizeof(*w));
	w->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w->bgw_start_time = BgWorkerStart_ConsistentState;
	snprintf(w->bgw_library_name, BGW_MAXLEN, "pmhash");
	snprintf(w->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(w->bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(w->bgw_type, BGW_MAXLEN, "pmhash prewarm");
}

/*
 * Register the launcher (from _PG_init, while shared_preload_libraries is
 * processed).  It is restarted at once after a crash reinitialisation.
 */
void
pmhash_prewarm_register(void)
{
	BackgroundWorker w;

	pmhash_prewarm_worker_init(&w, "pmhash_prewarm_launcher_main",
							   "pmhash prewarm launcher");
	w.bgw_restart_time = 10;
	RegisterBackgroundWorker(&w);
}

/*
 * The databases that accept connections and have a pool directory (during
 * recovery: all that accept connections); at most "max" of them into
 * dbs[].  Runs in a transaction.
 */
static int
pmhash_prewarm_databases(Oid *dbs, int max)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	int			n = 0;

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL && n < max)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		char		path[MAXPGPATH];
		struct stat st;

		if (!db->datallowconn)
			continue;
		/* a standby rebuilds pools it lacks: look at every database there */
		pmhash_db_dir(db->oid, path, sizeof(path));
		if (!RecoveryInProgress() &&
			(lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)))
			continue;
		dbs[n++] = db->oid;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return n;
}

/*
 * One run: a worker per database, one after the other; prewarm says
 * whether they load every index or only rebuild what awaits it.
 */
static void
pmhash_launcher_run(bool prewarm, bool first)
{
	Oid		   *dbs;
	int			ndbs;
	int			i;

	dbs = palloc(sizeof(Oid) * PMHASH_PREWARM_MAX_DBS);
	StartTransactionCommand();
	ndbs = pmhash_prewarm_databases(dbs, PMHASH_PREWARM_MAX_DBS);
	CommitTransactionCommand();

	for (i = 0; i < ndbs && !ShutdownRequestPending; i++)
	{
		BackgroundWorker w;
		BackgroundWorkerHandle *handle;
		pid_t		pid;

		pmhash_prewarm_worker_init(&w, "pmhash_prewarm_worker_main",
								   prewarm ? "pmhash prewarm worker" :
								   "pmhash rebuild worker");
		w.bgw_restart_time = BGW_NEVER_RESTART;
		w.bgw_main_arg = ObjectIdGetDatum(dbs[i]);
		w.bgw_extra[0] = prewarm ? 1 : 0;
		w.bgw_extra[1] = first ? 1 : 0;
		w.bgw_notify_pid = MyProcPid;
		if (!RegisterDynamicBackgroundWorker(&w, &handle))
		{
			ereport(LOG,
					(errmsg("pmhash: no background worker slot for database %u; its indexes load on first use, and rebuilds wait",
							dbs[i]),
					 errhint("Raise max_worker_processes.")));
			break;
		}
		if (WaitForBackgroundWorkerStartup(handle, &pid) != BGWH_STARTED)
			continue;
		(void) WaitForBackgroundWorkerShutdown(handle);
	}
	pfree(dbs);
}

/*
 * The launcher: a first run (loading everything with pmhash.prewarm), then
 * another whenever a pool awaits a rebuild, until the server stops.
 */
void
pmhash_prewarm_launcher_main(Datum arg)
{
	long		wait_ms = PMHASH_REBUILD_POLL_MS;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	pmhash_backup_recovery_done();
	pmhash_launcher_run(pmhash_prewarm, true);

	/* stay, so that a crash reinitialisation starts a new run */
	while (!ShutdownRequestPending)
	{
		pmhash_backup_recovery_done();	/* (once, after a promotion) */
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wait_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		/* absorb barriers (DROP DATABASE / TABLESPACE wait for them) */
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		/* write back the pools that have been idle long enough */
		(void) pmhash_writeback_run(false);
		if (pmhash_rebuilds_pending() == 0)
		{
			wait_ms = PMHASH_REBUILD_POLL_MS;
			continue;
		}
		pmhash_launcher_run(false, false);
		/* still pending after a run: some rebuild failed; back off */
		if (pmhash_rebuilds_pending() > 0)
			wait_ms = Min(wait_ms * 2, PMHASH_REBUILD_POLL_MAX_MS);
	}

	/*
	 * The server is stopping: write back every pool, so that a restart of
	 * the operating system after a clean shutdown rebuilds none.
	 */
	(void) pmhash_writeback_run(true);
	proc_exit(0);
}

/*
 * The OIDs of the database's pmhash indexes (not on temporary tables, nor,
 * during recovery, unlogged ones).
 */
static List *
pmhash_prewarm_indexes(Oid amoid)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	List	   *oids = NIL;

	rel = table_open(RelationRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_class c = (Form_pg_class) GETSTRUCT(tup);

		/* during recovery an unlogged index has no main fork to read */
		if (c->relkind == RELKIND_INDEX && c->relam == amoid &&
			c->relpersistence != RELPERSISTENCE_TEMP &&
			!(c->relpersistence == RELPERSISTENCE_UNLOGGED &&
			  RecoveryInProgress()))
			oids = lappend_oid(oids, c->oid);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return oids;
}

/*
 * Load one index (prewarm) in its own transaction, then rebuild its pool
 * if that is due (in transactions of its own); an ERROR is reported as a
 * WARNING and the index skipped.  Returns false after an ERROR.
 */
static bool
pmhash_prewarm_index(Oid indexoid, bool prewarm)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool rebuilding = false;
	bool		ok = true;

	PG_TRY();
	{
		/* an index dropped meanwhile is simply gone */
		Relation	index;

		StartTransactionCommand();
		index = try_relation_open(indexoid, AccessShareLock);
		if (index != NULL)
		{
			PmhashIndex idx;

			if (prewarm)
			{
				pmhash_attach(index, LW_SHARED, &idx);
				pmhash_load_all(&idx, true);
				pmhash_detach(&idx);
			}
			rebuilding = pmhash_known_rebuilding(index);
			if (rebuilding)
			{
				/* load it, which replaces a copied pool (pmhash_load) */
				pmhash_attach(index, LW_SHARED, &idx);
				pmhash_detach(&idx);
			}
			relation_close(index, AccessShareLock);
		}
		CommitTransactionCommand();
		if (rebuilding)
			(void) pmhash_rebuild(indexoid);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		RESUME_INTERRUPTS();
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("pmhash %s: %s", rebuilding ? "rebuild" : "prewarm",
						edata->message),
				 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
				 edata->hint ? errhint("%s", edata->hint) : 0));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/* A worker: load every pmhash index of one database. */
void
pmhash_prewarm_worker_main(Datum arg)
{
	Oid			dboid = DatumGetObjectId(arg);
	bool		prewarm = MyBgworkerEntry->bgw_extra[0] != 0;
	bool		first = MyBgworkerEntry->bgw_extra[1] != 0;
	TimestampTz start;
	Oid			amoid;
	List	   *oids = NIL;
	ListCell   *lc;
	int			loaded = 0;
	int			failed = 0;

	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	start = GetCurrentTimestamp();

	StartTransactionCommand();
	/* the first run after a start also removes orphan pools */
	if (first)
	{
		pmhash_twophase_sweep();
		pmhash_sweep_orphans();
	}
	amoid = get_am_oid("pmhash", true);
	if (OidIsValid(amoid))
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);

		oids = pmhash_prewarm_indexes(amoid);
		MemoryContextSwitchTo(oldcxt);
	}
	CommitTransactionCommand();

	foreach(lc, oids)
	{
		CHECK_FOR_INTERRUPTS();
		if (pmhash_prewarm_index(lfirst_oid(lc), prewarm))
			loaded++;
		else
			failed++;
	}
	if (prewarm)
		ereport(LOG,
				(errmsg("pmhash prewarm: database %u: %d index(es) loaded, %d not, in %.1f ms",
						dboid, loaded, failed,
						(double) (GetCurrentTimestamp() - start) / 1000.0)));
	proc_exit(0);
}
