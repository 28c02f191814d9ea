#include "ops/conv_shape.h"

#include <stdlib.h>
#include <string.h>

#include "base/env_once.h"
#include "conv_codes.h"
#include "status.h"

int conv_attr_pair(struct op_ctx *ctx, const char *name, int64_t def, int64_t lo, uint32_t ret[2])
{
	const struct op_attr_value *v = op_attr(ctx, name);
	int64_t p[2] = { def, def };

	if (v->set) {
		if (v->nints != 1 && v->nints != 2)
			return op_fail(ctx, TDP_INVALID_ARGUMENT,
				       "attr '%s' must be an integer or a pair [h, w], not %u integers", name,
				       v->nints);
		p[0] = v->ints[0];
		p[1] = v->ints[v->nints - 1];
	}
	for (int i = 0; i < 2; i++)
		if (p[i] < lo || p[i] >= (int64_t)CONV_MAX_DIM)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be from %lld to %u, not %lld",
				       name, (long long)lo, CONV_MAX_DIM - 1, (long long)p[i]);
	ret[0] = (uint32_t)p[0];
	ret[1] = (uint32_t)p[1];
	return 0;
}

int conv_out_dim(struct op_ctx *ctx, const char *axis, uint64_t in, uint64_t k, uint32_t s,
		 uint32_t p, uint32_t d, uint64_t *ret)
{
	uint64_t span = (uint64_t)d * (k ? k - 1 : 0) + 1;

	if (k == 0 || in + 2ull * p < span)
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "the %s window (%llu with dilation) does not fit the padded input (%llu)",
			       axis, (unsigned long long)span, (unsigned long long)(in + 2ull * p));
	*ret = (in + 2ull * p - span) / s + 1;
	return 0;
}

int conv_pool_window(struct op_ctx *ctx, uint32_t k[2], uint32_t s[2], uint32_t p[2])
{
	if (conv_attr_pair(ctx, "kernel_size", 1, 1, k) < 0 || conv_attr_pair(ctx, "padding", 0, 0, p) < 0)
		return -1;
	if (op_attr(ctx, "stride")->set) {
		if (conv_attr_pair(ctx, "stride", 1, 1, s) < 0)
			return -1;
	} else {
		s[0] = k[0];
		s[1] = k[1];
	}
	if (p[0] > k[0] / 2 || p[1] > k[1] / 2)
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "padding (%u, %u) must be at most half the kernel size (%u, %u)", p[0], p[1],
			       k[0], k[1]);
	return 0;
}

/* TENSORD_CONV_ALGO, the daemon-wide default algo (CONV_ALGO_AUTO unless
 * "direct", "implicit" or "old"). */
static int algo_from_env(void)
{
	const char *env = getenv("TENSORD_CONV_ALGO");

	if (env && !strcmp(env, "direct"))
		return CONV_ALGO_DIRECT;
	if (env && !strcmp(env, "implicit"))
		return CONV_ALGO_IMPLICIT;
	if (env && !strcmp(env, "old"))
		return CONV_ALGO_OLD;
	return CONV_ALGO_AUTO;
}

int conv_attr_algo(struct op_ctx *ctx, bool im2col_ok, enum conv_algo *ret)
{
	static const char *const names[] = { "auto", "direct", "im2col", "implicit" };
	static atomic_int from_env = -1;
	const struct op_attr_value *v = op_attr(ctx, "algo");

	if (!v->set) {
		/* The daemon-wide default, for timing one kernel against another. */
		switch ((enum conv_algo)ENV_ONCE(from_env, algo_from_env())) {
		case CONV_ALGO_DIRECT:
			*ret = CONV_ALGO_DIRECT;
			break;
		case CONV_ALGO_IMPLICIT:
			*ret = CONV_ALGO_IMPLICIT;
			break;
		case CONV_ALGO_OLD:
			*ret = im2col_ok ? CONV_ALGO_OLD : CONV_ALGO_DIRECT;
			break;
		default:
			*ret = CONV_ALGO_AUTO;
		}
		return 0;
	}
	for (int i = 0; i < 4; i++)
		if (!strcmp(v->s, names[i]) && (i != CONV_ALGO_IM2COL || im2col_ok)) {
			*ret = (enum conv_algo)i;
			return 0;
		}
	return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'algo' must be \"auto\", \"direct\"%s or \"implicit\", not \"%s\"",
		       im2col_ok ? ", \"im2col\"" : "", v->s);
}
