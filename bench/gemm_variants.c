/* gemm_variants: times GEMM kernel variants (SPIR-V files built by
 * bench/gemm_variants.py) on one Vulkan device, without tensord:
 *
 *   gemm_variants [--device N] [--reps R] [--warmup W] [--samples S]
 *                 --size MxNxK:LAYOUT [--size ...] FILE.spv ...
 *
 * Each FILE.spv has a sidecar FILE.txt of "key value" lines: family (cm:
 * matmul_cm.glsl's push constants, bindings 0 A, 1 B, 2 out; v4:
 * matmul_v4.glsl's), operand (f16, bf16, f32), out (f32 or 16: the operand
 * type), layout (NN, NT: B stored [N, K], TN: A stored [K, M]), bm, bn, bk
 * (the tile), wg (invocations per workgroup) and shared (bytes of shared
 * memory). For each size (outer) and each file of that layout (inner) it
 * fills device-local operands with deterministic values n/256 (|n| < 256:
 * exact in f32, f16 and bf16), runs the variant once on an output of NaNs
 * and checks it against an f64 reference (every element up to 65536 of
 * them, else S random ones), then times W untimed and R timed dispatches
 * (timestamp queries) and prints one line:
 *
 *   name M N K layout median_us TFLOP/s max_rel_err OK|FAIL
 *
 * or "... SKIP (why)" when the device cannot run it (cm files need
 * VK_KHR_cooperative_matrix, bf16 ones VK_KHR_shader_bfloat16; the tile must
 * divide the size; the shared memory must fit). The error of an element is
 * |got - ref| / max(|ref|, l2), l2 the 2-norm of its K products: below 5e-4
 * (f32 result), 2e-3 (f16) or 1e-2 (bf16, one ulp) is OK. Before each
 * (variant, size) a line "# start name MxNxK:LAYOUT" is flushed, so a crash
 * inside the driver can be told apart (gemm_variants.py restarts without
 * the variant). Exit status 0, 1 when a line says FAIL, 2 on bad usage or
 * no device. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_variants_vk.h"

#define GV_MAX_SIZES 32
#define GV_FULL_CHECK 65536u

enum gv_type { GV_F32, GV_F16, GV_BF16 };

struct gv_size {
	uint32_t m, n, k;
	char layout[4];
};

struct gv_variant {
	const char *path;
	char name[128];
	char family[16], layout[4];
	enum gv_type operand, out;
	uint32_t bm, bn, bk, wg, shared;
	VkPipeline pipe;
	int pipe_err;   /* 0 not tried, 1 made, -errno failed */
};

/* The host operands of one size, and what the device holds of them. */
struct gv_operands {
	float *a, *b;            /* as stored: A [M, K] or [K, M], B [K, N] or [N, K] */
	struct gv_buf da, db, dout;
	int uploaded;            /* enum gv_type + 1 of da/db, 0 none */
};

struct gv_opts {
	int device;
	unsigned reps, warmup, samples;
	struct gv_size sizes[GV_MAX_SIZES];
	unsigned nsizes;
};

static uint64_t rng_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

static uint16_t f32_to_f16(float f)
{
	uint32_t x, sign, m, h, rem, half, shift;
	int32_t e;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	e = (int32_t)((x >> 23) & 0xffu) - 127 + 15;
	m = x & 0x7fffffu;
	if (((x >> 23) & 0xffu) == 0xffu)
		return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)sign;
		m |= 0x800000u;
		shift = (uint32_t)(14 - e);
		h = m >> shift;
		rem = m & ((1u << shift) - 1);
		half = 1u << (shift - 1);
	} else {
		h = ((uint32_t)e << 10) | (m >> 13);
		rem = m & 0x1fffu;
		half = 0x1000u;
	}
	if (rem > half || (rem == half && (h & 1)))
		h++;
	return (uint16_t)(sign | h);
}

static double f16_to_f64(uint16_t h)
{
	int e = (h >> 10) & 31, m = h & 1023;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);

	return (h & 0x8000u) ? -v : v;
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static double bf16_to_f64(uint16_t h)
{
	uint32_t x = (uint32_t)h << 16;
	float f;

	memcpy(&f, &x, 4);
	return f;
}

static int parse_type(const char *s, enum gv_type *ret)
{
	if (!strcmp(s, "f32"))
		*ret = GV_F32;
	else if (!strcmp(s, "f16"))
		*ret = GV_F16;
	else if (!strcmp(s, "bf16"))
		*ret = GV_BF16;
	else
		return -EINVAL;
	return 0;
}

static bool layout_ok(const char *s)
{
	return !strcmp(s, "NN") || !strcmp(s, "NT") || !strcmp(s, "TN");
}

/* The sidecar of v->path (FILE.spv -> FILE.txt) into v. */
static int read_sidecar(struct gv_variant *v)
{
	char path[4096], key[32], val[64], out[16] = "";
	const char *base = strrchr(v->path, '/');
	size_t len = strlen(v->path);
	FILE *f;
	int r = 0;

	if (len < 5 || strcmp(v->path + len - 4, ".spv") || len >= sizeof(path))
		return -EINVAL;
	base = base ? base + 1 : v->path;
	snprintf(v->name, sizeof(v->name), "%.*s", (int)(strlen(base) - 4), base);
	snprintf(path, sizeof(path), "%.*s.txt", (int)(len - 4), v->path);
	if (!(f = fopen(path, "r")))
		return -errno;
	while (r == 0 && fscanf(f, "%31s %63s", key, val) == 2) {
		if (!strcmp(key, "family"))
			snprintf(v->family, sizeof(v->family), "%.15s", val);
		else if (!strcmp(key, "operand"))
			r = parse_type(val, &v->operand);
		else if (!strcmp(key, "out"))
			snprintf(out, sizeof(out), "%.15s", val);
		else if (!strcmp(key, "layout"))
			snprintf(v->layout, sizeof(v->layout), "%.3s", val);
		else if (!strcmp(key, "bm"))
			v->bm = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(key, "bn"))
			v->bn = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(key, "bk"))
			v->bk = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(key, "wg"))
			v->wg = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(key, "shared"))
			v->shared = (uint32_t)strtoul(val, NULL, 10);
	}
	fclose(f);
	v->out = !strcmp(out, "f32") ? GV_F32 : v->operand;
	if (r == 0 && ((strcmp(v->family, "cm") && strcmp(v->family, "v4")) || !layout_ok(v->layout) ||
		       !v->bm || !v->bn || !v->bk || !v->wg ||
		       (!strcmp(v->family, "v4") && (v->operand != GV_F32 || v->out != GV_F32)) ||
		       (!strcmp(v->family, "cm") && v->operand == GV_F32)))
		r = -EINVAL;
	return r;
}

static int parse_size(const char *s, struct gv_size *ret)
{
	struct gv_size z = { 0 };
	char lay[4] = "";

	if (sscanf(s, "%ux%ux%u:%3s", &z.m, &z.n, &z.k, lay) != 4 || !z.m || !z.n || !z.k || !layout_ok(lay))
		return -EINVAL;
	memcpy(z.layout, lay, 4);
	*ret = z;
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: gemm_variants [--device N] [--reps R] [--warmup W] [--samples S]\n"
			"                     --size MxNxK:NN|NT|TN [--size ...] FILE.spv ...\n");
}

/* Options into o; returns the index of the first file, or -1. */
static int parse_args(int argc, char **argv, struct gv_opts *o)
{
	int i;

	*o = (struct gv_opts){ .device = -1, .reps = 20, .warmup = 5, .samples = 256 };
	for (i = 1; i < argc && !strncmp(argv[i], "--", 2); i++) {
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!val)
			return -1;
		if (!strcmp(argv[i], "--device"))
			o->device = atoi(val);
		else if (!strcmp(argv[i], "--reps"))
			o->reps = (unsigned)strtoul(val, NULL, 10);
		else if (!strcmp(argv[i], "--warmup"))
			o->warmup = (unsigned)strtoul(val, NULL, 10);
		else if (!strcmp(argv[i], "--samples"))
			o->samples = (unsigned)strtoul(val, NULL, 10);
		else if (!strcmp(argv[i], "--size") && o->nsizes < GV_MAX_SIZES &&
			 parse_size(val, &o->sizes[o->nsizes]) == 0)
			o->nsizes++;
		else
			return -1;
		i++;
	}
	return i < argc && o->nsizes && o->reps && o->samples ? i : -1;
}

static void operands_free(struct gv_dev *d, struct gv_operands *op)
{
	free(op->a);
	free(op->b);
	gv_buf_destroy(d, &op->da);
	gv_buf_destroy(d, &op->db);
	gv_buf_destroy(d, &op->dout);
	memset(op, 0, sizeof(*op));
}

/* Host values and device buffers (4 bytes an element) for size z. */
static int operands_make(struct gv_dev *d, const struct gv_size *z, struct gv_operands *op)
{
	uint64_t na = (uint64_t)z->m * z->k, nb = (uint64_t)z->k * z->n, seed = 0x5eed + z->m * 31u + z->k;
	int r;

	memset(op, 0, sizeof(*op));
	op->a = malloc(na * sizeof(float));
	op->b = malloc(nb * sizeof(float));
	if (!op->a || !op->b)
		return -ENOMEM;
	for (uint64_t i = 0; i < na; i++)
		op->a[i] = (float)((int)(rng_next(&seed) % 511u) - 255) / 256.0f;
	for (uint64_t i = 0; i < nb; i++)
		op->b[i] = (float)((int)(rng_next(&seed) % 511u) - 255) / 256.0f;
	if ((r = gv_buf_create(d, na * 4, &op->da)) < 0 || (r = gv_buf_create(d, nb * 4, &op->db)) < 0 ||
	    (r = gv_buf_create(d, (uint64_t)z->m * z->n * 4, &op->dout)) < 0)
		return r;
	gv_bind(d, &op->da, &op->db, &op->dout);
	return 0;
}

static int upload_one(struct gv_dev *d, struct gv_buf *dst, const float *src, uint64_t n, enum gv_type t)
{
	size_t esz = t == GV_F32 ? 4 : 2;
	uint16_t *h;
	int r;

	if (t == GV_F32)
		return gv_upload(d, dst, src, n * 4);
	if (!(h = malloc(n * esz)))
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++)
		h[i] = t == GV_F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
	r = gv_upload(d, dst, h, n * esz);
	free(h);
	return r;
}

static int operands_upload(struct gv_dev *d, const struct gv_size *z, struct gv_operands *op, enum gv_type t)
{
	int r;

	if (op->uploaded == (int)t + 1)
		return 0;
	if ((r = upload_one(d, &op->da, op->a, (uint64_t)z->m * z->k, t)) < 0 ||
	    (r = upload_one(d, &op->db, op->b, (uint64_t)z->k * z->n, t)) < 0)
		return r;
	op->uploaded = (int)t + 1;
	return 0;
}

/* The f64 product at (i, j) and the 2-norm of its terms. */
static double reference(const struct gv_size *z, const struct gv_operands *op, uint32_t i, uint32_t j,
			double *ret_l2)
{
	bool ta = z->layout[0] == 'T', tb = z->layout[1] == 'T';
	double s = 0, q = 0;

	for (uint32_t k = 0; k < z->k; k++) {
		double a = ta ? op->a[(uint64_t)k * z->m + i] : op->a[(uint64_t)i * z->k + k];
		double b = tb ? op->b[(uint64_t)j * z->k + k] : op->b[(uint64_t)k * z->n + j];

		s += a * b;
		q += a * b * a * b;
	}
	*ret_l2 = sqrt(q);
	return s;
}

/* Run v once on NaNs and return its largest error over the sample. */
static int check(struct gv_dev *d, const struct gv_opts *o, const struct gv_size *z, struct gv_operands *op,
		 const struct gv_variant *v, const void *push, uint32_t push_size, uint64_t groups,
		 double *ret_err)
{
	uint64_t total = (uint64_t)z->m * z->n, n = total <= GV_FULL_CHECK ? total : o->samples;
	uint64_t *off = calloc(n, sizeof(*off)), *idx = calloc(n, sizeof(*idx)), seed = 77;
	size_t esz = v->out == GV_F32 ? 4 : 2;
	unsigned char *got = calloc(n, esz);
	double worst = 0;
	int r = -ENOMEM;

	if (!off || !idx || !got)
		goto fail;
	for (uint64_t s = 0; s < n; s++) {
		idx[s] = n == total ? s : ((rng_next(&seed) << 31) ^ rng_next(&seed)) % total;
		off[s] = idx[s] * esz;
	}
	if ((r = gv_fill(d, &op->dout, 0xffffffffu)) < 0 ||
	    (r = gv_run(d, v->pipe, push, push_size, groups, 0, 0, NULL)) < 0 ||
	    (r = gv_download(d, &op->dout, off, n, esz, got)) < 0)
		goto fail;
	for (uint64_t s = 0; s < n; s++) {
		uint32_t i = (uint32_t)(idx[s] / z->n), j = (uint32_t)(idx[s] % z->n);
		double l2, ref = reference(z, op, i, j, &l2), g, e;
		uint16_t h;
		float f;

		if (v->out == GV_F32) {
			memcpy(&f, got + s * 4, 4);
			g = f;
		} else {
			memcpy(&h, got + s * 2, 2);
			g = v->out == GV_F16 ? f16_to_f64(h) : bf16_to_f64(h);
		}
		e = fabs(g - ref) / fmax(fmax(fabs(ref), l2), 1e-30);
		if (isnan(e))
			e = INFINITY;   /* never written, or NaN computed */
		if (e > worst)
			worst = e;
	}
	*ret_err = worst;
	r = 0;
fail:
	free(off);
	free(idx);
	free(got);
	return r;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* Whether v can run size z here; why not into *ret_why. */
static bool runnable(const struct gv_dev *d, const struct gv_variant *v, const struct gv_size *z,
		     const char **ret_why)
{
	bool cm = !strcmp(v->family, "cm");

	*ret_why = NULL;
	if (cm && !d->coopmat)
		*ret_why = "device has no VK_KHR_cooperative_matrix";
	else if (cm && v->operand == GV_BF16 && !d->bf16)
		*ret_why = "device has no VK_KHR_shader_bfloat16 matrices";
	else if (v->shared > d->max_shared)
		*ret_why = "shared memory over the device's limit";
	else if (cm && (z->m % v->bm || z->n % v->bn || z->k % v->bk))
		*ret_why = "tile does not divide the size";
	else if (!cm && (z->n % 4 || z->k % 4 || (z->layout[0] == 'T' && z->m % 4)))
		*ret_why = "v4 needs N, K (and M for TN) multiples of 4";
	return *ret_why == NULL;
}

/* Push constants and workgroups of v at size z. */
static uint32_t make_push(const struct gv_variant *v, const struct gv_size *z, uint32_t push[28],
			  uint64_t *ret_groups)
{
	uint32_t tn = (z->n + v->bn - 1) / v->bn, tm = (z->m + v->bm - 1) / v->bm;

	memset(push, 0, 28 * sizeof(uint32_t));
	push[0] = z->m;
	push[1] = z->n;
	push[2] = z->k;
	*ret_groups = (uint64_t)tm * tn;
	if (!strcmp(v->family, "cm")) {
		/* struct mm_cm_push: tiles_n, tiles_mn, batches, astride, bstride, mstore, flags */
		push[3] = tn;
		push[4] = tm * tn;
		push[5] = 1;
		push[8] = z->m;
		return 10 * sizeof(uint32_t);
	}
	/* struct mm_push: batches, tiles_n, tiles_mn, nbdims, bshape[6],
	 * astride[6], bstride[6], flags (MM_TA 1, MM_TB 2), splits, kchunk */
	push[3] = 1;
	push[4] = tn;
	push[5] = tm * tn;
	push[25] = (z->layout[0] == 'T' ? 1u : 0) | (z->layout[1] == 'T' ? 2u : 0);
	push[26] = 1;
	push[27] = z->k;
	return 28 * sizeof(uint32_t);
}

/* One line for v at size z; returns 1 when it says FAIL. */
static int run_one(struct gv_dev *d, const struct gv_opts *o, const struct gv_size *z, struct gv_operands *op,
		   struct gv_variant *v)
{
	uint32_t push[28], push_size;
	uint64_t groups;
	const char *why;
	double err = 0, *ns;
	int r;

	printf("# start %s %ux%ux%u:%s\n", v->name, z->m, z->n, z->k, z->layout);
	fflush(stdout);
	printf("%-36s %6u %6u %6u %s ", v->name, z->m, z->n, z->k, z->layout);
	if (!runnable(d, v, z, &why)) {
		printf("- - - SKIP (%s)\n", why);
		return 0;
	}
	if (!v->pipe_err)
		v->pipe_err = gv_pipeline(d, v->path, &v->pipe) == 0 ? 1 : -EINVAL;
	if (v->pipe_err < 0) {
		printf("- - - FAIL (no pipeline)\n");
		return 1;
	}
	push_size = make_push(v, z, push, &groups);
	if (!(ns = calloc(o->reps, sizeof(*ns))))
		return 1;
	if ((r = operands_upload(d, z, op, v->operand)) < 0 ||
	    (r = check(d, o, z, op, v, push, push_size, groups, &err)) < 0 ||
	    (r = gv_run(d, v->pipe, push, push_size, groups, o->warmup, o->reps, ns)) < 0) {
		printf("- - - FAIL (%s)\n", strerror(-r));
		free(ns);
		return 1;
	}
	qsort(ns, o->reps, sizeof(*ns), cmp_double);
	{
		double med = o->reps % 2 ? ns[o->reps / 2] : (ns[o->reps / 2 - 1] + ns[o->reps / 2]) / 2;
		double tol = v->out == GV_F32 ? 5e-4 : v->out == GV_F16 ? 2e-3 : 1e-2;
		bool ok = err <= tol;

		printf("%10.1f %8.2f %9.2e %s\n", med / 1e3, 2.0 * z->m * z->n * z->k / med / 1e3, err,
		       ok ? "OK" : "FAIL");
		free(ns);
		return !ok;
	}
}

int main(int argc, char **argv)
{
	struct gv_opts o;
	struct gv_variant *v;
	struct gv_dev d;
	int first = parse_args(argc, argv, &o), nv, fails = 0, r;

	if (first < 0) {
		usage();
		return 2;
	}
	nv = argc - first;
	if (!(v = calloc((size_t)nv, sizeof(*v))))
		return 2;
	for (int i = 0; i < nv; i++) {
		v[i].path = argv[first + i];
		if ((r = read_sidecar(&v[i])) < 0) {
			fprintf(stderr, "gemm_variants: %s: no usable sidecar (.txt): %s\n", v[i].path, strerror(-r));
			free(v);
			return 2;
		}
	}
	if (gv_dev_open(&d, o.device) < 0) {
		gv_dev_close(&d);
		free(v);
		return 2;
	}
	printf("# device %s: cooperative matrices %s, bf16 %s; median of %u after %u warm-ups\n", d.name,
	       d.coopmat ? "yes" : "no", d.bf16 ? "yes" : "no", o.reps, o.warmup);
	printf("# variant M N K layout median_us TFLOP/s max_rel_err result\n");
	for (unsigned s = 0; s < o.nsizes; s++) {
		struct gv_operands op;
		bool any = false;

		for (int i = 0; i < nv; i++)
			any |= !strcmp(v[i].layout, o.sizes[s].layout);
		if (!any)
			continue;
		if ((r = operands_make(&d, &o.sizes[s], &op)) < 0) {
			printf("# size %ux%ux%u: %s\n", o.sizes[s].m, o.sizes[s].n, o.sizes[s].k, strerror(-r));
			fails++;
		} else {
			for (int i = 0; i < nv; i++)
				if (!strcmp(v[i].layout, o.sizes[s].layout))
					fails += run_one(&d, &o, &o.sizes[s], &op, &v[i]);
		}
		operands_free(&d, &op);
		fflush(stdout);
	}
	for (int i = 0; i < nv; i++)
		if (v[i].pipe_err > 0)
			vkDestroyPipeline(d.dev, v[i].pipe, NULL);
	gv_dev_close(&d);
	free(v);
	return fails ? 1 : 0;
}
