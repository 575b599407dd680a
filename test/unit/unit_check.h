/*-------------------------------------------------------------------------
 *
 * unit_check.h
 *	  The checks shared by the unit-test programs in test/unit: CHECK and
 *	  CHECKF record a failed condition of the running test and print its
 *	  message (at most UNIT_MAX_DIAGS of them per test); TestDef and the
 *	  pass/fail counters (defined in unit_check.c, linked into every
 *	  program).  Each program resets unit_test_failures before every test
 *	  and counts its results.
 *
 *-------------------------------------------------------------------------
 */
#ifndef UNIT_CHECK_H
#define UNIT_CHECK_H

#include <stdarg.h>
#include <stdio.h>

/* at most this many failure messages are printed per test */
#define UNIT_MAX_DIAGS			12

/* one test of a program's table */
typedef struct TestDef
{
	const char *name;
	void		(*fn) (void);
} TestDef;

extern int	unit_test_failures;	/* failed checks in the running test */
extern int	ntests;				/* tests run, passed and failed */
extern int	npassed;
extern int	nfailed;

extern bool check_at(bool ok, const char *file, int line, const char *fmt,...)
			pg_attribute_printf(4, 5);

#define CHECK(cond) check_at((cond), __FILE__, __LINE__, "%s", #cond)
#define CHECKF(cond, ...) check_at((cond), __FILE__, __LINE__, __VA_ARGS__)

#endif							/* UNIT_CHECK_H */
