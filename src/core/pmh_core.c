/*-------------------------------------------------------------------------
 *
 * pmh_core.c
 *	  Server-independent operations on a pmhash pool: header, segment words,
 *	  entries, insert, lookup, overflow chains, failure-atomic segment split,
 *	  and recovery of a consistent segment table after a crash.
 *
 * The caller holds whatever locks the operation needs (see the locking
 * protocol in src/README.pmhash) and keeps the volatile metadata.  Every
 * write that must reach the device goes through pmh_persist().
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_core.h"

#include <errno.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <libpmem.h>

#include "port/pg_bitutils.h"
#include "port/pg_crc32c.h"

#define PMH_SEGWORD_VALID		(UINT64CONST(1) << 63)
#define PMH_SEGWORD_OVERFLOW	(UINT64CONST(1) << 62)
#define PMH_SEGWORD_LOG_DEPTH	63
#define PMH_HASH_SPACE			(UINT64CONST(1) << PMH_MAX_DEPTH)

static inline void
pmh_store_barrier(void)
{
	/* order stores to the mapping as the program wrote them */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

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
		hdr->log_lines != PMH_LOG_LINES)
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
	return pmem_msync(addr, len);
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
 * Flush one range and account for it; the fence is the caller's.  Returns
 * 0, or -1 with errno set.
 */
static int
pmh_flush_range(PmhPool *pool, const void *addr, size_t len)
{
	if (pmh_fail_injected(pool))
		return -1;
	pmh_account_range(pool, addr, len);
	if (pool->is_pmem)
	{
		pmem_flush(addr, len);
		return 0;
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
			pmh_flush_range(pool, pool->batch[i].addr, pool->batch[i].len);
		else
			pmh_account_range(pool, pool->batch[i].addr, pool->batch[i].len);
	}
	if (pool->is_pmem)
		return 0;

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

	if (pmh_flush_range(pool, addr, len) != 0)
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

	memset(pool->base, 0, pmh_pool_bytes(1));
	memcpy(pool->base, hdr, sizeof(*hdr));
	seg = pmh_seg_header(pool, 0);
	seg->word = pmh_segword_make(0, 0);
	seg->ovf_next = 0;
	return pmh_persist(pool, pool->base, pmh_pool_bytes(1));
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

/* ---------------------------------------------------------------------
 * Segments
 * ---------------------------------------------------------------------
 */

/* the fingerprint's bits are never part of a directory index or prefix */
StaticAssertDecl(PMH_MAX_DEPTH <= 64 - 8 * sizeof(((PmhFpBucket *) 0)->fp[0]),
				 "the metadata fingerprint overlaps the segment prefix");

/* empty metadata for a segment with the given word */
void
pmh_meta_reset(PmhSegMeta *meta, uint64 word)
{
	memset(meta, 0, sizeof(*meta));
	meta->word = word;
	meta->ovf_next = PMH_NO_SEGMENT;
}

/* note in a segment's metadata that slot "slot" now holds an entry of hash */
static inline void
pmh_meta_set_live(PmhSegMeta *meta, uint64 hash, int slot)
{
	meta->occ[slot / PMH_BUCKET_SLOTS] |= (uint16) (1 << (slot % PMH_BUCKET_SLOTS));
	pmh_fpt_add(meta, hash, slot);
	meta->nlive++;
}

/*
 * Rebuild the volatile metadata of a segment from the pool.  owner_word is
 * the word of the primary segment whose entries this segment holds (the
 * segment's own word for a primary).
 */
void
pmh_meta_load(const PmhPool *pool, uint32 segno, uint64 owner_word,
			  PmhSegMeta *meta)
{
	const PmhSegHeader *hdr = pmh_seg_header(pool, segno);
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	int			slot;

	pmh_meta_reset(meta, hdr->word);
	meta->ovf_next = hdr->ovf_next == 0 ? PMH_NO_SEGMENT :
		(uint32) (hdr->ovf_next - 1);
	for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
	{
		if (pmh_entry_is_live(&e[slot], owner_word))
			pmh_meta_set_live(meta, e[slot].hash, slot);
	}
}

/* unused ways of a fingerprint bucket, as a bit mask */
static inline uint32
pmh_fpt_free_ways(const PmhFpBucket *bk)
{
	return pmh_fp_candidates(bk->slot, 0xffff, 0);
}

/*
 * The buckets a lookup of hash reads, in order, into seq: its own, then the
 * next one as long as the one before is marked passed.  Returns how many.
 */
int
pmh_fpt_sequence(const PmhSegMeta *meta, uint64 hash, int *seq)
{
	int			b = pmh_fpt_bucket(hash);
	int			n = 0;

	seq[n++] = b;
	while (pmh_fpt_is_passed(meta, b) && n < PMH_FPT_BUCKETS)
	{
		b = (b + 1) % PMH_FPT_BUCKETS;
		seq[n++] = b;
	}
	return n;
}

/*
 * Add slot "slot" with this hash to a segment's fingerprint table: into its
 * bucket or, when that is full, into the next bucket with room, marking the
 * full ones on the way passed.  There is always room: the table has more
 * ways than a segment has slots.
 */
void
pmh_fpt_add(PmhSegMeta *meta, uint64 hash, int slot)
{
	int			b = pmh_fpt_bucket(hash);
	uint32		f = pmh_fpt_free_ways(&meta->fpt[b]);
	int			n;

	Assert(slot >= 0 && slot < PMH_SEG_SLOTS);
	for (n = 1; f == 0 && n < PMH_FPT_BUCKETS; n++)
	{
		meta->fpt_passed[b >> 3] |= (uint8) (1 << (b & 7));
		meta->fpt_any_passed = 1;
		b = (b + 1) % PMH_FPT_BUCKETS;
		f = pmh_fpt_free_ways(&meta->fpt[b]);
	}
	Assert(f != 0);
	meta->fpt[b].fp[pg_rightmost_one_pos32(f)] = pmh_meta_fp(hash);
	meta->fpt[b].slot[pg_rightmost_one_pos32(f)] = (uint16) (slot + 1);
}

/* drop slot "slot" with this hash from a segment's fingerprint table */
void
pmh_fpt_remove(PmhSegMeta *meta, uint64 hash, int slot)
{
	uint16		fp = pmh_meta_fp(hash);
	int			seq[PMH_FPT_BUCKETS];
	int			n = pmh_fpt_sequence(meta, hash, seq);
	int			i;

	for (i = 0; i < n; i++)
	{
		PmhFpBucket *bk = &meta->fpt[seq[i]];
		uint32		c = pmh_fpt_match(bk, fp);

		while (c)
		{
			int			w = pg_rightmost_one_pos32(c);

			c &= c - 1;
			if (bk->slot[w] == slot + 1)
			{
				bk->slot[w] = 0;
				bk->fp[w] = 0;
				return;
			}
		}
	}
	Assert(false);
}

/*
 * Rebuild a segment's fingerprint table from its live slots (occ) and the
 * hashes in the pool, without passed marks no entry needs any more (after
 * a split took entries away).
 */
void
pmh_fpt_rebuild(const PmhPool *pool, PmhSegMeta *meta, uint32 segno)
{
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	int			b;

	memset(meta->fpt, 0, sizeof(meta->fpt));
	memset(meta->fpt_passed, 0, sizeof(meta->fpt_passed));
	meta->fpt_any_passed = 0;
	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		uint32		occ = meta->occ[b];

		while (occ)
		{
			int			slot = b * PMH_BUCKET_SLOTS + pg_rightmost_one_pos32(occ);

			occ &= occ - 1;
			pmh_fpt_add(meta, e[slot].hash, slot);
		}
	}
}

/*
 * Check a segment's fingerprint table against its live slots (occ) and the
 * pool: every live slot is in a bucket a lookup of its hash reads, exactly
 * once, with its fingerprint, and no way names a free slot.  Returns true
 * if so; else false, with the first problem in msg.
 */
bool
pmh_fpt_verify(const PmhPool *pool, const PmhSegMeta *meta, uint32 segno,
			   char *msg, size_t msglen)
{
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	uint8		seen[PMH_SEG_SLOTS];
	int			seq[PMH_FPT_BUCKETS];
	int			nseq;
	int			b;
	int			w;
	int			i;
	int			slot;

	memset(seen, 0, sizeof(seen));
	for (b = 0; b < PMH_FPT_BUCKETS; b++)
	{
		for (w = 0; w < PMH_FPT_WAYS; w++)
		{
			int			sl = meta->fpt[b].slot[w];
			uint64		h;

			if (sl == 0)
				continue;
			slot = sl - 1;
			if (slot >= PMH_SEG_SLOTS || !pmh_meta_is_live(meta, slot))
			{
				snprintf(msg, msglen, "segment %u: fingerprint bucket %d way %d names slot %d, which is not live",
						 segno, b, w, slot);
				return false;
			}
			h = e[slot].hash;
			if (meta->fpt[b].fp[w] != pmh_meta_fp(h))
			{
				snprintf(msg, msglen, "segment %u slot %d: fingerprint %04x does not match hash %016llx",
						 segno, slot, meta->fpt[b].fp[w], (unsigned long long) h);
				return false;
			}
			nseq = pmh_fpt_sequence(meta, h, seq);
			for (i = 0; i < nseq && seq[i] != b; i++)
				;
			if (i == nseq)
			{
				snprintf(msg, msglen, "segment %u slot %d: in fingerprint bucket %d, where a lookup of its hash does not look",
						 segno, slot, b);
				return false;
			}
			if (seen[slot]++)
			{
				snprintf(msg, msglen, "segment %u slot %d: twice in the fingerprint table",
						 segno, slot);
				return false;
			}
		}
	}
	for (slot = 0; slot < PMH_SEG_SLOTS; slot++)
	{
		if (pmh_meta_is_live(meta, slot) && !seen[slot])
		{
			snprintf(msg, msglen, "segment %u slot %d: live but not in the fingerprint table",
					 segno, slot);
			return false;
		}
	}
	return true;
}

/* call fn for every live slot whose fingerprint matches; true stops */
typedef bool (*pmh_slot_fn) (const PmhEntry *e, void *arg);

/* tell the read hook (statistics mode) that a probe read this slot */
static inline void
pmh_note_read(const PmhPool *pool, const PmhEntry *e)
{
	pool->read_hook(pool->flush_hook_arg,
					(uint64) ((const char *) e - pool->base), sizeof(PmhEntry));
}

/*
 * Probe one segment for hash: the fingerprint table gives the live slots
 * whose fingerprint matches, from the hash's bucket (one cache line) and
 * any after it that entries went on to; their entries start loading
 * together, then are compared.  An optimistic lookup (see
 * pmh_version_read_begin) runs this while the segment may change: each
 * slot number is read once and checked, and the candidates have room for
 * every way of the table, in case a rebuild shows a slot in two buckets.
 * Inlined with its callback, as with pmh_probe:
 * how many instructions a lookup runs after its last miss decides whether
 * the next lookup's misses start under it: with the calls through function
 * pointers, pmh_bench's one-at-a-time lookups ran about 30 % slower.
 */
static pg_attribute_always_inline bool
pmh_probe_segment(const PmhPool *pool, const PmhSegMeta *meta, uint32 segno,
				  uint64 hash, pmh_slot_fn fn, void *arg)
{
	uint16		fp = pmh_meta_fp(hash);
	const PmhEntry *entries = pmh_seg_entries(pool, segno);
	uint16		cand[PMH_FPT_BUCKETS * PMH_FPT_WAYS];	/* every way once */
	int			ncand = 0;
	int			seq[PMH_FPT_BUCKETS];
	int			nseq;
	int			i;

	if (meta->nlive == 0)
		return false;
	nseq = pmh_fpt_sequence(meta, hash, seq);
	for (i = 0; i < nseq; i++)
	{
		const PmhFpBucket *bk = &meta->fpt[seq[i]];
		uint32		c = pmh_fpt_match(bk, fp);

		while (c)
		{
			int			w = pg_rightmost_one_pos32(c);
			uint32		slot;

			c &= c - 1;
			/* (0, an unused way, wraps around and is skipped) */
			slot = (uint32) pmh_fpt_way_slot(bk, w) - 1;
			if (slot >= PMH_SEG_SLOTS)
				continue;
			cand[ncand] = (uint16) slot;
			pmh_prefetch(&entries[slot]);
			ncand++;
		}
	}
	for (i = 0; i < ncand; i++)
	{
		const PmhEntry *e = &entries[cand[i]];

		if (pool->read_hook)
			pmh_note_read(pool, e);
		if (e->hash == hash && fn(e, arg))
			return true;
	}
	return false;
}

/* probe primary segment segno and its overflow chain */
static pg_attribute_always_inline bool
pmh_probe(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
		  uint64 hash, pmh_slot_fn fn, void *arg)
{
	uint32		seg = segno;

	while (seg != PMH_NO_SEGMENT)
	{
		PmhSegMeta *meta = cb->get_meta(cb->arg, seg);

		if (pmh_probe_segment(pool, meta, seg, hash, fn, arg))
			return true;
		seg = meta->ovf_next;
	}
	return false;
}

typedef struct PmhCollect
{
	uint64	   *tags;
	int			max;
	int			n;
	uint64		want;			/* for the exists test */
} PmhCollect;

static bool
pmh_collect_fn(const PmhEntry *e, void *arg)
{
	PmhCollect *c = (PmhCollect *) arg;

	if (c->n < c->max)
		c->tags[c->n] = e->tag;
	c->n++;
	return false;
}

static bool
pmh_exists_fn(const PmhEntry *e, void *arg)
{
	PmhCollect *c = (PmhCollect *) arg;

	return e->tag == c->want;
}

/*
 * Collect the tag words of all live entries with this hash in primary
 * segment segno and its overflow chain.  Stores at most maxtags and returns
 * the number found (which may exceed maxtags: call again with more room).
 */
int
pmh_lookup(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
		   uint64 hash, uint64 *tags, int maxtags)
{
	PmhCollect	c;

	c.tags = tags;
	c.max = maxtags;
	c.n = 0;
	c.want = 0;
	(void) pmh_probe(pool, cb, segno, hash, pmh_collect_fn, &c);
	return c.n;
}

/* is exactly this (hash, tag) a live entry of segment segno or its chain? */
bool
pmh_contains(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
			 uint64 hash, uint64 tag)
{
	PmhCollect	c;

	c.tags = NULL;
	c.max = 0;
	c.n = 0;
	c.want = tag;
	return pmh_probe(pool, cb, segno, hash, pmh_exists_fn, &c);
}

typedef struct PmhFind
{
	uint64		want;
	const PmhEntry *found;
} PmhFind;

static bool
pmh_find_fn(const PmhEntry *e, void *arg)
{
	PmhFind    *f = (PmhFind *) arg;

	if (e->tag != f->want)
		return false;
	f->found = e;
	return true;
}

/*
 * The slot of segment segno (alone, not its chain) that holds exactly this
 * (hash, tag), or -1: for a caller that deletes one entry.
 */
int
pmh_find_slot(const PmhPool *pool, const PmhSegMeta *meta, uint32 segno,
			  uint64 hash, uint64 tag)
{
	PmhFind		f;

	f.want = tag;
	f.found = NULL;
	if (!pmh_probe_segment(pool, meta, segno, hash, pmh_find_fn, &f))
		return -1;
	return (int) (f.found - pmh_seg_entries(pool, segno));
}

/* write one entry into a free slot and persist it; update the metadata */
static PmhInsertResult
pmh_write_slot(PmhPool *pool, PmhSegMeta *meta, uint32 segno, int slot,
			   uint64 hash, uint64 tag)
{
	PmhEntry   *e = &pmh_seg_entries(pool, segno)[slot];

	/*
	 * A reused slot may still hold an entry a split left behind, with a live
	 * tag.  Clear that tag first: all three stores hit one cache line, which
	 * reaches the media as a prefix of them, so a crash leaves either the
	 * old (dead) slot or the complete new entry, never the new hash with the
	 * old TID.
	 */
	if (e->tag != 0)
	{
		e->tag = 0;
		pmh_store_barrier();
	}
	e->hash = hash;
	pmh_store_barrier();
	e->tag = tag;
	if (pmh_persist(pool, e, sizeof(PmhEntry)) != 0)
	{
		int			save_errno = errno;

		/* the slot stays free in the metadata; do not leave it looking live */
		e->tag = 0;
		errno = save_errno;
		return PMH_INSERT_IOERROR;
	}
	pmh_meta_set_live(meta, hash, slot);
	return PMH_INSERT_DONE;
}

/*
 * The first line of a segment whose occupancy mask equals "mask" (equal)
 * or differs from it (!equal), or -1.  With SSE2: 8 lines per compare.
 */
static int
pmh_find_line(const PmhSegMeta *m, uint16 mask, bool equal)
{
	int			b;

#ifdef __SSE2__
	__m128i		want = _mm_set1_epi16((short) mask);

	StaticAssertStmt(PMH_SEG_BUCKETS % 8 == 0, "lines come in groups of 8");
	for (b = 0; b < PMH_SEG_BUCKETS; b += 8)
	{
		__m128i		occ = _mm_loadu_si128((const __m128i *) &m->occ[b]);
		uint32		same = (uint32) _mm_movemask_epi8(_mm_cmpeq_epi16(occ, want));
		uint32		hit = equal ? same : ~same & 0xffff;

		if (hit != 0)
			return b + pg_rightmost_one_pos32(hit) / 2;
	}
#else
	for (b = 0; b < PMH_SEG_BUCKETS; b++)
		if ((m->occ[b] == mask) == equal)
			return b;
#endif
	return -1;
}

/* first free slot of a segment (lowest bucket first), or -1 */
static int
pmh_segment_free_slot(const PmhSegMeta *meta)
{
	int			b;

	if (meta->nlive >= PMH_SEG_SLOTS)
		return -1;
	/* the first line that is not full (a building segment fills in order) */
	b = pmh_find_line(meta, 0xffff, false);
	if (b < 0)
		return -1;
	return b * PMH_BUCKET_SLOTS +
		pg_rightmost_one_pos32((~(uint32) meta->occ[b]) & 0xffff);
}

/*
 * The slots of a bucket, among those set in occ, whose hash has bit bitpos
 * set: the entries a split moves to the new segment.  Half of a full
 * segment's entries move, at random, so a branch per slot would be
 * mispredicted half the time; this reads all 16 hashes (one pool line)
 * without branching.  *count, if given, is set to the number of slots.
 */
static inline uint32
pmh_split_bucket_mask(const PmhEntry *bucket, uint32 occ, int bitpos,
					  int *count)
{
	uint32		mask = 0;
	int			n = 0;
	int			s;

	for (s = 0; s < PMH_BUCKET_SLOTS; s++)
	{
		uint32		bit = (uint32) ((bucket[s].hash >> bitpos) & 1) &
			(occ >> s);

		mask |= bit << s;
		n += (int) bit;
	}
	if (count)
		*count = n;
	return mask;
}

/* count the live entries of a segment, and those whose bit "bitpos" is set */
static void
pmh_count_split(const PmhPool *pool, const PmhSegMeta *m, uint32 segno,
				int bitpos, uint64 *total, uint64 *ones)
{
	const PmhEntry *e = pmh_seg_entries(pool, segno);
	int			b;

	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		int			nset;

		(void) pmh_split_bucket_mask(&e[b * PMH_BUCKET_SLOTS], m->occ[b],
									 bitpos, &nset);
		*total += pg_popcount32(m->occ[b]);
		*ones += nset;
	}
}

/*
 * Would splitting primary segment segno leave each half with a useful share
 * of its entries?  Not when most entries share the next hash bit (many
 * duplicates of one key): splitting again and again would not make room.
 */
static bool
pmh_split_is_useful(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	int			bitpos = 63 - pmh_segword_depth(meta->word);
	uint64		total = 0;
	uint64		ones = 0;
	uint32		seg;

	pmh_count_split(pool, meta, segno, bitpos, &total, &ones);
	for (seg = meta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
		pmh_count_split(pool, cb->get_meta(cb->arg, seg), seg, bitpos,
						&total, &ones);
	return ones >= total / PMH_SPLIT_MIN_SHARE &&
		total - ones >= total / PMH_SPLIT_MIN_SHARE;
}

/*
 * What to do when primary segment segno and its chain are full: split,
 * unless that cannot make room (maximum depth, or most entries on one side).
 */
static PmhInsertResult
pmh_no_room(const PmhPool *pool, const PmhCallbacks *cb, uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);

	if (pmh_segword_depth(meta->word) < PMH_MAX_DEPTH &&
		pmh_split_is_useful(pool, cb, segno))
		return PMH_INSERT_SPLIT;
	return PMH_INSERT_OVERFLOW;
}

/*
 * Insert (hash, TID) into primary segment segno (first, if "check", unless
 * the same entry is there already): into its first free slot,
 * else into the first free slot of its overflow chain, so that a segment
 * fills line by line.  The entry is persistent when PMH_INSERT_DONE is
 * returned.  When there is no room the caller either splits the segment or
 * adds an overflow segment, as told, and calls again.
 */
static PmhInsertResult
pmh_insert_internal(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
					uint64 hash, uint32 block, uint16 offset, bool check)
{
	uint64		tag = pmh_tag_make(hash, block, offset);
	uint32		seg;

	/* the same (hash, TID) is never stored twice */
	if (check && pmh_contains(pool, cb, segno, hash, tag))
		return PMH_INSERT_EXISTS;

	for (seg = segno; seg != PMH_NO_SEGMENT;)
	{
		PmhSegMeta *m = cb->get_meta(cb->arg, seg);
		int			slot = pmh_segment_free_slot(m);

		if (slot >= 0)
			return pmh_write_slot(pool, m, seg, slot, hash, tag);
		seg = m->ovf_next;
	}
	return pmh_no_room(pool, cb, segno);
}

/*
 * Insert (hash, TID) into primary segment segno, unless it is there
 * already (PMH_INSERT_EXISTS): see pmh_insert_internal.
 */
PmhInsertResult
pmh_insert(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
		   uint64 hash, uint32 block, uint16 offset)
{
	return pmh_insert_internal(pool, cb, segno, hash, block, offset, true);
}

/*
 * The same, for a caller that knows the (hash, TID) is not stored yet
 * (CREATE INDEX, which sees every heap TID once): no probe first.
 */
PmhInsertResult
pmh_insert_new(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
			   uint64 hash, uint32 block, uint16 offset)
{
	return pmh_insert_internal(pool, cb, segno, hash, block, offset, false);
}

/*
 * Start loading, to be written, the pool slot that pmh_insert_new would
 * fill in segment segno (itself, not its overflow chain): the second step
 * of a bulk insert's prefetching, once pmh_insert_prefetch_meta's lines
 * have arrived.  Only a hint: the insert finds its slot again.
 */
void
pmh_insert_prefetch_slot(const PmhPool *pool, const PmhSegMeta *meta,
						 uint32 segno)
{
	int			slot = pmh_segment_free_slot(meta);

	if (slot >= 0)
		pmh_prefetch_write(&pmh_seg_entries(pool, segno)[slot]);
}

/*
 * Prepare free segment newseg as an empty overflow segment and link it at
 * the head of the chain of primary segment segno.  The new segment is
 * persistent before the 8-byte link that publishes it.
 */
int
pmh_add_overflow(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
				 uint32 newseg)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	PmhSegMeta *nmeta = cb->get_meta(cb->arg, newseg);
	PmhSegHeader *nh = pmh_seg_header(pool, newseg);
	PmhSegHeader *ph = pmh_seg_header(pool, segno);

	/* its buckets are zero already (see pmh_prepare_free_segment) */
	nh->ovf_next = ph->ovf_next;
	nh->word = pmh_segword_make_overflow();
	if (pmh_persist(pool, nh, PMH_LINE_BYTES) != 0)
		return -1;

	ph->ovf_next = (uint64) newseg + 1;
	if (pmh_persist(pool, &ph->ovf_next, sizeof(uint64)) != 0)
		return -1;

	pmh_meta_reset(nmeta, nh->word);
	nmeta->ovf_next = meta->ovf_next;
	meta->ovf_next = newseg;
	return 0;
}

/*
 * Make free segment segno log extension "ext": its buckets are zero on the
 * media already (a free segment always is), so persisting the header line
 * with the log word publishes 64 empty log lines.  Returns 0, or -1 with
 * errno set.
 */
int
pmh_add_log_segment(PmhPool *pool, uint32 segno, uint32 ext)
{
	PmhSegHeader *h = pmh_seg_header(pool, segno);

	h->ovf_next = 0;
	h->word = pmh_segword_make_log(ext);
	return pmh_persist(pool, h, PMH_LINE_BYTES);
}

/* length of the overflow chain of a primary segment */
static int
pmh_chain_length(const PmhCallbacks *cb, uint32 segno)
{
	int			n = 0;
	uint32		ovf = cb->get_meta(cb->arg, segno)->ovf_next;

	while (ovf != PMH_NO_SEGMENT)
	{
		n++;
		ovf = cb->get_meta(cb->arg, ovf)->ovf_next;
	}
	return n;
}

/*
 * Upper bound of the free segments pmh_split may take: the new primary, and
 * an overflow chain no longer than the old one plus one.
 */
int
pmh_segments_needed_for_split(const PmhCallbacks *cb, uint32 segno)
{
	return 2 + pmh_chain_length(cb, segno);
}

/*
 * The next free slot of a segment being built, or -1 when it is full: it
 * fills in slot order and nothing else writes it, so its live slots are
 * exactly the first nlive.
 */
static inline int
pmh_building_free_slot(const PmhSegMeta *meta)
{
	int			slot = (int) meta->nlive;

	if (slot >= PMH_SEG_SLOTS)
		return -1;
	Assert(pmh_segment_free_slot(meta) == slot);
	return slot;
}

/*
 * Place an entry into a segment being built (no persist: done in bulk),
 * filling it from its first bucket on, then its overflow chain.
 */
static int
pmh_place_unpersisted(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
					  const PmhEntry *src)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	PmhSegHeader *hdr;
	PmhEntry   *dst;
	int			slot;
	uint32		target = segno;
	PmhSegMeta *tmeta = meta;

	slot = pmh_building_free_slot(meta);
	if (slot < 0)
	{
		/* the head of the chain is the only one that can have room */
		target = meta->ovf_next;
		tmeta = target == PMH_NO_SEGMENT ? NULL : cb->get_meta(cb->arg, target);
		if (tmeta == NULL || tmeta->nlive >= PMH_SEG_SLOTS)
		{
			uint32		newseg = cb->alloc_segment(cb->arg);

			if (newseg == PMH_NO_SEGMENT)
			{
				errno = ENOSPC;
				return -1;
			}
			hdr = pmh_seg_header(pool, newseg);
			hdr->word = pmh_segword_make_overflow();
			hdr->ovf_next = meta->ovf_next == PMH_NO_SEGMENT ? 0 :
				(uint64) meta->ovf_next + 1;
			tmeta = cb->get_meta(cb->arg, newseg);
			pmh_meta_reset(tmeta, hdr->word);
			tmeta->ovf_next = meta->ovf_next;
			meta->ovf_next = newseg;
			pmh_seg_header(pool, segno)->ovf_next = (uint64) newseg + 1;
			target = newseg;
		}
		slot = pmh_building_free_slot(tmeta);
		Assert(slot >= 0);
	}

	dst = &pmh_seg_entries(pool, target)[slot];
	*dst = *src;
	pmh_meta_set_live(tmeta, src->hash, slot);
	return 0;
}

/* move the entries of one source segment whose split bit is set */
static int
pmh_split_move(PmhPool *pool, const PmhCallbacks *cb, uint32 from,
			   uint64 old_word, int bitpos, uint32 newseg)
{
	PmhSegMeta *fm = cb->get_meta(cb->arg, from);
	const PmhEntry *e = pmh_seg_entries(pool, from);
	int			b;

	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		uint32		moving = pmh_split_bucket_mask(&e[b * PMH_BUCKET_SLOTS],
												   fm->occ[b], bitpos, NULL);

		while (moving)
		{
			int			slot = b * PMH_BUCKET_SLOTS + pg_rightmost_one_pos32(moving);

			moving &= moving - 1;
			if (!pmh_entry_is_live(&e[slot], old_word))
				continue;
			if (pmh_place_unpersisted(pool, cb, newseg, &e[slot]) != 0)
				return -1;
		}
	}
	return 0;
}

/* forget, in the volatile metadata, the entries that moved to the sibling */
static void
pmh_split_forget(const PmhPool *pool, PmhSegMeta *fm, uint32 from, int bitpos)
{
	const PmhEntry *e = pmh_seg_entries(pool, from);
	int			b;

	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		int			nmoved;
		uint32		moved = pmh_split_bucket_mask(&e[b * PMH_BUCKET_SLOTS],
												  fm->occ[b], bitpos, &nmoved);

		fm->occ[b] &= (uint16) ~moved;
		fm->nlive -= nmoved;
	}

	/*
	 * About half the entries are gone: building the fingerprint table anew
	 * from the slots that stay costs no more than removing the others one
	 * by one, and drops the passed marks that no entry needs now.
	 */
	pmh_fpt_rebuild(pool, fm, from);
}

/*
 * Persist a segment just built from its first slot on (by a split or as an
 * overflow segment): its header line and the lines that hold its entries.
 * The rest of the segment is zero on the media already: a free segment
 * always is (new file space reads as zero, and pmh_recover zeroes any free
 * segment that is not), so its zeros need no flush.
 */
static int
pmh_persist_built_segment(PmhPool *pool, const PmhSegMeta *meta, uint32 segno)
{
	size_t		lines = (meta->nlive + PMH_BUCKET_SLOTS - 1) / PMH_BUCKET_SLOTS;

	return pmh_persist(pool, pmh_seg_header(pool, segno),
					   (1 + lines) * PMH_LINE_BYTES);
}

/*
 * Split primary segment segno (depth d, prefix p) into itself (depth d+1,
 * prefix p0) and a new segment (depth d+1, prefix p1), failure-atomically:
 *
 *	1. build the new segment and its overflow chain from the entries whose
 *	   bit 63-d is set, and persist them (the new segment's word says
 *	   (d+1, p1), but recovery discards it while segno still says (d, p));
 *	2. publish by overwriting segno's word with (d+1, p0): one 8-byte store,
 *	   persisted.  The moved entries stay behind in segno and its chain; the
 *	   prefix test makes them dead.
 *
 * The caller holds the segment exclusively, has made sure that
 * pmh_segments_needed_for_split() free segments exist, and updates the
 * directory afterwards.  Returns 0, or -1 with errno set; the segments a
 * failed split took are written, and must be zeroed
 * (pmh_prepare_free_segment) before they are handed out again.
 */
int
pmh_split(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
		  uint32 *newsegno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	uint64		old_word = meta->word;
	int			depth = pmh_segword_depth(old_word);
	uint64		prefix = pmh_segword_prefix(old_word);
	int			bitpos = 63 - depth;
	uint64		w0;
	uint64		w1;
	uint32		newseg;
	PmhSegHeader *nh;
	PmhSegMeta *nmeta;
	uint32		seg;

	if (depth >= PMH_MAX_DEPTH)
	{
		errno = ENOSPC;
		return -1;
	}
	w0 = pmh_segword_make(depth + 1, prefix << 1);
	w1 = pmh_segword_make(depth + 1, (prefix << 1) | 1);

	newseg = cb->alloc_segment(cb->arg);
	if (newseg == PMH_NO_SEGMENT)
	{
		errno = ENOSPC;
		return -1;
	}
	/* a free segment reads as zero (pmh_prepare_free_segment) */
	nh = pmh_seg_header(pool, newseg);
	nh->ovf_next = 0;
	nh->word = w1;
	nmeta = cb->get_meta(cb->arg, newseg);
	pmh_meta_reset(nmeta, w1);

	/* 1. copy out */
	if (pmh_split_move(pool, cb, segno, old_word, bitpos, newseg) != 0)
		return -1;
	for (seg = meta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
	{
		if (pmh_split_move(pool, cb, seg, old_word, bitpos, newseg) != 0)
			return -1;
	}
	for (seg = nmeta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
	{
		if (pmh_persist_built_segment(pool, cb->get_meta(cb->arg, seg),
									  seg) != 0)
			return -1;
	}
	if (pmh_persist_built_segment(pool, nmeta, newseg) != 0)
		return -1;

	/* 2. publish */
	pmh_seg_header(pool, segno)->word = w0;
	if (pmh_persist(pool, &pmh_seg_header(pool, segno)->word,
					sizeof(uint64)) != 0)
		return -1;

	/* volatile metadata of the old half; pending entries follow their hash */
	{
		uint32		i = 0;

		while (i < meta->npending)
		{
			if ((meta->pending[i].hash >> bitpos) & 1)
			{
				pmh_pending_add(nmeta, meta->pending[i].hash,
								meta->pending[i].tag, meta->pending[i].logslot);
				pmh_pending_remove(meta, (int) i);
			}
			else
				i++;
		}
	}
	pmh_split_forget(pool, meta, segno, bitpos);
	for (seg = meta->ovf_next; seg != PMH_NO_SEGMENT;
		 seg = cb->get_meta(cb->arg, seg)->ovf_next)
		pmh_split_forget(pool, cb->get_meta(cb->arg, seg), seg, bitpos);
	meta->word = w0;

	*newsegno = newseg;
	return 0;
}

/* pmh_split_reserved's callbacks: the caller's metadata, the given segments */
typedef struct PmhReserve
{
	const PmhCallbacks *cb;
	const uint32 *seg;
	int			n;				/* seg[0..n-1] are left, the next at n-1 */
} PmhReserve;

static PmhSegMeta *
pmh_reserve_get_meta(void *arg, uint32 segno)
{
	const PmhCallbacks *cb = ((PmhReserve *) arg)->cb;

	return cb->get_meta(cb->arg, segno);
}

static uint32
pmh_reserve_alloc(void *arg)
{
	PmhReserve *res = (PmhReserve *) arg;

	return res->n == 0 ? PMH_NO_SEGMENT : res->seg[--res->n];
}

/*
 * pmh_split, taking its free segments from seg[0..*nseg-1] (the last
 * first) instead of cb->alloc_segment: for a caller that set them aside
 * beforehand, as a split holding only its segment's lock takes them off a
 * shared free list first.  On return *nseg is the number left, untouched;
 * seg[*nseg] and on were taken.  Fails with ENOSPC, as pmh_split does, when
 * they are not enough.
 */
int
pmh_split_reserved(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
				   const uint32 *seg, int *nseg, uint32 *newsegno)
{
	PmhReserve	res;
	PmhCallbacks rcb;
	int			rc;

	res.cb = cb;
	res.seg = seg;
	res.n = *nseg;
	rcb.get_meta = pmh_reserve_get_meta;
	rcb.alloc_segment = pmh_reserve_alloc;
	rcb.arg = &res;
	rc = pmh_split(pool, &rcb, segno, newsegno);
	*nseg = res.n;
	return rc;
}

/*
 * Invalidate the slots in "mask" of one bucket (vacuum): each tag word is
 * cleared with one 8-byte store, then the bucket's touched lines are
 * persisted once.  Returns 0, or -1 with errno set.
 */
int
pmh_delete_slots(PmhPool *pool, PmhSegMeta *meta, uint32 segno, int bucket,
				 uint16 mask)
{
	PmhEntry   *e = &pmh_seg_entries(pool, segno)[bucket * PMH_BUCKET_SLOTS];
	uint32		m = mask & meta->occ[bucket];
	int			first = -1;
	int			last = -1;

	if (m == 0)
		return 0;
	while (m)
	{
		int			s = pg_rightmost_one_pos32(m);

		m &= m - 1;
		e[s].tag = 0;
		if (first < 0)
			first = s;
		last = s;
		meta->occ[bucket] &= (uint16) ~(1 << s);
		pmh_fpt_remove(meta, e[s].hash, bucket * PMH_BUCKET_SLOTS + s);
		meta->nlive--;
	}
	return pmh_persist(pool, &e[first], (size_t) (last - first + 1) * PMH_ENTRY_BYTES);
}

/* ---------------------------------------------------------------------
 * The backup log and D-buckets
 *
 * A backup-log slot holds an entry in the same 16 B format as a bucket
 * slot; it is live when its tag has the marker, a matching fingerprint copy
 * and a non-zero offset.  Whether a live log entry still waits for
 * relocation is not recorded in the pool: it waits iff the segment that
 * owns its hash does not contain it (see README.pmhash, "Backup log").
 * ---------------------------------------------------------------------
 */

/*
 * Write n entries into backup-log line "line" from slot "first" on and
 * persist them: one flush of the covered cache lines and one fence.  The
 * slots must be zero (a line is zeroed when a backend takes it), so each
 * slot goes from empty to complete through its hash store then its tag
 * store: a crash leaves it empty, hash-only (dead) or complete.  Returns 0,
 * or -1 with errno set.
 */
int
pmh_log_write(PmhPool *pool, uint32 line, int first, const PmhEntry *entries,
			  int n)
{
	PmhEntry   *dst = pmh_log_line(pool, line) + first;
	int			i;

	Assert(first >= 0 && first + n <= PMH_BUCKET_SLOTS);
	for (i = 0; i < n; i++)
		dst[i].hash = entries[i].hash;
	pmh_store_barrier();
	for (i = 0; i < n; i++)
		dst[i].tag = entries[i].tag;
	return pmh_persist(pool, dst, (size_t) n * PMH_ENTRY_BYTES);
}

/*
 * Clear the tags of n backup-log slots (released ones whose copies must
 * not come back after a crash) and persist them: one flush per touched
 * line, from its first cleared tag to its last, and one fence.  Each
 * clearing is one 8-byte store, failure-atomic on its own.  The caller
 * keeps the slots from being reused or written meanwhile.  Returns 0, or
 * -1 with errno set.
 */
int
pmh_log_clear_slots(PmhPool *pool, const uint32 *slots, int n)
{
	int			i;

	if (n == 0)
		return 0;
	pmh_batch_begin(pool);
	for (i = 0; i < n; i++)
	{
		uint32		line = slots[i] / PMH_BUCKET_SLOTS;
		uint32		lo = slots[i] % PMH_BUCKET_SLOTS;
		uint32		hi = lo;
		PmhEntry   *e = pmh_log_line(pool, line);
		int			j;

		/* a line seen before is done */
		for (j = 0; j < i; j++)
			if (slots[j] / PMH_BUCKET_SLOTS == line)
				break;
		if (j < i)
			continue;
		for (j = i; j < n; j++)
		{
			uint32		s = slots[j] % PMH_BUCKET_SLOTS;

			if (slots[j] / PMH_BUCKET_SLOTS != line)
				continue;
			e[s].tag = 0;
			lo = Min(lo, s);
			hi = Max(hi, s);
		}
		if (pmh_persist(pool, &e[lo].tag,
						(size_t) (hi - lo) * PMH_ENTRY_BYTES + sizeof(uint64)) != 0)
		{
			int			save_errno = errno;

			(void) pmh_batch_end(pool);
			errno = save_errno;
			return -1;
		}
	}
	return pmh_batch_end(pool);
}

/*
 * The first free backup-log line at or after line "cursor", going round a
 * log of nwords * 64 lines, or -1 when none is free.  The caller keeps a
 * mask of free lines per 64 (bit k of word w: line 64 w + k is free) and
 * hands out word w as word(arg, w).  The word of the cursor is read twice:
 * for the lines from the cursor on first, whole last (by then only lines
 * before the cursor can be free in it).
 */
int32
pmh_log_find_free(PmhMaskWordFn word, const void *arg, uint32 nwords,
				  uint32 cursor)
{
	uint32		first = cursor / 64;
	uint64		after = ~UINT64CONST(0) << (cursor % 64);
	uint32		i;

	Assert(first < nwords);
	for (i = 0; i <= nwords; i++)
	{
		uint32		w = (first + i) % nwords;
		uint64		mask = word(arg, w);

		if (i == 0)
			mask &= after;
		if (mask != 0)
			return (int32) (w * 64 + pg_rightmost_one_pos64(mask));
	}
	return -1;
}

/* append an entry to a segment's D-bucket (the caller checked for room) */
void
pmh_pending_add(PmhSegMeta *meta, uint64 hash, uint64 tag, uint32 logslot)
{
	PmhPending *p;

	Assert(meta->npending < PMH_DBUCKET_SLOTS);
	meta->pending_fp[meta->npending] = pmh_meta_fp(hash);
	p = &meta->pending[meta->npending++];
	p->hash = hash;
	p->tag = tag;
	p->logslot = logslot;
	p->pad = 0;
}

/* drop entry i of a D-bucket (order is not kept) */
void
pmh_pending_remove(PmhSegMeta *meta, int i)
{
	Assert(i >= 0 && (uint32) i < meta->npending);
	meta->npending--;
	meta->pending[i] = meta->pending[meta->npending];
	meta->pending_fp[i] = meta->pending_fp[meta->npending];
}

/*
 * Add the tags of a D-bucket's entries with this hash to tags[n...] (room
 * for maxtags in all) and return the new count, which may exceed maxtags.
 * Only the entries whose fingerprint matches are read: a lookup reads the
 * cache line of the D-bucket's fingerprints, not its 384 bytes of entries.
 */
int
pmh_pending_lookup(const PmhSegMeta *meta, uint64 hash, uint64 *tags,
				   int n, int maxtags)
{
	/* read once and bounded: an optimistic lookup reads it as it changes */
	uint32		np = Min(__atomic_load_n(&meta->npending, __ATOMIC_RELAXED),
						 PMH_DBUCKET_SLOTS);
	uint32		c;

	c = pmh_fp_candidates(meta->pending_fp, ((uint32) 1 << np) - 1,
						  pmh_meta_fp(hash));
	while (c)
	{
		const PmhPending *p = &meta->pending[pg_rightmost_one_pos32(c)];

		c &= c - 1;
		if (p->hash != hash)
			continue;
		if (n < maxtags)
			tags[n] = p->tag;
		n++;
	}
	return n;
}

#ifdef __SSE2__
/* the smallest 16-bit lane of v */
static inline int
pmh_min_lane16(__m128i v)
{
	v = _mm_min_epi16(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
	v = _mm_min_epi16(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
	v = _mm_min_epi16(v, _mm_shufflelo_epi16(v, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(v) & 0xffff;
}

/* the first of a segment's 8 groups of 8 lanes that holds "val": its line */
static inline int
pmh_first_lane16(const __m128i *groups, int val)
{
	__m128i		want = _mm_set1_epi16((short) val);
	int			g;

	for (g = 0; g < PMH_SEG_BUCKETS / 8; g++)
	{
		uint32		hit = (uint32) _mm_movemask_epi8(_mm_cmpeq_epi16(groups[g], want));

		if (hit != 0)
			return g * 8 + pg_rightmost_one_pos32(hit) / 2;
	}
	return -1;
}
#endif

/*
 * Rank the lines of one segment for "want" entries: *fit is the first line
 * with the fewest free slots that are still >= want (-1 if none), *most the
 * first line with the most free slots (-1 if the segment is full); their
 * free slots go to *fit_free and *most_free (0x7fff and 0 when there is
 * no such line).  With SSE2 the 64 occupancy masks are counted 8 at a time
 * (a popcount per 16-bit lane, by halves).
 */
void
pmh_rank_lines(const PmhSegMeta *m, int want, int *fit, int *fit_free,
			   int *most, int *most_free)
{
#ifdef __SSE2__
	__m128i		fitv[PMH_SEG_BUCKETS / 8];
	__m128i		freev[PMH_SEG_BUCKETS / 8];
	__m128i		minv = _mm_set1_epi16(0x7fff);
	__m128i		maxv = _mm_setzero_si128();
	__m128i		below = _mm_set1_epi16((short) (want - 1));
	__m128i		none = _mm_set1_epi16(0x7fff);
	int			g;

	StaticAssertStmt(PMH_SEG_BUCKETS % 8 == 0, "lines come in groups of 8");
	for (g = 0; g < PMH_SEG_BUCKETS / 8; g++)
	{
		__m128i		x = _mm_loadu_si128((const __m128i *) &m->occ[g * 8]);
		__m128i		ok;

		x = _mm_sub_epi16(x, _mm_and_si128(_mm_srli_epi16(x, 1),
										   _mm_set1_epi16(0x5555)));
		x = _mm_add_epi16(_mm_and_si128(x, _mm_set1_epi16(0x3333)),
						  _mm_and_si128(_mm_srli_epi16(x, 2),
										_mm_set1_epi16(0x3333)));
		x = _mm_and_si128(_mm_add_epi16(x, _mm_srli_epi16(x, 4)),
						  _mm_set1_epi16(0x0f0f));
		x = _mm_and_si128(_mm_add_epi16(x, _mm_srli_epi16(x, 8)),
						  _mm_set1_epi16(0x001f));
		freev[g] = _mm_sub_epi16(_mm_set1_epi16(PMH_BUCKET_SLOTS), x);
		ok = _mm_cmpgt_epi16(freev[g], below);
		fitv[g] = _mm_or_si128(_mm_and_si128(ok, freev[g]),
							   _mm_andnot_si128(ok, none));
		minv = _mm_min_epi16(minv, fitv[g]);
		maxv = _mm_max_epi16(maxv, freev[g]);
	}
	*fit_free = pmh_min_lane16(minv);
	*fit = *fit_free == 0x7fff ? -1 : pmh_first_lane16(fitv, *fit_free);
	/* the largest lane is the smallest of its negation */
	*most_free = -(int16) pmh_min_lane16(_mm_sub_epi16(_mm_setzero_si128(), maxv));
	*most = *most_free == 0 ? -1 : pmh_first_lane16(freev, *most_free);
#else
	int			b;

	*fit = -1;
	*fit_free = 0x7fff;
	*most = -1;
	*most_free = 0;
	for (b = 0; b < PMH_SEG_BUCKETS; b++)
	{
		int			nfree = PMH_BUCKET_SLOTS - pg_popcount32(m->occ[b]);

		if (nfree >= want && nfree < *fit_free)
		{
			*fit_free = nfree;
			*fit = b;
		}
		if (nfree > *most_free)
		{
			*most_free = nfree;
			*most = b;
		}
	}
#endif
}

/*
 * Choose the line (bucket) of primary segment segno or its chain that
 * "want" entries should go to: the fullest line with room for all of them,
 * so that wholly free lines are kept for whole D-buckets; if no line has
 * that much room, the line with the most (the first such line in chain
 * order, either way).  Returns false when the segment and its chain have no
 * free slot at all.
 */
static bool
pmh_choose_line(const PmhCallbacks *cb, uint32 segno, int want,
				uint32 *segout, int *bucketout)
{
	int			fit_free = PMH_BUCKET_SLOTS + 1;
	int			most_free = 0;
	uint32		fit_seg = PMH_NO_SEGMENT;
	uint32		most_seg = PMH_NO_SEGMENT;
	int			fit_bucket = -1;
	int			most_bucket = -1;
	uint32		seg;

	/*
	 * A full D-bucket wants a free line: the first one in chain order is
	 * what the search below would choose, found without counting bits.
	 */
	if (want == PMH_BUCKET_SLOTS)
	{
		for (seg = segno; seg != PMH_NO_SEGMENT;)
		{
			PmhSegMeta *m = cb->get_meta(cb->arg, seg);
			int			b = m->nlive < PMH_SEG_SLOTS ? pmh_find_line(m, 0, true) : -1;

			if (b >= 0)
			{
				*segout = seg;
				*bucketout = b;
				return true;
			}
			seg = m->ovf_next;
		}
	}

	for (seg = segno; seg != PMH_NO_SEGMENT;)
	{
		PmhSegMeta *m = cb->get_meta(cb->arg, seg);

		if (m->nlive < PMH_SEG_SLOTS)
		{
			int			fit;
			int			ffree;
			int			most;
			int			mfree;

			pmh_rank_lines(m, want, &fit, &ffree, &most, &mfree);
			if (fit >= 0 && ffree < fit_free)
			{
				fit_free = ffree;
				fit_seg = seg;
				fit_bucket = fit;
				if (ffree == want)
					break;
			}
			if (mfree > most_free)
			{
				most_free = mfree;
				most_seg = seg;
				most_bucket = most;
			}
		}
		seg = m->ovf_next;
	}
	if (fit_bucket >= 0)
	{
		*segout = fit_seg;
		*bucketout = fit_bucket;
		return true;
	}
	if (most_bucket >= 0)
	{
		*segout = most_seg;
		*bucketout = most_bucket;
		return true;
	}
	return false;
}

/*
 * Write entries into the free slots of one line (bucket) of segment segno,
 * in slot order, as many as fit; the covered range is handed to the choke
 * point (the caller batches).  Each slot goes from free to complete by its
 * own cache line's store order: the old tag (an entry a split left behind)
 * is cleared first, then every hash is stored, then every tag.  Returns the
 * number of entries written, or -1 (errno set) if the choke point failed.
 */
static int
pmh_write_line(PmhPool *pool, PmhSegMeta *meta, uint32 segno, int bucket,
			   const PmhPending *const *src, int n)
{
	PmhEntry   *line = &pmh_seg_entries(pool, segno)[bucket * PMH_BUCKET_SLOTS];
	uint32		freebits = (~(uint32) meta->occ[bucket]) & 0xffff;
	int			slots[PMH_BUCKET_SLOTS];
	int			k = 0;
	int			i;

	while (freebits && k < n)
	{
		slots[k++] = pg_rightmost_one_pos32(freebits);
		freebits &= freebits - 1;
	}

	/*
	 * Clear every tag, not only those that are set: reading them first would
	 * wait for the line to arrive, where stores let the fingerprint inserts
	 * below go on while it loads.
	 */
	for (i = 0; i < k; i++)
		line[slots[i]].tag = 0;
	pmh_store_barrier();
	for (i = 0; i < k; i++)
		line[slots[i]].hash = src[i]->hash;
	pmh_store_barrier();
	for (i = 0; i < k; i++)
	{
		line[slots[i]].tag = src[i]->tag;
		pmh_meta_set_live(meta, src[i]->hash, bucket * PMH_BUCKET_SLOTS + slots[i]);
	}
	if (k > 0 &&
		pmh_persist(pool, &line[slots[0]],
					(size_t) (slots[k - 1] - slots[0] + 1) * PMH_ENTRY_BYTES) != 0)
		return -1;
	return k;
}

/*
 * Start loading what placing an entry into segment segno's D-bucket will
 * write: the D-bucket slot it takes or, when the D-bucket is full, what its
 * relocation reads first (the D-bucket's entries and the occupancy masks).
 * A caller about to place several entries (a collecting log's) calls this
 * for each of their segments, after starting to load their metadata's
 * first line, then pmh_relocate_prefetch for each, so that the cache
 * misses of the placements overlap instead of each stalling its insert (a
 * lock release waits for every store before it).  Only a hint: it reads
 * the metadata without the segment's lock and changes nothing, and a
 * concurrent change makes it load the wrong line.  The caller keeps the
 * overflow chains still (the server: the index lock, in any mode).
 */
void
pmh_pending_prefetch(const PmhPool *pool, const PmhCallbacks *cb,
					 uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	uint32		npending = meta->npending;
	size_t		off;

	if (npending < PMH_DBUCKET_SLOTS)
	{
		pmh_prefetch_write(&meta->pending[npending]);
		return;
	}
	for (off = 0; off < sizeof(meta->pending); off += PMH_CACHELINE_BYTES)
		pmh_prefetch_write((const char *) meta->pending + off);
	pmh_prefetch(&meta->occ[0]);
	pmh_prefetch(&meta->occ[PMH_SEG_BUCKETS / 2]);
}

/*
 * The second step of pmh_pending_prefetch, once what it started is loaded:
 * for a full D-bucket, start loading the pool line its relocation fills
 * and the fingerprint buckets its entries go to.  A hint, as above.
 */
void
pmh_relocate_prefetch(const PmhPool *pool, const PmhCallbacks *cb,
					  uint32 segno)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	uint32		seg;
	int			bucket;
	const char *line;
	int			i;

	if (meta->npending < PMH_DBUCKET_SLOTS)
		return;
	if (pmh_choose_line(cb, segno, PMH_DBUCKET_SLOTS, &seg, &bucket))
	{
		line = (const char *) &pmh_seg_entries(pool, seg)[bucket * PMH_BUCKET_SLOTS];
		for (i = 0; i < PMH_LINE_BYTES; i += PMH_CACHELINE_BYTES)
			pmh_prefetch_write(line + i);
	}
	for (i = 0; i < PMH_DBUCKET_SLOTS; i++)
		pmh_fpt_prefetch(meta, meta->pending[i].hash);
}

/*
 * Relocate the D-bucket of primary segment segno into the segment, a whole
 * line at a time: a full D-bucket fills one free 256 B line and costs one
 * whole-line flush; fewer entries go to the fullest line with room for them
 * (holes that VACUUM or a split left).  All flushes are fenced once, and
 * only then do the entries leave the D-bucket.  The log slots of the
 * relocated entries (also of duplicates, counted in *nduplicates) are
 * returned in released[] (room for PMH_DBUCKET_SLOTS): the caller may reuse
 * them once this returns.
 *
 * An entry waiting twice in the D-bucket is written once.  An entry the
 * segment holds already is looked for only with check_segment: that needs
 * a crash (PMH_STATE_STALE), and costs a probe per entry.
 *
 * Without "decide" an entry that finds no room ends the relocation with
 * PMH_INSERT_FULL: choosing between a split and an overflow segment reads
 * every entry of the segment and its chain, which a caller that cannot
 * act on the choice would waste.
 *
 * Returns PMH_INSERT_DONE when the D-bucket is empty, PMH_INSERT_SPLIT or
 * PMH_INSERT_OVERFLOW (with "decide", else PMH_INSERT_FULL) when an entry
 * found no room (the ones before it are relocated and released), or
 * PMH_INSERT_IOERROR (errno set; nothing is released, the D-bucket is
 * unchanged, and slots written in the segment are not trusted: the caller
 * must treat the segment's metadata as lost).
 */
PmhInsertResult
pmh_relocate(PmhPool *pool, const PmhCallbacks *cb, uint32 segno,
			 bool check_segment, bool decide, uint32 *released,
			 int *nreleased, int *nduplicates)
{
	PmhSegMeta *meta = cb->get_meta(cb->arg, segno);
	PmhInsertResult r = PMH_INSERT_DONE;
	const PmhPending *place[PMH_DBUCKET_SLOTS];
	int			placeidx[PMH_DBUCKET_SLOTS];
	bool		dup[PMH_DBUCKET_SLOTS];
	int			nplace = 0;
	int			placed = 0;
	uint32		done;
	uint32		i;

	*nreleased = 0;
	*nduplicates = 0;

	/* start loading the fingerprint buckets the entries will go to */
	for (i = 0; i < meta->npending; i++)
		pmh_fpt_prefetch(meta, meta->pending[i].hash);

	/*
	 * Entries the segment holds already, or that wait twice, are done.  An
	 * earlier copy in the D-bucket has the same fingerprint: only those are
	 * compared.
	 */
	for (i = 0; i < meta->npending; i++)
	{
		PmhPending *p = &meta->pending[i];
		uint32		c = pmh_fp_candidates(meta->pending_fp,
										  ((uint32) 1 << i) - 1,
										  meta->pending_fp[i]);

		dup[i] = false;
		while (c && !dup[i])
		{
			int			j = pg_rightmost_one_pos32(c);

			c &= c - 1;
			dup[i] = !dup[j] && meta->pending[j].hash == p->hash &&
				meta->pending[j].tag == p->tag;
		}
		if (!dup[i] && check_segment)
			dup[i] = pmh_contains(pool, cb, segno, p->hash, p->tag);
		if (!dup[i])
		{
			placeidx[nplace] = (int) i;
			place[nplace++] = p;
		}
	}

	pmh_batch_begin(pool);
	while (placed < nplace)
	{
		uint32		seg;
		int			bucket;
		int			k;

		if (!pmh_choose_line(cb, segno, nplace - placed, &seg, &bucket))
		{
			r = decide ? pmh_no_room(pool, cb, segno) : PMH_INSERT_FULL;
			break;
		}
		k = pmh_write_line(pool, cb->get_meta(cb->arg, seg), seg, bucket,
						   &place[placed], nplace - placed);
		if (k < 0)
		{
			int			save_errno = errno;

			(void) pmh_batch_end(pool);
			errno = save_errno;
			return PMH_INSERT_IOERROR;
		}
		placed += k;
	}
	if (pmh_batch_end(pool) != 0)
		return PMH_INSERT_IOERROR;

	/* D-bucket entries before the first one that found no room are done */
	done = placed < nplace ? (uint32) placeidx[placed] : meta->npending;
	for (i = 0; i < done; i++)
	{
		released[i] = meta->pending[i].logslot;
		if (dup[i])
			(*nduplicates)++;
	}
	*nreleased = (int) done;
	memmove(&meta->pending[0], &meta->pending[done],
			(meta->npending - done) * sizeof(PmhPending));
	memmove(&meta->pending_fp[0], &meta->pending_fp[done],
			(meta->npending - done) * sizeof(uint16));
	meta->npending -= done;
	return r;
}

/* ---------------------------------------------------------------------
 * The directory
 * ---------------------------------------------------------------------
 */

/* point the directory entries covered by a primary segment's word at it */
void
pmh_dir_assign(uint32 *dir, int gd, uint64 word, uint32 segno)
{
	int			depth = pmh_segword_depth(word);
	uint64		first;
	uint64		count;
	uint64		i;

	Assert(depth <= gd);
	first = pmh_segword_prefix(word) << (gd - depth);
	count = UINT64CONST(1) << (gd - depth);
	/* one store each: a caller may publish while others read (see README) */
	for (i = 0; i < count; i++)
		__atomic_store_n(&dir[first + i], segno, __ATOMIC_RELAXED);
}

/* double a directory of global depth gd into newdir (2^(gd+1) entries) */
void
pmh_dir_double(const uint32 *olddir, int gd, uint32 *newdir)
{
	uint64		n = UINT64CONST(1) << gd;
	uint64		i;

	for (i = 0; i < n; i++)
	{
		newdir[2 * i] = olddir[i];
		newdir[2 * i + 1] = olddir[i];
	}
}

/* ---------------------------------------------------------------------
 * Recovery
 * ---------------------------------------------------------------------
 */

/* clear the word of a segment that a crash left half-published */
static int
pmh_clear_orphan(PmhPool *pool, uint32 segno, PmhRecoveryResult *res)
{
	PmhSegHeader *h = pmh_seg_header(pool, segno);

	h->word = 0;
	h->ovf_next = 0;
	res->orphans_cleared++;
	return pmh_persist(pool, h, 2 * sizeof(uint64));
}

/* does a whole segment (header line and buckets) read as zero? */
bool
pmh_segment_is_zero(const PmhPool *pool, uint32 segno)
{
	const uint64 *w = (const uint64 *) pmh_seg_header(pool, segno);
	size_t		i;

	for (i = 0; i < PMH_SEG_BYTES / sizeof(uint64); i++)
		if (w[i] != 0)
			return false;
	return true;
}

/*
 * Sort n (start, depth << 32 | segno) pairs by start, then shallower first:
 * an LSD radix sort on (start << 6 | depth), below 2^54, in four passes of
 * 14 bits, through tmp (2 n words).  Returns the sorted array (a or tmp).
 * Recovery sorts every primary segment: a comparison sort of 65536 of them
 * took a fifth of the time to attach a 50-million-entry index.
 */
#define PMH_RADIX_BITS		14
#define PMH_RADIX_PASSES	4

static uint64 *
pmh_sort_primaries(uint64 *a, uint64 *tmp, uint64 n)
{
	uint32		count[1 << PMH_RADIX_BITS];
	int			pass;

	for (pass = 0; pass < PMH_RADIX_PASSES; pass++)
	{
		int			shift = pass * PMH_RADIX_BITS;
		uint32		sum = 0;
		uint64		i;
		uint64	   *t;

		memset(count, 0, sizeof(count));
		for (i = 0; i < n; i++)
		{
			uint64		key = (a[2 * i] << 6) | (a[2 * i + 1] >> 32);

			count[(key >> shift) & ((1 << PMH_RADIX_BITS) - 1)]++;
		}
		if (count[0] == n)
			continue;			/* this digit is 0 everywhere */
		for (i = 0; i < (1 << PMH_RADIX_BITS); i++)
		{
			uint32		c = count[i];

			count[i] = sum;
			sum += c;
		}
		for (i = 0; i < n; i++)
		{
			uint64		key = (a[2 * i] << 6) | (a[2 * i + 1] >> 32);
			uint32		to = count[(key >> shift) & ((1 << PMH_RADIX_BITS) - 1)]++;

			tmp[2 * to] = a[2 * i];
			tmp[2 * to + 1] = a[2 * i + 1];
		}
		t = a;
		a = tmp;
		tmp = t;
	}
	return a;
}

/*
 * Make a free segment fit for use: a free segment must read as zero on the
 * media, because splits, new overflow segments and log segments write and
 * flush only the lines they fill.  A half-built segment that a crash cut
 * off (or an orphan recovery cleared) still holds entries: zero and persist
 * it.  Returns 1 if it was zeroed, 0 if it was zero, -1 (errno set) if the
 * persist failed.
 *
 * After a failed persist the mapping reads zero while the media may not:
 * a retry must not take the segment for clean.  So the failure leaves a
 * mark in the header line's padding, and the next call zeroes and
 * persists the whole segment again.  The mark may itself reach the media
 * (a neighbour's flush, an evicted cache line): that is harmless, since
 * nothing reads the padding of a free segment, recovery goes by the word,
 * and the segment is prepared again before it is handed out.
 */
int
pmh_prepare_free_segment(PmhPool *pool, uint32 segno)
{
	PmhSegHeader *h = pmh_seg_header(pool, segno);

	if (pmh_segment_is_zero(pool, segno))
		return 0;
	memset(h, 0, PMH_SEG_BYTES);
	if (pmh_persist(pool, h, PMH_SEG_BYTES) != 0)
	{
		int			save_errno = errno;

		h->pad[0] = 1;
		errno = save_errno;
		return -1;
	}
	return 1;
}

/*
 * Work out, from the segment words alone, which segments are in use: the
 * primaries must tile the hash space; a primary nested inside a shallower
 * one is the unpublished half of a split and is cleared, as is an overflow
 * segment no chain reaches; log segments must number their extensions
 * 0 .. n-1 once each.  Reads one word (and chain link) per segment, nothing
 * else: free segments are left as they are (pmh_prepare_free_segment makes
 * one fit for use when it is taken).  On return roles[] and owner[] (one
 * per segment of the mapping) tell each segment's role and, for overflow
 * segments, the owning primary.  "scratch" must hold
 * PMH_RECOVER_SCRATCH(nsegments) uint64 values.
 *
 * Returns 0, or -1 with res->error set when the pool is corrupt, or -1 with
 * errno set (and res->error empty) when persisting a repair failed.
 */
int
pmh_recover_words(PmhPool *pool, PmhSegRole *roles, uint32 *owner,
				  uint64 *scratch, PmhRecoveryResult *res)
{
	uint64		nseg = pmh_pool_nsegments(pool);
	uint64		nprim = 0;
	uint64		cover_end = 0;
	int			accepted_depth = 0;
	uint8		ext_seen[PMH_LOG_MAX_EXTS / 8];
	uint64	   *sorted;
	uint64		i;

	memset(res, 0, sizeof(*res));
	memset(ext_seen, 0, sizeof(ext_seen));

	for (i = 0; i < nseg; i++)
	{
		uint64		w = pmh_seg_header(pool, (uint32) i)->word;

		roles[i] = PMH_SEG_FREE;
		owner[i] = PMH_NO_SEGMENT;
		if (w == 0)
			continue;
		if (!pmh_segword_is_valid(w))
		{
			snprintf(res->error, sizeof(res->error),
					 "segment %llu has a corrupt header word %016llx",
					 (unsigned long long) i, (unsigned long long) w);
			return -1;
		}
		if (pmh_segword_is_log(w))
		{
			uint32		ext = pmh_segword_log_ext(w);

			if (ext_seen[ext / 8] & (1 << (ext % 8)))
			{
				snprintf(res->error, sizeof(res->error),
						 "segment %llu is a second log segment for extension %u",
						 (unsigned long long) i, ext);
				return -1;
			}
			ext_seen[ext / 8] |= (uint8) (1 << (ext % 8));
			if (ext + 1 > res->log_exts)
				res->log_exts = ext + 1;
			roles[i] = PMH_SEG_LOG;
			continue;
		}
		if (pmh_segword_is_overflow(w))
		{
			roles[i] = PMH_SEG_OVERFLOW;
			continue;
		}
		/* start of its range in a 48-bit hash space, then depth, segno */
		scratch[2 * nprim] = pmh_segword_prefix(w) <<
			(PMH_MAX_DEPTH - pmh_segword_depth(w));
		scratch[2 * nprim + 1] = ((uint64) pmh_segword_depth(w) << 32) | i;
		nprim++;
	}

	sorted = pmh_sort_primaries(scratch, scratch + 2 * nseg, nprim);

	for (i = 0; i < nprim; i++)
	{
		uint64		lo = sorted[2 * i];
		int			depth = (int) (sorted[2 * i + 1] >> 32);
		uint32		segno = (uint32) (sorted[2 * i + 1] & 0xffffffff);

		if (lo < cover_end)
		{
			if (depth <= accepted_depth)
			{
				snprintf(res->error, sizeof(res->error),
						 "segment %u overlaps another segment of the same depth",
						 segno);
				return -1;
			}
			if (pmh_clear_orphan(pool, segno, res) != 0)
				return -1;
			continue;
		}
		if (lo != cover_end)
		{
			snprintf(res->error, sizeof(res->error),
					 "no segment covers hash prefix %012llx (48 bits)",
					 (unsigned long long) cover_end);
			return -1;
		}
		roles[segno] = PMH_SEG_PRIMARY;
		cover_end = lo + (UINT64CONST(1) << (PMH_MAX_DEPTH - depth));
		accepted_depth = depth;
		if (depth > res->global_depth)
			res->global_depth = depth;
		res->primaries++;
	}
	if (cover_end != PMH_HASH_SPACE)
	{
		snprintf(res->error, sizeof(res->error),
				 "no segment covers hash prefix %012llx (48 bits)",
				 (unsigned long long) cover_end);
		return -1;
	}

	/* log extensions are added one after the other: no gaps */
	for (i = 0; i < res->log_exts; i++)
	{
		if ((ext_seen[i / 8] & (1 << (i % 8))) == 0)
		{
			snprintf(res->error, sizeof(res->error),
					 "log extension %llu is missing (%u extensions)",
					 (unsigned long long) i, res->log_exts);
			return -1;
		}
	}

	/* follow the overflow chains of the primaries */
	for (i = 0; i < nseg; i++)
	{
		uint64		link;
		uint64		steps = 0;

		if (roles[i] != PMH_SEG_PRIMARY)
			continue;
		for (link = pmh_seg_header(pool, (uint32) i)->ovf_next; link != 0;
			 link = pmh_seg_header(pool, (uint32) (link - 1))->ovf_next)
		{
			uint64		o = link - 1;

			if (o >= nseg || roles[o] != PMH_SEG_OVERFLOW ||
				owner[o] != PMH_NO_SEGMENT || ++steps > nseg)
			{
				snprintf(res->error, sizeof(res->error),
						 "overflow chain of segment %llu is broken at segment %llu",
						 (unsigned long long) i, (unsigned long long) o);
				return -1;
			}
			owner[o] = (uint32) i;
			res->overflows++;
		}
	}
	for (i = 0; i < nseg; i++)
	{
		if (roles[i] == PMH_SEG_OVERFLOW && owner[i] == PMH_NO_SEGMENT)
		{
			roles[i] = PMH_SEG_FREE;
			if (pmh_clear_orphan(pool, (uint32) i, res) != 0)
				return -1;
		}
	}

	return 0;
}

/*
 * pmh_recover_words, then make every free segment fit for use at once (the
 * server defers that to pmh_prepare_free_segment when it takes one).
 */
int
pmh_recover(PmhPool *pool, PmhSegRole *roles, uint32 *owner,
			uint64 *scratch, PmhRecoveryResult *res)
{
	uint64		nseg = pmh_pool_nsegments(pool);
	uint64		i;

	if (pmh_recover_words(pool, roles, owner, scratch, res) != 0)
		return -1;
	for (i = 0; i < nseg; i++)
	{
		int			rc;

		if (roles[i] != PMH_SEG_FREE)
			continue;
		rc = pmh_prepare_free_segment(pool, (uint32) i);
		if (rc < 0)
			return -1;
		res->free_zeroed += rc;
	}
	return 0;
}
