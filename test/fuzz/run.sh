#!/usr/bin/env bash
# test/fuzz/run.sh -- build the fuzz targets and run them for a long time.
#
# Usage:  test/fuzz/run.sh [-t SECONDS] [-j JOBS] [TARGET...] [-- LIBFUZZER-ARGS]
#
#   TARGET   pool (fuzz_pool: pool images through validation and recovery)
#            ops  (fuzz_ops: operation sequences against a model)
#            default: both, one after the other
#   -t       seconds per target (default 600)
#   -j       parallel libFuzzer jobs per target (default 1; the machine is
#            shared, mind the cores)
#
# The corpus of each target grows across runs in $FUZZ_DIR/TARGET/corpus
# (FUZZ_DIR defaults to tmp_check/fuzz), seeded from test/fuzz/seeds/TARGET
# and test/fuzz/regress/TARGET.  Inputs that fail land in
# $FUZZ_DIR/TARGET/crashes/ (crash-*, timeout-*, oom-*, leak-*), the log in
# $FUZZ_DIR/TARGET/fuzz.log (fuzz-N.log with -j).  Reproduce one with
#     test/fuzz/fuzz_TARGET FILE
# (FUZZ_VERBOSE=1 prints the decoded input), shrink it with
#     test/fuzz/fuzz_TARGET -minimize_crash=1 -max_total_time=60 FILE
# and check it in under test/fuzz/regress/TARGET/ once the bug is fixed.
# The exit status is 0 iff no target found anything.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
FUZZ_DIR=${FUZZ_DIR:-$ROOT/tmp_check/fuzz}
SECS=600
JOBS=1
TARGETS=()
EXTRA=()

while [ $# -gt 0 ]; do
	case $1 in
	-t) SECS=$2; shift 2 ;;
	-j) JOBS=$2; shift 2 ;;
	--) shift; EXTRA=("$@"); break ;;
	pool|ops) TARGETS+=("$1"); shift ;;
	-h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(pool ops)

make -C "$ROOT" --no-print-directory PG_CONFIG="$PG_CONFIG" fuzz || exit 2

rc=0
for t in "${TARGETS[@]}"; do
	dir=$FUZZ_DIR/$t
	mkdir -p "$dir/corpus" "$dir/crashes"
	bin=$ROOT/test/fuzz/fuzz_$t
	maxlen=4096
	[ "$t" = pool ] && maxlen=32768
	args=(-max_total_time="$SECS" -max_len="$maxlen" -timeout=60 -rss_limit_mb=2048
		-artifact_prefix="$dir/crashes/" -print_final_stats=1)
	if [ "$JOBS" -gt 1 ]; then
		args+=(-jobs="$JOBS" -workers="$JOBS")
	fi
	inputs=("$dir/corpus" "$ROOT/test/fuzz/seeds/$t")
	[ -d "$ROOT/test/fuzz/regress/$t" ] && inputs+=("$ROOT/test/fuzz/regress/$t")
	echo "==== fuzz_$t: ${SECS}s, $JOBS job(s); corpus $dir/corpus, crashes in $dir/crashes/"
	before=$(find "$dir/crashes" -type f | wc -l)
	if [ "$JOBS" -gt 1 ]; then
		(cd "$dir" && "$bin" "${args[@]}" "${EXTRA[@]}" "${inputs[@]}")
	else
		(cd "$dir" && "$bin" "${args[@]}" "${EXTRA[@]}" "${inputs[@]}" 2>&1 |
			tee "$dir/fuzz.log" | grep -E --line-buffered '(pulse|DONE|INITED|ERROR|SUMMARY|check failed|Test unit written|stat::)')
	fi
	after=$(find "$dir/crashes" -type f | wc -l)
	if [ "$after" -gt "$before" ]; then
		echo "fuzz_$t: $((after - before)) new failing input(s) in $dir/crashes/"
		rc=1
	fi
done
exit $rc
