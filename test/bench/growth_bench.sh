#!/usr/bin/env bash
# test/bench/growth_bench.sh -- an index grown from empty to 30 million
# entries on default settings: inserts must never fail.
#
# pmhash's shared memory set aside at start (pmhash.shared_memory, 128 MB
# by default) holds about 14 million entries; past it the area grows into
# dynamic shared memory (pmhash.max_shared_memory).  This script
#
#   1. starts a throwaway cluster with pmhash preloaded and nothing else
#      set for pmhash (pool mode PMHASH_BENCH_MODE, "file" by default),
#      with max_wal_size raised so that checkpoints do not dominate;
#   2. creates an empty table t (k int8) with a pmhash index, and inserts
#      PMHASH_BENCH_ROWS (30M) rows in PMHASH_BENCH_BATCH (1M) row
#      transactions, recording after each one its time, the index's
#      entries, shared memory and pool bytes;
#   3. checks: every batch committed (STATUS 1 otherwise); one entry per
#      row (pmhash_stats); every 997th key found once through the index
#      (index scan, forced); pmhash_check finds nothing; the server log
#      has the growth WARNING once and no ERROR;
#   4. restarts the server and checks the lookups again (the state is
#      rebuilt in grown memory).
#
# Writes growth.md / growth.tsv to the results directory (bench_out_dir).
# Knobs: PMHASH_BENCH_ROWS (30000000), PMHASH_BENCH_BATCH (1000000),
#        PMHASH_BENCH_MODE (file | emulated), PMHASH_BENCH_OUT,
#        PMHASH_BENCH_CONF (more postgresql.conf lines).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
. "$HERE/../lib.sh"
. "$HERE/bench_lib.sh"

bench_setup test/bench/growth_bench.sh growth "$@"
ROWS=${PMHASH_BENCH_ROWS:-30000000}
BATCH=${PMHASH_BENCH_BATCH:-1000000}
MODE=${PMHASH_BENCH_MODE:-file}

bench_cluster pmhgrowth "$MODE" "max_wal_size = '8GB'
checkpoint_timeout = '30min'
autovacuum = off"
sql() { "${PMH_CL_PSQL[@]}" -d bench "$@"; }

sql -c 'CREATE TABLE t (k int8)' -c 'CREATE INDEX t_k ON t USING pmhash (k)' >/dev/null ||
	pmh_die "creating the table failed"

{
	printf '# Growth from empty to %s entries on default settings (%s pool)\n\n' "$ROWS" "$MODE"
	printf 'Machine: %s. %s-row transactions; pmhash.shared_memory and\n' "$(bench_machine)" "$BATCH"
	printf 'pmhash.max_shared_memory at their defaults (%s, %s).\n\n' \
		"$(sql -c 'SHOW pmhash.shared_memory')" "$(sql -c 'SHOW pmhash.max_shared_memory')"
	printf '| rows | batch s | rows/s | entries | shared memory MB | pool MB |\n'
	printf '| ---: | ---: | ---: | ---: | ---: | ---: |\n'
} >"$MD"
printf 'rows\tms\tentries\tshmem_bytes\tpool_bytes\n' >"$TSV"

pmh_head "inserting $ROWS rows in batches of $BATCH"
done_rows=0
failed=0
while [ "$done_rows" -lt "$ROWS" ]; do
	n=$((ROWS - done_rows < BATCH ? ROWS - done_rows : BATCH))
	t0=$(pmh_now)
	if ! err=$(sql -c "INSERT INTO t SELECT g FROM generate_series($done_rows + 1, $done_rows + $n) g" 2>&1 >/dev/null) ||
		printf '%s' "$err" | grep -q ERROR; then
		pmh_err "batch at $done_rows failed: $err"
		failed=$((failed + 1))
		STATUS=1
		break
	fi
	ms=$(awk -v s="$(pmh_elapsed "$t0")" 'BEGIN { printf "%d", s * 1000 }')
	done_rows=$((done_rows + n))
	IFS='|' read -r entries shm pool < <(sql -c "SELECT entries, shmem_bytes, pool_bytes FROM pmhash_stats('t_k')")
	printf '%s\t%s\t%s\t%s\t%s\n' "$done_rows" "$ms" "$entries" "$shm" "$pool" >>"$TSV"
	pmh_say "$(printf '%10d rows  %6.1f s  shmem %7.1f MB  pool %7.1f MB' "$done_rows" \
		"$(awk -v m="$ms" 'BEGIN { print m / 1000 }')" \
		"$(awk -v b="$shm" 'BEGIN { print b / 1048576 }')" \
		"$(awk -v b="$pool" 'BEGIN { print b / 1048576 }')")"
	# every fifth batch, and the last, in the report
	if [ $(((done_rows / BATCH) % 5)) = 0 ] || [ "$done_rows" -ge "$ROWS" ] || [ "$done_rows" = "$BATCH" ]; then
		awk -v r="$done_rows" -v m="$ms" -v n="$n" -v e="$entries" -v s="$shm" -v p="$pool" 'BEGIN {
			printf "| %d | %.1f | %.0f | %d | %.1f | %.1f |\n", r, m / 1000, n / (m / 1000), e, s / 1048576, p / 1048576 }' >>"$MD"
	fi
done

# the checks; each prints t when it holds
check() {
	local what=$1 got
	got=$(sql -c "$2" 2>&1)
	if [ "$got" = t ]; then
		printf -- '- %s: yes\n' "$what" >>"$MD"
	else
		printf -- '- %s: **NO** (%s)\n' "$what" "$got" >>"$MD"
		pmh_err "$what: $got"
		STATUS=1
	fi
}
lookups() {
	check "every 997th key found once through the index$1" "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
		SELECT count(*) = (SELECT count(*) FROM generate_series(1, $done_rows, 997)) FROM generate_series(1, $done_rows, 997) g JOIN t ON t.k = g"
}

printf '\nChecks:\n\n' >>"$MD"
printf -- '- batches that failed: %d\n' "$failed" >>"$MD"
check "one entry per row" "SELECT entries = (SELECT count(*) FROM t) FROM pmhash_stats('t_k')"
lookups ""
check "pmhash_check finds nothing wrong" "SELECT count(*) = 0 FROM pmhash_check('t_k')"
nwarn=$(grep -c 'WARNING:  pmhash shared memory grew beyond' "$PMH_CL_LOG")
nerr=$(grep -c 'ERROR:' "$PMH_CL_LOG")
printf -- '- growth WARNINGs in the server log: %d; ERRORs: %d\n' "$nwarn" "$nerr" >>"$MD"
[ "$nerr" = 0 ] || STATUS=1

pmh_head "restart"
t0=$(pmh_now)
"$PMH_CL_BINDIR/pg_ctl" -D "$PMH_CL_DATA" -l "$PMH_CL_LOG" -w -t 600 -m fast restart \
	>"$LOGDIR/pg_ctl.log" 2>&1 || pmh_die "restart failed"
lookups " after a restart"
printf -- '- restart and the checks after it: %s s\n' "$(pmh_elapsed "$t0")" >>"$MD"

bench_finish
