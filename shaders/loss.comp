#version 450
#extension GL_GOOGLE_include_directive : require
// Loss functions (mse, binary_cross_entropy_with_logits, cross_entropy, nll)
// and their deterministic reduction. Mirrors struct loss_push in
// daemon/ops/loss.c.
//
// An "item" is an element (mse, bce) or a sample, a row of x (cross_entropy,
// nll). Each item yields (loss, weight); weight is 0 for an ignored sample.
// With LOSS_F_NONE every invocation writes one item's loss. Otherwise each
// workgroup folds LOSS_CHUNK consecutive items into one (sum, weight)
// partial: every invocation adds up LOSS_PER_THREAD items in a fixed order,
// then a tree in shared memory adds the invocations' sums. Levels repeat
// over the partials until one workgroup remains, which writes the result.
// The order of every addition depends only on the item count: results are
// bit-for-bit reproducible.
//
// cross_entropy first runs a row pass (LOSS_F_ROWS): each row of logits is
// reduced by a segment of 2^seg_log2 invocations (row_common.glsl), which
// writes the row's (logsumexp, sum of logits) to the partials-out buffer;
// the loss pass reads them from the partials-in binding. No invocation loops
// over a whole row, so rows of up to LOSS_MAX_CLASSES stay inside lavapipe's
// per-invocation loop limit.
#include "common.glsl"
#include "loss_codes.h"
layout(local_size_x = LOSS_WG) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };      // pred, logits, log-probs
layout(std430, binding = 1) readonly buffer Y { ELEM y[]; };      // float targets
layout(std430, binding = 2) readonly buffer T { int cls[]; };     // class targets
layout(std430, binding = 3) readonly buffer PI { vec2 pin[]; };   // partials in; cross_entropy's row stats
layout(std430, binding = 4) writeonly buffer PO { vec2 pout[]; }; // partials out
layout(std430, binding = 5) writeonly buffer O { ELEM o[]; };     // result

layout(push_constant) uniform LossPush {
	uint op;
	uint flags;
	uint n;            // items at this level
	uint c;            // classes (cross_entropy, nll)
	int ignore_index;
	float smoothing;   // cross_entropy's label_smoothing
	float denom;       // the divisor of a mean without ignore_index
	uint groups;       // workgroups that hold items at this level
	uint seg_log2;     // row pass: log2 of the invocations per row
} pc;

#include "row_common.glsl"

shared vec2 red[LOSS_WG];

float nan_value()
{
	return uintBitsToFloat(0x7fc00000u);
}

// log(1 + u) for u in [0, 1], accurate for small u.
float log1p_small(float u)
{
	float w = 1.0 + u;
	if (w == 1.0)
		return u;
	return log(w) * (u / (w - 1.0));
}

vec2 class_loss(uint i)
{
	int t = cls[i];
	if ((pc.flags & LOSS_F_IGNORE) != 0u && t == pc.ignore_index)
		return vec2(0.0, 0.0);
	if (t < 0 || uint(t) >= pc.c)
		return vec2(nan_value(), 1.0); // out-of-range class: a NaN the caller can see
	uint row = i * pc.c;
	if (pc.op == LOSS_NLL)
		return vec2(-LOAD(x[row + uint(t)]), 1.0);
	vec2 st = pin[i]; // (logsumexp, sum) from the row pass
	float lse = st.x, sx = st.y;
	float xt = LOAD(x[row + uint(t)]);
	float loss = lse - xt;
	if (pc.smoothing != 0.0)
		loss = (1.0 - pc.smoothing) * loss + pc.smoothing * (lse - sx / float(pc.c));
	return vec2(loss, 1.0);
}

vec2 item(uint i)
{
	if ((pc.flags & LOSS_F_PARTIALS) != 0u)
		return pin[i];
	if (pc.op == LOSS_MSE) {
		float d = LOAD(x[i]) - LOAD(y[i]);
		return vec2(d * d, 1.0);
	}
	if (pc.op == LOSS_BCE_LOGITS) {
		// max(v, 0) - v*t + log(1 + exp(-|v|)): never overflows.
		float v = LOAD(x[i]), t = LOAD(y[i]);
		return vec2(max(v, 0.0) - v * t + log1p_small(exp(-abs(v))), 1.0);
	}
	return class_loss(i);
}

// The row pass: row `row` of x reduced by the 2^lg invocations of its
// segment; every invocation of the workgroup calls it (barriers).
void row_stats(uint lid)
{
	uint lg = pc.seg_log2;
	uint S = 1u << lg;
	uint t = lid & (S - 1u);
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint row = wg * (uint(LOSS_WG) >> lg) + (lid >> lg);
	bool live = row < pc.n;
	uint base = live ? row * pc.c : 0u;

	float m = uintBitsToFloat(0xff800000u); // -inf
	for (uint j = t; live && j < pc.c; j += S) {
		float v = LOAD(x[base + j]);
		m = (isnan(m) || isnan(v)) ? m + v : max(m, v);
	}
	m = row_max(m, lid, lg);
	float s = 0.0, cs = 0.0, sx = 0.0; // sx plainly: a -inf logit must give -inf, not NaN
	for (uint j = t; live && j < pc.c; j += S) {
		float v = LOAD(x[base + j]);
		kahan_add(s, cs, exp(v - m));
		sx += v;
	}
	s = row_sum(s, lid, lg);
	sx = row_sum(sx, lid, lg);
	if (live && t == 0u)
		pout[row] = vec2(m + log(s), sx);
}

void main()
{
	uint lid = gl_LocalInvocationID.x;
	if ((pc.flags & LOSS_F_ROWS) != 0u) {
		row_stats(lid);
		return;
	}
	if ((pc.flags & LOSS_F_NONE) != 0u) {
		uint i = linear_id(LOSS_WG);
		if (i < pc.n)
			o[i] = STORE(item(i).x);
		return;
	}
	uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	if (g >= pc.groups)
		return; // the whole workgroup: grids spill into y in whole rows
	uint base = g * uint(LOSS_CHUNK);
	vec2 acc = vec2(0.0);
	for (uint k = 0u; k < uint(LOSS_PER_THREAD); k++) {
		uint i = base + k * uint(LOSS_WG) + lid;
		if (i < pc.n)
			acc += item(i);
	}
	red[lid] = acc;
	barrier();
	for (uint s = uint(LOSS_WG) / 2u; s > 0u; s >>= 1u) {
		if (lid < s)
			red[lid] += red[lid + s];
		barrier();
	}
	if (lid != 0u)
		return;
	vec2 r = red[0];
	if ((pc.flags & LOSS_F_FINAL) == 0u) {
		pout[g] = r;
		return;
	}
	float v = r.x;
	if ((pc.flags & LOSS_F_MEAN) != 0u)
		v = v / ((pc.flags & LOSS_F_WEIGHTED) != 0u ? r.y : pc.denom);
	o[0] = STORE(v);
}
