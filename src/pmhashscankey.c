/*-------------------------------------------------------------------------
 *
 * pmhashscankey.c
 *	  From a scan's keys to the hashes it looks up (amrescan).
 *
 * Each key column gets the set of its conditions' hashes: one for
 * "col = value" (a value of another type of the operator family hashed
 * with that type's support procedure), the distinct ones of an array for
 * "col = ANY (array)", the intersection of several conditions on one
 * column.  A multi-column index looks up every combination of one hash per
 * column (pmhash_hash_combine).  pmhashsearch.c looks the hashes up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relscan.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "lib/qunique.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "pmhash.h"

/* the most key combinations one scan of a multi-column index looks up */
#define PMHASH_MAX_COMBINATIONS	(1 << 22)

/*
 * The memory context of the scan's key hashes, made when a key first needs
 * one: most scans have a single scalar key, whose hash the scan keeps in
 * place, and do without.  Marks it used, for rescan to reset.
 */
static MemoryContext
pmhash_scan_keycxt(PmhashScanOpaque so)
{
	if (so->keycxt == NULL)
		so->keycxt = AllocSetContextCreate(so->scancxt,
										   "pmhash scan keys",
										   ALLOCSET_SMALL_SIZES);
	so->keycxt_used = true;
	return so->keycxt;
}

/*
 * The support procedure that hashes values of type subtype for key column
 * col of this index.  A key whose type differs from the indexed type (an
 * int8 column compared with an int4 value) is hashed with its own type's
 * procedure from the column's operator family, filled into *buf: the
 * family guarantees that equal values hash alike across its types.
 */
static FmgrInfo *
pmhash_key_hashproc(Relation rel, int col, Oid subtype, FmgrInfo *buf)
{
	Oid			intype = rel->rd_opcintype[col];
	Oid			procid;

	if (!OidIsValid(subtype) || subtype == intype)
		return index_getprocinfo(rel, col + 1, PMHASH_EXTENDED_PROC);
	procid = get_opfamily_proc(rel->rd_opfamily[col], subtype, subtype,
							   PMHASH_EXTENDED_PROC);
	if (!OidIsValid(procid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("missing support function %d(%u,%u) in operator family of index \"%s\"",
						PMHASH_EXTENDED_PROC, subtype, subtype,
						RelationGetRelationName(rel))));
	fmgr_info(procid, buf);
	return buf;
}

/* qsort/qunique comparator of hashes */
static int
pmhash_hash_cmp(const void *a, const void *b)
{
	uint64		x = *(const uint64 *) a;
	uint64		y = *(const uint64 *) b;

	return (x > y) - (x < y);
}

/*
 * The distinct hashes of the non-NULL elements of an array key, sorted,
 * into *out (allocated in the current memory context).  Returns how many.
 */
static int
pmhash_array_hashes(Relation rel, int col, ScanKey key, uint64 **out)
{
	ArrayType  *arr = DatumGetArrayTypeP(key->sk_argument);
	Oid			elemtype = ARR_ELEMTYPE(arr);
	FmgrInfo	buf;
	FmgrInfo   *proc = pmhash_key_hashproc(rel, col, elemtype, &buf);
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
	Datum	   *values;
	bool	   *nulls;
	int			nelems;
	uint64	   *hashes;
	int			n = 0;
	int			i;

	get_typlenbyvalalign(elemtype, &elmlen, &elmbyval, &elmalign);
	deconstruct_array(arr, elemtype, elmlen, elmbyval, elmalign,
					  &values, &nulls, &nelems);
	hashes = palloc(sizeof(uint64) * Max(nelems, 1));
	for (i = 0; i < nelems; i++)
	{
		/* "col = ANY (array)" never matches through a NULL element */
		if (nulls[i])
			continue;
		hashes[n++] = pmhash_hash_datum(proc, rel->rd_indcollation[col],
										values[i]);
	}
	if (n > 1)
	{
		qsort(hashes, n, sizeof(uint64), pmhash_hash_cmp);
		n = (int) qunique(hashes, n, sizeof(uint64), pmhash_hash_cmp);
	}
	*out = hashes;
	return n;
}

/* keep in a (sorted, distinct) what is also in b; returns the new length */
static int
pmhash_intersect(uint64 *a, int na, const uint64 *b, int nb)
{
	int			i = 0;
	int			j = 0;
	int			n = 0;

	while (i < na && j < nb)
	{
		if (a[i] < b[j])
			i++;
		else if (a[i] > b[j])
			j++;
		else
		{
			a[n++] = a[i];
			i++;
			j++;
		}
	}
	return n;
}

/*
 * The hashes of every combination of the key columns' values, one value
 * per column (colh[c][0..ncolh[c]-1] for column c), folded as
 * pmhash_hash_row folds a row's, sorted and distinct, into so->hashes.
 */
static void
pmhash_combine_columns(Relation rel, PmhashScanOpaque so, int ncols,
					   uint64 **colh, const int *ncolh)
{
	int			pos[INDEX_MAX_KEYS];
	double		total = 1.0;
	uint64	   *hashes;
	int			n;
	int			k;
	int			c;

	for (c = 0; c < ncols; c++)
		total *= ncolh[c];
	if (total > PMHASH_MAX_COMBINATIONS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("pmhash scan of index \"%s\" has too many key combinations",
						RelationGetRelationName(rel)),
				 errdetail("The values given for its key columns combine into %.0f keys; at most %d are looked up in one scan.",
						   total, PMHASH_MAX_COMBINATIONS),
				 errhint("Look up fewer keys at a time.")));
	n = (int) total;
	hashes = MemoryContextAlloc(pmhash_scan_keycxt(so), sizeof(uint64) * n);
	memset(pos, 0, sizeof(pos));
	for (k = 0; k < n; k++)
	{
		uint64		h = colh[0][pos[0]];

		for (c = 1; c < ncols; c++)
			h = pmhash_hash_combine(h, colh[c][pos[c]]);
		hashes[k] = h;
		/* the next combination: the last column varies fastest */
		for (c = ncols - 1; c >= 0; c--)
		{
			if (++pos[c] < ncolh[c])
				break;
			pos[c] = 0;
		}
	}
	if (n > 1)
	{
		qsort(hashes, n, sizeof(uint64), pmhash_hash_cmp);
		n = (int) qunique(hashes, n, sizeof(uint64), pmhash_hash_cmp);
	}
	so->hashes = hashes;
	so->nhashes = n;
}

/*
 * amrescan: work out the hashes to look for; TIDs are fetched on demand.
 * Each key column gets the set of its keys' hashes (the intersection when
 * it has several keys); an entry matches when its hash is that of a
 * combination of one value per column.  Every key column needs a key: the
 * planner never picks a path without (pmhash_path_has_all_keys).
 */
void
pmhashrescan(IndexScanDesc scan, ScanKey scankey, int nscankeys,
			 ScanKey orderbys, int norderbys)
{
	PmhashScanOpaque so = (PmhashScanOpaque) scan->opaque;
	Relation	rel = scan->indexRelation;
	int			ncols = IndexRelationGetNumberOfKeyAttributes(rel);
	uint64	   *colh[INDEX_MAX_KEYS];
	int			ncolh[INDEX_MAX_KEYS];
	bool		used_hash1 = false;
	int			i;

	/* the hints of the last round, while its hashes are at hand */
	pmhash_scan_hint_killed(scan);
	if (scankey && scan->numberOfKeys > 0)
		memmove(scan->keyData, scankey,
				scan->numberOfKeys * sizeof(ScanKeyData));

	so->valid = false;
	so->empty = false;
	so->check_pred = false;
	so->check_key = false;
	if (so->pred_estate != NULL)
		table_index_fetch_reset(so->pred_fetch);
	so->ntids = 0;
	so->next = 0;
	so->hashes = NULL;
	so->nhashes = 0;
	if (so->keycxt_used)
	{
		MemoryContextReset(so->keycxt);
		so->keycxt_used = false;
	}

	if (scan->numberOfKeys < 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pmhash indexes do not support whole-index scans")));

	for (i = 0; i < ncols; i++)
		colh[i] = NULL;
	for (i = 0; i < scan->numberOfKeys; i++)
	{
		ScanKey		key = &scan->keyData[i];
		int			col = key->sk_attno - 1;
		uint64	   *h;
		int			nh;

		Assert(col >= 0 && col < ncols);
		if ((key->sk_flags & SK_ISNULL) &&
			!((key->sk_flags & SK_SEARCHNULL) &&
			  rel->rd_index->indnullsnotdistinct))
		{
			/*
			 * "col = NULL" and "col = ANY (NULL)" never match, nor does "col
			 * IS NULL" where NULL keys are not indexed
			 */
			so->empty = true;
			continue;
		}
		if (key->sk_flags & SK_SEARCHARRAY)
		{
			MemoryContext old = MemoryContextSwitchTo(pmhash_scan_keycxt(so));

			nh = pmhash_array_hashes(rel, col, key, &h);
			MemoryContextSwitchTo(old);
		}
		else
		{
			/* the first scalar key's hash is kept in the scan, not palloc'd */
			h = !used_hash1 ? &so->hash1 :
				MemoryContextAlloc(pmhash_scan_keycxt(so), sizeof(uint64));
			used_hash1 = true;
			if (key->sk_flags & SK_ISNULL)
			{
				/*
				 * "col IS NULL" of an ON CONFLICT arbiter (see above), whose
				 * recheck would take NULL for no match: the scan compares
				 * the keys itself
				 */
				*h = PMHASH_NULL_HASH;
				so->check_key = true;
			}
			else
			{
				FmgrInfo	buf;

				*h = pmhash_hash_datum(pmhash_key_hashproc(rel, col,
														   key->sk_subtype,
														   &buf),
									   rel->rd_indcollation[col],
									   key->sk_argument);
			}
			nh = 1;
		}
		if (colh[col] == NULL)
		{
			colh[col] = h;
			ncolh[col] = nh;
		}
		else
			ncolh[col] = pmhash_intersect(colh[col], ncolh[col], h, nh);
	}
	if (so->empty)
		return;
	for (i = 0; i < ncols; i++)
	{
		if (colh[i] == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("pmhash index \"%s\" needs an equality condition on every key column",
							RelationGetRelationName(rel)),
					 errdetail("The scan has none on key column %d; entries hash all key columns together.",
							   i + 1),
					 errhint("Give every key column of the index a condition, or use a btree index.")));
		if (ncolh[i] == 0)
			so->empty = true;
	}
	if (so->empty)
		return;
	if (ncols == 1)
	{
		so->hashes = colh[0];
		so->nhashes = ncolh[0];
	}
	else
		pmhash_combine_columns(rel, so, ncols, colh, ncolh);
	if (so->nhashes == 0)
		so->empty = true;
}
