/*-------------------------------------------------------------------------
 *
 * test_pool.c
 *	  Unit tests of the core's pool and persistence layer: the pool header
 *	  (in memory and in a real pool file), segment words, tags, the pool's
 *	  state line, the persist accounting, and batches of persists (CPU
 *	  flushes, merged msync calls, a batch whose msync fails).
 *
 * Part of test/unit/test_core (the driver and the list of tests are in
 * test_core.c).
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* header: init, validate, every failure status, status strings */
void
test_header(void)
{
	PmhPoolHeader h;
	PmhPoolHeader b;
	size_t		off;
	int			st;
	int			i;
	const char *strs[PMH_HEADER_FOREIGN + 1];

	pmh_header_init(&h, UINT64CONST(0x1122334455667788), 1, 2, 3, 4);
	CHECK(h.magic == PMH_MAGIC);
	CHECK(h.version == PMH_LAYOUT_VERSION);
	CHECK(h.pool_id == UINT64CONST(0x1122334455667788));
	CHECK(h.db_oid == 1 && h.spc_oid == 2 && h.rel_node == 3 && h.index_oid == 4);
	CHECK(h.seg_bytes == PMH_SEG_BYTES && h.seg_offset == PMH_SEG_OFFSET);
	CHECK(h.log_offset == PMH_LOG_OFFSET && h.log_lines == PMH_LOG_LINES);
	CHECK(h.checksum == pmh_header_checksum(&h));
	CHECK(sizeof(PmhPoolHeader) <= PMH_HEADER_BYTES);
	CHECK(sizeof(PmhSegHeader) == PMH_LINE_BYTES);
	CHECK(sizeof(PmhEntry) == PMH_ENTRY_BYTES);
	CHECK(pmh_pool_bytes(0) == PMH_SEG_OFFSET);
	CHECK(pmh_pool_bytes(3) == PMH_SEG_OFFSET + 3 * PMH_SEG_BYTES);

	CHECK(pmh_header_validate(&h, pmh_pool_bytes(1)) == PMH_HEADER_OK);
	CHECK(pmh_header_validate(&h, pmh_pool_bytes(1000)) == PMH_HEADER_OK);

	/* a fixed log of fewer lines: whole chunks of 64, at most the region */
	b = h;
	b.log_lines = PMH_LOG_LINES_SMALL;
	b.checksum = pmh_header_checksum(&b);
	CHECK(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_OK);
	{
		const uint32 bad[] = {0, PMH_LOG_LINES_SMALL + 1, 100,
		PMH_LOG_LINES + PMH_LOG_EXT_LINES};

		for (i = 0; i < (int) lengthof(bad); i++)
		{
			b.log_lines = bad[i];
			b.checksum = pmh_header_checksum(&b);
			CHECKF(pmh_header_validate(&b, pmh_pool_bytes(1)) ==
				   PMH_HEADER_BAD_LAYOUT, "log_lines %u accepted", bad[i]);
		}
	}

	/* truncated: shorter than the header, or not whole segments */
	CHECK(pmh_header_validate(&h, 0) == PMH_HEADER_TRUNCATED);
	CHECK(pmh_header_validate(&h, 100) == PMH_HEADER_TRUNCATED);
	CHECK(pmh_header_validate(&h, PMH_HEADER_BYTES - 1) == PMH_HEADER_TRUNCATED);
	CHECK(pmh_header_validate(&h, PMH_HEADER_BYTES) == PMH_HEADER_TRUNCATED);
	CHECK(pmh_header_validate(&h, pmh_pool_bytes(1) - 1) == PMH_HEADER_TRUNCATED);
	CHECK(pmh_header_validate(&h, pmh_pool_bytes(2) + PMH_LINE_BYTES) ==
		  PMH_HEADER_TRUNCATED);
	CHECK(pmh_header_validate(&h, pmh_pool_bytes(2) - PMH_LINE_BYTES) ==
		  PMH_HEADER_TRUNCATED);
	CHECK(pmh_header_validate(&h, pmh_pool_bytes(7) + 1) == PMH_HEADER_TRUNCATED);
	/* too short for a header is reported before anything in it */
	b = h;
	b.magic = 0;
	CHECK(pmh_header_validate(&b, 100) == PMH_HEADER_TRUNCATED);

	/* bad magic, with or without a matching checksum */
	b = h;
	b.magic ^= 0x100;
	CHECK(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_BAD_MAGIC);
	b.checksum = pmh_header_checksum(&b);
	CHECK(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_BAD_MAGIC);

	/* bad version, checksum recomputed so that the version is what fails */
	b = h;
	b.version = PMH_LAYOUT_VERSION + 1;
	b.checksum = pmh_header_checksum(&b);
	CHECK(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_BAD_VERSION);
	b.version = 0;
	b.checksum = pmh_header_checksum(&b);
	CHECK(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_BAD_VERSION);

	/* bad checksum: flip one byte anywhere after magic and version */
	for (off = offsetof(PmhPoolHeader, header_bytes);
		 off < offsetof(PmhPoolHeader, checksum) + sizeof(uint32); off++)
	{
		b = h;
		((unsigned char *) &b)[off] ^= 0x10;
		CHECKF(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_BAD_CHECKSUM,
			   "byte %zu flipped: status %d", off,
			   (int) pmh_header_validate(&b, pmh_pool_bytes(1)));
	}

	/* bad layout: each layout field changed, checksum recomputed */
	for (i = 0; i < 8; i++)
	{
		b = h;
		switch (i)
		{
			case 0:
				b.seg_buckets = PMH_SEG_BUCKETS / 2;
				break;
			case 1:
				b.header_bytes = 8192;
				break;
			case 2:
				b.line_bytes = 64;
				break;
			case 3:
				b.entry_bytes = 8;
				break;
			case 4:
				b.bucket_slots = 8;
				break;
			case 5:
				b.placement = 2;
				break;
			case 6:
				b.seg_bytes = PMH_SEG_BYTES + PMH_LINE_BYTES;
				break;
			case 7:
				b.seg_offset = 8192;
				break;
		}
		b.checksum = pmh_header_checksum(&b);
		CHECKF(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_BAD_LAYOUT,
			   "layout field %d changed: status %d", i,
			   (int) pmh_header_validate(&b, pmh_pool_bytes(1)));
	}

	/* ownership fields are the caller's business */
	b = h;
	b.pool_id++;
	b.db_oid++;
	b.flags = 7;
	b.checksum = pmh_header_checksum(&b);
	CHECK(pmh_header_validate(&b, pmh_pool_bytes(1)) == PMH_HEADER_OK);

	/* every status has its own non-empty text */
	for (st = PMH_HEADER_OK; st <= PMH_HEADER_FOREIGN; st++)
	{
		int			o;

		strs[st] = pmh_header_status_string((PmhHeaderStatus) st);
		if (!CHECKF(strs[st] != NULL && strs[st][0] != '\0', "status %d has no text", st))
			continue;
		for (o = PMH_HEADER_OK; o < st; o++)
			CHECKF(strcmp(strs[o], strs[st]) != 0,
				   "statuses %d and %d have the same text", o, st);
	}
	CHECK(pmh_header_status_string((PmhHeaderStatus) 99)[0] != '\0');
}

/* read the header of a pool file and validate it against the file size */
static PmhHeaderStatus
validate_file(const char *path)
{
	PmhPoolHeader h;
	struct stat st;
	int			fd = open(path, O_RDONLY);
	ssize_t		n;

	if (!CHECKF(fd >= 0, "open(%s): %m", path))
		return PMH_HEADER_TRUNCATED;
	n = pread(fd, &h, sizeof(h), 0);
	CHECKF(fstat(fd, &st) == 0, "fstat: %m");
	close(fd);
	if (!CHECKF(n == (ssize_t) sizeof(h), "pread: %zd", n))
		return PMH_HEADER_TRUNCATED;
	return pmh_header_validate(&h, (size_t) st.st_size);
}

/* header of a real pool file: format, grow, truncate */
void
test_header_file(void)
{
	TPool		tp;
	uint64		i;

	if (!tpool_create(&tp, "hdrfile", 1))
		return;
	CHECKF(tp.pool.is_pmem == S->expect_pmem,
		   "pmem_map_file reported is_pmem = %d in the %s pass",
		   tp.pool.is_pmem, S->pass);
	printf("#   pool mapped with is_pmem = %d: pmh_persist uses %s\n",
		   tp.pool.is_pmem, tp.pool.is_pmem ? "CPU cache flushes" : "msync");
	CHECK(validate_file(tp.path) == PMH_HEADER_OK);
	CHECK(pmh_pool_nsegments(&tp.pool) == 1);
	CHECK(pmh_seg_header(&tp.pool, 0)->word == pmh_segword_make(0, 0));
	CHECK(pmh_seg_header(&tp.pool, 0)->ovf_next == 0);

	/* grow by ftruncate + remap: new segments read as zero */
	if (!tpool_grow(&tp, 5))
	{
		tpool_close(&tp);
		return;
	}
	CHECK(pmh_pool_nsegments(&tp.pool) == 5);
	CHECK(tp.pool.mapped_len == pmh_pool_bytes(5));
	CHECK(validate_file(tp.path) == PMH_HEADER_OK);
	CHECK(pmh_header_validate((PmhPoolHeader *) tp.pool.base, tp.pool.mapped_len) ==
		  PMH_HEADER_OK);
	for (i = 1; i < 5; i++)
		CHECK(pmh_seg_header(&tp.pool, (uint32) i)->word == 0);
	CHECK(pmh_seg_header(&tp.pool, 0)->word == pmh_segword_make(0, 0));

	/* a length that is not a whole number of segments */
	CHECK(truncate(tp.path, (off_t) pmh_pool_bytes(5) + 100) == 0);
	CHECK(validate_file(tp.path) == PMH_HEADER_TRUNCATED);
	CHECK(truncate(tp.path, (off_t) pmh_pool_bytes(5)) == 0);
	CHECK(validate_file(tp.path) == PMH_HEADER_OK);

	/* and the unchanged pool still recovers */
	{
		PmhRecoveryResult res;

		CHECK(tpool_recover(&tp, &res, NULL, NULL) == 0);
		CHECK(res.primaries == 1 && res.overflows == 0 && res.global_depth == 0);
		CHECK(tp.nfree == 4);
	}
	tpool_close(&tp);
}

/* brute force: how many check bytes make the upper 56 bits of w valid? */
static int
valid_check_bytes(uint64 w)
{
	int			c;
	int			n = 0;

	for (c = 0; c < 256; c++)
		if (pmh_segword_is_valid((w & ~UINT64CONST(0xff)) | (uint64) c))
			n++;
	return n;
}

/* segment words: round trips, bit flips, malformed words */
void
test_segment_words(void)
{
	int			depth;
	int			k;
	int			bit;
	uint64		o;

	CHECK(!pmh_segword_is_valid(0));
	for (depth = 0; depth <= PMH_MAX_DEPTH; depth++)
	{
		uint64		mask = depth == 0 ? 0 : (UINT64CONST(1) << depth) - 1;

		for (k = 0; k < 20; k++)
		{
			uint64		prefix = k == 0 ? 0 : (k == 1 ? mask : rnd() & mask);
			uint64		w = pmh_segword_make(depth, prefix);

			CHECKF(pmh_segword_is_valid(w), "make(%d, %llx) invalid", depth,
				   (unsigned long long) prefix);
			CHECK(!pmh_segword_is_overflow(w));
			CHECK(pmh_segword_depth(w) == depth);
			CHECKF(pmh_segword_prefix(w) == prefix, "make(%d, %llx): prefix %llx",
				   depth, (unsigned long long) prefix,
				   (unsigned long long) pmh_segword_prefix(w));
			CHECK(valid_check_bytes(w) == 1);

			/* hashes inside and outside the prefix */
			if (depth > 0)
			{
				uint64		h = (prefix << (64 - depth)) |
					(depth < 64 ? rnd() >> depth : 0);

				CHECK(pmh_hash_in_segment(h, w));
				CHECK(pmh_dir_index(h, depth) == prefix);
				CHECK(!pmh_hash_in_segment(h ^ (UINT64CONST(1) << (64 - depth)), w));
				CHECK(!pmh_hash_in_segment(h ^ (UINT64CONST(1) << 63), w));
			}
			else
				CHECK(pmh_hash_in_segment(rnd(), w));

			/* the range is exactly the hashes of the segment */
			{
				uint64		lo;
				uint64		hi;

				pmh_segword_range(w, &lo, &hi);
				CHECK(lo <= hi);
				CHECK(pmh_hash_in_segment(lo, w));
				CHECK(pmh_hash_in_segment(hi, w));
				CHECK(lo == 0 || !pmh_hash_in_segment(lo - 1, w));
				CHECK(hi == PG_UINT64_MAX || !pmh_hash_in_segment(hi + 1, w));
			}

			/* any single flipped bit is detected */
			for (bit = 0; bit < 64; bit++)
				CHECKF(!pmh_segword_is_valid(w ^ (UINT64CONST(1) << bit)),
					   "word %016llx (depth %d) with bit %d flipped is valid",
					   (unsigned long long) w, depth, bit);
		}

		/* a prefix wider than the depth is invalid, whatever the check byte */
		if (depth < PMH_MAX_DEPTH)
		{
			uint64		wide = pmh_segword_make(depth, mask | (UINT64CONST(1) << depth));

			CHECKF(!pmh_segword_is_valid(wide), "depth %d with a %d-bit prefix is valid",
				   depth, depth + 1);
			CHECK(valid_check_bytes(wide) == 0);
			wide = pmh_segword_make(depth, UINT64CONST(1) << (PMH_MAX_DEPTH - 1));
			CHECK(!pmh_segword_is_valid(wide));
		}
	}

	/* depths above the maximum */
	for (depth = PMH_MAX_DEPTH + 1; depth < 64; depth++)
		CHECKF(valid_check_bytes(T_WORD_VALID | ((uint64) depth << 56)) == 0,
			   "depth %d accepted", depth);

	/* overflow words */
	o = pmh_segword_make_overflow();
	CHECK(pmh_segword_is_valid(o));
	CHECK(pmh_segword_is_overflow(o));
	CHECK(pmh_segword_depth(o) == 0);
	CHECK(pmh_segword_prefix(o) == 0);
	CHECK(o != pmh_segword_make(0, 0));
	CHECK(valid_check_bytes(o) == 1);
	for (bit = 0; bit < 64; bit++)
		CHECKF(!pmh_segword_is_valid(o ^ (UINT64CONST(1) << bit)),
			   "overflow word with bit %d flipped is valid", bit);
	/* an overflow word carries neither depth nor prefix */
	CHECK(valid_check_bytes(T_WORD_VALID | T_WORD_OVERFLOW | ((uint64) 3 << 56)) == 0);
	CHECK(valid_check_bytes(T_WORD_VALID | T_WORD_OVERFLOW | ((uint64) 1 << 8)) == 0);
	/* without the valid bit nothing is valid */
	CHECK(valid_check_bytes(pmh_segword_make(5, 3) & ~T_WORD_VALID) == 0);
	CHECK(valid_check_bytes(o & ~T_WORD_VALID) == 0);
}

/* tags: round trip and pmh_entry_is_live */
void
test_tags(void)
{
	int			i;
	int			m;
	int			d;

	for (i = 0; i < 2000; i++)
	{
		uint64		hash = rnd();
		uint32		block;
		uint16		offset;
		uint64		tag;
		PmhEntry	e;

		rnd_tid(&block, &offset);
		if (i == 0)
		{
			block = 0;
			offset = 1;
		}
		else if (i == 1)
		{
			block = UINT32_MAX;
			offset = UINT16_MAX;
		}
		tag = pmh_tag_make(hash, block, offset);
		CHECK(pmh_tag_block(tag) == block);
		CHECK(pmh_tag_offset(tag) == offset);
		CHECK((tag >> 56) == PMH_TAG_LIVE);
		CHECK(((tag >> 48) & 0xff) == (hash & 0xff));
		CHECK(pmh_fingerprint(hash) == (hash & 0xff));

		e.hash = hash;
		e.tag = tag;
		CHECK(pmh_entry_is_live(&e, pmh_segword_make(0, 0)));
		for (d = 1; d <= PMH_MAX_DEPTH; d += 7)
		{
			uint64		p = hash >> (64 - d);

			CHECK(pmh_entry_is_live(&e, pmh_segword_make(d, p)));
			/* hash outside the segment's prefix */
			CHECK(!pmh_entry_is_live(&e, pmh_segword_make(d, p ^ 1)));
		}

		/* tag 0: a free or deleted slot */
		e.tag = 0;
		CHECK(!pmh_entry_is_live(&e, pmh_segword_make(0, 0)));
		/* wrong fingerprint copy: a torn entry */
		e.tag = tag ^ (UINT64CONST(1) << (48 + i % 8));
		CHECK(!pmh_entry_is_live(&e, pmh_segword_make(0, 0)));
		e.tag = pmh_tag_make(hash ^ 0x80, block, offset);
		CHECK(!pmh_entry_is_live(&e, pmh_segword_make(0, 0)));
		/* offset 0 */
		e.tag = pmh_tag_make(hash, block, 0);
		CHECK(!pmh_entry_is_live(&e, pmh_segword_make(0, 0)));
		/* hash and tag agree but the hash was changed */
		e.hash = hash ^ 1;
		e.tag = tag;
		CHECK(!pmh_entry_is_live(&e, pmh_segword_make(0, 0)));
	}

	/* every marker but the live one is rejected */
	for (m = 0; m < 256; m++)
	{
		PmhEntry	e;

		e.hash = UINT64CONST(0x0123456789abcdef);
		e.tag = (pmh_tag_make(e.hash, 42, 7) & ~(UINT64CONST(0xff) << 56)) |
			((uint64) m << 56);
		CHECKF(pmh_entry_is_live(&e, pmh_segword_make(0, 0)) == (m == PMH_TAG_LIVE),
			   "marker %02x", m);
	}
}

/* persist accounting, on whichever path this pass uses */
void
test_persist_stats(void)
{
	TPool		tp;
	PmhPersistStats *st;
	uint64		hash;
	uint32		block;
	uint16		offset;
	uint32		segno;
	uint32		newseg;
	int			i;
	int			b;
	Model		m;
	int			lnew;

	memset(&m, 0, sizeof(m));
	if (!tpool_create(&tp, "stats", 8))
		return;
	st = &tp.pool.stats;
	CHECKF(tp.pool.is_pmem == S->expect_pmem,
		   "pmem_map_file reported is_pmem = %d in the %s pass",
		   tp.pool.is_pmem, S->pass);

	/*
	 * formatting persisted segment 0, then the header page and the fixed
	 * log's lines in use (all of it for a pool of pmh_header_init)
	 */
	CHECK(st->persists == 2 && st->fences == 2);
	CHECK(st->bytes == pmh_pool_bytes(1));
	CHECK(st->cachelines == pmh_pool_bytes(1) / PMH_CACHELINE_BYTES);

	/* one insert: one 16 B entry, one cache line, one fence */
	memset(st, 0, sizeof(*st));
	hash = rnd();
	CHECK(tpool_insert(&tp, hash, 10, 1) == PMH_INSERT_DONE);
	model_add(&m, hash, 10, 1);
	CHECKF(st->persists == 1 && st->cachelines == 1 && st->fences == 1 &&
		   st->bytes == PMH_ENTRY_BYTES,
		   "insert: persists %llu cachelines %llu fences %llu bytes %llu",
		   (unsigned long long) st->persists, (unsigned long long) st->cachelines,
		   (unsigned long long) st->fences, (unsigned long long) st->bytes);

	/* an existing entry is not written again */
	memset(st, 0, sizeof(*st));
	CHECK(tpool_insert(&tp, hash, 10, 1) == PMH_INSERT_EXISTS);
	CHECK(st->persists == 0 && st->cachelines == 0);

	/* the choke point itself: empty ranges, line arithmetic */
	memset(st, 0, sizeof(*st));
	CHECK(pmh_persist(&tp.pool, tp.pool.base + PMH_HEADER_BYTES, 0) == 0);
	CHECK(st->persists == 0);
	CHECK(pmh_persist(&tp.pool, tp.pool.base + PMH_HEADER_BYTES + 60, 8) == 0);
	CHECK(st->persists == 1 && st->cachelines == 2 && st->bytes == 8);
	CHECK(pmh_persist(&tp.pool, tp.pool.base + PMH_HEADER_BYTES, 64) == 0);
	CHECK(st->persists == 2 && st->cachelines == 3 && st->fences == 2);

	/*
	 * delete slots 0 and 5 of one bucket: one persist of 6 entries, 2 lines.
	 * A segment fills bucket by bucket: 15 more entries fill bucket 0, the
	 * next 6 take slots 0..5 of bucket 1.
	 */
	b = 1;
	for (i = 0; i < 15; i++)
	{
		uint64		h = rnd();

		CHECK(tpool_insert(&tp, h, 30, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add(&m, h, 30, (uint16) (i + 1));
	}
	CHECK(tp.meta[0].occ[0] == 0xffff);
	for (i = 0; i < 6; i++)
	{
		uint64		h = rnd();

		CHECK(tpool_insert(&tp, h, 20, (uint16) (i + 1)) == PMH_INSERT_DONE);
		model_add(&m, h, 20, (uint16) (i + 1));
	}
	CHECKF(tp.meta[0].occ[b] == 0x3f, "bucket %d occ %04x", b, tp.meta[0].occ[b]);
	memset(st, 0, sizeof(*st));
	CHECK(pmh_delete_slots(&tp.pool, &tp.meta[0], 0, b, 0x21) == 0);
	CHECKF(st->persists == 1 && st->bytes == 6 * PMH_ENTRY_BYTES &&
		   st->cachelines == 2 && st->fences == 1,
		   "delete: persists %llu cachelines %llu bytes %llu",
		   (unsigned long long) st->persists, (unsigned long long) st->cachelines,
		   (unsigned long long) st->bytes);
	CHECK(tp.meta[0].occ[b] == 0x1e);
	CHECK(pmh_seg_entries(&tp.pool, 0)[b * PMH_BUCKET_SLOTS].tag == 0);
	CHECK(pmh_seg_entries(&tp.pool, 0)[b * PMH_BUCKET_SLOTS + 5].tag == 0);
	{
		/* drop the two deleted entries from the model */
		size_t		j;
		size_t		n = 0;
		const PmhEntry *e = pmh_seg_entries(&tp.pool, 0);

		for (j = 0; j < m.n; j++)
		{
			if (m.e[j].hash == e[b * PMH_BUCKET_SLOTS].hash ||
				m.e[j].hash == e[b * PMH_BUCKET_SLOTS + 5].hash)
				continue;
			m.e[n++] = m.e[j];
		}
		CHECK(n == m.n - 2);
		m.n = n;
	}
	/* slots that are not live are ignored: nothing is persisted */
	memset(st, 0, sizeof(*st));
	CHECK(pmh_delete_slots(&tp.pool, &tp.meta[0], 0, b, 0x8001) == 0);
	CHECK(st->persists == 0);
	CHECK(tp.meta[0].occ[b] == 0x1e && tp.meta[0].nlive == 20);

	/* a split: new segment (and its chain) in bulk, then the 8 B publish */
	if (insert_until(&tp, &m, PMH_INSERT_SPLIT, STOP_SPLIT, &hash, &block, &offset,
					 &segno, false))
	{
		CHECK(tpool_ensure_free(&tp, pmh_segments_needed_for_split(&tp.cb, segno)));
		memset(st, 0, sizeof(*st));
		newseg = tpool_split(&tp, segno);
		if (newseg != PMH_NO_SEGMENT)
		{
			/* the header line and the filled lines of each built segment */
			uint64		built = 0;
			uint32		sg;

			for (sg = newseg; sg != PMH_NO_SEGMENT; sg = tp.meta[sg].ovf_next)
				built += (1 + (tp.meta[sg].nlive + PMH_BUCKET_SLOTS - 1) /
						  PMH_BUCKET_SLOTS) * PMH_LINE_BYTES;
			lnew = chain_length(&tp, newseg);
			CHECKF(st->persists == (uint64) (2 + lnew) &&
				   st->fences == (uint64) (2 + lnew) &&
				   st->bytes == built + 8 &&
				   st->cachelines == built / PMH_CACHELINE_BYTES + 1,
				   "split (new chain %d): persists %llu cachelines %llu bytes %llu",
				   lnew, (unsigned long long) st->persists,
				   (unsigned long long) st->cachelines,
				   (unsigned long long) st->bytes);
		}
		CHECK(tpool_insert(&tp, hash, block, offset) == PMH_INSERT_DONE);
		model_add(&m, hash, block, offset);
	}

	/*
	 * an overflow segment: its header line (its buckets are zero on the
	 * media already), then the 8 B link
	 */
	CHECK(tpool_ensure_free(&tp, 1));
	memset(st, 0, sizeof(*st));
	if (tpool_add_overflow(&tp, 0) != PMH_NO_SEGMENT)
		CHECKF(st->persists == 2 && st->fences == 2 &&
			   st->bytes == PMH_LINE_BYTES + 8 &&
			   st->cachelines == PMH_LINE_BYTES / PMH_CACHELINE_BYTES + 1,
			   "overflow: persists %llu cachelines %llu bytes %llu",
			   (unsigned long long) st->persists, (unsigned long long) st->cachelines,
			   (unsigned long long) st->bytes);

	/* no_persist: nothing is counted (nor flushed) */
	tp.pool.no_persist = 1;
	memset(st, 0, sizeof(*st));
	for (i = 0; i < 300; i++)
	{
		hash = rnd();
		rnd_tid(&block, &offset);
		CHECK(tpool_insert(&tp, hash, block, offset) == PMH_INSERT_DONE);
		model_add(&m, hash, block, offset);
	}
	CHECK(pmh_persist(&tp.pool, tp.pool.base, 4096) == 0);
	CHECKF(st->persists == 0 && st->cachelines == 0 && st->fences == 0 &&
		   st->bytes == 0, "no_persist: persists %llu",
		   (unsigned long long) st->persists);
	tp.pool.no_persist = 0;
	CHECK(pmh_persist(&tp.pool, tp.pool.base, tp.pool.mapped_len) == 0);
	CHECK(st->persists == 1);

	verify_model(&tp, &m, 1000, "stats");
	model_free(&m);
	tpool_close(&tp);
}

/*
 * pmh_batch_begin / pmh_batch_end: inside a batch pmh_persist only remembers
 * ranges; the end flushes each of them (counted as usual) and fences once.
 * An empty batch fences nothing; a batch of more than PMH_BATCH_RANGES
 * ranges flushes early but still fences once, at the end.
 */
void
test_batch(void)
{
	TPool		tp;
	PmhPersistStats *st;
	HookLog		hl;
	char	   *seg;
	uint64		segoff;
	int			i;

	if (!tpool_create(&tp, "batch", 2))
		return;
	st = &tp.pool.stats;
	/* segment 1 is free: scratch space, 256 B aligned */
	seg = (char *) pmh_seg_entries(&tp.pool, 1);
	segoff = bucket_offset(&tp, 1, 0);
	CHECK(segoff % PMH_LINE_BYTES == 0);

	/*
	 * 16 B inside one cache line, 64 B across two of the next 256 B line, a
	 * whole 256 B line, and an empty range (not even remembered).
	 */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	CHECK(tp.pool.batching == 1 && tp.pool.nbatch == 0);
	CHECK(pmh_persist(&tp.pool, seg + 16, 16) == 0);
	CHECK(pmh_persist(&tp.pool, seg + 256 + 32, 64) == 0);
	CHECK(pmh_persist(&tp.pool, seg + 512, 256) == 0);
	CHECK(pmh_persist(&tp.pool, seg + 1024, 0) == 0);
	CHECK(tp.pool.nbatch == 3);
	check_stats(st, 0, 0, 0, 0, 0, 0, "inside a batch");
	CHECK(hl.nevents == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	CHECK(tp.pool.batching == 0 && tp.pool.nbatch == 0);
	check_stats(st, 3, 16 + 64 + 256, 1 + 2 + 4, 1, 2, 1, "end of a batch");
	CHECKF(hl.nranges == 3 && hl.nfences == 1 && hl.nevents == 4,
		   "hook: %d ranges, %d fences", hl.nranges, hl.nfences);
	CHECK(hl.off[0] == segoff && hl.len[0] == 64);
	CHECK(hl.off[1] == segoff + 256 && hl.len[1] == 128);
	CHECK(hl.off[2] == segoff + 512 && hl.len[2] == 256);
	CHECKF(hl.len[3] == 0, "the fence is not the last event");

	/* after the batch, every persist fences again */
	hook_start(&tp, &hl);
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(pmh_persist(&tp.pool, seg + 64, 16) == 0);
	check_stats(st, 2, 32, 2, 0, 2, 2, "after a batch");

	/* an empty batch, and one of empty ranges only: no flush, no fence */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_persist(&tp.pool, seg, 0) == 0);
	CHECK(pmh_persist(&tp.pool, seg + 64, 0) == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	check_stats(st, 0, 0, 0, 0, 0, 0, "empty batch");
	CHECK(hl.nevents == 0);
	CHECK(tp.pool.batching == 0);

	/* no_persist inside a batch: nothing remembered, nothing at the end */
	hook_start(&tp, &hl);
	tp.pool.no_persist = 1;
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_persist(&tp.pool, seg, 256) == 0);
	CHECK(tp.pool.nbatch == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	tp.pool.no_persist = 0;
	check_stats(st, 0, 0, 0, 0, 0, 0, "no_persist batch");

	/*
	 * 100 ranges of 16 B, each in its own cache line: the first
	 * PMH_BATCH_RANGES are remembered, the next one makes them flush (no
	 * fence), the rest flush at the end, followed by one fence.
	 */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	for (i = 0; i < 100; i++)
	{
		CHECK(pmh_persist(&tp.pool, seg + i * PMH_CACHELINE_BYTES, 16) == 0);
		if (i == PMH_BATCH_RANGES - 1)
			CHECKF(st->persists == 0 && tp.pool.nbatch == PMH_BATCH_RANGES,
				   "%d ranges: %llu flushed, %d remembered", i + 1,
				   (unsigned long long) st->persists, tp.pool.nbatch);
		if (i == PMH_BATCH_RANGES)
			CHECKF(st->persists == PMH_BATCH_RANGES && st->fences == 0 &&
				   tp.pool.nbatch == 1,
				   "%d ranges: %llu flushed, %llu fences, %d remembered", i + 1,
				   (unsigned long long) st->persists,
				   (unsigned long long) st->fences, tp.pool.nbatch);
	}
	CHECK(st->persists == PMH_BATCH_RANGES && st->fences == 0);
	CHECK(hl.nfences == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	check_stats(st, 100, 100 * 16, 100, 0, 100, 1, "batch of 100 ranges");
	CHECK(hl.nranges == 100 && hl.nfences == 1);

	/* exactly PMH_BATCH_RANGES ranges: all flushed at the end */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	for (i = 0; i < PMH_BATCH_RANGES; i++)
		CHECK(pmh_persist(&tp.pool, seg + i * PMH_CACHELINE_BYTES, 8) == 0);
	CHECK(st->persists == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	check_stats(st, PMH_BATCH_RANGES, PMH_BATCH_RANGES * 8, PMH_BATCH_RANGES, 0,
				PMH_BATCH_RANGES, 1, "batch of PMH_BATCH_RANGES ranges");
	hook_stop(&tp);
	tpool_close(&tp);
}

/*
 * With msync, the ranges of a batch are sorted and those within
 * PMH_MSYNC_MERGE_GAP of each other share one msync call, while the
 * accounting (counters, hook) still sees every range as persisted, in the
 * order persisted.  On persistent memory no msync is made at all.  Both
 * passes run the msync part (the mapping takes msync as well as CPU
 * flushes).
 */
void
test_batch_msync(void)
{
	TPool		tp;
	PmhPersistStats *st;
	HookLog		hl;
	char	   *seg;
	char	   *log;
	int			save_pmem;
	int			i;

	if (!tpool_create(&tp, "batchmsync", 2))
		return;
	st = &tp.pool.stats;
	seg = (char *) pmh_seg_entries(&tp.pool, 1);
	log = (char *) pmh_log_line(&tp.pool, 0);
	CHECK(seg - log > PMH_MSYNC_MERGE_GAP);

	/* the mapping's own mode: msync calls iff it is no pmem mapping */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_persist(&tp.pool, seg + 512, 16) == 0);
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	CHECKF(st->syncs == (tp.pool.is_pmem ? 0 : 1),
		   "is_pmem %d: %llu msync calls", tp.pool.is_pmem,
		   (unsigned long long) st->syncs);

	save_pmem = tp.pool.is_pmem;
	tp.pool.is_pmem = 0;

	/*
	 * Out of order: a segment line, the log's first line, the log's tenth
	 * line, the segment's first line.  The two log lines share a call, the
	 * two segment lines another; the hook hears four ranges in the order
	 * they were persisted, then one fence.
	 */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_persist(&tp.pool, seg + 4096, 256) == 0);
	CHECK(pmh_persist(&tp.pool, log, 16) == 0);
	CHECK(pmh_persist(&tp.pool, log + 10 * PMH_LINE_BYTES, 64) == 0);
	CHECK(pmh_persist(&tp.pool, seg, 8) == 0);
	CHECK(st->syncs == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	CHECKF(st->syncs == 2, "%llu msync calls for two groups of ranges",
		   (unsigned long long) st->syncs);
	check_stats(st, 4, 256 + 16 + 64 + 8, 4 + 1 + 1 + 1, 1, 3, 1,
				"msync batch of four ranges");
	CHECKF(hl.nranges == 4 && hl.nfences == 1 && hl.nevents == 5 &&
		   hl.off[0] == bucket_offset(&tp, 1, 0) + 4096 &&
		   hl.off[1] == PMH_LOG_OFFSET &&
		   hl.off[2] == PMH_LOG_OFFSET + 10 * PMH_LINE_BYTES &&
		   hl.off[3] == bucket_offset(&tp, 1, 0) && hl.len[4] == 0,
		   "hook: %d ranges, %d fences", hl.nranges, hl.nfences);

	/* every bucket of a segment, last to first: one call */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	for (i = PMH_SEG_BUCKETS - 1; i >= 0; i--)
		CHECK(pmh_persist(&tp.pool, seg + i * PMH_LINE_BYTES + 8, 8) == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	CHECKF(st->syncs == 1 && st->persists == PMH_SEG_BUCKETS && st->fences == 1,
		   "a segment's buckets: %llu msync calls, %llu ranges, %llu fences",
		   (unsigned long long) st->syncs, (unsigned long long) st->persists,
		   (unsigned long long) st->fences);

	/*
	 * More than PMH_BATCH_RANGES ranges: the full batch is flushed early
	 * (one call), the rest at the end (another), one fence.
	 */
	hook_start(&tp, &hl);
	pmh_batch_begin(&tp.pool);
	for (i = 0; i < 100; i++)
		CHECK(pmh_persist(&tp.pool, seg + i * PMH_CACHELINE_BYTES, 16) == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	CHECKF(st->syncs == 2 && st->persists == 100 && st->fences == 1,
		   "100 ranges: %llu msync calls, %llu ranges, %llu fences",
		   (unsigned long long) st->syncs, (unsigned long long) st->persists,
		   (unsigned long long) st->fences);

	/* outside a batch: one call per persist, as before */
	hook_start(&tp, &hl);
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(pmh_persist(&tp.pool, seg + 16, 16) == 0);
	CHECK(st->syncs == 2 && st->fences == 2);

	tp.pool.is_pmem = save_pmem;
	hook_stop(&tp);
	tpool_close(&tp);
}

/*
 * A batch whose msync fails: pmh_batch_end returns -1 with errno set (an
 * msync over a range that is not mapped fails with ENOMEM), fences nothing
 * and leaves the pool out of batch mode; so does pmh_log_clear_slots, also
 * when the failure comes from a full batch flushed early.  The pool here
 * is an anonymous mapping of 128 log lines with a hole where lines 16 to
 * 31 would be.
 */
void
test_batch_error(void)
{
	PmhPool		pool;
	size_t		len = PMH_LOG_OFFSET + 128 * PMH_LINE_BYTES;
	char	   *base;
	uint32		slots[70];
	int			i;

	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				-1, 0);
	if (!CHECKF(base != MAP_FAILED, "mmap: %m"))
		return;
	CHECK(munmap(base + PMH_LOG_OFFSET + 4096, 4096) == 0);
	memset(&pool, 0, sizeof(pool));
	pool.base = base;
	pool.mapped_len = len;
	pool.is_pmem = 0;

	/* either side of the hole alone is fine */
	pmh_batch_begin(&pool);
	CHECK(pmh_persist(&pool, base + PMH_LOG_OFFSET, 16) == 0);
	CHECK(pmh_batch_end(&pool) == 0);
	CHECK(pool.stats.syncs == 1 && pool.stats.fences == 1);

	/* both: one merged call across the hole, which fails */
	memset(&pool.stats, 0, sizeof(pool.stats));
	pmh_batch_begin(&pool);
	CHECK(pmh_persist(&pool, base + PMH_LOG_OFFSET, 16) == 0);
	CHECK(pmh_persist(&pool, base + PMH_LOG_OFFSET + 8192, 16) == 0);
	errno = 0;
	CHECK(pmh_batch_end(&pool) == -1 && errno == ENOMEM);
	CHECK(pool.batching == 0 && pool.nbatch == 0 && pool.stats.fences == 0);

	/* pmh_log_clear_slots: lines 0 and 40 */
	memset(&pool.stats, 0, sizeof(pool.stats));
	pmh_log_line(&pool, 40)[3].tag = 77;
	slots[0] = 3;
	slots[1] = 40 * PMH_BUCKET_SLOTS + 3;
	errno = 0;
	CHECK(pmh_log_clear_slots(&pool, slots, 2) == -1 && errno == ENOMEM);
	CHECK(pool.batching == 0 && pool.stats.fences == 0);
	CHECK(pmh_log_line(&pool, 40)[3].tag == 0);

	/*
	 * 70 lines, the first 64 across the hole: the early flush of the full
	 * batch fails inside pmh_persist
	 */
	memset(&pool.stats, 0, sizeof(pool.stats));
	for (i = 0; i < 70; i++)
		slots[i] = (uint32) ((i < 16 ? i : i + 16) * PMH_BUCKET_SLOTS);
	errno = 0;
	CHECK(pmh_log_clear_slots(&pool, slots, 70) == -1 && errno == ENOMEM);
	CHECK(pool.batching == 0 && pool.stats.fences == 0);
	CHECKF(pool.stats.persists == PMH_BATCH_RANGES,
		   "%llu ranges accounted before the failure",
		   (unsigned long long) pool.stats.persists);

	(void) munmap(base, PMH_LOG_OFFSET + 4096);
	(void) munmap(base + PMH_LOG_OFFSET + 8192, len - PMH_LOG_OFFSET - 8192);
}

/*
 * The pool's state line: a new pool has no crash behind it; an open by a
 * server that counted more crashes sets the stale flag for good (flag
 * first, then the count); unknown flag bits count as stale.
 */
void
test_pool_state(void)
{
	TPool		tp;
	PmhPersistStats *st;
	PmhPoolState *ps;
	bool		stale = true;

	if (!tpool_create(&tp, "state", 1))
		return;
	st = &tp.pool.stats;
	ps = pmh_pool_state(&tp.pool);
	CHECK((char *) ps >= tp.pool.base + sizeof(PmhPoolHeader) &&
		  (char *) (ps + 1) <= tp.pool.base + PMH_HEADER_BYTES);
	CHECK(PMH_STATE_OFFSET % PMH_CACHELINE_BYTES == 0);

	memset(st, 0, sizeof(*st));
	CHECK(pmh_pool_state_init(&tp.pool, 5) == 0);
	CHECK(ps->crash_count == 5 && ps->flags == PMH_STATE_KEPT);
	CHECK(st->persists == 1 && st->cachelines == 1 && st->fences == 1);
	/* the header's checksum does not cover the state */
	CHECK(pmh_header_validate((PmhPoolHeader *) tp.pool.base,
							  tp.pool.mapped_len) == PMH_HEADER_OK);

	/* the same server count: nothing written, not stale */
	memset(st, 0, sizeof(*st));
	CHECK(pmh_pool_note_crashes(&tp.pool, 5, &stale) == 0);
	CHECK(!stale && st->persists == 0);

	/* a crash since: flag, then count, each persisted */
	memset(st, 0, sizeof(*st));
	CHECK(pmh_pool_note_crashes(&tp.pool, 6, &stale) == 0);
	CHECK(stale && ps->flags == (PMH_STATE_KEPT | PMH_STATE_STALE) &&
		  ps->crash_count == 6);
	CHECK(st->persists == 2 && st->fences == 2);

	/* the flag stays, with no more writes */
	memset(st, 0, sizeof(*st));
	stale = false;
	CHECK(pmh_pool_note_crashes(&tp.pool, 6, &stale) == 0);
	CHECK(stale && st->persists == 0);

	/* a crash between the two stores: the flag is there, the count old */
	ps->crash_count = 5;
	stale = false;
	CHECK(pmh_pool_note_crashes(&tp.pool, 6, &stale) == 0);
	CHECK(stale && ps->flags == (PMH_STATE_KEPT | PMH_STATE_STALE) &&
		  ps->crash_count == 6);

	/* garbage in the flags counts as stale and is left alone */
	ps->flags = UINT64CONST(0x40);
	stale = false;
	CHECK(pmh_pool_note_crashes(&tp.pool, 6, &stale) == 0);
	CHECK(stale && ps->flags == UINT64CONST(0x40));

	/* a pool made before the state line (all zero): history unknown */
	memset(ps, 0, sizeof(*ps));
	stale = false;
	CHECK(pmh_pool_note_crashes(&tp.pool, 0, &stale) == 0);
	CHECK(stale);
	CHECK(pmh_pool_note_crashes(&tp.pool, 6, &stale) == 0);
	CHECK(stale && ps->crash_count == 6);

	/* a re-initialised state (REINDEX makes a new pool) is clean again */
	CHECK(pmh_pool_state_init(&tp.pool, 7) == 0);
	CHECK(pmh_pool_note_crashes(&tp.pool, 7, &stale) == 0);
	CHECK(!stale);

	/*
	 * A pool being rebuilt counts as stale, and stays stale once rebuilt
	 * (the rebuild sets STALE as it clears REBUILD); setting and clearing
	 * are persisted, and leave the other flags alone.
	 */
	{
		uint64		persists = tp.pool.stats.persists;

		CHECK(pmh_pool_state_set(&tp.pool, PMH_STATE_REBUILD, 0) == 0);
		CHECK(tp.pool.stats.persists == persists + 1);
		CHECK(ps->flags == (PMH_STATE_KEPT | PMH_STATE_REBUILD));
		CHECK(pmh_pool_note_crashes(&tp.pool, 7, &stale) == 0);
		CHECK(stale);
		CHECK(pmh_pool_state_set(&tp.pool, PMH_STATE_STALE,
								 PMH_STATE_REBUILD) == 0);
		CHECK(ps->flags == (PMH_STATE_KEPT | PMH_STATE_STALE));
		CHECK(pmh_pool_note_crashes(&tp.pool, 7, &stale) == 0);
		CHECK(stale && ps->crash_count == 7);
		CHECK(pmh_pool_state_set(&tp.pool, PMH_STATE_WALBUILD, 0) == 0);
		CHECK(pmh_pool_state_set(&tp.pool, 0, PMH_STATE_WALBUILD) == 0);
		CHECK(ps->flags == (PMH_STATE_KEPT | PMH_STATE_STALE));
	}
	tpool_close(&tp);
}

/* the mark hook of test_lazy_writeback: counts calls, sets the mark */
static int	lazy_hook_calls;
static int	lazy_hook_fail;
static const uint64 lazy_boot[2] = {UINT64CONST(0x1111), UINT64CONST(0x2222)};

static int
lazy_mark_hook(PmhPool *pool, void *arg)
{
	bool	   *marked = (bool *) arg;

	lazy_hook_calls++;
	if (lazy_hook_fail)
	{
		errno = EIO;
		return -1;
	}
	if (pmh_pool_mark(pool, lazy_boot) != 0)
		return -1;
	*marked = true;
	return 0;
}

/*
 * Lazy write-back at the choke point (an ordinary file): no msync for a
 * persist or a batch once the mark is set; the first persist after it was
 * cleared sets it (one sync, in the hook) before returning, and a failure
 * there is the persist's failure; pmh_sync_now still syncs; the mark reads
 * back as trusted by the same boot only.  Persistent memory ignores the
 * lazy flag.
 */
void
test_lazy_writeback(void)
{
	TPool		tp;
	PmhPersistStats *st;
	PmhPoolMark *mark;
	bool		marked = false;
	char	   *seg;
	static const uint64 other[2] = {UINT64CONST(0x1111), UINT64CONST(0x3333)};
	int			save_pmem;

	if (!CHECK(tpool_create(&tp, "lazy", 2)))
		return;
	st = &tp.pool.stats;
	seg = (char *) pmh_seg_header(&tp.pool, 1);
	mark = (PmhPoolMark *) (tp.pool.base + PMH_MARK_OFFSET);
	save_pmem = tp.pool.is_pmem;
	tp.pool.is_pmem = 0;
	tp.pool.lazy = 1;
	tp.pool.marked = &marked;
	tp.pool.mark_hook = lazy_mark_hook;
	tp.pool.mark_hook_arg = &marked;
	memset(st, 0, sizeof(*st));
	lazy_hook_calls = 0;
	lazy_hook_fail = 0;

	/* a clean pool: the first persist sets the mark, with one sync */
	CHECK(pmh_pool_mark_ok(mark, lazy_boot));
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(lazy_hook_calls == 1 && marked);
	CHECK(st->syncs == 1 && st->deferred == 1);
	CHECK(mark->boot[0] == lazy_boot[0] && mark->boot[1] == lazy_boot[1]);
	CHECK(pmh_pool_mark_ok(mark, lazy_boot));
	CHECK(!pmh_pool_mark_ok(mark, other));

	/* marked: persists and batches sync nothing */
	CHECK(pmh_persist(&tp.pool, seg + 256, 256) == 0);
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(pmh_persist(&tp.pool, seg + 8192, 16) == 0);
	CHECK(pmh_batch_end(&tp.pool) == 0);
	CHECK(lazy_hook_calls == 1 && st->syncs == 1 && st->deferred == 4);
	/* the mark is a range and a fence of its own */
	CHECK(st->persists == 5 && st->fences == 4);

	/* cleared by a write-back: the next persist marks again */
	marked = false;
	CHECK(pmh_pool_mark(&tp.pool, NULL) == 0);
	CHECK(pmh_pool_mark_ok(mark, other));	/* zero: trusted by any boot */
	CHECK(st->syncs == 2);
	pmh_batch_begin(&tp.pool);
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(lazy_hook_calls == 1);	/* nothing yet: the batch collects */
	CHECK(pmh_batch_end(&tp.pool) == 0);
	CHECK(lazy_hook_calls == 2 && marked && st->syncs == 3);

	/* a mark that cannot be set fails the persist, and is tried again */
	marked = false;
	lazy_hook_fail = 1;
	errno = 0;
	CHECK(pmh_persist(&tp.pool, seg, 16) == -1 && errno == EIO);
	CHECK(!marked);
	lazy_hook_fail = 0;
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0 && marked);
	CHECK(lazy_hook_calls == 4);

	/* pmh_sync_now ignores the lazy mode */
	CHECK(pmh_sync_now(&tp.pool, seg, 64) == 0);
	CHECK(st->syncs == 5);

	/* no_persist (a build) neither syncs nor marks */
	marked = false;
	tp.pool.no_persist = 1;
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(lazy_hook_calls == 4 && !marked);
	tp.pool.no_persist = 0;

	/* on persistent memory the lazy flag changes nothing */
	tp.pool.is_pmem = 1;
	CHECK(pmh_persist(&tp.pool, seg, 16) == 0);
	CHECK(lazy_hook_calls == 4 && !marked && st->syncs == 5);

	tp.pool.is_pmem = save_pmem;
	tp.pool.lazy = 0;
	tpool_close(&tp);
}
