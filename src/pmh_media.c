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
	if (nlines < 1)
		nlines = 1;
	if (nlines > PMH_MEDIA_MAX_LINES)
		nlines = PMH_MEDIA_MAX_LINES;
	memset(&m->total, 0, sizeof(m->total));
	memset(m->lines, 0, sizeof(PmhMediaLine) * nlines);
	m->nlines = nlines;
	m->clock = 0;
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
	memset(l, 0, sizeof(*l));
}

/* the entry of a resident line, or NULL */
static PmhMediaLine *
pmh_media_find(PmhMediaModel *m, uint64 pool, uint64 line)
{
	int			i;

	for (i = 0; i < m->nlines; i++)
		if (m->lines[i].lru != 0 && m->lines[i].pool == pool &&
			m->lines[i].line == line)
			return &m->lines[i];
	return NULL;
}

/* a free entry for a new line, evicting the least recently used if full */
static PmhMediaLine *
pmh_media_slot(PmhMediaModel *m, PmhMediaChargeFn charge, void *arg)
{
	PmhMediaLine *victim = NULL;
	int			i;

	for (i = 0; i < m->nlines; i++)
	{
		if (m->lines[i].lru == 0)
			return &m->lines[i];
		if (victim == NULL || m->lines[i].lru < victim->lru)
			victim = &m->lines[i];
	}
	pmh_media_evict(m, victim, charge, arg);
	return victim;
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
			l = pmh_media_slot(m, charge, arg);
			l->pool = pool;
			l->line = line;
		}
		l->dirty |= subs;
		l->valid |= subs;
		l->owner = owner;
		l->lru = ++m->clock;
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
				l = pmh_media_slot(m, charge, arg);
				l->pool = pool;
				l->line = line;
				l->owner = owner;
			}
			l->valid = PMH_MEDIA_ALL_SUBS;
		}
		l->lru = ++m->clock;
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
			memset(&m->lines[i], 0, sizeof(m->lines[i]));
}
