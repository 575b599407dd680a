/*-------------------------------------------------------------------------
 *
 * pmhashrecover.c
 *	  Rebuilding an index's shared state after a restart, one primary
 *	  segment at a time.
 *
 * pmhash_load (pmhashattach.c) reads only the segment words: it validates
 * the structure, builds the directory and the free list, and with
 * pmhash_log_recover below sorts the live slots of the backup log by the
 * primary segment their hash belongs to.  That is enough to make the index
 * usable: the entries of a primary segment and its overflow chain are read
 * (occupancy, fingerprints, and the D-bucket of log entries the segment
 * lacks) by whoever locks the segment first, through pmhash_lock_segment
 * (pmhashseglock.c), and by the prewarm worker in the background
 * (pmhash_load_all).  See "Recovery" in README.pmhash.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/rel.h"

#include "pmhash.h"

/*
 * Set while this backend finishes a segment load with the index lock
 * exclusive: placing the segment's entries locks segments itself, and must
 * not start that load again.
 */
bool		pmhash_loading_tail = false;

/* the backup-log slots recovery found live, sorted by segment */
static inline uint32 *
pmhash_reclist(PmhashShared *shared)
{
	return (uint32 *) pmhash_dsa_address(shared->reclist);
}

/* give back the sorted log slots (index lock exclusive, or the last user) */
void
pmhash_recover_free_list(PmhashShared *shared)
{
	if (DsaPointerIsValid(shared->reclist))
		pmhash_shared_free(shared, shared->reclist,
						   sizeof(uint32) * shared->reclen);
	shared->reclist = InvalidDsaPointer;
	shared->reclen = 0;
}

/* pmhash_log_recover's list of live log slots */
typedef struct PmhashRecFound
{
	const uint32 *dir;
	int			gd;
	uint64	   *found;			/* (segment << 32) | slot, in log order */
	uint32		nfound;
	uint32	   *count;			/* per segment */
} PmhashRecFound;

/* PmhLogFoundFn: note a live log slot under its primary segment */
static void
pmhash_rec_found(void *arg, uint32 logslot, const PmhEntry *e)
{
	PmhashRecFound *rf = (PmhashRecFound *) arg;
	uint32		segno = rf->dir[pmh_dir_index(e->hash, rf->gd)];

	rf->count[segno]++;
	rf->found[rf->nfound++] = ((uint64) segno << 32) | logslot;
}

/*
 * Set up the backup-log state after the segment words were loaded (index
 * lock exclusive, every primary segment not loaded yet): the core marks
 * every live log slot pending (pmh_wp_log_recover), and this lists them
 * under their primary segments.  Reads the log once; touches no segment.
 */
void
pmhash_log_recover(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	PmhashRecFound rf;
	PmhWriter	w;
	uint32	   *list;
	PmhashSegChunk *chunk = NULL;
	uint32		first = 0;
	uint32		i;

	Assert(idx->mode == LW_EXCLUSIVE);
	pmhash_log_init_shared(idx);

	/*
	 * (segment, slot) of every live slot, in log order, and the count per
	 * segment: in backend memory, which the pass reads sequentially but for
	 * the directory and the counts (4 bytes per segment, cache-sized), not
	 * the segments' shared slots.
	 */
	rf.dir = pmhash_dsa_address(shared->dir);
	rf.gd = shared->global_depth;
	rf.nfound = 0;
	rf.found = palloc_extended(sizeof(uint64) * pmhash_log_nlines(shared) *
							   PMH_BUCKET_SLOTS, MCXT_ALLOC_HUGE);
	rf.count = palloc_extended(sizeof(uint32) * shared->nsegments,
							   MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	pmhash_writer(idx, &w);
	(void) pmh_wp_log_recover(&w, pmhash_rec_found, &rf);
	shared->log_unverified = rf.nfound;
	if (rf.nfound == 0)
	{
		pfree(rf.count);
		pfree(rf.found);
		return;
	}

	/* a counting sort by segment into the shared list */
	shared->reclist = pmhash_shared_alloc(shared, sizeof(uint32) * rf.nfound);
	shared->reclen = rf.nfound;
	list = pmhash_reclist(shared);
	for (i = 0; i < shared->nsegments; i++)
	{
		uint32		n = rf.count[i];
		PmhashSegSlot *slot;

		if (pmhash_chunk_place((uint32) i) == 0)
			chunk = pmhash_seg_chunk(idx, pmhash_chunk_no((uint32) i));
		if (n == 0)
			continue;
		slot = &chunk->slot[pmhash_chunk_place((uint32) i)];
		slot->rec_first = first;
		slot->rec_count = n;
		rf.count[i] = first;
		first += n;
	}
	for (i = 0; i < rf.nfound; i++)
		list[rf.count[rf.found[i] >> 32]++] = (uint32) rf.found[i];
	pfree(rf.count);
	pfree(rf.found);
	ereport(DEBUG1,
			(errmsg_internal("pmhash index \"%s\": %u live backup-log entries to sort out",
							 RelationGetRelationName(idx->rel), rf.nfound)));
}

/*
 * Read the metadata of primary segment segno and its overflow chain from
 * the pool; returns the number of live entries.  The caller holds the
 * segment lock exclusively, or the index lock exclusively.
 */
static uint64
pmhash_load_chain(PmhashIndex *idx, uint32 segno)
{
	PmhPool    *pool = &idx->local->pool;
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	uint64		word = pmh_seg_header(pool, segno)->word;
	uint64		nlive;
	uint32		o;

	pmh_meta_load(pool, segno, word, meta);
	pmhash_seg_slot(idx, segno)->meta_valid = true;
	nlive = meta->nlive;
	for (o = meta->ovf_next; o != PMH_NO_SEGMENT;)
	{
		PmhSegMeta *om = pmhash_seg_meta(idx, o);

		pmh_meta_load(pool, o, word, om);
		pmhash_seg_slot(idx, o)->meta_valid = true;
		nlive += om->nlive;
		o = om->ovf_next;
	}
	return nlive;
}

/*
 * A segment's log slots were sorted out: count them off, and count the
 * segment as loaded.  The last one gives back the sorted list: nobody reads
 * it once every segment is loaded.
 */
static void
pmhash_segment_loaded(PmhashIndex *idx, PmhashSegSlot *slot)
{
	PmhashShared *shared = idx->shared;

	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	Assert(shared->log_unverified >= slot->rec_count);
	shared->log_unverified -= slot->rec_count;
	slot->rec_count = 0;
	if (pg_atomic_sub_fetch_u64(&shared->unloaded, 1) == 0)
	{
		pmhash_recover_free_list(shared);
		/* every "loaded" flag is set before lookups stop reading them */
		pg_write_barrier();
		shared->all_loaded = true;
	}
	LWLockRelease(&shared->loglock);
}

/*
 * Load primary segment segno with its segment lock exclusive and the index
 * lock shared.  The log entries the segment lacks go into its (empty)
 * D-bucket; the others are released.  When more are missing than a
 * D-bucket holds, placing them may need a split: returns false, and the
 * caller loads with the index lock exclusive.  Nobody else sees what was
 * done then: the metadata read into the segment's slots while "loaded" is
 * false (read again by the next load).
 */
bool
pmhash_load_segment_shared(PmhashIndex *idx, uint32 segno,
						   PmhashSegSlot *slot)
{
	PmhPool    *pool = &idx->local->pool;
	uint32		n = slot->rec_count;
	uint32	   *list = n > 0 ? pmhash_reclist(idx->shared) + slot->rec_first : NULL;
	uint32	   *released = NULL;
	uint32		missing[PMH_DBUCKET_SLOTS];
	uint32		nmissing = 0;
	uint32		nreleased = 0;
	uint64		nlive;
	PmhWriter	w;
	uint32		i;

	nlive = pmhash_load_chain(idx, segno);
	if (n > 0)
		released = palloc(sizeof(uint32) * n);
	pmhash_writer(idx, &w);
	if (!pmh_wp_sort_out(&w, segno, list, n, released, &nreleased,
						 missing, &nmissing))
	{
		pfree(released);
		return false;
	}

	/* a failing persist (log release while VACUUM runs) is a PANIC */
	START_CRIT_SECTION();
	Assert(pmhash_seg_meta(idx, segno)->npending == 0);
	for (i = 0; i < nmissing; i++)
	{
		const PmhEntry *e = pmh_log_entry(pool, missing[i]);

		pmh_pending_add(pmhash_seg_meta(idx, segno), e->hash, e->tag,
						missing[i]);
	}
	/* readers without the segment lock (pmh_wp_prefetch_placement) */
	pg_write_barrier();
	slot->loaded = true;
	pmhash_log_release(idx, released, (int) nreleased);
	END_CRIT_SECTION();

	pg_atomic_fetch_add_u64(&idx->shared->entries, nlive + nmissing);
	pmhash_segment_loaded(idx, slot);
	if (released)
		pfree(released);
	return true;
}

/* error context of a segment load */
typedef struct PmhashSegLoadContext
{
	PmhashIndex *idx;
	uint32		segno;
} PmhashSegLoadContext;

static void
pmhash_segment_load_context(void *arg)
{
	PmhashSegLoadContext *c = (PmhashSegLoadContext *) arg;
	char		path[MAXPGPATH];

	pmhash_pool_path(&c->idx->shared->key, path, sizeof(path));
	errcontext("loading segment %u of pool file \"%s\" of pmhash index \"%s\"",
			   c->segno, path, RelationGetRelationName(c->idx->rel));
}

/*
 * Load primary segment segno with the index lock exclusive, or finish a
 * load that failed: the log entries it lacks are placed as new ones would
 * be (relocating, splitting as needed), one at a time, each taken off the
 * segment's list once it is placed or released.  Placing can fail (out of
 * disk or shared memory in a split) with part of the list done: the index
 * then stays "blocked" on this segment -- its metadata and D-bucket are
 * valid, but entries of its list (which may belong to a half split off
 * meanwhile) are not in any D-bucket yet -- and every use of the index
 * finishes this load first (pmhash_lock_segment), failing the same way
 * until it can.  Nothing is discarded: other backends may hold on to the
 * shared state (a flush in progress, a VACUUM's mark).
 */
static void
pmhash_load_segment_exclusive(PmhashIndex *idx, uint32 segno)
{
	PmhashShared *shared = idx->shared;
	PmhashSegSlot *slot = pmhash_seg_slot(idx, segno);
	PmhashSegLoadContext c;
	ErrorContextCallback errcb;

	Assert(idx->mode == LW_EXCLUSIVE);

	/*
	 * Placing a segment's entries only ever locks that segment or its
	 * halves, which are loaded: a nested load would overwrite the blocked
	 * state of this one.
	 */
	if (pmhash_loading_tail)
		elog(ERROR, "pmhash index \"%s\": segment %u is not loaded while another segment's load is finished",
			 RelationGetRelationName(idx->rel), segno);
	if (!slot->loaded)
	{
		pg_atomic_fetch_add_u64(&shared->entries,
								pmhash_load_chain(idx, segno));
		/* as in pmhash_load_segment_shared */
		pg_write_barrier();
		slot->loaded = true;
	}
	shared->load_blocked = true;
	shared->blocked_segno = segno;

	c.idx = idx;
	c.segno = segno;
	errcb.callback = pmhash_segment_load_context;
	errcb.arg = &c;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	pmhash_loading_tail = true;
	PG_TRY();
	{
		while (slot->rec_count > 0)
		{
			uint32		logslot = pmhash_reclist(shared)[slot->rec_first];

			pmhash_log_recover_slot(idx, logslot);
			LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
			slot->rec_first++;
			slot->rec_count--;
			shared->log_unverified--;
			LWLockRelease(&shared->loglock);
		}
	}
	PG_FINALLY();
	{
		pmhash_loading_tail = false;
	}
	PG_END_TRY();
	error_context_stack = errcb.previous;
	shared->load_blocked = false;
	pmhash_segment_loaded(idx, slot);
}

/*
 * With the index lock exclusive: finish a blocked segment load (unless this
 * backend is the one finishing it), then load segment segno if it is not.
 */
void
pmhash_load_exclusive(PmhashIndex *idx, uint32 segno)
{
	if (idx->shared->load_blocked && !pmhash_loading_tail)
		pmhash_load_segment_exclusive(idx, idx->shared->blocked_segno);
	if (!pmhash_seg_slot(idx, segno)->loaded)
		pmhash_load_segment_exclusive(idx, segno);
}

/*
 * Load every primary segment not loaded yet (index lock in any mode; held
 * in the same mode on return).  With "yield", the index lock is let go
 * every PMHASH_LOAD_BATCH segments, so that a backend waiting for it
 * exclusively (a split) is not held up by a long load.
 */
#define PMHASH_LOAD_BATCH		256

void
pmhash_load_all(PmhashIndex *idx, bool yield)
{
	uint32		segno;
	uint32		done = 0;

	for (segno = 0; segno < idx->shared->nsegments; segno++)
	{
		PmhashSegSlot *slot;

		if (pg_atomic_read_u64(&idx->shared->unloaded) == 0)
			break;
		slot = pmhash_seg_slot(idx, segno);

		/*
		 * Only primaries are ever not loaded, or loaded with slots left
		 * (a blocked load).  "loaded" changes only to true under the index
		 * lock: pmhash_lock_segment looks again under the segment lock.
		 */
		if (slot->loaded && slot->rec_count == 0)
			continue;
		if (pmhash_lock_segment(idx, segno, LW_EXCLUSIVE))
			pmhash_unlock_segment(idx, segno);
		if (yield && ++done % PMHASH_LOAD_BATCH == 0)
			pmhash_relock_interruptible(idx);
	}
}
