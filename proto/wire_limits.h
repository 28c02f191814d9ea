/* Limits of the tensord wire protocol, shared by daemon and client.
 *
 * Everything a peer controls is bounded here, and the bounds are checked before
 * anything is allocated for it. The daemon may lower some of them by
 * configuration (see docs/protocol.md, "Limits"); it never raises them past
 * what these types can carry. */
#pragma once

#include <stdint.h>

/* The protocol version spoken by this build (`ping` reports it). */
#define TDP_PROTOCOL_VERSION 1

/* Largest tensor payload, in bytes, and so the largest `bin` a message carries. */
#define TDP_MAX_TENSOR_BYTES ((uint64_t)1 << 30)
/* Largest single msgpack-RPC message: one full tensor plus room for metadata. */
#define TDP_MAX_MESSAGE_BYTES (TDP_MAX_TENSOR_BYTES + ((uint64_t)1 << 20))
/* Containers nested deeper than this are refused (the top-level array is depth 1). */
#define TDP_MAX_DEPTH 32
/* Most msgpack objects one message may hold (bounds the decoder's memory). */
#define TDP_MAX_OBJECTS ((uint64_t)1 << 20)
/* Tensor names: 1..TDP_MAX_NAME_LEN bytes of [A-Za-z0-9._:/-]. */
#define TDP_MAX_NAME_LEN 255
/* Tensor rank (number of dimensions); rank 0 is a scalar. */
#define TDP_MAX_RANK 8
/* Method names are short ASCII words. */
#define TDP_MAX_METHOD_LEN 64
/* Error messages are truncated to this many bytes. */
#define TDP_MAX_ERROR_MESSAGE 512
/* Nodes in a graph (graph.run, train.step, a model, with the daemon's own). */
#define TDP_MAX_GRAPH_NODES 4096
