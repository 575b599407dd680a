/*-------------------------------------------------------------------------
 *
 * test_core.h
 *	  The tests of test/unit/test_core, the unit-test program of the core:
 *	  one source file per concern of the core, each defining its tests;
 *	  test_core.c lists them and runs them.  Helpers that several of these
 *	  files (or other test programs) need are in tpool.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TEST_CORE_H
#define TEST_CORE_H

#include "tpool.h"
#include "unit_check.h"

/* segment word bits, as documented in pmh_core.h */
#define T_WORD_VALID		(UINT64CONST(1) << 63)
#define T_WORD_OVERFLOW		(UINT64CONST(1) << 62)

/* test_pool.c: pool header, segment words, tags, persistence, batches */
extern void test_header(void);
extern void test_header_file(void);
extern void test_segment_words(void);
extern void test_tags(void);
extern void test_persist_stats(void);
extern void test_batch(void);
extern void test_batch_msync(void);
extern void test_batch_error(void);
extern void test_lazy_writeback(void);
extern void test_pool_state(void);

/* test_segment.c: insert, lookup, fingerprints, duplicates, delete */
extern void test_fingerprints(void);
extern void test_fpt_crowd(void);
extern void test_fpt_full(void);
extern void test_insert_lookup(void);
extern void test_duplicates(void);
extern void test_delete_reinsert(void);
extern void test_dead_hints(void);
extern void test_optimistic_lookups(void);

/* test_split.c: splits, overflow chains, crashes before their publish */
extern void test_crash_split_unpublished(void);
extern void test_crash_split_chain(void);
extern void test_crash_overflow_unlinked(void);
extern void test_split_usefulness(void);
extern void test_split_enospc(void);
extern void test_split_reserved(void);
extern void test_max_depth(void);

/* test_log.c: the backup log and log segments */
extern void test_log_find_free(void);
extern void test_log_clear_slots(void);
extern void test_log_write(void);
extern void test_log_segments(void);

/* test_dbucket.c: D-buckets and their relocation */
extern void test_pending_bookkeeping(void);
extern void test_relocate_full_dbucket(void);
extern void test_relocate_duplicates(void);
extern void test_rank_lines(void);
extern void test_relocate_best_fit(void);
extern void test_relocate_no_room_split(void);
extern void test_relocate_no_room_overflow(void);
extern void test_relocate_unchecked(void);

/* test_recover.c: the directory and recovery */
extern void test_directory(void);
extern void test_recovery_clean(void);
extern void test_corruption(void);
extern void test_relocate_recovery(void);
extern void test_recover_zeroes_free(void);

/* test_torn.c: torn writes of a bucket line */
extern void test_torn_entries(void);
extern void test_torn_insert_states(void);
extern void test_torn_delete_states(void);
extern void test_torn_relocate_states(void);

/* test_writepath.c: the core's write-path protocol and chain deletion */
extern void test_wp_reserve_release(void);
extern void test_wp_log_full(void);
extern void test_wp_log_grows_for_owners(void);
extern void test_wp_write_failure(void);
extern void test_wp_vacuum(void);
extern void test_wp_no_room(void);
extern void test_delete_chain(void);

#endif							/* TEST_CORE_H */
