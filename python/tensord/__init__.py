"""tensord: a Python client of the tensord GPU tensor daemon.

Pure Python on top of msgpack and NumPy. See python/README.md and
docs/protocol.md::

    import numpy as np
    import tensord

    with tensord.Client() as c:          # $TENSORD_SOCKET or /run/tensord/tensord.sock
        c.put("a", np.ones((2, 3), np.float32))
        c.put("b", np.arange(6).reshape(2, 3), dtype=np.float32)
        c.put("r", np.random.rand(2, 3), cast=True)   # float64 -> f32, by request
        print(c.op_run("add", ["a", "b"]))

Models (tensord.nn builds the layer form; Model trains, evaluates, predicts,
saves)::

    from tensord import nn
    m = c.define_model("mlp", layers=nn.Sequential(nn.Linear(64, 128), nn.ReLU(),
                                                   nn.Linear(128, 10)),
                       inputs={"x": ("f32", [1, 64]), "y": ("i32", [1])},
                       loss=nn.CrossEntropyLoss(target="y"), optimizer={"type": "adam"})
    m.train({"x": x, "y": y}, batch_size=64, epochs=5)
    print(m.predict({"x": x})["2"].argmax(1))
"""
from .client import (DEFAULT_SOCKET, Client, DeadlineExceeded, Pending, Pipeline, connect,
                     socket_path)
from .dtypes import DTYPES, DTypeLike, bf16_to_f32, dtype_name, f32_to_bf16
from . import nn
from .model import Job, Model
from .errors import (STATUS_CODES, AlreadyExists, Cancelled, ConnectionFailed, DeviceLost,
                     DtypeMismatch, FailedPrecondition, Internal, InvalidArgument, NotFound,
                     PermissionDenied, ProtocolError, ResourceExhausted, ShapeMismatch,
                     TensordError, Unavailable, Unimplemented, error_from_map)

__version__: str = "0.1.0"

__all__ = [
    "Client", "Pipeline", "Pending", "Model", "Job", "nn", "connect", "socket_path", "DEFAULT_SOCKET", "DTYPES",
    "DTypeLike", "dtype_name", "f32_to_bf16", "bf16_to_f32", "TensordError", "Cancelled", "InvalidArgument", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Unimplemented", "Internal", "Unavailable", "ShapeMismatch", "DtypeMismatch", "DeviceLost",
    "ProtocolError", "ConnectionFailed", "DeadlineExceeded", "STATUS_CODES", "error_from_map",
]
