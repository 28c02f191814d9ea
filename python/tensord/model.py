"""Models: the protocol's model.* methods, and :class:`Model`, a named model
in the daemon with torch-like methods (docs/training.md, "Models"; "From
Python" there and python/README.md, "Models")::

    from tensord import nn
    m = c.define_model("mlp", layers=nn.Sequential(nn.Linear(64, 128), nn.ReLU(),
                                                   nn.Linear(128, 10)),
                       inputs={"x": ("f32", [1, 64]), "y": ("i32", [1])},
                       loss=nn.CrossEntropyLoss(target="y"),
                       optimizer={"type": "adam", "lr": 1e-2})
    m.train({"x": xtr, "y": ytr}, batch_size=64, epochs=8)    # arrays or stored names
    m.evaluate({"x": xte, "y": yte})
    m.predict({"x": xte})["2"]          # NumPy arrays, by node id
    m.save("mlp.safetensors")           # what `tensorctl model save` writes
    c.load_model("mlp.safetensors", replace=True)

The Keras habits (tensord.fit, tensord.metrics, tensord.summary)::

    m.fit((xtr, ytr), batch_size=64, epochs=8, metrics=["accuracy"],
          validation_split=0.1, verbose=1)     # -> result["val_metrics"]["accuracy"]
    m.evaluate((xte, yte), metrics=["accuracy"])["metrics"]["accuracy"]
    m.predict(xte)                      # a bare array in, the output array out
    m.summary()

Data given as NumPy arrays is put under ``<model>/_data/<input>`` (training),
``<model>/_eval/<input>`` (train's eval) and ``<model>/_in/<input>``
(evaluate, predict, step) for the call and deleted after it (a detached
run's stay: the job reads them; :meth:`Job.wait` deletes them)."""
from __future__ import annotations

import json
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from . import dtypes as _dt
from . import metrics as _metrics
from . import nn as _nn
from . import safetensors as _st
from . import summary as _summary
from .errors import AlreadyExists, InvalidArgument, NotFound, ProtocolError, ShapeMismatch, TensordError
from .fit import (ProgressBar, as_data, chain, check_rows, eval_callback, eval_request, fit_result, input_order,
                  split_validation)

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Model", "Job", "FORMAT", "Data", "InputsLike"]

#: __metadata__ "format" of a model file (tensorctl model save)
FORMAT = "tensord.model.v1"
_META_NAME, _META_DEF, _META_STEP = "tensord.model", "tensord.definition", "tensord.step"
#: data of a call: input name -> a stored tensor's name or an array
Data = Mapping[str, Union[str, np.ndarray, Sequence[Any]]]
#: a model's inputs: a list of names or {"name", "dtype", "shape"} maps, or a
#: map name -> (dtype, shape) or an example array
InputsLike = Union[Sequence[Union[str, Mapping[str, Any]]], Mapping[str, Any]]


def _str(what: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise InvalidArgument("%s must be a non-empty str, not %r" % (what, v))
    return v


def _arr(m: Any) -> np.ndarray:
    if not isinstance(m, dict) or "data" not in m:
        raise ProtocolError("expected a tensor map with data, got %r" % (m,)[:200])
    return _dt.decode(m.get("dtype"), m.get("shape", ()), m["data"])


def _outputs(result: Any) -> Any:
    if isinstance(result, dict) and isinstance(result.get("outputs"), dict):
        result = dict(result)
        result["outputs"] = {k: _arr(v) for k, v in result["outputs"].items()}
    return result


def _strs(what: str, v: Any) -> List[str]:
    if isinstance(v, str):
        return [v]
    try:
        return [_str(what, x) for x in v]
    except TypeError:
        raise InvalidArgument("%s must be a list of str" % what) from None


def _mode(mode: Optional[str]) -> Optional[str]:
    if mode is not None and mode not in ("eval", "train"):
        raise InvalidArgument("mode must be 'eval' or 'train', not %r" % (mode,))
    return mode


def normalize_inputs(inputs: InputsLike) -> List[Any]:
    """model.define's `inputs` from the forms InputsLike allows."""
    if isinstance(inputs, Mapping):
        out: List[Any] = []
        for name, v in inputs.items():
            _str("an input name", name)
            if isinstance(v, np.ndarray):
                out.append({"name": name, "dtype": _dt.dtype_name(v.dtype), "shape": list(v.shape)})
            elif isinstance(v, Mapping):
                out.append(dict(v, name=name))
            elif isinstance(v, (tuple, list)) and len(v) == 2:
                dtype, shape = v
                if isinstance(shape, (str, np.dtype, type)):   # (shape, dtype) also reads
                    dtype, shape = shape, dtype
                out.append({"name": name, "dtype": _dt.dtype_name(dtype),
                            "shape": [int(s) for s in shape]})
            elif v is None:
                out.append(name)
            else:
                raise InvalidArgument("input %r: give (dtype, shape), an example array or a "
                                      "{'dtype', 'shape'} map, not %r" % (name, v))
        return out
    if isinstance(inputs, (str, bytes)):
        return [inputs]
    out = []
    for v in inputs:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, Mapping):
            d = dict(v)
            if "dtype" in d:
                d["dtype"] = _dt.dtype_name(d["dtype"])
            out.append(d)
        else:
            raise InvalidArgument("inputs: each is a name or a {'name', 'dtype', 'shape'} map, not %r" % (v,))
    return out


def build_definition(*, layers: Any = None, nodes: Optional[Sequence[Mapping[str, Any]]] = None,
                     inputs: Optional[InputsLike] = None, loss: Union[str, Mapping[str, Any], None] = None,
                     params: Optional[Sequence[str]] = None, optimizer: Optional[Mapping[str, Any]] = None,
                     outputs: Optional[Sequence[str]] = None, state: Optional[Sequence[Any]] = None,
                     seed: int = 0, input: Optional[str] = None, dtype: Optional[Any] = None,
                     step: Optional[int] = None, precision: Optional[str] = None) -> Dict[str, Any]:
    """The model.define params (without name/replace), checked as far as the
    client can: the layer form (`layers`, a tensord.nn module or a list of
    layer maps; `nodes`/`params` then optional extras) or the graph form
    (`nodes`, `params`, `loss` a node id). `precision`: "f32" (default),
    "bf16" or "f16" (mixed precision: products on bf16 or f16 operands, f32
    master weights; f16 with dynamic loss scaling, whose settings are a
    train.step/train.run option ``loss_scale={"init", "growth_factor",
    "backoff_factor", "growth_interval"}``; docs/training.md)."""
    d: Dict[str, Any] = {}
    if loss is None:
        raise InvalidArgument("loss is required: a node id, or with layers a map such as "
                              "nn.CrossEntropyLoss(target='y')")
    if layers is not None:
        d["layers"] = _nn.as_layers(layers)
        if inputs is None:
            raise InvalidArgument("a layer model needs inputs (the first is what the first layer reads)")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidArgument("seed must be an int, not %r" % (seed,))
        d["seed"] = seed
        if input is not None:
            d["input"] = _str("input", input)
        if dtype is not None:
            d["dtype"] = _dt.dtype_name(dtype)
    else:
        if nodes is None or params is None:
            raise InvalidArgument("give layers, or nodes and params (the graph form)")
        if isinstance(loss, Mapping):
            raise InvalidArgument("a loss map needs layers; the graph form's loss is a node id")
        if seed != 0 or input is not None or dtype is not None:
            raise InvalidArgument("seed, input and dtype belong to the layer form (layers=...)")
    if nodes is not None:
        from .methods import _nodes  # the dtype attrs of nodes, as graph_run sends them
        d["nodes"] = _nodes(nodes)
    if params is not None:
        d["params"] = _strs("params", params)
    d["loss"] = dict(loss) if isinstance(loss, Mapping) else _str("loss", loss)
    if inputs is not None:
        d["inputs"] = normalize_inputs(inputs)
    if outputs is not None:
        d["outputs"] = _strs("outputs", outputs)
    if optimizer is not None:
        if not isinstance(optimizer, Mapping):
            raise InvalidArgument("optimizer must be a dict, not %r" % (optimizer,))
        d["optimizer"] = dict(optimizer)
    if state is not None:
        d["state"] = list(state)
    if step is not None:
        d["step"] = step
    if precision is not None:
        d["precision"] = _precision(precision)
    return d


def _precision(precision: Any) -> str:
    """A precision setting as the daemon takes it."""
    if precision not in ("f32", "bf16", "f16"):
        raise InvalidArgument("precision must be \"f32\", \"bf16\" or \"f16\", not %r" % (precision,))
    return str(precision)


class _ModelRPC:
    """The model.* methods as the protocol has them (Client and Pipeline)."""

    def _do(self, method, params=None, decode=None, on_notify=None, fds=None):  # pragma: no cover
        raise NotImplementedError

    def model_define(self, name: str, definition: Mapping[str, Any], *, replace: bool = False) -> Any:
        """model.define with `definition` (see build_definition); returns the
        model.stat map."""
        params = dict(definition)
        params["name"] = _str("name", name)
        if replace:
            params["replace"] = True
        return self._do("model.define", params)

    def model_list(self) -> Any:
        """Your models (model.list's list of maps)."""
        return self._do("model.list", None, lambda r: r["models"])

    def model_stat(self, name: str) -> Any:
        """model.stat: definition, step, params, state."""
        return self._do("model.stat", {"name": _str("name", name)})

    def model_delete(self, name: str, tensors: bool = False) -> Any:
        """model.delete (with `tensors`: also its parameters and state)."""
        params: Dict[str, Any] = {"name": _str("name", name)}
        if tensors:
            params["tensors"] = True
        return self._do("model.delete", params)

    def model_evaluate(self, model: str, data: Mapping[str, str], metrics: Optional[Sequence[str]] = None,
                       batch_size: Optional[int] = None, mode: Optional[str] = None) -> Any:
        """model.evaluate on stored tensors: ``{"loss", "metrics", "samples", "batches"}``."""
        params: Dict[str, Any] = {"model": _str("model", model), "data": dict(data)}
        if metrics is not None:
            params["metrics"] = _strs("metrics", metrics)
        if batch_size is not None:
            params["batch_size"] = batch_size
        if _mode(mode) is not None:
            params["mode"] = mode
        return self._do("model.evaluate", params)

    def model_predict(self, model: str, inputs: Mapping[str, str], outputs: Optional[Sequence[str]] = None,
                      out: Optional[Mapping[str, str]] = None, mode: Optional[str] = None) -> Any:
        """model.predict on stored tensors: ``{"outputs": {id: array}, "stored": {...}}``."""
        params: Dict[str, Any] = {"model": _str("model", model), "inputs": dict(inputs)}
        if outputs is not None:
            params["outputs"] = _strs("outputs", outputs)
        if out is not None:
            params["out"] = dict(out)
        if _mode(mode) is not None:
            params["mode"] = mode
        return self._do("model.predict", params, _outputs)


class _Staged:
    """Arrays of a call put under `prefix` + input name; str values pass."""

    def __init__(self, client: "Client", prefix: str, data: Optional[Data], what: str,
                 dtypes: Optional[Mapping[str, str]] = None) -> None:
        self.client = client
        self.names: Dict[str, str] = {}
        self.put: List[str] = []
        if data is None:
            return
        if not isinstance(data, Mapping):
            raise InvalidArgument("%s must be a dict input -> array or tensor name, not %s"
                                  % (what, type(data).__name__))
        try:
            for k, v in data.items():
                _str("%s key" % what, k)
                if isinstance(v, str):
                    self.names[k] = v
                else:
                    name = prefix + k
                    # Counted before it is sent: a put interrupted while its
                    # answer is awaited may have been stored (issue 35).
                    self.put.append(name)
                    # Stored as the model declares the input (float64 data,
                    # int64 labels: issue 35), else as put() stores arrays.
                    client.put(name, v, (dtypes or {}).get(k))
                    self.names[k] = name
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        """Delete what was put, on a connection that works (never on one
        closed for good: Client._cleanup_conn); what is gone already or
        cannot be reached is let be."""
        names, self.put = self.put, []
        if not names:
            return
        try:
            conn = self.client._cleanup_conn()
        except TensordError:
            return
        try:
            for n in names:
                try:
                    conn.delete(n)
                except TensordError:
                    pass
        finally:
            if conn is not self.client:
                conn.close()


class _Stat:
    """model.stat of one call, asked at most once and only when needed."""

    def __init__(self, model: "Model") -> None:
        self.model = model
        self.value: Optional[Dict[str, Any]] = None

    def __call__(self) -> Dict[str, Any]:
        if self.value is None:
            self.value = self.model.stat()
        return self.value


def _input_dtypes(stat: Mapping[str, Any]) -> Dict[str, str]:
    """The dtypes a model declares for its inputs (those given with an
    example: {"name", "dtype", "shape"})."""
    inputs = stat.get("definition", {}).get("inputs") or []
    return {i["name"]: i["dtype"] for i in inputs if isinstance(i, Mapping) and isinstance(i.get("dtype"), str)}


def _check_rows(model: str, stat: Mapping[str, Any], data: Mapping[str, Any], what: str) -> None:
    """Each array's rows have the shape the model declares for that input
    (its declared shape less the batch dimension), as Keras checks: a
    mismatch is ShapeMismatch naming the input, not a message about the
    model's inner nodes from the daemon."""
    declared = {i["name"]: i.get("shape") for i in stat.get("definition", {}).get("inputs") or []
                if isinstance(i, Mapping) and isinstance(i.get("name"), str)}
    for k, v in data.items():
        shape = declared.get(k)
        if isinstance(v, str) or not isinstance(shape, list) or len(shape) < 1:
            continue
        got = np.shape(v)
        want = tuple(shape[1:])
        if len(got) != len(want) + 1 or any(isinstance(w, int) and w > 0 and g != w
                                             for g, w in zip(got[1:], want)):
            raise ShapeMismatch("%s[%r]: model %s takes rows of shape %s for input %r, the array has shape %s"
                                % (what, k, model, list(want), k, list(got)))


class Job:
    """A detached training run (docs/protocol.md, "Jobs"). ``int(job)`` is
    its id."""

    def __init__(self, client: "Client", job: int, staged: Sequence[_Staged] = (),
                 metrics: Optional[_metrics.Ids] = None, verbose: int = 0) -> None:
        self.client = client
        self.id = job
        self._staged = list(staged)
        self._ids = metrics or {}
        self._verbose = verbose

    def __int__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return "<tensord.Job %d>" % self.id

    def stat(self) -> Dict[str, Any]:
        """job.stat: state, run_step, steps, loss, result or error."""
        return self.client.job(self.id)

    def cancel(self) -> Any:
        """Stop it after the steps in progress (up to its pipeline depth)."""
        return self.client.cancel(self.id)

    def watch(self) -> Iterator[Tuple[str, Any]]:
        """Client.watch: ("progress"|"eval", map) ..., then ("end", job map)."""
        return self.client.watch(self.id)

    def wait(self, on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
             verbose: Optional[int] = None) -> Dict[str, Any]:
        """Follow it to its end; returns the final job.stat map (its
        "result" or "error"), and deletes the arrays the run was given.
        `verbose` (default: train's) shows the progress as train does;
        evaluations report the metrics under the names train was given."""
        v = self._verbose if verbose is None else verbose
        bar = ProgressBar(v) if v else None
        on_p = chain(bar and bar.progress, on_progress)
        end: Dict[str, Any] = {}
        try:
            for kind, m in self.watch():
                if kind == "progress" and on_p:
                    on_p(m)
                elif kind == "eval" and bar:
                    e = _metrics.rename_eval(m, self._ids)
                    bar.evaluated(e, _metrics.shown(e, "val_"))
                elif kind == "end":
                    end = m
        finally:
            if bar:
                bar.close()
        if isinstance(end.get("result"), dict) and isinstance(end["result"].get("eval"), dict):
            end["result"]["eval"] = _metrics.rename_eval(end["result"]["eval"], self._ids)
        for s in self._staged:
            s.drop()
        return end


class Model:
    """A model defined in the daemon, by name (Client.define_model,
    Client.model, Client.load_model). Every method is one or a few requests
    on its client's connection."""

    def __init__(self, client: "Client", name: str) -> None:
        self.client = client
        self.name = _str("name", name)

    def __repr__(self) -> str:
        return "<tensord.Model %s>" % self.name

    def _stage(self, where: str, data: Optional[Data], what: str, st: _Stat) -> _Staged:
        arrays = isinstance(data, Mapping) and any(not isinstance(v, str) for v in data.values())
        if arrays:
            _check_rows(self.name, st(), data, what)  # type: ignore[arg-type]
        return _Staged(self.client, "%s/_%s/" % (self.name, where), data, what,
                       _input_dtypes(st()) if arrays else None)

    def _data(self, data: Any, what: str, st: _Stat) -> Any:
        """`data` as a mapping: an (X, y) tuple or a bare X fill the
        model's inputs in order (fit.as_data)."""
        return data if isinstance(data, Mapping) else as_data(data, input_order(st()), what)

    def _metric_ids(self, names: Sequence[str], st: _Stat) -> _metrics.Ids:
        """Metric names -> node ids (None: the loss), adding the nodes of
        named metrics the model lacks to its definition (tensord.metrics)."""
        ids, add = _metrics.plan(st(), names)
        if add:
            _metrics.check_no_running_job(self.client.jobs(), self.name)
            self.client.model_define(self.name, _metrics.extended_definition(st(), add), replace=True)
        return ids

    # ---- training ----
    def train(self, data: Union[Data, Tuple[Any, ...], np.ndarray], *, batch_size: int,
              epochs: Optional[int] = None, steps: Optional[int] = None, shuffle: Optional[bool] = None,
              seed: Optional[int] = None, eval: Optional[Mapping[str, Any]] = None,
              accumulate_steps: Optional[int] = None, devices: Optional[Sequence[int]] = None,
              optimizer: Optional[Mapping[str, Any]] = None, detach: bool = False,
              on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
              on_eval: Optional[Callable[[Dict[str, Any]], None]] = None,
              metrics: Optional[Sequence[str]] = None, validation_data: Any = None,
              validation_split: Optional[float] = None, drop_last: bool = True, verbose: int = 0,
              precision: Optional[str] = None, **options: Any) -> Any:
        """train.run on the model: the daemon shuffles `data` (input ->
        array or stored tensor name, or an ``(X, y)`` tuple), trains `epochs`
        or `steps` steps of `batch_size` rows and calls `on_progress`/`on_eval`
        with each train.progress/train.eval map. Held-out data for the run's
        evaluation (every epoch): `validation_data` (as `data`),
        `validation_split` (the last fraction of `data`'s rows) or `eval`
        (``{"data": {...}, "metrics": [...], "every": n}``); the result then
        has "val_loss" and "val_metrics". `metrics` ("accuracy", "loss" or
        node ids: tensord.metrics) are reported under those names; without
        held-out data they are measured on the training data after the run
        (result "metrics"). `drop_last` (True: what train.run does) leaves
        the last partial batch of each epoch out; False is refused unless
        no batch is partial. `verbose` 1 shows a progress bar, 2 a line per
        epoch. `precision` ("f32", "bf16" or "f16") overrides the model's
        for this run; with "f16" the result also has "skipped_steps" and
        "loss_scale". Other train.run params (stop_loss, progress_every,
        start_step, loss_scale) go in `options`. Returns the run's result map, or with
        `detach` a :class:`Job`."""
        if epochs is not None and steps is not None:
            raise InvalidArgument("give epochs or steps, not both")
        st = _Stat(self)
        data, held = self._fit_data(data, eval, validation_data, validation_split, st)
        check_rows(self.client, data, batch_size, accumulate_steps, drop_last, verbose)
        names = (list(_strs("metrics", metrics)) if metrics is not None else []) + \
            (list(_strs("eval.metrics", eval.get("metrics"))) if eval and eval.get("metrics") else [])
        if names and held is None and detach:
            raise InvalidArgument("metrics of a detached run are measured on held-out data: give "
                                  "validation_data or validation_split")
        ids = self._metric_ids(names, st) if names else {}
        req: Dict[str, Any] = dict(options)
        for k, v in (("epochs", epochs), ("steps", steps), ("shuffle", shuffle), ("seed", seed),
                     ("accumulate_steps", accumulate_steps), ("optimizer", optimizer)):
            if v is not None:
                req[k] = v
        if precision is not None:
            req["precision"] = _precision(precision)
        bar = ProgressBar(verbose) if verbose and not detach else None
        staged = [self._stage("data", data, "data", st)]
        try:
            if held is not None:
                staged.append(self._stage("eval", held, "eval data", st))
                req["eval"] = eval_request(eval, staged[1].names, ids)
            on_ev = eval_callback(ids, "val_", bar, on_eval)
            if detach:  # the daemon deletes them when the job ends, however it ends
                req["cleanup"] = [n for s in staged for n in s.put]
            res = self.client.train_run(None, None, None, staged[0].names, batch_size, model=self.name,
                                        on_progress=chain(bar and bar.progress, on_progress), on_eval=on_ev,
                                        devices=devices, detach=detach, **req)
            if detach:
                return Job(self.client, res, staged, ids, verbose)
            res = fit_result(self, res, ids, held is not None, staged[0].names, batch_size, bar)
        except BaseException:
            for s in staged:
                s.drop()
            raise
        finally:
            if bar:
                bar.close()
        for s in staged:
            s.drop()
        return res

    fit = train

    def _fit_data(self, data: Any, eval: Optional[Mapping[str, Any]], validation_data: Any,
                  validation_split: Optional[float], st: _Stat) -> Tuple[Any, Any]:
        """(training data, held-out data or None)."""
        given = [k for k, v in (("eval", eval), ("validation_data", validation_data),
                                ("validation_split", validation_split)) if v is not None]
        if len(given) > 1:
            raise InvalidArgument("give one of %s, not %s together" % (", ".join(given), " and ".join(given)))
        data = self._data(data, "data", st)
        if validation_split is not None:
            train, held = split_validation(data if isinstance(data, Mapping) else {}, validation_split)
            return train, held
        if validation_data is not None:
            return data, self._data(validation_data, "validation_data", st)
        if eval is not None:
            if not isinstance(eval, Mapping) or "data" not in eval:
                raise InvalidArgument("eval must be a dict with 'data' (and 'metrics', 'every')")
            return data, self._data(eval["data"], "eval data", st)
        return data, None

    def step(self, data: Data, *, step: Optional[int] = None, optimizer: Optional[Mapping[str, Any]] = None,
             outputs: Optional[Sequence[str]] = None, seed: Optional[int] = None,
             accumulate: Optional[bool] = None, apply: Optional[bool] = None, grads: Optional[bool] = None,
             precision: Optional[str] = None, **options: Any) -> Any:
        """One train.step on the model with `data` (input -> array or stored
        name): ``{"loss", "step", "lr", "outputs": {id: array}, "stored"}``.
        `precision` ("f32", "bf16" or "f16") overrides the model's for this
        step; with "f16" the result also has "skipped" (a non-finite
        gradient: nothing updated) and "loss_scale"; ``loss_scale={...}`` in
        `options` sets the scaler (docs/training.md)."""
        st = self._stage("in", data, "data", _Stat(self))
        try:
            req: Dict[str, Any] = dict(options)
            for k, v in (("step", step), ("optimizer", optimizer), ("seed", seed), ("accumulate", accumulate),
                         ("apply", apply), ("grads", grads)):
                if v is not None:
                    req[k] = v
            if outputs is not None:
                req["outputs"] = _strs("outputs", outputs)
            if precision is not None:
                req["precision"] = _precision(precision)
            req.update(model=self.name, data=st.names)
            return self.client._do("train.step", req, _outputs)
        finally:
            st.drop()

    # ---- forward passes ----
    def evaluate(self, data: Union[Data, Tuple[Any, ...]], metrics: Optional[Sequence[str]] = None,
                 batch_size: Optional[int] = None, mode: str = "eval") -> Dict[str, Any]:
        """model.evaluate: ``{"loss", "metrics": {name: float}, "samples",
        "batches"}``. `data` as train's; `metrics` "accuracy", "loss" or
        node ids (tensord.metrics), reported under those names."""
        st = _Stat(self)
        data = self._data(data, "data", st)
        ids = self._metric_ids(_strs("metrics", metrics), st) if metrics is not None else None
        staged = self._stage("in", data, "data", st)
        try:
            res = self.client.model_evaluate(self.name, staged.names,
                                             None if ids is None else _metrics.daemon_ids(ids), batch_size, mode)
        finally:
            staged.drop()
        if ids is not None:
            res = dict(res, metrics=_metrics.rename(res, ids))
        return res

    def predict(self, inputs: Union[Data, np.ndarray, Tuple[Any, ...]],
                outputs: Optional[Union[str, Sequence[str]]] = None, mode: str = "eval",
                out: Optional[Mapping[str, str]] = None) -> Any:
        """model.predict: the outputs (default: the model's) as NumPy arrays,
        by node id. `inputs` may be a bare array (or tuple) for the model's
        first inputs (fit.as_data): the result is then the array itself
        when one output comes back. With `out` ({node: tensor name}) they
        are stored instead and the stored map (name -> metadata) is returned."""
        st = _Stat(self)
        bare = not isinstance(inputs, Mapping)
        staged = self._stage("in", self._data(inputs, "inputs", st), "inputs", st)
        try:
            res = self.client.model_predict(self.name, staged.names,
                                            None if outputs is None else _strs("outputs", outputs), out, mode)
        finally:
            staged.drop()
        if out is not None:
            return res["stored"]
        if bare and not isinstance(outputs, (list, tuple)) and len(res["outputs"]) == 1:
            return next(iter(res["outputs"].values()))
        return res["outputs"]

    __call__ = predict

    def summary(self, print_fn: Optional[Callable[[str], Any]] = print) -> str:
        """Keras's summary: a table of the layers (graph form: nodes) with
        their output shapes (from a predict on zeros of the declared inputs,
        the batch as None; "?" where unknown) and parameter counts, and the
        total. Printed with `print_fn` (None: not printed); returned."""
        st = self.stat()
        ids = [r[2] for r in _summary.rows(st)]
        shapes = _summary.probe_shapes(lambda feed, outputs: self.predict(feed, outputs=outputs), st, ids)
        text = _summary.table(st, shapes)
        if print_fn is not None:
            print_fn(text)
        return text

    # ---- what it holds ----
    def stat(self) -> Dict[str, Any]:
        """model.stat: name, step, definition, params, state (and for a layer
        model layers, param_count, parameters, nodes)."""
        return self.client.model_stat(self.name)

    @property
    def step_count(self) -> int:
        """The last step trained (0: none)."""
        return int(self.stat()["step"])

    def parameters(self) -> Dict[str, np.ndarray]:
        """Every parameter's current value, by stored tensor name (a layer
        model's are ``<model>/<path>.<param>``), in definition order."""
        out: Dict[str, np.ndarray] = {}
        for p in self.stat()["params"]:
            if p.get("stored", True):
                out[p["name"]] = self.client.get(p["name"])
        return out

    def state_tensors(self) -> Dict[str, np.ndarray]:
        """The optimizer state and running statistics model.stat lists."""
        return {n: self.client.get(n) for n in self.stat()["state"]}

    def delete(self, tensors: bool = False) -> Any:
        """model.delete; with `tensors` also its parameters and state."""
        return self.client.model_delete(self.name, tensors)

    # ---- files ----
    def save(self, path: str) -> Dict[str, Any]:
        """Write the parameters and state, and the definition, step and name
        in ``__metadata__``, to a safetensors file: what `tensorctl model save`
        writes (`tensorctl model load` reads it). Returns {"model", "file",
        "step", "tensors", "bytes"}."""
        st = self.stat()
        names = []
        for p in st["params"]:
            if not p.get("stored", False):
                raise NotFound("model %s: parameter '%s' is not stored, so there is nothing to save"
                               % (self.name, p["name"]))
            names.append(p["name"])
        names += list(st["state"])
        tensors = []
        for n in names:
            a, meta = self.client.get(n, meta=True)
            tensors.append((n, meta["dtype"], a))
        meta = {"format": FORMAT, _META_NAME: self.name,
                _META_DEF: json.dumps(st["definition"], separators=(",", ":"), ensure_ascii=False,
                                      allow_nan=False),
                _META_STEP: str(int(st["step"]))}
        nbytes = _st.save_file(path, tensors, meta)
        return {"model": self.name, "file": path, "step": int(st["step"]), "tensors": names, "bytes": nbytes}


def _rename(definition: Dict[str, Any], tensors: List[Tuple[str, str, np.ndarray]], old: str, new: str):
    """A layer model loaded under another name: its created parameters are
    named after the model, so tensors under ``old/`` move to ``new/``, and
    references to them in the definition's params and nodes follow."""
    pre, npre = old + "/", new + "/"
    moved = {n: npre + n[len(pre):] for n, _, _ in tensors if n.startswith(pre)}
    tensors = [(moved.get(n, n), d, a) for n, d, a in tensors]
    definition = dict(definition)
    if isinstance(definition.get("params"), list):
        definition["params"] = [moved.get(p, p) for p in definition["params"]]
    if isinstance(definition.get("nodes"), list):
        nodes = []
        for node in definition["nodes"]:
            if isinstance(node, dict) and isinstance(node.get("inputs"), list):
                node = dict(node, inputs=[moved.get(i, i) if isinstance(i, str) else i for i in node["inputs"]])
            nodes.append(node)
        definition["nodes"] = nodes
    return definition, tensors


class _ModelClient:
    """The model API of a Client (not of a Pipeline: it waits for answers)."""

    def define_model(self, name: str, *, layers: Any = None, nodes: Optional[Sequence[Mapping[str, Any]]] = None,
                     inputs: Optional[InputsLike] = None, loss: Union[str, Mapping[str, Any], None] = None,
                     params: Optional[Sequence[str]] = None, optimizer: Optional[Mapping[str, Any]] = None,
                     outputs: Optional[Sequence[str]] = None, state: Optional[Sequence[Any]] = None,
                     seed: int = 0, replace: bool = False, input: Optional[str] = None,
                     dtype: Optional[Any] = None, step: Optional[int] = None,
                     precision: Optional[str] = None) -> Model:
        """model.define: the layer form (`layers` a tensord.nn module or list
        of layer maps, `loss` a node id or a map such as
        ``nn.CrossEntropyLoss(target="y")``, parameters created and
        initialised in the daemon from `seed`) or the graph form (`nodes`,
        `params`, `loss` a node id). `inputs`: a list of names or
        ``{"name", "dtype", "shape"}`` maps, or a dict name -> (dtype, shape)
        or example array. `precision`: "f32" (default), "bf16" or "f16",
        mixed precision for the model's steps, evaluation and prediction
        (docs/training.md). Returns the :class:`Model`."""
        d = build_definition(layers=layers, nodes=nodes, inputs=inputs, loss=loss, params=params,
                             optimizer=optimizer, outputs=outputs, state=state, seed=seed, input=input,
                             dtype=dtype, step=step, precision=precision)
        self.model_define(name, d, replace=replace)
        return Model(self, name)  # type: ignore[arg-type]

    def model(self, name: str) -> Model:
        """The model `name` (NotFound when there is none)."""
        self.model_stat(name)
        return Model(self, name)  # type: ignore[arg-type]

    def models(self) -> List[Dict[str, Any]]:
        """Your models: model.list's maps (name, step, params, inputs, ...)."""
        return self.model_list()

    def train(self, model: Union[str, Model], data: Data, **kw: Any) -> Any:
        """``Model(model).train(data, **kw)``: train.run on a defined model."""
        m = model if isinstance(model, Model) else Model(self, model)  # type: ignore[arg-type]
        return m.train(data, **kw)

    def load_model(self, path: str, name: Optional[str] = None, replace: bool = False) -> Model:
        """Put the tensors of a model file (Model.save, `tensorctl model
        save`) and define the model with its step, as `tensorctl model load`
        does; `name` overrides the file's. Refused (AlreadyExists) before any
        tensor is put when the name is taken and not `replace`. A layer
        model loaded under another name gets its parameters renamed to the
        new model's (``old/0.weight`` -> ``new/0.weight``)."""
        tensors, meta = _st.load_file(path)
        if _META_DEF not in meta:
            raise InvalidArgument("%s has no model definition (__metadata__ %r): was it written by "
                                  "tensorctl model save? (load plain tensors with put)" % (path, _META_DEF))
        old = meta.get(_META_NAME)
        name = name or old
        if not name:
            raise InvalidArgument("%s names no model (__metadata__ %r); give name=" % (path, _META_NAME))
        step = 0
        if _META_STEP in meta:
            s = meta[_META_STEP]
            if not s.isdigit() or int(s) > 2**31 - 1:
                raise InvalidArgument("%s: __metadata__ %r is no step count" % (path, _META_STEP))
            step = int(s)
        try:
            definition = json.loads(meta[_META_DEF])
        except ValueError:
            definition = None
        if not isinstance(definition, dict):
            raise InvalidArgument("%s: the model definition in __metadata__ is no JSON object" % path)
        if any(k in definition for k in ("name", "step", "replace")):
            raise InvalidArgument("%s: the model definition has a key it must not have" % path)
        if "layers" in definition and old and name != old:
            definition, tensors = _rename(definition, tensors, old, name)
        if not replace:
            try:
                self.model_stat(name)
            except NotFound:
                pass
            else:
                raise AlreadyExists("model %s already exists (replace=True redefines it)" % name)
        for n, dtype, a in tensors:
            self.put(n, a, dtype=dtype)  # type: ignore[attr-defined]
        definition["step"] = step
        self.model_define(name, definition, replace=replace)
        return Model(self, name)  # type: ignore[arg-type]
