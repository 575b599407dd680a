/*-------------------------------------------------------------------------
 *
 * tlog.c
 *	  The core's write-path protocol (src/core/pmh_writepath.c) driven over
 *	  a test pool: the backup log's line states, which the server keeps in
 *	  shared memory, and the callbacks of one single-threaded writer.
 *
 * With one writer there are no locks to take: the writer always holds the
 * index "exclusively", the directory names the segment of a hash, and a
 * split or an overflow segment is made at once (tpool_split,
 * tpool_add_overflow).  Everything else -- reserving, releasing, placing,
 * making room, relocating everything, VACUUM's clearing and log
 * recovery -- is the code the server runs.
 *
 *-------------------------------------------------------------------------
 */
#include "tpool.h"
#include "unit_check.h"

#define TLOG_MAX_CHUNKS		(PMH_LOG_MAX_LINES / PMH_LOG_CHUNK)

static void
tlog_nolock(void *arg)
{
}

static PmhLogChunk *
tlog_chunk(void *arg, uint32 c)
{
	TPool	   *tp = (TPool *) arg;

	CHECKF(c < TLOG_MAX_CHUNKS && tp->logchunks[c] != NULL,
		   "backup-log chunk %u is not set up", c);
	return tp->logchunks[c];
}

static bool
tlog_exclusive(void *arg)
{
	return true;
}

static void
tlog_relock(void *arg, bool exclusive)
{
	CHECKF(false, "a single writer never changes its lock mode");
}

/* lock_hash and lookup_segment: with one writer, no lock is needed */
static uint32
tlog_lookup_segment(void *arg, uint64 hash, PmhSegMeta **meta)
{
	TPool	   *tp = (TPool *) arg;
	uint32		segno = tp->dir[pmh_dir_index(hash, tp->gd)];

	*meta = cb_get_meta(tp, segno);
	return segno;
}

static void
tlog_unlock_segment(void *arg, uint32 segno)
{
}

static bool
tlog_split(void *arg, uint32 segno)
{
	TPool	   *tp = (TPool *) arg;

	return !tp->wp_deny_room && tpool_split(tp, segno) != PMH_NO_SEGMENT;
}

static bool
tlog_add_overflow(void *arg, uint32 segno)
{
	TPool	   *tp = (TPool *) arg;

	return !tp->wp_deny_room &&
		tpool_add_overflow(tp, segno) != PMH_NO_SEGMENT;
}

/* add log segment number log.nexts, with the chunk of its lines */
static bool
tlog_add_log_segment(void *arg)
{
	TPool	   *tp = (TPool *) arg;
	uint32		c = pmh_log_nlines(&tp->log) / PMH_LOG_CHUNK;
	uint32		segno;

	if (tp->wp_deny_room || !tpool_ensure_free(tp, 1))
		return false;
	segno = cb_alloc_segment(tp);
	if (!CHECKF(segno != PMH_NO_SEGMENT && c < TLOG_MAX_CHUNKS,
				"no free segment for the log"))
		return false;
	tp->logchunks[c] = pg_malloc(sizeof(PmhLogChunk));
	pmh_wp_chunk_init(tp->logchunks[c]);
	if (pmh_wp_log_extend(&tp->w, segno, tp->log_exts) != PMH_WP_OK)
		return false;
	tp->role[segno] = T_LOG;
	tp->nlog_exts = tp->log.nexts;
	return true;
}

static uint32
tlog_nsegments(void *arg)
{
	return (uint32) ((TPool *) arg)->nseg;
}

static uint64
tlog_primaries(void *arg)
{
	uint64		nprim;
	uint64		novf;

	tpool_count((TPool *) arg, &nprim, &novf);
	return nprim;
}

static void
tlog_entries_added(void *arg, int64 n)
{
	((TPool *) arg)->entries_delta += n;
}

/*
 * A failure of the protocol is a failure of the test, unless the test
 * causes it on purpose: then it is counted and remembered.
 */
static void
tlog_error(void *arg, PmhWpStatus status, const char *what, bool fatal)
{
	TPool	   *tp = (TPool *) arg;

	tp->wp_errors++;
	tp->wp_last_status = status;
	tp->wp_last_fatal = fatal;
	CHECKF(tp->wp_expect_errors, "could not %s pool (status %d%s): %m", what,
		   (int) status, fatal ? ", fatal" : "");
}

static const PmhWriteOps tlog_ops = {
	.log_lock = tlog_nolock,
	.log_unlock = tlog_nolock,
	.log_chunk = tlog_chunk,
	.index_exclusive = tlog_exclusive,
	.relock = tlog_relock,
	.lock_hash = tlog_lookup_segment,
	.unlock_segment = tlog_unlock_segment,
	.lookup_segment = tlog_lookup_segment,
	.split = tlog_split,
	.add_overflow = tlog_add_overflow,
	.add_log_segment = tlog_add_log_segment,
	.nsegments = tlog_nsegments,
	.primaries = tlog_primaries,
	.entries_added = tlog_entries_added,
	.error = tlog_error,
};

/* fill in the writer of a pool whose line states are set up */
static void
tlog_fill_writer(TPool *tp)
{
	pmh_wp_writer_init(&tp->w, &tp->pool, &tp->cb, &tlog_ops, tp, &tp->log,
					   1, &tp->own_line, &tp->own_used);
	tp->w.check_segment = true;
	tp->w.faults = tp->faults;
}

/*
 * Set up the line states of a pool's backup log, all free: its fixed lines
 * (the first fixed_lines of them used) and the log segments the pool has
 * (tp->nlog_exts), growing to at most max_exts log segments.
 */
void
tlog_setup(TPool *tp, uint32 fixed_lines, uint32 max_exts)
{
	uint32		c;
	uint32		i;

	tlog_free(tp);
	if (tp->log_exts == NULL)
	{
		tp->log_exts = pg_malloc(PMH_LOG_MAX_EXTS * sizeof(uint32));
		for (i = 0; i < PMH_LOG_MAX_EXTS; i++)
			tp->log_exts[i] = PMH_NO_SEGMENT;
	}
	tp->pool.log_ext_segs = tp->log_exts;
	tp->logchunks = pg_malloc0(TLOG_MAX_CHUNKS * sizeof(PmhLogChunk *));
	tp->log.nexts = tp->nlog_exts;
	for (c = 0; c < pmh_log_nlines(&tp->log) / PMH_LOG_CHUNK; c++)
	{
		tp->logchunks[c] = pg_malloc(sizeof(PmhLogChunk));
		pmh_wp_chunk_init(tp->logchunks[c]);
	}
	tp->own_line = -1;
	tp->own_used = 0;
	tlog_fill_writer(tp);
	pmh_wp_log_init(&tp->w, fixed_lines, max_exts);
}

/* give back the line states (the next tlog_writer sets them up anew) */
void
tlog_free(TPool *tp)
{
	uint32		c;

	if (tp->logchunks == NULL)
		return;
	for (c = 0; c < TLOG_MAX_CHUNKS; c++)
		free(tp->logchunks[c]);
	free(tp->logchunks);
	tp->logchunks = NULL;
}

/* the pool's writer; line states set up with every line usable if need be */
PmhWriter *
tlog_writer(TPool *tp)
{
	if (tp->logchunks == NULL)
		tlog_setup(tp, PMH_LOG_LINES, PMH_LOG_MAX_EXTS);
	tlog_fill_writer(tp);
	return &tp->w;
}

/*
 * A test wrote n entries into line "line" from slot "first" on itself
 * (pend_entries): mark their slots pending, as a reservation would.
 */
void
tlog_mark_pending(TPool *tp, uint32 line, int first, int n)
{
	pmh_wp_mark_pending(tlog_writer(tp), line, first, n);
}

/*
 * Relocate every D-bucket (pmh_wp_relocate_all, looking for duplicates in
 * the segments).  Returns the number of log slots released; *ndup gets the
 * duplicates among them.
 */
int
tpool_relocate_all(TPool *tp, int *ndup)
{
	PmhWriter  *w = tlog_writer(tp);
	uint32		before = tp->log.pending;

	tp->entries_delta = 0;
	CHECKF(pmh_wp_relocate_all(w) == PMH_WP_OK, "relocating everything failed");
	*ndup = (int) -tp->entries_delta;
	return (int) (before - tp->log.pending);
}

/*
 * The server's log recovery after the segments are recovered: every live
 * backup-log slot whose entry the owning segment does not hold goes back
 * into that segment's D-bucket (pmh_wp_recover_all).  Returns the number
 * of entries put back.
 */
int
log_recover(TPool *tp)
{
	uint32		n = 0;

	tlog_free(tp);
	CHECKF(pmh_wp_recover_all(tlog_writer(tp), &n) == PMH_WP_OK,
		   "log recovery failed");
	return (int) n;
}
