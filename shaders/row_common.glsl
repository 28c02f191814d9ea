// Helpers of the one-row-per-segment shaders (softmax.comp, norm.comp): a
// workgroup of 256 holds 256 >> seg_log2 rows, each reduced by a segment of
// 2^seg_log2 invocations that fold their elements serially (compensated),
// then combine them as a tree in shared memory. Every invocation reaches
// every barrier: rows past the end just do no work. Rows are at most 2^22
// elements (norm.c checks): Mesa 22.3's lavapipe ends a shader invocation's
// loops after 65535 iterations in all, and the three row loops then stay
// below 3 * 2^14.
shared float row_sh[256];

// A row of at most ROW_CACHE elements per invocation (every row up to 4096
// elements: see norm_seg_log2) is read from memory once into registers, all
// ROW_CACHE loads in flight; the passes over it then fold the same elements
// in the same order as the loops over memory (the same bits).
#define ROW_CACHE 16

// Sum of `v` over the segment of `lid` (2^lg invocations); all invocations of
// the workgroup must call it.
float row_sum(float v, uint lid, uint lg)
{
	uint S = 1u << lg;
	uint t = lid & (S - 1u);
	row_sh[lid] = v;
	barrier();
	for (uint s = S >> 1; s > 0u; s >>= 1) {
		if (t < s)
			row_sh[lid] += row_sh[lid + s];
		barrier();
	}
	float r = row_sh[lid - t];
	barrier();
	return r;
}

// Max of `v` over the segment; NaN wins.
float row_max(float v, uint lid, uint lg)
{
	uint S = 1u << lg;
	uint t = lid & (S - 1u);
	row_sh[lid] = v;
	barrier();
	for (uint s = S >> 1; s > 0u; s >>= 1) {
		if (t < s) {
			float a = row_sh[lid], b = row_sh[lid + s];
			row_sh[lid] = (isnan(a) || isnan(b)) ? a + b : max(a, b);
		}
		barrier();
	}
	float r = row_sh[lid - t];
	barrier();
	return r;
}

// Compensated (Kahan) accumulation: sum += v with the lost low bits in c.
void kahan_add(inout float sum, inout float c, float v)
{
	precise float y = v - c;
	precise float t = sum + y;
	precise float nc = (t - sum) - y;
	c = nc;
	sum = t;
}
