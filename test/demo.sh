#!/usr/bin/env bash
# test/demo.sh -- build pmhash, start a throwaway server and compare pmhash
# with the built-in btree and hash index access methods.
#
#   0. the Debian packages of test/packages.txt: checked with dpkg-query
#      (apt-get is not run when they are all there); as root the missing
#      ones are installed (apt-get update + install, non-interactive, no
#      "main" cluster, no daemon started); as another user the demo names
#      them and the command that installs them, and exits 2
#   1. make + private installation tmp_install/ (shared with run_tests.sh,
#      see test/lib.sh); as root, a copy of the tree is used as "postgres"
#   2. initdb a throwaway cluster in a temporary directory, start it on a
#      free port (Unix socket in that directory only) with
#      shared_preload_libraries = 'pmhash'
#   3. CREATE EXTENSION pmhash; three identical tables of $ROWS rows
#      (int8 key, text payload, rows in random order); CREATE INDEX
#      ... USING pmhash / btree / hash (k), one per table
#   4. a nested-loop join of $PROBES random keys probing each index
#      (seqscan/hashjoin/mergejoin/bitmapscan/memoize off), warmed up once,
#      best of $REPEAT EXPLAIN (ANALYZE, TIMING OFF) runs
#   5. insert upkeep: INSERT ... SELECT of all rows into an empty table
#      with each index, minus the same into a table without an index
#   6. write amplification (pmhash): $PMHASH_DEMO_WA_ROWS rows inserted in
#      transactions of 1, 10 and 1000 rows; media bytes from the model of
#      the device's write-combining buffer / 16 B per entry
#   7. side-by-side table: CREATE INDEX time, index size (pmhash:
#      pmhash_stats().pool_bytes + shmem_bytes), probe time, insert
#      upkeep; ratios
#   The cluster is stopped and the directory removed on exit.
#
# If the extension does not build/install, or any pmhash step fails, the
# btree and hash columns are still produced (with the system PostgreSQL
# binaries if needed), pmhash is shown as n/a, and the exit status is 1.
#
# Knobs: PMHASH_DEMO_ROWS (1000000), PMHASH_DEMO_PROBES (200000),
#        PMHASH_DEMO_WA_ROWS (100000; 0 skips the write-amplification runs),
#        PMHASH_DEMO_REPEAT (3), PMHASH_DEMO_SHARED_BUFFERS (512MB),
#        PMHASH_DEMO_CONF (extra postgresql.conf lines, e.g.
#        "pmhash.pool_dir='/mnt/pmem/pmhash'"), PMHASH_DEMO_SKIP_BUILD=1
#        (reuse an existing tmp_install), PMHASH_DEMO_KEEP=1 (keep the
#        cluster directory), PMHASH_SKIP_PACKAGES=1 (do not check or
#        install the Debian packages), PG_CONFIG,
#        PMHASH_DEMO_MODE: "file" (default: pools on an ordinary file system
#        in the data directory, persisted with msync) or "emulated" (pools
#        on tmpfs /dev/shm with PMEM_IS_PMEM_FORCE=1: libpmem's CPU-flush
#        path, as PMem research emulates it; NOT durable).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/lib.sh
. "$HERE/lib.sh"

# before dropping root: root installs what is missing
pmh_need_packages root
pmh_drop_root test/demo.sh "$@" # exits if we are root

pmh_init_pg_paths
cd "$PMH_ROOT" || exit 2

ROWS=${PMHASH_DEMO_ROWS:-1000000}
PROBES=${PMHASH_DEMO_PROBES:-200000}
REPEAT=${PMHASH_DEMO_REPEAT:-3}
SHARED_BUFFERS=${PMHASH_DEMO_SHARED_BUFFERS:-512MB}
LOGDIR=$PMH_CHECK/demo
mkdir -p "$LOGDIR"
STATUS=0

T_START=$(pmh_now)

# ------------------------------------------------------ build + install ---

pmh_cluster_build "$LOGDIR" "${PMHASH_DEMO_SKIP_BUILD:-}"
HAVE_PMHASH=$PMH_CL_HAVE_PMHASH
[ "$HAVE_PMHASH" = 1 ] || STATUS=1

# ------------------------------------------------------- start cluster ---

MODE=${PMHASH_DEMO_MODE:-file}
PMH_CL_KEEP=${PMHASH_DEMO_KEEP:-}
on_signal() {
	trap '' INT TERM # runuser forwards the signal once more: finish cleaning
	echo "interrupted" >&2
	exit 130 # runs pmh_cluster_stop via the EXIT trap
}
trap pmh_cluster_stop EXIT
trap on_signal INT TERM
pmh_cluster_start pmhdemo "$MODE" "$LOGDIR" "shared_buffers = '$SHARED_BUFFERS'
maintenance_work_mem = '256MB'
max_wal_size = '4GB'
${PMHASH_DEMO_CONF:-}"
MODE_TEXT=$PMH_CL_MODE_TEXT

# psql against the demo database; ON_ERROR_STOP; output unaligned
PSQL=("${PMH_CL_PSQL[@]}")
sql() { "${PSQL[@]}" -d demo "$@"; }

"${PSQL[@]}" -d postgres -c 'CREATE DATABASE demo' || pmh_die "CREATE DATABASE failed"

AMS=(pmhash btree hash)
if [ "$HAVE_PMHASH" = 1 ]; then
	if ! sql -c 'CREATE EXTENSION pmhash' 2>"$LOGDIR/create_extension.err"; then
		pmh_err "CREATE EXTENSION pmhash failed: $(cat "$LOGDIR/create_extension.err")"
		HAVE_PMHASH=0
		STATUS=1
	fi
fi
[ "$HAVE_PMHASH" = 1 ] || AMS=(btree hash)

# ----------------------------------------------------------------- data ---

pmh_head "data: 3 x $ROWS rows, $PROBES probe keys"
t0=$(pmh_now)
sql <<EOF || pmh_die "loading data failed"
SELECT setseed(0.42) \gset
CREATE TABLE src AS
  SELECT g::int8 AS k, md5(g::text) AS payload
  FROM generate_series(1, $ROWS) g ORDER BY random();
CREATE TABLE t_pmhash AS TABLE src;
CREATE TABLE t_btree AS TABLE src;
CREATE TABLE t_hash AS TABLE src;
DROP TABLE src;
CREATE TABLE probes AS
  SELECT (1 + floor(random() * $ROWS))::int8 AS k FROM generate_series(1, $PROBES);
VACUUM (ANALYZE) t_pmhash, t_btree, t_hash, probes;
CHECKPOINT;
EOF
pmh_say "loaded in $(pmh_elapsed "$t0")s; table size $(sql -c "SELECT pg_size_pretty(pg_table_size('t_btree'))")"

# ------------------------------------------------------------ indexes ---

# (the arrays are read through the nameref in get())
declare -A BUILD_MS SIZE_B PROBE_MS ROWS_FOUND
for am in "${AMS[@]}"; do
	pmh_head "CREATE INDEX ... USING $am"
	if out=$(sql 2>&1 <<EOF
SELECT clock_timestamp() AS t0 \gset
CREATE INDEX idx_$am ON t_$am USING $am (k);
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1);
EOF
	); then
		BUILD_MS[$am]=$(tail -n 1 <<<"$out")
		if [ "$am" = pmhash ]; then
			SIZE_B[$am]=$(sql -c "SELECT pool_bytes + shmem_bytes FROM pmhash_stats('idx_pmhash')" 2>&1) ||
				{
					pmh_err "pmhash_stats failed: ${SIZE_B[$am]}"
					SIZE_B[$am]=''
					STATUS=1
				}
		else
			SIZE_B[$am]=$(sql -c "SELECT pg_relation_size('idx_$am')")
		fi
		pmh_say "built in ${BUILD_MS[$am]} ms, size ${SIZE_B[$am]:-?} bytes"
	else
		pmh_err "CREATE INDEX USING $am failed: $out"
		STATUS=1
		BUILD_MS[$am]=''
	fi
done
sql -c 'CHECKPOINT' >/dev/null 2>&1

# -------------------------------------------------------------- probes ---

SETTINGS="SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
SET enable_bitmapscan = off; SET enable_memoize = off; SET enable_material = off;
SET enable_indexonlyscan = off;"
join_query() { echo "SELECT count(*), sum(length(t.payload)) FROM probes p JOIN t_$1 t ON t.k = p.k"; }

for am in "${AMS[@]}"; do
	[ -n "${BUILD_MS[$am]}" ] || continue
	pmh_head "probe: nested loop, $PROBES lookups via $am"
	plan=$(sql -c "$SETTINGS" -c "EXPLAIN (COSTS OFF) $(join_query "$am")" 2>&1)
	echo "$plan" | sed 's/^/    /'
	if ! grep -q "Index Scan using idx_$am" <<<"$plan"; then
		pmh_err "the plan does not use idx_$am"
		STATUS=1
		continue
	fi
	# warm-up (also the correctness check)
	if ! ROWS_FOUND[$am]=$(sql -c "$SETTINGS" -c "$(join_query "$am")" 2>&1); then
		pmh_err "join via $am failed: ${ROWS_FOUND[$am]}"
		ROWS_FOUND[$am]=''
		STATUS=1
		continue
	fi
	best=''
	for _ in $(seq 1 "$REPEAT"); do
		ms=$(sql -c "$SETTINGS" -c "EXPLAIN (ANALYZE, TIMING OFF) $(join_query "$am")" |
			sed -n -E 's/^Execution Time: ([0-9.]+) ms$/\1/p')
		[ -n "$ms" ] || continue
		if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$ms; fi
		printf '    run: %s ms\n' "$ms"
	done
	# shellcheck disable=SC2034 # read via get()
	PROBE_MS[$am]=$best
	pmh_say "best of $REPEAT: ${best:-?} ms   (count, sum(length(payload)) = ${ROWS_FOUND[$am]})"
done

# all methods must find the same rows
ref=''
for am in "${AMS[@]}"; do
	r=${ROWS_FOUND[$am]:-}
	[ -n "$r" ] || continue
	pmh_agree ref "$r" "$am" || STATUS=1
done

# ------------------------------------------------------- insert upkeep ---

# INSERT ... SELECT of all rows into an empty table with the index, minus
# the same into a table without one
declare -A INSERT_MS UPKEEP_MS
for am in none "${AMS[@]}"; do
	idx=''
	[ "$am" = none ] || idx="CREATE INDEX ON ins_$am USING $am (k);"
	pmh_head "insert upkeep: INSERT ... SELECT $ROWS rows, index: $am"
	out=$(sql 2>&1 <<EOF
CREATE TABLE ins_$am (k int8, payload text);
$idx
CHECKPOINT;
SELECT clock_timestamp() AS t0 \gset
INSERT INTO ins_$am SELECT k, payload FROM t_btree;
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1);
EOF
	) || {
		pmh_err "insert into ins_$am failed: $out"
		STATUS=1
		continue
	}
	INSERT_MS[$am]=$(tail -n 1 <<<"$out")
	pmh_say "${INSERT_MS[$am]} ms"
	sql -c "DROP TABLE ins_$am" >/dev/null
done
for am in "${AMS[@]}"; do
	if [ -n "${INSERT_MS[$am]:-}" ] && [ -n "${INSERT_MS[none]:-}" ]; then
		# shellcheck disable=SC2034 # read via get()
		UPKEEP_MS[$am]=$(awk -v a="${INSERT_MS[$am]}" -v b="${INSERT_MS[none]}" 'BEGIN { printf "%.1f", a - b }')
	fi
done

# ------------------------------------------------- write amplification ---

# pmhash only: WA_ROWS rows inserted in transactions of 1, 10 and 1000
# rows (a DO block that commits), media traffic from the buffer model
WA_ROWS=${PMHASH_DEMO_WA_ROWS:-100000}
if [ "$HAVE_PMHASH" = 1 ] && [ "$WA_ROWS" -gt 0 ]; then
	pmh_head "write amplification: $WA_ROWS rows in transactions of 1, 10, 1000 rows"
	for batch in 1 10 1000; do
		out=$(sql 2>&1 <<EOF
SET synchronous_commit = off;
CREATE TABLE wa_$batch (k int8);
CREATE INDEX wa_${batch}_k ON wa_$batch USING pmhash (k);
SELECT pmhash_reset_stats();
SELECT clock_timestamp() AS t0 \gset
DO \$\$
DECLARE
	i int;
BEGIN
	FOR i IN 0 .. ($WA_ROWS / $batch) - 1 LOOP
		INSERT INTO wa_$batch SELECT hashint8(g)::int8 FROM generate_series(i * $batch + 1, (i + 1) * $batch) g;
		COMMIT;
	END LOOP;
END
\$\$;
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1) AS ms,
	user_bytes, media_bytes_written, round(write_amplification::numeric, 2) AS wa,
	round(media_bytes_written::numeric / nullif(flushes * 64, 0), 2) AS ha,
	fences, lines_whole, lines_partial,
	round(pool_bytes::numeric / nullif(entries, 0), 1) AS pool_per_entry,
	round(shmem_bytes::numeric / nullif(entries, 0), 2) AS shmem_per_entry,
	round(load_factor::numeric, 2) AS lf
FROM pmhash_stats('wa_${batch}_k');
EOF
		) || {
			pmh_err "write amplification run ($batch) failed: $out"
			STATUS=1
			continue
		}
		IFS='|' read -r ms ub mb wa ha fe lw lp ppe spe lf <<<"$(tail -n 1 <<<"$out")"
		printf '    %5s rows/txn: %9s ms  user %10s B  media %10s B  WA %6s  HA %5s  fences %7s  lines whole/partial %s/%s\n' \
			"$batch" "$ms" "$ub" "$mb" "$wa" "$ha" "$fe" "$lw" "$lp"
		printf '    %5s           then: pool %s B/entry, shared memory %s B/entry, load factor %s\n' \
			"" "$ppe" "$spe" "$lf"
		sql -c "DROP TABLE wa_$batch" >/dev/null
	done
	echo "    (WA = media bytes written / 16 B per entry; HA = media bytes written / bytes flushed;"
	echo "     model: $(sql -c 'SHOW pmhash.media_buffer_lines') lines of 256 B, LRU)"
fi

# -------------------------------------------------------------- report ---

fmt_ms() { [ -n "${1:-}" ] && printf '%.1f' "$1" || printf 'n/a'; }
fmt_mb() { [ -n "${1:-}" ] && awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }' || printf 'n/a'; }
fmt_us() { [ -n "${1:-}" ] && awk -v m="$1" -v n="$PROBES" 'BEGIN { printf "%.2f", m * 1000 / n }' || printf 'n/a'; }
ratio() { # ratio A B -> A/B
	if [ -n "${1:-}" ] && [ -n "${2:-}" ] && awk -v b="$2" 'BEGIN { exit !(b > 0) }'; then
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
	else
		printf 'n/a'
	fi
}
get() { local -n arr=$1; printf '%s' "${arr[$2]:-}"; }

pmh_head "pmhash vs btree vs hash: $ROWS rows, $PROBES probes"
printf '%-28s %12s %12s %12s\n' "" pmhash btree hash
printf '%-28s %12s %12s %12s\n' "CREATE INDEX (ms)" \
	"$(fmt_ms "$(get BUILD_MS pmhash)")" "$(fmt_ms "$(get BUILD_MS btree)")" "$(fmt_ms "$(get BUILD_MS hash)")"
printf '%-28s %12s %12s %12s\n' "index size (MB)" \
	"$(fmt_mb "$(get SIZE_B pmhash)")" "$(fmt_mb "$(get SIZE_B btree)")" "$(fmt_mb "$(get SIZE_B hash)")"
printf '%-28s %12s %12s %12s\n' "probe join, best (ms)" \
	"$(fmt_ms "$(get PROBE_MS pmhash)")" "$(fmt_ms "$(get PROBE_MS btree)")" "$(fmt_ms "$(get PROBE_MS hash)")"
printf '%-28s %12s %12s %12s\n' "per probe (us)" \
	"$(fmt_us "$(get PROBE_MS pmhash)")" "$(fmt_us "$(get PROBE_MS btree)")" "$(fmt_us "$(get PROBE_MS hash)")"
printf '%-28s %12s %12s %12s\n' "insert upkeep (ms)" \
	"$(fmt_ms "$(get UPKEEP_MS pmhash)")" "$(fmt_ms "$(get UPKEEP_MS btree)")" "$(fmt_ms "$(get UPKEEP_MS hash)")"
echo
printf '%-28s %12s %12s\n' "ratios (pmhash / other)" "vs btree" "vs hash"
for m in BUILD_MS:"CREATE INDEX time" SIZE_B:"index size" PROBE_MS:"probe time" UPKEEP_MS:"insert upkeep"; do
	an=${m%%:*} label=${m#*:}
	printf '%-28s %12s %12s\n' "$label" \
		"$(ratio "$(get "$an" pmhash)" "$(get "$an" btree)")" \
		"$(ratio "$(get "$an" pmhash)" "$(get "$an" hash)")"
done
echo "(size: pmhash = pmhash_stats().pool_bytes + shmem_bytes, others = pg_relation_size;"
echo " ratios < 1 mean pmhash is faster/smaller; total demo time $(pmh_elapsed "$T_START")s)"
echo "pool mode: $MODE_TEXT"
if [ "$STATUS" -ne 0 ]; then
	if [ -n "${PMHASH_TEST_ORIG_ROOT:-}" ]; then
		pmh_err "some steps failed (see above; logs in $LOGDIR, removed on exit unless PMHASH_TEST_KEEP_WORKDIR=1)"
	else
		pmh_err "some steps failed (see above; logs in $LOGDIR)"
	fi
fi
exit "$STATUS"
