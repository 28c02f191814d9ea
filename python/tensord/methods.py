"""The protocol's methods as :class:`_Methods`, written once for the Client
and its Pipeline (client.py), with the helpers that build their params and
decode their results. A method the client has no function for yet is one
``call()`` away."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from . import dtypes as _dt
from ._memfd import HAS_MEMFD as _HAS_MEMFD, Memfd as _Memfd
from .errors import InvalidArgument, ProtocolError
from .model import _ModelRPC

#: a notification callback: (method, params)
NotifyFn = Callable[[str, Any], None]
#: a result map as the daemon sends it
Result = Dict[str, Any]
#: tensors at least this large go through a memfd (docs/protocol.md, "Passing
#: memory") when put or get leaves the choice to the client
MEMFD_THRESHOLD = 1 << 20


# ---- result decoders -------------------------------------------------------

class _Landed:
    """A tensor.get payload received straight into memory of its own
    (Client._land): the array takes it without a copy."""

    __slots__ = ("view",)

    def __init__(self, view):
        self.view = view

    def __len__(self):
        return len(self.view)


def _tensor(m, copy=True):
    """{"dtype", "shape", "data", ...} -> ndarray."""
    if not isinstance(m, dict) or "data" not in m:
        raise ProtocolError("expected a tensor map with data, got %r" % (m,)[:200])
    if isinstance(m["data"], _Landed):
        a = _dt.decode(m.get("dtype"), m.get("shape", ()), m["data"].view, copy=False)
        a.flags.writeable = copy
        return a
    return _dt.decode(m.get("dtype"), m.get("shape", ()), m["data"], copy=copy)


def _outputs(result):
    """A result whose "outputs" map holds tensors: those become arrays."""
    if isinstance(result, dict) and isinstance(result.get("outputs"), dict):
        result = dict(result)
        result["outputs"] = {k: _tensor(v) for k, v in result["outputs"].items()}
    return result


def _params(params, kw):
    if params is None and not kw:
        return None
    if params is not None and not isinstance(params, dict):
        raise InvalidArgument("params must be a dict of named arguments, not %s"
                              % type(params).__name__)
    merged = dict(params or {})
    merged.update(kw)
    return merged


def _name(what, value):
    if not isinstance(value, str):
        raise InvalidArgument("%s must be a str, not %s" % (what, type(value).__name__))
    return value


def _names(what, values):
    if isinstance(values, str):
        return [values]
    try:
        return [_name(what, v) for v in values]
    except TypeError:
        raise InvalidArgument("%s must be a list of str" % what) from None


def _attrs(attrs):
    """An op's attrs as sent: a "dtype" in any form dtype_name() takes
    becomes its wire name (see dtypes.attr_dtype)."""
    attrs = dict(attrs)
    if "dtype" in attrs:
        attrs["dtype"] = _dt.attr_dtype(attrs["dtype"])
    return attrs


def _nodes(nodes):
    """Graph nodes as sent: each node's attrs through _attrs()."""
    out = []
    for node in nodes:
        if isinstance(node, Mapping) and isinstance(node.get("attrs"), Mapping):
            node = dict(node)
            node["attrs"] = _attrs(node["attrs"])
        out.append(node)
    return out


def _graph_req(nodes, loss, params):
    """nodes, loss and params of a train request; None leaves one out (a
    request on a model: {"model": NAME})."""
    req = {}
    if nodes is not None:
        req["nodes"] = _nodes(nodes)
    if loss is not None:
        req["loss"] = _name("loss", loss)
    if params is not None:
        req["params"] = _names("params", params)
    return req


def _omit_none(**kw):
    return {k: v for k, v in kw.items() if v is not None}


def _device(what, value):
    """A device id (info()["devices"][i]["id"]): an int >= 0. bool is no id."""
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgument("%s must be a device id (an int >= 0), not %r" % (what, value))
    return value


class _Methods(_ModelRPC):
    """The protocol's methods, written once for Client and Pipeline.

    Each builds one request and hands it to ``self._do(method, params, decode,
    on_notify)``: Client waits and returns the decoded result, Pipeline returns
    a Pending. To add a method, add a function here (or use call())."""

    def _do(self, method, params=None, decode=None, on_notify=None, fds=None):
        raise NotImplementedError

    def _sizes(self):
        """Tensor sizes seen on this connection, by name (get's memfd choice)."""
        return {}

    def _stat_now(self, name):
        """tensor.stat answered now, also inside a Pipeline."""
        raise NotImplementedError

    def _retries(self):
        """Whether a call's error reaches the method itself (Client, not Pipeline)."""
        return False

    def call(self, method: str, args: Optional[Mapping[str, Any]] = None, /, *,
             on_notify: Optional[NotifyFn] = None, **kw: Any) -> Any:
        """Any method: `args` (a dict) and keyword arguments are merged into
        its named arguments; returns the result map as the daemon sent it
        (tensor data as bytes). `on_notify(method, params)` receives the
        notifications that arrive while the call runs::

            c.call("tensor.stat", name="w")
            c.call("train.run", {"nodes": nodes, "params": ["w"], ...})
        """
        return self._do(_name("method", method), _params(args, kw), None, on_notify)

    def ping(self) -> Any:
        """``{"pong": True, "version": str, "protocol": 1}``."""
        return self._do("ping")

    def info(self) -> Any:
        """The daemon's version, devices, tensor totals, connections and limits."""
        return self._do("info", decode=self._saw_info)

    def _saw_info(self, result):
        return result

    def put(self, name: str, array: Any, dtype: Optional[_dt.DTypeLike] = None, *,
            cast: bool = False, if_absent: bool = False, mode: Optional[str] = None,
            device: Optional[int] = None, memfd: Optional[bool] = None) -> Any:
        """Store `array` (a NumPy array, or anything np.asarray takes) as
        `name`, replacing a tensor of that name unless `if_absent`. The dtype
        follows the array (float32 f32, float16 f16, int32 i32, uint8 u8);
        other arrays (float64, int64, bool) are refused unless `cast` (float
        to f32, integers to i32, bools to u8) or `dtype` says what to store.
        `dtype` converts: "f32", np.float32, "float32", or "bf16" (see
        tensord.dtypes). `mode` shares
        it (see chmod; a new tensor is "private"). `device` (an id from
        info()["devices"]) says where it lives; without it the daemon puts a
        new tensor with the caller's other tensors (else on the device with
        the most free memory) and keeps a replaced one where it was. Returns the stored tensor's metadata
        (its "device" says where it went). `memfd` True sends the bytes in a
        sealed memory file instead of the socket, False never; by default
        arrays of MEMFD_THRESHOLD bytes or more go that way."""
        if device is not None:
            device = _device("device", device)
        dtype, shape, data = _dt.encode(array, dtype, cast)
        params = {"name": _name("name", name), "dtype": dtype, "shape": shape}
        fds = None
        if memfd or (memfd is None and _HAS_MEMFD and data.nbytes >= MEMFD_THRESHOLD):
            fds = [_Memfd(data.nbytes, data)]
            params["fd"] = 0
        else:
            params["data"] = data
        if if_absent:
            params["if_absent"] = True
        if mode is not None:
            params["mode"] = mode
        if device is not None:
            params["device"] = device
        return self._do("tensor.put", params, self._saw_size, fds=fds)

    def _saw_size(self, m):
        sizes = self._sizes()
        if isinstance(m, dict) and isinstance(m.get("name"), str) and isinstance(m.get("bytes"), int):
            if len(sizes) >= 4096:
                sizes.clear()
            sizes[m["name"]] = m["bytes"]
        return m

    def get(self, name: str, *, meta: bool = False, copy: bool = True,
            memfd: Optional[bool] = None) -> Any:
        """The tensor `name` as a NumPy array (bf16: uint16 bit patterns).
        With `meta`, (array, metadata). With `copy` False the array is a
        read-only view of the received bytes (no second copy). `memfd` True
        has the daemon write the bytes into a memory file the array then
        maps (no copy through the socket), False never; by default a tensor
        this client saw to be MEMFD_THRESHOLD bytes or more goes that way.
        The memfd is made as large as the tensor was last seen (a stat first
        when this client has not seen it)."""
        params = {"name": _name("name", name)}
        fds = None
        auto = memfd is None
        if auto:
            # Only where a stale size can be retried (not in a Pipeline).
            memfd = _HAS_MEMFD and self._retries() and self._sizes().get(name, 0) >= MEMFD_THRESHOLD
        if memfd:
            size = self._sizes().get(name)
            if size is None:
                size = self._stat_now(name)["bytes"]
            fds = [_Memfd(size)]
            params["fd"] = 0

        def decode(m):
            m = self._saw_size(m)
            a = fds[0].array(m) if fds else _tensor(m, copy=copy)
            if meta:
                return a, {k: v for k, v in m.items() if k != "data"}
            return a
        decode.lands = not fds
        try:
            return self._do("tensor.get", params, decode, fds=fds)
        except InvalidArgument as e:
            # The tensor grew since this client saw it: the plain path.
            if not (auto and memfd and "do not fit" in str(e)):
                raise
            self._sizes().pop(name, None)
            return self.get(name, meta=meta, copy=copy, memfd=False)

    def stat(self, name: str) -> Any:
        """The metadata of tensor `name`."""
        return self._do("tensor.stat", {"name": _name("name", name)}, self._saw_size)

    def list(self, prefix: Optional[str] = None) -> Any:
        """Metadata of every tensor (whose name starts with `prefix`), by name."""
        params = None if prefix is None else {"prefix": _name("prefix", prefix)}
        return self._do("tensor.list", params, lambda r: r["tensors"])

    def delete(self, name: str) -> Any:
        """Delete tensor `name`; ``{"name", "deleted": True, "bytes"}``."""
        return self._do("tensor.delete", {"name": _name("name", name)})

    def chmod(self, name: str, mode: Optional[str] = None, group: Optional[int] = None) -> Any:
        """Who besides its owner may use tensor `name` (owner or root only):
        `mode` "private" or a comma list of "group-read", "group-write",
        "world-read", "world-write"; `group` a gid. Returns the metadata."""
        params = {"name": _name("name", name)}
        if mode is not None:
            params["mode"] = mode
        if group is not None:
            params["group"] = group
        return self._do("tensor.chmod", params)

    def copy(self, src: str, dst: str, device: Optional[int] = None) -> Any:
        """Copy stored tensor `src` into `dst` (tensor.copy) on device
        `device`, by default `src`'s. ``copy(x, x, device=1)`` moves `x` to
        device 1. Returns `dst`'s metadata."""
        params = {"src": _name("src", src), "dst": _name("dst", dst)}
        if device is not None:
            params["device"] = _device("device", device)
        return self._do("tensor.copy", params)

    def op_run(self, op: str, inputs: Union[str, Sequence[str]],
               attrs: Optional[Mapping[str, Any]] = None, out: Optional[str] = None,
               device: Optional[int] = None) -> Any:
        """Run one op (docs/ops.md) on stored tensors. Without `out` the result
        comes back as an array; with it, it is stored and its metadata returned.
        The op runs on the device holding its inputs, which must all be on one
        device (else FailedPrecondition); `device` names it, and is where an
        op without inputs runs."""
        params = {"op": _name("op", op), "inputs": _names("inputs", inputs)}
        if device is not None:
            params["device"] = _device("device", device)
        if attrs:
            params["attrs"] = _attrs(attrs)
        if out is not None:
            params["out"] = _name("out", out)
            return self._do("op.run", params)
        return self._do("op.run", params, _tensor)

    run = op_run

    def graph_run(self, nodes: Iterable[Mapping[str, Any]],
                  outputs: Optional[Sequence[str]] = None) -> Any:
        """Many ops in one GPU submission per device. Each node is a dict
        ``{"id", "op", "inputs", "attrs", "out", "device"}`` as docs/protocol.md
        says (a node's "device" as `op_run`'s). Returns ``{"outputs": {id:
        array}, "stored": {name: metadata}}``."""
        params = {"nodes": _nodes(nodes)}
        if outputs is not None:
            params["outputs"] = _names("outputs", outputs)
        return self._do("graph.run", params, _outputs)

    def train_step(self, nodes: Optional[Iterable[Mapping[str, Any]]], loss: Optional[str],
                   params: Optional[Union[str, Sequence[str]]], *,
                   optimizer: Optional[Mapping[str, Any]] = None, step: Optional[int] = None,
                   grads: Optional[Mapping[str, str]] = None,
                   outputs: Optional[Sequence[str]] = None, **options: Any) -> Any:
        """One training step (forward, backward, optimizer update). Returns
        ``{"loss", "step", "lr", "outputs": {id: array}, "stored": [names]}``.
        With ``model=NAME`` (and ``data=``) in `options`, `nodes`, `loss` and
        `params` are None: the model's (Model.step is the friendlier form).
        ``precision="bf16"`` (or ``"f16"``, with dynamic loss scaling:
        ``loss_scale={...}``, and "skipped" and "loss_scale" in the result)
        in `options` runs it in mixed precision (docs/training.md)."""
        req = _graph_req(nodes, loss, params)
        req.update(_omit_none(optimizer=optimizer, step=step, grads=grads))
        if outputs is not None:
            req["outputs"] = _names("outputs", outputs)
        req.update(options)
        return self._do("train.step", req, _outputs)

    def train_run(self, nodes: Optional[Iterable[Mapping[str, Any]]], loss: Optional[str],
                  params: Optional[Union[str, Sequence[str]]], data: Mapping[str, str], batch_size: int,
                  *, on_progress: Optional[Callable[[Result], None]] = None,
                  on_eval: Optional[Callable[[Result], None]] = None,
                  on_notify: Optional[NotifyFn] = None, devices: Optional[Sequence[int]] = None,
                  detach: bool = False, **options: Any) -> Any:
        """A whole training run in the daemon (docs/training.md). `options` are
        the other params of train.run (optimizer, epochs or steps, seed,
        shuffle, start_step, progress_every, eval, stop_loss, accumulate_steps,
        pipeline_depth: steps in flight on one device, default 2; precision:
        "f32", "bf16" or "f16", mixed precision; loss_scale: f16's scaler
        settings, the result then with "skipped_steps" and "loss_scale").

        `devices` (two or more device ids, the first holding the parameters
        and data) trains data-parallel (docs/devices.md): `batch_size` must
        be a multiple of their count, and the result then also has "devices"
        and "replica_max_diff".

        While it runs, `on_progress(p)` gets each ``train.progress`` map,
        `on_eval(e)` each ``train.eval`` map, and `on_notify(method, params)`
        any other notification. An exception raised by a callback closes the
        connection, which cancels the run (the steps in flight are not
        applied), and is raised here. Returns the run's result map.

        With `detach=True` the run becomes a job that outlives the connection
        (docs/protocol.md, "Jobs"): the daemon answers at once and this
        returns the job id (an int) for job(), watch() and cancel().

        With ``model=NAME`` in `options`, `nodes`, `loss` and `params` are
        None: the model's (Model.train is the friendlier form)."""
        def notify(method, p):
            if method == "train.progress" and on_progress:
                on_progress(p)
            elif method == "train.eval" and on_eval:
                on_eval(p)
            elif on_notify:
                on_notify(method, p)
        req = _graph_req(nodes, loss, params)
        req.update(data=dict(data), batch_size=batch_size)
        if devices is not None:
            if isinstance(devices, (str, bytes)):
                raise InvalidArgument("devices must be a list of device ids, not %r" % (devices,))
            try:
                req["devices"] = [_device("devices[%d]" % i, d) for i, d in enumerate(devices)]
            except TypeError:
                raise InvalidArgument("devices must be a list of device ids") from None
        req.update(options)
        if detach:
            req["detach"] = True
            return self._do("train.run", req, lambda r: r["job"])
        return self._do("train.run", req, None, notify)

    # ---- detached jobs (docs/protocol.md, "Jobs") ----
    def jobs(self) -> Any:
        """Your detached jobs (root: everyone's), newest first: a list of
        job.stat maps ({"job", "owner", "state", "run_step", "steps", "loss",
        ..., "result", "error"})."""
        return self._do("job.list", None, lambda r: r["jobs"])

    def job(self, job: int) -> Any:
        """One job's job.stat map; NotFound for no job or another user's."""
        return self._do("job.stat", {"job": job})

    def cancel(self, job: int) -> Any:
        """Stop a running job after its current step: ``{"job", "cancelling"}``."""
        return self._do("job.cancel", {"job": job})
