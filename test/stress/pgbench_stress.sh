#!/usr/bin/env bash
# test/stress/pgbench_stress.sh -- many concurrent clients mixing inserts,
# deletes, VACUUM and checked lookups on a pmhash index, then a full
# consistency check.
#
#   1. build + private installation tmp_install/ (test/lib.sh), unless
#      PMHASH_BINDIR names an installation that has pmhash (as the "extra"
#      suite of test/run_tests.sh does) or PMHASH_STRESS_SKIP_BUILD=1 and
#      tmp_install exists; as root, a copy of the tree is used as "postgres"
#   2. a throwaway cluster (shared_preload_libraries = 'pmhash', autovacuum
#      on with a 1 s naptime, so that it races too) in a temporary directory
#   3. table s (test/stress/setup.sql): $ROWS rows over $KEYS keys, a pmhash
#      index on k and a btree on k + 0 as an oracle
#   4. pgbench, $CLIENTS clients for $SECONDS seconds, scripts (weights):
#      insert.sql (20): 23 rows in a transaction, two of them with one of 8
#                       hot keys, plus 5 rolled back to a savepoint
#      abort.sql (3):   30 rows rolled back
#      delete.sql (8):  DELETE one key, UPDATE another key's rows to a third
#      probe.sql (12):  a random and a hot key, then 40 random keys and a hot
#                       one at once (= ANY), through pmhash and through the
#                       btree in one snapshot: any difference is an ERROR
#      vacuum.sql (1):  VACUUM, one in four with heap truncation
#      (PMHASH_STRESS_WEIGHTS="insert=20 abort=3 delete=8 probe=12 vacuum=1"
#      changes the weights; 0 leaves a script out)
#   5. check.sql: every key's rows through pmhash index scans and bitmap
#      scans against a sequential scan (no TID missing, none extra or
#      twice), pmhash_check; then VACUUM (FREEZE) and one entry per row
#      (pmhash_stats); then (PMHASH_STRESS_RESTART=1) a clean restart, which
#      rebuilds the shared state from the pool, and the same checks again
#   6. the server log must show no PANIC, assertion failure or crash, and
#      no ERROR that mentions pmhash
# Exits 0 when everything holds, 1 on any mismatch or failure, 2 when the
# run could not be set up.
#
# Knobs: PMHASH_STRESS_CLIENTS (8), PMHASH_STRESS_SECONDS (180),
#        PMHASH_STRESS_JOBS (pgbench threads, 2), PMHASH_STRESS_ROWS (20000),
#        PMHASH_STRESS_KEYS (5000), PMHASH_STRESS_RESTART (1),
#        PMHASH_STRESS_MODE: "file" (default: pools in the data directory,
#        msync) or "emulated" (tmpfs /dev/shm with PMEM_IS_PMEM_FORCE=1:
#        CPU flushes, far more operations per second),
#        PMHASH_STRESS_CONF (extra postgresql.conf lines),
#        PMHASH_STRESS_SKIP_BUILD=1, PMHASH_STRESS_KEEP=1 (keep the cluster
#        directory), PMHASH_STRESS_LOGDIR (default tmp_check/stress, or
#        $PMHASH_TMP_CHECK under run_tests.sh), PG_CONFIG.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"

# as root the run happens in a copy of the tree that is removed afterwards:
# keep the logs in this tree's tmp_check/stress (owned by the test user)
if [ "$(id -u)" -eq 0 ] && [ -z "${PMHASH_STRESS_LOGDIR:-}" ] &&
	id -u "${PMHASH_TEST_USER:-postgres}" >/dev/null 2>&1; then
	export PMHASH_STRESS_LOGDIR=$PMH_CHECK/stress
	mkdir -p "$PMHASH_STRESS_LOGDIR" && chown "${PMHASH_TEST_USER:-postgres}:" "$PMHASH_STRESS_LOGDIR"
fi
pmh_drop_root test/stress/pgbench_stress.sh "$@" # exits if we are root

pmh_init_pg_paths
cd "$PMH_ROOT" || exit 2

CLIENTS=${PMHASH_STRESS_CLIENTS:-8}
SECONDS_RUN=${PMHASH_STRESS_SECONDS:-180}
JOBS=${PMHASH_STRESS_JOBS:-2}
ROWS=${PMHASH_STRESS_ROWS:-20000}
KEYS=${PMHASH_STRESS_KEYS:-5000}
RESTART=${PMHASH_STRESS_RESTART:-1}
MODE=${PMHASH_STRESS_MODE:-file}
WEIGHTS=${PMHASH_STRESS_WEIGHTS:-insert=20 abort=3 delete=8 probe=12 vacuum=1}
LOGDIR=${PMHASH_STRESS_LOGDIR:-${PMHASH_TMP_CHECK:-$PMH_CHECK/stress}}
for v in CLIENTS SECONDS_RUN JOBS ROWS KEYS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || pmh_die "$v must be a positive integer (got '${!v}')"
done
[ "$JOBS" -gt "$CLIENTS" ] && JOBS=$CLIENTS
for w in $WEIGHTS; do
	[[ $w =~ ^(insert|abort|delete|probe|vacuum)=[0-9]+$ ]] ||
		pmh_die "PMHASH_STRESS_WEIGHTS: '$w' is not script=weight (scripts: insert abort delete probe vacuum)"
done
mkdir -p "$LOGDIR" || exit 2
FAILED=0
fail() {
	pmh_err "$*"
	FAILED=1
}

# ------------------------------------------------------ build + install ---

if [ -n "${PMHASH_BINDIR:-}" ] && [ -x "$PMHASH_BINDIR/postgres" ] &&
	[ -f "$("$PMHASH_BINDIR/pg_config" --pkglibdir)/pmhash.so" ]; then
	BINDIR=$PMHASH_BINDIR
elif [ -n "${PMHASH_STRESS_SKIP_BUILD:-}" ] && [ -f "$PMH_TI_PKGLIBDIR/pmhash.so" ]; then
	BINDIR=$PMH_TI_BINDIR
else
	pmh_head "build + tmp_install"
	if ! pmh_build "$LOGDIR/build.log"; then
		pmh_build_errors "$LOGDIR/build.log" 40
		pmh_die "build failed"
	fi
	if ! pmh_make_tmp_install "$LOGDIR/install.log"; then
		pmh_build_errors "$LOGDIR/install.log" 40
		pmh_die "tmp_install failed"
	fi
	BINDIR=$PMH_TI_BINDIR
fi

# ------------------------------------------------------- start cluster ---

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pmhstress.XXXXXX") || pmh_die "mktemp failed"
PGDATA_DIR=$WORK/data
SERVER_LOG=$WORK/server.log
POOL_DIR=
STARTED=0
case "$MODE" in
file) MODE_TEXT="pools in the data directory, msync" ;;
emulated)
	POOL_DIR=$(mktemp -d /dev/shm/pmhstress.XXXXXX) || pmh_die "no /dev/shm for emulated mode"
	export PMEM_IS_PMEM_FORCE=1
	MODE_TEXT="emulated PMem: tmpfs $POOL_DIR, PMEM_IS_PMEM_FORCE=1"
	;;
*) pmh_die "PMHASH_STRESS_MODE must be file or emulated" ;;
esac

# shellcheck disable=SC2317 # (run by the EXIT trap)
cleanup() {
	if [ "$STARTED" = 1 ]; then
		pmh_server_stop "$BINDIR" "$PGDATA_DIR"
	fi
	if [ -s "$SERVER_LOG" ]; then cp "$SERVER_LOG" "$LOGDIR/server.log" 2>/dev/null; fi
	if [ -n "${PMHASH_STRESS_KEEP:-}" ]; then
		echo "(cluster directory kept: $WORK${POOL_DIR:+, pools in $POOL_DIR})" >&2
	else
		rm -rf "$WORK"
		[ -n "$POOL_DIR" ] && rm -rf "$POOL_DIR"
	fi
}
pmh_trap_cleanup cleanup

PORT=$(pmh_free_port) || pmh_die "could not find a free port"
pmh_head "cluster: port $PORT, socket dir $WORK; $MODE_TEXT"
pmh_cluster_init "$BINDIR" "$PGDATA_DIR" "$WORK" "$PORT" "$LOGDIR/initdb.log" ||
	{
		pmh_tail "$LOGDIR/initdb.log"
		pmh_die "initdb failed"
	}
{
	echo "shared_preload_libraries = 'pmhash'"
	echo "max_connections = $((CLIENTS + 20))"
	echo "autovacuum = on"
	echo "autovacuum_naptime = 1s"
	echo "jit = off"
	echo "log_min_messages = warning"
	echo "log_autovacuum_min_duration = -1"
	[ -n "$POOL_DIR" ] && echo "pmhash.pool_dir = '$POOL_DIR'"
	[ -n "${PMHASH_STRESS_CONF:-}" ] && printf '%s\n' "$PMHASH_STRESS_CONF"
} >>"$PGDATA_DIR/postgresql.conf"

start_server() {
	if ! "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$SERVER_LOG" -w -t 120 start >>"$LOGDIR/pg_ctl.log" 2>&1; then
		pmh_tail "$SERVER_LOG" 40
		pmh_die "server did not start"
	fi
	STARTED=1
}
start_server

PSQL=("$BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -U postgres -d postgres)
sql() { "${PSQL[@]}" "$@"; }

sql -v rows="$ROWS" -v keys="$KEYS" -f test/stress/setup.sql >"$LOGDIR/setup.log" 2>&1 ||
	{
		cat "$LOGDIR/setup.log"
		pmh_die "setup failed"
	}
# the probe's two queries must take the two indexes
plans=$(sql -c "SET enable_seqscan = off; SET enable_bitmapscan = off;" \
	-c "EXPLAIN (COSTS OFF) SELECT * FROM s WHERE k = 1" \
	-c "EXPLAIN (COSTS OFF) SELECT * FROM s WHERE k + 0 = 1" \
	-c "EXPLAIN (COSTS OFF) SELECT * FROM s WHERE k = ANY ('{1,2}')" \
	-c "EXPLAIN (COSTS OFF) SELECT * FROM s WHERE k + 0 = ANY ('{1,2}')")
if [ "$(grep -c 'Index Scan using s_k on s' <<<"$plans")" != 2 ] ||
	[ "$(grep -c 'Index Scan using s_k_oracle on s' <<<"$plans")" != 2 ]; then
	printf '%s\n' "$plans"
	pmh_die "the probe plans do not use s_k and s_k_oracle"
fi

# ------------------------------------------------------------- pgbench ---

pmh_head "pgbench: $CLIENTS clients, $JOBS threads, ${SECONDS_RUN}s, $ROWS rows over $KEYS keys; $WEIGHTS"
progress=$((SECONDS_RUN >= 60 ? 30 : 5))
scripts=()
for w in $WEIGHTS; do
	[ "${w#*=}" = 0 ] || scripts+=(-f "test/stress/${w%%=*}.sql@${w#*=}")
done
"$BINDIR/pgbench" -n -h "$WORK" -p "$PORT" -U postgres \
	-c "$CLIENTS" -j "$JOBS" -T "$SECONDS_RUN" -P "$progress" -D keys="$KEYS" \
	"${scripts[@]}" postgres >"$LOGDIR/pgbench.log" 2>&1
rc=$?
grep -E '^(progress|number of|latency average|tps|SQL script|  - (weight|[0-9]+ transactions))' "$LOGDIR/pgbench.log"
if [ "$rc" -ne 0 ] || grep -q -E 'aborted|ERROR' "$LOGDIR/pgbench.log"; then
	grep -E 'aborted|ERROR|DETAIL|CONTEXT' "$LOGDIR/pgbench.log" | head -n 20
	fail "pgbench failed (exit $rc; log $LOGDIR/pgbench.log)"
fi

# ------------------------------------------------------------- checks ---

# run_checks LABEL: check.sql, plus VACUUM and the entry count
run_checks() {
	local label=$1 out v entries rows segments depth load
	pmh_head "checks ($label)"
	if ! out=$(sql -F ' ' -f test/stress/check.sql 2>&1); then
		printf '%s\n' "$out"
		fail "$label: check.sql failed"
		return
	fi
	printf '%s\n' "$out" >"$LOGDIR/check_$label.log"
	get() { awk -v n="$1" '$1 == n { print $2; exit }' <<<"$out"; }
	pmh_say "$(get rows) rows, $(get keys) keys; index scans: $(get index_missing) missing, $(get index_extra) extra; bitmap scans: $(get bitmap_missing) missing, $(get bitmap_extra) extra; pmhash_check: $(get check) findings"
	[ "$(get plan_index)" = t ] || fail "$label: the index-scan join does not use s_k"
	[ "$(get plan_bitmap)" = t ] || fail "$label: the bitmap-scan join does not use s_k"
	for v in index_missing index_extra bitmap_missing bitmap_extra check; do
		if [ "$(get "$v")" != 0 ]; then
			fail "$label: $v = $(get "$v")"
			grep '^example_' <<<"$out"
		fi
	done

	# one entry per row once VACUUM has removed every dead tuple:
	# autovacuum is switched off for the table first and any run of it
	# waited for; INDEX_CLEANUP ON keeps VACUUM from skipping the index
	# pass when few pages hold dead tuples; FREEZE makes VACUUM wait for a
	# page it cannot lock at once (a checkpoint writing it) rather than
	# leave its dead tuples; and VACUUM is repeated while it reports dead
	# tuples that some snapshot (an auto-ANALYZE elsewhere) still needs
	if ! sql -c "ALTER TABLE s SET (autovacuum_enabled = off)" \
		-c "DO \$\$ BEGIN FOR i IN 1 .. 600 LOOP EXIT WHEN NOT EXISTS (SELECT FROM pg_stat_progress_vacuum WHERE relid = 's'::regclass); PERFORM pg_sleep(0.1); END LOOP; END \$\$" \
		>"$LOGDIR/vacuum_$label.log" 2>&1; then
		cat "$LOGDIR/vacuum_$label.log"
		fail "$label: ALTER TABLE failed"
		return
	fi
	for v in $(seq 1 10); do
		if ! sql -c "VACUUM (FREEZE, INDEX_CLEANUP ON, VERBOSE) s" >>"$LOGDIR/vacuum_$label.log" 2>&1; then
			cat "$LOGDIR/vacuum_$label.log"
			fail "$label: VACUUM failed"
			return
		fi
		tail -n 30 "$LOGDIR/vacuum_$label.log" | grep -q -E ' [1-9][0-9]* are dead but not yet removable|tuples missed' || break
		sleep 1
	done
	if ! out=$(sql -c "SELECT entries, (SELECT count(*) FROM s), segments, global_depth, load_factor FROM pmhash_stats('s_k')" \
		-c "SELECT count(*) FROM pmhash_check('s_k')" \
		-c "ALTER TABLE s RESET (autovacuum_enabled)" 2>&1); then
		printf '%s\n' "$out"
		fail "$label: VACUUM / pmhash_stats failed"
		return
	fi
	read -r entries rows segments depth load <<<"$(sed -n 1p <<<"$out" | tr '|' ' ')"
	pmh_say "after VACUUM: $entries entries for $rows rows, $segments segments, global depth $depth, load factor $load; pmhash_check: $(sed -n 2p <<<"$out") findings"
	if [ "$entries" != "$rows" ]; then
		grep -E 'tuples|dead' "$LOGDIR/vacuum_$label.log"
		fail "$label: after VACUUM the index has $entries entries for $rows rows"
	fi
	[ "$(sed -n 2p <<<"$out")" = 0 ] || fail "$label: pmhash_check after VACUUM found problems"
}

run_checks after_run
if [ "$RESTART" = 1 ]; then
	"$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 120 stop >>"$LOGDIR/pg_ctl.log" 2>&1 ||
		fail "the server did not stop cleanly"
	STARTED=0
	start_server
	run_checks after_restart
fi

# ----------------------------------------------------------- server log ---

if grep -n -E 'PANIC|TRAP:|terminated by signal|server process .* exited with|ERROR:.*pmhash|pmhash.*corrupt' \
	"$SERVER_LOG" >"$LOGDIR/server_problems.log"; then
	head -n 20 "$LOGDIR/server_problems.log"
	fail "the server log shows problems (see $LOGDIR/server.log)"
fi

if [ "$FAILED" = 0 ]; then
	pmh_say "pgbench stress: all checks passed"
else
	pmh_err "pgbench stress: FAILED (logs in $LOGDIR; PMHASH_STRESS_KEEP=1 keeps the cluster)"
fi
exit "$FAILED"
