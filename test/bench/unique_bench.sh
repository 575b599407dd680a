#!/usr/bin/env bash
# test/bench/unique_bench.sh -- UNIQUE pmhash indexes beside UNIQUE btree
# indexes (PostgreSQL's hash index cannot be unique): one throwaway
# cluster, one run, the same data for both.
#
#   1. build + tmp_install (test/lib.sh; as root, a copy of the tree runs as
#      "postgres" and the results are copied back)
#   2. a throwaway cluster (pmh_cluster_start), pools in the chosen mode
#   3. data: $ROWS distinct keys in random order, as int8 and as 200-byte
#      text (an md5-made prefix and the number: like URLs or digests)
#   4. insert upkeep, per key type: INSERT ... SELECT of the $ROWS rows
#      into an empty table with a unique index, minus the same without an
#      index, best of $REPEAT, the access methods interleaved; for
#      reference also a plain (non-unique) pmhash index
#   5. size of the unique index after that insert: btree
#      pg_relation_size; pmhash pmhash_stats().pool_bytes + shmem_bytes
#   6. pgbench: test/bench/pgbench/upsert.sql (INSERT ... ON CONFLICT DO
#      UPDATE, half the keys present) on a table of $ROWS rows with each
#      unique index, at each of $CLIENTS clients, $PGB_TIME seconds a run,
#      -M prepared, synchronous_commit = off, the methods taking turns for
#      $PGB_ROUNDS rounds, the median reported; a 1-client run shares one
#      CPU with its backend (taskset)
#   7. hot key: one row of a 100k-row table updated $HOT_TXNS times, each
#      update its own transaction and never HOT (v has a btree index),
#      autovacuum off, in $HOT_BATCHES batches (pgbench -t, 1 client): a
#      unique pmhash index on k, a unique btree, a (non-unique) hash
#      index; the TPS of the first and the last batch.  Without dead
#      hints every lookup and unique check of k fetched every dead version
#      until VACUUM
#   8. report: unique.md (numbers, ratios, issue 32's targets: upkeep <=
#      0.5 x btree's on int8 and on text, size <= 0.2 x btree's on text,
#      upsert TPS >= btree's) and unique.tsv in test/bench/results/<date>/
#      (or $PMHASH_BENCH_OUT)
#
# Numbers are measurements, never assertions: the exit status is 0 unless
# a step failed or the methods disagreed on an answer.
#
# Knobs: PMHASH_BENCH_ROWS (1000000), PMHASH_BENCH_REPEAT (3),
#        PMHASH_BENCH_PGBENCH_TIME (5; 0 skips pgbench),
#        PMHASH_BENCH_PGBENCH_ROUNDS (3), PMHASH_BENCH_CLIENTS ("1 2"),
#        PMHASH_BENCH_HOT_TXNS (4000 per batch; 0 skips),
#        PMHASH_BENCH_HOT_BATCHES (4),
#        PMHASH_BENCH_MODE ("file" or "emulated", as sql_bench.sh),
#        PMHASH_BENCH_OUT, PMHASH_BENCH_SKIP_BUILD=1, PMHASH_BENCH_KEEP=1,
#        PMHASH_BENCH_CONF (extra postgresql.conf lines), PG_CONFIG.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"
# shellcheck source=test/bench/bench_lib.sh
. "$HERE/bench_lib.sh"

bench_setup test/bench/unique_bench.sh unique "$@"
ROWS=${PMHASH_BENCH_ROWS:-1000000}
REPEAT=${PMHASH_BENCH_REPEAT:-3}
PGB_TIME=${PMHASH_BENCH_PGBENCH_TIME:-5}
PGB_ROUNDS=${PMHASH_BENCH_PGBENCH_ROUNDS:-3}
CLIENTS=${PMHASH_BENCH_CLIENTS:-1 2}
HOT_TXNS=${PMHASH_BENCH_HOT_TXNS:-4000}
HOT_BATCHES=${PMHASH_BENCH_HOT_BATCHES:-4}
MODE=${PMHASH_BENCH_MODE:-file}

bench_cluster pmhunique "$MODE" "shared_buffers = '1GB'
max_wal_size = '8GB'
checkpoint_timeout = '30min'
pmhash.shared_memory = '$((256 + ROWS * 40 / 1048576))MB'"
sql() { "${PMH_CL_PSQL[@]}" -d bench "$@"; }

printf 'metric\tam\tvalue\tunit\n' >"$TSV"
declare -A V
record() {
	V["$1|$2"]=$3
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$TSV"
}
ratio() { bench_ratio "$@"; }
verdict() { bench_verdict "$@"; }

pmh_head "data: $ROWS keys, int8 and 200-byte text"
sql -v rows="$ROWS" <<'EOF' || pmh_die "loading data failed"
SELECT setseed(0.32);
CREATE TABLE src_int8 AS
  SELECT g::int8 AS k FROM generate_series(1, :rows) g ORDER BY random();
CREATE TABLE src_text AS
  SELECT repeat(md5(k::text), 6) || lpad(k::text, 8, '0') AS k FROM src_int8;
VACUUM ANALYZE src_int8, src_text;
EOF
pmh_say "text keys: $(sql -c "SELECT min(length(k)) || '..' || max(length(k)) || ' bytes' FROM src_text")"

# ------------------------------------------------------- insert upkeep ---

# index DDL of a method: unique pmhash, unique btree, plain pmhash
index_ddl() {
	case "$1" in
		none) ;;
		pmhash) echo "CREATE UNIQUE INDEX ins_k ON ins USING pmhash (k)" ;;
		btree) echo "CREATE UNIQUE INDEX ins_k ON ins USING btree (k)" ;;
		plain_pmhash) echo "CREATE INDEX ins_k ON ins USING pmhash (k)" ;;
	esac
}

METHODS=(none pmhash btree plain_pmhash)
for type in int8 text; do
	pmh_head "insert upkeep, $type keys: $ROWS rows into an empty table, best of $REPEAT"
	for r in $(seq 1 "$REPEAT"); do
		for am in "${METHODS[@]}"; do
			idx=$(index_ddl "$am")
			sql -c "DROP TABLE IF EXISTS ins" -c "CREATE TABLE ins (k $type)" ${idx:+-c "$idx"} >/dev/null || {
				STATUS=1
				continue
			}
			ms=$(bench_timed_sql sql "INSERT INTO ins SELECT k FROM src_$type") || {
				STATUS=1
				continue
			}
			printf '    %-12s run %d: %s ms\n' "$am" "$r" "$ms"
			V["$type|$am"]=$(bench_min "${V["$type|$am"]:-}" "$ms")
			if [ "$r" = 1 ] && [ "$am" = pmhash ]; then
				V["size|$type|$am"]=$(sql -c "SELECT pool_bytes + shmem_bytes FROM pmhash_stats('ins_k')")
			elif [ "$r" = 1 ] && [ "$am" = btree ]; then
				V["size|$type|$am"]=$(sql -c "SELECT pg_relation_size('ins_k')")
			fi
			# the index must refuse a present key, whatever the method
			if [ "$am" = pmhash ] || [ "$am" = btree ]; then
				if sql -c "INSERT INTO ins SELECT k FROM src_$type LIMIT 1" >/dev/null 2>&1; then
					pmh_err "$am accepted a duplicate $type key"
					STATUS=1
				fi
			fi
		done
	done
	record "${type}_none_ms" none "${V["$type|none"]:-}" ms
	for am in pmhash btree plain_pmhash; do
		[ -n "${V["$type|$am"]:-}" ] && [ -n "${V["$type|none"]:-}" ] || continue
		record "${type}_upkeep_ms" "$am" "$(awk -v a="${V["$type|$am"]}" -v b="${V["$type|none"]}" 'BEGIN { printf "%.1f", a - b }')" ms
	done
	for am in pmhash btree; do
		[ -n "${V["size|$type|$am"]:-}" ] || continue
		record "${type}_index_bytes" "$am" "${V["size|$type|$am"]}" B
		record "${type}_bytes_per_entry" "$am" "$(awk -v a="${V["size|$type|$am"]}" -v n="$ROWS" 'BEGIN { printf "%.1f", a / n }')" B
	done
done
sql -c "DROP TABLE IF EXISTS ins" >/dev/null

# ------------------------------------------------------------- pgbench ---

if [ "$PGB_TIME" != 0 ]; then
	pmh_head "pgbench upsert.sql: $PGB_TIME s per run, median of $PGB_ROUNDS rounds"
	for am in pmhash btree; do
		sql -c "CREATE TABLE up_$am (k int8, n int8 DEFAULT 0) WITH (fillfactor = 90)" \
			-c "INSERT INTO up_$am (k) SELECT k FROM src_int8" \
			-c "CREATE UNIQUE INDEX up_${am}_k ON up_$am USING $am (k)" \
			-c "VACUUM ANALYZE up_$am" >/dev/null || pmh_die "setting up the upsert tables failed"
	done
	PGBENCH=("$PMH_CL_BINDIR/pgbench" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres -n -M prepared -T "$PGB_TIME")
	# a 1-client run is a ping-pong between pgbench and its backend: both
	# on one CPU (the postmaster's affinity passes to the backends it
	# forks), or the run measures cross-CPU wake-ups (as sql_bench.sh)
	PM=$(head -n 1 "$PMH_CL_DATA/postmaster.pid")
	ALL_CPUS=$(taskset -pc "$PM" 2>/dev/null | sed -E 's/.*: //')
	for c in $CLIENTS; do
		declare -A RUNS=()
		PIN=()
		if [ "$c" = 1 ] && [ -n "$ALL_CPUS" ] && taskset -pc 0 "$PM" >/dev/null; then
			PIN=(taskset -c 0)
		fi
		for r in $(seq 1 "$PGB_ROUNDS"); do
			for am in pmhash btree; do
				sql -c "ALTER TABLE up_$am RENAME TO pgb" >/dev/null || {
					STATUS=1
					continue
				}
				out=$(PGOPTIONS="-c synchronous_commit=off" "${PIN[@]}" "${PGBENCH[@]}" -c "$c" -j "$c" -D rows="$ROWS" -f "$HERE/pgbench/upsert.sql" bench 2>&1)
				rc=$?
				sql -c "ALTER TABLE pgb RENAME TO up_$am" >/dev/null || STATUS=1
				tps=$(sed -n -E 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' <<<"$out")
				if [ "$rc" -ne 0 ] || [ -z "$tps" ]; then
					pmh_err "pgbench upsert, $c clients, $am failed (exit $rc):"
					tail -n 20 <<<"$out" | sed 's/^/    /'
					STATUS=1
					continue
				fi
				printf '    %d clients %-7s round %d: %.0f tps\n' "$c" "$am" "$r" "$tps"
				RUNS[$am]="${RUNS[$am]:-} $(printf '%.0f' "$tps")"
			done
		done
		[ "${#PIN[@]}" = 0 ] || taskset -pc "$ALL_CPUS" "$PM" >/dev/null || STATUS=1
		for am in pmhash btree; do
			# shellcheck disable=SC2086 # the runs are words
			[ -n "${RUNS[$am]:-}" ] && record "upsert_c${c}_tps" "$am" "$(median ${RUNS[$am]})" tps
		done
		unset RUNS
	done
	# both tables must hold the same keys once each
	a=$(sql -c "SELECT count(*) || '/' || count(DISTINCT k) FROM up_pmhash")
	b=$(sql -c "SELECT count(*) || '/' || count(DISTINCT k) FROM up_btree")
	pmh_say "rows/distinct keys after pgbench: pmhash $a, btree $b"
	[ "${a%/*}" = "${a#*/}" ] && [ "${b%/*}" = "${b#*/}" ] || {
		pmh_err "a unique index let a key in twice"
		STATUS=1
	}
fi

# ------------------------------------------------------------- hot key ---

HOT_AMS=(pmhash btree hash)
if [ "$HOT_TXNS" != 0 ]; then
	pmh_head "hot key: $HOT_BATCHES batches of $HOT_TXNS non-HOT updates of one row"
	printf 'UPDATE hot SET v = v + 1 WHERE k = 1;\n' >"$PMH_CL_DIR/hot.sql"
	for am in "${HOT_AMS[@]}"; do
		uniq=UNIQUE
		[ "$am" = hash ] && uniq=
		sql -c "DROP TABLE IF EXISTS hot" \
			-c "CREATE TABLE hot (k int8, v int8) WITH (autovacuum_enabled = off)" \
			-c "INSERT INTO hot SELECT g, 0 FROM generate_series(1, 100000) g" \
			-c "CREATE $uniq INDEX hot_k ON hot USING $am (k)" \
			-c "CREATE INDEX hot_v ON hot (v)" -c "VACUUM ANALYZE hot" >/dev/null || {
			STATUS=1
			continue
		}
		for b in $(seq 1 "$HOT_BATCHES"); do
			out=$("$PMH_CL_BINDIR/pgbench" -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres -n -M prepared \
				-t "$HOT_TXNS" -f "$PMH_CL_DIR/hot.sql" bench 2>&1)
			tps=$(sed -n -E 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' <<<"$out")
			if [ -z "$tps" ]; then
				pmh_err "pgbench hot key, $am, batch $b failed:"
				tail -n 20 <<<"$out" | sed 's/^/    /'
				STATUS=1
				break
			fi
			printf '    %-7s batch %d: %.0f tps\n' "$am" "$b" "$tps"
			[ "$b" = 1 ] && record hot_first_tps "$am" "$(printf '%.0f' "$tps")" tps
			[ "$b" = "$HOT_BATCHES" ] && record hot_last_tps "$am" "$(printf '%.0f' "$tps")" tps
		done
		# the index finds the one live version, as a sequential scan does
		got=$(sql -c "SET enable_seqscan = off" -c "SELECT count(*) || '/' || max(v) FROM hot WHERE k = 1")
		want=$(sql -c "SET enable_indexscan = off" -c "SET enable_bitmapscan = off" -c "SELECT count(*) || '/' || max(v) FROM hot WHERE k = 1")
		if [ "$got" != "$want" ]; then
			pmh_err "hot key, $am: the index found $got, a sequential scan $want"
			STATUS=1
		fi
	done
	sql -c "DROP TABLE IF EXISTS hot" >/dev/null
fi

# -------------------------------------------------------------- report ---

val() { printf '%s' "${V["$1|$2"]:-}"; }
UP_INT=$(ratio "$(val int8_upkeep_ms pmhash)" "$(val int8_upkeep_ms btree)")
UP_TEXT=$(ratio "$(val text_upkeep_ms pmhash)" "$(val text_upkeep_ms btree)")
SIZE_TEXT=$(ratio "$(val text_index_bytes pmhash)" "$(val text_index_bytes btree)")
{
	echo "# UNIQUE pmhash vs UNIQUE btree ($(date -u '+%Y-%m-%d %H:%M UTC'))"
	echo
	echo "Machine: $(bench_machine). Pools: $PMH_CL_MODE_TEXT. $ROWS distinct keys, int8 and 200-byte text; best of $REPEAT for upkeep; pgbench median of $PGB_ROUNDS runs of $PGB_TIME s, synchronous_commit = off, a 1-client run on one CPU with its backend. PostgreSQL's hash index cannot be unique."
	echo
	echo "| | unique pmhash | unique btree | pmhash / btree | target | plain pmhash |"
	echo "| --- | --- | --- | --- | --- | --- |"
	echo "| insert upkeep, int8 (ms) | $(val int8_upkeep_ms pmhash) | $(val int8_upkeep_ms btree) | $UP_INT | <= 0.5: $(verdict "$UP_INT" '<=' 0.5) | $(val int8_upkeep_ms plain_pmhash) |"
	echo "| insert upkeep, 200-byte text (ms) | $(val text_upkeep_ms pmhash) | $(val text_upkeep_ms btree) | $UP_TEXT | <= 0.5: $(verdict "$UP_TEXT" '<=' 0.5) | $(val text_upkeep_ms plain_pmhash) |"
	echo "| index size, int8 (bytes per entry) | $(val int8_bytes_per_entry pmhash) | $(val int8_bytes_per_entry btree) | $(ratio "$(val int8_index_bytes pmhash)" "$(val int8_index_bytes btree)") | | |"
	echo "| index size, 200-byte text (bytes per entry) | $(val text_bytes_per_entry pmhash) | $(val text_bytes_per_entry btree) | $SIZE_TEXT | <= 0.2: $(verdict "$SIZE_TEXT" '<=' 0.2) | |"
	for c in $CLIENTS; do
		R=$(ratio "$(val "upsert_c${c}_tps" pmhash)" "$(val "upsert_c${c}_tps" btree)")
		echo "| pgbench ON CONFLICT DO UPDATE, $c clients (tps) | $(val "upsert_c${c}_tps" pmhash) | $(val "upsert_c${c}_tps" btree) | $R | >= 1: $(verdict "$R" '>=' 1) | |"
	done
	if [ "$HOT_TXNS" != 0 ]; then
		echo
		echo "Hot key ($HOT_BATCHES batches of $HOT_TXNS single-row non-HOT updates of one key, autovacuum off; hash's index is not unique):"
		echo
		echo "| tps | unique pmhash | unique btree | hash | pmhash / btree | pmhash / hash |"
		echo "| --- | --- | --- | --- | --- | --- |"
		for w in first last; do
			echo "| $w batch | $(val "hot_${w}_tps" pmhash) | $(val "hot_${w}_tps" btree) | $(val "hot_${w}_tps" hash) | $(ratio "$(val "hot_${w}_tps" pmhash)" "$(val "hot_${w}_tps" btree)") | $(ratio "$(val "hot_${w}_tps" pmhash)" "$(val "hot_${w}_tps" hash)") |"
		done
	fi
	echo
	echo "Insert upkeep: the INSERT ... SELECT into a table with the index minus the same without (int8 $(val int8_none_ms none) ms, text $(val text_none_ms none) ms). pmhash size: pool bytes + shared memory (pmhash_stats); btree: pg_relation_size. Run time $(pmh_elapsed "$T_START") s."
} >"$MD"
cat "$MD"
exit "$STATUS"
