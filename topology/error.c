#include "topology/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int topology_error_set(struct topology_error *err, int r, const char *fmt, ...)
{
	if (!err)
		return r;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->code = r;
	return r;
}

int topology_error_errno(struct topology_error *err, int r, const char *fmt, ...)
{
	if (!err)
		return r;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(err->msg))
		snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", strerror(r < 0 ? -r : r));
	err->code = r;
	return r;
}
