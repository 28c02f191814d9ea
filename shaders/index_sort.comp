#version 450
// The first half of index_add (index_add.c): the indices sorted by the row
// they add to, as keys (row, position) in ascending order, so that each
// row's additions form one segment in index order. A bitonic sort of npow2
// keys (a power of two, at least 512): the keys are unique (the position is
// part of them), so the order is total and the result the same every run.
// Rows are normalised here: an index in [-n, 0) counts from the end; any
// other index outside [0, n), and the padding past nidx, gets row
// 0xffffffff and sorts past every real row.
//
// MODE_INIT: each workgroup loads 512 keys and sorts them (every stage up to
// 512) in shared memory. MODE_GLOBAL: one compare-exchange step (stage k,
// distance j >= 512) over all keys, an invocation per pair. MODE_LOCAL: the
// steps j = 256 .. 1 of stage k in shared memory, 512 keys per workgroup.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { int idx[]; };
layout(std430, binding = 1) buffer K { uvec2 keys[]; };

// Mirrors struct is_push in daemon/ops/index_add.c.
layout(push_constant) uniform P {
	uint n;       // rows of the indexed axis
	uint nidx;
	uint npow2;   // keys, padding included
	uint k;       // bitonic stage (sequence length being merged)
	uint j;       // compare distance (MODE_GLOBAL)
	uint mode;
} pc;

#define MODE_INIT 0u
#define MODE_GLOBAL 1u
#define MODE_LOCAL 2u

shared uvec2 sk[512];

bool greater(uvec2 a, uvec2 b)
{
	return a.x > b.x || (a.x == b.x && a.y > b.y);
}

uvec2 load_key(uint i)
{
	if (i >= pc.nidx)
		return uvec2(0xffffffffu);
	int iv = idx[i];
	if (iv < 0)
		iv += int(pc.n);
	return uvec2(iv >= 0 && uint(iv) < pc.n ? uint(iv) : 0xffffffffu, i);
}

// One compare-exchange step in shared memory: pair t of distance j, stage k,
// the block starting at global key `base`.
void local_step(uint t, uint j, uint k, uint base)
{
	uint i = 2u * j * (t / j) + t % j, l = i + j;
	bool up = ((base + i) & k) == 0u;
	uvec2 a = sk[i], b = sk[l];
	if (greater(a, b) == up) {
		sk[i] = b;
		sk[l] = a;
	}
}

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint t = gl_LocalInvocationID.x;
	if (pc.mode == MODE_GLOBAL) {
		uint pair = wg * 256u + t;
		if (pair >= pc.npow2 / 2u)
			return;
		uint i = 2u * pc.j * (pair / pc.j) + pair % pc.j, l = i + pc.j;
		bool up = (i & pc.k) == 0u;
		uvec2 a = keys[i], b = keys[l];
		if (greater(a, b) == up) {
			keys[i] = b;
			keys[l] = a;
		}
		return;
	}
	uint base = wg * 512u;
	if (base >= pc.npow2)
		return; // a whole workgroup past the end of a spilled grid
	if (pc.mode == MODE_INIT) {
		sk[t] = load_key(base + t);
		sk[t + 256u] = load_key(base + t + 256u);
	} else {
		sk[t] = keys[base + t];
		sk[t + 256u] = keys[base + t + 256u];
	}
	barrier();
	if (pc.mode == MODE_INIT) {
		for (uint k = 2u; k <= 512u; k <<= 1u)
			for (uint j = k >> 1u; j > 0u; j >>= 1u) {
				local_step(t, j, k, base);
				barrier();
			}
	} else {
		for (uint j = 256u; j > 0u; j >>= 1u) {
			local_step(t, j, pc.k, base);
			barrier();
		}
	}
	keys[base + t] = sk[t];
	keys[base + t + 256u] = sk[t + 256u];
}
