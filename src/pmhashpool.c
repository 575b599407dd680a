/*-------------------------------------------------------------------------
 *
 * pmhashpool.c
 *	  Pool files: naming, creation, validation, mapping, growth, removal.
 *
 * A pool file belongs to one index storage (relfilenode) and is named
 *		<pmhash.pool_dir>/<database oid>/<tablespace oid or 0>_<relfilenode>.pool
 * Nothing in a pool file is trusted before its header has been validated:
 * magic, layout version, checksum, layout parameters, length, and the
 * database, relfilenode and pool id it belongs to.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpmem.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/rel.h"

#include "pmhash.h"

/* map a RelFileNode to the key used for file names and shared memory */
void
pmhash_key_for_node(const RelFileNode *node, PmhashKey *key)
{
	memset(key, 0, sizeof(*key));
	key->dbid = node->dbNode;
	key->spcid = (node->spcNode == MyDatabaseTableSpace) ? InvalidOid :
		node->spcNode;
	key->relnode = node->relNode;
}

/* the key of an index relation's current storage */
void
pmhash_key_for_rel(Relation rel, PmhashKey *key)
{
	pmhash_key_for_node(&rel->rd_node, key);
}

/* path of the pool file of an index storage */
void
pmhash_pool_path(const PmhashKey *key, char *path, size_t len)
{
	snprintf(path, len, "%s/%u/%u_%u.pool", pmhash_pool_dir, key->dbid,
			 key->spcid, key->relnode);
}

/* path of a database's pool directory */
void
pmhash_db_dir(Oid dbid, char *path, size_t len)
{
	snprintf(path, len, "%s/%u", pmhash_pool_dir, dbid);
}

/* report a failed persist or file operation on an index's pool */
void
pmhash_report_io_error(Relation index, const char *what)
{
	ereport(ERROR,
			(errcode_for_file_access(),
			 errmsg("could not %s pool of pmhash index \"%s\": %m",
					what, RelationGetRelationName(index))));
}

/*
 * Map a pool file of len bytes into local.  No descriptor stays open: a
 * backend may map thousands of pools (one per partition); the mapped file
 * is remembered by device and inode (pmhash_pool_grow).
 */
static void
pmhash_map(Relation index, const char *path, PmhashLocal *local, size_t len)
{
	size_t		mapped_len;
	int			is_pmem;
	void	   *addr;

	/* (libpmem opens the file for the call) */
	ReserveExternalFD();
	addr = pmem_map_file(path, 0, 0, 0, &mapped_len, &is_pmem);
	ReleaseExternalFD();
	if (addr == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not map pool file \"%s\" of pmhash index \"%s\": %s",
						path, RelationGetRelationName(index), pmem_errormsg()),
				 errhint("pmhash.pool_dir must be on a file system that supports shared memory mappings.")));
	if (mapped_len < len)
	{
		pmem_unmap(addr, mapped_len);
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pool file \"%s\" of pmhash index \"%s\" is shorter than expected",
						path, RelationGetRelationName(index)),
				 errdetail("Expected %zu bytes, found %zu.", len, mapped_len),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(index))));
	}
	local->pool.base = addr;
	local->pool.mapped_len = mapped_len;
	local->pool.is_pmem = is_pmem;
}

/*
 * Open an existing file without following a symlink, check that it is a
 * regular file, and return the descriptor (or -1 with errno set).
 */
static int
pmhash_open_nofollow(const char *path, struct stat *st)
{
	int			fd = OpenTransientFile(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (fstat(fd, st) != 0)
	{
		int			save = errno;

		CloseTransientFile(fd);
		errno = save;
		return -1;
	}
	if (!S_ISREG(st->st_mode))
	{
		CloseTransientFile(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

/*
 * Write n bytes of buf at offset off of fd, leaving out what falls in
 * [hole_start, hole_end).  Returns false (errno set) if a write failed.
 */
static bool
pmhash_write_around(int fd, const char *buf, ssize_t n, off_t off,
					off_t hole_start, off_t hole_end)
{
	off_t		end = off + n;
	off_t		a = Min(end, hole_start);
	off_t		b = Max(off, hole_end);

	errno = 0;
	if (a > off && pwrite(fd, buf, a - off, off) != a - off)
		return false;
	if (end > b && pwrite(fd, buf + (b - off), end - b, b) != end - b)
		return false;
	return true;
}

/* a random, non-zero pool id */
uint64
pmhash_new_pool_id(void)
{
	uint64		id = 0;

	if (!pg_strong_random(&id, sizeof(id)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random pool id")));
	return id == 0 ? 1 : id;
}

/*
 * Create (or replace) the pool file of an index storage with one empty
 * segment and map it.  The file is created 0600 and never through a
 * symlink.
 */
void
pmhash_pool_create(Relation index, uint64 pool_id, PmhashLocal *local,
				   uint64 state_flags)
{
	char		path[MAXPGPATH];
	char		dir[MAXPGPATH];
	PmhPoolHeader hdr;
	size_t		len = pmh_pool_bytes(1);
	struct stat st;
	int			fd;
	int			rc;

	pmhash_key_for_rel(index, &local->key);
	pmhash_db_dir(local->key.dbid, dir, sizeof(dir));
	pmhash_ensure_dir(pmhash_pool_dir, true);
	pmhash_ensure_dir(dir, false);
	pmhash_pool_path(&local->key, path, sizeof(path));

	/* a stale file of the same name (left by a crash) is replaced */
	if (unlink(path) != 0 && errno != ENOENT)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not remove stale pool file \"%s\": %m", path)));
	fd = OpenTransientFilePerm(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
							  S_IRUSR | S_IWUSR);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create pool file \"%s\" for pmhash index \"%s\": %m",
						path, RelationGetRelationName(index))));
	/*
	 * The header page and the fixed log's lines in use, then the segment:
	 * the rest of the fixed log region is never written, and stays a hole
	 * (an empty index takes about 40 kB of disk rather than 545 kB).
	 */
	if (ftruncate(fd, (off_t) len) != 0)
		rc = errno;
	else if ((rc = posix_fallocate(fd, 0, PMH_LOG_OFFSET +
								   (off_t) PMH_LOG_LINES_SMALL * PMH_LINE_BYTES)) == 0)
		rc = posix_fallocate(fd, PMH_SEG_OFFSET, (off_t) (len - PMH_SEG_OFFSET));
	if (rc != 0)
	{
		CloseTransientFile(fd);
		unlink(path);
		errno = rc;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not allocate pool file \"%s\" for pmhash index \"%s\": %m",
						path, RelationGetRelationName(index))));
	}
	local->pool.no_persist = 0;
	/* persist at once until pmhash_writeback_setup says otherwise */
	local->pool.lazy = 0;
	pmhash_map(index, path, local, len);

	pmh_header_init(&hdr, pool_id, local->key.dbid, local->key.spcid,
					local->key.relnode, RelationGetRelid(index));
	hdr.log_lines = PMH_LOG_LINES_SMALL;
	/* informational: the timeline is not known during recovery */
	hdr.timeline = RecoveryInProgress() ? 0 : GetWALInsertionTimeLine();
	hdr.epoch = pmhash_epoch;
	hdr.checksum = pmh_header_checksum(&hdr);
	if (pmh_pool_format(&local->pool, &hdr) != 0 ||
		pmh_pool_state_init(&local->pool, pmhash_crash_count) != 0)
		pmhash_report_io_error(index, "persist");
	/* a pool to be filled (REBUILD, WALBUILD) is never trusted before */
	pmh_pool_state(&local->pool)->flags |= state_flags;
	/* what the build stores next may be written back lazily */
	pmhash_mark_new_pool(&local->pool);

	/* make the directory entry durable too */
	if (pg_fsync(fd) != 0 || fsync_fname_ext(dir, true, true, ERROR) != 0)
		pmhash_report_io_error(index, "sync");
	if (fstat(fd, &st) != 0)
		pmhash_report_io_error(index, "stat");
	local->pool_dev = (uint64) st.st_dev;
	local->pool_ino = (uint64) st.st_ino;
	CloseTransientFile(fd);
}

/*
 * Open, validate and map the pool file of an index storage.  Any problem
 * is an ERROR that names the index and the file and suggests REINDEX.
 * Returns whether its contents can be trusted: not when it predates the
 * pool directory's epoch (a copy that came with a base backup: see
 * pmhash_epoch_init), or says that it is being rebuilt or was left
 * half-built by the redo of a build.  The caller then replaces it.
 */
bool
pmhash_pool_open(Relation index, const PmhashKey *key, uint64 expect_pool_id,
				 PmhashLocal *local, PmhPoolHeader *hdr_out)
{
	char		path[MAXPGPATH];
	struct stat st;
	PmhPoolHeader hdr;
	PmhHeaderStatus status;
	int			fd;

	pmhash_pool_path(key, path, sizeof(path));
	fd = pmhash_open_nofollow(path, &st);
	if (fd < 0)
	{
		int			save_errno = errno;
		struct stat lst;
		const char *detail = NULL;

		/* say why a file that is there is refused */
		if (lstat(path, &lst) == 0)
		{
			if (S_ISLNK(lst.st_mode))
				detail = "It is a symbolic link, and pmhash never follows one in place of a pool file.";
			else if (!S_ISREG(lst.st_mode))
				detail = "It is not a regular file.";
		}
		errno = save_errno;
		ereport(ERROR,
				(save_errno == ENOENT ? errcode(ERRCODE_UNDEFINED_FILE) :
				 detail ? errcode(ERRCODE_DATA_CORRUPTED) :
				 errcode_for_file_access(),
				 errmsg("could not open pool file \"%s\" of pmhash index \"%s\": %m",
						path, RelationGetRelationName(index)),
				 detail ? errdetail_internal("%s", detail) :
				 errdetail("The pool holds the index entries; without it the index cannot be used."),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(index))));
	}

	memset(&hdr, 0, sizeof(hdr));
	if (st.st_size >= (off_t) sizeof(hdr) &&
		pread(fd, &hdr, sizeof(hdr), 0) != (ssize_t) sizeof(hdr))
	{
		CloseTransientFile(fd);
		pmhash_report_io_error(index, "read");
	}
	status = pmh_header_validate(&hdr, (size_t) st.st_size);
	if (status == PMH_HEADER_OK &&
		(hdr.db_oid != key->dbid || hdr.spc_oid != key->spcid ||
		 hdr.rel_node != key->relnode ||
		 (expect_pool_id != 0 && hdr.pool_id != expect_pool_id)))
		status = PMH_HEADER_FOREIGN;
	if (status != PMH_HEADER_OK)
	{
		CloseTransientFile(fd);
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pool file \"%s\" of pmhash index \"%s\" is not valid: %s",
						path, RelationGetRelationName(index),
						pmh_header_status_string(status)),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(index))));
	}

	CloseTransientFile(fd);
	local->key = *key;
	local->pool_dev = (uint64) st.st_dev;
	local->pool_ino = (uint64) st.st_ino;
	local->pool.no_persist = 0;
	/* persist at once until pmhash_writeback_setup says otherwise */
	local->pool.lazy = 0;
	pmhash_map(index, path, local, (size_t) st.st_size);
	if (hdr_out)
		*hdr_out = hdr;

	/*
	 * The WAL timeline does not matter: a promoted standby's pools followed
	 * the WAL up to the promotion.  A base backup (also pg_rewind, which
	 * leaves a backup label) advances the epoch.  A write-back mark of
	 * another boot: the operating system stopped before the pool was
	 * written back, and may have lost any of its stores.
	 */
	if (hdr.epoch != pmhash_epoch)
		pmhash_pool_distrust = "it was copied by a base backup";
	else if (pmh_pool_state(&local->pool)->flags &
			 (PMH_STATE_REBUILD | PMH_STATE_WALBUILD))
		pmhash_pool_distrust = "it was being rebuilt";
	else if (!pmhash_mark_trusted(pmh_pool_mark_line(&local->pool)))
		pmhash_pool_distrust = "the operating system restarted before it was written back";
	else
	{
		pmhash_pool_distrust = NULL;
		return true;
	}
	return false;
}

/* why the last pmhash_pool_open did not trust its pool, or NULL */
const char *pmhash_pool_distrust = NULL;

/* remap a pool after it grew (in this or another backend) */
void
pmhash_pool_remap(Relation index, PmhashLocal *local, size_t len)
{
	char		path[MAXPGPATH];

	if (local->pool.base)
		pmem_unmap(local->pool.base, local->pool.mapped_len);
	local->pool.base = NULL;
	local->pool.mapped_len = 0;
	pmhash_pool_path(&local->key, path, sizeof(path));
	pmhash_map(index, path, local, len);
}

/*
 * Grow the pool file to hold nsegments segments and remap it.  New space
 * reads as zero: free segments.  Running out of disk space is an ERROR
 * before anything in the pool changed.
 */
void
pmhash_pool_grow(Relation index, PmhashLocal *local, uint64 nsegments)
{
	size_t		len = pmh_pool_bytes(nsegments);
	size_t		old;
	char		path[MAXPGPATH];
	struct stat st;
	int			fd;
	int			rc;

	/*
	 * The file can be long enough already: a growth whose caller then
	 * failed (out of shared memory) leaves zeroed, unused segments behind.
	 * Never shrink it.
	 */
	pmhash_pool_path(&local->key, path, sizeof(path));
	fd = pmhash_open_nofollow(path, &st);
	if (fd < 0)
		pmhash_report_io_error(index, "open");
	/* (replaced only with the index lock exclusive, and then remapped) */
	if ((uint64) st.st_dev != local->pool_dev ||
		(uint64) st.st_ino != local->pool_ino)
	{
		CloseTransientFile(fd);
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pool file \"%s\" of pmhash index \"%s\" was replaced while in use",
						path, RelationGetRelationName(index)),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(index))));
	}
	old = (size_t) st.st_size;
	if (old >= len)
	{
		CloseTransientFile(fd);
		pmhash_pool_remap(index, local, len);
		return;
	}

	/*
	 * Change the length in one step (a crash never leaves a partial
	 * segment), then reserve the blocks so that running out of space is an
	 * error now rather than a SIGBUS later.
	 */
	if (ftruncate(fd, (off_t) len) != 0)
		rc = errno;
	else
		rc = posix_fallocate(fd, (off_t) old, (off_t) (len - old));
	if (rc != 0)
	{
		if (ftruncate(fd, (off_t) old) != 0)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not shrink pool of pmhash index \"%s\" back: %m",
							RelationGetRelationName(index))));
		CloseTransientFile(fd);
		errno = rc;
		ereport(ERROR,
				(errcode(rc == ENOSPC || rc == EDQUOT || rc == EFBIG ?
						 ERRCODE_DISK_FULL : ERRCODE_IO_ERROR),
				 errmsg("could not extend pool of pmhash index \"%s\" to %zu bytes: %m",
						RelationGetRelationName(index), len),
				 errhint("Free space in pmhash.pool_dir.")));
	}
	rc = fsync(fd);
	CloseTransientFile(fd);
	if (rc != 0)
		pmhash_report_io_error(index, "sync");
	pmhash_pool_remap(index, local, len);
}

/*
 * What lstat() says of the pool file of an index storage now (exists is
 * false if it cannot be looked at).  Never opens the file.
 */
void
pmhash_pool_file_sig(const PmhashKey *key, PmhashFileSig *sig)
{
	char		path[MAXPGPATH];
	struct stat st;

	memset(sig, 0, sizeof(*sig));	/* padding too: compared with memcmp */
	pmhash_pool_path(key, path, sizeof(path));
	if (lstat(path, &st) != 0)
		return;
	sig->exists = true;
	sig->mode = (uint32) st.st_mode;
	sig->dev = (uint64) st.st_dev;
	sig->ino = (uint64) st.st_ino;
	sig->size = (uint64) st.st_size;
	sig->mtime_ns = (int64) st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	sig->ctime_ns = (int64) st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
}

/* unmap and close a local mapping */
void
pmhash_pool_close(PmhashLocal *local)
{
	if (local->pool.base)
		pmem_unmap(local->pool.base, local->pool.mapped_len);
	local->pool.base = NULL;
	local->pool.mapped_len = 0;
	local->generation = 0;
}

/* remove the pool file of an index storage; false if there was none */
bool
pmhash_pool_unlink(const PmhashKey *key)
{
	char		path[MAXPGPATH];

	pmhash_pool_path(key, path, sizeof(path));
	if (unlink(path) == 0)
		return true;
	if (errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove pmhash pool file \"%s\": %m", path)));
	return false;
}

/* does the pool file of an index storage exist? */
bool
pmhash_pool_exists(const PmhashKey *key)
{
	char		path[MAXPGPATH];
	struct stat st;

	pmhash_pool_path(key, path, sizeof(path));
	return lstat(path, &st) == 0;
}

/*
 * Open the pool file of an index storage (never through a symlink, a
 * regular file) and read its header, validated (not for ownership), and
 * what fstat says of it.  Returns the descriptor, or -1 if there is no
 * such readable, valid file.
 */
int
pmhash_pool_open_head(const PmhashKey *key, PmhPoolHeader *hdr,
					  struct stat *st)
{
	char		path[MAXPGPATH];
	int			fd;

	pmhash_pool_path(key, path, sizeof(path));
	fd = pmhash_open_nofollow(path, st);
	if (fd < 0)
		return -1;
	if (pread(fd, hdr, sizeof(*hdr), 0) != (ssize_t) sizeof(*hdr) ||
		pmh_header_validate(hdr, (size_t) st->st_size) != PMH_HEADER_OK)
	{
		CloseTransientFile(fd);
		return -1;
	}
	return fd;
}

/*
 * Read the header (validated, not for ownership) and, if pst (mark) is not
 * NULL, the state line (write-back mark) of a pool file.  Returns false if
 * there is no such readable, valid file.
 */
static bool
pmhash_pool_read_head(const PmhashKey *key, PmhPoolHeader *hdr,
					  PmhPoolState *pst, PmhPoolMark *mark)
{
	struct stat st;
	int			fd;
	bool		ok;

	fd = pmhash_pool_open_head(key, hdr, &st);
	if (fd < 0)
		return false;
	ok = (pst == NULL ||
		 pread(fd, pst, sizeof(*pst), PMH_STATE_OFFSET) == (ssize_t) sizeof(*pst)) &&
		(mark == NULL ||
		 pread(fd, mark, sizeof(*mark), PMH_MARK_OFFSET) == (ssize_t) sizeof(*mark));
	CloseTransientFile(fd);
	return ok;
}

/*
 * Does the pool file of an index storage say that it must be rebuilt from
 * the heap before it can answer (as pmhash_load would decide)?  Reads the
 * header and the state line only; for the planner, before the pool is
 * loaded.  A missing or unreadable file needs one during recovery, and in
 * a server started from a base backup, only: otherwise it is an error
 * (REINDEX).
 */
bool
pmhash_pool_needs_rebuild(const PmhashKey *key)
{
	PmhPoolHeader hdr;
	PmhPoolState pst;
	PmhPoolMark mark;

	if (!pmhash_pool_read_head(key, &hdr, &pst, &mark))
		return RecoveryInProgress() || pmhash_started_from_backup;
	return hdr.epoch != pmhash_epoch ||
		(pst.flags & (PMH_STATE_REBUILD | PMH_STATE_WALBUILD)) != 0 ||
		!pmhash_mark_trusted(&mark);
}

/*
 * Mark the pool of an index storage for a rebuild from the heap (redo could
 * not apply a record to it): set PMH_STATE_REBUILD in its state line, or,
 * if that cannot be done, remove the file, which a standby also rebuilds.
 */
void
pmhash_pool_mark_rebuild(const PmhashKey *key)
{
	char		path[MAXPGPATH];
	struct stat st;
	PmhPoolState pst;
	int			fd;
	bool		ok = false;

	pmhash_pool_path(key, path, sizeof(path));
	fd = pmhash_open_nofollow(path, &st);
	if (fd < 0)
		return;
	if (pread(fd, &pst, sizeof(pst), PMH_STATE_OFFSET) == (ssize_t) sizeof(pst))
	{
		pst.flags |= PMH_STATE_REBUILD;
		ok = pwrite(fd, &pst, sizeof(pst), PMH_STATE_OFFSET) == (ssize_t) sizeof(pst) &&
			pg_fsync(fd) == 0;
	}
	CloseTransientFile(fd);
	if (!ok && unlink(path) != 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove pmhash pool file \"%s\": %m", path)));
}

/* read (without validating ownership) the header of a pool file */
bool
pmhash_pool_read_header(const PmhashKey *key, PmhPoolHeader *hdr)
{
	return pmhash_pool_read_head(key, hdr, NULL, NULL);
}

/*
 * Copy a pool to another index storage: the same index under a new
 * relfilenode (ALTER INDEX ... SET TABLESPACE copies the relation's blocks
 * without calling the access method), or the same relfilenode in a new
 * database (CREATE DATABASE ... TEMPLATE).  The copy's header names its new
 * storage.  indexname names the index in messages; NULL when a template
 * database's pools are copied (the template's catalog is not at hand).
 */
void
pmhash_pool_copy(const char *indexname, const PmhashKey *from,
				 const PmhashKey *to)
{
	char		src[MAXPGPATH];
	char		dst[MAXPGPATH];
	char		dir[MAXPGPATH];
	char	   *buf;
	struct stat st;
	int			in;
	int			out;
	off_t		off = 0;
	off_t		hole = PMH_SEG_OFFSET;
	PmhPoolHeader *hdr;

	pmhash_pool_path(from, src, sizeof(src));
	pmhash_pool_path(to, dst, sizeof(dst));
	pmhash_db_dir(to->dbid, dir, sizeof(dir));
	pmhash_ensure_dir(dir, false);

	in = pmhash_open_nofollow(src, &st);
	if (in < 0)
	{
		if (indexname == NULL)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not open pool file \"%s\" of the template database: %m",
							src)));
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open pool file \"%s\" of pmhash index \"%s\": %m",
						src, indexname)));
	}
	if (unlink(dst) != 0 && errno != ENOENT)
	{
		int			save = errno;

		CloseTransientFile(in);
		errno = save;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not replace pool file \"%s\": %m", dst)));
	}
	out = OpenTransientFilePerm(dst, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
							   S_IRUSR | S_IWUSR);
	if (out < 0)
	{
		CloseTransientFile(in);
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create pool file \"%s\": %m", dst)));
	}

	buf = palloc(BLCKSZ * 16);
	while (off < st.st_size)
	{
		ssize_t		n = pread(in, buf, BLCKSZ * 16, off);

		if (n <= 0)
			break;
		if (off == 0)
		{
			hdr = (PmhPoolHeader *) buf;
			hdr->db_oid = to->dbid;
			hdr->spc_oid = to->spcid;
			hdr->rel_node = to->relnode;
			hdr->checksum = pmh_header_checksum(hdr);
			/* the copy is synced whole below: nothing of it is deferred */
			if (enableFsync && n >= PMH_MARK_OFFSET + (ssize_t) sizeof(PmhPoolMark))
				memset(buf + PMH_MARK_OFFSET, 0, sizeof(PmhPoolMark));
			/* the fixed log's unused lines stay a hole in the copy too */
			if (n >= (ssize_t) sizeof(*hdr) && hdr->log_lines <= PMH_LOG_LINES)
				hole = PMH_LOG_OFFSET + (off_t) hdr->log_lines * PMH_LINE_BYTES;
		}
		if (!pmhash_write_around(out, buf, n, off, hole, PMH_SEG_OFFSET))
		{
			int			save = errno;

			CloseTransientFile(in);
			CloseTransientFile(out);
			unlink(dst);
			errno = save == 0 ? ENOSPC : save;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not copy pool file \"%s\" to \"%s\": %m",
							src, dst)));
		}
		off += n;
	}
	pfree(buf);
	CloseTransientFile(in);
	if (off != st.st_size || pg_fsync(out) != 0)
	{
		CloseTransientFile(out);
		unlink(dst);
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not copy pool file \"%s\" to \"%s\": %m",
						src, dst)));
	}
	CloseTransientFile(out);
	(void) fsync_fname_ext(dir, true, true, ERROR);
}

/* persist through the core's choke point; an I/O failure is an ERROR */
void
pmhash_persist_or_error(PmhashIndex *idx, const void *addr, size_t len)
{
	if (pmh_persist(&idx->local->pool, addr, len) != 0)
		pmhash_report_io_error(idx->rel, "persist");
}
