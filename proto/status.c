#include "status.h"

#include <string.h>

static const struct {
	int code;
	const char *name;
} status_names[] = {
	{ TDP_OK, "OK" },
	{ TDP_CANCELLED, "CANCELLED" },
	{ TDP_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED" },
	{ TDP_INVALID_ARGUMENT, "INVALID_ARGUMENT" },
	{ TDP_NOT_FOUND, "NOT_FOUND" },
	{ TDP_ALREADY_EXISTS, "ALREADY_EXISTS" },
	{ TDP_PERMISSION_DENIED, "PERMISSION_DENIED" },
	{ TDP_RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED" },
	{ TDP_FAILED_PRECONDITION, "FAILED_PRECONDITION" },
	{ TDP_UNIMPLEMENTED, "UNIMPLEMENTED" },
	{ TDP_INTERNAL, "INTERNAL" },
	{ TDP_UNAVAILABLE, "UNAVAILABLE" },
	{ TDP_SHAPE_MISMATCH, "SHAPE_MISMATCH" },
	{ TDP_DTYPE_MISMATCH, "DTYPE_MISMATCH" },
	{ TDP_DEVICE_LOST, "DEVICE_LOST" },
	{ TDP_PROTOCOL, "PROTOCOL" },
};

const char *tdp_status_name(int code)
{
	for (unsigned i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++)
		if (status_names[i].code == code)
			return status_names[i].name;
	return NULL;
}

int tdp_status_from_name(const char *name, unsigned len)
{
	for (unsigned i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++)
		if (strlen(status_names[i].name) == len && memcmp(status_names[i].name, name, len) == 0)
			return status_names[i].code;
	return -1;
}
