"""tensord.nn without a daemon: the layer specs (LAYERS.md / docs/protocol.md,
model.define's layer form), names and parameter shapes (torch's state_dict
names and layouts, written out by hand here), and the argument checks; and
Client.define_model's definition building (build_definition)."""
from collections import OrderedDict

import numpy as np
import pytest

import tensord
from tensord import nn
from tensord.model import build_definition, normalize_inputs


def test_mlp_spec_matches_the_contract_example():
    net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10, name="head"))
    assert net.spec() == [
        {"type": "linear", "in": 784, "out": 256},
        {"type": "relu"},
        {"type": "dropout", "p": 0.1},
        {"type": "linear", "in": 256, "out": 10, "name": "head"}]
    assert net.named_parameters("mlp/") == [
        ("mlp/0.weight", (256, 784)), ("mlp/0.bias", (256,)),
        ("mlp/head.weight", (10, 256)), ("mlp/head.bias", (10,))]
    assert net.param_count() == 784 * 256 + 256 + 2560 + 10
    assert len(net) == 4 and isinstance(net[3], nn.Linear) and net["head"] is net[3]


def test_every_layer_type_and_its_keys():
    layers = [
        (nn.Conv2d(1, 16, 3, padding=1), {"type": "conv2d", "in_channels": 1, "out_channels": 16,
                                           "kernel_size": 3, "padding": 1}),
        (nn.Conv2d(3, 4, (3, 5), stride=(2, 2), bias=False),
         {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": [3, 5], "stride": 2, "bias": False}),
        (nn.Conv1d(4, 8, 3), {"type": "conv1d", "in_channels": 4, "out_channels": 8, "kernel_size": 3}),
        (nn.Conv1d(4, 8, (5,), stride=(2,), padding=2, bias=False),
         {"type": "conv1d", "in_channels": 4, "out_channels": 8, "kernel_size": 5, "stride": 2, "padding": 2,
          "bias": False}),
        (nn.LSTM(10, 20), {"type": "lstm", "input_size": 10, "hidden_size": 20}),
        (nn.LSTM(10, 20, 1, False, True, return_sequences=False),
         {"type": "lstm", "input_size": 10, "hidden_size": 20, "bias": False, "return_sequences": False}),
        (nn.GRU(3, 4, batch_first=True), {"type": "gru", "input_size": 3, "hidden_size": 4}),
        (nn.BatchNorm2d(16), {"type": "batch_norm", "num_features": 16}),
        (nn.BatchNorm1d(8, eps=1e-3, momentum=0.2), {"type": "batch_norm", "num_features": 8, "eps": 1e-3,
                                                     "momentum": 0.2}),
        (nn.LayerNorm(32), {"type": "layer_norm", "normalized_shape": 32}),
        (nn.LayerNorm((32,), eps=1e-6), {"type": "layer_norm", "normalized_shape": 32, "eps": 1e-6}),
        (nn.RMSNorm(32), {"type": "rms_norm", "normalized_shape": 32}),
        (nn.Embedding(100, 16), {"type": "embedding", "num_embeddings": 100, "embedding_dim": 16}),
        (nn.PositionalEmbedding(64, 16), {"type": "pos_embedding", "max_len": 64, "dim": 16}),
        (nn.Dropout(), {"type": "dropout"}),
        (nn.ReLU(), {"type": "relu"}), (nn.GELU(), {"type": "gelu"}),
        (nn.GELU("tanh"), {"type": "gelu", "approximate": "tanh"}), (nn.Tanh(), {"type": "tanh"}),
        (nn.Sigmoid(), {"type": "sigmoid"}), (nn.SiLU(), {"type": "silu"}),
        (nn.LeakyReLU(), {"type": "leaky_relu"}),
        (nn.LeakyReLU(0.2), {"type": "leaky_relu", "negative_slope": 0.2}), (nn.Identity(), {"type": "identity"}),
        (nn.Softmax(), {"type": "softmax"}), (nn.LogSoftmax(dim=1), {"type": "log_softmax", "dim": 1}),
        (nn.Flatten(), {"type": "flatten"}), (nn.Flatten(2), {"type": "flatten", "start_dim": 2}),
        (nn.MaxPool2d(2), {"type": "max_pool2d", "kernel_size": 2}),
        (nn.AvgPool2d(3, stride=1), {"type": "avg_pool2d", "kernel_size": 3, "stride": 1}),
        (nn.MaxPool2d(2, stride=2), {"type": "max_pool2d", "kernel_size": 2}),
        (nn.MultiheadAttention(32, 4, causal=True), {"type": "attention", "dim": 32, "heads": 4, "causal": True}),
        (nn.Attention(32, 4, bias=False, dropout=0.1),
         {"type": "attention", "dim": 32, "heads": 4, "bias": False, "dropout": 0.1}),
        (nn.TransformerBlock(32, 4, causal=True), {"type": "transformer_block", "dim": 32, "heads": 4,
                                                   "causal": True}),
        (nn.TransformerBlock(32, 4, hidden=64), {"type": "transformer_block", "dim": 32, "heads": 4,
                                                 "hidden": 64}),
    ]
    assert nn.BCEWithLogitsLoss("t") == {"type": "bce_with_logits", "target": "t"}
    for mod, want in layers:
        assert mod.layer() == want, mod
        assert mod.spec() == [want]


def test_parameter_names_and_shapes():
    assert nn.Conv2d(1, 16, 3).named_parameters() == [("weight", (16, 1, 3, 3)), ("bias", (16,))]
    assert nn.Conv2d(2, 4, (3, 5), bias=False).named_parameters() == [("weight", (4, 2, 3, 5))]
    bn = nn.BatchNorm2d(6)
    assert bn.named_parameters() == [("weight", (6,)), ("bias", (6,))]
    assert bn.named_buffers("m/3.") == [("m/3.running_mean", (6,)), ("m/3.running_var", (6,))]
    assert nn.Embedding(10, 4).named_parameters() == [("weight", (10, 4))]
    assert nn.RMSNorm(5).named_parameters() == [("weight", (5,))]
    assert nn.Linear(3, 2, bias=False).named_parameters() == [("weight", (2, 3))]
    att = nn.MultiheadAttention(8, 2).named_parameters()
    assert att == [("q.weight", (8, 8)), ("q.bias", (8,)), ("k.weight", (8, 8)), ("k.bias", (8,)),
                   ("v.weight", (8, 8)), ("v.bias", (8,)), ("out.weight", (8, 8)), ("out.bias", (8,))]
    blk = dict(nn.TransformerBlock(8, 2, hidden=12).named_parameters("b."))
    assert blk["b.ln1.weight"] == (8,) and blk["b.attn.out.weight"] == (8, 8)
    assert blk["b.mlp.fc1.weight"] == (12, 8) and blk["b.mlp.fc2.weight"] == (8, 12)
    assert blk["b.ln2.bias"] == (8,) and len(blk) == 2 + 8 + 2 + 4
    assert nn.Sequential(nn.ReLU(), nn.Flatten(), nn.MaxPool2d(2)).named_parameters() == []
    # torch's Conv1d, LSTM and GRU state_dict names and shapes
    assert nn.Conv1d(3, 5, 4).named_parameters() == [("weight", (5, 3, 4)), ("bias", (5,))]
    assert nn.Conv1d(3, 5, 4, bias=False).named_parameters() == [("weight", (5, 3, 4))]
    assert nn.LSTM(6, 8).named_parameters("m/rnn.") == [
        ("m/rnn.weight_ih_l0", (32, 6)), ("m/rnn.weight_hh_l0", (32, 8)),
        ("m/rnn.bias_ih_l0", (32,)), ("m/rnn.bias_hh_l0", (32,))]
    assert nn.GRU(6, 8).named_parameters() == [
        ("weight_ih_l0", (24, 6)), ("weight_hh_l0", (24, 8)), ("bias_ih_l0", (24,)), ("bias_hh_l0", (24,))]
    assert nn.GRU(6, 8, bias=False).param_count() == 24 * 6 + 24 * 8
    assert nn.LSTM(2, 3, init={"weight_hh_l0": "zeros"}).layer()["init"] == {"weight_hh_l0": "zeros"}


def test_names_nesting_and_ordered_dict():
    net = nn.Sequential(OrderedDict([
        ("emb", nn.Embedding(50, 8)),
        ("blocks", nn.Sequential(nn.TransformerBlock(8, 2, causal=True), nn.TransformerBlock(8, 2, causal=True))),
        ("ln", nn.LayerNorm(8)),
        ("head", nn.Linear(8, 50))]))
    spec = net.spec()
    assert [d["name"] for d in spec] == ["emb", "blocks", "ln", "head"]
    assert spec[1] == {"type": "sequential", "name": "blocks", "layers": [
        {"type": "transformer_block", "dim": 8, "heads": 2, "causal": True},
        {"type": "transformer_block", "dim": 8, "heads": 2, "causal": True}]}
    names = [n for n, _ in net.named_parameters("lm/")]
    assert names[0] == "lm/emb.weight" and "lm/blocks.1.attn.q.weight" in names
    assert names[-2:] == ["lm/head.weight", "lm/head.bias"]
    res = nn.Residual(nn.LayerNorm(8), nn.Linear(8, 8), name="r")
    assert res.spec() == [{"type": "residual", "name": "r", "layers": [
        {"type": "layer_norm", "normalized_shape": 8}, {"type": "linear", "in": 8, "out": 8}]}]
    assert [n for n, _ in res.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    # a nested Sequential keeps its own name, its children their indices
    outer = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 3), name="inner"))
    assert [n for n, _ in outer.named_parameters()] == ["0.weight", "0.bias", "inner.0.weight", "inner.0.bias"]


def test_init_and_losses():
    lin = nn.Linear(4, 2, init={"weight": "xavier_uniform", "bias": "zeros"})
    assert lin.layer()["init"] == {"weight": "xavier_uniform", "bias": "zeros"}
    emb = nn.Embedding(4, 2, init={"weight": {"normal": 0.02}})
    assert emb.layer()["init"] == {"weight": {"normal": 0.02}}
    assert nn.CrossEntropyLoss(target="y") == {"type": "cross_entropy", "target": "y"}
    assert nn.MSELoss("t", reduction="sum") == {"type": "mse", "target": "t", "reduction": "sum"}


@pytest.mark.parametrize("make", [
    lambda: nn.Linear(0, 3), lambda: nn.Linear(3, 2.5), lambda: nn.Linear(True, 2),
    lambda: nn.Linear(2, 2, name="a.b"), lambda: nn.Linear(2, 2, name="a/b"), lambda: nn.Linear(2, 2, name=""),
    lambda: nn.Conv2d(1, 1, (3, 3, 3)), lambda: nn.Conv2d(1, 1, 3, padding=-1),
    lambda: nn.Dropout(1.5), lambda: nn.Dropout(-0.1), lambda: nn.BatchNorm2d(4, momentum=2),
    lambda: nn.LayerNorm((3, 4)), lambda: nn.MultiheadAttention(10, 3), lambda: nn.TransformerBlock(8, 3),
    lambda: nn.Softmax(dim=1.0), lambda: nn.GELU("erf"), lambda: nn.Linear(2, 2, init={"weight": "bogus"}),
    lambda: nn.Linear(2, 2, init={"gamma": "zeros"}), lambda: nn.Linear(2, 2, init={"weight": {"normal": -1}}),
    lambda: nn.Sequential(nn.ReLU(), "relu"),
    lambda: nn.Sequential(nn.ReLU(name="a"), nn.Tanh(name="a")),
    lambda: nn.Sequential(OrderedDict(a=nn.ReLU(name="b"))),
    lambda: nn.Sequential(OrderedDict([("x.y", nn.ReLU())])),
    lambda: nn.CrossEntropyLoss(target=""), lambda: nn.MSELoss("t", reduction="none"),
    lambda: nn.Conv1d(2, 2, (3, 3)), lambda: nn.Conv1d(2, 2, 0), lambda: nn.Conv1d(2, 2, 3, padding=-1),
    lambda: nn.Conv1d(2, 2, 3, stride=0), lambda: nn.LSTM(0, 4), lambda: nn.LSTM(4, 4, num_layers=2),
    lambda: nn.GRU(4, 4, batch_first=False), lambda: nn.GRU(4, 4.5), lambda: nn.LSTM(4, 4, init={"weight": "zeros"}),
    lambda: nn.GRU(4, 4, init={"weight_ih_l0": "orthogonal"}),
])
def test_bad_arguments_are_invalid_argument(make):
    with pytest.raises(tensord.InvalidArgument):
        make()


def test_build_definition_layer_and_graph_forms():
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    d = build_definition(layers=net, inputs={"x": ("f32", [1, 4]), "y": (np.int32, [1])},
                         loss=nn.CrossEntropyLoss(target="y"), optimizer={"type": "adam"}, seed=7)
    assert d == {"layers": net.spec(), "seed": 7, "loss": {"type": "cross_entropy", "target": "y"},
                 "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 4]},
                            {"name": "y", "dtype": "i32", "shape": [1]}],
                 "optimizer": {"type": "adam"}}
    # a list of modules and maps, extra raw nodes, an example array as the input
    d = build_definition(layers=[nn.Linear(4, 2), {"type": "relu"}], inputs={"x": np.zeros((1, 4), np.float32)},
                         loss="l", nodes=[{"id": "l", "op": "mean", "inputs": ["1"]}], input="x", dtype="float32")
    assert d["layers"] == [{"type": "linear", "in": 4, "out": 2}, {"type": "relu"}]
    assert d["inputs"] == [{"name": "x", "dtype": "f32", "shape": [1, 4]}] and d["dtype"] == "f32"
    assert d["input"] == "x" and d["loss"] == "l" and d["nodes"][0]["op"] == "mean"
    # the graph form sends exactly what today's daemon takes (no seed)
    g = build_definition(nodes=[{"id": "c", "op": "cast", "inputs": ["x"], "attrs": {"dtype": np.float16}}],
                         params=["w"], loss="loss", inputs=["x"], outputs="c")
    assert g == {"nodes": [{"id": "c", "op": "cast", "inputs": ["x"], "attrs": {"dtype": "f16"}}],
                 "params": ["w"], "loss": "loss", "inputs": ["x"], "outputs": ["c"]}
    assert normalize_inputs([{"name": "x", "dtype": np.float32, "shape": [1]}, "y"]) == [
        {"name": "x", "dtype": "f32", "shape": [1]}, "y"]


@pytest.mark.parametrize("kw", [
    dict(layers=nn.ReLU(), inputs=["x"]),                                  # no loss
    dict(layers=nn.ReLU(), loss="l"),                                      # layers without inputs
    dict(nodes=[{"id": "l", "op": "mean", "inputs": ["x"]}], loss="l"),    # graph form without params
    dict(nodes=[], params=["w"], loss={"type": "mse", "target": "y"}),     # a loss map without layers
    dict(nodes=[], params=["w"], loss="l", seed=3),                        # seed without layers
    dict(layers=[], inputs=["x"], loss="l"),                               # empty layers
    dict(layers={"type": "relu"}, inputs=["x"], loss="l"),                 # one map, not a list
    dict(layers=[3], inputs=["x"], loss="l"),
    dict(layers=nn.ReLU(), inputs={"x": 3}, loss="l"),
    dict(layers=nn.ReLU(), inputs={"x": ("f64", [1])}, loss="l"),
    dict(layers=nn.ReLU(), inputs=["x"], loss="l", seed=1.5),
])
def test_build_definition_refuses(kw):
    with pytest.raises(tensord.InvalidArgument):
        build_definition(**kw)
