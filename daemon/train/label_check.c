/* Class indices checked before a train.run's steps (label_check.h). */
#include "train/label_check.h"

#include <stdlib.h>
#include <string.h>

#include "devices.h"
#include "dtype.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
#include "gpu/transfer.h"
#include "ops/op.h"
#include "status.h"
#include "store/names.h"

/* Data tensors larger than this are not read back for the check. */
#define LABEL_CHECK_MAX_BYTES ((uint64_t)256 << 20)

/* The feed (index into fd) whose rows node `j` is, through reshapes, or -1. */
static int feed_of(const struct graph *gr, const struct feeds *fd, int j)
{
	for (unsigned hops = 0; j >= 0 && hops < 8; hops++) {
		const struct node *nd = &gr->nodes[j];

		if (!nd->ctx.def || strcmp(nd->ctx.def->name, "reshape") || nd->ctx.ninputs != 1)
			break;
		j = nd->src[0];
	}
	for (unsigned k = 0; j >= 0 && k < fd->n; k++)
		if (!strcmp(gr->nodes[j].id, fd->f[k].id))
			return (int)k;
	return -1;
}

/* Check the i32 class indices of data tensor `t` against `classes`. */
static int check_tensor(struct caller *call, const struct node *loss, const struct feed *f, struct tensor *t,
			uint64_t classes)
{
	const struct op_attr_value *ig = op_attr(&loss->ctx, "ignore_index");
	char shown[NAMES_SHOWN_MAX];
	int32_t *v;
	int r = 0;

	if (t->dtype != TDP_DTYPE_I32 || !t->count || t->bytes > LABEL_CHECK_MAX_BYTES)
		return 0;
	v = malloc(t->bytes);
	if (!v)
		return 0; /* the check is a courtesy: no memory, no check */
	if (gpu_download(devices_of(call->d, t), &t->alloc, v) < 0) {
		free(v);
		return 0;
	}
	for (uint64_t i = 0; i < t->count; i++) {
		if (ig && ig->set && v[i] == ig->i)
			continue;
		if (v[i] < 0 || (uint64_t)v[i] >= classes) {
			r = td_fail(&call->err, TDP_INVALID_ARGUMENT,
				    "data '%s' (input '%s', the class indices of loss node '%s'): element %llu is %d, "
				    "out of bounds for %llu classes (0 to %llu)", names_show(call->cred.uid, t->name, shown),
				    f->id, loss->id,
				    (unsigned long long)i, (int)v[i], (unsigned long long)classes,
				    (unsigned long long)classes - 1);
			break;
		}
	}
	free(v);
	return r;
}

int train_check_labels(struct caller *call, const struct graph *gr, const struct feeds *fd)
{
	for (unsigned i = 0; fd && i < gr->n; i++) {
		const struct node *nd = &gr->nodes[i];
		struct tensor *t;
		int k;

		if (!nd->ctx.def || nd->ctx.ninputs != 2 ||
		    (strcmp(nd->ctx.def->name, "cross_entropy") && strcmp(nd->ctx.def->name, "nll")))
			continue;
		k = feed_of(gr, fd, nd->src[1]);
		if (k < 0 || !(t = feeds_source(call, fd, (unsigned)k)))
			continue;
		if (check_tensor(call, nd, &fd->f[k], t, nd->ctx.in[0].shape[1]) < 0)
			return -1;
	}
	td_error_clear(&call->err);
	return 0;
}
