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
"$TENSORD_BIN" --socket "$SOCK" --device auto >"$LOG" 2>&1 </dev/null &
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
TRAIN_SRC=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../daemon/train.c
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
assert lines[0]["rates"] == {"requests_per_s": None, "failed_per_s": None}, lines[0]["rates"]
for a, b in zip(lines, lines[1:]):
    assert b["rates"]["requests_per_s"] >= 0 and b["rates"]["failed_per_s"] >= 0, b["rates"]
    assert b["requests"]["total"] > a["requests"]["total"], (a["requests"], b["requests"])
    assert 0.05 < b["time"] - a["time"] < 5, (a["time"], b["time"])
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
head -n1 <<<"$out" | grep "^TIME *CLIENTS *TENSORS *TENSOR SIZE *MEM USED *MEM TOTAL *REQ/S *FAILED/S$" >/dev/null ||
	fail "info --watch header: $out"
sed -n 3p <<<"$out" | grep -E '^[0-9:]{8} +[0-9]+ +[0-9]+ +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +[0-9.]+ +[0-9.]+$' >/dev/null ||
	fail "info --watch line: $out"
# On a terminal: the screen is redrawn in place (home, clear) each time.
script -qfec "$TENSORCTL_BIN --socket $SOCK info --watch --count 2 --interval 0.1" /dev/null >"$DIR/tty.out" </dev/null ||
	fail "info --watch on a TTY failed: $(cat "$DIR/tty.out")"
[[ $(grep -o $'\033\\[H\033\\[J' "$DIR/tty.out" | wc -l) -eq 2 ]] || fail "info --watch did not redraw twice: $(cat -v "$DIR/tty.out")"
for pat in "^clients " "^tensors " "^requests .*/s" "^DEV *NAME *USED *RESERVED *TOTAL *USE" '^\* [0-9]'; do
	tr -d '\r' <"$DIR/tty.out" | grep -- "$pat" >/dev/null || fail "info --watch screen lacks '$pat': $(cat -v "$DIR/tty.out")"
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
ctl rm pb >/dev/null
rm -f "$DIR/p16.npy" "$DIR/p16.back.npy"

# ---- stop: SIGTERM must end it with status 0 ----
step "stop"
kill -TERM "$DPID"
rc=0
wait "$DPID" || rc=$?
DPID=
[[ $rc -eq 0 ]] || fail "tensord exited with $rc on SIGTERM"
echo "all tensorctl checks passed"
