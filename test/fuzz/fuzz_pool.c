/*-------------------------------------------------------------------------
 *
 * fuzz_pool.c
 *	  libFuzzer target: open and validate a pool image built from the
 *	  input, the way the server does (pmhashpool.c, pmhashshmem.c):
 *	  pmh_header_validate, pmh_pool_note_crashes, pmh_recover, the metadata
 *	  of every segment, and optionally the backup log back into D-buckets
 *	  and relocated by the core's write path (src/core/pmh_writepath.c:
 *	  log recovery, splitting and extending as the core asks), then
 *	  recovery once more.  Nothing may crash, hang or touch memory outside
 *	  the image; a header is accepted exactly when it is valid; when
 *	  recovery accepts the image, the structure must satisfy the invariants
 *	  of fuzz_common.c's checkers (the log's line states too, after the
 *	  replay), a second recovery must find nothing to repair, and lookups
 *	  must return exactly the live entries.
 *
 * A pool is at least 528 kB (header, fixed backup log, one segment), so the
 * input is not the image itself but a script that builds it:
 *
 *	byte 0	 segments in the image (mod FP_MAX_SEGS)
 *	byte 1	 flags: FP_VALID_HEADER, FP_FIX_CHECKSUM, FP_STATE_LINE,
 *			 FP_REPLAY_LOG, FP_STATE_BEHIND; bits 4-6 the length mode
 *	byte 2	 length tweak (see image_length)
 *	byte 3	 the crash count the "server" has seen
 *	then operations until the input ends: an op byte (mod FP_NOPS) and its
 *	arguments (missing bytes read as zero); writes are clipped to the image.
 *
 * FUZZ_VERBOSE=1 in the environment prints the decoded script.
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz_common.h"

#include <stdlib.h>

#include "fuzz_format.h"

/* inputs are bounded by these, to keep each run short */
#define FP_MAX_FILL			8192	/* entries written by FILL */
#define FP_MAX_LOG			2048	/* log entries written by LOG */
#define FP_MAX_RESTORE		4096	/* log entries put back in D-buckets */

typedef struct FpImage
{
	char	   *img;
	size_t		len;
	uint32		nseg;			/* segments touched by writes (incl. partial) */
	uint32		filled;
	uint32		logged;
} FpImage;

/* offset and size of each header field, for FP_OP_HEADER */
static const struct
{
	size_t		off;
	int			size;
}			hdr_fields[] =
{
	{offsetof(PmhPoolHeader, magic), 8},
	{offsetof(PmhPoolHeader, version), 4},
	{offsetof(PmhPoolHeader, header_bytes), 4},
	{offsetof(PmhPoolHeader, pool_id), 8},
	{offsetof(PmhPoolHeader, db_oid), 4},
	{offsetof(PmhPoolHeader, spc_oid), 4},
	{offsetof(PmhPoolHeader, rel_node), 4},
	{offsetof(PmhPoolHeader, index_oid), 4},
	{offsetof(PmhPoolHeader, line_bytes), 4},
	{offsetof(PmhPoolHeader, entry_bytes), 4},
	{offsetof(PmhPoolHeader, bucket_slots), 4},
	{offsetof(PmhPoolHeader, seg_buckets), 4},
	{offsetof(PmhPoolHeader, placement), 4},
	{offsetof(PmhPoolHeader, seg_bytes), 4},
	{offsetof(PmhPoolHeader, seg_offset), 8},
	{offsetof(PmhPoolHeader, log_offset), 8},
	{offsetof(PmhPoolHeader, log_lines), 4},
	{offsetof(PmhPoolHeader, timeline), 4},
	{offsetof(PmhPoolHeader, epoch), 4},
	{offsetof(PmhPoolHeader, flags), 4},
	{offsetof(PmhPoolHeader, checksum), 4},
};

/* copy n bytes to offset off of the image, clipped to its end */
static void
put(FpImage *im, uint64 off, const void *src, size_t n)
{
	if (off >= im->len)
		return;
	if (n > im->len - off)
		n = im->len - off;
	memcpy(im->img + off, src, n);
}

/* the same, for one 64-bit word */
static void
put64(FpImage *im, uint64 off, uint64 v)
{
	put(im, off, &v, sizeof(v));
}

/* offset of segment s in the image */
static uint64
seg_off(uint32 s)
{
	return PMH_SEG_OFFSET + (uint64) s * PMH_SEG_BYTES;
}

/* read a 64-bit word of the image (0 past its end) */
static uint64
get64(const FpImage *im, uint64 off)
{
	uint64		v = 0;

	if (off <= im->len && sizeof(v) <= im->len - off)
		memcpy(&v, im->img + off, sizeof(v));
	return v;
}

/* a segment number from an input byte */
static uint32
pick_seg(const FpImage *im, uint8 b)
{
	return im->nseg == 0 ? 0 : b % im->nseg;
}

/*
 * The image length: the pool of nseg segments, or something near it (mode
 * in bits 4-6 of the flags): shorter or longer by a few bytes, tiny, or
 * ending inside the header, the log or the first segment.
 */
static size_t
image_length(uint32 nseg, int mode, uint8 tweak)
{
	size_t		exact = pmh_pool_bytes(nseg);

	switch (mode)
	{
		case 1:
			return exact > (size_t) tweak + 1 ? exact - tweak - 1 : 0;
		case 2:
			return exact + tweak + 1;
		case 3:
			return (size_t) tweak * 17;
		case 4:
			return PMH_HEADER_BYTES + (size_t) tweak * 2048;
		case 5:
			return PMH_SEG_OFFSET + (size_t) tweak * 64;
		default:
			return exact;
	}
}

/* hash for entry i of a FILL: owner's prefix on top unless "foreign" */
static uint64
fill_hash(uint64 owner_word, uint8 seed, uint32 i, bool foreign)
{
	uint64		h = fz_mix(((uint64) seed << 32) | i);
	int			depth = pmh_segword_depth(owner_word);

	if (depth > PMH_MAX_DEPTH || !pmh_segword_is_valid(owner_word))
		return h;
	if (depth > 0)
	{
		h = (pmh_segword_prefix(owner_word) << (64 - depth)) |
			(h & (~UINT64CONST(0) >> depth));
		if (foreign)
			h ^= UINT64CONST(1) << 63;
	}
	return h;
}

/*
 * FP_OP_FILL: write count entries into segment s from a starting slot on,
 * with hashes of the prefix of the owner segment's word (as read from the
 * image), some dead, torn, duplicated or foreign as "kind" says.
 */
static void
op_fill(FpImage *im, FzIn *in)
{
	uint32		s = pick_seg(im, fz_u8(in));
	uint32		count = fz_u16(in) % (PMH_SEG_SLOTS + 1);
	uint8		seed = fz_u8(in);
	uint8		kind = fz_u8(in);
	uint32		ownerseg = pick_seg(im, fz_u8(in));
	uint64		owner_word = get64(im, seg_off((kind & FP_FILL_OWN) ? s : ownerseg));
	uint32		first = (kind & FP_FILL_OFFSET) ? ((uint32) seed * PMH_BUCKET_SLOTS) % PMH_SEG_SLOTS : 0;
	uint32		i;

	count = Min(count, FP_MAX_FILL - im->filled);
	im->filled += count;
	fz_trace("FILL seg %u count %u seed %u kind %02x owner %u", s, count, seed,
			 kind, ownerseg);
	for (i = 0; i < count; i++)
	{
		uint32		slot = (first + i) % PMH_SEG_SLOTS;
		uint32		hi = (kind & FP_FILL_ONEHASH) ? 0 : (kind & FP_FILL_DUPS) ? i / 4 : i;
		bool		odd = (kind & FP_FILL_DEAD) && i % 7 == 3;
		PmhEntry	e;

		e.hash = fill_hash(owner_word, seed, hi, odd && (i / 7) % 4 == 3);
		e.tag = pmh_tag_make(e.hash, (uint32) i, (uint16) (1 + seed));
		if (odd)
		{
			switch ((i / 7) % 4)
			{
				case 0:
					e.tag = 0;	/* deleted */
					break;
				case 1:
					e.tag ^= UINT64CONST(0xff) << 48;	/* torn: fingerprint copy */
					break;
				case 2:
					e.tag &= ~UINT64CONST(0xffff);	/* offset 0 */
					break;
				default:
					break;		/* foreign prefix: left behind by a split */
			}
		}
		put(im, seg_off(s) + PMH_LINE_BYTES + (uint64) slot * PMH_ENTRY_BYTES,
			&e, sizeof(e));
	}
}

/*
 * FP_OP_LOG: write n entries into a line of the fixed backup log: copies of
 * a segment's entries (which recovery finds in their segment) or new ones.
 */
static void
op_log(FpImage *im, FzIn *in)
{
	uint32		line = fz_u16(in) % PMH_LOG_LINES;
	uint32		first = fz_u8(in) % PMH_BUCKET_SLOTS;
	uint32		n = fz_u8(in) % (PMH_BUCKET_SLOTS + 1);
	uint8		seed = fz_u8(in);
	uint8		src = fz_u8(in);
	uint32		i;

	n = Min(n, PMH_BUCKET_SLOTS - first);
	n = Min(n, FP_MAX_LOG - im->logged);
	im->logged += n;
	fz_trace("LOG line %u first %u n %u seed %u src %02x", line, first, n, seed, src);
	for (i = 0; i < n; i++)
	{
		PmhEntry	e;
		uint64		off = PMH_LOG_OFFSET + (uint64) line * PMH_LINE_BYTES +
			(uint64) (first + i) * PMH_ENTRY_BYTES;

		if (src & 0x80)
		{
			uint64		from = seg_off(pick_seg(im, src)) + PMH_LINE_BYTES +
				(((uint64) seed * PMH_BUCKET_SLOTS + i) % PMH_SEG_SLOTS) * PMH_ENTRY_BYTES;

			e.hash = get64(im, from);
			e.tag = get64(im, from + 8);
		}
		else
		{
			e.hash = fz_mix(((uint64) seed << 40) | ((uint64) line << 8) | i);
			if (src & 0x40)
				e.hash = (e.hash & ~UINT64CONST(0xffff)) | (src & 0x3f);
			e.tag = pmh_tag_make(e.hash, line, (uint16) (1 + i + (src & 0x0f)));
		}
		put(im, off, &e, sizeof(e));
	}
}

/* build the image from the script; returns false for an empty input */
static bool
build_image(FpImage *im, FzIn *in, uint8 *flags_out, uint8 *crash_count)
{
	uint32		nseg;
	uint8		flags;
	uint8		tweak;
	PmhPoolHeader hdr;

	if (in->n < 4)
		return false;
	nseg = fz_u8(in) % FP_MAX_SEGS;
	flags = fz_u8(in);
	tweak = fz_u8(in);
	*crash_count = fz_u8(in);
	*flags_out = flags;

	im->len = image_length(nseg, (flags >> 4) & 7, tweak);
	im->img = fz_image_alloc(im->len);
	im->nseg = im->len > PMH_SEG_OFFSET ?
		(uint32) ((im->len - PMH_SEG_OFFSET + PMH_SEG_BYTES - 1) / PMH_SEG_BYTES) : 0;
	fz_trace("image: %zu bytes, %u segments, flags %02x, crash count %u",
			 im->len, im->nseg, flags, *crash_count);

	if (flags & FP_VALID_HEADER)
	{
		pmh_header_init(&hdr, UINT64CONST(0xfeedf00d), 5, 0, 16384, 16385);
		put(im, 0, &hdr, sizeof(hdr));
	}
	if (flags & FP_STATE_LINE)
	{
		PmhPoolState st;

		st.crash_count = (flags & FP_STATE_BEHIND) ? (uint64) *crash_count + 1 : *crash_count;
		st.flags = PMH_STATE_KEPT;
		put(im, PMH_STATE_OFFSET, &st, sizeof(st));
	}

	while (in->n > 0)
	{
		uint8		op = fz_u8(in) % FP_NOPS;

		switch (op)
		{
			case FP_OP_RAW:
				{
					uint64		off = fz_u32(in) % Max(im->len, 1);
					uint32		n = fz_u8(in) + 1;

					n = (uint32) Min(n, in->n);
					fz_trace("RAW off %llu n %u", (unsigned long long) off, n);
					put(im, off, in->p, n);
					in->p += n;
					in->n -= n;
					break;
				}
			case FP_OP_HEADER:
				{
					int			f = fz_u8(in) % (int) lengthof(hdr_fields);
					uint64		v = fz_u64(in);

					fz_trace("HEADER field %d = %llx", f, (unsigned long long) v);
					put(im, hdr_fields[f].off, &v, hdr_fields[f].size);
					break;
				}
			case FP_OP_PRIMARY:
				{
					uint32		s = pick_seg(im, fz_u8(in));
					int			depth = fz_u8(in) % (PMH_MAX_DEPTH + 1);
					uint64		prefix = fz_u64(in);

					prefix = depth == 0 ? 0 : prefix & ((UINT64CONST(1) << depth) - 1);
					fz_trace("PRIMARY seg %u depth %d prefix %llx", s, depth,
							 (unsigned long long) prefix);
					put64(im, seg_off(s), pmh_segword_make(depth, prefix));
					break;
				}
			case FP_OP_OVERFLOW:
				{
					uint32		s = pick_seg(im, fz_u8(in));

					fz_trace("OVERFLOW seg %u", s);
					put64(im, seg_off(s), pmh_segword_make_overflow());
					break;
				}
			case FP_OP_LOGSEG:
				{
					uint32		s = pick_seg(im, fz_u8(in));
					uint32		ext = fz_u16(in) % PMH_LOG_MAX_EXTS;

					/* mostly small extension numbers */
					if (ext >= 64)
						ext %= 4;
					fz_trace("LOGSEG seg %u ext %u", s, ext);
					put64(im, seg_off(s), pmh_segword_make_log(ext));
					break;
				}
			case FP_OP_WORD:
				{
					uint32		s = pick_seg(im, fz_u8(in));
					uint64		w = fz_u64(in);

					fz_trace("WORD seg %u %016llx", s, (unsigned long long) w);
					put64(im, seg_off(s), w);
					break;
				}
			case FP_OP_LINK:
				{
					uint32		s = pick_seg(im, fz_u8(in));
					uint32		next = fz_u32(in);

					/* mostly links to segments of the image */
					if (next >= 0x10000)
						next = pick_seg(im, (uint8) next) + 1;
					fz_trace("LINK seg %u -> %u", s, next);
					put64(im, seg_off(s) + 8, next);
					break;
				}
			case FP_OP_FILL:
				op_fill(im, in);
				break;
			case FP_OP_ENTRY:
				{
					uint32		s = pick_seg(im, fz_u8(in));
					uint32		slot = fz_u16(in) % PMH_SEG_SLOTS;
					PmhEntry	e;
					uint64		t = fz_u64(in);
					uint8		mode = fz_u8(in);

					e.hash = fz_u64(in);
					e.tag = (mode & 1) ? t : pmh_tag_make(e.hash, (uint32) (t >> 16), (uint16) t);
					fz_trace("ENTRY seg %u slot %u (%016llx, %016llx)", s, slot,
							 (unsigned long long) e.hash, (unsigned long long) e.tag);
					put(im, seg_off(s) + PMH_LINE_BYTES + (uint64) slot * PMH_ENTRY_BYTES,
						&e, sizeof(e));
					break;
				}
			case FP_OP_LOG:
				op_log(im, in);
				break;
			case FP_OP_STATE:
				{
					PmhPoolState st;

					st.crash_count = fz_u8(in);
					st.flags = fz_u8(in) % 5;
					fz_trace("STATE crash count %llu flags %llu",
							 (unsigned long long) st.crash_count,
							 (unsigned long long) st.flags);
					put(im, PMH_STATE_OFFSET, &st, sizeof(st));
					break;
				}
			case FP_OP_ZERO:
				{
					uint32		s = pick_seg(im, fz_u8(in));
					static const char zeros[PMH_SEG_BYTES];

					fz_trace("ZERO seg %u", s);
					put(im, seg_off(s), zeros, PMH_SEG_BYTES);
					break;
				}
			case FP_OP_COPY:
				{
					uint32		from = pick_seg(im, fz_u8(in));
					uint32		to = pick_seg(im, fz_u8(in));
					bool		whole = fz_u8(in) & 1;
					uint64		skip = whole ? 0 : PMH_LINE_BYTES;

					fz_trace("COPY seg %u -> %u%s", from, to, whole ? " (whole)" : "");
					if (from != to && seg_off(from) + PMH_SEG_BYTES <= im->len)
						put(im, seg_off(to) + skip, im->img + seg_off(from) + skip,
							PMH_SEG_BYTES - skip);
					break;
				}
		}
	}

	if ((flags & FP_FIX_CHECKSUM) && im->len >= sizeof(PmhPoolHeader))
	{
		memcpy(&hdr, im->img, sizeof(hdr));
		hdr.checksum = pmh_header_checksum(&hdr);
		put(im, 0, &hdr, sizeof(hdr));
	}
	return true;
}

/*
 * What pmh_header_validate must say, worked out independently: a header
 * is valid iff the file holds it, its magic, version, checksum and layout
 * are this build's, and the file is whole segments (at least one).
 */
static bool
header_should_be_valid(const PmhPoolHeader *h, size_t len)
{
	if (len < PMH_HEADER_BYTES)
		return false;
	return h->magic == PMH_MAGIC && h->version == PMH_LAYOUT_VERSION &&
		h->checksum == pmh_header_checksum(h) &&
		h->header_bytes == PMH_HEADER_BYTES && h->line_bytes == PMH_LINE_BYTES &&
		h->entry_bytes == PMH_ENTRY_BYTES && h->bucket_slots == PMH_BUCKET_SLOTS &&
		h->seg_buckets == PMH_SEG_BUCKETS &&
		(h->placement == PMH_PLACEMENT_ANY || h->placement == PMH_PLACEMENT_WINDOW8) &&
		h->seg_bytes == PMH_SEG_BYTES && h->seg_offset == PMH_SEG_OFFSET &&
		h->log_offset == PMH_LOG_OFFSET && h->log_lines == PMH_LOG_LINES &&
		len >= PMH_SEG_OFFSET + PMH_SEG_BYTES &&
		(len - PMH_SEG_OFFSET) % PMH_SEG_BYTES == 0;
}

/*
 * Look up every hash of the sorted live entries: the segment part of the
 * answer is exactly the live entries of that hash (as a multiset), and
 * D-buckets are empty.
 */
static void
check_lookups(const FzPool *fp, const FzPair *live, size_t n, const char *what)
{
	int			cap = 64;
	uint64	   *tags = pg_malloc(cap * sizeof(uint64));
	size_t		i;
	size_t		j;

	for (i = 0; i < n; i = j)
	{
		int			found;
		int			nseg;
		int			k;

		for (j = i; j < n && live[j].hash == live[i].hash; j++)
			;
		found = fz_lookup(fp, live[i].hash, tags, cap, &nseg);
		if (found > cap)
		{
			cap = found * 2;
			tags = pg_realloc(tags, cap * sizeof(uint64));
			found = fz_lookup(fp, live[i].hash, tags, cap, &nseg);
		}
		FZ_ASSERT(found == (int) (j - i) && nseg == found,
				  "%s: hash %016llx: lookup found %d entries (%d in segments), %d are live",
				  what, (unsigned long long) live[i].hash, found, nseg, (int) (j - i));
		qsort(tags, found, sizeof(uint64), fz_cmp_u64);
		for (k = 0; k < found; k++)
			FZ_ASSERT(tags[k] == live[i + k].tag,
					  "%s: hash %016llx: lookup found tag %016llx, the segment holds %016llx",
					  what, (unsigned long long) live[i].hash,
					  (unsigned long long) tags[k], (unsigned long long) live[i + k].tag);
	}
	free(tags);
}

/* is (hash, tag) in a sorted array? */
static bool
seen_has(const FzPair *v, size_t n, uint64 hash, uint64 tag)
{
	FzPair		key;

	key.hash = hash;
	key.tag = tag;
	return n > 0 && bsearch(&key, v, n, sizeof(FzPair), fz_cmp_pair) != NULL;
}

/* recovery must find nothing to repair in a pool it just recovered */
static void
check_recovery_idempotent(FzPool *fp, const PmhRecoveryResult *first, const char *what)
{
	uint64		nseg = fp->nseg;
	PmhSegRole *roles = pg_malloc(Max(nseg, 1) * sizeof(PmhSegRole));
	uint32	   *owner = pg_malloc(Max(nseg, 1) * sizeof(uint32));
	uint64	   *scratch = pg_malloc(PMH_RECOVER_SCRATCH(Max(nseg, 1)) * sizeof(uint64));
	PmhRecoveryResult res;
	uint64		i;
	int			rc;

	rc = pmh_recover(&fp->pool, roles, owner, scratch, &res);
	FZ_ASSERT(rc == 0, "%s: recovery of a recovered pool failed: %s", what, res.error);
	FZ_ASSERT(res.orphans_cleared == 0 && res.free_zeroed == 0,
			  "%s: recovery of a recovered pool cleared %llu orphans, zeroed %llu segments",
			  what, (unsigned long long) res.orphans_cleared,
			  (unsigned long long) res.free_zeroed);
	FZ_ASSERT(res.primaries == first->primaries && res.overflows == first->overflows &&
			  res.log_exts == first->log_exts && res.global_depth == first->global_depth,
			  "%s: second recovery counts differ", what);
	for (i = 0; i < nseg; i++)
	{
		FZ_ASSERT(roles[i] == fp->role[i],
				  "%s: segment %llu: role %d, then %d", what,
				  (unsigned long long) i, (int) fp->role[i], (int) roles[i]);
		if (roles[i] == PMH_SEG_OVERFLOW)
			FZ_ASSERT(owner[i] == fp->owner[i], "%s: overflow %llu: owner %u, then %u",
					  what, (unsigned long long) i, fp->owner[i], owner[i]);
	}
	free(roles);
	free(owner);
	free(scratch);
}

/* what recovery reported agrees with the roles it gave */
static void
check_result(const FzPool *fp, const PmhRecoveryResult *res)
{
	uint64		nprim = 0;
	uint64		novf = 0;
	int			maxdepth = 0;
	uint64		i;

	for (i = 0; i < fp->nseg; i++)
	{
		if (fp->role[i] == PMH_SEG_PRIMARY)
		{
			nprim++;
			maxdepth = Max(maxdepth, pmh_segword_depth(fp->meta[i].word));
		}
		else if (fp->role[i] == PMH_SEG_OVERFLOW)
			novf++;
	}
	FZ_ASSERT(res->primaries == nprim && res->overflows == novf &&
			  res->global_depth == maxdepth && res->error[0] == '\0',
			  "recovery reported %llu primaries, %llu overflows, depth %d; the roles say %llu, %llu, %d",
			  (unsigned long long) res->primaries, (unsigned long long) res->overflows,
			  res->global_depth, (unsigned long long) nprim,
			  (unsigned long long) novf, maxdepth);
}

/*
 * Recovery changes only what it repairs: the header page and the backup
 * log read as before, so does every segment it kept; each segment with a
 * word was kept or cleared as an orphan, and the free segments it changed
 * are those it zeroed and orphans it cleared.
 */
static void
check_repairs(const FzPool *fp, const PmhRecoveryResult *res, const char *before)
{
	uint64		words = 0;
	uint64		zeroed = 0;
	uint64		i;

	FZ_ASSERT(memcmp(fp->pool.base, before, PMH_SEG_OFFSET) == 0,
			  "recovery changed the header page or the backup log");
	for (i = 0; i < fp->nseg; i++)
	{
		size_t		off = pmh_pool_bytes(i);
		const PmhSegHeader *h = (const PmhSegHeader *) (before + off);
		bool		same = memcmp(fp->pool.base + off, before + off, PMH_SEG_BYTES) == 0;

		if (h->word != 0)
			words++;
		if (fp->role[i] != PMH_SEG_FREE)
			FZ_ASSERT(same, "recovery changed segment %llu, which it kept (role %d)",
					  (unsigned long long) i, (int) fp->role[i]);
		else if (!same)
			zeroed++;
	}
	FZ_ASSERT(words == res->primaries + res->overflows + res->log_exts + res->orphans_cleared,
			  "%llu segments have a word; recovery kept %llu + %llu + %u and cleared %llu",
			  (unsigned long long) words, (unsigned long long) res->primaries,
			  (unsigned long long) res->overflows, res->log_exts,
			  (unsigned long long) res->orphans_cleared);
	/* an orphan with empty buckets is cleared, but not zeroed */
	FZ_ASSERT(zeroed >= res->free_zeroed &&
			  zeroed <= res->free_zeroed + res->orphans_cleared,
			  "recovery changed %llu free segments and reports %llu zeroed, %llu orphans",
			  (unsigned long long) zeroed, (unsigned long long) res->free_zeroed,
			  (unsigned long long) res->orphans_cleared);
}

/* the live log slots log recovery found (pmh_wp_log_recover) */
typedef struct FpFound
{
	uint32	   *slots;
	uint32		n;
	uint32		cap;
} FpFound;

/* pmh_wp_log_recover's "found": remember the slot */
static void
note_found(void *arg, uint32 logslot, const PmhEntry *e)
{
	FpFound    *f = (FpFound *) arg;

	FZ_ASSERT(pmh_log_entry_is_live(e), "log recovery found dead slot %u", logslot);
	if (f->n == f->cap)
	{
		f->cap = Max(256, f->cap * 2);
		f->slots = pg_realloc(f->slots, f->cap * sizeof(uint32));
	}
	f->slots[f->n++] = logslot;
}

/*
 * The log replay, as the server recovers the backup log: the line states
 * from the log (pmh_wp_log_recover), then each live slot settled -- released
 * if its segment holds the entry, else put back into its D-bucket
 * (pmh_wp_recover_slot) -- up to FP_MAX_RESTORE put back (the rest stay
 * pending), then every D-bucket relocated (pmh_wp_relocate_all: splits,
 * overflow segments).  Then check that the live entries are those of
 * before plus the restored ones, and recover once more.
 */
static void
replay_log(FzPool *fp, FzPair *before, size_t nbefore)
{
	PmhWriter  *w = fz_writer(fp);
	FpFound		found;
	FzPair	   *restored = NULL;
	size_t		nrestored = 0;
	uint32		settled;
	FzPair	   *after;
	size_t		nafter;
	size_t		i;
	PmhRecoveryResult res;

	memset(&found, 0, sizeof(found));
	FZ_ASSERT(pmh_wp_log_recover(w, note_found, &found) == found.n &&
			  fp->log.pending == found.n,
			  "log recovery found %u live slots and counts %u pending",
			  found.n, fp->log.pending);
	for (settled = 0; settled < found.n && nrestored < FP_MAX_RESTORE; settled++)
	{
		/* placing may grow (and move) the image: copy the entry first */
		PmhEntry	e = *pmh_log_entry(&fp->pool, found.slots[settled]);
		bool		put_back;

		FZ_ASSERT(pmh_wp_recover_slot(w, found.slots[settled], &put_back) == PMH_WP_OK,
				  "settling log slot %u failed", found.slots[settled]);
		if (!put_back)
			continue;
		if (nrestored % 256 == 0)
			restored = pg_realloc(restored, (nrestored + 256) * sizeof(FzPair));
		restored[nrestored].hash = e.hash;
		restored[nrestored].tag = e.tag;
		nrestored++;
	}
	fz_trace("log replay: %u live log slots, %u settled, %zu entries pending again",
			 found.n, settled, nrestored);
	fz_check_structure(fp, "log entries pending");
	FZ_ASSERT(fz_check_log(fp, "log entries pending") == found.n - settled,
			  "log entries pending: %u log slots were not settled", found.n - settled);
	FZ_ASSERT(pmh_wp_relocate_all(w) == PMH_WP_OK,
			  "relocating every D-bucket failed");
	fz_check_structure(fp, "log relocated");
	FZ_ASSERT(fz_check_log(fp, "log relocated") == found.n - settled &&
			  fp->log.pending == found.n - settled,
			  "log relocated: %u log slots pending, %u not settled",
			  fp->log.pending, found.n - settled);
	if (nrestored > 0)
		qsort(restored, nrestored, sizeof(FzPair), fz_cmp_pair);

	/* every entry of before and every restored one is live, nothing else */
	after = fz_collect(fp, false, &nafter);
	for (i = 0; i < nbefore; i++)
		FZ_ASSERT(seen_has(after, nafter, before[i].hash, before[i].tag),
				  "entry (%016llx, %016llx) lost by the log replay",
				  (unsigned long long) before[i].hash, (unsigned long long) before[i].tag);
	for (i = 0; i < nrestored; i++)
		FZ_ASSERT(seen_has(after, nafter, restored[i].hash, restored[i].tag),
				  "restored log entry (%016llx, %016llx) is not in its segment",
				  (unsigned long long) restored[i].hash,
				  (unsigned long long) restored[i].tag);
	for (i = 0; i < nafter; i++)
		FZ_ASSERT(seen_has(before, nbefore, after[i].hash, after[i].tag) ||
				  seen_has(restored, nrestored, after[i].hash, after[i].tag),
				  "entry (%016llx, %016llx) appeared in the log replay",
				  (unsigned long long) after[i].hash, (unsigned long long) after[i].tag);
	check_lookups(fp, after, nafter, "after the log replay");

	/* the pool the core wrote recovers to the same entries */
	FZ_ASSERT(fz_pool_load(fp, &res) == 0,
			  "recovery after the log replay failed: %s", res.error);
	FZ_ASSERT(res.orphans_cleared == 0 && res.free_zeroed == 0,
			  "recovery after the log replay cleared %llu orphans, zeroed %llu segments",
			  (unsigned long long) res.orphans_cleared,
			  (unsigned long long) res.free_zeroed);
	check_result(fp, &res);
	fz_check_structure(fp, "recovered after the log replay");
	check_lookups(fp, after, nafter, "recovered after the log replay");
	free(after);
	free(restored);
	free(found.slots);
}

/* read FUZZ_VERBOSE once */
int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fz_verbose = fz_env_flag("FUZZ_VERBOSE");
	return 0;
}

/* one input: build, validate, recover, check */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FzIn		in;
	FpImage		im;
	uint8		flags = 0;
	uint8		crash_count = 0;
	PmhPoolHeader hdr;
	PmhHeaderStatus status;
	const char *msg;
	FzPool		fp;
	PmhRecoveryResult res;
	bool		stale = false;
	FzPair	   *live;
	size_t		nlive;
	PmhPoolState *st;
	char	   *before;

	in.p = data;
	in.n = size;
	memset(&im, 0, sizeof(im));
	if (!build_image(&im, &in, &flags, &crash_count))
		return 0;

	/* the header, read into memory as pmhash_pool_open does */
	memset(&hdr, 0, sizeof(hdr));
	if (im.len >= sizeof(hdr))
		memcpy(&hdr, im.img, sizeof(hdr));
	status = pmh_header_validate(&hdr, im.len);
	msg = pmh_header_status_string(status);
	FZ_ASSERT(msg != NULL && msg[0] != '\0', "no message for header status %d",
			  (int) status);
	FZ_ASSERT((status == PMH_HEADER_OK) == header_should_be_valid(&hdr, im.len),
			  "header of a %zu-byte image: status %d (%s)", im.len, (int) status, msg);
	/* and in place, as pmhash_check does */
	if (im.len >= sizeof(hdr))
		FZ_ASSERT(pmh_header_validate((const PmhPoolHeader *) im.img, im.len) == status,
				  "header validated in place differs");
	fz_trace("header: %s", msg);
	if (status != PMH_HEADER_OK)
	{
		free(im.img);
		return 0;
	}

	fz_pool_init(&fp, im.img, im.len, false);
	st = pmh_pool_state(&fp.pool);
	{
		uint64		old_flags = st->flags;

		FZ_ASSERT(pmh_pool_note_crashes(&fp.pool, crash_count, &stale) == 0,
				  "pmh_pool_note_crashes: %m");
		fp.stale = stale;
		FZ_ASSERT(st->crash_count == crash_count &&
				  stale == (st->flags != PMH_STATE_KEPT) &&
				  (old_flags != PMH_STATE_KEPT || st->flags == PMH_STATE_KEPT ||
				   st->flags == (PMH_STATE_KEPT | PMH_STATE_STALE)),
				  "pool state after noting crash count %u: count %llu, flags %llx (were %llx), stale %d",
				  crash_count, (unsigned long long) st->crash_count,
				  (unsigned long long) st->flags, (unsigned long long) old_flags,
				  (int) stale);
	}

	before = fz_image_alloc(fp.pool.mapped_len);
	memcpy(before, fp.pool.base, fp.pool.mapped_len);
	if (fz_pool_load(&fp, &res) != 0)
	{
		free(before);
		FZ_ASSERT(res.error[0] != '\0' && memchr(res.error, '\0', sizeof(res.error)) != NULL,
				  "recovery failed without a message: %m");
		fz_trace("recovery refuses: %s", res.error);
		fz_pool_free(&fp);
		return 0;
	}
	fz_trace("recovered: %llu primaries, %llu overflows, %u log extensions, depth %d, %llu orphans, %llu zeroed",
			 (unsigned long long) res.primaries, (unsigned long long) res.overflows,
			 res.log_exts, res.global_depth,
			 (unsigned long long) res.orphans_cleared,
			 (unsigned long long) res.free_zeroed);
	check_result(&fp, &res);
	check_repairs(&fp, &res, before);
	free(before);
	fz_check_structure(&fp, "recovered");
	check_recovery_idempotent(&fp, &res, "recovered");
	live = fz_collect(&fp, false, &nlive);
	check_lookups(&fp, live, nlive, "recovered");
	if (flags & FP_REPLAY_LOG)
		replay_log(&fp, live, nlive);
	free(live);
	fz_pool_free(&fp);
	return 0;
}
