/*-------------------------------------------------------------------------
 *
 * pmh_media.h
 *	  A model of a persistent-memory device's write-combining buffer
 *	  (Optane's "XPBuffer"): turns the stream of flushed 64 B cache lines
 *	  into media bytes written and read.  Server-independent; the caller
 *	  owns the struct and does the locking.  Rules: see pmh_media.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMH_MEDIA_H
#define PMH_MEDIA_H

#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#define PMH_MEDIA_LINE_BYTES	256
#define PMH_MEDIA_SUB_BYTES		64	/* CPU cache line */
#define PMH_MEDIA_SUBS			(PMH_MEDIA_LINE_BYTES / PMH_MEDIA_SUB_BYTES)
#define PMH_MEDIA_ALL_SUBS		((1 << PMH_MEDIA_SUBS) - 1)
#define PMH_MEDIA_MAX_LINES		1024	/* upper bound for the buffer size */
#define PMH_MEDIA_DEFAULT_LINES 64
#define PMH_MEDIA_ANY_OWNER		UINT32_MAX

typedef struct PmhMediaCounters
{
	uint64		flushed_sublines;	/* 64 B cache lines fed in by writes */
	uint64		write_hits;		/* writes that found their line resident */
	uint64		write_misses;
	uint64		read_hits;
	uint64		read_misses;
	uint64		whole_line_writes;	/* evictions of fully written lines */
	uint64		partial_line_writes;	/* evictions needing read-modify-write */
	uint64		media_bytes_written;
	uint64		media_bytes_read;
} PmhMediaCounters;

/* slots of the model's index of resident lines: a power of two, >= 2 x */
#define PMH_MEDIA_HASH_SLOTS	(2 * PMH_MEDIA_MAX_LINES)
#define PMH_MEDIA_NONE			(-1)	/* end of a list */

/* one buffer entry */
typedef struct PmhMediaLine
{
	uint64		pool;			/* caller's identifier of the pool */
	uint64		line;			/* 256 B line number within the pool */
	uint32		owner;			/* whom to charge its media traffic */
	uint8		dirty;			/* sub-lines written since it entered */
	uint8		valid;			/* sub-lines holding data */
	int16		newer;			/* LRU list neighbours (entry numbers), or */
	int16		older;			/* PMH_MEDIA_NONE; "older" links free ones */
	uint64		lru;			/* last use; 0 = entry unused */
} PmhMediaLine;

/*
 * The buffer.  Resident lines are found through "index" (open addressing,
 * linear probing: entry number + 1, 0 = empty) and kept on a list from the
 * most to the least recently used, so that each access costs O(1) however
 * large the buffer is; the server updates the model on every persist.
 */
typedef struct PmhMediaModel
{
	int			nlines;			/* capacity, 1..PMH_MEDIA_MAX_LINES */
	int			index_mask;		/* slots of index[] in use, minus one */
	uint64		clock;
	PmhMediaCounters total;
	int16		newest;			/* LRU list ends, or PMH_MEDIA_NONE */
	int16		oldest;
	int16		free;			/* unused entries, linked by "older" */
	int16		index[PMH_MEDIA_HASH_SLOTS];
	PmhMediaLine lines[PMH_MEDIA_MAX_LINES];
} PmhMediaModel;

/* where media traffic is charged: the owner of the line */
typedef void (*PmhMediaChargeFn) (void *arg, uint32 owner,
								  uint64 bytes_written, uint64 bytes_read);

extern void pmh_media_init(PmhMediaModel *m, int nlines);
extern void pmh_media_write(PmhMediaModel *m, uint64 pool, uint64 offset,
							size_t len, uint32 owner,
							PmhMediaChargeFn charge, void *arg);
extern void pmh_media_read(PmhMediaModel *m, uint64 pool, uint64 offset,
						   size_t len, uint32 owner,
						   PmhMediaChargeFn charge, void *arg);
extern void pmh_media_pending(const PmhMediaModel *m, uint32 owner_filter,
							  uint64 *bytes_written, uint64 *bytes_read);
extern void pmh_media_drain(PmhMediaModel *m, PmhMediaChargeFn charge,
							void *arg);
extern void pmh_media_forget_pool(PmhMediaModel *m, uint64 pool);

#endif							/* PMH_MEDIA_H */
