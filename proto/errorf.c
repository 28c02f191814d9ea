#include "errorf.h"

#include <stdarg.h>
#include <stdio.h>

int tdp_errorf(char *dst, size_t cap, int ret, const char *fmt, ...)
{
	va_list ap;

	if (cap == 0)
		return ret;
	va_start(ap, fmt);
	vsnprintf(dst, cap, fmt, ap);
	va_end(ap);
	return ret;
}
