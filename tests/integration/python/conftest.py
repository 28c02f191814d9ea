"""pytest fixtures for the Python client: one real tensord per session on a
temporary socket (tests/lib/daemon.py), a fresh Client per test."""
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "..", "python"), os.path.join(HERE, "..", "..", "lib")]

import tensord  # noqa: E402
from daemon import Daemon  # noqa: E402


@pytest.fixture(scope="session")
def daemon():
    d = Daemon().start()
    try:
        yield d
    finally:
        d.stop()  # raises unless it exits 0 on SIGTERM


@pytest.fixture
def client(daemon):
    with tensord.Client(daemon.sock, timeout=120) as c:
        yield c


@pytest.fixture
def prefix(request):
    """A tensor-name prefix of this test's own, so tests never share names."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:200] + "/"


@pytest.fixture
def small_daemon(tmp_path):
    """A daemon with small limits: 64 KiB messages, 16 KiB tensors."""
    conf = tmp_path / "small.conf"
    conf.write_text("max_message_bytes = 65536\nmax_tensor_bytes = 16384\n")
    d = Daemon(["--config", str(conf)]).start()
    try:
        yield d
    finally:
        d.stop()
