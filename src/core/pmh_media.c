/*-------------------------------------------------------------------------
 *
 * pmh_media.c
 *	  A model of a persistent-memory device's write-combining buffer.
 *
 * The rules, simple enough to compute traces by hand:
 *
 *	- the media line is 256 B, aligned to offset 0 of its pool; an access to
 *	  [o, o + len) touches every 64 B sub-line it overlaps, and all touched
 *	  sub-lines of one 256 B line make one access to that line;
 *	- a write to a resident line is a hit: its sub-lines become dirty and
 *	  valid, the line becomes most recently used and belongs to the writer;
 *	- a write to a line not resident is a miss: the least recently used
 *	  entry is evicted if the buffer is full, and the line enters with the
 *	  written sub-lines dirty and valid;
 *	- evicting a dirty entry writes 256 B to the media, charged to its
 *	  owner; if its dirty and valid sub-lines do not cover the whole line
 *	  the device had to read the rest first (read-modify-write): 256 B more
 *	  are read.  A clean entry leaves silently;
 *	- a read of a resident line whose valid sub-lines cover it is a hit;
 *	  otherwise 256 B are read from the media (charged to the reader) and
 *	  the line becomes resident and wholly valid.
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_media.h"

#include <string.h>

#include "port/pg_bitutils.h"

/* start empty with room for nlines lines (clamped to the legal range) */
void
pmh_media_init(PmhMediaModel *m, int nlines)
{
	int			i;

	StaticAssertStmt((PMH_MEDIA_HASH_SLOTS & (PMH_MEDIA_HASH_SLOTS - 1)) == 0 &&
					 PMH_MEDIA_HASH_SLOTS >= 2 * PMH_MEDIA_MAX_LINES,
					 "the index of lines is a power of two, at most half full");
	if (nlines < 1)
		nlines = 1;
	if (nlines > PMH_MEDIA_MAX_LINES)
		nlines = PMH_MEDIA_MAX_LINES;
	memset(&m->total, 0, sizeof(m->total));
	memset(m->index, 0, sizeof(m->index));
	memset(m->lines, 0, sizeof(PmhMediaLine) * nlines);
	for (i = 0; i < nlines; i++)
	{
		m->lines[i].newer = PMH_MEDIA_NONE;
		m->lines[i].older = i + 1 < nlines ? i + 1 : PMH_MEDIA_NONE;
	}
	m->nlines = nlines;
	/*
	 * 4 x nlines slots, rounded up (at most all of them, 2 x): a small
	 * buffer's index stays in cache, and its probe runs stay short
	 */
	m->index_mask = (int) Min(pg_nextpower2_32((uint32) (4 * nlines)),
							  PMH_MEDIA_HASH_SLOTS) - 1;
	m->clock = 0;
	m->newest = PMH_MEDIA_NONE;
	m->oldest = PMH_MEDIA_NONE;
	m->free = 0;
}

/* the home slot of a line in the index */
static int
pmh_media_home(const PmhMediaModel *m, uint64 pool, uint64 line)
{
	uint64		h = (line * UINT64CONST(0x9E3779B97F4A7C15)) ^
		(pool * UINT64CONST(0xC2B2AE3D27D4EB4F));

	return (int) ((h ^ (h >> 29)) & m->index_mask);
}

/* the index slot holding entry number e (which is resident) */
static int
pmh_media_index_slot(const PmhMediaModel *m, int e)
{
	int			i = pmh_media_home(m, m->lines[e].pool, m->lines[e].line);

	while (m->index[i] != e + 1)
		i = (i + 1) & m->index_mask;
	return i;
}

/*
 * Remove entry number e from the index.  Linear probing without tombstones:
 * later entries of the probe run move back into the hole when their home
 * slot allows it.
 */
static void
pmh_media_unindex(PmhMediaModel *m, int e)
{
	const int	mask = m->index_mask;
	int			hole = pmh_media_index_slot(m, e);
	int			j = hole;

	for (;;)
	{
		int			home;

		j = (j + 1) & mask;
		if (m->index[j] == 0)
			break;
		home = pmh_media_home(m, m->lines[m->index[j] - 1].pool,
							  m->lines[m->index[j] - 1].line);
		/* it stays unless its home is cyclically outside (hole, j] */
		if (((j - home) & mask) >= ((j - hole) & mask))
		{
			m->index[hole] = m->index[j];
			hole = j;
		}
	}
	m->index[hole] = 0;
}

/* take entry number e off the LRU list */
static void
pmh_media_unlink(PmhMediaModel *m, int e)
{
	PmhMediaLine *l = &m->lines[e];

	if (l->newer != PMH_MEDIA_NONE)
		m->lines[l->newer].older = l->older;
	else
		m->newest = l->older;
	if (l->older != PMH_MEDIA_NONE)
		m->lines[l->older].newer = l->newer;
	else
		m->oldest = l->newer;
}

/* a use of entry number e: stamp it and make it the most recently used */
static void
pmh_media_touch(PmhMediaModel *m, int e)
{
	PmhMediaLine *l = &m->lines[e];

	if (l->lru != 0)
	{
		if (m->newest == e)
		{
			l->lru = ++m->clock;
			return;
		}
		pmh_media_unlink(m, e);
	}
	l->lru = ++m->clock;
	l->newer = PMH_MEDIA_NONE;
	l->older = m->newest;
	if (m->newest != PMH_MEDIA_NONE)
		m->lines[m->newest].newer = e;
	else
		m->oldest = e;
	m->newest = e;
}

/* what evicting an entry costs, without doing it */
static void
pmh_media_cost(const PmhMediaLine *l, uint64 *written, uint64 *read,
			   bool *whole)
{
	*written = 0;
	*read = 0;
	*whole = false;
	if (l->lru == 0 || l->dirty == 0)
		return;
	*written = PMH_MEDIA_LINE_BYTES;
	*whole = ((l->dirty | l->valid) & PMH_MEDIA_ALL_SUBS) == PMH_MEDIA_ALL_SUBS;
	if (!*whole)
		*read = PMH_MEDIA_LINE_BYTES;
}

/* evict an entry: write it back if dirty, charge its owner, free it */
static void
pmh_media_evict(PmhMediaModel *m, PmhMediaLine *l, PmhMediaChargeFn charge,
				void *arg)
{
	int			e = (int) (l - m->lines);
	uint64		w;
	uint64		r;
	bool		whole;

	pmh_media_cost(l, &w, &r, &whole);
	if (w > 0)
	{
		if (whole)
			m->total.whole_line_writes++;
		else
			m->total.partial_line_writes++;
		m->total.media_bytes_written += w;
		m->total.media_bytes_read += r;
		if (charge)
			charge(arg, l->owner, w, r);
	}
	pmh_media_unindex(m, e);
	pmh_media_unlink(m, e);
	memset(l, 0, sizeof(*l));
	l->newer = PMH_MEDIA_NONE;
	l->older = m->free;
	m->free = e;
}

/* the entry of a resident line, or NULL */
static PmhMediaLine *
pmh_media_find(PmhMediaModel *m, uint64 pool, uint64 line)
{
	int			i = pmh_media_home(m, pool, line);

	for (; m->index[i] != 0; i = (i + 1) & m->index_mask)
	{
		PmhMediaLine *l = &m->lines[m->index[i] - 1];

		if (l->pool == pool && l->line == line)
			return l;
	}
	return NULL;
}

/*
 * A free entry for a new line, evicting the least recently used if full;
 * the line is entered in the index (stamped by the caller's touch).
 */
static PmhMediaLine *
pmh_media_slot(PmhMediaModel *m, uint64 pool, uint64 line,
			   PmhMediaChargeFn charge, void *arg)
{
	PmhMediaLine *l;
	int			e;
	int			i;

	if (m->free == PMH_MEDIA_NONE)
		pmh_media_evict(m, &m->lines[m->oldest], charge, arg);
	e = m->free;
	l = &m->lines[e];
	m->free = l->older;
	l->older = PMH_MEDIA_NONE;
	l->pool = pool;
	l->line = line;
	for (i = pmh_media_home(m, pool, line); m->index[i] != 0;
		 i = (i + 1) & m->index_mask)
		;
	m->index[i] = e + 1;
	return l;
}

/* sub-line mask of [offset, offset + len) within 256 B line "line" */
static uint8
pmh_media_subs(uint64 line, uint64 offset, size_t len)
{
	uint64		lo = line * PMH_MEDIA_LINE_BYTES;
	uint64		start = Max(offset, lo);
	uint64		end = Min(offset + len, lo + PMH_MEDIA_LINE_BYTES);
	uint8		mask = 0;
	uint64		s;

	for (s = (start - lo) / PMH_MEDIA_SUB_BYTES;
		 s * PMH_MEDIA_SUB_BYTES + lo < end; s++)
		mask |= (uint8) (1 << s);
	return mask;
}

/* a flush of [offset, offset + len) of a pool by owner */
void
pmh_media_write(PmhMediaModel *m, uint64 pool, uint64 offset, size_t len,
				uint32 owner, PmhMediaChargeFn charge, void *arg)
{
	uint64		line;

	if (len == 0)
		return;
	for (line = offset / PMH_MEDIA_LINE_BYTES;
		 line * PMH_MEDIA_LINE_BYTES < offset + len; line++)
	{
		uint8		subs = pmh_media_subs(line, offset, len);
		PmhMediaLine *l = pmh_media_find(m, pool, line);

		m->total.flushed_sublines += pg_popcount32(subs);
		if (l)
			m->total.write_hits++;
		else
		{
			m->total.write_misses++;
			l = pmh_media_slot(m, pool, line, charge, arg);
		}
		l->dirty |= subs;
		l->valid |= subs;
		l->owner = owner;
		pmh_media_touch(m, (int) (l - m->lines));
	}
}

/* a read of [offset, offset + len) of a pool (statistics mode) */
void
pmh_media_read(PmhMediaModel *m, uint64 pool, uint64 offset, size_t len,
			   uint32 owner, PmhMediaChargeFn charge, void *arg)
{
	uint64		line;

	if (len == 0)
		return;
	for (line = offset / PMH_MEDIA_LINE_BYTES;
		 line * PMH_MEDIA_LINE_BYTES < offset + len; line++)
	{
		uint8		subs = pmh_media_subs(line, offset, len);
		PmhMediaLine *l = pmh_media_find(m, pool, line);

		if (l && (l->valid & subs) == subs)
			m->total.read_hits++;
		else
		{
			m->total.read_misses++;
			m->total.media_bytes_read += PMH_MEDIA_LINE_BYTES;
			if (charge)
				charge(arg, owner, 0, PMH_MEDIA_LINE_BYTES);
			if (l == NULL)
			{
				l = pmh_media_slot(m, pool, line, charge, arg);
				l->owner = owner;
			}
			l->valid = PMH_MEDIA_ALL_SUBS;
		}
		pmh_media_touch(m, (int) (l - m->lines));
	}
}

/* what draining would still cost (all owners, or one), model unchanged */
void
pmh_media_pending(const PmhMediaModel *m, uint32 owner_filter,
				  uint64 *bytes_written, uint64 *bytes_read)
{
	int			i;

	*bytes_written = 0;
	*bytes_read = 0;
	for (i = 0; i < m->nlines; i++)
	{
		uint64		w;
		uint64		r;
		bool		whole;

		if (owner_filter != PMH_MEDIA_ANY_OWNER &&
			m->lines[i].owner != owner_filter)
			continue;
		pmh_media_cost(&m->lines[i], &w, &r, &whole);
		*bytes_written += w;
		*bytes_read += r;
	}
}

/* write back and drop every resident line */
void
pmh_media_drain(PmhMediaModel *m, PmhMediaChargeFn charge, void *arg)
{
	int			i;

	for (i = 0; i < m->nlines; i++)
		if (m->lines[i].lru != 0)
			pmh_media_evict(m, &m->lines[i], charge, arg);
}

/* drop a deleted pool's lines without charging anyone */
void
pmh_media_forget_pool(PmhMediaModel *m, uint64 pool)
{
	int			i;

	for (i = 0; i < m->nlines; i++)
		if (m->lines[i].lru != 0 && m->lines[i].pool == pool)
		{
			m->lines[i].dirty = 0;	/* no write-back, nobody charged */
			pmh_media_evict(m, &m->lines[i], NULL, NULL);
		}
}
