"""Keras's ``model.summary()`` for a tensord model: a table of its layers
(layer form) or nodes (graph form) with their output shapes, where a probe
can tell them, and parameter counts, from ``model.stat``."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import dtypes as _dt
from .errors import TensordError
from .metrics import PREFIX

__all__ = ["rows", "probe_shapes", "table"]

#: a row: (name, type, node id whose shape is shown, parameter count)
Row = Tuple[str, str, str, int]
_MAX_OUTPUTS = 64   # model.predict's limit on outputs


def _size(p: Mapping[str, Any]) -> int:
    return int(np.prod(p.get("shape") or [], dtype=np.int64))


def _layer_rows(stat: Mapping[str, Any]) -> List[Row]:
    """One row per top-level layer; its count sums its sublayers' params."""
    out: List[Row] = []
    params = stat.get("parameters") or []
    for i, spec in enumerate(stat.get("layers") or []):
        path = spec.get("name") or str(i)
        n = sum(_size(p) for p in params
                if p.get("layer") == path or str(p.get("layer", "")).startswith(path + "."))
        out.append((path, spec.get("type", "?"), path, n))
    return out


def _node_rows(stat: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> List[Row]:
    """One row per graph node (not the metric nodes this package adds);
    a node's count is that of the parameters it reads."""
    sizes = {p["name"]: _size(p) for p in stat.get("params") or [] if isinstance(p, Mapping)}
    out: List[Row] = []
    for n in nodes:
        nid = n.get("id")
        if not isinstance(nid, str) or nid.startswith(PREFIX):
            continue
        ins = [i for i in n.get("inputs") or [] if isinstance(i, str)]
        out.append((nid, str(n.get("op", "?")), nid, sum(sizes.get(i, 0) for i in ins)))
    return out


def rows(stat: Mapping[str, Any]) -> List[Row]:
    """The table's rows: the layers and then the raw nodes of a layer
    model, the nodes of a graph model."""
    raw = stat.get("definition", {}).get("nodes") or []
    if stat.get("layers"):
        return _layer_rows(stat) + _node_rows(stat, raw)
    return _node_rows(stat, raw)


def _example(stat: Mapping[str, Any]) -> Tuple[Dict[str, np.ndarray], int]:
    """Zeros of each input's declared dtype and shape, and their row count."""
    feed: Dict[str, np.ndarray] = {}
    n = 0
    for i in stat.get("definition", {}).get("inputs") or []:
        if (isinstance(i, Mapping) and i.get("dtype") in _dt.NUMPY_DTYPES
                and isinstance(i.get("shape"), list)):
            feed[i["name"]] = np.zeros(i["shape"], _dt.NUMPY_DTYPES[i["dtype"]])
            n = n or (i["shape"][0] if i["shape"] else 0)
    return feed, n


def probe_shapes(predict: Any, stat: Mapping[str, Any], ids: Sequence[str]) -> Dict[str, Tuple[Any, ...]]:
    """The output shapes of node `ids`: `predict` (Model.predict) on zeros
    of the declared inputs; the batch dim shows as None. Shapes it cannot
    get (no declared shapes, a node that fails) are left out."""
    feed, batch = _example(stat)
    out: Dict[str, Tuple[Any, ...]] = {}
    if not feed:
        return out
    for at in range(0, len(ids), _MAX_OUTPUTS):
        chunk = list(ids[at:at + _MAX_OUTPUTS])
        try:
            got = predict(feed, outputs=chunk)
        except TensordError:
            continue
        for k, a in got.items():
            shape = tuple(a.shape)
            out[k] = ((None,) + shape[1:]) if shape and shape[0] == batch else shape
    return out


def _shape_text(shape: Optional[Tuple[Any, ...]]) -> str:
    if shape is None:
        return "?"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _bytes_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0
    return "%d B" % n


def table(stat: Mapping[str, Any], shapes: Mapping[str, Tuple[Any, ...]]) -> str:
    """The summary text: a header, a row per layer or node, the totals."""
    body = [("%s (%s)" % (name, kind), _shape_text(shapes.get(nid)), "{:,}".format(n))
            for name, kind, nid, n in rows(stat)]
    head = ("Layer (type)" if stat.get("layers") else "Node (op)", "Output Shape", "Param #")
    w = [max(len(r[c]) for r in body + [head]) + 3 for c in range(3)]
    line = sum(w)
    fmt = lambda r: (r[0].ljust(w[0]) + r[1].ljust(w[1]) + r[2].rjust(w[2] - 3)).rstrip()  # noqa: E731
    params = [p for p in stat.get("params") or [] if isinstance(p, Mapping)]
    total = sum(_size(p) for p in params)
    nbytes = sum(int(p.get("bytes") or 0) for p in params)
    out = ['Model: "%s"  (%s form, step %d)' % (stat.get("name"), "layer" if stat.get("layers") else "graph",
                                                 int(stat.get("step", 0))),
           "_" * line, fmt(head), "=" * line]
    out += [fmt(r) for r in body]
    out += ["=" * line, "Total params: {:,} ({})".format(total, _bytes_text(nbytes)), "_" * line]
    return "\n".join(out)
