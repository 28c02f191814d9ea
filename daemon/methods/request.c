#include "methods/request.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rpc.h"
#include "status.h"

int request_fail(struct request *req, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	td_vfail(&req->call.err, code, fmt, ap);
	va_end(ap);
	return -1;
}

int request_pack_error(const struct request *req, msgpack_packer *pk)
{
	char message[TDP_MAX_ERROR_MESSAGE];
	int code = td_failed(&req->call.err) ? req->call.err.code : TDP_INTERNAL;

	const char *why = td_failed(&req->call.err) ? req->call.err.message : "failed without a reason";
	int n = snprintf(message, sizeof(message), "%s: ", req->method ? req->method : "?");

	if (n < 0 || (size_t)n >= sizeof(message))
		n = 0;
	size_t len = strnlen(why, sizeof(message) - (size_t)n - 1);

	memcpy(message + n, why, len);
	message[(size_t)n + len] = '\0';
	return tdp_write_error(pk, req->msgid, code, message) < 0 ? -ENOMEM : 0;
}
