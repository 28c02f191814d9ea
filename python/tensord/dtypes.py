"""tensord dtypes and NumPy arrays.

=====  ==================  ==============================================
dtype  NumPy dtype         notes
=====  ==================  ==============================================
f32    float32 (``<f4``)
f16    float16 (``<f2``)
bf16   uint16 (``<u2``)    NumPy has no bfloat16: the raw 16-bit patterns
i32    int32 (``<i4``)
u8     uint8
=====  ==================  ==============================================

**bfloat16.** A ``bf16`` tensor comes back from :meth:`Client.get` as a
``uint16`` array of bfloat16 bit patterns (what ``tensorctl get --out`` writes
too); :func:`bf16_to_f32` widens it to float32 exactly. To store one, pass
``dtype="bf16"`` with a float array (rounded to nearest, ties to even, by
:func:`f32_to_bf16`) or with a ``uint16`` array of bit patterns (sent as is).
No third-party bfloat16 type (ml_dtypes) is needed or used.

**Naming a dtype.** Everywhere a dtype is taken (``put(dtype=)``, an op's
``"dtype"`` attr in ``op_run``, ``graph_run``, ``train_step`` and
``train_run`` nodes) it may be a wire name (``"f32"``), a NumPy type
(``np.float32``), a ``np.dtype`` or a NumPy name (``"float32"``, ``"<f4"``),
or ``"bfloat16"``; :func:`dtype_name` says which. The wire names win:
``"u8"`` is uint8 here, not NumPy's uint64.

**64-bit data.** tensord has no 64-bit dtypes. ``put`` refuses a float64,
int64 (or other non-native) array unless the caller opts in to the
conversion: ``cast=True`` stores floats as f32, integers as i32 (they must
fit) and bools as u8, or an explicit ``dtype=`` says what to
store. Python lists are the exception: float lists become f32 and int lists
i32, as in tensorctl.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from .errors import InvalidArgument

__all__ = ["DTYPES", "NUMPY_DTYPES", "MAX_RANK", "DTypeLike", "dtype_name", "attr_dtype", "dtype_of",
           "encode", "decode", "f32_to_bf16", "bf16_to_f32"]

#: what a dtype argument takes: a wire name, a NumPy name, type or dtype
DTypeLike = Union[str, "np.dtype[Any]", type]

#: wire dtype -> NumPy dtype of the bytes on the wire (little-endian)
NUMPY_DTYPES = {
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "bf16": np.dtype("<u2"),
    "i32": np.dtype("<i4"),
    "u8": np.dtype("u1"),
}
DTYPES = tuple(NUMPY_DTYPES)
MAX_RANK = 8

_NATIVE = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
           np.dtype(np.int32): "i32", np.dtype(np.uint8): "u8"}
_FLOAT = ("f32", "f16", "bf16")
_ALIASES = {"bfloat16": "bf16"}
_INT_RANGE = {"i32": (-2**31, 2**31 - 1), "u8": (0, 255)}


def dtype_name(dtype: DTypeLike) -> str:
    """The wire name ("f32", "f16", "bf16", "i32", "u8") of `dtype`: a wire
    name, "bfloat16", or anything ``np.dtype()`` takes that is float32,
    float16, int32 or uint8 (np.float32, np.dtype("float32"), "float32",
    "<f4"). Raises InvalidArgument for other dtypes (float64, int64, ...)
    and for what is no dtype at all."""
    if isinstance(dtype, str):
        if dtype in NUMPY_DTYPES:
            return dtype
        if dtype.lower() in _ALIASES:
            return _ALIASES[dtype.lower()]
    if dtype is None or isinstance(dtype, bool):
        raise InvalidArgument("%r is not a dtype (one of %s)" % (dtype, " ".join(DTYPES)))
    try:
        np_dtype = np.dtype(dtype)
    except (TypeError, ValueError):
        raise InvalidArgument("unknown dtype %r (one of %s, or a NumPy float32 float16 int32 "
                              "uint8)" % (dtype, " ".join(DTYPES))) from None
    name = _NATIVE.get(np_dtype.newbyteorder("=")) if np_dtype.kind in "iuf" else None
    if name is None:
        hint = " (bf16 is named \"bf16\"; NumPy has no bfloat16)" if np_dtype == np.uint16 else ""
        raise InvalidArgument("dtype %s has no tensord dtype (one of %s: NumPy float32 float16 "
                              "int32 uint8)%s" % (np_dtype, " ".join(DTYPES), hint))
    return name


def attr_dtype(dtype: Any) -> Any:
    """An op's "dtype" attr as sent: dtype_name(dtype), except that a string
    that is neither a wire name nor a NumPy name goes to the daemon as it is
    (a newer daemon may know it; an unknown one is its INVALID_ARGUMENT)."""
    if isinstance(dtype, str) and dtype not in NUMPY_DTYPES and \
            dtype.lower() not in _ALIASES:
        try:
            np.dtype(dtype)
        except (TypeError, ValueError):
            return dtype
    return dtype_name(dtype)


def f32_to_bf16(a: npt.ArrayLike) -> np.ndarray:
    """Float values -> uint16 bfloat16 bit patterns, rounded to nearest even
    (NaNs stay NaN, quieted). Any float or integer array is accepted."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    s16, one = np.uint64(16), np.uint64(1)
    r = ((u + np.uint64(0x7FFF) + ((u >> s16) & one)) >> s16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        r[nan] = ((u[nan] >> s16) | np.uint64(0x40)).astype(np.uint16)
    return r


def bf16_to_f32(bits: npt.ArrayLike) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 values (exact)."""
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise InvalidArgument("bf16_to_f32 wants a uint16 array, got %s" % b.dtype)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def dtype_of(array: np.ndarray) -> Optional[str]:
    """The tensord dtype NumPy dtype `array.dtype` is stored as without
    conversion, or None (float64, int64, uint16, ... need an explicit dtype)."""
    return _NATIVE.get(np.dtype(array.dtype).newbyteorder("="))


def _shape(shape):
    shape = tuple(shape)
    if len(shape) > MAX_RANK:
        raise InvalidArgument("rank %d is over the limit of %d" % (len(shape), MAX_RANK))
    for d in shape:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise InvalidArgument("shape %r: dimensions must be non-negative integers" % (shape,))
    return [int(d) for d in shape]


def _cast_target(array: np.ndarray) -> Optional[str]:
    """cast=True: the dtype a non-native array is stored as."""
    kind = array.dtype.kind
    if kind == "f":
        return "f32"
    if kind == "b":
        return "u8"
    if kind in "iu":
        return "i32"
    return None


def encode(array: Any, dtype: Optional[DTypeLike] = None,
           cast: bool = False) -> Tuple[str, "list[int]", memoryview]:
    """(dtype, shape, data) to send for `array` stored as `dtype`; `data` is a
    byte memoryview of the array (or of its converted copy).

    Without `dtype`, float32, float16, int32 and uint8 arrays are sent as they
    are; other element types (float64, int64, bool, ...) are refused unless
    `cast` (floats become f32, integers i32, bools u8) or an explicit `dtype`
    (any form dtype_name() takes) says what to store: floats to any float
    dtype, integers and bools to any dtype (they must fit the range of an
    integer dtype). Floats are never converted to integers.
    Non-contiguous and big-endian arrays are copied into C order, little-endian.
    Raises InvalidArgument for what cannot be stored."""
    if not isinstance(array, np.ndarray):
        if isinstance(array, (str, bytes, bytearray, dict, set)) or array is None:
            raise InvalidArgument("put wants a NumPy array, got %s" % type(array).__name__)
        try:
            array = np.asarray(array)
        except (ValueError, TypeError) as e:
            raise InvalidArgument("cannot make an array of %s: %s" % (type(array).__name__, e))
        if dtype is None and array.dtype == np.float64:
            array = array.astype(np.float32)   # a Python list of floats: f32, like tensorctl
        elif dtype is None and array.dtype == np.int64:
            dtype = "i32"                      # a Python list of ints: i32, checked to fit
    kind = array.dtype.kind
    if kind not in "fiub":
        raise InvalidArgument("cannot store an array of %s" % array.dtype)
    shape = _shape(array.shape)
    if dtype is not None:
        dtype = dtype_name(dtype)
    else:
        dtype = dtype_of(array)
        if dtype is None and cast:
            dtype = _cast_target(array)
        if dtype is None:
            how = {"f": " (rounded)", "i": " (they must fit)", "u": " (they must fit)"}
            raise InvalidArgument(
                "tensord has no %s dtype: pass cast=True to store these values as %s%s, "
                "or dtype= (one of %s) to choose"
                % (array.dtype, _cast_target(array), how.get(kind, ""), " ".join(DTYPES)))
    if dtype == "bf16":
        if array.dtype == np.uint16:
            data = np.ascontiguousarray(array, dtype="<u2")
        elif kind == "f" or kind in "iub":
            data = f32_to_bf16(array)
        return dtype, shape, _bytes_view(data)
    if kind == "f" and dtype not in _FLOAT:
        raise InvalidArgument("will not convert %s values to %s (floats to integers)"
                              % (array.dtype, dtype))
    if dtype in _INT_RANGE and array.size and kind in "iu":
        lo, hi = _INT_RANGE[dtype]
        if int(array.min()) < lo or int(array.max()) > hi:
            raise InvalidArgument("values outside %d..%d do not fit %s" % (lo, hi, dtype))
    with np.errstate(over="ignore"):
        data = np.ascontiguousarray(array, dtype=NUMPY_DTYPES[dtype])
    if kind == "f" and data.dtype.itemsize < array.dtype.itemsize and array.size and \
            np.count_nonzero(np.isinf(data)) != np.count_nonzero(np.isinf(array)):
        raise InvalidArgument("%s values beyond the range of %s (largest %g) would become inf"
                              % (array.dtype, dtype, float(np.finfo(data.dtype).max)))
    return dtype, shape, _bytes_view(data)


def _bytes_view(contiguous):
    """A flat byte memoryview of a C-contiguous array: sent without a copy."""
    return memoryview(contiguous.reshape(-1).view(np.uint8))


def decode(dtype: str, shape: Sequence[int], data: Union[bytes, bytearray, memoryview],
           copy: bool = True) -> np.ndarray:
    """The NumPy array of a tensor's wire form (a bf16 tensor: uint16 bit
    patterns). With `copy` False the array is a read-only view of `data`."""
    if dtype not in NUMPY_DTYPES:
        raise InvalidArgument("the daemon sent unknown dtype %r" % (dtype,))
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgument("the daemon sent %s data, not bytes" % type(data).__name__)
    shape = _shape(shape)
    dt = NUMPY_DTYPES[dtype]
    count = 1
    for d in shape:
        count *= d
    if count * dt.itemsize != len(data):
        raise InvalidArgument("%d bytes do not hold a %s tensor of shape %r"
                              % (len(data), dtype, shape))
    a = np.frombuffer(data, dtype=dt, count=count).reshape(shape)
    return a.copy() if copy else a
