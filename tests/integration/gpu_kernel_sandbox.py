#!/usr/bin/python3
"""The custom-kernel sandbox on a real GPU, where tests/integration/test_kernels.py cannot
run whole (it builds SPIR-V with glslangValidator, which a bare GPU host
lacks): every kernel here is GLSL compiled by tensord's own compiler child.
Limits are refused before any pipeline exists (an oversized workgroup used to
lose the H100 device), raw pointers are refused, a compiler crash and a
memory bomb cost one request, a slow compile does not hold the event loop,
and the device is never reset. Run on the GPU host (shared/gpu/README.md):

  . .gpu-runtime/enter.sh
  TENSORD_BIN=build-release/daemon/tensord python3 tests/integration/gpu_kernel_sandbox.py
"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import test_kernels as t
from daemon import Daemon
with Daemon() as d:
    with d.client() as c:
        def alive(what):
            with d.client() as o:
                t.check(o.call("ping") is not None, "serves after %s" % what)
        for name, src, says in (("wide", t.WIDE, "maxComputeWorkGroupInvocations"),
                                ("shared", t.SHARED_BIG, "maxComputeSharedMemorySize"),
                                ("local", t.LOCAL_BIG, "per invocation")):
            e = t.err(c, "kernel.create", {"name": name, "glsl": src})
            print(name, e)
            t.check(e[0] == "INVALID_ARGUMENT" and says in e[1], "%s refused: %r" % (name, e))
            alive(name)
        e = t.err(c, "kernel.create", {"name": "bref", "glsl": t.BUFFER_REFERENCE})
        print("bref", e); t.check(e[0] == "INVALID_ARGUMENT", "bref")
        e = t.err(c, "kernel.create", {"name": "deep", "glsl": t.DEEP}); print("deep", e)
        e = t.err(c, "kernel.create", {"name": "macros", "glsl": t.MACROS}); print("macros", e)
        t.test_glsl(c)
        t.test_graph_nodes(c)
    t.test_compile_off_loop(d)
    with d.client() as c:
        info = c.call("info")
        print("device_resets", info["device_resets"], info["devices"][0]["name"])
        t.check(info["device_resets"] == 0, "no device reset on NVIDIA")
print("failures:", t.failures)
sys.exit(1 if t.failures else 0)
