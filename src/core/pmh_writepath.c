/*-------------------------------------------------------------------------
 *
 * pmh_writepath.c
 *	  The write-path protocol of pmhash: backup-log line states, reserving
 *	  and releasing log slots, placing entries into D-buckets and making
 *	  room for them, relocating every D-bucket, and VACUUM's part of the
 *	  log protocol.  Recovering the backup log after a restart is in
 *	  pmh_logrecover.c.
 *
 * Every write to the pool is made by the core's primitives (pmh_log_write,
 * pmh_log_clear_slots, pmh_relocate, pmh_add_log_segment); this file
 * orders them and keeps the volatile bookkeeping that says which log slots
 * may be reused.  The rules it keeps (see "Backup log" in README.pmhash):
 *
 *	- a writer appends only to the line it owns, so that concurrent writers
 *	  never share a 256 B media line;
 *	- a log slot stays pending from its reservation until its entry is in
 *	  its segment (relocated), or gone; a line is taken for reuse only when
 *	  nothing in it is pending;
 *	- while a VACUUM runs, a slot is released only after its tag is
 *	  cleared and persisted, so that a crash cannot bring back an entry
 *	  VACUUM deleted from its segment.
 *
 * Nothing here allocates memory, takes a lock of its own or reports an
 * error other than by its return value: see PmhWriteOps.
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_writepath.h"

#include <errno.h>
#include <string.h>

static PmhWpStatus pmh_wp_place_in(PmhWriter *w, uint64 hash, uint64 tag,
								   uint32 logslot, bool entry_exclusive);

/* tell the caller about a failure, and return it */
static PmhWpStatus
pmh_wp_fail(PmhWriter *w, PmhWpStatus status, const char *what, bool fatal)
{
	int			save_errno = errno;

	if (w->ops->error)
		w->ops->error(w->arg, status, what, fatal);
	errno = save_errno;
	return status;
}

/*
 * Fill in a writer: its pool and segment callbacks, the caller's ops and
 * their argument, the log it writes to, its owner number and where it
 * keeps the line it appends to.  No fault points, no duplicate checks.
 */
void
pmh_wp_writer_init(PmhWriter *w, PmhPool *pool, const PmhCallbacks *cb,
				   const PmhWriteOps *ops, void *arg, PmhLogState *log,
				   int32 id, int32 *own_line, int *own_used)
{
	w->pool = pool;
	w->cb = cb;
	w->ops = ops;
	w->arg = arg;
	w->log = log;
	w->id = id;
	w->own_line = own_line;
	w->own_used = own_used;
	w->check_segment = false;
	w->faults = 0;
	w->placed = 0;
}

/* ---------------------------------------------------------------------
 * Line states.  The caller holds the log lock (or, while it sets the log
 * up, has the index to itself).
 * ---------------------------------------------------------------------
 */

/* a chunk of line states: every line free (unowned, nothing pending) */
void
pmh_wp_chunk_init(PmhLogChunk *c)
{
	int			i;

	for (i = 0; i < PMH_LOG_CHUNK; i++)
	{
		c->lines[i].pending = 0;
		c->lines[i].zeroed = false;
		c->lines[i].owner = -1;
	}
	c->free = ~UINT64CONST(0);
}

/* the state of backup-log line "line" */
PmhLogLine *
pmh_wp_line(const PmhWriter *w, uint32 line)
{
	Assert(line < pmh_log_nlines(w->log));
	return &w->ops->log_chunk(w->arg, line / PMH_LOG_CHUNK)->lines[line % PMH_LOG_CHUNK];
}

/*
 * Set up the counters of a log whose chunks are all initialised
 * (pmh_wp_chunk_init): the first fixed_lines lines of the fixed log are
 * used, the rest of it never (tests use few, to make reuse and growth
 * frequent); at most max_exts log segments.  The log segments already in
 * the pool are counted by the caller into log->nexts beforehand.
 */
void
pmh_wp_log_init(PmhWriter *w, uint32 fixed_lines, uint32 max_exts)
{
	PmhLogState *log = w->log;
	uint32		l;

	Assert(fixed_lines > 0 && fixed_lines <= PMH_LOG_LINES &&
		   max_exts <= PMH_LOG_MAX_EXTS);
	log->fixed_lines = fixed_lines;
	log->max_exts = max_exts;
	log->cursor = 0;
	log->pending = 0;
	log->vacuum_active = 0;
	for (l = fixed_lines; l < PMH_LOG_LINES; l++)
	{
		pmh_wp_line(w, l)->owner = PMH_LOG_UNUSABLE;
		pmh_wp_note_line(w, l);
	}
}

/* bring the free mask up to date with line "line"'s state */
void
pmh_wp_note_line(const PmhWriter *w, uint32 line)
{
	PmhLogChunk *c = w->ops->log_chunk(w->arg, line / PMH_LOG_CHUNK);
	PmhLogLine *l = &c->lines[line % PMH_LOG_CHUNK];
	uint64		bit = UINT64CONST(1) << (line % PMH_LOG_CHUNK);

	StaticAssertStmt(PMH_LOG_CHUNK == 64, "a free mask covers 64 lines");
	if (l->pending == 0 && l->owner == -1)
		c->free |= bit;
	else
		c->free &= ~bit;
}

/* the owner gives up line "line" */
void
pmh_wp_disown(const PmhWriter *w, uint32 line)
{
	pmh_wp_line(w, line)->owner = -1;
	pmh_wp_note_line(w, line);
}

/* does the free mask say line "line" is free?  (for consistency checks) */
bool
pmh_wp_line_marked_free(const PmhWriter *w, uint32 line)
{
	return (w->ops->log_chunk(w->arg, line / PMH_LOG_CHUNK)->free >>
			(line % PMH_LOG_CHUNK)) & 1;
}

/* lines that hold pending entries or have an owner (unusable ones left out) */
uint32
pmh_wp_lines_in_use(const PmhWriter *w)
{
	uint32		n = 0;
	uint32		c;

	for (c = 0; c < pmh_log_nlines(w->log) / PMH_LOG_CHUNK; c++)
		n += PMH_LOG_CHUNK - pg_popcount64(w->ops->log_chunk(w->arg, c)->free);
	return n - (PMH_LOG_LINES - w->log->fixed_lines);
}

/*
 * Mark n slots of line "line" from slot "first" on pending: reserved for
 * entries being written, which stay pending until they are relocated.
 */
void
pmh_wp_mark_pending(const PmhWriter *w, uint32 line, int first, int n)
{
	Assert(first >= 0 && n > 0 && first + n <= PMH_BUCKET_SLOTS);
	pmh_wp_line(w, line)->pending |= (uint16) (((1 << n) - 1) << first);
	pmh_wp_note_line(w, line);
	w->log->pending += (uint32) n;
}

/* mark released backup-log slots free */
static void
pmh_wp_unpend(PmhWriter *w, const uint32 *slots, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		PmhLogLine *l = pmh_wp_line(w, slots[i] / PMH_BUCKET_SLOTS);
		uint16		bit = (uint16) (1 << (slots[i] % PMH_BUCKET_SLOTS));

		Assert(l->pending & bit);
		l->pending &= (uint16) ~bit;
		if (l->pending == 0)
			pmh_wp_note_line(w, slots[i] / PMH_BUCKET_SLOTS);
		w->log->pending--;
	}
}

/* the free mask of chunk c (pmh_log_find_free) */
static uint64
pmh_wp_free_word(const void *arg, uint32 c)
{
	const PmhWriter *w = (const PmhWriter *) arg;

	return w->ops->log_chunk(w->arg, c)->free;
}

/* ---------------------------------------------------------------------
 * Growing and reserving
 * ---------------------------------------------------------------------
 */

/*
 * Should a full backup log grow rather than be emptied by relocating every
 * D-bucket?  A line is free again only when all 16 of its entries are
 * relocated, and with inserts spread evenly that takes about as long as
 * 16 inserts into every segment: the log needs about one line per primary
 * segment (plus one per writer).  Grow to 1.5 lines per primary segment;
 * relocating everything is the fallback at the limit.
 */
static bool
pmh_wp_should_grow(PmhWriter *w)
{
	uint64		primaries = w->ops->primaries(w->arg);
	uint64		usable = w->log->fixed_lines +
		(uint64) w->log->nexts * PMH_LOG_EXT_LINES;

	return w->log->nexts < w->log->max_exts &&
		usable < primaries + primaries / 2 + PMH_LOG_EXT_LINES;
}

/*
 * Make free segment segno log segment number log->nexts (index lock
 * exclusive; the caller's add_log_segment has made room for the chunk of
 * its lines, chunk pmh_log_nlines / 64, and initialised it).  The
 * segment's header line is persisted with the log word before any of its
 * lines is used; a crash right after leaves a log segment with empty
 * lines, which recovery takes back as such.  ext_segs is the caller's map
 * of extensions to segments (PmhPool.log_ext_segs).
 */
PmhWpStatus
pmh_wp_log_extend(PmhWriter *w, uint32 segno, uint32 *ext_segs)
{
	uint32		ext = w->log->nexts;

	Assert(ext < w->log->max_exts);
	if (pmh_add_log_segment(w->pool, segno, ext) != 0)
		return pmh_wp_fail(w, PMH_WP_IOERROR, "extend backup log of", false);
	pmh_meta_reset(w->cb->get_meta(w->cb->arg, segno),
				   pmh_segword_make_log(ext));
	w->ops->log_lock(w->arg);
	ext_segs[ext] = segno;
	w->log->nexts++;
	w->ops->log_unlock(w->arg);
	return PMH_WP_OK;
}

/*
 * Make sure the writer owns a backup-log line with room for n more entries
 * and reserve them: *line gets the line, *first its first reserved slot.
 * Takes a free line (zeroing it in the mapping: what it held is relocated
 * or dead) when needed; when the log has none, grows the log or relocates
 * every D-bucket to free some, with the index lock exclusive.  Returns
 * with the index lock in the mode it was in.
 */
PmhWpStatus
pmh_wp_reserve(PmhWriter *w, int n, uint32 *line, int *first)
{
	PmhLogState *log = w->log;
	bool		entry_exclusive = w->ops->index_exclusive(w->arg);
	int			attempt;

	Assert(n > 0 && n <= PMH_BUCKET_SLOTS);
	for (attempt = 0;; attempt++)
	{
		int32		l;
		PmhWpStatus st;

		w->ops->log_lock(w->arg);
		if (*w->own_line >= 0)
		{
			if (PMH_BUCKET_SLOTS - *w->own_used >= n)
				break;
			/* not enough room left: close it */
			pmh_wp_disown(w, (uint32) *w->own_line);
		}
		*w->own_line = -1;

		l = pmh_log_find_free(pmh_wp_free_word, w,
							  pmh_log_nlines(log) / PMH_LOG_CHUNK, log->cursor);
		if (l >= 0)
		{
			PmhLogLine *ls = pmh_wp_line(w, (uint32) l);

			memset(pmh_log_line(w->pool, (uint32) l), 0, PMH_LINE_BYTES);
			ls->zeroed = true;
			ls->owner = w->id;
			pmh_wp_note_line(w, (uint32) l);
			*w->own_line = l;
			*w->own_used = 0;
			log->cursor = ((uint32) l + 1) % pmh_log_nlines(log);
			break;
		}
		w->ops->log_unlock(w->arg);

		if (attempt > 1)
			return pmh_wp_fail(w, PMH_WP_LOG_FULL, "reserve backup log of",
							   false);
		if (!w->ops->index_exclusive(w->arg))
			w->ops->relock(w->arg, true);

		/*
		 * Grow the log when the index needs more lines, or when relocating
		 * everything freed none: the lines are owned by other writers (a
		 * session that inserted keeps its line until the line is full),
		 * more of them than a small log has.
		 */
		if (log->nexts < log->max_exts &&
			(attempt == 1 || pmh_wp_should_grow(w)))
			st = w->ops->add_log_segment(w->arg) ? PMH_WP_OK : PMH_WP_NO_ROOM;
		else
			st = pmh_wp_relocate_all(w);
		if (w->ops->index_exclusive(w->arg) != entry_exclusive)
			w->ops->relock(w->arg, entry_exclusive);
		if (st != PMH_WP_OK)
			return st;
	}

	/* log lock held, line owned with room: reserve the slots */
	*line = (uint32) *w->own_line;
	*first = *w->own_used;
	pmh_wp_mark_pending(w, *line, *first, n);
	*w->own_used += n;

	/*
	 * A line this fills is given up at once, under the same lock, rather
	 * than by pmh_wp_close_full_line after the placements: its slots are
	 * pending, so nobody can take it before they are released.  (One log
	 * lock round trip fewer per full flush.)
	 */
	if (*w->own_used >= PMH_BUCKET_SLOTS)
	{
		pmh_wp_disown(w, *line);
		*w->own_line = -1;
	}
	w->ops->log_unlock(w->arg);
	return PMH_WP_OK;
}

/*
 * Write n entries to the backup log: reserve slots in the writer's line,
 * write them and persist them (one flush, one fence).  On success *line
 * and *first say where they are, and the slots are pending until the
 * entries are placed (pmh_wp_place) and relocated.  A failed write
 * releases the slots.
 */
PmhWpStatus
pmh_wp_write(PmhWriter *w, const PmhEntry *entries, int n, uint32 *line,
			 int *first)
{
	PmhWpStatus st = pmh_wp_reserve(w, n, line, first);

	if (st != PMH_WP_OK)
		return st;
	if (pmh_log_write(w->pool, *line, *first, entries, n) != 0)
	{
		uint32		slots[PMH_BUCKET_SLOTS];
		int			save_errno = errno;
		int			i;

		for (i = 0; i < n; i++)
			slots[i] = *line * PMH_BUCKET_SLOTS + (uint32) (*first + i);
		(void) pmh_wp_release(w, slots, n, false, false);
		errno = save_errno;
		return pmh_wp_fail(w, PMH_WP_IOERROR, "persist backup log of", false);
	}
	return PMH_WP_OK;
}

/*
 * Release backup-log slots whose entries are in a segment now, or gone.
 * With "zero" (or while a VACUUM runs) their tags are first cleared and
 * persisted, so that a crash cannot bring them back.
 *
 * The clearing happens without the log lock: the slots are still pending,
 * and a pending slot is written by nobody but the caller (its line cannot
 * be taken for reuse, VACUUM's clearing passes it by, and only the holder
 * of its D-bucket entry, or of its reservation, releases it).  Whether a
 * VACUUM runs is decided under the lock, together with the release when
 * none does: a VACUUM that starts later finds the slots released and
 * clears them itself.  A failed clearing leaves the slots pending; it is
 * "fatal" (the caller's error callback is told so) where the caller has
 * already changed shared state that assumes the release (a relocation, a
 * VACUUM's removal from a D-bucket, a recovered slot), not where the
 * slots are given up after a failed write or placement.
 */
PmhWpStatus
pmh_wp_release(PmhWriter *w, const uint32 *slots, int n, bool zero,
			   bool fatal)
{
	if (n == 0)
		return PMH_WP_OK;
	if (!zero)
	{
		w->ops->log_lock(w->arg);
		if (w->log->vacuum_active == 0 ||
			(w->faults & PMH_WP_FAULT_KEEP_RELEASED))
		{
			pmh_wp_unpend(w, slots, n);
			w->ops->log_unlock(w->arg);
			return PMH_WP_OK;
		}
		w->ops->log_unlock(w->arg);
	}
	if (pmh_log_clear_slots(w->pool, slots, n) != 0)
		return pmh_wp_fail(w, PMH_WP_IOERROR, "clear backup log of", fatal);
	w->ops->log_lock(w->arg);
	pmh_wp_unpend(w, slots, n);
	w->ops->log_unlock(w->arg);
	return PMH_WP_OK;
}

/* ---------------------------------------------------------------------
 * Placing and making room
 * ---------------------------------------------------------------------
 */

/*
 * Relocate the D-bucket of primary segment segno (segment lock held
 * exclusively, or the index lock exclusively) and release the log slots
 * of what was relocated.  *verdict gets the core's answer, which says what
 * to do when there is no room (split, or add an overflow segment).  A
 * failed flush leaves written slots the metadata does not trust: that
 * failure is fatal (the server treats it as a failed WAL write, and
 * starts over from the pool).
 */
PmhWpStatus
pmh_wp_relocate_segment(PmhWriter *w, uint32 segno, PmhInsertResult *verdict)
{
	uint32		released[PMH_DBUCKET_SLOTS];
	int			nrel;
	int			ndup;
	PmhWpStatus st;

	*verdict = pmh_relocate(w->pool, w->cb, segno, w->check_segment, true,
							released, &nrel, &ndup);
	if (*verdict == PMH_INSERT_IOERROR)
		return pmh_wp_fail(w, PMH_WP_IOERROR, "relocate entries in", true);
	st = pmh_wp_release(w, released, nrel, false, true);
	if (ndup > 0 && w->ops->entries_added)
		w->ops->entries_added(w->arg, -(int64) ndup);
	return st;
}

/* act on a "no room" verdict of a relocation (index lock exclusive) */
PmhWpStatus
pmh_wp_make_room(PmhWriter *w, uint32 segno, PmhInsertResult verdict)
{
	bool		ok;

	Assert(w->ops->index_exclusive(w->arg));
	if (verdict == PMH_INSERT_SPLIT)
		ok = w->ops->split(w->arg, segno);
	else if (verdict == PMH_INSERT_OVERFLOW)
		ok = w->ops->add_overflow(w->arg, segno);
	else
		ok = verdict == PMH_INSERT_DONE;
	return ok ? PMH_WP_OK : PMH_WP_NO_ROOM;
}

/*
 * Put an entry whose backup-log copy (slot logslot) is persistent into the
 * D-bucket of its segment, relocating a full D-bucket first, and splitting
 * or extending the segment when that needs room: under the segment's lock
 * where it can, else with the index lock exclusive.  The index lock is
 * held in the same mode on return.  w->placed counts the entry as soon as
 * it is in the D-bucket: restoring the lock's mode can still fail after
 * that (in the server), and the caller must then not give its slot up.
 */
PmhWpStatus
pmh_wp_place(PmhWriter *w, uint64 hash, uint64 tag, uint32 logslot)
{
	return pmh_wp_place_in(w, hash, tag, logslot,
						   w->ops->index_exclusive(w->arg));
}

/*
 * pmh_wp_place, told the index lock's mode (entry_exclusive): placing the
 * entries of one write asks for it once.
 */
static PmhWpStatus
pmh_wp_place_in(PmhWriter *w, uint64 hash, uint64 tag, uint32 logslot,
				bool entry_exclusive)
{
	const PmhWriteOps *ops = w->ops;
	bool		exclusive = entry_exclusive;
	PmhWpStatus st = PMH_WP_OK;

	/* (lock_hash keeps the mode; only relock below changes it) */
	for (;;)
	{
		PmhSegMeta *meta;
		uint32		segno = ops->lock_hash(w->arg, hash, &meta);
		PmhInsertResult r;

		if (meta->npending < PMH_DBUCKET_SLOTS)
		{
			pmh_pending_add(meta, hash, tag, logslot);
			w->placed++;
			ops->unlock_segment(w->arg, segno);
			if (ops->entries_added)
				ops->entries_added(w->arg, 1);
			break;
		}
		st = pmh_wp_relocate_segment(w, segno, &r);
		if (st == PMH_WP_OK && ops->prune &&
			(r == PMH_INSERT_SPLIT || r == PMH_INSERT_OVERFLOW) &&
			ops->prune(w->arg, segno))
		{
			/* dead entries made the room: relocate again */
			ops->unlock_segment(w->arg, segno);
			continue;
		}
		if (st == PMH_WP_OK && r == PMH_INSERT_SPLIT && !exclusive &&
			ops->split_shared && ops->split_shared(w->arg, segno))
			r = PMH_INSERT_DONE;	/* split under the segment's lock */
		ops->unlock_segment(w->arg, segno);
		if (st != PMH_WP_OK)
			break;
		if (r != PMH_INSERT_DONE && !exclusive)
		{
			/* the whole index is needed; look again */
			ops->relock(w->arg, true);
			exclusive = true;
			continue;
		}
		st = pmh_wp_make_room(w, segno, r);
		if (st != PMH_WP_OK)
			break;
		if (ops->interrupt)
			ops->interrupt(w->arg);
	}
	if (exclusive != entry_exclusive)
		ops->relock(w->arg, entry_exclusive);
	return st;
}

/*
 * Start loading what placing these entries into their D-buckets touches:
 * every target segment's D-bucket count, then the D-bucket slot, or what
 * a full D-bucket's relocation reads (pmh_pending_prefetch), then the pool
 * line it fills and the fingerprint buckets its entries go to
 * (pmh_relocate_prefetch).  The placements then take their cache misses
 * together instead of one after another.  Only hints: nothing here
 * changes anything, and a segment that changes meanwhile only makes a
 * hint useless.  Segments not ready (not loaded since a restart) are left
 * alone.
 */
void
pmh_wp_prefetch_placement(PmhWriter *w, const PmhEntry *entries, int n)
{
	uint32		segs[PMH_BUCKET_SLOTS];
	bool		ready[PMH_BUCKET_SLOTS];
	int			i;

	if (w->ops->lookup_segment == NULL)
		return;
	Assert(n <= PMH_BUCKET_SLOTS);
	for (i = 0; i < n; i++)
	{
		PmhSegMeta *meta;

		segs[i] = w->ops->lookup_segment(w->arg, entries[i].hash, &meta);
		ready[i] = w->ops->segment_ready == NULL ||
			w->ops->segment_ready(w->arg, segs[i]);
		if (ready[i])
			pmh_prefetch(&meta->npending);
	}
	for (i = 0; i < n; i++)
		if (ready[i])
			pmh_pending_prefetch(w->pool, w->cb, segs[i]);
	for (i = 0; i < n; i++)
		if (ready[i])
			pmh_relocate_prefetch(w->pool, w->cb, segs[i]);
}

/* give up the writer's line if it is full */
void
pmh_wp_close_full_line(PmhWriter *w)
{
	if (*w->own_line < 0 || *w->own_used < PMH_BUCKET_SLOTS)
		return;
	w->ops->log_lock(w->arg);
	pmh_wp_disown(w, (uint32) *w->own_line);
	w->ops->log_unlock(w->arg);
	*w->own_line = -1;
}

/*
 * Place the n entries that pmh_wp_write wrote to line "line" from slot
 * "first" on (prefetching first), then give the line up if it is full.
 * On failure w->placed says how many of them (counted from the value it
 * had on entry) are in D-buckets; the caller releases the slots of the
 * rest.
 */
PmhWpStatus
pmh_wp_place_written(PmhWriter *w, const PmhEntry *entries, int n,
					 uint32 line, int first)
{
	bool		exclusive = w->ops->index_exclusive(w->arg);
	int			i;

	pmh_wp_prefetch_placement(w, entries, n);
	for (i = 0; i < n; i++)
	{
		PmhWpStatus st = pmh_wp_place_in(w, entries[i].hash, entries[i].tag,
										 line * PMH_BUCKET_SLOTS + (uint32) (first + i),
										 exclusive);

		if (st != PMH_WP_OK)
			return st;
	}
	pmh_wp_close_full_line(w);
	return PMH_WP_OK;
}

/*
 * Write a collecting log of n entries to the backup log (one persist, one
 * fence), then make them visible in their D-buckets.  A caller whose
 * placements can raise an error (the server) calls the steps itself, to
 * release the slots of the entries not placed.
 */
PmhWpStatus
pmh_wp_flush(PmhWriter *w, const PmhEntry *entries, int n)
{
	PmhEntry	copy[PMH_BUCKET_SLOTS];
	uint32		line;
	int			first;
	uint32		placed;
	PmhWpStatus st;

	if (n == 0)
		return PMH_WP_OK;
	/* placing may grow (and move) the pool: keep what is placed here */
	memcpy(copy, entries, sizeof(PmhEntry) * n);
	st = pmh_wp_write(w, copy, n, &line, &first);
	if (st != PMH_WP_OK)
		return st;
	placed = w->placed;
	st = pmh_wp_place_written(w, copy, n, line, first);
	if (st != PMH_WP_OK)
	{
		uint32		slots[PMH_BUCKET_SLOTS];
		int			k;

		/* the rest never reached a D-bucket: free their slots */
		for (k = (int) (w->placed - placed); k < n; k++)
			slots[k] = line * PMH_BUCKET_SLOTS + (uint32) (first + k);
		k = (int) (w->placed - placed);
		(void) pmh_wp_release(w, slots + k, n - k, false, false);
	}
	return st;
}

/*
 * Relocate every D-bucket of the index (the backup log is full), splitting
 * or adding overflow segments as relocation asks; a split may hand new
 * segments (anywhere in the pool) their share of pending entries, so the
 * pass goes round until none is left.  Index lock exclusive: no segment
 * locks are needed.
 */
PmhWpStatus
pmh_wp_relocate_all(PmhWriter *w)
{
	bool		again = true;

	Assert(w->ops->index_exclusive(w->arg));
	if (w->ops->before_relocate_all)
		w->ops->before_relocate_all(w->arg);
	while (again)
	{
		uint32		nseg = w->ops->nsegments(w->arg);
		uint32		segno;

		again = false;
		for (segno = 0; segno < nseg; segno++)
		{
			PmhSegMeta *meta;
			PmhInsertResult r;
			PmhWpStatus st;

			if (w->ops->segment_ready && !w->ops->segment_ready(w->arg, segno))
				continue;
			meta = w->cb->get_meta(w->cb->arg, segno);
			if (meta->npending == 0 || !pmh_segword_is_valid(meta->word) ||
				pmh_segword_is_overflow(meta->word))
				continue;
			st = pmh_wp_relocate_segment(w, segno, &r);
			if (st == PMH_WP_OK && r != PMH_INSERT_DONE)
			{
				st = pmh_wp_make_room(w, segno, r);
				again = true;	/* new segments may sit below segno */
			}
			if (st != PMH_WP_OK)
				return st;
			if (w->ops->interrupt)
				w->ops->interrupt(w->arg);
		}
	}
	return PMH_WP_OK;
}

/* ---------------------------------------------------------------------
 * VACUUM
 * ---------------------------------------------------------------------
 */

/*
 * VACUUM is about to delete entries from segments.  A released backup-log
 * slot still holds a copy of an entry that is in a segment; if VACUUM
 * deleted that entry and the server crashed before the slot was reused,
 * recovery would see a log entry that no segment holds and bring it back.
 * So clear (and persist) every released copy first, and have releases
 * clear theirs while VACUUM runs (pmh_wp_release).  A line zeroed for reuse
 * shows zeros in the mapping while the media may still hold its old
 * copies: flush it whole.  On failure nothing is marked.
 */
PmhWpStatus
pmh_wp_vacuum_begin(PmhWriter *w)
{
	PmhLogState *log = w->log;
	uint32		nlines;
	uint32		l;

	w->ops->log_lock(w->arg);
	nlines = pmh_log_nlines(log);
	log->vacuum_active++;
	pmh_batch_begin(w->pool);
	for (l = 0; l < nlines; l++)
	{
		PmhLogLine *ls = pmh_wp_line(w, l);
		PmhEntry   *e;
		bool		dirty;
		int			s;

		if (ls->owner == PMH_LOG_UNUSABLE)
			continue;
		e = pmh_log_line(w->pool, l);
		dirty = ls->zeroed && !(w->faults & PMH_WP_FAULT_KEEP_ZEROED);
		for (s = 0; s < PMH_BUCKET_SLOTS; s++)
		{
			if ((ls->pending & (1 << s)) || e[s].tag == 0)
				continue;
			e[s].tag = 0;
			dirty = true;
		}
		if (dirty)
			(void) pmh_persist(w->pool, e, PMH_LINE_BYTES);
	}
	if (pmh_batch_end(w->pool) != 0)
	{
		log->vacuum_active--;
		w->ops->log_unlock(w->arg);
		return pmh_wp_fail(w, PMH_WP_IOERROR, "clear backup log of", false);
	}
	/* only now are the zeros of reused lines on the media */
	for (l = 0; l < nlines; l++)
		pmh_wp_line(w, l)->zeroed = false;
	w->ops->log_unlock(w->arg);
	return PMH_WP_OK;
}

/* VACUUM is done deleting (also on error): releases stop clearing */
void
pmh_wp_vacuum_end(PmhWriter *w)
{
	w->ops->log_lock(w->arg);
	if (w->log->vacuum_active > 0)
		w->log->vacuum_active--;
	w->ops->log_unlock(w->arg);
}

/*
 * Remove dead entries from the D-bucket of primary segment segno (segment
 * lock exclusive): their log copies are cleared and persisted, then their
 * slots released.  *nremoved gets the number removed, *nremaining the
 * others.  Every entry is judged before any is removed: "dead" may raise
 * the caller's error, and an entry already out of the D-bucket would keep
 * its log slot until the next restart.
 */
PmhWpStatus
pmh_wp_vacuum_pending(PmhWriter *w, uint32 segno,
					  bool (*dead) (uint64 tag, void *arg), void *dead_arg,
					  uint32 *nremoved, uint32 *nremaining)
{
	PmhSegMeta *meta = w->cb->get_meta(w->cb->arg, segno);
	uint32		slots[PMH_DBUCKET_SLOTS];
	uint32		deadmask = 0;
	int			n = 0;
	uint32		i;

	StaticAssertStmt(PMH_DBUCKET_SLOTS <= 32, "a D-bucket fits a 32-bit mask");
	*nremaining = 0;
	for (i = 0; i < meta->npending; i++)
	{
		if (dead(meta->pending[i].tag, dead_arg))
			deadmask |= (uint32) 1 << i;
		else
			(*nremaining)++;
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
	*nremoved = (uint32) n;
	return pmh_wp_release(w, slots, n, true, true);
}
