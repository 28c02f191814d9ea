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
