# shellcheck shell=bash disable=SC2034
# test/lib.sh -- helpers shared by test/run_tests.sh and test/demo.sh (and
# .ci/run, for the Debian packages).
#
# This file is meant to be *sourced* (bash).  It defines:
#
#   PMH_ROOT             absolute, symlink-free path of the source tree
#   PG_CONFIG            pg_config of the PostgreSQL 15 we build against
#                        (default /usr/lib/postgresql/15/bin/pg_config; never
#                        /usr/bin/pg_config, which may select a newer major)
#   PG_BINDIR, PG_PKGLIBDIR, PG_SHAREDIR
#                        the real installation directories of that PostgreSQL
#   PG_REGRESS, PG_ISOLATION_REGRESS, PG_PERL_LIB
#                        pg_regress, pg_isolation_regress and the TAP perl
#                        modules shipped with the PGXS of that PostgreSQL
#   PMH_TI               $PMH_ROOT/tmp_install (private installation)
#   PMH_TI_BINDIR        bindir inside tmp_install (put it first in PATH)
#
# and the functions pmh_need_packages, pmh_drop_root, pmh_build,
# pmh_make_tmp_install, pmh_free_port, pmh_cluster_init, pmh_cluster_stop,
# pmh_trap_cleanup, pmh_stop_stale_postmasters, plus small logging helpers.
#
# Private temporary installation ("tmp_install")
# ----------------------------------------------
# PostgreSQL locates its share/ and lib/ directories relative to the *real*
# path of its own executable (find_my_exec() resolves symlinks, then
# make_relative_path() maps the configured bindir -> sharedir/pkglibdir onto
# that location).  With Debian's layout
#     bindir    /usr/lib/postgresql/15/bin
#     pkglibdir /usr/lib/postgresql/15/lib
#     sharedir  /usr/share/postgresql/15
# a *copy* of the bin directory placed at
#     tmp_install/usr/lib/postgresql/15/bin
# therefore uses tmp_install/usr/lib/postgresql/15/lib and
# tmp_install/usr/share/postgresql/15.  The lib directory is populated with
# symlinks to the individual system files (directories are recreated as real
# directories, so "make install DESTDIR=tmp_install" never writes through a
# symlink into /usr), share/ is copied, and pmhash is then installed with
# "make install DESTDIR=$PMH_TI".  This lets an unprivileged user run the
# whole test-suite without touching /usr.  (PG15 has no
# extension_control_path, so dynamic_library_path alone cannot work.)

# ---------------------------------------------------------------- basics ---

PMH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PMH_JOBS=${PMHASH_TEST_JOBS:-2}
PMH_TI=$PMH_ROOT/tmp_install
PMH_CHECK=$PMH_ROOT/tmp_check

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
	PMH_C_RED=$'\e[31m' PMH_C_GRN=$'\e[32m' PMH_C_YEL=$'\e[33m'
	PMH_C_BLD=$'\e[1m' PMH_C_OFF=$'\e[0m'
else
	PMH_C_RED='' PMH_C_GRN='' PMH_C_YEL='' PMH_C_BLD='' PMH_C_OFF=''
fi

pmh_say()  { printf '%s\n' "$*"; }
pmh_head() { printf '\n%s==== %s ====%s\n' "$PMH_C_BLD" "$*" "$PMH_C_OFF"; }
pmh_warn() { printf '%sWARNING: %s%s\n' "$PMH_C_YEL" "$*" "$PMH_C_OFF" >&2; }
pmh_err()  { printf '%sERROR: %s%s\n' "$PMH_C_RED" "$*" "$PMH_C_OFF" >&2; }
pmh_die()  { pmh_err "$*"; exit 2; }

# Monotonic-ish wall clock in seconds with millisecond resolution.
pmh_now() { date +%s.%N; }
pmh_elapsed() { awk -v a="$1" -v b="$(pmh_now)" 'BEGIN { printf "%.1f", b - a }'; }

# Print the last $2 (default 60) lines of file $1, framed, if it exists.
pmh_tail() {
	local f=$1 n=${2:-60}
	[ -s "$f" ] || return 0
	printf -- '----- last %s lines of %s -----\n' "$n" "$f"
	tail -n "$n" "$f"
	printf -- '----- end of %s -----\n' "$f"
}

# Show why a make failed: the compiler/make diagnostics of build log $1 (at
# most $2 lines, default 80) rather than the long compiler command lines.
pmh_build_errors() {
	local f=$1 n=${2:-80}
	[ -s "$f" ] || return 0
	if grep -q -E '(error|warning):|\*\*\*' "$f"; then
		printf -- '----- diagnostics from %s (full log there) -----\n' "$f"
		grep -v -E '^(gcc|cc|clang|/usr/bin/clang|/usr/bin/install|make(\[[0-9]+\])?: (Entering|Leaving))' "$f" | head -n "$n"
		printf -- '----- end of diagnostics -----\n'
	else
		pmh_tail "$f" "$n"
	fi
}

# --------------------------------------------------- PostgreSQL locations ---

pmh_init_pg_paths() {
	[ -x "$PG_CONFIG" ] || pmh_die "pg_config not found/executable: $PG_CONFIG (install postgresql-server-dev-15)"
	local ver
	ver=$("$PG_CONFIG" --version) || pmh_die "$PG_CONFIG --version failed"
	case "$ver" in
	"PostgreSQL 15."*) ;;
	*) pmh_warn "$PG_CONFIG reports '$ver', expected PostgreSQL 15.x" ;;
	esac
	PG_BINDIR=$(realpath -e "$("$PG_CONFIG" --bindir)")
	PG_PKGLIBDIR=$(realpath -e "$("$PG_CONFIG" --pkglibdir)")
	PG_SHAREDIR=$(realpath -e "$("$PG_CONFIG" --sharedir)")
	# .../lib/pgxs/src/makefiles/pgxs.mk -> .../lib/pgxs
	local pgxs_top
	pgxs_top=$(dirname "$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")")
	PG_REGRESS=${PG_REGRESS:-$pgxs_top/src/test/regress/pg_regress}
	PG_ISOLATION_REGRESS=${PG_ISOLATION_REGRESS:-$pgxs_top/src/test/isolation/pg_isolation_regress}
	PG_PERL_LIB=${PG_PERL_LIB:-$pgxs_top/src/test/perl}
	PMH_TI_BINDIR=$PMH_TI$PG_BINDIR
	PMH_TI_PKGLIBDIR=$PMH_TI$PG_PKGLIBDIR
	PMH_TI_SHAREDIR=$PMH_TI$PG_SHAREDIR
	export PG_CONFIG
}

# ------------------------------------------------------ Debian packages ---

# The Debian packages that the build, the tests and the demo need are
# listed once, in test/packages.txt.
PMH_PACKAGES_FILE=$PMH_ROOT/test/packages.txt

# pmh_packages: the names in test/packages.txt, one a line
pmh_packages() {
	sed -e 's/#.*//' "$PMH_PACKAGES_FILE" | tr -s '[:space:]' '\n' | sed '/^$/d'
}

# pmh_missing_packages: the names of those that dpkg does not have
# installed, on one line (one dpkg-query call: no apt-get, no network)
pmh_missing_packages() {
	local -a pkgs
	local installed p missing=()
	mapfile -t pkgs < <(pmh_packages)
	# (a name dpkg has never heard of is an error on stderr, and missing)
	installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${pkgs[@]}" 2>/dev/null |
		awk '$NF == "installed" { print $1 }' || true)
	for p in "${pkgs[@]}"; do
		grep -q -x -F -e "$p" <<<"$installed" || missing+=("$p")
	done
	echo "${missing[*]}"
}

# pmh_need_packages WHO
#
# Make sure every package of test/packages.txt is installed.  When dpkg has
# them all, say so and return: apt-get is not run.  Otherwise root
# installs the missing ones (_pmh_install_packages: apt-get update first,
# non-interactive, no "main" cluster created, no daemon started); with WHO
# "sudo" (.ci/run) rather than "root", so does a user for whom "sudo -n"
# works without a password.  Anyone else is told which packages are
# missing and the command that installs them, and the script exits 2.
# Nothing is checked in the child that pmh_drop_root starts (its root
# parent has done it), with PMHASH_SKIP_PACKAGES=1, or where there is no
# dpkg-query (not Debian: PostgreSQL 15 and libpmem come from elsewhere).
pmh_need_packages() {
	local who=$1 missing t0
	local -a sudo=()
	[ -z "${PMHASH_TEST_ORIG_ROOT:-}" ] || return 0
	if [ -n "${PMHASH_SKIP_PACKAGES:-}" ]; then
		pmh_say "packages: not checked (PMHASH_SKIP_PACKAGES is set)"
		return 0
	fi
	if ! command -v dpkg-query >/dev/null 2>&1; then
		pmh_warn "no dpkg-query (not Debian?): the packages of test/packages.txt are not checked"
		return 0
	fi
	missing=$(pmh_missing_packages)
	if [ -z "$missing" ]; then
		pmh_say "packages: the $(pmh_packages | wc -l) of test/packages.txt are installed (apt-get not run)"
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		if [ "$who" = sudo ] && command -v sudo >/dev/null 2>&1 &&
			sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			pmh_err "missing Debian packages: $missing"
			{
				echo "Install them with:"
				echo "    sudo apt-get install -y --no-install-recommends $missing"
				echo "(after \"sudo apt-get update\" if apt has no package lists yet),"
				echo "or run $0 as root: it installs them itself."
			} >&2
			exit 2
		fi
	fi
	pmh_head "installing Debian packages: $missing"
	t0=$(pmh_now)
	# shellcheck disable=SC2086 # one word per package
	_pmh_install_packages "${sudo[@]}" -- $missing ||
		pmh_die "installing the packages failed (apt-get output above)"
	missing=$(pmh_missing_packages)
	[ -z "$missing" ] || pmh_die "still not installed after apt-get: $missing"
	pmh_say "packages installed in $(pmh_elapsed "$t0")s"
}

# _pmh_install_packages [SUDO...] -- PACKAGE...: apt-get update, then
# apt-get install of PACKAGEs, non-interactively.  postgresql-common is
# told not to create (and start) a "main" cluster, and a policy-rc.d keeps
# every daemon from starting while installing: the tests use throwaway
# instances of their own.
_pmh_install_packages() {
	local -a sudo=() apt_opts
	local rc=0 policy_rc_d_created=0
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		sudo+=("$1")
		shift
	done
	shift
	apt_opts=(-o Acquire::Retries=3 -o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-confdef)

	"${sudo[@]}" mkdir -p /etc/postgresql-common || return 1
	if ! grep -q -E '^[[:space:]]*create_main_cluster' /etc/postgresql-common/createcluster.conf 2>/dev/null; then
		echo 'create_main_cluster = false' |
			"${sudo[@]}" tee -a /etc/postgresql-common/createcluster.conf >/dev/null || return 1
	fi
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null &&
			"${sudo[@]}" chmod 755 /usr/sbin/policy-rc.d || return 1
		policy_rc_d_created=1
	fi

	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update </dev/null &&
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" \
			install -y --no-install-recommends "$@" </dev/null || rc=$?

	if [ "$policy_rc_d_created" = 1 ]; then
		"${sudo[@]}" rm -f /usr/sbin/policy-rc.d
	fi
	return "$rc"
}

# ---------------------------------------------------------- root -> user ---

# pmh_drop_root SCRIPT_RELPATH [ARGS...]
#
# When running as root (initdb refuses to run as root), copy the source tree
# -- without .git, tmp_* and build products -- into a fresh directory owned
# by $PMHASH_TEST_USER (default "postgres", created if missing), re-run
# SCRIPT_RELPATH there as that user via runuser, copy its tmp_check/ logs
# back into the original tree (run_tests.sh only) and the directories named
# in PMH_COPY_BACK_PATHS (relative, space-separated; benchmark results),
# remove the copy and exit with the child's status.  Does nothing when not
# root.
pmh_drop_root() {
	local script=$1
	shift
	[ "$(id -u)" -eq 0 ] || return 0

	local user=${PMHASH_TEST_USER:-postgres}
	if ! id -u "$user" >/dev/null 2>&1; then
		pmh_say "creating system user '$user'"
		useradd --system --user-group --no-create-home \
			--home-dir /var/lib/postgresql --shell /bin/bash "$user" ||
			pmh_die "could not create user $user"
	fi
	command -v runuser >/dev/null || pmh_die "runuser not found (util-linux)"

	local work
	work=$(mktemp -d "${PMHASH_TEST_WORKDIR_BASE:-/tmp}/pmhash-test.XXXXXX") ||
		pmh_die "mktemp failed"
	chmod 755 "$work"
	mkdir "$work/src" "$work/tmp"
	(cd "$PMH_ROOT" && tar -cf - \
		--exclude=./.git --exclude='./tmp_*' --exclude=./results \
		--exclude=./regression.diffs --exclude=./regression.out \
		--exclude='*.o' --exclude='*.so' --exclude='*.bc' \
		--exclude=./test/unit/test_core --exclude=./test/bench/pmh_bench \
		.) | tar -xf - -C "$work/src" || pmh_die "copying the tree to $work failed"
	chown -R "$user:" "$work"

	# runuser without --login keeps the environment apart from HOME, SHELL,
	# USER and LOGNAME; pass the interesting variables explicitly anyway.
	local -a envs=(HOME="$work" TMPDIR="$work/tmp" PMHASH_TEST_ORIG_ROOT="$PMH_ROOT")
	local v
	while IFS= read -r v; do
		envs+=("$v=${!v}")
	done < <(compgen -e | grep -E '^(PMHASH_|PG_CONFIG$|PG_TEST_|PROVE_|CI$|NO_COLOR$|TERM$|LANG$|LC_)' |
		grep -v -E '^PMHASH_TEST_(ORIG_ROOT|USER)$')

	# a small file system for the out-of-disk test (test/tap/013_disk_full):
	# 8 MB of tmpfs owned by the test user, if root may mount one here
	local smallfs="$work/smallfs"
	if [ -z "${PMHASH_TEST_SMALL_FS:-}" ] && mkdir "$smallfs" &&
		mount -t tmpfs -o "size=8m,mode=0700,uid=$(id -u "$user"),gid=$(id -g "$user")" \
			pmhash-smallfs "$smallfs" 2>/dev/null; then
		envs+=(PMHASH_TEST_SMALL_FS="$smallfs")
	fi

	pmh_say "running as root: testing a copy of the tree in $work/src as user '$user'"
	local rc=0
	# shellcheck disable=SC2064
	trap "umount '$smallfs' 2>/dev/null; rm -rf '$work'" EXIT
	# a handler (not SIG_IGN, which runuser would inherit): on Ctrl-C or
	# SIGTERM wait for the child, then stop leftovers and clean up below
	trap ':' INT TERM
	runuser -u "$user" -- env "${envs[@]}" bash "$work/src/$script" "$@" || rc=$?
	# if the child was killed before it could clean up after itself
	pmh_stop_stale_postmasters "$work" >&2
	umount "$smallfs" 2>/dev/null

	if [ "${PMH_COPY_BACK_LOGS:-0}" = 1 ] && [ -d "$work/src/tmp_check" ]; then
		# silently: the child's last line ("N passed, N failed") must stay last
		rm -rf "$PMH_ROOT/tmp_check" 2>/dev/null &&
			cp -r --no-preserve=ownership "$work/src/tmp_check" "$PMH_ROOT/tmp_check" 2>/dev/null ||
			pmh_warn "could not copy logs back to $PMH_ROOT/tmp_check"
	fi
	# what the child wrote for the caller (benchmark results), merged in
	local rel
	for rel in ${PMH_COPY_BACK_PATHS:-}; do
		[ -d "$work/src/$rel" ] || continue
		mkdir -p "$PMH_ROOT/$rel" &&
			cp -r --no-preserve=ownership "$work/src/$rel/." "$PMH_ROOT/$rel/" ||
			pmh_warn "could not copy $rel back to $PMH_ROOT/$rel"
	done
	if [ -n "${PMHASH_TEST_KEEP_WORKDIR:-}" ]; then
		trap - EXIT
		pmh_say "(work directory kept: $work)" >&2
	fi
	exit "$rc"
}

# ----------------------------------------------------------------- build ---

# pmh_build LOGFILE: "make -jN" of the extension; output to LOGFILE.
pmh_build() {
	local log=$1
	mkdir -p "$(dirname "$log")"
	make -C "$PMH_ROOT" -j"$PMH_JOBS" PG_CONFIG="$PG_CONFIG" >"$log" 2>&1
}

_pmh_ti_populate() {
	rm -rf "$PMH_TI" || return 1
	mkdir -p "$(dirname "$PMH_TI_BINDIR")" "$PMH_TI_PKGLIBDIR" "$(dirname "$PMH_TI_SHAREDIR")" || return 1
	# bin: real copies (postgres resolves the symlinks of its own path)
	cp -a "$PG_BINDIR" "$PMH_TI_BINDIR" || return 1
	# lib: real directories, symlinks to the individual files
	cp -rs "$PG_PKGLIBDIR/." "$PMH_TI_PKGLIBDIR/" || return 1
	# share: copied (small); make install adds extension/pmhash*
	cp -a "$PG_SHAREDIR" "$PMH_TI_SHAREDIR" || return 1
	# never let a system-wide pmhash shadow (or be overwritten by) ours
	rm -rf "$PMH_TI_PKGLIBDIR"/pmhash.so "$PMH_TI_PKGLIBDIR"/bitcode/pmhash \
		"$PMH_TI_PKGLIBDIR"/bitcode/pmhash.index.bc "$PMH_TI_SHAREDIR"/extension/pmhash[.-]* || return 1
	echo "+ make install DESTDIR=$PMH_TI"
	make -C "$PMH_ROOT" install DESTDIR="$PMH_TI" PG_CONFIG="$PG_CONFIG"
}

# pmh_make_tmp_install LOGFILE: (re)create $PMH_TI as described at the top of
# this file and install pmhash into it.  Returns non-zero on any problem.
pmh_make_tmp_install() {
	local log=$1
	mkdir -p "$(dirname "$log")"
	_pmh_ti_populate >"$log" 2>&1 || return 1

	# verify that the copy really resolves its paths into tmp_install
	local got_share got_lib
	got_share=$("$PMH_TI_BINDIR/pg_config" --sharedir 2>>"$log")
	got_lib=$("$PMH_TI_BINDIR/pg_config" --pkglibdir 2>>"$log")
	{
		echo "tmp_install pg_config --sharedir:  $got_share"
		echo "tmp_install pg_config --pkglibdir: $got_lib"
		"$PMH_TI_BINDIR/postgres" --version
	} >>"$log" 2>&1
	if [ "$(realpath -m "$got_share")" != "$(realpath -m "$PMH_TI_SHAREDIR")" ] ||
		[ "$(realpath -m "$got_lib")" != "$(realpath -m "$PMH_TI_PKGLIBDIR")" ]; then
		echo "tmp_install relocation FAILED: expected $PMH_TI_SHAREDIR and $PMH_TI_PKGLIBDIR" >>"$log"
		return 1
	fi
	if [ ! -f "$PMH_TI_PKGLIBDIR/pmhash.so" ] || [ ! -f "$PMH_TI_SHAREDIR/extension/pmhash.control" ]; then
		echo "pmhash.so or pmhash.control missing from tmp_install" >>"$log"
		return 1
	fi
	return 0
}

# ----------------------------------------------------- throwaway cluster ---

# pmh_free_port: print a TCP port that nobody listens on and whose socket
# name in /tmp is free.  (Throwaway servers listen only on a Unix socket in
# their own directory, but the port number also names that socket and the
# shared memory keys.)
pmh_free_port() {
	local p
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && [ ! -e "/tmp/.s.PGSQL.$p" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# pmh_cluster_init BINDIR DATADIR SOCKDIR PORT LOG: initdb a throwaway
# cluster (superuser "postgres", trust, no locale, UTF8; initdb's output to
# LOG) that listens on PORT only through a Unix socket in SOCKDIR.  Append
# further settings to DATADIR/postgresql.conf before starting it.
pmh_cluster_init() {
	local bindir=$1 datadir=$2 sockdir=$3 port=$4 log=$5
	"$bindir/initdb" -D "$datadir" -A trust -U postgres --no-locale -E UTF8 >"$log" 2>&1 || return 1
	{
		echo "# added by $(basename "$0")"
		echo "port = $port"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$sockdir'"
	} >>"$datadir/postgresql.conf"
}

# pmh_server_stop BINDIR DATADIR: stop a server, fast, or immediately if
# that does not work
pmh_server_stop() {
	"$1/pg_ctl" -D "$2" -m fast -w -t 60 stop >/dev/null 2>&1 ||
		"$1/pg_ctl" -D "$2" -m immediate -w stop >/dev/null 2>&1
}

# pmh_trap_cleanup FUNC: run FUNC when the script exits, and exit (130) on
# SIGINT / SIGTERM, so that FUNC runs then too
pmh_trap_cleanup() {
	# shellcheck disable=SC2064
	trap "$1" EXIT
	trap _pmh_on_signal INT TERM
}
_pmh_on_signal() {
	trap '' INT TERM # runuser forwards the signal once more: finish cleaning
	echo "interrupted" >&2
	exit 130
}

# ------------------------------------------------------------- cleanup ---

# Immediately stop any postmaster still running from a data directory below
# the given directories (left behind by a timed-out or killed pg_regress /
# TAP test of *this* tree).  Only servers whose postmaster.pid lives in our
# own directories are touched.
pmh_stop_stale_postmasters() {
	local d pidfile datadir pid
	for d in "$@"; do
		[ -d "$d" ] || continue
		while IFS= read -r pidfile; do
			datadir=$(dirname "$pidfile")
			pid=$(head -n 1 "$pidfile" 2>/dev/null)
			[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || continue
			pmh_warn "stopping leftover postmaster (pid $pid) in $datadir"
			# (pg_ctl refuses to run as root: then signal "immediate shutdown")
			"${PMH_TI_BINDIR:-${PG_BINDIR:-/usr/lib/postgresql/15/bin}}/pg_ctl" -D "$datadir" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
				kill -QUIT "$pid" 2>/dev/null
			for _ in $(seq 1 100); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
		done < <(find "$d" -name postmaster.pid -type f 2>/dev/null)
	done
}

# ------------------------------------------------- throwaway cluster ---
#
# For test/demo.sh and the benchmarks in test/bench (the test suites use
# pg_regress and PostgreSQL::Test::Cluster instead).
#
# pmh_cluster_build LOGDIR SKIP
#   make + tmp_install (logs in LOGDIR), unless SKIP is non-empty and
#   tmp_install has pmhash already.  Sets PMH_CL_BINDIR (the binaries to
#   run) and PMH_CL_HAVE_PMHASH: 1, or 0 when the build failed (then the
#   system binaries are used, good for btree and hash).
#
# pmh_cluster_start NAME MODE LOGDIR CONF
#   initdb a cluster in a new directory $TMPDIR/NAME.XXXXXX and start it on
#   a free port, listening on a Unix socket in that directory only, with
#   shared_preload_libraries = 'pmhash' (if PMH_CL_HAVE_PMHASH), autovacuum
#   and parallelism off, jit off, and the extra postgresql.conf lines CONF.
#   MODE "file": pools in the data directory, persisted with msync;
#   "emulated": pools in a new directory on /dev/shm, with
#   PMEM_IS_PMEM_FORCE=1 exported (libpmem's CPU-flush path; not durable).
#   Sets PMH_CL_DIR, PMH_CL_DATA, PMH_CL_PORT, PMH_CL_LOG (server log),
#   PMH_CL_POOL_DIR (emulated), PMH_CL_MODE_TEXT, PMH_CL_PSQL (psql command
#   array without -d: -X -q -At, ON_ERROR_STOP).  Dies on failure.  The
#   caller traps EXIT to call pmh_cluster_stop.
#
# pmh_cluster_stop
#   stop the server, copy its log into LOGDIR, and remove the directories
#   unless PMH_CL_KEEP is non-empty.

PMH_CL_STARTED=0
PMH_CL_HAVE_PMHASH=1

pmh_cluster_build() {
	local logdir=$1 skip=$2 t0
	PMH_CL_HAVE_PMHASH=1
	PMH_CL_BINDIR=$PMH_TI_BINDIR
	if [ -n "$skip" ] && [ -f "$PMH_TI_PKGLIBDIR/pmhash.so" ]; then
		pmh_say "using existing tmp_install"
		return 0
	fi
	pmh_head "build + tmp_install"
	t0=$(pmh_now)
	if ! pmh_build "$logdir/build.log"; then
		pmh_err "build failed; continuing with btree/hash only"
		pmh_build_errors "$logdir/build.log" 40
		PMH_CL_HAVE_PMHASH=0
	elif ! pmh_make_tmp_install "$logdir/install.log"; then
		pmh_err "tmp_install failed; continuing with btree/hash only"
		pmh_build_errors "$logdir/install.log" 40
		PMH_CL_HAVE_PMHASH=0
	fi
	pmh_say "build + tmp_install: $(pmh_elapsed "$t0")s"
	if [ "$PMH_CL_HAVE_PMHASH" = 0 ]; then
		PMH_CL_BINDIR=$PG_BINDIR # the system binaries are usable for btree/hash
	fi
}

pmh_cluster_start() {
	local name=$1 mode=$2 logdir=$3 conf=$4 t0
	PMH_CL_LOGDIR=$logdir
	PMH_CL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX") || pmh_die "mktemp failed"
	PMH_CL_POOL_DIR=
	case "$mode" in
	file)
		PMH_CL_MODE_TEXT="ordinary file in the data directory (durable: written back lazily, or an msync per persist with pmhash.lazy_writeback = off)"
		;;
	emulated)
		PMH_CL_POOL_DIR=$(mktemp -d "/dev/shm/$name.XXXXXX") || pmh_die "no /dev/shm for emulated mode"
		export PMEM_IS_PMEM_FORCE=1
		PMH_CL_MODE_TEXT="emulated PMem: tmpfs $PMH_CL_POOL_DIR, PMEM_IS_PMEM_FORCE=1 (CPU flushes, not durable)"
		;;
	*) pmh_die "the pool mode must be file or emulated, not '$mode'" ;;
	esac
	PMH_CL_DATA=$PMH_CL_DIR/data
	PMH_CL_LOG=$PMH_CL_DIR/server.log

	PMH_CL_PORT=$(pmh_free_port)
	[ -n "$PMH_CL_PORT" ] || pmh_die "could not find a free port"

	pmh_head "cluster: initdb + start (port $PMH_CL_PORT, socket dir $PMH_CL_DIR)"
	t0=$(pmh_now)
	"$PMH_CL_BINDIR/initdb" -D "$PMH_CL_DATA" -A trust -U postgres --no-locale -E UTF8 \
		>"$logdir/initdb.log" 2>&1 || {
		pmh_tail "$logdir/initdb.log"
		pmh_die "initdb failed"
	}
	{
		echo "# added by ${0##*/}"
		echo "port = $PMH_CL_PORT"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$PMH_CL_DIR'"
		[ "$PMH_CL_HAVE_PMHASH" = 1 ] && echo "shared_preload_libraries = 'pmhash'"
		echo "jit = off"
		# measure the access methods, not parallelism
		echo "max_parallel_maintenance_workers = 0"
		echo "max_parallel_workers_per_gather = 0"
		echo "autovacuum = off"
		[ -n "$PMH_CL_POOL_DIR" ] && echo "pmhash.pool_dir = '$PMH_CL_POOL_DIR'"
		[ -n "$conf" ] && printf '%s\n' "$conf"
	} >>"$PMH_CL_DATA/postgresql.conf"

	if ! "$PMH_CL_BINDIR/pg_ctl" -D "$PMH_CL_DATA" -l "$PMH_CL_LOG" -w -t 120 start >"$logdir/pg_ctl.log" 2>&1; then
		pmh_tail "$PMH_CL_LOG" 40
		pmh_die "server did not start"
	fi
	PMH_CL_STARTED=1
	pmh_say "server up ($(pmh_elapsed "$t0")s)"
	PMH_CL_PSQL=("$PMH_CL_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PMH_CL_DIR" -p "$PMH_CL_PORT" -U postgres)
}

# pmh_agree REFVAR ANSWER WHAT: the first answer of a comparison becomes
# the reference (stored in the variable named REFVAR); a later ANSWER that
# differs is reported as WHAT's mismatch and returns 1
pmh_agree() {
	local -n _ref=$1
	if [ -z "$_ref" ]; then
		_ref=$2
	elif [ "$2" != "$_ref" ]; then
		pmh_err "answer mismatch: $3 found '$2', expected '$_ref'"
		return 1
	fi
}

pmh_cluster_stop() {
	if [ "$PMH_CL_STARTED" = 1 ]; then
		pmh_server_stop "$PMH_CL_BINDIR" "$PMH_CL_DATA"
		PMH_CL_STARTED=0
	fi
	if [ -n "${PMH_CL_LOG:-}" ] && [ -s "$PMH_CL_LOG" ]; then
		cp "$PMH_CL_LOG" "$PMH_CL_LOGDIR/server.log" 2>/dev/null
	fi
	if [ -n "${PMH_CL_KEEP:-}" ]; then
		[ -n "${PMH_CL_DIR:-}" ] && echo "(cluster directory kept: $PMH_CL_DIR)" >&2
		return 0
	fi
	[ -n "${PMH_CL_POOL_DIR:-}" ] && rm -rf "$PMH_CL_POOL_DIR"
	[ -n "${PMH_CL_DIR:-}" ] && rm -rf "$PMH_CL_DIR"
	PMH_CL_DIR=
	PMH_CL_POOL_DIR=
}
