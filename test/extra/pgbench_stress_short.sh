#!/usr/bin/env bash
# test/extra/pgbench_stress_short.sh -- the pgbench stress run of
# test/stress/pgbench_stress.sh, short enough for the default suite: 6
# clients (more than the cores of a small CI machine) for 15 s, then the
# full consistency check, a restart and the check again.  The knobs of that
# script (PMHASH_STRESS_*) still apply; a long run is
#     test/stress/pgbench_stress.sh
# (see "Stress" in doc/TESTING.md).
export PMHASH_STRESS_CLIENTS=${PMHASH_STRESS_CLIENTS:-6}
export PMHASH_STRESS_SECONDS=${PMHASH_STRESS_SECONDS:-15}
exec "$(dirname "${BASH_SOURCE[0]}")/../stress/pgbench_stress.sh" "$@"
