/* Method names of protocol version 1: the wire contract (docs/protocol.md). */
#pragma once

#define TDP_METHOD_PING "ping"
#define TDP_METHOD_INFO "info"
#define TDP_METHOD_TENSOR_PUT "tensor.put"
#define TDP_METHOD_TENSOR_GET "tensor.get"
#define TDP_METHOD_TENSOR_STAT "tensor.stat"
#define TDP_METHOD_TENSOR_LIST "tensor.list"
#define TDP_METHOD_TENSOR_DELETE "tensor.delete"
#define TDP_METHOD_TENSOR_CHMOD "tensor.chmod"
#define TDP_METHOD_TENSOR_COPY "tensor.copy"
#define TDP_METHOD_STORE_SYNC "store.sync"
#define TDP_METHOD_OP_RUN "op.run"
#define TDP_METHOD_GRAPH_RUN "graph.run"
#define TDP_METHOD_TRAIN_STEP "train.step"
#define TDP_METHOD_TRAIN_RUN "train.run"
#define TDP_METHOD_MODEL_DEFINE "model.define"
#define TDP_METHOD_MODEL_LIST "model.list"
#define TDP_METHOD_MODEL_STAT "model.stat"
#define TDP_METHOD_MODEL_DELETE "model.delete"
#define TDP_METHOD_MODEL_EVALUATE "model.evaluate"
#define TDP_METHOD_MODEL_PREDICT "model.predict"
#define TDP_METHOD_KERNEL_CREATE "kernel.create"
#define TDP_METHOD_KERNEL_RUN "kernel.run"
#define TDP_METHOD_KERNEL_LIST "kernel.list"
#define TDP_METHOD_KERNEL_DELETE "kernel.delete"
#define TDP_METHOD_JOB_LIST "job.list"
#define TDP_METHOD_JOB_STAT "job.stat"
#define TDP_METHOD_JOB_CANCEL "job.cancel"
#define TDP_METHOD_JOB_WATCH "job.watch"
#define TDP_METHOD_JOB_DRAIN "job.drain"

/* Notification the daemon sends before closing a connection whose byte stream
 * it could not parse: params are [ {code, name, message} ]. */
#define TDP_NOTIFY_PROTOCOL_ERROR "protocol.error"

/* msgpack-RPC message types. */
enum tdp_msg_type {
	TDP_MSG_REQUEST = 0,
	TDP_MSG_RESPONSE = 1,
	TDP_MSG_NOTIFY = 2,
};
