/*-------------------------------------------------------------------------
 *
 * pmh_writepath.h
 *	  The write-path protocol of pmhash, server-free: the states of the
 *	  backup log's lines, reserving and releasing log slots, placing
 *	  entries into D-buckets with "make room" (split or overflow),
 *	  relocating every D-bucket, VACUUM's part of the log protocol, and
 *	  recovering the backup log.
 *
 * This is the one copy of that protocol.  The PostgreSQL access method
 * (src/pmhashblog.c and its neighbours), the crash simulator, the fuzzers
 * and the core benchmark all drive it.  The caller keeps its own locks and
 * memory: PmhWriteOps are the small callbacks through which the protocol
 * takes the backup log's lock, locks a segment, changes the mode of the
 * index lock, and makes room (a split, an overflow segment, a log
 * segment), which need the caller's allocation of segments and shared
 * memory.  See "The write path, file by file" in src/README.pmhash.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMH_WRITEPATH_H
#define PMH_WRITEPATH_H

#include "pmh_core.h"

/*
 * The volatile state of one backup-log line.  A line is free when nothing
 * in it is pending and nobody owns it; only a free line is taken for reuse.
 */
typedef struct PmhLogLine
{
	uint16		pending;		/* slots holding an entry not yet relocated
								 * (or reserved for one being written) */
	bool		zeroed;			/* zeroed for reuse in the mapping only: the
								 * media may still hold its old entries */
	int32		owner;			/* writer appending to it, or -1 */
} PmhLogLine;

/* an owner that is no writer: a line of the fixed log left unused */
#define PMH_LOG_UNUSABLE		(-2)

#define PMH_LOG_CHUNK			PMH_LOG_EXT_LINES	/* line states per chunk */

/*
 * The states of 64 backup-log lines, and which of them are free: taking a
 * line reads one mask per 64 lines.  Chunk c holds lines 64 c to 64 c + 63;
 * the caller keeps one chunk per 64 lines of the log (the fixed lines and
 * those of every log segment) and hands chunk c out through log_chunk.
 */
typedef struct PmhLogChunk
{
	uint64		free;			/* bit k: lines[k] is free */
	PmhLogLine	lines[PMH_LOG_CHUNK];
} PmhLogChunk;

/* The shared counters of a backup log (the caller's log lock protects them). */
typedef struct PmhLogState
{
	uint32		fixed_lines;	/* lines of the fixed log in use (normally
								 * PMH_LOG_LINES; fewer in tests, to make
								 * reuse and growth frequent) */
	uint32		max_exts;		/* log segments it may grow to */
	uint32		nexts;			/* log segments (extensions 0 .. nexts-1) */
	uint32		cursor;			/* where the search for a free line starts */
	uint32		pending;		/* slots pending (reserved or in a D-bucket) */
	int			vacuum_active;	/* VACUUMs running: releases clear copies */
} PmhLogState;

/* lines of a backup log: the fixed ones, then 64 per log segment */
static inline uint32
pmh_log_nlines(const PmhLogState *log)
{
	return PMH_LOG_LINES + log->nexts * PMH_LOG_EXT_LINES;
}

/*
 * What a protocol step could not do.  The callers' callbacks may instead
 * not return at all (the server raises an ERROR, with the locks released
 * by its error recovery).
 */
typedef enum PmhWpStatus
{
	PMH_WP_OK = 0,
	PMH_WP_IOERROR,				/* persisting failed; errno is set */
	PMH_WP_LOG_FULL,			/* no line is free, and none can be made */
	PMH_WP_NO_ROOM				/* making room failed (the caller's split,
								 * overflow or log growth returned false) */
} PmhWpStatus;

/*
 * The log lock, and the lock of the stack of free segments that a split
 * under a segment lock takes its new segments from, are held briefly: for
 * bookkeeping, a scan of the free-line masks, zeroing one log line in the
 * mapping (VACUUM's pass over the log, and the check that a free segment
 * is zero, hold them longer, but rarely).  A writer that finds one of them
 * taken tries again up to PMH_SHORT_LOCK_TRIES times, PMH_SHORT_LOCK_DELAYS
 * spin delays (the CPU's pause) apart, before it sleeps until the holder
 * wakes it: going to sleep and being woken takes two context switches, some
 * microseconds, many times the holder's stay.  With two threads inserting
 * in pmh_bench (10M keys), sleeping at once made inserts slower than with
 * one thread (5.4 against 6.2 Mops/s); spinning first, 8.7 to 9.4.  The
 * server (pmhash_lock_short) and the core's driver do the same.
 */
#define PMH_SHORT_LOCK_TRIES	32
#define PMH_SHORT_LOCK_DELAYS	8

/*
 * The caller's side of the protocol.  "arg" is PmhWriter.arg.  Unless said
 * otherwise a callback must be set.
 *
 * log_lock / log_unlock: the lock of the backup log's line states and of
 *	 PmhLogState (a mutex; the protocol never holds it across any other
 *	 callback but log_chunk).
 * log_chunk: chunk c of the line states.
 * index_exclusive: does the writer hold the index lock exclusively?  With
 *	 it, nobody else locks segments or changes the log.
 * relock: release the index lock and take it in the other mode.
 * lock_hash: the primary segment holding hash, locked exclusively (with
 *	 the index lock exclusive: no segment lock is needed), and its
 *	 metadata.  It returns with the index lock in the mode it found it in
 *	 (pmh_wp_place relies on that: only relock changes the mode).
 *	 unlock_segment undoes it.
 * lookup_segment: the primary segment the directory names for hash, read
 *	 without a segment lock, and its metadata (for prefetching only; may be
 *	 NULL).
 * segment_ready: may the metadata of primary segno be read (loaded since
 *	 the restart)?  NULL: always.
 * split_shared: split primary segno under its segment lock, the index lock
 *	 shared; false, having changed nothing, when the whole index is
 *	 needed.  May be NULL (always needed).
 * prune: optional; make room in primary segno and its chain, whose lock
 *	 the caller holds (exclusively, or the index lock exclusively), by
 *	 deleting entries it knows to be dead (the server's dead hints): true
 *	 if it deleted at least a D-bucket's worth (PMH_DBUCKET_SLOTS), so that
 *	 relocating again makes progress.  Tried before a split or an
 *	 overflow segment.
 * split, add_overflow: make room in primary segno, index lock exclusive.
 * add_log_segment: add log segment number log->nexts (call
 *	 pmh_wp_log_extend with a free segment and a chunk for its lines),
 *	 index lock exclusive.
 *	 These three return false when they could not (the protocol then
 *	 returns PMH_WP_NO_ROOM), or raise the caller's error.
 * nsegments: segments of the pool, for relocating every D-bucket.
 * primaries: primary segments (the log's growth policy).
 * before_relocate_all: optional; e.g. load every segment after a restart.
 * entries_added: optional; the count of entries in the index changed.
 * interrupt: optional; called once per round of a loop that may be long.
 * error: optional; hears a PMH_WP_IOERROR or PMH_WP_LOG_FULL before it is
 *	 returned ("what" says what failed, "fatal" that the shared state no
 *	 longer matches the pool, as after a failed relocation).
 */
typedef struct PmhWriteOps
{
	void		(*log_lock) (void *arg);
	void		(*log_unlock) (void *arg);
	PmhLogChunk *(*log_chunk) (void *arg, uint32 c);
	bool		(*index_exclusive) (void *arg);
	void		(*relock) (void *arg, bool exclusive);
	uint32		(*lock_hash) (void *arg, uint64 hash, PmhSegMeta **meta);
	void		(*unlock_segment) (void *arg, uint32 segno);
	uint32		(*lookup_segment) (void *arg, uint64 hash, PmhSegMeta **meta);
	bool		(*segment_ready) (void *arg, uint32 segno);
	bool		(*split_shared) (void *arg, uint32 segno);
	bool		(*split) (void *arg, uint32 segno);
	bool		(*add_overflow) (void *arg, uint32 segno);
	bool		(*prune) (void *arg, uint32 segno);
	bool		(*add_log_segment) (void *arg);
	uint32		(*nsegments) (void *arg);
	uint64		(*primaries) (void *arg);
	void		(*before_relocate_all) (void *arg);
	void		(*entries_added) (void *arg, int64 n);
	void		(*interrupt) (void *arg);
	void		(*error) (void *arg, PmhWpStatus status, const char *what,
						  bool fatal);
} PmhWriteOps;

/*
 * Deliberate protocol faults, for the crash simulator's test that it would
 * notice them (PmhWriter.faults).  Never set outside that test.
 */
#define PMH_WP_FAULT_KEEP_ZEROED	0x01	/* VACUUM does not flush lines
											 * zeroed for reuse */
#define PMH_WP_FAULT_KEEP_RELEASED	0x02	/* releases during VACUUM keep
											 * their log copies */

/*
 * One writer (a backend, a thread) working on one index.  The caller fills
 * it in before each protocol call (it is cheap); own_line and own_used
 * point to where the writer keeps the line it appends to across calls.
 */
typedef struct PmhWriter
{
	PmhPool    *pool;
	const PmhCallbacks *cb;		/* segment metadata and allocation */
	const PmhWriteOps *ops;
	void	   *arg;			/* of ops */
	PmhLogState *log;
	int32		id;				/* owner number of the lines it takes */
	int32	   *own_line;		/* the line it appends to, or -1 */
	int		   *own_used;		/* slots of it used */
	bool		check_segment;	/* relocation looks for duplicates in the
								 * segment (a stale pool) */
	int			faults;			/* PMH_WP_FAULT_* */
	uint32		placed;			/* entries pmh_wp_place put into D-buckets */
} PmhWriter;

extern void pmh_wp_writer_init(PmhWriter *w, PmhPool *pool,
							   const PmhCallbacks *cb, const PmhWriteOps *ops,
							   void *arg, PmhLogState *log, int32 id,
							   int32 *own_line, int *own_used);

/* ---- line states (log lock held) ---- */
extern void pmh_wp_log_init(PmhWriter *w, uint32 fixed_lines, uint32 max_exts);
extern void pmh_wp_chunk_init(PmhLogChunk *c);
extern PmhLogLine *pmh_wp_line(const PmhWriter *w, uint32 line);
extern void pmh_wp_note_line(const PmhWriter *w, uint32 line);
extern void pmh_wp_disown(const PmhWriter *w, uint32 line);
extern void pmh_wp_mark_pending(const PmhWriter *w, uint32 line, int first,
								int n);
extern bool pmh_wp_line_marked_free(const PmhWriter *w, uint32 line);
extern uint32 pmh_wp_lines_in_use(const PmhWriter *w);

/* ---- the protocol ---- */
extern PmhWpStatus pmh_wp_log_extend(PmhWriter *w, uint32 segno,
									 uint32 *ext_segs);
extern PmhWpStatus pmh_wp_reserve(PmhWriter *w, int n, uint32 *line,
								  int *first);
extern PmhWpStatus pmh_wp_write(PmhWriter *w, const PmhEntry *entries, int n,
								uint32 *line, int *first);
extern PmhWpStatus pmh_wp_release(PmhWriter *w, const uint32 *slots, int n,
								  bool zero, bool fatal);
extern PmhWpStatus pmh_wp_relocate_segment(PmhWriter *w, uint32 segno,
										   PmhInsertResult *verdict);
extern PmhWpStatus pmh_wp_make_room(PmhWriter *w, uint32 segno,
									PmhInsertResult verdict);
extern PmhWpStatus pmh_wp_place(PmhWriter *w, uint64 hash, uint64 tag,
								uint32 logslot);
extern void pmh_wp_prefetch_placement(PmhWriter *w, const PmhEntry *entries,
									  int n);
extern PmhWpStatus pmh_wp_place_written(PmhWriter *w, const PmhEntry *entries,
										int n, uint32 line, int first);
extern void pmh_wp_close_full_line(PmhWriter *w);
extern PmhWpStatus pmh_wp_flush(PmhWriter *w, const PmhEntry *entries, int n);
extern PmhWpStatus pmh_wp_relocate_all(PmhWriter *w);

/* ---- VACUUM ---- */
extern PmhWpStatus pmh_wp_vacuum_begin(PmhWriter *w);
extern void pmh_wp_vacuum_end(PmhWriter *w);
extern PmhWpStatus pmh_wp_vacuum_pending(PmhWriter *w, uint32 segno,
										 bool (*dead) (uint64 tag, void *arg),
										 void *dead_arg, uint32 *nremoved,
										 uint32 *nremaining);

/* ---- recovery ---- */
typedef void (*PmhLogFoundFn) (void *arg, uint32 logslot, const PmhEntry *e);

extern uint32 pmh_wp_log_recover(PmhWriter *w, PmhLogFoundFn found,
								 void *found_arg);
extern bool pmh_wp_sort_out(PmhWriter *w, uint32 segno, const uint32 *slots,
							uint32 n, uint32 *released, uint32 *nreleased,
							uint32 *missing, uint32 *nmissing);
extern PmhWpStatus pmh_wp_recover_slot(PmhWriter *w, uint32 logslot,
									   bool *restored);
extern PmhWpStatus pmh_wp_recover_all(PmhWriter *w, uint32 *nrestored);

#endif							/* PMH_WRITEPATH_H */
