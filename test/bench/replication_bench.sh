#!/usr/bin/env bash
# test/bench/replication_bench.sh -- what WAL logging (issue 29) costs
# pmhash, btree and hash, and how a streaming hot standby keeps up: one
# run, the three methods side by side, in each pool mode in turn (file
# first, then emulated PMem).
#
# For each pool mode of $MODES:
#
#   1. a throwaway primary (pmh_cluster_start: wal_level = replica, the
#      default; max_wal_size 8GB, checkpoint_timeout 30min, so that no
#      checkpoint falls inside a measurement); data: $ROWS rows (k int8 =
#      1..ROWS in random order, md5 payload) in three identical tables
#      t_btree, t_hash, t_pmhash with one index each; probe keys: $PROBES
#      present and $PROBES absent, uniform
#   2. WAL per row and insert upkeep: INSERT ... SELECT of the $ROWS rows
#      into an empty table (none, btree, hash, pmhash index) in one
#      transaction, as sql_bench.sh does, after a CHECKPOINT; best of
#      $REPEAT for the time, the methods interleaved; the WAL is
#      pg_wal_lsn_diff of pg_current_wal_insert_lsn() before and after,
#      broken down (run 1) by pg_walinspect's pg_get_wal_stats into
#      resource managers and full-page images; checkpoints that fell
#      inside are counted (pg_stat_bgwriter).  With $UNLOGGED the same into
#      an UNLOGGED table (no WAL at all, for any method): "logged upkeep -
#      unlogged upkeep" is what the WAL costs each method, in this run.
#      The upkeep is also compared with the pre-WAL runs in
#      test/bench/results/latest ($REF_FILE, $REF_EMULATED)
#   3. WAL per row of single-row inserts: pgbench (test/bench/pgbench/
#      insert.sql, $CLIENTS clients, $PGB_WAL_TIME s, -M prepared,
#      synchronous_commit = $SYNC_COMMIT) into a copy of the table with
#      each index (and none), each run after a CHECKPOINT
#   4. a hot standby: pg_basebackup -R -X stream of the primary, with its
#      own pool directory (file: the copied pools in its data directory;
#      emulated: a new, empty directory on /dev/shm); started at t0, and
#      pmhash_rebuild_progress('idx_pmhash') polled until NOT rebuilding:
#      the time to rebuild the $ROWS-row pool from the heap, as measured
#      from the standby's start (its log says when it accepted connections
#      and when the rebuild ended)
#   5. probe cost on the standby (and, for comparison, on the primary):
#      the nested-loop join of sql_bench.sh (the plan checked to be an
#      Index Scan of that index), $PROBES present and $PROBES absent keys,
#      best of $REPEAT, EXPLAIN (ANALYZE, TIMING OFF)
#   6. replay lag: pgbench insert.sql at $CLIENTS clients for $LAG_TIME s on
#      each table in turn (btree, hash, pmhash; the standby replays it all),
#      after a CHECKPOINT; every $SAMPLE s pg_wal_lsn_diff(
#      pg_current_wal_lsn(), replay_lsn) and replay_lag from
#      pg_stat_replication on the primary (the standby reports every 1 s:
#      wal_receiver_status_interval), and the standby's own
#      pg_last_wal_replay_lsn(); max, last, least-squares slope; then the
#      time the standby takes to catch up (at most $CATCHUP_MAX s)
#   7. report: replication.md, replication.tsv, PNG plots (gnuplot) in
#      test/bench/results/<date>/ (or $PMHASH_BENCH_OUT)
#
# Numbers are measurements, never assertions: the exit status is 0 unless
# a step failed or the access methods disagreed on an answer.
#
# Usage: test/bench/replication_bench.sh [--quick]
#
# Knobs: PMHASH_BENCH_QUICK=1 or --quick (a smoke run of a few minutes:
#        100000 rows and probes, 1 repeat, 5 s pgbench, 20 s of lag,
#        results in test/bench/results/<date>/quick unless
#        PMHASH_BENCH_OUT), PMHASH_BENCH_MODES ("file emulated"),
#        PMHASH_BENCH_ROWS (1000000), PMHASH_BENCH_PROBES (1000000),
#        PMHASH_BENCH_REPEAT (3), PMHASH_BENCH_UNLOGGED (1: also the
#        unlogged upkeep; 0: not), PMHASH_BENCH_PGBENCH_TIME (20 s per
#        WAL-per-row pgbench run), PMHASH_BENCH_CLIENTS (2),
#        PMHASH_BENCH_LAG_TIME (120 s per method), PMHASH_BENCH_SAMPLE
#        (5 s), PMHASH_BENCH_CATCHUP_MAX (240 s), PMHASH_BENCH_SYNC_COMMIT
#        (off, for pgbench), PMHASH_BENCH_SHARED_BUFFERS (1GB),
#        PMHASH_BENCH_PRIMARY_PROBES (1: probe the primary too),
#        PMHASH_BENCH_SKIP ("pgbench,standby": steps to leave out; standby
#        is steps 4 to 6),
#        PMHASH_BENCH_REF_FILE, PMHASH_BENCH_REF_EMULATED (the pre-WAL
#        sql.tsv files to compare the upkeep with, space-separated, relative
#        to the tree), PMHASH_BENCH_OUT, PMHASH_BENCH_SKIP_BUILD=1,
#        PMHASH_BENCH_KEEP=1, PMHASH_BENCH_CONF (extra postgresql.conf
#        lines), PG_CONFIG.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"
# shellcheck source=test/bench/bench_lib.sh
. "$HERE/bench_lib.sh"

# which tree is measured (the copy that runs as "postgres" has no .git)
if [ -z "${PMHASH_BENCH_TREE:-}" ] && command -v git >/dev/null 2>&1 &&
	PMHASH_BENCH_TREE=$(git -C "$PMH_ROOT" rev-parse --short HEAD 2>/dev/null); then
	[ -z "$(git -C "$PMH_ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] ||
		PMHASH_BENCH_TREE="$PMHASH_BENCH_TREE (with uncommitted changes)"
	export PMHASH_BENCH_TREE
fi

PMH_COPY_BACK_PATHS="test/bench/results"
pmh_drop_root test/bench/replication_bench.sh "$@" # exits if we are root

pmh_init_pg_paths
cd "$PMH_ROOT" || exit 2

QUICK=${PMHASH_BENCH_QUICK:-0}
for a in "$@"; do
	case "$a" in
	--quick) QUICK=1 ;;
	-h | --help)
		sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	*) pmh_die "unknown argument '$a' (--quick, --help)" ;;
	esac
done
if [ "$QUICK" = 1 ]; then
	D_ROWS=100000 D_REPEAT=1 D_PGB=5 D_LAG=20 D_CATCHUP=60
	: "${PMHASH_BENCH_OUT:=$PMH_ROOT/test/bench/results/$(date +%Y-%m-%d)/quick}"
else
	D_ROWS=1000000 D_REPEAT=3 D_PGB=20 D_LAG=120 D_CATCHUP=240
fi
ROWS=${PMHASH_BENCH_ROWS:-$D_ROWS}
PROBES=${PMHASH_BENCH_PROBES:-$ROWS}
REPEAT=${PMHASH_BENCH_REPEAT:-$D_REPEAT}
UNLOGGED=${PMHASH_BENCH_UNLOGGED:-1}
PGB_WAL_TIME=${PMHASH_BENCH_PGBENCH_TIME:-$D_PGB}
CLIENTS=${PMHASH_BENCH_CLIENTS:-2}
LAG_TIME=${PMHASH_BENCH_LAG_TIME:-$D_LAG}
SAMPLE=${PMHASH_BENCH_SAMPLE:-5}
CATCHUP_MAX=${PMHASH_BENCH_CATCHUP_MAX:-$D_CATCHUP}
SYNC_COMMIT=${PMHASH_BENCH_SYNC_COMMIT:-off}
SHARED_BUFFERS=${PMHASH_BENCH_SHARED_BUFFERS:-1GB}
PRIMARY_PROBES=${PMHASH_BENCH_PRIMARY_PROBES:-1}
SKIP=",${PMHASH_BENCH_SKIP:-},"
skip() { [[ "$SKIP" == *",$1,"* ]]; }
MODES=${PMHASH_BENCH_MODES:-file emulated}
MODES=${MODES//,/ }
# shellcheck disable=SC2034 # both read as ${!refs} in the report
REF_FILE=${PMHASH_BENCH_REF_FILE-test/bench/results/latest/2026-11-26/file-after/sql.tsv}
# shellcheck disable=SC2034
REF_EMULATED=${PMHASH_BENCH_REF_EMULATED-test/bench/results/latest/sql.tsv test/bench/results/latest/2026-11-26/emulated-after/sql.tsv}
for v in ROWS PROBES REPEAT PGB_WAL_TIME CLIENTS LAG_TIME SAMPLE CATCHUP_MAX; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || pmh_die "$v: '${!v}' is not a positive whole number"
done
for m in $MODES; do
	case "$m" in
	file | emulated) ;;
	*) pmh_die "PMHASH_BENCH_MODES: unknown mode '$m' (file, emulated)" ;;
	esac
done
[ -n "$MODES" ] || pmh_die "PMHASH_BENCH_MODES is empty"

AMS=(btree hash pmhash)
LOGDIR=$PMH_CHECK/bench
mkdir -p "$LOGDIR"
OUT=$(bench_out_dir) || exit 2
TSV=$OUT/replication.tsv
MD=$OUT/replication.md
STATUS=0
T_START=$(pmh_now)
LOAD_BEFORE=$(bench_load)
TICK=$(getconf CLK_TCK 2>/dev/null || echo 100)

# ------------------------------------------------------------- results ---

declare -A V # V[mode|metric|am] = value
printf 'mode\tmetric\tam\tvalue\tunit\n' >"$TSV"
# record MODE METRIC AM VALUE UNIT
record() {
	V["$1|$2|$3"]=$4
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$TSV"
}
# val MODE METRIC AM: a recorded number, or empty
val() { printf '%s' "${V["$1|$2|$3"]:-}"; }
num_or_na() { [ -n "${1:-}" ] && printf '%s' "$1" || printf 'n/a'; }
# calc EXPR A B...: awk arithmetic on a, b, c, d (empty arguments: n/a)
calc() {
	local e=$1
	shift
	local x
	for x in "$@"; do [ -n "$x" ] && [ "$x" != n/a ] || {
		printf 'n/a'
		return
	}; done
	awk -v a="${1:-0}" -v b="${2:-0}" -v c="${3:-0}" -v d="${4:-0}" "BEGIN { $e }"
}
# ratio A B: A / B as "0.62" (n/a when B is not positive)
ratio() {
	if [ -n "${1:-}" ] && [ -n "${2:-}" ] && [ "$1" != n/a ] && [ "$2" != n/a ] &&
		awk -v b="$2" 'BEGIN { exit !(b > 0) }'; then
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
	else
		printf 'n/a'
	fi
}
# verdict_le R LIMIT: "met" if R <= LIMIT
verdict_le() {
	if [ "$1" = n/a ]; then echo n/a; elif awk -v r="$1" -v l="$2" 'BEGIN { exit !(r <= l) }'; then
		echo met
	else echo missed; fi
}
# min A B: the smaller (empty counts as infinity)
min() {
	if [ -z "$1" ]; then echo "$2"; elif [ -z "$2" ]; then echo "$1"; else
		awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'
	fi
}
now_ms() { date +%s%3N; }

# ------------------------------------------------------ build + cluster ---

pmh_cluster_build "$LOGDIR" "${PMHASH_BENCH_SKIP_BUILD:-}"
[ "$PMH_CL_HAVE_PMHASH" = 1 ] || pmh_die "pmhash did not build: nothing to compare"
BIN=$PMH_CL_BINDIR
PMH_CL_KEEP=${PMHASH_BENCH_KEEP:-}

SB_STARTED=0
SB_DATA=
SB_DIR=
SB_LOG=
SB_POOL=
SB_PORT=
standby_stop() {
	if [ "$SB_STARTED" = 1 ]; then
		pmh_server_stop "$BIN" "$SB_DATA"
		SB_STARTED=0
	fi
	[ -n "$SB_LOG" ] && [ -s "$SB_LOG" ] && cp "$SB_LOG" "$LOGDIR/standby-${MODE:-x}.log" 2>/dev/null
	if [ -z "$PMH_CL_KEEP" ]; then
		[ -n "$SB_POOL" ] && rm -rf "$SB_POOL"
		[ -n "$SB_DATA" ] && rm -rf "$SB_DATA"
	fi
	SB_POOL='' SB_DATA='' SB_LOG=''
}
cleanup() {
	standby_stop
	pmh_cluster_stop
}
on_signal() {
	trap '' INT TERM
	echo "interrupted" >&2
	exit 130
}
trap cleanup EXIT
trap on_signal INT TERM

psql_p() { "${PMH_CL_PSQL[@]}" -d bench "$@"; }
psql_s() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SB_DIR" -p "$SB_PORT" -U postgres -d bench "$@"; }

# wait_flushed LSN: until the primary's WAL is flushed up to LSN
# (pg_walinspect reads only flushed WAL; pgbench commits asynchronously)
wait_flushed() {
	psql_p -c "DO \$\$ BEGIN WHILE pg_current_wal_flush_lsn() < '$1'::pg_lsn LOOP PERFORM pg_sleep(0.02); END LOOP; END \$\$" >/dev/null
}

# wal_stats MODE KEY AM L0 L1: the WAL between L0 and L1 by resource
# manager (pg_walinspect): records the FPI bytes, each index rmgr's bytes
# and the number of pmhash INSERT records
wal_stats() {
	local mode=$1 key=$2 am=$3 l0=$4 l1=$5 out
	wait_flushed "$l1" || return 1
	out=$(psql_p -F ' ' <<EOF
SELECT coalesce(sum(fpi_size), 0), coalesce(sum(combined_size) FILTER (WHERE "resource_manager/record_type" IN ('Btree', 'Hash', 'pmhash')), 0),
       coalesce(sum(combined_size) FILTER (WHERE "resource_manager/record_type" IN ('Heap', 'Heap2')), 0),
       coalesce(sum(fpi_size) FILTER (WHERE "resource_manager/record_type" IN ('Btree', 'Hash', 'pmhash')), 0)
FROM pg_get_wal_stats('$l0', '$l1', false);
SELECT coalesce(sum(count), 0), coalesce(sum(record_size), 0)
FROM pg_get_wal_stats('$l0', '$l1', true) WHERE "resource_manager/record_type" = 'pmhash/INSERT';
SELECT string_agg("resource_manager/record_type" || '=' || combined_size || CASE WHEN fpi_size > 0 THEN ' (FPI ' || fpi_size || ')' ELSE '' END, ', ' ORDER BY combined_size DESC)
FROM pg_get_wal_stats('$l0', '$l1', false) WHERE count > 0;
EOF
	) || {
		pmh_err "pg_get_wal_stats failed: $out"
		return 1
	}
	local fpi idx heap idxfpi nrec recsz detail
	read -r fpi idx heap idxfpi <<<"$(sed -n 1p <<<"$out")"
	read -r nrec recsz <<<"$(sed -n 2p <<<"$out")"
	detail=$(sed -n 3p <<<"$out")
	record "$mode" "${key}_fpi_bytes" "$am" "$fpi" B
	record "$mode" "${key}_index_rmgr_bytes" "$am" "$idx" B
	record "$mode" "${key}_index_rmgr_fpi_bytes" "$am" "$idxfpi" B
	record "$mode" "${key}_heap_rmgr_bytes" "$am" "$heap" B
	[ "$am" = pmhash ] && record "$mode" "${key}_pmhash_insert_records" "$am" "$nrec" count
	[ "$am" = pmhash ] && record "$mode" "${key}_pmhash_insert_record_bytes" "$am" "$recsz" B
	pmh_say "      WAL by resource manager: $detail"
}

# ------------------------------------------------------------- probes ---

SETTINGS="SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
SET enable_bitmapscan = off; SET enable_memoize = off; SET enable_material = off;
SET enable_indexonlyscan = off;"
join_query() { echo "SELECT count(*), sum(length(t.payload)) FROM p_$1 p JOIN t_$2 t ON t.k = p.k"; }
plan_ok() { grep -q "Nested Loop" <<<"$2" && grep -q "Index Scan using idx_$1 on t_$1" <<<"$2"; }
# timed_query PSQLFN QUERY: bench_timed_query of QUERY after the probe SETTINGS
timed_query() { bench_timed_query "$1" "$SETTINGS" "$2"; }
per_lookup_ns() { awk -v m="$1" -v n="$PROBES" 'BEGIN { printf "%.0f", m * 1e6 / n }'; }

# probes MODE: the probe joins on the standby (and the primary)
probes() {
	local mode=$1 w am where fn plan ans ref ms cpu r
	local -a wheres=(standby)
	[ "$PRIMARY_PROBES" = 1 ] && wheres+=(primary)
	declare -A best=() bestcpu=()
	for w in pos_uniform neg_uniform; do
		pmh_head "$mode: probe joins, $PROBES lookups ($w), on the ${wheres[*]}"
		ref=''
		for where in "${wheres[@]}"; do
			fn=psql_p
			[ "$where" = standby ] && fn=psql_s
			for am in "${AMS[@]}"; do
				plan=$("$fn" -c "$SETTINGS" -c "EXPLAIN (COSTS OFF) $(join_query "$w" "$am")" 2>&1)
				if ! plan_ok "$am" "$plan"; then
					pmh_err "$where: the plan for $w via $am is not a nested loop over idx_$am:"
					sed 's/^/    /' <<<"$plan"
					STATUS=1
					continue
				fi
				ans=$("$fn" -c "$SETTINGS" -c "$(join_query "$w" "$am")" 2>&1) || {
					pmh_err "$where: join via $am failed: $ans"
					STATUS=1
					continue
				}
				pmh_say "$where $am: plan ok, answer $ans"
				pmh_agree ref "$ans" "$w via $am on the $where" || STATUS=1
			done
		done
		for r in $(seq 1 "$REPEAT"); do
			for am in "${AMS[@]}"; do
				for where in "${wheres[@]}"; do
					fn=psql_p
					[ "$where" = standby ] && fn=psql_s
					ms='' cpu=''
					read -r ms cpu < <(timed_query "$fn" "$(join_query "$w" "$am")")
					[ -n "${ms:-}" ] || continue
					printf '    %-7s %-7s run %d: %s ms (backend CPU %s ms)\n' "$am" "$where" "$r" "$ms" "${cpu:-?}"
					best["$where|$am"]=$(min "${best["$where|$am"]:-}" "$ms")
					[ -n "${cpu:-}" ] && bestcpu["$where|$am"]=$(min "${bestcpu["$where|$am"]:-}" "$cpu")
				done
			done
		done
		for where in "${wheres[@]}"; do
			for am in "${AMS[@]}"; do
				[ -n "${best["$where|$am"]:-}" ] &&
					record "$mode" "probe_${w}_${where}_ns" "$am" "$(per_lookup_ns "${best["$where|$am"]}")" ns
				[ -n "${bestcpu["$where|$am"]:-}" ] &&
					record "$mode" "probecpu_${w}_${where}_ns" "$am" "$(per_lookup_ns "${bestcpu["$where|$am"]}")" ns
			done
		done
		best=() bestcpu=()
	done
}

# ------------------------------------------------------- replay lag ---

# lag_sample T0: one line "t|lag bytes|replay_lag s|current lsn|replay lsn"
# from pg_stat_replication on the primary (t in seconds since T0, epoch
# seconds), then "|lag bytes seen from the standby"
lag_sample() {
	local line cur s
	line=$(psql_p -c "SELECT round((extract(epoch FROM clock_timestamp()) - $1)::numeric, 1),
		pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), coalesce(round(extract(epoch FROM replay_lag)::numeric, 3)::text, ''),
		pg_current_wal_lsn(), replay_lsn FROM pg_stat_replication WHERE state = 'streaming' LIMIT 1" 2>/dev/null) || return 0
	[ -n "$line" ] || return 0
	cur=$(cut -d'|' -f4 <<<"$line")
	s=$(psql_s -c "SELECT pg_wal_lsn_diff('$cur', pg_last_wal_replay_lsn())" 2>/dev/null)
	printf '%s|%s\n' "$line" "$s"
}
# lag_sampler T0_MS OUT STOP: a sample every $SAMPLE s from T0_MS (epoch
# milliseconds) on, until the file STOP exists
lag_sampler() {
	local t0=$1 out=$2 stop=$3 i=0 next t0s
	t0s=$((t0 / 1000)).$(printf '%03d' $((t0 % 1000)))
	while [ ! -e "$stop" ]; do
		lag_sample "$t0s" >>"$out"
		i=$((i + 1))
		next=$((t0 + i * SAMPLE * 1000))
		while [ ! -e "$stop" ] && [ "$(now_ms)" -lt "$next" ]; do
			sleep 0.2
		done
	done
}

# proc_cpu_ticks PID: user + system CPU time of a process (clock ticks)
proc_cpu_ticks() {
	[ -n "$1" ] && awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null
}
# lag_verdict MODE AM: "grows" when the standby fell behind at a steady
# rate -- a least-squares slope of 1 % of the primary's WAL rate or more,
# adding up to 1 MB or more over the run -- else "bounded"
lag_verdict() {
	local slope walrate
	slope=$(val "$1" lag_slope "$2") walrate=$(val "$1" lag_wal_rate "$2")
	[ -n "$slope" ] && [ -n "$walrate" ] || {
		echo n/a
		return
	}
	if awk -v s="$slope" -v T="$LAG_TIME" -v w="$walrate" 'BEGIN { exit !(s * T >= 1048576 && s >= 0.01 * w) }'; then
		echo grows
	else
		echo bounded
	fi
}

# lag_run MODE AM: pgbench inserts on t_AM for $LAG_TIME s with the standby
# streaming
lag_run() {
	local mode=$1 am=$2 stop samples t0 out rc tps l0 l1 lend cu start_lag
	pmh_head "$mode: replay lag, pgbench insert.sql on t_$am, $CLIENTS clients, ${LAG_TIME}s"
	psql_p -c "ALTER TABLE t_$am RENAME TO pgb" >/dev/null || return 1
	psql_p -c "CHECKPOINT" >/dev/null || return 1
	start_lag=$(psql_p -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) FROM pg_stat_replication WHERE state = 'streaming' LIMIT 1")
	samples=$OUT/replication_lag_${mode}_$am.samples
	stop=$LOGDIR/lag.stop
	rm -f "$stop" "$samples"
	# what pmhash persists on each side (pmhash_media_stats: one fence per
	# persist; in file mode a persist is an msync), and the CPU time the
	# standby's startup process (the replay) gets, from /proc
	local f0p f0s f1p f1s spid_startup c0s c1s
	spid_startup=$(psql_s -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'")
	f0p=$(psql_p -c "SELECT fences FROM pmhash_media_stats()")
	f0s=$(psql_s -c "SELECT fences FROM pmhash_media_stats()")
	c0s=$(proc_cpu_ticks "$spid_startup")
	l0=$(psql_p -c "SELECT pg_current_wal_lsn()")
	t0=$(now_ms)
	lag_sampler "$t0" "$samples" "$stop" &
	local spid=$!
	out=$(PGOPTIONS="-c synchronous_commit=$SYNC_COMMIT" "$BIN/pgbench" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres \
		-n -M prepared -T "$LAG_TIME" -c "$CLIENTS" -j "$((CLIENTS < 2 ? CLIENTS : 2))" -D rows="$ROWS" \
		-f "$HERE/pgbench/insert.sql" bench 2>&1)
	rc=$?
	touch "$stop"
	wait "$spid"
	lag_sample "$((t0 / 1000)).$(printf '%03d' $((t0 % 1000)))" >>"$samples" # the end of the run
	tps=$(sed -n -E 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' <<<"$out")
	if [ "$rc" -ne 0 ] || [ -z "$tps" ]; then
		pmh_err "pgbench on t_$am failed (exit $rc):"
		tail -n 20 <<<"$out" | sed 's/^/    /'
		STATUS=1
	fi
	l1=$(psql_p -c "SELECT pg_current_wal_lsn()")
	sleep 0.5 # the WAL writer flushes what the asynchronous commits left
	lend=$(psql_p -c "SELECT pg_current_wal_flush_lsn()")
	# catch-up: until the standby has replayed everything up to lend
	local tc
	tc=$(pmh_now)
	cu=''
	while :; do
		if [ "$(psql_s -c "SELECT pg_last_wal_replay_lsn() >= '$lend'::pg_lsn" 2>/dev/null)" = t ]; then
			cu=$(pmh_elapsed "$tc")
			break
		fi
		if awk -v a="$(pmh_elapsed "$tc")" -v m="$CATCHUP_MAX" 'BEGIN { exit !(a >= m) }'; then
			break
		fi
		sleep 0.2
	done
	c1s=$(proc_cpu_ticks "$spid_startup")
	f1p=$(psql_p -c "SELECT fences FROM pmhash_media_stats()")
	f1s=$(psql_s -c "SELECT fences FROM pmhash_media_stats()")
	local behind=''
	[ -z "$cu" ] && behind=$(psql_s -c "SELECT pg_wal_lsn_diff('$lend', pg_last_wal_replay_lsn())" 2>/dev/null)
	psql_p -c "ALTER TABLE pgb RENAME TO t_$am" >/dev/null || STATUS=1

	# the numbers: samples are t|lag|replay_lag|cur|replay|standby lag
	local n maxlag lastlag slope maxrl walrate replayrate
	n=$(grep -c . "$samples" 2>/dev/null || echo 0)
	read -r maxlag lastlag slope maxrl <<<"$(awk -F'|' -v T="$LAG_TIME" '
		$1 != "" && $2 != "" {
			t = $1 + 0; y = $2 + 0
			if (t <= T + 1) { n++; sx += t; sy += y; sxx += t * t; sxy += t * y; last = y }
			if (y > max) max = y
			if ($3 != "" && $3 + 0 > maxrl) maxrl = $3 + 0
		}
		END {
			slope = (n > 1 && n * sxx - sx * sx > 0) ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0
			printf "%.0f %.0f %.0f %.3f\n", max, last, slope, maxrl
		}' "$samples")"
	walrate=$(psql_p -c "SELECT round(pg_wal_lsn_diff('$l1', '$l0') / $LAG_TIME)")
	local first_replay last_replay t_first t_last
	first_replay=$(head -n 1 "$samples" | cut -d'|' -f5)
	last_replay=$(tail -n 1 "$samples" | cut -d'|' -f5)
	t_first=$(head -n 1 "$samples" | cut -d'|' -f1)
	t_last=$(tail -n 1 "$samples" | cut -d'|' -f1)
	replayrate=''
	if [ -n "$first_replay" ] && [ -n "$last_replay" ]; then
		replayrate=$(psql_p -c "SELECT round(pg_wal_lsn_diff('$last_replay', '$first_replay') / greatest($t_last - $t_first, 0.1))")
	fi
	record "$mode" lag_tps "$am" "$(printf '%.0f' "${tps:-0}")" tps
	record "$mode" lag_wal_rate "$am" "$walrate" B/s
	[ -n "$replayrate" ] && record "$mode" lag_replay_rate "$am" "$replayrate" B/s
	record "$mode" lag_start_bytes "$am" "${start_lag:-0}" B
	record "$mode" lag_max_bytes "$am" "$maxlag" B
	record "$mode" lag_last_bytes "$am" "$lastlag" B
	record "$mode" lag_slope "$am" "$slope" B/s
	record "$mode" lag_max_replay_lag "$am" "$maxrl" s
	record "$mode" lag_samples "$am" "$n" count
	if [ -n "$cu" ]; then
		record "$mode" lag_catchup_s "$am" "$cu" s
	else
		record "$mode" lag_catchup_s "$am" ">$CATCHUP_MAX" s
		record "$mode" lag_behind_after_catchup_bytes "$am" "${behind:-}" B
	fi
	local rows
	rows=$(psql_p -c "SELECT count(*) - $ROWS FROM t_$am")
	record "$mode" lag_rows "$am" "$rows" count
	if [ -n "$f0p" ] && [ -n "$f1p" ] && [ -n "$f0s" ] && [ -n "$f1s" ] && [ "${rows:-0}" -gt 0 ]; then
		record "$mode" lag_primary_persists_per_row "$am" "$(calc 'printf "%.2f", (a - b) / c' "$f1p" "$f0p" "$rows")" count
		record "$mode" lag_standby_persists_per_row "$am" "$(calc 'printf "%.2f", (a - b) / c' "$f1s" "$f0s" "$rows")" count
	fi
	if [ -n "$c0s" ] && [ -n "$c1s" ]; then
		# the share of the run plus catch-up that replay spent on a CPU
		record "$mode" lag_startup_cpu_pct "$am" "$(calc 'printf "%.0f", 100 * (a - b) / c / d' "$c1s" "$c0s" "$TICK" \
			"$(calc 'printf "%.1f", a + b' "$LAG_TIME" "${cu:-$CATCHUP_MAX}")")" %
	fi
	local verdict
	verdict=$(lag_verdict "$mode" "$am")
	printf '    %s: %s tps, WAL %s MB/s, replayed %s MB/s; lag max %s MB, last %s MB, slope %s kB/s, replay_lag max %s s: %s; caught up %s\n' \
		"$am" "${tps:-?}" "$(calc 'printf "%.1f", a / 1048576' "$walrate")" "$(calc 'printf "%.1f", a / 1048576' "$replayrate")" \
		"$(calc 'printf "%.1f", a / 1048576' "$maxlag")" "$(calc 'printf "%.1f", a / 1048576' "$lastlag")" \
		"$(calc 'printf "%.0f", a / 1024' "$slope")" "$maxrl" "$verdict" \
		"$([ -n "$cu" ] && echo "in $cu s" || echo "NOT within $CATCHUP_MAX s: $(calc 'printf "%.1f", a / 1048576' "$behind") MB behind")"
	# the plot's data: seconds, lag in MB (primary's view)
	awk -F'|' '$2 != "" { printf "%s %.3f\n", $1, $2 / 1048576 }' "$samples" >"$OUT/replication_lag_${mode}_$am.dat"
}

# -------------------------------------------------------------- a mode ---

run_mode() {
	local mode=$1 t0 am r kind out ms l0 l1 wal ckpt n
	MODE=$mode
	if [ "$mode" = file ]; then
		unset PMEM_IS_PMEM_FORCE
	fi
	# pmhash's shared memory: the tables, the copies and what the lag runs
	# add (about 7 B per entry)
	local shmem_mb=$((256 + ROWS * 40 / 1048576))
	pmh_cluster_start pmhrepl "$mode" "$LOGDIR" "shared_buffers = '$SHARED_BUFFERS'
maintenance_work_mem = '256MB'
max_wal_size = '8GB'
checkpoint_timeout = '30min'
wal_level = replica
max_wal_senders = 4
hot_standby = on
wal_receiver_status_interval = '1s'
log_line_prefix = '%n [%p] '
pmhash.shared_memory = '${shmem_mb}MB'
${PMHASH_BENCH_CONF:-}"
	MODE_TEXT[$mode]=$PMH_CL_MODE_TEXT
	"${PMH_CL_PSQL[@]}" -d postgres -c 'CREATE DATABASE bench' || pmh_die "CREATE DATABASE failed"
	psql_p -c 'CREATE EXTENSION pmhash' -c 'CREATE EXTENSION pg_walinspect' || pmh_die "CREATE EXTENSION failed"
	[ "$(psql_p -c "SELECT extversion FROM pg_extension WHERE extname = 'pmhash'")" = 0.4 ] ||
		pmh_warn "pmhash is not at version 0.4: pmhash_rebuild_progress() may be missing"

	# ------------------------------------------------------------ data
	pmh_head "$mode: data: 3 x $ROWS rows, 2 x $PROBES probe keys"
	t0=$(pmh_now)
	psql_p -v rows="$ROWS" -v probes="$PROBES" <<'EOF' || pmh_die "loading data failed"
SELECT setseed(0.42);
CREATE TABLE src AS
  SELECT g::int8 AS k, md5(g::text) AS payload
  FROM generate_series(1, :rows) g ORDER BY random();
CREATE TABLE t_btree AS TABLE src;
CREATE TABLE t_hash AS TABLE src;
CREATE TABLE t_pmhash AS TABLE src;
DROP TABLE src;
CREATE TABLE p_pos_uniform AS
  SELECT (1 + floor(random() * :rows))::int8 AS k FROM generate_series(1, :probes);
CREATE TABLE p_neg_uniform AS
  SELECT (:rows + 1 + floor(random() * :rows))::int8 AS k FROM generate_series(1, :probes);
CREATE INDEX idx_btree ON t_btree USING btree (k);
CREATE INDEX idx_hash ON t_hash USING hash (k);
CREATE INDEX idx_pmhash ON t_pmhash USING pmhash (k);
VACUUM (ANALYZE) t_btree, t_hash, t_pmhash, p_pos_uniform, p_neg_uniform;
CHECKPOINT;
EOF
	pmh_say "loaded in $(pmh_elapsed "$t0")s; heap $(psql_p -c "SELECT pg_size_pretty(pg_table_size('t_btree'))") per table"

	# ------------------------------------ INSERT ... SELECT: WAL, upkeep
	local kinds=(logged)
	[ "$UNLOGGED" = 1 ] && kinds+=(unlogged)
	declare -A best=()
	# logged and unlogged take turns within each round, as the methods do
	pmh_head "$mode: INSERT ... SELECT of $ROWS rows into an empty table (${kinds[*]}), best of $REPEAT"
	for r in $(seq 1 "$REPEAT"); do
		for kind in "${kinds[@]}"; do
			for am in none "${AMS[@]}"; do
				local unl='' idx=''
				[ "$kind" = unlogged ] && unl=UNLOGGED
				[ "$am" = none ] || idx="CREATE INDEX ins_k ON ins USING $am (k);"
				psql_p -c "SET client_min_messages = warning" -c "DROP TABLE IF EXISTS ins" -c "CREATE $unl TABLE ins (k int8, payload text)" ${idx:+-c "$idx"} >/dev/null || {
					STATUS=1
					continue
				}
				out=$(psql_p 2>&1 <<EOF
SELECT checkpoints_timed + checkpoints_req AS c0 FROM pg_stat_bgwriter \gset
CHECKPOINT;
SELECT pg_current_wal_insert_lsn() AS l0, clock_timestamp() AS t0 \gset
INSERT INTO ins SELECT k, payload FROM t_btree;
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1) AS ms, pg_current_wal_insert_lsn() AS l1 \gset
SELECT :'ms' || ' ' || :'l0' || ' ' || :'l1' || ' ' || pg_wal_lsn_diff(:'l1', :'l0') || ' ' ||
       ((SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) - :c0 - 1);
EOF
				) || {
					pmh_err "INSERT ... SELECT ($am, $kind) failed: $out"
					STATUS=1
					continue
				}
				read -r ms l0 l1 wal ckpt <<<"$(tail -n 1 <<<"$out")"
				printf '    %-7s %-8s run %d: %s ms, WAL %s B (%s B/row), checkpoints during it: %s\n' "$am" "$kind" "$r" "$ms" "$wal" \
					"$(calc 'printf "%.1f", a / b' "$wal" "$ROWS")" "$ckpt"
				best["$kind|$am"]=$(min "${best["$kind|$am"]:-}" "$ms")
				record "$mode" "iselect_${kind}_ms_run$r" "$am" "$ms" ms
				record "$mode" "iselect_${kind}_wal_bytes_run$r" "$am" "$wal" B
				[ "$ckpt" = 0 ] || record "$mode" "iselect_${kind}_checkpoints_run$r" "$am" "$ckpt" count
				if [ "$kind" = logged ] && [ "$r" = 1 ]; then
					record "$mode" iselect_wal_bytes "$am" "$wal" B
					record "$mode" iselect_checkpoints "$am" "$ckpt" count
					wal_stats "$mode" iselect "$am" "$l0" "$l1" || STATUS=1
				fi
			done
		done
	done
	psql_p -c "DROP TABLE IF EXISTS ins" >/dev/null
	for kind in "${kinds[@]}"; do
		for am in none "${AMS[@]}"; do
			[ -n "${best["$kind|$am"]:-}" ] && record "$mode" "iselect_${kind}_ms" "$am" "${best["$kind|$am"]}" ms
		done
		for am in "${AMS[@]}"; do
			[ -n "${best["$kind|$am"]:-}" ] && [ -n "${best["$kind|none"]:-}" ] || continue
			record "$mode" "upkeep_${kind}_ms" "$am" "$(calc 'printf "%.1f", a - b' "${best["$kind|$am"]}" "${best["$kind|none"]}")" ms
		done
	done
	for am in none "${AMS[@]}"; do
		wal=$(val "$mode" iselect_wal_bytes "$am")
		[ -n "$wal" ] && record "$mode" iselect_wal_per_row "$am" "$(calc 'printf "%.1f", a / b' "$wal" "$ROWS")" B
	done

	# --------------------------------------- pgbench: WAL per single row
	if ! skip pgbench; then
	pmh_head "$mode: WAL of single-row inserts: pgbench insert.sql, $CLIENTS clients, ${PGB_WAL_TIME}s, after a CHECKPOINT"
	for am in none "${AMS[@]}"; do
		local idx=''
		[ "$am" = none ] || idx="CREATE INDEX pgb_k ON pgb USING $am (k);"
		psql_p >/dev/null <<EOF || {
SET client_min_messages = warning;
DROP TABLE IF EXISTS pgb;
CREATE TABLE pgb AS TABLE t_btree;
$idx
VACUUM pgb;
EOF
			STATUS=1
			continue
		}
		# (the checkpointer counts a checkpoint in pg_stat_bgwriter a little
		# after it wakes the CHECKPOINT command: read the counter before
		# ours, and do not count ours)
		ckpt=$(psql_p -c "SELECT checkpoints_timed + checkpoints_req + 1 FROM pg_stat_bgwriter")
		l0=$(psql_p -c 'CHECKPOINT' -c "SELECT pg_current_wal_insert_lsn()")
		out=$(PGOPTIONS="-c synchronous_commit=$SYNC_COMMIT" "$BIN/pgbench" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres \
			-n -M prepared -T "$PGB_WAL_TIME" -c "$CLIENTS" -j "$((CLIENTS < 2 ? CLIENTS : 2))" -D rows="$ROWS" \
			-f "$HERE/pgbench/insert.sql" bench 2>&1)
		local rc=$? tps txns failed ck1
		read -r l1 ck1 <<<"$(psql_p -F ' ' -c "SELECT pg_current_wal_insert_lsn(), checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")"
		tps=$(sed -n -E 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' <<<"$out")
		txns=$(sed -n -E 's/^number of transactions actually processed: ([0-9]+).*/\1/p' <<<"$out")
		failed=$(sed -n -E 's/^number of failed transactions: ([0-9]+).*/\1/p' <<<"$out")
		if [ "$rc" -ne 0 ] || [ -z "$tps" ] || [ -z "$txns" ] || [ "${failed:-0}" != 0 ]; then
			pmh_err "pgbench on pgb ($am) failed (exit $rc):"
			tail -n 20 <<<"$out" | sed 's/^/    /'
			STATUS=1
			continue
		fi
		n=$(psql_p -c "SELECT count(*) - $ROWS FROM pgb")
		[ "$n" = "$txns" ] || pmh_warn "pgbench reported $txns transactions, the table grew by $n rows"
		wal=$(psql_p -c "SELECT pg_wal_lsn_diff('$l1', '$l0')")
		printf '    %-7s %s tps, %s rows, WAL %s B (%s B/row), checkpoints during it: %s\n' "$am" "$tps" "$n" "$wal" \
			"$(calc 'printf "%.1f", a / b' "$wal" "$n")" "$((ck1 - ckpt))"
		record "$mode" pgb_tps "$am" "$(printf '%.0f' "$tps")" tps
		record "$mode" pgb_rows "$am" "$n" count
		record "$mode" pgb_wal_bytes "$am" "$wal" B
		record "$mode" pgb_checkpoints "$am" "$((ck1 - ckpt))" count
		record "$mode" pgb_wal_per_row "$am" "$(calc 'printf "%.1f", a / b' "$wal" "$n")" B
		wal_stats "$mode" pgb "$am" "$l0" "$l1" || STATUS=1
	done
	psql_p -c "DROP TABLE IF EXISTS pgb" -c "CHECKPOINT" >/dev/null
	fi

	# ---------------------------------------------- the standby, rebuild
	if skip standby; then
		pmh_cluster_stop
		return 0
	fi
	pmh_head "$mode: hot standby: pg_basebackup -R -X stream"
	SB_DIR=$PMH_CL_DIR/standby
	SB_DATA=$SB_DIR/data
	SB_LOG=$SB_DIR/server.log
	mkdir -p "$SB_DIR"
	t0=$(pmh_now)
	"$BIN/pg_basebackup" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres -D "$SB_DATA" -R -X stream -c fast \
		>"$LOGDIR/basebackup.log" 2>&1 || {
		pmh_tail "$LOGDIR/basebackup.log"
		pmh_die "pg_basebackup failed"
	}
	record "$mode" basebackup_s none "$(pmh_elapsed "$t0")" s
	SB_PORT=$(pmh_free_port) || pmh_die "no free port"
	{
		echo "# the standby (replication_bench.sh)"
		echo "port = $SB_PORT"
		echo "unix_socket_directories = '$SB_DIR'"
	} >>"$SB_DATA/postgresql.conf"
	if [ "$mode" = emulated ]; then
		SB_POOL=$(mktemp -d /dev/shm/pmhrepl-standby.XXXXXX) || pmh_die "no /dev/shm"
		echo "pmhash.pool_dir = '$SB_POOL'" >>"$SB_DATA/postgresql.conf"
	fi
	pmh_say "base backup in $(val "$mode" basebackup_s none) s; pools: $([ "$mode" = emulated ] && echo "none (a new pool directory $SB_POOL)" || echo "copied with the data directory")"

	pmh_head "$mode: standby start, then pmhash_rebuild_progress('idx_pmhash') until NOT rebuilding"
	local ts tr tries=0 err ready_ms done_ms log_ms entries
	ts=$(now_ms)
	"$BIN/pg_ctl" -D "$SB_DATA" -l "$SB_LOG" -W start >>"$LOGDIR/pg_ctl.log" 2>&1 || pmh_die "standby did not start"
	SB_STARTED=1
	while :; do
		if out=$(psql_s -c "SELECT NOT rebuilding FROM pmhash_rebuild_progress('idx_pmhash')" 2>&1); then
			[ "$out" = t ] && break
		elif ! grep -q -E 'starting up|not yet accepting|No such file|Connection refused|could not connect' <<<"$out"; then
			err=$out
			tries=$((tries + 1))
			[ "$tries" -lt 50 ] || {
				pmh_tail "$SB_LOG" 30
				pmh_die "pmhash_rebuild_progress failed on the standby: $err"
			}
		fi
		if [ $(($(now_ms) - ts)) -gt 600000 ]; then
			pmh_tail "$SB_LOG" 30
			pmh_die "the standby's pool was not rebuilt within 10 minutes"
		fi
		sleep 0.05
	done
	tr=$(now_ms)
	done_ms=$((tr - ts))
	ready_ms=$(sed -n -E 's/^([0-9]+)\.([0-9]{3}) .*ready to accept read-only connections.*$/\1\2/p' "$SB_LOG" | tail -n 1)
	[ -n "$ready_ms" ] && ready_ms=$((ready_ms - ts))
	log_ms=$(sed -n -E 's/^([0-9]+)\.([0-9]{3}) .*idx_pmhash.*pool rebuilt from the table.*$/\1\2/p' "$SB_LOG" | tail -n 1)
	[ -n "$log_ms" ] && log_ms=$((log_ms - ts))
	entries=$(sed -n -E 's/.*idx_pmhash.*pool rebuilt from the table, ([0-9]+) entries stored.*/\1/p' "$SB_LOG" | tail -n 1)
	record "$mode" rebuild_ready_ms standby "${ready_ms:-}" ms
	record "$mode" rebuild_done_ms standby "$done_ms" ms
	[ -n "$log_ms" ] && record "$mode" rebuild_logged_ms standby "$log_ms" ms
	[ -n "$entries" ] && record "$mode" rebuild_entries standby "$entries" count
	record "$mode" rebuild_rows_per_s standby "$(calc 'printf "%.0f", a * 1000 / b' "$ROWS" "$done_ms")" rows/s
	if [ -n "$log_ms" ] && [ -n "$ready_ms" ] && [ "$log_ms" -gt "$ready_ms" ]; then
		record "$mode" rebuild_after_ready_ms standby $((log_ms - ready_ms)) ms
		record "$mode" rebuild_after_ready_rows_per_s standby "$(calc 'printf "%.0f", a * 1000 / b' "$ROWS" $((log_ms - ready_ms)))" rows/s
	fi
	record "$mode" rebuild_ms_per_mrows standby "$(calc 'printf "%.0f", b * 1e6 / a' "$ROWS" "$done_ms")" ms
	pmh_say "standby ready after ${ready_ms:-?} ms; NOT rebuilding seen after $done_ms ms (server log: rebuilt after ${log_ms:-?} ms, ${entries:-?} entries)"
	# everything the standby needs is replayed
	local lsn
	lsn=$(psql_p -c "SELECT pg_current_wal_lsn()")
	for _ in $(seq 1 600); do
		[ "$(psql_s -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn")" = t ] && break
		sleep 0.1
	done

	probes "$mode"

	for am in "${AMS[@]}"; do
		lag_run "$mode" "$am" || STATUS=1
	done

	standby_stop
	pmh_cluster_stop
	cp "$LOGDIR/server.log" "$LOGDIR/server-$mode.log" 2>/dev/null
}

declare -A MODE_TEXT=()
MODE=
for m in $MODES; do
	run_mode "$m"
done

# -------------------------------------------------------------- report ---

# the pre-WAL upkeep of a reference sql.tsv: "pmhash btree hash none"
ref_upkeep() {
	awk -F'\t' '$1 == "insert_upkeep_ms" { u[$2] = $3 } $1 == "insert_none_ms" { n = $3 }
		END { printf "%s %s %s %s\n", u["pmhash"], u["btree"], u["hash"], n }' "$1"
}
ref_desc() {
	local md=${1%.tsv}.md
	if [ -f "$md" ]; then
		sed -n -E 's/^- date: ([^;]*);.*machine: ([^,]*),.*/\1, \2/p' "$md" | head -n 1
	fi
}
# ref_rows TSV: the rows of the reference run (from its sql.md)
ref_rows() {
	local md=${1%.tsv}.md
	[ -f "$md" ] && sed -n -E 's/^- data: ([0-9]+) rows.*/\1/p' "$md" | head -n 1
}
# ref_ratios MODE TSV: pmhash's upkeep now / in the reference run, raw and
# normalised by btree's ("n/a n/a" when the sizes differ)
ref_ratios() {
	local rp rb np nb
	if [ "$(ref_rows "$2")" != "$ROWS" ]; then
		echo "n/a n/a"
		return
	fi
	read -r rp rb _ <<<"$(ref_upkeep "$2")"
	np=$(val "$1" upkeep_logged_ms pmhash) nb=$(val "$1" upkeep_logged_ms btree)
	echo "$(ratio "$np" "$rp") $(calc 'printf "%.2f", (a / b) / (c / d)' "$np" "$nb" "$rp" "$rb")"
}
mb() { calc 'printf "%.1f", a / 1048576' "${1:-}"; }
# per_row MODE KEY AM: bytes of metric KEY per row of that measurement
per_row() {
	local rows=$ROWS
	[[ "$2" == pgb_* ]] && rows=$(val "$1" pgb_rows "$3")
	calc 'printf "%.1f", a / b' "$(val "$1" "$2" "$3")" "$rows"
}

{
	echo "## WAL and a hot standby: pmhash vs btree vs hash (test/bench/replication_bench.sh)"
	echo
	[ "$QUICK" = 1 ] && echo "**A quick (smoke) run: small sizes, short runs. Not for comparison.**" && echo
	echo "- date: $(date '+%Y-%m-%d %H:%M %Z'); tree: ${PMHASH_BENCH_TREE:-unknown}; machine: $(bench_machine); load average before/after: $LOAD_BEFORE / $(bench_load) (a shared machine: read the ratios)"
	echo "- PostgreSQL: $("$BIN/postgres" --version | sed 's/^postgres (PostgreSQL) //'); wal_level = replica; shared_buffers $SHARED_BUFFERS; max_wal_size 8GB, checkpoint_timeout 30min; autovacuum, JIT and parallelism off; the standby: a pg_basebackup -R -X stream of the primary on the same machine (same settings, its own pool directory, wal_receiver_status_interval 1s)"
	echo "- data: $ROWS rows (int8 key 1..$ROWS in random order, 32-char payload), one table per access method; $PROBES present and $PROBES absent keys per probe join; best of $REPEAT"
	for m in $MODES; do echo "- pool mode \`$m\`: ${MODE_TEXT[$m]:-}"; done
	echo
	echo "### Summary"
	echo
	printf '| |'
	for m in $MODES; do printf ' %s: pmhash | %s: btree | %s: hash |' "$m" "$m" "$m"; done
	echo
	printf '| --- |'
	for m in $MODES; do printf ' --- | --- | --- |'; done
	echo
	srow() { # LABEL FUNC: FUNC MODE AM prints a cell
		printf '| %s |' "$1"
		local m a
		for m in $MODES; do for a in pmhash btree hash; do printf ' %s |' "$("$2" "$m" "$a")"; done; done
		echo
	}
	c_iwal() { calc 'printf "%.1f", (a - b) / c' "$(val "$1" iselect_wal_bytes "$2")" "$(val "$1" iselect_wal_bytes none)" "$ROWS"; }
	c_pwal() { calc 'printf "%.1f", a - b' "$(val "$1" pgb_wal_per_row "$2")" "$(val "$1" pgb_wal_per_row none)"; }
	c_pwalnofpi() {
		calc 'printf "%.1f", (a - b) / c' "$(val "$1" pgb_index_rmgr_bytes "$2")" "$(val "$1" pgb_index_rmgr_fpi_bytes "$2")" "$(val "$1" pgb_rows "$2")"
	}
	c_upkeep() { num_or_na "$(val "$1" upkeep_logged_ms "$2")"; }
	c_walcost() { ratio "$(val "$1" upkeep_logged_ms "$2")" "$(val "$1" upkeep_unlogged_ms "$2")"; }
	c_probe() { num_or_na "$(val "$1" probe_pos_uniform_standby_ns "$2")"; }
	c_probeneg() { num_or_na "$(val "$1" probe_neg_uniform_standby_ns "$2")"; }
	c_lag() {
		local v
		v=$(lag_verdict "$1" "$2")
		if [ "$v" = grows ]; then
			printf 'max %s MB, grows %s kB/s (replay_lag up to %s s)' "$(mb "$(val "$1" lag_max_bytes "$2")")" \
				"$(calc 'printf "%.0f", a / 1024' "$(val "$1" lag_slope "$2")")" "$(num_or_na "$(val "$1" lag_max_replay_lag "$2")")"
		else
			printf 'max %s MB, %s' "$(mb "$(val "$1" lag_max_bytes "$2")")" "$v"
		fi
	}
	c_tps() { num_or_na "$(val "$1" lag_tps "$2")"; }
	srow "index WAL per row, INSERT ... SELECT (B; total minus no index)" c_iwal
	srow "index WAL per row, single-row inserts (B; total minus no index)" c_pwal
	srow "  the index's own records without full-page images (B per row)" c_pwalnofpi
	srow "insert upkeep, INSERT ... SELECT, WAL on (ms)" c_upkeep
	[ "$UNLOGGED" = 1 ] && srow "  logged / unlogged upkeep (this run)" c_walcost
	printf '| pmhash upkeep / the pre-WAL run'"'"'s (raw; normalised by btree) |'
	for m in $MODES; do
		refs=REF_FILE
		[ "$m" = emulated ] && refs=REF_EMULATED
		cell=''
		for ref in ${!refs}; do
			[ -f "$PMH_ROOT/$ref" ] || continue
			read -r r1 norm <<<"$(ref_ratios "$m" "$PMH_ROOT/$ref")"
			cell="$cell${cell:+<br>}$r1; $norm ($(sed -n -E 's/^- date: ([0-9-]+).*/\1/p' "$PMH_ROOT/${ref%.tsv}.md" | head -n 1))"
		done
		printf ' %s | | |' "${cell:-n/a}"
	done
	echo
	srow "probe on the standby, present keys (ns / lookup)" c_probe
	srow "probe on the standby, absent keys (ns / lookup)" c_probeneg
	srow "replay lag, ${LAG_TIME}s of inserts at $CLIENTS clients: max, trend" c_lag
	srow "  primary's rate during it (tps)" c_tps
	printf '| pool rebuilt from the heap on the standby, %s rows (ms from standby start; rows/s) |' "$ROWS"
	for m in $MODES; do printf ' %s; %s | | |' "$(num_or_na "$(val "$m" rebuild_done_ms standby)")" "$(num_or_na "$(val "$m" rebuild_rows_per_s standby)")"; done
	echo

	for m in $MODES; do
		echo
		echo "### Pool mode: $m"
		echo
		echo "${MODE_TEXT[$m]:-}"
		echo
		echo "#### 1. WAL per inserted row"
		echo
		echo "INSERT ... SELECT of $ROWS rows into an empty table in one transaction (run 1 of $REPEAT; the other runs' WAL is in the TSV), and pgbench single-row inserts ($CLIENTS clients, ${PGB_WAL_TIME}s, synchronous_commit = $SYNC_COMMIT) into a copy of the $ROWS-row table. Each measurement starts right after a CHECKPOINT, so the first change to each page that existed before it is logged with a full-page image (FPI). pgbench's keys (insert.sql) are new random keys above the table's range: btree puts them at the right edge of its tree, on pages split off after the checkpoint, and so logs almost no FPI; hash spreads them over all its bucket pages and logs each whole at its first change; pmhash logs entries, never pages. The INSERT ... SELECT fills a new, empty index (hash: its initial bucket pages get FPIs). WAL bytes are pg_wal_lsn_diff of pg_current_wal_insert_lsn() before and after (so they include the page headers of the WAL itself); the breakdown is pg_walinspect's."
		echo
		echo "| method | INSERT ... SELECT: B/row | index's own (minus none) | the index's records (B/row) | checkpoints inside | pgbench: rows | B/row | index's own (minus none) | FPI (B/row) | the index's records without FPI (B/row) | checkpoints inside |"
		echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
		for a in none btree hash pmhash; do
			idxown=$(calc 'printf "%.1f", (a - b) / c' "$(val "$m" iselect_wal_bytes "$a")" "$(val "$m" iselect_wal_bytes none)" "$ROWS")
			pidxown=$(calc 'printf "%.1f", a - b' "$(val "$m" pgb_wal_per_row "$a")" "$(val "$m" pgb_wal_per_row none)")
			pnofpi=$(calc 'printf "%.1f", (a - b) / c' "$(val "$m" pgb_index_rmgr_bytes "$a")" "$(val "$m" pgb_index_rmgr_fpi_bytes "$a")" "$(val "$m" pgb_rows "$a")")
			if [ "$a" = none ]; then idxown='' pidxown='' pnofpi=''; fi
			printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$a" \
				"$(num_or_na "$(val "$m" iselect_wal_per_row "$a")")" "$idxown" \
				"$([ "$a" = none ] || per_row "$m" iselect_index_rmgr_bytes "$a")" \
				"$(num_or_na "$(val "$m" iselect_checkpoints "$a")")" \
				"$(num_or_na "$(val "$m" pgb_rows "$a")")" "$(num_or_na "$(val "$m" pgb_wal_per_row "$a")")" "$pidxown" \
				"$(per_row "$m" pgb_fpi_bytes "$a")" "$pnofpi" "$(num_or_na "$(val "$m" pgb_checkpoints "$a")")"
		done
		nrec=$(val "$m" iselect_pmhash_insert_records pmhash)
		if [ -n "$nrec" ] && [ "$nrec" != 0 ]; then
			echo
			echo "pmhash's INSERT records: $nrec for the $ROWS rows of INSERT ... SELECT ($(calc 'printf "%.1f", a / b' "$ROWS" "$nrec") entries and $(calc 'printf "%.0f", a / b' "$(val "$m" iselect_pmhash_insert_record_bytes pmhash)" "$nrec") B each, headers included); $(num_or_na "$(val "$m" pgb_pmhash_insert_records pmhash)") for the $(num_or_na "$(val "$m" pgb_rows pmhash)") single-row inserts ($(calc 'printf "%.0f", a / b' "$(val "$m" pgb_pmhash_insert_record_bytes pmhash)" "$(val "$m" pgb_pmhash_insert_records pmhash)") B each). pgbench rates (tps) while measuring: none $(num_or_na "$(val "$m" pgb_tps none)"), btree $(num_or_na "$(val "$m" pgb_tps btree)"), hash $(num_or_na "$(val "$m" pgb_tps hash)"), pmhash $(num_or_na "$(val "$m" pgb_tps pmhash)")."
		fi
		echo
		echo "#### 2. Insert upkeep with WAL"
		echo
		echo "INSERT ... SELECT of $ROWS rows into an empty table with the index minus the same without one (best of $REPEAT, the methods interleaved, each after a CHECKPOINT), as sql_bench.sh measures it.$([ "$UNLOGGED" = 1 ] && echo " The unlogged columns do the same into an UNLOGGED table, which no method WAL-logs: the difference is what the WAL costs each method in this run.")"
		echo
		if [ "$UNLOGGED" = 1 ]; then
			echo "| method | with index (ms) | upkeep (ms) | unlogged: with index (ms) | unlogged upkeep (ms) | logged / unlogged upkeep | WAL's share (ms) |"
			echo "| --- | --- | --- | --- | --- | --- | --- |"
		else
			echo "| method | with index (ms) | upkeep (ms) |"
			echo "| --- | --- | --- |"
		fi
		for a in none btree hash pmhash; do
			if [ "$UNLOGGED" = 1 ]; then
				printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$a" "$(num_or_na "$(val "$m" iselect_logged_ms "$a")")" \
					"$(val "$m" upkeep_logged_ms "$a")" "$(num_or_na "$(val "$m" iselect_unlogged_ms "$a")")" \
					"$(val "$m" upkeep_unlogged_ms "$a")" \
					"$([ "$a" = none ] || ratio "$(val "$m" upkeep_logged_ms "$a")" "$(val "$m" upkeep_unlogged_ms "$a")")" \
					"$([ "$a" = none ] || calc 'printf "%.1f", a - b' "$(val "$m" upkeep_logged_ms "$a")" "$(val "$m" upkeep_unlogged_ms "$a")")"
			else
				printf '| %s | %s | %s |\n' "$a" "$(num_or_na "$(val "$m" iselect_logged_ms "$a")")" "$(val "$m" upkeep_logged_ms "$a")"
			fi
		done
		refs=REF_FILE
		[ "$m" = emulated ] && refs=REF_EMULATED
		first=1
		for ref in ${!refs}; do
			[ -f "$PMH_ROOT/$ref" ] || {
				echo
				echo "(reference $ref not found)"
				continue
			}
			if [ "$first" = 1 ]; then
				echo
				echo "Against the pre-WAL runs (sql_bench.sh, \`INSERT ... SELECT\` upkeep, best of 3; target: pmhash's upkeep with WAL at most 1.10 x the pre-WAL run's). Another day's run on a shared machine moves every method's time: the normalised ratio divides out btree's change, whose WAL did not change (btree and hash were always logged)."
				echo
				echo "| reference | pmhash then (ms) | pmhash now (ms) | now / then | btree then / now (ms) | hash then / now (ms) | pmhash/btree then / now | normalised: now / then | target <= 1.10 |"
				echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
				first=0
			fi
			if [ "$(ref_rows "$PMH_ROOT/$ref")" != "$ROWS" ]; then
				echo "| $ref | (a run of $(num_or_na "$(ref_rows "$PMH_ROOT/$ref")") rows; this one has $ROWS: not compared) | | | | | | | |"
				continue
			fi
			read -r rp rb rh _ <<<"$(ref_upkeep "$PMH_ROOT/$ref")"
			np=$(val "$m" upkeep_logged_ms pmhash) nb=$(val "$m" upkeep_logged_ms btree) nh=$(val "$m" upkeep_logged_ms hash)
			read -r r1 norm <<<"$(ref_ratios "$m" "$PMH_ROOT/$ref")"
			rbt=$(ratio "$rp" "$rb") rbn=$(ratio "$np" "$nb")
			record "$m" upkeep_vs_prewal_raw "$ref" "$r1" ratio
			record "$m" upkeep_vs_prewal_normalised "$ref" "$norm" ratio
			printf '| %s (%s) | %s | %s | %s | %s / %s | %s / %s | %s / %s | %s | raw %s, normalised %s |\n' "$ref" "$(ref_desc "$PMH_ROOT/$ref")" \
				"$rp" "$(num_or_na "$np")" "$r1" "$rb" "$(num_or_na "$nb")" "$rh" "$(num_or_na "$nh")" "$rbt" "$rbn" "$norm" \
				"$(verdict_le "$r1" 1.10)" "$(verdict_le "$norm" 1.10)"
		done
		echo
		echo "#### 3. The standby's pool, rebuilt from the heap"
		echo
		echo "pg_basebackup took $(num_or_na "$(val "$m" basebackup_s none)") s. $([ "$m" = emulated ] && echo "The standby has its own, empty pool directory on /dev/shm: it lacks the pool" || echo "The standby's pool is the copy in its data directory, which the new pool epoch marks as a copy"), so pmhash starts it empty and rebuilds it from the heap in the background. From \`pg_ctl start\` of the standby: accepting read-only connections after $(num_or_na "$(val "$m" rebuild_ready_ms standby)") ms; \`NOT rebuilding\` first seen after **$(num_or_na "$(val "$m" rebuild_done_ms standby)") ms** (polled every 50 ms; the server log says the rebuild ended after $(num_or_na "$(val "$m" rebuild_logged_ms standby)") ms, with $(num_or_na "$(val "$m" rebuild_entries standby)") entries): $(num_or_na "$(val "$m" rebuild_rows_per_s standby)") rows/s from the standby's start, $(num_or_na "$(val "$m" rebuild_ms_per_mrows standby)") ms per million rows. From accepting connections to the end of the rebuild (the worker's start, its heap scan and the final persist; from the log): $(num_or_na "$(val "$m" rebuild_after_ready_ms standby)") ms, $(num_or_na "$(val "$m" rebuild_after_ready_rows_per_s standby)") rows/s."
		echo
		echo "#### 4. Probe cost on the standby"
		echo
		echo "The nested-loop join of sql_bench.sh ($PROBES lookups, plan checked to be an Index Scan of each index; best of $REPEAT), whole query per lookup$([ "$PRIMARY_PROBES" = 1 ] && echo "; the same on the primary, interleaved, for comparison")."
		echo
		echo "| | pmhash | btree | hash | pmhash / btree | pmhash / hash | target |"
		echo "| --- | --- | --- | --- | --- | --- | --- |"
		local_wheres="standby"
		[ "$PRIMARY_PROBES" = 1 ] && local_wheres="standby primary"
		for where in $local_wheres; do
			for w in pos_uniform neg_uniform; do
				for k in probe probecpu; do
					met=${k}_${w}_${where}_ns
					p=$(val "$m" "$met" pmhash) b=$(val "$m" "$met" btree) h=$(val "$m" "$met" hash)
					label="$where, $([ "$w" = pos_uniform ] && echo present || echo absent) keys ($([ "$k" = probe ] && echo "ns / lookup" || echo "backend CPU ns / lookup"))"
					tgt=''
					[ "$where" = standby ] && [ "$w" = pos_uniform ] && [ "$k" = probe ] &&
						tgt="<= 0.6 x hash: $(verdict_le "$(ratio "$p" "$h")" 0.6)"
					printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$(num_or_na "$p")" "$(num_or_na "$b")" "$(num_or_na "$h")" \
						"$(ratio "$p" "$b")" "$(ratio "$p" "$h")" "$tgt"
				done
			done
		done
		echo
		echo "#### 5. Replay lag under single-row inserts"
		echo
		echo "pgbench insert.sql on the primary, $CLIENTS clients, ${LAG_TIME}s per method (one method's table at a time; the standby replays everything), synchronous_commit = $SYNC_COMMIT, after a CHECKPOINT; every ${SAMPLE}s pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) and replay_lag from pg_stat_replication on the primary. *Slope* is the least-squares trend of the lag over the run; *grows* means the standby fell behind at a steady rate (a slope of 1 % of the primary's WAL rate or more, adding up to 1 MB or more over the run), *bounded* that it did not. *Catch-up*: from the end of the run until the standby had replayed all of it. *Persists per row*: pmhash_media_stats() fences (one per persist: an msync in file mode, a CPU fence on PMem) on each server over the run and the catch-up, per row inserted; *replay CPU*: the CPU time of the standby's startup process over the same span, in % of it."
		echo
		echo "| method | primary (tps) | WAL (MB/s) | replayed (MB/s) | lag at start (MB) | max lag (MB) | last (MB) | slope (kB/s) | max replay_lag (s) | catch-up (s) | trend | pmhash persists per row: primary / standby | replay CPU (%) |"
		echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
		for a in btree hash pmhash; do
			cu=$(num_or_na "$(val "$m" lag_catchup_s "$a")")
			[ -n "$(val "$m" lag_behind_after_catchup_bytes "$a")" ] && cu="$cu ($(mb "$(val "$m" lag_behind_after_catchup_bytes "$a")") MB still behind)"
			printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s |\n' "$a" "$(num_or_na "$(val "$m" lag_tps "$a")")" \
				"$(mb "$(val "$m" lag_wal_rate "$a")")" "$(mb "$(val "$m" lag_replay_rate "$a")")" \
				"$(mb "$(val "$m" lag_start_bytes "$a")")" "$(mb "$(val "$m" lag_max_bytes "$a")")" \
				"$(mb "$(val "$m" lag_last_bytes "$a")")" "$(calc 'printf "%.0f", a / 1024' "$(val "$m" lag_slope "$a")")" \
				"$(num_or_na "$(val "$m" lag_max_replay_lag "$a")")" "$cu" "$(lag_verdict "$m" "$a")" \
				"$(num_or_na "$(val "$m" lag_primary_persists_per_row "$a")")" "$(num_or_na "$(val "$m" lag_standby_persists_per_row "$a")")" \
				"$(num_or_na "$(val "$m" lag_startup_cpu_pct "$a")")"
		done
	done
	echo
	echo "Plots: replication_wal.png (the index's own WAL per row), replication_lag.png (replay lag over time). Every number is in replication.tsv; the lag samples (t | lag B | replay_lag s | primary LSN | replay LSN | lag seen from the standby B) in replication_lag_<mode>_<method>.samples. Total run time $(pmh_elapsed "$T_START") s."
} >"$MD"

# --------------------------------------------------------------- plots ---

{
	printf '# method'
	for m in $MODES; do printf ' iselect-%s pgbench-%s' "$m" "$m"; done
	echo
	for a in btree hash pmhash; do
		printf '%s' "$a"
		for m in $MODES; do
			printf ' %s %s' "$(calc 'printf "%.1f", (a - b) / c' "$(val "$m" iselect_wal_bytes "$a")" "$(val "$m" iselect_wal_bytes none)" "$ROWS")" \
				"$(calc 'printf "%.1f", a - b' "$(val "$m" pgb_wal_per_row "$a")" "$(val "$m" pgb_wal_per_row none)")"
		done
		echo
	done
} >"$OUT/replication_wal.dat"

PLOT_STYLE='set terminal pngcairo size 900,500 font ",10" noenhanced
set datafile missing "n/a"
set grid ytics'
plotcmd=''
i=2
for m in $MODES; do
	if [ -z "$plotcmd" ]; then
		plotcmd="\"replication_wal.dat\" using $i:xtic(1) title \"INSERT ... SELECT ($m)\""
	else
		plotcmd="$plotcmd, \"\" using $i title \"INSERT ... SELECT ($m)\""
	fi
	plotcmd="$plotcmd, \"\" using $((i + 1)) title \"single-row inserts ($m)\""
	i=$((i + 2))
done
bench_plot "$OUT" <<EOF
$PLOT_STYLE
set output "replication_wal.png"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top left
set title "WAL per inserted row of the index (total minus the same without an index), $ROWS rows"
set ylabel "bytes per row"
set yrange [0:*]
plot $plotcmd
EOF

lagplots=''
nm=0
for m in $MODES; do nm=$((nm + 1)); done
{
	echo "$PLOT_STYLE"
	echo "set output \"replication_lag.png\""
	echo "set multiplot layout 1,$nm title \"Replay lag (primary: pg_current_wal_lsn - replay_lsn), pgbench single-row inserts, $CLIENTS clients\""
	echo "set xlabel \"seconds\""
	echo "set ylabel \"lag (MB)\""
	echo "set key top left"
	echo "set yrange [0:*]"
	for m in $MODES; do
		lagplots=''
		for a in btree hash pmhash; do
			f=replication_lag_${m}_$a.dat
			[ -s "$OUT/$f" ] && lagplots="$lagplots${lagplots:+, }\"$f\" using 1:2 with linespoints lw 2 title \"$a\""
		done
		echo "set title \"$m pools\""
		if [ -n "$lagplots" ]; then echo "plot $lagplots"; else echo "plot 0 notitle"; fi
	done
	echo "unset multiplot"
} | bench_plot "$OUT"

pmh_head "results: $MD"
cat "$MD"
[ "$STATUS" -eq 0 ] || pmh_err "some steps failed (see above; logs in $LOGDIR)"
exit "$STATUS"
