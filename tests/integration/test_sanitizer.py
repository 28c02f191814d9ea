"""The sanitizer build's leak check works both ways (docs/testing.md).

In a build with -Db_sanitize=address (TENSORD_SANITIZE=1 from meson):
- TENSORD_TEST_LEAK=1 makes tensord leak 4093 bytes of its own at start-up:
  the daemon must exit non-zero on SIGTERM with a LeakSanitizer report that
  names the leaking function, although tests/lib/lsan.supp is in use;
- TENSORD_TEST_LEAK=driver leaks a fence inside the Vulkan driver: with
  tests/lib/lsan.supp the daemon exits 0, without it LeakSanitizer reports the
  leak in the driver's module by name (the driver stays loaded: it is not
  "<unknown module>", which no suppression could name).
In other builds the switch is ignored: the daemon exits 0 and says nothing.

Run with /usr/bin/python3 and TENSORD_BIN set (meson test sanitizer)."""
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

SANITIZE = os.environ.get("TENSORD_SANITIZE") == "1"


def run(leak, suppressions=True):
    """Start a daemon with TENSORD_TEST_LEAK=`leak`, stop it with SIGTERM;
    returns (exit status, log)."""
    saved = dict(os.environ)
    try:
        os.environ["TENSORD_TEST_LEAK"] = leak
        os.environ["ASAN_OPTIONS"] = ":".join(
            o for o in (saved.get("ASAN_OPTIONS", ""), "detect_leaks=1") if o)
        if suppressions:
            os.environ["LSAN_OPTIONS"] = "suppressions=" + os.path.join(
                os.path.dirname(os.path.abspath(__file__)), "..", "lib", "lsan.supp")
        else:
            empty = tempfile.NamedTemporaryFile(prefix="lsan-empty-", suffix=".supp")
            os.environ["LSAN_OPTIONS"] = "suppressions=" + empty.name
        d = Daemon().start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        c = d.client()
        c.call("ping")
        c.close()
        d.proc.send_signal(signal.SIGTERM)
        rc = d.proc.wait(120)
        with open(d.log, errors="replace") as f:
            log = f.read()
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
        d.proc = None
        d._cleanup()
    return rc, log


def check(cond, what, log):
    if not cond:
        sys.stderr.write("---- tensord log ----\n%s---- end ----\n" % log)
        raise AssertionError(what)


def test_own_leak_is_reported():
    rc, log = run("1")
    if not SANITIZE:
        check(rc == 0 and "TENSORD_TEST_LEAK" not in log,
              "a plain build must ignore TENSORD_TEST_LEAK (exit %d)" % rc, log)
        return
    check(rc != 0, "tensord leaked and exited 0", log)
    check("ERROR: LeakSanitizer: detected memory leaks" in log, "no LeakSanitizer report", log)
    check("4093 byte(s)" in log and "tensord_test_leak" in log,
          "the report does not name tensord's leak", log)


def test_driver_leak_is_suppressed():
    rc, log = run("driver")
    if not SANITIZE:
        check(rc == 0 and "TENSORD_TEST_LEAK" not in log,
              "a plain build must ignore TENSORD_TEST_LEAK (exit %d)" % rc, log)
        return
    check("leaking a fence inside the driver" in log, "the driver leak was not made", log)
    check(rc == 0 and "LeakSanitizer" not in log,
          "a leak inside the driver failed the run (exit %d)" % rc, log)


def test_driver_leak_is_named_without_suppressions():
    if not SANITIZE:
        return
    rc, log = run("driver", suppressions=False)
    check(rc != 0 and "ERROR: LeakSanitizer: detected memory leaks" in log,
          "without suppressions the driver's leak must be reported (exit %d)" % rc, log)
    check("libvulkan_" in log, "the driver's frames are not named by module", log)


def test_no_leak_without_the_switch():
    rc, log = run("")
    check(rc == 0 and "LeakSanitizer" not in log, "a plain start and stop failed (exit %d)" % rc, log)


def main():
    failed = 0
    print("sanitizer build: %s" % ("yes" if SANITIZE else "no (switches must be ignored)"))
    for t in (test_own_leak_is_reported, test_driver_leak_is_suppressed,
              test_driver_leak_is_named_without_suppressions, test_no_leak_without_the_switch):
        try:
            t()
            print("ok   %s" % t.__name__)
        except Exception as e:
            failed += 1
            print("FAIL %s: %s" % (t.__name__, e))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
