/* Error codes of the tensord protocol: the `code` and `name` of an error map.
 *
 * Codes below 100 are gRPC's status codes with the same meaning; codes from 100
 * are tensord's own. The numeric values are part of the wire contract. */
#pragma once

enum tdp_status {
	TDP_OK = 0,
	TDP_CANCELLED = 1,
	TDP_INVALID_ARGUMENT = 3,
	TDP_DEADLINE_EXCEEDED = 4,
	TDP_NOT_FOUND = 5,
	TDP_ALREADY_EXISTS = 6,
	TDP_PERMISSION_DENIED = 7,
	TDP_RESOURCE_EXHAUSTED = 8,
	TDP_FAILED_PRECONDITION = 9,
	TDP_UNIMPLEMENTED = 12,
	TDP_INTERNAL = 13,
	TDP_UNAVAILABLE = 14,
	TDP_SHAPE_MISMATCH = 100,
	TDP_DTYPE_MISMATCH = 101,
	TDP_DEVICE_LOST = 102,
	TDP_PROTOCOL = 103,
};

/* The wire name of `code` ("NOT_FOUND", ...), or NULL for a value that is no code. */
const char *tdp_status_name(int code);

/* The code whose wire name is `name` (length `len`), or -1 when none is. */
int tdp_status_from_name(const char *name, unsigned len);
