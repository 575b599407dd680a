/*-------------------------------------------------------------------------
 *
 * pmhashunique.c
 *	  UNIQUE pmhash indexes: the check of aminsert and the duplicate check
 *	  of CREATE UNIQUE INDEX.
 *
 * Entries hold hashes, not keys.  So an entry with the hash of a new row's
 * key is only a candidate: its heap tuple is fetched, its key computed
 * (FormIndexDatum) and compared with the new key by the operator class's
 * equality operator.  Hash collisions between different keys therefore
 * never make a violation, and an entry that a crash left pointing at a
 * lost insert's slot never blocks anything: that slot holds nothing, or a
 * row whose key is compared like any other.
 *
 * Two inserters of one key must not both miss the other.  An insert into
 * a unique index takes the unique-check lock of its hash exclusively,
 * looks the hash up, judges the candidates and flushes its entry to the
 * pool, where other backends see it, before it lets go.  The second
 * inserter then finds the first's entry, sees its transaction in progress
 * through a dirty snapshot, releases the lock and waits for that
 * transaction, as btree's check does, and looks again.
 *
 * The lock (PmhashUniqueLock) is one of PMHASH_UNIQUE_LOCKS LWLocks, chosen
 * by index storage and hash, when judging runs no user code but the
 * operator class's equality (as btree's check runs its comparison under a
 * buffer lock).  An index on expressions or with a predicate computes
 * them for every candidate row, and such code can run long or wait for
 * heavyweight locks: there the lock is a heavyweight one on the hash, which
 * a waiter can be cancelled out of and the deadlock detector sees.
 *
 * The lock comes first in pmhash's lock order: under it the backend takes
 * the index and segment locks and heap buffer locks, and never waits for
 * a transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "parser/parsetree.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "storage/predicate.h"
#include "storage/latch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pmhash.h"

/* how long an insert sleeps between looks at an index being rebuilt */
#define PMHASH_REBUILD_POLL_MS	10

/* how long it waits for a worker to take a rebuild on before an ERROR */
#define PMHASH_REBUILD_CLAIM_MS	10000

/* candidates the first lookup has room for without palloc */
#define PMHASH_UNIQUE_CANDIDATES	16

/* suspect pairs a unique build collects before it checks them */
#define PMHASH_BUILD_SUSPECTS	1024

/*
 * What comparing keys with heap tuples needs; made once per statement
 * (kept in the IndexInfo's ii_AmCache) or per build.
 */
typedef struct PmhashUniqueState
{
	IndexInfo  *ii;				/* our own: its expressions run in estate */
	EState	   *estate;
	ExprState  *pred;			/* a partial index's predicate, or NULL */
	TupleTableSlot *slot;
	TupleTableSlot *slot2;		/* the second tuple of a build's pair */
	IndexFetchTableData *fetch;
	int			nkeys;
	FmgrInfo	eq[INDEX_MAX_KEYS];
} PmhashUniqueState;

/*
 * Advisory-lock key (the locktag's last field) of the heavyweight
 * unique-check locks: pg_locks shows them as advisory, objsubid 19797.
 */
#define PMHASH_UNIQUE_LOCK_KEY	0x4D55

/* the unique-check lock of one hash (see the file's header) */
typedef struct PmhashUniqueLock
{
	bool		heavy;			/* tag, else lw */
	LWLock	   *lw;
	LOCKTAG		tag;
} PmhashUniqueLock;

/* a candidate's verdict */
typedef enum PmhashUniqueVerdict
{
	PMHASH_UNIQUE_OK,			/* no live row has the key */
	PMHASH_UNIQUE_CONFLICT,		/* a live row has it */
	PMHASH_UNIQUE_WAIT			/* a running transaction decides */
} PmhashUniqueVerdict;

static LWLockPadded *pmhash_unique_locks = NULL;

/*
 * The unique-check lock of a hash in an index storage: heavyweight when
 * judging a candidate runs the index's expressions or predicate (ii).
 */
static void
pmhash_unique_lock_init(PmhashUniqueLock *ul, Relation index, uint64 hash,
						const IndexInfo *ii)
{
	ul->heavy = ii->ii_Expressions != NIL || ii->ii_Predicate != NIL;
	if (ul->heavy)
	{
		ul->lw = NULL;
		SET_LOCKTAG_ADVISORY(ul->tag, MyDatabaseId, index->rd_node.relNode,
							 (uint32) (hash ^ (hash >> 32)),
							 PMHASH_UNIQUE_LOCK_KEY);
	}
	else
	{
		uint64		h = pmhash_hash_combine(hash, index->rd_node.relNode);

		if (pmhash_unique_locks == NULL)
			pmhash_unique_locks = GetNamedLWLockTranche(PMHASH_UNIQUE_TRANCHE);
		ul->lw = &pmhash_unique_locks[h % PMHASH_UNIQUE_LOCKS].lock;
	}
}

/* take a unique-check lock; an ERROR (or the abort) lets it go */
static void
pmhash_unique_lock_acquire(PmhashUniqueLock *ul)
{
	if (ul->heavy)
		(void) LockAcquire(&ul->tag, ExclusiveLock, false, false);
	else
		LWLockAcquire(ul->lw, LW_EXCLUSIVE);
}

/* let a unique-check lock go */
static void
pmhash_unique_lock_release(PmhashUniqueLock *ul)
{
	if (ul->heavy)
		LockRelease(&ul->tag, ExclusiveLock, false);
	else
		LWLockRelease(ul->lw);
}

/*
 * Make what key comparisons against the heap need, in the current memory
 * context.  The slots get a copy of the heap's tuple descriptor, which no
 * resource owner tracks (the state outlives the command that made it),
 * with its defaults: a row written before ADD COLUMN ... DEFAULT reads the
 * column's missing value from there.
 */
static PmhashUniqueState *
pmhash_unique_state_make(Relation index, Relation heap)
{
	PmhashUniqueState *us = palloc0(sizeof(PmhashUniqueState));
	TupleDesc	desc = CreateTupleDescCopyConstr(RelationGetDescr(heap));
	int			i;

	us->ii = BuildIndexInfo(index);
	us->estate = CreateExecutorState();
	if (us->ii->ii_Predicate != NIL)
		us->pred = ExecPrepareQual(us->ii->ii_Predicate, us->estate);
	us->slot = MakeSingleTupleTableSlot(desc, table_slot_callbacks(heap));
	us->slot2 = MakeSingleTupleTableSlot(desc, table_slot_callbacks(heap));
	us->fetch = table_index_fetch_begin(heap);
	us->nkeys = IndexRelationGetNumberOfKeyAttributes(index);
	for (i = 0; i < us->nkeys; i++)
	{
		Oid			type = index->rd_opcintype[i];
		Oid			op = get_opfamily_member(index->rd_opfamily[i], type, type,
											 PMHASH_EQUAL_STRATEGY);

		if (!OidIsValid(op))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("missing operator %d(%u,%u) in operator family of index \"%s\"",
							PMHASH_EQUAL_STRATEGY, type, type,
							RelationGetRelationName(index)),
					 errhint("A unique pmhash index compares keys with its operator class's equality operator.")));
		fmgr_info(get_opcode(op), &us->eq[i]);
	}
	return us;
}

/* the state of aminsert's checks, made on the first in a statement */
static PmhashUniqueState *
pmhash_unique_state(Relation index, Relation heap, IndexInfo *indexInfo)
{
	MemoryContext old;

	if (indexInfo->ii_AmCache != NULL)
		return (PmhashUniqueState *) indexInfo->ii_AmCache;
	old = MemoryContextSwitchTo(indexInfo->ii_Context);
	indexInfo->ii_AmCache = pmhash_unique_state_make(index, heap);
	MemoryContextSwitchTo(old);
	return (PmhashUniqueState *) indexInfo->ii_AmCache;
}

/* free a build's state (aminsert's goes with its statement's memory) */
static void
pmhash_unique_state_free(PmhashUniqueState *us)
{
	table_index_fetch_end(us->fetch);
	ExecDropSingleTupleTableSlot(us->slot);
	ExecDropSingleTupleTableSlot(us->slot2);
	FreeExecutorState(us->estate);
}

/*
 * Fetch the row at tid that snapshot sees (following a HOT chain) into
 * slot and compute its key into values/isnull.  Returns false if the
 * snapshot sees no row there, and then sets *all_dead (if not NULL) to
 * whether the chain is dead to every snapshot.  The caller clears the
 * slot.
 */
static bool
pmhash_unique_fetch_key(PmhashUniqueState *us, TupleTableSlot *slot,
						ItemPointer tid, Snapshot snapshot, Datum *values,
						bool *isnull, bool *all_dead)
{
	ItemPointerData chain = *tid;
	bool		call_again = false;

	if (!table_index_fetch_tuple(us->fetch, &chain, snapshot, slot,
								 &call_again, all_dead))
		return false;
	GetPerTupleExprContext(us->estate)->ecxt_scantuple = slot;
	FormIndexDatum(us->ii, slot, us->estate, values, isnull);
	return true;
}

/*
 * Are two keys equal by the operator class?  NULLs equal each other only in
 * a NULLS NOT DISTINCT index (elsewhere a key with a NULL is never
 * checked).
 */
static bool
pmhash_unique_keys_equal(Relation index, PmhashUniqueState *us,
						 const Datum *a, const bool *anull,
						 const Datum *b, const bool *bnull)
{
	int			i;

	for (i = 0; i < us->nkeys; i++)
	{
		if (anull[i] || bnull[i])
		{
			if (anull[i] != bnull[i])
				return false;
			continue;
		}
		if (!DatumGetBool(FunctionCall2Coll(&us->eq[i],
											index->rd_indcollation[i],
											a[i], b[i])))
			return false;
	}
	return true;
}

/*
 * Judge the candidates (TIDs of entries with the new key's hash) as
 * btree's check judges the entries with its key: a row that a dirty
 * snapshot sees with an equal key is a conflict if its inserting and
 * deleting transactions are over, or else makes the caller wait for them
 * (*xwait, *token) unless partial (a deferred check's first look, which
 * never waits).  A row that fails a partial index's predicate is none of
 * its business (a crash can leave an entry whose slot such a row took).
 * The new row's own TID is skipped: in UNIQUE_CHECK_EXISTING
 * its entry is among them, and elsewhere an entry left by a crash may
 * name its slot.  A conflict does not count when the new row is itself
 * dead by now (CREATE INDEX CONCURRENTLY's validation inserts such rows).
 * The candidates whose rows are dead to every snapshot move to the front
 * of tids, *ndead of them, for the caller to hint (as btree's check marks
 * such items LP_DEAD).
 */
static PmhashUniqueVerdict
pmhash_unique_judge(PmhashUniqueState *us, Relation index, Relation heap,
					ItemPointerData *tids, int n, ItemPointer newtid,
					const Datum *values, const bool *isnull, bool partial,
					TransactionId *xwait, uint32 *token, int *ndead)
{
	BlockNumber nblocks = pmhash_heap_length_hint(heap);
	PmhashUniqueVerdict verdict = PMHASH_UNIQUE_OK;
	int			i;

	*ndead = 0;
	for (i = 0; i < n && verdict == PMHASH_UNIQUE_OK; i++)
	{
		ItemPointerData tid = tids[i];
		SnapshotData dirty;
		Datum		cvalues[INDEX_MAX_KEYS];
		bool		cisnull[INDEX_MAX_KEYS];
		bool		all_dead = false;

		if (ItemPointerEquals(&tid, newtid))
			continue;
		/* a crash can leave entries past a heap that VACUUM truncated */
		if (!pmhash_heap_has_block(heap, &nblocks,
								   ItemPointerGetBlockNumber(&tid)))
			continue;
		InitDirtySnapshot(dirty);
		if (!pmhash_unique_fetch_key(us, us->slot, &tid, &dirty,
									 cvalues, cisnull, &all_dead))
		{
			/* (*ndead <= i: the candidates not judged yet stay) */
			if (all_dead)
				tids[(*ndead)++] = tid;
			continue;
		}
		if ((us->pred == NULL ||
			 ExecQual(us->pred, GetPerTupleExprContext(us->estate))) &&
			pmhash_unique_keys_equal(index, us, values, isnull,
									 cvalues, cisnull))
		{
			if (partial)
				verdict = PMHASH_UNIQUE_CONFLICT;
			else if (TransactionIdIsValid(dirty.xmin) ||
					 TransactionIdIsValid(dirty.xmax))
			{
				*xwait = TransactionIdIsValid(dirty.xmin) ? dirty.xmin :
					dirty.xmax;
				*token = dirty.speculativeToken;
				verdict = PMHASH_UNIQUE_WAIT;
			}
			else
			{
				ItemPointerData self = *newtid;

				verdict = PMHASH_UNIQUE_CONFLICT;
				/* (clear the slot first: the fetch state is shared) */
				ExecClearTuple(us->slot);
				ResetPerTupleExprContext(us->estate);
				if (!table_index_fetch_tuple_check(heap, &self, SnapshotSelf,
												   NULL))
					verdict = PMHASH_UNIQUE_OK;
				break;
			}
		}
		ExecClearTuple(us->slot);
		ResetPerTupleExprContext(us->estate);
	}
	ExecClearTuple(us->slot);
	ResetPerTupleExprContext(us->estate);
	table_index_fetch_reset(us->fetch);
	return verdict;
}

/*
 * Wait until the rebuild of the index's pool from the heap has scanned the
 * heap (rebuild_scanned): a unique check must see every row's entry.  The
 * worker holds the rebuild's heavyweight lock (pmhash_rebuild_locktag)
 * until then, so the wait is a wait for that lock, which the deadlock
 * detector sees (the worker waits for the table's lock at every chunk, so
 * a transaction that waits for it can be waited for in turn).  It lets
 * the lock go before it waits for older snapshots, the statement's of a
 * waiting insert among them.  An ERROR instead of a wait: when this
 * transaction holds an ACCESS EXCLUSIVE lock on the table (heap, if
 * given), which the rebuild cannot get past; when a worker gave the
 * rebuild up twice while this insert waited (a deadlock that the worker
 * was the one to detect); and when no worker takes the rebuild on for
 * PMHASH_REBUILD_CLAIM_MS (no worker slot free, say).
 */
void
pmhash_wait_rebuilt(Relation index, Relation heap)
{
	TimestampTz unclaimed_since = 0;
	int			given_up = 0;
	bool		waited = false;

	for (;;)
	{
		PmhashIndex idx;
		bool		rebuilding;
		bool		claimed;
		LOCKTAG		tag;
		const char *why = NULL;

		pmhash_attach(index, LW_SHARED, &idx);
		rebuilding = pmhash_rebuild_unscanned(idx.shared);
		claimed = idx.shared->rebuild_pid != 0;
		pmhash_detach(&idx);
		if (!rebuilding)
			return;
		if (waited && !claimed)
			given_up++;
		waited = false;
		if (heap != NULL && CheckRelationLockedByMe(heap, AccessExclusiveLock, false))
			why = "this transaction's lock on the table holds the rebuild up";
		else if (given_up >= 2)
			why = "the rebuild was given up while this insert waited for it";
		else if (claimed)
		{
			unclaimed_since = 0;
			pmhash_rebuild_locktag(&tag, RelationGetRelid(index));
			(void) LockAcquire(&tag, ShareLock, false, false);
			LockRelease(&tag, ShareLock, false);
			waited = true;
		}
		else if (unclaimed_since == 0)
			unclaimed_since = GetCurrentTimestamp();
		else if (TimestampDifferenceExceeds(unclaimed_since,
											GetCurrentTimestamp(),
											PMHASH_REBUILD_CLAIM_MS))
			why = "no background worker has taken the rebuild on";
		if (why != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("pmhash index \"%s\" is being rebuilt",
							RelationGetRelationName(index)),
					 errdetail("Its unique or exclusion check must wait for the rebuild, and %s.",
							   why),
					 errhint("Retry when pmhash_rebuild_progress('%s') no longer reports it rebuilding; the rebuild needs a free slot of max_worker_processes.",
							 RelationGetRelationName(index))));
		if (waited)
			continue;
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 PMHASH_REBUILD_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The TIDs of the entries with this hash, into *tids (room for cap, at
 * most PMHASH_UNIQUE_CANDIDATES; replaced by a palloc'd array when short).
 * Index lock held.
 */
static int
pmhash_unique_candidates(PmhashIndex *idx, uint64 hash,
						 ItemPointerData **tids, int cap)
{
	uint64		buf[PMHASH_UNIQUE_CANDIDATES];
	uint64	   *tags;
	int			n;
	int			i;

	Assert(cap <= PMHASH_UNIQUE_CANDIDATES);
	n = pmhash_lookup_hash_all(idx, hash, buf, cap, &tags);
	if (tags != buf)
		*tids = palloc(sizeof(ItemPointerData) * n);
	for (i = 0; i < n; i++)
		ItemPointerSet(&(*tids)[i], pmh_tag_block(tags[i]),
					   pmh_tag_offset(tags[i]));
	if (tags != buf)
		pfree(tags);
	return n;
}

/* raise a unique violation of the new key, as btree words it */
static void
pmhash_unique_violation(Relation index, Relation heap, const Datum *values,
						const bool *isnull)
{
	char	   *key_desc = BuildIndexValueDescription(index, (Datum *) values,
													  (bool *) isnull);

	ereport(ERROR,
			(errcode(ERRCODE_UNIQUE_VIOLATION),
			 errmsg("duplicate key value violates unique constraint \"%s\"",
					RelationGetRelationName(index)),
			 key_desc ? errdetail("Key %s already exists.", key_desc) : 0,
			 errtableconstraint(heap, RelationGetRelationName(index))));
}

/*
 * aminsert of a unique index: check the key and (except for
 * UNIQUE_CHECK_EXISTING, whose row is in the index already) add the entry,
 * flushed to the pool before the unique-check lock is released.  Returns
 * whether the key is known unique; only UNIQUE_CHECK_PARTIAL returns
 * false (the executor then checks again at commit, or the speculative
 * insertion of an INSERT ... ON CONFLICT backs out); the others raise the
 * violation.
 */
bool
pmhash_unique_insert(Relation index, uint64 hash, Datum *values,
					 bool *isnull, ItemPointer tid, Relation heap,
					 IndexUniqueCheck check, IndexInfo *indexInfo)
{
	PmhashUniqueLock lock;
	bool		partial = check == UNIQUE_CHECK_PARTIAL;
	PmhashUniqueState *us;

	/* catalog lookups and memory for the first row, outside the lock */
	us = pmhash_unique_state(index, heap, indexInfo);
	pmhash_unique_lock_init(&lock, index, hash, us->ii);

	for (;;)
	{
		ItemPointerData stack[PMHASH_UNIQUE_CANDIDATES];
		ItemPointerData *tids = stack;
		PmhashUniqueVerdict verdict = PMHASH_UNIQUE_OK;
		TransactionId xwait = InvalidTransactionId;
		uint32		token = 0;
		PmhashIndex idx;
		int			n;
		bool		hint_ok;
		uint64		vacuums;

		if (check != UNIQUE_CHECK_EXISTING)
			pmhash_log_settle_index(index, heap, tid);
		pmhash_unique_lock_acquire(&lock);
		pmhash_attach(index, LW_SHARED, &idx);
		if (unlikely(pmhash_rebuild_unscanned(idx.shared)))
		{
			/* the pool lacks entries until the rebuild's heap scan ends */
			pmhash_detach(&idx);
			pmhash_unique_lock_release(&lock);
			pmhash_wait_rebuilt(index, heap);
			continue;
		}
		hint_ok = pmhash_hint_allowed(idx.shared, true, &vacuums);
		n = pmhash_unique_candidates(&idx, hash, &tids,
									 PMHASH_UNIQUE_CANDIDATES);
		if (n > 0)
		{
			int			ndead;

			/* heap reads under the index lock would hold up splits */
			pmhash_detach(&idx);
			verdict = pmhash_unique_judge(us, index, heap, tids, n, tid,
										  values, isnull, partial,
										  &xwait, &token, &ndead);
			if (verdict == PMHASH_UNIQUE_WAIT)
			{
				if (tids != stack)
					pfree(tids);
				pmhash_unique_lock_release(&lock);
				if (token != 0)
					SpeculativeInsertionWait(xwait, token);
				else
					XactLockTableWait(xwait, heap, tid, XLTW_InsertIndex);
				continue;
			}
			if (verdict == PMHASH_UNIQUE_CONFLICT && !partial)
			{
				pmhash_unique_lock_release(&lock);

				/*
				 * as btree does: a serializable transaction that read the
				 * key gets the serialization failure the violation would
				 * mask, now that the other inserter has committed
				 */
				CheckForSerializableConflictIn(index, NULL,
											   InvalidBlockNumber);
				pmhash_unique_violation(index, heap, values, isnull);
			}
			pmhash_attach(index, LW_SHARED, &idx);
			/* candidates dead to all: later checks of the key skip them */
			if (hint_ok)
				(void) pmhash_hint_dead_hash(&idx, hash, tids, ndead, vacuums);
			if (tids != stack)
				pfree(tids);
			if (check == UNIQUE_CHECK_EXISTING)
			{
				pmhash_detach(&idx);
				pmhash_unique_lock_release(&lock);
				return true;
			}
		}
		if (check != UNIQUE_CHECK_EXISTING)
		{
			idx.heap = heap;
			pmhash_log_append(&idx, hash, tid, true);
		}
		pmhash_detach(&idx);
		pmhash_unique_lock_release(&lock);
		return verdict == PMHASH_UNIQUE_OK;
	}
}

/*
 * CREATE UNIQUE INDEX: a pair of rows whose entries have the same hash,
 * found as the build inserted the second.  Checked after the scan, or when
 * PMHASH_BUILD_SUSPECTS have gathered.
 */
typedef struct PmhashSuspect
{
	ItemPointerData a;
	ItemPointerData b;
} PmhashSuspect;

struct PmhashBuildUnique
{
	Relation	index;
	Relation	heap;
	PmhashUniqueState *us;		/* made on first need */
	PmhashSuspect *pairs;
	int			n;
	int			cap;
};

/* the duplicate check of a unique build of index on heap */
PmhashBuildUnique *
pmhash_build_unique_begin(Relation index, Relation heap)
{
	PmhashBuildUnique *bu = palloc0(sizeof(PmhashBuildUnique));

	bu->index = index;
	bu->heap = heap;
	bu->cap = PMHASH_BUILD_SUSPECTS;
	bu->pairs = palloc(sizeof(PmhashSuspect) * bu->cap);
	return bu;
}

/*
 * Check the pairs gathered so far.  A pair is a duplicate if both rows
 * are live to this transaction (SnapshotSelf: the build either waited for
 * other inserters or, concurrently, leaves rows that change later to the
 * validation's aminsert) and their keys are equal; the build then fails
 * as btree's does.
 */
void
pmhash_build_unique_check(PmhashBuildUnique *bu)
{
	int			i;

	if (bu->n == 0)
		return;
	if (bu->us == NULL)
		bu->us = pmhash_unique_state_make(bu->index, bu->heap);
	for (i = 0; i < bu->n; i++)
	{
		PmhashUniqueState *us = bu->us;
		Datum		av[INDEX_MAX_KEYS];
		bool		an[INDEX_MAX_KEYS];
		Datum		bv[INDEX_MAX_KEYS];
		bool		bn[INDEX_MAX_KEYS];
		bool		dup = false;

		if (ItemPointerEquals(&bu->pairs[i].a, &bu->pairs[i].b))
			continue;
		if (pmhash_unique_fetch_key(us, us->slot, &bu->pairs[i].a,
									SnapshotSelf, av, an, NULL) &&
			pmhash_unique_fetch_key(us, us->slot2, &bu->pairs[i].b,
									SnapshotSelf, bv, bn, NULL))
			dup = pmhash_unique_keys_equal(bu->index, us, av, an, bv, bn);
		if (dup)
		{
			char	   *key_desc = BuildIndexValueDescription(bu->index,
															  av, an);

			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("could not create unique index \"%s\"",
							RelationGetRelationName(bu->index)),
					 key_desc ? errdetail("Key %s is duplicated.", key_desc) :
					 errdetail("Duplicate keys exist."),
					 errtableconstraint(bu->heap,
										RelationGetRelationName(bu->index))));
		}
		ExecClearTuple(us->slot);
		ExecClearTuple(us->slot2);
		ResetPerTupleExprContext(us->estate);
		CHECK_FOR_INTERRUPTS();
	}
	table_index_fetch_reset(bu->us->fetch);
	bu->n = 0;
}

/*
 * Note that the live row at tid has the same hash as the rows whose
 * entries are tags[0..n-1].  The caller holds the index lock; once it has
 * let go, it checks the pairs (pmhash_build_unique_check) if this returned
 * true.
 */
bool
pmhash_build_unique_note(PmhashBuildUnique *bu, ItemPointer tid,
						 const uint64 *tags, int n)
{
	int			i;

	if (bu->n + n > bu->cap)
	{
		bu->cap = Max(bu->cap * 2, bu->n + n);
		bu->pairs = repalloc_huge(bu->pairs, sizeof(PmhashSuspect) * bu->cap);
	}
	for (i = 0; i < n; i++)
	{
		PmhashSuspect *p = &bu->pairs[bu->n++];

		p->a = *tid;
		ItemPointerSet(&p->b, pmh_tag_block(tags[i]), pmh_tag_offset(tags[i]));
	}
	return bu->n >= PMHASH_BUILD_SUSPECTS;
}

/* end a unique build's check: the last pairs, then the state */
void
pmhash_build_unique_end(PmhashBuildUnique *bu)
{
	pmhash_build_unique_check(bu);
	if (bu->us != NULL)
		pmhash_unique_state_free(bu->us);
	pfree(bu->pairs);
	pfree(bu);
}

/* the access method of a relation, or InvalidOid */
static Oid
pmhash_rel_am(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			am = InvalidOid;

	if (HeapTupleIsValid(tuple))
	{
		am = ((Form_pg_class) GETSTRUCT(tuple))->relam;
		ReleaseSysCache(tuple);
	}
	return am;
}

/*
 * Give the IndexInfo of a unique pmhash index what INSERT ... ON CONFLICT
 * needs of an arbiter: its uniqueness and, per key column, the equality
 * operator, its function and its strategy (the arbiter's scan keys and
 * recheck use them).
 */
static void
pmhash_upsert_fill(Relation index, IndexInfo *ii)
{
	int			nkeys = IndexRelationGetNumberOfKeyAttributes(index);
	int			i;

	ii->ii_UniqueOps = palloc(sizeof(Oid) * nkeys);
	ii->ii_UniqueProcs = palloc(sizeof(Oid) * nkeys);
	ii->ii_UniqueStrats = palloc(sizeof(uint16) * nkeys);
	for (i = 0; i < nkeys; i++)
	{
		Oid			type = index->rd_opcintype[i];
		Oid			op = get_opfamily_member(index->rd_opfamily[i], type, type,
											 PMHASH_EQUAL_STRATEGY);

		if (!OidIsValid(op))
			elog(ERROR, "missing operator %d(%u,%u) in opfamily %u",
				 PMHASH_EQUAL_STRATEGY, type, type, index->rd_opfamily[i]);
		ii->ii_UniqueOps[i] = op;
		ii->ii_UniqueProcs[i] = get_opcode(op);
		ii->ii_UniqueStrats[i] = PMHASH_EQUAL_STRATEGY;
	}
}

/*
 * Open the indexes of an ON CONFLICT insert's result relation as the
 * executor would at its first insert (ExecInsert, through ExecOpenIndices),
 * if it has a pmhash index.  PostgreSQL 15 sets up every unique
 * index of such a relation for speculative insertion with btree's
 * strategy numbers and refuses any other access method
 * (BuildSpeculativeIndexInfo).  So this does what ExecOpenIndices does,
 * but gives a unique pmhash index what an arbiter needs itself
 * (pmhash_upsert_fill).  The executor then finds the indexes open, and
 * uses and closes them as its own.
 */
static void
pmhash_upsert_open_indexes(EState *estate, ResultRelInfo *rri)
{
	Relation	heap = rri->ri_RelationDesc;
	Oid			am = get_index_am_oid("pmhash", true);
	List	   *indexes;
	ListCell   *lc;
	MemoryContext old;
	bool		ours = false;
	int			n = 0;

	if (!heap->rd_rel->relhasindex || rri->ri_IndexRelationDescs != NULL)
		return;
	/* (the catalog's word is enough to choose: nothing is opened twice) */
	indexes = RelationGetIndexList(heap);
	foreach(lc, indexes)
		ours |= pmhash_rel_am(lfirst_oid(lc)) == am;
	if (!ours)
	{
		list_free(indexes);
		return;
	}

	old = MemoryContextSwitchTo(estate->es_query_cxt);
	rri->ri_NumIndices = list_length(indexes);
	rri->ri_IndexRelationDescs = palloc(sizeof(Relation) * rri->ri_NumIndices);
	rri->ri_IndexRelationInfo = palloc(sizeof(IndexInfo *) * rri->ri_NumIndices);
	n = 0;
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), RowExclusiveLock);
		IndexInfo  *ii = BuildIndexInfo(index);

		if (ii->ii_Unique && index->rd_indam->aminsert == pmhashinsert)
			pmhash_upsert_fill(index, ii);
		else if (ii->ii_Unique)
			BuildSpeculativeIndexInfo(index, ii);
		rri->ri_IndexRelationDescs[n] = index;
		rri->ri_IndexRelationInfo[n] = ii;
		n++;
	}
	MemoryContextSwitchTo(old);
	list_free(indexes);
}

/* planstate walker: open the indexes of ON CONFLICT inserts (see above) */
static bool
pmhash_upsert_walker(PlanState *ps, void *context)
{
	if (ps == NULL)
		return false;
	if (IsA(ps, ModifyTableState) &&
		((ModifyTable *) ps->plan)->onConflictAction != ONCONFLICT_NONE)
	{
		ModifyTableState *mt = (ModifyTableState *) ps;
		int			r;

		for (r = 0; r < mt->mt_nrels; r++)
			pmhash_upsert_open_indexes(ps->state, &mt->resultRelInfo[r]);
	}
	return planstate_tree_walker(ps, pmhash_upsert_walker, context);
}

/*
 * ExecutorStart of a statement that runs INSERT ... ON CONFLICT: after the
 * executor's own start, open the indexes of the tables it inserts into
 * that have a unique pmhash index (pmhash_upsert_open_indexes).  Tuple
 * routing into partitions opens their indexes during the run: there
 * PostgreSQL's refusal stands.
 */
void
pmhash_upsert_executor_start(QueryDesc *queryDesc, int eflags,
							 void (*start) (QueryDesc *, int))
{
	ListCell   *lc;

	start(queryDesc, eflags);
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	(void) pmhash_upsert_walker(queryDesc->planstate, NULL);
	foreach(lc, queryDesc->estate->es_subplanstates)
		(void) pmhash_upsert_walker((PlanState *) lfirst(lc), NULL);
}

/*
 * ProcessUtility, before ALTER TABLE runs: refuse REPLICA IDENTITY USING
 * INDEX of a pmhash index.  PostgreSQL accepts any unique index there, but
 * its logical replication (PostgreSQL 15) looks a subscriber's rows up
 * through the replica identity index with btree's strategy numbers: every
 * UPDATE and DELETE it applies would fail, and the subscription would stop
 * there.  What PostgreSQL itself checks (the table, the index) it reports.
 */
void
pmhash_refuse_replica_identity(AlterTableStmt *stmt)
{
	Oid			relid = InvalidOid;
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);
		ReplicaIdentityStmt *ri = (ReplicaIdentityStmt *) cmd->def;
		Oid			indexoid;

		if (cmd->subtype != AT_ReplicaIdentity ||
			ri->identity_type != REPLICA_IDENTITY_INDEX)
			continue;
		if (!OidIsValid(relid))
			relid = RangeVarGetRelid(stmt->relation, NoLock, true);
		if (!OidIsValid(relid))
			return;
		indexoid = get_relname_relid(ri->name, get_rel_namespace(relid));
		if (!OidIsValid(indexoid) ||
			pmhash_rel_am(indexoid) != get_index_am_oid("pmhash", true))
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pmhash index \"%s\" cannot be a replica identity",
						ri->name),
				 errdetail("PostgreSQL's logical replication looks rows up through the replica identity index with btree's strategy numbers: a subscriber could not apply updates and deletes through it."),
				 errhint("Use a unique btree index, or the primary key, as the replica identity.")));
	}
}
