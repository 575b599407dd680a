#!/usr/bin/env bash
# test/bench/read_bench.sh -- select-only lookups by key at several client
# counts: pmhash, hash and btree side by side in one throwaway cluster, one
# run, the same data for all three; what the read path's locks cost.
#
#   1. build + tmp_install (test/lib.sh; as root, a copy of the tree runs as
#      "postgres" and the results are copied back)
#   2. a throwaway cluster (pmh_cluster_start), pools in the chosen mode
#   3. data: $ROWS rows (k int8 = 1..ROWS in random order, md5 payload),
#      one table per access method with its index, VACUUM ANALYZE; and
#      the same rows in key order without an index (t_tid), whose lookups
#      go by ctid (select_tid.sql): what a select-only transaction costs
#      without any index, the bound of every index's rate
#   4. pgbench test/bench/pgbench/select_only.sql (one lookup of a present
#      key) at each of $CLIENTS clients, $PGB_TIME seconds a run, -M
#      prepared, the tables taking turns (renamed to "pgb") for
#      $PGB_ROUNDS rounds, the median reported; a 1-client run shares one
#      CPU with its backend (taskset).  During every run a session samples
#      pg_stat_activity every 10 ms: the pgbench backends that are active,
#      those waiting on any LWLock, and those waiting on one of pmhash's
#      (wait events pmhash_*); for pmhash also the lookups its scans made
#      and how many took the index lock (pmhash_stats), over the run
#   5. report: read.md (TPS, ratios, waits, the rate without an index
#      and its ratio to hash's; issue 33's targets: 2 clients
#      >= 1.3 x hash's TPS, no pmhash lock waits with 8 clients) and
#      read.tsv in test/bench/results/<date>/ (or $PMHASH_BENCH_OUT)
#
# Numbers are measurements, never assertions: the exit status is 0 unless
# a step failed.
#
# Knobs: PMHASH_BENCH_ROWS (1000000), PMHASH_BENCH_PGBENCH_TIME (10),
#        PMHASH_BENCH_PGBENCH_ROUNDS (3), PMHASH_BENCH_CLIENTS ("1 2 8"),
#        PMHASH_BENCH_MODE ("file" or "emulated", as sql_bench.sh),
#        PMHASH_BENCH_OUT, PMHASH_BENCH_SKIP_BUILD=1, PMHASH_BENCH_KEEP=1,
#        PMHASH_BENCH_CONF (extra postgresql.conf lines), PG_CONFIG.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"
# shellcheck source=test/bench/bench_lib.sh
. "$HERE/bench_lib.sh"

bench_setup test/bench/read_bench.sh read "$@"
ROWS=${PMHASH_BENCH_ROWS:-1000000}
PGB_TIME=${PMHASH_BENCH_PGBENCH_TIME:-10}
PGB_ROUNDS=${PMHASH_BENCH_PGBENCH_ROUNDS:-3}
CLIENTS=${PMHASH_BENCH_CLIENTS:-1 2 8}
MODE=${PMHASH_BENCH_MODE:-file}
AMS=(pmhash hash btree tid)

bench_cluster pmhread "$MODE" "shared_buffers = '1GB'
max_connections = 40
pmhash.shared_memory = '$((256 + ROWS * 40 / 1048576))MB'"
sql() { "${PMH_CL_PSQL[@]}" -d bench "$@"; }

printf 'metric\tam\tvalue\tunit\n' >"$TSV"
declare -A V
record() {
	V["$1|$2"]=$3
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$TSV"
}

pmh_head "data: $ROWS rows, one table per access method"
sql -v rows="$ROWS" <<'EOF' || pmh_die "loading data failed"
SELECT setseed(0.33);
CREATE TABLE src AS
  SELECT g::int8 AS k, md5(g::text) AS payload
  FROM generate_series(1, :rows) g ORDER BY random();
CREATE TABLE t_pmhash AS TABLE src;
CREATE TABLE t_hash AS TABLE src;
CREATE TABLE t_btree AS TABLE src;
CREATE INDEX t_pmhash_k ON t_pmhash USING pmhash (k);
CREATE INDEX t_hash_k ON t_hash USING hash (k);
CREATE INDEX t_btree_k ON t_btree USING btree (k);
CREATE TABLE t_tid AS SELECT * FROM src ORDER BY k;
DROP TABLE src;
VACUUM ANALYZE t_pmhash, t_hash, t_btree, t_tid;
CHECKPOINT;
-- what the pgbench backends wait for, every 10 ms, committed between
-- samples (pg_stat_activity is a snapshot per transaction)
CREATE PROCEDURE read_sample(secs float8, INOUT active bigint DEFAULT 0,
                             INOUT on_lwlock bigint DEFAULT 0,
                             INOUT on_pmhash bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
  stop timestamptz := clock_timestamp() + secs * interval '1 second';
  a bigint;
  l bigint;
  p bigint;
BEGIN
  WHILE clock_timestamp() < stop LOOP
    SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'LWLock'),
           count(*) FILTER (WHERE wait_event LIKE 'pmhash%')
      INTO a, l, p FROM pg_stat_activity
      WHERE application_name = 'pgbench' AND state = 'active';
    active := active + a;
    on_lwlock := on_lwlock + l;
    on_pmhash := on_pmhash + p;
    COMMIT;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
EOF

# rows per page of t_tid: every row is as wide, so each page but the last
# holds as many, and key k is at ((k - 1) / per, (k - 1) % per + 1)
PER=$(sql -A -t -c "SELECT count(*) FROM t_tid WHERE ctid < '(1,0)'::tid")
MISPLACED=$(sql -A -t -c "SELECT count(*) FROM t_tid
	WHERE ctid <> format('(%s,%s)', (k - 1) / $PER, (k - 1) % $PER + 1)::tid")
[ "$MISPLACED" = 0 ] || pmh_die "t_tid: $MISPLACED rows are not where select_tid.sql looks ($PER per page)"

PGBENCH=("$PMH_CL_BINDIR/pgbench" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres -n -M prepared -T "$PGB_TIME")
PM=$(head -n 1 "$PMH_CL_DATA/postmaster.pid")
ALL_CPUS=$(taskset -pc "$PM" 2>/dev/null | sed -E 's/.*: //')

# lookups|lookups_locked of the pmhash table's index now
pmhash_lookups() {
	sql -c "SELECT coalesce((to_jsonb(s) ->> 'lookups')::int8, 0) || '|' ||
	               coalesce((to_jsonb(s) ->> 'lookups_locked')::int8, 0)
	        FROM pmhash_stats('t_pmhash_k') s"
}

pmh_head "pgbench select_only.sql: $PGB_TIME s per run, median of $PGB_ROUNDS rounds"
for c in $CLIENTS; do
	declare -A RUNS=() WAITS=()
	PIN=()
	if [ "$c" = 1 ] && [ -n "$ALL_CPUS" ] && taskset -pc 0 "$PM" >/dev/null; then
		PIN=(taskset -c 0)
	fi
	for r in $(seq 1 "$PGB_ROUNDS"); do
		for am in "${AMS[@]}"; do
			sql -c "ALTER TABLE t_$am RENAME TO pgb" >/dev/null || {
				STATUS=1
				continue
			}
			before=$(pmhash_lookups)
			samples=$(mktemp)
			sql -A -F ' ' -t -c "CALL read_sample($PGB_TIME - 0.5)" >"$samples" 2>&1 &
			sampler=$!
			script=(-D rows="$ROWS" -f "$HERE/pgbench/select_only.sql")
			[ "$am" != tid ] || script=(-D rows="$ROWS" -D per="$PER" -f "$HERE/pgbench/select_tid.sql")
			out=$("${PIN[@]}" "${PGBENCH[@]}" -c "$c" -j "$c" "${script[@]}" bench 2>&1)
			rc=$?
			wait "$sampler" || STATUS=1
			after=$(pmhash_lookups)
			sql -c "ALTER TABLE pgb RENAME TO t_$am" >/dev/null || STATUS=1
			tps=$(sed -n -E 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' <<<"$out")
			if [ "$rc" -ne 0 ] || [ -z "$tps" ]; then
				pmh_err "pgbench select_only, $c clients, $am failed (exit $rc):"
				tail -n 20 <<<"$out" | sed 's/^/    /'
				STATUS=1
				rm -f "$samples"
				continue
			fi
			read -r active on_lwlock on_pmhash <"$samples"
			rm -f "$samples"
			locked=""
			if [ "$am" = pmhash ]; then
				locked=", $((${after%|*} - ${before%|*})) lookups, $((${after#*|} - ${before#*|})) under the index lock"
				WAITS[locked]=$((${WAITS[locked]:-0} + ${after#*|} - ${before#*|}))
				WAITS[lookups]=$((${WAITS[lookups]:-0} + ${after%|*} - ${before%|*}))
			fi
			printf '    %d clients %-7s round %d: %.0f tps; waits sampled: %s active, %s on LWLocks, %s on pmhash locks%s\n' \
				"$c" "$am" "$r" "$tps" "$active" "$on_lwlock" "$on_pmhash" "$locked"
			RUNS[$am]="${RUNS[$am]:-} $(printf '%.0f' "$tps")"
			WAITS[$am|active]=$((${WAITS[$am|active]:-0} + active))
			WAITS[$am|lwlock]=$((${WAITS[$am|lwlock]:-0} + on_lwlock))
			WAITS[$am|pmhash]=$((${WAITS[$am|pmhash]:-0} + on_pmhash))
		done
	done
	[ "${#PIN[@]}" = 0 ] || taskset -pc "$ALL_CPUS" "$PM" >/dev/null || STATUS=1
	for am in "${AMS[@]}"; do
		# shellcheck disable=SC2086 # the runs are words
		[ -n "${RUNS[$am]:-}" ] || continue
		record "select_c${c}_tps" "$am" "$(median ${RUNS[$am]})" tps
		record "select_c${c}_samples_active" "$am" "${WAITS[$am|active]}" samples
		record "select_c${c}_samples_lwlock" "$am" "${WAITS[$am|lwlock]}" samples
		record "select_c${c}_samples_pmhash_lock" "$am" "${WAITS[$am|pmhash]}" samples
	done
	record "select_c${c}_lookups" pmhash "${WAITS[lookups]:-0}" lookups
	record "select_c${c}_lookups_locked" pmhash "${WAITS[locked]:-0}" lookups
	unset RUNS WAITS
done

# -------------------------------------------------------------- report ---

val() { printf '%s' "${V["$1|$2"]:-}"; }
{
	echo "# Select-only lookups by key: pmhash, hash, btree ($(date -u '+%Y-%m-%d %H:%M UTC'))"
	echo
	echo "Machine: $(bench_machine). Pools: $PMH_CL_MODE_TEXT. $ROWS rows; pgbench select_only.sql (one lookup of a present key), -M prepared, median of $PGB_ROUNDS runs of $PGB_TIME s, the tables taking turns; a 1-client run on one CPU with its backend. Waits: pg_stat_activity sampled every 10 ms during each run (all rounds), pgbench backends that were active, waiting on an LWLock, waiting on one of pmhash's (wait events pmhash_*)."
	echo
	echo "| clients | pmhash tps | hash tps | btree tps | pmhash / hash | pmhash / btree | samples active (pmhash) | on LWLocks (pmhash / hash / btree) | on pmhash locks | pmhash lookups under the index lock |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	for c in $CLIENTS; do
		echo "| $c | $(val "select_c${c}_tps" pmhash) | $(val "select_c${c}_tps" hash) | $(val "select_c${c}_tps" btree) | $(bench_ratio "$(val "select_c${c}_tps" pmhash)" "$(val "select_c${c}_tps" hash)") | $(bench_ratio "$(val "select_c${c}_tps" pmhash)" "$(val "select_c${c}_tps" btree)") | $(val "select_c${c}_samples_active" pmhash) | $(val "select_c${c}_samples_lwlock" pmhash) / $(val "select_c${c}_samples_lwlock" hash) / $(val "select_c${c}_samples_lwlock" btree) | $(val "select_c${c}_samples_pmhash_lock" pmhash) | $(val "select_c${c}_lookups_locked" pmhash) of $(val "select_c${c}_lookups" pmhash) |"
	done
	echo
	echo "Without any index: the same rows fetched by ctid (a Tid Scan of t_tid, select_tid.sql, in the same rounds), the heap fetch that every index's lookup ends with. An index that cost nothing would reach this rate, so \"no index / hash\" bounds the ratio any index can reach against hash."
	echo
	echo "| clients | no index tps | no index / hash | pmhash / hash | btree / hash |"
	echo "| --- | --- | --- | --- | --- |"
	for c in $CLIENTS; do
		H=$(val "select_c${c}_tps" hash)
		echo "| $c | $(val "select_c${c}_tps" tid) | $(bench_ratio "$(val "select_c${c}_tps" tid)" "$H") | $(bench_ratio "$(val "select_c${c}_tps" pmhash)" "$H") | $(bench_ratio "$(val "select_c${c}_tps" btree)" "$H") |"
	done
	echo
	echo "| target (issue 33) | wanted | measured | |"
	echo "| --- | --- | --- | --- |"
	for c in $CLIENTS; do
		[ "$c" = 2 ] || continue
		R=$(bench_ratio "$(val select_c2_tps pmhash)" "$(val select_c2_tps hash)")
		echo "| select-only, 2 clients, vs hash | >= 1.3 | $R | $(bench_verdict "$R" '>=' 1.3) |"
		echo "| (the bound: no index, 2 clients, vs hash) | | $(bench_ratio "$(val select_c2_tps tid)" "$(val select_c2_tps hash)") | |"
	done
	for c in $CLIENTS; do
		[ "$c" = 8 ] || continue
		W=$(val select_c8_samples_pmhash_lock pmhash)
		echo "| select-only, 8 clients: samples waiting on pmhash locks | 0 | $W | $([ "$W" = 0 ] && echo met || echo missed) |"
	done
} >"$MD"
bench_finish
