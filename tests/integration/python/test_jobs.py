"""Detached jobs through the Python client: train_run(detach=True), jobs(),
job(), cancel() and watch() (docs/protocol.md, "Jobs")."""
import numpy as np
import pytest

import tensord


def _setup(c, prefix):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 2)).astype(np.float32)
    c.put(prefix + "x", x)
    c.put(prefix + "y", (x @ np.array([[2.0], [-1.0]], dtype=np.float32)).astype(np.float32))
    c.put(prefix + "w", np.zeros((2, 1), np.float32))
    nodes = [{"id": "h", "op": "matmul", "inputs": ["bx", prefix + "w"]},
             {"id": "loss", "op": "mse", "inputs": ["h", "by"]}]
    return nodes, {"bx": prefix + "x", "by": prefix + "y"}


def test_detach_watch(client, prefix):
    nodes, data = _setup(client, prefix)
    job = client.train_run(nodes, "loss", [prefix + "w"], data, batch_size=16, steps=300,
                           progress_every=30, optimizer={"type": "sgd", "lr": 0.1}, detach=True)
    assert isinstance(job, int)
    events = list(client.watch(job))
    kinds = [k for k, _ in events]
    assert kinds[-1] == "end" and set(kinds[:-1]) <= {"progress"}
    end = events[-1][1]
    assert end["job"] == job and end["state"] == "done" and end["result"]["steps"] == 300
    progress = [m for k, m in events if k == "progress"]
    assert [p["run_step"] for p in progress] == list(range(300 - 30 * (len(progress) - 1), 301, 30))
    # the connection goes on after the watch
    assert client.ping()["pong"]
    assert client.job(job)["state"] == "done"
    assert job in [j["job"] for j in client.jobs()]
    np.testing.assert_allclose(client.get(prefix + "w"), [[2.0], [-1.0]], atol=0.05)


def test_watch_left_early(client, prefix):
    """Leaving `for ev in c.watch(job)` early closes that connection (the
    job runs on) and the client goes on with a new one (issue 35: it raised
    ConnectionFailed for good)."""
    nodes, data = _setup(client, prefix)
    job = client.train_run(nodes, "loss", [prefix + "w"], data, batch_size=16, steps=10000000,
                           progress_every=10, detach=True)
    for kind, m in client.watch(job):
        if kind == "progress":
            break
    assert client.ping()["pong"]
    assert client.job(job)["state"] == "running"
    client.cancel(job)
    *_, (kind, end) = client.watch(job)
    assert kind == "end" and end["state"] == "cancelled"


def test_cancel_and_errors(client, prefix):
    nodes, data = _setup(client, prefix)
    job = client.train_run(nodes, "loss", [prefix + "w"], data, batch_size=16, steps=10000000,
                           detach=True)
    assert client.job(job)["state"] == "running"
    assert client.cancel(job) == {"job": job, "cancelling": True}
    *_, (kind, end) = client.watch(job)
    assert kind == "end" and end["state"] == "cancelled" and end["stopped"] == "cancelled"
    with pytest.raises(tensord.FailedPrecondition):
        client.cancel(job)
    with pytest.raises(tensord.NotFound):
        client.job(1 << 40)
