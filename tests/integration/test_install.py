"""`meson install` into a fresh prefix, used as a new user would (issue 19):

- tensorctl from the prefix starts without LD_LIBRARY_PATH (its run path
  finds the installed libtensord, not the build tree's) and pings a daemon;
- the program of docs/c-api.md, compiled with `pkg-config --cflags --libs
  tensord` against the installed header and library, runs against a test
  daemon and prints what NumPy computes; an old-style `#include <tensord.h>`
  still builds through pkg-config;
- the Python package lands in a directory /usr/bin/python3 searches for that
  prefix and works from there;
- `pip install --no-build-isolation --no-deps --no-index ./python` into a
  fresh `python3 -m venv --system-site-packages` (no network) gives an
  importable, typed `tensord` that talks to the daemon.

The install is `meson install --destdir D` of the build tree (prefix
$PREFIX): everything lands under D + $PREFIX. Environment: MESON, BUILD_ROOT,
SOURCE_ROOT, PREFIX, LIBDIR, BINDIR, SBINDIR, TENSORD_SANITIZE."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

SRC = os.environ["SOURCE_ROOT"]
PREFIX = os.environ["PREFIX"]


def clean_env(**extra):
    """The environment of a user who set nothing: no LD_LIBRARY_PATH,
    PYTHONPATH, PKG_CONFIG_PATH or TENSORD_SOCKET."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PKG_CONFIG_PATH",
                        "PKG_CONFIG_SYSROOT_DIR", "TENSORD_SOCKET", "PYTHONHOME")}
    env.update(extra)
    return env


def run(argv, **kw):
    kw.setdefault("env", clean_env())
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
    if p.returncode != 0:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(argv), p.returncode, p.stdout, p.stderr))
    return p.stdout


def doc_example():
    """The C block after the c-api-example marker of docs/c-api.md."""
    with open(os.path.join(SRC, "docs", "c-api.md")) as f:
        text = f.read()
    m = re.search(r"<!-- c-api-example.*?-->\s*```c\n(.*?)```", text, re.S)
    assert m, "docs/c-api.md has no marked C example"
    return m.group(1)


def check_prefix_binaries(root, sock):
    tensorctl = os.path.join(root, os.environ["BINDIR"], "tensorctl")
    libdir = os.path.join(root, os.environ["LIBDIR"])
    env = clean_env()
    if PREFIX == "/usr":
        # no run path there (client/lib/meson.build): the loader's default path
        # finds the library once it is really installed; under DESTDIR it is not
        env["LD_LIBRARY_PATH"] = libdir
    ldd = run(["ldd", tensorctl], env=env)
    m = re.search(r"libtensord\.so\.0 => (\S+)", ldd)
    assert m and os.path.realpath(m.group(1)).startswith(os.path.realpath(libdir) + "/"), \
        "tensorctl resolves libtensord outside the prefix:\n" + ldd
    out = run([tensorctl, "--help"], env=env)
    assert out.startswith("Usage: tensorctl")
    out = run([tensorctl, "--socket", sock, "ping"], env=env)
    assert re.match(r"pong from tensord \d+\.\d+\.\d+ \(protocol 1\)", out), out
    print("tensorctl from the prefix: ok (%s)" % m.group(1))


def check_c_example(tmp, destdir, root, sock):
    libdir = os.path.join(root, os.environ["LIBDIR"])
    env = clean_env(PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"),
                    PKG_CONFIG_SYSROOT_DIR=destdir)
    flags = run(["pkg-config", "--cflags", "--libs", "tensord"], env=env).split()
    assert "-I" + os.path.join(root, "include") in flags, flags
    san = []
    if os.environ.get("TENSORD_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined"]
    src = os.path.join(tmp, "example.c")
    with open(src, "w") as f:
        f.write(doc_example())
    exe = os.path.join(tmp, "example")
    cc = os.environ.get("CC", "cc")
    run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", exe, src] + flags + san
        + ["-Wl,-rpath," + libdir], env=env)
    out = run([exe, sock])
    a = np.array([1, 2, 3, 4, 5, 6], np.float32)
    b = np.array([0.5, 0.25, -1, 10, 100, 1000], np.float32)

    def numbers(label):
        m = re.search(r"^%s:.*?:((?: \S+)+)$" % label, out, re.M)
        assert m, "no %r line in:\n%s" % (label, out)
        return np.array(m.group(1).split(), np.float32)
    np.testing.assert_array_equal(numbers("add"), a + b)
    np.testing.assert_array_equal(numbers("mul"), a * b)
    assert "add: dtype f32 shape [2, 3]" in out and "code 5 (NOT_FOUND is 5)" in out, out
    assert "pipelined deletes: 0 pending, answers in order" in out, out
    # the documented output is what the program prints
    with open(os.path.join(SRC, "docs", "c-api.md")) as f:
        doc = f.read()
    assert out.replace("tensord 0.1.0", "") in doc.replace("tensord 0.1.0", ""), out
    # code written for the old top-level header still builds via pkg-config
    old = os.path.join(tmp, "old.c")
    with open(old, "w") as f:
        f.write("#include <tensord.h>\nint main(void) { return tensord_dtype_size(TENSORD_F32)"
                " == 4 ? 0 : 1; }\n")
    run([cc, "-o", os.path.join(tmp, "old"), old] + flags + san + ["-Wl,-rpath," + libdir],
        env=env)
    run([os.path.join(tmp, "old")])
    print("docs/c-api.md example via pkg-config: ok")


PY_CHECK = r"""
import sys, numpy as np, tensord, os
want = sys.argv[2]
assert os.path.realpath(tensord.__file__).startswith(os.path.realpath(want) + "/"), tensord.__file__
assert os.path.isfile(os.path.join(os.path.dirname(tensord.__file__), "py.typed"))
with tensord.Client(sys.argv[1], timeout=60) as c:
    x = np.random.default_rng(0).random((3, 4))
    assert c.put("py/x", x, cast=True)["dtype"] == "f32"
    assert c.put("py/y", x, dtype=np.float32)["dtype"] == "f32"
    s = c.op_run("add", ["py/x", "py/y"])
    np.testing.assert_array_equal(s, x.astype(np.float32) * 2)
    c.delete("py/x"); c.delete("py/y")
print("ok", tensord.__file__)
"""


def check_meson_python(tmp, destdir, sock):
    rel = subprocess.run(["/usr/bin/python3", os.path.join(SRC, "python", "purelib.py"),
                          PREFIX], capture_output=True, text=True, check=True).stdout.strip()
    purelib = os.path.normpath(os.path.join(PREFIX, rel))
    installed = destdir + purelib
    assert os.path.isfile(os.path.join(installed, "tensord", "__init__.py")), installed
    if PREFIX in ("/usr", "/usr/local"):
        searched = run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
                       cwd=tmp).split("\n")
        assert purelib in searched, "%s is not on /usr/bin/python3's path" % purelib
    out = run(["/usr/bin/python3", "-c", PY_CHECK, sock, installed], cwd=tmp,
              env=clean_env(PYTHONPATH=installed, PYTHONDONTWRITEBYTECODE="1"))
    print("meson-installed package (%s): %s" % (purelib, out.strip()))


def check_venv(tmp, sock):
    venv = os.path.join(tmp, "venv")
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], cwd=tmp)
    src = os.path.join(tmp, "python-src")   # pip builds in place: not in the source tree
    shutil.copytree(os.path.join(SRC, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    py = os.path.join(venv, "bin", "python")
    run([py, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
         "--no-index", "--disable-pip-version-check", src], cwd=tmp,
        env=clean_env(PIP_NO_INPUT="1", PIP_NO_CACHE_DIR="1"))
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               cwd=tmp).strip()
    assert site.startswith(venv + "/"), site
    out = run([py, "-c", PY_CHECK, sock, site], cwd=tmp)
    meta = run([py, "-m", "pip", "show", "tensord"], cwd=tmp)
    assert re.search(r"^Requires: msgpack, numpy$", meta, re.M), meta
    print("venv + pip install ./python: %s" % out.strip())


def main():
    tmp = tempfile.mkdtemp(prefix="tensord-install-", dir="/tmp")
    destdir = os.path.join(tmp, "dest")
    try:
        run([os.environ["MESON"], "install", "-C", os.environ["BUILD_ROOT"], "--no-rebuild",
             "--quiet", "--destdir", destdir])
        root = destdir + PREFIX
        tensord_bin = os.path.join(root, os.environ["SBINDIR"], "tensord")
        assert os.access(tensord_bin, os.X_OK), tensord_bin
        os.environ["TENSORD_BIN"] = tensord_bin   # the daemon too comes from the prefix
        d = Daemon().start()
        try:
            check_prefix_binaries(root, d.sock)
            check_c_example(tmp, destdir, root, d.sock)
            check_meson_python(tmp, destdir, d.sock)
            check_venv(tmp, d.sock)
        finally:
            d.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("install: all ok")


if __name__ == "__main__":
    main()
