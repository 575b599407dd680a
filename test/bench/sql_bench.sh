#!/usr/bin/env bash
# test/bench/sql_bench.sh -- pmhash, btree and hash side by side inside
# PostgreSQL: one throwaway cluster, one run, the same data for all three.
#
#   1. build + tmp_install (test/lib.sh; as root, a copy of the tree runs as
#      "postgres" and the results are copied back)
#   2. a throwaway cluster (pmh_cluster_start), pools in the chosen mode
#   3. data: $ROWS rows (k int8 = 1..ROWS in random order, md5 payload),
#      three identical tables t_pmhash, t_btree, t_hash; probe keys:
#      $PROBES each of positive uniform, positive Zipf($THETA), negative
#      uniform, negative Zipf (Zipf ranks scrambled over the keys)
#   4. CREATE INDEX on each table, best of $REPEAT (DROP + CHECKPOINT +
#      CREATE); bytes per entry: pg_relation_size, for pmhash
#      pmhash_stats().pool_bytes + shmem_bytes
#   5. probe cost: a nested-loop join of each probe table with each indexed
#      table (seqscan, hash/merge join, bitmap scan, memoize, material off;
#      the plan is checked to be an Index Scan using that index), warmed up
#      once (the answers must agree), then best of $REPEAT EXPLAIN (ANALYZE,
#      TIMING OFF), the three methods interleaved; with the positive
#      uniform keys also the floor: the same rows fetched by TID (a Tid Scan
#      as the inner side, i.e. a perfect index), so that "index part" =
#      probe cost - floor; then the positive and negative uniform keys as
#      arrays of $ARRAYLEN, one query "k = ANY (constant array)" per array,
#      as an index scan (pmhash, btree) and as a bitmap scan (all three)
#   6. insert upkeep: INSERT ... SELECT of the $ROWS rows into an empty
#      table with the index minus the same without an index; the same with
#      COPY FROM a file; the same INSERT into a table whose index backs an
#      exclusion constraint (EXCLUDE USING am (k WITH =): each row's check
#      is an index lookup, and pmhash writes each entry at once); best of
#      $REPEAT each, interleaved; for pmhash also the pool syncs of the
#      fastest run (below)
#   7. VACUUM: a fresh copy with the index, VACUUM, DELETE 10 % (50 %) of
#      the rows spread over the table, then VACUUM (INDEX_CLEANUP ON)
#      timed; index part = that minus the same without an index; for
#      pmhash also its pool syncs.  Pool syncs: pmhash_stats()'s syncs and
#      sync_bytes (msync calls, bytes), read in the timed statement's
#      session just before and after it (through to_jsonb, so that a
#      pmhash without those columns reports none and the script still runs)
#   8. inserts while VACUUM runs: for each of the insert scripts
#      (insert.sql, insert10.sql), a fresh copy with the index, pgbench at
#      $VI_CLIENTS clients for $VI_TIME seconds alone, then again while
#      another session runs VACUUM (INDEX_CLEANUP ON) back to back (10 % of
#      the rows deleted before the first, 0.1 % after each), sampling
#      pg_stat_activity every 10 ms: how often an inserting backend waits
#      on pmhash's backup-log lock; synchronous_commit as the first of
#      $SYNC_COMMIT
#   9. pgbench scripts from test/bench/pgbench/ (select-only by key,
#      single-row insert, 10-row insert, 50/50 mixed, YCSB-A-like update
#      mix) at each of $CLIENTS clients, $PGB_TIME seconds each, -M
#      prepared, on the three tables in turn (renamed to "pgb"),
#      $PGB_ROUNDS rounds of the three taking turns, the median of each
#      method's runs reported; VACUUM after each write script.
#      synchronous_commit: select_only, mixed and ycsb_a run under the
#      first setting of $SYNC_COMMIT ("off on"), insert and insert10 under
#      each (off: no WAL flush at commit, which is the same for all three
#      and would hide the index; on: PostgreSQL's default, what a new user
#      gets; pmhash persists its backup log before each commit record
#      either way).  The scripts of earlier versions run first, in their
#      old order, then insert10, then the other settings' runs, so that the
#      old rows are measured on tables grown as before; tsv names: those
#      of earlier versions under the first setting, then
#      pgbench_<script>_synccommit_<setting>_c<clients>_*
#  10. report: sql.md (markdown: absolute numbers, ratios to btree and hash,
#      the targets: issue 30's, set for ordinary-file pools and judged in
#      either mode, insert upkeep <= 0.5 x hash's, COPY upkeep <= hash's,
#      the index part of VACUUM after 10 % and 50 % <= btree's, CREATE
#      INDEX <= 0.5 x btree's, the pgbench insert scripts >= btree's TPS
#      under every synchronous_commit; and the older probe and select-only
#      ones), sql.tsv (one row per number), PNG plots (gnuplot), all in
#      test/bench/results/<date>/ (or $PMHASH_BENCH_OUT)
#
# Numbers are measurements, never assertions: the exit status is 0 unless
# a step failed or the access methods disagreed on an answer.
#
# Knobs: PMHASH_BENCH_ROWS (1000000), PMHASH_BENCH_PROBES (1000000),
#        PMHASH_BENCH_ARRAY (1000 keys per array of the = ANY probes),
#        PMHASH_BENCH_REPEAT (3), PMHASH_BENCH_THETA (0.99),
#        PMHASH_BENCH_PGBENCH_TIME (5 seconds per run; 0 skips pgbench),
#        PMHASH_BENCH_PGBENCH_ROUNDS (3: each number is the median of
#        that many runs, the three methods taking turns),
#        PMHASH_BENCH_VACINS_TIME (10 seconds per run of step 8; 0 skips
#        it), PMHASH_BENCH_VACINS_CLIENTS (4),
#        PMHASH_BENCH_CLIENTS ("1 2 8"), PMHASH_BENCH_PGBENCH_SCRIPTS
#        (the pgbench scripts to run, default "select_only insert mixed
#        ycsb_a insert10"), PMHASH_BENCH_SYNC_COMMIT ("off
#        on": the synchronous_commit settings of step 9's insert scripts;
#        the first also for every other pgbench run),
#        PMHASH_BENCH_PIN_ONE (1: a 1-client pgbench run and its backend
#        share one CPU; 0: the scheduler places them),
#        PMHASH_BENCH_SHARED_BUFFERS (1GB),
#        PMHASH_BENCH_MODE ("emulated": pools on /dev/shm with
#        PMEM_IS_PMEM_FORCE=1; "file": pools in the data directory, msync),
#        PMHASH_BENCH_SKIP ("vacuum,pgbench,..." steps to skip: build,
#        probe, upkeep, vacuum, vacins, pgbench), PMHASH_BENCH_OUT (results
#        directory), PMHASH_BENCH_SKIP_BUILD=1 (reuse tmp_install),
#        PMHASH_BENCH_KEEP=1 (keep the cluster directory), PMHASH_BENCH_CONF
#        (extra postgresql.conf lines), PG_CONFIG.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"
# shellcheck source=test/bench/bench_lib.sh
. "$HERE/bench_lib.sh"

PMH_COPY_BACK_PATHS="test/bench/results"
pmh_drop_root test/bench/sql_bench.sh "$@" # exits if we are root

pmh_init_pg_paths
cd "$PMH_ROOT" || exit 2

ROWS=${PMHASH_BENCH_ROWS:-1000000}
PROBES=${PMHASH_BENCH_PROBES:-1000000}
ARRAYLEN=${PMHASH_BENCH_ARRAY:-1000}
REPEAT=${PMHASH_BENCH_REPEAT:-3}
THETA=${PMHASH_BENCH_THETA:-0.99}
PGB_TIME=${PMHASH_BENCH_PGBENCH_TIME:-5}
PGB_ROUNDS=${PMHASH_BENCH_PGBENCH_ROUNDS:-3}
VI_TIME=${PMHASH_BENCH_VACINS_TIME:-10}
VI_CLIENTS=${PMHASH_BENCH_VACINS_CLIENTS:-4}
CLIENTS=${PMHASH_BENCH_CLIENTS:-1 2 8}
SYNC_COMMIT=${PMHASH_BENCH_SYNC_COMMIT:-off on}
SHARED_BUFFERS=${PMHASH_BENCH_SHARED_BUFFERS:-1GB}
MODE=${PMHASH_BENCH_MODE:-emulated}
SKIP=",${PMHASH_BENCH_SKIP:-},"
skip() { [[ "$SKIP" == *",$1,"* ]]; }
[[ "$PGB_ROUNDS" =~ ^[1-9][0-9]*$ ]] ||
	pmh_die "PMHASH_BENCH_PGBENCH_ROUNDS: '$PGB_ROUNDS' is not a positive whole number"
# the synchronous_commit settings of the pgbench write scripts; the first
# is also that of every other pgbench run
read -r -a SYNCS <<<"$SYNC_COMMIT"
[ "${#SYNCS[@]}" -gt 0 ] || pmh_die "PMHASH_BENCH_SYNC_COMMIT: no setting given"
for sc in "${SYNCS[@]}"; do
	case "$sc" in
		on | off | local | remote_write | remote_apply) ;;
		*) pmh_die "PMHASH_BENCH_SYNC_COMMIT: '$sc' is not a value of synchronous_commit" ;;
	esac
	[ "$(printf '%s\n' "${SYNCS[@]}" | grep -cx "$sc")" = 1 ] ||
		pmh_die "PMHASH_BENCH_SYNC_COMMIT: '$sc' is listed twice"
done
SYNC_FIRST=${SYNCS[0]}
# the insert scripts: run beside VACUUM (step 8), and in pgbench (step 9)
# under every synchronous_commit setting
WRITE_SCRIPTS=(insert insert10)
PIN_ONE=${PMHASH_BENCH_PIN_ONE:-1}
[[ "$PIN_ONE" =~ ^[01]$ ]] ||
	pmh_die "PMHASH_BENCH_PIN_ONE: '$PIN_ONE' is neither 0 nor 1"

LOGDIR=$PMH_CHECK/bench
mkdir -p "$LOGDIR"
OUT=$(bench_out_dir) || exit 2 # (pmh_die in $(...) leaves only the subshell)
TSV=$OUT/sql.tsv
MD=$OUT/sql.md
STATUS=0
T_START=$(pmh_now)
LOAD_BEFORE=$(bench_load)

# ------------------------------------------------------ build + cluster ---

pmh_cluster_build "$LOGDIR" "${PMHASH_BENCH_SKIP_BUILD:-}"
[ "$PMH_CL_HAVE_PMHASH" = 1 ] || pmh_die "pmhash did not build: nothing to compare"

PMH_CL_KEEP=${PMHASH_BENCH_KEEP:-}
on_signal() {
	trap '' INT TERM
	echo "interrupted" >&2
	exit 130
}
trap pmh_cluster_stop EXIT
trap on_signal INT TERM
# shared memory of pmhash: ~3 B per entry, for up to 6 indexes of $ROWS
# pmhash.shared_memory is a fixed cap (issue 31): besides the tables of
# $ROWS, leave room for the rows pgbench's write scripts add, some tens of
# millions once inserts run at tens of thousands of rows per second
SHMEM_MB=$((64 + ROWS * 18 / 1048576))
[ "$PGB_TIME" = 0 ] || SHMEM_MB=$((SHMEM_MB + 1536))
pmh_cluster_start pmhbench "$MODE" "$LOGDIR" "shared_buffers = '$SHARED_BUFFERS'
maintenance_work_mem = '256MB'
max_wal_size = '8GB'
checkpoint_timeout = '30min'
pmhash.shared_memory = '${SHMEM_MB}MB'
${PMHASH_BENCH_CONF:-}"

sql() { "${PMH_CL_PSQL[@]}" -d bench "$@"; }
"${PMH_CL_PSQL[@]}" -d postgres -c 'CREATE DATABASE bench' || pmh_die "CREATE DATABASE failed"
sql -c 'CREATE EXTENSION pmhash' || pmh_die "CREATE EXTENSION pmhash failed"

AMS=(pmhash btree hash)
: >"$TSV"
printf 'metric\tam\tvalue\tunit\n' >>"$TSV"
declare -A V # V[metric|am] = value

# record METRIC AM VALUE UNIT
record() {
	V["$1|$2"]=$3
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$TSV"
}

# val METRIC AM: a recorded number, or empty
val() { printf '%s' "${V["$1|$2"]:-}"; }

# timed_sql SQL...: bench_timed_sql in the bench database
timed_sql() { bench_timed_sql sql "$@"; }

# timed_sql_syncs INDEX SQL...: timed_sql, and what the last statement
# cost pmhash index INDEX in pool syncs: pmhash_stats()'s syncs and
# sync_bytes (msync calls and the bytes they covered), read in the same
# session just before and after the statement; prints "MS SYNCS BYTES",
# SYNCS and BYTES "-" when this pmhash does not report them (to_jsonb:
# NULL for a column pmhash_stats does not have)
timed_sql_syncs() {
	local idx=$1 out
	shift
	out=$(sql 2>&1 <<EOF
CHECKPOINT;
SELECT coalesce(to_jsonb(s) ->> 'syncs', '') AS s0, coalesce(to_jsonb(s) ->> 'sync_bytes', '') AS b0
  FROM pmhash_stats('$idx'::regclass) s \gset
SELECT clock_timestamp() AS t0 \gset
$*;
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1) AS ms \gset
SELECT concat_ws(' ', :'ms',
         coalesce(((to_jsonb(s) ->> 'syncs')::numeric - nullif(:'s0', '')::numeric)::text, '-'),
         coalesce(((to_jsonb(s) ->> 'sync_bytes')::numeric - nullif(:'b0', '')::numeric)::text, '-'))
  FROM pmhash_stats('$idx'::regclass) s;
EOF
	) || {
		pmh_err "SQL failed: $out"
		return 1
	}
	tail -n 1 <<<"$out"
}

# syncs_text SYNCS BYTES: how a report states them
syncs_text() {
	if [ "${1:--}" = - ] || [ "${2:--}" = - ]; then
		printf 'not reported by this pmhash'
	else
		printf '%s msync calls, %s bytes' "$1" "$2"
	fi
}

min() { bench_min "$@"; }

# ----------------------------------------------------------------- data ---

pmh_head "data: 3 x $ROWS rows; probe keys: 4 x $PROBES"
t0=$(pmh_now)
sql -v rows="$ROWS" -v probes="$PROBES" -v theta="$THETA" -v arraylen="$ARRAYLEN" <<'EOF' || pmh_die "loading data failed"
SELECT setseed(0.42);
CREATE TABLE src AS
  SELECT g::int8 AS k, md5(g::text) AS payload
  FROM generate_series(1, :rows) g ORDER BY random();
CREATE TABLE t_pmhash AS TABLE src;
CREATE TABLE t_btree AS TABLE src;
CREATE TABLE t_hash AS TABLE src;
DROP TABLE src;

-- Zipf(theta) ranks (Gray et al., as YCSB), scrambled over the keys by a
-- multiplicative bijection modulo :rows
SELECT sum(power(i::float8, -:theta)) AS zetan FROM generate_series(1, :rows) i \gset
SELECT 1 + power(0.5, :theta) AS half, 1.0 / (1.0 - :theta) AS alpha,
       (1 - power(2.0 / :rows, 1 - :theta)) / (1 - (1 + power(2.0, -:theta)) / :zetan) AS eta \gset
-- (psql does not interpolate inside quoted strings: no SQL function here)
CREATE TABLE zipf_ranks AS
  SELECT CASE WHEN u * :zetan < 1 THEN 0
              WHEN u * :zetan < :half THEN 1
              ELSE least(floor(:rows * power(:eta * u - :eta + 1, :alpha))::int8, :rows - 1)
         END AS r
  FROM (SELECT random() AS u FROM generate_series(1, 2 * :probes)) s;
CREATE TABLE p_pos_uniform AS
  SELECT (1 + floor(random() * :rows))::int8 AS k FROM generate_series(1, :probes);
CREATE TABLE p_pos_zipf AS
  SELECT 1 + (r * 2654435761) % :rows AS k FROM zipf_ranks LIMIT :probes;
CREATE TABLE p_neg_uniform AS
  SELECT (:rows + 1 + floor(random() * :rows))::int8 AS k FROM generate_series(1, :probes);
CREATE TABLE p_neg_zipf AS
  SELECT :rows + 1 + (r * 2654435761) % :rows AS k FROM zipf_ranks OFFSET :probes;
DROP TABLE zipf_ranks;
-- the same keys in arrays of :arraylen, for "k = ANY (array)" probes
CREATE TABLE pa_pos_uniform AS
  SELECT array_agg(k) AS a FROM (SELECT k, (row_number() OVER () - 1) / :arraylen AS grp
                                 FROM p_pos_uniform) s GROUP BY grp;
CREATE TABLE pa_neg_uniform AS
  SELECT array_agg(k) AS a FROM (SELECT k, (row_number() OVER () - 1) / :arraylen AS grp
                                 FROM p_neg_uniform) s GROUP BY grp;
-- one query per array, the array a constant of it; the rows and payload
-- bytes found
CREATE FUNCTION any_probe(tbl text, arrays text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
	arr int8[];
	c int8;
	l int8;
	total_c int8 := 0;
	total_l int8 := 0;
BEGIN
	FOR arr IN EXECUTE format('SELECT a FROM %I', arrays) LOOP
		EXECUTE format('SELECT count(*), sum(length(payload)) FROM %I WHERE k = ANY ($1)', tbl)
			INTO c, l USING arr;
		total_c := total_c + c;
		total_l := total_l + coalesce(l, 0);
	END LOOP;
	RETURN total_c || '|' || total_l;
END $f$;
-- the floor of probe cost: the same rows fetched by TID (a perfect index)
CREATE TABLE p_floor AS
  SELECT t.ctid AS tid
  FROM (SELECT row_number() OVER () AS ord, k FROM p_pos_uniform) p JOIN t_btree t ON t.k = p.k
  ORDER BY p.ord;
VACUUM (ANALYZE) t_pmhash, t_btree, t_hash, p_pos_uniform, p_pos_zipf, p_neg_uniform, p_neg_zipf, p_floor,
  pa_pos_uniform, pa_neg_uniform;
CHECKPOINT;
EOF
ZIPF_TOP=$(sql -c "SELECT round(100.0 * max(c) / $PROBES, 1) || ' % of the Zipf probes hit the hottest key, ' || count(*) || ' distinct keys'
	FROM (SELECT count(*) AS c FROM p_pos_zipf GROUP BY k) s")
pmh_say "loaded in $(pmh_elapsed "$t0")s; heap $(sql -c "SELECT pg_size_pretty(pg_table_size('t_btree'))") per table; Zipf: $ZIPF_TOP"

# ------------------------------------------------------- CREATE INDEX ---

for r in $(seq 1 "$REPEAT"); do
	for am in "${AMS[@]}"; do
		sql -c "DROP INDEX IF EXISTS idx_$am" >/dev/null
		ms=$(timed_sql "CREATE INDEX idx_$am ON t_$am USING $am (k)") || {
			STATUS=1
			continue
		}
		pmh_say "CREATE INDEX USING $am, run $r: $ms ms"
		V["build|$am"]=$(min "${V["build|$am"]:-}" "$ms")
	done
done
pmh_head "CREATE INDEX (best of $REPEAT) and size"
for am in "${AMS[@]}"; do
	record build_ms "$am" "${V["build|$am"]:-}" ms
	if [ "$am" = pmhash ]; then
		IFS='|' read -r pool shm n lf <<<"$(sql -c "SELECT pool_bytes, shmem_bytes, entries, round(load_factor::numeric, 2) FROM pmhash_stats('idx_pmhash')")"
		record pool_bytes_per_entry pmhash "$(awk -v a="$pool" -v n="$n" 'BEGIN { printf "%.2f", a / n }')" B
		record shmem_bytes_per_entry pmhash "$(awk -v a="$shm" -v n="$n" 'BEGIN { printf "%.2f", a / n }')" B
		record load_factor pmhash "$lf" ""
		bytes=$((pool + shm))
	else
		bytes=$(sql -c "SELECT pg_relation_size('idx_$am')")
	fi
	record bytes_per_entry "$am" "$(awk -v a="$bytes" -v n="$ROWS" 'BEGIN { printf "%.2f", a / n }')" B
	pmh_say "$am: ${V["build|$am"]:-?} ms, ${V["bytes_per_entry|$am"]} B/entry"
done
sql -c 'CHECKPOINT' >/dev/null

# ---------------------------------------------------------- probe cost ---

SETTINGS="SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
SET enable_bitmapscan = off; SET enable_memoize = off; SET enable_material = off;
SET enable_indexonlyscan = off;"
WORKLOADS=(pos_uniform pos_zipf neg_uniform neg_zipf)
join_query() {
	if [ "$2" = tid ]; then
		echo "SELECT count(*), sum(length(t.payload)) FROM p_floor p JOIN t_btree t ON t.ctid = p.tid"
	else
		echo "SELECT count(*), sum(length(t.payload)) FROM p_$1 p JOIN t_$2 t ON t.k = p.k"
	fi
}
# timed_query SETTINGS QUERY: bench_timed_query through this cluster's psql
timed_query() { bench_timed_query sql "$1" "$2"; }
# probe_run WORKLOAD AM: timed_query of the probe join
probe_run() { timed_query "$SETTINGS" "$(join_query "$1" "$2")"; }
# any_query TABLE ARRAY: the query of one "= ANY" probe
any_query() {
	echo "SELECT count(*), sum(length(payload)) FROM $1 WHERE k = ANY ($2)"
}
# any_settings KIND: the probe settings for an "index" or a "bitmap" scan
any_settings() {
	if [ "$1" = bitmap ]; then
		echo "$SETTINGS SET enable_bitmapscan = on; SET enable_indexscan = off;"
	else
		echo "$SETTINGS"
	fi
}
# per_lookup_ns MS: a run of $PROBES lookups in MS milliseconds, as ns each
per_lookup_ns() { awk -v m="$1" -v n="$PROBES" 'BEGIN { printf "%.0f", m * 1e6 / n }'; }

plan_ok() {
	grep -q "Nested Loop" <<<"$3" || return 1
	if [ "$2" = tid ]; then
		grep -q "Tid Scan on t_btree" <<<"$3"
	else
		grep -q "Index Scan using idx_$2 on t_$2" <<<"$3"
	fi
}

if ! skip probe; then
	for w in "${WORKLOADS[@]}"; do
		pmh_head "probe: nested loop, $PROBES lookups ($w)"
		ref=''
		ams=("${AMS[@]}")
		[ "$w" = pos_uniform ] && ams+=(tid)
		for am in "${ams[@]}"; do
			plan=$(sql -c "$SETTINGS" -c "EXPLAIN (COSTS OFF) $(join_query "$w" "$am")" 2>&1)
			if ! plan_ok "$w" "$am" "$plan"; then
				pmh_err "the plan for $w via $am is not a nested loop over idx_$am:"
				echo "$plan" | sed 's/^/    /'
				STATUS=1
				continue
			fi
			# warm-up, and the answers must agree
			ans=$(sql -c "$SETTINGS" -c "$(join_query "$w" "$am")" 2>&1) || {
				pmh_err "join via $am failed: $ans"
				STATUS=1
				continue
			}
			pmh_say "$am: plan ok, answer $ans"
			pmh_agree ref "$ans" "$w via $am" || STATUS=1
		done
		for r in $(seq 1 "$REPEAT"); do
			for am in "${ams[@]}"; do
				read -r ms cpu < <(probe_run "$w" "$am")
				[ -n "$ms" ] || continue
				printf '    %-7s run %d: %s ms (backend CPU %s ms)\n' "$am" "$r" "$ms" "${cpu:-?}"
				V["probe_$w|$am"]=$(min "${V["probe_$w|$am"]:-}" "$ms")
				[ -n "$cpu" ] && V["probecpu_$w|$am"]=$(min "${V["probecpu_$w|$am"]:-}" "$cpu")
			done
		done
		for am in "${ams[@]}"; do
			for k in probe probecpu; do
				ms=${V["${k}_$w|$am"]:-}
				[ -n "$ms" ] || continue
				record "${k}_${w}_ns" "$am" "$(per_lookup_ns "$ms")" ns
			done
		done
	done
	# "k = ANY (array)": each of the probe tables' arrays of $ARRAYLEN keys
	# is a constant of its own query (any_probe: EXECUTE ... USING, planned
	# with the array as a constant, as a query with an IN list or a bound
	# parameter is), so that the executor's recheck of the rows an index
	# returns hashes the array instead of searching it.  pmhash and btree
	# take the array in one index scan; a hash index cannot (no
	# amsearcharray), so it gets the bitmap scan, which runs one index scan
	# per element; each AM also with that.
	for w in pos_uniform neg_uniform; do
		pmh_head "probe: = ANY (constant arrays of $ARRAYLEN keys), $PROBES lookups ($w)"
		ref=''
		ok=()
		for v in pmhash:index btree:index pmhash:bitmap btree:bitmap hash:bitmap; do
			am=${v%%:*} kind=${v#*:}
			set_=$(any_settings "$kind")
			plan=$(sql -c "$set_" -c "EXPLAIN (COSTS OFF) $(any_query "t_$am" "'{1,2,3,4,5,6,7,8,9,10}'::int8[]")" 2>&1)
			want="Index Scan using idx_$am on t_$am"
			[ "$kind" = bitmap ] && want="Bitmap Index Scan on idx_$am"
			if ! grep -q "$want" <<<"$plan" || ! grep -q "ANY" <<<"$plan"; then
				pmh_err "the plan for = ANY ($w) via $am ($kind) does not use idx_$am:"
				echo "$plan" | sed 's/^/    /'
				STATUS=1
				continue
			fi
			ans=$(sql -c "$set_" -c "SELECT any_probe('t_$am', 'pa_$w')" 2>&1) || {
				pmh_err "= ANY via $am ($kind) failed: $ans"
				STATUS=1
				continue
			}
			pmh_say "$am ($kind): plan ok, answer $ans"
			pmh_agree ref "$ans" "= ANY $w via $am ($kind)" || STATUS=1
			ok+=("$v")
		done
		for r in $(seq 1 "$REPEAT"); do
			for v in "${ok[@]}"; do
				am=${v%%:*} kind=${v#*:}
				set_=$(any_settings "$kind")
				read -r ms cpu < <(timed_query "$set_" "SELECT any_probe('t_$am', 'pa_$w')")
				[ -n "$ms" ] || continue
				printf '    %-7s %-6s run %d: %s ms (backend CPU %s ms)\n' "$am" "$kind" "$r" "$ms" "${cpu:-?}"
				V["any${kind}_$w|$am"]=$(min "${V["any${kind}_$w|$am"]:-}" "$ms")
			done
		done
		for kind in index bitmap; do
			for am in "${AMS[@]}"; do
				ms=${V["any${kind}_$w|$am"]:-}
				[ -n "$ms" ] || continue
				record "any${kind}_${w}_ns" "$am" "$(per_lookup_ns "$ms")" ns
			done
		done
	done
	for k in probe probecpu; do
		floor=$(val "${k}_pos_uniform_ns" tid)
		for am in "${AMS[@]}"; do
			p=$(val "${k}_pos_uniform_ns" "$am")
			[ -n "$p" ] && [ -n "$floor" ] || continue
			record "${k}_pos_uniform_index_ns" "$am" $((p - floor)) ns
		done
	done
fi

# record_syncs STEP: the pool syncs of pmhash's STEP (V[STEP_syncs|pmhash],
# V[STEP_sync_bytes|pmhash]) into sql.tsv, as STEP_syncs and
# STEP_sync_bytes, when this pmhash reports them
record_syncs() {
	local sy=${V["${1}_syncs|pmhash"]:-} sb=${V["${1}_sync_bytes|pmhash"]:-}
	[ -n "$sy" ] && [ "$sy" != - ] && record "${1}_syncs" pmhash "$sy" count
	[ -n "$sb" ] && [ "$sb" != - ] && record "${1}_sync_bytes" pmhash "$sb" B
	return 0
}

# ------------------------------------------------------- insert upkeep ---

if ! skip upkeep; then
	COPY_FILE=$PMH_CL_DIR/rows.copy
	sql -c "COPY t_btree TO '$COPY_FILE'" || pmh_die "COPY TO failed"
	for how in insert copy exclusion; do
		pmh_head "insert upkeep ($how): $ROWS rows into an empty table, best of $REPEAT"
		if [ "$how" = copy ]; then
			stmt="COPY ins FROM '$COPY_FILE'"
		else
			stmt="INSERT INTO ins SELECT k, payload FROM t_btree"
		fi
		for r in $(seq 1 "$REPEAT"); do
			for am in none "${AMS[@]}"; do
				case "$am:$how" in
					none:*) idx='' ;;
					*:exclusion) idx="ALTER TABLE ins ADD CONSTRAINT ins_k EXCLUDE USING $am (k WITH =);" ;;
					*) idx="CREATE INDEX ins_k ON ins USING $am (k);" ;;
				esac
				sql -c "DROP TABLE IF EXISTS ins" -c "CREATE TABLE ins (k int8, payload text)" ${idx:+-c "$idx"} >/dev/null ||
					{
						STATUS=1
						continue
					}
				syncs=''
				if [ "$am" = pmhash ]; then
					sql -c "SELECT pmhash_reset_stats()" >/dev/null
					out=$(timed_sql_syncs ins_k "$stmt") || {
						STATUS=1
						continue
					}
					read -r ms sy sb <<<"$out"
					syncs=" (pool syncs: $(syncs_text "$sy" "$sb"))"
				else
					ms=$(timed_sql "$stmt") || {
						STATUS=1
						continue
					}
				fi
				printf '    %-7s run %d: %s ms%s\n' "$am" "$r" "$ms" "$syncs"
				best=$(min "${V["$how|$am"]:-}" "$ms")
				# the syncs of the fastest run, the one whose time counts
				if [ "$am" = pmhash ] && [ "$best" = "$ms" ]; then
					V["${how}_syncs|pmhash"]=$sy V["${how}_sync_bytes|pmhash"]=$sb
				fi
				V["$how|$am"]=$best
				if [ "$am" = pmhash ] && [ "$how" = insert ]; then
					V["wa|pmhash"]=$(sql -c "SELECT round(write_amplification::numeric, 2) FROM pmhash_stats('ins_k')")
				fi
			done
		done
		sql -c "DROP TABLE IF EXISTS ins" >/dev/null
		record "${how}_none_ms" none "${V["$how|none"]:-}" ms
		for am in "${AMS[@]}"; do
			[ -n "${V["$how|$am"]:-}" ] && [ -n "${V["$how|none"]:-}" ] || continue
			record "${how}_upkeep_ms" "$am" "$(awk -v a="${V["$how|$am"]}" -v b="${V["$how|none"]}" 'BEGIN { printf "%.1f", a - b }')" ms
		done
		record_syncs "$how"
	done
	[ -n "${V["wa|pmhash"]:-}" ] && record insert_write_amplification pmhash "${V["wa|pmhash"]}" ""
	rm -f "$COPY_FILE"
fi

# -------------------------------------------------------------- VACUUM ---

if ! skip vacuum; then
	for pct in 10 50; do
		pmh_head "VACUUM after deleting $pct % of $ROWS rows"
		for am in none "${AMS[@]}"; do
			idx=''
			[ "$am" = none ] || idx="CREATE INDEX vac_k ON vac USING $am (k);"
			if ! sql >/dev/null <<EOF; then
DROP TABLE IF EXISTS vac;
CREATE TABLE vac AS TABLE t_btree;
$idx
VACUUM vac;
DELETE FROM vac WHERE k % 100 < $pct;
EOF
				STATUS=1
				continue
			fi
			syncs=''
			if [ "$am" = pmhash ]; then
				out=$(timed_sql_syncs vac_k "VACUUM (INDEX_CLEANUP ON) vac") || {
					STATUS=1
					continue
				}
				read -r ms sy sb <<<"$out"
				syncs=" (pool syncs: $(syncs_text "$sy" "$sb"))"
				V["vacuum${pct}_syncs|pmhash"]=$sy V["vacuum${pct}_sync_bytes|pmhash"]=$sb
			else
				ms=$(timed_sql "VACUUM (INDEX_CLEANUP ON) vac") || {
					STATUS=1
					continue
				}
			fi
			printf '    %-7s %s ms%s\n' "$am" "$ms" "$syncs"
			V["vac$pct|$am"]=$ms
		done
		sql -c "DROP TABLE IF EXISTS vac" >/dev/null
		record "vacuum${pct}_none_ms" none "${V["vac$pct|none"]:-}" ms
		for am in "${AMS[@]}"; do
			[ -n "${V["vac$pct|$am"]:-}" ] && [ -n "${V["vac$pct|none"]:-}" ] || continue
			record "vacuum${pct}_ms" "$am" "${V["vac$pct|$am"]}" ms
			record "vacuum${pct}_index_ms" "$am" "$(awk -v a="${V["vac$pct|$am"]}" -v b="${V["vac$pct|none"]}" 'BEGIN { printf "%.1f", a - b }')" ms
		done
		record_syncs "vacuum$pct"
	done
fi

# ------------------------------------------- inserts while VACUUM runs ---

if ! skip vacins && [ "$VI_TIME" -gt 0 ]; then
	PGBENCH_VI=("$PMH_CL_BINDIR/pgbench" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres -n -M prepared -T "$VI_TIME"
		-c "$VI_CLIENTS" -j "$((VI_CLIENTS < 2 ? VI_CLIENTS : 2))" -D rows="$ROWS")
	# vi_pgbench SCRIPT: run an insert script on "pgb"; prints its TPS
	vi_pgbench() {
		local out tps failed
		out=$(PGOPTIONS="-c synchronous_commit=$SYNC_FIRST" "${PGBENCH_VI[@]}" -f "$HERE/pgbench/$1.sql" bench 2>&1) || {
			pmh_err "pgbench failed:"
			tail -n 20 <<<"$out" | sed 's/^/    /' >&2
			return 1
		}
		tps=$(sed -n -E 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' <<<"$out")
		failed=$(sed -n -E 's/^number of failed transactions: ([0-9]+).*/\1/p' <<<"$out")
		[ -n "$tps" ] && [ "${failed:-0}" = 0 ] || return 1
		printf '%.0f' "$tps"
	}
	# what the inserting backends wait for: sampled every 10 ms, committed
	# between samples (pg_stat_activity is a snapshot per transaction)
	sql >/dev/null <<'EOF' || STATUS=1
CREATE OR REPLACE PROCEDURE vi_sample(secs float8, INOUT inserters bigint DEFAULT 0,
                                      INOUT on_log_lock bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
  stop timestamptz := clock_timestamp() + secs * interval '1 second';
  a bigint;
  w bigint;
BEGIN
  WHILE clock_timestamp() < stop LOOP
    SELECT count(*), count(*) FILTER (WHERE wait_event = 'pmhash_log')
      INTO a, w FROM pg_stat_activity
      WHERE application_name = 'pgbench' AND state = 'active';
    inserters := inserters + a;
    on_log_lock := on_log_lock + w;
    COMMIT;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
EOF
	for vs in "${WRITE_SCRIPTS[@]}"; do
		pmh_head "$vs.sql, $VI_CLIENTS clients, ${VI_TIME}s: alone, then beside back-to-back VACUUMs"
		# metric names: vacins_* for insert.sql (as before), vacins_insert10_*
		vm=vacins
		[ "$vs" = insert ] || vm=vacins_$vs
		for am in "${AMS[@]}"; do
			sql >/dev/null <<EOF || {
DROP TABLE IF EXISTS pgb;
CREATE TABLE pgb AS TABLE t_btree;
CREATE INDEX pgb_k ON pgb USING $am (k);
VACUUM pgb;
CHECKPOINT;
EOF
				STATUS=1
				continue
			}
			alone=$(vi_pgbench "$vs") || {
				STATUS=1
				continue
			}
			# dead rows for the first VACUUM; after each VACUUM 0.1 % more
			sql -c "DELETE FROM pgb WHERE k % 100 < 10" >/dev/null || STATUS=1
			stop=$LOGDIR/vacins.stop
			rm -f "$stop" "$LOGDIR/vacins.count"
			(
				n=0 busy=0 i=0
				while [ ! -e "$stop" ]; do
					t0=$(pmh_now)
					sql -c "VACUUM (INDEX_CLEANUP ON) pgb" >/dev/null || exit 1
					busy=$(awk -v b="$busy" -v t0="$t0" -v t1="$(pmh_now)" 'BEGIN { printf "%.3f", b + t1 - t0 }')
					n=$((n + 1))
					sql -c "DELETE FROM pgb WHERE k <= $ROWS AND k % 1000 = $((i % 1000))" >/dev/null || exit 1
					i=$((i + 1))
				done
				echo "$n $busy" >"$LOGDIR/vacins.count"
			) &
			vpid=$!
			sql -c "CALL vi_sample($VI_TIME)" >"$LOGDIR/vacins.waits" 2>&1 &
			spid=$!
			beside=$(vi_pgbench "$vs") || STATUS=1
			touch "$stop"
			wait "$vpid" || STATUS=1
			wait "$spid" || STATUS=1
			waits=$(awk -F'|' 'NF == 2 && $1 > 0 { printf "%.1f", 100 * $2 / $1 }' "$LOGDIR/vacins.waits")
			read -r nvac busy <"$LOGDIR/vacins.count" 2>/dev/null || nvac='' busy=''
			printf '    %-7s alone %6s tps, beside VACUUM %6s tps (%s VACUUMs, %s s of them, the last one waited for; %s %% of inserter samples on the pmhash log lock)\n' \
				"$am" "$alone" "${beside:-n/a}" "${nvac:-n/a}" "${busy:-n/a}" "${waits:-n/a}"
			record "${vm}_alone_tps" "$am" "$alone" tps
			[ -n "${beside:-}" ] && record "${vm}_vacuum_tps" "$am" "$beside" tps
			[ -n "${nvac:-}" ] && record "${vm}_vacuums" "$am" "$nvac" count
			[ -n "${busy:-}" ] && record "${vm}_vacuum_s" "$am" "$busy" s
			[ -n "${waits:-}" ] && record "${vm}_log_lock_pct" "$am" "$waits" %
		done
	done
	sql -c "DROP TABLE IF EXISTS pgb; DROP PROCEDURE vi_sample" >/dev/null
fi

# ------------------------------------------------------------- pgbench ---

# The pgbench runs, "script:synchronous_commit", in the order they run:
# the scripts of earlier versions first, in their old order, under the
# first setting, so that their rows are measured on tables grown as
# before; then insert10; then the write scripts under each further setting.
# PMHASH_BENCH_PGBENCH_SCRIPTS (default all) leaves the others out.
PGB_SCRIPTS=" ${PMHASH_BENCH_PGBENCH_SCRIPTS:-select_only insert mixed ycsb_a insert10} "
pgb_wanted() { [[ "$PGB_SCRIPTS" == *" $1 "* ]]; }
PGB_RUNS=()
for s in select_only insert mixed ycsb_a insert10; do
	pgb_wanted "$s" && PGB_RUNS+=("$s:$SYNC_FIRST")
done
for sc in "${SYNCS[@]:1}"; do
	for s in "${WRITE_SCRIPTS[@]}"; do
		pgb_wanted "$s" && PGB_RUNS+=("$s:$sc")
	done
done
# the same runs in the report's order: each write script under every
# setting together
PGB_REPORT=()
pgb_wanted select_only && PGB_REPORT+=("select_only:$SYNC_FIRST")
for s in "${WRITE_SCRIPTS[@]}"; do
	for sc in "${SYNCS[@]}"; do
		pgb_wanted "$s" && PGB_REPORT+=("$s:$sc")
	done
done
pgb_wanted mixed && PGB_REPORT+=("mixed:$SYNC_FIRST")
pgb_wanted ycsb_a && PGB_REPORT+=("ycsb_a:$SYNC_FIRST")
# pgb_key SCRIPT SETTING: the name of a run in metric and file names: the
# script's name under the first setting (the names of earlier versions),
# else SCRIPT_synccommit_SETTING
pgb_key() {
	if [ "$2" = "$SYNC_FIRST" ]; then
		printf '%s' "$1"
	else
		printf '%s_synccommit_%s' "$1" "$2"
	fi
}
# postmaster_pid: the process id of the benchmark cluster's postmaster
postmaster_pid() {
	head -n 1 "$PMH_CL_DATA/postmaster.pid" 2>/dev/null
}
# backends_cpu_ticks: the CPU time (clock ticks) of the server's processes
# that have exited so far: the kernel adds a child's time to its parent's
# cutime and cstime when the postmaster reaps it
backends_cpu_ticks() {
	local pm
	pm=$(postmaster_pid) || return 1
	awk '{ print $16 + $17 }' "/proc/$pm/stat" 2>/dev/null
}
# sessions_left PID: how many children of the postmaster PID are client
# backends of database "bench", or have exited and are not reaped yet (the
# kernel adds a child's CPU time to the postmaster's only when it reaps it;
# a backend leaves pg_stat_activity before that).  Reads /proc: asking the
# server would start one more backend.
sessions_left() {
	local n=0 d st args
	for d in /proc/[0-9]*; do
		st=$(cat "$d/stat" 2>/dev/null) || continue
		# after the command's closing parenthesis: state, parent pid
		st=${st##*) }
		read -r -a st <<<"$st"
		[ "${st[1]:-}" = "$1" ] || continue
		if [ "${st[0]}" = Z ]; then
			n=$((n + 1))
			continue
		fi
		args=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
		[[ "$args" == *" bench "* ]] && n=$((n + 1))
	done
	echo "$n"
}
# pgbench_gone: wait (up to 5 s) until every client backend (pgbench's,
# and this script's own sessions) has exited and been reaped
pgbench_gone() {
	local pm
	pm=$(postmaster_pid) || return 1
	for _ in $(seq 1 50); do
		[ "$(sessions_left "$pm")" = 0 ] && return 0
		sleep 0.1
	done
	return 1
}
# pin_server CPUS: set the postmaster's CPU affinity, which the backends
# it forks from then on inherit
pin_server() {
	local pm
	pm=$(postmaster_pid) || return 1
	taskset -pc "$1" "$pm" >/dev/null
}
# A 1-client run is a ping-pong between pgbench and one backend.  Left to
# the scheduler, the two sometimes share a CPU and sometimes wake each
# other across CPUs, and the rate of the same run moves by a factor of
# three (about 11000 against 33000 single-row inserts per second on the
# 2-CPU machine of doc/BENCHMARKS.md).  So, unless PMHASH_BENCH_PIN_ONE
# is 0, both run on the first CPU the server may use, for all three
# methods alike; runs with more clients are not pinned.
PIN_CPUS=
PIN_CPU=
if ! skip pgbench && [ "$PGB_TIME" -gt 0 ]; then
	if [ "$PIN_ONE" = 1 ]; then
		if command -v taskset >/dev/null 2>&1 &&
			PIN_CPUS=$(taskset -pc "$(postmaster_pid)" 2>/dev/null | sed -E 's/.*: //') &&
			[ -n "$PIN_CPUS" ]; then
			PIN_CPU=$(sed -E 's/^([0-9]+).*/\1/' <<<"$PIN_CPUS")
		else
			pmh_warn "taskset cannot read the server's CPU affinity: 1-client pgbench runs are not pinned"
			PIN_CPUS=
		fi
	fi
	TICK=$(getconf CLK_TCK 2>/dev/null || echo 100)
	PGBENCH=("$PMH_CL_BINDIR/pgbench" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres -n -M prepared -T "$PGB_TIME")
	for run in "${PGB_RUNS[@]}"; do
		s=${run%%:*} sc=${run#*:}
		key=$(pgb_key "$s" "$sc")
		pmh_head "pgbench $s.sql, synchronous_commit = $sc, ${PGB_TIME}s per run, medians of $PGB_ROUNDS rounds"
		for c in $CLIENTS; do
			j=$((c < 2 ? c : 2))
			declare -A RUNS=() CPUS=()
			# the methods take turns, round after round, so that a slow
			# stretch of a shared machine hits all three alike
			for ((round = 1; round <= PGB_ROUNDS; round++)); do
				for am in "${AMS[@]}"; do
					sql -c "ALTER TABLE t_$am RENAME TO pgb" >/dev/null || {
						STATUS=1
						continue
					}
					pgbench_gone
					PIN=()
					if [ "$c" = 1 ] && [ -n "$PIN_CPU" ]; then
						pin_server "$PIN_CPU" && PIN=(taskset -c "$PIN_CPU")
					fi
					cpu0=$(backends_cpu_ticks)
					out=$(PGOPTIONS="-c synchronous_commit=$sc" "${PIN[@]}" "${PGBENCH[@]}" -c "$c" -j "$j" -D rows="$ROWS" -f "$HERE/pgbench/$s.sql" bench 2>&1)
					rc=$?
					pgbench_gone && cpu1=$(backends_cpu_ticks) || cpu1=''
					if [ "${#PIN[@]}" -gt 0 ]; then
						pin_server "$PIN_CPUS" || STATUS=1
					fi
					txns=$(sed -n -E 's/^number of transactions actually processed: ([0-9]+).*/\1/p' <<<"$out")
					sql -c "ALTER TABLE pgb RENAME TO t_$am" >/dev/null || STATUS=1
					tps=$(sed -n -E 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' <<<"$out")
					failed=$(sed -n -E 's/^number of failed transactions: ([0-9]+).*/\1/p' <<<"$out")
					if [ "$rc" -ne 0 ] || [ -z "$tps" ] || [ "${failed:-0}" != 0 ]; then
						pmh_err "pgbench $s, synchronous_commit = $sc, $c clients, $am failed (exit $rc):"
						tail -n 20 <<<"$out" | sed 's/^/    /'
						STATUS=1
						continue
					fi
					RUNS[$am]="${RUNS[$am]:-} $(printf '%.0f' "$tps")"
					# backend CPU per transaction (us): the server's share
					# of the work, which the machine's other users distort
					# less than the transaction rate
					if [ -n "$cpu0" ] && [ -n "$cpu1" ] && [ "${txns:-0}" -gt 0 ]; then
						CPUS[$am]="${CPUS[$am]:-} $(awk -v d="$((cpu1 - cpu0))" -v t="$TICK" -v n="$txns" 'BEGIN { printf "%.1f", d * 1e6 / t / n }')"
					fi
				done
			done
			for am in "${AMS[@]}"; do
				[ -n "${RUNS[$am]:-}" ] || continue
				# shellcheck disable=SC2086 # the runs are words
				tps=$(median ${RUNS[$am]})
				# shellcheck disable=SC2086
				cpu=$(median ${CPUS[$am]:-})
				printf '    %2d clients %-7s %10.0f tps (runs:%s), backend CPU %s us / transaction\n' "$c" "$am" "$tps" "${RUNS[$am]}" "${cpu:-n/a}"
				record "pgbench_${key}_c${c}_tps" "$am" "$tps" tps
				record "pgbench_${key}_c${c}_runs" "$am" "${RUNS[$am]# }" tps
				[ -n "$cpu" ] && record "pgbench_${key}_c${c}_cpu_us" "$am" "$cpu" us
			done
			unset RUNS CPUS
		done
		[ "$s" = select_only ] || sql -c "VACUUM t_pmhash, t_btree, t_hash" >/dev/null || STATUS=1
	done
fi

# -------------------------------------------------------------- report ---

num_or_na() { [ -n "${1:-}" ] && printf '%s' "$1" || printf 'n/a'; }
ratio() { bench_ratio "$@"; }
verdict_le() { bench_verdict "$1" "<=" "$2"; }
verdict_ge() { bench_verdict "$1" ">=" "$2"; }

# row LABEL METRIC TARGET: one line of the main table
row() {
	local p b h rb rh
	p=$(val "$2" pmhash) b=$(val "$2" btree) h=$(val "$2" hash)
	rb=$(ratio "$p" "$b") rh=$(ratio "$p" "$h")
	printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$(num_or_na "$p")" "$(num_or_na "$b")" \
		"$(num_or_na "$h")" "$rb" "$rh" "${3:-}"
}

# pgbench_rows UNIT [targets]: a table row per pgbench run (script and
# synchronous_commit) and client count of metric
# pgbench_<key>_c<clients>_UNIT; with "targets", a last column judging the
# transaction rate against the issues' targets (select-only: >= hash;
# issue 30: the insert scripts >= btree, under every setting)
pgbench_rows() {
	local run s sc c m p b h tgt
	for run in "${PGB_REPORT[@]}"; do
		s=${run%%:*} sc=${run#*:}
		for c in $CLIENTS; do
			m=pgbench_$(pgb_key "$s" "$sc")_c${c}_$1
			p=$(val "$m" pmhash) b=$(val "$m" btree) h=$(val "$m" hash)
			tgt=''
			if [ "${2:-}" = targets ]; then
				case "$s" in
					select_only) tgt=">= hash: $(verdict_ge "$(ratio "$p" "$h")" 1)" ;;
					insert | insert10) tgt=">= btree: $(verdict_ge "$(ratio "$p" "$b")" 1)" ;;
				esac
				tgt=" $tgt |"
			fi
			printf '| %s | %s | %s | %s | %s | %s | %s | %s |%s\n' "$s" "$sc" "$c" "$(num_or_na "$p")" \
				"$(num_or_na "$b")" "$(num_or_na "$h")" "$(ratio "$p" "$b")" "$(ratio "$p" "$h")" "$tgt"
		done
	done
}

PROBE_TARGET_B=$(ratio "$(val probe_pos_uniform_ns pmhash)" "$(val probe_pos_uniform_ns btree)")
PROBE_TARGET_H=$(ratio "$(val probe_pos_uniform_ns pmhash)" "$(val probe_pos_uniform_ns hash)")
UPKEEP_H=$(ratio "$(val insert_upkeep_ms pmhash)" "$(val insert_upkeep_ms hash)")
COPY_H=$(ratio "$(val copy_upkeep_ms pmhash)" "$(val copy_upkeep_ms hash)")
VACUUM10_B=$(ratio "$(val vacuum10_index_ms pmhash)" "$(val vacuum10_index_ms btree)")
VACUUM50_B=$(ratio "$(val vacuum50_index_ms pmhash)" "$(val vacuum50_index_ms btree)")
BUILD_B=$(ratio "$(val build_ms pmhash)" "$(val build_ms btree)")

{
	echo "## pmhash vs btree vs hash inside PostgreSQL (test/bench/sql_bench.sh)"
	echo
	echo "- date: $(date '+%Y-%m-%d %H:%M %Z'); machine: $(bench_machine); load average before/after: $LOAD_BEFORE / $(bench_load) (the machine was shared with other users: read the ratios)"
	echo "- PostgreSQL: $("$PMH_CL_BINDIR/postgres" --version | sed 's/^postgres (PostgreSQL) //'); shared_buffers $SHARED_BUFFERS; autovacuum, JIT and parallelism off"
	echo "- pool mode: $PMH_CL_MODE_TEXT"
	echo "- data: $ROWS rows (int8 key 1..$ROWS in random order, 32-char payload), one table per access method; $PROBES lookups per probe join; Zipf theta $THETA ($ZIPF_TOP); best of $REPEAT"
	echo
	echo "| | pmhash | btree | hash | pmhash / btree | pmhash / hash | target |"
	echo "| --- | --- | --- | --- | --- | --- | --- |"
	row "CREATE INDEX (ms)" build_ms "<= 0.5 x btree: $(verdict_le "$BUILD_B" 0.5)"
	row "bytes per entry (pmhash: pool + shared memory)" bytes_per_entry
	row "probe, positive uniform (ns / lookup)" probe_pos_uniform_ns \
		"<= 0.45 x btree: $(verdict_le "$PROBE_TARGET_B" 0.45); <= 0.7 x hash: $(verdict_le "$PROBE_TARGET_H" 0.7)"
	row "  index part: minus the TID-scan floor (ns / lookup)" probe_pos_uniform_index_ns
	row "probe, positive Zipf (ns / lookup)" probe_pos_zipf_ns
	row "probe, negative uniform (ns / lookup)" probe_neg_uniform_ns
	row "probe, negative Zipf (ns / lookup)" probe_neg_zipf_ns
	row "probe, positive uniform, backend CPU (ns / lookup)" probecpu_pos_uniform_ns \
		"<= 0.45 x btree: $(verdict_le "$(ratio "$(val probecpu_pos_uniform_ns pmhash)" "$(val probecpu_pos_uniform_ns btree)")" 0.45); <= 0.7 x hash: $(verdict_le "$(ratio "$(val probecpu_pos_uniform_ns pmhash)" "$(val probecpu_pos_uniform_ns hash)")" 0.7)"
	row "  index part: minus the TID-scan floor (CPU ns / lookup)" probecpu_pos_uniform_index_ns
	row "probe, positive Zipf, backend CPU (ns / lookup)" probecpu_pos_zipf_ns
	row "probe, negative uniform, backend CPU (ns / lookup)" probecpu_neg_uniform_ns
	row "probe, negative Zipf, backend CPU (ns / lookup)" probecpu_neg_zipf_ns
	row "probe = ANY ($ARRAYLEN keys), positive, index scan (ns / key)" anyindex_pos_uniform_ns
	row "probe = ANY ($ARRAYLEN keys), negative, index scan (ns / key)" anyindex_neg_uniform_ns
	row "probe = ANY ($ARRAYLEN keys), positive, bitmap scan (ns / key)" anybitmap_pos_uniform_ns
	row "probe = ANY ($ARRAYLEN keys), negative, bitmap scan (ns / key)" anybitmap_neg_uniform_ns
	row "insert upkeep, INSERT ... SELECT (ms)" insert_upkeep_ms "<= 0.5 x hash: $(verdict_le "$UPKEEP_H" 0.5)"
	row "insert upkeep, COPY (ms)" copy_upkeep_ms "<= hash: $(verdict_le "$COPY_H" 1)"
	row "insert upkeep, exclusion constraint (ms)" exclusion_upkeep_ms
	row "VACUUM after deleting 10 % (ms, index part)" vacuum10_index_ms "<= btree: $(verdict_le "$VACUUM10_B" 1)"
	row "VACUUM after deleting 50 % (ms, index part)" vacuum50_index_ms "<= btree: $(verdict_le "$VACUUM50_B" 1)"
	echo
	echo "Targets: those of CREATE INDEX, insert upkeep (INSERT ... SELECT, COPY), VACUUM (its index part) and the pgbench insert scripts are issue 30's, set for ordinary-file pools and judged here in either mode (this run: $MODE); the probe and select-only targets are older."
	echo "Without an index: INSERT ... SELECT $(num_or_na "$(val insert none)") ms, COPY $(num_or_na "$(val copy none)") ms, VACUUM after 10 % / 50 %: $(num_or_na "$(val vac10 none)") / $(num_or_na "$(val vac50 none)") ms."
	echo "pmhash after CREATE INDEX: pool $(num_or_na "$(val pool_bytes_per_entry pmhash)") B/entry, shared memory $(num_or_na "$(val shmem_bytes_per_entry pmhash)") B/entry, load factor $(num_or_na "$(val load_factor pmhash)"); write amplification of the INSERT ... SELECT load: $(num_or_na "$(val wa pmhash)") (media model)."
	SYNC_LINES=''
	for st in "insert:the INSERT ... SELECT load" "copy:the COPY load" "exclusion:the exclusion-constraint load" \
		"vacuum10:VACUUM after deleting 10 %" "vacuum50:VACUUM after deleting 50 %"; do
		[ -n "${V["${st%%:*}_syncs|pmhash"]+set}" ] || continue
		SYNC_LINES+="- pool syncs during ${st#*:}: $(syncs_text "$(val "${st%%:*}_syncs" pmhash)" "$(val "${st%%:*}_sync_bytes" pmhash)")"$'\n'
	done
	if [ -n "$SYNC_LINES" ]; then
		echo
		echo "What pmhash's steps cost in pool syncs (pmhash_stats(): syncs, the msync calls, and sync_bytes, the bytes they covered; read in the step's session just before and after its statement, so syncs another process makes later, for what the step deferred, are not in them; for an insert upkeep, its fastest run):"
		echo
		printf '%s' "$SYNC_LINES"
		echo
	fi
	echo "Probe cost is the whole query's execution time (nested loop, index scan, heap fetch, aggregate) per lookup. The floor, the same rows fetched by TID (a Tid Scan inside the same nested loop: what a perfect index would cost), is $(num_or_na "$(val probe_pos_uniform_ns tid)") ns per lookup ($(num_or_na "$(val probecpu_pos_uniform_ns tid)") ns of backend CPU); the index part is the probe cost minus that floor. The = ANY rows look the same keys, positive and negative uniform, up as arrays of $ARRAYLEN, one query per array with the array as a constant (EXECUTE ... USING in a PL/pgSQL loop: planning included); a hash index has no array scans (only its bitmap scan, one index scan per element, takes an array), so its index-scan cell is empty. The CPU rows count the CPU time the backend got (/proc, 10 ms ticks), which other users of the machine distort less than the wall clock."
	if ! skip vacins && [ "$VI_TIME" -gt 0 ]; then
		echo
		echo "Inserts (pgbench insert.sql, one row per transaction, and insert10.sql, ten; $VI_CLIENTS clients, ${VI_TIME}s, synchronous_commit = $SYNC_FIRST) into a fresh copy of the table, alone and then beside back-to-back VACUUM (INDEX_CLEANUP ON) runs, each after deleting 0.1 % of the rows (the first after 10 %):"
		echo
		echo "| | pmhash | btree | hash | pmhash / btree | pmhash / hash | |"
		echo "| --- | --- | --- | --- | --- | --- | --- |"
		for vs in "${WRITE_SCRIPTS[@]}"; do
			vm=vacins
			[ "$vs" = insert ] || vm=vacins_$vs
			row "$vs: alone (tps)" "${vm}_alone_tps"
			row "$vs: beside VACUUM (tps)" "${vm}_vacuum_tps"
			row "$vs: VACUUMs run meanwhile" "${vm}_vacuums"
			row "$vs: seconds spent in them (the last one is waited for)" "${vm}_vacuum_s"
			row "$vs: inserting backends waiting on the pmhash log lock (% of samples)" "${vm}_log_lock_pct"
		done
	fi
	if ! skip pgbench && [ "$PGB_TIME" -gt 0 ]; then
		echo
		if [ -n "$PIN_CPU" ]; then
			pinned="; 1-client runs with pgbench and its backend both on CPU $PIN_CPU (left to the scheduler, their placement moves a 1-client rate by up to a factor of three on a small machine)"
		else
			pinned="; no run pinned to a CPU"
		fi
		if [ "${#SYNCS[@]}" -gt 1 ]; then
			sctext="select_only, mixed and ycsb_a under synchronous_commit = $SYNC_FIRST, the insert scripts under each of $(printf '%s\n' "${SYNCS[@]}" | paste -sd, - | sed 's/,/, /g')"
		else
			sctext="synchronous_commit = $SYNC_FIRST"
		fi
		echo "pgbench (-M prepared, $sctext; transactions per second, the median of $PGB_ROUNDS runs of ${PGB_TIME}s each, the three methods taking turns$pinned; every run is in sql.tsv; scripts in test/bench/pgbench/: insert adds one row per transaction, insert10 ten in one INSERT; with synchronous_commit = on, PostgreSQL's default, each commit also waits for its WAL flush, the same for all three):"
		echo
		echo "| script | synchronous_commit | clients | pmhash | btree | hash | pmhash / btree | pmhash / hash | target |"
		echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
		pgbench_rows tps targets
		echo
		echo "The same runs, as the CPU time the server's backends used per transaction (us; lower is better; the medians of the runs; from the postmaster's reaped-children times, so it includes the backends' parsing, planning, executor and commit, and a few ms of this script's own sessions per run). Where two transaction rates differ more than these do, the difference is the machine's scheduling rather than the access method:"
		echo
		echo "| script | synchronous_commit | clients | pmhash | btree | hash | pmhash / btree | pmhash / hash |"
		echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
		pgbench_rows cpu_us
	fi
	echo
	echo "Plots: sql_probe.png (probe cost per lookup), sql_ratios.png (pmhash / btree and pmhash / hash), sql_pgbench.png (TPS by clients, a panel per script and synchronous_commit). Total run time $(pmh_elapsed "$T_START") s."
} >"$MD"

# --------------------------------------------------------------- plots ---

{
	printf '# workload pmhash btree hash\n'
	for w in "${WORKLOADS[@]}"; do
		printf '%s %s %s %s\n' "${w/_/-}" "$(num_or_na "$(val "probe_${w}_ns" pmhash)")" \
			"$(num_or_na "$(val "probe_${w}_ns" btree)")" "$(num_or_na "$(val "probe_${w}_ns" hash)")"
	done
} >"$OUT/sql_probe.dat"
{
	printf '# metric vs_btree vs_hash\n'
	for m in build_ms:build bytes_per_entry:size probe_pos_uniform_ns:probe+ probe_pos_uniform_index_ns:probe+-index \
		probe_neg_uniform_ns:probe- \
		insert_upkeep_ms:insert-upkeep copy_upkeep_ms:copy-upkeep exclusion_upkeep_ms:exclusion-upkeep \
		vacuum10_index_ms:vacuum-10% vacuum50_index_ms:vacuum-50%; do
		printf '%s %s %s\n' "${m#*:}" "$(ratio "$(val "${m%%:*}" pmhash)" "$(val "${m%%:*}" btree)")" \
			"$(ratio "$(val "${m%%:*}" pmhash)" "$(val "${m%%:*}" hash)")"
	done
} >"$OUT/sql_ratios.dat"
for run in "${PGB_RUNS[@]}"; do
	key=$(pgb_key "${run%%:*}" "${run#*:}")
	{
		printf '# clients pmhash btree hash\n'
		for c in $CLIENTS; do
			m=pgbench_${key}_c${c}_tps
			printf '%s %s %s %s\n' "$c" "$(num_or_na "$(val "$m" pmhash)")" "$(num_or_na "$(val "$m" btree)")" \
				"$(num_or_na "$(val "$m" hash)")"
		done
	} >"$OUT/sql_pgbench_$key.dat"
done

# has_numbers FILE...: does any data row (after the header) of the files
# hold a number?  The plot of a skipped step would have none, and gnuplot
# stops at an empty plot.
has_numbers() {
	awk 'FNR > 1 { for (i = 2; i <= NF; i++) if ($i != "n/a") found = 1 } END { exit !found }' "$@"
}
PLOT_STYLE='set terminal pngcairo size 900,500 font ",10" noenhanced
set datafile missing "n/a"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key top left'

if has_numbers "$OUT/sql_probe.dat"; then
	bench_plot "$OUT" <<EOF
$PLOT_STYLE
set output "sql_probe.png"
set title "Probe cost per lookup, nested-loop join of $PROBES keys ($ROWS rows, $MODE pools)"
set ylabel "ns per lookup (whole query)"
set yrange [0:*]
plot "sql_probe.dat" using 2:xtic(1) title "pmhash", "" using 3 title "btree", "" using 4 title "hash"
EOF
fi

if has_numbers "$OUT/sql_ratios.dat"; then
	bench_plot "$OUT" <<EOF
$PLOT_STYLE
set output "sql_ratios.png"
set xtics rotate by -20
set title "pmhash relative to btree and hash (lower is better; 1 = same)"
set ylabel "pmhash / other"
set yrange [0:*]
plot "sql_ratios.dat" using 2:xtic(1) title "pmhash / btree", "" using 3 title "pmhash / hash", 1 with lines lc rgb "black" dt 2 notitle
EOF
fi

# sql_pgbench.png: one panel per pgbench run, three to a row: the first
# row select-only, mixed and YCSB-A; then a row per synchronous_commit
# setting with the two insert scripts; a run without numbers leaves its
# panel empty (gnuplot stops at an empty plot)
PGB_DATS=()
for run in "${PGB_RUNS[@]}"; do
	PGB_DATS+=("$OUT/sql_pgbench_$(pgb_key "${run%%:*}" "${run#*:}").dat")
done
# pgb_panel SCRIPT SETTING TITLE: the gnuplot lines of one panel
pgb_panel() {
	local dat
	dat=sql_pgbench_$(pgb_key "$1" "$2").dat
	if has_numbers "$OUT/$dat"; then
		printf 'set title "%s\\nsynchronous_commit = %s"\n' "$3" "$2"
		printf 'plot "%s" using 1:2 title "pmhash" lw 2, "" using 1:3 title "btree" lw 2, "" using 1:4 title "hash" lw 2\n' "$dat"
	else
		printf 'set multiplot next\n'
	fi
}
if has_numbers "${PGB_DATS[@]}"; then
	bench_plot "$OUT" <<EOF
$PLOT_STYLE
set terminal pngcairo size 1350,$((420 * (1 + ${#SYNCS[@]}))) font ",10" noenhanced
set output "sql_pgbench.png"
unset title
set style data linespoints
set multiplot layout $((1 + ${#SYNCS[@]})),3 title "pgbench TPS by clients ($ROWS rows, $MODE pools, ${PGB_TIME}s runs)"
set xlabel "clients"
set ylabel "TPS"
set logscale x 2
set xrange [0.8:*]
set key bottom right
$(pgb_panel select_only "$SYNC_FIRST" "select-only")
$(pgb_panel mixed "$SYNC_FIRST" "50/50 select/insert")
$(pgb_panel ycsb_a "$SYNC_FIRST" "YCSB-A-like (50/50 select/update)")
$(for sc in "${SYNCS[@]}"; do
	pgb_panel insert "$sc" "single-row insert"
	pgb_panel insert10 "$sc" "10-row insert"
	printf 'set multiplot next\n'
done)
unset multiplot
EOF
fi

pmh_head "results: $MD"
cat "$MD"
[ "$STATUS" -eq 0 ] || pmh_err "some steps failed (see above; logs in $LOGDIR)"
exit "$STATUS"
