"""Named metrics for :meth:`Model.train` and :meth:`Model.evaluate`, as
Keras's ``metrics=["accuracy"]``.

The daemon reports the loss and any *floating scalar node* of the model's
graph as a metric (``model.evaluate``'s ``metrics``, ``train.run``'s
``eval.metrics``). A name given here is one of:

- ``"loss"``: the model's loss (the evaluation's own ``loss``);
- the id of a node of the model (``"acc"`` in a model that has one): as before
  (an id that is also a name below means the model's node);
- ``"accuracy"`` (alias ``"acc"``): built from the model's loss node as graph
  nodes ``_metrics/accuracy...`` and added to the model's definition once
  (``model.define`` with ``replace``: parameters, state and step stay), as
  Keras's ``compile`` attaches metrics to a model. With a ``cross_entropy``
  loss it is the share of rows whose argmax over the logits equals the
  integer label; with ``bce_with_logits`` (one logit per label) the share of
  logits whose sign (> 0) equals the 0/1 label.

Results are reported under the names asked for (:func:`rename`)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import FailedPrecondition, InvalidArgument

__all__ = ["NAMES", "PREFIX", "Ids", "plan", "node_ids", "loss_node", "extended_definition",
           "check_no_running_job", "daemon_ids", "rename", "rename_eval", "shown"]

#: the friendly names (aliases map to them)
NAMES = ("accuracy", "loss")
_ALIASES = {"acc": "accuracy"}
#: the node ids this module adds to a model start with it
PREFIX = "_metrics/"
#: a metric plan: friendly name -> node id, None for the loss
Ids = Dict[str, Optional[str]]


def node_ids(stat: Mapping[str, Any]) -> List[str]:
    """The node ids of a model (its expanded nodes for the layer form)."""
    nodes = stat.get("nodes") or stat.get("definition", {}).get("nodes") or []
    return [n["id"] for n in nodes if isinstance(n, Mapping) and isinstance(n.get("id"), str)]


def loss_node(stat: Mapping[str, Any]) -> Mapping[str, Any]:
    """The node the model's loss is (a layer model's loss map is node "loss")."""
    d = stat.get("definition", {})
    loss_id = d["loss"] if isinstance(d.get("loss"), str) else "loss"
    nodes = stat.get("nodes") or d.get("nodes") or []
    for n in nodes:
        if isinstance(n, Mapping) and n.get("id") == loss_id:
            return n
    raise InvalidArgument("model %s: its loss node %r is not among its nodes" % (stat.get("name"), loss_id))


def _accuracy_nodes(stat: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The nodes of "accuracy", reading the loss node's logits and target."""
    loss = loss_node(stat)
    op, ins = loss.get("op"), loss.get("inputs") or []
    p = PREFIX + "accuracy"
    if "ignore_index" in (loss.get("attrs") or {}):
        raise InvalidArgument("metric 'accuracy': model %s's loss ignores some labels (ignore_index), which "
                              "this accuracy would count; give the id of a node of your own instead"
                              % stat.get("name"))
    if op == "cross_entropy" and len(ins) == 2:
        pred = [{"id": p + "/pred", "op": "argmax", "inputs": [ins[0]], "attrs": {"axis": -1}},
                {"id": p + "/hit", "op": "eq", "inputs": [p + "/pred", ins[1]]}]
    elif op in ("binary_cross_entropy_with_logits", "bce_with_logits") and len(ins) == 2:
        pred = [{"id": p + "/pos", "op": "gt", "inputs": [ins[0]], "attrs": {"scalar": 0}},
                {"id": p + "/posf", "op": "cast", "inputs": [p + "/pos"], "attrs": {"dtype": "f32"}},
                {"id": p + "/target", "op": "cast", "inputs": [ins[1]], "attrs": {"dtype": "f32"}},
                {"id": p + "/hit", "op": "eq", "inputs": [p + "/posf", p + "/target"]}]
    else:
        raise InvalidArgument("metric 'accuracy' needs a classification loss (cross_entropy or "
                              "bce_with_logits); model %s's loss node %r is %r: give the id of a node "
                              "of your own instead" % (stat.get("name"), loss.get("id"), op))
    return pred + [{"id": p + "/hitf", "op": "cast", "inputs": [p + "/hit"], "attrs": {"dtype": "f32"}},
                   {"id": p, "op": "mean", "inputs": [p + "/hitf"]}]


_BUILD = {"accuracy": _accuracy_nodes}


def plan(stat: Mapping[str, Any], names: Sequence[str]) -> Tuple[Ids, List[Dict[str, Any]]]:
    """For metric `names` of the model `stat` describes: name -> node id
    (None: the loss), and the nodes to add to the model (none when it has
    them). Refuses (InvalidArgument) a name that is neither known nor a node."""
    if isinstance(names, str):
        names = [names]
    have = set(node_ids(stat))
    ids: Ids = {}
    add: List[Dict[str, Any]] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidArgument("metrics must be a list of names, not %r" % (names,))
        if name in ids:
            continue
        if name == "loss":
            ids[name] = None                       # the evaluation's own loss
            continue
        if name in have:
            ids[name] = name                       # the model's own node
            continue
        kind = _ALIASES.get(name, name)
        if kind in _BUILD:
            ids[name] = PREFIX + kind
            if PREFIX + kind not in have and all(n["id"] != PREFIX + kind for n in add):
                add += _BUILD[kind](stat)
        else:
            raise InvalidArgument("metric %r is neither a node of model %s nor one of %s"
                                  % (name, stat.get("name"), ", ".join(NAMES)))
    return ids, add


def extended_definition(stat: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The model's definition with `nodes` appended, and its step kept."""
    d = dict(stat["definition"])
    d["nodes"] = list(d.get("nodes") or []) + list(nodes)
    d["step"] = int(stat.get("step", 0))
    return d


def check_no_running_job(jobs: Sequence[Mapping[str, Any]], model: str) -> None:
    """Refuse to redefine a model a running job trains (it would end it)."""
    for j in jobs:
        if j.get("model") == model and j.get("state") == "running":
            raise FailedPrecondition("model %s: job %s trains it now; adding metric nodes redefines the "
                                     "model, which would end that job: wait for it, or name a node of "
                                     "the model as the metric" % (model, j.get("job")))


def daemon_ids(ids: Ids) -> List[str]:
    """The node ids to ask the daemon for (the loss comes anyway)."""
    out: List[str] = []
    for v in ids.values():
        if v is not None and v not in out:
            out.append(v)
    return out


def rename(ev: Mapping[str, Any], ids: Ids) -> Dict[str, float]:
    """An evaluation's {"loss", "metrics": {id: v}} as {name: v} for `ids`."""
    got = ev.get("metrics") or {}
    return {name: (ev.get("loss") if nid is None else got.get(nid)) for name, nid in ids.items()}


def rename_eval(e: Mapping[str, Any], ids: Ids) -> Dict[str, Any]:
    """A train.eval map (or a result's "eval") with its metrics under their
    names; the loss stays "loss"."""
    if not ids:
        return dict(e)
    named = rename(e, ids)
    return dict(e, metrics={k: v for k, v in named.items() if ids[k] is not None})


def shown(e: Mapping[str, Any], prefix: str) -> Dict[str, Any]:
    """A renamed eval map's figures as a progress line shows them."""
    out = {prefix + "loss": e.get("loss")}
    out.update((prefix + k, v) for k, v in (e.get("metrics") or {}).items())
    return out
