# shellcheck shell=bash
# test/bench/bench_lib.sh -- helpers shared by the benchmark scripts in
# test/bench (sourced after test/lib.sh).
#
#   bench_setup SCRIPT NAME ARGS...
#                         what a benchmark script does first (below)
#   bench_db              database "bench" with pmhash in the cluster
#                         that pmh_cluster_start started
#   bench_cluster NAME MODE CONF
#                         build, start a throwaway cluster (stopped at
#                         exit), and bench_db (below)
#   bench_finish          end the report with the run time, print it,
#                         exit with $STATUS
#   bench_out_dir         the results directory of this run, created:
#                         $PMHASH_BENCH_OUT, else test/bench/results/<date>
#                         (ignored by git; results/latest/ is kept); fails
#                         (exit 1) when it cannot be created
#   bench_machine         one line: CPU model, CPUs, memory, kernel
#   bench_load            the load average, for the report
#   bench_have_gnuplot    is gnuplot (with the pngcairo terminal) there?
#   bench_plot SCRIPT     run a gnuplot script (stdin) in the results dir;
#                         warns and returns 1 when gnuplot is missing
#   median NUMBER...      the middle number (the lower of two)
#   bench_timed_sql PSQLFN SQL...
#                         the statements in one session after a
#                         CHECKPOINT; prints the ms the last one took
#   bench_min A B         the smaller number (empty counts as infinity)
#   bench_ratio A B       A/B as "0.62", or "n/a"
#   bench_verdict R OP L  "met" if R OP L holds ("<=", ">="), else
#                         "missed" ("n/a" for no ratio)

# bench_setup SCRIPT NAME ARGS...: as root, run SCRIPT (its path in the
# tree) again as the test user on a copy of the tree, copy
# test/bench/results back, and exit; otherwise set the PostgreSQL paths,
# move to the tree and set LOGDIR (the logs), OUT (bench_out_dir), TSV and
# MD (OUT/NAME.tsv and .md), STATUS=0 and T_START.  Exits when OUT cannot
# be made.
bench_setup() {
	local script=$1 name=$2
	shift 2
	PMH_COPY_BACK_PATHS="test/bench/results"
	pmh_drop_root "$script" "$@" # exits if we are root
	pmh_init_pg_paths
	cd "$PMH_ROOT" || exit 2
	LOGDIR=$PMH_CHECK/bench
	mkdir -p "$LOGDIR"
	OUT=$(bench_out_dir) || exit 2
	TSV=$OUT/$name.tsv
	MD=$OUT/$name.md
	STATUS=0
	T_START=$(pmh_now)
}

# bench_db: create database "bench", with the pmhash extension, in the
# cluster that pmh_cluster_start started; dies on failure
bench_db() {
	"${PMH_CL_PSQL[@]}" -d postgres -c 'CREATE DATABASE bench' || pmh_die "CREATE DATABASE failed"
	"${PMH_CL_PSQL[@]}" -d bench -c 'CREATE EXTENSION pmhash' || pmh_die "CREATE EXTENSION pmhash failed"
}

# bench_cluster NAME MODE CONF: build pmhash (unless
# PMHASH_BENCH_SKIP_BUILD), start the throwaway cluster NAME with pools in
# MODE ("file" or "emulated") and the postgresql.conf lines CONF plus
# $PMHASH_BENCH_CONF, stop it at exit (unless PMHASH_BENCH_KEEP), and
# create database "bench" in it; dies on failure
bench_cluster() {
	pmh_cluster_build "$LOGDIR" "${PMHASH_BENCH_SKIP_BUILD:-}"
	[ "$PMH_CL_HAVE_PMHASH" = 1 ] || pmh_die "pmhash did not build: nothing to compare"
	PMH_CL_KEEP=${PMHASH_BENCH_KEEP:-}
	trap pmh_cluster_stop EXIT
	trap 'trap "" INT TERM; echo interrupted >&2; exit 130' INT TERM
	pmh_cluster_start "$1" "$2" "$LOGDIR" "$3
${PMHASH_BENCH_CONF:-}"
	bench_db
}

# bench_finish: add the run time to the report $MD, print it, and exit
# with $STATUS
bench_finish() {
	printf '\nRun time %s s.\n' "$(pmh_elapsed "$T_START")" >>"$MD"
	cat "$MD"
	exit "$STATUS"
}

bench_out_dir() {
	local d=${PMHASH_BENCH_OUT:-$PMH_ROOT/test/bench/results/$(date +%Y-%m-%d)}
	mkdir -p "$d" || pmh_die "cannot create $d"
	(cd "$d" && pwd -P)
}

bench_machine() {
	local cpu mem
	cpu=$(sed -n -E 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
	mem=$(awk '/^MemTotal:/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo 2>/dev/null)
	printf '%s, %s CPUs, %s RAM, Linux %s' "${cpu:-unknown CPU}" "$(nproc)" "${mem:-?}" "$(uname -r)"
}

bench_load() {
	cut -d' ' -f1-3 /proc/loadavg 2>/dev/null
}

bench_have_gnuplot() {
	command -v gnuplot >/dev/null 2>&1 &&
		gnuplot -e 'set terminal' </dev/null 2>&1 | grep -q pngcairo
}

bench_plot() {
	local dir=$1
	if ! bench_have_gnuplot; then
		pmh_warn "gnuplot (with pngcairo) not found: no plots (apt-get install gnuplot-nox)"
		cat >/dev/null
		return 1
	fi
	(cd "$dir" && gnuplot) || {
		pmh_warn "gnuplot failed"
		return 1
	}
}

# median NUMBER...: the middle one of the numbers (the lower middle of an
# even count); nothing for none
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

# bench_timed_sql PSQLFN SQL...: run the statements in one session of the
# psql command or function PSQLFN after a CHECKPOINT; prints the
# milliseconds the last statement took
bench_timed_sql() {
	local fn=$1 out
	shift
	out=$("$fn" 2>&1 <<EOF
CHECKPOINT;
SELECT clock_timestamp() AS t0 \gset
$*;
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1);
EOF
	) || {
		pmh_err "SQL failed: $out"
		return 1
	}
	tail -n 1 <<<"$out"
}

# bench_min A B: the smaller (empty counts as infinity)
bench_min() {
	if [ -z "$1" ]; then echo "$2"; elif [ -z "$2" ]; then echo "$1"; else
		awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'
	fi
}

# bench_ratio A B: A/B as "0.62", or "n/a" without both numbers
bench_ratio() {
	if [ -n "${1:-}" ] && [ -n "${2:-}" ] && awk -v b="$2" 'BEGIN { exit !(b > 0) }'; then
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
	else
		printf 'n/a'
	fi
}

# bench_verdict R OP LIMIT: "met" if R OP LIMIT holds, else "missed"
bench_verdict() {
	if [ "$1" = n/a ]; then
		echo n/a
	elif awk -v r="$1" -v l="$3" "BEGIN { exit !(r $2 l) }"; then
		echo met
	else
		echo missed
	fi
}

# bench_timed_query PSQLFN SETTINGS QUERY: one timed run of QUERY (EXPLAIN
# ANALYZE, TIMING OFF) after SETTINGS, through the psql command or function
# PSQLFN; prints the execution time (ms) and the CPU time the backend used
# (ms, from /proc: clock ticks), which a busy machine distorts less than
# the wall clock
bench_timed_query() {
	local out tick
	tick=$(getconf CLK_TCK 2>/dev/null || echo 100)
	out=$("$1" 2>&1 <<EOF
SELECT pg_backend_pid() AS pid \gset
\setenv PMH_BACKEND_PID :pid
$2
\! awk '{ print "cpu", \$14 + \$15 }' /proc/\$PMH_BACKEND_PID/stat
EXPLAIN (ANALYZE, TIMING OFF) $3;
\! awk '{ print "cpu", \$14 + \$15 }' /proc/\$PMH_BACKEND_PID/stat
EOF
	) || return 0
	awk -v tick="$tick" '
		/^cpu / { c[n++] = $2 }
		/^Execution Time: / { ms = $3 }
		END {
			if (ms == "") exit
			if (n == 2) printf "%s %.0f\n", ms, (c[1] - c[0]) * 1000 / tick
			else printf "%s\n", ms
		}' <<<"$out"
}
