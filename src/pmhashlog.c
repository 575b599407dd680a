/*-------------------------------------------------------------------------
 *
 * pmhashlog.c
 *	  The write path of pmhash (ElimDA's three layers mapped onto
 *	  PostgreSQL): transaction-scoped collecting logs in backend memory, the
 *	  backup log in the pool, and D-buckets in shared memory.
 *
 * aminsert appends (hash, TID) to this backend's collecting log of the
 * index, in backend-local memory.  When the entries would complete the
 * backup-log line this backend appends to, and at PRE_COMMIT / PRE_PREPARE,
 * they are written to that line and persisted with one fence; only then do
 * they go into the D-buckets (shared memory) of their segments, where every
 * backend's scans find them.  A full D-bucket is relocated into its segment
 * as one batch of writes with one fence, and only after that are the
 * backup-log slots it held released.  An aborted transaction's entries that
 * are still in its collecting log are simply dropped.
 *
 * Each backend owns at most one backup-log line per index at a time, so
 * concurrent writers never share a 256 B media line.  See "Backup log" in
 * src/README.pmhash for the crash rules.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "pmhash.h"

/* one entry waiting in a collecting log */
typedef struct PmhashXactEntry
{
	uint64		hash;
	ItemPointerData tid;
	SubTransactionId subid;
	CommandId	cid;			/* the command current at the append */
	bool		unsettled;		/* appended while upserts ran: see below */
} PmhashXactEntry;

/* the collecting log of one index storage in the current transaction */
typedef struct PmhashXactLog
{
	PmhashKey	key;
	Oid			indexoid;
	int			n;
	PmhashXactEntry e[PMH_BUCKET_SLOTS];
} PmhashXactLog;

static HTAB *pmhash_xact_logs = NULL;
static int	pmhash_xact_unflushed = 0;	/* entries in all collecting logs */

/*
 * Has this transaction run INSERT ... ON CONFLICT?  Such an insert can
 * super-delete its heap tuple after the index entries are made (a
 * concurrent insert of the same key won the race after the precheck);
 * the tuple is then dead to everyone, and VACUUM can free its slot while
 * the entry still waits in the collecting log, out of its sight.  So from
 * the first such statement to the end of the transaction, entries are
 * marked unsettled, and before a flush takes them to the pool each is
 * checked against its heap tuple (pmhash_log_settle).
 */
static bool pmhash_xact_upserts = false;

/*
 * The collecting log found last: a statement inserting many rows appends
 * to the same one again and again.  Entries of pmhash_xact_logs stay where
 * they are until transaction end removes them all, which clears this.
 */
static PmhashXactLog *pmhash_xact_last = NULL;

#define PMHASH_LOG_MAX_CHUNKS	(PMH_LOG_MAX_LINES / PMHASH_LOG_CHUNK)

/* the states of lines [64 c, 64 c + 64) */
static inline PmhashLogChunk *
pmhash_log_chunk(PmhashShared *shared, uint32 c)
{
	dsa_pointer *chunks = pmhash_dsa_address(shared->logchunks);

	return (PmhashLogChunk *) pmhash_dsa_address(chunks[c]);
}

/* the shared state of backup-log line "line" (log lock held) */
PmhashLogLine *
pmhash_log_line_state(PmhashShared *shared, uint32 line)
{
	Assert(line < pmhash_log_nlines(shared));
	return &pmhash_log_chunk(shared, line / PMHASH_LOG_CHUNK)->lines[line % PMHASH_LOG_CHUNK];
}

/*
 * Bring the free mask up to date with line "line"'s state, after changing
 * its pending slots or its owner (log lock held exclusively, or, while
 * recovery sets up the log, the index lock).
 */
void
pmhash_log_note_line(PmhashShared *shared, uint32 line)
{
	PmhashLogChunk *c;
	PmhashLogLine *l;
	uint64		bit = UINT64CONST(1) << (line % PMHASH_LOG_CHUNK);

	StaticAssertStmt(PMHASH_LOG_CHUNK == 64, "a free mask covers 64 lines");
	Assert(line < pmhash_log_nlines(shared));
	c = pmhash_log_chunk(shared, line / PMHASH_LOG_CHUNK);
	l = &c->lines[line % PMHASH_LOG_CHUNK];
	if (l->pending == 0 && l->owner < 0)
		c->free |= bit;
	else
		c->free &= ~bit;
}

/* does the free mask say line "line" is free?  (for pmhash_check) */
bool
pmhash_log_line_marked_free(PmhashShared *shared, uint32 line)
{
	Assert(line < pmhash_log_nlines(shared));
	return (pmhash_log_chunk(shared, line / PMHASH_LOG_CHUNK)->free >>
			(line % PMHASH_LOG_CHUNK)) & 1;
}

/* the owner gives up line "line" (log lock held exclusively) */
void
pmhash_log_disown(PmhashShared *shared, uint32 line)
{
	pmhash_log_line_state(shared, line)->owner = -1;
	pmhash_log_note_line(shared, line);
}

/* a chunk of line states: every line free (unowned, nothing pending) */
static dsa_pointer
pmhash_log_new_chunk(PmhashShared *shared)
{
	dsa_pointer dp = pmhash_shared_alloc(shared, sizeof(PmhashLogChunk));
	PmhashLogChunk *c = pmhash_dsa_address(dp);
	int			i;

	for (i = 0; i < PMHASH_LOG_CHUNK; i++)
	{
		c->lines[i].pending = 0;
		c->lines[i].zeroed = false;
		c->lines[i].owner = -1;
	}
	c->free = ~UINT64CONST(0);
	return dp;
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
	uint32		nexts = 0;
	PmhashSegChunk *chunk = NULL;
	uint32		i;

	pmhash_log_free_shared(shared);
	shared->logchunks = pmhash_shared_alloc(shared,
											sizeof(dsa_pointer) * PMHASH_LOG_MAX_CHUNKS);
	shared->logexts = pmhash_shared_alloc(shared,
										  sizeof(uint32) * PMH_LOG_MAX_EXTS);
	chunks = pmhash_dsa_address(shared->logchunks);
	exts = pmhash_dsa_address(shared->logexts);
	for (i = 0; i < PMHASH_LOG_MAX_CHUNKS; i++)
		chunks[i] = InvalidDsaPointer;
	for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
		exts[i] = PMH_NO_SEGMENT;
	for (i = 0; i < shared->nsegments; i++)
	{
		uint64		w;

		if (i % PMHASH_CHUNK_SEGS == 0)
			chunk = pmhash_seg_chunk(idx, i / PMHASH_CHUNK_SEGS);
		if (!chunk->slot[i % PMHASH_CHUNK_SEGS].meta_valid)
			continue;
		w = chunk->meta[i % PMHASH_CHUNK_SEGS].word;

		if (pmh_segword_is_valid(w) && pmh_segword_is_log(w))
		{
			exts[pmh_segword_log_ext(w)] = i;
			nexts = Max(nexts, pmh_segword_log_ext(w) + 1);
		}
	}
	shared->log_nexts = nexts;
	for (i = 0; i < pmhash_log_nlines(shared) / PMHASH_LOG_CHUNK; i++)
		chunks[i] = pmhash_log_new_chunk(shared);
	shared->log_cursor = 0;
	shared->log_pending = 0;
	shared->vacuum_active = 0;
	idx->local->pool.log_ext_segs = exts;
}

/* give back the backup-log state's shared memory */
void
pmhash_log_free_shared(PmhashShared *shared)
{
	if (DsaPointerIsValid(shared->logchunks))
	{
		dsa_pointer *chunks = pmhash_dsa_address(shared->logchunks);
		uint32		i;

		for (i = 0; i < PMHASH_LOG_MAX_CHUNKS; i++)
			if (DsaPointerIsValid(chunks[i]))
				pmhash_shared_free(shared, chunks[i], sizeof(PmhashLogChunk));
		pmhash_shared_free(shared, shared->logchunks,
						   sizeof(dsa_pointer) * PMHASH_LOG_MAX_CHUNKS);
	}
	if (DsaPointerIsValid(shared->logexts))
		pmhash_shared_free(shared, shared->logexts,
						   sizeof(uint32) * PMH_LOG_MAX_EXTS);
	shared->logchunks = InvalidDsaPointer;
	shared->logexts = InvalidDsaPointer;
	shared->log_nexts = 0;
}

/*
 * Should a full backup log grow rather than be emptied by relocating every
 * D-bucket?  A line is free again only when all 16 of its entries are
 * relocated, and with inserts spread evenly that takes about as long as
 * 16 inserts into every segment: the log needs about one line per primary
 * segment (plus one per inserting backend).  Grow to 1.5 lines per primary
 * segment; relocating everything is the fallback at the limit.
 */
static bool
pmhash_log_should_grow(PmhashShared *shared)
{
	return shared->log_nexts < PMH_LOG_MAX_EXTS &&
		pmhash_log_nlines(shared) < shared->primaries + shared->primaries / 2 +
		PMH_LOG_EXT_LINES;
}

/*
 * Add a log segment (64 lines) to the backup log.  Index lock exclusive.
 * The segment's header line is persisted with the log word before any of
 * its lines is used; a crash right after leaves a log segment with empty
 * lines, which recovery takes back as such.
 */
void
pmhash_log_add_extension(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	uint32		ext = shared->log_nexts;
	dsa_pointer chunk;
	uint32		segno;
	dsa_pointer *chunks;
	uint32	   *exts;

	Assert(idx->mode == LW_EXCLUSIVE && ext < PMH_LOG_MAX_EXTS);
	pmhash_reserve_segments(idx, 1);
	chunk = pmhash_log_new_chunk(shared);
	segno = idx->cb.alloc_segment(idx);
	Assert(segno != PMH_NO_SEGMENT);

	START_CRIT_SECTION();
	if (pmh_add_log_segment(&idx->local->pool, segno, ext) != 0)
		pmhash_report_io_error(idx->rel, "extend backup log of");
	pmh_meta_reset(pmhash_seg_meta(idx, segno),
				   pmh_segword_make_log(ext));
	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	chunks = pmhash_dsa_address(shared->logchunks);
	exts = pmhash_dsa_address(shared->logexts);
	chunks[pmhash_log_nlines(shared) / PMHASH_LOG_CHUNK] = chunk;
	exts[ext] = segno;
	shared->log_nexts++;
	LWLockRelease(&shared->loglock);
	END_CRIT_SECTION();
}

/* number of backup-log lines that hold pending entries or have an owner */
int
pmhash_log_lines_in_use(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	int			n = 0;
	uint32		c;

	LWLockAcquire(&shared->loglock, LW_SHARED);
	for (c = 0; c < pmhash_log_nlines(shared) / PMHASH_LOG_CHUNK; c++)
	{
		n += PMHASH_LOG_CHUNK - pg_popcount64(pmhash_log_chunk(shared, c)->free);
	}
	LWLockRelease(&shared->loglock);
	return n;
}

/* does this backend own a line of the index's current pool? */
static inline bool
pmhash_log_owns_line(const PmhashShared *shared, const PmhashLocal *local)
{
	return local->log_line >= 0 && local->log_generation == shared->generation;
}

/* mark released backup-log slots free (log lock held exclusively) */
static void
pmhash_log_unpend(PmhashShared *shared, const uint32 *slots, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		PmhashLogLine *l = pmhash_log_line_state(shared, slots[i] / PMH_BUCKET_SLOTS);
		uint16		bit = (uint16) (1 << (slots[i] % PMH_BUCKET_SLOTS));

		Assert(l->pending & bit);
		l->pending &= (uint16) ~bit;
		if (l->pending == 0)
			pmhash_log_note_line(shared, slots[i] / PMH_BUCKET_SLOTS);
		shared->log_pending--;
	}
}

/*
 * Release backup-log slots whose entries are in a segment now, or gone.
 * With "zero" (or while a VACUUM runs, see README.pmhash) their tags are
 * first cleared and persisted, so that a crash cannot bring them back.
 *
 * The clearing happens without the log lock: the slots are still pending,
 * and a pending slot is written by nobody but the caller (its line cannot
 * be taken for reuse, VACUUM's clearing passes it by, and only the holder
 * of its D-bucket entry, or of its reservation, releases it).  Whether a
 * VACUUM runs is decided under the lock, together with the release when
 * none does: a VACUUM that starts later finds the slots released and
 * clears them itself.
 */
void
pmhash_log_release(PmhashIndex *idx, const uint32 *slots, int n, bool zero)
{
	PmhashShared *shared = idx->shared;

	if (n == 0)
		return;
	if (!zero)
	{
		LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
		if (shared->vacuum_active == 0)
		{
			pmhash_log_unpend(shared, slots, n);
			LWLockRelease(&shared->loglock);
			return;
		}
		LWLockRelease(&shared->loglock);
	}
	if (pmh_log_clear_slots(&idx->local->pool, slots, n) != 0)
		pmhash_report_io_error(idx->rel, "clear backup log of");
	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	pmhash_log_unpend(shared, slots, n);
	LWLockRelease(&shared->loglock);
}

/*
 * Relocate the D-bucket of primary segment segno (segment lock held
 * exclusively, or the index lock exclusively) and release the log slots
 * of what was relocated.  Returns the core's verdict, which says what to
 * do when there is no room (split, or add an overflow segment).
 */
static PmhInsertResult
pmhash_relocate_segment(PmhashIndex *idx, uint32 segno)
{
	uint32		released[PMH_DBUCKET_SLOTS];
	int			nrel;
	int			ndup;
	PmhInsertResult r;

	/*
	 * A failed flush leaves written slots the metadata does not trust:
	 * treat it like a failed WAL write and start over from the pool.
	 */
	START_CRIT_SECTION();
	r = pmh_relocate(&idx->local->pool, &idx->cb, segno, idx->shared->stale,
					 true, released, &nrel, &ndup);
	if (r == PMH_INSERT_IOERROR)
		pmhash_report_io_error(idx->rel, "relocate entries in");
	pmhash_log_release(idx, released, nrel, false);
	END_CRIT_SECTION();
	if (ndup > 0)
		pg_atomic_fetch_sub_u64(&idx->shared->entries, (uint64) ndup);
	return r;
}

/*
 * Put an entry whose backup-log copy (slot logslot) is persistent into the
 * D-bucket of its segment, relocating a full D-bucket first (splitting or
 * extending the segment when that needs room).  The index lock is held in
 * the same mode on return.
 */
void
pmhash_place_pending(PmhashIndex *idx, uint64 hash, uint64 tag,
					 uint32 logslot)
{
	LWLockMode	entry_mode = idx->mode;

	for (;;)
	{
		uint32		segno = pmhash_lock_hash(idx, hash, LW_EXCLUSIVE);
		PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
		PmhInsertResult r;

		if (meta->npending < PMH_DBUCKET_SLOTS)
		{
			pmh_pending_add(meta, hash, tag, logslot);
			pmhash_unlock_segment(idx, segno);
			pg_atomic_fetch_add_u64(&idx->shared->entries, 1);
			if (idx->mode != entry_mode)
				pmhash_relock(idx, entry_mode);
			return;
		}
		r = pmhash_relocate_segment(idx, segno);
		if (r == PMH_INSERT_SPLIT && idx->mode != LW_EXCLUSIVE &&
			pmhash_split_segment_shared(idx, segno))
			r = PMH_INSERT_DONE;	/* split under the segment's lock */
		pmhash_unlock_segment(idx, segno);
		if (r != PMH_INSERT_DONE && idx->mode != LW_EXCLUSIVE)
		{
			/* the whole index is needed; look again */
			pmhash_relock(idx, LW_EXCLUSIVE);
			continue;
		}
		if (r == PMH_INSERT_SPLIT)
			pmhash_split_segment(idx, segno);
		else if (r == PMH_INSERT_OVERFLOW)
			pmhash_add_overflow_segment(idx, segno);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Relocate every D-bucket of the index (the backup log is full).  Index
 * lock exclusive: no segment locks are needed.
 */
static void
pmhash_relocate_all(PmhashIndex *idx)
{
	bool		again = true;

	Assert(idx->mode == LW_EXCLUSIVE);

	/*
	 * Lines hold slots of segments not loaded since the restart: loading
	 * them sorts those out (and releases most).
	 */
	pmhash_load_all(idx, false);
	while (again)
	{
		uint32		segno;

		again = false;
		for (segno = 0; segno < idx->shared->nsegments; segno++)
		{
			PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
			PmhInsertResult r;

			if (!pmhash_seg_slot(idx, segno)->meta_valid ||
				meta->npending == 0 || !pmh_segword_is_valid(meta->word) ||
				pmh_segword_is_overflow(meta->word))
				continue;
			r = pmhash_relocate_segment(idx, segno);
			if (r == PMH_INSERT_SPLIT)
				pmhash_split_segment(idx, segno);
			else if (r == PMH_INSERT_OVERFLOW)
				pmhash_add_overflow_segment(idx, segno);
			if (r != PMH_INSERT_DONE)
				again = true;	/* new segments may sit below segno */
			CHECK_FOR_INTERRUPTS();
		}
	}
}

/* the free mask of chunk c of the backup log (pmh_log_find_free) */
static uint64
pmhash_log_free_word(const void *arg, uint32 c)
{
	return pmhash_log_chunk((PmhashShared *) arg, c)->free;
}

/*
 * Make sure this backend owns a backup-log line with room for n more
 * entries and reserve them; returns the line and sets *first to the first
 * reserved slot.  Takes a free line (zeroing it) when needed; when the log
 * has none, relocates every D-bucket to free some.
 */
static uint32
pmhash_log_reserve(PmhashIndex *idx, int n, int *first)
{
	PmhashShared *shared = idx->shared;
	PmhashLocal *local = idx->local;
	LWLockMode	entry_mode = idx->mode;
	int			attempt;

	Assert(n > 0 && n <= PMH_BUCKET_SLOTS);
	for (attempt = 0;; attempt++)
	{
		int32		line;

		LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
		if (pmhash_log_owns_line(shared, local))
		{
			if (PMH_BUCKET_SLOTS - local->log_used >= n)
				break;
			/* not enough room left: close it */
			pmhash_log_disown(shared, local->log_line);
		}
		local->log_line = -1;

		line = pmh_log_find_free(pmhash_log_free_word, shared,
								 pmhash_log_nlines(shared) / PMHASH_LOG_CHUNK,
								 shared->log_cursor);
		if (line >= 0)
		{
			PmhashLogLine *ls = pmhash_log_line_state(shared, (uint32) line);

			/* what it held is relocated (or dead): start it empty */
			memset(pmh_log_line(&local->pool, (uint32) line), 0, PMH_LINE_BYTES);
			ls->zeroed = true;
			ls->owner = MyProc->pgprocno;
			pmhash_log_note_line(shared, (uint32) line);
			local->log_line = line;
			local->log_used = 0;
			local->log_generation = shared->generation;
			shared->log_cursor = ((uint32) line + 1) % pmhash_log_nlines(shared);
			break;
		}
		LWLockRelease(&shared->loglock);

		if (attempt > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
					 errmsg("backup log of pmhash index \"%s\" is full",
							RelationGetRelationName(idx->rel)),
					 errdetail("All %u lines are held by other sessions.",
							   pmhash_log_nlines(shared)),
					 errhint("Reduce the number of sessions inserting into the index at once.")));
		if (idx->mode != LW_EXCLUSIVE)
			pmhash_relock(idx, LW_EXCLUSIVE);
		if (attempt == 0 && pmhash_log_should_grow(shared))
			pmhash_log_add_extension(idx);
		else
			pmhash_relocate_all(idx);
		if (idx->mode != entry_mode)
			pmhash_relock(idx, entry_mode);
	}

	/* lock held, line owned with room: reserve the slots */
	*first = local->log_used;
	pmhash_log_line_state(shared, local->log_line)->pending |=
		(uint16) (((1 << n) - 1) << local->log_used);
	shared->log_pending += n;
	local->log_used += n;
	LWLockRelease(&shared->loglock);
	return (uint32) local->log_line;
}

/* give up this backend's line if it is full */
static void
pmhash_log_close_full_line(PmhashIndex *idx)
{
	PmhashLocal *local = idx->local;

	if (!pmhash_log_owns_line(idx->shared, local) ||
		local->log_used < PMH_BUCKET_SLOTS)
		return;
	LWLockAcquire(&idx->shared->loglock, LW_EXCLUSIVE);
	pmhash_log_disown(idx->shared, local->log_line);
	LWLockRelease(&idx->shared->loglock);
	local->log_line = -1;
}

/*
 * Start loading what placing these entries into their D-buckets touches:
 * first every target segment's lock and D-bucket count, then the D-bucket
 * slot, or what a full D-bucket's relocation reads (pmh_pending_prefetch),
 * then the pool line it fills and the fingerprint buckets its entries go
 * to (pmh_relocate_prefetch).  The placements then take their cache misses
 * together instead of one after another (each segment lock's release
 * waits for the stores before it).  Only hints: nothing here changes
 * anything; the index lock (any mode) keeps the overflow chains still and
 * the directory naming primary segments (a split under a segment lock may
 * change an entry meanwhile, and then the hint is for the wrong segment).
 * Segments not loaded since the restart are left alone, as their metadata
 * is not set yet.
 */
static void
pmhash_prefetch_placement(PmhashIndex *idx, const PmhEntry *entries, int n)
{
	uint32		segs[PMH_BUCKET_SLOTS];
	PmhashSegSlot *slots[PMH_BUCKET_SLOTS];
	bool		ready[PMH_BUCKET_SLOTS];
	int			i;

	for (i = 0; i < n; i++)
	{
		segs[i] = pmhash_lookup_segment(idx, entries[i].hash);
		slots[i] = pmhash_seg_slot(idx, segs[i]);
		pmh_prefetch_write(&slots[i]->lock);
		pmh_prefetch(&pmhash_seg_meta(idx, segs[i])->npending);
	}
	for (i = 0; i < n; i++)
	{
		ready[i] = slots[i]->loaded && slots[i]->meta_valid;
		if (!ready[i])
			continue;
		/* the metadata was written before "loaded" (pmhashrecover.c) */
		pg_read_barrier();
		pmh_pending_prefetch(&idx->local->pool, &idx->cb, segs[i]);
	}
	for (i = 0; i < n; i++)
		if (ready[i])
			pmh_relocate_prefetch(&idx->local->pool, &idx->cb, segs[i]);
}

/*
 * Write a collecting log to the backup log (one persist, one fence), then
 * make its entries visible in the D-buckets.  Index attached, any mode.
 */
static void
pmhash_log_flush(PmhashIndex *idx, PmhashXactLog *xl)
{
	PmhPool    *pool = &idx->local->pool;
	PmhEntry	entries[PMH_BUCKET_SLOTS];
	uint32		line;
	int			first;
	int			n = xl->n;
	volatile int placed = 0;
	int			i;

	if (n == 0)
		return;
	line = pmhash_log_reserve(idx, n, &first);
	for (i = 0; i < n; i++)
	{
		entries[i].hash = xl->e[i].hash;
		entries[i].tag = pmh_tag_make(xl->e[i].hash,
									  ItemPointerGetBlockNumber(&xl->e[i].tid),
									  ItemPointerGetOffsetNumber(&xl->e[i].tid));
	}
	if (pmh_log_write(pool, line, first, entries, n) != 0)
	{
		uint32		slots[PMH_BUCKET_SLOTS];
		int			save_errno = errno;

		for (i = 0; i < n; i++)
			slots[i] = line * PMH_BUCKET_SLOTS + first + i;
		pmhash_log_release(idx, slots, n, false);
		errno = save_errno;
		pmhash_report_io_error(idx->rel, "persist backup log of");
	}
	pmhash_xact_unflushed -= n;
	xl->n = 0;
	pmhash_stats_add_user_bytes(idx->local, (uint64) n * PMH_ENTRY_BYTES);

	pmhash_prefetch_placement(idx, entries, n);
	PG_TRY();
	{
		for (; placed < n; placed++)
			pmhash_place_pending(idx, entries[placed].hash,
								 entries[placed].tag,
								 line * PMH_BUCKET_SLOTS + first + placed);
	}
	PG_CATCH();
	{
		/*
		 * The rest never reached a D-bucket: free their slots so that the
		 * line can be reused.  Their copies stay in the log (a crash would
		 * bring them back as entries of this aborting transaction, which
		 * scans and VACUUM treat like any dead entry).
		 */
		uint32		slots[PMH_BUCKET_SLOTS];
		int			k;

		for (k = placed; k < n; k++)
			slots[k - placed] = line * PMH_BUCKET_SLOTS + first + k;
		pmhash_log_release(idx, slots, n - placed, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	pmhash_log_close_full_line(idx);
}

/* the collecting log of an index storage, created on first use */
static PmhashXactLog *
pmhash_xact_log(const PmhashKey *key, Oid indexoid, bool create)
{
	PmhashXactLog *xl;
	bool		found;

	if (pmhash_xact_last != NULL &&
		memcmp(&pmhash_xact_last->key, key, sizeof(PmhashKey)) == 0)
		return pmhash_xact_last;
	if (pmhash_xact_logs == NULL)
	{
		HASHCTL		info;

		if (!create)
			return NULL;
		memset(&info, 0, sizeof(info));
		info.keysize = sizeof(PmhashKey);
		info.entrysize = sizeof(PmhashXactLog);
		info.hcxt = TopMemoryContext;
		pmhash_xact_logs = hash_create("pmhash collecting logs", 16, &info,
									   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	xl = hash_search(pmhash_xact_logs, key, create ? HASH_ENTER : HASH_FIND,
					 &found);
	if (create && !found)
	{
		xl->indexoid = indexoid;
		xl->n = 0;
	}
	if (xl != NULL)
		pmhash_xact_last = xl;
	return xl;
}

/*
 * How many entries a collecting log may gather before it is flushed: the
 * room left in this backend's backup-log line, so that a flush completes
 * the line, or a whole line.  Only a hint: the flush reserves its slots
 * under the log lock, and may take a new line then.
 */
static int
pmhash_log_room(const PmhashShared *shared, const PmhashLocal *local)
{
	int			room = PMH_BUCKET_SLOTS;

	if (pmhash_log_owns_line(shared, local))
		room -= local->log_used;
	return room > 0 ? room : PMH_BUCKET_SLOTS;
}

/* add (hash, tid) of the current subtransaction to a collecting log */
static void
pmhash_xact_log_add(PmhashXactLog *xl, uint64 hash, ItemPointer tid)
{
	PmhashXactEntry *e = &xl->e[xl->n++];

	e->hash = hash;
	e->tid = *tid;
	e->subid = GetCurrentSubTransactionId();
	e->cid = GetCurrentCommandId(false);
	e->unsettled = pmhash_xact_upserts;
	pmhash_xact_unflushed++;
}

/*
 * aminsert's work: append (hash, tid) to this transaction's collecting log
 * of the index, and flush the log when it would complete this backend's
 * backup-log line, or at once if flush_now (the entry must be visible to
 * other backends' scans before aminsert returns).
 */
void
pmhash_log_append(PmhashIndex *idx, uint64 hash, ItemPointer tid,
				  bool flush_now)
{
	PmhashXactLog *xl = pmhash_xact_log(&idx->shared->key,
										RelationGetRelid(idx->rel), true);

	pmhash_xact_log_add(xl, hash, tid);
	if (flush_now || xl->n >= pmhash_log_room(idx->shared, idx->local))
		pmhash_log_flush(idx, xl);
}

/* INSERT ... ON CONFLICT runs in this transaction: entries need settling */
void
pmhash_log_note_upsert(void)
{
	pmhash_xact_upserts = true;
}

/*
 * Is the heap tuple at e->tid the one this transaction inserted when it
 * appended e?  Not if the slot is past the end, unused, dead or
 * redirected, or holds a heap-only tuple (no index entry points at one), a
 * tuple of another transaction (VACUUM freed the slot and someone reused
 * it), one whose xmin was cleared (a super-deleted speculative insertion),
 * or one that a later command of this transaction put into the freed slot
 * (its cmin is past the command of the append).
 */
static bool
pmhash_heap_tuple_is_entrys(Relation heap, BlockNumber *nblocks,
							const PmhashXactEntry *e)
{
	BlockNumber blk = ItemPointerGetBlockNumber(&e->tid);
	OffsetNumber off = ItemPointerGetOffsetNumber(&e->tid);
	Buffer		buf;
	Page		page;
	ItemId		lp;
	HeapTupleHeader htup;
	bool		ours = false;

	if (!pmhash_heap_has_block(heap, nblocks, blk))
		return false;
	buf = ReadBuffer(heap, blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (off < FirstOffsetNumber || off > PageGetMaxOffsetNumber(page))
		goto done;
	lp = PageGetItemId(page, off);
	if (!ItemIdIsNormal(lp))
		goto done;
	htup = (HeapTupleHeader) PageGetItem(page, lp);
	/* raw: a tuple that COPY FREEZE wrote still shows our xid */
	if (HeapTupleHeaderIsHeapOnly(htup) ||
		!TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(htup)))
		goto done;
	/* (the command id of a frozen tuple is not worth resolving) */
	ours = HeapTupleHeaderXminFrozen(htup) ||
		HeapTupleHeaderGetCmin(htup) <= e->cid;
done:
	UnlockReleaseBuffer(buf);
	return ours;
}

/*
 * Check a collecting log's unsettled entries against their heap tuples and
 * drop those whose tuple is not this transaction's (any more): the entry
 * of a super-deleted tuple must not reach the pool, where it would point
 * at a slot that VACUUM never saw it for, or double the entry of the row
 * that reuses the slot.  Reuse by this transaction shows as another entry
 * in the same log with the same TID, as newtid (the row aminsert is
 * inserting; NULL elsewhere), or as a later command id.  An entry whose
 * tuple is still a speculative insertion being decided is kept (only a
 * flush in the middle of a row meets one, and it takes the entry to the
 * pool before the super-deletion, where VACUUM finds it).  It reads heap
 * buffers, so the caller holds no pmhash lock, and it decides for every
 * entry before it changes the log, so that an error (a cancel while it
 * waits for a read) leaves the log as it was.  Only heap tables make
 * speculative insertions this way; other table access methods' entries
 * are taken as they are.
 */
static void
pmhash_log_settle(PmhashXactLog *xl, Relation heap, ItemPointer newtid)
{
	BlockNumber nblocks = pmhash_heap_length_hint(heap);
	bool		is_heap = heap->rd_tableam == GetHeapamTableAmRoutine();
	bool		keep[PMH_BUCKET_SLOTS];
	int			nkept = 0;
	int			i;

	for (i = 0; i < xl->n; i++)
	{
		PmhashXactEntry *e = &xl->e[i];
		bool		reused;
		int			j;

		keep[i] = true;
		if (!e->unsettled || !is_heap)
			continue;
		reused = newtid != NULL && ItemPointerEquals(newtid, &e->tid);
		for (j = i + 1; j < xl->n && !reused; j++)
			reused = ItemPointerEquals(&xl->e[j].tid, &e->tid);
		keep[i] = !reused && pmhash_heap_tuple_is_entrys(heap, &nblocks, e);
	}

	/* nothing from here on can fail */
	for (i = 0; i < xl->n; i++)
	{
		if (!keep[i])
			continue;
		xl->e[nkept] = xl->e[i];
		xl->e[nkept].unsettled = false;
		nkept++;
	}
	pmhash_xact_unflushed -= xl->n - nkept;
	xl->n = nkept;
}

/*
 * aminsert, before it attaches to flush: settle the index's collecting log
 * if this transaction has run INSERT ... ON CONFLICT.  newtid is the row
 * being inserted, whose entry is not in the log yet.
 */
void
pmhash_log_settle_index(Relation index, Relation heap, ItemPointer newtid)
{
	PmhashKey	key;
	PmhashXactLog *xl;

	if (!pmhash_xact_upserts || pmhash_xact_unflushed == 0)
		return;
	pmhash_key_for_rel(index, &key);
	xl = pmhash_xact_log(&key, InvalidOid, false);
	if (xl != NULL)
		pmhash_log_settle(xl, heap, newtid);
}

/*
 * aminsert's work when no flush is due, without attaching to the index
 * (no index lock, no check of the mapping): the collecting log is this
 * backend's memory.  Returns false, having done nothing, when this
 * backend has not attached to the index's storage before or when the
 * entry would call for a flush; the caller then attaches and calls
 * pmhash_log_append.
 */
bool
pmhash_log_append_unattached(Relation index, uint64 hash, ItemPointer tid)
{
	PmhashShared *shared;
	PmhashLocal *local;
	PmhashXactLog *xl;

	if (!pmhash_attached_before(index, &shared, &local))
		return false;

	/*
	 * Only while the index is loaded and mapped here, as the last attach
	 * left it: a load that failed (a damaged pool, no memory) must fail
	 * every insert again, not let rows gather until the flush.  Read
	 * without the lock, these can only send the row to the attach.
	 */
	if (!pmhash_ready_here(shared, local) || shared->unusable)
		return false;
	xl = pmhash_xact_log(&shared->key, RelationGetRelid(index), true);
	if (xl->n + 1 >= pmhash_log_room(shared, local))
		return false;
	pmhash_xact_log_add(xl, hash, tid);
	return true;
}

/*
 * A storage is being built from its heap again: what this transaction
 * collected for its earlier contents must not reach the new pool.  (A
 * TRUNCATE of a table created in the same transaction rebuilds its
 * indexes in place, under the same relfilenode, so the key is the same.)
 */
void
pmhash_log_forget_storage(const PmhashKey *key)
{
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0)
		return;
	xl = pmhash_xact_log(key, InvalidOid, false);
	if (xl == NULL)
		return;
	pmhash_xact_unflushed -= xl->n;
	xl->n = 0;
}

/* are there entries in collecting logs? */
bool
pmhash_log_have_unflushed(void)
{
	return pmhash_xact_unflushed > 0;
}

/*
 * Flush every collecting log of this transaction: at PRE_COMMIT and
 * PRE_PREPARE (so the entries are persistent before the commit record),
 * before a parallel query (workers cannot see this backend's memory), and
 * before utility statements (which may copy a pool).  Logs of indexes
 * that were dropped, or whose storage was replaced, in this transaction
 * are dropped: nothing can ever find those entries.
 */
void
pmhash_log_flush_all(bool for_parallel)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0 || pmhash_xact_logs == NULL)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
	{
		Relation	rel;
		PmhashKey	key;

		if (xl->n == 0)
			continue;
		rel = try_relation_open(xl->indexoid, NoLock);
		if (rel != NULL)
		{
			pmhash_key_for_rel(rel, &key);
			if (memcmp(&key, &xl->key, sizeof(key)) == 0)
			{
				PmhashIndex idx;

				if (pmhash_xact_upserts)
				{
					/* this transaction inserted into it: the table is locked */
					Relation	heap = table_open(rel->rd_index->indrelid, NoLock);

					pmhash_log_settle(xl, heap, NULL);
					table_close(heap, NoLock);
				}
				pmhash_attach(rel, LW_SHARED, &idx);
				pmhash_log_flush(&idx, xl);
				pmhash_detach(&idx);
			}
			relation_close(rel, NoLock);
		}
		pmhash_xact_unflushed -= xl->n;
		xl->n = 0;
	}
	(void) for_parallel;
}

/* transaction end (commit, abort or prepare): forget the collecting logs */
void
pmhash_log_xact_end(void)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	pmhash_xact_last = NULL;
	pmhash_xact_upserts = false;
	if (pmhash_xact_logs == NULL)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
		(void) hash_search(pmhash_xact_logs, &xl->key, HASH_REMOVE, NULL);
	pmhash_xact_unflushed = 0;
}

/* subtransaction commit: its entries now belong to the parent */
void
pmhash_log_subxact_commit(SubTransactionId mysub, SubTransactionId parentsub)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
	{
		int			i;

		for (i = 0; i < xl->n; i++)
			if (xl->e[i].subid == mysub)
				xl->e[i].subid = parentsub;
	}
}

/*
 * Subtransaction abort: drop its entries (and those of its children, which
 * have larger ids) that are still in collecting logs.
 */
void
pmhash_log_subxact_abort(SubTransactionId mysub)
{
	HASH_SEQ_STATUS status;
	PmhashXactLog *xl;

	if (pmhash_xact_unflushed == 0)
		return;
	hash_seq_init(&status, pmhash_xact_logs);
	while ((xl = hash_seq_search(&status)) != NULL)
	{
		int			i;
		int			keep = 0;

		for (i = 0; i < xl->n; i++)
		{
			if (xl->e[i].subid >= mysub)
				continue;
			xl->e[keep++] = xl->e[i];
		}
		pmhash_xact_unflushed -= xl->n - keep;
		xl->n = keep;
	}
}

/*
 * TIDs with this hash in this transaction's collecting log of an index
 * storage (its own inserts not flushed yet).  Stores at most max and
 * returns the number found.
 */
int
pmhash_log_own_matches(const PmhashKey *key, uint64 hash,
					   ItemPointerData *tids, int max)
{
	PmhashXactLog *xl;
	int			found = 0;
	int			i;

	if (pmhash_xact_unflushed == 0)
		return 0;
	xl = pmhash_xact_log(key, InvalidOid, false);
	if (xl == NULL)
		return 0;
	for (i = 0; i < xl->n; i++)
	{
		if (xl->e[i].hash != hash)
			continue;
		if (found < max)
			tids[found] = xl->e[i].tid;
		found++;
	}
	return found;
}

/*
 * VACUUM is about to delete entries from segments.  A released backup-log
 * slot still holds a copy of an entry that is in a segment; if VACUUM
 * deleted that entry and the server crashed before the slot was reused,
 * recovery would see a log entry that no segment holds and bring it back.
 * So clear (and persist) every released copy first, and have relocations
 * clear theirs while VACUUM runs.  A line zeroed for reuse shows zeros in
 * the mapping while the media may still hold its old copies: flush it
 * whole.  Index lock shared.
 */
void
pmhash_log_vacuum_begin(PmhashIndex *idx)
{
	PmhashShared *shared = idx->shared;
	PmhPool    *pool = &idx->local->pool;
	uint32		l;

	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	shared->vacuum_active++;
	pmh_batch_begin(pool);
	for (l = 0; l < pmhash_log_nlines(shared); l++)
	{
		PmhEntry   *e = pmh_log_line(pool, l);
		PmhashLogLine *ls = pmhash_log_line_state(shared, l);
		bool		dirty = ls->zeroed;
		int			s;

		for (s = 0; s < PMH_BUCKET_SLOTS; s++)
		{
			if ((ls->pending & (1 << s)) || e[s].tag == 0)
				continue;
			e[s].tag = 0;
			dirty = true;
		}
		if (dirty)
			(void) pmh_persist(pool, e, PMH_LINE_BYTES);
	}
	if (pmh_batch_end(pool) != 0)
	{
		shared->vacuum_active--;
		LWLockRelease(&shared->loglock);
		pmhash_report_io_error(idx->rel, "clear backup log of");
	}
	/* only now are the zeros of reused lines on the media */
	for (l = 0; l < pmhash_log_nlines(shared); l++)
		pmhash_log_line_state(shared, l)->zeroed = false;
	LWLockRelease(&shared->loglock);
}

/*
 * VACUUM is done deleting (also on error): relocations stop clearing.
 * Nothing to do if the shared state was rebuilt meanwhile (generation).
 */
void
pmhash_log_vacuum_end(PmhashShared *shared, uint64 generation)
{
	LWLockAcquire(&shared->loglock, LW_EXCLUSIVE);
	if (shared->generation == generation && shared->vacuum_active > 0)
		shared->vacuum_active--;
	LWLockRelease(&shared->loglock);
}

/*
 * Remove dead entries from the D-bucket of primary segment segno (segment
 * lock exclusive): their log copies are cleared and persisted, then their
 * slots released.  Returns the number removed; counts the others.  Every
 * entry is judged before any is removed: the callback may raise an ERROR,
 * and an entry already out of the D-bucket would keep its log slot until
 * the next restart.
 */
uint64
pmhash_vacuum_pending(PmhashIndex *idx, uint32 segno,
					  bool (*dead) (ItemPointer tid, void *arg), void *arg,
					  uint64 *remaining)
{
	PmhSegMeta *meta = pmhash_seg_meta(idx, segno);
	uint32		slots[PMH_DBUCKET_SLOTS];
	uint32		deadmask = 0;
	int			n = 0;
	uint32		i;

	StaticAssertStmt(PMH_DBUCKET_SLOTS <= 32, "a D-bucket fits a 32-bit mask");
	for (i = 0; i < meta->npending; i++)
	{
		ItemPointerData tid;

		ItemPointerSet(&tid, pmh_tag_block(meta->pending[i].tag),
					   pmh_tag_offset(meta->pending[i].tag));
		if (dead(&tid, arg))
			deadmask |= (uint32) 1 << i;
		else
			(*remaining)++;
	}

	/*
	 * From the last entry down: pmh_pending_remove moves the last entry into
	 * the hole, and every entry after i is live by then.
	 */
	for (i = meta->npending; i-- > 0;)
	{
		if ((deadmask & ((uint32) 1 << i)) == 0)
			continue;
		slots[n++] = meta->pending[i].logslot;
		pmh_pending_remove(meta, (int) i);
	}
	if (n > 0)
	{
		START_CRIT_SECTION();
		pmhash_log_release(idx, slots, n, true);
		END_CRIT_SECTION();
	}
	return (uint64) n;
}
