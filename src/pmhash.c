/*-------------------------------------------------------------------------
 *
 * pmhash.c
 *	  Module initialisation, GUCs, and the access method handler of pmhash.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/genam.h"
#include "access/reloptions.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"

#include "pmhash.h"
#include "pmhash_xlog.h"

PG_MODULE_MAGIC;

char	   *pmhash_pool_dir = NULL;
int			pmhash_shared_memory_mb = 128;
int			pmhash_max_shared_memory_mb = -1;
int			pmhash_max_indexes = 10000;
bool		pmhash_preloaded = false;

static relopt_kind pmhash_relopt_kind;

void		_PG_init(void);

/* room left in a MAXPGPATH buffer for "/<db oid>/<spc oid>_<relfilenode>.pool" */
#define PMHASH_POOL_NAME_MAX	48

/*
 * Check hook of pmhash.pool_dir: a non-empty path short enough that every
 * pool file name under it fits in MAXPGPATH (a truncated name could name
 * another index's pool).
 */
static bool
pmhash_check_pool_dir(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
	{
		GUC_check_errdetail("pmhash.pool_dir must name a directory.");
		return false;
	}
	if (strlen(*newval) >= MAXPGPATH - PMHASH_POOL_NAME_MAX)
	{
		GUC_check_errdetail("pmhash.pool_dir must be shorter than %d bytes.",
							MAXPGPATH - PMHASH_POOL_NAME_MAX);
		return false;
	}
	return true;
}

/*
 * Module load.  pmhash keeps state in shared memory, so it only works when
 * loaded through shared_preload_libraries; anything else is refused here,
 * which also makes CREATE EXTENSION fail with a clear message.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmhash must be loaded via shared_preload_libraries"),
				 errdetail("pmhash keeps its directories and fingerprints in shared memory, which is reserved at server start."),
				 errhint("Add pmhash to shared_preload_libraries in postgresql.conf and restart the server.")));

	DefineCustomStringVariable("pmhash.pool_dir",
							   "Directory holding the pmhash pool files (one per index).",
							   "A relative path is taken relative to the data directory. "
							   "Put it on a DAX-mounted persistent-memory file system to use "
							   "CPU-cache flushes instead of msync.",
							   &pmhash_pool_dir,
							   "pmhash",
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY,
							   pmhash_check_pool_dir, NULL, NULL);

	DefineCustomIntVariable("pmhash.shared_memory",
							"Shared memory for pmhash directories, fingerprints and locks.",
							"About 5 kB per 1024 index slots plus 4 bytes per directory entry; "
							"see README.md for the sizing formula.",
							&pmhash_shared_memory_mb,
							128,
							1,
							INT_MAX / 1024,
							PGC_POSTMASTER,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pmhash.max_shared_memory",
							"Limit to which pmhash's shared memory grows beyond pmhash.shared_memory.",
							"Growth uses dynamic shared memory; -1 means a quarter of the "
							"machine's physical memory, 0 means no growth.",
							&pmhash_max_shared_memory_mb,
							-1,
							-1,
							INT_MAX / 1024,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pmhash.max_indexes",
							"Maximum number of pmhash index storages with state in shared memory.",
							"Each costs about 500 bytes of shared memory.",
							&pmhash_max_indexes,
							10000,
							1,
							65536,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pmhash.media_buffer_lines",
							"Size, in 256-byte lines, of the modelled write-combining buffer of the persistent-memory device.",
							"Every flush of a pool is fed to this model to count media bytes "
							"written and read (see pmhash_media_stats()); 0 turns the model off.",
							&pmhash_media_buffer_lines,
							64,
							0,
							1024,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("pmhash.track_media_reads",
							 "Feeds the pool entries that scans read to the media model.",
							 "Costs a lock per entry read; for measurements only.",
							 &pmhash_track_media_reads,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("pmhash.prewarm",
							 "Loads every pmhash index into shared memory in the background after a start.",
							 "A background worker per database rebuilds the directories and "
							 "fingerprints after every server start and crash reinitialisation, "
							 "so that the first query does not wait for it.",
							 &pmhash_prewarm,
							 true,
							 PGC_POSTMASTER,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("pmhash.lazy_writeback",
							 "Leaves the write-back of pools on ordinary files to the kernel and a background pass.",
							 "Pools are then not synced at every persist; a pool the operating system "
							 "did not write back before it stopped is rebuilt from its table. "
							 "Off: every persist is an msync. No effect on persistent memory.",
							 &pmhash_lazy_writeback,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pmhash.writeback_delay",
							"How long a pool with deferred writes stays idle before it is written back.",
							"The background pass then syncs the pool and clears its write-back mark, "
							"so that a crash of the operating system does not make it rebuild.",
							&pmhash_writeback_delay,
							10,
							1,
							86400,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("pmhash.boot_id_path",
							   "File holding the kernel's boot id (developer option).",
							   "Deferred write-back tells a crash of the server from one of the "
							   "operating system by it; tests point it elsewhere to simulate a reboot.",
							   &pmhash_boot_id_path,
							   "/proc/sys/kernel/random/boot_id",
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY | GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("pmhash.sweep_pause",
							"Pause of the start's orphan-pool sweep between listing and deciding (developer option).",
							"The sweep lists a database's pool files, waits this long, then reads the "
							"catalog; tests create an index in between.  0: no pause.",
							&pmhash_sweep_pause,
							0,
							0,
							60000,
							PGC_SIGHUP,
							GUC_UNIT_MS | GUC_SUPERUSER_ONLY | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("pmhash");

	pmhash_relopt_kind = add_reloption_kind();
	pmhash_preloaded = true;

	pmhash_shmem_request();
	pmhash_lifecycle_init();
	pmhash_rmgr_register();
	pmhash_prewarm_register();
}

/*
 * Error out of any use of pmhash in a backend where the library was not
 * preloaded (it cannot have been: _PG_init refuses; kept for safety).
 */
void
pmhash_require_preload(void)
{
	if (!pmhash_preloaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmhash must be loaded via shared_preload_libraries"),
				 errhint("Add pmhash to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/* the 64-bit hash of a key datum, seed 0, through support procedure 2 */
uint64
pmhash_hash_datum(FmgrInfo *proc, Oid collation, Datum value)
{
	return DatumGetUInt64(FunctionCall2Coll(proc, collation, value,
											Int64GetDatum(0)));
}

/*
 * Fold the hash of the next key column into the hash of the columns before
 * it.  The result is mixed again (the finaliser of MurmurHash3), so that
 * the bits that choose the segment and the fingerprint depend on every
 * column, whatever the columns' own hash functions leave in them.
 */
uint64
pmhash_hash_combine(uint64 hash, uint64 column_hash)
{
	uint64		h = hash_combine64(hash, column_hash);

	h ^= h >> 33;
	h *= UINT64CONST(0xff51afd7ed558ccd);
	h ^= h >> 33;
	h *= UINT64CONST(0xc4ceb9fe1a85ec53);
	h ^= h >> 33;
	return h;
}

/*
 * The entry hash of an index row into *hash: the key column's hash for one
 * column, the columns' hashes folded in order (pmhash_hash_combine) for
 * several.  A row with a NULL key column is not indexed (returns false),
 * as in a hash index, except in a UNIQUE NULLS NOT DISTINCT index, whose
 * NULLs must find each other: there a NULL column hashes to
 * PMHASH_NULL_HASH.
 */
bool
pmhash_hash_row(Relation index, const Datum *values, const bool *isnull,
				uint64 *hash)
{
	int			nkeys = IndexRelationGetNumberOfKeyAttributes(index);
	uint64		h = 0;
	int			i;

	for (i = 0; i < nkeys; i++)
	{
		uint64		c;

		if (isnull[i])
		{
			if (!index->rd_index->indnullsnotdistinct)
				return false;
			c = PMHASH_NULL_HASH;
		}
		else
			c = pmhash_hash_datum(index_getprocinfo(index, i + 1,
													PMHASH_EXTENDED_PROC),
								  index->rd_indcollation[i], values[i]);
		h = i == 0 ? c : pmhash_hash_combine(h, c);
	}
	*hash = h;
	return true;
}

/* reloptions: pmhash has none yet, but rejects unknown ones clearly */
static bytea *
pmhashoptions(Datum reloptions, bool validate)
{
	return (bytea *) build_reloptions(reloptions, validate,
									  pmhash_relopt_kind,
									  sizeof(int32), NULL, 0);
}

/* what an index known to be unusable costs the planner: see below */
#define PMHASH_UNUSABLE_COST	(disable_cost * 1.0e6)

/*
 * Is the index with this OID known to be unusable (pmhash_known_unusable),
 * or is its pool being rebuilt (pmhash_known_rebuilding)?
 */
static bool
pmhash_index_oid_unusable(Oid indexoid)
{
	Relation	index;
	bool		result;

	/* the planner holds a lock on every index it considers */
	index = index_open(indexoid, NoLock);
	result = pmhash_known_unusable(index) || pmhash_known_rebuilding(index);
	index_close(index, NoLock);
	return result;
}

/*
 * Does the path have a condition on every key column?  Entries hash all
 * key columns together, so a scan needs every column's value; the planner
 * offers paths that constrain only the first (amoptionalkey is false).
 */
static bool
pmhash_path_has_all_keys(IndexPath *path)
{
	int			ncols = path->indexinfo->nkeycolumns;
	bool		have[INDEX_MAX_KEYS];
	ListCell   *lc;
	int			i;

	memset(have, 0, sizeof(have));
	foreach(lc, path->indexclauses)
		have[((IndexClause *) lfirst(lc))->indexcol] = true;
	for (i = 0; i < ncols; i++)
		if (!have[i])
			return false;
	return true;
}

/*
 * Cost of an equality probe.  genericcostestimate gives the selectivity and
 * the per-tuple CPU costs; the index's own I/O is one directory lookup, a
 * fingerprint comparison and a read of the matching slots, which we charge
 * as one page fetch per probe (a hash index reads at least one bucket
 * page), instead of the nothing that a one-page relation would cost.
 */
static void
pmhashcostestimate(PlannerInfo *root, IndexPath *path, double loop_count,
				   Cost *indexStartupCost, Cost *indexTotalCost,
				   Selectivity *indexSelectivity, double *indexCorrelation,
				   double *indexPages)
{
	GenericCosts costs;
	double		probes;

	MemSet(&costs, 0, sizeof(costs));
	genericcostestimate(root, path, loop_count, &costs);

	probes = costs.num_sa_scans > 1 ? costs.num_sa_scans : 1;
	costs.indexTotalCost += probes * (cpu_operator_cost * PMH_BUCKET_SLOTS);
	if (costs.numIndexPages < probes)
	{
		double		spc_random_page_cost = random_page_cost;

		/* repeated probes in a loop mostly hit cached lines */
		if (loop_count > 1)
			costs.indexTotalCost += probes * spc_random_page_cost / loop_count;
		else
			costs.indexTotalCost += probes * spc_random_page_cost;
	}

	/*
	 * An index whose pool failed to load (and has not changed since) would
	 * only raise that error again, and a scan that lacks an equality
	 * condition on a key column cannot hash its keys: price them above even
	 * a disabled seqscan.
	 */
	if (!pmhash_path_has_all_keys(path) ||
		pmhash_index_oid_unusable(path->indexinfo->indexoid))
		costs.indexTotalCost += PMHASH_UNUSABLE_COST;

	*indexStartupCost = costs.indexStartupCost;
	*indexTotalCost = costs.indexTotalCost;
	*indexSelectivity = costs.indexSelectivity;
	*indexCorrelation = 0.0;
	*indexPages = costs.numIndexPages;
}

/* the index access method handler */
PG_FUNCTION_INFO_V1(pmhash_handler);
Datum
pmhash_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *amroutine = makeNode(IndexAmRoutine);

	pmhash_require_preload();

	amroutine->amstrategies = PMHASH_NSTRATEGIES;
	amroutine->amsupport = PMHASH_NPROCS;
	amroutine->amoptsprocnum = 0;
	amroutine->amcanorder = false;
	amroutine->amcanorderbyop = false;
	amroutine->amcanbackward = false;
	amroutine->amcanunique = true;
	amroutine->amcanmulticol = true;
	amroutine->amoptionalkey = false;
	amroutine->amsearcharray = true;
	amroutine->amsearchnulls = false;
	amroutine->amstorage = false;
	amroutine->amclusterable = false;
	amroutine->ampredlocks = false;
	amroutine->amcanparallel = false;
	amroutine->amcaninclude = false;
	amroutine->amusemaintenanceworkmem = false;
	amroutine->amparallelvacuumoptions = VACUUM_OPTION_NO_PARALLEL;
	amroutine->amkeytype = InvalidOid;

	amroutine->ambuild = pmhashbuild;
	amroutine->ambuildempty = pmhashbuildempty;
	amroutine->aminsert = pmhashinsert;
	amroutine->ambulkdelete = pmhashbulkdelete;
	amroutine->amvacuumcleanup = pmhashvacuumcleanup;
	amroutine->amcanreturn = NULL;
	amroutine->amcostestimate = pmhashcostestimate;
	amroutine->amoptions = pmhashoptions;
	amroutine->amproperty = NULL;
	amroutine->ambuildphasename = pmhashbuildphasename;
	amroutine->amvalidate = pmhashvalidate;
	amroutine->amadjustmembers = pmhashadjustmembers;
	amroutine->ambeginscan = pmhashbeginscan;
	amroutine->amrescan = pmhashrescan;
	amroutine->amgettuple = pmhashgettuple;
	amroutine->amgetbitmap = pmhashgetbitmap;
	amroutine->amendscan = pmhashendscan;
	amroutine->ammarkpos = NULL;
	amroutine->amrestrpos = NULL;
	amroutine->amestimateparallelscan = NULL;
	amroutine->aminitparallelscan = NULL;
	amroutine->amparallelrescan = NULL;

	PG_RETURN_POINTER(amroutine);
}
