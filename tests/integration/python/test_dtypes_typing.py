"""NumPy dtypes and names wherever a dtype is taken, the cast=True opt-in for
64-bit data, and the package's type hints and metadata (issue 19)."""
import inspect
import os
import re
import subprocess
import sys
import typing

import numpy as np
import pytest

import tensord
from tensord import dtypes as tdt

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")

# every spelling of each dtype: wire name, NumPy type, np.dtype, NumPy name, type code
SPELLINGS = {
    "f32": ["f32", np.float32, np.dtype("float32"), "float32", "<f4", "single"],
    "f16": ["f16", np.float16, np.dtype("float16"), "float16", "<f2", "half"],
    "i32": ["i32", np.int32, np.dtype("int32"), "int32", "<i4", "intc"],
    "u8": ["u8", np.uint8, np.dtype("uint8"), "uint8", "B", "ubyte"],
    "bf16": ["bf16", "bfloat16", "BFloat16"],
}
CASES = [(wire, sp) for wire, sps in SPELLINGS.items() for sp in sps]
IDS = ["%s-%s" % (w, getattr(sp, "__name__", sp)) for w, sp in CASES]


@pytest.mark.parametrize("wire,spelling", CASES, ids=IDS)
def test_dtype_name_spellings(wire, spelling):
    assert tdt.dtype_name(spelling) == wire


@pytest.mark.parametrize("bad,match", [
    (np.float64, "float64 has no tensord dtype"), ("float64", "float64"), ("int64", "int64"),
    (np.uint16, "bf16"), ("f8", "float64"), (np.bool_, "bool"), ("complex64", "complex64"),
    ("f64", "unknown dtype"), ("nonsense", "unknown dtype"), (None, "not a dtype"),
    (True, "not a dtype"), (3.5, "unknown dtype"), (np.dtype([("a", "f4")]), "no tensord"),
])
def test_dtype_name_refuses(bad, match):
    with pytest.raises(tensord.InvalidArgument, match=match) as ei:
        tdt.dtype_name(bad)
    assert ei.value.remote is False


@pytest.mark.parametrize("wire,spelling", CASES, ids=IDS)
def test_put_dtype_spellings(client, prefix, wire, spelling):
    x = np.array([[0.5, -2.0, 3.0], [7.0, 100.0, 1.25]])   # float64, exact in every dtype
    src = np.abs(x).astype(np.int64) if wire in ("i32", "u8") else x
    m = client.put(prefix + "t", src, dtype=spelling)
    assert m["dtype"] == wire and m["shape"] == [2, 3]
    got = client.get(prefix + "t")
    ref = src.astype(tdt.NUMPY_DTYPES[wire]) if wire != "bf16" else tensord.f32_to_bf16(src)
    assert got.dtype == ref.dtype and got.tolist() == ref.tolist()


@pytest.mark.parametrize("wire,spelling", CASES, ids=IDS)
def test_op_attr_dtype_spellings(client, prefix, wire, spelling):
    # creation op and cast: the attr arrives as the wire name
    z = client.op_run("full", [], attrs={"shape": [2, 2], "value": 3, "dtype": spelling})
    assert z.dtype == tdt.NUMPY_DTYPES[wire] and z.shape == (2, 2)
    ref = np.full((2, 2), 3, tdt.NUMPY_DTYPES[wire]) if wire != "bf16" else \
        tensord.f32_to_bf16(np.full((2, 2), 3.0))
    assert z.tolist() == ref.tolist()
    client.put(prefix + "x", np.array([1.0, 2.0, 4.0], np.float32))
    m = client.op_run("cast", [prefix + "x"], attrs={"dtype": spelling}, out=prefix + "y")
    assert m["dtype"] == wire
    # graph nodes, train_step nodes and raw call() params too
    r = client.graph_run([{"id": "o", "op": "ones", "inputs": [], "attrs": {"shape": [3], "dtype": spelling}}],
                         outputs=["o"])
    assert r["outputs"]["o"].dtype == tdt.NUMPY_DTYPES[wire]
    if not isinstance(spelling, str):
        raw = client.call("op.run", op="zeros", inputs=[], attrs={"shape": [1], "dtype": spelling})
        assert raw["dtype"] == wire


def test_train_step_node_dtype(client, prefix):
    client.put(prefix + "w", np.array([1.0, 2.0], np.float32))
    nodes = [{"id": "c", "op": "cast", "inputs": [prefix + "w"], "attrs": {"dtype": np.float32}},
             {"id": "loss", "op": "sum", "inputs": ["c"]}]
    r = client.train_step(nodes, "loss", [prefix + "w"], optimizer={"type": "sgd", "lr": 0.5})
    assert r["loss"] == pytest.approx(3.0)
    assert client.get(prefix + "w").tolist() == [0.5, 1.5]   # d(sum)/dw = 1


@pytest.mark.parametrize("bad", [np.float64, "float64", np.dtype("int64"), "i8"])
def test_op_attr_bad_dtype_refused_client_side(client, prefix, bad):
    with pytest.raises(tensord.InvalidArgument, match="64") as ei:
        client.op_run("zeros", [], attrs={"shape": [2], "dtype": bad})
    assert ei.value.remote is False
    client.ping()


def test_op_attr_unknown_dtype_name_left_to_the_daemon(client, prefix):
    # not a NumPy name either: a newer daemon might know it, this one refuses
    with pytest.raises(tensord.InvalidArgument, match="f64") as ei:
        client.op_run("zeros", [], attrs={"shape": [2], "dtype": "f64"})
    assert ei.value.remote is True


@pytest.mark.parametrize("array,kind", [
    (np.random.default_rng(1).random((3, 4)), "float64"),
    (np.arange(-3, 3, dtype=np.int64), "int64"),
    (np.array([True, False]), "bool"),
    (np.arange(4, dtype=np.uint16), "uint16"),
    (np.array([1.5], np.longdouble), "float128"),
])
def test_64bit_refused_without_cast(client, prefix, array, kind):
    with pytest.raises(tensord.InvalidArgument, match="cast=True") as ei:
        client.put(prefix + "r", array)
    assert kind in str(ei.value) and ei.value.remote is False
    assert not client.exists(prefix + "r")


@pytest.mark.parametrize("array,wire", [
    (np.random.default_rng(2).standard_normal((5, 7)), "f32"),
    (np.array([1e-30, -3.4e38, np.inf, -np.inf]), "f32"),
    (np.arange(-50, 50, dtype=np.int64).reshape(10, 10), "i32"),
    (np.array([2**31 - 1, -2**31], np.int64), "i32"),
    (np.arange(5, dtype=np.uint16), "i32"),
    (np.array([True, False, True]), "u8"),
    (np.zeros((0, 3)), "f32"),
])
def test_put_cast(client, prefix, array, wire):
    m = client.put(prefix + "c", array, cast=True)
    assert m["dtype"] == wire and m["shape"] == list(array.shape)
    got = client.get(prefix + "c")
    np.testing.assert_array_equal(got, array.astype(tdt.NUMPY_DTYPES[wire]))
    # the pipeline takes the same argument
    with client.pipeline() as p:
        pend = p.put(prefix + "p", array, cast=True)
    assert pend.result()["dtype"] == wire
    # a native array is unchanged by cast=True
    assert client.put(prefix + "n", np.ones(2, np.float16), cast=True)["dtype"] == "f16"


@pytest.mark.parametrize("array,match", [
    (np.array([1e300]), "would become inf"),
    (np.array([2**31]), "do not fit i32"),
    (np.array([-2**31 - 1]), "do not fit i32"),
    (np.array([2**63], np.uint64), "do not fit i32"),
    (np.zeros(2, np.complex128), "complex"),
])
def test_put_cast_refuses_what_does_not_fit(client, prefix, array, match):
    with pytest.raises(tensord.InvalidArgument, match=match):
        client.put(prefix + "c", array, cast=True)
    assert not client.exists(prefix + "c")


def test_explicit_dtype_overflow_refused(client, prefix):
    with pytest.raises(tensord.InvalidArgument, match="f16"):
        client.put(prefix + "h", np.array([1e6], np.float32), dtype=np.float16)
    client.put(prefix + "h", np.array([np.inf, 1.0], np.float32), dtype="float16")   # inf stays
    assert client.get(prefix + "h").tolist() == [np.inf, 1.0]


# ---- typing and metadata ----------------------------------------------------

def test_py_typed_marker():
    assert os.path.isfile(os.path.join(os.path.dirname(tensord.__file__), "py.typed"))


def _public_callables():
    out = [tensord.connect, tensord.socket_path, tensord.dtype_name, tensord.f32_to_bf16,
           tensord.bf16_to_f32, tensord.error_from_map, tdt.encode, tdt.decode, tdt.dtype_of]
    for cls in (tensord.Client, tensord.Pipeline, tensord.Pending):
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_") or name in ("__init__", "__enter__", "__exit__"):
                out.append(fn)
    for cls in (tensord.Model, tensord.Job):      # fit is train: listed once
        out += [fn for name, fn in inspect.getmembers(cls, inspect.isfunction)
                if not name.startswith("_") and fn not in out]
    return out


@pytest.mark.parametrize("fn", _public_callables(), ids=lambda f: f.__qualname__)
def test_public_api_is_annotated(fn):
    hints = typing.get_type_hints(fn)   # every annotation resolves
    sig = inspect.signature(fn)
    missing = [p for p in sig.parameters if p != "self" and p not in hints]
    assert not missing, "%s: parameters without a type: %s" % (fn.__qualname__, missing)
    assert "return" in hints, "%s has no return type" % fn.__qualname__


def test_versions_agree():
    with open(os.path.join(ROOT, "python", "pyproject.toml")) as f:
        pyproject = f.read()
    with open(os.path.join(ROOT, "meson.build")) as f:
        meson = f.read()
    v_py = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    v_meson = re.search(r"version : '([^']+)'", meson).group(1)
    assert v_py == v_meson == tensord.__version__
    deps = re.search(r"^dependencies = \[(.*)\]", pyproject, re.M).group(1)
    assert sorted(re.findall(r'"([a-z]+)', deps)) == ["msgpack", "numpy"]


@pytest.mark.parametrize("prefix", ["/usr/local", "/usr"])
def test_meson_purelib_is_searched(prefix):
    # meson installs the package where this very interpreter imports from
    rel = subprocess.run([sys.executable, os.path.join(ROOT, "python", "purelib.py"), prefix],
                         check=True, capture_output=True, text=True).stdout.strip()
    assert not rel.startswith("/")
    assert os.path.join(prefix, rel) in [os.path.normpath(p) for p in sys.path]


def test_meson_purelib_other_prefix(tmp_path):
    rel = subprocess.run([sys.executable, os.path.join(ROOT, "python", "purelib.py"),
                          str(tmp_path)], check=True, capture_output=True, text=True).stdout
    assert rel.strip() == "lib/python%d.%d/site-packages" % sys.version_info[:2]
