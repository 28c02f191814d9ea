#!/usr/bin/python3
"""The README's quick start, run exactly as written.

The fenced block under the "## Quick start" heading of README.md is extracted
and each of its command lines runs with bash, in order, from a fresh-clone-like
directory: every top-level entry of the source tree is linked into a temporary
directory, except `build`, which links to the build tree under test
(QUICKSTART_BUILD), so `./.ci/build` compiles that tree (nothing to do after
meson built the test's dependencies) and `build/daemon/tensord` is the daemon
under test. The example spawns its own tensord (--spawn: temporary socket and
--state-dir), so nothing touches /var/lib/tensord or /run/tensord.

Checked afterwards: a line "test accuracy A (k/n)" with A >= 0.95 that agrees
with k/n and with the JSON summary on the last line, and the picture the summary
names ("plot"): a valid PNG (tests/lib/png_check.py, an independent reader) of a
plausible size. Also: every image the README shows exists in the tree and is a
valid PNG under 100 KB.

Exits 77 (meson: skipped) when the digits data set cannot be fetched (no
network: fetch.sh exits 2), or, when not root, when python3-matplotlib is not
installed (`.ci/deps` would need sudo). Environment: QUICKSTART_BUILD,
DIGITS_CACHE (optional, passed on)."""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from png_check import check_png  # noqa: E402

SKIP = 77


def quickstart_commands(readme):
    """The command lines of the first fenced block after '## Quick start'
    (comment-only and blank lines dropped, backslash continuations joined)."""
    m = re.search(r"^## Quick start[^\n]*\n(.*?)(?=^## )", readme, re.S | re.M)
    if not m:
        raise SystemExit("FAIL: README.md has no '## Quick start' section")
    block = re.search(r"^```[a-z]*\n(.*?)^```", m.group(1), re.S | re.M)
    if not block:
        raise SystemExit("FAIL: the quick start has no fenced block")
    text = block.group(1).replace("\\\n", " ")
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def readme_images(readme):
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme)


def fresh_tree(tmp, build):
    """tmp/<entry> -> the source's <entry> for every top-level entry but the
    build trees; tmp/build -> the build tree under test."""
    for name in os.listdir(ROOT):
        if name.startswith("build") or name == ".git":
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(tmp, name))
    os.symlink(build, os.path.join(tmp, "build"))


def main():
    build = os.environ.get("QUICKSTART_BUILD")
    if not build or not os.path.isfile(os.path.join(build, "build.ninja")):
        print("FAIL: QUICKSTART_BUILD must name a configured build tree")
        return 1
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()

    for img in readme_images(readme):
        path = os.path.join(ROOT, img)
        if not os.path.isfile(path):
            print("FAIL: README.md shows %s, which is not in the tree" % img)
            return 1
        with open(path, "rb") as f:
            data = f.read()
        try:
            w, h = check_png(data)
        except ValueError as e:
            print("FAIL: %s: %s" % (img, e))
            return 1
        if len(data) >= 100 * 1024:
            print("FAIL: %s is %d bytes (keep pictures under 100 KB)" % (img, len(data)))
            return 1
        print("ok: README.md shows %s, a %dx%d PNG of %d bytes" % (img, w, h, len(data)))

    commands = quickstart_commands(readme)
    print("the quick start: %d commands" % len(commands))
    if len(commands) != 3:
        print("FAIL: the quick start promises three commands, the block has %d" % len(commands))
        return 1
    if os.geteuid() != 0:
        probe = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True)
        if probe.returncode != 0:
            print("SKIP: python3-matplotlib is missing and .ci/deps would need sudo")
            return SKIP

    with tempfile.TemporaryDirectory(prefix="quickstart-") as tmp:
        fresh_tree(tmp, os.path.abspath(build))
        env = dict(os.environ)
        env.pop("TENSORD_SOCKET", None)
        out = ""
        for cmd in commands:
            print("$ " + cmd, flush=True)
            try:
                run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", cmd], cwd=tmp, env=env,
                                     stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                     timeout=400)
            except subprocess.TimeoutExpired:
                print("FAIL: timed out")
                return 1
            sys.stdout.write(run.stdout)
            sys.stdout.write(run.stderr)
            if run.returncode == 2 and "fetch.sh" in cmd:
                print("SKIP: the digits data set cannot be fetched (no network?)")
                return SKIP
            if run.returncode != 0:
                print("FAIL: exit status %d" % run.returncode)
                return 1
            out = run.stdout

        lines = out.strip().splitlines()
        summary = json.loads(lines[-1])
        m = re.search(r"^test accuracy ([0-9.]+) \((\d+)/(\d+)\)$", out, re.M)
        if not m:
            print("FAIL: no 'test accuracy A (k/n)' line")
            return 1
        acc, k, n = float(m.group(1)), int(m.group(2)), int(m.group(3))
        if n != 359 or abs(acc - k / n) > 1e-4 or abs(summary["test_accuracy"] - acc) > 1e-4:
            print("FAIL: accuracy %s, %d/%d and summary %s disagree" % (acc, k, n, summary["test_accuracy"]))
            return 1
        if acc < 0.95:
            print("FAIL: test accuracy %.4f < 0.95" % acc)
            return 1
        png = os.path.join(tmp, summary.get("plot") or "")
        if not summary.get("plot") or not os.path.isfile(png):
            print("FAIL: the quick start wrote no picture (summary: %r)" % summary)
            return 1
        with open(png, "rb") as f:
            data = f.read()
        try:
            w, h = check_png(data)
        except ValueError as e:
            print("FAIL: %s: %s" % (summary["plot"], e))
            return 1
        if w < 400 or h < 200:
            print("FAIL: %s is only %dx%d" % (summary["plot"], w, h))
            return 1
        print("ok: test accuracy %.4f (%d/%d); %s is a %dx%d PNG of %d bytes" % (
            acc, k, n, summary["plot"], w, h, len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
