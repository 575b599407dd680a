#!/usr/bin/env bash
# test/bench/core_bench.sh -- the pmhash data structure alone, no server:
# build test/bench/pmh_bench ("make bench-core"), run it, and write its
# report into test/bench/results/<date>/ (or $PMHASH_BENCH_OUT):
#
#   core.md    the driver's markdown report (Mops/s, media write
#              amplification, pool reads per lookup, the targets it can
#              judge alone)
#   core.tsv   one row per measurement
#   core_mops.png  Mops/s per operation and thread count
# (Dash-EH and CCEH, built from source and run beside pmh_bench in the same
# run at the same key count: test/bench/peers_bench.sh.)
#   core_probe.png the probe experiments: CPU time per lookup relative to
#              the baseline, and the share of lookups that read the pool
#
# Arguments are passed to pmh_bench (see "test/bench/pmh_bench --help"):
# by default 10 million keys, 1 and 2 threads, uniform and Zipf 0.99, the
# pool on /dev/shm with PMEM_IS_PMEM_FORCE=1.  "--quick" loads 1 million.
# The exit status is pmh_bench's: 1 if any lookup answered wrongly.
#
# Knobs: PMHASH_BENCH_OUT (results directory), PG_CONFIG.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/../lib.sh"
# shellcheck source=test/bench/bench_lib.sh
. "$HERE/bench_lib.sh"

cd "$PMH_ROOT" || exit 2
OUT=$(bench_out_dir) || exit 2 # (pmh_die in $(...) leaves only the subshell)
LOGDIR=$PMH_CHECK/bench
mkdir -p "$LOGDIR"

pmh_head "make bench-core"
make -C "$PMH_ROOT" --no-print-directory PG_CONFIG="$PG_CONFIG" bench-core >"$LOGDIR/bench-core.log" 2>&1 || {
	pmh_build_errors "$LOGDIR/bench-core.log" 40
	pmh_die "make bench-core failed"
}

pmh_head "test/bench/pmh_bench $*"
pmh_say "(load average before: $(bench_load))"
"$PMH_ROOT/test/bench/pmh_bench" --tsv "$OUT/core.tsv" "$@" >"$OUT/core.md"
rc=$?
{
	echo
	echo "- load average after: $(bench_load) (the machine was shared with other users; \"Mops / CPU-s\" divides by the CPU time the threads got)"
	echo "- command: test/bench/core_bench.sh $*"
} >>"$OUT/core.md"

# Mops/s by operation: one column per thread count
threads=$(awk -F'\t' 'NR > 1 { print $1 }' "$OUT/core.tsv" | sort -n -u | tr '\n' ' ')
awk -F'\t' -v threads="$threads" '
	BEGIN {
		n = split("insert|-;search+|uniform;search+ batch|uniform;search+|zipf;search+ batch|zipf;" \
			"search-|uniform;search- batch|uniform;search-|zipf;search- batch|zipf;" \
			"delete|uniform;delete|zipf;insert-direct|-", rows, ";")
		nt = split(threads, th, " ")
	}
	NR > 1 { m[$1 "|" $2 "|" $3] = $6 }
	END {
		printf "operation"
		for (t = 1; t <= nt; t++) printf " %s-thread%s", th[t], (th[t] > 1 ? "s" : "")
		print ""
		for (i = 1; i <= n; i++) {
			label = rows[i]; sub(/\|-$/, "", label); sub(/\|/, " ", label)
			printf "\"%s\"", label
			for (t = 1; t <= nt; t++) {
				k = th[t] "|" rows[i]
				printf " %s", (k in m) ? m[k] : "n/a"
			}
			printf "\n"
		}
	}' "$OUT/core.tsv" >"$OUT/core_mops.dat"

ncol=$(awk 'NR == 1 { print NF }' "$OUT/core_mops.dat")
plot="plot \"core_mops.dat\" using 2:xtic(1) title columnheader(2)"
for ((c = 3; c <= ncol; c++)); do
	plot+=", \"\" using $c title columnheader($c)"
done
bench_plot "$OUT" <<EOF
set terminal pngcairo size 1000,500 font ",10" noenhanced
set output "core_mops.png"
set datafile missing "n/a"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key top right
set xtics rotate by -20
set yrange [0:*]
set ylabel "Mops/s"
set title "pmhash core (pmh_bench): throughput by operation (Dash-EH and CCEH: peers_bench.sh)"
$plot
EOF

# probe experiments: CPU time per lookup relative to the baseline, and the
# share of lookups that read the pool
awk -F'\t' '
	NR > 1 && $2 ~ /^search[+-] (baseline|locked|index lock|one-miss reference|two-miss reference)/ {
		if ($2 ~ /baseline/) base[substr($2, 1, 7)] = $7
		n++; op[n] = $2; cpu[n] = $7; frac[n] = $11
	}
	END {
		print "lookup relative-CPU-time lookups-reading-PMem"
		for (i = 1; i <= n; i++) {
			b = base[substr(op[i], 1, 7)]
			label = op[i]; gsub(/,/, "", label)
			printf "\"%s\" %.3f %.3f\n", label, (cpu[i] > 0 && b > 0) ? b / cpu[i] : 0, frac[i]
		}
	}' "$OUT/core.tsv" >"$OUT/core_probe.dat"
if [ "$(wc -l <"$OUT/core_probe.dat")" -gt 1 ]; then
	bench_plot "$OUT" <<EOF
set terminal pngcairo size 1000,500 font ",10" noenhanced
set output "core_probe.png"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key top left
set xtics rotate by -25
set yrange [0:1.4]
set title "pmh_bench probe experiments (1 thread, uniform): CPU time per lookup vs the baseline, and lookups that read the pool"
plot "core_probe.dat" using 2:xtic(1) title columnheader(2), "" using 3 title columnheader(3), 1 with lines lc rgb "black" dt 2 notitle
EOF
fi

cat "$OUT/core.md"
pmh_say "(written to $OUT)"
exit "$rc"
