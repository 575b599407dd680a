/*-------------------------------------------------------------------------
 *
 * pmhashwriteback.c
 *	  Deferred write-back of pools on ordinary files: the write-back mark,
 *	  and the pass that writes a pool back and clears the mark.
 *
 * On an ordinary file every msync costs a device flush (0.1 to 0.7 ms
 * here), and the persistence protocol asks for one per backup-log line,
 * relocation, split and VACUUM batch.  None of them is needed for a crash
 * of the server alone: the stores are in the kernel's page cache, which
 * outlives every PostgreSQL process, and the pool after such a crash is
 * exactly the one the protocol would have persisted.  Only a crash of the
 * operating system (or the machine) loses stores, and then in any order.
 * So with pmhash.lazy_writeback on, the choke point (pmh_persist) writes
 * nothing back; it only makes sure that the pool carries, durably, the
 * boot id of the running kernel (the write-back mark) before any of its
 * stores is left to the kernel.  A pool whose mark names another boot is
 * not trusted at its next load: it is rebuilt from the heap, whose own
 * durability is PostgreSQL's (see "Deferred write-back" in
 * src/README.pmhash for the protocol and why it is safe).
 *
 * The prewarm launcher writes back pools that have been idle for
 * pmhash.writeback_delay, and every pool when the server shuts down, and
 * clears their marks; pmhash_writeback() does it on demand.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/acl.h"
#include "utils/timestamp.h"

#include "pmhash.h"

/* GUCs */
bool		pmhash_lazy_writeback = true;
int			pmhash_writeback_delay = 10;	/* seconds */
char	   *pmhash_boot_id_path = NULL;

/* the running kernel's boot id, read by the postmaster at start */
uint64		pmhash_boot_id[2];
bool		pmhash_boot_known = false;

/*
 * Read the boot id of the running kernel (pmhash.boot_id_path, by default
 * /proc/sys/kernel/random/boot_id: a UUID that changes at every boot).
 * Called by the postmaster at start and at every crash reinitialisation.
 * Without one, a server crash and an operating-system crash look alike,
 * and pools on ordinary files are written back at every persist.
 */
void
pmhash_boot_id_init(void)
{
	FILE	   *f;
	char		buf[128];
	int			ndigits = 0;
	uint64		id[2] = {0, 0};
	char	   *p;

	pmhash_boot_known = false;
	f = fopen(pmhash_boot_id_path, "r");
	if (f == NULL || fgets(buf, sizeof(buf), f) == NULL)
	{
		if (f)
			fclose(f);
		ereport(LOG,
				(errmsg("pmhash: could not read the boot id from \"%s\"; pools on ordinary files are written back at every persist",
						pmhash_boot_id_path)));
		return;
	}
	fclose(f);
	for (p = buf; *p && ndigits < 32; p++)
	{
		int			v;

		if (*p >= '0' && *p <= '9')
			v = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			v = *p - 'a' + 10;
		else if (*p >= 'A' && *p <= 'F')
			v = *p - 'A' + 10;
		else
			continue;
		id[ndigits / 16] = (id[ndigits / 16] << 4) | (uint64) v;
		ndigits++;
	}
	if (ndigits < 8 || (id[0] == 0 && id[1] == 0))
	{
		ereport(LOG,
				(errmsg("pmhash: \"%s\" does not hold a boot id; pools on ordinary files are written back at every persist",
						pmhash_boot_id_path)));
		return;
	}
	pmhash_boot_id[0] = id[0];
	pmhash_boot_id[1] = id[1];
	pmhash_boot_known = true;
}

/*
 * The choke point's hook (PmhMarkHook): set the pool's write-back mark to
 * this boot and make it durable, unless another backend did since the
 * caller looked.  Marks change under pmhash's write-back lock only, so a
 * write-back pass cannot clear a mark between this and the flag.  May run
 * with any pmhash lock held but the hash-table lock.
 */
static int
pmhash_mark_hook(PmhPool *pool, void *arg)
{
	PmhashShared *shared = (PmhashShared *) arg;
	int			rc = 0;
	int			save_errno = 0;

	LWLockAcquire(pmhash_writeback_lock, LW_EXCLUSIVE);
	if (!shared->wb_marked)
	{
		rc = pmh_pool_mark(pool, pmhash_boot_id);
		save_errno = errno;
		if (rc == 0)
		{
			shared->wb_sets++;
			pg_write_barrier();
			shared->wb_marked = true;
		}
	}
	LWLockRelease(pmhash_writeback_lock);
	errno = save_errno;
	return rc;
}

/*
 * Set up a mapping's persistence mode (every time the index lock is
 * taken, so that a reloaded pmhash.lazy_writeback takes effect): lazy
 * write-back on an ordinary file when it is on and the boot id is known.
 */
void
pmhash_writeback_setup(PmhashShared *shared, PmhashLocal *local)
{
	PmhPool    *pool = &local->pool;

	pool->lazy = !pool->is_pmem && pmhash_lazy_writeback && pmhash_boot_known;
	pool->marked = &shared->wb_marked;
	pool->mark_hook = pmhash_mark_hook;
	pool->mark_hook_arg = shared;
}

/*
 * Can a pool with this mark be trusted here?  Not when it names another
 * boot (or any boot, when this one is unknown): the operating system may
 * have lost some of its stores.
 */
bool
pmhash_mark_trusted(const PmhPoolMark *mark)
{
	static const uint64 none[2] = {0, 0};

	return pmh_pool_mark_ok(mark, pmhash_boot_known ? pmhash_boot_id : none);
}

/*
 * Give a pool just created (in this mapping) the write-back mark, so that
 * what is stored into it next (a build) may be written back lazily.  The
 * caller syncs the file afterwards.
 */
void
pmhash_mark_new_pool(PmhPool *pool)
{
	PmhPoolMark *m = pmh_pool_mark_line(pool);

	if (pool->is_pmem || !pmhash_boot_known)
		return;
	m->boot[0] = pmhash_boot_id[0];
	m->boot[1] = pmhash_boot_id[1];
}

/*
 * A load (or a new pool) set up the shared state: remember whether the
 * pool's mark is set, under the write-back lock, so that no pass clears it
 * in between.
 */
void
pmhash_writeback_loaded(PmhashShared *shared, const PmhPool *pool)
{
	const PmhPoolMark *m = pmh_pool_mark_line(pool);

	LWLockAcquire(pmhash_writeback_lock, LW_EXCLUSIVE);
	shared->wb_marked = (m->boot[0] != 0 || m->boot[1] != 0);
	LWLockRelease(pmhash_writeback_lock);
}

/* is the file at path still the one that fstat described as st? */
static bool
pmhash_still_file(const char *path, const struct stat *st)
{
	struct stat now;

	return stat(path, &now) == 0 && now.st_ino == st->st_ino &&
		now.st_dev == st->st_dev;
}

/*
 * Write one pool back and clear its mark (see "Deferred write-back on
 * ordinary files" in src/README.pmhash):
 *	1. with no lock: open the file, check it is the pool, sync it (most of
 *	   what is dirty goes here);
 *	2. (write-back lock) clear the shared flag, and note how often the mark
 *	   was set: every persist from now on sets it again before it returns;
 *	3. sync again: everything stored before step 2 is on the device;
 *	4. (write-back lock) if nobody set the mark since step 2 and the file
 *	   is still the storage's pool, store zero into the mark; then (no
 *	   lock) sync that.  A persist after the store sets the mark again
 *	   under the lock, so the last word in the page cache is the right one.
 * The syncs are fdatasync itself, not pg_fdatasync: with fsync = off the
 * mark must still not be cleared over pages the device does not have.
 * Returns whether the mark was cleared.  A failed sync flags the pool for
 * a rebuild: the kernel may have dropped pages it could not write.
 */
static bool
pmhash_writeback_one(const PmhashKey *key, uint64 pool_id)
{
	char		path[MAXPGPATH];
	struct stat st;
	PmhPoolHeader hdr;
	static const PmhPoolMark zero = {{0, 0}};
	bool		cleared = false;
	int			nsyncs = 0;
	uint64		sets = 0;
	int			fd;

	pmhash_pool_path(key, path, sizeof(path));
	fd = pmhash_pool_open_head(key, &hdr, &st);
	if (fd < 0)
		return false;
	if (hdr.pool_id != pool_id)
	{
		CloseTransientFile(fd);
		return false;
	}

	nsyncs++;
	if (fdatasync(fd) != 0)
		goto failed;

	LWLockAcquire(pmhash_writeback_lock, LW_EXCLUSIVE);
	if (!pmhash_writeback_flag(key, pool_id, true, &sets))
	{
		LWLockRelease(pmhash_writeback_lock);
		goto done;
	}
	LWLockRelease(pmhash_writeback_lock);

	pg_memory_barrier();
	nsyncs++;
	if (fdatasync(fd) != 0)
		goto failed;

	LWLockAcquire(pmhash_writeback_lock, LW_EXCLUSIVE);
	if (pmhash_writeback_flag(key, pool_id, false, &sets) &&
		pmhash_still_file(path, &st))
	{
		errno = 0;
		if (pwrite(fd, &zero, sizeof(zero), PMH_MARK_OFFSET) != (ssize_t) sizeof(zero))
		{
			if (errno == 0)
				errno = EIO;
			LWLockRelease(pmhash_writeback_lock);
			goto failed;
		}
		cleared = true;
	}
	LWLockRelease(pmhash_writeback_lock);
	if (cleared)
	{
		nsyncs++;
		if (fdatasync(fd) != 0)
			goto failed;
	}
	goto done;

failed:
	{
		int			save_errno = errno;
		bool		same;

		/* act only on the pool the pass synced, not on a successor */
		same = pmhash_still_file(path, &st);
		errno = save_errno;
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not write back pmhash pool file \"%s\": %m", path),
				 same ?
				 errdetail("The operating system may have dropped what it could not write; the pool is rebuilt from its table.") : 0));
		if (same)
			pmhash_reset_for_rebuild(key, true);
		cleared = false;
	}

done:
	CloseTransientFile(fd);
	pmhash_stats_add_syncs(key, nsyncs, nsyncs * (uint64) st.st_size);
	return cleared;
}

/*
 * Write back the pools whose mark is set: all of them (force), or those
 * whose write traffic has not changed for pmhash.writeback_delay (the
 * prewarm launcher, every poll).  Returns how many marks were cleared.
 */
int
pmhash_writeback_run(bool force)
{
	PmhashWritebackItem *items;
	int			n;
	int			i;
	int			done = 0;

	items = palloc(sizeof(PmhashWritebackItem) * pmhash_max_indexes);
	n = pmhash_writeback_candidates(items, pmhash_max_indexes, force,
									(int64) pmhash_writeback_delay * USECS_PER_SEC);
	for (i = 0; i < n; i++)
	{
		if (pmhash_writeback_one(&items[i].key, items[i].pool_id))
			done++;
	}
	pfree(items);
	return done;
}

PG_FUNCTION_INFO_V1(pmhash_writeback);

/*
 * SQL: pmhash_writeback() writes back every pool of the cluster that has
 * deferred writes and clears its mark, as the launcher does when a pool is
 * idle; returns how many.  For superusers and members of pg_checkpoint,
 * who may also run CHECKPOINT.
 */
Datum
pmhash_writeback(PG_FUNCTION_ARGS)
{
	pmhash_require_preload();
	if (!has_privs_of_role(GetUserId(), ROLE_PG_CHECKPOINT))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to write back pmhash pools"),
				 errdetail("Only roles with privileges of the \"%s\" role may write back pools.",
						   "pg_checkpoint"),
				 errhint("Ask a superuser to grant pg_checkpoint, or wait: idle pools are written back within pmhash.writeback_delay.")));
	pmhash_backend_init();
	PG_RETURN_INT32(pmhash_writeback_run(true));
}
