"""The Python client's memfd path (docs/protocol.md, "Passing memory"):
large arrays go through a sealed memory file, not the socket (the daemon's
bytes_in/bytes_out counters show it), and come back equal."""
import numpy as np

import tensord


def counters(c):
    k = c.info()["counters"]
    return k["bytes_in"], k["bytes_out"]


def test_large_put_get_skip_the_socket(client, prefix):
    a = (np.arange(1 << 20, dtype=np.float32) * 0.25).reshape(1024, 1024)
    in0, out0 = counters(client)
    client.put(prefix + "a", a)
    b = client.get(prefix + "a")
    in1, out1 = counters(client)
    assert np.array_equal(a, b) and b.dtype == np.float32 and b.shape == (1024, 1024)
    assert in1 - in0 < 64 << 10, "the put's bytes went through the socket"
    assert out1 - out0 < 64 << 10, "the get's bytes went through the socket"
    b[0, 0] = 7   # the mapping is the caller's own memory
    assert client.get(prefix + "a", memfd=False)[0, 0] == 0


def test_small_arrays_stay_on_the_socket(client, prefix):
    a = np.arange(10, dtype=np.int32)
    in0, _ = counters(client)
    client.put(prefix + "s", a)
    in1, _ = counters(client)
    assert in1 - in0 >= a.nbytes
    assert np.array_equal(client.get(prefix + "s"), a)


def test_forced_paths_and_dtypes(daemon, prefix):
    rng = np.random.default_rng(1)
    for dt in ("f16", "bf16", "u8", "i32"):
        a = rng.integers(0, 200, size=(3, 5, 7)).astype(np.uint16 if dt == "bf16" else
                                                        tensord.dtypes.NUMPY_DTYPES[dt])
        with tensord.Client(daemon.sock) as c:
            c.put(prefix + dt, a, dtype=dt, memfd=True)
        # a fresh client knows no size: it asks (stat) before the memfd get
        with tensord.Client(daemon.sock) as c:
            b = c.get(prefix + dt, memfd=True)
            assert np.array_equal(a, b) and b.shape == a.shape
            assert np.array_equal(c.get(prefix + dt, memfd=False), a)


def test_grown_tensor_falls_back(daemon, prefix):
    """The size this client saw is stale (another client replaced the tensor
    with a larger one): the automatic memfd get fails and is retried plain."""
    small, big = np.ones(1 << 18, np.float32), np.arange(1 << 19, dtype=np.float32)
    with tensord.Client(daemon.sock) as a, tensord.Client(daemon.sock) as b:
        a.put(prefix + "g", small)          # a saw 1 MiB: a memfd get of 1 MiB
        b.put(prefix + "g", big)
        assert np.array_equal(a.get(prefix + "g"), big)
        assert np.array_equal(a.get(prefix + "g"), big)   # now the right size, memfd again


def test_pipeline_memfd(client, prefix):
    arrays = [np.full(1 << 19, i, dtype=np.float32) for i in range(4)]
    with client.pipeline() as p:
        for i, a in enumerate(arrays):
            p.put(prefix + str(i), a)
        gets = [p.get(prefix + str(i), memfd=True) for i in range(4)]
    for a, g in zip(arrays, gets):
        assert np.array_equal(a, g.result())


def test_bad_memfd_is_an_error(client, prefix):
    client.put(prefix + "e", np.zeros(4, np.float32))
    with tensord.Client(client.path) as c:
        # an fd that is no memfd: the request fails, the connection goes on
        import os
        r, w = os.pipe()

        class Pipe:
            fd = r
            keep = False

            def close(self):
                os.close(r)
        os.close(w)
        try:
            c.call("tensor.put", {"name": prefix + "e", "dtype": "f32", "shape": [4], "fd": 0})
        except tensord.TensordError as e:
            assert "no file descriptor" in str(e)
        p = c.submit("tensor.put", {"name": prefix + "e", "dtype": "f32", "shape": [4], "fd": 0},
                     fds=[Pipe()])
        try:
            p.result()
            assert False, "a pipe was taken as a memfd"
        except tensord.TensordError as e:
            assert "not a memfd" in str(e)
        assert c.ping()["pong"]
