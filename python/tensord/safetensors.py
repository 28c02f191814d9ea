"""safetensors files (https://github.com/huggingface/safetensors, "Format"), as
``tensorctl save``/``model save`` write them (proto/safetensors.c):

an 8-byte little-endian header length N, N bytes of a UTF-8 JSON object
``{"__metadata__"?: {str: str}, name: {"dtype", "shape", "data_offsets":
[begin, end]}, ...}`` padded with spaces so the data starts 8-byte aligned,
then the tensors' little-endian, C-ordered bytes covering the buffer exactly.

The reader checks what proto/safetensors.c checks (header length limit,
JSON object, keys and types, byte counts against dtype and shape, offsets
that cover the buffer without holes or overlaps, no duplicate names). Arrays
come back as tensord stores them: float32, float16, int32, uint8, and bf16
as uint16 bit patterns (its dtype is given beside)."""
from __future__ import annotations

import json
import os
import struct
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import dtypes as _dt
from .errors import InvalidArgument

__all__ = ["save_file", "load_file", "MAX_HEADER"]

#: the longest header accepted (the reference implementation's limit)
MAX_HEADER = 100_000_000
#: safetensors dtype <-> tensord dtype (the ones tensord stores)
_TO_TD = {"F32": "f32", "F16": "f16", "BF16": "bf16", "I32": "i32", "U8": "u8"}
_FROM_TD = {v: k for k, v in _TO_TD.items()}
_KNOWN = {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
          "F64", "I64", "U64"}


def _err(path: str, msg: str) -> InvalidArgument:
    return InvalidArgument("%s: %s" % (path, msg))


def save_file(path: str, tensors: Sequence[Tuple[str, str, np.ndarray]],
              metadata: Optional[Mapping[str, str]] = None) -> int:
    """Write `tensors`, (name, tensord dtype, array) in that order, with
    `metadata` into `path`, replacing it atomically (a temporary file beside
    it, fsync, rename). Returns the data bytes written."""
    names = [t[0] for t in tensors]
    if len(set(names)) != len(names) or "__metadata__" in names:
        raise InvalidArgument("%s: a tensor name is given twice or reserved" % path)
    header: Dict[str, Any] = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str) or "\0" in k or "\0" in v:
                raise InvalidArgument("%s: metadata must map str to str (no NUL)" % path)
        header["__metadata__"] = dict(metadata)
    blobs: List[memoryview] = []
    off = 0
    for name, dtype, a in tensors:
        if dtype not in _FROM_TD:
            raise InvalidArgument("%s: tensor %s has dtype %r (one of %s)" % (path, name, dtype,
                                                                              " ".join(_FROM_TD)))
        a = np.ascontiguousarray(a, dtype=_dt.NUMPY_DTYPES[dtype])
        blob = memoryview(a).cast("B") if a.size else memoryview(b"")
        header[name] = {"dtype": _FROM_TD[dtype], "shape": list(a.shape), "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    if len(text) > MAX_HEADER:
        raise InvalidArgument("%s: the header would be over %d bytes" % (path, MAX_HEADER))
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=d)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for blob in blobs:
                f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return off


def load_file(path: str) -> Tuple[List[Tuple[str, str, np.ndarray]], Dict[str, str]]:
    """Read and check `path`: ([(name, tensord dtype, array)] in header
    order, metadata). A dtype tensord does not store is refused."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise _err(path, "shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", buf)
    if n > MAX_HEADER:
        raise _err(path, "header length %d is over the limit of %d" % (n, MAX_HEADER))
    if 8 + n > len(buf):
        raise _err(path, "header length %d runs past the end of the file" % n)
    raw = bytes(buf[8:8 + n])
    if not raw.startswith(b"{"):
        raise _err(path, "the header does not start with '{'")
    try:
        pairs = json.loads(raw.decode("utf-8"), object_pairs_hook=lambda kv: kv)
    except (UnicodeDecodeError, ValueError) as e:
        raise _err(path, "the header is no UTF-8 JSON object (%s)" % e) from None
    if not isinstance(pairs, list):
        raise _err(path, "the header is no JSON object")
    data = memoryview(buf)[8 + n:]
    meta: Dict[str, str] = {}
    seen = set()
    spans = []
    out: List[Tuple[str, str, np.ndarray]] = []
    for name, v in pairs:
        if name in seen:
            raise _err(path, "'%s' is given twice" % name)
        seen.add(name)
        if name == "__metadata__":
            if not isinstance(v, list) or any(not isinstance(x, str) for kv in v for x in kv):
                raise _err(path, "__metadata__ must map str to str")
            meta = dict(v)
            continue
        d = dict(v) if isinstance(v, list) else None
        if d is None or set(d) != {"dtype", "shape", "data_offsets"}:
            raise _err(path, "tensor '%s' needs exactly dtype, shape and data_offsets" % name)
        dt, shape, offs = d["dtype"], d["shape"], d["data_offsets"]
        if dt not in _KNOWN:
            raise _err(path, "tensor '%s' has an unknown dtype %r" % (name, dt))
        if dt not in _TO_TD:
            raise _err(path, "tensor '%s' is %s; tensord stores F32 F16 BF16 I32 U8" % (name, dt))
        if (not isinstance(shape, list) or len(shape) > _dt.MAX_RANK or
                any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape)):
            raise _err(path, "tensor '%s' has a bad shape %r" % (name, shape))
        if (not isinstance(offs, list) or len(offs) != 2 or
                any(isinstance(o, bool) or not isinstance(o, int) or o < 0 for o in offs) or offs[0] > offs[1]):
            raise _err(path, "tensor '%s' has bad data_offsets %r" % (name, offs))
        td = _TO_TD[dt]
        npd = _dt.NUMPY_DTYPES[td]
        count = int(np.prod(shape, dtype=object)) if shape else 1
        if offs[1] - offs[0] != count * npd.itemsize:
            raise _err(path, "tensor '%s' has %d bytes, its dtype and shape need %d"
                       % (name, offs[1] - offs[0], count * npd.itemsize))
        if offs[1] > len(data):
            raise _err(path, "tensor '%s' runs past the end of the file" % name)
        spans.append((offs[0], offs[1], name))
        arr = np.frombuffer(data[offs[0]:offs[1]], dtype=npd).reshape(shape).copy()
        out.append((name, td, arr))
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise _err(path, "tensor '%s' %s" % (name, "overlaps another" if b < pos else "leaves a hole before it"))
        pos = e
    if pos != len(data):
        raise _err(path, "%d bytes after the last tensor belong to none" % (len(data) - pos))
    return out, meta
