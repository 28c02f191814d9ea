#include "name.h"

#include "wire_limits.h"

bool tdp_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > TDP_MAX_NAME_LEN)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == ':' || c == '/' || c == '-'))
			return false;
	}
	return true;
}
