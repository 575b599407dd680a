/*-------------------------------------------------------------------------
 *
 * fuzz_ops.c
 *	  libFuzzer target: sequences of the core's operations on a small pool,
 *	  checked against a model (the set of (hash, TID) pairs inserted and not
 *	  deleted).
 *
 * The pool is driven as the server drives it (pmhashinsert.c, pmhashblog.c,
 * pmhashvacuum.c, pmhashshmem.c), the backup log and the D-buckets through
 * the core's write-path protocol (src/core/pmh_writepath.c, one writer,
 * see fuzz_common.c): direct inserts (pmh_insert, or pmh_insert_new for
 * pairs known to be new, as CREATE INDEX does); inserts through the backup
 * log (pmh_wp_flush: a line reserved, taken and zeroed without a flush
 * when needed, the entries persisted and placed into their D-buckets, a
 * full D-bucket relocated, room made); deletes as VACUUM does them
 * (pmh_wp_vacuum_begin clears released log copies first, pmh_delete_slots,
 * pmh_wp_vacuum_pending drops D-bucket entries with their log copies
 * cleared); relocation of one D-bucket (the core's pmh_relocate without
 * "decide", then pmh_wp_relocate_segment and pmh_wp_make_room) and of all
 * (pmh_wp_relocate_all); splits and overflow segments whenever the core
 * asks, and on demand; log segments; restarts that rebuild everything
 * volatile from the pool (pmh_recover, pmh_meta_load, the backup log back
 * into D-buckets by pmh_wp_recover_all):
 *	- clean restart and crash: the pool image as it is (a crashed process
 *	  loses no store that reached the mapping); a crash makes the pool
 *	  stale, so relocation then probes the segment for copies;
 *	- power failure: the image becomes the shadow, which holds only what
 *	  was flushed and fenced, either between operations or at the k-th fence
 *	  of the next operation.  The pairs that operation inserts or deletes
 *	  may then be present or not (and the model learns which); every other
 *	  pair must be there exactly as before.
 *
 * After every operation:
 *	- the structure checker of fuzz_common.c (tiling, chains, occupancy
 *	  mirrors the entries, free segments zero, the directory);
 *	- between operations, every segment (log segments aside) and the header
 *	  page read the same in the image and in the shadow: what the metadata
 *	  trusts was persisted;
 *	- the core's backup-log line states agree with themselves, the log and
 *	  the D-buckets (fz_check_log: each D-bucket entry's log slot is pending
 *	  and holds it, nothing else is pending, the free masks and counts are
 *	  right, every released live log copy is in its segment);
 *	- the live entries of the segments hold no pair twice, and with the
 *	  D-buckets they are exactly the model (a D-bucket entry may repeat a
 *	  stored one only in a stale pool, see README.pmhash "Recovery");
 *	- lookups (pmh_lookup plus the D-bucket, as a scan does) of the model's
 *	  hashes return exactly the model's TIDs, each once in the segments and
 *	  once overall (after de-duplication in a stale pool, as scans do); hashes
 *	  the model lacks find nothing.  All model hashes are looked up when the
 *	  model is small, after structure changes and at the end; otherwise the
 *	  hashes the operation touched and a rotating sample.
 * At the end the pool goes through a power failure and is checked again.
 *
 * Input: byte 0 flags (fixed log lines used, log segments allowed,
 * pmh_insert_new), byte 1 a salt for the hashes, then operations: an op
 * byte (mod FO_NOPS) and its arguments, see fuzz_format.h.  Keys are bytes:
 * 0-127 random hashes, 128-191 one region of the hash space, 192-255 that
 * region with one (16-bit) fingerprint.  TIDs are bytes too (32 blocks of 8), so
 * the same pair comes back often.  FUZZ_VERBOSE=1 prints the operations.
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz_common.h"

#include <stdlib.h>

#include "fuzz_format.h"
#include "port/pg_bitutils.h"

#define FO_MAX_MODEL		4096	/* pairs in the model */
#define FO_MAX_OPS			512		/* operations per input */
#define FO_MAX_EXTS			3		/* log segments */
#define FO_FULL_CHECK		128		/* look up all hashes of a model this small */
#define FO_SAMPLE			16		/* else this many, and the touched ones */
#define FO_MAX_SPLIT_DEPTH	10		/* splits on demand stop here */
#define FO_MAX_CHAIN		3		/* overflow segments on demand stop here */

typedef struct FoState
{
	FzPool		fp;
	uint64		salt;
	uint8		flags;

	FzPair	   *model;
	size_t		nmodel;

	uint64		crash_count;	/* the pool is stale after one: fp.stale */

	int			arm;			/* power failure at this fence of the next op */
	FzPair	   *uncertain;		/* pairs the running op inserts or deletes */
	size_t		nuncertain;
	size_t		capuncertain;
	FzPair		touched[2 * PMH_BUCKET_SLOTS];
	int			ntouched;
	uint32		bulkno;
	uint32		sample;			/* rotating sample position */
	uint64	   *tags;			/* lookup buffer */
	int			captags;
} FoState;

/*
 * FUZZ_SERVER_VACUUM=1: VACUUM leaves the backup-log lines zeroed for reuse
 * unflushed (the core's fault PMH_WP_FAULT_KEEP_ZEROED), as the server did
 * before it flushed them: on persistent memory such a line's old copies may
 * still be on the media, and a power failure after the delete brings the
 * deleted entry back.  test/fuzz/regress/ops/log-reuse-vacuum then fails,
 * as soon as the clearing is done (check_log_cleared: the persisted line
 * still holds a released copy): it shows that the fuzzer catches that bug.
 * The core (and the server) flush those lines in pmh_wp_vacuum_begin.
 */
static bool server_vacuum = false;

static const char *const op_names[FO_NOPS] = {
	"insert", "log insert", "log batch", "delete", "delete key", "lookup",
	"relocate", "relocate all", "split", "overflow", "bulk", "restart",
	"crash", "power failure", "log extend"
};

/* ---------------------------------------------------------------------
 * Keys and the model
 * ---------------------------------------------------------------------
 */

/* the hash of a key byte */
static uint64
key_hash(const FoState *st, uint8 key)
{
	uint64		h = fz_mix(st->salt * 256 + key);

	if (key >= 128)
		h = (UINT64CONST(0x2A5) << 54) | (h >> 10);
	if (key >= 192)
		h = (h & ~UINT64CONST(0xffff)) | 0x5a5a;
	return h;
}

/* the tag of a key's hash and a TID byte */
static uint64
tid_tag(uint64 hash, uint8 t)
{
	return pmh_tag_make(hash, t >> 3, (uint16) ((t & 7) + 1));
}

/* index of a pair in the model, or -1 */
static ssize_t
model_find(const FoState *st, uint64 hash, uint64 tag)
{
	size_t		i;

	for (i = 0; i < st->nmodel; i++)
		if (st->model[i].hash == hash && st->model[i].tag == tag)
			return (ssize_t) i;
	return -1;
}

/* add a pair */
static void
model_add(FoState *st, uint64 hash, uint64 tag)
{
	FZ_ASSERT(st->nmodel < FO_MAX_MODEL, "model full");
	st->model[st->nmodel].hash = hash;
	st->model[st->nmodel].tag = tag;
	st->nmodel++;
}

/* remove the pair at index i */
static void
model_remove(FoState *st, size_t i)
{
	st->model[i] = st->model[--st->nmodel];
}

/* the running operation may or may not have made this change */
static void
note_uncertain(FoState *st, uint64 hash, uint64 tag)
{
	if (st->nuncertain == st->capuncertain)
	{
		st->capuncertain = Max(64, st->capuncertain * 2);
		st->uncertain = pg_realloc(st->uncertain, st->capuncertain * sizeof(FzPair));
	}
	st->uncertain[st->nuncertain].hash = hash;
	st->uncertain[st->nuncertain].tag = tag;
	st->nuncertain++;
	if (st->ntouched < (int) lengthof(st->touched))
	{
		st->touched[st->ntouched].hash = hash;
		st->touched[st->ntouched].tag = tag;
		st->ntouched++;
	}
}

/* the hashes waiting in a D-bucket are looked up after the operation */
static void
note_touched_pending(FoState *st, uint32 p)
{
	const PmhSegMeta *m = &st->fp.meta[p];
	uint32		i;

	for (i = 0; i < m->npending && st->ntouched < (int) lengthof(st->touched); i++)
	{
		st->touched[st->ntouched].hash = m->pending[i].hash;
		st->touched[st->ntouched].tag = m->pending[i].tag;
		st->ntouched++;
	}
}

/* is the pair waiting in the D-bucket of its primary? */
static bool
pending_has(const FoState *st, uint64 hash, uint64 tag)
{
	const PmhSegMeta *m = &st->fp.meta[fz_primary_of(&st->fp, hash)];
	uint32		i;

	for (i = 0; i < m->npending; i++)
		if (m->pending[i].hash == hash && m->pending[i].tag == tag)
			return true;
	return false;
}

/* ---------------------------------------------------------------------
 * Operations
 * ---------------------------------------------------------------------
 */

/*
 * Insert a pair directly into its segment, splitting or extending as the
 * core asks.  "isnew": the pair is stored nowhere (pmh_insert_new allowed).
 */
static void
direct_insert(FoState *st, uint64 hash, uint64 tag, bool isnew)
{
	int			round;

	for (round = 0; round < 100; round++)
	{
		uint32		p = fz_primary_of(&st->fp, hash);
		PmhInsertResult r;

		if (isnew && (st->flags & FO_INSERT_NEW))
			r = pmh_insert_new(&st->fp.pool, &st->fp.cb, p, hash,
							   pmh_tag_block(tag), pmh_tag_offset(tag));
		else
			r = pmh_insert(&st->fp.pool, &st->fp.cb, p, hash,
						   pmh_tag_block(tag), pmh_tag_offset(tag));
		if (r == PMH_INSERT_DONE)
		{
			FZ_ASSERT(isnew, "pmh_insert stored (%016llx, %016llx) a second time",
					  (unsigned long long) hash, (unsigned long long) tag);
			return;
		}
		if (r == PMH_INSERT_EXISTS)
		{
			FZ_ASSERT(!isnew, "pmh_insert finds (%016llx, %016llx), which is stored nowhere",
					  (unsigned long long) hash, (unsigned long long) tag);
			return;
		}
		if (pmh_wp_make_room(fz_writer(&st->fp), p, r) != PMH_WP_OK)
			fz_fail("pmh_insert: result %d: %m", (int) r);
	}
	fz_fail("insert of %016llx did not finish after 100 rounds", (unsigned long long) hash);
}

/* FO_OP_INSERT */
static void
op_insert(FoState *st, uint64 hash, uint64 tag)
{
	ssize_t		i = model_find(st, hash, tag);

	if (i >= 0)
	{
		/* pmh_insert looks in the segments only: not for a pending pair */
		if (!pending_has(st, hash, tag))
			direct_insert(st, hash, tag, false);
		return;
	}
	if (st->nmodel >= FO_MAX_MODEL)
		return;
	direct_insert(st, hash, tag, true);
	model_add(st, hash, tag);
	note_uncertain(st, hash, tag);
}

/*
 * FO_OP_LOG_INSERT and FO_OP_LOG_BATCH: n pairs through the backup log.  A
 * pair the model has is inserted again only in a stale pool (a heap slot
 * of a lost insert reused with the same key); a transaction never inserts
 * a pair twice.
 */
static void
op_log_insert(FoState *st, const FzPair *pairs, int n)
{
	PmhEntry	ents[PMH_BUCKET_SLOTS];
	int			k = 0;
	int			i;
	int			j;

	for (i = 0; i < n; i++)
	{
		bool		dup = false;
		ssize_t		m = model_find(st, pairs[i].hash, pairs[i].tag);

		for (j = 0; j < k && !dup; j++)
			dup = ents[j].hash == pairs[i].hash && ents[j].tag == pairs[i].tag;
		if (dup || (m >= 0 && !st->fp.stale) || (m < 0 && st->nmodel >= FO_MAX_MODEL))
			continue;
		ents[k].hash = pairs[i].hash;
		ents[k].tag = pairs[i].tag;
		k++;
		if (m < 0)
		{
			model_add(st, pairs[i].hash, pairs[i].tag);
			note_uncertain(st, pairs[i].hash, pairs[i].tag);
		}
	}
	if (k > 0)
		FZ_ASSERT(pmh_wp_flush(fz_writer(&st->fp), ents, k) == PMH_WP_OK,
				  "writing %d entries through the backup log failed", k);
}

/* pmh_wp_vacuum_pending's judgement of a D-bucket: one pair is deleted */
typedef struct FoDoomed
{
	const PmhSegMeta *meta;		/* the D-bucket judged */
	uint32		next;			/* the entry the core judges next */
	uint64		hash;
	uint64		tag;
	uint32		slots[PMH_DBUCKET_SLOTS];	/* log slots of those doomed */
	int			nslots;
} FoDoomed;

/*
 * Is the D-bucket entry of this tag the pair being deleted?  The core
 * hands over the tag only (VACUUM judges by TID), which pairs of other
 * hashes may share: the entry is known by its place, as the core judges
 * every entry in order before it removes any.
 */
static bool
pending_doomed(uint64 tag, void *arg)
{
	FoDoomed   *d = (FoDoomed *) arg;
	const PmhPending *pe;

	FZ_ASSERT(d->next < d->meta->npending && d->meta->pending[d->next].tag == tag,
			  "pmh_wp_vacuum_pending judges tag %016llx out of the D-bucket's order",
			  (unsigned long long) tag);
	pe = &d->meta->pending[d->next++];
	if (pe->hash != d->hash || pe->tag != d->tag)
		return false;
	d->slots[d->nslots++] = pe->logslot;
	return true;
}

/* what was persisted of a log entry (its copy in the shadow) */
static const PmhEntry *
persisted_copy(const FzPool *fp, const PmhEntry *e)
{
	return (const PmhEntry *) (fp->shadow + ((const char *) e - fp->pool.base));
}

/*
 * VACUUM's part of the log is done (pmh_wp_vacuum_begin): every log slot
 * that is not pending reads as cleared in the pool and, unless a power
 * failure froze it, in what was persisted, and no line counts as zeroed
 * for reuse any more, so that no restart can bring back what is deleted.
 */
static void
check_log_cleared(FoState *st)
{
	FzPool	   *fp = &st->fp;
	PmhWriter  *w = fz_writer(fp);
	uint32		l;

	for (l = 0; l < pmh_log_nlines(&fp->log); l++)
	{
		const PmhLogLine *ls = pmh_wp_line(w, l);
		const PmhEntry *e = pmh_log_line(&fp->pool, l);
		const PmhEntry *persisted = persisted_copy(fp, e);
		int			k;

		if (ls->owner == PMH_LOG_UNUSABLE)
			continue;
		FZ_ASSERT(!ls->zeroed, "log line %u counts as zeroed after VACUUM's clearing", l);
		for (k = 0; k < PMH_BUCKET_SLOTS; k++)
			FZ_ASSERT((ls->pending & (1 << k)) ||
					  (e[k].tag == 0 && (fp->frozen || persisted[k].tag == 0)),
					  "released log slot %u holds tag %016llx (%016llx persisted) after VACUUM's clearing",
					  l * PMH_BUCKET_SLOTS + (uint32) k, (unsigned long long) e[k].tag,
					  (unsigned long long) persisted[k].tag);
	}
}

/* VACUUM begins deleting (pmh_wp_vacuum_begin) */
static void
vacuum_begin(FoState *st)
{
	FZ_ASSERT(pmh_wp_vacuum_begin(fz_writer(&st->fp)) == PMH_WP_OK,
			  "clearing the backup log failed");
	check_log_cleared(st);
}

/*
 * Delete every copy of a model pair (VACUUM, between pmh_wp_vacuum_begin
 * and pmh_wp_vacuum_end), and drop it from the model.
 */
static void
delete_pair(FoState *st, size_t mi)
{
	uint64		hash = st->model[mi].hash;
	uint64		tag = st->model[mi].tag;
	uint32		p = fz_primary_of(&st->fp, hash);
	PmhSegMeta *pm = &st->fp.meta[p];
	uint32		npending = pm->npending;
	uint32		logpending = st->fp.log.pending;
	FoDoomed	d;
	uint32		nremoved;
	uint32		nremaining;
	uint32		seg;
	int			copies = 0;
	int			i;

	for (seg = p; seg != PMH_NO_SEGMENT; seg = st->fp.meta[seg].ovf_next)
	{
		PmhSegMeta *m = &st->fp.meta[seg];
		const PmhEntry *e = pmh_seg_entries(&st->fp.pool, seg);
		int			b;

		for (b = 0; b < PMH_SEG_BUCKETS; b++)
		{
			uint16		mask = 0;
			int			s;

			for (s = 0; s < PMH_BUCKET_SLOTS; s++)
				if ((m->occ[b] & (1 << s)) &&
					e[b * PMH_BUCKET_SLOTS + s].hash == hash &&
					e[b * PMH_BUCKET_SLOTS + s].tag == tag)
					mask |= (uint16) (1 << s);
			if (mask == 0)
				continue;
			FZ_ASSERT(pmh_delete_slots(&st->fp.pool, m, seg, b, mask) == 0,
					  "pmh_delete_slots: %m");
			copies += pg_popcount32(mask);
		}
	}

	/* the D-bucket: the entries go, their log copies are cleared */
	memset(&d, 0, sizeof(d));
	d.meta = pm;
	d.hash = hash;
	d.tag = tag;
	FZ_ASSERT(pmh_wp_vacuum_pending(fz_writer(&st->fp), p, pending_doomed, &d,
									&nremoved, &nremaining) == PMH_WP_OK,
			  "removing (%016llx, %016llx) from the D-bucket of %u failed",
			  (unsigned long long) hash, (unsigned long long) tag, p);
	FZ_ASSERT(d.next == npending && nremoved == (uint32) d.nslots &&
			  nremoved + nremaining == npending && pm->npending == nremaining &&
			  st->fp.log.pending == logpending - nremoved && !pending_has(st, hash, tag),
			  "pmh_wp_vacuum_pending(%u): %u entries, %u judged, %d doomed, %u removed, %u left (%u in the D-bucket); %u log slots pending, %u before",
			  p, npending, d.next, d.nslots, nremoved, nremaining, pm->npending,
			  st->fp.log.pending, logpending);
	for (i = 0; i < d.nslots; i++)
	{
		const PmhEntry *e = pmh_log_entry(&st->fp.pool, d.slots[i]);
		const PmhEntry *persisted = persisted_copy(&st->fp, e);

		FZ_ASSERT(e->tag == 0 && (st->fp.frozen || persisted->tag == 0),
				  "VACUUM left tag %016llx (%016llx persisted) in log slot %u of a deleted entry",
				  (unsigned long long) e->tag, (unsigned long long) persisted->tag,
				  d.slots[i]);
	}
	copies += (int) nremoved;
	FZ_ASSERT(copies > 0, "delete: (%016llx, %016llx) of the model is stored nowhere",
			  (unsigned long long) hash, (unsigned long long) tag);
	note_uncertain(st, hash, tag);
	model_remove(st, mi);
}

/* FO_OP_DELETE_KEY: every pair of a hash */
static void
op_delete_hash(FoState *st, uint64 hash)
{
	size_t		i = 0;

	vacuum_begin(st);
	while (i < st->nmodel)
	{
		if (st->model[i].hash == hash)
			delete_pair(st, i);
		else
			i++;
	}
	pmh_wp_vacuum_end(fz_writer(&st->fp));
}

/*
 * FO_OP_RELOCATE: empty the D-bucket of primary p.  First the core's
 * primitive alone (fz_relocate: pmh_relocate without "decide"); then, if
 * entries are left, as the protocol empties a full D-bucket:
 * pmh_wp_relocate_segment, and pmh_wp_make_room on its verdict, until it
 * is done.  Each round releases exactly the log slots of the entries that
 * left the D-bucket.
 */
static void
op_relocate(FoState *st, uint32 p)
{
	FzPool	   *fp = &st->fp;
	PmhInsertResult r = fz_relocate(fp, p);
	int			round;

	for (round = 0; r != PMH_INSERT_DONE; round++)
	{
		PmhWriter  *w = fz_writer(fp);
		uint32		npending = fp->meta[p].npending;
		uint32		logpending = fp->log.pending;

		FZ_ASSERT(round < 200, "relocation of segment %u did not finish after 200 rounds", p);
		FZ_ASSERT(pmh_wp_relocate_segment(w, p, &r) == PMH_WP_OK,
				  "pmh_wp_relocate_segment(%u) failed", p);
		FZ_ASSERT(npending - fp->meta[p].npending == logpending - fp->log.pending &&
				  (r != PMH_INSERT_DONE || fp->meta[p].npending == 0),
				  "pmh_wp_relocate_segment(%u): result %d, %u of %u entries left the D-bucket, %u log slots were released",
				  p, (int) r, npending - fp->meta[p].npending, npending,
				  logpending - fp->log.pending);
		if (r != PMH_INSERT_DONE)
			FZ_ASSERT(pmh_wp_make_room(w, p, r) == PMH_WP_OK,
					  "no room made in segment %u for result %d", p, (int) r);
	}
}

/*
 * FO_OP_BULK: many new pairs in the segment of a key (fills it, so that
 * the core asks for a split or an overflow segment).
 */
static void
op_bulk(FoState *st, uint8 key, uint8 count, uint8 mode)
{
	uint64		base = key_hash(st, key);
	uint64		word = st->fp.meta[fz_primary_of(&st->fp, base)].word;
	int			depth = pmh_segword_depth(word);
	uint32		n = ((uint32) (count % 32) + 1) * 32;
	uint32		i;

	n = (uint32) Min(n, FO_MAX_MODEL - st->nmodel);
	st->bulkno++;
	fz_trace("  %u pairs, depth %d, mode %02x", n, depth, mode);
	for (i = 0; i < n; i++)
	{
		uint32		hi = (mode & FO_BULK_ONEHASH) ? 0 : (mode & FO_BULK_DUPS) ? i / 4 : i;
		uint64		h = fz_mix(st->salt ^ ((uint64) st->bulkno << 32) ^ hi);
		uint64		tag;

		if (depth > 0)
			h = (pmh_segword_prefix(word) << (64 - depth)) | (h & (~UINT64CONST(0) >> depth));
		if (mode & FO_BULK_ONEHASH)
			h = base;
		if (mode & FO_BULK_FPCOLLIDE)
			h = (h & ~UINT64CONST(0xffff)) | key;
		tag = pmh_tag_make(h, 100000 + st->bulkno, (uint16) (i + 1));
		direct_insert(st, h, tag, true);
		model_add(st, h, tag);
		note_uncertain(st, h, tag);
	}
}

/*
 * Restart: rebuild everything volatile from the pool, as the server does
 * when it loads an index (the backup log through pmh_wp_recover_all).  From the shadow for a power failure, else from
 * the image (whose stores all reach the media eventually: the shadow
 * follows).  A crash makes the pool stale.  expect_clean: nothing was
 * half-done, so recovery must find nothing to repair.
 */
static void
restart(FoState *st, bool from_shadow, bool crash, bool expect_clean)
{
	FzPool	   *fp = &st->fp;
	PmhRecoveryResult res;
	uint32		restored;

	if (from_shadow)
		fz_pool_restart_from_shadow(fp);
	else
		memcpy(fp->shadow, fp->pool.base, fp->pool.mapped_len);
	if (crash)
		st->crash_count++;
	FZ_ASSERT(pmh_pool_note_crashes(&fp->pool, st->crash_count, &fp->stale) == 0,
			  "pmh_pool_note_crashes: %m");
	FZ_ASSERT(fp->stale == (st->crash_count > 0),
			  "after %llu crashes the pool is %s", (unsigned long long) st->crash_count,
			  fp->stale ? "stale" : "not stale");
	FZ_ASSERT(fz_pool_load(fp, &res) == 0,
			  "recovery of a pool the core wrote failed: %s", res.error);
	fz_trace("  recovered: %llu primaries, %llu overflows, %u log segments, %llu orphans, %llu zeroed",
			 (unsigned long long) res.primaries, (unsigned long long) res.overflows,
			 res.log_exts, (unsigned long long) res.orphans_cleared,
			 (unsigned long long) res.free_zeroed);
	if (expect_clean)
		FZ_ASSERT(res.orphans_cleared == 0 && res.free_zeroed == 0,
				  "recovery between operations cleared %llu orphans, zeroed %llu segments",
				  (unsigned long long) res.orphans_cleared,
				  (unsigned long long) res.free_zeroed);
	FZ_ASSERT(res.log_exts <= FO_MAX_EXTS, "recovery found %u log segments", res.log_exts);
	FZ_ASSERT(pmh_wp_recover_all(fz_writer(fp), &restored) == PMH_WP_OK,
			  "recovering the backup log failed");
	fz_trace("  %u log entries pending again", restored);
}

/*
 * After a power failure inside an operation: each pair it inserted or
 * deleted is there or not (once), and the model follows.
 */
static void
resolve_uncertain(FoState *st)
{
	size_t		i;

	for (i = 0; i < st->nuncertain; i++)
	{
		uint64		hash = st->uncertain[i].hash;
		uint64		tag = st->uncertain[i].tag;
		uint32		p = fz_primary_of(&st->fp, hash);
		bool		present = pmh_contains(&st->fp.pool, &st->fp.cb, p, hash, tag) ||
			pending_has(st, hash, tag);
		ssize_t		m = model_find(st, hash, tag);

		if (present && m < 0)
			model_add(st, hash, tag);
		else if (!present && m >= 0)
			model_remove(st, (size_t) m);
		fz_trace("  (%016llx, %016llx) %s", (unsigned long long) hash,
				 (unsigned long long) tag, present ? "survived" : "is gone");
	}
}

/* ---------------------------------------------------------------------
 * Checks
 * ---------------------------------------------------------------------
 */

/* every segment but the log's, and the header page, are persisted */
static void
check_persisted(const FoState *st, const char *what)
{
	const FzPool *fp = &st->fp;
	uint64		s;

	FZ_ASSERT(memcmp(fp->pool.base, fp->shadow, PMH_HEADER_BYTES) == 0,
			  "%s: the header page differs from what was persisted", what);
	for (s = 0; s < fp->nseg; s++)
	{
		size_t		off = pmh_pool_bytes(s);

		if (fp->role[s] == PMH_SEG_LOG)
			continue;
		FZ_ASSERT(memcmp(fp->pool.base + off, fp->shadow + off, PMH_SEG_BYTES) == 0,
				  "%s: segment %llu (role %d) differs from what was persisted", what,
				  (unsigned long long) s, (int) fp->role[s]);
	}
}

/*
 * The core's backup-log line states agree with the log and the D-buckets
 * (fz_check_log), and between operations nothing is reserved: every
 * pending slot is a D-bucket entry's.
 */
static void
check_log(FoState *st, const char *what)
{
	uint32		unplaced = fz_check_log(&st->fp, what);

	FZ_ASSERT(unplaced == 0, "%s: %u log slots pending, but in no D-bucket",
			  what, unplaced);
}

/*
 * The stored pairs (segments, then D-buckets) against the model: no pair
 * twice in the segments; without a stale pool no pair twice at all; as a
 * set, exactly the model.  The model comes back sorted.
 */
static void
check_contents(FoState *st, const char *what)
{
	FzPair	   *seg;
	FzPair	   *all;
	size_t		nseg;
	size_t		nall;
	size_t		i;

	seg = fz_collect(&st->fp, false, &nseg);
	for (i = 1; i < nseg; i++)
		FZ_ASSERT(fz_cmp_pair(&seg[i - 1], &seg[i]) != 0,
				  "%s: (%016llx, %016llx) is stored twice in the segments", what,
				  (unsigned long long) seg[i].hash, (unsigned long long) seg[i].tag);
	all = fz_collect(&st->fp, true, &nall);
	/* de-duplicate (allowed only in a stale pool) */
	if (nall > 0)
	{
		size_t		k = 1;

		for (i = 1; i < nall; i++)
		{
			if (fz_cmp_pair(&all[i - 1], &all[i]) == 0)
			{
				FZ_ASSERT(st->fp.stale, "%s: (%016llx, %016llx) is stored twice in a pool that is not stale",
						  what, (unsigned long long) all[i].hash,
						  (unsigned long long) all[i].tag);
				continue;
			}
			all[k++] = all[i];
		}
		nall = k;
	}
	qsort(st->model, st->nmodel, sizeof(FzPair), fz_cmp_pair);
	for (i = 0; i < Max(nall, st->nmodel); i++)
	{
		int			c;

		if (i < nall && i < st->nmodel)
			c = fz_cmp_pair(&all[i], &st->model[i]);
		else
			c = i < nall ? -1 : 1;
		FZ_ASSERT(c >= 0, "%s: the pool holds (%016llx, %016llx), which the model lacks",
				  what, (unsigned long long) all[i].hash, (unsigned long long) all[i].tag);
		FZ_ASSERT(c <= 0, "%s: the model's (%016llx, %016llx) is not in the pool",
				  what, (unsigned long long) st->model[i].hash,
				  (unsigned long long) st->model[i].tag);
	}
	free(seg);
	free(all);
}

/*
 * Look a hash up as a scan does and compare with the model's pairs
 * model[lo, hi) of that hash.
 */
static void
check_lookup(FoState *st, uint64 hash, size_t lo, size_t hi, const char *what)
{
	int			nsegpart;
	int			n;
	int			k;
	int			u = 0;

	n = fz_lookup(&st->fp, hash, st->tags, st->captags, &nsegpart);
	if (n > st->captags)
	{
		st->captags = n * 2;
		st->tags = pg_realloc(st->tags, st->captags * sizeof(uint64));
		n = fz_lookup(&st->fp, hash, st->tags, st->captags, &nsegpart);
	}
	/* the segment part, then all, sorted: no TID twice in the segments */
	qsort(st->tags, nsegpart, sizeof(uint64), fz_cmp_u64);
	for (k = 1; k < nsegpart; k++)
		FZ_ASSERT(st->tags[k] != st->tags[k - 1],
				  "%s: lookup of %016llx finds tag %016llx twice in the segments",
				  what, (unsigned long long) hash, (unsigned long long) st->tags[k]);
	qsort(st->tags, n, sizeof(uint64), fz_cmp_u64);
	for (k = 0; k < n; k++)
	{
		if (k > 0 && st->tags[k] == st->tags[k - 1])
		{
			FZ_ASSERT(st->fp.stale, "%s: lookup of %016llx finds tag %016llx twice",
					  what, (unsigned long long) hash, (unsigned long long) st->tags[k]);
			continue;
		}
		FZ_ASSERT(lo + u < hi && st->tags[k] == st->model[lo + u].tag,
				  "%s: lookup of %016llx finds tag %016llx, the model %s",
				  what, (unsigned long long) hash, (unsigned long long) st->tags[k],
				  lo + u < hi ? "another" : "no more");
		u++;
	}
	FZ_ASSERT(lo + u == hi, "%s: lookup of %016llx finds %d TIDs, the model has %zu",
			  what, (unsigned long long) hash, u, hi - lo);
}

/* range [lo, hi) of a hash in the sorted model */
static void
model_range(const FoState *st, uint64 hash, size_t *lo, size_t *hi)
{
	size_t		a = 0;
	size_t		b = st->nmodel;

	while (a < b)
	{
		size_t		mid = (a + b) / 2;

		if (st->model[mid].hash < hash)
			a = mid + 1;
		else
			b = mid;
	}
	*lo = a;
	for (b = a; b < st->nmodel && st->model[b].hash == hash; b++)
		;
	*hi = b;
}

/* all checks after an operation; "full": look up every model hash */
static void
verify(FoState *st, const char *what, bool full)
{
	size_t		i;
	size_t		j;
	size_t		lo;
	size_t		hi;
	int			k;

	fz_check_structure(&st->fp, what);
	if (!st->fp.frozen)
		check_persisted(st, what);
	check_log(st, what);
	check_contents(st, what);	/* sorts the model */

	if (full || st->nmodel <= FO_FULL_CHECK)
	{
		for (i = 0; i < st->nmodel; i = j)
		{
			for (j = i; j < st->nmodel && st->model[j].hash == st->model[i].hash; j++)
				;
			check_lookup(st, st->model[i].hash, i, j, what);
		}
	}
	else
	{
		for (k = 0; k < st->ntouched; k++)
		{
			model_range(st, st->touched[k].hash, &lo, &hi);
			check_lookup(st, st->touched[k].hash, lo, hi, what);
		}
		for (k = 0; k < FO_SAMPLE; k++)
		{
			uint64		h = st->model[(st->sample++) % st->nmodel].hash;

			model_range(st, h, &lo, &hi);
			check_lookup(st, h, lo, hi, what);
		}
	}
	/* hashes of keys the model lacks find nothing */
	for (k = 0; k < 8; k++)
	{
		uint64		h = key_hash(st, (uint8) (st->sample * 8 + k));

		model_range(st, h, &lo, &hi);
		check_lookup(st, h, lo, hi, what);
	}
	st->sample++;
}

/* read FUZZ_VERBOSE and FUZZ_SERVER_VACUUM once */
int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fz_verbose = fz_env_flag("FUZZ_VERBOSE");
	server_vacuum = fz_env_flag("FUZZ_SERVER_VACUUM");
	return 0;
}

/* run one operation; returns whether it changed the structure */
static bool
run_op(FoState *st, FoOp op, FzIn *in)
{
	switch (op)
	{
		case FO_OP_INSERT:
			{
				uint8		key = fz_u8(in);
				uint64		h = key_hash(st, key);
				uint64		tag = tid_tag(h, fz_u8(in));

				fz_trace("insert key %u (%016llx, %016llx)", key,
						 (unsigned long long) h, (unsigned long long) tag);
				op_insert(st, h, tag);
				return false;
			}
		case FO_OP_LOG_INSERT:
			{
				uint8		key = fz_u8(in);
				FzPair		pr;

				pr.hash = key_hash(st, key);
				pr.tag = tid_tag(pr.hash, fz_u8(in));
				fz_trace("log insert key %u (%016llx, %016llx)", key,
						 (unsigned long long) pr.hash, (unsigned long long) pr.tag);
				op_log_insert(st, &pr, 1);
				return false;
			}
		case FO_OP_LOG_BATCH:
			{
				int			n = fz_u8(in) % PMH_BUCKET_SLOTS + 1;
				uint8		key = fz_u8(in);
				uint8		step = fz_u8(in);
				uint8		t = fz_u8(in);
				FzPair		pr[PMH_BUCKET_SLOTS];
				int			i;

				fz_trace("log batch of %d from key %u step %u tid %u", n, key, step, t);
				for (i = 0; i < n; i++)
				{
					pr[i].hash = key_hash(st, (uint8) (key + i * step));
					pr[i].tag = tid_tag(pr[i].hash, (uint8) (t + i * 37));
				}
				op_log_insert(st, pr, n);
				return false;
			}
		case FO_OP_DELETE:
			{
				uint16		i = fz_u16(in);

				if (st->nmodel == 0)
					return false;
				fz_trace("delete (%016llx, %016llx)",
						 (unsigned long long) st->model[i % st->nmodel].hash,
						 (unsigned long long) st->model[i % st->nmodel].tag);
				vacuum_begin(st);
				delete_pair(st, i % st->nmodel);
				pmh_wp_vacuum_end(fz_writer(&st->fp));
				return false;
			}
		case FO_OP_DELETE_KEY:
			{
				uint8		key = fz_u8(in);

				fz_trace("delete key %u", key);
				op_delete_hash(st, key_hash(st, key));
				return false;
			}
		case FO_OP_LOOKUP:
			{
				uint8		key = fz_u8(in);
				uint64		h = key_hash(st, key);
				size_t		lo;
				size_t		hi;

				fz_trace("lookup key %u", key);
				qsort(st->model, st->nmodel, sizeof(FzPair), fz_cmp_pair);
				model_range(st, h, &lo, &hi);
				check_lookup(st, h, lo, hi, "lookup");
				return false;
			}
		case FO_OP_RELOCATE:
			{
				uint8		key = fz_u8(in);
				uint32		p = fz_primary_of(&st->fp, key_hash(st, key));

				fz_trace("relocate segment %u (%u pending)", p, st->fp.meta[p].npending);
				note_touched_pending(st, p);
				if (st->fp.meta[p].npending > 0)
					op_relocate(st, p);
				return false;
			}
		case FO_OP_RELOCATE_ALL:
			{
				uint64		s;

				fz_trace("relocate all");
				for (s = 0; s < st->fp.nseg; s++)
					if (st->fp.role[s] == PMH_SEG_PRIMARY)
						note_touched_pending(st, (uint32) s);
				FZ_ASSERT(pmh_wp_relocate_all(fz_writer(&st->fp)) == PMH_WP_OK,
						  "relocating every D-bucket failed");
				for (s = 0; s < st->fp.nseg; s++)
					FZ_ASSERT(st->fp.meta[s].npending == 0,
							  "relocating every D-bucket left %u entries in that of %llu",
							  st->fp.meta[s].npending, (unsigned long long) s);
				return false;
			}
		case FO_OP_SPLIT:
			{
				uint8		key = fz_u8(in);
				uint32		p = fz_primary_of(&st->fp, key_hash(st, key));

				fz_trace("split segment %u", p);
				if (pmh_segword_depth(st->fp.meta[p].word) < FO_MAX_SPLIT_DEPTH)
					(void) fz_split(&st->fp, p);
				return true;
			}
		case FO_OP_OVERFLOW:
			{
				uint8		key = fz_u8(in);
				uint32		p = fz_primary_of(&st->fp, key_hash(st, key));

				fz_trace("overflow segment for %u", p);
				if (fz_chain_length(&st->fp, p) < FO_MAX_CHAIN)
					(void) fz_add_overflow(&st->fp, p);
				return true;
			}
		case FO_OP_BULK:
			{
				uint8		key = fz_u8(in);
				uint8		count = fz_u8(in);
				uint8		mode = fz_u8(in);

				fz_trace("bulk key %u", key);
				op_bulk(st, key, count, mode);
				return false;
			}
		case FO_OP_RESTART:
			fz_trace("restart");
			restart(st, false, false, true);
			return true;
		case FO_OP_CRASH:
			fz_trace("crash");
			restart(st, false, true, true);
			return true;
		case FO_OP_POWERFAIL:
			{
				uint8		k = fz_u8(in);

				fz_trace("power failure %s %u", k == 0 ? "now" : "at fence", k);
				if (k == 0)
				{
					restart(st, true, true, true);
					return true;
				}
				st->arm = k;
				return false;
			}
		case FO_OP_LOG_EXTEND:
			fz_trace("log extend");
			if (st->fp.log.nexts < FO_MAX_EXTS)
			{
				uint32		s = fz_add_log_segment(&st->fp);

				fz_trace("  log segment %u (extension %u)", s, st->fp.log.nexts - 1);
			}
			return false;
		case FO_NOPS:
			break;
	}
	return false;
}

/* one input: run its operations, checking after each */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FzIn		in;
	FoState    *st;
	uint32		nops = 0;

	if (size < 2)
		return 0;
	in.p = data;
	in.n = size;
	st = pg_malloc0(sizeof(FoState));
	st->flags = fz_u8(&in);
	st->salt = fz_u8(&in);
	st->model = pg_malloc(sizeof(FzPair) * FO_MAX_MODEL);
	st->captags = 64;
	st->tags = pg_malloc(sizeof(uint64) * st->captags);
	fz_pool_create(&st->fp, 2, true);
	fz_log_setup(&st->fp, FO_LOG_LINES(st->flags), FO_LOG_EXTS(st->flags));
	if (server_vacuum)
		st->fp.faults = PMH_WP_FAULT_KEEP_ZEROED;
	fz_trace("pool: %u log lines, %u log segments, flags %02x", st->fp.log_fixed,
			 st->fp.log_max_exts, st->flags);

	while (in.n > 0 && nops < FO_MAX_OPS)
	{
		FoOp		op = (FoOp) (fz_u8(&in) % FO_NOPS);
		int			armed = st->arm;
		bool		structural;

		nops++;
		st->arm = 0;
		st->nuncertain = 0;
		st->ntouched = 0;
		if (armed > 0)
			fz_arm_crash(&st->fp, armed);
		structural = run_op(st, op, &in);
		if (armed > 0)
		{
			bool		mid = st->fp.frozen;

			fz_trace("  power failure %s", mid ? "inside the operation" : "after it");
			restart(st, true, true, !mid);
			if (mid)
				resolve_uncertain(st);
			else
				st->nuncertain = 0;
			structural = true;
		}
		verify(st, op_names[op], structural || in.n == 0);
	}

	/* at the end, a power failure: everything must have been persisted */
	fz_trace("final power failure");
	restart(st, true, true, true);
	verify(st, "final power failure", true);

	fz_pool_free(&st->fp);
	free(st->model);
	free(st->uncertain);
	free(st->tags);
	free(st);
	return 0;
}
