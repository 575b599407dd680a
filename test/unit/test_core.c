/*-------------------------------------------------------------------------
 *
 * test_core.c
 *	  The unit-test program of the server-independent core of pmhash
 *	  (src/core): the list of its tests and the driver that runs them.
 *	  The tests are in one file per concern of the core:
 *		test_pool.c		pool header, segment words, tags, persist accounting,
 *						batches, the pool's state line
 *		test_segment.c	insert and lookup, fingerprints, duplicates, delete,
 *						optimistic lookups
 *		test_split.c	splits, overflow chains, crashes before either is
 *						published
 *		test_log.c		the backup log, log segments
 *		test_dbucket.c	D-buckets and their relocation
 *		test_recover.c	the directory, recovery after a clean shutdown, after
 *						corruption and after crashes around a relocation
 *		test_torn.c		torn writes: every state of a bucket line during an
 *						insert, a delete or a relocation
 *		test_writepath.c	the write-path protocol's bookkeeping and its
 *						failures (tlog.c drives it), chain deletion
 *	  test_core.h declares them; the harness they share is tpool.c.
 *
 * Pools are real files in a temporary directory (mkdtemp under $TMPDIR or
 * /tmp) mapped with libpmem's pmem_map_file, grown with ftruncate + remap
 * before an operation that may need more segments.  The volatile metadata
 * (one PmhSegMeta per segment, the directory with its global depth, the
 * free-segment list) is kept in tpool.c the way the server keeps it in
 * shared memory, and every phase is checked against a reference model: the
 * multiset of (hash, TID) pairs that were inserted and not deleted.
 *
 * Crash images are made by copying the pool file's bytes into a new pool
 * file and undoing, in the copy, the one persistent store that had not
 * happened yet at the simulated crash (the publish word of a split, the
 * link word of a new overflow segment, the tag word of an entry).
 *
 * The suite runs twice:
 *	- "flush" pass, in this process, with PMEM_IS_PMEM_FORCE=1: pmem_map_file
 *	  reports is_pmem = 1 and pmh_persist flushes CPU cache lines; full size
 *	  (200k entries);
 *	- "msync" pass, in a re-executed child running concurrently, with
 *	  PMEM_IS_PMEM_FORCE=0: is_pmem = 0 and pmh_persist calls pmem_msync;
 *	  reduced size, since one msync costs ~0.3 ms on a disk file system.
 * libpmem reads PMEM_IS_PMEM_FORCE once, at its first is_pmem query, so the
 * two modes need two processes.  "--pass=flush" or "--pass=msync" runs one
 * pass only.
 *
 * Output: "ok N - name" / "not ok N - name" per test (diagnostics on lines
 * starting with '#'), then a last line "N passed, N failed".  The exit
 * status is 0 iff no test failed.  PMH_TEST_SEED overrides the random seed.
 *
 *-------------------------------------------------------------------------
 */
#include "test_core.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * Every test, in the order they run; a test's place in this list seeds its
 * random state (run_test).
 */
static const TestDef tests[] = {
	{"header", test_header},
	{"header_file", test_header_file},
	{"segment_words", test_segment_words},
	{"tags", test_tags},
	{"directory", test_directory},
	{"persist_stats", test_persist_stats},
	{"insert_lookup", test_insert_lookup},
	{"rank_lines", test_rank_lines},
	{"fpt_crowd", test_fpt_crowd},
	{"fpt_full", test_fpt_full},
	{"fingerprints", test_fingerprints},
	{"duplicates", test_duplicates},
	{"delete_reinsert", test_delete_reinsert},
	{"dead_hints", test_dead_hints},
	{"recovery_clean", test_recovery_clean},
	{"crash_split_unpublished", test_crash_split_unpublished},
	{"crash_split_unpublished_chain", test_crash_split_chain},
	{"crash_overflow_unlinked", test_crash_overflow_unlinked},
	{"corruption", test_corruption},
	{"torn_entries", test_torn_entries},
	{"torn_insert_states", test_torn_insert_states},
	{"torn_delete_states", test_torn_delete_states},
	{"split_usefulness", test_split_usefulness},
	{"split_enospc", test_split_enospc},
	{"split_reserved", test_split_reserved},
	{"max_depth", test_max_depth},
	{"batch", test_batch},
	{"batch_msync", test_batch_msync},
	{"batch_error", test_batch_error},
	{"lazy_writeback", test_lazy_writeback},
	{"log_find_free", test_log_find_free},
	{"log_clear_slots", test_log_clear_slots},
	{"log_write", test_log_write},
	{"pending_bookkeeping", test_pending_bookkeeping},
	{"relocate_full_dbucket", test_relocate_full_dbucket},
	{"relocate_duplicates", test_relocate_duplicates},
	{"relocate_best_fit", test_relocate_best_fit},
	{"relocate_no_room_split", test_relocate_no_room_split},
	{"relocate_no_room_overflow", test_relocate_no_room_overflow},
	{"relocate_recovery", test_relocate_recovery},
	{"torn_relocate_states", test_torn_relocate_states},
	{"pool_state", test_pool_state},
	{"relocate_unchecked", test_relocate_unchecked},
	{"recover_zeroes_free", test_recover_zeroes_free},
	{"log_segments", test_log_segments},
	{"optimistic_lookups", test_optimistic_lookups},
	{"wp_reserve_release", test_wp_reserve_release},
	{"wp_log_full", test_wp_log_full},
	{"wp_log_grows_for_owners", test_wp_log_grows_for_owners},
	{"wp_write_failure", test_wp_write_failure},
	{"wp_vacuum", test_wp_vacuum},
	{"wp_no_room", test_wp_no_room},
	{"delete_chain", test_delete_chain},
};

/* ---------------------------------------------------------------------
 * Driver
 * ---------------------------------------------------------------------
 */

static const Scale scale_flush = {"flush", 1, 200000, 20000, 5000, 50000, 50000,
500, false};
static const Scale scale_msync = {"msync", 0, 3000, 1500, 1200, 1000, 3000,
100, true};

/* run one test and print its TAP line */
static void
run_test(const TestDef *t, int index)
{
	double		t0 = now_seconds();

	unit_test_failures = 0;
	g_rng = g_seed ^ ((uint64) index * UINT64CONST(0x100000001B3));
	t->fn();
	ntests++;
	if (unit_test_failures == 0)
	{
		npassed++;
		printf("ok %d - %s [%s]\n", ntests, t->name, S->pass);
	}
	else
	{
		nfailed++;
		printf("#   %d failed check(s)\n", unit_test_failures);
		printf("not ok %d - %s [%s]\n", ntests, t->name, S->pass);
	}
	printf("#   %s: %.2f s\n", t->name, now_seconds() - t0);
	fflush(stdout);
}

/* run every test once with the given sizes */
static void
run_suite(const Scale *scale)
{
	size_t		i;
	double		t0 = now_seconds();

	S = scale;
	printf("# %s pass: seed %016llx, %d entries in the main workload\n",
		   S->pass, (unsigned long long) g_seed, S->n_random);
	for (i = 0; i < lengthof(tests); i++)
		run_test(&tests[i], (int) i + 1);
	printf("# %s pass: %.2f s\n", S->pass, now_seconds() - t0);
	fflush(stdout);
}

/* start the msync pass in a child process writing to outpath */
static pid_t
start_msync_child(const char *argv0, const char *outpath)
{
	pid_t		pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0)
	{
		int			fd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd < 0)
			_exit(126);
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		execl("/proc/self/exe", argv0, "--pass=msync", (char *) NULL);
		execl(argv0, argv0, "--pass=msync", (char *) NULL);
		_exit(127);
	}
	return pid;
}

/*
 * Wait for the msync pass and merge its output: its test lines are
 * renumbered after ours and counted, its summary line is dropped.
 */
static void
finish_msync_child(pid_t pid, const char *outpath)
{
	int			status = 0;
	FILE	   *f;
	char		line[4096];
	int			child_tests = 0;
	int			child_failed = 0;

	if (waitpid(pid, &status, 0) != pid)
		status = -1;
	f = fopen(outpath, "r");
	while (f && fgets(line, sizeof(line), f))
	{
		int			num;
		int			pos = 0;
		int			a;
		int			b;

		if (sscanf(line, "ok %d - %n", &num, &pos) == 1 && pos > 0)
		{
			ntests++;
			npassed++;
			child_tests++;
			printf("ok %d - %s", ntests, line + pos);
		}
		else if (sscanf(line, "not ok %d - %n", &num, &pos) == 1 && pos > 0)
		{
			ntests++;
			nfailed++;
			child_tests++;
			child_failed++;
			printf("not ok %d - %s", ntests, line + pos);
		}
		else if (sscanf(line, "%d passed, %d failed", &a, &b) == 2 ||
				 strncmp(line, "# total", 7) == 0)
			continue;
		else
			fputs(line, stdout);
	}
	if (f)
		fclose(f);
	unlink(outpath);

	/* a child that died, or failed without saying why, is a failure */
	if (status == -1 || !WIFEXITED(status) ||
		(WEXITSTATUS(status) != 0) != (child_failed > 0) ||
		child_tests != (int) lengthof(tests))
	{
		ntests++;
		nfailed++;
		printf("#   msync pass: wait status %d, %d tests reported\n", status, child_tests);
		printf("not ok %d - msync pass completed\n", ntests);
	}
}

/* remove the temporary directory (and anything a failed test left there) */
static void
remove_tmpdir(void)
{
	char		cmd[MAXPGPATH + 32];
	int			rc;

	if (rmdir(g_tmpdir) == 0)
		return;
	printf("# note: %s was not empty; removing it\n", g_tmpdir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmpdir);
	rc = system(cmd);
	(void) rc;
}

/* run both passes (or the one asked for) and print the summary */
int
main(int argc, char **argv)
{
	const char *only = NULL;
	const char *tmp = getenv("TMPDIR");
	const char *seed = getenv("PMH_TEST_SEED");
	char		outpath[MAXPGPATH];
	pid_t		child = -1;
	int			i;
	double		t0 = now_seconds();

	for (i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--pass=flush") == 0)
			only = "flush";
		else if (strcmp(argv[i], "--pass=msync") == 0)
			only = "msync";
		else
		{
			fprintf(stderr, "usage: %s [--pass=flush|--pass=msync]\n", argv[0]);
			return 2;
		}
	}
	if (seed)
		g_seed = strtoull(seed, NULL, 0);

	/* before the first libpmem call: libpmem reads it once */
	setenv("PMEM_IS_PMEM_FORCE", (only && strcmp(only, "msync") == 0) ? "0" : "1", 1);

	snprintf(g_tmpdir, sizeof(g_tmpdir), "%s/pmh_test_XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp");
	if (mkdtemp(g_tmpdir) == NULL)
	{
		fprintf(stderr, "mkdtemp(%s): %s\n", g_tmpdir, strerror(errno));
		return 2;
	}

	if (only == NULL)
	{
		snprintf(outpath, sizeof(outpath), "%s/msync-pass.out", g_tmpdir);
		child = start_msync_child(argv[0], outpath);
		if (child < 0)
		{
			ntests++;
			nfailed++;
			printf("#   fork: %s\n", strerror(errno));
			printf("not ok %d - msync pass started\n", ntests);
		}
	}

	run_suite(only && strcmp(only, "msync") == 0 ? &scale_msync : &scale_flush);
	if (child > 0)
		finish_msync_child(child, outpath);

	remove_tmpdir();
	printf("# total %.2f s\n", now_seconds() - t0);
	printf("%d passed, %d failed\n", npassed, nfailed);
	return nfailed == 0 ? 0 : 1;
}
