#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

int td_vfail(struct td_error *err, int code, const char *fmt, va_list ap)
{
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	err->code = code;
	return -1;
}

int td_fail(struct td_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	td_vfail(err, code, fmt, ap);
	va_end(ap);
	return -1;
}

void td_error_clear(struct td_error *err)
{
	err->code = 0;
	err->message[0] = '\0';
}
