"""The C programs of docs/c-api.md, compiled and run (issue 35).

Every ```c block after a `<!-- c-api-example ... -->` marker is compiled with
-std=c11 -Wall -Wextra -Werror against the build tree's public header (as
<tensord/tensord.h>, the installed name) and libtensord, run against a test
daemon with its socket as argv[1], and its output must appear on the page as
shown (the daemon's version line aside). The blocking example and the
event-loop one are kept true this way; tests/integration/test_install.py
builds the first again from an installed prefix through pkg-config.

The same programs are run once more against a socket nobody listens on: they
must fail with the reason libtensord gives (the event loop prints
tensord_open()'s message, which names the path and the per-user socket).

Environment: SOURCE_ROOT, LIBTENSORD (the built shared library), CC (the
project's compiler command), TENSORD_BIN, TENSORD_SANITIZE."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

SRC = os.environ["SOURCE_ROOT"]
LIB = os.environ["LIBTENSORD"]
DOC = os.path.join(SRC, "docs", "c-api.md")


def examples(text):
    """(label, code) of each marked C block, in page order."""
    found = re.findall(r"<!-- c-api-example:?\s*([^;>]*?)[;>\s].*?-->\s*```c\n(.*?)```", text, re.S)
    return [(label.strip() or "example", code) for label, code in found]


def run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
    if p.returncode != 0:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(argv), p.returncode, p.stdout, p.stderr))
    return p.stdout


def main():
    with open(DOC) as f:
        doc = f.read()
    progs = examples(doc)
    labels = [label for label, _ in progs]
    assert len(progs) >= 2, "docs/c-api.md should mark two C programs, found %r" % labels
    assert any("event" in label for label in labels), labels
    tmp = tempfile.mkdtemp(prefix="tensord-c-api-doc-", dir="/tmp")
    try:
        inc = os.path.join(tmp, "include", "tensord")
        os.makedirs(inc)
        shutil.copy(os.path.join(SRC, "client", "lib", "tensord.h"), inc)
        cc = shlex.split(os.environ.get("CC") or "cc")
        san = ["-fsanitize=address,undefined"] if os.environ.get("TENSORD_SANITIZE") == "1" else []
        exes = []
        for i, (label, code) in enumerate(progs):
            src = os.path.join(tmp, "prog%d.c" % i)
            with open(src, "w") as f:
                f.write(code)
            exe = os.path.join(tmp, "prog%d" % i)
            run(cc + ["-std=c11", "-Wall", "-Wextra", "-Werror", "-I" + os.path.join(tmp, "include"),
                      "-o", exe, src, LIB, "-Wl,-rpath," + os.path.dirname(LIB)] + san)
            exes.append((label, exe))
        env = dict(os.environ)
        env.pop("TENSORD_SOCKET", None)
        d = Daemon().start()
        try:
            for label, exe in exes:
                out = run([exe, d.sock], env=env)
                # the daemon's version is the project's; the page shows 0.1.0
                shown = re.sub(r"^tensord \S+$", "tensord 0.1.0", out, flags=re.M)
                assert shown in doc, "%s printed what docs/c-api.md does not show:\n%s" % (label, out)
                print("%s: ok (%d lines as documented)" % (label, out.count("\n")))
        finally:
            d.stop()
        # no daemon there: each program fails, saying why
        missing = os.path.join(tmp, "nobody.sock")
        for label, exe in exes:
            p = subprocess.run([exe, missing], capture_output=True, text=True, timeout=60, env=env)
            assert p.returncode != 0, "%s succeeded without a daemon" % label
            if "event" in label:
                assert missing in p.stderr and "is tensord running?" in p.stderr \
                    and "$XDG_RUNTIME_DIR/tensord/tensord.sock" in p.stderr, p.stderr
            print("%s without a daemon: %s" % (label, p.stderr.strip()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("c_api_doc: all ok")


if __name__ == "__main__":
    main()
