#!/usr/bin/env bash
# test/bench/peers_bench.sh -- pmhash's core beside Dash-EH and CCEH, built
# from their sources and run in the same run at the same key count, taking
# turns, on emulated PMem (/dev/shm): no figure from another machine.
#
#   1. make bench-core (test/bench/pmh_bench)
#   2. Dash's driver test_pmem (Dash-EH, and its CCEH baseline): taken from
#      $PMHASH_TEST_PMEM if that is an executable, else built into
#      $PMHASH_PEERS_DIR (default tmp_check/peers) from three git
#      repositories (clones or bare), when all are given:
#        PMHASH_DASH_SRC       baotonglu/dash
#        PMHASH_PMDK_SRC       HaoPatrick/pmdk (its branch addr-patch: a PMDK
#                              that maps pools at a fixed address)
#        PMHASH_RECLAIMER_SRC  XiangpengHao/epoch-reclaimer
#      (needs g++ and libgflags-dev).  Without them the script says that it
#      skipped the peers, runs pmh_bench alone, and exits 0.
#   3. $ROUNDS rounds; in each, pmh_bench (uniform keys, each thread count
#      on a fresh table: insert, then positive and negative lookups one key
#      at a time and 16 at a time), then test_pmem -index dash-ex, then
#      -index cceh (-op full: insert, positive, negative, delete; fixed
#      8-byte keys, uniform), at each of $THREADS; the median of the rounds.
#      Throughput is wall-clock: operations over the time until the last
#      thread ended (test_pmem's "slowest"; its "throughput" divides by the
#      mean thread time).
#   4. report: peers.md (Mops/s, ratios to Dash-EH, issue 33's targets: one-
#      key lookups >= 1.0 x Dash-EH at 1 and 2 threads, two-thread speed-up
#      of one-key lookups >= 1.8, inserts >= 2 x Dash-EH) and peers.tsv in
#      test/bench/results/<date>/ (or $PMHASH_BENCH_OUT)
#
# The pools of all three live in /dev/shm and are removed after each run;
# Dash's fork maps its pool with MAP_SYNC and takes the CPU-flush path
# whatever PMEM_IS_PMEM_FORCE says, pmh_bench is run with
# PMEM_IS_PMEM_FORCE=1 (its default): both flush with CPU instructions.
#
# Knobs: PMHASH_BENCH_ENTRIES (10000000), PMHASH_BENCH_THREADS ("1 2"),
#        PMHASH_BENCH_ROUNDS (3), PMHASH_BENCH_HUGE_META=1 (pmh_bench
#        --huge-meta: pmhash's segment metadata in 2 MB pages, as the
#        server's shared memory under huge_pages = on), PMHASH_BENCH_OUT,
#        PG_CONFIG, and the sources above.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"
# shellcheck source=test/bench/bench_lib.sh
. "$HERE/bench_lib.sh"

cd "$PMH_ROOT" || exit 2
OUT=$(bench_out_dir) || exit 2
LOGDIR=$PMH_CHECK/bench
mkdir -p "$LOGDIR"
TSV=$OUT/peers.tsv
MD=$OUT/peers.md
STATUS=0
T_START=$(pmh_now)
ENTRIES=${PMHASH_BENCH_ENTRIES:-10000000}
THREADS=${PMHASH_BENCH_THREADS:-1 2}
ROUNDS=${PMHASH_BENCH_ROUNDS:-3}
SHM=/dev/shm
HUGE_META=${PMHASH_BENCH_HUGE_META:+--huge-meta}

pmh_head "make bench-core"
make -C "$PMH_ROOT" --no-print-directory PG_CONFIG="$PG_CONFIG" bench-core >"$LOGDIR/bench-core.log" 2>&1 || {
	pmh_build_errors "$LOGDIR/bench-core.log" 40
	pmh_die "make bench-core failed"
}

# build_test_pmem DIR: Dash's test_pmem from the three repositories, with
# the flags of Dash's own Release build; prints its path
build_test_pmem() {
	local w=$1
	mkdir -p "$w" || return 1
	[ -d "$w/dash" ] || git clone -q "$PMHASH_DASH_SRC" "$w/dash" || return 1
	[ -d "$w/epoch-reclaimer" ] || git clone -q "$PMHASH_RECLAIMER_SRC" "$w/epoch-reclaimer" || return 1
	[ -d "$w/pmdk" ] || git clone -q -b addr-patch "$PMHASH_PMDK_SRC" "$w/pmdk" || return 1
	if [ ! -e "$w/pmdk/src/nondebug/libpmemobj.a" ]; then
		make -j"$(nproc)" -C "$w/pmdk/src" libpmem libpmemobj NDCTL_ENABLE=n \
			EXTRA_CFLAGS=-Wno-error >"$LOGDIR/peers-pmdk.log" 2>&1 || return 1
	fi
	# its pools go to /dev/shm, not /mnt/pmem0
	sed -i 's#^std::string pool_name = "/mnt/pmem0/";#std::string pool_name = "/dev/shm/";#' \
		"$w/dash/src/test_pmem.cpp" || return 1
	# the fork's libraries linked in statically: a shared one would load
	# Debian's libpmem at run time
	g++ -std=c++17 -march=native -O3 -DNDEBUG -Ofast -DPMEM \
		-I "$w/pmdk/src/include" -I "$w/epoch-reclaimer" \
		-o "$w/test_pmem" "$w/dash/src/test_pmem.cpp" \
		"$w/pmdk/src/nondebug/libpmemobj.a" "$w/pmdk/src/nondebug/libpmem.a" \
		-lgflags -lpthread -ldl >"$LOGDIR/peers-build.log" 2>&1 || return 1
	echo "$w/test_pmem"
}

TEST_PMEM=""
PEERS_WHY=""
if [ -n "${PMHASH_TEST_PMEM:-}" ] && [ -x "$PMHASH_TEST_PMEM" ]; then
	TEST_PMEM=$PMHASH_TEST_PMEM
elif [ -n "${PMHASH_DASH_SRC:-}" ] && [ -n "${PMHASH_PMDK_SRC:-}" ] && [ -n "${PMHASH_RECLAIMER_SRC:-}" ]; then
	pmh_head "building Dash's test_pmem (Dash-EH, CCEH)"
	TEST_PMEM=$(build_test_pmem "${PMHASH_PEERS_DIR:-$PMH_CHECK/peers}") || {
		pmh_err "building test_pmem failed (logs: $LOGDIR/peers-*.log)"
		tail -n 20 "$LOGDIR/peers-build.log" 2>/dev/null
		STATUS=1
		TEST_PMEM=""
		PEERS_WHY="the build of Dash's test_pmem failed"
	}
else
	PEERS_WHY="no Dash sources (set PMHASH_DASH_SRC, PMHASH_PMDK_SRC and PMHASH_RECLAIMER_SRC, or PMHASH_TEST_PMEM)"
fi
[ -n "$TEST_PMEM" ] || pmh_say "skipped Dash-EH and CCEH: $PEERS_WHY"

printf 'system\top\tthreads\tround\tmops\n' >"$TSV"
declare -A RUNS

# run_pmhash ROUND: pmh_bench at every thread count, its Mops/s recorded
run_pmhash() {
	local r=$1 tsv=$LOGDIR/peers-pmh.tsv
	"$PMH_ROOT/test/bench/pmh_bench" --entries "$ENTRIES" --threads "$(tr ' ' ',' <<<"$THREADS")" \
		--dist uniform --no-direct --no-experiments --dir "$SHM" --tsv "$tsv" $HUGE_META \
		>"$LOGDIR/peers-pmh.md" 2>"$LOGDIR/peers-pmh.err" || {
		pmh_err "pmh_bench failed (or answered wrongly): $LOGDIR/peers-pmh.*"
		STATUS=1
		return
	}
	while IFS=$'\t' read -r t op dist _ _ mops _; do
		case "$op" in
			insert | search+ | search- | "search+ batch" | "search- batch") ;;
			*) continue ;;
		esac
		mops=$(printf '%.2f' "$mops")
		printf 'pmhash\t%s\t%s\t%s\t%s\n' "$op" "$t" "$r" "$mops" >>"$TSV"
		RUNS["pmhash|$op|$t"]+=" $mops"
		printf '    pmhash   %-14s %d thread(s): %6.2f Mops/s\n' "$op" "$t" "$mops"
	done < <(tail -n +2 "$tsv")
}

# run_peer INDEX NAME THREADS ROUND: one test_pmem run (-op full)
run_peer() {
	local index=$1 name=$2 t=$3 r=$4 out phase mops
	rm -f "$SHM/pmem_ex.data" "$SHM/pmem_cceh.data"
	out=$("$TEST_PMEM" -index "$index" -n 0 -p "$ENTRIES" -t "$t" -k fixed \
		-distribution uniform -e 1 -ed 1000 -op full -ps 8 2>&1)
	local rc=$?
	rm -f "$SHM/pmem_ex.data" "$SHM/pmem_cceh.data"
	if [ "$rc" -ne 0 ]; then
		pmh_err "test_pmem -index $index -t $t failed (exit $rc)"
		tail -n 10 <<<"$out"
		STATUS=1
		return
	fi
	# "<phase><threads> Begin", then "... ops/s, fastest = F, slowest = S"
	while read -r phase mops; do
		case "$phase" in
			Insert[0-9]*) phase=insert ;;
			Pos_search[0-9]*) phase=search+ ;;
			Neg_search[0-9]*) phase=search- ;;
			*) continue ;;
		esac
		printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$phase" "$t" "$r" "$mops" >>"$TSV"
		RUNS["$name|$phase|$t"]+=" $mops"
		printf '    %-8s %-14s %d thread(s): %6.2f Mops/s\n' "$name" "$phase" "$t" "$mops"
	done < <(awk '/ Begin$/ { p = $1 } /slowest = / { s = $NF; printf "%s %.2f\n", p, s / 1e6 }' <<<"$out")
}

for r in $(seq 1 "$ROUNDS"); do
	pmh_head "round $r of $ROUNDS: $ENTRIES keys"
	run_pmhash "$r"
	if [ -n "$TEST_PMEM" ]; then
		for t in $THREADS; do
			run_peer dash-ex dash "$t" "$r"
			run_peer cceh cceh "$t" "$r"
		done
	fi
done

# m SYSTEM OP THREADS: the median Mops/s of the rounds, or nothing
m() {
	# shellcheck disable=SC2086 # the runs are words
	median ${RUNS["$1|$2|$3"]:-}
}
first=${THREADS%% *}
last=${THREADS##* }
{
	echo "# pmhash core beside Dash-EH and CCEH, same run ($(date -u '+%Y-%m-%d %H:%M UTC'))"
	echo
	echo "Machine: $(bench_machine). $ENTRIES keys, uniform; pools on $SHM, CPU cache flushes (emulated PMem). Median of $ROUNDS rounds, the three taking turns; wall-clock Mops/s (operations over the time until the last thread ended). pmhash: test/bench/pmh_bench (the server's write path and lookups, one key at a time, and 16 at a time as a scan of \"= ANY\" does). Dash-EH and CCEH: Dash's test_pmem, built from source${TEST_PMEM:+ ($TEST_PMEM)}. pmhash's segment metadata in ${HUGE_META:+2 MB pages (--huge-meta, as under huge_pages = on)}${HUGE_META:-4 kB pages}."
	[ -n "$TEST_PMEM" ] || echo "
**Dash-EH and CCEH skipped: $PEERS_WHY.**"
	echo
	echo "| operation | threads | pmhash | pmhash, 16 at a time | Dash-EH | CCEH | pmhash / Dash-EH | pmhash / CCEH |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
	for op in insert search+ search-; do
		for t in $THREADS; do
			b=""
			[ "$op" = insert ] || b=$(m pmhash "$op batch" "$t")
			echo "| $op | $t | $(m pmhash "$op" "$t") | $b | $(m dash "$op" "$t") | $(m cceh "$op" "$t") | $(bench_ratio "$(m pmhash "$op" "$t")" "$(m dash "$op" "$t")") | $(bench_ratio "$(m pmhash "$op" "$t")" "$(m cceh "$op" "$t")") |"
		done
	done
	echo
	echo "| target (issue 33) | wanted | measured | |"
	echo "| --- | --- | --- | --- |"
	for op in search+ search-; do
		for t in $THREADS; do
			R=$(bench_ratio "$(m pmhash "$op" "$t")" "$(m dash "$op" "$t")")
			echo "| one-key $op, $t thread(s), vs Dash-EH | >= 1.0 | $R | $(bench_verdict "$R" '>=' 1.0) |"
		done
	done
	if [ "$first" != "$last" ]; then
		for op in search+ search-; do
			R=$(bench_ratio "$(m pmhash "$op" "$last")" "$(m pmhash "$op" "$first")")
			echo "| one-key $op, speed-up $first -> $last threads | >= 1.8 | $R | $(bench_verdict "$R" '>=' 1.8) |"
		done
	fi
	for t in $THREADS; do
		R=$(bench_ratio "$(m pmhash insert "$t")" "$(m dash insert "$t")")
		echo "| insert, $t thread(s), vs Dash-EH | >= 2.0 | $R | $(bench_verdict "$R" '>=' 2.0) |"
	done
} >"$MD"
bench_finish
