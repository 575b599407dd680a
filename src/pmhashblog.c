/*-------------------------------------------------------------------------
 *
 * pmhashblog.c
 *	  The backup log and the D-buckets, server side: the shared memory of
 *	  the backup log's line states, and the PostgreSQL locks, errors and
 *	  segment allocation through which the index drives the core's
 *	  write-path protocol (src/core/pmh_writepath.c).
 *
 * A flushed collecting log (pmhashxact.c) comes here: its entries are
 * written to the backend's own backup-log line and persisted with one
 * fence, then put into the D-buckets of their segments, where every
 * backend's scans find them.  A full D-bucket is relocated into its
 * segment (pmh_relocate), splitting it or adding an overflow segment when
 * there is no room (pmhashsplit.c); only then are the log slots it held
 * released.  The protocol itself -- which slots are pending, when a line
 * may be reused, what VACUUM must clear -- is the core's; this file
 * supplies its callbacks (PmhWriteOps) and turns its failures into
 * errors.  See "The write path, file by file" in
 * README.pmhash.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/rel.h"

#include "pmhash.h"

/* chunks of the fixed log's lines */
#define PMHASH_LOG_FIXED_CHUNKS	(PMH_LOG_LINES / PMH_LOG_CHUNK)

/* room for log extensions the tables of a new index's log start with */
#define PMHASH_LOG_MIN_CAP		4

/*
 * Bytes of the log's tables with room for cap extensions: one allocation,
 * the chunk table, then the map of extensions to segments
 */
static inline size_t
pmhash_log_tables_size(uint32 cap)
{
	return sizeof(dsa_pointer) * (PMHASH_LOG_FIXED_CHUNKS + cap) +
		sizeof(uint32) * cap;
}

/*
 * Allocate the log's tables with room for cap extensions, setting every
 * chunk pointer invalid and every extension to no segment; *exts is the
 * map's pointer.  An ERROR if there is no memory for them.
 */
static dsa_pointer
pmhash_log_tables_alloc(PmhashShared *shared, uint32 cap, dsa_pointer *exts)
{
	dsa_pointer dp = pmhash_shared_alloc(shared, pmhash_log_tables_size(cap));
	dsa_pointer *chunks = pmhash_dsa_address(dp);
	uint32	   *map;
	uint32		i;

	for (i = 0; i < PMHASH_LOG_FIXED_CHUNKS + cap; i++)
		chunks[i] = InvalidDsaPointer;
	*exts = dp + sizeof(dsa_pointer) * (PMHASH_LOG_FIXED_CHUNKS + cap);
	map = pmhash_dsa_address(*exts);
	for (i = 0; i < cap; i++)
		map[i] = PMH_NO_SEGMENT;
	return dp;
}

/* the states of lines [64 c, 64 c + 64) */
static inline PmhLogChunk *
pmhash_log_chunk(PmhashShared *shared, uint32 c)
{
	dsa_pointer *chunks = pmhash_dsa_address(shared->logchunks);

	return (PmhLogChunk *) pmhash_dsa_address(chunks[c]);
}

/* ---------------------------------------------------------------------
 * The protocol's callbacks (PmhWriteOps); their argument is the
 * PmhashIndex the writer works on.
 * ---------------------------------------------------------------------
 */

static void
pmhash_wp_log_lock(void *arg)
{
	pmhash_lock_short(&((PmhashIndex *) arg)->shared->loglock);
}

static void
pmhash_wp_log_unlock(void *arg)
{
	LWLockRelease(&((PmhashIndex *) arg)->shared->loglock);
}

static PmhLogChunk *
pmhash_wp_log_chunk(void *arg, uint32 c)
{
	return pmhash_log_chunk(((PmhashIndex *) arg)->shared, c);
}

static bool
pmhash_wp_index_exclusive(void *arg)
{
	return ((PmhashIndex *) arg)->mode == LW_EXCLUSIVE;
}

static void
pmhash_wp_relock(void *arg, bool exclusive)
{
	pmhash_relock((PmhashIndex *) arg, exclusive ? LW_EXCLUSIVE : LW_SHARED);
}

static uint32
pmhash_wp_lock_hash(void *arg, uint64 hash, PmhSegMeta **meta)
{
	PmhashIndex *idx = (PmhashIndex *) arg;
	uint32		segno = pmhash_lock_hash(idx, hash, LW_EXCLUSIVE);

	*meta = pmhash_seg_meta(idx, segno);
	return segno;
}

static void
pmhash_wp_unlock_segment(void *arg, uint32 segno)
{
	pmhash_unlock_segment((PmhashIndex *) arg, segno);
}

/*
 * For prefetching only: any mode of the index lock keeps the overflow
 * chains still and the directory naming primary segments (a split under a
 * segment lock may change an entry meanwhile, and then a hint is for the
 * wrong segment).
 */
static uint32
pmhash_wp_lookup_segment(void *arg, uint64 hash, PmhSegMeta **meta)
{
	PmhashIndex *idx = (PmhashIndex *) arg;
	uint32		segno = pmhash_lookup_segment(idx, hash);

	pmh_prefetch_write(&pmhash_seg_slot(idx, segno)->lock);
	*meta = pmhash_seg_meta(idx, segno);
	return segno;
}

/* is the segment's metadata set (loaded since the restart)? */
static bool
pmhash_wp_segment_ready(void *arg, uint32 segno)
{
	PmhashSegSlot *slot = pmhash_seg_slot((PmhashIndex *) arg, segno);
	bool		ready = slot->loaded && slot->meta_valid;

	/* the metadata was written before "loaded" (pmhashrecover.c) */
	pg_read_barrier();
	return ready;
}

static bool
pmhash_wp_split_shared(void *arg, uint32 segno)
{
	return pmhash_split_segment_shared((PmhashIndex *) arg, segno);
}

static bool
pmhash_wp_split(void *arg, uint32 segno)
{
	pmhash_split_segment((PmhashIndex *) arg, segno);
	return true;
}

static bool
pmhash_wp_add_overflow(void *arg, uint32 segno)
{
	pmhash_add_overflow_segment((PmhashIndex *) arg, segno);
	return true;
}

/*
 * Make the tables of the log's extensions (the chunk table and the map of
 * extensions to segments) room for one more, by moving them to arrays
 * twice as large when they are full.  Index lock exclusive: every other
 * backend sets its copy of the map's address (PmhPool.log_ext_segs) again
 * when it next takes the lock (pmhash_check_local), and the log lock is
 * taken for the swap, since a backend that exits reads the chunk table
 * under it alone.  The old tables are not freed but kept on a list
 * (PmhashShared.logold) until the index's shared state is: a backend
 * whose relock failed with an ERROR may still use its old copy of the map
 * to release its own slots, which are in extensions the old map has.
 * They take less memory than the current tables.  A failure to allocate
 * leaves the old tables in place.
 */
static void
pmhash_log_make_room(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	uint32		cap = shared->logcap;
	uint32		newcap;
	dsa_pointer newtables;
	dsa_pointer newexts;
	dsa_pointer oldtables = shared->logchunks;
	dsa_pointer *oldchunks = pmhash_dsa_address(oldtables);
	uint32	   *exts;

	Assert(idx->mode == LW_EXCLUSIVE && DsaPointerIsValid(oldtables));
	if (shared->log.nexts < cap)
		return;
	newcap = Min(Max(cap * 2, PMHASH_LOG_MIN_CAP), PMH_LOG_MAX_EXTS);
	Assert(newcap > shared->log.nexts);
	newtables = pmhash_log_tables_alloc(shared, newcap, &newexts);
	exts = pmhash_dsa_address(newexts);
	memcpy(pmhash_dsa_address(newtables), oldchunks,
		   sizeof(dsa_pointer) * (PMHASH_LOG_FIXED_CHUNKS + cap));
	memcpy(exts, pmhash_dsa_address(shared->logexts), sizeof(uint32) * cap);

	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	shared->logchunks = newtables;
	shared->logexts = newexts;
	shared->logcap = newcap;
	LWLockRelease(&shared->loglock);
	idx->local->pool.log_ext_segs = exts;

	/*
	 * Nobody reads the old chunk table any more (the chunk table is read
	 * through shared->logchunks each time): its first two entries link the
	 * old tables and keep their room.  The old map stays as it was.
	 */
	oldchunks[0] = shared->logold;
	oldchunks[1] = cap;
	shared->logold = oldtables;
}

/*
 * Add a log segment (64 lines) to the backup log.  Index lock exclusive.
 * The shared memory for its line states and the segment are set aside
 * first; a failure to persist the segment's header is a PANIC (the
 * segment is taken from the free list).
 */
static bool
pmhash_wp_add_log_segment(void *arg)
{
	PmhashIndex *idx = (PmhashIndex *) arg;
	PmhashShared *shared = idx->shared;
	dsa_pointer chunk;
	dsa_pointer *chunks;
	uint32		segno;
	PmhWriter	w;

	Assert(idx->mode == LW_EXCLUSIVE && shared->log.nexts < PMH_LOG_MAX_EXTS);
	pmhash_log_make_room(idx);
	pmhash_reserve_segments(idx, 1);
	chunk = pmhash_shared_alloc(shared, sizeof(PmhLogChunk));
	pmh_wp_chunk_init(pmhash_dsa_address(chunk));
	segno = idx->cb.alloc_segment(idx);
	Assert(segno != PMH_NO_SEGMENT);

	/* nobody reads the chunk before the log counts the new lines */
	chunks = pmhash_dsa_address(shared->logchunks);
	chunks[pmhash_log_nlines(shared) / PMH_LOG_CHUNK] = chunk;
	pmhash_writer(idx, &w);
	START_CRIT_SECTION();
	(void) pmh_wp_log_extend(&w, segno, pmhash_dsa_address(shared->logexts));
	END_CRIT_SECTION();
	return true;
}

static uint32
pmhash_wp_nsegments(void *arg)
{
	return (uint32) ((PmhashIndex *) arg)->shared->nsegments;
}

static uint64
pmhash_wp_primaries(void *arg)
{
	return ((PmhashIndex *) arg)->shared->primaries;
}

/* segments not loaded since the restart hold slots of the log: load them */
static void
pmhash_wp_before_relocate_all(void *arg)
{
	pmhash_load_all((PmhashIndex *) arg, false);
}

static void
pmhash_wp_entries_added(void *arg, int64 n)
{
	PmhashShared *shared = ((PmhashIndex *) arg)->shared;

	if (n >= 0)
		pg_atomic_fetch_add_u64(&shared->entries, (uint64) n);
	else
		pg_atomic_fetch_sub_u64(&shared->entries, (uint64) -n);
}

/* no room in segno's chain: first delete its entries hinted dead */
static bool
pmhash_wp_prune(void *arg, uint32 segno)
{
	return pmhash_prune_chain((PmhashIndex *) arg, segno);
}

static void
pmhash_wp_interrupt(void *arg)
{
	CHECK_FOR_INTERRUPTS();
}

/*
 * The protocol failed.  A failure after which the shared state no longer
 * matches the pool (a relocation or a release that could not persist) is
 * treated like a failed WAL write: a PANIC, and the restart starts over
 * from the pool.
 */
static void
pmhash_wp_error(void *arg, PmhWpStatus status, const char *what, bool fatal)
{
	PmhashIndex *idx = (PmhashIndex *) arg;

	if (status == PMH_WP_LOG_FULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("backup log of pmhash index \"%s\" is full",
						RelationGetRelationName(idx->rel)),
				 errdetail("All %u lines are held by other sessions.",
						   idx->shared->log.fixed_lines +
						   idx->shared->log.nexts * PMH_LOG_EXT_LINES),
				 errhint("Reduce the number of sessions inserting into the index at once.")));
	if (fatal)
		START_CRIT_SECTION();
	pmhash_report_io_error(idx->rel, what);
}

static const PmhWriteOps pmhash_write_ops = {
	.log_lock = pmhash_wp_log_lock,
	.log_unlock = pmhash_wp_log_unlock,
	.log_chunk = pmhash_wp_log_chunk,
	.index_exclusive = pmhash_wp_index_exclusive,
	.relock = pmhash_wp_relock,
	.lock_hash = pmhash_wp_lock_hash,
	.unlock_segment = pmhash_wp_unlock_segment,
	.lookup_segment = pmhash_wp_lookup_segment,
	.segment_ready = pmhash_wp_segment_ready,
	.split_shared = pmhash_wp_split_shared,
	.split = pmhash_wp_split,
	.add_overflow = pmhash_wp_add_overflow,
	.prune = pmhash_wp_prune,
	.add_log_segment = pmhash_wp_add_log_segment,
	.nsegments = pmhash_wp_nsegments,
	.primaries = pmhash_wp_primaries,
	.before_relocate_all = pmhash_wp_before_relocate_all,
	.entries_added = pmhash_wp_entries_added,
	.interrupt = pmhash_wp_interrupt,
	.error = pmhash_wp_error,
};

/*
 * The core's writer for this backend on an attached index.  The line this
 * backend appends to belongs to the shared state of one generation: after
 * the pool was replaced, the backend owns none.
 */
void
pmhash_writer(PmhashIndex *idx, PmhWriter *w)
{
	PmhashLocal *local = idx->local;
	PmhashShared *shared = idx->shared;

	if (local->log_generation != shared->generation)
	{
		local->log_line = -1;
		local->log_used = 0;
		local->log_generation = shared->generation;
	}
	pmh_wp_writer_init(w, &local->pool, &idx->cb, &pmhash_write_ops, idx,
					   &shared->log, MyProc->pgprocno, &local->log_line,
					   &local->log_used);
	w->check_segment = shared->stale;
}

/*
 * A writer over an index's log state alone, for callers that hold no
 * attached index (only the line-state functions may be used with it).
 */
static void
pmhash_log_writer(PmhashShared *shared, PmhashIndex *idx, PmhWriter *w)
{
	memset(idx, 0, sizeof(*idx));
	idx->shared = shared;
	pmh_wp_writer_init(w, NULL, NULL, &pmhash_write_ops, idx, &shared->log,
					   -1, NULL, NULL);
}

/* ---------------------------------------------------------------------
 * Line states in shared memory
 * ---------------------------------------------------------------------
 */

/* the shared state of backup-log line "line" (log lock held) */
PmhLogLine *
pmhash_log_line_state(PmhashShared *shared, uint32 line)
{
	Assert(line < pmhash_log_nlines(shared));
	return &pmhash_log_chunk(shared, line / PMH_LOG_CHUNK)->lines[line % PMH_LOG_CHUNK];
}

/* does the free mask say line "line" is free?  (for pmhash_check) */
bool
pmhash_log_line_marked_free(PmhashShared *shared, uint32 line)
{
	PmhashIndex idx;
	PmhWriter	w;

	pmhash_log_writer(shared, &idx, &w);
	return pmh_wp_line_marked_free(&w, line);
}

/* the owner gives up line "line" (log lock held exclusively) */
void
pmhash_log_disown(PmhashShared *shared, uint32 line)
{
	PmhashIndex idx;
	PmhWriter	w;

	pmhash_log_writer(shared, &idx, &w);
	pmh_wp_disown(&w, line);
}

/*
 * Set up the backup-log state of an index whose shared state is being
 * (re)built: the fixed lines and those of every log segment the metadata
 * names, unowned, nothing pending.  Index lock exclusive.
 */
void
pmhash_log_init_shared(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	dsa_pointer *chunks;
	uint32	   *exts;
	uint32	   *found;
	uint32		nexts = 0;
	uint32		cap;
	PmhashSegChunk *chunk = NULL;
	PmhWriter	w;
	uint32		fixed;
	uint32		i;

	pmhash_log_free_shared(shared);
	found = palloc(sizeof(uint32) * PMH_LOG_MAX_EXTS);
	for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
		found[i] = PMH_NO_SEGMENT;
	for (i = 0; i < shared->nsegments; i++)
	{
		uint64		word;

		if (pmhash_chunk_place((uint32) i) == 0)
			chunk = pmhash_seg_chunk(idx, pmhash_chunk_no((uint32) i));
		if (!chunk->slot[pmhash_chunk_place((uint32) i)].meta_valid)
			continue;
		word = chunk->meta[pmhash_chunk_place((uint32) i)].word;

		if (pmh_segword_is_valid(word) && pmh_segword_is_log(word))
		{
			found[pmh_segword_log_ext(word)] = i;
			nexts = Max(nexts, pmh_segword_log_ext(word) + 1);
		}
	}

	/* room for the extensions there are, and as many again */
	cap = PMHASH_LOG_MIN_CAP;
	while (cap < PMH_LOG_MAX_EXTS && cap < 2 * nexts)
		cap *= 2;
	shared->logchunks = pmhash_log_tables_alloc(shared, cap, &shared->logexts);
	shared->logcap = cap;
	chunks = pmhash_dsa_address(shared->logchunks);
	exts = pmhash_dsa_address(shared->logexts);
	memcpy(exts, found, sizeof(uint32) * cap);
	pfree(found);
	shared->log.nexts = nexts;

	/*
	 * The fixed log's lines past those the pool uses are unusable, their
	 * states never change after pmh_wp_log_init marks them so: all their
	 * chunks are one allocation (the last chunk pointer), written alike.
	 */
	fixed = ((const PmhPoolHeader *) idx->local->pool.base)->log_lines;
	for (i = 0; i < pmhash_log_nlines(shared) / PMH_LOG_CHUNK; i++)
	{
		if (i > fixed / PMH_LOG_CHUNK && i < PMH_LOG_LINES / PMH_LOG_CHUNK)
			chunks[i] = chunks[i - 1];
		else
		{
			chunks[i] = pmhash_shared_alloc(shared, sizeof(PmhLogChunk));
			pmh_wp_chunk_init(pmhash_dsa_address(chunks[i]));
		}
	}
	idx->local->pool.log_ext_segs = exts;
	pmhash_writer(idx, &w);
	/* (a pool made before PMH_LOG_LINES_SMALL uses the whole fixed log) */
	pmh_wp_log_init(&w, fixed, PMH_LOG_MAX_EXTS);
}

/*
 * Give back the backup-log state's shared memory.  The tables are taken
 * out of the shared state under the log lock first: a backend that exits
 * reads them under it alone (pmhash_release_lines).
 */
void
pmhash_log_free_shared(PmhashShared *shared)
{
	dsa_pointer tables;
	uint32		cap;

	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	tables = shared->logchunks;
	cap = shared->logcap;
	shared->logchunks = InvalidDsaPointer;
	shared->logexts = InvalidDsaPointer;	/* (in the same allocation) */
	shared->logcap = 0;
	shared->log.nexts = 0;
	LWLockRelease(&shared->loglock);

	if (DsaPointerIsValid(tables))
	{
		dsa_pointer *chunks = pmhash_dsa_address(tables);
		uint32		nchunks = PMHASH_LOG_FIXED_CHUNKS + cap;
		uint32		i;

		/*
		 * Each pointer is forgotten before its memory is freed (a failure
		 * half way leaks rather than frees twice); a chunk shared by a run
		 * of pointers is freed at the run's end.
		 */
		for (i = 0; i < nchunks; i++)
		{
			dsa_pointer dp = chunks[i];

			chunks[i] = InvalidDsaPointer;
			if (DsaPointerIsValid(dp) &&
				(i == nchunks - 1 || chunks[i + 1] != dp))
				pmhash_shared_free(shared, dp, sizeof(PmhLogChunk));
		}
		pmhash_shared_free(shared, tables, pmhash_log_tables_size(cap));
	}
	/* the tables that pmhash_log_make_room moved away from */
	while (DsaPointerIsValid(shared->logold))
	{
		dsa_pointer dp = shared->logold;
		dsa_pointer *old = pmhash_dsa_address(dp);

		cap = (uint32) old[1];
		shared->logold = old[0];
		pmhash_shared_free(shared, dp, pmhash_log_tables_size(cap));
	}
}

/* number of backup-log lines that hold pending entries or have an owner */
int
pmhash_log_lines_in_use(PmhashIndex *idx)
{
	PmhWriter	w;
	uint32		n;

	pmhash_writer(idx, &w);
	LWLockAcquire(&idx->shared->loglock, LW_SHARED);
	n = pmh_wp_lines_in_use(&w);
	LWLockRelease(&idx->shared->loglock);
	return (int) n;
}

/*
 * How many entries a collecting log may gather before it is flushed: the
 * room left in this backend's backup-log line, so that a flush completes
 * the line, or a whole line.  Only a hint: the flush reserves its slots
 * under the log lock, and may take a new line then.
 */
int
pmhash_log_room(const PmhashShared *shared, const PmhashLocal *local)
{
	int			room = PMH_BUCKET_SLOTS;

	if (local->log_line >= 0 && local->log_generation == shared->generation)
		room -= local->log_used;
	return room > 0 ? room : PMH_BUCKET_SLOTS;
}

/* ---------------------------------------------------------------------
 * Writing, placing, releasing
 * ---------------------------------------------------------------------
 */

/*
 * Every failure of the protocol is raised by pmhash_wp_error, and the
 * callbacks that make room raise their own: a status that comes back
 * anyway is a bug.
 */
static void
pmhash_wp_check(PmhWpStatus st)
{
	if (st != PMH_WP_OK)
		elog(ERROR, "pmhash write path returned status %d", (int) st);
}

/*
 * Release backup-log slots that recovery found held by their segment
 * (pmh_wp_release).  The caller has already marked the segment loaded: a
 * failure to clear them (while a VACUUM runs) is fatal.
 */
void
pmhash_log_release(PmhashIndex *idx, const uint32 *slots, int n)
{
	PmhWriter	w;

	pmhash_writer(idx, &w);
	pmhash_wp_check(pmh_wp_release(&w, slots, n, false, true));
}

/*
 * Settle a backup-log slot recovery found live: release it if its segment
 * holds the entry, else place the entry (pmh_wp_recover_slot).
 */
void
pmhash_log_recover_slot(PmhashIndex *idx, uint32 logslot)
{
	PmhWriter	w;
	bool		restored;

	pmhash_writer(idx, &w);
	pmhash_wp_check(pmh_wp_recover_slot(&w, logslot, &restored));
}

/*
 * Write n entries to this backend's backup-log line (one persist, one
 * fence); *line and *first say where they are.  Their slots stay pending
 * until pmhash_log_place_written has placed the entries.  Index attached,
 * any mode.
 */
void
pmhash_log_write(PmhashIndex *idx, const PmhEntry *entries, int n,
				 uint32 *line, int *first)
{
	PmhWriter	w;

	pmhash_writer(idx, &w);
	pmhash_wp_check(pmh_wp_write(&w, entries, n, line, first));
	pmhash_stats_add_user_bytes(idx->local, (uint64) n * PMH_ENTRY_BYTES);
}

/*
 * Make entries that pmhash_log_write wrote visible in their D-buckets.  On
 * error the slots of those not placed are released, and *placed (if not
 * NULL) says how many were, in order: the caller keeps the others.
 */
void
pmhash_log_place_written(PmhashIndex *idx, const PmhEntry *entries, int n,
						 uint32 line, int first, int *placed_out)
{
	PmhWriter	w;
	uint64		generation = idx->shared->generation;

	pmhash_writer(idx, &w);
	PG_TRY();
	{
		pmhash_wp_check(pmh_wp_place_written(&w, entries, n, line, first));
	}
	PG_CATCH();
	{
		/*
		 * The rest never reached a D-bucket: free their slots so that the
		 * line can be reused.  Their copies stay in the log (a crash would
		 * bring them back as entries of this aborting transaction, which
		 * scans and VACUUM treat like any dead entry).  An entry counts as
		 * placed once it is in its D-bucket, even if restoring the index
		 * lock's mode failed after that (w.placed is read from memory: the
		 * core updated it).
		 */
		uint32		placed = ((volatile PmhWriter *) &w)->placed;
		uint32		slots[PMH_BUCKET_SLOTS];
		uint32		k;

		if (placed_out != NULL)
			*placed_out = (int) placed;

		for (k = placed; k < (uint32) n; k++)
			slots[k - placed] = line * PMH_BUCKET_SLOTS + (uint32) first + k;

		/*
		 * Unless the index's shared state was freed or made anew while a
		 * relock let go of the index lock (the slots went with it): the
		 * failed relock may leave the lock taken, or not at all
		 */
		if (LWLockHeldByMe(&idx->shared->lock) &&
			idx->shared->generation == generation &&
			DsaPointerIsValid(idx->shared->logchunks))
		{
			pmhash_writer(idx, &w);
			(void) pmh_wp_release(&w, slots, n - (int) placed, false, false);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* ---------------------------------------------------------------------
 * VACUUM
 * ---------------------------------------------------------------------
 */

/*
 * VACUUM is about to delete entries from segments: clear the released
 * copies in the backup log and have releases clear theirs from now on
 * (pmh_wp_vacuum_begin).  Index lock shared.
 */
void
pmhash_log_vacuum_begin(PmhashIndex *idx)
{
	PmhWriter	w;

	pmhash_writer(idx, &w);
	pmhash_wp_check(pmh_wp_vacuum_begin(&w));
}

/*
 * VACUUM is done deleting (also on error): releases stop clearing.
 * Nothing to do if the shared state was rebuilt meanwhile (generation).
 */
void
pmhash_log_vacuum_end(PmhashShared *shared, uint64 generation)
{
	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	if (shared->generation == generation && shared->log.vacuum_active > 0)
		shared->log.vacuum_active--;
	LWLockRelease(&shared->loglock);
}

/* pmhash_vacuum_pending's judge: a dead TID, by the caller's callback */
typedef struct PmhashVacPendingArg
{
	bool		(*dead) (ItemPointer tid, void *arg);
	void	   *arg;
} PmhashVacPendingArg;

static bool
pmhash_vacuum_pending_dead(uint64 tag, void *arg)
{
	PmhashVacPendingArg *a = (PmhashVacPendingArg *) arg;
	ItemPointerData tid;

	ItemPointerSet(&tid, pmh_tag_block(tag), pmh_tag_offset(tag));
	return a->dead(&tid, a->arg);
}

/*
 * Remove dead entries from the D-bucket of primary segment segno (segment
 * lock exclusive; pmh_wp_vacuum_pending).  Returns the number removed;
 * counts the others into *remaining.
 */
uint64
pmhash_vacuum_pending(PmhashIndex *idx, uint32 segno,
					  bool (*dead) (ItemPointer tid, void *arg), void *arg,
					  uint64 *remaining)
{
	PmhWriter	w;
	PmhashVacPendingArg a;
	uint32		nremoved;
	uint32		nremaining;

	a.dead = dead;
	a.arg = arg;
	pmhash_writer(idx, &w);
	pmhash_wp_check(pmh_wp_vacuum_pending(&w, segno,
										  pmhash_vacuum_pending_dead, &a,
										  &nremoved, &nremaining));
	*remaining += nremaining;
	return nremoved;
}
