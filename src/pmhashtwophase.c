/*-------------------------------------------------------------------------
 *
 * pmhashtwophase.c
 *	  Pools of index storages created or dropped by prepared transactions.
 *
 * A transaction that creates or drops index storage removes the pools of
 * the storages PostgreSQL deletes when it ends (pmhashlifecycle.c): at
 * commit the dropped ones, at abort the new ones.  A prepared transaction
 * ends in COMMIT PREPARED or ROLLBACK PREPARED, often in another session
 * (Citus runs every multi-shard DDL through two-phase commit), after which
 * PostgreSQL deletes the relation files itself, with no callback.  So:
 *
 *	- PREPARE TRANSACTION (XACT_EVENT_PRE_PREPARE, before the prepare
 *	  record) writes a state file, <pool_dir>/twophase/<xid>, naming the
 *	  transaction (full xid, GID when known, database) and the pool key of
 *	  every storage with a pool that it would delete at commit or at
 *	  abort, and makes it durable; if the PREPARE fails after that, the
 *	  abort callback removes the file;
 *	- after COMMIT PREPARED or ROLLBACK PREPARED ran (ProcessUtility), the
 *	  state files of the database's transactions that have ended are
 *	  resolved: each storage whose relation file PostgreSQL has deleted
 *	  loses its pool (logged for standbys, as at a plain commit) and its
 *	  shared state; then the state file goes.  A failure there is a
 *	  WARNING: the transaction has ended, and the next resolution retries;
 *	- a crash between the end of the prepared transaction and that leaves
 *	  the state file (and maybe pools without relation files): the first
 *	  background worker run of the database after the next start resolves
 *	  it the same way, before its sweep of orphan pools.  So does the next
 *	  COMMIT/ROLLBACK PREPARED statement in the database for transactions
 *	  that a logical-replication apply worker prepared and finished (it
 *	  calls PostgreSQL's functions directly, past ProcessUtility).
 *
 * Which storages lose their pools is decided by their relation files, not
 * by the outcome: PostgreSQL has deleted exactly those of the outcome's
 * list when COMMIT/ROLLBACK PREPARED returns (and redo of its record
 * deletes them on a standby and in crash recovery), so the same test is
 * right after a crash, whatever the outcome was.  A storage's pool is
 * never removed while its relation file exists.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/storage.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

#define PMHASH_TWOPHASE_DIR		"twophase"
#define PMHASH_TWOPHASE_MAGIC	0x504D3250	/* "PM2P" */

/* a state file: this header, the GID, then nstorages PmhashKey */
typedef struct PmhashTwoPhaseHeader
{
	uint32		magic;
	Oid			dbid;
	FullTransactionId fxid;
	uint32		gidlen;
	uint32		nstorages;
	pg_crc32c	crc;			/* of the rest of the file */
	uint32		pad;
} PmhashTwoPhaseHeader;

/* a state file read back */
typedef struct PmhashTwoPhaseState
{
	FullTransactionId fxid;
	Oid			dbid;
	char	   *gid;
	int			nstorages;
	PmhashKey  *storages;
} PmhashTwoPhaseState;

/* the GID of the PREPARE TRANSACTION that runs now (TopMemoryContext) */
static char *pmhash_prepare_gid = NULL;

/* the state file this transaction's PREPARE wrote, until it is prepared */
static char pmhash_prepare_file[MAXPGPATH] = "";

/* the state directory, or a state file in it */
static void
pmhash_twophase_path(char *path, size_t len, const char *name)
{
	if (name == NULL)
		snprintf(path, len, "%s/%s", pmhash_pool_dir, PMHASH_TWOPHASE_DIR);
	else
		snprintf(path, len, "%s/%s/%s", pmhash_pool_dir, PMHASH_TWOPHASE_DIR,
				 name);
}

/*
 * Has PostgreSQL deleted this storage's relation file: no main fork, and
 * no init fork either (a standby has only that of an unlogged index)?
 * With empty_is_gone, an empty main fork counts as deleted: PostgreSQL
 * deletes a relation's main fork by truncating it, and unlinks it only at
 * the next checkpoint, so that its number is not reused meanwhile
 * (mdunlink).  Only for storages of an ended transaction: one being built
 * now can be empty for a moment.
 */
bool
pmhash_storage_gone(const RelFileNode *node, bool empty_is_gone)
{
	ForkNumber	forks[2] = {MAIN_FORKNUM, INIT_FORKNUM};
	int			i;

	for (i = 0; i < lengthof(forks); i++)
	{
		char	   *path = relpathperm(*node, forks[i]);
		struct stat st;
		bool		gone;

		if (stat(path, &st) == 0)
			gone = empty_is_gone && forks[i] == MAIN_FORKNUM && st.st_size == 0;
		else
			gone = errno == ENOENT;
		pfree(path);
		if (!gone)
			return false;
	}
	return true;
}

/* the relation file of a pool key of this database */
static void
pmhash_twophase_node(const PmhashKey *key, RelFileNode *node)
{
	node->spcNode = OidIsValid(key->spcid) ? key->spcid : MyDatabaseTableSpace;
	node->dbNode = key->dbid;
	node->relNode = key->relnode;
}

/* remember the GID of a PREPARE TRANSACTION statement (ProcessUtility) */
void
pmhash_twophase_note_gid(const char *gid)
{
	if (pmhash_prepare_gid != NULL)
		pfree(pmhash_prepare_gid);
	pmhash_prepare_gid = MemoryContextStrdup(TopMemoryContext, gid);
}

/*
 * The transaction was prepared (prepared: its state file stays) or rolled
 * back (its PREPARE failed after the file was written: the file goes).
 */
void
pmhash_twophase_end(bool prepared)
{
	if (!prepared && pmhash_prepare_file[0] != '\0' &&
		unlink(pmhash_prepare_file) != 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove pmhash state file \"%s\": %m",
						pmhash_prepare_file)));
	pmhash_prepare_file[0] = '\0';
	if (pmhash_prepare_gid != NULL)
		pfree(pmhash_prepare_gid);
	pmhash_prepare_gid = NULL;
}

/* add the pool keys of one pending-delete list's storages that have pools */
static int
pmhash_twophase_collect(bool forCommit, PmhashKey **out, int n)
{
	RelFileNode *nodes;
	int			count = smgrGetPendingDeletes(forCommit, &nodes);
	int			i;

	for (i = 0; i < count; i++)
	{
		PmhashKey	key;

		pmhash_key_for_node(&nodes[i], &key);
		if (!pmhash_pool_exists(&key))
			continue;
		*out = *out == NULL ? palloc(sizeof(PmhashKey)) :
			repalloc(*out, sizeof(PmhashKey) * (n + 1));
		(*out)[n] = key;
		n++;
	}
	if (nodes)
		pfree(nodes);
	return n;
}

/*
 * PREPARE TRANSACTION, before its record: write the state file of a
 * transaction that created or dropped index storage with a pool, durably.
 * An error here fails the PREPARE, and the transaction rolls back as
 * usual.
 */
void
pmhash_twophase_prepare(void)
{
	PmhashKey  *storages = NULL;
	PmhashTwoPhaseHeader hdr;
	const char *gid = pmhash_prepare_gid != NULL ? pmhash_prepare_gid : "";
	char		dir[MAXPGPATH];
	char		path[MAXPGPATH];
	char		tmp[MAXPGPATH];
	char		name[32];
	int			n;
	int			fd;
	bool		ok;

	n = pmhash_twophase_collect(true, &storages, 0);
	n = pmhash_twophase_collect(false, &storages, n);
	if (n == 0)
		return;

	memset(&hdr, 0, sizeof(hdr));
	hdr.magic = PMHASH_TWOPHASE_MAGIC;
	hdr.dbid = MyDatabaseId;
	/* (storage was created or dropped: the transaction has an xid) */
	hdr.fxid = GetTopFullTransactionId();
	hdr.gidlen = (uint32) Min(strlen(gid), GIDSIZE);
	hdr.nstorages = (uint32) n;
	INIT_CRC32C(hdr.crc);
	COMP_CRC32C(hdr.crc, gid, hdr.gidlen);
	COMP_CRC32C(hdr.crc, storages, sizeof(PmhashKey) * n);
	FIN_CRC32C(hdr.crc);

	pmhash_twophase_path(dir, sizeof(dir), NULL);
	if (mkdir(dir, S_IRWXU) == 0)
		(void) fsync_fname_ext(pmhash_pool_dir, true, true, WARNING);
	snprintf(name, sizeof(name), "%u", XidFromFullTransactionId(hdr.fxid));
	pmhash_twophase_path(path, sizeof(path), name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	errno = 0;
	fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	ok = fd >= 0 &&
		write(fd, &hdr, sizeof(hdr)) == sizeof(hdr) &&
		write(fd, gid, hdr.gidlen) == (ssize_t) hdr.gidlen &&
		write(fd, storages, sizeof(PmhashKey) * n) == (ssize_t) (sizeof(PmhashKey) * n) &&
		pg_fsync(fd) == 0;
	if (!ok && errno == 0)
		errno = ENOSPC;			/* a short write */
	if (fd >= 0 && CloseTransientFile(fd) != 0)
		ok = false;
	if (ok && durable_rename(tmp, path, LOG) != 0)
		ok = false;
	if (!ok)
	{
		int			save_errno = errno;

		(void) unlink(tmp);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write pmhash state file \"%s\" of prepared transaction \"%s\": %m",
						path, gid),
				 errdetail("The transaction creates or drops the storage of %d pmhash index(es).", n),
				 errhint("Free space in pmhash.pool_dir, or commit the transaction without PREPARE.")));
	}
	/* (removed by the abort callback if the PREPARE fails after this) */
	strlcpy(pmhash_prepare_file, path, sizeof(pmhash_prepare_file));
	pfree(storages);
}

/*
 * Read a state file; NULL (with a WARNING) if it cannot be read or is
 * corrupt.
 */
static PmhashTwoPhaseState *
pmhash_twophase_read(const char *path)
{
	PmhashTwoPhaseHeader hdr;
	PmhashTwoPhaseState *st;
	pg_crc32c	crc;
	int			fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	bool		ok;

	if (fd < 0)
	{
		/* (another session resolved it since the directory was read) */
		if (errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not open pmhash state file \"%s\": %m", path)));
		return NULL;
	}
	st = palloc0(sizeof(PmhashTwoPhaseState));
	ok = read(fd, &hdr, sizeof(hdr)) == sizeof(hdr) &&
		hdr.magic == PMHASH_TWOPHASE_MAGIC &&
		hdr.gidlen <= GIDSIZE && hdr.nstorages < 1000000;
	if (ok)
	{
		st->fxid = hdr.fxid;
		st->dbid = hdr.dbid;
		st->nstorages = (int) hdr.nstorages;
		st->gid = palloc0(hdr.gidlen + 1);
		st->storages = palloc(sizeof(PmhashKey) * Max(hdr.nstorages, 1));
		ok = read(fd, st->gid, hdr.gidlen) == (ssize_t) hdr.gidlen &&
			read(fd, st->storages, sizeof(PmhashKey) * hdr.nstorages) ==
			(ssize_t) (sizeof(PmhashKey) * hdr.nstorages);
	}
	if (ok)
	{
		INIT_CRC32C(crc);
		COMP_CRC32C(crc, st->gid, hdr.gidlen);
		COMP_CRC32C(crc, st->storages, sizeof(PmhashKey) * hdr.nstorages);
		FIN_CRC32C(crc);
		ok = EQ_CRC32C(crc, hdr.crc);
	}
	CloseTransientFile(fd);
	if (!ok)
	{
		/* (it was written through a rename: only damage makes it so) */
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmhash state file \"%s\" is corrupt; removed", path),
				 errhint("Pools it named are removed at the next start if their indexes are gone.")));
		if (unlink(path) != 0 && errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not remove pmhash state file \"%s\": %m", path)));
		return NULL;
	}
	return st;
}

/*
 * The prepared transaction of a state file has ended: remove the pools of
 * its storages whose relation files PostgreSQL deleted, then the file.
 */
static void
pmhash_twophase_resolve(PmhashTwoPhaseState *st, const char *path)
{
	char		dir[MAXPGPATH];
	int			removed = 0;
	int			i;

	pmhash_backend_init();
	for (i = 0; i < st->nstorages; i++)
	{
		RelFileNode node;

		pmhash_twophase_node(&st->storages[i], &node);
		if (!pmhash_storage_gone(&node, true))
			continue;
		pmhash_forget(&st->storages[i]);
		if (pmhash_pool_unlink(&st->storages[i]))
		{
			pmhash_xlog_drop(&st->storages[i]);
			removed++;
		}
	}
	/*
	 * The statement's own transaction writes no commit record: flush the
	 * removals, so that a standby has them as soon as the client may ask
	 */
	if (removed > 0 && XLogIsNeeded() && !RecoveryInProgress())
		XLogFlush(GetXLogInsertRecPtr());
	if (unlink(path) != 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove pmhash state file \"%s\": %m", path)));
	pmhash_twophase_path(dir, sizeof(dir), NULL);
	(void) fsync_fname_ext(dir, true, true, WARNING);
	elog(DEBUG1, "pmhash: prepared transaction \"%s\" (%u) ended; %d pool(s) removed",
		 st->gid, XidFromFullTransactionId(st->fxid), removed);
}

/*
 * Has the transaction of a state file ended, and PostgreSQL deleted the
 * storages of its outcome?  Prepared transactions are in progress (also
 * after a restart).  One that is not may still be deleting its files
 * (FinishPreparedTransaction leaves the procarray first): its lock on its
 * xid goes after that, so wait for it.  An xid older than the oldest one
 * still in the commit log has ended long ago (and must not be looked up);
 * a prepared transaction holds that horizon back.
 */
static bool
pmhash_twophase_ended(const PmhashTwoPhaseState *st)
{
	FullTransactionId next = ReadNextFullTransactionId();
	TransactionId xid = XidFromFullTransactionId(st->fxid);

	if (FullTransactionIdFollowsOrEquals(st->fxid, next))
		return false;			/* (not possible: a file from the future) */
	if (U64FromFullTransactionId(next) - U64FromFullTransactionId(st->fxid) >=
		(uint64) MaxTransactionId / 2 ||
		TransactionIdPrecedes(xid, ShmemVariableCache->oldestXid))
		return true;
	if (TransactionIdIsInProgress(xid))
		return false;
	XactLockTableWait(xid, NULL, NULL, XLTW_None);
	return true;
}

/*
 * Resolve the state files of this database whose transactions have
 * ended.
 */
static void
pmhash_twophase_visit(void)
{
	char		dir[MAXPGPATH];
	DIR		   *d;
	struct dirent *de;

	pmhash_twophase_path(dir, sizeof(dir), NULL);
	d = AllocateDir(dir);
	if (d == NULL)
		return;					/* no prepared transaction ever had one */
	while ((de = ReadDirExtended(d, dir, LOG)) != NULL)
	{
		char		path[MAXPGPATH];
		PmhashTwoPhaseState *st;
		unsigned int xid;
		char		tail;

		if (sscanf(de->d_name, "%u%c", &xid, &tail) != 1)
			continue;
		pmhash_twophase_path(path, sizeof(path), de->d_name);
		st = pmhash_twophase_read(path);
		if (st == NULL)
			continue;
		if (st->dbid == MyDatabaseId && pmhash_twophase_ended(st))
			pmhash_twophase_resolve(st, path);
		pfree(st->gid);
		pfree(st->storages);
		pfree(st);
	}
	FreeDir(d);
}

/*
 * After COMMIT PREPARED or ROLLBACK PREPARED succeeded (ProcessUtility;
 * it runs in the database of the prepared transaction): the pools of the
 * storages it deleted go, and those of any other ended transaction of the
 * database.  The transaction has ended whatever happens here, so a
 * failure is a WARNING; the next resolution retries.
 */
void
pmhash_twophase_finish(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		pmhash_twophase_visit();
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ereport(WARNING,
				(errmsg("could not remove the pools of a prepared transaction's pmhash storages: %s",
						edata->message),
				 errdetail("The prepared transaction has ended; its pools are removed at the next COMMIT or ROLLBACK PREPARED in this database, or at the next start.")));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

/*
 * At the first background worker run of a database after a start, before
 * the sweep of orphan pools: resolve the state files of its transactions
 * that ended while (or before) the server went down.
 */
void
pmhash_twophase_sweep(void)
{
	pmhash_twophase_visit();
}
