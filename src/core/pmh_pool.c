/*-------------------------------------------------------------------------
 *
 * pmh_pool.c
 *	  The pool as a whole: segment words and entry tags, the pool header
 *	  and its validation, the persistence choke point (pmh_persist and
 *	  batches of flushes), and formatting a new pool and its state line.
 *
 * The caller holds whatever locks the operation needs (see the locking
 * protocol in src/README.pmhash) and keeps the volatile metadata.  Every
 * write that must reach the device goes through pmh_persist(), here.
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_core_int.h"

#include <errno.h>
#include <string.h>

#include <libpmem.h>

#include "port/pg_crc32c.h"

#define PMH_SEGWORD_VALID		(UINT64CONST(1) << 63)
#define PMH_SEGWORD_OVERFLOW	(UINT64CONST(1) << 62)
#define PMH_SEGWORD_LOG_DEPTH	63

/* check byte of a segment word, computed over bits 63..8 */
static uint8
pmh_segword_check(uint64 word)
{
	uint64		x = (word >> 8) * UINT64CONST(0x9E3779B97F4A7C15);

	return (uint8) ((x >> 56) ^ 0x5c);
}

/* build the word of a primary segment at local depth "depth" */
uint64
pmh_segword_make(int depth, uint64 prefix)
{
	uint64		w;

	Assert(depth >= 0 && depth <= PMH_MAX_DEPTH);
	w = PMH_SEGWORD_VALID | ((uint64) depth << 56) |
		((prefix & (PMH_HASH_SPACE - 1)) << 8);
	return w | pmh_segword_check(w);
}

/* build the word of an overflow segment */
uint64
pmh_segword_make_overflow(void)
{
	uint64		w = PMH_SEGWORD_VALID | PMH_SEGWORD_OVERFLOW;

	return w | pmh_segword_check(w);
}

/* build the word of log segment "ext" (depth 63 marks it) */
uint64
pmh_segword_make_log(uint32 ext)
{
	uint64		w = PMH_SEGWORD_VALID | PMH_SEGWORD_OVERFLOW |
		((uint64) PMH_SEGWORD_LOG_DEPTH << 56) | ((uint64) ext << 8);

	Assert(ext < PMH_LOG_MAX_EXTS);
	return w | pmh_segword_check(w);
}

/* is this a well-formed word of an in-use segment? */
bool
pmh_segword_is_valid(uint64 word)
{
	if ((word & PMH_SEGWORD_VALID) == 0)
		return false;
	if (pmh_segword_check(word) != (uint8) (word & 0xff))
		return false;
	if (word & PMH_SEGWORD_OVERFLOW)
		return (pmh_segword_depth(word) == 0 && pmh_segword_prefix(word) == 0) ||
			(pmh_segword_depth(word) == PMH_SEGWORD_LOG_DEPTH &&
			 pmh_segword_prefix(word) < PMH_LOG_MAX_EXTS);
	if (pmh_segword_depth(word) > PMH_MAX_DEPTH)
		return false;
	/* a prefix never has more bits than the depth */
	if (pmh_segword_depth(word) < PMH_MAX_DEPTH &&
		(pmh_segword_prefix(word) >> pmh_segword_depth(word)) != 0)
		return false;
	return true;
}

/*
 * Is this the word of a segment that is not a primary: an overflow segment
 * or a log segment?
 */
bool
pmh_segword_is_overflow(uint64 word)
{
	return (word & PMH_SEGWORD_OVERFLOW) != 0;
}

/* is this the word of a log segment? */
bool
pmh_segword_is_log(uint64 word)
{
	return (word & PMH_SEGWORD_OVERFLOW) != 0 &&
		pmh_segword_depth(word) == PMH_SEGWORD_LOG_DEPTH;
}

/* build the tag word of a live entry */
uint64
pmh_tag_make(uint64 hash, uint32 block, uint16 offset)
{
	return (PMH_TAG_LIVE << 56) | ((uint64) pmh_fingerprint(hash) << 48) |
		((uint64) block << 16) | offset;
}

/* ---------------------------------------------------------------------
 * The pool header
 * ---------------------------------------------------------------------
 */

/* fill in a fresh header */
void
pmh_header_init(PmhPoolHeader *hdr, uint64 pool_id, uint32 db_oid,
				uint32 spc_oid, uint32 rel_node, uint32 index_oid)
{
	memset(hdr, 0, sizeof(*hdr));
	hdr->magic = PMH_MAGIC;
	hdr->version = PMH_LAYOUT_VERSION;
	hdr->header_bytes = PMH_HEADER_BYTES;
	hdr->pool_id = pool_id;
	hdr->db_oid = db_oid;
	hdr->spc_oid = spc_oid;
	hdr->rel_node = rel_node;
	hdr->index_oid = index_oid;
	hdr->line_bytes = PMH_LINE_BYTES;
	hdr->entry_bytes = PMH_ENTRY_BYTES;
	hdr->bucket_slots = PMH_BUCKET_SLOTS;
	hdr->seg_buckets = PMH_SEG_BUCKETS;
	hdr->placement = PMH_PLACEMENT_ANY;
	hdr->seg_bytes = PMH_SEG_BYTES;
	hdr->seg_offset = PMH_SEG_OFFSET;
	hdr->log_offset = PMH_LOG_OFFSET;
	hdr->log_lines = PMH_LOG_LINES;
	hdr->checksum = pmh_header_checksum(hdr);
}

/* CRC-32C of the header up to its checksum field */
uint32
pmh_header_checksum(const PmhPoolHeader *hdr)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, hdr, offsetof(PmhPoolHeader, checksum));
	FIN_CRC32C(crc);
	return crc;
}

/*
 * Check a header read from a file of file_len bytes: magic, version,
 * checksum, layout parameters and a length consistent with whole segments.
 * Ownership (database, relfilenode, pool id) is checked by the caller.
 */
PmhHeaderStatus
pmh_header_validate(const PmhPoolHeader *hdr, size_t file_len)
{
	if (file_len < PMH_HEADER_BYTES)
		return PMH_HEADER_TRUNCATED;
	if (hdr->magic != PMH_MAGIC)
		return PMH_HEADER_BAD_MAGIC;
	if (hdr->version != PMH_LAYOUT_VERSION)
		return PMH_HEADER_BAD_VERSION;
	if (hdr->checksum != pmh_header_checksum(hdr))
		return PMH_HEADER_BAD_CHECKSUM;
	if (hdr->header_bytes != PMH_HEADER_BYTES ||
		hdr->line_bytes != PMH_LINE_BYTES ||
		hdr->entry_bytes != PMH_ENTRY_BYTES ||
		hdr->bucket_slots != PMH_BUCKET_SLOTS ||
		hdr->seg_buckets != PMH_SEG_BUCKETS ||
		(hdr->placement != PMH_PLACEMENT_ANY &&
		 hdr->placement != PMH_PLACEMENT_WINDOW8) ||
		hdr->seg_bytes != PMH_SEG_BYTES ||
		hdr->seg_offset != PMH_SEG_OFFSET ||
		hdr->log_offset != PMH_LOG_OFFSET ||
		hdr->log_lines == 0 || hdr->log_lines > PMH_LOG_LINES ||
		hdr->log_lines % PMH_LOG_EXT_LINES != 0)
		return PMH_HEADER_BAD_LAYOUT;
	if (file_len < pmh_pool_bytes(1) ||
		(file_len - PMH_SEG_OFFSET) % PMH_SEG_BYTES != 0)
		return PMH_HEADER_TRUNCATED;
	return PMH_HEADER_OK;
}

/* human-readable reason for a header status */
const char *
pmh_header_status_string(PmhHeaderStatus status)
{
	switch (status)
	{
		case PMH_HEADER_OK:
			return "valid";
		case PMH_HEADER_TRUNCATED:
			return "file is truncated or not a whole number of segments";
		case PMH_HEADER_BAD_MAGIC:
			return "file is not a pmhash pool (bad magic number)";
		case PMH_HEADER_BAD_VERSION:
			return "pool layout version is not supported";
		case PMH_HEADER_BAD_CHECKSUM:
			return "pool header checksum mismatch";
		case PMH_HEADER_BAD_LAYOUT:
			return "pool layout parameters do not match this build";
		case PMH_HEADER_FOREIGN:
			return "pool belongs to another index";
	}
	return "unknown";
}

/* size of a pool file holding nsegments segments */
size_t
pmh_pool_bytes(uint64 nsegments)
{
	return PMH_SEG_OFFSET + (size_t) nsegments * PMH_SEG_BYTES;
}

/* number of segments the current mapping covers */
uint64
pmh_pool_nsegments(const PmhPool *pool)
{
	if (pool->mapped_len < PMH_SEG_OFFSET)
		return 0;
	return (pool->mapped_len - PMH_SEG_OFFSET) / PMH_SEG_BYTES;
}

/*
 * Account for one flushed range: the counters and the flush hook see it
 * rounded out to 64 B lines, as a CPU flush would write it, whatever the
 * device call that makes it persistent.
 */
static void
pmh_account_range(PmhPool *pool, const void *addr, size_t len)
{
	uintptr_t	start;
	uintptr_t	end;
	uintptr_t	l;

	start = (uintptr_t) addr & ~((uintptr_t) PMH_CACHELINE_BYTES - 1);
	end = ((uintptr_t) addr + len + PMH_CACHELINE_BYTES - 1) &
		~((uintptr_t) PMH_CACHELINE_BYTES - 1);
	pool->stats.persists++;
	pool->stats.bytes += len;
	pool->stats.cachelines += (end - start) / PMH_CACHELINE_BYTES;

	/* 256 B media lines covered whole or in part (the pool is 4 kB aligned) */
	for (l = start & ~((uintptr_t) PMH_LINE_BYTES - 1); l < end;
		 l += PMH_LINE_BYTES)
	{
		if (l >= start && l + PMH_LINE_BYTES <= end)
			pool->stats.lines_whole++;
		else
			pool->stats.lines_partial++;
	}
	if (pool->flush_hook)
		pool->flush_hook(pool->flush_hook_arg,
						 (uint64) (start - (uintptr_t) pool->base),
						 end - start);
}

/* msync the pages of one range (ordinary file); 0, or -1 with errno set */
static int
pmh_msync(PmhPool *pool, const void *addr, size_t len)
{
	pool->stats.syncs++;
	pool->stats.sync_bytes += len;
	return pmem_msync(addr, len);
}

/*
 * Lazy write-back: the ranges just accounted for are left to the kernel's
 * write-back.  They are covered once the pool's write-back mark is set
 * durably: check that it is, or have the hook set it.  The full barrier
 * orders the caller's stores before the read of the flag, so that a
 * write-back that clears the flag after this read finds them stored (see
 * "Deferred write-back" in src/README.pmhash).  Returns 0, or -1 with
 * errno set.
 */
static int
pmh_lazy_cover(PmhPool *pool)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (likely(*pool->marked))
		return 0;
	return pool->mark_hook(pool, pool->mark_hook_arg);
}

/*
 * Has a test asked for the next flush to fail?  Then set errno, forget the
 * request and return true: that flush reaches nothing.
 */
static inline bool
pmh_fail_injected(PmhPool *pool)
{
	if (likely(pool->fail_errno == 0))
		return false;
	errno = pool->fail_errno;
	pool->fail_errno = 0;
	return true;
}

/*
 * Flush one range and account for it; the fence is the caller's.  With
 * may_defer, a pool in lazy write-back leaves it to the kernel (see
 * pmh_lazy_cover).  Returns 0, or -1 with errno set.
 */
static int
pmh_flush_range(PmhPool *pool, const void *addr, size_t len, bool may_defer)
{
	if (pmh_fail_injected(pool))
		return -1;
	pmh_account_range(pool, addr, len);
	if (pool->is_pmem)
	{
		pmem_flush(addr, len);
		return 0;
	}
	if (pool->lazy && may_defer)
	{
		pool->stats.deferred++;
		return pmh_lazy_cover(pool);
	}
	return pmh_msync(pool, addr, len);
}

/*
 * Flush the ranges a batch has collected (the fence is the caller's).  On
 * persistent memory each range is flushed as it is.  With msync every call
 * writes back the dirty pages of its range and then waits for the device
 * (a cache flush of the disk, often a journal commit), which costs far
 * more than the pages: the ranges are sorted and those that overlap or lie
 * within PMH_MSYNC_MERGE_GAP of each other share one call.  Pages in such
 * a gap that nobody dirtied cost nothing; dirty ones are written early,
 * which the persistence protocol allows (any store may reach the media at
 * any time, as an evicted cache line does).  The accounting sees the
 * ranges as they were persisted.  Returns 0, or -1 with errno set.
 */
static int
pmh_flush_batch(PmhPool *pool)
{
	int			n = pool->nbatch;
	int			i;
	uintptr_t	start = 0;
	uintptr_t	end = 0;

	pool->nbatch = 0;
	if (n > 0 && pmh_fail_injected(pool))
		return -1;
	for (i = 0; i < n; i++)
	{
		if (pool->is_pmem)
			pmh_flush_range(pool, pool->batch[i].addr, pool->batch[i].len, true);
		else
			pmh_account_range(pool, pool->batch[i].addr, pool->batch[i].len);
	}
	if (pool->is_pmem)
		return 0;
	if (pool->lazy)
	{
		pool->stats.deferred += n;
		return n > 0 ? pmh_lazy_cover(pool) : 0;
	}

	/* by address (insertion sort: at most PMH_BATCH_RANGES, mostly in order) */
	for (i = 1; i < n; i++)
	{
		const void *a = pool->batch[i].addr;
		size_t		len = pool->batch[i].len;
		int			j = i;

		while (j > 0 && (uintptr_t) pool->batch[j - 1].addr > (uintptr_t) a)
		{
			pool->batch[j] = pool->batch[j - 1];
			j--;
		}
		pool->batch[j].addr = a;
		pool->batch[j].len = len;
	}
	for (i = 0; i < n; i++)
	{
		uintptr_t	a = (uintptr_t) pool->batch[i].addr;
		uintptr_t	e = a + pool->batch[i].len;

		if (i > 0 && a <= end + PMH_MSYNC_MERGE_GAP)
		{
			end = Max(end, e);
			continue;
		}
		if (i > 0 && pmh_msync(pool, (const void *) start, end - start) != 0)
			return -1;
		start = a;
		end = e;
	}
	if (n > 0 && pmh_msync(pool, (const void *) start, end - start) != 0)
		return -1;
	return 0;
}

/* wait until every flush issued so far has reached the device */
static void
pmh_fence(PmhPool *pool)
{
	pool->stats.fences++;
	if (pool->is_pmem)
		pmem_drain();
	if (pool->flush_hook)
		pool->flush_hook(pool->flush_hook_arg, 0, 0);
}

/*
 * The persistence choke point.  On persistent memory (or when libpmem is
 * told to treat the mapping as such) flush the CPU cache lines and fence;
 * otherwise msync the pages.  Inside a batch (pmh_batch_begin) the range is
 * only remembered: pmh_batch_end flushes every range and fences once.
 * Returns 0, or -1 with errno set.
 */
int
pmh_persist(PmhPool *pool, const void *addr, size_t len)
{
	if (len == 0 || pool->no_persist)
		return 0;

	if (pool->batching)
	{
		/* flush what we have; the fence still waits for the end */
		if (pool->nbatch == PMH_BATCH_RANGES && pmh_flush_batch(pool) != 0)
			return -1;
		pool->batch[pool->nbatch].addr = addr;
		pool->batch[pool->nbatch].len = len;
		pool->nbatch++;
		return 0;
	}

	if (pmh_flush_range(pool, addr, len, true) != 0)
		return -1;
	pmh_fence(pool);
	return 0;
}

/* start collecting persists: they are flushed, with one fence, at the end */
void
pmh_batch_begin(PmhPool *pool)
{
	Assert(!pool->batching);
	pool->batching = 1;
	pool->nbatch = 0;
}

/*
 * Flush every range persisted since pmh_batch_begin, then fence once.
 * Returns 0, or -1 with errno set (the batch is over either way).
 */
int
pmh_batch_end(PmhPool *pool)
{
	int			n = pool->nbatch;

	pool->batching = 0;
	if (pmh_flush_batch(pool) != 0)
		return -1;
	if (n > 0)
		pmh_fence(pool);
	return 0;
}

/*
 * Write a fresh pool into a mapping of at least pmh_pool_bytes(1) bytes:
 * the header and one primary segment of depth 0 covering every hash.
 * Segments past the first must read as zero (a newly extended file does).
 */
int
pmh_pool_format(PmhPool *pool, const PmhPoolHeader *hdr)
{
	PmhSegHeader *seg;

	size_t		log_end = PMH_LOG_OFFSET + (size_t) hdr->log_lines * PMH_LINE_BYTES;

	/* (the fixed log's lines past log_lines are never touched) */
	memset(pool->base, 0, log_end);
	memset(pool->base + PMH_SEG_OFFSET, 0, PMH_SEG_BYTES);
	memcpy(pool->base, hdr, sizeof(*hdr));
	seg = pmh_seg_header(pool, 0);
	seg->word = pmh_segword_make(0, 0);
	seg->ovf_next = 0;
	/* the header last: a pool is what it says only once it is whole */
	if (pmh_persist(pool, pool->base + PMH_SEG_OFFSET, PMH_SEG_BYTES) != 0)
		return -1;
	return pmh_persist(pool, pool->base, log_end);
}

/* set the state line of a new pool: no crash seen, opened at crash_count */
int
pmh_pool_state_init(PmhPool *pool, uint64 crash_count)
{
	PmhPoolState *st = pmh_pool_state(pool);

	st->flags = PMH_STATE_KEPT;
	st->crash_count = crash_count;
	return pmh_persist(pool, st, sizeof(*st));
}

/*
 * Set and clear flags of the pool's state line and persist it.  Returns 0,
 * or -1 with errno set.
 */
int
pmh_pool_state_set(PmhPool *pool, uint64 set, uint64 clear)
{
	PmhPoolState *st = pmh_pool_state(pool);

	st->flags = (st->flags | set) & ~clear;
	return pmh_persist(pool, &st->flags, sizeof(uint64));
}

/*
 * Note an open of the pool by a server that has counted crash_count
 * crashes.  If the pool was last opened before a crash, set PMH_STATE_STALE
 * (persisted before the new count, so that a crash in between cannot lose
 * it).  *stale tells whether the pool may hold entries of lost inserts.
 * Returns 0, or -1 with errno set.
 */
int
pmh_pool_note_crashes(PmhPool *pool, uint64 crash_count, bool *stale)
{
	PmhPoolState *st = pmh_pool_state(pool);

	if (st->crash_count != crash_count)
	{
		if (st->flags == PMH_STATE_KEPT)
		{
			st->flags = PMH_STATE_KEPT | PMH_STATE_STALE;
			if (pmh_persist(pool, &st->flags, sizeof(uint64)) != 0)
				return -1;
		}
		st->crash_count = crash_count;
		if (pmh_persist(pool, &st->crash_count, sizeof(uint64)) != 0)
			return -1;
	}
	*stale = st->flags != PMH_STATE_KEPT;
	return 0;
}

/*
 * Make a range durable now, whatever the pool's mode: lazy write-back and
 * batches do not apply (the write-back mark itself, and what must be on
 * the device before a step that no redo could repeat).  Returns 0, or -1
 * with errno set.
 */
int
pmh_sync_now(PmhPool *pool, const void *addr, size_t len)
{
	if (pmh_flush_range(pool, addr, len, false) != 0)
		return -1;
	pmh_fence(pool);
	return 0;
}

/*
 * Set the write-back mark to boot (two words; NULL clears it) and make it
 * durable before returning.  The caller serialises marks of one pool.
 * Returns 0, or -1 with errno set.
 */
int
pmh_pool_mark(PmhPool *pool, const uint64 *boot)
{
	PmhPoolMark *m = pmh_pool_mark_line(pool);

	m->boot[0] = boot ? boot[0] : 0;
	m->boot[1] = boot ? boot[1] : 0;
	return pmh_sync_now(pool, m, sizeof(*m));
}

/*
 * Can a pool with this write-back mark be trusted by a server running on
 * the kernel with boot id boot?  Yes if nothing was deferred (zero), or if
 * it was deferred by this kernel, whose page cache still holds every
 * store (a crash of the server alone loses none).
 */
bool
pmh_pool_mark_ok(const PmhPoolMark *mark, const uint64 *boot)
{
	if (mark->boot[0] == 0 && mark->boot[1] == 0)
		return true;
	return mark->boot[0] == boot[0] && mark->boot[1] == boot[1];
}
