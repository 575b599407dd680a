/*-------------------------------------------------------------------------
 *
 * pmhashstats.c
 *	  Statistics of pmhash indexes: persist traffic, the media model, and
 *	  the SQL functions that report them.
 *
 * Every flush and fence of a pool goes through the core's choke point,
 * which calls pmhash_stats_flush_hook.  The hook counts, per index and for
 * the whole cluster, the 64 B lines flushed, the 256 B media lines flushed
 * whole or in part, and the fences; and it feeds the flushed lines to one
 * cluster-wide model of the device's write-combining buffer (pmh_media.c),
 * which turns them into media bytes written and read.  User bytes are 16
 * per entry written to the backup log or by CREATE INDEX.  Write
 * amplification is media bytes written / user bytes.
 *
 * Counters live in a fixed array in the main shared memory segment, one
 * slot per index storage (plus the cluster total); a slot carries a 16-bit
 * tag so that traffic the model attributes to a dropped index's lines is
 * not charged to the next index in the same slot.
 *
 * SQL functions: pmhash_stats(index), one row on an index (entries, pool
 * file, sizes, fill, depth, segments, backup-log use, persist traffic);
 * pmhash_load_progress(index), how much of an index's shared state is
 * rebuilt since the restart; pmhash_media_stats() and pmhash_reset_stats(),
 * the cluster's counters.  pmhash_check(index) is in pmhashcheck.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "pmh_media.h"
#include "pmhash.h"

typedef struct PmhashCounters
{
	pg_atomic_uint32 tag;		/* 0: free slot */
	pg_atomic_uint64 user_bytes;
	pg_atomic_uint64 flushes;	/* 64 B lines */
	pg_atomic_uint64 lines_whole;
	pg_atomic_uint64 lines_partial;
	pg_atomic_uint64 fences;
	pg_atomic_uint64 media_written;
	pg_atomic_uint64 media_read;
	pg_atomic_uint64 syncs;		/* msync / fdatasync calls */
	pg_atomic_uint64 sync_bytes;	/* bytes they covered */
	pg_atomic_uint64 lookups;	/* hashes looked up by scans */
	pg_atomic_uint64 lookups_locked;	/* of them, under the index lock */
} PmhashCounters;

typedef struct PmhashStatsShared
{
	LWLock		lock;			/* the media model */
	uint32		next_tag;		/* under lock */
	TimestampTz reset_time;		/* under lock */
	PmhashCounters total;
	PmhMediaModel model;
	PmhashCounters slots[FLEXIBLE_ARRAY_MEMBER];	/* pmhash_max_indexes */
} PmhashStatsShared;

static PmhashStatsShared *pmhash_statsblk = NULL;

int			pmhash_media_buffer_lines = PMH_MEDIA_DEFAULT_LINES;
bool		pmhash_track_media_reads = false;

/* shared memory for the counters and the model */
Size
pmhash_stats_shmem_size(void)
{
	return add_size(offsetof(PmhashStatsShared, slots),
					mul_size(sizeof(PmhashCounters), pmhash_max_indexes));
}

/* zero a counter block (the tag is left alone) */
static void
pmhash_counters_zero(PmhashCounters *c)
{
	pg_atomic_write_u64(&c->user_bytes, 0);
	pg_atomic_write_u64(&c->flushes, 0);
	pg_atomic_write_u64(&c->lines_whole, 0);
	pg_atomic_write_u64(&c->lines_partial, 0);
	pg_atomic_write_u64(&c->fences, 0);
	pg_atomic_write_u64(&c->media_written, 0);
	pg_atomic_write_u64(&c->media_read, 0);
	pg_atomic_write_u64(&c->syncs, 0);
	pg_atomic_write_u64(&c->sync_bytes, 0);
	pg_atomic_write_u64(&c->lookups, 0);
	pg_atomic_write_u64(&c->lookups_locked, 0);
}

/* initialise a counter block */
static void
pmhash_counters_init(PmhashCounters *c)
{
	pg_atomic_init_u32(&c->tag, 0);
	pg_atomic_init_u64(&c->user_bytes, 0);
	pg_atomic_init_u64(&c->flushes, 0);
	pg_atomic_init_u64(&c->lines_whole, 0);
	pg_atomic_init_u64(&c->lines_partial, 0);
	pg_atomic_init_u64(&c->fences, 0);
	pg_atomic_init_u64(&c->media_written, 0);
	pg_atomic_init_u64(&c->media_read, 0);
	pg_atomic_init_u64(&c->syncs, 0);
	pg_atomic_init_u64(&c->sync_bytes, 0);
	pg_atomic_init_u64(&c->lookups, 0);
	pg_atomic_init_u64(&c->lookups_locked, 0);
}

/* set up the shared block (shmem_startup_hook, AddinShmemInitLock held) */
void
pmhash_stats_shmem_init(void)
{
	bool		found;
	int			i;

	pmhash_statsblk = ShmemInitStruct("pmhash statistics",
								   pmhash_stats_shmem_size(), &found);
	if (found)
		return;
	LWLockInitialize(&pmhash_statsblk->lock, LWLockNewTrancheId());
	pmhash_statsblk->next_tag = 1;
	pmhash_statsblk->reset_time = GetCurrentTimestamp();
	pmhash_counters_init(&pmhash_statsblk->total);
	for (i = 0; i < pmhash_max_indexes; i++)
		pmhash_counters_init(&pmhash_statsblk->slots[i]);
	pmh_media_init(&pmhash_statsblk->model, Max(pmhash_media_buffer_lines, 1));
}

/*
 * Take a free counter slot for a new index storage (called with the
 * pmhash hash-table lock exclusive; there are as many slots as entries).
 */
int
pmhash_stats_slot_acquire(void)
{
	int			i;

	for (i = 0; i < pmhash_max_indexes; i++)
	{
		PmhashCounters *c = &pmhash_statsblk->slots[i];

		if (pg_atomic_read_u32(&c->tag) == 0)
		{
			uint32		tag;

			LWLockAcquire(&pmhash_statsblk->lock, LW_EXCLUSIVE);
			tag = pmhash_statsblk->next_tag;
			pmhash_statsblk->next_tag = tag % 0xffff + 1;
			LWLockRelease(&pmhash_statsblk->lock);
			pmhash_counters_zero(c);
			pg_atomic_write_u32(&c->tag, tag);
			return i;
		}
	}
	elog(ERROR, "no free pmhash counter slot");
	return -1;					/* keep compiler quiet */
}

/* name the model's lock in this backend */
void
pmhash_stats_backend_init(void)
{
	LWLockRegisterTranche(pmhash_statsblk->lock.tranche, "pmhash_media");
}

/* free the counter slot of a dropped index storage */
void
pmhash_stats_slot_release(int slot)
{
	if (slot >= 0 && slot < pmhash_max_indexes)
		pg_atomic_write_u32(&pmhash_statsblk->slots[slot].tag, 0);
}

/* owner value the model keeps for the lines of a slot */
static inline uint32
pmhash_owner(int slot, uint32 tag)
{
	return (tag << 16) | (uint32) slot;
}

/* the model charges media traffic to the owner of a line */
static void
pmhash_stats_charge(void *arg, uint32 owner, uint64 written, uint64 read)
{
	int			slot = (int) (owner & 0xffff);

	pg_atomic_fetch_add_u64(&pmhash_statsblk->total.media_written, written);
	pg_atomic_fetch_add_u64(&pmhash_statsblk->total.media_read, read);
	if (slot < pmhash_max_indexes &&
		pg_atomic_read_u32(&pmhash_statsblk->slots[slot].tag) == owner >> 16)
	{
		pg_atomic_fetch_add_u64(&pmhash_statsblk->slots[slot].media_written, written);
		pg_atomic_fetch_add_u64(&pmhash_statsblk->slots[slot].media_read, read);
	}
}

/* the counters of a mapping's index, if its slot still belongs to it */
static PmhashCounters *
pmhash_local_counters(PmhashLocal *local)
{
	PmhashCounters *c;

	if (local->stats_slot < 0)
		return NULL;
	c = &pmhash_statsblk->slots[local->stats_slot];
	if (pg_atomic_read_u32(&c->tag) != local->stats_tag)
		return NULL;
	return c;
}

/* make the model's size follow pmhash.media_buffer_lines (lock held) */
static void
pmhash_model_resize(void)
{
	if (pmhash_statsblk->model.nlines == pmhash_media_buffer_lines)
		return;
	pmh_media_drain(&pmhash_statsblk->model, pmhash_stats_charge, NULL);
	pmh_media_init(&pmhash_statsblk->model, pmhash_media_buffer_lines);
}

/* mappings whose counts are not published yet, linked through next_dirty */
static PmhashLocal *pmhash_stats_dirty = NULL;

/* publish once this many 64 B lines have gathered, even mid-transaction */
#define PMHASH_STATS_PUBLISH_FLUSHES	8192

/*
 * Publish lookup counts at a transaction's end only once this many have
 * gathered (or when the counters are read, and at exit): a read-only
 * transaction would otherwise write the index's shared counters, one
 * cache line for every reader, at every end
 */
#define PMHASH_STATS_PUBLISH_LOOKUPS	8192

/* count in a mapping's pending traffic from now on */
static inline PmhashStatsPending *
pmhash_stats_pending(PmhashLocal *local)
{
	PmhashStatsPending *p = &local->stats_pending;

	if (!p->dirty)
	{
		p->dirty = true;
		p->next_dirty = pmhash_stats_dirty;
		pmhash_stats_dirty = local;
	}
	return p;
}

/*
 * Add a mapping's pending counts to the shared counters; its lookup counts
 * only when forced or when many have gathered
 */
static void
pmhash_stats_publish(PmhashLocal *local, bool force)
{
	PmhashStatsPending *p = &local->stats_pending;
	PmhashCounters *counters[2] = {&pmhash_statsblk->total,
	pmhash_local_counters(local)};
	uint64		syncs = local->pool.stats.syncs;
	uint64		sync_bytes = local->pool.stats.sync_bytes;
	bool		lookups = p->lookups > 0 &&
		(force || p->lookups >= PMHASH_STATS_PUBLISH_LOOKUPS);
	int			i;

	/* the mapping counts syncs itself: take what is new since last time */
	if (syncs < p->syncs_seen || sync_bytes < p->sync_bytes_seen)
		p->syncs_seen = p->sync_bytes_seen = 0;
	syncs -= p->syncs_seen;
	sync_bytes -= p->sync_bytes_seen;
	p->syncs_seen += syncs;
	p->sync_bytes_seen += sync_bytes;

	for (i = 0; i < lengthof(counters); i++)
	{
		PmhashCounters *c = counters[i];

		if (c == NULL)
			continue;
		if (p->user_bytes > 0)
			pg_atomic_fetch_add_u64(&c->user_bytes, p->user_bytes);
		if (p->flushes > 0)
		{
			pg_atomic_fetch_add_u64(&c->flushes, p->flushes);
			pg_atomic_fetch_add_u64(&c->lines_whole, p->lines_whole);
			pg_atomic_fetch_add_u64(&c->lines_partial, p->lines_partial);
		}
		if (p->fences > 0)
			pg_atomic_fetch_add_u64(&c->fences, p->fences);
		if (syncs > 0)
		{
			pg_atomic_fetch_add_u64(&c->syncs, syncs);
			pg_atomic_fetch_add_u64(&c->sync_bytes, sync_bytes);
		}
		if (lookups)
		{
			pg_atomic_fetch_add_u64(&c->lookups, p->lookups);
			pg_atomic_fetch_add_u64(&c->lookups_locked, p->lookups_locked);
		}
	}
	p->user_bytes = p->flushes = p->lines_whole = p->lines_partial = 0;
	p->fences = 0;
	if (lookups)
		p->lookups = p->lookups_locked = 0;
}

/*
 * Feed the ranges flushed since they were last fed to the media model.
 * Without wait, only if the model's lock is free at once: under
 * contention (inserts that flush every row, into unique or exclusion
 * indexes, from several backends) the ranges wait for a later fence, at
 * most PMHASH_STATS_RANGES of them, rather than every fence waiting for
 * the lock.  The model then sees them a little later, as if the backends'
 * writes had interleaved a little differently.
 */
static void
pmhash_stats_feed_model(PmhashLocal *local, bool wait)
{
	PmhashStatsPending *p = &local->stats_pending;

	if (p->nranges > 0 && pmhash_media_buffer_lines > 0)
	{
		uint32		owner = pmhash_owner(local->stats_slot, local->stats_tag);
		int			i;

		if (!wait)
		{
			if (!LWLockConditionalAcquire(&pmhash_statsblk->lock, LW_EXCLUSIVE))
				return;
		}
		else
			LWLockAcquire(&pmhash_statsblk->lock, LW_EXCLUSIVE);
		pmhash_model_resize();
		for (i = 0; i < p->nranges; i++)
			pmh_media_write(&pmhash_statsblk->model, local->stats_pool,
							p->ranges[i].offset, p->ranges[i].len, owner,
							pmhash_stats_charge, NULL);
		LWLockRelease(&pmhash_statsblk->lock);
	}
	p->nranges = 0;
}

/* feed a mapping's collected ranges to the model and publish its counts */
static void
pmhash_stats_settle(PmhashLocal *local, bool force)
{
	pmhash_stats_feed_model(local, true);
	pmhash_stats_publish(local, force);
}

/*
 * Publish the pending counts of every mapping of this backend: at
 * transaction end, and (force: lookup counts too, however few) before this
 * backend reads the counters and at its exit.
 */
void
pmhash_stats_publish_all(bool force)
{
	PmhashLocal *kept = NULL;

	while (pmhash_stats_dirty != NULL)
	{
		PmhashLocal *local = pmhash_stats_dirty;

		pmhash_stats_dirty = local->stats_pending.next_dirty;
		local->stats_pending.next_dirty = NULL;
		pmhash_stats_settle(local, force);
		/* lookup counts left for later keep the mapping on the list */
		if (local->stats_pending.lookups > 0)
		{
			local->stats_pending.next_dirty = kept;
			kept = local;
		}
		else
			local->stats_pending.dirty = false;
	}
	pmhash_stats_dirty = kept;
}

/*
 * The choke point's hook: a flushed range (len > 0) or a fence (len 0).
 * Ranges are collected in the mapping, and the fence that follows them
 * feeds them to the model under one acquisition of its lock (or a later
 * fence, when the lock is busy: pmhash_stats_feed_model).  The flushes
 * of one batch are issued back to back, so feeding them together changes
 * nothing the model can tell: other backends' flushes fall between
 * batches either way.
 */
static void
pmhash_stats_flush_hook(void *arg, uint64 offset, size_t len)
{
	PmhashLocal *local = (PmhashLocal *) arg;
	PmhashStatsPending *p = pmhash_stats_pending(local);
	uint64		l;

	if (len == 0)
	{
		p->fences++;
		pmhash_stats_feed_model(local, false);
		if (p->flushes >= PMHASH_STATS_PUBLISH_FLUSHES)
			pmhash_stats_publish(local, false);
		return;
	}

	for (l = offset / PMH_LINE_BYTES; l * PMH_LINE_BYTES < offset + len; l++)
	{
		if (l * PMH_LINE_BYTES >= offset &&
			(l + 1) * PMH_LINE_BYTES <= offset + len)
			p->lines_whole++;
		else
			p->lines_partial++;
	}
	p->flushes += len / PMH_CACHELINE_BYTES;

	if (pmhash_media_buffer_lines > 0)
	{
		if (p->nranges == PMHASH_STATS_RANGES)
			pmhash_stats_feed_model(local, true);
		p->ranges[p->nranges].offset = offset;
		p->ranges[p->nranges].len = len;
		p->nranges++;
	}
}

/* statistics mode: a probe read an entry of the pool */
static void
pmhash_stats_read_hook(void *arg, uint64 offset, size_t len)
{
	PmhashLocal *local = (PmhashLocal *) arg;

	if (pmhash_media_buffer_lines <= 0 || !pmhash_track_media_reads)
		return;
	LWLockAcquire(&pmhash_statsblk->lock, LW_EXCLUSIVE);
	pmhash_model_resize();
	pmh_media_read(&pmhash_statsblk->model, local->stats_pool,
				   offset, len,
				   pmhash_owner(local->stats_slot, local->stats_tag),
				   pmhash_stats_charge, NULL);
	LWLockRelease(&pmhash_statsblk->lock);
}

/* route a mapping's flushes to the counters of its index */
void
pmhash_stats_attach_pool(PmhashLocal *local, const PmhashShared *shared)
{
	int			slot = shared->stats_slot;

	/* what was collected belongs to the counters and pool it came from */
	if (local->pool.flush_hook != NULL)
		pmhash_stats_settle(local, true);
	local->stats_slot = slot;
	local->stats_pool = shared->pool_id;
	local->stats_tag = slot >= 0 ?
		pg_atomic_read_u32(&pmhash_statsblk->slots[slot].tag) : 0;
	local->pool.flush_hook = pmhash_stats_flush_hook;
	local->pool.read_hook = pmhash_track_media_reads ?
		pmhash_stats_read_hook : NULL;
	local->pool.flush_hook_arg = local;
}

/*
 * Entries written to PMem through a mapping, by an insert (to the backup
 * log) or a build: 16 user bytes each, published with its persist traffic.
 */
void
pmhash_stats_add_user_bytes(PmhashLocal *local, uint64 bytes)
{
	pmhash_stats_pending(local)->user_bytes += bytes;
}

/* a pool file was deleted: its lines leave the model uncharged */
void
pmhash_stats_forget_pool(uint64 pool_id)
{
	if (pmhash_statsblk == NULL)
		return;
	LWLockAcquire(&pmhash_statsblk->lock, LW_EXCLUSIVE);
	pmh_media_forget_pool(&pmhash_statsblk->model, pool_id);
	LWLockRelease(&pmhash_statsblk->lock);
}

/* write amplification, or NULL when nothing was written by users */
static Datum
pmhash_wa_datum(uint64 media, uint64 user, bool *isnull)
{
	*isnull = (user == 0);
	return Float8GetDatum(user == 0 ? 0.0 : (double) media / (double) user);
}

/*
 * Count n hashes that a scan looked up in a mapping's index, with the index
 * lock or without it (pmhashread.c); published with the traffic counts.
 */
void
pmhash_count_lookups(PmhashLocal *local, int n, bool locked)
{
	PmhashStatsPending *p = pmhash_stats_pending(local);

	p->lookups += n;
	if (locked)
		p->lookups_locked += n;
}

/*
 * Fill values[0..PMHASH_STATS_INDEX_COLS-1] for pmhash_stats(): user_bytes,
 * media_bytes_written, media_bytes_read, flushes, fences, lines_whole,
 * lines_partial, write_amplification (never NULL here: 0 when no user
 * bytes).  Media bytes include what the model still holds dirty.
 */
void
pmhash_stats_index_values(int slot, Datum *values)
{
	PmhashCounters *c = &pmhash_statsblk->slots[slot];
	uint64		pend_w = 0;
	uint64		pend_r = 0;
	uint64		user;
	uint64		written;
	bool		isnull;

	/* this backend's own traffic counts already */
	pmhash_stats_publish_all(true);
	user = pg_atomic_read_u64(&c->user_bytes);

	LWLockAcquire(&pmhash_statsblk->lock, LW_SHARED);
	pmh_media_pending(&pmhash_statsblk->model,
					  pmhash_owner(slot, pg_atomic_read_u32(&c->tag)),
					  &pend_w, &pend_r);
	LWLockRelease(&pmhash_statsblk->lock);
	written = pg_atomic_read_u64(&c->media_written) + pend_w;

	values[0] = Int64GetDatum((int64) user);
	values[1] = Int64GetDatum((int64) written);
	values[2] = Int64GetDatum((int64) (pg_atomic_read_u64(&c->media_read) + pend_r));
	values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&c->flushes));
	values[4] = Int64GetDatum((int64) pg_atomic_read_u64(&c->fences));
	values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&c->lines_whole));
	values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&c->lines_partial));
	values[7] = pmhash_wa_datum(written, user, &isnull);
	values[8] = Int64GetDatum((int64) pg_atomic_read_u64(&c->syncs));
	values[9] = Int64GetDatum((int64) pg_atomic_read_u64(&c->sync_bytes));
}

/* the lookup counts of pmhash_stats(), from the counters of a slot */
static void
pmhash_stats_lookup_values(int slot, Datum *values)
{
	PmhashCounters *c = &pmhash_statsblk->slots[slot];

	values[0] = Int64GetDatum((int64) pg_atomic_read_u64(&c->lookups));
	values[1] = Int64GetDatum((int64) pg_atomic_read_u64(&c->lookups_locked));
}

/*
 * Count syncs made outside any mapping (a write-back pass) to the index
 * storage's counters and the cluster's.
 */
void
pmhash_stats_add_syncs(const PmhashKey *key, uint64 syncs, uint64 bytes)
{
	PmhashShared *shared;
	int			slot = -1;

	if (pmhash_statsblk == NULL || syncs == 0)
		return;
	shared = pmhash_shared_entry_if_any(key);
	if (shared != NULL)
		slot = shared->stats_slot;
	pg_atomic_fetch_add_u64(&pmhash_statsblk->total.syncs, syncs);
	pg_atomic_fetch_add_u64(&pmhash_statsblk->total.sync_bytes, bytes);
	if (slot >= 0)
	{
		pg_atomic_fetch_add_u64(&pmhash_statsblk->slots[slot].syncs, syncs);
		pg_atomic_fetch_add_u64(&pmhash_statsblk->slots[slot].sync_bytes, bytes);
	}
}

/*
 * A number that changes whenever the index storage with this counter slot
 * persists anything (once published): the fences counted.  The write-back
 * launcher calls a pool idle while it stays the same.
 */
uint64
pmhash_stats_activity(int slot)
{
	if (pmhash_statsblk == NULL || slot < 0)
		return 0;
	return pg_atomic_read_u64(&pmhash_statsblk->slots[slot].fences);
}

/* may the current user read cluster-wide pmhash statistics? */
static void
pmhash_stats_check_privilege(void)
{
	if (!has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for pmhash media statistics"),
				 errdetail("Only roles with privileges of pg_read_all_stats may read them."),
				 errhint("GRANT pg_read_all_stats (or pg_monitor) to the role.")));
}

/*
 * pmhash_media_stats(): the cluster-wide counters, one row.  Media bytes
 * include what the model still holds dirty (as if drained now).
 */
PG_FUNCTION_INFO_V1(pmhash_media_stats);
Datum
pmhash_media_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[13];
	bool		nulls[13];
	PmhashCounters *t;
	uint64		pend_w = 0;
	uint64		pend_r = 0;
	uint64		user;
	uint64		written;
	int			nlines;
	TimestampTz reset;

	pmhash_require_preload();
	pmhash_stats_check_privilege();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	pmhash_stats_publish_all(true);
	t = &pmhash_statsblk->total;
	LWLockAcquire(&pmhash_statsblk->lock, LW_SHARED);
	pmh_media_pending(&pmhash_statsblk->model, PMH_MEDIA_ANY_OWNER,
					  &pend_w, &pend_r);
	nlines = pmhash_media_buffer_lines > 0 ? pmhash_statsblk->model.nlines : 0;
	reset = pmhash_statsblk->reset_time;
	LWLockRelease(&pmhash_statsblk->lock);

	user = pg_atomic_read_u64(&t->user_bytes);
	written = pg_atomic_read_u64(&t->media_written) + pend_w;
	memset(nulls, 0, sizeof(nulls));
	values[0] = Int64GetDatum((int64) user);
	values[1] = Int64GetDatum((int64) written);
	values[2] = Int64GetDatum((int64) (pg_atomic_read_u64(&t->media_read) + pend_r));
	values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&t->flushes));
	values[4] = Int64GetDatum((int64) pg_atomic_read_u64(&t->fences));
	values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&t->lines_whole));
	values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&t->lines_partial));
	values[7] = pmhash_wa_datum(written, user, &nulls[7]);
	values[8] = Int32GetDatum(nlines);
	values[9] = BoolGetDatum(pmhash_track_media_reads);
	values[10] = TimestampTzGetDatum(reset);
	values[11] = Int64GetDatum((int64) pg_atomic_read_u64(&t->syncs));
	values[12] = Int64GetDatum((int64) pg_atomic_read_u64(&t->sync_bytes));
	/* the 0.4 definition of the function has no sync columns */
	if (tupdesc->natts != 11 && tupdesc->natts != lengthof(values))
		elog(ERROR, "pmhash_media_stats returns %d columns, expected %d",
			 tupdesc->natts, (int) lengthof(values));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * pmhash_reset_stats(): zero every counter (cluster and per index) and
 * empty the model without charging what it held.  EXECUTE is revoked from
 * PUBLIC in the extension script, as for pg_stat_reset().
 */
PG_FUNCTION_INFO_V1(pmhash_reset_stats);
Datum
pmhash_reset_stats(PG_FUNCTION_ARGS)
{
	int			i;

	pmhash_require_preload();
	/* what this backend did before the reset is cleared with the rest */
	pmhash_stats_publish_all(true);
	LWLockAcquire(&pmhash_statsblk->lock, LW_EXCLUSIVE);
	pmh_media_init(&pmhash_statsblk->model, Max(pmhash_media_buffer_lines, 1));
	pmhash_counters_zero(&pmhash_statsblk->total);
	for (i = 0; i < pmhash_max_indexes; i++)
		pmhash_counters_zero(&pmhash_statsblk->slots[i]);
	pmhash_statsblk->reset_time = GetCurrentTimestamp();
	LWLockRelease(&pmhash_statsblk->lock);
	PG_RETURN_VOID();
}

/*
 * Open an index for one of these functions: it must be a pmhash index, and
 * the caller its owner or have the privileges of the predefined role
 * "role" (pg_read_all_stats for the statistics, pg_monitor for the check,
 * which locks the index exclusively while it reads the whole pool);
 * superusers have both.
 */
Relation
pmhash_open_index(Oid relid, Oid role)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	Oid			amoid = get_index_am_oid("pmhash", true);

	if (rel->rd_rel->relkind != RELKIND_INDEX ||
		!OidIsValid(amoid) || rel->rd_rel->relam != amoid)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a pmhash index",
						RelationGetRelationName(rel))));
	if (!rel->rd_index->indislive)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmhash index \"%s\" is being dropped",
						RelationGetRelationName(rel))));
	if (!pg_class_ownercheck(relid, GetUserId()) &&
		!has_privs_of_role(GetUserId(), role))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for pmhash index \"%s\"",
						RelationGetRelationName(rel)),
				 errdetail("Only the index owner and roles with privileges of %s may inspect a pmhash index.",
						   role == ROLE_PG_MONITOR ? "pg_monitor" : "pg_read_all_stats")));
	return rel;
}

/*
 * pmhash_load_progress(regclass): how much of the index's shared state is
 * rebuilt since the last restart -- primary segments, how many of them are
 * loaded, and how many backup-log entries wait for their segment's load.
 * Attaching loads the directory if nothing else has; no segment is loaded.
 */
PG_FUNCTION_INFO_V1(pmhash_load_progress);
Datum
pmhash_load_progress(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Relation	rel;
	PmhashIndex idx;
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3];
	uint64		unloaded;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	rel = pmhash_open_index(relid, ROLE_PG_READ_ALL_STATS);
	pmhash_attach(rel, LW_SHARED, &idx);
	unloaded = pg_atomic_read_u64(&idx.shared->unloaded);
	memset(nulls, 0, sizeof(nulls));
	values[0] = Int64GetDatum((int64) idx.shared->primaries);
	values[1] = Int64GetDatum((int64) (idx.shared->primaries - unloaded));
	LWLockAcquire(&idx.shared->loglock, LW_SHARED);
	values[2] = Int64GetDatum((int64) idx.shared->log_unverified);
	LWLockRelease(&idx.shared->loglock);
	pmhash_detach(&idx);
	relation_close(rel, AccessShareLock);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* pmhash_stats(regclass): one row describing the index */
PG_FUNCTION_INFO_V1(pmhash_stats);
Datum
pmhash_stats(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Relation	rel;
	PmhashIndex idx;
	TupleDesc	tupdesc;
	Datum		values[12 + PMHASH_STATS_INDEX_COLS];
	bool		nulls[12 + PMHASH_STATS_INDEX_COLS];
	char		path[MAXPGPATH];
	char	   *abspath;
	uint64		entries;
	uint64		used;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	rel = pmhash_open_index(relid, ROLE_PG_READ_ALL_STATS);
	pmhash_attach(rel, LW_SHARED, &idx);
	/* the counts are of loaded segments: load the rest */
	pmhash_load_all(&idx, true);

	entries = pg_atomic_read_u64(&idx.shared->entries);
	used = idx.shared->primaries + idx.shared->overflows;
	pmhash_pool_path(&idx.shared->key, path, sizeof(path));
	abspath = make_absolute_path(path);

	memset(nulls, 0, sizeof(nulls));
	values[0] = Int64GetDatum((int64) entries);
	values[1] = CStringGetTextDatum(abspath);
	values[2] = Int64GetDatum((int64) pmh_pool_bytes(idx.shared->nsegments));
	values[3] = Int64GetDatum((int64) (idx.shared->shmem_bytes +
									   sizeof(PmhashShared)));
	values[4] = Float8GetDatum(used == 0 ? 0.0 :
							   (double) entries / ((double) used * PMH_SEG_SLOTS));
	values[5] = Int32GetDatum(idx.shared->global_depth);
	values[6] = Int64GetDatum((int64) used);
	values[7] = Int64GetDatum((int64) idx.shared->log.pending);
	values[8] = Int32GetDatum(pmhash_log_lines_in_use(&idx));
	pmhash_stats_index_values(idx.shared->stats_slot, &values[9]);
	nulls[9 + 7] = DatumGetInt64(values[9]) == 0;	/* no user bytes, no ratio */
	values[9 + PMHASH_STATS_INDEX_COLS] = BoolGetDatum(idx.shared->wb_marked);
	pmhash_stats_lookup_values(idx.shared->stats_slot,
							   &values[10 + PMHASH_STATS_INDEX_COLS]);
	/*
	 * The 0.4 definition of the function ends at write_amplification, the
	 * 0.5 one at writeback_pending
	 */
	if (tupdesc->natts != 9 + 8 &&
		tupdesc->natts != 10 + PMHASH_STATS_INDEX_COLS &&
		tupdesc->natts != lengthof(values))
		elog(ERROR, "pmhash_stats returns %d columns, expected %d",
			 tupdesc->natts, (int) lengthof(values));

	pmhash_detach(&idx);
	relation_close(rel, AccessShareLock);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
