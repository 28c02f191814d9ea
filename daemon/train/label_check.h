/* Before a train.run's steps: the class indices its cross_entropy and nll
 * losses read from a data tensor (through reshapes) lie in [0, C) of the
 * logits' C classes, or are the loss's ignore_index. An out-of-range label
 * is then an error naming the data tensor, the element and its value, as
 * PyTorch's "Target 5 is out of bounds", not a NaN loss steps later
 * (docs/training.md). Data tensors over 256 MiB are not checked. */
#pragma once

struct caller;
struct feeds;
struct graph;

/* Check the labels of every class loss of `gr` (built and inferred, its
 * inputs fed by `fd`). Returns 0, or -1 with call->err INVALID_ARGUMENT. */
int train_check_labels(struct caller *call, const struct graph *gr, const struct feeds *fd);
