"""The tensord client: one msgpack-RPC connection over the daemon's Unix socket.

Every method of the protocol (docs/protocol.md) is one small method of
:class:`_Methods` (methods.py) that names the RPC, builds its params and says how to decode
the result. :class:`Client` runs them and waits for the answer;
:class:`Pipeline` sends them at once and hands back :class:`Pending` results,
so many requests travel before the first answer is read. A method the client
has no function for yet is one :meth:`Client.call` away.
"""
from __future__ import annotations

import collections
import os
import stat
import selectors
import socket
import struct
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import msgpack
import numpy as np

from . import dtypes as _dt
from .errors import (ConnectionFailed, DeadlineExceeded, InvalidArgument, ProtocolError, ResourceExhausted,
                     TensordError, error_from_map)
from .methods import MEMFD_THRESHOLD, NotifyFn, Result, _Landed, _Methods  # noqa: F401 (re-exported)
from .model import _ModelClient

__all__ = ["Client", "Pipeline", "Pending", "DeadlineExceeded", "connect", "socket_path",
           "DEFAULT_SOCKET"]

DEFAULT_SOCKET = "/run/tensord/tensord.sock"

#: a path to the daemon's socket
PathLike = Union[str, "os.PathLike[str]"]
#: the daemon's default `max_message_bytes` (1 GiB + 1 MiB); info() updates it
DEFAULT_MAX_MESSAGE = (1 << 30) + (1 << 20)
_RECV_CHUNK = 1 << 20
# tensor.get payloads at least this large are received straight into the
# array's memory (Client._land), not through the unpacker.
_LAND_MIN = 1 << 20
_SEND_CHUNK = 4 << 20
# Values at least this large are written from the caller's memory, not packed.
_TAIL_MIN = 64 << 10


def socket_path(path: Optional[PathLike] = None) -> str:
    """The socket to use: `path`, else $TENSORD_SOCKET (when set and not
    empty), else for a user other than root the socket of a daemon of the
    user's in $XDG_RUNTIME_DIR/tensord/tensord.sock when there is one, else
    /run/tensord/tensord.sock (libtensord's tensord_default_socket)."""
    if path:
        return os.fspath(path)
    if os.environ.get("TENSORD_SOCKET"):
        return os.environ["TENSORD_SOCKET"]
    run = os.environ.get("XDG_RUNTIME_DIR")
    if os.getuid() != 0 and run:
        mine = os.path.join(run, "tensord", "tensord.sock")
        try:
            if stat.S_ISSOCK(os.stat(mine).st_mode):
                return mine
        except OSError:
            pass
    return DEFAULT_SOCKET


def _default(obj):
    """msgpack's fallback: NumPy scalars and arrays in params become plain values."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.dtype) or (isinstance(obj, type) and issubclass(obj, np.generic)):
        return _dt.dtype_name(obj)   # a NumPy dtype anywhere in params: its wire name
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise TypeError("cannot send a %s in params" % type(obj).__name__)


def _bin_header(n):
    if n < 1 << 8:
        return b"\xc4" + struct.pack(">B", n)
    if n < 1 << 16:
        return b"\xc5" + struct.pack(">H", n)
    return b"\xc6" + struct.pack(">I", n)


class Pending:
    """The answer to a request sent but perhaps not read yet."""

    __slots__ = ("msgid", "method", "_client", "_decode", "_on_notify", "_done", "_error",
                 "_result")

    def __init__(self, client: "Client", msgid: int, method: str,
                 decode: Optional[Callable[[Any], Any]], on_notify: Optional[NotifyFn]) -> None:
        self.msgid = msgid
        self.method = method
        self._client = client
        self._decode = decode
        self._on_notify = on_notify
        self._done = False
        self._error = None
        self._result = None

    def done(self) -> bool:
        """Whether the answer has arrived (or the request failed)."""
        return self._done

    def result(self) -> Any:
        """Wait for the answer; return the decoded result or raise its error."""
        if not self._done:
            self._client._wait(self)
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self) -> Optional[BaseException]:
        """Wait for the answer; the error it carries, or None."""
        if not self._done:
            self._client._wait(self)
        return self._error

    def _finish(self, error, result):
        self._done = True
        self._error = error
        self._result = result
        self._client = None

    def __repr__(self):
        state = "pending" if not self._done else "failed" if self._error else "done"
        return "<Pending %s #%d %s>" % (self.method, self.msgid, state)


class Client(_Methods, _ModelClient):
    """One connection to tensord. Not thread-safe: use one per thread.

    `path` defaults to $TENSORD_SOCKET, else /run/tensord/tensord.sock.
    `timeout` (seconds, None = wait forever) bounds each wait for the daemon;
    when it passes, DeadlineExceeded is raised and the connection closed.
    Use as a context manager to close it::

        with tensord.Client() as c:
            c.put("x", np.arange(6, dtype=np.float32).reshape(2, 3))
            print(c.get("x"))
    """

    def __init__(self, path: Optional[PathLike] = None, timeout: Optional[float] = None) -> None:
        self.path = socket_path(path)
        self.timeout = timeout
        self.max_message_bytes = DEFAULT_MAX_MESSAGE
        self._next_id = 1
        self._packer = msgpack.Packer(use_bin_type=True, default=_default)
        self._recv_buf = bytearray(_RECV_CHUNK)
        self._watching: Optional[Pending] = None   # the job.watch of a watch() loop at its yield
        self._watch_dropped: Optional[Pending] = None   # one a later request dropped (asked again)
        self._connect()

    def _connect(self) -> None:
        """A fresh connection to self.path and a fresh stream state."""
        self._inflight = collections.OrderedDict()   # msgid -> Pending, oldest first
        self._broken = None
        self._reconnect = False   # broken by an interruption: the next call reconnects
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=(1 << 31) - 1)
        self._fed = 0   # bytes fed to the unpacker: tell() equal when none wait in it
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self._sock.settimeout(self.timeout)
            self._sock.connect(self.path)
            self._sock.setblocking(False)
        except OSError as e:
            self._sock.close()
            self._sock = None
            raise ConnectionFailed("cannot connect to %s: %s" % (self.path, e.strerror or e)) \
                from None
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ)

    # ---- lifecycle ----
    def close(self) -> None:
        """Close the connection; requests still unanswered fail with
        ConnectionFailed (a train.run in progress is cancelled)."""
        if self._sock is not None:
            self._break(ConnectionFailed("the connection was closed by the client"))

    def _cleanup_conn(self) -> "Client":
        """A connection to clean up on after a failed call: this one (one an
        interruption closed reconnects on its next call), or a new one to
        the same socket when this client is closed for good (a timeout, a
        broken stream, close()). The caller closes a new one."""
        if self._broken is None or self._reconnect:
            return self
        return Client(self.path, self.timeout)

    @property
    def closed(self) -> bool:
        return self._sock is None

    def fileno(self) -> int:
        return -1 if self._sock is None else self._sock.fileno()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def __del__(self):
        sock = getattr(self, "_sock", None)
        if sock is not None:
            sock.close()

    def __repr__(self):
        return "<tensord.Client %s%s>" % (self.path, " closed" if self.closed else "")

    # ---- requests ----
    def submit(self, method: str, params: Optional[Mapping[str, Any]] = None,
               decode: Optional[Callable[[Any], Any]] = None,
               on_notify: Optional[NotifyFn] = None, fds: Optional[Sequence[Any]] = None) -> Pending:
        """Send one request now and return its Pending (the low-level form of
        every method: `params` is the dict of named arguments or None,
        `decode(result)` turns the result map into what result() returns;
        `fds`, objects with an ``fd`` and a ``close()``, are passed with the
        request (SCM_RIGHTS) and closed once sent)."""
        if self._watching is not None:
            # A request while a watch() loop waits at its yield: the watch
            # holds the stream (its answer comes when the job ends), so it
            # is dropped with this connection; the loop, if resumed, asks
            # again on the new one.
            self._watch_dropped, self._watching = self._watching, None
            self._interrupted()
        if self._broken is not None and self._reconnect:
            # Ctrl-C, or leaving watch() early, lost the stream's position:
            # what was in flight failed; the client goes on, on a new
            # connection (issue 35), as redis-py and libpq reconnect.
            self._connect()
        if self._broken is not None:
            raise ConnectionFailed("the connection is closed (%s)" % self._broken)
        msgid = self._next_id
        self._next_id = 1 if self._next_id >= 0xFFFFFFFF else self._next_id + 1
        chunks = self._pack(msgid, method, params)
        pending = Pending(self, msgid, method, decode, on_notify)
        self._inflight[msgid] = pending
        try:
            self._send(chunks, [f.fd for f in fds] if fds else None)
        except BaseException:
            self._interrupted()
            raise
        finally:
            # The daemon holds its own copies once sent; a get's memfd stays
            # open until its answer maps it.
            for f in fds or ():
                if not getattr(f, "keep", False):
                    f.close()
        return pending

    def _do(self, method, params=None, decode=None, on_notify=None, fds=None):
        return self.submit(method, params, decode, on_notify, fds).result()

    def _stat_now(self, name):
        return self.stat(name)

    def _retries(self):
        return True

    def _sizes(self):
        if not hasattr(self, "_size_cache"):
            self._size_cache = {}
        return self._size_cache

    def _saw_info(self, result):
        limits = result.get("limits") if isinstance(result, dict) else None
        if isinstance(limits, dict) and isinstance(limits.get("max_message_bytes"), int):
            self.max_message_bytes = limits["max_message_bytes"]
        return result

    def watch(self, job: int) -> Iterator[Tuple[str, Any]]:
        """Follow a detached job (job.watch): yields ``("progress", map)`` and
        ``("eval", map)`` as train_run's callbacks get them, then
        ``("end", job.stat map)`` once it has ended (at once for an ended
        job). Leaving the loop early closes the connection (the job runs on)
        and the next call opens a new one; so does a request made while the
        loop waits (inside it, or with the iterator kept), after which the
        loop, if resumed, watches on from the new connection::

            job = c.train_run(nodes, "loss", ["w"], data=..., batch_size=32, detach=True)
            for event, m in c.watch(job):
                print(event, m.get("loss"))
        """
        notes: collections.deque = collections.deque()
        kinds = {"train.progress": "progress", "train.eval": "eval"}

        def ask():
            return self.submit("job.watch", {"job": job}, None,
                               lambda method, p: notes.append((kinds.get(method, method), p)))
        pending = ask()
        finished = False
        try:
            while True:
                while notes:
                    self._watching = pending
                    yield notes.popleft()
                    if self._watching is pending:
                        self._watching = None
                    if self._watch_dropped is pending:   # the caller sent a request meanwhile
                        self._watch_dropped = None
                        pending = ask()
                if pending.done():
                    break
                self._select()
                self._read_some()
            finished = True
        finally:
            if self._watching is pending:
                self._watching = None
            # Left early: close the connection, unless the watch is no
            # longer on it (a new connection serves other calls now).
            if not finished and self._inflight.get(pending.msgid) is pending:
                self._interrupted()
        yield ("end", pending.result())

    def pipeline(self) -> "Pipeline":
        """A Pipeline on this connection (see Pipeline)."""
        return Pipeline(self)

    def exists(self, name: str) -> bool:
        """Whether a tensor `name` is stored."""
        try:
            self.stat(name)
            return True
        except TensordError as e:
            if e.name == "NOT_FOUND":
                return False
            raise

    __contains__ = exists

    def _pack(self, msgid, method, params):
        """The request as byte chunks: a large bytes-like value (tensor data)
        goes last, written from the caller's memory after its bin header."""
        pk = self._packer
        head = [pk.pack_array_header(4), pk.pack(0), pk.pack(msgid), pk.pack(method)]
        tail = None
        try:
            if params is None:
                head.append(pk.pack_array_header(0))
            else:
                tail_key = None
                for k, v in params.items():
                    if isinstance(v, (memoryview, bytes, bytearray)) and len(v) >= _TAIL_MIN:
                        tail_key = k
                head.append(pk.pack_array_header(1))
                head.append(pk.pack_map_header(len(params)))
                for k, v in params.items():
                    if k != tail_key:
                        head.append(pk.pack(k))
                        head.append(pk.pack(v))
                if tail_key is not None:
                    tail = params[tail_key]
                    if isinstance(tail, memoryview):
                        tail = tail.cast("B") if tail.format != "B" or tail.ndim != 1 else tail
                    if len(tail) > 0xFFFFFFFF:
                        raise ResourceExhausted("%s: %d bytes of %s is over the 4 GiB a msgpack "
                                                "bin holds" % (method, len(tail), tail_key))
                    head.append(pk.pack(tail_key))
                    head.append(_bin_header(len(tail)))
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidArgument("%s: cannot encode params: %s" % (method, e)) from None
        head = b"".join(head)
        total = len(head) + (len(tail) if tail is not None else 0)
        if total > self.max_message_bytes:
            raise ResourceExhausted("%s: the request is %d bytes, over the daemon's message "
                                    "limit of %d" % (method, total, self.max_message_bytes))
        return [head] if tail is None else [head, memoryview(tail)]

    # ---- I/O ----
    def _send(self, chunks, fds=None):
        """Write every chunk, `fds` with the first byte. While the socket is
        full, read what the daemon sends, so a long pipeline never deadlocks
        against its backpressure."""
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                if self._sock is None:
                    return  # the stream broke: the request's Pending holds why
                try:
                    if fds:
                        n = socket.send_fds(self._sock, [view[:_SEND_CHUNK]], fds)
                        fds = None
                    else:
                        n = self._sock.send(view[:_SEND_CHUNK])
                    view = view[n:]
                    continue
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError as e:
                    # The daemon may have said why before it closed: read that.
                    self._drain()
                    self._fail_stream(ConnectionFailed("writing to the daemon: %s"
                                                       % (e.strerror or e)))
                    return
                self._sel.modify(self._sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
                try:
                    events = self._select()
                finally:
                    if self._sock is not None:
                        self._sel.modify(self._sock, selectors.EVENT_READ)
                if any(mask & selectors.EVENT_READ for _, mask in events):
                    self._read_some()

    def _select(self):
        events = self._sel.select(self.timeout)
        if not events:
            self._break(DeadlineExceeded("no progress within %g s" % self.timeout))
            raise DeadlineExceeded("no answer from the daemon within %g s; the connection "
                                   "is closed" % self.timeout)
        return events

    def _wait(self, pending):
        try:
            while not pending._done:
                if self._sock is None:
                    # _break() finished every pending request; reaching here is a bug.
                    pending._finish(ConnectionFailed("the connection is closed"), None)
                    break
                self._select()
                self._read_some()
        except BaseException:
            self._interrupted()
            raise

    def _interrupted(self):
        """An exception (Ctrl-C, a signal handler's) left a request half sent
        or its answer unread: the stream's position is lost, so close it, which
        also cancels a train.run in the daemon."""
        if self._sock is not None:
            self._break(ConnectionFailed("the connection was closed after an interrupted call"))
            self._reconnect = True

    def _read_some(self):
        try:
            n = self._sock.recv_into(self._recv_buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._fail_stream(ConnectionFailed("reading from the daemon: %s" % (e.strerror or e)))
            return
        if n == 0:
            self._fail_stream(ConnectionFailed("the daemon closed the connection"))
            return
        if not self._land(n):
            self._feed(n)

    def _land_head(self, n, pending):
        """The answer to tensor.get `pending` that starts the n bytes just
        received, up to its data: (result map without data, payload offset,
        payload size), or None when it is not one to land (an error, a
        small payload, data not the last entry, a head not all there)."""
        b = self._recv_buf
        u = msgpack.Unpacker(raw=False)
        u.feed(memoryview(b)[:min(n, 4096)])
        try:
            if (u.read_array_header() != 4 or u.unpack() != 1 or u.unpack() != pending.msgid
                    or u.unpack() is not None):
                return None
            entries = u.read_map_header()
            m = {}
            for _ in range(entries - 1):
                k = u.unpack()
                m[k] = u.unpack()
            if entries < 1 or u.unpack() != "data":
                return None
        except (msgpack.OutOfData, ValueError, msgpack.UnpackException, UnicodeDecodeError):
            return None
        at = u.tell()
        if at + 5 <= n and b[at] == 0xc6:
            return m, at + 5, int.from_bytes(b[at + 1:at + 5], "big")
        return None

    def _land(self, n):
        """Receive a large tensor.get payload straight into an array's
        memory (one copy, the kernel's, instead of the unpacker's buffer,
        a bytes object and the array): where the n bytes just received
        start the answer to the oldest request, a get(). Returns whether it
        took them (and the answer was handled)."""
        pending = next(iter(self._inflight.values()), None)
        if (pending is None or not getattr(pending._decode, "lands", False)
                or self._unpacker.tell() != self._fed):
            return False
        head = self._land_head(n, pending)
        if head is None or head[2] < _LAND_MIN:
            return False
        m, at, size = head
        dst = np.empty(size, dtype=np.uint8)
        view = memoryview(dst)
        have = min(n - at, size)
        view[:have] = memoryview(self._recv_buf)[at:at + have]
        while have < size:
            try:
                k = self._sock.recv_into(view[have:])
            except (BlockingIOError, InterruptedError):
                self._select()
                continue
            except OSError as e:
                self._fail_stream(ConnectionFailed("reading from the daemon: %s"
                                                   % (e.strerror or e)))
                return True
            if k == 0:
                self._fail_stream(ConnectionFailed("the daemon closed the connection"))
                return True
            have += k
        m["data"] = _Landed(view)
        self._handle([1, pending.msgid, None, m])
        return True

    def _feed(self, n):
        self._fed += n
        self._unpacker.feed(memoryview(self._recv_buf)[:n])
        try:
            for msg in self._unpacker:
                self._handle(msg)
                if self._sock is None:
                    return
        except (ValueError, msgpack.UnpackException, UnicodeDecodeError) as e:
            self._fail_stream(ProtocolError("undecodable data from the daemon: %s" % e))

    def _drain(self):
        """Read whatever already arrived, without waiting."""
        while self._sock is not None:
            try:
                n = self._sock.recv_into(self._recv_buf)
            except OSError:
                return
            if n == 0:
                return
            self._feed(n)

    def _handle(self, msg):
        if not isinstance(msg, list) or not msg or msg[0] not in (1, 2):
            self._fail_stream(ProtocolError("the daemon sent no response or notification: %r"
                                            % (msg,)[:200]))
            return
        if msg[0] == 2:
            if len(msg) != 3 or not isinstance(msg[1], str):
                self._fail_stream(ProtocolError("malformed notification %r" % (msg,)[:200]))
                return
            self._notification(msg[1], msg[2])
            return
        if len(msg) != 4 or not isinstance(msg[1], int):
            self._fail_stream(ProtocolError("malformed response %r" % (msg,)[:200]))
            return
        pending = self._inflight.pop(msg[1], None)
        if pending is None:
            self._fail_stream(ProtocolError("response to request %r, which was not sent"
                                            % (msg[1],)))
            return
        error, result = msg[2], msg[3]
        if error is not None:
            pending._finish(error_from_map(error), None)
            return
        try:
            value = pending._decode(result) if pending._decode else result
        except (TensordError, KeyError, TypeError, ValueError) as e:
            why = e.message if isinstance(e, TensordError) else "%s: %s" % (type(e).__name__, e)
            pending._finish(ProtocolError("%s: malformed result from the daemon (%s)"
                                          % (pending.method, why)), None)
            return
        pending._finish(None, value)

    def _notification(self, method, params):
        p = params[0] if isinstance(params, list) and len(params) == 1 else params
        if method == "protocol.error":
            err = error_from_map(p)
            err.message = "the daemon closed the stream: %s" % err.message
            self._fail_stream(err)
            return
        if not self._inflight:
            return
        # Requests take effect in order: a notification belongs to the oldest.
        pending = next(iter(self._inflight.values()))
        if pending._on_notify is None:
            return
        try:
            pending._on_notify(method, p)
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt cancels a run too
            del self._inflight[pending.msgid]
            pending._finish(e, None)
            self._break(ConnectionFailed("the connection was closed after a notification "
                                         "callback raised %s" % type(e).__name__))
            self._reconnect = True

    def _fail_stream(self, error):
        """The stream is unusable: every waiting request fails with `error`."""
        self._break(error)

    def _break(self, error):
        if self._broken is None:
            self._broken = error
        if self._sock is not None:
            try:
                self._sel.unregister(self._sock)
            except (KeyError, ValueError):
                pass
            self._sel.close()
            self._sock.close()
            self._sock = None
        inflight, self._inflight = self._inflight, collections.OrderedDict()
        for p in inflight.values():
            p._finish(error, None)


class Pipeline(_Methods):
    """Requests sent back to back, answers read later: every method returns a
    Pending at once. Leaving the ``with`` block waits for every answer::

        with c.pipeline() as p:
            for i in range(100):
                p.put("x%d" % i, arrays[i])
            total = p.op_run("add", ["x0", "x1"])
        print(total.result())

    The requests take effect in the order sent. ``results()`` waits and returns
    every result in order, raising the first error."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.pending: List[Pending] = []

    def _do(self, method, params=None, decode=None, on_notify=None, fds=None):
        p = self.client.submit(method, params, decode, on_notify, fds)
        self.pending.append(p)
        return p

    def _sizes(self):
        return self.client._sizes()

    def _stat_now(self, name):
        return self.client.stat(name)

    def _saw_info(self, result):
        return self.client._saw_info(result)

    def wait(self) -> None:
        """Wait for every answer (errors stay in their Pending)."""
        for p in self.pending:
            p.exception()

    def results(self) -> List[Any]:
        """Every result in order; raises the first error."""
        return [p.result() for p in self.pending]

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.wait()
        return False


def connect(path: Optional[PathLike] = None, timeout: Optional[float] = None) -> Client:
    """A new Client (see Client)."""
    return Client(path, timeout)
