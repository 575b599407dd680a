/*-------------------------------------------------------------------------
 *
 * pmhash_xlog.h
 *	  pmhash's WAL resource manager: record layouts, emission and redo.
 *
 * The records carry entries, not pool images: a standby applies them to
 * its own pools, whose layout (depths, splits, free space) is its own.
 * Redo is idempotent: an INSERT stores an entry only if the pool does not
 * hold the same (hash, TID), a DELETE removes whatever entries of its TIDs
 * are there, so that replaying a stretch of WAL twice (a standby restarted
 * from its restart point, the primary's crash recovery) changes nothing
 * the first replay did not.  See "WAL, standbys and backups" in
 * README.pmhash.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMHASH_XLOG_H
#define PMHASH_XLOG_H

#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "lib/stringinfo.h"

/*
 * pmhash's resource manager id, in the custom range (128 to 255;
 * RM_EXPERIMENTAL_ID is 128).  It is written into every pmhash record: a
 * server that replays pmhash's WAL must load pmhash with the same id.
 */
#define PMHASH_RMGR_ID			187
#define PMHASH_RMGR_NAME		"pmhash"

/* record types (the high 4 bits of xl_info) */
#define XLOG_PMHASH_CREATE		0x00	/* a new, empty pool */
#define XLOG_PMHASH_INSERT		0x10	/* entries flushed or built */
#define XLOG_PMHASH_DELETE		0x20	/* entries VACUUM removed */
#define XLOG_PMHASH_BUILD_END	0x30	/* a build's entries are all logged */
#define XLOG_PMHASH_DROP		0x40	/* the storage is gone */
#define XLOG_PMHASH_DROP_DB		0x50	/* a database's pools are gone */
#define XLOG_PMHASH_COPY_DB		0x60	/* CREATE DATABASE copied pools */
#define XLOG_PMHASH_COPY		0x70	/* a block-copied storage's pool */
#define XLOG_PMHASH_PRUNE		0x80	/* entries hinted dead, removed */

/* which pool a record is about (all but the database records) */
typedef struct xl_pmhash_pool
{
	Oid			dbid;
	Oid			spcid;			/* 0: the database's default tablespace */
	Oid			relnode;
	uint32		flags;			/* XLP_PMHASH_* */
	uint64		pool_id;		/* 0 in DROP: whichever pool is there */
} xl_pmhash_pool;

/* CREATE: the pool is being built (entries follow, then BUILD_END) */
#define XLP_PMHASH_BUILD		0x0001

/*
 * INSERT: the pool, then nentries entries of PMHASH_XLOG_ENTRY_BYTES each
 * (hash, block, offset, unaligned).  DELETE: the pool, the range of hashes
 * [lo, hi] it covers, then nentries dead TIDs of 6 bytes each, sorted.
 */
typedef struct xl_pmhash_entries
{
	xl_pmhash_pool pool;
	uint32		nentries;
} xl_pmhash_entries;

#define SizeOfPmhashEntries		(offsetof(xl_pmhash_entries, nentries) + sizeof(uint32))
#define PMHASH_XLOG_ENTRY_BYTES	(sizeof(uint64) + sizeof(uint32) + sizeof(uint16))
#define PMHASH_XLOG_TID_BYTES	(sizeof(uint32) + sizeof(uint16))

/*
 * A transaction's flushed entries of one index wait for the WAL until this
 * many have gathered (or it commits or prepares): one record per 256
 * entries instead of one per flush of 16.
 */
#define PMHASH_XLOG_BATCH		256

typedef struct xl_pmhash_delete
{
	xl_pmhash_pool pool;
	uint64		lo;
	uint64		hi;
	uint32		ntids;
} xl_pmhash_delete;

#define SizeOfPmhashDelete		(offsetof(xl_pmhash_delete, ntids) + sizeof(uint32))

/*
 * PRUNE: a DELETE of entries that were hinted dead (pmhashprune.c), with
 * the horizon a hot standby's queries conflict with: none of them may
 * still need a removed entry.  The TIDs follow, as in DELETE.
 */
typedef struct xl_pmhash_prune
{
	xl_pmhash_delete del;		/* the pool first, as in every record */
	TransactionId snapshotConflictHorizon;
} xl_pmhash_prune;

#define SizeOfPmhashPrune		(offsetof(xl_pmhash_prune, snapshotConflictHorizon) + sizeof(TransactionId))
StaticAssertDecl(offsetof(xl_pmhash_prune, del) == 0,
				 "redo and rm_desc read a PRUNE record as a DELETE's first");

/* COPY: the pool of storage "from" copied for storage "to" */
typedef struct xl_pmhash_copy
{
	xl_pmhash_pool from;
	xl_pmhash_pool to;
} xl_pmhash_copy;

/* DROP_DB (dst unused) and COPY_DB */
typedef struct xl_pmhash_db
{
	Oid			srcdb;
	Oid			dstdb;
} xl_pmhash_db;

/* pmhashxlog.c: emission, the resource manager, descriptions */
extern void pmhash_rmgr_register(void);
extern bool pmhash_xlog_wanted(Relation index);
extern void pmhash_xlog_create(Relation index, uint64 pool_id, bool build);
extern void pmhash_xlog_insert_key(const PmhashKey *key, uint64 pool_id,
								   const uint64 *hashes,
								   const ItemPointerData *tids, int n);
extern void pmhash_xlog_insert(Relation index, uint64 pool_id,
							   const uint64 *hashes, const ItemPointerData *tids,
							   int n);
extern XLogRecPtr pmhash_xlog_delete(Relation index, uint64 pool_id,
									 uint64 lo, uint64 hi,
									 const ItemPointerData *tids, int n);
extern XLogRecPtr pmhash_xlog_prune(Relation index, uint64 pool_id,
									uint64 lo, uint64 hi,
									const ItemPointerData *tids, int n,
									TransactionId horizon);
extern void pmhash_xlog_build_end(Relation index, uint64 pool_id);
extern void pmhash_xlog_drop(const PmhashKey *key);
extern void pmhash_xlog_copy(const PmhashKey *from, const PmhashKey *to);
extern void pmhash_xlog_db(uint8 info, Oid srcdb, Oid dstdb);
extern void pmhash_desc(StringInfo buf, XLogReaderState *record);
extern const char *pmhash_identify(uint8 info);

/* pmhashredo.c */
extern void pmhash_redo(XLogReaderState *record);
extern void pmhash_redo_startup(void);
extern void pmhash_redo_cleanup(void);

#endif							/* PMHASH_XLOG_H */
