/*-------------------------------------------------------------------------
 *
 * unit_check.c
 *	  The state and the recording function behind CHECK and CHECKF (see
 *	  unit_check.h), shared by every file of a unit-test program.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include "unit_check.h"

int			unit_test_failures;
int			ntests;
int			npassed;
int			nfailed;

/* record one check; print its message if it failed */
bool
check_at(bool ok, const char *file, int line, const char *fmt,...)
{
	va_list		ap;

	if (ok)
		return true;
	if (unit_test_failures++ < UNIT_MAX_DIAGS)
	{
		printf("#   %s:%d: ", file, line);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	else if (unit_test_failures == UNIT_MAX_DIAGS + 1)
		printf("#   (further failures not shown)\n");
	return false;
}
