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
 *	  transaction (xid, GID, database) and every storage with a pool that
 *	  it would delete at commit or at abort, and makes it durable;
 *	- after COMMIT PREPARED or ROLLBACK PREPARED ran (ProcessUtility), the
 *	  state file of that GID is read, and each of its storages whose
 *	  relation file PostgreSQL has deleted loses its pool (logged for
 *	  standbys, as at a plain commit) and its shared state; then the state
 *	  file goes;
 *	- a crash between the end of the prepared transaction and that leaves
 *	  the state file (and maybe pools without relation files): the first
 *	  background worker run of the database after the next start resolves
 *	  the state files of transactions that are no longer prepared the same
 *	  way, before its sweep of orphan pools.
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

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/storage.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/procarray.h"
#include "utils/memutils.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

#define PMHASH_TWOPHASE_DIR		"twophase"
#define PMHASH_TWOPHASE_MAGIC	0x504D3250	/* "PM2P" */

/* a state file: this header, the GID, then nstorages PmhashTwoPhaseStorage */
typedef struct PmhashTwoPhaseHeader
{
	uint32		magic;
	TransactionId xid;
	Oid			dbid;
	uint32		gidlen;
	uint32		nstorages;
	pg_crc32c	crc;			/* of the rest of the file */
} PmhashTwoPhaseHeader;

/* a storage of a prepared transaction: its relation file and pool key */
typedef struct PmhashTwoPhaseStorage
{
	RelFileNode node;
	PmhashKey	key;
} PmhashTwoPhaseStorage;

/* a state file read back */
typedef struct PmhashTwoPhaseState
{
	TransactionId xid;
	Oid			dbid;
	char	   *gid;
	int			nstorages;
	PmhashTwoPhaseStorage *storages;
} PmhashTwoPhaseState;

/* the GID of the PREPARE TRANSACTION that runs now (TopMemoryContext) */
static char *pmhash_prepare_gid = NULL;

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

/* remember the GID of a PREPARE TRANSACTION statement (ProcessUtility) */
void
pmhash_twophase_note_gid(const char *gid)
{
	if (pmhash_prepare_gid != NULL)
		pfree(pmhash_prepare_gid);
	pmhash_prepare_gid = MemoryContextStrdup(TopMemoryContext, gid);
}

/* the transaction ended or was prepared: forget its GID */
void
pmhash_twophase_forget_gid(void)
{
	if (pmhash_prepare_gid != NULL)
		pfree(pmhash_prepare_gid);
	pmhash_prepare_gid = NULL;
}

/* add the storages of one pending-delete list that have pools */
static int
pmhash_twophase_collect(bool forCommit, PmhashTwoPhaseStorage **out, int n)
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
		*out = *out == NULL ? palloc(sizeof(PmhashTwoPhaseStorage)) :
			repalloc(*out, sizeof(PmhashTwoPhaseStorage) * (n + 1));
		(*out)[n].node = nodes[i];
		(*out)[n].key = key;
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
	PmhashTwoPhaseStorage *storages = NULL;
	PmhashTwoPhaseHeader hdr;
	TransactionId xid = GetTopTransactionIdIfAny();
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
	if (!TransactionIdIsValid(xid) || pmhash_prepare_gid == NULL)
		elog(ERROR, "pmhash: PREPARE of a transaction with index storage but no transaction ID or GID");

	memset(&hdr, 0, sizeof(hdr));
	hdr.magic = PMHASH_TWOPHASE_MAGIC;
	hdr.xid = xid;
	hdr.dbid = MyDatabaseId;
	hdr.gidlen = (uint32) strlen(pmhash_prepare_gid);
	hdr.nstorages = (uint32) n;
	INIT_CRC32C(hdr.crc);
	COMP_CRC32C(hdr.crc, pmhash_prepare_gid, hdr.gidlen);
	COMP_CRC32C(hdr.crc, storages, sizeof(PmhashTwoPhaseStorage) * n);
	FIN_CRC32C(hdr.crc);

	pmhash_twophase_path(dir, sizeof(dir), NULL);
	if (mkdir(dir, S_IRWXU) != 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create pmhash directory \"%s\": %m", dir),
				 errhint("PREPARE TRANSACTION of a transaction that creates or drops a pmhash index's storage writes there.")));
	snprintf(name, sizeof(name), "%u", xid);
	pmhash_twophase_path(path, sizeof(path), name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	ok = fd >= 0 &&
		write(fd, &hdr, sizeof(hdr)) == sizeof(hdr) &&
		write(fd, pmhash_prepare_gid, hdr.gidlen) == (ssize_t) hdr.gidlen &&
		write(fd, storages, sizeof(PmhashTwoPhaseStorage) * n) ==
		(ssize_t) (sizeof(PmhashTwoPhaseStorage) * n) &&
		pg_fsync(fd) == 0;
	if (fd >= 0 && CloseTransientFile(fd) != 0)
		ok = false;
	if (!ok || durable_rename(tmp, path, ERROR) != 0)
	{
		int			save_errno = errno;

		(void) unlink(tmp);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write pmhash state file \"%s\" of prepared transaction \"%s\": %m",
						path, pmhash_prepare_gid),
				 errdetail("The transaction creates or drops the storage of %d pmhash index(es).", n),
				 errhint("Free space in pmhash.pool_dir, or commit the transaction without PREPARE.")));
	}
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
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not open pmhash state file \"%s\": %m", path)));
		return NULL;
	}
	st = palloc0(sizeof(PmhashTwoPhaseState));
	ok = read(fd, &hdr, sizeof(hdr)) == sizeof(hdr) &&
		hdr.magic == PMHASH_TWOPHASE_MAGIC &&
		hdr.gidlen < 1024 && hdr.nstorages < 1000000;
	if (ok)
	{
		st->xid = hdr.xid;
		st->dbid = hdr.dbid;
		st->nstorages = (int) hdr.nstorages;
		st->gid = palloc0(hdr.gidlen + 1);
		st->storages = palloc(sizeof(PmhashTwoPhaseStorage) * Max(hdr.nstorages, 1));
		ok = read(fd, st->gid, hdr.gidlen) == (ssize_t) hdr.gidlen &&
			read(fd, st->storages, sizeof(PmhashTwoPhaseStorage) * hdr.nstorages) ==
			(ssize_t) (sizeof(PmhashTwoPhaseStorage) * hdr.nstorages);
	}
	if (ok)
	{
		INIT_CRC32C(crc);
		COMP_CRC32C(crc, st->gid, hdr.gidlen);
		COMP_CRC32C(crc, st->storages, sizeof(PmhashTwoPhaseStorage) * hdr.nstorages);
		FIN_CRC32C(crc);
		ok = EQ_CRC32C(crc, hdr.crc);
	}
	CloseTransientFile(fd);
	if (!ok)
	{
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmhash state file \"%s\" is corrupt; ignored", path),
				 errhint("Pools it named are removed at the next start if their indexes are gone.")));
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
		if (!pmhash_storage_gone(&st->storages[i].node, true))
			continue;
		pmhash_forget(&st->storages[i].key);
		if (pmhash_pool_unlink(&st->storages[i].key))
		{
			pmhash_xlog_drop(&st->storages[i].key);
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
		 st->gid, st->xid, removed);
}

/*
 * Visit the state files: those of transaction gid (if not NULL), or else
 * of database dbid whose transactions are no longer prepared; resolve
 * each.
 */
static void
pmhash_twophase_visit(const char *gid, Oid dbid)
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
		if ((gid != NULL ? strcmp(st->gid, gid) == 0 : st->dbid == dbid) &&
			!TransactionIdIsInProgress(st->xid))
			pmhash_twophase_resolve(st, path);
		pfree(st->gid);
		pfree(st->storages);
		pfree(st);
	}
	FreeDir(d);
}

/*
 * After COMMIT PREPARED or ROLLBACK PREPARED of gid succeeded
 * (ProcessUtility): the pools of the storages it deleted go.
 */
void
pmhash_twophase_finish(const char *gid)
{
	pmhash_twophase_visit(gid, InvalidOid);
}

/*
 * At the first background worker run of a database after a start, before
 * the sweep of orphan pools: resolve the state files of its transactions
 * that ended while (or before) the server went down.
 */
void
pmhash_twophase_sweep(void)
{
	pmhash_twophase_visit(NULL, MyDatabaseId);
}
