#!/bin/bash
# The bash completion of tensorctl (client/ctl/completion/tensorctl.bash): commands,
# options, dtypes, op names (the same list as docs/ops.md), files, and tensor
# names asked from a real tensord. Needs TENSORD_BIN, TENSORCTL_BIN,
# COMPLETION (the file) and OPS_DOC (docs/ops.md).
set -euo pipefail
: "${TENSORD_BIN:?}" "${TENSORCTL_BIN:?}" "${COMPLETION:?}" "${OPS_DOC:?}"

DIR=$(mktemp -d /tmp/tensorctl-comp-XXXXXX)
SOCK=$DIR/s.sock
DPID=
cleanup() {
	if [[ -n $DPID ]]; then
		kill -TERM "$DPID" 2>/dev/null || true
		wait "$DPID" 2>/dev/null || true
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	[[ -f $DIR/log ]] && cat "$DIR/log" >&2
	exit 1
}

# shellcheck source=/dev/null
source "$COMPLETION"
complete -p tensorctl | grep -- '-F _tensorctl' >/dev/null || fail "no complete -F _tensorctl"

# comp LINE: the completions offered with the cursor at the end of LINE, one a
# line, sorted.
comp() {
	COMP_LINE="tensorctl $1"
	COMP_POINT=${#COMP_LINE}
	read -ra COMP_WORDS <<<"$COMP_LINE"
	[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_tensorctl "$TENSORCTL_BIN" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
	((${#COMPREPLY[@]} == 0)) || printf '%s\n' "${COMPREPLY[@]}" | sort
}

# expect LINE WORD...: exactly these completions.
expect() {
	local line=$1 got want
	shift
	got=$(comp "$line")
	want=$( (($# == 0)) || printf '%s\n' "$@" | sort)
	[[ $got == "$want" ]] || fail "completing '$line': want [$(echo $want)], got [$(echo $got)]"
	echo "ok: '$line' -> $(echo $got)"
}

echo "== commands and options"
cmds=$("$TENSORCTL_BIN" --help | sed -n 's/^  \([a-z][a-z]*\) .*/\1/p; s/^  \([a-z][a-z]*\)$/\1/p' | sort -u)
[[ -n $cmds ]] || fail "no commands in tensorctl --help"
grep -x help <<<"$cmds" >/dev/null || fail "tensorctl --help lists no help command"
expect "" $cmds cp
expect "in" info
expect "s" save stat step sync
expect "--j" --json
expect "--socket $SOCK --js" --json
expect "put x --d" --dtype --device
expect "put x --de" --device
expect "put x --device " 
expect "copy a b --d" --device
expect "cp a b -" --socket --json --help --version --device
expect "train --dev" --devices
expect "train --devices " 
expect "train --model m --devices 0,1 -" --socket --json --help --version --model --data \
	--batch-size --epochs --steps --devices --detach --precision
expect "train --model m --precision " f32 bf16 f16
expect "step s.json --precision b" bf16
expect "model define m f.json --precision f1" f16
expect "put x --dtype " f32 f16 bf16 i32 u8
expect "put x --dtype b" bf16
expect "put x --values " 
expect "info --w" --watch
expect "info --watch --" --socket --json --help --version --watch --interval --count
expect "logs -" --socket --json --help --version --follow
expect "train --det" --detach
expect "get x --o" --out
expect "run add a -" --socket --json --help --version --out --attr --device
expect "ping " 
expect "chmod " - group-read group-write private world-read world-write
expect "chmod world-r" world-read
expect "chmod private x --g" --group
expect "chmod private x --group " 

echo "== one table: the bash, zsh and fish completions are made from tensorctl.table"
TABLE=$(dirname "$COMPLETION")/tensorctl.table
python3 "$(dirname "$COMPLETION")/gen_completion.py" "$TABLE" --check "$(dirname "$COMPLETION")" ||
	fail "the completions are not what tensorctl.table makes"
tcmds=$(grep -vE '^(#|global )' "$TABLE" | cut -d'|' -f1 | awk 'NF == 1 {print $1}' | sort -u)
[[ $tcmds == "$(printf '%s\n' $cmds cp | sort -u)" ]] ||
	fail "tensorctl.table's commands [$(echo $tcmds)] are not those of tensorctl --help [$(echo $cmds)]"
# An option the table says takes a value takes one in tensorctl too.
while IFS='|' read -r name _ opts _; do
	[[ $name == \#* || -z ${name// /} ]] && continue
	for o in $opts; do
		[[ $o == *=* ]] || continue
		long=${o%%[/=]*}
		c=${name%% *}
		[[ $c == global ]] && c=ping
		err=$("$TENSORCTL_BIN" --socket "$DIR/none.sock" "$c" "$long" 2>&1 >/dev/null || true)
		[[ $err == *"needs a value"* ]] ||
			fail "tensorctl.table: $long of $name takes a value, tensorctl says otherwise"
	done
done <"$TABLE"
if command -v zsh >/dev/null; then
	zsh -n "$(dirname "$COMPLETION")/_tensorctl" || fail "zsh -n _tensorctl"
else
	echo "(no zsh here: _tensorctl not checked)"
fi
if command -v fish >/dev/null; then
	fish -n "$(dirname "$COMPLETION")/tensorctl.fish" || fail "fish -n tensorctl.fish"
else
	echo "(no fish here: tensorctl.fish not checked)"
fi

echo "== every command's options: those of its own help (tensorctl help CMD)"
for c in $cmds; do
	want=$("$TENSORCTL_BIN" help "$c" | sed -n '/^Options:/,/^$/p' | grep -oE '^  (-[a-z], )?--[a-z-]+' |
		grep -oE -- '--[a-z-]+' | sort || true)
	got=$(comp "$c x --" | grep -vxE -- '--(socket|json|help|version)' || true)
	[[ $got == "$want" ]] || fail "$c: completion offers [$(echo $got)], tensorctl help $c lists [$(echo $want)]"
done
expect "help " $cmds cp
expect "help run matm" matmul

echo "== op names"
ops=$(grep '^| `' "$OPS_DOC" | cut -d'|' -f2 | grep -o '`[a-z_0-9]*`' | tr -d '`' | sort -u)
[[ $(comp "run ") == "$ops" ]] || fail "run's op names differ from docs/ops.md:
$(diff <(comp "run ") <(echo "$ops") || true)"
expect "run matm" matmul
expect "run cross" cross_entropy

echo "== files"
mkdir "$DIR/d"
: >"$DIR/g.json"
: >"$DIR/w.npy"
: >"$DIR/notes.txt"
expect "graph $DIR/" "$DIR/g.json" "$DIR/d"
expect "put x --file $DIR/" "$DIR/w.npy" "$DIR/d"
expect "get x --out $DIR/w" "$DIR/w.npy"
expect "graph $DIR/g.json "
: >"$DIR/m.safetensors"
: >"$DIR/d.json"
expect "put x --file $DIR/" "$DIR/w.npy" "$DIR/m.safetensors" "$DIR/d"
expect "get x --out $DIR/" "$DIR/w.npy" "$DIR/m.safetensors" "$DIR/d"
expect "load $DIR/" "$DIR/m.safetensors" "$DIR/d"
expect "model load $DIR/" "$DIR/m.safetensors" "$DIR/d"
expect "model save m $DIR/" "$DIR/m.safetensors" "$DIR/d"
expect "save p/ $DIR/" "$DIR/m.safetensors" "$DIR/d"
expect "model define m $DIR/" "$DIR/d.json" "$DIR/g.json" "$DIR/d"
expect "model " define ls stat rm save load

echo "== tensor names, without a daemon: none, and no noise"
expect "--socket $DIR/nobody.sock get "
[[ -z $(comp "--socket $DIR/nobody.sock get " 2>&1) ]] || fail "completion printed errors"

echo "== tensor names from a daemon"
# A private state directory, persistence off as without --state-dir: no test
# touches /var/lib/tensord (docs/testing.md).
printf 'state_dir = %s\npersist = no\n' "$DIR/state" >"$DIR/test-state.conf"
"$TENSORD_BIN" --socket "$SOCK" --device auto --config "$DIR/test-state.conf" >"$DIR/log" 2>&1 </dev/null &
DPID=$!
for _ in $(seq 300); do
	"$TENSORCTL_BIN" --socket "$SOCK" ping >/dev/null 2>&1 && break
	kill -0 "$DPID" 2>/dev/null || fail "tensord exited"
	sleep 0.1
done
for n in c/alpha c/beta c:colon other; do
	"$TENSORCTL_BIN" --socket "$SOCK" put "$n" --values 1 >/dev/null || fail "put $n"
done
expect "--socket $SOCK get c/" c/alpha c/beta
expect "--socket=$SOCK stat c" c/alpha c/beta c:colon
expect "--socket $SOCK rm c:" colon
expect "--socket $SOCK --json ls o" other
expect "--socket $SOCK run add c/a" c/alpha
expect "--socket $SOCK run add other c/b" c/beta
expect "--socket $SOCK run add other -o c/" c/alpha c/beta
# rm, stat and get take several names.
expect "--socket $SOCK get other c/a" c/alpha
expect "--socket $SOCK rm other c/alpha c/b" c/beta
expect "--socket $SOCK chmod group-read c/a" c/alpha
expect "--socket $SOCK chmod - --group 5 c/b" c/beta
expect "--socket $SOCK copy c/a" c/alpha
expect "--socket $SOCK cp c/alpha c/b" c/beta
expect "--socket $SOCK copy --device 0 c/alpha o" other
expect "--socket $SOCK copy c/alpha c/beta "
# Device ids come from info (the devices in use have an "id").
expect "--socket $SOCK put x --device " 0
expect "--socket $SOCK run add c/alpha --device " 0
TENSORD_SOCKET=$SOCK expect "get c/b" c/beta
echo "== model names from a daemon"
printf '%s\n' '{"nodes": [{"id": "pred", "op": "mul", "inputs": ["x", "c/alpha"]}, {"id": "loss", "op": "mse", "inputs": ["pred", "y"]}], "loss": "loss", "params": ["c/alpha"], "outputs": ["pred"], "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 1]}, {"name": "y", "dtype": "f32", "shape": [1, 1]}]}' >"$DIR/mdef.json"
"$TENSORCTL_BIN" --socket "$SOCK" model define cm/first "$DIR/mdef.json" >/dev/null 2>"$DIR/merr" ||
	fail "model define: $(cat "$DIR/merr")"
expect "--socket $SOCK model stat cm/" cm/first
expect "--socket $SOCK evaluate c" cm/first
expect "--socket $SOCK train --model c" cm/first
echo "== job ids from a daemon (logs, cancel; zsh and fish below; issue 35) and drain's on/off"
printf '%s\n' '{"model": "cm/first", "data": {"x": "other", "y": "other"}, "batch_size": 1, "steps": 2}' >"$DIR/run.json"
"$TENSORCTL_BIN" --socket "$SOCK" train "$DIR/run.json" --detach >/dev/null 2>"$DIR/terr" ||
	fail "train --detach: $(cat "$DIR/terr")"
expect "--socket $SOCK logs " 1
expect "--socket $SOCK cancel " 1
expect "drain " off on
echo "== zsh and fish, where installed: the same answers, from the same table"
CDIR=$(dirname "$COMPLETION")
PATH=$(dirname "$TENSORCTL_BIN"):$PATH
# zsh's compadd, _files and _describe print what they are given; the function
# runs on `words` and CURRENT as zsh's completion system sets them.
cat >"$DIR/zcomp.zsh" <<'ZEOF'
compadd() { local i=${@[(i)--]}; print -l -- ${@[i+1,-1]} }
_files() { print -- "FILES $*" }
_describe() { print -l -- ${${(P)2}%%:*} }
f=$1; shift
words=("$@"); CURRENT=$#
source $f
ZEOF
zcomp() {
	local -a w
	read -ra w <<<"tensorctl $1"
	[[ $1 == "" || $1 == *" " ]] && w+=("")
	# compadd leaves the prefix match to zsh: do it here.
	zsh -f "$DIR/zcomp.zsh" "$CDIR/_tensorctl" "${w[@]}" | grep -F -x -v '' | grep -e "^${w[-1]}" | sort -u || true
}
fcomp() {
	fish -c "source $(printf '%q' "$CDIR/tensorctl.fish"); complete -C $(printf '%q' "tensorctl $1")" |
		cut -f1 | sort -u || true
}
for shell in zsh fish; do
	if ! command -v $shell >/dev/null; then
		echo "(no $shell here: its completion is checked for syntax where installed)"
		continue
	fi
	for c in "|$(echo $cmds cp)" "put x --dtype |bf16 f16 f32 i32 u8" "--socket $SOCK get c/|c/alpha c/beta" \
		"--socket $SOCK model stat |cm/first" "model |define load ls rm save stat" \
		"--socket $SOCK put x --device |0" "chmod |- group-read group-write private world-read world-write" \
		"run matm|matmul" "--socket $SOCK run add c/alpha -o c/|c/alpha c/beta" \
		"--socket $SOCK rm other c/alpha c/b|c/beta" "--socket $SOCK evaluate c|cm/first" \
		"--socket $SOCK logs |1" "--socket $SOCK cancel |1" \
		"help |$(echo $cmds cp)"; do
		line=${c%%|*}
		want=$(printf '%s\n' ${c#*|} | sort -u)
		if [[ $shell == zsh ]]; then got=$(zcomp "$line"); else got=$(fcomp "$line"); fi
		[[ $got == "$want" ]] || fail "$shell, completing '$line': want [$(echo $want)], got [$(echo $got)]"
		echo "ok ($shell): '$line' -> $(echo $got)"
	done
done
echo "all completion checks passed"
