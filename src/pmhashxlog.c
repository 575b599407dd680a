/*-------------------------------------------------------------------------
 *
 * pmhashxlog.c
 *	  pmhash's WAL records: the resource manager, what the primary logs,
 *	  and how pg_waldump and pg_walinspect describe it.
 *
 * What is logged (only for indexes that need WAL: not unlogged ones, nor a
 * storage created in the same transaction under wal_level = minimal):
 *
 *	CREATE		ambuild made a new pool for a storage (before its entries)
 *	INSERT		a transaction's entries, gathered over its collecting-log
 *				flushes (up to PMHASH_XLOG_BATCH) and logged when that
 *				many wait, and at PRE_COMMIT and PRE_PREPARE: before the
 *				commit record; and a build's entries, as many to a record
 *	BUILD_END	a build logged all its entries
 *	DELETE		the dead TIDs VACUUM removed from one range of hashes,
 *				before the deletions are persisted
 *	DROP		a storage's pool was removed: after the commit of the
 *				transaction that dropped the storage, or after the abort
 *				of the one that created it
 *	COPY		ALTER ... SET TABLESPACE copied a pool for the storage it
 *				copied block by block (before the commit)
 *	DROP_DB, COPY_DB	DROP DATABASE and CREATE DATABASE, after the fact
 *
 * Redo (pmhashredo.c) applies entries, never pool images: the standby's
 * pool has its own layout.  Records name the storage by database,
 * tablespace and relfilenode, as the pool file is named, and carry the
 * pool id so that redo never touches another pool of the same name.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xloginsert.h"
#include "miscadmin.h"
#include "utils/rel.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

/* the resource manager */
static RmgrData pmhash_rmgr = {
	.rm_name = PMHASH_RMGR_NAME,
	.rm_redo = pmhash_redo,
	.rm_desc = pmhash_desc,
	.rm_identify = pmhash_identify,
	.rm_startup = pmhash_redo_startup,
	.rm_cleanup = pmhash_redo_cleanup,
};

/* register the resource manager (from _PG_init, under preload) */
void
pmhash_rmgr_register(void)
{
	RegisterCustomRmgr(PMHASH_RMGR_ID, &pmhash_rmgr);
}

/* does a change to this index's pool go into the WAL? */
bool
pmhash_xlog_wanted(Relation index)
{
	return RelationNeedsWAL(index) && !RecoveryInProgress();
}

/* fill in the pool part of a record */
static void
pmhash_xlog_pool(Relation index, uint64 pool_id, uint32 flags,
				 xl_pmhash_pool *xlp)
{
	PmhashKey	key;

	pmhash_key_for_rel(index, &key);
	memset(xlp, 0, sizeof(*xlp));
	xlp->dbid = key.dbid;
	xlp->spcid = key.spcid;
	xlp->relnode = key.relnode;
	xlp->flags = flags;
	xlp->pool_id = pool_id;
}

/* CREATE: a new empty pool (build: entries and BUILD_END follow) */
void
pmhash_xlog_create(Relation index, uint64 pool_id, bool build)
{
	xl_pmhash_pool xlp;

	pmhash_xlog_pool(index, pool_id, build ? XLP_PMHASH_BUILD : 0, &xlp);
	XLogBeginInsert();
	XLogRegisterData((char *) &xlp, sizeof(xlp));
	(void) XLogInsert(PMHASH_RMGR_ID, XLOG_PMHASH_CREATE);
}

/* INSERT: n entries of a storage, packed (hash, block, offset) */
void
pmhash_xlog_insert_key(const PmhashKey *key, uint64 pool_id,
					   const uint64 *hashes, const ItemPointerData *tids, int n)
{
	xl_pmhash_entries xle;
	char		local[PMHASH_XLOG_ENTRY_BYTES * 32];
	char	   *buf;
	char	   *p;
	int			i;

	if (n <= 0)
		return;
	memset(&xle, 0, sizeof(xle));
	xle.pool.dbid = key->dbid;
	xle.pool.spcid = key->spcid;
	xle.pool.relnode = key->relnode;
	xle.pool.pool_id = pool_id;
	xle.nentries = (uint32) n;
	/* a short record fits on the stack */
	p = buf = (n <= 32) ? local : palloc(PMHASH_XLOG_ENTRY_BYTES * n);
	for (i = 0; i < n; i++)
	{
		uint32		block = ItemPointerGetBlockNumber(&tids[i]);
		uint16		offset = ItemPointerGetOffsetNumber(&tids[i]);

		memcpy(p, &hashes[i], sizeof(uint64));
		memcpy(p + sizeof(uint64), &block, sizeof(uint32));
		memcpy(p + sizeof(uint64) + sizeof(uint32), &offset, sizeof(uint16));
		p += PMHASH_XLOG_ENTRY_BYTES;
	}
	XLogBeginInsert();
	XLogRegisterData((char *) &xle, SizeOfPmhashEntries);
	XLogRegisterData(buf, PMHASH_XLOG_ENTRY_BYTES * n);
	(void) XLogInsert(PMHASH_RMGR_ID, XLOG_PMHASH_INSERT);
	if (buf != local)
		pfree(buf);
}

/* INSERT: n entries of an index's current storage */
void
pmhash_xlog_insert(Relation index, uint64 pool_id, const uint64 *hashes,
				   const ItemPointerData *tids, int n)
{
	PmhashKey	key;

	pmhash_key_for_rel(index, &key);
	pmhash_xlog_insert_key(&key, pool_id, hashes, tids, n);
}

/*
 * A DELETE or PRUNE record: the header, then the TIDs, 6 bytes each.
 */
static XLogRecPtr
pmhash_xlog_tids(uint8 info, const char *header, int header_bytes,
				 const ItemPointerData *tids, int n)
{
	char	   *buf;
	char	   *p;
	int			i;
	XLogRecPtr	end;

	p = buf = palloc(PMHASH_XLOG_TID_BYTES * n);
	for (i = 0; i < n; i++)
	{
		uint32		block = ItemPointerGetBlockNumber(&tids[i]);
		uint16		offset = ItemPointerGetOffsetNumber(&tids[i]);

		memcpy(p, &block, sizeof(uint32));
		memcpy(p + sizeof(uint32), &offset, sizeof(uint16));
		p += PMHASH_XLOG_TID_BYTES;
	}
	XLogBeginInsert();
	XLogRegisterData(unconstify(char *, header), header_bytes);
	XLogRegisterData(buf, PMHASH_XLOG_TID_BYTES * n);
	end = XLogInsert(PMHASH_RMGR_ID, info);
	pfree(buf);
	return end;
}

/* the DELETE part of a DELETE or PRUNE record */
static void
pmhash_xlog_delete_header(Relation index, uint64 pool_id, uint64 lo,
						  uint64 hi, int n, xl_pmhash_delete *xld)
{
	pmhash_xlog_pool(index, pool_id, 0, &xld->pool);
	xld->lo = lo;
	xld->hi = hi;
	xld->ntids = (uint32) n;
}

/*
 * DELETE: the dead TIDs removed from the hashes lo..hi, sorted.  Returns
 * the record's end, which the caller flushes before the deletions reach
 * the pool.
 */
XLogRecPtr
pmhash_xlog_delete(Relation index, uint64 pool_id, uint64 lo, uint64 hi,
				   const ItemPointerData *tids, int n)
{
	xl_pmhash_delete xld;

	if (n <= 0)
		return InvalidXLogRecPtr;
	pmhash_xlog_delete_header(index, pool_id, lo, hi, n, &xld);
	return pmhash_xlog_tids(XLOG_PMHASH_DELETE, (char *) &xld,
							SizeOfPmhashDelete, tids, n);
}

/*
 * PRUNE: as DELETE, for entries hinted dead, with the conflict horizon of
 * their rows (InvalidTransactionId: no standby needs one).
 */
XLogRecPtr
pmhash_xlog_prune(Relation index, uint64 pool_id, uint64 lo, uint64 hi,
				  const ItemPointerData *tids, int n, TransactionId horizon)
{
	xl_pmhash_prune xlr;

	if (n <= 0)
		return InvalidXLogRecPtr;
	memset(&xlr, 0, sizeof(xlr));
	xlr.snapshotConflictHorizon = horizon;
	pmhash_xlog_delete_header(index, pool_id, lo, hi, n, &xlr.del);
	return pmhash_xlog_tids(XLOG_PMHASH_PRUNE, (char *) &xlr,
							SizeOfPmhashPrune, tids, n);
}

/* BUILD_END: every entry of the build is logged */
void
pmhash_xlog_build_end(Relation index, uint64 pool_id)
{
	xl_pmhash_pool xlp;

	pmhash_xlog_pool(index, pool_id, 0, &xlp);
	XLogBeginInsert();
	XLogRegisterData((char *) &xlp, sizeof(xlp));
	(void) XLogInsert(PMHASH_RMGR_ID, XLOG_PMHASH_BUILD_END);
}

/*
 * DROP: the pool of a storage was removed.  Logged from the commit (or
 * abort) callback, after the transaction's own record, and before
 * PostgreSQL unlinks the relation files, so that the relfilenode cannot be
 * in use again by then.  Logged whatever the index's persistence was (it
 * is gone): dropping a pool a standby never had does nothing.
 */
void
pmhash_xlog_drop(const PmhashKey *key)
{
	xl_pmhash_pool xlp;

	if (!XLogIsNeeded() || RecoveryInProgress())
		return;
	memset(&xlp, 0, sizeof(xlp));
	xlp.dbid = key->dbid;
	xlp.spcid = key->spcid;
	xlp.relnode = key->relnode;
	XLogBeginInsert();
	XLogRegisterData((char *) &xlp, sizeof(xlp));
	(void) XLogInsert(PMHASH_RMGR_ID, XLOG_PMHASH_DROP);
}

/* COPY: the pool of "from" was copied for the storage "to" */
void
pmhash_xlog_copy(const PmhashKey *from, const PmhashKey *to)
{
	xl_pmhash_copy xlc;

	if (!XLogIsNeeded() || RecoveryInProgress())
		return;
	memset(&xlc, 0, sizeof(xlc));
	xlc.from.dbid = from->dbid;
	xlc.from.spcid = from->spcid;
	xlc.from.relnode = from->relnode;
	xlc.to.dbid = to->dbid;
	xlc.to.spcid = to->spcid;
	xlc.to.relnode = to->relnode;
	XLogBeginInsert();
	XLogRegisterData((char *) &xlc, sizeof(xlc));
	(void) XLogInsert(PMHASH_RMGR_ID, XLOG_PMHASH_COPY);
}

/* DROP_DB (srcdb) and COPY_DB (srcdb to dstdb) */
void
pmhash_xlog_db(uint8 info, Oid srcdb, Oid dstdb)
{
	xl_pmhash_db xld;

	if (!XLogIsNeeded() || RecoveryInProgress())
		return;
	xld.srcdb = srcdb;
	xld.dstdb = dstdb;
	XLogBeginInsert();
	XLogRegisterData((char *) &xld, sizeof(xld));
	(void) XLogInsert(PMHASH_RMGR_ID, info);
}

/* describe the pool a record is about */
static void
pmhash_desc_pool(StringInfo buf, const xl_pmhash_pool *xlp)
{
	appendStringInfo(buf, "pool %u/%u/%u", xlp->dbid, xlp->spcid,
					 xlp->relnode);
	if (xlp->pool_id != 0)
		appendStringInfo(buf, " id %016llx",
						 (unsigned long long) xlp->pool_id);
}

/* rm_desc: the record's contents for pg_waldump and pg_walinspect */
void
pmhash_desc(StringInfo buf, XLogReaderState *record)
{
	char	   *rec = XLogRecGetData(record);
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;

	switch (info)
	{
		case XLOG_PMHASH_CREATE:
		case XLOG_PMHASH_BUILD_END:
		case XLOG_PMHASH_DROP:
			{
				xl_pmhash_pool *xlp = (xl_pmhash_pool *) rec;

				pmhash_desc_pool(buf, xlp);
				if (xlp->flags & XLP_PMHASH_BUILD)
					appendStringInfoString(buf, ", build");
				break;
			}
		case XLOG_PMHASH_INSERT:
			{
				xl_pmhash_entries *xle = (xl_pmhash_entries *) rec;

				pmhash_desc_pool(buf, &xle->pool);
				appendStringInfo(buf, ", %u entries", xle->nentries);
				break;
			}
		case XLOG_PMHASH_DELETE:
		case XLOG_PMHASH_PRUNE:
			{
				/* (a PRUNE record begins with a DELETE's) */
				xl_pmhash_delete *xld = (xl_pmhash_delete *) rec;

				pmhash_desc_pool(buf, &xld->pool);
				appendStringInfo(buf, ", %u tids, hashes %016llx..%016llx",
								 xld->ntids, (unsigned long long) xld->lo,
								 (unsigned long long) xld->hi);
				if (info == XLOG_PMHASH_PRUNE)
					appendStringInfo(buf, ", conflict horizon %u",
									 ((xl_pmhash_prune *) rec)->snapshotConflictHorizon);
				break;
			}
		case XLOG_PMHASH_COPY:
			{
				xl_pmhash_copy *xlc = (xl_pmhash_copy *) rec;

				pmhash_desc_pool(buf, &xlc->from);
				appendStringInfoString(buf, " to ");
				pmhash_desc_pool(buf, &xlc->to);
				break;
			}
		case XLOG_PMHASH_DROP_DB:
			{
				xl_pmhash_db *xld = (xl_pmhash_db *) rec;

				appendStringInfo(buf, "database %u", xld->srcdb);
				break;
			}
		case XLOG_PMHASH_COPY_DB:
			{
				xl_pmhash_db *xld = (xl_pmhash_db *) rec;

				appendStringInfo(buf, "database %u to %u", xld->srcdb,
								 xld->dstdb);
				break;
			}
	}
}

/* rm_identify: the name of a record type */
const char *
pmhash_identify(uint8 info)
{
	switch (info & ~XLR_INFO_MASK)
	{
		case XLOG_PMHASH_CREATE:
			return "CREATE";
		case XLOG_PMHASH_INSERT:
			return "INSERT";
		case XLOG_PMHASH_DELETE:
			return "DELETE";
		case XLOG_PMHASH_BUILD_END:
			return "BUILD_END";
		case XLOG_PMHASH_DROP:
			return "DROP";
		case XLOG_PMHASH_DROP_DB:
			return "DROP_DB";
		case XLOG_PMHASH_COPY_DB:
			return "COPY_DB";
		case XLOG_PMHASH_COPY:
			return "COPY";
		case XLOG_PMHASH_PRUNE:
			return "PRUNE";
	}
	return NULL;
}
