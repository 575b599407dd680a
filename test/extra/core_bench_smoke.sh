#!/usr/bin/env bash
# test/extra/core_bench_smoke.sh -- smoke test of the core benchmark driver
# test/bench/pmh_bench (doc/BENCHMARKS.md): build it ("make
# bench-core") and run it on a tiny table, 1 and 2 threads, uniform and
# Zipf, with --verify.  Passes when the driver exits 0 (every answer right:
# each positive lookup finds exactly its key's TID, each negative one
# nothing, every key is found or not found as it should after the load and
# the deletes, and the entry counts add up), and its table has every
# measurement with sensible counts.  Timings are printed, never checked.
set -uo pipefail

ROOT=${PMHASH_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
SCRATCH=${PMHASH_TMP_CHECK:-$(mktemp -d)}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
fail=0

make -C "$ROOT" --no-print-directory PG_CONFIG="$PG_CONFIG" bench-core || exit 1

# the pool goes to the scratch directory (unlinked as soon as it is mapped)
"$ROOT/test/bench/pmh_bench" --entries 20000 --threads 1,2 --verify \
	--dir "$SCRATCH" --tsv "$SCRATCH/core.tsv" >"$SCRATCH/core.md"
rc=$?
cat "$SCRATCH/core.md"
if [ "$rc" -ne 0 ]; then
	echo "FAIL: pmh_bench exited $rc"
	fail=1
fi
grep -q '^wrong answers: 0$' "$SCRATCH/core.md" || {
	echo "FAIL: the report does not say 'wrong answers: 0'"
	fail=1
}

# 12 measurements per thread count and 10 probe experiments; counts that
# must hold whatever the speed
awk -F'\t' '
	NR == 1 { next }
	{
		rows++
		key = $1 " " $2 " " $3
		# threads op dist ops secs mops mops_cpu wa fences_per_op
		# reads_per_op frac_reading hits errors
		if ($13 != 0) { print "FAIL: " key ": " $13 " wrong answers"; bad = 1 }
		if ($6 <= 0 || $7 <= 0) { print "FAIL: " key ": no throughput"; bad = 1 }
		if ($2 ~ /^search\+/ && $12 != $4) { print "FAIL: " key ": " $12 " of " $4 " lookups found"; bad = 1 }
		if ($2 ~ /^search-/ && $12 != 0) { print "FAIL: " key ": " $12 " negative lookups found something"; bad = 1 }
		# a present key is read from the pool unless it waits in a D-bucket
		if (($2 == "search+" || $2 == "search+ batch") && $11 < 0.9) { print "FAIL: " key ": only " $11 " of positive lookups read the pool"; bad = 1 }
		# 16-bit fingerprints: about 1 % of absent keys match a slot by chance
		if (($2 == "search-" || $2 == "search- batch") && $11 > 0.1) { print "FAIL: " key ": " $11 " of negative lookups read the pool"; bad = 1 }
		if (($2 == "insert" || $2 == "insert-direct") && $8 <= 0) { print "FAIL: " key ": no media writes"; bad = 1 }
		# the one-miss reference keeps every entry in its mapped table
		if ($2 ~ /one-miss reference$/ && $11 != 1) { print "FAIL: " key ": only " $11 " of lookups read the reference table"; bad = 1 }
		# the two-miss reference reads an entry when a fingerprint matches:
		# for every present key, for few absent ones
		if ($2 == "search+ two-miss reference" && $11 != 1) { print "FAIL: " key ": only " $11 " of lookups read the reference table"; bad = 1 }
		if ($2 == "search- two-miss reference" && $11 > 0.1) { print "FAIL: " key ": " $11 " of negative lookups read the reference table"; bad = 1 }
		if ($2 == "delete" && ($12 <= 0 || $12 > $4)) { print "FAIL: " key ": " $12 " of " $4 " deletes hit"; bad = 1 }
	}
	END {
		if (rows != 34) { print "FAIL: " rows " measurements, expected 34"; bad = 1 }
		exit bad
	}' "$SCRATCH/core.tsv" || fail=1

[ "$fail" -eq 0 ] && echo "core benchmark smoke test: ok"
exit "$fail"
