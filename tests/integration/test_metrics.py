"""`tensorctl metrics`: the daemon's counters in the Prometheus text format.

Each scrape is checked twice: by prometheus_client's own parser (Debian's
python3-prometheus-client, an independent reading of the format) and by a
strict line-by-line check here (every line a HELP, TYPE or sample line; one
family's lines together; TYPE before samples; no series twice; counters named
*_total). Then the counters must move exactly as the requests sent between
two scrapes say, and agree with `tensorctl --json info`.

Run with /usr/bin/python3; TENSORD_BIN and TENSORCTL_BIN name the programs.
"""
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon, as_user  # noqa: E402

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

CTL = os.environ["TENSORCTL_BIN"]
PASSED = 0

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(\{(%s(?:,%s)*)?\})? (\S+)$" % (NAME, LABEL, LABEL))
HELP = re.compile(r"^# HELP (%s) (.*)$" % NAME)
TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % NAME)


def ok(msg):
    global PASSED
    PASSED += 1
    print("ok: " + msg)


def fail(msg):
    print("FAIL: " + msg)
    print("%d passed, 1 failed" % PASSED)
    sys.exit(1)


def ctl(sock, *args, check=True):
    p = subprocess.run([CTL, "--socket", sock] + list(args), capture_output=True, text=True,
                       timeout=60)
    if check and p.returncode != 0:
        fail("tensorctl %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p


def strict_parse(text):
    """{(name, frozenset(labels)): value}, {name: type}; fails on any bad line."""
    series, types, done = {}, {}, set()
    current = None
    if not text.endswith("\n"):
        fail("output does not end with a newline")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        m = HELP.match(line)
        if m:
            if m.group(1) in done or m.group(1) == current:
                fail("line %d: a second HELP for %s" % (n, m.group(1)))
            if current:
                done.add(current)
            current = m.group(1)
            continue
        m = TYPE.match(line)
        if m:
            if m.group(1) != current or m.group(1) in types:
                fail("line %d: TYPE %s is not right after its HELP" % (n, m.group(1)))
            types[m.group(1)] = m.group(2)
            if m.group(2) == "counter" and not m.group(1).endswith("_total"):
                fail("line %d: counter %s does not end in _total" % (n, m.group(1)))
            continue
        m = SAMPLE.match(line)
        if not m:
            fail("line %d is no valid exposition line: %r" % (n, line))
        name = m.group(1)
        if name != current or name not in types:
            fail("line %d: sample of %s outside its family" % (n, name))
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                      m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            fail("line %d: value %r is not a number" % (n, m.group(4)))
        if (name, labels) in series:
            fail("line %d: series %s%s appears twice" % (n, name, dict(labels)))
        if types[name] == "counter" and (value < 0 or math.isnan(value)):
            fail("line %d: counter %s is %r" % (n, name, value))
        series[(name, labels)] = value
    return series, types


def scrape(sock):
    text = ctl(sock, "metrics").stdout
    series, types = strict_parse(text)
    # The reference parser must read the same samples.
    ref = {}
    for fam in text_string_to_metric_families(text):
        if fam.type != types.get(fam.name) and not (
                fam.type == "counter" and types.get(fam.name + "_total") == "counter"):
            fail("prometheus_client reads family %s as %s" % (fam.name, fam.type))
        for s in fam.samples:
            ref[(s.name, frozenset(s.labels.items()))] = s.value
    if set(ref) != set(series):
        fail("prometheus_client reads other series: only theirs %r, only ours %r"
             % (sorted(set(ref) - set(series))[:3], sorted(set(series) - set(ref))[:3]))
    for k, v in series.items():
        if not (ref[k] == v or (math.isnan(v) and math.isnan(ref[k]))):
            fail("%s: prometheus_client reads %r, we read %r" % (k, ref[k], v))
    return series


def get(series, name, **labels):
    key = (name, frozenset(labels.items()))
    if key not in series:
        fail("no series %s%s" % (name, labels))
    return series[key]


def method(series, name, m):
    return get(series, name, method=m)


def main():
    with Daemon() as d:
        sock = d.sock
        first = scrape(sock)
        ok("first scrape: %d series, every line valid, prometheus_client agrees" % len(first))
        for m in ("ping", "info", "tensor.put", "tensor.get", "op.run", "train.run", "other"):
            method(first, "tensord_requests_total", m)
            method(first, "tensord_request_errors_total", m)
        if get(first, "tensord_connections_accepted_total") < 1:
            fail("the scrape's own connection is not counted")
        ok("every method has request and error series from the start")

        # Requests between two scrapes: 3 puts, 2 gets (one of a missing
        # tensor), 2 runs of the same op, 1 unknown method, 1 garbage stream.
        with d.client() as c:
            for name in ("a", "b", "c"):
                c.call("tensor.put", {"name": name, "dtype": "f32", "shape": [64],
                                      "data": bytes(256)})
            c.call("tensor.get", {"name": "a"})
            err, _ = c.call_full("tensor.get", {"name": "nope"})
            if not err or err["name"] != "NOT_FOUND":
                fail("get of a missing tensor: %r" % err)
            for _ in range(2):
                c.call("op.run", {"op": "add", "inputs": ["a", "b"], "out": "s"})
            err, _ = c.call_full("no.such.method", {})
            if not err or err["name"] != "UNIMPLEMENTED":
                fail("unknown method: %r" % err)
        with d.client() as raw:
            raw.send_raw(b"\xc1")
            note = raw.recv()
            if not (isinstance(note, list) and note[1] == "protocol.error"):
                fail("garbage got %r" % (note,))
        second = scrape(sock)

        def delta(name, **labels):
            return get(second, name, **labels) - get(first, name, **labels)

        want = {"tensor.put": (3, 0), "tensor.get": (2, 1), "op.run": (2, 0),
                "other": (1, 1), "ping": (0, 0), "tensor.delete": (0, 0),
                # The scrapes: the first one's info is counted once answered.
                "info": (1, 0)}
        for m, (req, errs) in want.items():
            got = (delta("tensord_requests_total", method=m),
                   delta("tensord_request_errors_total", method=m))
            if got != (req, errs):
                fail("%s: requests/errors moved by %r, expected %r" % (m, got, (req, errs)))
        if delta("tensord_request_seconds_total", method="op.run") <= 0:
            fail("op.run took no time")
        ok("requests and errors per method moved exactly as sent")

        if delta("tensord_received_bytes_total") < 3 * 256:
            fail("bytes received grew by %r after 768 bytes of puts"
                 % delta("tensord_received_bytes_total"))
        if delta("tensord_sent_bytes_total") < 256:
            fail("bytes sent grew by %r after a 256-byte get" % delta("tensord_sent_bytes_total"))
        # Two clients, and the second scrape's own connection.
        if delta("tensord_connections_accepted_total") != 3:
            fail("connections accepted grew by %r, expected 3 (two clients and the scrape)"
                 % delta("tensord_connections_accepted_total"))
        if delta("tensord_protocol_errors_total") != 1:
            fail("protocol errors grew by %r, expected 1" % delta("tensord_protocol_errors_total"))
        ok("bytes in/out, connections and protocol errors counted")

        info = json.loads(ctl(sock, "--json", "info").stdout)
        active = [x for x in info["devices"] if x["active"]][0]
        dev = {"device": str(active["index"])}
        if delta("tensord_gpu_submissions_total", **dev) < 2:
            fail("two op.run gave %r GPU submissions" % delta("tensord_gpu_submissions_total", **dev))
        if delta("tensord_gpu_busy_seconds_total", **dev) <= 0:
            fail("GPU busy time did not grow over two op.run")
        if delta("tensord_gpu_wait_seconds_total", **dev) <= 0:
            fail("GPU wait time did not grow over two op.run")
        if get(second, "tensord_pipeline_compiles_total", **dev) < 1 or \
                delta("tensord_pipeline_hits_total", **dev) < 1:
            fail("the second add did not reuse the first one's pipeline")
        if get(second, "tensord_pipelines", **dev) != get(second, "tensord_pipeline_compiles_total", **dev):
            fail("pipelines kept != pipelines built")
        ok("GPU submissions, busy and wait time, pipeline compiles and hits move "
           "(busy %.6f s, timing by %s)" % (get(second, "tensord_gpu_busy_seconds_total", **dev),
                                           info["counters"]["gpu"]["timing"]))

        # Gauges agree with info; device memory per device.
        for x in info["devices"]:
            lab = {"device": str(x["index"])}
            for key in ("memory_total", "memory_used", "memory_reserved"):
                if get(second, "tensord_device_%s_bytes" % key, **lab) != x[key]:
                    fail("device %s %s differs from info" % (lab, key))
            if get(second, "tensord_device_active", **lab) != (1 if x["active"] else 0):
                fail("tensord_device_active of %s" % lab)
        if get(second, "tensord_tensors") != 4 or get(second, "tensord_tensor_bytes") != 4 * 256:
            fail("tensors gauges: %r, %r" % (get(second, "tensord_tensors"),
                                              get(second, "tensord_tensor_bytes")))
        if get(second, "tensord_device_memory_used_bytes", **dev) != 4 * 256:
            fail("device memory used is not the 4 tensors' bytes")
        if get(second, "tensord_limit", limit="max_tensors") != info["limits"]["max_tensors"]:
            fail("tensord_limit{max_tensors}")
        ok("device memory, tensors and limits agree with info")

        # Counters never go down across scrapes.
        third = scrape(sock)
        for (name, labels), v in second.items():
            if name.endswith("_total") and third[(name, labels)] < v:
                fail("counter %s%s went down" % (name, dict(labels)))
        ok("no counter decreases between scrapes")

        # Usage errors.
        p = ctl(sock, "--json", "metrics", check=False)
        if p.returncode != 2 or "info" not in p.stderr or p.stdout:
            fail("--json metrics: exit %d, %r" % (p.returncode, p.stderr))
        p = ctl(sock, "metrics", "extra", check=False)
        if p.returncode != 2 or "unexpected argument" not in p.stderr:
            fail("metrics extra: exit %d, %r" % (p.returncode, p.stderr))
        p = ctl(d.sock + ".missing", "metrics", check=False)
        if p.returncode != 3 or p.stdout:   # tensorctl(1): 3 when the daemon cannot be reached
            fail("metrics without a daemon: exit %d, stdout %r" % (p.returncode, p.stdout))
        ok("usage errors and a missing daemon give exit 2 / 1 and no output")
    users_accounted()
    print("%d passed, 0 failed" % PASSED)


OTHER_UID = 65531


def users_accounted():
    """info's users and their families (issue 34): each uid's GPU time,
    requests, connections, tensors and jobs; root sees every uid, another
    user only itself."""
    if os.geteuid() != 0:
        ok("users: skipped (another uid needs root)")
        return
    with Daemon() as d:
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)

        def other():
            with d.client() as c:
                c.call("tensor.put", {"name": "w", "dtype": "f32", "shape": [256, 256], "data": bytes(256 * 1024)})
                for _ in range(3):
                    c.call("op.run", {"op": "matmul", "inputs": ["w", "w"], "out": "p"})
                c.call("graph.run", {"nodes": [{"id": "q", "op": "matmul", "inputs": ["w", "p"], "out": "q"}]})
                return c.call("info")["users"]

        mine = as_user(OTHER_UID, other)
        if len(mine) != 1 or mine[0]["uid"] != OTHER_UID or mine[0]["requests"] < 5 or \
                mine[0]["gpu_seconds"] <= 0 or mine[0]["tensors"] != 3 or mine[0]["connections"] != 1:
            fail("another user sees itself only, its work counted: %r" % (mine,))
        with d.client() as c:
            c.call("ping")
            users = {u["uid"]: u for u in c.call("info")["users"]}
        if set(users) != {0, OTHER_UID} or users[OTHER_UID]["connections"] != 0 or \
                users[OTHER_UID]["gpu_seconds"] < mine[0]["gpu_seconds"] or users[0]["connections"] != 1:
            fail("root sees every uid: %r" % (users,))
        series = scrape(d.sock)
        if get(series, "tensord_user_gpu_seconds_total", uid=str(OTHER_UID)) != users[OTHER_UID]["gpu_seconds"] or \
                get(series, "tensord_user_tensors", uid=str(OTHER_UID)) != 3:
            fail("tensord_user_* families: %r" % ({k: v for k, v in series.items() if "user" in k[0]},))
    ok("users: GPU time, requests, connections and tensors per uid; others see themselves")


if __name__ == "__main__":
    main()
