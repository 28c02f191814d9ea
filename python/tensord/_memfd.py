"""Memory files for tensor.put and tensor.get (docs/protocol.md, "Passing
memory"): internal to the client."""
import fcntl
import mmap
import os
import socket

import numpy as np

from . import dtypes as _dt
from .errors import ProtocolError

#: whether this Python and kernel can pass memfds (os.memfd_create, fd passing, seals)
HAS_MEMFD = hasattr(os, "memfd_create") and hasattr(socket, "CMSG_SPACE") and \
    hasattr(fcntl, "F_ADD_SEALS")


class Memfd:
    """A memory file for one transfer; closed at the latest when collected."""

    def __init__(self, size: int, data=None) -> None:
        self.keep = data is None   # a get's: open until the answer maps it
        self.mm = None
        self.fd = os.memfd_create("tensord", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            if size:
                os.ftruncate(self.fd, size)
            if data is not None:
                view, off = memoryview(data).cast("B"), 0
                while off < len(view):
                    off += os.pwrite(self.fd, view[off:off + (1 << 30)], off)
                # A put's bytes are fixed (F_SEAL_WRITE); a get's memfd only
                # must not shrink under the daemon's mapping.
                fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                            fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
            else:
                # The pages the daemon writes must be the client's own, in
                # memory (docs/protocol.md, "Passing memory"): touch each.
                if size:
                    self.mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED,
                                        mmap.PROT_READ | mmap.PROT_WRITE)
                    np.frombuffer(self.mm, np.uint8)[::mmap.PAGESIZE] = 0
                fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self):
        self.close()

    def array(self, m):
        """The tensor of get's metadata `m`, a NumPy array over a mapping of
        the memfd (no copy); the memfd itself is closed."""
        size, dt = int(m["bytes"]), _dt.NUMPY_DTYPES.get(m.get("dtype"))
        if dt is None or not isinstance(m.get("shape"), (list, tuple)):
            raise ProtocolError("unexpected tensor metadata %r" % (m,)[:200])
        mm, self.mm = self.mm, None
        self.close()
        if size == 0:
            return np.zeros(m["shape"], dtype=dt)
        if mm is None or len(mm) < size:
            raise ProtocolError("the daemon wrote %d bytes into a memfd of %d"
                                % (size, 0 if mm is None else len(mm)))
        return _dt.decode(m["dtype"], m["shape"], memoryview(mm)[:size], copy=False)
