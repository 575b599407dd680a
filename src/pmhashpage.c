/*-------------------------------------------------------------------------
 *
 * pmhashpage.c
 *	  The index's metapage.
 *
 * The relation of a pmhash index holds one page, block 0: the metapage,
 * with a magic number, a layout version, flags, and the id of the pool
 * that holds the entries (it must equal the pool header's, see
 * pmhashpool.c).  The main fork's metapage is written whenever the index
 * gets a new pool, through shared buffers and WAL-logged when the index
 * is.  An unlogged index's init fork holds a metapage flagged
 * PMHASH_META_INIT (written directly, as any init fork): crash recovery
 * copies it over the main fork, and the first backend to use the index
 * then starts an empty pool (pmhash_load).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xloginsert.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "utils/rel.h"

#include "pmhash.h"

/* fill a page image with the metapage */
static void
pmhash_fill_metapage(Page page, uint64 pool_id, uint32 flags)
{
	PmhashMetaPageData *meta;

	PageInit(page, BLCKSZ, 0);
	meta = PmhashPageGetMeta(page);
	memset(meta, 0, sizeof(*meta));
	meta->magic = PMHASH_META_MAGIC;
	meta->version = PMHASH_META_VERSION;
	meta->pool_id = pool_id;
	meta->flags = flags;
	((PageHeader) page)->pd_lower = (char *) meta + sizeof(*meta) - (char *) page;
}

/*
 * Write the metapage of the main fork (through shared buffers, WAL-logged
 * when the index is) or of the init fork (directly, as for any init fork).
 */
void
pmhash_write_metapage(Relation index, ForkNumber fork, uint64 pool_id,
					  uint32 flags)
{
	if (fork == INIT_FORKNUM)
	{
		PGAlignedBlock buf;

		pmhash_fill_metapage(buf.data, pool_id, flags);
		PageSetChecksumInplace(buf.data, PMHASH_METAPAGE_BLKNO);
		smgrwrite(RelationGetSmgr(index), INIT_FORKNUM, PMHASH_METAPAGE_BLKNO,
				  buf.data, true);
		log_newpage(&(RelationGetSmgr(index))->smgr_rnode.node, INIT_FORKNUM,
					PMHASH_METAPAGE_BLKNO, buf.data, true);
		smgrimmedsync(RelationGetSmgr(index), INIT_FORKNUM);
		return;
	}
	else
	{
		Buffer		buffer;

		if (RelationGetNumberOfBlocks(index) == 0)
			buffer = ReadBufferExtended(index, MAIN_FORKNUM, P_NEW,
										RBM_NORMAL, NULL);
		else
			buffer = ReadBufferExtended(index, MAIN_FORKNUM,
										PMHASH_METAPAGE_BLKNO, RBM_NORMAL, NULL);
		Assert(BufferGetBlockNumber(buffer) == PMHASH_METAPAGE_BLKNO);
		LockBuffer(buffer, BUFFER_LOCK_EXCLUSIVE);

		START_CRIT_SECTION();
		pmhash_fill_metapage(BufferGetPage(buffer), pool_id, flags);
		MarkBufferDirty(buffer);
		if (RelationNeedsWAL(index))
			log_newpage_buffer(buffer, true);
		END_CRIT_SECTION();

		UnlockReleaseBuffer(buffer);
	}
}

/*
 * Read the metapage of the main fork.  Returns false when the index has no
 * metapage yet (CREATE INDEX CONCURRENTLY before its build).
 */
bool
pmhash_read_metapage(Relation index, PmhashMetaPageData *meta)
{
	Buffer		buffer;
	Page		page;
	bool		ok;

	if (RelationGetNumberOfBlocks(index) == 0)
		return false;
	buffer = ReadBuffer(index, PMHASH_METAPAGE_BLKNO);
	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buffer);
	*meta = *PmhashPageGetMeta(page);
	UnlockReleaseBuffer(buffer);

	ok = !PageIsNew(page) && meta->magic == PMHASH_META_MAGIC;
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" is not a pmhash index",
						RelationGetRelationName(index)),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(index))));
	if (meta->version != PMHASH_META_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("pmhash index \"%s\" has metapage version %u, expected %u",
						RelationGetRelationName(index), meta->version,
						PMHASH_META_VERSION),
				 errhint("REINDEX INDEX %s;", RelationGetRelationName(index))));
	return true;
}
