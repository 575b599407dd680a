#!/usr/bin/env bash
# test/bench/recovery_time.sh -- how long a pmhash index takes to become
# usable after a server restart, and how fast its state is rebuilt.
#
# Shared memory (directory, fingerprints, occupancy, D-buckets, backup-log
# state) is lost at every restart; the first backend that touches an index
# rebuilds it from the pool (pmhash_load: pmh_recover, a pass over every
# segment, then pmhash_log_recover).  For each size this script
#
#   1. builds a table of N int8 keys (1..N) and CREATE INDEX ... USING
#      pmhash, then inserts N * PMHASH_BENCH_EXTRA_PCT / 100 more rows in
#      1000-row transactions, so that entries wait in the backup log and in
#      D-buckets as in a live index; VACUUM, CHECKPOINT;
#   2. PMHASH_BENCH_REPEAT times: stops the server (fast, clean), starts it
#      with "pg_ctl start --no-wait" at t0 and retries a psql session until
#      one connects; that session warms the catalogs without touching the
#      index (EXPLAIN), then times (\timing) the first lookup of a random
#      key -- which attaches the index: segment words, directory, backup
#      log, and the one segment the key needs -- a second, warm lookup of
#      another key; both must return the right row.  Then another session
#      times pmhash_stats(), which loads every other segment.  Reported:
#        ready        t0 -> "ready to accept connections" (server log)
#        usable       t0 -> the first lookup has returned the right row
#                     (the psql process has exited: includes its start)
#        first        the first lookup alone (attach + lookup)
#        warm         the second lookup (it may load its segment too)
#        attach       first - warm
#        full rebuild attach + pmhash_stats; entries/s from it
#      (medians over the repeats).  The prewarm worker is off
#      (PMHASH_BENCH_PREWARM=on turns it on), so that what is timed is
#      done by the session;
#   3. optionally (PMHASH_BENCH_PERF=1, needs perf) profiles the first
#      lookup of the largest size with "perf record" attached to the
#      session's backend and prints the top of "perf report".
#
# The targets of issue 4 are: usable <= 250 ms at any size; full rebuild
# >= 50M entries/s per worker.  See doc/BENCHMARKS.md, "recovery_time.sh".
#
# Knobs:
#   PMHASH_BENCH_SIZES      comma list of sizes, K/M suffixes (1M,10M; the
#                           issue's third size: 1M,10M,50M -- needs about
#                           25 B/entry of pool, 3 B/entry of shared memory
#                           and 40 B/entry of heap, and several minutes)
#   PMHASH_BENCH_MODES      emulated (default: pools on tmpfs /dev/shm with
#                           PMEM_IS_PMEM_FORCE=1, libpmem's CPU-flush path,
#                           not durable) and/or file (ordinary file in the
#                           data directory, msync; the page cache is warm)
#   PMHASH_BENCH_REPEAT     restarts per size (3)
#   PMHASH_BENCH_EXTRA_PCT  rows inserted after CREATE INDEX, in % of N (1)
#   PMHASH_BENCH_PERF=1     profile the first lookup at the largest size
#   PMHASH_BENCH_KEEP=1     keep the cluster directory (and perf.data)
#   PMHASH_DEMO_SKIP_BUILD=1  reuse an existing tmp_install
#   PG_CONFIG
# Run as root or as a normal user; as root the tree is copied and run as
# "postgres" (see test/lib.sh), like test/demo.sh.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"
# shellcheck source=test/bench/bench_lib.sh
. "$HERE/bench_lib.sh"

pmh_drop_root test/bench/recovery_time.sh "$@" # exits if we are root

pmh_init_pg_paths
cd "$PMH_ROOT" || exit 2

SIZES=${PMHASH_BENCH_SIZES:-1M,10M}
MODES=${PMHASH_BENCH_MODES:-emulated}
REPEAT=${PMHASH_BENCH_REPEAT:-3}
EXTRA_PCT=${PMHASH_BENCH_EXTRA_PCT:-1}
LOGDIR=$PMH_CHECK/bench
mkdir -p "$LOGDIR"
T_START=$(pmh_now)

# "10M" -> 10000000
parse_size() {
	case "$1" in
	*[kK]) echo $((${1%[kK]} * 1000)) ;;
	*[mM]) echo $((${1%[mM]} * 1000000)) ;;
	*[!0-9]* | '') pmh_die "bad size '$1' in PMHASH_BENCH_SIZES" ;;
	*) echo "$1" ;;
	esac
}
NS=()
TOTAL=0
for s in ${SIZES//,/ }; do
	n=$(parse_size "$s")
	NS+=("$n")
	TOTAL=$((TOTAL + n + n * EXTRA_PCT / 100))
done
[ ${#NS[@]} -gt 0 ] || pmh_die "PMHASH_BENCH_SIZES is empty"
for m in ${MODES//,/ }; do
	case "$m" in
	emulated | file) ;;
	*) pmh_die "PMHASH_BENCH_MODES: unknown mode '$m' (emulated, file)" ;;
	esac
done

# ------------------------------------------------------ build + install ---

if [ -n "${PMHASH_DEMO_SKIP_BUILD:-}" ] && [ -f "$PMH_TI_PKGLIBDIR/pmhash.so" ]; then
	pmh_say "using existing tmp_install (PMHASH_DEMO_SKIP_BUILD)"
else
	pmh_head "build + tmp_install"
	pmh_build "$LOGDIR/build.log" || {
		pmh_build_errors "$LOGDIR/build.log" 40
		pmh_die "build failed"
	}
	pmh_make_tmp_install "$LOGDIR/install.log" || {
		pmh_build_errors "$LOGDIR/install.log" 40
		pmh_die "tmp_install failed"
	}
fi
BINDIR=$PMH_TI_BINDIR

# ------------------------------------------------------------- helpers ---

now_ms() { date +%s%3N; }

BENCH_DIR=
PGDATA_DIR=
SERVER_LOG=
POOL_DIR=
RUNNING=0
cleanup() {
	if [ "$RUNNING" = 1 ]; then
		"$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m immediate -w stop >/dev/null 2>&1
	fi
	[ -n "$SERVER_LOG" ] && [ -s "$SERVER_LOG" ] && cp "$SERVER_LOG" "$LOGDIR/server.log" 2>/dev/null
	if [ -z "${PMHASH_BENCH_KEEP:-}" ]; then
		[ -n "$POOL_DIR" ] && rm -rf "$POOL_DIR"
		[ -n "$BENCH_DIR" ] && rm -rf "$BENCH_DIR"
	elif [ -n "$BENCH_DIR" ]; then
		echo "(kept: $BENCH_DIR ${POOL_DIR:-})" >&2
	fi
	RUNNING=0
}
trap cleanup EXIT
trap 'trap "" INT TERM; echo interrupted >&2; exit 130' INT TERM

psql_() { "$BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$BENCH_DIR" -p "$PORT" -U postgres -d postgres "$@"; }

server_stop() {
	"$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 600 stop >>"$LOGDIR/pg_ctl.log" 2>&1 ||
		pmh_die "pg_ctl stop failed"
	RUNNING=0
}

# the lookups of one measurement: catalogs warmed without touching the
# index, then two timed lookups; prints "first_ms|warm_ms|k1 found|k2 found"
lookup_script() {
	local tab=$1 k1=$2 k2=$3
	cat <<EOF
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN SELECT k FROM $tab WHERE k = $k1;
\\o /dev/null
\\timing on
SELECT k FROM $tab WHERE k = $k1;
SELECT k FROM $tab WHERE k = $k2;
\\timing off
\\o
SELECT count(*) FROM $tab WHERE k = $k1;
SELECT count(*) FROM $tab WHERE k = $k2;
EOF
}

# start the server at t0 and retry the lookup session until it connects;
# sets R_READY R_USABLE R_FIRST R_WARM (ms)
measure_restart() {
	local tab=$1 k1=$2 k2=$3 t0 t1 out ready tries=0
	: >"$SERVER_LOG.cur"
	t0=$(now_ms)
	"$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$SERVER_LOG.cur" -W start >>"$LOGDIR/pg_ctl.log" 2>&1 ||
		pmh_die "pg_ctl start failed"
	RUNNING=1
	while :; do
		if out=$(lookup_script "$tab" "$k1" "$k2" | psql_ 2>&1); then
			break
		fi
		tries=$((tries + 1))
		if [ "$tries" -gt 6000 ] || ! grep -q -E 'starting up|No such file|Connection refused|could not connect' <<<"$out"; then
			cat "$SERVER_LOG.cur" >>"$SERVER_LOG"
			pmh_die "lookup failed: $out"
		fi
		sleep 0.005
	done
	t1=$(now_ms)
	cat "$SERVER_LOG.cur" >>"$SERVER_LOG"
	# EXPLAIN lines, then "Time: x ms" twice, then the two counts
	mapfile -t times < <(sed -n -E 's/^Time: ([0-9.]+) ms.*$/\1/p' <<<"$out")
	mapfile -t counts < <(grep -E '^[0-9]+$' <<<"$out")
	[ "${#times[@]}" -eq 2 ] || pmh_die "could not read the lookup times: $out"
	if [ "${counts[-2]:-}" != 1 ] || [ "${counts[-1]:-}" != 1 ]; then
		pmh_die "a lookup did not find its row: $out"
	fi
	ready=$(sed -n -E 's/^([0-9]+)\.([0-9]{3}) .*ready to accept connections.*$/\1\2/p' "$SERVER_LOG.cur" | tail -n 1)
	R_READY=$([ -n "$ready" ] && echo $((ready - t0)) || echo '')
	R_USABLE=$((t1 - t0))
	R_FIRST=${times[0]}
	R_WARM=${times[1]}
	# then, in another session, load every other segment
	out=$(printf '%s\n' '\timing on' "SELECT entries FROM pmhash_stats('${tab}_k');" | psql_ 2>&1) ||
		pmh_die "pmhash_stats failed: $out"
	R_REST=$(sed -n -E 's/^Time: ([0-9.]+) ms.*$/\1/p' <<<"$out")
}

# profile the first lookup of table $1 (server stopped on entry)
profile_first_lookup() {
	local tab=$1 k1=$2 pid perf_pid out fifo
	if ! command -v perf >/dev/null; then
		pmh_warn "perf not found (apt-get install linux-perf): no profile"
		return
	fi
	"$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$SERVER_LOG" -w start >>"$LOGDIR/pg_ctl.log" 2>&1 ||
		pmh_die "pg_ctl start failed"
	RUNNING=1
	fifo=$BENCH_DIR/psql.in
	out=$BENCH_DIR/psql.out
	rm -f "$fifo" "$out"
	mkfifo "$fifo"
	psql_ <"$fifo" >"$out" 2>&1 &
	exec 7>"$fifo"
	printf '%s\n' "SET enable_seqscan = off; SET enable_bitmapscan = off;" \
		"EXPLAIN SELECT k FROM $tab WHERE k = $k1;" "SELECT 'pid', pg_backend_pid();" >&7
	for _ in $(seq 1 1000); do grep -q '^pid|' "$out" 2>/dev/null && break; sleep 0.01; done
	pid=$(sed -n 's/^pid|//p' "$out")
	[ -n "$pid" ] || pmh_die "no backend pid: $(cat "$out")"
	perf record -F 4999 -e cpu-clock -g -p "$pid" -o "$BENCH_DIR/perf.data" >"$LOGDIR/perf-record.log" 2>&1 &
	perf_pid=$!
	sleep 1 # perf attaches
	printf '%s\n' "\\timing on" "SELECT k FROM $tab WHERE k = $k1;" "\\timing off" "SELECT 'done';" >&7
	for _ in $(seq 1 60000); do grep -q '^done$' "$out" 2>/dev/null && break; sleep 0.01; done
	kill -INT "$perf_pid"
	wait "$perf_pid"
	exec 7>&-
	wait
	pmh_say "profiled lookup: $(grep '^Time:' "$out")"
	perf report -i "$BENCH_DIR/perf.data" --stdio --no-children --sort symbol \
		--percent-limit 0.5 -g none 2>/dev/null | grep -v -E '^#|^$' | head -n 40
	pmh_say "(call graphs: perf report -i $BENCH_DIR/perf.data, with PMHASH_BENCH_KEEP=1)"
	server_stop
}

# ---------------------------------------------------------------- runs ---

declare -a REPORT=()
for MODE in ${MODES//,/ }; do
	BENCH_DIR=$(mktemp -d "${TMPDIR:-/tmp}/pmhrec.XXXXXX") || pmh_die "mktemp failed"
	PGDATA_DIR=$BENCH_DIR/data
	SERVER_LOG=$BENCH_DIR/server.log
	POOL_DIR=
	case "$MODE" in
	emulated)
		POOL_DIR=$(mktemp -d /dev/shm/pmhrec.XXXXXX) || pmh_die "no /dev/shm for emulated mode"
		export PMEM_IS_PMEM_FORCE=1
		MODE_TEXT="emulated PMem: tmpfs, PMEM_IS_PMEM_FORCE=1 (CPU flushes)"
		;;
	file)
		unset PMEM_IS_PMEM_FORCE
		MODE_TEXT="ordinary file in the data directory, msync (page cache warm)"
		;;
	esac
	PORT=$((20000 + RANDOM % 30000))

	pmh_head "$MODE: initdb + load (${SIZES})"
	"$BINDIR/initdb" -D "$PGDATA_DIR" -A trust -U postgres --no-locale -E UTF8 >"$LOGDIR/initdb.log" 2>&1 ||
		pmh_die "initdb failed (see $LOGDIR/initdb.log)"
	{
		echo "port = $PORT"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$BENCH_DIR'"
		echo "shared_preload_libraries = 'pmhash'"
		echo "shared_buffers = '256MB'"
		echo "pmhash.shared_memory = '$((TOTAL * 4 / 1048576 + 64))MB'"
		echo "maintenance_work_mem = '256MB'"
		echo "max_wal_size = '8GB'"
		echo "checkpoint_timeout = '30min'"
		echo "synchronous_commit = off"
		echo "wal_level = minimal"
		echo "max_wal_senders = 0"
		echo "autovacuum = off"
		echo "jit = off"
		echo "max_parallel_maintenance_workers = 0"
		echo "max_parallel_workers_per_gather = 0"
		echo "log_line_prefix = '%n [%p] '"
		# the worker would load in the background what the measurement
		# wants to time in the foreground
		echo "pmhash.prewarm = ${PMHASH_BENCH_PREWARM:-off}"
		[ -n "$POOL_DIR" ] && echo "pmhash.pool_dir = '$POOL_DIR'"
	} >>"$PGDATA_DIR/postgresql.conf"
	"$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$SERVER_LOG" -w -t 120 start >>"$LOGDIR/pg_ctl.log" 2>&1 ||
		pmh_die "server did not start (see $SERVER_LOG)"
	RUNNING=1
	psql_ -c 'CREATE EXTENSION pmhash' || pmh_die "CREATE EXTENSION failed"

	declare -A BUILD_MS=() STATS=()
	for n in "${NS[@]}"; do
		extra=$((n * EXTRA_PCT / 100))
		t0=$(pmh_now)
		out=$(psql_ 2>&1 <<EOF
CREATE TABLE t_$n AS SELECT g::int8 AS k FROM generate_series(1, $n) g;
SELECT clock_timestamp() AS t0 \gset
CREATE INDEX t_${n}_k ON t_$n USING pmhash (k);
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000);
DO \$\$
BEGIN
	FOR i IN 0 .. ($extra - 1) / 1000 LOOP
		INSERT INTO t_$n SELECT g FROM generate_series($n + 1 + i * 1000, least($n + $extra, $n + (i + 1) * 1000)) g;
		COMMIT;
	END LOOP;
END \$\$;
VACUUM ANALYZE t_$n;
SELECT entries || '|' || segments || '|' || pending_entries || '|' || log_lines_in_use || '|' ||
	round(pool_bytes / 1048576.0) || '|' || round(shmem_bytes / 1048576.0, 1)
FROM pmhash_stats('t_${n}_k');
EOF
		) || pmh_die "loading $n rows failed: $out"
		BUILD_MS[$n]=$(sed -n 1p <<<"$out")
		STATS[$n]=$(tail -n 1 <<<"$out")
		pmh_say "$n rows: CREATE INDEX ${BUILD_MS[$n]} ms; entries|segments|pending|log lines|pool MB|shmem MB = ${STATS[$n]} ($(pmh_elapsed "$t0")s)"
	done
	psql_ -c 'CHECKPOINT' >/dev/null
	server_stop

	for n in "${NS[@]}"; do
		total=$((n + n * EXTRA_PCT / 100))
		rs=() us=() fs=() ws=() bs=() as=()
		for r in $(seq 1 "$REPEAT"); do
			k1=$((1 + (RANDOM * 32768 + RANDOM) % total))
			k2=$((1 + (RANDOM * 32768 + RANDOM) % total))
			measure_restart "t_$n" "$k1" "$k2"
			server_stop
			rb=$(awk -v a="$R_FIRST" -v b="$R_WARM" 'BEGIN { printf "%.1f", a - b }')
			ra=$(awk -v a="$rb" -v b="$R_REST" 'BEGIN { printf "%.1f", a + b }')
			printf '    %s entries, run %s: ready %s ms, usable %s ms, first lookup %s ms, warm %s ms, attach %s ms, full rebuild %s ms\n' \
				"$total" "$r" "${R_READY:-?}" "$R_USABLE" "$R_FIRST" "$R_WARM" "$rb" "$ra"
			[ -n "$R_READY" ] && rs+=("$R_READY")
			us+=("$R_USABLE") fs+=("$R_FIRST") ws+=("$R_WARM") bs+=("$rb") as+=("$ra")
		done
		IFS='|' read -r entries segs pending loglines poolmb _ <<<"${STATS[$n]}"
		rb=$(median "${bs[@]}")
		ra=$(median "${as[@]}")
		REPORT+=("$(printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' \
			"$MODE" "$entries" "$segs" "$pending" "$loglines" "$poolmb" "${BUILD_MS[$n]}" \
			"$(median "${rs[@]}")" "$(median "${us[@]}")" "$(median "${fs[@]}")" \
			"$(median "${ws[@]}")" "$rb" "$ra" \
			"$(awk -v e="$entries" -v m="$ra" 'BEGIN { if (m > 0) printf "%.1f", e / m / 1000; else print "n/a" }')")")
	done

	if [ -n "${PMHASH_BENCH_PERF:-}" ]; then
		n=${NS[-1]}
		pmh_head "$MODE: perf profile of the first lookup, $n rows"
		profile_first_lookup "t_$n" 42
	fi
	pmh_say "mode: $MODE_TEXT"
	if [ -z "${PMHASH_BENCH_KEEP:-}" ]; then
		[ -n "$POOL_DIR" ] && rm -rf "$POOL_DIR"
		rm -rf "$BENCH_DIR"
		POOL_DIR='' BENCH_DIR=''
	fi
done

pmh_head "recovery time (medians of $REPEAT restarts; times in ms)"
echo "| mode | entries | segments | pending | log lines in use | pool MB | CREATE INDEX | ready | usable | first lookup | warm lookup | attach | full rebuild | full rebuild M entries/s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${REPORT[@]}"
echo "(ready: pg_ctl start -> ready to accept connections; usable: pg_ctl start -> the first"
echo " index lookup returned its row; attach = first lookup - warm lookup = pmhash_load (segment"
echo " words, directory, backup log) and the load of one segment; full rebuild = attach + what"
echo " pmhash_stats took to load every other segment, in one backend;"
echo " targets: usable <= 250 ms, full rebuild >= 50 M entries/s per worker; total $(pmh_elapsed "$T_START")s)"
