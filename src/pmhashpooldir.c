/*-------------------------------------------------------------------------
 *
 * pmhashpooldir.c
 *	  The pool directory (pmhash.pool_dir): created and checked at
 *	  postmaster start, claimed for this cluster (PMHASH_OWNER), and the
 *	  pool epoch and crash count it keeps (PMHASH_EPOCH).
 *
 * Pool files themselves are pmhashpool.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/file_perm.h"
#include "miscadmin.h"
#include "storage/fd.h"

#include "pmhash.h"

/*
 * Create a directory 0700 if missing, and check that it is one.  The
 * configured pmhash.pool_dir (top) may be a symlink to a directory, as
 * pg_wal may: the administrator chose it.  A database's directory below it
 * is pmhash's own and must be a real directory, never a symlink planted
 * there.
 */
void
pmhash_ensure_dir(const char *path, bool top)
{
	struct stat st;
	int			rc;

	if (mkdir(path, pg_dir_create_mode) == 0)
	{
		/* make the new directory's entry durable in its parent */
		char		parent[MAXPGPATH];

		strlcpy(parent, path, sizeof(parent));
		get_parent_directory(parent);
		(void) fsync_fname_ext(parent[0] ? parent : ".", true, true, WARNING);
	}
	else if (errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create pmhash pool directory \"%s\": %m", path),
				 errhint("Check that pmhash.pool_dir names a writable directory.")));
	rc = top ? stat(path, &st) : lstat(path, &st);
	if (rc != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat pmhash pool directory \"%s\": %m", path)));
	if (!S_ISDIR(st.st_mode))
		ereport(ERROR,
				(errcode(top ? ERRCODE_CONFIG_FILE_ERROR :
						 ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("pmhash pool directory \"%s\" is not a directory", path),
				 top ?
				 errhint("Set pmhash.pool_dir to a directory and restart the server.") :
				 errhint("pmhash creates this directory itself; remove what is there.")));
}

/*
 * The pool directory's epoch, read or advanced at postmaster start and
 * inherited by every backend, and the count of server crashes: both are
 * kept in the file PMHASH_EPOCH of the pool directory.
 */
uint32		pmhash_epoch = 0;
uint64		pmhash_crash_count = 0;

/*
 * Does this run recover a base backup: did the postmaster start it with
 * backup_label, or continue a recovery that such a start began and that
 * has not finished (PMHASH_EPOCH says so)?  Then redo applies pmhash
 * records even without archive recovery, and a missing pool is rebuilt
 * rather than an error: the backup may not have copied it.
 */
bool		pmhash_started_from_backup = false;

/*
 * Did the server stop without a shutdown checkpoint before this start?
 * Called by the postmaster before the startup process runs, so pg_control
 * still says how the last run ended.  When in doubt, say yes: a crash
 * counted too often only makes relocation check for duplicates.
 */
static bool
pmhash_last_run_crashed(void)
{
	ControlFileData *cf;
	bool		crc_ok;
	bool		crashed;

	cf = get_controlfile(DataDir, &crc_ok);
	crashed = !crc_ok ||
		(cf->state != DB_SHUTDOWNED && cf->state != DB_SHUTDOWNED_IN_RECOVERY);
	pfree(cf);
	return crashed;
}

/*
 * Replace a small file of the pool directory (what: its name in messages)
 * durably: through a temporary file, fsync and rename, then an fsync of
 * the directory.  A failure is reported at elevel (FATAL at postmaster
 * start); returns whether the file was written.
 */
static bool
pmhash_write_dir_file(const char *path, const char *buf, int len,
					  const char *what, int elevel)
{
	char		tmp[MAXPGPATH];
	int			fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
			  S_IRUSR | S_IWUSR);
	if (fd < 0)
		goto failed;
	if (write(fd, buf, len) != len || pg_fsync(fd) != 0)
	{
		int			save_errno = errno;

		close(fd);
		errno = save_errno;
		goto failed;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0)
		goto failed;
	(void) fsync_fname_ext(pmhash_pool_dir, true, true, WARNING);
	return true;

failed:
	ereport(elevel,
			(errcode_for_file_access(),
			 errmsg("could not write pmhash %s file \"%s\": %m", what, path)));
	return false;
}

/* the path of the pool directory's epoch file */
static void
pmhash_epoch_path(char *path)
{
	snprintf(path, MAXPGPATH, "%s/PMHASH_EPOCH", pmhash_pool_dir);
}

/*
 * Write the epoch file: the epoch, the crash count, and 1 while the
 * recovery of a base backup is under way (see pmhash_epoch_init).
 */
static bool
pmhash_epoch_write(uint32 epoch, unsigned long long crashes, bool backup,
				   int elevel)
{
	char		path[MAXPGPATH];
	char		buf[64];
	int			len;

	pmhash_epoch_path(path);
	len = snprintf(buf, sizeof(buf), "%u %llu %d\n", epoch, crashes,
				   backup ? 1 : 0);
	return pmhash_write_dir_file(path, buf, len, "epoch", elevel);
}

/*
 * Read the epoch file's fields (the third, if missing, as 0): 1 if read,
 * 0 if there is no file (the fields untouched), -1 if it is corrupt.
 */
static int
pmhash_epoch_read(uint32 *epoch, unsigned long long *crashes, int *backup)
{
	char		path[MAXPGPATH];
	char		buf[64];
	FILE	   *f;
	bool		ok;

	pmhash_epoch_path(path);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	*backup = 0;
	ok = fgets(buf, sizeof(buf), f) != NULL &&
		sscanf(buf, "%u %llu %d", epoch, crashes, backup) >= 1 &&
		*epoch != 0;
	fclose(f);
	return ok ? 1 : -1;
}

/*
 * Read the epoch file of the pool directory and update it.
 *
 * The epoch advances when the server starts from a base backup.  A base
 * backup copies the data directory, pools included (by default they live
 * inside it), while the index's entries move on: the copy is fuzzy.
 * PostgreSQL 15 only has backup_label in a data directory restored from a
 * base backup; the startup process renames it after the postmaster has run
 * this.  Pools of an older epoch are refused (REINDEX).
 *
 * The crash count advances at a start after a crash, and at every
 * reinitialisation after a backend crashed (reinit): see PmhPoolState.
 */
static void
pmhash_epoch_init(bool reinit)
{
	char		path[MAXPGPATH];
	uint32		epoch = 1;
	unsigned long long crashes = 0;
	int			backup = 0;
	int			found;
	bool		dirty = false;

	found = pmhash_epoch_read(&epoch, &crashes, &backup);
	if (found < 0)
	{
		pmhash_epoch_path(path);
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmhash epoch file \"%s\" is corrupt", path),
				 errhint("Remove the pool directory's contents and REINDEX every pmhash index.")));
	}
	if (found == 0)
		dirty = true;

	if (!reinit && access("backup_label", F_OK) == 0)
	{
		epoch++;
		backup = 1;
		dirty = true;
		pmhash_started_from_backup = true;
		ereport(LOG,
				(errmsg("pmhash: starting from a base backup; pools copied with it are rebuilt from their tables (pool epoch %u)",
						epoch)));
	}
	else if (backup != 0 && !pmhash_started_from_backup)
	{
		/*
		 * The startup process renames backup_label before it replays: a
		 * recovery from a base backup that stopped (a crash, an immediate
		 * stop) after that continues here without it, and its pmhash
		 * records must still be replayed (pools that the first attempt
		 * made by redo are of the new epoch and trusted).  The flag is
		 * cleared once a recovery has finished
		 * (pmhash_backup_recovery_done).
		 */
		pmhash_started_from_backup = true;
		ereport(LOG,
				(errmsg("pmhash: continuing the recovery of a base backup; pmhash's WAL records are replayed (pool epoch %u)",
						epoch)));
	}
	if (reinit || pmhash_last_run_crashed())
	{
		crashes++;
		dirty = true;
	}

	if (dirty)
		(void) pmhash_epoch_write(epoch, crashes, backup != 0, FATAL);
	pmhash_epoch = epoch;
	pmhash_crash_count = crashes;
}

/*
 * After the recovery of a base backup has finished (the background
 * launcher calls this once it sees no recovery in progress): clear the
 * epoch file's flag, so that the next start's crash recovery skips pmhash
 * records as usual.  The end of crash recovery waits for its checkpoint,
 * so a later crash replays nothing from before it; after a promotion the
 * records replayed were applied and persisted.  A failure is a WARNING:
 * the flag then only makes the next start replay records it need not.
 */
void
pmhash_backup_recovery_done(void)
{
	static bool done = false;
	uint32		epoch;
	unsigned long long crashes;
	int			backup = 0;

	if (done || !pmhash_started_from_backup || RecoveryInProgress())
		return;
	done = true;

	/* (a launcher after a crash reinitialisation finds it cleared) */
	if (pmhash_epoch_read(&epoch, &crashes, &backup) == 1 && backup != 0 &&
		pmhash_epoch_write(epoch, crashes, false, WARNING))
		ereport(LOG,
				(errmsg("pmhash: the recovery of the base backup has finished")));
}

/*
 * Make sure the pool directory belongs to this cluster, and say so in it.
 * Pool files are named by database and relfilenode, which another cluster
 * hands out just the same: two clusters sharing a pool directory would
 * take over each other's pools.  The file PMHASH_OWNER names the data
 * directory that uses the pool directory (its system identifier, device
 * and inode, and path).  A pool directory inside the data directory (the
 * default) travels with it: a copy of the data directory (a base backup,
 * a clone) owns the copy, and the file is simply rewritten.  Elsewhere a
 * pool directory that names another data directory refuses the start.
 */
static void
pmhash_pool_dir_claim(void)
{
	char		path[MAXPGPATH];
	char		want[MAXPGPATH + 96];
	char		have[MAXPGPATH + 96];
	char	   *realdata;
	char	   *realpool;
	ControlFileData *cf;
	bool		crc_ok;
	struct stat st;
	unsigned long long sysid;
	unsigned long long o_sysid;
	unsigned long long o_dev;
	unsigned long long o_ino;
	size_t		dlen;
	bool		inside;
	FILE	   *f;
	int			len;

	cf = get_controlfile(DataDir, &crc_ok);
	sysid = (unsigned long long) cf->system_identifier;
	pfree(cf);
	realdata = realpath(DataDir, NULL);
	realpool = realpath(pmhash_pool_dir, NULL);
	if (stat(DataDir, &st) != 0 || realdata == NULL || realpool == NULL)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not resolve the data directory or pmhash pool directory \"%s\": %m",
						pmhash_pool_dir)));
	dlen = strlen(realdata);
	inside = strncmp(realpool, realdata, dlen) == 0 && realpool[dlen] == '/';
	len = snprintf(want, sizeof(want), "%llu %llu %llu %s\n", sysid,
				   (unsigned long long) st.st_dev,
				   (unsigned long long) st.st_ino, realdata);
	len = Min(len, (int) sizeof(want) - 1);
	free(realpool);

	snprintf(path, sizeof(path), "%s/PMHASH_OWNER", pmhash_pool_dir);
	f = fopen(path, "r");
	if (f != NULL)
	{
		bool		same;

		have[0] = '\0';
		if (fgets(have, sizeof(have), f) == NULL)
			have[0] = '\0';
		fclose(f);
		if (strcmp(have, want) == 0)
		{
			free(realdata);
			return;
		}
		same = sscanf(have, "%llu %llu %llu", &o_sysid, &o_dev, &o_ino) == 3 &&
			o_sysid == sysid && o_dev == (unsigned long long) st.st_dev &&
			o_ino == (unsigned long long) st.st_ino;
		if (!same && !inside)
		{
			char	   *o_path = strchr(have, ' ');

			o_path = o_path ? strchr(o_path + 1, ' ') : NULL;
			o_path = o_path ? strchr(o_path + 1, ' ') : NULL;
			if (o_path)
				o_path[strcspn(o_path, "\n")] = '\0';
			ereport(FATAL,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("pmhash pool directory \"%s\" belongs to another cluster",
							pmhash_pool_dir),
					 errdetail("Its owner file names the data directory \"%s\" (system identifier %llu); this server's is \"%s\" (system identifier %llu).",
							   o_path ? o_path + 1 : "?", o_sysid, realdata, sysid),
					 errhint("Give each cluster its own pmhash.pool_dir. If that cluster is gone for good, remove \"%s\"; this server then replaces the pools it finds there.",
							 path)));
		}
	}

	/* claim it (also a moved data directory whose pools came along) */
	(void) pmhash_write_dir_file(path, want, len, "owner", FATAL);
	free(realdata);
}

/*
 * Called by the postmaster at start and after every crash
 * reinitialisation: create pmhash.pool_dir (0700) if it does not exist yet,
 * refuse to start with something unusable there or with another cluster's
 * pool directory, and set up the pool epoch and the crash count.
 */
void
pmhash_pool_dir_init(void)
{
	static bool started = false;

	pmhash_ensure_dir(pmhash_pool_dir, true);
	if (access(pmhash_pool_dir, W_OK | X_OK) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("pmhash pool directory \"%s\" is not writable: %m",
						pmhash_pool_dir),
				 errhint("Set pmhash.pool_dir to a directory the server can write and restart.")));
	if (!started)
		pmhash_pool_dir_claim();
	pmhash_epoch_init(started);
	pmhash_boot_id_init();
	started = true;
}
