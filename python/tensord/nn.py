"""A small layer builder that reads like PyTorch and produces the layer form of
``model.define`` (docs/training.md, "A model as layers"; docs/protocol.md, model.define)::

    import tensord
    from tensord import nn

    net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.1),
                        nn.Linear(256, 10, name="head"))
    net.spec()       # [{"type": "linear", "in": 784, "out": 256}, {"type": "relu"}, ...]
    model = c.define_model("mlp", layers=net, inputs={"x": ("f32", [1, 784]),
                                                      "y": ("i32", [1])},
                           loss=nn.CrossEntropyLoss(target="y"),
                           optimizer={"type": "adam", "lr": 1e-3})

Nothing here talks to the daemon: a module is a description. The daemon
expands it into graph nodes, creates and initialises the parameters on the
GPU and names them as torch's ``state_dict`` does (``mlp/head.weight``, in
torch's layouts). :meth:`Module.named_parameters` says which names and shapes
it will create, without a daemon.

Names: a layer's name is ``name=`` or its key in ``Sequential(OrderedDict)``,
else its index in its parent (as torch's ``nn.Sequential``); a path joins the
names with ``.``. A name is 1-64 bytes of ``A-Z a-z 0-9 _ : -`` (no ``.`` or
``/``, which separate paths and parameters).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "Module", "Sequential", "Residual", "Linear", "Conv1d", "Conv2d", "LSTM", "GRU", "BatchNorm1d", "BatchNorm2d",
    "LayerNorm", "RMSNorm", "Embedding", "Dropout", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU",
    "LeakyReLU", "Identity", "PositionalEmbedding",
    "Softmax", "LogSoftmax", "Flatten", "MaxPool2d", "AvgPool2d", "MultiheadAttention",
    "Attention", "TransformerBlock", "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "INITS", "Shape",
]

#: a parameter's shape
Shape = Tuple[int, ...]
#: the initialiser names a layer's ``init`` may use (besides {"normal": std} and
#: {"uniform": bound})
INITS = ("kaiming_uniform", "kaiming_normal", "xavier_uniform", "xavier_normal", "zeros", "ones")
_NAME = re.compile(r"^[A-Za-z0-9_:-]{1,64}$")
Init = Union[str, Mapping[str, float]]


def _fail(msg: str) -> "Exception":
    from .errors import InvalidArgument
    return InvalidArgument(msg)


def _pos_int(what: str, v: Any, zero: bool = False) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero else 1):
        raise _fail("%s must be an int >= %d, not %r" % (what, 0 if zero else 1, v))
    return v


def _number(what: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise _fail("%s must be a number in [%g, %g], not %r" % (what, lo, hi, v))
    return float(v)


def _pair(what: str, v: Any, zero: bool = False) -> Union[int, List[int]]:
    """An int or an (h, w) pair, as torch's kernel_size/stride/padding."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise _fail("%s must be an int or a pair, not %r" % (what, v))
        a, b = (_pos_int(what, x, zero) for x in v)
        return a if a == b else [a, b]
    return _pos_int(what, v, zero)


def _single(what: str, v: Any, zero: bool = False) -> int:
    """An int or a 1-tuple, as torch's Conv1d kernel_size/stride/padding."""
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise _fail("%s must be an int or a 1-tuple, not %r" % (what, v))
        v = v[0]
    return _pos_int(what, v, zero)


def _hw(v: Union[int, List[int]]) -> Tuple[int, int]:
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _init(v: Optional[Mapping[str, Init]], params: Sequence[str]) -> Optional[Dict[str, Any]]:
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise _fail("init must be a dict {param: initialiser}, not %r" % (v,))
    out: Dict[str, Any] = {}
    for k, i in v.items():
        if k not in params:
            raise _fail("init: this layer has no parameter %r (it has %s)" % (k, ", ".join(params) or "none"))
        if isinstance(i, str):
            if i not in INITS:
                raise _fail("init[%r]: unknown initialiser %r (one of %s, {'normal': std}, "
                            "{'uniform': bound})" % (k, i, ", ".join(INITS)))
        elif isinstance(i, Mapping) and len(i) == 1 and next(iter(i)) in ("normal", "uniform"):
            _number("init[%r] %s" % (k, next(iter(i))), next(iter(i.values())), 0, float("inf"))
        else:
            raise _fail("init[%r] must be one of %s, {'normal': std} or {'uniform': bound}, not %r"
                        % (k, ", ".join(INITS), i))
        out[k] = dict(i) if isinstance(i, Mapping) else i
    return out


class Module:
    """One layer: its ``type``, keys and optional name. ``spec()`` gives the
    list model.define's ``layers`` takes (a Sequential: its children; any
    other module: a list of one)."""

    type: str = ""
    #: parameter names this layer owns directly, in definition order
    _param_names: Tuple[str, ...] = ()

    def __init__(self, *, name: Optional[str] = None, init: Optional[Mapping[str, Init]] = None) -> None:
        if name is not None and (not isinstance(name, str) or not _NAME.match(name)):
            raise _fail("layer name %r: 1-64 bytes of A-Z a-z 0-9 _ : - (no '.' or '/')" % (name,))
        self.name = name
        self.keys: Dict[str, Any] = {}
        self.init = _init(init, self._param_names) if init is not None else None

    # ---- what the daemon gets ----
    def layer(self) -> Dict[str, Any]:
        """This layer as one map of the ``layers`` list."""
        d: Dict[str, Any] = {"type": self.type}
        d.update(self.keys)
        if self.name is not None:
            d["name"] = self.name
        if self.init:
            d["init"] = self.init
        return d

    def spec(self) -> List[Dict[str, Any]]:
        """The ``layers`` list of model.define (LAYERS: a sequential stack)."""
        return [self.layer()]

    # ---- what it will create ----
    def _params(self) -> List[Tuple[str, Shape]]:
        return []

    def _buffers(self) -> List[Tuple[str, Shape]]:
        return []

    def _children(self) -> List[Tuple[str, "Module"]]:
        return []

    def named_parameters(self, prefix: str = "") -> List[Tuple[str, Shape]]:
        """(name, shape) of every parameter the daemon creates for this layer,
        in definition order; names are paths as torch's ``state_dict``
        (``"0.weight"``, ``"blocks.1.attn.q.weight"``); `prefix` goes first
        (``"mlp/"`` gives the stored tensor names of model ``mlp``)."""
        return list(self._walk(prefix, buffers=False))

    def named_buffers(self, prefix: str = "") -> List[Tuple[str, Shape]]:
        """(name, shape) of every buffer (batch_norm running statistics)."""
        return list(self._walk(prefix, buffers=True))

    def _walk(self, prefix: str, buffers: bool) -> Iterator[Tuple[str, Shape]]:
        for p, shape in (self._buffers() if buffers else self._params()):
            yield prefix + p, shape
        for cname, child in self._children():
            yield from child._walk(prefix + cname + ".", buffers)

    def param_count(self) -> int:
        """Total elements of all parameters (model.stat's ``param_count``)."""
        total = 0
        for _, shape in self.named_parameters():
            n = 1
            for d in shape:
                n *= d
            total += n
        return total

    def __repr__(self) -> str:
        keys = ", ".join("%s=%r" % kv for kv in self.keys.items())
        if self.name is not None:
            keys = ("%s, name=%r" % (keys, self.name)) if keys else "name=%r" % self.name
        return "%s(%s)" % (type(self).__name__, keys)


def _named_children(mods: Sequence[Any]) -> List[Tuple[str, Module]]:
    """Children of a container: from Modules (names: their own or their
    index) or one Mapping name -> Module."""
    if len(mods) == 1 and isinstance(mods[0], Mapping):
        items = []
        for k, m in mods[0].items():
            if not isinstance(m, Module):
                raise _fail("layer %r is a %s, not a tensord.nn module" % (k, type(m).__name__))
            if not isinstance(k, str) or not _NAME.match(k):
                raise _fail("layer name %r: 1-64 bytes of A-Z a-z 0-9 _ : - (no '.' or '/')" % (k,))
            if m.name is not None and m.name != k:
                raise _fail("layer %r also has name=%r" % (k, m.name))
            items.append((k, m))
    else:
        items = []
        for i, m in enumerate(mods):
            if not isinstance(m, Module):
                raise _fail("layer %d is a %s, not a tensord.nn module" % (i, type(m).__name__))
            items.append((m.name if m.name is not None else str(i), m))
    seen = set()
    for k, _ in items:
        if k in seen:
            raise _fail("two layers are named %r" % k)
        seen.add(k)
    return items


class Sequential(Module):
    """Layers applied in order: ``Sequential(m1, m2, ...)`` or
    ``Sequential(OrderedDict(name=m, ...))``. ``spec()`` is the list of its
    children (what model.define's ``layers`` takes); nested in another
    container it is ``{"type": "sequential", "layers": [...]}``."""

    type = "sequential"

    def __init__(self, *mods: Any, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        self.children = _named_children(mods)
        self._explicit = len(mods) == 1 and isinstance(mods[0], Mapping)

    def _child_layers(self) -> List[Dict[str, Any]]:
        out = []
        for k, m in self.children:
            d = m.layer()
            if self._explicit:
                d["name"] = k
            out.append(d)
        return out

    def layer(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"type": self.type, "layers": self._child_layers()}
        if self.name is not None:
            d["name"] = self.name
        return d

    def spec(self) -> List[Dict[str, Any]]:
        return self._child_layers()

    def _children(self) -> List[Tuple[str, Module]]:
        return list(self.children)

    def __len__(self) -> int:
        return len(self.children)

    def __getitem__(self, i: Union[int, str]) -> Module:
        if isinstance(i, str):
            return dict(self.children)[i]
        return self.children[i][1]

    def __repr__(self) -> str:
        inner = "".join("\n  (%s): %s" % (k, m) for k, m in self.children)
        return "Sequential(%s\n)" % inner if inner else "Sequential()"


class Residual(Sequential):
    """``x + Sequential(*mods)(x)`` (the children's output must have x's shape)."""

    type = "residual"

    def spec(self) -> List[Dict[str, Any]]:
        return [self.layer()]


class Linear(Module):
    """``y = x @ weight.T + bias``: weight ``[out, in]``, bias ``[out]``,
    both U(±1/√in) by default (torch's)."""

    type = "linear"
    _param_names = ("weight", "bias")

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 name: Optional[str] = None, init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        self.keys = {"in": _pos_int("in_features", in_features), "out": _pos_int("out_features", out_features)}
        if not bias:
            self.keys["bias"] = False

    def _params(self) -> List[Tuple[str, Shape]]:
        p: List[Tuple[str, Shape]] = [("weight", (self.keys["out"], self.keys["in"]))]
        if self.keys.get("bias", True):
            p.append(("bias", (self.keys["out"],)))
        return p


class _Conv(Module):
    """What Conv1d and Conv2d share: their keys, from sizes normalised by
    `_size` (one int for 1-D, an int or a pair for 2-D)."""

    _param_names = ("weight", "bias")

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Union[int, Sequence[int]],
                 stride: Union[int, Sequence[int]] = 1, padding: Union[int, Sequence[int]] = 0,
                 bias: bool = True, *, name: Optional[str] = None,
                 init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        size = self._size
        self.keys = {"in_channels": _pos_int("in_channels", in_channels),
                     "out_channels": _pos_int("out_channels", out_channels),
                     "kernel_size": size("kernel_size", kernel_size)}
        s, p = size("stride", stride), size("padding", padding, zero=True)
        if s != 1:
            self.keys["stride"] = s
        if p != 0:
            self.keys["padding"] = p
        if not bias:
            self.keys["bias"] = False

    def _kernel(self) -> Tuple[int, ...]:
        raise NotImplementedError

    def _params(self) -> List[Tuple[str, Shape]]:
        p: List[Tuple[str, Shape]] = [("weight", (self.keys["out_channels"], self.keys["in_channels"])
                                       + self._kernel())]
        if self.keys.get("bias", True):
            p.append(("bias", (self.keys["out_channels"],)))
        return p


class Conv2d(_Conv):
    """2-D convolution, input ``[N, C, H, W]``: weight ``[out, in, kh, kw]``."""

    type = "conv2d"
    _size = staticmethod(_pair)

    def _kernel(self) -> Tuple[int, ...]:
        return tuple(_hw(self.keys["kernel_size"]))


class Conv1d(_Conv):
    """1-D convolution, input ``[N, C, L]`` -> ``[N, out, L']``: weight
    ``[out, in, k]`` (torch's layout: a torch state dict loads as it is),
    bias ``[out]``, both U(±1/√(in·k)). The daemon runs it as a conv2d of
    height 1; the input's C and L must be declared."""

    type = "conv1d"
    _size = staticmethod(_single)

    def _kernel(self) -> Tuple[int, ...]:
        return (self.keys["kernel_size"],)


class LSTM(Module):
    """One unidirectional LSTM layer over ``[N, T, input_size]`` (batch
    first, T declared, 1 to 64 steps), unrolled by the daemon into the
    graph. Its output is the sequence of hidden states ``[N, T, H]`` (torch's
    ``output``); ``return_sequences=False`` gives the last one, ``[N, H]``
    (torch's ``h_n[-1]``). (h_n, c_n) are not returned; the initial states
    are zeros. Parameters as torch's: ``weight_ih_l0 [G·H, I]``,
    ``weight_hh_l0 [G·H, H]``, ``bias_ih_l0`` and ``bias_hh_l0 [G·H]``, all
    U(±1/√H), gates in torch's order (LSTM i f g o, G = 4; GRU r z n, G = 3).
    ``num_layers`` must be 1 (stack layers in a Sequential: their names then
    differ from torch's ``_l1``) and ``batch_first`` True (torch's default
    is False)."""

    type = "lstm"
    _gates = 4
    _param_names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = True, *, return_sequences: bool = True, name: Optional[str] = None,
                 init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        if _pos_int("num_layers", num_layers) != 1:
            raise _fail("num_layers must be 1: stack %s layers in a Sequential" % type(self).__name__)
        if batch_first is not True:
            raise _fail("batch_first must be True: the batch is dim 0 of every tensord model "
                        "(permute [T, N, I] data to [N, T, I])")
        self.keys = {"input_size": _pos_int("input_size", input_size),
                     "hidden_size": _pos_int("hidden_size", hidden_size)}
        if not bias:
            self.keys["bias"] = False
        if not return_sequences:
            self.keys["return_sequences"] = False

    def _params(self) -> List[Tuple[str, Shape]]:
        g, h = self._gates * self.keys["hidden_size"], self.keys["hidden_size"]
        p: List[Tuple[str, Shape]] = [("weight_ih_l0", (g, self.keys["input_size"])), ("weight_hh_l0", (g, h))]
        if self.keys.get("bias", True):
            p += [("bias_ih_l0", (g,)), ("bias_hh_l0", (g,))]
        return p


class GRU(LSTM):
    """One unidirectional GRU layer, as :class:`LSTM` (3 gates r z n, torch's
    equations: n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),
    h' = (1 − z) ⊙ n + z ⊙ h)."""

    type = "gru"
    _gates = 3


class BatchNorm2d(Module):
    """Batch normalisation over dim 1 (``batch_norm``): weight and bias
    ``[C]``, buffers running_mean and running_var, which the model's training
    steps update (torch's momentum) and eval mode uses."""

    type = "batch_norm"
    _param_names = ("weight", "bias")

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, *,
                 name: Optional[str] = None, init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        self.keys = {"num_features": _pos_int("num_features", num_features)}
        if eps != 1e-5:
            self.keys["eps"] = _number("eps", eps, 0, 1)
        if momentum != 0.1:
            self.keys["momentum"] = _number("momentum", momentum, 0, 1)

    def _params(self) -> List[Tuple[str, Shape]]:
        c = self.keys["num_features"]
        return [("weight", (c,)), ("bias", (c,))]

    def _buffers(self) -> List[Tuple[str, Shape]]:
        c = self.keys["num_features"]
        return [("running_mean", (c,)), ("running_var", (c,))]


BatchNorm1d = BatchNorm2d


def _norm_shape(v: Any) -> int:
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise _fail("normalized_shape: only one dimension (an int) is supported, not %r" % (v,))
        v = v[0]
    return _pos_int("normalized_shape", v)


class LayerNorm(Module):
    """Layer normalisation over the last dim: weight (ones), bias (zeros)."""

    type = "layer_norm"
    _param_names = ("weight", "bias")

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: float = 1e-5, *,
                 name: Optional[str] = None, init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        self.keys = {"normalized_shape": _norm_shape(normalized_shape)}
        if eps != 1e-5:
            self.keys["eps"] = _number("eps", eps, 0, 1)

    def _params(self) -> List[Tuple[str, Shape]]:
        n = self.keys["normalized_shape"]
        return [("weight", (n,)), ("bias", (n,))]


class RMSNorm(Module):
    """RMS normalisation over the last dim: weight (ones). `eps` None is the
    op's default (1e-6)."""

    type = "rms_norm"
    _param_names = ("weight",)

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: Optional[float] = None, *,
                 name: Optional[str] = None, init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        self.keys = {"normalized_shape": _norm_shape(normalized_shape)}
        if eps is not None:
            self.keys["eps"] = _number("eps", eps, 0, 1)

    def _params(self) -> List[Tuple[str, Shape]]:
        return [("weight", (self.keys["normalized_shape"],))]


class Embedding(Module):
    """A lookup table ``weight [num_embeddings, embedding_dim]`` (normal(0, 1));
    input i32 indices of any shape, output ``indices.shape + [D]``."""

    type = "embedding"
    _param_names = ("weight",)

    def __init__(self, num_embeddings: int, embedding_dim: int, *, name: Optional[str] = None,
                 init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        self.keys = {"num_embeddings": _pos_int("num_embeddings", num_embeddings),
                     "embedding_dim": _pos_int("embedding_dim", embedding_dim)}

    def _params(self) -> List[Tuple[str, Shape]]:
        return [("weight", (self.keys["num_embeddings"], self.keys["embedding_dim"]))]


class PositionalEmbedding(Module):
    """Learned positions (GPT's): ``weight [max_len, dim]`` (normal(0, 0.02));
    adds its first T rows to an input ``[..., T, dim]``."""

    type = "pos_embedding"
    _param_names = ("weight",)

    def __init__(self, max_len: int, dim: int, *, name: Optional[str] = None,
                 init: Optional[Mapping[str, Init]] = None) -> None:
        super().__init__(name=name, init=init)
        self.keys = {"max_len": _pos_int("max_len", max_len), "dim": _pos_int("dim", dim)}

    def _params(self) -> List[Tuple[str, Shape]]:
        return [("weight", (self.keys["max_len"], self.keys["dim"]))]


class Dropout(Module):
    """Zeroes elements with probability `p` in training steps (a fresh mask
    every step), the identity in eval mode."""

    type = "dropout"

    def __init__(self, p: float = 0.5, *, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        if _number("p", p, 0, 1) != 0.5:
            self.keys["p"] = float(p)


class _Activation(Module):
    def __init__(self, *, name: Optional[str] = None) -> None:
        super().__init__(name=name)


class ReLU(_Activation):
    type = "relu"


class GELU(Module):
    """GELU; ``approximate="tanh"`` for the tanh approximation (torch's)."""

    type = "gelu"

    def __init__(self, approximate: str = "none", *, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        if approximate not in ("none", "tanh"):
            raise _fail("approximate must be 'none' or 'tanh', not %r" % (approximate,))
        if approximate != "none":
            self.keys["approximate"] = approximate


class Tanh(_Activation):
    type = "tanh"


class Sigmoid(_Activation):
    type = "sigmoid"


class SiLU(_Activation):
    type = "silu"


class LeakyReLU(Module):
    """max(x, negative_slope * x), torch's nn.LeakyReLU (slope 0..1)."""

    type = "leaky_relu"

    def __init__(self, negative_slope: float = 0.01, *, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        if _number("negative_slope", negative_slope, 0, 1) != 0.01:
            self.keys["negative_slope"] = float(negative_slope)


class Identity(_Activation):
    """Its input unchanged (torch's nn.Identity): a named point in a stack."""

    type = "identity"


class Softmax(Module):
    type = "softmax"

    def __init__(self, dim: int = -1, *, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise _fail("dim must be an int, not %r" % (dim,))
        if dim != -1:
            self.keys["dim"] = dim


class LogSoftmax(Softmax):
    type = "log_softmax"


class Flatten(Module):
    """Flattens dims `start_dim`.. into one (``[N, C, H, W]`` -> ``[N, C·H·W]``)."""

    type = "flatten"

    def __init__(self, start_dim: int = 1, *, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        if _pos_int("start_dim", start_dim, zero=True) != 1:
            self.keys["start_dim"] = start_dim


class MaxPool2d(Module):
    """2-D pooling over ``[N, C, H, W]``; `stride` defaults to `kernel_size`."""

    type = "max_pool2d"

    def __init__(self, kernel_size: Union[int, Sequence[int]], stride: Optional[Union[int, Sequence[int]]] = None,
                 *, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        self.keys = {"kernel_size": _pair("kernel_size", kernel_size)}
        if stride is not None and _pair("stride", stride) != self.keys["kernel_size"]:
            self.keys["stride"] = _pair("stride", stride)


class AvgPool2d(MaxPool2d):
    type = "avg_pool2d"


class MultiheadAttention(Module):
    """Multi-head self-attention over ``[B, T, dim]``: linears ``q``, ``k``,
    ``v``, ``out`` (each weight ``[dim, dim]``); `causal` masks the future."""

    type = "attention"

    def __init__(self, embed_dim: int, num_heads: int, *, causal: bool = False, bias: bool = True,
                 dropout: float = 0.0, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        d, h = _pos_int("embed_dim", embed_dim), _pos_int("num_heads", num_heads)
        if d % h:
            raise _fail("embed_dim %d is not a multiple of num_heads %d" % (d, h))
        self.keys = {"dim": d, "heads": h}
        if causal:
            self.keys["causal"] = True
        if not bias:
            self.keys["bias"] = False
        if _number("dropout", dropout, 0, 1) != 0:
            self.keys["dropout"] = float(dropout)

    def _params(self) -> List[Tuple[str, Shape]]:
        d = self.keys["dim"]
        out: List[Tuple[str, Shape]] = []
        for lin in ("q", "k", "v", "out"):
            out.append(("%s.weight" % lin, (d, d)))
            if self.keys.get("bias", True):
                out.append(("%s.bias" % lin, (d,)))
        return out


def Attention(dim: int, heads: int, *, causal: bool = False, bias: bool = True, dropout: float = 0.0,
              name: Optional[str] = None) -> MultiheadAttention:
    """``MultiheadAttention(dim, heads, ...)`` under the layer's own key names."""
    return MultiheadAttention(dim, heads, causal=causal, bias=bias, dropout=dropout, name=name)


class TransformerBlock(Module):
    """A pre-norm block: ``x + attn(ln1(x))``, then ``+ mlp(ln2(x))`` with
    mlp = ``fc1`` (dim -> hidden, default 4·dim), GELU, ``fc2``."""

    type = "transformer_block"

    def __init__(self, dim: int, heads: int, hidden: Optional[int] = None, *, causal: bool = False,
                 dropout: float = 0.0, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        d, h = _pos_int("dim", dim), _pos_int("heads", heads)
        if d % h:
            raise _fail("dim %d is not a multiple of heads %d" % (d, h))
        self.keys = {"dim": d, "heads": h}
        if hidden is not None and _pos_int("hidden", hidden) != 4 * d:
            self.keys["hidden"] = hidden
        if causal:
            self.keys["causal"] = True
        if _number("dropout", dropout, 0, 1) != 0:
            self.keys["dropout"] = float(dropout)

    def _params(self) -> List[Tuple[str, Shape]]:
        d = self.keys["dim"]
        hid = self.keys.get("hidden", 4 * d)
        out: List[Tuple[str, Shape]] = [("ln1.weight", (d,)), ("ln1.bias", (d,))]
        for lin in ("q", "k", "v", "out"):
            out += [("attn.%s.weight" % lin, (d, d)), ("attn.%s.bias" % lin, (d,))]
        out += [("ln2.weight", (d,)), ("ln2.bias", (d,)),
                ("mlp.fc1.weight", (hid, d)), ("mlp.fc1.bias", (hid,)),
                ("mlp.fc2.weight", (d, hid)), ("mlp.fc2.bias", (d,))]
        return out


# ---- losses: model.define's `loss` map --------------------------------------

def CrossEntropyLoss(target: str, reduction: str = "mean") -> Dict[str, Any]:
    """``{"type": "cross_entropy", "target": target}``: the loss of the
    stack's output (logits ``[N, C]``) against i32 classes ``[N]``."""
    return _loss("cross_entropy", target, reduction)


def MSELoss(target: str, reduction: str = "mean") -> Dict[str, Any]:
    """``{"type": "mse", "target": target}``."""
    return _loss("mse", target, reduction)


def BCEWithLogitsLoss(target: str, reduction: str = "mean") -> Dict[str, Any]:
    """``{"type": "bce_with_logits", "target": target}``: torch's
    BCEWithLogitsLoss, logits and f32 targets in 0..1 of one shape."""
    return _loss("bce_with_logits", target, reduction)


def _loss(kind: str, target: str, reduction: str) -> Dict[str, Any]:
    if not isinstance(target, str) or not target:
        raise _fail("target must be an input or node id (a str), not %r" % (target,))
    if reduction not in ("mean", "sum"):
        raise _fail("reduction must be 'mean' or 'sum', not %r" % (reduction,))
    d = {"type": kind, "target": target}
    if reduction != "mean":
        d["reduction"] = reduction
    return d


def as_layers(layers: Any) -> List[Dict[str, Any]]:
    """model.define's `layers` from a Module (its spec()), or a list of layer
    maps and modules as they are."""
    if isinstance(layers, Module):
        return layers.spec()
    if isinstance(layers, Mapping) or isinstance(layers, (str, bytes)):
        raise _fail("layers must be a tensord.nn module or a list of layer maps, not a %s"
                    % type(layers).__name__)
    out = []
    try:
        items = list(layers)
    except TypeError:
        raise _fail("layers must be a tensord.nn module or a list of layer maps, not a %s"
                    % type(layers).__name__) from None
    for i, m in enumerate(items):
        if isinstance(m, Module):
            out.append(m.layer())
        elif isinstance(m, Mapping) and isinstance(m.get("type"), str):
            out.append(dict(m))
        else:
            raise _fail("layers[%d] must be a tensord.nn module or a map with a 'type', not %r" % (i, m))
    if not out:
        raise _fail("layers is empty")
    return out

