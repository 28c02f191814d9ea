#!/bin/bash
# tensorctl against a real tensord: the CLI contract of DESIGN.md and
# tensorctl(1). Needs TENSORD_BIN, TENSORCTL_BIN and PYTHON3 (Debian's
# /usr/bin/python3, with python3-numpy).
set -euo pipefail
# (Pipelines end in `grep PATTERN >/dev/null`, not `grep -q`: -q stops reading at the
# first match, and the writer then dies of SIGPIPE, which pipefail reports.)

: "${TENSORD_BIN:?}" "${TENSORCTL_BIN:?}"
PY=${PYTHON3:-/usr/bin/python3}

DIR=$(mktemp -d /tmp/tensorctl-test-XXXXXX)
SOCK=$DIR/s.sock
LOG=$DIR/tensord.log
DPID=

dump_log() {
	echo "---- tensord log ----" >&2
	cat "$LOG" >&2 || true
	echo "---- end of tensord log ----" >&2
}

cleanup() {
	if [[ -n $DPID ]] && kill -0 "$DPID" 2>/dev/null; then
		kill -TERM "$DPID" 2>/dev/null || true
		wait "$DPID" 2>/dev/null || true
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	dump_log
	exit 1
}

step() { echo "== $*"; }

# ---- start the daemon ----
# A private state directory, persistence off as without --state-dir: no test
# touches /var/lib/tensord (docs/testing.md).
printf 'state_dir = %s\npersist = no\n' "$DIR/state" >"$DIR/test-state.conf"
"$TENSORD_BIN" --socket "$SOCK" --device auto --config "$DIR/test-state.conf" >"$LOG" 2>&1 </dev/null &
DPID=$!
"$PY" - "$SOCK" "$DPID" <<'EOF' || fail "tensord did not start"
import os, socket, sys, time
path, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        sys.exit(0)
    except OSError:
        pass
    finally:
        s.close()
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    if state in ("Z", "X", "gone"):
        print("tensord exited before serving", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.02)
print("tensord did not accept connections in 60 s", file=sys.stderr)
sys.exit(1)
EOF

ctl() { "$TENSORCTL_BIN" --socket "$SOCK" "$@"; }

# Run tensorctl; it must succeed and print something.
ok() {
	local out
	out=$(ctl "$@" 2>"$DIR/err") || fail "tensorctl $* exited $?: $(cat "$DIR/err")"
	[[ -n $out ]] || fail "tensorctl $* printed nothing"
	printf '%s\n' "$out"
}

# Run tensorctl; it must fail with exactly one non-empty line on stderr.
bad() {
	local rc=0 lines
	ctl "$@" >"$DIR/out" 2>"$DIR/err" || rc=$?
	[[ $rc -ne 0 ]] || fail "tensorctl $* succeeded, want failure (stdout: $(cat "$DIR/out"))"
	lines=$(wc -l <"$DIR/err")
	[[ $lines -eq 1 && -n $(head -c1 "$DIR/err") ]] ||
		fail "tensorctl $* (exit $rc): want one line on stderr, got $lines: $(cat "$DIR/err")"
	echo "   (exit $rc) $(cat "$DIR/err")"
}

# Check JSON on stdin with Python statements over `j`.
js() {
	"$PY" -c '
import json, sys
src = sys.stdin.read()
try:
    j = json.loads(src)
except ValueError as e:
    sys.exit("not JSON (%s): %r" % (e, src[:500]))
def flat(v):
    return [x for e in v for x in flat(e)] if isinstance(v, list) else [v]
exec(sys.argv[1])
' "$1" || fail "JSON check failed: $1"
}

# ---- ping, info ----
step ping
ok ping | grep -i pong >/dev/null || fail "ping output has no 'pong'"
ok --json ping | js 'assert j["pong"] is True and j["protocol"] == 1, j'

step "put --values / get --json"
ok put a --values 1,2,3,4,5,6 --shape 2,3 >/dev/null
ok --json get a | js '
assert j["dtype"] == "f32", j
assert j["shape"] == [2, 3], j
vals = j.get("data", j.get("values"))
assert vals is not None, j
if any(isinstance(v, list) for v in vals):
    assert len(vals) == 2 and all(len(r) == 3 for r in vals), vals
assert flat(vals) == [1, 2, 3, 4, 5, 6], vals
'
out=$(ok get a)
for v in 1 2 3 4 5 6; do
	grep -q "$v" <<<"$out" || fail "get a (text) lacks value $v: $out"
done

ok put i --values 7,-8,9 --dtype i32 >/dev/null
ok --json get i | js '
assert j["dtype"] == "i32" and j["shape"] == [3], j
assert flat(j.get("data", j.get("values"))) == [7, -8, 9], j
'
ok --json put s --values 2.5 --shape scalar | js 'assert j["shape"] == [] and j["bytes"] == 4, j'
ok --json get s | js 'assert flat(j.get("data", j.get("values"))) == [2.5] and j["shape"] == [], j'

step "info"
ok info >/dev/null
ok --json info | js '
for k in ("devices", "tensors", "limits", "version"):
    assert k in j, k
assert j["tensors"]["count"] >= 3, j["tensors"]
assert len(j["devices"]) >= 1
'

step "ls / stat"
out=$(ok ls)
for n in a i s; do
	grep -qw "$n" <<<"$out" || fail "ls lacks $n: $out"
done
ok --json ls | js '
names = [t["name"] for t in j["tensors"]]
assert names == sorted(names) and {"a", "i", "s"} <= set(names), names
a = [t for t in j["tensors"] if t["name"] == "a"][0]
assert a["dtype"] == "f32" and a["shape"] == [2, 3] and a["bytes"] == 24, a
'
ok put p/x --values 1 >/dev/null
ok put p/y --values 2 >/dev/null
ok --json ls p/ | js 'assert [t["name"] for t in j["tensors"]] == ["p/x", "p/y"], j'
ok stat a | grep f32 >/dev/null || fail "stat a lacks the dtype"
ok --json stat a | js '
assert j["name"] == "a" and j["dtype"] == "f32" and j["shape"] == [2, 3], j
assert j["bytes"] == 24 and j["version"] == 1, j
'
ok put a --values 6,5,4,3,2,1 --shape 3,2 >/dev/null
ok --json stat a | js 'assert j["version"] == 2 and j["shape"] == [3, 2], j'

step "rm"
ok rm p/x >/dev/null
ok --json rm p/y | js 'assert j["name"] == "p/y" and j["deleted"] is True and j["bytes"] == 4, j'
ok --json ls p/ | js 'assert j["tensors"] == [], j'

step "chmod"
ok --json stat a | js 'assert j["mode"] == "private" and j["owner"] == j["group"] == 0, j'
ok chmod world-read,group-write a | grep -w "group-write,world-read" >/dev/null ||
	fail "chmod prints the new mode"
ok --json chmod - a --group 7 | js 'assert j["group"] == 7 and j["mode"] == "group-write,world-read", j'
ok ls | grep -w "0:7" >/dev/null || fail "ls shows owner:group"
ok --json chmod private a | js 'assert j["mode"] == "private", j'
ok info | grep -w "^you" >/dev/null || fail "info shows the caller's usage"
bad chmod rw a
bad chmod - a
bad chmod private a --group wheel
bad chmod private "bad name"
bad chmod private missing
bad chmod private

step "errors"
bad get missing
bad stat missing
bad rm missing
bad put x --values 1,abc
bad put x --values 1,,2
bad put x --values 1,2,3 --shape 2,2
bad put x --values 1,2 --dtype f64
bad put 'bad name' --values 1
bad put x --file "$DIR/does-not-exist.npy"
printf 'this is not an npy file\n' >"$DIR/junk.npy"
bad put x --file "$DIR/junk.npy"
head -c 100 /dev/urandom >"$DIR/junk2.npy"
bad put x --file "$DIR/junk2.npy"
bad frobnicate
bad --socket "$DIR/no-such.sock" ping
bad --json get missing
ok --json ls x | js 'assert j["tensors"] == [], "a failed put stored x: %r" % j'

step "run / graph"
ok put r/a --values 1,2,3,4 --shape 2,2 >/dev/null
ok put r/b --values 10,20,30,40 --shape 2,2 >/dev/null
ok --json run add r/a r/b | js '
assert j["dtype"] == "f32" and j["shape"] == [2, 2], j
assert flat(j["data"]) == [11, 22, 33, 44], j'
ok run add r/a r/b | grep "33" >/dev/null || fail "run add printed no result"
ok --json run mul r/a --attr scalar=2.5 | js 'assert flat(j["data"]) == [2.5, 5, 7.5, 10], j'
ok --json run mse r/a r/b --attr reduction=sum -o r/loss | js '
assert j["name"] == "r/loss" and j["shape"] == [] and j["version"] == 1, j'
ok --json get r/loss | js 'assert flat(j["data"]) == [81 + 324 + 729 + 1296], j'
ok put r/cls --values 0,1 --dtype i32 >/dev/null
ok --json run cross_entropy r/b r/cls -a reduction=none -a 'label_smoothing=0.5' | js '
import math
want = []
for row, t in (([10, 20], 0), ([30, 40], 1)):
    lse = max(row) + math.log(sum(math.exp(v - max(row)) for v in row))
    want.append(0.5 * (lse - row[t]) + 0.5 * (lse - sum(row) / 2))
assert all(abs(g - w) < 1e-4 for g, w in zip(j["data"], want)), (j, want)'
cat >"$DIR/g.json" <<'EOF'
{"nodes": [
  {"id": "s", "op": "add", "inputs": ["r/a", "r/b"]},
  {"id": "p", "op": "mul", "inputs": ["s", "r/a"], "out": "r/p"}
 ],
 "outputs": ["s", "p"]}
EOF
ok graph "$DIR/g.json" | grep "stored r/p" >/dev/null || fail "graph did not list the stored name"
ok --json graph "$DIR/g.json" | js '
assert flat(j["outputs"]["s"]["data"]) == [11, 22, 33, 44], j
assert flat(j["outputs"]["p"]["data"]) == [11, 44, 99, 176], j
assert list(j["stored"]) == ["r/p"] and j["stored"]["r/p"]["shape"] == [2, 2], j'
ok --json get r/p | js 'assert flat(j["data"]) == [11, 44, 99, 176], j'
bad run add r/a r/missing
bad run no_such_op r/a
bad run add r/a --attr 'scalar=[1,'
bad run add r/a --attr noequals
bad run
bad run add r/a r/b -o 'bad name'
bad graph "$DIR/no-such.json"
printf '{"nodes": [' >"$DIR/trunc.json"
bad graph "$DIR/trunc.json"
printf '[1, 2]' >"$DIR/array.json"
bad graph "$DIR/array.json"
printf '{"nodes": [{"op": "add", "inputs": ["r/a", "r/b"], "out": "r/never"}, {"op": "add", "inputs": ["r/a"]}]}' >"$DIR/fail.json"
bad graph "$DIR/fail.json"
ok --json ls r/never | js 'assert j["tensors"] == [], "a failed graph stored r/never: %r" % j'

step ".npy files"
"$PY" - "$DIR" <<'EOF' || fail "could not write .npy files"
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(1234)
np.save(d + "/f16.npy", rng.standard_normal((3, 4)).astype(np.float16))
np.save(d + "/f32.npy", rng.standard_normal((2, 5)).astype(np.float32))
np.save(d + "/i32.npy", rng.integers(-2**31, 2**31, size=(5,), dtype=np.int32))
np.save(d + "/u8.npy", rng.integers(0, 256, size=(2, 3, 4), dtype=np.uint8))
np.save(d + "/scalar.npy", np.array(3.5, dtype=np.float32))
np.save(d + "/empty.npy", np.zeros((3, 0), dtype=np.float32))
EOF
for t in f16 f32 i32 u8 scalar empty; do
	ok put "npy/$t" --file "$DIR/$t.npy" >/dev/null
	ok get "npy/$t" --out "$DIR/$t.back.npy" >/dev/null
	"$PY" - "$DIR/$t.npy" "$DIR/$t.back.npy" <<'EOF' || fail "$t.npy did not come back equal"
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.dtype == b.dtype, (a.dtype, b.dtype)
assert a.shape == b.shape, (a.shape, b.shape)
assert a.tobytes() == b.tobytes(), "data differs"
EOF
	cmp "$DIR/$t.npy" "$DIR/$t.back.npy" || fail "$t.npy: the file that came back is not byte-identical"
done
ok --json get npy/i32 | "$PY" -c '
import json, sys
import numpy as np
j = json.load(sys.stdin)
a = np.load(sys.argv[1])
assert j["dtype"] == "i32" and j["shape"] == [5], j
assert j.get("data", j.get("values")) == a.tolist(), (j, a.tolist())
' "$DIR/i32.npy" || fail "get --json of an i32 .npy shows other values"
ok --json stat npy/f16 | js 'assert j["dtype"] == "f16" and j["shape"] == [3, 4] and j["bytes"] == 24, j'

step "256 MiB .npy"
"$PY" -c '
import sys
import numpy as np
rng = np.random.default_rng(256)
np.save(sys.argv[1], rng.integers(0, 256, size=(16384, 16384), dtype=np.uint8))
' "$DIR/big.npy" || fail "could not write big.npy"
ok put big --file "$DIR/big.npy" >/dev/null
rm -f "$DIR/big.back.npy"
ok get big --out "$DIR/big.back.npy" >/dev/null
cmp "$DIR/big.npy" "$DIR/big.back.npy" || fail "256 MiB .npy did not come back byte-identical"
rm -f "$DIR/big.npy" "$DIR/big.back.npy"
ok --json stat big | js 'assert j["bytes"] == 256 << 20 and j["dtype"] == "u8" and j["shape"] == [16384, 16384], j'
ok rm big >/dev/null

step "step (train.step)"
cat >"$DIR/step.json" <<'EOF'
{"nodes": [
  {"id": "xw", "op": "matmul", "inputs": ["r/a", "st/w"]},
  {"id": "loss", "op": "mse", "inputs": ["xw", "st/y"]}],
 "loss": "loss", "params": ["st/w"], "outputs": ["xw"],
 "optimizer": {"type": "sgd", "lr": 0.01}}
EOF
ok put st/w --values 0,0 --shape 2,1 >/dev/null
ok put st/y --values 1,2 --shape 2,1 >/dev/null
ok --json step "$DIR/step.json" | js '
assert abs(j["loss"] - 2.5) < 1e-5 and j["step"] == 1 and abs(j["lr"] - 0.01) < 1e-9, j
assert flat(j["outputs"]["xw"]["data"]) == [0, 0], j
assert "st/w" in j["stored"], j'
ok step "$DIR/step.json" | grep "^step 1: loss" >/dev/null || fail "step printed no loss line"
bad step "$DIR/array.json"
bad step "$DIR/no-such.json"

step "train (train.run)"
bad train "$DIR/array.json"
bad train "$DIR/no-such.json"
TRAIN_SRC=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../daemon/train/job.c
if ! grep -q train_run "$TRAIN_SRC" 2>/dev/null; then
	echo "   NOTE: skipping the train.run checks: the daemon has no train.run yet ($TRAIN_SRC)"
else
	"$PY" - "$DIR" <<'EOF' || fail "could not write the regression data"
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(64)
x = rng.standard_normal((64, 3)).astype(np.float32)
w = np.array([[2.0], [-3.0], [0.5]], dtype=np.float32)
np.save(d + "/x.npy", x)
np.save(d + "/y.npy", (x @ w + 0.7).astype(np.float32))
EOF
	ok put lr/x --file "$DIR/x.npy" >/dev/null
	ok put lr/y --file "$DIR/y.npy" >/dev/null
	ok put lr/w --values 0,0,0 --shape 3,1 >/dev/null
	ok put lr/b --values 0 --shape 1 >/dev/null
	cat >"$DIR/train.json" <<'EOF'
{"nodes": [
  {"id": "xw", "op": "matmul", "inputs": ["batch/x", "lr/w"]},
  {"id": "pred", "op": "add", "inputs": ["xw", "lr/b"]},
  {"id": "loss", "op": "mse", "inputs": ["pred", "batch/y"]}],
 "loss": "loss", "params": ["lr/w", "lr/b"],
 "optimizer": {"type": "sgd", "lr": 0.1},
 "data": {"batch/x": "lr/x", "batch/y": "lr/y"},
 "batch_size": 16, "epochs": 20, "seed": 7, "progress_every": 4,
 "eval": {"data": {"batch/x": "lr/x", "batch/y": "lr/y"}, "every": 40}}
EOF
	ok --json train "$DIR/train.json" >"$DIR/train.out"
	"$PY" - "$DIR/train.out" <<'EOF' || fail "train --json output is wrong: $(head -c 2000 "$DIR/train.out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
events = [l.get("event") for l in lines]
assert events[-1] == "result", events
prog = [l for l in lines if l["event"] == "progress"]
assert len(prog) >= 5, "only %d progress lines" % len(prog)
steps = [p["step"] for p in prog]
assert steps == sorted(steps) and steps[-1] <= 80, steps
for p in prog:
    for k in ("step", "epoch", "epochs", "steps", "loss", "lr", "samples_per_s", "elapsed"):
        assert k in p, (k, p)
    assert p["steps"] == 80 and p["epochs"] == 20, p
assert prog[-1]["loss"] < prog[0]["loss"], (prog[0], prog[-1])
evals = [l for l in lines if l["event"] == "eval"]
assert evals and all("loss" in e for e in evals), events
r = lines[-1]
assert r["steps"] == 80 and r["epochs"] == 20 and r["stopped"] == "done", r
assert r["loss"] < 1e-3, r
assert r["seconds"] > 0 and r["samples_per_s"] > 0, r
EOF
	ok --json get lr/w | js '
want = [2.0, -3.0, 0.5]
assert all(abs(g - w) < 0.02 for g, w in zip(flat(j["data"]), want)), j'
	ok --json get lr/b | js 'assert abs(flat(j["data"])[0] - 0.7) < 0.02, j'
	# For people, stdout not a TTY: a plain line per progress event, then the summary.
	out=$(ok train "$DIR/train.json")
	grep -q "^step [0-9]*/80 epoch [0-9]*/20 loss " <<<"$out" || fail "train printed no progress lines: $out"
	grep -q "^eval step" <<<"$out" || fail "train printed no eval line: $out"
	tail -n1 <<<"$out" | grep "^trained 80 steps in .* final loss .*, eval loss" >/dev/null ||
		fail "train printed no summary: $out"
	printf '{"nodes": [{"id": "l", "op": "mse", "inputs": ["batch/x", "lr/x"]}], "loss": "l",
	  "params": ["lr/w"], "data": {"batch/x": "lr/x"}, "batch_size": 0}' >"$DIR/badtrain.json"
	bad train "$DIR/badtrain.json"
fi

step "exit status (tensorctl(1), EXIT STATUS)"
# rc WANT ARGS...: tensorctl ARGS must exit WANT with one line on stderr (none for 0).
rc() {
	local want=$1 got=0
	shift
	ctl "$@" >"$DIR/out" 2>"$DIR/err" </dev/null || got=$?
	[[ $got -eq $want ]] || fail "tensorctl $*: exit $got, want $want ($(cat "$DIR/err"))"
	if [[ $want -eq 0 ]]; then
		[[ ! -s $DIR/err ]] || fail "tensorctl $*: stderr on success: $(cat "$DIR/err")"
	else
		[[ $(wc -l <"$DIR/err") -eq 1 ]] || fail "tensorctl $*: want one error line: $(cat "$DIR/err")"
	fi
}
rc 0 ping
rc 1 get missing
rc 1 --json stat missing
rc 1 rm missing
rc 1 run add r/a r/missing
rc 1 graph "$DIR/fail.json"
rc 1 put x --file "$DIR/junk.npy"
rc 2 frobnicate
rc 2 --frobnicate ping
rc 2 put x --values 1,abc
rc 2 put 'bad name' --values 1
rc 2 ls --watch
rc 2 info --interval 1
rc 2 info --count 2
rc 2 info --watch --count 0
rc 2 info --watch --count -1
rc 2 info --watch --count 1x
rc 2 info --watch --interval 0
rc 2 info --watch --interval nan
rc 2 info --watch --interval abc
rc 3 --socket "$DIR/no-such.sock" ping
rc 3 --socket "$DIR/no-such.sock" --json get a
rc 3 --socket "$DIR/no-such.sock" info --watch --count 1
# A peer that accepts and hangs up: the connection fails mid-call.
"$PY" - "$DIR/hangup.sock" <<'PYEOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(8)
for _ in range(2):
    c, _ = s.accept()
    c.recv(65536)
    c.close()
PYEOF
HPID=$!
for _ in $(seq 100); do [[ -S $DIR/hangup.sock ]] && break; sleep 0.05; done
rc 3 --socket "$DIR/hangup.sock" ping
rc 3 --socket "$DIR/hangup.sock" stat a
wait "$HPID"

step "--json on every command"
printf '{"nodes": [{"id": "s", "op": "add", "inputs": ["r/a", "r/b"]}], "outputs": ["s"]}' >"$DIR/g2.json"
for args in "ping" "info" "ls" "ls r/" "stat r/a" "put j/x --values 1,2" "get j/x" \
	"get j/x --out $DIR/j.npy" "put j/y --file $DIR/j.npy" "run add r/a r/b" \
	"run add r/a r/b -o j/z" "graph $DIR/g2.json" "step $DIR/step.json" "rm j/x"; do
	# shellcheck disable=SC2086
	ok --json $args | js 'assert isinstance(j, dict) and j, j' || fail "--json $args"
done

step "info --watch"
ok --json info --watch --count 3 --interval 0.1 >"$DIR/watch.json"
"$PY" - "$DIR/watch.json" <<'PYEOF' || fail "info --watch --json: $(cat "$DIR/watch.json")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 3, len(lines)
for l in lines:
    for k in ("devices", "connections", "tensors", "requests", "time", "rates"):
        assert k in l, (k, l)
    assert l["connections"] >= 1 and any(d["active"] for d in l["devices"]), l
assert lines[0]["rates"] == {"requests_per_s": None, "failed_per_s": None,
                             "users_gpu_percent": {"%d" % u["uid"]: None for u in lines[0]["users"]}}, lines[0]["rates"]
for a, b in zip(lines, lines[1:]):
    assert b["rates"]["requests_per_s"] >= 0 and b["rates"]["failed_per_s"] >= 0, b["rates"]
    # each user's share of the GPU between the samples (tensorctl top)
    assert all(0 <= p <= 100 * len(b["devices"]) for p in b["rates"]["users_gpu_percent"].values()), b["rates"]
    assert b["requests"]["total"] > a["requests"]["total"], (a["requests"], b["requests"])
    # Samples keep a fixed cadence (start + k * interval), so a late reply
    # makes the next sample come sooner: only the order and a bound hold.
    assert 0 < b["time"] - a["time"] < 5, (a["time"], b["time"])
PYEOF
# Rates count the requests of other clients between two samples.
ctl --json info --watch --count 2 --interval 3 >"$DIR/rate.json" &
WPID=$!
for _ in $(seq 100); do [[ -s $DIR/rate.json ]] && break; sleep 0.05; done
for _ in 1 2 3 4 5; do ctl ping >/dev/null; done
ctl stat missing >/dev/null 2>&1 || true
wait "$WPID" || fail "info --watch in the background failed"
"$PY" - "$DIR/rate.json" <<'PYEOF' || fail "info --watch rates: $(cat "$DIR/rate.json")"
import json, sys
a, b = [json.loads(l) for l in open(sys.argv[1])]
n = b["requests"]["total"] - a["requests"]["total"]
assert n == 7, "5 pings, 1 stat and the second info, got %d" % n
assert b["requests"]["failed"] - a["requests"]["failed"] == 1, (a["requests"], b["requests"])
dt = b["time"] - a["time"]
r = b["rates"]
assert abs(r["requests_per_s"] * dt - 6) < 0.5, (r, dt)
assert abs(r["failed_per_s"] * dt - 1) < 0.2, (r, dt)
PYEOF
# Not a terminal, no --json: a header, then a line per sample.
out=$(ok info --watch --count 2 --interval 0.1)
[[ $(wc -l <<<"$out") -eq 3 ]] || fail "info --watch (text) printed: $out"
# tensorctl top is the same view (issue 34).
out=$(ok top --count 2 --interval 0.1)
[[ $(wc -l <<<"$out") -eq 3 ]] || fail "top (text) printed: $out"
ok --json top --count 2 --interval 0.1 | "$PY" -c '
import json, sys
a, b = [json.loads(l) for l in sys.stdin]
assert set(b["rates"]["users_gpu_percent"]) == {"%d" % u["uid"] for u in b["users"]}, b["rates"]' ||
	fail "top --json: users_gpu_percent"
head -n1 <<<"$out" | grep "^TIME *CLIENTS *TENSORS *TENSOR SIZE *MEM USED *MEM LIMIT *REQ/S *FAILED/S *LOAD$" >/dev/null ||
	fail "info --watch header: $out"
sed -n 3p <<<"$out" | grep -E '^[0-9:]{8} +[0-9]+ +[0-9]+ +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +[0-9.]+ +[0-9.]+ +[0-9]+%$' >/dev/null ||
	fail "info --watch line: $out"
# On a terminal: the screen is redrawn in place (home, clear) each time.
script -qfec "$TENSORCTL_BIN --socket $SOCK info --watch --count 2 --interval 0.1" /dev/null >"$DIR/tty.out" </dev/null ||
	fail "info --watch on a TTY failed: $(cat "$DIR/tty.out")"
[[ $(grep -o $'\033\\[H\033\\[J' "$DIR/tty.out" | wc -l) -eq 2 ]] || fail "info --watch did not redraw twice: $(cat -v "$DIR/tty.out")"
for pat in "^clients " "^tensors " "^requests .*/s" "^ID *INDEX *NAME *TENSORS *USED *LIMIT *USE *LOAD$" \
	'^ 0 +[0-9]+ .* [0-9]+ +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +\[[#.]{10}\] +[0-9.]+% +\[[#.]{10}\] +[0-9]+%$'; do
	tr -d '\r' <"$DIR/tty.out" | grep -E -- "$pat" >/dev/null || fail "info --watch screen lacks '$pat': $(cat -v "$DIR/tty.out")"
done

step "progress bars on a terminal"
"$PY" -c '
import sys
import numpy as np
np.save(sys.argv[1], np.random.default_rng(5).integers(0, 256, size=(16 << 20,), dtype=np.uint8))
' "$DIR/p16.npy" || fail "could not write p16.npy"
tty_ctl() { script -qfec "$TENSORCTL_BIN --socket $SOCK $*" /dev/null </dev/null | tr '\r' '\n'; }
tty_ctl put pb --file "$DIR/p16.npy" >"$DIR/tty.out"
grep '^put pb \[#*\.*\] *[0-9]*%  [0-9.]* [KMG]\?i\?B / 16.0 MiB' "$DIR/tty.out" >/dev/null || fail "put drew no bar: $(cat -v "$DIR/tty.out")"
grep '^put pb \[####################\] 100%  16.0 MiB / 16.0 MiB' "$DIR/tty.out" >/dev/null || fail "put bar did not reach 100%: $(cat -v "$DIR/tty.out")"
grep '^stored pb: u8 \[16777216\], 16.0 MiB' "$DIR/tty.out" >/dev/null || fail "put printed no summary: $(cat -v "$DIR/tty.out")"
tty_ctl get pb --out "$DIR/p16.back.npy" >"$DIR/tty.out"
grep '^get pb \[####################\] 100%  16.0 MiB / 16.0 MiB' "$DIR/tty.out" >/dev/null || fail "get drew no bar: $(cat -v "$DIR/tty.out")"
cmp "$DIR/p16.npy" "$DIR/p16.back.npy" || fail "p16.npy did not come back"
# never with --json, never for small tensors, never off a terminal
tty_ctl --json get pb --out "$DIR/p16.back.npy" >"$DIR/tty.out"
! grep '\[#' "$DIR/tty.out" >/dev/null || fail "--json drew a bar: $(cat -v "$DIR/tty.out")"
tty_ctl get a >"$DIR/tty.out"
! grep '\[#' "$DIR/tty.out" >/dev/null || fail "a small get drew a bar"
ctl put pb --file "$DIR/p16.npy" >/dev/null 2>"$DIR/err" || fail "put off a TTY failed"
[[ ! -s $DIR/err ]] || fail "put off a TTY wrote to stderr: $(cat -v "$DIR/err")"
# put/get --file of 1 MiB or more go through a memfd: not through the socket
sock_bytes() { ctl --json info | "$PY" -c 'import json,sys; k=json.load(sys.stdin)["counters"]; print(k["bytes_in"] + k["bytes_out"])'; }
before=$(sock_bytes)
ctl put pb --file "$DIR/p16.npy" >/dev/null || fail "put (memfd) failed"
ctl get pb --out "$DIR/p16.back.npy" >/dev/null || fail "get (memfd) failed"
after=$(sock_bytes)
(( after - before < 1048576 )) || fail "16 MiB put + get moved $((after - before)) socket bytes"
cmp "$DIR/p16.npy" "$DIR/p16.back.npy" || fail "p16.npy did not come back through the memfd"
ctl rm pb >/dev/null
rm -f "$DIR/p16.npy" "$DIR/p16.back.npy"

step "models (model define/ls/stat/rm/save/load, train --model, evaluate, predict)"
"$PY" - "$DIR" <<'EOF2' || fail "could not write the model data"
import json, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(5)
x = rng.standard_normal((32, 3)).astype(np.float32)
np.save(d + "/mx.npy", x)
np.save(d + "/my.npy", (x @ np.array([[1.0], [-2.0], [0.5]]) + 0.25).astype(np.float32))
np.save(d + "/mw.npy", rng.uniform(-0.5, 0.5, (3, 1)).astype(np.float32))
def model(p):
    return {"nodes": [{"id": "xw", "op": "matmul", "inputs": ["x", p + "w"]},
                      {"id": "pred", "op": "add", "inputs": ["xw", p + "b"]},
                      {"id": "loss", "op": "mse", "inputs": ["pred", "y"]},
                      {"id": "d", "op": "sub", "inputs": ["pred", "y"]},
                      {"id": "ad", "op": "abs", "inputs": ["d"]},
                      {"id": "mae", "op": "mean", "inputs": ["ad"]}],
            "loss": "loss", "params": [p + "w", p + "b"], "outputs": ["pred"],
            "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 3]}, {"name": "y", "dtype": "f32", "shape": [1, 1]}],
            "optimizer": {"type": "adam", "lr": 0.05}}
for p in ("cm", "cu"):
    json.dump(model(p + "/"), open("%s/%s.json" % (d, p), "w"))
    json.dump({"model": p, "data": {"x": "md/x", "y": "md/y"}}, open("%s/%s-step.json" % (d, p), "w"))
EOF2
ok put md/x --file "$DIR/mx.npy" >/dev/null
ok put md/y --file "$DIR/my.npy" >/dev/null
for p in cm cu; do
	ok put $p/w --file "$DIR/mw.npy" >/dev/null
	ok put $p/b --values 0 --shape 1 >/dev/null
	ok model define $p "$DIR/$p.json" | grep "^step  *0$" >/dev/null || fail "model define $p printed no step"
done
ok model ls | grep -E "^cm +0 +2 +16 B +loss +x, y +adam$" >/dev/null || fail "model ls: $(ctl model ls)"
# The column names the loss node (issue 35: "LOSS" read as a loss value).
# Into a file first: `ok ... | head -1` lets head close the pipe while ok's
# printf still writes, and under load the SIGPIPE failed the pipeline.
ok model ls >"$DIR/mls"
head -1 "$DIR/mls" | grep -E "^NAME +STEP +PARAMS +SIZE +LOSS NODE +INPUTS +OPTIMIZER$" >/dev/null ||
	fail "model ls header: $(head -1 "$DIR/mls")"
ok --json model ls | js '
names = [m["name"] for m in j["models"]]
assert names == ["cm", "cu"], names
assert j["models"][0]["params"] == 2 and j["models"][0]["inputs"] == ["x", "y"], j'
ok --json model stat cm | js '
assert j["name"] == "cm" and j["step"] == 0 and j["definition"]["loss"] == "loss", j
assert [p["name"] for p in j["params"]] == ["cm/w", "cm/b"] and j["params"][0]["shape"] == [3, 1], j
assert j["state"] == [], j'
for k in 1 2; do
	ok --json step "$DIR/cm-step.json" | js "assert j[\"step\"] == $k, j"
	ok --json step "$DIR/cu-step.json" | js "assert j[\"step\"] == $k, j"
done
ok --json model stat cm | js '
assert j["step"] == 2 and sorted(j["state"]) == ["cm/b.exp_avg", "cm/b.exp_avg_sq", "cm/w.exp_avg", "cm/w.exp_avg_sq"], j'
ok model stat cm | grep -E "^cm/w.exp_avg +state +f32 +\[3, 1\]$" >/dev/null || fail "model stat lacks the state rows"
# save, delete everything, load, go on: the same as never stopping
ok model save cm "$DIR/cm.safetensors" | grep "^saved model cm (step 2, 6 tensors" >/dev/null ||
	fail "model save printed no summary"
ok --json model rm cm --tensors | js 'assert j["deleted"] is True, j'
ok --json ls cm/ | js 'assert j["tensors"] == [], j'
bad model stat cm
ok --json model load "$DIR/cm.safetensors" | js '
assert j["model"] == "cm" and j["step"] == 2 and len(j["tensors"]) == 6, j'
bad model load "$DIR/cm.safetensors"
ok model load "$DIR/cm.safetensors" --replace >/dev/null
for k in 3 4; do
	ok --json step "$DIR/cm-step.json" | js "assert j[\"step\"] == $k, j"
	ok --json step "$DIR/cu-step.json" | js "assert j[\"step\"] == $k, j"
done
for t in w b w.exp_avg w.exp_avg_sq; do
	ok get cm/$t --out "$DIR/cm-$t.npy" >/dev/null
	ok get cu/$t --out "$DIR/cu-$t.npy" >/dev/null
	cmp -s "$DIR/cm-$t.npy" "$DIR/cu-$t.npy" || fail "cm/$t after save/load differs from uninterrupted cu/$t"
done
ok model load "$DIR/cm.safetensors" --name cm2 >/dev/null
ok --json model stat cm2 | js 'assert j["step"] == 2 and j["definition"]["params"] == ["cm/w", "cm/b"], j'
ok model rm cm2 | grep "^deleted model cm2$" >/dev/null || fail "model rm printed nothing"
ok --json get cm/w | js 'assert len(flat(j["data"])) == 3, "model rm without --tensors deleted cm/w"'
# train --model: a server-side run that starts after the model's count
ok --json train --model cu --data x=md/x --data y=md/y --batch-size 8 --epochs 2 >"$DIR/mtrain.out"
"$PY" - "$DIR/mtrain.out" <<'EOF2' || fail "train --model output is wrong: $(head -c 1000 "$DIR/mtrain.out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
prog = [l for l in lines if l["event"] == "progress"]
assert prog[0]["step"] == 5 and prog[-1]["step"] == 12, [p["step"] for p in prog]
# the run's own count: 1 to its 8 steps, whatever the model's count
assert [p["run_step"] for p in prog] == [p["step"] - 4 for p in prog], prog
assert prog[0]["run_step"] == 1 and prog[-1]["run_step"] == 8 == prog[-1]["steps"], prog
assert lines[-1]["event"] == "result" and lines[-1]["steps"] == 8, lines[-1]
EOF2
ok --json model stat cu | js 'assert j["step"] == 12, j'
printf '{"epochs": 1, "seed": 3, "progress_every": 1, "eval": {"data": {"x": "md/x", "y": "md/y"}}}' \
	>"$DIR/runopts.json"
# A model trained before: progress is the run's step of the run's total, the
# model's own count beside it (not "step 13/2").
out=$(ok train --model cu "$DIR/runopts.json" --data x=md/x --data y=md/y --batch-size 16)
tail -n1 <<<"$out" | grep "^trained 2 steps" >/dev/null || fail "train --model FILE printed no summary"
[ "$(grep '^step ' <<<"$out" | sed 's/ epoch.*//')" = "step 1/2 (model step 13)
step 2/2 (model step 14)" ] || fail "train --model progress is not the run's own step of its total: $out"
grep -q "^eval step 2 (model step 14) epoch 1: loss " <<<"$out" || fail "train --model eval line: $out"
# evaluate and predict against NumPy
ok --json evaluate cu --data x=md/x --data y=md/y --metric mae >"$DIR/eval.json"
ok --json get cu/w >"$DIR/cuw.json"
ok --json get cu/b >"$DIR/cub.json"
"$PY" - "$DIR" <<'EOF2' || fail "evaluate disagrees with NumPy"
import json, sys
import numpy as np
d = sys.argv[1]
x, y = np.load(d + "/mx.npy").astype(np.float64), np.load(d + "/my.npy").astype(np.float64)
w = np.array(json.load(open(d + "/cuw.json"))["data"], np.float64).reshape(3, 1)
b = np.array(json.load(open(d + "/cub.json"))["data"], np.float64)
pred = x @ w + b
e = json.load(open(d + "/eval.json"))
assert abs(e["loss"] - np.mean((pred - y) ** 2)) < 1e-5 * max(1, abs(e["loss"])), e
assert abs(e["metrics"]["mae"] - np.mean(np.abs(pred - y))) < 1e-5, e
assert e["samples"] == 32, e
np.save(d + "/cupred.npy", pred.astype(np.float32))
EOF2
out=$(ok evaluate cu --data x=md/x --data y=md/y --metric mae --batch-size 5)
grep -E "^loss +[0-9.e-]+$" <<<"$out" >/dev/null && grep -E "^mae +[0-9.e-]+$" <<<"$out" >/dev/null &&
	grep -E "^samples +32$" <<<"$out" >/dev/null || fail "evaluate (text) is not aligned: $out"
ok --json predict cu --input x=md/x | "$PY" -c '
import json, sys
import numpy as np
j = json.load(sys.stdin)
want = np.load(sys.argv[1])
got = np.array(j["outputs"]["pred"]["data"], np.float32).reshape(j["outputs"]["pred"]["shape"])
assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5), (got[:3], want[:3])
assert j["stored"] == {}, j
' "$DIR/cupred.npy" || fail "predict disagrees with NumPy"
ok predict cu --input x=md/x | grep -x "pred =" >/dev/null || fail "predict (text) printed no output"
ok --json predict cu --input x=md/x -o cu/pred | js 'assert list(j["stored"]) == ["cu/pred"] and j["outputs"] == {}, j'
ok --json predict cu --input x=md/x --output xw -o pred=cu/pred2 | js '
assert list(j["outputs"]) == ["xw"] and list(j["stored"]) == ["cu/pred2"], j'
ok --json get cu/pred | js 'assert j["shape"] == [32, 1], j'
# the errors
bad model define cx "$DIR/no-such.json"
bad model define cx "$DIR/array.json"
bad model define cu "$DIR/cu.json"
bad model define 'bad name' "$DIR/cu.json"
bad model frobnicate
bad model stat
bad model ls extra
bad model rm nope
bad model stat cu --tensors
bad model load "$DIR/junk.npy"
bad model load "$DIR/no-such.safetensors"
bad evaluate cu
bad evaluate cu --data x
bad evaluate cu --data x=md/x --data y=md/y --batch-size 0
bad evaluate nope --data x=md/x
bad predict cu
bad predict cu --input x=md/x -o 'bad name'
bad predict cu --input x=md/missing
bad predict cu --input x=md/x --output mae
bad train --model cu --data x=md/x --batch-size 8
bad train --model 'bad name' --data x=md/x --batch-size 8
bad train --data x=md/x --batch-size 8
bad train --model cu --data x=md/x --data y=md/y --batch-size ten

step "save / load (safetensors)"
ok --json save md/ "$DIR/md.safetensors" | js 'assert j["tensors"] == ["md/x", "md/y"] and j["bytes"] == 512, j'
ok save cu/ "$DIR/cu.safetensors" | grep "^saved .* tensors" >/dev/null || fail "save printed no summary"
# an independent reader (struct + json) sees what tensorctl wrote
"$PY" - "$DIR" <<'EOF2' || fail "tensorctl save wrote a file the spec-following reader refuses"
import json, struct, sys
import numpy as np
d = sys.argv[1]
raw = open(d + "/md.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert raw[8:9] == b"{" and (8 + n) % 8 == 0, n
hdr = json.loads(raw[8:8 + n].decode("utf-8"))
buf = raw[8 + n:]
assert set(hdr) == {"md/x", "md/y"}, hdr
spans = sorted(tuple(v["data_offsets"]) for v in hdr.values())
assert spans[0][0] == 0 and spans[-1][1] == len(buf) and all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans
for name, f in (("md/x", "mx"), ("md/y", "my")):
    t = hdr[name]
    assert t["dtype"] == "F32", t
    a = np.frombuffer(buf[t["data_offsets"][0]:t["data_offsets"][1]], "<f4").reshape(t["shape"])
    assert np.array_equal(a, np.load("%s/%s.npy" % (d, f))), name
raw = open(d + "/cm.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
meta = json.loads(raw[8:8 + n])["__metadata__"]
assert meta["tensord.model"] == "cm" and meta["tensord.step"] == "2", meta
assert json.loads(meta["tensord.definition"])["loss"] == "loss", meta
# a file written here, independently: every dtype tensord stores, a scalar,
# an empty tensor, metadata, a header padded with spaces
tensors = [("ind/f32", "F32", np.arange(6, dtype="<f4").reshape(2, 3)),
           ("ind/f16", "F16", np.array([1.5, -2.25], "<f2")),
           ("ind/bf16", "BF16", np.array([0x3f80, 0xc000], "<u2")),
           ("ind/i32", "I32", np.array([[-7], [2 ** 31 - 1]], "<i4")),
           ("ind/u8", "U8", np.array([0, 255, 7], "u1")),
           ("ind/scalar", "F32", np.array(2.5, "<f4")),
           ("ind/empty", "F32", np.zeros((0, 4), "<f4"))]
header, data = {"__metadata__": {"written by": "test_tensorctl.sh"}}, b""
for name, dt, a in reversed(tensors):
    header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [len(data), len(data) + a.nbytes]}
    data += a.tobytes()
h = json.dumps(header).encode() + b"   "
open(d + "/ind.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
# and broken ones
h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}).encode()
open(d + "/short.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 4)
h = json.dumps({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}).encode()
open(d + "/f64.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 8)
h = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
open(d + "/hole.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 8)
open(d + "/hugehdr.safetensors", "wb").write(struct.pack("<Q", 1 << 40) + b"{}")
h = json.dumps({"bad name": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
open(d + "/badname.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 4)
EOF2
ok --json load "$DIR/ind.safetensors" | js '
assert sorted(j["tensors"]) == sorted(["ind/f32", "ind/f16", "ind/bf16", "ind/i32", "ind/u8", "ind/scalar", "ind/empty"]), j
assert j["metadata"] == {"written by": "test_tensorctl.sh"}, j'
ok --json get ind/f32 | js 'assert j["dtype"] == "f32" and j["shape"] == [2, 3] and flat(j["data"]) == [0, 1, 2, 3, 4, 5], j'
ok --json get ind/f16 | js 'assert j["dtype"] == "f16" and flat(j["data"]) == [1.5, -2.25], j'
ok --json get ind/bf16 | js 'assert j["dtype"] == "bf16" and flat(j["data"]) == [1, -2], j'
ok --json get ind/i32 | js 'assert j["shape"] == [2, 1] and flat(j["data"]) == [-7, 2 ** 31 - 1], j'
ok --json get ind/u8 | js 'assert flat(j["data"]) == [0, 255, 7], j'
ok --json get ind/scalar | js 'assert j["shape"] == [] and flat(j["data"]) == [2.5], j'
ok --json stat ind/empty | js 'assert j["shape"] == [0, 4] and j["bytes"] == 0, j'
ok load "$DIR/md.safetensors" --prefix copy/ | grep "^loaded 2 tensors (512 B)" >/dev/null || fail "load --prefix printed no summary"
ok get copy/md/x --out "$DIR/copyx.npy" >/dev/null
cmp -s "$DIR/copyx.npy" "$DIR/mx.npy" || fail "copy/md/x differs from md/x after save and load"
# round trip of the independent file through tensorctl save
ok save ind/ "$DIR/ind2.safetensors" >/dev/null
ok load "$DIR/ind2.safetensors" --prefix again/ >/dev/null
for t in f32 f16 bf16 i32 u8 scalar; do
	[[ "$(ctl --json get ind/$t)" == "$(ctl --json get again/ind/$t | sed 's|"again/ind/|"ind/|')" ]] ||
		fail "ind/$t changed through save and load"
done
# one tensor: put --file / get --out with a .safetensors file
bad put one/f16 --file "$DIR/ind.safetensors"
ok put ind/i32 --file "$DIR/ind.safetensors" >/dev/null
ok --json get ind/i32 | js 'assert j["shape"] == [2, 1] and flat(j["data"]) == [-7, 2 ** 31 - 1], j'
ok get ind/f16 --out "$DIR/one.safetensors" >/dev/null
"$PY" - "$DIR/one.safetensors" <<'PYEOF' || fail "get --out .safetensors: not the tensor an independent reader expects"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
h.pop("__metadata__", None)
assert list(h) == ["ind/f16"] and h["ind/f16"]["dtype"] == "F16" and h["ind/f16"]["shape"] == [2], h
b, e = h["ind/f16"]["data_offsets"]
assert struct.unpack("<2e", raw[8 + n + b:8 + n + e]) == (1.5, -2.25)
PYEOF
ok put one/f16 --file "$DIR/one.safetensors" >/dev/null
ok --json get one/f16 | js 'assert j["dtype"] == "f16" and flat(j["data"]) == [1.5, -2.25], j'
bad put one/f16 --file "$DIR/one.safetensors" --dtype f32
bad put one/x --file "$DIR/f64.safetensors"
bad put one/x --file "$DIR/short.safetensors"
bad load "$DIR/short.safetensors"
bad load "$DIR/f64.safetensors"
bad load "$DIR/hole.safetensors"
bad load "$DIR/hugehdr.safetensors"
bad load "$DIR/badname.safetensors"
bad load "$DIR/junk.npy"
bad load "$DIR/no-such.safetensors"
bad load "$DIR/md.safetensors" --prefix 'bad prefix'
bad save nothing-has-this-prefix/ "$DIR/none.safetensors"
bad save md/ "$DIR/no-such-dir/x.safetensors"
bad model load "$DIR/md.safetensors"
ok --json ls | js 'assert not any(t["name"].startswith(("short", "f64", "hole", "a/")) for t in j["tensors"]), j'

# ---- issue 19: help, required flags, several names, JSON numbers, stdin ----
# shellcheck source=tests/integration/tensorctl_usability.sh
source "$(dirname "${BASH_SOURCE[0]}")/tensorctl_usability.sh"

# ---- stop: SIGTERM must end it with status 0 ----
step "stop"
kill -TERM "$DPID"
rc=0
wait "$DPID" || rc=$?
DPID=
[[ $rc -eq 0 ]] || fail "tensord exited with $rc on SIGTERM"
echo "all tensorctl checks passed"
