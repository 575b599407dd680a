/*-------------------------------------------------------------------------
 *
 * test_crashsim.c
 *	  The persist-point crash simulator: runs a workload of the core the way
 *	  the server drives it (backup-log writes, D-buckets and relocation,
 *	  splits and overflow chains, pool growth, backup-log reuse and growth,
 *	  VACUUM) and, at every persist point, "crashes": it restarts from an
 *	  image of what had reached the media, recovers it and checks it.
 *
 * The media image is a shadow copy of the pool kept through the choke
 * point's flush hook (PmhPool.flush_hook hears every flushed range, rounded
 * out to 64 B lines, and every fence): a flushed range is copied from the
 * mapping when it is flushed and applied to the shadow at the next fence.
 * Nothing else reaches the shadow, so a store that was never flushed, or
 * flushed and never fenced, is lost in the crash.  Growing the pool file
 * extends the shadow with zeros (the file's new space).
 *
 * At each persist point (a fence) the simulator checks two images:
 *	- clean: the shadow right after the fence;
 *	- torn: the shadow right before the fence, with every 8-byte word that
 *	  differs from the mapping taken from the mapping or not at random: any
 *	  subset of the flushed-but-not-fenced and of the never-flushed stores
 *	  may have reached the media (an eviction can write back any dirty
 *	  cache line at any time).  Taking words independently is harsher than
 *	  real hardware, where a cache line reaches the media as a prefix of the
 *	  stores made to it.
 * Each image is written to a pool file, recovered (pmh_recover, then the
 * backup log as the server's pmhash_log_recover does), every pending entry
 * relocated, and then compared with the workload's record of every entry
 * it ever made:
 *	- an entry whose backup-log write had returned, and whose deletion had
 *	  not started, is found exactly once (by walking the recovered metadata,
 *	  and by pmh_lookup for a sample);
 *	- an entry whose deletion had finished, or that was never written, is
 *	  not found;
 *	- an entry being written or deleted at the crash is found at most once;
 *	- nothing else is found.  Only in a torn image may an entry pair a TID
 *	  the workload made with a stale hash whose low byte matches (a new tag
 *	  that reached the media without its hash): recheck rejects it in the
 *	  server; the simulator counts these.
 * Every 8th point it also crashes recovery itself: the image recovery
 * leaves on the media (again through a shadow) must recover to the same
 * entries.
 *
 * The workload runs the core's write-path protocol (src/core/
 * pmh_writepath.c, through test/unit/tlog.c): the same code that decides,
 * in the server, which backup-log line a backend owns, which log slots are
 * pending, when a line is reused and what VACUUM clears; only VACUUM's
 * judgement of which entries are dead is the simulator's own.  To make backup-log reuse and growth frequent, the
 * workload uses only SIM_FIXED_LINES lines of the fixed log, then adds
 * log segments, and when those are used up too, relocates every D-bucket
 * (as the server does when its log may not grow).
 *
 * Usage: test_crashsim [--ops=N] [--seeds=N] [--every=K]
 *	--ops    transactions and VACUUMs per workload (default 400)
 *	--seeds  workloads with different random seeds (default 2)
 *	--every  check every K-th persist point (default 1: all of them)
 * PMH_TEST_SEED sets the first seed.  Output: "ok N - name" lines and a
 * last line "N passed, N failed".  The documented long run is
 *	test/unit/test_crashsim --ops=2000 --seeds=20
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_core.h"
#include "tpool.h"
#include "unit_check.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* lines of the fixed backup log the workload uses; then log segments */
#define SIM_FIXED_LINES		4
#define SIM_MAX_EXTS		2

/* entries per transaction: 1 .. SIM_TXN_MAX (more than a line) */
#define SIM_TXN_MAX			24

/* every entry's TID is (id / SIM_TID_PER_BLOCK, id % SIM_TID_PER_BLOCK + 1) */
#define SIM_TID_PER_BLOCK	100

/* pmh_lookup checks per image (live entries, then deleted ones) */
#define SIM_LOOKUPS			24

/* what the workload has done with an entry */
typedef enum SimState
{
	SIM_NONE = 0,				/* made up, never written */
	SIM_WRITING,				/* its backup-log write is under way */
	SIM_LIVE,					/* persistent: must survive any crash */
	SIM_DELETING,				/* its deletion is under way */
	SIM_DELETED					/* deleted: must never come back */
} SimState;

typedef struct SimEntry
{
	uint64		hash;
	uint8		state;			/* SimState */
	bool		doomed;			/* the running VACUUM deletes it */
} SimEntry;

/* a flushed range waiting for the next fence, with the bytes it flushed */
typedef struct PendRange
{
	uint64		off;
	size_t		len;
	char	   *data;
} PendRange;

/* the media image of one pool: what was flushed and fenced */
typedef struct Shadow
{
	TPool	   *tp;				/* the pool whose flushes it hears */
	char	   *img;
	size_t		len;
	PendRange  *pend;
	int			npend;
	int			cappend;
	uint64		points;			/* fences so far */
	bool		drop_log;		/* mutation: lose every flush of the log */
	void		(*at_fence) (struct Shadow *sh, const char *before);
} Shadow;

/* one workload and its record */
typedef struct Sim
{
	TPool		tp;
	Shadow		sh;
	SimEntry   *e;
	uint32		ne;
	uint32		cape;
	uint64		hot_hash;		/* a key with many rows: overflow chains */
	/* crash checking */
	int			every;
	uint64		checked;
	uint64		franken;		/* torn entries seen (allowed in torn images) */
	uint64		double_crashes;
	uint64		recovered_pending;	/* log entries recovery put back */
	uint64		orphans;		/* half-done splits/overflows recovery undid */
	uint64		lost;			/* live entries a crash image lacked */
	uint64		back;			/* deleted entries a crash image held */
	bool		serial_vacuum;	/* no transactions between VACUUM's segments */
	uint64		vacuum_relocations; /* relocations while a VACUUM ran */
} Sim;

static Sim *g_sim;

/* ---------------------------------------------------------------------
 * The shadow image
 * ---------------------------------------------------------------------
 */

/* extend the shadow with zeros to the pool's current length */
static void
shadow_fit(Shadow *sh)
{
	size_t		len = sh->tp->pool.mapped_len;

	if (len <= sh->len)
		return;
	sh->img = pg_realloc(sh->img, len);
	memset(sh->img + sh->len, 0, len - sh->len);
	sh->len = len;
}

/* PmhPool.flush_hook: remember a flushed range, or apply them at a fence */
static void
shadow_hook(void *arg, uint64 off, size_t len)
{
	Shadow	   *sh = (Shadow *) arg;
	char	   *before = NULL;
	int			i;

	shadow_fit(sh);
	if (len > 0)
	{
		PendRange  *r;

		if (sh->drop_log && off >= PMH_LOG_OFFSET && off < PMH_SEG_OFFSET)
			return;
		if (!CHECKF(off + len <= sh->tp->pool.mapped_len,
					"flush of [%llu, +%zu) past the end of the pool",
					(unsigned long long) off, len))
			return;
		if (sh->npend == sh->cappend)
		{
			sh->cappend = Max(16, sh->cappend * 2);
			sh->pend = pg_realloc(sh->pend, sh->cappend * sizeof(PendRange));
		}
		r = &sh->pend[sh->npend++];
		r->off = off;
		r->len = len;
		r->data = pg_malloc(len);
		memcpy(r->data, sh->tp->pool.base + off, len);
		return;
	}

	sh->points++;
	if (sh->at_fence)
	{
		before = pg_malloc(sh->len);
		memcpy(before, sh->img, sh->len);
	}
	for (i = 0; i < sh->npend; i++)
	{
		memcpy(sh->img + sh->pend[i].off, sh->pend[i].data, sh->pend[i].len);
		free(sh->pend[i].data);
	}
	sh->npend = 0;
	if (sh->at_fence)
	{
		sh->at_fence(sh, before);
		free(before);
	}
}

/* start shadowing a pool whose mapping is all on the media now */
static void
shadow_start(Shadow *sh, TPool *tp)
{
	memset(sh, 0, sizeof(*sh));
	sh->tp = tp;
	shadow_fit(sh);
	memcpy(sh->img, tp->pool.base, sh->len);
	tp->pool.flush_hook = shadow_hook;
	tp->pool.flush_hook_arg = sh;
}

/* stop shadowing and free the image */
static void
shadow_stop(Shadow *sh)
{
	int			i;

	if (sh->tp)
	{
		sh->tp->pool.flush_hook = NULL;
		sh->tp->pool.flush_hook_arg = NULL;
	}
	for (i = 0; i < sh->npend; i++)
		free(sh->pend[i].data);
	free(sh->pend);
	free(sh->img);
	memset(sh, 0, sizeof(*sh));
}

/* ---------------------------------------------------------------------
 * Checking a crash image
 * ---------------------------------------------------------------------
 */

/* the TID of entry id, as one number (see tid_of) */
static uint64
sim_tid(uint32 id)
{
	return tid_of(id / SIM_TID_PER_BLOCK, (uint16) (id % SIM_TID_PER_BLOCK + 1));
}

/* the entry id of a TID, or UINT32_MAX if the workload never made it */
static uint32
sim_id(const Sim *sim, uint64 tag)
{
	uint64		block = pmh_tag_block(tag);
	uint16		offset = pmh_tag_offset(tag);
	uint64		id;

	if (offset == 0 || offset > SIM_TID_PER_BLOCK)
		return UINT32_MAX;
	id = block * SIM_TID_PER_BLOCK + offset - 1;
	return id < sim->ne ? (uint32) id : UINT32_MAX;
}

static const char *const state_names[] = {
	"never written", "being written", "live", "being deleted", "deleted"
};

/*
 * Collect what a recovered pool holds (every live slot of every primary and
 * its chain, by the recovered metadata) into seen[] per entry id, checking
 * each against the record.  Returns false if a check failed.
 */
static bool
collect_entries(Sim *sim, TPool *rec, uint8 *seen, bool torn,
				const char *what)
{
	uint64		s;
	bool		ok = true;

	for (s = 0; s < rec->nseg; s++)
	{
		uint64		owner;
		uint32		c;
		int			steps = 0;

		if (rec->role[s] != T_PRIMARY)
			continue;
		owner = rec->meta[s].word;
		for (c = (uint32) s; c != PMH_NO_SEGMENT && steps++ <= (int) rec->nseg;
			 c = rec->meta[c].ovf_next)
		{
			const PmhEntry *ent = pmh_seg_entries(&rec->pool, c);
			int			b;

			for (b = 0; b < PMH_SEG_BUCKETS; b++)
			{
				uint16		occ = rec->meta[c].occ[b];

				while (occ)
				{
					int			k = __builtin_ctz(occ);
					const PmhEntry *x = &ent[b * PMH_BUCKET_SLOTS + k];
					uint32		id = sim_id(sim, x->tag);

					occ &= occ - 1;
					ok &= CHECKF(pmh_entry_is_live(x, owner),
								 "%s: segment %u slot %d marked occupied, not live",
								 what, c, b * PMH_BUCKET_SLOTS + k);
					if (!CHECKF(id != UINT32_MAX,
								"%s: entry %016llx/%016llx has a TID the workload never made",
								what, (unsigned long long) x->hash,
								(unsigned long long) x->tag))
					{
						ok = false;
						continue;
					}
					if (x->hash != sim->e[id].hash)
					{
						ok &= CHECKF(torn && pmh_fingerprint(x->hash) ==
									 pmh_fingerprint(sim->e[id].hash),
									 "%s: entry %u found with hash %016llx, made with %016llx",
									 what, id, (unsigned long long) x->hash,
									 (unsigned long long) sim->e[id].hash);
						sim->franken++;
						continue;
					}
					if (sim->e[id].state == SIM_NONE ||
						sim->e[id].state == SIM_DELETED)
					{
						sim->back++;
						ok &= CHECKF(false, "%s: entry %u (%s) is back", what,
									 id, state_names[sim->e[id].state]);
					}
					ok &= CHECKF(seen[id] == 0, "%s: entry %u found twice",
								 what, id);
					seen[id]++;
				}
			}
		}
	}
	return ok;
}

/* every live entry was seen once; a sample found by pmh_lookup */
static bool
check_record(Sim *sim, TPool *rec, const uint8 *seen, const char *what)
{
	uint64	   *tags = NULL;
	int			cap = 0;
	uint32		id;
	bool		ok = true;
	int			i;

	for (id = 0; id < sim->ne; id++)
	{
		if (sim->e[id].state != SIM_LIVE || seen[id] == 1)
			continue;
		sim->lost++;
		ok &= CHECKF(false, "%s: live entry %u (hash %016llx) is lost",
					 what, id, (unsigned long long) sim->e[id].hash);
	}

	for (i = 0; i < SIM_LOOKUPS && sim->ne > 0; i++)
	{
		uint32		j = (uint32) (rnd() % sim->ne);
		uint64		want = sim_tid(j);
		int			n;
		int			k;
		int			hits = 0;

		if (sim->e[j].state != SIM_LIVE && sim->e[j].state != SIM_DELETED)
			continue;
		n = tpool_lookup(rec, sim->e[j].hash, &tags, &cap);
		for (k = 0; k < n; k++)
			hits += tid_of_tag(tags[k]) == want;
		ok &= CHECKF(hits == (sim->e[j].state == SIM_LIVE ? 1 : 0),
					 "%s: pmh_lookup finds %s entry %u %d times", what,
					 state_names[sim->e[j].state], j, hits);
	}
	free(tags);
	return ok;
}

/*
 * Recover an image as the server does after a crash and compare it with
 * the record.  With "seen_out", the entry counts are returned (the caller
 * frees them).  With "crash_recovery", recovery runs under a shadow of its
 * own and the image it leaves on the media is recovered and checked too.
 */
static bool
check_image(Sim *sim, const char *bytes, size_t len, bool torn,
			bool crash_recovery, uint8 **seen_out, const char *what)
{
	TPool		rec;
	Shadow		rsh;
	PmhRecoveryResult res;
	uint8	   *seen;
	bool		ok;
	int			ndup;
	int			rc;

	if (!tpool_from_bytes(&rec, bytes, len, "crash"))
		return false;
	/* every other image: free segments zeroed when taken, as the server */
	rec.lazy_free = (sim->checked % 2) == 1;
	memset(&rsh, 0, sizeof(rsh));
	if (crash_recovery)
		shadow_start(&rsh, &rec);
	rc = tpool_recover(&rec, &res, NULL, NULL);
	if (!CHECKF(rc == 0, "%s: recovery failed: %s", what, res.error))
	{
		shadow_stop(&rsh);
		tpool_close(&rec);
		return false;
	}
	sim->orphans += res.orphans_cleared;
	if (crash_recovery)
	{
		uint8	   *seen2 = NULL;
		char		what2[160];

		/* crash right after pmh_recover: what it changed must be on the media */
		shadow_fit(&rsh);
		snprintf(what2, sizeof(what2), "%s, crashed after recovery", what);
		(void) check_image(sim, rsh.img, rsh.len, false, false, &seen2, what2);
		free(seen2);
		sim->double_crashes++;
	}
	shadow_stop(&rsh);
	(void) check_structure(&rec, what);
	sim->recovered_pending += log_recover(&rec);
	(void) tpool_relocate_all(&rec, &ndup);
	(void) check_structure(&rec, what);

	seen = pg_malloc0(Max(sim->ne, 1));
	ok = collect_entries(sim, &rec, seen, torn, what);
	ok &= check_record(sim, &rec, seen, what);
	if (seen_out)
		*seen_out = seen;
	else
		free(seen);
	tpool_close(&rec);
	return ok;
}

/* Shadow.at_fence: check the torn image before and the clean image after */
static void
sim_at_fence(Shadow *sh, const char *before)
{
	Sim		   *sim = g_sim;
	char	   *torn;
	const uint64 *live = (const uint64 *) sh->tp->pool.base;
	uint64	   *t;
	size_t		i;
	char		what[128];

	if (sh->points % (uint64) sim->every != 0 || unit_test_failures > 0)
		return;
	sim->checked++;

	/* torn: any subset of the words not yet fenced reached the media */
	torn = pg_malloc(sh->len);
	memcpy(torn, before, sh->len);
	t = (uint64 *) torn;
	for (i = 0; i < sh->len / sizeof(uint64); i++)
		if (t[i] != live[i] && (rnd() & 1))
			t[i] = live[i];
	snprintf(what, sizeof(what), "persist point %llu, torn",
			 (unsigned long long) sh->points);
	(void) check_image(sim, torn, sh->len, true, false, NULL, what);
	free(torn);

	snprintf(what, sizeof(what), "persist point %llu",
			 (unsigned long long) sh->points);
	(void) check_image(sim, sh->img, sh->len, false, sh->points % 8 == 0,
					   NULL, what);
}

/* ---------------------------------------------------------------------
 * The workload, driven the way the server drives the core
 * ---------------------------------------------------------------------
 */

/* the writer of the workload's pool (the core's protocol, tlog.c) */
static PmhWriter *
sim_writer(Sim *sim)
{
	return tlog_writer(&sim->tp);
}

/*
 * Relocate every D-bucket (the core's pmh_wp_relocate_all), counting the
 * relocations that happen while a VACUUM runs.
 */
static void
sim_relocate_all(Sim *sim)
{
	uint32		before = sim->tp.log.pending;

	CHECKF(pmh_wp_relocate_all(sim_writer(sim)) == PMH_WP_OK,
		   "relocating everything failed");
	if (sim->tp.log.vacuum_active > 0 && sim->tp.log.pending < before)
		sim->vacuum_relocations++;
}

/* a new entry of the record; returns its id */
static uint32
sim_new_entry(Sim *sim, uint64 hash)
{
	if (sim->ne == sim->cape)
	{
		sim->cape = Max(1024, sim->cape * 2);
		sim->e = pg_realloc(sim->e, sim->cape * sizeof(SimEntry));
	}
	sim->e[sim->ne].hash = hash;
	sim->e[sim->ne].state = SIM_NONE;
	sim->e[sim->ne].doomed = false;
	return sim->ne++;
}

/*
 * A committing transaction of n entries: its collecting log is written to
 * the backup log a line's room at a time (pmh_wp_write), each write
 * followed by placing its entries into their D-buckets (pmh_wp_place_written), as
 * the server's flush does.
 */
static void
sim_transaction(Sim *sim, int n)
{
	uint32		ids[SIM_TXN_MAX];
	int			done = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		uint64		h = rnd() % 8 < 3 ? sim->hot_hash : rnd();

		ids[i] = sim_new_entry(sim, h);
	}
	while (done < n && unit_test_failures == 0)
	{
		PmhWriter  *w = sim_writer(sim);
		int			room = *w->own_line >= 0 ? PMH_BUCKET_SLOTS - *w->own_used : 0;
		int			k = Min(n - done, room > 0 ? room : PMH_BUCKET_SLOTS);
		PmhEntry	ents[PMH_BUCKET_SLOTS];
		uint32		line;
		int			first;
		uint32		before = sim->tp.log.pending;

		for (i = 0; i < k; i++)
		{
			SimEntry   *e = &sim->e[ids[done + i]];
			uint64		tid = sim_tid(ids[done + i]);

			ents[i].hash = e->hash;
			ents[i].tag = pmh_tag_make(e->hash, (uint32) (tid >> 16),
									   (uint16) tid);
			e->state = SIM_WRITING;
		}
		if (!CHECKF(pmh_wp_write(w, ents, k, &line, &first) == PMH_WP_OK,
					"writing the backup log failed"))
			return;
		for (i = 0; i < k; i++)
			sim->e[ids[done + i]].state = SIM_LIVE;
		if (!CHECKF(pmh_wp_place_written(w, ents, k, line, first) == PMH_WP_OK,
					"placing the entries failed"))
			return;
		/* a full log may have relocated everything on the way */
		if (sim->tp.log.vacuum_active > 0 && sim->tp.log.pending < before + (uint32) k)
			sim->vacuum_relocations++;
		done += k;
	}
}

/* is the entry of this tag doomed by the running VACUUM? */
static bool
sim_doomed(Sim *sim, uint64 tag)
{
	uint32		id = sim_id(sim, tag);

	return id != UINT32_MAX && sim->e[id].doomed;
}

/* the entries VACUUM takes out of one D-bucket */
typedef struct SimDoomed
{
	Sim		   *sim;
	uint32		ids[PMH_DBUCKET_SLOTS];
	int			n;
} SimDoomed;

/* pmh_wp_vacuum_pending's judge: is the entry doomed?  (being deleted now) */
static bool
sim_dead_pending(uint64 tag, void *arg)
{
	SimDoomed  *d = (SimDoomed *) arg;

	if (!sim_doomed(d->sim, tag))
		return false;
	d->ids[d->n] = sim_id(d->sim, tag);
	d->sim->e[d->ids[d->n++]].state = SIM_DELETING;
	return true;
}

/*
 * VACUUM's pass over primary segment p and its overflow chain
 * (pmhash_vacuum_chain): judge every entry first (the simulator's own
 * judge: is it doomed?), then delete the doomed ones of the whole chain
 * and persist them in one batch, one fence (pmh_delete_chain, as the
 * server does).
 */
static void
sim_vacuum_chain(Sim *sim, uint32 p)
{
	uint16		dead[8][PMH_SEG_BUCKETS];
	int			nsegs = 0;
	int			ndead = 0;
	uint32		c;
	uint32		id;
	int			k;
	int			b;

	for (c = p; c != PMH_NO_SEGMENT; c = sim->tp.meta[c].ovf_next)
	{
		const PmhEntry *ent = pmh_seg_entries(&sim->tp.pool, c);

		if (!CHECKF(nsegs < (int) lengthof(dead), "chain of %u too long", p))
			return;
		for (b = 0; b < PMH_SEG_BUCKETS; b++)
		{
			dead[nsegs][b] = 0;
			for (k = 0; k < PMH_BUCKET_SLOTS; k++)
			{
				uint64		tag = ent[b * PMH_BUCKET_SLOTS + k].tag;

				if ((sim->tp.meta[c].occ[b] & (1 << k)) && sim_doomed(sim, tag))
				{
					dead[nsegs][b] |= (uint16) (1 << k);
					sim->e[sim_id(sim, tag)].state = SIM_DELETING;
					ndead++;
				}
			}
		}
		nsegs++;
	}
	if (ndead == 0)
		return;
	CHECKF(pmh_delete_chain(&sim->tp.pool, &sim->tp.cb, p, &dead[0][0],
							nsegs) == 0, "pmh_delete_chain: %m");
	for (id = 0; id < sim->ne; id++)
		if (sim->e[id].state == SIM_DELETING)
			sim->e[id].state = SIM_DELETED;
}

/*
 * VACUUM (pmhashbulkdelete): doom a random share of the live entries, clear
 * the released backup-log copies and flush the lines zeroed for reuse
 * (pmhash_log_vacuum_begin, which also marks the VACUUM as running), then
 * walk the hash space a primary segment at a time: drop doomed entries
 * from its D-bucket (releasing their log slots with their tags cleared)
 * and from the segment and its chain.  Between two segments other
 * transactions run (the server releases the segment lock there): their
 * relocations, splits and log reuse interleave with the pass, and while
 * it runs relocations clear the log copies they release.
 */
static void
sim_vacuum(Sim *sim, int percent)
{
	uint32		id;
	uint64		pos = 0;
	int			i;

	for (id = 0; id < sim->ne; id++)
		sim->e[id].doomed = sim->e[id].state == SIM_LIVE &&
			(int) (rnd() % 100) < percent;

	CHECKF(pmh_wp_vacuum_begin(sim_writer(sim)) == PMH_WP_OK,
		   "clearing the backup log failed");

	while (unit_test_failures == 0)
	{
		uint32		p = sim->tp.dir[pmh_dir_index(pos, sim->tp.gd)];
		uint64		word = sim->tp.meta[p].word;
		SimDoomed	d;
		uint32		nremoved;
		uint32		nremaining;
		int			depth;

		d.sim = sim;
		d.n = 0;
		CHECKF(pmh_wp_vacuum_pending(sim_writer(sim), p, sim_dead_pending, &d,
									 &nremoved, &nremaining) == PMH_WP_OK &&
			   nremoved == (uint32) d.n,
			   "removing dead entries from the D-bucket of %u failed", p);
		for (i = 0; i < d.n; i++)
			sim->e[d.ids[i]].state = SIM_DELETED;
		sim_vacuum_chain(sim, p);

		/* next range: just past this segment's prefix */
		depth = pmh_segword_depth(word);
		if (depth == 0)
			break;
		pos = (pmh_segword_prefix(word) << (64 - depth)) +
			(UINT64CONST(1) << (64 - depth));
		if (pos == 0)
			break;

		/* others insert meanwhile: 0 to 2 transactions */
		for (i = sim->serial_vacuum ? 0 : (int) (rnd() % 3);
			 i > 0 && unit_test_failures == 0; i--)
			sim_transaction(sim, 1 + (int) (rnd() % SIM_TXN_MAX));
	}
	pmh_wp_vacuum_end(sim_writer(sim));
	for (id = 0; id < sim->ne; id++)
	{
		/* (a failed check stops the pass over the segments early) */
		CHECKF(!sim->e[id].doomed || sim->e[id].state == SIM_DELETED ||
			   unit_test_failures > 0,
			   "VACUUM missed entry %u (%s)", id, state_names[sim->e[id].state]);
		sim->e[id].doomed = false;
	}
}

/* ---------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------
 */

static int	g_ops = 400;
static int	g_every = 1;

/*
 * One workload of "ops" operations, crashed at every persist point (or
 * every --every-th): transactions of 1 .. SIM_TXN_MAX entries, one in eight
 * rows under one hot key, and now and then a VACUUM of 10 % or 50 % of the
 * live entries, with transactions running between its segments.  With
 * drop_log, the shadow loses every flush of the backup log (a missing
 * flush); with keep_zeroed, VACUUM does not flush the lines zeroed for
 * reuse, and runs alone (transactions during the pass write into reused
 * lines, which overwrites their stale copies and hides that bug sooner);
 * with keep_released, relocations during a VACUUM release their log
 * slots without clearing them.  Returns the live entries crash images lacked, and in
 * *back the deleted ones they held.
 */
static uint64
run_workload(int ops, bool drop_log, bool keep_zeroed, bool keep_released,
			 uint64 *back)
{
	uint64		lost;
	Sim		   *sim = pg_malloc0(sizeof(Sim));
	int			op;
	double		t0 = now_seconds();

	g_sim = sim;
	sim->every = g_every;
	sim->hot_hash = rnd();
	if (!tpool_create(&sim->tp, "crashsim", 2))
		goto done;
	sim->tp.faults = (keep_zeroed ? PMH_WP_FAULT_KEEP_ZEROED : 0) |
		(keep_released ? PMH_WP_FAULT_KEEP_RELEASED : 0);
	/*
	 * The unflushed-reuse mutation shows only while a reused line is being
	 * filled: without log segments every line is reused all the time.
	 */
	tlog_setup(&sim->tp, SIM_FIXED_LINES, keep_zeroed ? 0 : SIM_MAX_EXTS);
	shadow_start(&sim->sh, &sim->tp);
	sim->sh.at_fence = sim_at_fence;
	sim->sh.drop_log = drop_log;
	sim->serial_vacuum = keep_zeroed;

	for (op = 0; op < ops && unit_test_failures == 0; op++)
	{
		if (op % 50 == 49)
			sim_vacuum(sim, op == 349 ? 50 : 10);
		else
			sim_transaction(sim, 1 + (int) (rnd() % SIM_TXN_MAX));
	}
	/* and finally everything into the segments */
	if (unit_test_failures == 0)
		sim_relocate_all(sim);

	{
		uint64		nprim;
		uint64		novf;
		uint32		id;
		uint64		live = 0;

		tpool_count(&sim->tp, &nprim, &novf);
		for (id = 0; id < sim->ne; id++)
			live += sim->e[id].state == SIM_LIVE;
		printf("#   %llu persist points, %llu checked (x2: clean and torn), "
			   "%llu crashed recoveries; %u entries made, %llu live; "
			   "%llu primaries, %llu overflow segments, %u log segments, "
			   "%llu splits, %llu relocations during VACUUM; recovery "
			   "re-queued %llu log entries and undid %llu half-done "
			   "splits/overflows; %llu torn entries; %.1f s\n",
			   (unsigned long long) sim->sh.points,
			   (unsigned long long) sim->checked,
			   (unsigned long long) sim->double_crashes, sim->ne,
			   (unsigned long long) live, (unsigned long long) nprim,
			   (unsigned long long) novf, sim->tp.log.nexts,
			   (unsigned long long) sim->tp.splits,
			   (unsigned long long) sim->vacuum_relocations,
			   (unsigned long long) sim->recovered_pending,
			   (unsigned long long) sim->orphans,
			   (unsigned long long) sim->franken, now_seconds() - t0);
		/* the workload must have exercised what it is for */
		CHECKF(drop_log || keep_zeroed || keep_released ||
			   (sim->sh.points > 100 && sim->tp.splits > 0 && novf > 0 &&
				sim->tp.log.nexts > 0 && sim->recovered_pending > 0 &&
				sim->orphans > 0 && sim->vacuum_relocations > 0),
			   "the workload did not reach splits, overflow chains, log "
			   "segments, log recovery, half-done splits and relocations "
			   "during VACUUM");
	}
	shadow_stop(&sim->sh);
done:
	lost = sim->lost;
	if (back)
		*back = sim->back;
	tpool_close(&sim->tp);
	free(sim->e);
	free(sim);
	g_sim = NULL;
	return lost;
}

/* report the running test's result */
static void
report(const char *name, int i)
{
	ntests++;
	if (unit_test_failures == 0)
	{
		npassed++;
		printf("ok %d - %s %d\n", ntests, name, i);
	}
	else
	{
		nfailed++;
		printf("not ok %d - %s %d\n", ntests, name, i);
	}
	fflush(stdout);
}

/*
 * The simulator must see a missing flush: with the backup log's flushes
 * dropped from the shadow (their fences kept), a crash image must lack
 * entries that were acknowledged.
 */
static void
test_sees_missing_flush(void)
{
	uint64		lost;

	printf("# mutation: the backup log's flushes never reach the shadow; "
		   "the next failure messages are expected\n");
	lost = run_workload(20, true, false, false, NULL);
	printf("# mutation: %llu lost entries reported\n", (unsigned long long) lost);
	unit_test_failures = 0;
	CHECKF(lost > 0, "the simulator did not notice that no log write was flushed");
}

/*
 * Run the workload with one of the VACUUM mutations (unflushed_reuse or
 * uncleared_release) and require deleted entries to come back: the
 * failures the simulator reports on the way are the point, not counted.
 */
static void
expect_deleted_back(const char *mutation, bool unflushed_reuse,
					bool uncleared_release, const char *complaint)
{
	uint64		back = 0;

	printf("# mutation: %s; the next failure messages are expected\n",
		   mutation);
	(void) run_workload(g_ops, false, unflushed_reuse, uncleared_release,
						&back);
	printf("# mutation: %llu deleted entries came back\n",
		   (unsigned long long) back);
	unit_test_failures = 0;
	CHECKF(back > 0, "%s", complaint);
}

/*
 * A line taken for reuse is zeroed in the mapping only; its old entries
 * stay on the media.  If VACUUM judged such a line by the mapping (no tag:
 * nothing to clear), it would delete entries whose copies a crash brings
 * back from the log.  The simulator found this; VACUUM now flushes the
 * zeroed lines whole.  Without that flush, deleted entries must come back.
 */
static void
test_sees_unflushed_reuse(void)
{
	expect_deleted_back("VACUUM does not flush lines zeroed for reuse",
						true, false,
						"the simulator did not notice unflushed zeros of reused lines");
}

/*
 * While a VACUUM runs, a relocation clears the log copies it releases:
 * VACUUM may delete those entries from their segments next, and a copy
 * left in the log would bring them back after a crash.  Without the
 * clearing, deleted entries must come back.
 */
static void
test_sees_uncleared_release(void)
{
	expect_deleted_back("relocations during VACUUM keep their released log copies",
						false, true,
						"the simulator did not notice released copies left in the log during VACUUM");
}

int
main(int argc, char **argv)
{
	static const Scale scale = {"flush", 1, 0, 0, 0, 0, 0, 0, false};
	int			nseeds = 2;
	int			i;
	const char *seed = getenv("PMH_TEST_SEED");
	const char *tmp = getenv("TMPDIR");

	for (i = 1; i < argc; i++)
	{
		if (strncmp(argv[i], "--ops=", 6) == 0)
			g_ops = atoi(argv[i] + 6);
		else if (strncmp(argv[i], "--seeds=", 8) == 0)
			nseeds = atoi(argv[i] + 8);
		else if (strncmp(argv[i], "--every=", 8) == 0)
			g_every = Max(1, atoi(argv[i] + 8));
		else
		{
			fprintf(stderr, "usage: %s [--ops=N] [--seeds=N] [--every=K]\n",
					argv[0]);
			return 2;
		}
	}
	setenv("PMEM_IS_PMEM_FORCE", "1", 1);
	S = &scale;
	if (seed)
		g_seed = strtoull(seed, NULL, 0);
	snprintf(g_tmpdir, sizeof(g_tmpdir), "%s/pmh_crashsim_XXXXXX",
			 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp ? tmp : "/tmp"));
	if (mkdtemp(g_tmpdir) == NULL)
	{
		fprintf(stderr, "mkdtemp(%s): %s\n", g_tmpdir, strerror(errno));
		return 2;
	}
	printf("# crash simulator: seed %llu, %d ops per workload, every %d-th persist point\n",
		   (unsigned long long) g_seed, g_ops, g_every);
	for (i = 0; i < nseeds; i++)
	{
		unit_test_failures = 0;
		g_rng = g_seed ^ ((uint64) (i + 1) * UINT64CONST(0x100000001B3));
		(void) run_workload(g_ops, false, false, false, NULL);
		report("crash at every persist point, workload", i + 1);
	}
	unit_test_failures = 0;
	g_rng = g_seed;
	test_sees_missing_flush();
	report("a missing flush is caught, workload", 1);
	unit_test_failures = 0;
	g_rng = g_seed ^ UINT64CONST(0x100000001B3);
	test_sees_unflushed_reuse();
	report("unflushed zeros of a reused log line are caught, workload", 1);
	unit_test_failures = 0;
	g_rng = g_seed ^ UINT64CONST(0x9E3779B97F4A7C15);
	test_sees_uncleared_release();
	report("released copies left in the log during VACUUM are caught, workload", 1);
	rmdir(g_tmpdir);
	printf("%d passed, %d failed\n", npassed, nfailed);
	return nfailed == 0 ? 0 : 1;
}
