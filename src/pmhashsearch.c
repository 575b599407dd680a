/*-------------------------------------------------------------------------
 *
 * pmhashsearch.c
 *	  Index and bitmap scans of a pmhash index.
 *
 * A scan hashes its key, takes the index lock shared and the segment lock
 * shared, and collects the TIDs of every live entry with that hash: in the
 * segment and its chain (the fingerprints in shared memory tell which slots
 * to read), in the segment's D-bucket, and in this transaction's own
 * collecting log.  The TIDs are
 * sorted and de-duplicated, so that each is returned once even if a crash
 * left the same entry twice, and every result is rechecked by the executor
 * (entries hold hashes, not keys).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relscan.h"
#include "lib/qunique.h"
#include "miscadmin.h"
#include "nodes/tidbitmap.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "pmhash.h"

typedef struct PmhashScanOpaqueData
{
	bool		valid;			/* have the TIDs been collected? */
	bool		empty;			/* the keys cannot match anything */
	uint64		hash;
	ItemPointerData *tids;
	int			ntids;
	int			next;
	int			cap;
	BlockNumber heap_nblocks;	/* heap length as last seen */
} PmhashScanOpaqueData;

typedef PmhashScanOpaqueData *PmhashScanOpaque;

/* ambeginscan */
IndexScanDesc
pmhashbeginscan(Relation rel, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(rel, nkeys, norderbys);
	PmhashScanOpaque so = palloc0(sizeof(PmhashScanOpaqueData));

	so->cap = 64;
	so->heap_nblocks = 0;		/* read on first need */
	so->tids = palloc(sizeof(ItemPointerData) * so->cap);
	scan->opaque = so;
	return scan;
}

/*
 * The 64-bit hash of a scan key's argument.  A key whose type differs from
 * the indexed type (an int8 column compared with an int4 value) is hashed
 * with its own type's support procedure from the operator family: the
 * family guarantees that equal values hash alike across its types.
 */
static uint64
pmhash_scankey_hash(Relation rel, ScanKey key)
{
	Oid			subtype = key->sk_subtype;
	Oid			intype = rel->rd_opcintype[0];

	if (!OidIsValid(subtype) || subtype == intype)
		return pmhash_hash_datum(index_getprocinfo(rel, 1, PMHASH_EXTENDED_PROC),
								 rel->rd_indcollation[0], key->sk_argument);
	else
	{
		Oid			procid = get_opfamily_proc(rel->rd_opfamily[0], subtype,
											   subtype, PMHASH_EXTENDED_PROC);
		FmgrInfo	finfo;

		if (!OidIsValid(procid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("missing support function %d(%u,%u) in operator family of index \"%s\"",
							PMHASH_EXTENDED_PROC, subtype, subtype,
							RelationGetRelationName(rel))));
		fmgr_info(procid, &finfo);
		return pmhash_hash_datum(&finfo, rel->rd_indcollation[0],
								 key->sk_argument);
	}
}

/* amrescan: work out the hash to look for; TIDs are fetched on demand */
void
pmhashrescan(IndexScanDesc scan, ScanKey scankey, int nscankeys,
			 ScanKey orderbys, int norderbys)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	int			i;

	if (scankey && scan->numberOfKeys > 0)
		memmove(scan->keyData, scankey,
				scan->numberOfKeys * sizeof(ScanKeyData));

	so->valid = false;
	so->empty = false;
	so->ntids = 0;
	so->next = 0;

	if (scan->numberOfKeys < 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pmhash indexes do not support whole-index scans")));

	for (i = 0; i < scan->numberOfKeys; i++)
	{
		ScanKey		key = &scan->keyData[i];
		uint64		h;

		if (key->sk_flags & SK_ISNULL)
		{
			/* "col = NULL" never matches */
			so->empty = true;
			continue;
		}
		h = pmhash_scankey_hash(scan->indexRelation, key);
		/* two keys with different hashes cannot both be equal to a value */
		if (i > 0 && h != so->hash)
			so->empty = true;
		so->hash = h;
	}
}

/* qsort/qunique comparator of TIDs */
static int
pmhash_tid_cmp(const void *a, const void *b)
{
	return ItemPointerCompare((ItemPointer) a, (ItemPointer) b);
}

/* collect, sort and de-duplicate the TIDs with the scan's hash */
static void
pmhash_collect(IndexScanDesc scan)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	PmhashIndex idx;
	uint64	   *tags;
	int			n;
	int			i;

	so->valid = true;
	so->ntids = 0;
	so->next = 0;
	pgstat_count_index_scan(scan->indexRelation);
	if (so->empty)
		return;

	tags = palloc(sizeof(uint64) * so->cap);
	pmhash_attach(scan->indexRelation, LW_SHARED, &idx);
	for (;;)
	{
		uint32		segno = pmhash_lookup_segment(&idx, so->hash);
		PmhSegMeta *meta;
		ItemPointerData own[PMH_BUCKET_SLOTS];
		int			nown;

		/*
		 * Start loading the metadata, so that its misses overlap the
		 * lock's; the first use since a restart loads the segment.
		 */
		pmh_meta_prefetch(pmhash_seg_meta(&idx, segno), so->hash);
		if (!pmhash_lock_segment(&idx, segno, LW_SHARED))
			continue;
		meta = pmhash_seg_meta(&idx, segno);
		n = pmh_lookup(&idx.local->pool, &idx.cb, segno, so->hash,
					   tags, so->cap);
		/* entries waiting in the segment's D-bucket */
		n = pmh_pending_lookup(meta, so->hash, tags, n, so->cap);
		pmhash_unlock_segment(&idx, segno);

		/* this transaction's own inserts not flushed yet */
		nown = pmhash_log_own_matches(&idx.shared->key, so->hash, own,
									  PMH_BUCKET_SLOTS);
		for (i = 0; i < nown; i++)
		{
			if (n < so->cap)
				tags[n] = pmh_tag_make(so->hash,
									   ItemPointerGetBlockNumber(&own[i]),
									   ItemPointerGetOffsetNumber(&own[i]));
			n++;
		}
		if (n <= so->cap)
			break;
		/* more matches than room: grow and look again */
		pfree(tags);
		pfree(so->tids);
		so->cap = n + n / 2;
		tags = palloc(sizeof(uint64) * so->cap);
		so->tids = palloc(sizeof(ItemPointerData) * so->cap);
	}
	pmhash_detach(&idx);

	/*
	 * An entry can outlive a crash that lost its heap insert; once VACUUM
	 * has truncated the heap, its TID points past the end.  Skip such TIDs
	 * (VACUUM removes their entries): the heap length is read again before
	 * a TID is skipped, as the heap may have grown since it was cached.
	 */
	{
		int			kept = 0;

		for (i = 0; i < n; i++)
		{
			BlockNumber blk = pmh_tag_block(tags[i]);

			/* (a bitmap heap scan ignores such blocks by itself) */
			if (scan->heapRelation != NULL && blk >= so->heap_nblocks)
			{
				so->heap_nblocks = RelationGetNumberOfBlocks(scan->heapRelation);
				if (blk >= so->heap_nblocks)
					continue;
			}
			/* (ItemPointerSet is a macro: no side effects in its arguments) */
			ItemPointerSet(&so->tids[kept], blk, pmh_tag_offset(tags[i]));
			kept++;
		}
		n = kept;
	}
	pfree(tags);

	if (n > 1)
	{
		qsort(so->tids, n, sizeof(ItemPointerData), pmhash_tid_cmp);
		n = (int) qunique(so->tids, n, sizeof(ItemPointerData), pmhash_tid_cmp);
	}
	so->ntids = n;
}

/* amgettuple: the next TID, always to be rechecked */
bool
pmhashgettuple(IndexScanDesc scan, ScanDirection dir)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;

	if (!ScanDirectionIsForward(dir))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pmhash indexes support only forward scans")));
	if (!so->valid)
		pmhash_collect(scan);
	if (so->next >= so->ntids)
		return false;
	scan->xs_heaptid = so->tids[so->next++];
	scan->xs_recheck = true;
	return true;
}

/* amgetbitmap: all matching TIDs, lossy by hash (recheck) */
int64
pmhashgetbitmap(IndexScanDesc scan, TIDBitmap *tbm)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;

	pmhash_collect(scan);
	if (so->ntids > 0)
		tbm_add_tuples(tbm, so->tids, so->ntids, true);
	return so->ntids;
}

/* amendscan */
void
pmhashendscan(IndexScanDesc scan)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;

	pfree(so->tids);
	pfree(so);
	scan->opaque = NULL;
}
