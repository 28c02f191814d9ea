// Implicit-GEMM conv2d (NCHW, stride, zero padding, dilation, groups) and its
// two gradients, with no column matrix in memory: matmul_v4.comp's 128x128
// tile, 8x8 per invocation and double-buffered shared memory (As[k][row/4],
// Bs[k][col/4], one barrier per 16-wide K-step), with the tile loaders doing
// the convolution's index arithmetic (each loader's four columns are fixed
// for the whole product, so their bases are worked out once, and its K
// positions step as mixed-radix counters, so no K-step divides; taps that
// fall in the padding read zero). One product per group, g = the workgroup's group:
//   FWD:   out[n][g*opg+m][p]  = sum_k W[g*opg+m][k] * x(k = (c, ky, kx); j = (n, p)),
//          M = opg, N = batch*oh*ow, K = cpg*kh*kw, plus the bias;
//   DGRAD: dX[n][g*cpg+m][q]   = sum_k W[g*opg+o][m][ky][kx] * dY(k = (o, ky, kx); j = (n, q)),
//          M = cpg, N = batch*h*w, K = opg*kh*kw (a tap reads dY where
//          q + pad - tap*dil is a whole multiple of the stride and in range);
//   WGRAD: dW[g*opg+m][j]      = sum_k dY[n][g*opg+m][p] * x(k = (n, p); j = (c, ky, kx)),
//          M = opg, N = cpg*kh*kw, K = batch*oh*ow, split in chunks of
//          kchunk: chunk s writes f32 partials part[s][weight] (or dW itself
//          when there is one chunk), summed in order by conv2d_grad.comp's
//          CONVG_WSUM.
// Every sum runs in k order in f32 (acc += a * b from 0), the order of the
// direct kernels (conv2d.comp, conv2d_grad.comp) and of im2col + matmul_nn*:
// results are deterministic. Loads are scalar (any size, any alignment).
#include "common.glsl"
#include "conv_codes.h"

#define TM 128
#define TN 128
#define TK 16

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };       // FWD, DGRAD: weight; WGRAD: grad_out
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };       // FWD, WGRAD: x; DGRAD: grad_out
layout(std430, binding = 2) readonly buffer Bias { ELEM bias[]; }; // FWD with CONV_HAS_BIAS
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 4) writeonly buffer P { float part[]; };  // WGRAD with splits > 1

// Mirrors struct convi_push in daemon/ops/conv_igemm.c.
layout(push_constant) uniform ConvIgemmPush {
	uint m, n, k;          // one group's product
	uint tiles_n, tiles_mn;
	uint groups, splits, kchunk;
	uint mode, flags;      // CONVI_*, CONV_HAS_BIAS
	uint c, h, w;          // input channels and size
	uint oc, oh, ow;       // output channels and size
	uint kh, kw;
	uint sh, sw;
	uint ph, pw;
	uint dh, dw;
	uint cpg, opg;
} pc;

// The mode: a compile-time constant in conv_igemm_fwd.comp, _dgrad, _wgrad
// (like matmul_tn_v4.comp's layout: the loaders' branches on it compile
// away), else the push constant.
#ifdef CONVI_MODE
#define CONV_MODE CONVI_MODE
#else
#define CONV_MODE pc.mode
#endif

shared vec4 As[2][TK][TM / 4];
shared vec4 Bs[2][TK][TN / 4];

// The loader's four B columns (32 apart, so that a warp's loads are
// consecutive columns): element base, and the signed row/column the
// k-dependent offset is added to (FWD, WGRAD) or subtracted from (DGRAD).
uint cbase[4];
int cy[4], cx[4];
bool cok[4];

void column_setup(uint g, uint j0)
{
	uint hw = pc.h * pc.w, ohw = pc.oh * pc.ow;
	[[unroll]] for (uint i = 0u; i < 4u; i++) {
		uint j = j0 + 32u * i;
		cok[i] = j < pc.n;
		if (CONV_MODE == CONVI_FWD) {
			uint img = j / ohw, p = j % ohw;
			cbase[i] = (img * pc.c + g * pc.cpg) * hw;
			cy[i] = int((p / pc.ow) * pc.sh) - int(pc.ph);
			cx[i] = int((p % pc.ow) * pc.sw) - int(pc.pw);
		} else if (CONV_MODE == CONVI_DGRAD) {
			uint img = j / hw, q = j % hw;
			cbase[i] = (img * pc.oc + g * pc.opg) * ohw;
			cy[i] = int(q / pc.w) + int(pc.ph);
			cx[i] = int(q % pc.w) + int(pc.pw);
		} else {
			uint tap = j % (pc.kh * pc.kw), ch = j / (pc.kh * pc.kw);
			cbase[i] = (g * pc.cpg + ch) * hw;
			cy[i] = int((tap / pc.kw) * pc.dh) - int(pc.ph);
			cx[i] = int((tap % pc.kw) * pc.dw) - int(pc.pw);
		}
	}
}

// A loader's position along K as a mixed-radix counter, advanced by TK per
// K-step without a division. B: k = (hi, mid, lo) with radices (rmid, rlo):
// FWD (c, ky, kx), DGRAD (o, ky, kx), WGRAD (n, oy, ox). A: k = (hi, lo)
// with radix ra: DGRAD (o, tap), WGRAD (n, p); FWD reads A's rows
// contiguously (ra is 2^32 - 1, so hi stays 0).
struct KPos {
	uint k, hi, mid, lo;
};

uint rmid, rlo, sq, sm, sl;    // B: radices; TK = (sq*rmid + sm)*rlo + sl
uint hstride, ymul, xmul;      // B: element offset of hi; window step of mid, lo
uint ra, aq, al;               // A: radix; TK = aq*ra + al
uint ahs, agoff, arstride;     // A: element offset of hi, of the group, of a row

KPos b_at(uint k)
{
	KPos p;
	p.k = k;
	p.lo = k % rlo;
	uint t = k / rlo;
	p.mid = t % rmid;
	p.hi = t / rmid;
	return p;
}

KPos b_step(KPos p)
{
	p.k += TK;
	p.lo += sl;
	uint c = p.lo >= rlo ? 1u : 0u;
	p.lo -= c * rlo;
	p.mid += sm + c;
	c = p.mid >= rmid ? 1u : 0u;
	p.mid -= c * rmid;
	p.hi += sq + c;
	return p;
}

KPos a_at(uint k)
{
	KPos p;
	p.k = k;
	p.mid = 0u;
	p.lo = k % ra;
	p.hi = k / ra;
	return p;
}

KPos a_step(KPos p)
{
	p.k += TK;
	p.lo += al;
	uint c = p.lo >= ra ? 1u : 0u;
	p.lo -= c * ra;
	p.hi += aq + c;
	return p;
}

// B[k][j0 + 32 i], i < 4 (zero past N or kend, and in the padding).
vec4 load_b(KPos p, uint kend)
{
	vec4 v = vec4(0.0);
	if (p.k >= kend)
		return v;
	uint koff = p.hi * hstride;
	int ry = int(p.mid * ymul), rx = int(p.lo * xmul);
	[[unroll]] for (uint i = 0u; i < 4u; i++) {
		if (!cok[i])
			continue;
		if (CONV_MODE != CONVI_DGRAD) {
			int iy = cy[i] + ry, ix = cx[i] + rx;
			if (iy >= 0 && iy < int(pc.h) && ix >= 0 && ix < int(pc.w))
				v[i] = float(LOAD(b[cbase[i] + koff + uint(iy) * pc.w + uint(ix)]));
			continue;
		}
		int ty = cy[i] - ry, tx = cx[i] - rx;
		if (ty < 0 || tx < 0)
			continue;
		uint qy = uint(ty), qx = uint(tx);
		if (pc.sh != 1u || pc.sw != 1u) {
			if (qy % pc.sh != 0u || qx % pc.sw != 0u)
				continue;
			qy /= pc.sh;
			qx /= pc.sw;
		}
		if (qy < pc.oh && qx < pc.ow)
			v[i] = float(LOAD(b[cbase[i] + koff + qy * pc.ow + qx]));
	}
	return v;
}

// A[row][k .. k+3] and A[row + 64][k .. k+3] (zero past M or kend).
void load_a(uint row, KPos p, uint kend, out vec4 va0, out vec4 va1)
{
	va0 = vec4(0.0);
	va1 = vec4(0.0);
	uint hi = p.hi, lo = p.lo;
	[[unroll]] for (uint i = 0u; i < 4u; i++) {
		if (i > 0u && ++lo == ra) {
			lo = 0u;
			hi++;
		}
		if (p.k + i >= kend)
			continue;
		uint base = agoff + hi * ahs + lo;
		if (row < pc.m)
			va0[i] = float(LOAD(a[base + row * arstride]));
		if (row + 64u < pc.m)
			va1[i] = float(LOAD(a[base + (row + 64u) * arstride]));
	}
}

// The counters' radices and strides for group g.
void counter_setup(uint g)
{
	uint taps = pc.kh * pc.kw, ohw = pc.oh * pc.ow;
	if (CONV_MODE == CONVI_WGRAD) {
		rmid = pc.oh;
		rlo = pc.ow;
		hstride = pc.c * pc.h * pc.w;
		ymul = pc.sh;
		xmul = pc.sw;
		ra = ohw;
		ahs = pc.oc * ohw;
		agoff = g * pc.opg * ohw;
		arstride = ohw;
	} else {
		rmid = pc.kh;
		rlo = pc.kw;
		hstride = CONV_MODE == CONVI_FWD ? pc.h * pc.w : ohw;
		ymul = pc.dh;
		xmul = pc.dw;
		if (CONV_MODE == CONVI_FWD) {
			ra = 0xffffffffu;
			ahs = 0u;
			agoff = g * pc.opg * pc.k;
			arstride = pc.k;
		} else {
			ra = taps;
			ahs = pc.cpg * taps;
			agoff = g * pc.opg * pc.cpg * taps;
			arstride = taps;
		}
	}
	uint span = rmid * rlo;
	sq = TK / span;
	sm = (TK % span) / rlo;
	sl = (TK % span) % rlo;
	aq = TK / ra;
	al = TK % ra;
}

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint per_split = pc.groups * pc.tiles_mn;
	if (wg >= pc.splits * per_split)
		return;
	uint split = wg / per_split;
	wg -= split * per_split;
	uint g = wg / pc.tiles_mn;
	uint tile = wg - g * pc.tiles_mn;
	uint row0 = (tile / pc.tiles_n) * TM;
	uint col0 = (tile % pc.tiles_n) * TN;

	uint tid = gl_LocalInvocationID.x;
	uint tx = tid % 16u, ty = tid / 16u;
	uint kbeg = split * pc.kchunk, kend = min(pc.k, kbeg + pc.kchunk);
	// A: rows ar and ar + 64, four k from ak (as matmul_v4.comp's
	// untransposed loader); B: k rows bk and bk + 8, columns bc + 32 i.
	uint ar = tid >> 2, ak = (tid & 3u) * 4u;
	uint bk = tid >> 5, bc = tid & 31u;
	column_setup(g, col0 + bc);
	counter_setup(g);
	KPos pa = a_at(kbeg + ak), pb0 = b_at(kbeg + bk), pb1 = b_at(kbeg + bk + 8u);

	float acc[8][8];
	[[unroll]] for (int i = 0; i < 8; i++)
		[[unroll]] for (int j = 0; j < 8; j++)
			acc[i][j] = 0.0;

	uint ntiles = (kend - kbeg + TK - 1u) / TK;
	vec4 va0, va1, vb0, vb1;
	load_a(row0 + ar, pa, kend, va0, va1);
	vb0 = load_b(pb0, kend);
	vb1 = load_b(pb1, kend);
	[[unroll]] for (uint c = 0u; c < 4u; c++) {
		As[0][ak + c][ar >> 2][ar & 3u] = va0[c];
		As[0][ak + c][(ar + 64u) >> 2][ar & 3u] = va1[c];
	}
	[[unroll]] for (uint i = 0u; i < 4u; i++) {
		Bs[0][bk][(bc >> 2) + 8u * i][bc & 3u] = vb0[i];
		Bs[0][bk + 8u][(bc >> 2) + 8u * i][bc & 3u] = vb1[i];
	}
	barrier();

	for (uint t = 0u; t < ntiles; t++) {
		uint cur = t & 1u;
		bool more = t + 1u < ntiles;
		if (more) {
			pa = a_step(pa);
			pb0 = b_step(pb0);
			pb1 = b_step(pb1);
			load_a(row0 + ar, pa, kend, va0, va1);
			vb0 = load_b(pb0, kend);
			vb1 = load_b(pb1, kend);
		}
		[[unroll]] for (uint kk = 0u; kk < TK; kk++) {
			vec4 a0 = As[cur][kk][ty], a1 = As[cur][kk][16u + ty];
			vec4 b0 = Bs[cur][kk][tx], b1 = Bs[cur][kk][16u + tx];
			float av[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
			float bv[8] = float[8](b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w);
			[[unroll]] for (int i = 0; i < 8; i++)
				[[unroll]] for (int j = 0; j < 8; j++)
					acc[i][j] += av[i] * bv[j];
		}
		if (more) {
			uint nb = cur ^ 1u;
			[[unroll]] for (uint c = 0u; c < 4u; c++) {
				As[nb][ak + c][ar >> 2][ar & 3u] = va0[c];
				As[nb][ak + c][(ar + 64u) >> 2][ar & 3u] = va1[c];
			}
			[[unroll]] for (uint i = 0u; i < 4u; i++) {
				Bs[nb][bk][(bc >> 2) + 8u * i][bc & 3u] = vb0[i];
				Bs[nb][bk + 8u][(bc >> 2) + 8u * i][bc & 3u] = vb1[i];
			}
		}
		barrier();
	}

	// Where column j and row m land: obase(j) + m * ostride.
	uint ohw = pc.oh * pc.ow, hw = pc.h * pc.w;
	uint ostride = CONV_MODE == CONVI_DGRAD ? hw : (CONV_MODE == CONVI_FWD ? ohw : pc.n);
	bool to_part = CONV_MODE == CONVI_WGRAD && pc.splits > 1u;
	uint pbase = split * pc.oc * pc.n;
	[[unroll]] for (int jj = 0; jj < 8; jj++) {
		uint j = col0 + (jj < 4 ? tx * 4u + uint(jj) : 64u + tx * 4u + uint(jj - 4));
		if (j >= pc.n)
			continue;
		uint obase;
		if (CONV_MODE == CONVI_FWD)
			obase = ((j / ohw) * pc.oc + g * pc.opg) * ohw + j % ohw;
		else if (CONV_MODE == CONVI_DGRAD)
			obase = ((j / hw) * pc.c + g * pc.cpg) * hw + j % hw;
		else
			obase = g * pc.opg * pc.n + j;
		[[unroll]] for (int i = 0; i < 8; i++) {
			uint r = row0 + (i < 4 ? ty * 4u + uint(i) : 64u + ty * 4u + uint(i - 4));
			if (r >= pc.m)
				continue;
			float v = acc[i][jj];
			if ((pc.flags & CONV_HAS_BIAS) != 0u)
				v += float(LOAD(bias[g * pc.opg + r]));
			if (to_part)
				part[pbase + obase + r * ostride] = v;
			else
				o[obase + r * ostride] = STORE(v);
		}
	}
}
