"""Exceptions of the tensord client.

Every failure is a :class:`TensordError` carrying the protocol's ``code`` (an
int), ``name`` (a status name such as ``"NOT_FOUND"``) and ``message``. The
daemon's errors come back as the subclass named after their status
(:class:`NotFound`, :class:`ShapeMismatch`, ...), so callers can catch either
one status or all of them::

    try:
        c.get("w")
    except tensord.NotFound:
        ...

Arguments the client refuses before sending anything raise the same classes
(``InvalidArgument`` for a bad dtype or shape) with ``remote`` False.
A status name this client does not know yet becomes a plain TensordError with
that name and code, so a newer daemon never breaks an older client.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Optional, Type

__all__ = [
    "TensordError", "Cancelled", "InvalidArgument", "NotFound", "AlreadyExists",
    "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Unimplemented",
    "Internal", "Unavailable", "ShapeMismatch", "DtypeMismatch", "DeviceLost",
    "ProtocolError", "ConnectionFailed", "DeadlineExceeded", "error_from_map", "STATUS_CODES",
]


class TensordError(Exception):
    """Base class: ``code``, ``name`` and ``message`` as the daemon sent them.

    ``remote`` is True for errors the daemon answered, False for those raised by
    the client itself (a refused argument, a lost connection)."""

    code = 2
    name = "UNKNOWN"

    def __init__(self, message: str, code: Optional[int] = None, name: Optional[str] = None,
                 remote: bool = False) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if name is not None:
            self.name = name
        self.remote = remote

    def __str__(self) -> str:
        return "%s: %s" % (self.name, self.message)

    def __repr__(self) -> str:
        return "%s(code=%d, name=%r, message=%r)" % (
            type(self).__name__, self.code, self.name, self.message)


def _status(name: str, code: int, doc: str, *bases: type) -> Type[TensordError]:
    cls = type("".join(p.capitalize() for p in name.split("_")),
               (TensordError,) + bases, {"code": code, "name": name, "__doc__": doc})
    return cls


Cancelled = _status("CANCELLED", 1, "The operation was cancelled.")
InvalidArgument = _status(
    "INVALID_ARGUMENT", 3,
    "A missing, unknown or ill-typed argument; a bad name, dtype, shape or data length.",
    ValueError)
NotFound = _status("NOT_FOUND", 5, "No tensor (or other object) by that name.", LookupError)
AlreadyExists = _status("ALREADY_EXISTS", 6, "put with if_absent=True on a name in use.")
PermissionDenied = _status("PERMISSION_DENIED", 7,
                           "Using a tensor its mode does not let this user read or write.")
ResourceExhausted = _status(
    "RESOURCE_EXHAUSTED", 8,
    "Over a size or count limit, or out of device memory.")
FailedPrecondition = _status(
    "FAILED_PRECONDITION", 9,
    "A valid request the daemon's state does not allow (a NaN loss, say).")
Unimplemented = _status("UNIMPLEMENTED", 12, "A method the daemon does not know.")
Internal = _status("INTERNAL", 13, "A bug or host failure in the daemon.")
Unavailable = _status("UNAVAILABLE", 14, "The daemon is shutting down or refused the connection.")
ShapeMismatch = _status("SHAPE_MISMATCH", 100, "Operand shapes do not fit.", ValueError)
DtypeMismatch = _status("DTYPE_MISMATCH", 101, "Operand dtypes do not fit.", TypeError)
DeadlineExceeded = _status(
    "DEADLINE_EXCEEDED", 4,
    "No answer in time: the client's timeout (the connection is then closed, which also "
    "cancels a train.run), or a custom kernel past the daemon's kernel_timeout.",
    TimeoutError)
DeviceLost = _status("DEVICE_LOST", 102, "The GPU was lost; the daemon must be restarted.")
ProtocolError = _status(
    "PROTOCOL", 103,
    "A message that is no valid msgpack-RPC (sent or received); the connection is closed.")
ProtocolError.__name__ = ProtocolError.__qualname__ = "ProtocolError"


class ConnectionFailed(Unavailable, ConnectionError):
    """The daemon cannot be reached, or the connection was lost.

    A subclass of both :class:`Unavailable` and the built-in ConnectionError."""

    def __init__(self, message: str, code: Optional[int] = None, name: Optional[str] = None,
                 remote: bool = False) -> None:
        Unavailable.__init__(self, message, code, name, remote)


_CLASSES = [Cancelled, InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
            ResourceExhausted, FailedPrecondition, Unimplemented, Internal, Unavailable,
            ShapeMismatch, DtypeMismatch, DeviceLost, ProtocolError, DeadlineExceeded]
_BY_NAME = {cls.name: cls for cls in _CLASSES}
_BY_CODE = {cls.code: cls for cls in _CLASSES}

#: status name -> code, as docs/protocol.md lists them
STATUS_CODES: Dict[str, int] = {cls.name: cls.code for cls in _CLASSES}


_WIRE_FLAG = re.compile(r'"([a-z_][a-z0-9_]*)": (true|false)')


def python_spelling(message: str) -> str:
    """A daemon message as a Python caller reads it: the wire's ``"replace":
    true`` becomes ``replace=True`` (the keyword the client takes)."""
    return _WIRE_FLAG.sub(lambda m: "%s=%s" % (m.group(1), m.group(2).capitalize()), message)


def error_from_map(err: Any) -> TensordError:
    """The exception for an error map ``{"code", "name", "message"}`` from the
    daemon. Missing or ill-typed fields are filled in, never trusted."""
    if not isinstance(err, dict):
        return ProtocolError("malformed error from the daemon: %r" % (err,)[:200])
    code = err.get("code")
    name = err.get("name")
    message = err.get("message")
    if not isinstance(code, int) or isinstance(code, bool):
        code = None
    if not isinstance(name, str) or not name:
        name = None
    if not isinstance(message, str):
        message = "" if message is None else repr(message)
    message = python_spelling(message)
    cls = _BY_NAME.get(name) if name else _BY_CODE.get(code)
    if cls is None:
        cls = TensordError
        if name is None:
            name = "UNKNOWN"
    if code is None:
        code = cls.code
    return cls(message, code=code, name=name or cls.name, remote=True)
