/*-------------------------------------------------------------------------
 *
 * pmhashread.c
 *	  Lookups without the index lock: read sections and views of an index.
 *
 * A scan looks its hashes up without taking the index lock, so that a
 * lookup writes no cache line that other backends read (src/README.pmhash,
 * "Lookups without the index lock"):
 *
 *	- it reads a view of the index (directory, chunk table, segment count)
 *	  between two reads of the index's version, PmhashShared.ixversion,
 *	  which is odd while anybody holds the index lock exclusively
 *	  (pmhash_index_lock), and reads that version once more at the end: an
 *	  exclusive holder that overlapped the lookup (a directory doubling,
 *	  an overflow segment, pool growth, a reset) voids what it found;
 *	- each segment is read as pmhash_lookup_optimistic reads it, checked
 *	  by the segment's own version, and every segment number met is
 *	  checked against the view before it is used;
 *	- the backend is in a read section meanwhile, marked in its own slot
 *	  of a shared array (one cache line each).  Whoever frees memory that a
 *	  lookup may be reading (the directory when it doubles, the chunk table
 *	  when it grows, an index's whole state) first waits until every backend
 *	  that was in a read section has left it (pmhash_readers_wait), so a
 *	  lookup never reads freed memory, only memory that may change under it.
 *
 * When any of this fails the caller looks again the locked way
 * (pmhash_attach, pmhash_lookup_hash).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/s_lock.h"
#include "storage/shmem.h"
#include "utils/rel.h"

#include "pmhash.h"

/* a backend's read-section counter: odd while it is in one */
typedef struct PmhashReaderSlot
{
	pg_atomic_uint32 seq;
	char		pad[PMH_CACHELINE_BYTES - sizeof(pg_atomic_uint32)];
} PmhashReaderSlot;

StaticAssertDecl(sizeof(PmhashReaderSlot) == PMH_CACHELINE_BYTES,
				 "a reader slot fills one cache line");

/* spins on a reader's slot before pmhash_readers_wait sleeps a little */
#define PMHASH_READER_SPINS		1000

static PmhashReaderSlot *pmhash_readers = NULL;
static int	pmhash_nreaders = 0;
static PmhashReaderSlot *pmhash_my_reader = NULL;
static uint32 pmhash_my_seq = 0;
static bool pmhash_reader_checked = false;

/* metadata of no segment: what a lookup meets outside its view */
static PmhSegMeta pmhash_no_meta;

/* shared memory for the reader slots, one per backend (PGPROC numbers) */
Size
pmhash_readers_shmem_size(void)
{
	return add_size(mul_size(MaxBackends, sizeof(PmhashReaderSlot)),
					PMH_CACHELINE_BYTES);
}

/* set up the reader slots (shmem_startup_hook, AddinShmemInitLock held) */
void
pmhash_readers_shmem_init(void)
{
	bool		found;
	char	   *place;
	int			i;

	place = ShmemInitStruct("pmhash readers", pmhash_readers_shmem_size(),
							&found);
	pmhash_readers = (PmhashReaderSlot *) TYPEALIGN(PMH_CACHELINE_BYTES, place);
	pmhash_nreaders = MaxBackends;
	if (found)
		return;
	for (i = 0; i < pmhash_nreaders; i++)
		pg_atomic_init_u32(&pmhash_readers[i].seq, 0);
}

/* on exit: never leave the slot looking busy (see pmhash_reader_setup) */
static void
pmhash_reader_exit_cb(int code, Datum arg)
{
	if (pmhash_my_reader != NULL && (pmhash_my_seq & 1) != 0)
	{
		pmhash_my_seq++;
		pg_atomic_write_u32(&pmhash_my_reader->seq, pmhash_my_seq);
	}
	pmhash_my_reader = NULL;
}

/*
 * Find this backend's reader slot: false if it has none (not a regular
 * backend or background worker), and then it always takes the lock.  A
 * section holds no lock and raises no error, so a slot is left odd only by
 * a backend that dies in it, which makes the postmaster reinitialise
 * shared memory; the exit callback is a second line.
 */
static bool
pmhash_reader_setup(void)
{
	if (pmhash_my_reader != NULL)
		return true;
	if (pmhash_reader_checked)
		return false;
	pmhash_reader_checked = true;
	if (pmhash_readers == NULL || MyProc == NULL ||
		MyProc->pgprocno < 0 || MyProc->pgprocno >= pmhash_nreaders)
		return false;
	pmhash_my_reader = &pmhash_readers[MyProc->pgprocno];
	pmhash_my_seq = pg_atomic_read_u32(&pmhash_my_reader->seq);
	if ((pmhash_my_seq & 1) != 0)
		pmhash_my_seq++;
	before_shmem_exit(pmhash_reader_exit_cb, (Datum) 0);
	return true;
}

/* enter a read section: seen by pmhash_readers_wait before any read */
static inline void
pmhash_reader_enter(void)
{
	/* (odd, and another odd value if a section was ever left unended) */
	pmhash_my_seq = (pmhash_my_seq + 1) | 1;
	pg_atomic_write_u32(&pmhash_my_reader->seq, pmhash_my_seq);
	pg_memory_barrier();
}

/* leave the read section: its reads are done before it is seen to end */
static inline void
pmhash_reader_exit(void)
{
	pmhash_my_seq = (pmhash_my_seq | 1) + 1;
	__atomic_store_n(&pmhash_my_reader->seq.value, pmhash_my_seq,
					 __ATOMIC_RELEASE);
}

/*
 * Wait until every backend that is in a read section now has left it.
 * Called by whoever is about to free memory that a lookup without the
 * index lock may be reading, after making it unreachable (a new pointer
 * stored, or the index lock taken exclusively, which makes every new
 * lookup fail its first version check): a section that starts after this
 * call's barrier can no longer reach it.  Sections are short and never
 * wait, so neither does this for long.
 */
void
pmhash_readers_wait(void)
{
	int			i;

	if (pmhash_readers == NULL)
		return;
	pg_memory_barrier();
	for (i = 0; i < pmhash_nreaders; i++)
	{
		PmhashReaderSlot *r = &pmhash_readers[i];
		uint32		seq = pg_atomic_read_u32(&r->seq);
		int			spins = 0;

		if ((seq & 1) == 0 || r == pmhash_my_reader)
			continue;
		while (pg_atomic_read_u32(&r->seq) == seq)
		{
			if (++spins < PMHASH_READER_SPINS)
				pg_spin_delay();
			else
				pg_usleep(10);
		}
	}
	/* the sections' reads are done before the caller frees */
	pg_memory_barrier();
}

/* the shared slot of segment segno, which the view covers */
static inline PmhashSegSlot *
pmhash_view_slot(const PmhashReadView *v, uint32 segno)
{
	PmhashSegChunk *chunk = pmhash_dsa_address(v->chunks[pmhash_chunk_no(segno)]);

	return &chunk->slot[pmhash_chunk_place(segno)];
}

/* the metadata of segment segno, which the view covers */
static inline PmhSegMeta *
pmhash_view_meta_at(const PmhashReadView *v, uint32 segno)
{
	PmhashSegChunk *chunk = pmhash_dsa_address(v->chunks[pmhash_chunk_no(segno)]);

	return &chunk->meta[pmhash_chunk_place(segno)];
}

/*
 * PmhCallbacks.get_meta of a view: the metadata of a segment of a chain.
 * A segment number outside the view (a segment added after it was read),
 * or a chain longer than the index has segments (it changed under the
 * walk), marks the lookup bad and ends the walk with a segment of nothing.
 */
static PmhSegMeta *
pmhash_view_meta(void *arg, uint32 segno)
{
	PmhashReadView *v = (PmhashReadView *) arg;

	if (unlikely(segno >= v->nsegments || v->steps == 0))
	{
		v->bad = true;
		return &pmhash_no_meta;
	}
	v->steps--;
	return pmhash_view_meta_at(v, segno);
}

/*
 * Start looking hashes up in index without its lock: enter a read section
 * and read a view of the index.  Returns false, outside any section, when
 * the lock is needed: this backend has not attached to the index's
 * current storage yet (or has no reader slot), the index is not loaded,
 * being rebuilt or changing, a load is half done, the pool grew past this
 * backend's mapping, or media reads are counted.  After true, the caller
 * runs pmhash_read_lookup as often as it likes and then pmhash_read_end,
 * with no lock taken and no error raised in between.
 */
bool
pmhash_read_begin(Relation index, PmhashReadView *v)
{
	PmhashShared *shared;
	PmhashLocal *local;
	dsa_pointer dir;
	dsa_pointer chunks;

	if (unlikely(!pmhash_reader_setup()) ||
		!pmhash_attached_before(index, &shared, &local) ||
		local->pool.read_hook != NULL)
		return false;
	v->shared = shared;
	v->local = local;
	pmhash_reader_enter();
	v->ixversion = pmh_version_read_begin(&shared->ixversion);
	/*
	 * Memory in a segment of the area that this backend has not mapped is
	 * mapped outside the view, and the locked path taken this time (an
	 * exclusive holder that allocated it changed the version after that).
	 */
	if (pmhash_dsa_unmapped_segments())
	{
		pmhash_reader_exit();
		pmhash_dsa_map_segments();
		return false;
	}
	if ((v->ixversion & 1) != 0 ||
		shared->state != PMHASH_STATE_READY ||
		shared->generation != local->generation ||
		shared->load_blocked || shared->rebuild)
		goto fail;
	v->nsegments = shared->nsegments;
	v->depth = shared->global_depth;
	v->stale = shared->stale;
	v->all_loaded = shared->all_loaded;
	dir = shared->dir;
	chunks = shared->chunks;
	/* all of it from one moment with no exclusive holder */
	if (!pmh_version_read_valid(&shared->ixversion, v->ixversion) ||
		!DsaPointerIsValid(dir) || !DsaPointerIsValid(chunks) ||
		local->pool.mapped_len < pmh_pool_bytes(v->nsegments))
		goto fail;
	v->dir = pmhash_dsa_address(dir);
	v->chunks = pmhash_dsa_address(chunks);
	v->bad = false;
	v->cb.get_meta = pmhash_view_meta;
	v->cb.alloc_segment = NULL;
	v->cb.arg = v;
	if (unlikely(pmhash_no_meta.ovf_next != PMH_NO_SEGMENT))
		pmhash_no_meta.ovf_next = PMH_NO_SEGMENT;
	return true;

fail:
	pmhash_reader_exit();
	return false;
}

/*
 * The primary segment the view's directory names for hash, with its
 * metadata's first line (version, counts, D-bucket) and the hash's
 * fingerprint bucket starting to load, or PMH_NO_SEGMENT (outside the
 * view: the lookup is bad).  Until every segment is loaded, also the
 * segment's slot ("loaded").
 */
uint32
pmhash_read_segment(PmhashReadView *v, uint64 hash)
{
	uint32		segno = __atomic_load_n(&v->dir[pmh_dir_index(hash, v->depth)],
										__ATOMIC_RELAXED);

	/* (a split publishes a new half's entries after a write barrier) */
	pg_read_barrier();
	if (unlikely(segno >= v->nsegments))
	{
		v->bad = true;
		return PMH_NO_SEGMENT;
	}
	pmh_meta_prefetch(pmhash_view_meta_at(v, segno), hash);
	if (!v->all_loaded)
		pmh_prefetch(&pmhash_view_slot(v, segno)->loaded);
	return segno;
}

/*
 * Start loading the pool entries that hash's fingerprints point to in
 * segment segno (from pmhash_read_segment): a hint for a batch of lookups,
 * as in pmhash_collect_batch.
 */
void
pmhash_read_prefetch(PmhashReadView *v, uint32 segno, uint64 hash)
{
	if (segno != PMH_NO_SEGMENT &&
		(v->all_loaded || pmhash_view_slot(v, segno)->loaded))
		pmh_lookup_prefetch(&v->local->pool, pmhash_view_meta_at(v, segno),
							segno, hash);
}

/*
 * Look hash up in the view: the segment the directory names (segno, from
 * pmhash_read_segment, or PMH_NO_SEGMENT to read it here) and its chain,
 * then its D-bucket, into tags[0..max-1].  Returns false when the lookup
 * must be done under the lock; else sets *n to the number of entries,
 * which may exceed max.  Valid only if pmhash_read_end says so.
 */
bool
pmhash_read_lookup(PmhashReadView *v, uint32 segno, uint64 hash,
				   uint64 *tags, int max, int *n)
{
	if (segno == PMH_NO_SEGMENT)
		segno = pmhash_read_segment(v, hash);
	if (segno == PMH_NO_SEGMENT)
		return false;
	v->steps = v->nsegments;
	return pmhash_probe_unlocked(&v->local->pool, &v->cb,
								 v->all_loaded ? NULL :
								 pmhash_view_slot(v, segno),
								 pmhash_view_meta_at(v, segno), segno, hash,
								 tags, max, n) &&
		!v->bad;
}

/*
 * Leave the read section.  Returns whether what the lookups found stands:
 * no exclusive holder of the index lock overlapped them, and none met a
 * segment outside the view.
 */
bool
pmhash_read_end(PmhashReadView *v)
{
	bool		valid = pmh_version_read_valid(&v->shared->ixversion,
											   v->ixversion) && !v->bad;

	pmhash_reader_exit();
	return valid;
}
