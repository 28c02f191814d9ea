# Sourced by test_tensorctl.sh (with its daemon, ctl, ok, bad, js, fail):
# the new user's tensorctl of issue 19.

# Run tensorctl; it must exit with status $1 (the rest: its arguments).
want_rc() {
	local want=$1 rc=0
	shift
	ctl "$@" >"$DIR/out" 2>"$DIR/err" || rc=$?
	[[ $rc -eq $want ]] || fail "tensorctl $* exited $rc, want $want: $(cat "$DIR/err")"
}

step "per-command help"
global=$(ctl --help)
for cmd in ping info metrics ls stat rm sync chmod put copy cp get run graph train step save load \
	model evaluate predict kernel help; do
	for form in "help $cmd" "$cmd --help" "$cmd -h"; do
		# shellcheck disable=SC2086
		out=$(ctl $form) || fail "tensorctl $form exited $?"
		[[ $out != "$global" ]] || fail "tensorctl $form prints the global help"
		want=$cmd
		[[ $cmd == cp ]] && want=copy
		grep -E "^Usage: tensorctl $want( |$)" <<<"$out" >/dev/null ||
			fail "tensorctl $form: no usage line of $want: $out"
		grep -E '^Example:$' <<<"$out" >/dev/null || fail "tensorctl $form: no example: $out"
		(($(wc -l <<<"$out") < 30)) || fail "tensorctl $form: more than 29 lines"
	done
done
out=$(ctl put --help)
for o in --file --values --shape --dtype --device; do
	grep -e "$o" <<<"$out" >/dev/null || fail "put --help lacks $o"
done
# An op's attrs: docs/ops.md's row, compiled in (the daemon lists no ops).
out=$(ctl run sgd_param --help)
grep -E '^  attrs.*lr \(required\).*nesterov' <<<"$out" >/dev/null || fail "run sgd_param --help: $out"
grep -E '^  inputs: +w, g, buf' <<<"$out" >/dev/null || fail "run sgd_param --help inputs: $out"
[[ $(ctl help run conv2d) == "$(ctl run conv2d --help)" ]] || fail "help run OP differs from run OP --help"
ctl run matmul -h | grep -E '^  attrs:' >/dev/null || fail "run matmul -h has no attrs"
want_rc 2 run no_such_op --help
grep "no op 'no_such_op'" "$DIR/err" >/dev/null || fail "run no_such_op --help: $(cat "$DIR/err")"
want_rc 2 help no-such-command
want_rc 0 help
[[ $(cat "$DIR/out") == "$global" ]] || fail "tensorctl help is not the global help"

step "required flags: exit 2, with the option's name"
# want_usage MESSAGE-REGEX ARGS...: exit 2 and the message on stderr.
want_usage() {
	local re=$1
	shift
	want_rc 2 "$@"
	grep -E -e "$re" "$DIR/err" >/dev/null || fail "tensorctl $*: stderr lacks /$re/: $(cat "$DIR/err")"
	! grep -E '(^|[^"])batch_size([^"]|$)|INVALID_ARGUMENT' "$DIR/err" >/dev/null ||
		fail "tensorctl $*: protocol names in: $(cat "$DIR/err")"
}
want_usage '--batch-size' train --model no-such-model --data x=a
want_usage '--data' train --model no-such-model --batch-size 4
want_usage '--epochs or --steps' train --model m --data x=a --batch-size 4 --epochs 1 --steps 2
printf '{"data": {"x": "a"}}\n' >"$DIR/train-nobatch.json"
want_usage '--batch-size N \(or "batch_size" in' train --model m "$DIR/train-nobatch.json"
want_usage '--data' evaluate m
want_usage '--input' predict m
want_usage '--groups' kernel run k a
want_usage '--file or --values' put x

step "unreachable daemon: a hint (no test touches the default socket)"
rc=0
TENSORD_SOCKET=$DIR/no-daemon.sock "$TENSORCTL_BIN" ls 2>"$DIR/err" || rc=$?
[[ $rc -eq 3 && $(wc -l <"$DIR/err") -eq 1 ]] || fail "ls, no daemon: exit $rc: $(cat "$DIR/err")"
grep -F "cannot connect to $DIR/no-daemon.sock: No such file or directory" "$DIR/err" >/dev/null &&
	grep -F 'is tensord running?' "$DIR/err" >/dev/null && grep -F 'TENSORD_SOCKET' "$DIR/err" >/dev/null ||
	fail "no hint: $(cat "$DIR/err")"
rc=0
"$TENSORCTL_BIN" --socket "$DIR/no-daemon.sock" ping 2>"$DIR/err" || rc=$?
[[ $rc -eq 3 ]] && grep -F 'is tensord running on that socket (--socket)?' "$DIR/err" >/dev/null ||
	fail "ping --socket, no daemon: exit $rc: $(cat "$DIR/err")"

step "several names and --prefix: rm, stat, get"
for i in 1 2 3 4; do ok put multi/t$i --values "$i,$((i * 10))" >/dev/null; done
ok put multi_t1 --values 9 >/dev/null
ok --json stat multi/t1 multi/t3 | js '
assert [t["name"] for t in j["tensors"]] == ["multi/t1", "multi/t3"], j'
out=$(ok stat multi/t2 multi/t4)
[[ $(grep -c '^multi/t[24] ' <<<"$out") -eq 2 ]] || fail "stat of two names: $out"
ok --json stat --prefix multi/ | js '
assert [t["name"] for t in j["tensors"]] == ["multi/t%d" % i for i in (1, 2, 3, 4)], j'
ok --json get multi/t1 multi/t2 | js '
assert [(t["name"], t["data"]) for t in j["tensors"]] == [("multi/t1", [1, 10]), ("multi/t2", [2, 20])], j'
out=$(ok get multi/t1 multi/t2)
grep -x 'multi/t2 =' <<<"$out" >/dev/null || fail "get of two names names them: $out"
# One --out per name, in order; or one directory.
ok get multi/t1 multi/t2 --out "$DIR/g1.npy" --out "$DIR/g2.safetensors" >/dev/null
ok get --prefix multi/ --out "$DIR/gdir/" >/dev/null
"$PY" - "$DIR" <<'PYEOF' || fail "get --out per name / directory wrote the wrong files"
import json, os, struct, sys
import numpy as np
d = sys.argv[1]
assert np.load(os.path.join(d, "g1.npy")).tolist() == [1, 10]
raw = open(os.path.join(d, "g2.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
assert h["multi/t2"]["shape"] == [2]
assert sorted(os.listdir(os.path.join(d, "gdir"))) == ["multi_t%d.npy" % i for i in (1, 2, 3, 4)]
assert np.load(os.path.join(d, "gdir", "multi_t4.npy")).tolist() == [4, 40]
PYEOF
want_rc 2 get multi/t1 multi/t2 --out "$DIR/only-one.npy"
want_rc 2 get multi/t1 multi/t2 multi/t3 --out "$DIR/a.npy" --out "$DIR/b.npy"
want_rc 2 get --prefix multi/ --out "$DIR/x.npy"
want_rc 2 rm multi/t1 --prefix multi/
want_rc 2 rm
want_rc 2 rm --prefix ''
# rm goes on past a missing name, says so, and exits 1.
want_rc 1 rm multi/t1 multi/missing multi/t2
grep -F 'multi/missing' "$DIR/err" >/dev/null || fail "rm: the missing name is not named: $(cat "$DIR/err")"
[[ $(grep -c '^deleted multi/t[12] ' "$DIR/out") -eq 2 ]] || fail "rm several: $(cat "$DIR/out")"
ok --json rm --prefix multi/ | js '
assert [d["name"] for d in j["deleted"]] == ["multi/t3", "multi/t4"] and all(d["deleted"] for d in j["deleted"]), j'
ok --json ls multi | js 'assert [t["name"] for t in j["tensors"]] == ["multi_t1"], j'
ok rm --prefix multi/ | grep 'nothing deleted' >/dev/null || fail "rm --prefix with no match"
want_rc 1 get --prefix multi/
ok rm multi_t1 >/dev/null

step "JSON numbers: shortest text that reads back, positional like Python's repr"
ok put num/f --values 10,0.1,100,1e20,0.0001,-2.5,16777216 >/dev/null
out=$(ok --json get num/f)
grep -F '"data":[10,0.1,100,1e+20,0.0001,-2.5,16777216]' <<<"$out" >/dev/null || fail "get --json numbers: $out"
ok --json stat num/f | "$PY" -c '
import re, sys
t = sys.stdin.read()
m = re.search(r"\"created\":([^,}]*)", t)
assert m and "e" not in m.group(1) and float(m.group(1)) > 1e9, t
' || fail "stat --json: created is not positional"
# Every f32 printed reads back to the same f32 (NumPy as the reference).
ok put num/r --values 0.1,0.2,0.3,1e-7,3.4e38,1.17549435e-38,123456.789,0.333333333 >/dev/null
ok --json get num/r | "$PY" -c '
import json, sys
import numpy as np
j = json.loads(sys.stdin.read())
want = np.array([0.1, 0.2, 0.3, 1e-7, 3.4e38, 1.17549435e-38, 123456.789, 0.333333333], dtype=np.float32)
got = np.array(j["data"], dtype=np.float32)
assert (got.view(np.uint32) == want.view(np.uint32)).all(), (j["data"], want)
assert j["data"][0] == 0.1 and j["data"][6] == 123456.79, j["data"]
' || fail "get --json: f32 values do not read back"
ok rm --prefix num/ >/dev/null

step "- reads standard input: put --file -, graph -, load -, kernel create -"
"$PY" -c '
import sys, numpy as np
np.save(sys.stdout.buffer, np.array([[1.5, 2], [3, 4]], dtype=np.float32))' |
	ctl --json put in/a --file - | js 'assert j["name"] == "in/a" and j["shape"] == [2, 2], j'
ok --json get in/a | js 'assert flat(j["data"]) == [1.5, 2, 3, 4], j'
printf '{"nodes": [{"id": "s", "op": "add", "inputs": ["in/a", "in/a"]}], "outputs": ["s"]}' |
	ctl --json graph - | js 'assert flat(j["outputs"]["s"]["data"]) == [3, 4, 6, 8], j'
ok save in/ "$DIR/in.safetensors" >/dev/null
ctl --json load - --prefix in2/ <"$DIR/in.safetensors" | js 'assert j["tensors"] == ["in2/in/a"], j'
ok --json get in2/in/a | js 'assert flat(j["data"]) == [1.5, 2, 3, 4], j'
want_rc 1 load - <"$DIR/junk.npy"
grep -E '^tensorctl: -: ' "$DIR/err" >/dev/null || fail "load - of junk: $(cat "$DIR/err")"
printf '#version 450\nlayout(local_size_x = 1) in;\nlayout(std430, binding = 0) buffer D { float v[]; };\nvoid main() { v[gl_GlobalInvocationID.x] *= 2.0; }\n' |
	ctl kernel create in/double - >/dev/null || fail "kernel create - failed"
ok kernel run in/double in/a --groups 4 >/dev/null
ok --json get in/a | js 'assert flat(j["data"]) == [3, 4, 6, 8], j'
ctl kernel rm in/double || fail "kernel rm"
want_rc 2 get in/a --out "$DIR/x.txt"
grep -F "unknown extension" "$DIR/err" >/dev/null || fail "get --out x.txt: $(cat "$DIR/err")"
[[ ! -e $DIR/x.txt ]] || fail "get --out x.txt wrote a file"
want_rc 2 get in/a --out "$DIR/x"
ok rm --prefix in/ >/dev/null
ok rm --prefix in2/ >/dev/null

step "info for people: aligned sections, counters summarised, no raw JSON"
ok run add r/a r/a >/dev/null 2>&1 || true
out=$(ok info)
! grep -E '[{}"]' <<<"$out" >/dev/null || fail "info prints raw JSON: $(grep -E '[{}"]' <<<"$out")"
for pat in '^daemon +tensord ' '^you +uid ' '^devices +[0-9]+ in use' '^requests +[0-9]+ \([0-9]+ failed\)$' \
	'^  busiest +[a-z.]+ [0-9]+' '^  traffic +[0-9.]+ [KMG]?i?B in, ' '^  connections +[0-9]+ accepted' '^limits$'; do
	grep -E -e "$pat" <<<"$out" >/dev/null || fail "info lacks /$pat/:
$out"
done
# The limits: one aligned column of values (every value starts at the same column).
printf '%s\n' "$out" >"$DIR/info.txt"
"$PY" - "$DIR/info.txt" <<'PYEOF' || fail "info: limits are not aligned"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
i = lines.index("limits")
block = []
for l in lines[i + 1:]:
    if not l.startswith("  "):
        break
    block.append(l)
assert len(block) >= 8, block
cols = {re.match(r"^  \S+ +", l).end() for l in block}
assert len(cols) == 1, block
assert (max(len(l) for l in lines if not l.startswith("  device ")) < 100), lines
PYEOF
ok --json info | js 'assert "tensor.put" in j["counters"]["requests"] and "limits" in j, list(j)'

step "info --watch fits the terminal: \$COLUMNS, or the terminal's size"
for how in "env COLUMNS=80" "stty cols 70;" "stty cols 100;"; do
	case $how in env*) width=80 ;; *70*) width=70 ;; *) width=100 ;; esac
	script -qfec "$how $TENSORCTL_BIN --socket $SOCK info --watch --count 1" /dev/null >"$DIR/tty.out" </dev/null ||
		fail "info --watch ($how) failed: $(cat "$DIR/tty.out")"
	"$PY" - "$DIR/tty.out" "$width" <<'PYEOF' || fail "info --watch ($how) does not fit $width columns: $(cat -v "$DIR/tty.out")"
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read().replace("\r", "")
text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
lines = text.splitlines()
width = int(sys.argv[2])
assert all(len(l) < width for l in lines), [l for l in lines if len(l) >= width]
assert any(re.match(r"^ID +(INDEX +)?NAME +TENSORS", l) for l in lines), lines
row = [l for l in lines if re.match(r"^ 0 ", l)]
assert row and re.search(r"\[[#.]{10}\] +[0-9.]+%", row[0]), lines
PYEOF
done
