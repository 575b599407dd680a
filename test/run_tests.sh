#!/usr/bin/env bash
# test/run_tests.sh -- build pmhash and run every test suite.
#
# Usage:  test/run_tests.sh [SUITE...]
#         PMHASH_TEST_ONLY=unit,regress test/run_tests.sh
#
# Suites (in this order; a suite without tests is skipped):
#   unit       "make unit": test/unit/test_core and test/unit/test_media;
#              every "N passed, N failed" line of their output is added to
#              the totals (a failing or missing build of a binary, or a
#              non-zero exit with no failure reported, counts as 1 failure)
#   regress    pg_regress over sql/*.sql + expected/*.out, schedule from
#              test/regress_schedule if present, else sql/*.sql sorted;
#              one count per test
#   isolation  pg_isolation_regress over test/isolation/specs/*.spec with
#              expected output in test/isolation/expected/*.out (schedule
#              test/isolation/isolation_schedule if present); one per spec
#              (regress and isolation: a temp.conf in the suite's directory
#              is added to the server's settings)
#   tap        test/tap/*.pl via prove with PostgreSQL::Test::Cluster; one
#              count per .pl file
#   extra      every executable test/extra/*.sh; one count per script
#              (pass = exit 0).  Scripts get PMHASH_ROOT, PMHASH_BINDIR,
#              PMHASH_TMP_CHECK (a private scratch dir), PG_CONFIG,
#              PG_REGRESS and PATH with the tmp_install bindir first.
#
# regress/isolation/tap/extra need the extension build and the private
# installation tmp_install/ (see test/lib.sh); if either fails, that counts
# as one failure and every test of those suites is counted as failed.
#
# The last line printed is exactly "N passed, N failed"; the exit status is
# 0 only if nothing failed.  Logs are kept under tmp_check/.
#
# The Debian packages of test/packages.txt are checked first (dpkg-query;
# apt-get is not run when they are all there).  As root, the missing ones
# are installed (apt-get update, then apt-get install, non-interactive; no
# "main" cluster is created and no daemon started); as another user, the
# runner names them and the command that installs them, and exits 2.
#
# When run as root, the tree is copied to a temporary directory owned by
# the "postgres" user and the tests run there as that user (initdb refuses
# to run as root); tmp_check/ is copied back afterwards.
#
# Environment knobs:
#   PMHASH_TEST_ONLY        comma list of suites to run (or pass them as args)
#   PMHASH_TEST_TIMEOUT     seconds per suite / per TAP file / per extra
#                           script before it is killed (default 600)
#   PMHASH_TEST_DEADLINE    seconds for the whole run (default: none; .ci/run
#                           sets it): later steps get less time or are not
#                           run (and counted as failed)
#   PMHASH_TEST_VERBOSE=1   prove -v
#   PMHASH_TEST_DIFF_LINES  max lines of regression.diffs to print (400)
#   PMHASH_TEST_JOBS        make -j (default 2)
#   PMHASH_TEST_USER        user to run as when started as root (postgres)
#   PMHASH_TEST_KEEP_WORKDIR=1  keep the root-mode copy of the tree
#   PMHASH_SKIP_PACKAGES=1  do not check (or install) the Debian packages
#   PMHASH_TAP_FILES        glob of TAP files to run, without .pl (e.g.
#                           "00[39]*"; default: all)
#   PMHASH_TAP_TEMP_CONFIG  TEMP_CONFIG for TAP nodes (default
#                           test/pmhash.conf; set empty to disable)
#   PG_CONFIG               default /usr/lib/postgresql/15/bin/pg_config
#   PG_TEST_EXTRA, PROVE_FLAGS  passed to the TAP tests / prove

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/lib.sh"

ALL_SUITES="unit regress isolation tap extra"
ONLY=${PMHASH_TEST_ONLY:-}
if [ $# -gt 0 ]; then
	ONLY=$(IFS=,; echo "$*")
fi
ONLY=${ONLY// /,}
for s in ${ONLY//,/ }; do
	case " $ALL_SUITES " in
	*" $s "*) ;;
	*) pmh_die "unknown suite '$s' (known: $ALL_SUITES)" ;;
	esac
done
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

# before dropping root: root installs what is missing
pmh_need_packages root

PMH_COPY_BACK_LOGS=1
pmh_drop_root test/run_tests.sh "$@" # exits if we are root

# one ordered stream: diagnostics of the runner and of the tools it starts
# land in the same place as the results, ending with the summary line
exec 2>&1

pmh_init_pg_paths
cd "$PMH_ROOT" || exit 2

TIMEOUT=${PMHASH_TEST_TIMEOUT:-600}
DIFF_LINES=${PMHASH_TEST_DIFF_LINES:-400}

TOTAL_PASS=0
TOTAL_FAIL=0
SUMMARY=()

# record SUITE PASSED FAILED NOTE SECONDS
record() {
	TOTAL_PASS=$((TOTAL_PASS + $2))
	TOTAL_FAIL=$((TOTAL_FAIL + $3))
	SUMMARY+=("$(printf '%-10s %5s passed %5s failed %7ss  %s' "$1" "$2" "$3" "$5" "$4")")
}

DEADLINE=${PMHASH_TEST_DEADLINE:-}
DEADLINE_AT=
if [ -n "$DEADLINE" ]; then
	DEADLINE_AT=$(($(date +%s) + DEADLINE))
fi

# shmem_leaks LOG...: the lines of server logs where pmhash freed an
# index's shared state with bytes unaccounted for (pmhash_free_shared): a
# leak, or a free of the wrong size, which fails the test that left it
shmem_leaks() {
	grep -h "bytes unaccounted for" "$@" 2>/dev/null
}

# run_logged LOG CMD...: run CMD under the timeout (and the overall
# deadline), output to terminal and LOG.
run_logged() {
	local log=$1 tmo=$TIMEOUT rem
	shift
	if [ -n "$DEADLINE_AT" ]; then
		rem=$((DEADLINE_AT - $(date +%s)))
		if [ "$rem" -le 0 ]; then
			echo "*** PMHASH_TEST_DEADLINE (${DEADLINE}s) reached: not running $*" | tee "$log"
			return 124
		fi
		[ "$rem" -lt "$tmo" ] && tmo=$rem
	fi
	# --foreground: stay in our process group so that Ctrl-C / a group
	# SIGTERM reaches the tests (postmasters left behind by a timeout are
	# stopped by pmh_stop_stale_postmasters)
	timeout --foreground --kill-after=30 "$tmo" "$@" 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "*** TIMEOUT: killed after ${tmo}s: $*" | tee -a "$log"
	fi
	return "$rc"
}

cleanup() {
	pmh_stop_stale_postmasters "$PMH_CHECK"
}
on_signal() {
	trap '' INT TERM # runuser forwards the signal once more: finish cleaning
	echo "interrupted"
	exit 130 # runs cleanup via the EXIT trap
}
trap cleanup EXIT
trap on_signal INT TERM

mkdir -p "$PMH_CHECK"
START_ALL=$(pmh_now)

pmh_head "pmhash tests: $(date -u '+%Y-%m-%d %H:%M:%S UTC') in $PMH_ROOT as $(id -un)"
pmh_say "PostgreSQL: $("$PG_CONFIG" --version) ($PG_CONFIG)"
pmh_say "suites: ${ONLY:-all}"

# --------------------------------------------------------------- unit ---

if want unit; then
	pmh_head "unit: make unit"
	t0=$(pmh_now)
	run_logged "$PMH_CHECK/unit.log" make -C "$PMH_ROOT" --no-print-directory PG_CONFIG="$PG_CONFIG" unit
	rc=$?
	# one summary line per unit test program: add them all up
	read -r nlines p f < <(sed -n -E 's/^[[:space:]]*([0-9]+) passed, ([0-9]+) failed[[:space:]]*$/\1 \2/p' \
		"$PMH_CHECK/unit.log" | awk '{ n++; p += $1; f += $2 } END { printf "%d %d %d\n", n, p, f }')
	if [ "$nlines" -gt 0 ]; then
		note="$nlines program(s), make unit exit $rc"
		if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
			f=1
			note="$nlines program(s) reported no failures but make unit exited $rc"
		fi
	elif [ "$rc" -eq 0 ]; then
		p=1 f=0 note="no 'N passed, N failed' line; counted as 1 test"
	else
		p=0 f=1 note="make unit failed (exit $rc) before reporting results"
	fi
	[ "$f" -gt 0 ] && pmh_err "unit: $note (log: tmp_check/unit.log)"
	record unit "$p" "$f" "$note" "$(pmh_elapsed "$t0")"
fi

# ------------------------------------------------ build + tmp_install ---

need_server=0
for s in regress isolation tap extra; do want "$s" && need_server=1; done

BUILD_OK=0
if [ "$need_server" = 1 ]; then
	pmh_head "build: make -j$PMH_JOBS PG_CONFIG=$PG_CONFIG"
	t0=$(pmh_now)
	if pmh_build "$PMH_CHECK/build.log"; then
		pmh_say "build ok ($(pmh_elapsed "$t0")s, log: tmp_check/build.log)"
		t1=$(pmh_now)
		pmh_head "tmp_install: private installation in tmp_install/"
		if pmh_make_tmp_install "$PMH_CHECK/install.log"; then
			BUILD_OK=1
			grep -E '^tmp_install pg_config' "$PMH_CHECK/install.log"
			pmh_say "tmp_install ok ($(pmh_elapsed "$t1")s, log: tmp_check/install.log)"
		else
			pmh_err "creating tmp_install failed"
			pmh_build_errors "$PMH_CHECK/install.log" 60
			record install 0 1 "tmp_install / make install failed (tmp_check/install.log)" "$(pmh_elapsed "$t1")"
		fi
	else
		pmh_err "build failed"
		pmh_build_errors "$PMH_CHECK/build.log" 80
		record build 0 1 "make failed (tmp_check/build.log)" "$(pmh_elapsed "$t0")"
	fi
	if [ "$BUILD_OK" = 1 ]; then
		export PATH="$PMH_TI_BINDIR:$PATH"
	fi
fi

# list_schedule_tests SCHEDULE: names from "test: a b c" lines
list_schedule_tests() {
	sed -n -E 's/^[[:space:]]*test:[[:space:]]*//p' "$1" | tr -s '[:blank:]' '\n' | sed '/^$/d'
}

# count_pgregress_results LOG: prints "PASSED FAILED" parsed from pg_regress
# output (PG15 "test x ... ok" / "... FAILED" / "failed (ignored)", and the
# TAP-style "ok N - x" / "not ok N - x" of PG16+).
count_pgregress_results() {
	awk '
		/^(test[ \t]+)?[ \t]*[^ \t]+[ \t]+\.\.\.[ \t]+ok([ \t]|$)/ { p++; next }
		/^(test[ \t]+)?[ \t]*[^ \t]+[ \t]+\.\.\.[ \t]+failed \(ignored\)/ { p++; next }
		/^(test[ \t]+)?[ \t]*[^ \t]+[ \t]+\.\.\.[ \t]+FAILED/ { f++; next }
		/^ok[ \t]+[0-9]+[ \t]+[+ ]*-[ \t]/ { p++; next }
		/^not ok[ \t]+[0-9]+[ \t]+[+ ]*-[ \t]/ { f++; next }
		END { printf "%d %d\n", p, f }
	' "$1"
}

# stage_inputdir NAME SRCDIR SCHEDULE: pg_regress (PG15) aborts the whole run
# at the first test whose expected/NAME.out is missing.  So run it on a
# staging copy of SRCDIR (tmp_check/NAME_in: symlinks to everything, and an
# expected/ dir of symlinks) where a missing expected file is replaced by an
# empty placeholder: that test fails with its whole output as the diff and
# the others still run.  Prints the staging dir; lists the missing files in
# tmp_check/NAME_in.missing.
stage_inputdir() {
	local name=$1 src=$2 schedule=$3 stage=$PMH_CHECK/${1}_in e t
	rm -rf "$stage" "$stage.missing"
	mkdir -p "$stage/expected"
	for e in "$src"/*; do
		[ -e "$e" ] || continue
		[ "$(basename "$e")" = expected ] && continue
		ln -s "$e" "$stage/$(basename "$e")"
	done
	for e in "$src"/expected/*; do
		[ -e "$e" ] && ln -s "$e" "$stage/expected/$(basename "$e")"
	done
	: >"$stage.missing"
	while IFS= read -r t; do
		if [ ! -e "$stage/expected/$t.out" ] && [ ! -e "$src/output/$t.source" ]; then
			: >"$stage/expected/$t.out"
			echo "$t" >>"$stage.missing"
		fi
	done < <(list_schedule_tests "$schedule")
	echo "$stage"
}

# suite_schedule NAME FIXED DIR EXT: the schedule file FIXED if it exists,
# else one generated into tmp_check/NAME_schedule from DIR/*.EXT, sorted
suite_schedule() {
	local out=$PMH_CHECK/${1}_schedule f
	if [ -f "$2" ]; then
		echo "$2"
		return
	fi
	: >"$out"
	for f in "$3"/*."$4"; do
		[ -e "$f" ] || continue
		echo "test: $(basename "$f" ."$4")" >>"$out"
	done
	echo "$out"
}

# run_schedule_suite NAME DRIVER INPUTDIR SCHEDULE DBNAME WHAT: skip a suite
# without tests, count it as failed when the build failed, else run it
run_schedule_suite() {
	local name=$1 driver=$2 inputdir=$3 schedule=$4 dbname=$5 what=$6 ntests
	ntests=$(list_schedule_tests "$schedule" | wc -l)
	if [ "$ntests" -eq 0 ]; then
		pmh_head "$name: no $what, skipped"
	elif [ "$BUILD_OK" != 1 ]; then
		pmh_head "$name: NOT RUN (build/install failed): $ntests $what counted as failed"
		record "$name" 0 "$ntests" "not run: build/install failed" 0
	else
		pmh_head "$name: $(basename "$driver"), $ntests $what, schedule ${schedule#"$PMH_ROOT"/}"
		run_pg_regress_suite "$name" "$driver" "$inputdir" "$schedule" "$ntests" "$dbname"
	fi
}

# run_pg_regress_suite NAME DRIVER INPUTDIR SCHEDULE NTESTS DBNAME
run_pg_regress_suite() {
	local name=$1 driver=$2 inputdir=$3 schedule=$4 ntests=$5 dbname=$6
	local inst=$PMH_CHECK/$name outdir=$PMH_CHECK/${name}_out log=$PMH_CHECK/$name.log
	local t0 rc p f note stage missing='' extra_conf=() leaks
	t0=$(pmh_now)
	# a suite's own settings (e.g. test/isolation/temp.conf), after ours
	[ -f "$inputdir/temp.conf" ] && extra_conf=(--temp-config="$inputdir/temp.conf")
	rm -rf "$inst" "$outdir"
	mkdir -p "$outdir"
	stage=$(stage_inputdir "$name" "$inputdir" "$schedule")
	if [ -s "$stage.missing" ]; then
		missing=$(paste -s -d ' ' "$stage.missing")
		pmh_warn "$name: no expected output for: $missing (empty placeholders used, so these fail)"
	fi
	run_logged "$log" "$driver" \
		--temp-instance="$inst" \
		--temp-config="$PMH_ROOT/test/pmhash.conf" "${extra_conf[@]}" \
		--bindir="$PMH_TI_BINDIR" \
		--inputdir="$stage" \
		--outputdir="$outdir" \
		--dbname="$dbname" \
		--no-locale --encoding=UTF8 \
		--schedule="$schedule"
	rc=$?
	pmh_stop_stale_postmasters "$inst"
	read -r p f < <(count_pgregress_results "$log")
	note="$driver exit $rc"
	if [ $((p + f)) -lt "$ntests" ]; then
		note="$((ntests - p - f)) test(s) did not run; $note"
		f=$((f + ntests - p - f))
	fi
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
		note="all tests ok but $driver exited $rc"
	fi
	leaks=$(shmem_leaks "$outdir/log/postmaster.log")
	if [ -n "$leaks" ]; then
		f=$((f + 1))
		note="pmhash shared memory unaccounted for (server log); $note"
		pmh_err "$name: the server log reports pmhash shared memory unaccounted for:"
		echo "$leaks"
	fi
	if [ "$f" -gt 0 ]; then
		pmh_err "$name: $f failure(s)"
		if [ -s "$outdir/regression.diffs" ]; then
			echo "----- $outdir/regression.diffs (first $DIFF_LINES lines) -----"
			head -n "$DIFF_LINES" "$outdir/regression.diffs"
			echo "----- end of regression.diffs -----"
		fi
		pmh_tail "$inst/log/initdb.log" 30
		pmh_tail "$inst/log/postmaster.log" 60
		if [ -n "$missing" ]; then
			echo "missing expected output for: $missing"
			echo "  review and copy ${outdir#"$PMH_ROOT"/}/results/<test>.out into the expected/ directory"
			note="no expected output: $missing; $note"
		fi
	fi
	record "$name" "$p" "$f" "$note" "$(pmh_elapsed "$t0")"
}

# ------------------------------------------------------------ regress ---

if want regress; then
	run_schedule_suite regress "$PG_REGRESS" "$PMH_ROOT" \
		"$(suite_schedule regress test/regress_schedule sql sql)" \
		contrib_regression "test(s) (sql/*.sql)"
fi

# ---------------------------------------------------------- isolation ---

if want isolation; then
	idir=$PMH_ROOT/test/isolation
	run_schedule_suite isolation "$PG_ISOLATION_REGRESS" "$idir" \
		"$(suite_schedule isolation "$idir/isolation_schedule" "$idir/specs" spec)" \
		isolation_regression "spec(s) (test/isolation/specs/*.spec)"
fi

# ---------------------------------------------------------------- tap ---

if want tap; then
	tap_files=()
	for f in test/tap/${PMHASH_TAP_FILES:-*}.pl; do
		[ -e "$f" ] && tap_files+=("$f")
	done
	if [ ${#tap_files[@]} -eq 0 ]; then
		pmh_head "tap: no tests (test/tap/*.pl), skipped"
	elif [ "$BUILD_OK" != 1 ]; then
		pmh_head "tap: NOT RUN (build/install failed): ${#tap_files[@]} file(s) counted as failed"
		record tap 0 "${#tap_files[@]}" "not run: build/install failed" 0
	elif ! command -v prove >/dev/null; then
		pmh_head "tap: prove not found (install perl): ${#tap_files[@]} file(s) counted as failed"
		record tap 0 "${#tap_files[@]}" "prove not found" 0
	else
		pmh_head "tap: prove, ${#tap_files[@]} file(s)"
		t0=$(pmh_now)
		p=0 f=0 failed_names=()
		# PostgreSQL::Test::Utils writes to $TESTDIR/tmp_check/{log,t_*}
		rm -rf "$PMH_CHECK/log" "$PMH_CHECK"/t_* "$PMH_CHECK/portlock" "$PMH_CHECK"/tap_*.log
		prove_flags=(--timer)
		[ -n "${PMHASH_TEST_VERBOSE:-}" ] && prove_flags+=(-v)
		# shellcheck disable=SC2206
		[ -n "${PROVE_FLAGS:-}" ] && prove_flags+=($PROVE_FLAGS)
		# Unix socket directories (tempdir_short) go below $TMPDIR and are
		# kept when a test fails: keep them in tmp_check/ unless that path
		# would get too long for a socket path (107 bytes).
		tap_tmpdir=${TMPDIR:-/tmp}
		if [ ${#PMH_CHECK} -le 60 ]; then
			tap_tmpdir=$PMH_CHECK/tmp
			rm -rf "$tap_tmpdir"
			mkdir -p "$tap_tmpdir"
		fi
		for tf in "${tap_files[@]}"; do
			tn=$(basename "$tf" .pl)
			run_logged "$PMH_CHECK/tap_$tn.log" env \
				TMPDIR="$tap_tmpdir" \
				TESTDIR="$PMH_ROOT" \
				PG_REGRESS="$PG_REGRESS" \
				PG_TEST_EXTRA="${PG_TEST_EXTRA:-}" \
				TEMP_CONFIG="${PMHASH_TAP_TEMP_CONFIG-$PMH_ROOT/test/pmhash.conf}" \
				PMHASH_ROOT="$PMH_ROOT" \
				prove -I "$PG_PERL_LIB" -I "$PMH_ROOT/test/tap" "${prove_flags[@]}" "$tf"
			rc=$?
			pmh_stop_stale_postmasters "$PMH_CHECK"
			leaks=$(shmem_leaks "$PMH_CHECK"/log/"${tn}"_*.log)
			if [ "$rc" -eq 0 ] && [ -n "$leaks" ]; then
				pmh_err "tap: a server log of $tf reports pmhash shared memory unaccounted for:"
				echo "$leaks"
				rc=1
			fi
			if [ "$rc" -eq 0 ]; then
				p=$((p + 1))
			else
				f=$((f + 1))
				failed_names+=("$tn")
				pmh_err "tap: $tf failed (exit $rc)"
				pmh_tail "$PMH_CHECK/log/regress_log_$tn" 80
				for nl in "$PMH_CHECK"/log/"${tn}"_*.log; do
					[ -e "$nl" ] && pmh_tail "$nl" 40
				done
			fi
		done
		note="logs: tmp_check/log/"
		[ "$f" -gt 0 ] && note="failed: ${failed_names[*]}; $note"
		record tap "$p" "$f" "$note" "$(pmh_elapsed "$t0")"
	fi
fi

# -------------------------------------------------------------- extra ---

if want extra; then
	extra_files=()
	for f in test/extra/*.sh; do
		[ -e "$f" ] || continue
		if [ -x "$f" ]; then
			extra_files+=("$f")
		else
			pmh_warn "$f is not executable; ignored"
		fi
	done
	if [ ${#extra_files[@]} -eq 0 ]; then
		pmh_head "extra: no executable test/extra/*.sh, skipped"
	elif [ "$BUILD_OK" != 1 ]; then
		pmh_head "extra: NOT RUN (build/install failed): ${#extra_files[@]} script(s) counted as failed"
		record extra 0 "${#extra_files[@]}" "not run: build/install failed" 0
	else
		pmh_head "extra: ${#extra_files[@]} script(s)"
		t0=$(pmh_now)
		p=0 f=0 failed_names=()
		for ef in "${extra_files[@]}"; do
			en=$(basename "$ef" .sh)
			scratch=$PMH_CHECK/extra/$en
			rm -rf "$scratch"
			mkdir -p "$scratch"
			pmh_say "--- $ef"
			et0=$(pmh_now)
			run_logged "$PMH_CHECK/extra/$en.log" env \
				PMHASH_ROOT="$PMH_ROOT" \
				PMHASH_BINDIR="$PMH_TI_BINDIR" \
				PMHASH_TMP_CHECK="$scratch" \
				PG_CONFIG="$PG_CONFIG" \
				PG_REGRESS="$PG_REGRESS" \
				"$PMH_ROOT/$ef"
			rc=$?
			pmh_stop_stale_postmasters "$scratch"
			if [ "$rc" -eq 0 ]; then
				p=$((p + 1))
				pmh_say "--- $ef: ok ($(pmh_elapsed "$et0")s)"
			else
				f=$((f + 1))
				failed_names+=("$en")
				pmh_err "extra: $ef failed (exit $rc, $(pmh_elapsed "$et0")s, log tmp_check/extra/$en.log)"
			fi
		done
		note="logs: tmp_check/extra/"
		[ "$f" -gt 0 ] && note="failed: ${failed_names[*]}; $note"
		record extra "$p" "$f" "$note" "$(pmh_elapsed "$t0")"
	fi
fi

# ------------------------------------------------------------ summary ---

pmh_head "summary ($(pmh_elapsed "$START_ALL")s total)"
if [ ${#SUMMARY[@]} -eq 0 ]; then
	pmh_warn "no tests were found/run"
else
	printf '%s\n' "${SUMMARY[@]}"
fi
if [ "$TOTAL_FAIL" -gt 0 ]; then
	printf '%sFAILED%s (logs in %s/tmp_check)\n' "$PMH_C_RED" "$PMH_C_OFF" "${PMHASH_TEST_ORIG_ROOT:-$PMH_ROOT}"
else
	printf '%sALL PASSED%s\n' "$PMH_C_GRN" "$PMH_C_OFF"
fi
printf '%d passed, %d failed\n' "$TOTAL_PASS" "$TOTAL_FAIL"
[ "$TOTAL_FAIL" -eq 0 ]
