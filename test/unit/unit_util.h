/*-------------------------------------------------------------------------
 *
 * unit_util.h
 *	  Small helpers shared by the programs that drive the core (src/core) without
 *	  a server (test/unit/test_core.c, test/bench/pmh_bench.c): the
 *	  monotonic clock and the splitmix64 random generator.
 *
 *-------------------------------------------------------------------------
 */
#ifndef UNIT_UTIL_H
#define UNIT_UTIL_H

#include <time.h>

/* seconds on the monotonic clock */
static inline double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* splitmix64: the next value of the stream whose state is *state */
static inline uint64
rng_next(uint64 *state)
{
	uint64		z = (*state += UINT64CONST(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64CONST(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64CONST(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

#endif							/* UNIT_UTIL_H */
