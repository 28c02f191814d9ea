"""The Keras habits of :meth:`Model.train` (``fit``): data as an ``(X, y)``
tuple, ``validation_split`` and ``validation_data``, ``drop_last``, the
progress bar of ``verbose=1`` and the metrics of the result. model.py wires
them into its requests; the few requests made here (a row count, the
training data's metrics) go through the client or model given."""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

import numpy as np

from . import metrics as _metrics
from .errors import InvalidArgument

__all__ = ["input_order", "as_data", "split_validation", "rows_left_out", "ProgressBar", "chain", "check_rows",
           "eval_request", "eval_callback", "fit_result"]


def input_order(stat: Mapping[str, Any]) -> List[str]:
    """The model's input names, what the first layer reads first (the
    order an ``(X, y)`` tuple fills them in)."""
    d = stat.get("definition", {})
    names = [i if isinstance(i, str) else i.get("name") for i in d.get("inputs") or []]
    names = [n for n in names if isinstance(n, str)]
    first = d.get("input")
    if isinstance(first, str) and first in names:
        names.remove(first)
        names.insert(0, first)
    return names


def as_data(data: Any, order: Sequence[str], what: str) -> Any:
    """`data` as a mapping input -> array or name: a mapping passes, an
    ``(X, y, ...)`` tuple fills the inputs in `order`, a bare array (or
    tensor name) is the first input."""
    if data is None or isinstance(data, Mapping):
        return data
    items = list(data) if isinstance(data, tuple) else [data]
    if not order:
        raise InvalidArgument("%s: the model declares no inputs, so give a dict input -> array" % what)
    if not items or len(items) > len(order):
        raise InvalidArgument("%s: %d arrays for the model's %d inputs (%s)"
                              % (what, len(items), len(order), ", ".join(order)))
    return dict(zip(order, items))


def _rows(v: Any) -> int:
    return int(np.shape(v)[0]) if np.ndim(v) else 0


def split_validation(data: Mapping[str, Any], split: float) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Keras's validation_split: the last `split` of the rows (before any
    shuffle) held out, as (training data, validation data)."""
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 0 < split < 1:
        raise InvalidArgument("validation_split must be a fraction between 0 and 1, not %r" % (split,))
    if any(isinstance(v, str) for v in data.values()):
        raise InvalidArgument("validation_split needs arrays, not stored tensor names: give "
                              "validation_data (names or arrays) instead")
    rows = {_rows(v) for v in data.values()}
    if len(rows) != 1:
        raise InvalidArgument("validation_split: the arrays have different row counts %s" % sorted(rows))
    n = rows.pop()
    cut = int(n * (1 - split))
    if cut < 1 or cut >= n:
        raise InvalidArgument("validation_split %g of %d rows leaves no rows on one side" % (split, n))
    return ({k: np.asarray(v)[:cut] for k, v in data.items()},
            {k: np.asarray(v)[cut:] for k, v in data.items()})


def rows_left_out(rows: int, batch_size: int, accumulate_steps: Optional[int]) -> int:
    """Rows an epoch leaves out: train.run drops the last partial batch
    (docs/protocol.md: an epoch is rows / (batch_size * accumulate_steps) steps)."""
    per_step = batch_size * (accumulate_steps or 1)
    return rows % per_step if isinstance(per_step, int) and per_step > 0 else 0


def _isatty(out: Any) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """Keras's progress display of a run (verbose 1: one line redrawn in
    place on a terminal, else a line per epoch; verbose 2: a line per
    epoch). Its progress()/evaluated() take the train.progress/train.eval
    maps; close() ends the last line."""

    def __init__(self, verbose: int, out: Optional[TextIO] = None, width: int = 24) -> None:
        self.out = out if out is not None else sys.stdout
        self.live = verbose == 1 and _isatty(self.out)
        self.width = width
        self.pending: Optional[Mapping[str, Any]] = None   # the epoch's last progress, not printed
        self.drawn = 0                                       # chars of the line drawn in place

    def _bar(self, done: int, total: int) -> str:
        full = self.width * done // total if total > 0 else self.width
        return "[" + "=" * max(full - 1, 0) + (">" if full else "") + "." * (self.width - full) + "]"

    def _line(self, p: Mapping[str, Any]) -> str:
        step, total = int(p.get("run_step", 0)), int(p.get("steps", 0))
        return ("epoch %d/%d  %*d/%d %s  loss %.4f  %.0f samples/s"
                % (p.get("epoch", 0), p.get("epochs", 0), len(str(total)), step, total,
                   self._bar(step, total), p.get("loss", float("nan")), p.get("samples_per_s", 0.0)))

    def _write(self, line: str, end: bool) -> None:
        if self.live:
            pad = " " * max(self.drawn - len(line), 0)
            self.out.write("\r" + line + pad + ("\n" if end else ""))
            self.drawn = 0 if end else len(line)
        elif end:
            self.out.write(line + "\n")
        self.out.flush()

    def progress(self, p: Mapping[str, Any]) -> None:
        """A train.progress map: redraw (terminal), or keep it for the
        epoch's line (the line of an epoch before it is printed now)."""
        if self.pending is not None and p.get("epoch") != self.pending.get("epoch"):
            self._write(self._line(self.pending), True)
        self.pending = p
        if self.live:
            self._write(self._line(p), False)

    def evaluated(self, e: Mapping[str, Any], shown: Mapping[str, Any]) -> None:
        """A train.eval map `e`, with `shown` (name -> value) at the end of
        its epoch's line."""
        head = self._line(self.pending) if self.pending is not None else "epoch %d  step %d" % (
            e.get("epoch", 0), e.get("run_step", 0))
        tail = "  ".join("%s %.4f" % (k, v) for k, v in shown.items() if isinstance(v, (int, float)))
        self._write(head + ("  -  " + tail if tail else ""), True)
        self.pending = None

    def close(self) -> None:
        """End the last line (also when the run was interrupted)."""
        if self.pending is not None:
            self._write(self._line(self.pending), True)
            self.pending = None


def chain(*fns: Optional[Callable[[Any], None]]) -> Optional[Callable[[Any], None]]:
    """One callback calling each of `fns` that is not None, in order."""
    live = [f for f in fns if f is not None]
    if not live:
        return None

    def call(m: Any) -> None:
        for f in live:
            f(m)
    return call


def check_rows(client: Any, data: Any, batch_size: int, accumulate_steps: Optional[int], drop_last: bool,
               verbose: int) -> None:
    """drop_last against what train.run does: it leaves the rows past the
    last whole batch out of each epoch, and has no other way (refused when
    False and a batch would be partial; noted when verbose)."""
    if not isinstance(drop_last, bool):
        raise InvalidArgument("drop_last must be True or False, not %r" % (drop_last,))
    if (drop_last and not verbose) or not isinstance(data, Mapping) or not data:
        return
    first = next(iter(data.values()))
    rows = int(client.stat(first)["shape"][0]) if isinstance(first, str) else _rows(first)
    left = rows_left_out(rows, batch_size, accumulate_steps)
    if left and not drop_last:
        raise InvalidArgument("drop_last=False: train.run has no partial batches; it leaves %d of the %d rows "
                              "out of each epoch (a different %d each epoch when shuffled). Use a batch_size "
                              "that divides the rows, or drop_last=True" % (left, rows, left))
    if left:
        print("note: each epoch leaves %d of %d rows out (drop_last=True: the last partial batch)" % (left, rows))


def eval_request(eval: Optional[Mapping[str, Any]], names: Mapping[str, str], ids: _metrics.Ids) -> Dict[str, Any]:
    """train.run's eval map: `eval`'s other keys, the staged held-out data
    `names` and the metric nodes of `ids`."""
    ev = {k: v for k, v in (eval or {}).items() if k != "metrics"}
    ev["data"] = dict(names)
    if _metrics.daemon_ids(ids):
        ev["metrics"] = _metrics.daemon_ids(ids)
    return ev


def eval_callback(ids: _metrics.Ids, prefix: str, bar: Optional[ProgressBar],
                  on_eval: Optional[Callable[[Dict[str, Any]], None]]) -> Optional[Callable[[Any], None]]:
    """train.eval maps with the metrics under their names, to `bar` (each
    figure as `prefix` + name) and `on_eval`."""
    if bar is None and on_eval is None:
        return None

    def note(e: Dict[str, Any]) -> None:
        e = _metrics.rename_eval(e, ids)
        if bar is not None:
            bar.evaluated(e, _metrics.shown(e, prefix))
        if on_eval is not None:
            on_eval(e)
    return note


def fit_result(model: Any, res: Dict[str, Any], ids: _metrics.Ids, held_out: bool,
               data: Mapping[str, str], batch_size: int, bar: Optional[ProgressBar]) -> Dict[str, Any]:
    """The run's result with the metrics under their names: "val_loss" and
    "val_metrics" from the run's evaluation of held-out data, else
    "metrics" measured now on the training data `data` (model.evaluate,
    eval mode, in slices of `batch_size`)."""
    res = dict(res)
    ev = res.get("eval")
    if isinstance(ev, Mapping):
        res["eval"] = _metrics.rename_eval(ev, ids)
        if held_out:
            res["val_loss"] = ev.get("loss")
            res["val_metrics"] = _metrics.rename(ev, ids)
    if ids and not held_out:
        got = model.client.model_evaluate(model.name, data, _metrics.daemon_ids(ids), batch_size)
        res["metrics"] = _metrics.rename(got, ids)
        if bar is not None:
            bar.close()
            bar.out.write("metrics on the training data: %s\n"
                          % "  ".join("%s %.4f" % kv for kv in res["metrics"].items()))
    return res
