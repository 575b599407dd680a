/*-------------------------------------------------------------------------
 *
 * pmh_logrecover.c
 *	  Recovering the backup log after a restart: the line states rebuilt
 *	  from the log in the pool, and each live log slot settled -- released
 *	  when its segment holds the entry, else put back into its D-bucket.
 *
 * The server settles the slots of a primary segment when the segment is
 * first used (pmhashrecover.c, with pmh_wp_sort_out and
 * pmh_wp_recover_slot); tests and the core benchmark recover everything at
 * once (pmh_wp_recover_all).  See "Recovery" in README.pmhash.
 *
 *-------------------------------------------------------------------------
 */
#include "pmh_writepath.h"

/*
 * Set up the line states after a restart, from the backup log in the pool
 * (the chunks initialised, log->nexts counting the log segments recovery
 * found): every live log slot is marked pending -- nobody may reuse its
 * line until the slot's segment tells whether it holds the entry -- and
 * handed to "found".  Every line counts as zeroed: zeros stored into lines
 * taken for reuse before the restart may never have reached the media
 * (the first VACUUM flushes them whole).  Reads the log once; touches no
 * segment.  Returns the number of live slots.
 */
uint32
pmh_wp_log_recover(PmhWriter *w, PmhLogFoundFn found, void *found_arg)
{
	uint32		nlines = pmh_log_nlines(w->log);
	uint32		nfound = 0;
	uint32		l;

	for (l = 0; l < nlines; l++)
	{
		const PmhEntry *e = pmh_log_line(w->pool, l);
		PmhLogLine *ls = pmh_wp_line(w, l);
		uint16		live = 0;
		int			s;

		if (ls->owner == PMH_LOG_UNUSABLE)
			continue;
		for (s = 0; s < PMH_BUCKET_SLOTS; s++)
		{
			if (!pmh_log_entry_is_live(&e[s]))
				continue;
			live |= (uint16) (1 << s);
			nfound++;
			if (found)
				found(found_arg, l * PMH_BUCKET_SLOTS + (uint32) s, &e[s]);
		}
		ls->pending = live;
		ls->zeroed = true;
		pmh_wp_note_line(w, l);
	}
	w->log->pending = nfound;
	return nfound;
}

/*
 * Sort out the recovered log slots of primary segment segno (loaded, and
 * locked): those whose entry the segment or its chain holds go to
 * "released", the others to "missing" (at most PMH_DBUCKET_SLOTS of them).
 * Returns false when more are missing than a D-bucket holds: placing them
 * may need room (pmh_wp_recover_slot, one at a time).
 */
bool
pmh_wp_sort_out(PmhWriter *w, uint32 segno, const uint32 *slots, uint32 n,
				uint32 *released, uint32 *nreleased,
				uint32 *missing, uint32 *nmissing)
{
	uint32		i;

	*nreleased = 0;
	*nmissing = 0;
	for (i = 0; i < n; i++)
	{
		const PmhEntry *e = pmh_log_entry(w->pool, slots[i]);

		Assert(pmh_log_entry_is_live(e));
		if (pmh_contains(w->pool, w->cb, segno, e->hash, e->tag))
			released[(*nreleased)++] = slots[i];
		else if (*nmissing < PMH_DBUCKET_SLOTS)
			missing[(*nmissing)++] = slots[i];
		else
			return false;
	}
	return true;
}

/*
 * Settle one recovered log slot: released if its segment holds the entry,
 * else placed into its D-bucket as a new entry would be (relocating and
 * making room as needed; *restored is set).  The segment must be loaded.
 */
PmhWpStatus
pmh_wp_recover_slot(PmhWriter *w, uint32 logslot, bool *restored)
{
	/* placing may grow (and remap) the pool: copy the entry */
	PmhEntry	e = *pmh_log_entry(w->pool, logslot);
	PmhSegMeta *meta;
	uint32		segno = w->ops->lock_hash(w->arg, e.hash, &meta);
	bool		held;

	Assert(pmh_log_entry_is_live(&e));
	held = pmh_contains(w->pool, w->cb, segno, e.hash, e.tag);
	w->ops->unlock_segment(w->arg, segno);
	*restored = !held;
	if (held)
		return pmh_wp_release(w, &logslot, 1, false, true);
	return pmh_wp_place(w, e.hash, e.tag, logslot);
}

/*
 * Recover the backup log at once, for callers that do not load segments
 * lazily (tests, the core benchmark): set up the line states, then settle
 * every live slot in log order.  A slot not settled yet is pending and in
 * no D-bucket, so nothing releases it before its turn.  *nrestored gets
 * the number of entries put back into D-buckets.
 */
PmhWpStatus
pmh_wp_recover_all(PmhWriter *w, uint32 *nrestored)
{
	uint32		nslots;
	uint32		ls;

	*nrestored = 0;
	(void) pmh_wp_log_recover(w, NULL, NULL);
	nslots = pmh_log_nlines(w->log) * PMH_BUCKET_SLOTS;
	for (ls = 0; ls < nslots; ls++)
	{
		bool		restored;
		PmhWpStatus st;

		if (pmh_wp_line(w, ls / PMH_BUCKET_SLOTS)->owner == PMH_LOG_UNUSABLE ||
			!pmh_log_entry_is_live(pmh_log_entry(w->pool, ls)))
			continue;
		st = pmh_wp_recover_slot(w, ls, &restored);
		if (st != PMH_WP_OK)
			return st;
		*nrestored += restored;
	}
	return PMH_WP_OK;
}
