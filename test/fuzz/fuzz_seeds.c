/*-------------------------------------------------------------------------
 *
 * fuzz_seeds.c
 *	  Write the seed corpora of the fuzz targets: "fuzz_seeds DIR" creates
 *	  DIR/pool (scripts for fuzz_pool) and DIR/ops (operation sequences for
 *	  fuzz_ops).  Run by "make fuzz".
 *
 * The pool seeds describe valid pools (one segment, splits at mixed
 * depths, overflow chains, log segments, entries in the backup log), the
 * states a crash leaves (an unpublished split half, an unlinked overflow
 * segment), each kind of corruption recovery must refuse, and bad headers
 * and lengths; two of them are pools written by the core itself, copied
 * byte for byte into the script.  The operation seeds exercise each
 * operation, the full backup log, splits and overflow segments asked by
 * the core, crashes, stale pools and power failures inside operations.
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz_common.h"

#include <errno.h>
#include <sys/stat.h>

#include "fuzz_format.h"

typedef struct Script
{
	uint8	   *b;
	size_t		n;
	size_t		cap;
} Script;

static const char *outdir;
static int	nwritten;

/* append bytes */
static void
put(Script *s, const void *p, size_t n)
{
	if (s->n + n > s->cap)
	{
		s->cap = Max(s->cap * 2, s->n + n + 256);
		s->b = pg_realloc(s->b, s->cap);
	}
	memcpy(s->b + s->n, p, n);
	s->n += n;
}

/* append one byte */
static void
u8(Script *s, unsigned v)
{
	uint8		b = (uint8) v;

	put(s, &b, 1);
}

/* append little-endian integers */
static void
u16(Script *s, unsigned v)
{
	u8(s, v & 0xff);
	u8(s, (v >> 8) & 0xff);
}

static void
u32(Script *s, uint32 v)
{
	u16(s, v & 0xffff);
	u16(s, v >> 16);
}

static void
u64(Script *s, uint64 v)
{
	u32(s, (uint32) v);
	u32(s, (uint32) (v >> 32));
}

/* write a script to DIR/sub/name and forget it */
static void
emit(Script *s, const char *sub, const char *name)
{
	char		path[MAXPGPATH];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s/%s", outdir, sub, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0)
	{
		fprintf(stderr, "fuzz_seeds: cannot write %s: %s\n", path, strerror(errno));
		exit(1);
	}
	nwritten++;
	free(s->b);
	memset(s, 0, sizeof(*s));
}

/* ---- fuzz_pool scripts ---- */

/* the preamble */
static void
pool_begin(Script *s, unsigned nseg, unsigned flags, unsigned tweak, unsigned crash)
{
	memset(s, 0, sizeof(*s));
	u8(s, nseg);
	u8(s, flags);
	u8(s, tweak);
	u8(s, crash);
}

static void
p_primary(Script *s, unsigned seg, unsigned depth, uint64 prefix)
{
	u8(s, FP_OP_PRIMARY);
	u8(s, seg);
	u8(s, depth);
	u64(s, prefix);
}

static void
p_overflow(Script *s, unsigned seg)
{
	u8(s, FP_OP_OVERFLOW);
	u8(s, seg);
}

static void
p_logseg(Script *s, unsigned seg, unsigned ext)
{
	u8(s, FP_OP_LOGSEG);
	u8(s, seg);
	u16(s, ext);
}

static void
p_link(Script *s, unsigned seg, unsigned next_plus_one)
{
	u8(s, FP_OP_LINK);
	u8(s, seg);
	u32(s, next_plus_one);
}

static void
p_fill(Script *s, unsigned seg, unsigned count, unsigned seed, unsigned kind,
	   unsigned owner)
{
	u8(s, FP_OP_FILL);
	u8(s, seg);
	u16(s, count);
	u8(s, seed);
	u8(s, kind);
	u8(s, owner);
}

static void
p_log(Script *s, unsigned line, unsigned first, unsigned n, unsigned seed,
	  unsigned src)
{
	u8(s, FP_OP_LOG);
	u16(s, line);
	u8(s, first);
	u8(s, n);
	u8(s, seed);
	u8(s, src);
}

static void
p_header(Script *s, unsigned field, uint64 v)
{
	u8(s, FP_OP_HEADER);
	u8(s, field);
	u64(s, v);
}

#define OK_FLAGS	(FP_VALID_HEADER | FP_STATE_LINE | FP_REPLAY_LOG)

/* scripted pools: valid, crash states, corrupt */
static void
pool_scripts(void)
{
	Script		s;

	/* one primary, a few entries, some log entries of it, some new */
	pool_begin(&s, 1, OK_FLAGS, 0, 3);
	p_primary(&s, 0, 0, 0);
	p_fill(&s, 0, 100, 1, FP_FILL_OWN | FP_FILL_DEAD, 0);
	p_log(&s, 0, 0, 16, 0, 0x80);
	p_log(&s, 7, 3, 9, 2, 0);
	emit(&s, "pool", "01-one-segment");

	/* two halves of a split at depth 1, log entries for both */
	pool_begin(&s, 3, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 1, 0);
	p_primary(&s, 1, 1, 1);
	p_fill(&s, 0, 700, 2, FP_FILL_OWN | FP_FILL_DUPS, 0);
	p_fill(&s, 1, 300, 3, FP_FILL_OWN | FP_FILL_OFFSET, 1);
	p_log(&s, 1, 0, 16, 4, 0);
	p_log(&s, 2, 0, 16, 5, 0x40 | 0x11);
	emit(&s, "pool", "02-split");

	/* mixed depths: 1/0, 2/2, 3/6, 3/7, and a free segment */
	pool_begin(&s, 5, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 1, 0);
	p_primary(&s, 1, 2, 2);
	p_primary(&s, 2, 3, 6);
	p_primary(&s, 3, 3, 7);
	p_fill(&s, 2, 1024, 6, FP_FILL_OWN, 2);
	p_fill(&s, 3, 50, 7, FP_FILL_OWN | FP_FILL_DEAD, 3);
	p_log(&s, 9, 0, 16, 8, 0);
	emit(&s, "pool", "03-mixed-depths");

	/* an overflow chain of two, full of one hash */
	pool_begin(&s, 4, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_overflow(&s, 1);
	p_overflow(&s, 2);
	p_link(&s, 0, 2);
	p_link(&s, 1, 3);
	p_fill(&s, 0, 1024, 9, FP_FILL_ONEHASH, 0);
	p_fill(&s, 1, 1024, 9, FP_FILL_ONEHASH, 0);
	p_fill(&s, 2, 200, 10, FP_FILL_DUPS, 0);
	p_log(&s, 3, 0, 16, 11, 0x40 | 0x20);
	emit(&s, "pool", "04-overflow-chain");

	/* log segments 0 and 1 with entries */
	pool_begin(&s, 4, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 1, 0);
	p_primary(&s, 3, 1, 1);
	p_logseg(&s, 1, 0);
	p_logseg(&s, 2, 1);
	p_fill(&s, 1, 300, 12, 0, 1);
	p_fill(&s, 2, 40, 13, FP_FILL_OFFSET, 2);
	p_fill(&s, 0, 200, 14, FP_FILL_OWN, 0);
	emit(&s, "pool", "05-log-segments");

	/* a crash before a split's publish: the nested half is an orphan */
	pool_begin(&s, 3, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_primary(&s, 1, 1, 1);
	p_fill(&s, 0, 1024, 15, FP_FILL_OWN, 0);
	p_fill(&s, 1, 500, 15, FP_FILL_OWN, 1);
	emit(&s, "pool", "06-unpublished-split");

	/* a crash before an overflow segment's link */
	pool_begin(&s, 2, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_overflow(&s, 1);
	p_fill(&s, 1, 30, 16, 0, 0);
	emit(&s, "pool", "07-unlinked-overflow");

	/* a stale pool: the state line is behind the server's count */
	pool_begin(&s, 2, OK_FLAGS | FP_STATE_BEHIND, 0, 5);
	p_primary(&s, 0, 0, 0);
	p_fill(&s, 0, 1000, 17, FP_FILL_OWN | FP_FILL_DUPS, 0);
	p_log(&s, 0, 0, 16, 0, 0x80);
	p_log(&s, 1, 0, 16, 1, 0x80);
	p_log(&s, 2, 0, 16, 18, 0);
	emit(&s, "pool", "08-stale");

	/* corruption: a gap */
	pool_begin(&s, 2, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 1, 0);
	emit(&s, "pool", "10-gap");

	/* overlap at equal depth */
	pool_begin(&s, 2, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_primary(&s, 1, 0, 0);
	emit(&s, "pool", "11-overlap");

	/* a broken chain: a loop */
	pool_begin(&s, 3, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_overflow(&s, 1);
	p_link(&s, 0, 2);
	p_link(&s, 1, 2);
	emit(&s, "pool", "12-chain-loop");

	/* a bad check byte */
	pool_begin(&s, 1, OK_FLAGS, 0, 0);
	u8(&s, FP_OP_WORD);
	u8(&s, 0);
	u64(&s, pmh_segword_make(0, 0) ^ 1);
	emit(&s, "pool", "13-bad-word");

	/* log extension 1 without 0, and 0 twice */
	pool_begin(&s, 3, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_logseg(&s, 1, 1);
	emit(&s, "pool", "14-log-gap");
	pool_begin(&s, 3, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_logseg(&s, 1, 0);
	p_logseg(&s, 2, 0);
	emit(&s, "pool", "15-log-twice");

	/* a chain through a log segment */
	pool_begin(&s, 3, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_logseg(&s, 1, 0);
	p_link(&s, 0, 2);
	emit(&s, "pool", "16-chain-to-log");

	/* headers: zero, bad checksum, bad layout (checksum fixed), version */
	pool_begin(&s, 1, FP_STATE_LINE, 0, 0);
	p_primary(&s, 0, 0, 0);
	emit(&s, "pool", "20-no-header");
	pool_begin(&s, 1, OK_FLAGS, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_header(&s, 4, 77);
	emit(&s, "pool", "21-bad-checksum");
	pool_begin(&s, 1, OK_FLAGS | FP_FIX_CHECKSUM, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_header(&s, 11, 32);
	emit(&s, "pool", "22-bad-layout");
	pool_begin(&s, 1, OK_FLAGS | FP_FIX_CHECKSUM, 0, 0);
	p_primary(&s, 0, 0, 0);
	p_header(&s, 1, 1);
	p_header(&s, 12, PMH_PLACEMENT_WINDOW8);
	emit(&s, "pool", "23-old-version");

	/* lengths: a byte short, long, tiny, inside the log and the segment */
	pool_begin(&s, 1, OK_FLAGS | FP_LEN_MODE(1), 0, 0);
	p_primary(&s, 0, 0, 0);
	emit(&s, "pool", "30-short");
	pool_begin(&s, 1, OK_FLAGS | FP_LEN_MODE(2), 63, 0);
	p_primary(&s, 0, 0, 0);
	emit(&s, "pool", "31-long");
	pool_begin(&s, 1, OK_FLAGS | FP_LEN_MODE(3), 10, 0);
	emit(&s, "pool", "32-tiny");
	pool_begin(&s, 1, OK_FLAGS | FP_LEN_MODE(4), 3, 0);
	emit(&s, "pool", "33-in-log");
	pool_begin(&s, 1, OK_FLAGS | FP_LEN_MODE(5), 100, 0);
	p_primary(&s, 0, 0, 0);
	emit(&s, "pool", "34-in-segment");
	pool_begin(&s, 0, OK_FLAGS, 0, 0);
	emit(&s, "pool", "35-no-segment");
}

/*
 * A pool the core wrote: the script copies every non-zero 256-byte line of
 * the image (RAW operations), the header included.
 */
static void
pool_from_image(const FzPool *fp, const char *name)
{
	Script		s;
	size_t		off;
	static const char zeros[PMH_LINE_BYTES];

	pool_begin(&s, (unsigned) fp->nseg, FP_REPLAY_LOG, 0, 0);
	for (off = 0; off < fp->pool.mapped_len; off += PMH_LINE_BYTES)
	{
		if (memcmp(fp->pool.base + off, zeros, PMH_LINE_BYTES) == 0)
			continue;
		u8(&s, FP_OP_RAW);
		u32(&s, (uint32) off);
		u8(&s, PMH_LINE_BYTES - 1);
		put(&s, fp->pool.base + off, PMH_LINE_BYTES);
	}
	emit(&s, "pool", name);
}

/* insert n pairs directly, splitting and extending as the core asks */
static void
core_insert(FzPool *fp, uint64 seed, int n, bool onehash)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		uint64		h = fz_mix(onehash ? seed : seed * 100000 + i);
		int			round;

		for (round = 0; round < 100; round++)
		{
			uint32		p = fz_primary_of(fp, h);
			PmhInsertResult r = pmh_insert_new(&fp->pool, &fp->cb, p, h,
											   (uint32) seed, (uint16) (i + 1));

			if (r == PMH_INSERT_DONE)
				break;
			if (pmh_wp_make_room(fz_writer(fp), p, r) != PMH_WP_OK)
				fz_fail("seed pool insert: %d", (int) r);
		}
	}
}

/* real pools written through the core */
static void
pool_images(void)
{
	FzPool		fp;
	PmhEntry	e[PMH_BUCKET_SLOTS];
	int			i;

	/* one segment, 150 entries, one log line of new entries */
	fz_pool_create(&fp, 2, false);
	core_insert(&fp, 1, 150, false);
	for (i = 0; i < PMH_BUCKET_SLOTS; i++)
	{
		e[i].hash = fz_mix(777 + i);
		e[i].tag = pmh_tag_make(e[i].hash, 9, (uint16) (i + 1));
	}
	if (pmh_log_write(&fp.pool, 5, 0, e, PMH_BUCKET_SLOTS) != 0)
		fz_fail("pmh_log_write");
	fz_check_structure(&fp, "seed pool 1");
	pool_from_image(&fp, "40-core-small");
	fz_pool_free(&fp);

	/* a split, an overflow chain of one hash, a log segment */
	fz_pool_create(&fp, 4, false);
	core_insert(&fp, 2, 1100, false);
	core_insert(&fp, 3, 40, true);
	(void) fz_add_overflow(&fp, fz_primary_of(&fp, fz_mix(3)));
	(void) fz_add_log_segment(&fp);
	for (i = 0; i < 4; i++)
	{
		e[i].hash = fz_mix(888 + i);
		e[i].tag = pmh_tag_make(e[i].hash, 10, (uint16) (i + 1));
	}
	if (pmh_log_write(&fp.pool, PMH_LOG_LINES + 2, 0, e, 4) != 0)
		fz_fail("pmh_log_write");
	fz_check_structure(&fp, "seed pool 2");
	pool_from_image(&fp, "41-core-split");
	fz_pool_free(&fp);
}

/* ---- fuzz_ops sequences ---- */

/* the preamble */
static void
ops_begin(Script *s, unsigned flags, unsigned salt)
{
	memset(s, 0, sizeof(*s));
	u8(s, flags);
	u8(s, salt);
}

static void
o_op(Script *s, FoOp op)
{
	u8(s, op);
}

static void
o_key_tid(Script *s, FoOp op, unsigned key, unsigned tid)
{
	u8(s, op);
	u8(s, key);
	u8(s, tid);
}

static void
o_key(Script *s, FoOp op, unsigned key)
{
	u8(s, op);
	u8(s, key);
}

static void
o_batch(Script *s, unsigned n, unsigned key, unsigned step, unsigned tid)
{
	u8(s, FO_OP_LOG_BATCH);
	u8(s, n);
	u8(s, key);
	u8(s, step);
	u8(s, tid);
}

static void
o_bulk(Script *s, unsigned key, unsigned count, unsigned mode)
{
	u8(s, FO_OP_BULK);
	u8(s, key);
	u8(s, count);
	u8(s, mode);
}

static void
o_delete(Script *s, unsigned idx)
{
	u8(s, FO_OP_DELETE);
	u16(s, idx);
}

/* operation sequences */
static void
ops_scripts(void)
{
	Script		s;
	int			i;

	/* direct inserts, repeats, lookups, deletes */
	ops_begin(&s, 0, 1);
	for (i = 0; i < 20; i++)
		o_key_tid(&s, FO_OP_INSERT, i * 13, i);
	o_key_tid(&s, FO_OP_INSERT, 13, 1);
	o_key(&s, FO_OP_LOOKUP, 13);
	o_delete(&s, 3);
	o_key(&s, FO_OP_DELETE_KEY, 26);
	o_key_tid(&s, FO_OP_INSERT, 200, 5);
	o_key_tid(&s, FO_OP_INSERT, 201, 5);
	emit(&s, "ops", "01-direct");

	/* the backup log: batches, relocation, a crash, deletes */
	ops_begin(&s, 1, 2);
	o_batch(&s, 16, 0, 1, 0);
	o_batch(&s, 8, 130, 3, 9);
	o_key_tid(&s, FO_OP_LOG_INSERT, 7, 7);
	o_key(&s, FO_OP_RELOCATE, 0);
	o_batch(&s, 16, 40, 1, 20);
	o_op(&s, FO_OP_CRASH);
	o_key_tid(&s, FO_OP_LOG_INSERT, 7, 7);
	o_delete(&s, 5);
	o_op(&s, FO_OP_RELOCATE_ALL);
	o_key(&s, FO_OP_DELETE_KEY, 0);
	emit(&s, "ops", "02-log");

	/* a full log: extensions, then relocating everything */
	ops_begin(&s, 0x08 | 0x00, 3);
	for (i = 0; i < 12; i++)
		o_batch(&s, 15, i * 20, 1, i);
	o_op(&s, FO_OP_LOG_EXTEND);
	o_op(&s, FO_OP_RESTART);
	for (i = 0; i < 6; i++)
		o_batch(&s, 16, 128 + i * 10, 1, 100 + i);
	emit(&s, "ops", "03-full-log");

	/* bulk loads until the core asks for splits and overflow segments */
	ops_begin(&s, FO_INSERT_NEW | 2, 4);
	o_bulk(&s, 10, 31, 0);
	o_bulk(&s, 10, 10, FO_BULK_DUPS);
	o_bulk(&s, 150, 31, FO_BULK_ONEHASH);
	o_bulk(&s, 150, 5, FO_BULK_FPCOLLIDE);
	o_batch(&s, 16, 150, 0, 3);
	o_op(&s, FO_OP_RELOCATE_ALL);
	o_key(&s, FO_OP_DELETE_KEY, 150);
	emit(&s, "ops", "04-bulk");

	/* splits and overflow segments on demand, with pending entries */
	ops_begin(&s, 3, 5);
	o_batch(&s, 16, 128, 1, 0);
	o_key(&s, FO_OP_SPLIT, 128);
	o_key(&s, FO_OP_SPLIT, 129);
	o_key(&s, FO_OP_OVERFLOW, 192);
	o_batch(&s, 16, 192, 1, 50);
	o_key(&s, FO_OP_SPLIT, 192);
	o_op(&s, FO_OP_RELOCATE_ALL);
	o_op(&s, FO_OP_CRASH);
	emit(&s, "ops", "05-split-overflow");

	/* a stale pool: the same pairs come back through the log */
	ops_begin(&s, 0, 6);
	o_batch(&s, 16, 1, 2, 0);
	o_op(&s, FO_OP_CRASH);
	o_batch(&s, 16, 1, 2, 0);
	o_batch(&s, 16, 1, 2, 0);
	o_key(&s, FO_OP_RELOCATE, 1);
	o_op(&s, FO_OP_RELOCATE_ALL);
	o_key(&s, FO_OP_DELETE_KEY, 3);
	emit(&s, "ops", "06-stale");

	/* power failures: between operations and inside them */
	ops_begin(&s, FO_INSERT_NEW | 0x08, 7);
	o_bulk(&s, 20, 31, 0);
	u8(&s, FO_OP_POWERFAIL);
	u8(&s, 5);
	o_bulk(&s, 20, 3, 0);
	o_batch(&s, 16, 20, 1, 0);
	u8(&s, FO_OP_POWERFAIL);
	u8(&s, 2);
	o_key(&s, FO_OP_RELOCATE, 20);
	u8(&s, FO_OP_POWERFAIL);
	u8(&s, 0);
	u8(&s, FO_OP_POWERFAIL);
	u8(&s, 3);
	o_key(&s, FO_OP_DELETE_KEY, 21);
	u8(&s, FO_OP_POWERFAIL);
	u8(&s, 1);
	o_key(&s, FO_OP_SPLIT, 20);
	emit(&s, "ops", "07-power-failure");
}

/* write both corpora */
int
main(int argc, char **argv)
{
	char		path[MAXPGPATH];

	if (argc != 2)
	{
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	outdir = argv[1];
	if (mkdir(outdir, 0755) != 0 && errno != EEXIST)
	{
		fprintf(stderr, "fuzz_seeds: mkdir %s: %s\n", outdir, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/pool", outdir);
	(void) mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/ops", outdir);
	(void) mkdir(path, 0755);
	pool_scripts();
	pool_images();
	ops_scripts();
	printf("fuzz_seeds: %d seeds in %s\n", nwritten, outdir);
	return 0;
}
