#!/usr/bin/env bash
# test/extra/fuzz_smoke.sh -- a short, fixed-seed run of each fuzz target
# (test/fuzz: fuzz_pool and fuzz_ops, libFuzzer with AddressSanitizer and
# UBSan), after replaying the checked-in regression inputs
# (test/fuzz/regress/TARGET).  PMHASH_FUZZ_SMOKE_SECONDS sets the run time
# per target (default 15).  Long runs: test/fuzz/run.sh (doc/TESTING.md,
# "Fuzzing").  Prints "N passed, N failed" (one per replay and per run);
# exits 0 iff nothing failed.

set -uo pipefail

ROOT=${PMHASH_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
SCRATCH=${PMHASH_TMP_CHECK:-$ROOT/tmp_check/extra/fuzz_smoke}
SECS=${PMHASH_FUZZ_SMOKE_SECONDS:-15}
pass=0
fail=0

if ! make -C "$ROOT" --no-print-directory PG_CONFIG="$PG_CONFIG" fuzz; then
	echo "fuzz_smoke: make fuzz failed (clang-14 and libclang-rt-14-dev are needed)"
	echo "0 passed, 1 failed"
	exit 1
fi

for t in pool ops; do
	bin=$ROOT/test/fuzz/fuzz_$t
	dir=$SCRATCH/$t
	rm -rf "$dir"
	mkdir -p "$dir/corpus" "$dir/crashes"

	regress=()
	for f in "$ROOT"/test/fuzz/regress/"$t"/*; do
		[ -f "$f" ] && regress+=("$f")
	done
	if [ ${#regress[@]} -gt 0 ]; then
		if "$bin" -artifact_prefix="$dir/crashes/" "${regress[@]}" >"$dir/regress.log" 2>&1; then
			echo "ok - fuzz_$t: ${#regress[@]} regression input(s)"
			pass=$((pass + 1))
		else
			echo "not ok - fuzz_$t: a regression input fails (log $dir/regress.log)"
			tail -n 40 "$dir/regress.log"
			fail=$((fail + 1))
		fi
	fi

	if "$bin" -seed=1 -max_total_time="$SECS" -timeout=60 -rss_limit_mb=2048 \
		-artifact_prefix="$dir/crashes/" -print_final_stats=1 \
		"$dir/corpus" "$ROOT/test/fuzz/seeds/$t" >"$dir/fuzz.log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz.log")
		echo "ok - fuzz_$t: ${SECS}s, ${runs:-?} inputs"
		pass=$((pass + 1))
	else
		echo "not ok - fuzz_$t: failing input in $dir/crashes/ (log $dir/fuzz.log)"
		grep -E -A3 'check failed|ERROR: |SUMMARY' "$dir/fuzz.log" | head -n 40
		ls -l "$dir/crashes/"
		fail=$((fail + 1))
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
