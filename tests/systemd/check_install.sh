#!/bin/sh
# Installs the build into a scratch DESTDIR and checks the result with
# systemd's own tools:
#   usage: check_install.sh BUILD_DIR PREFIX SBINDIR BINDIR MANDIR SYSCONFDIR
# - units, sysusers.d and tmpfiles.d entries sit where pkg-config's systemd
#   variables say (re-rooted under PREFIX when it is not systemd's prefix),
#   the man pages and the config file where meson's dirs say;
# - `systemd-analyze verify` accepts the installed units, with ExecStart=
#   pointing at the installed daemon;
# - `systemd-analyze security` rates the service's sandbox as still exposed
#   no more than it is now;
# - systemd-sysusers and systemd-tmpfiles create the user, the groups and the
#   state directory from the installed entries.
set -eu

if [ $# -ne 6 ]; then
	echo "usage: $0 BUILD_DIR PREFIX SBINDIR BINDIR MANDIR SYSCONFDIR" >&2
	exit 2
fi
build=$1 prefix=$2
status=0
fail() {
	echo "FAIL: $*" >&2
	status=1
}
# meson joins a relative option to the prefix; an absolute one stands alone.
under_prefix() {
	case $1 in
	/*) echo "$1" ;;
	*) echo "$prefix/$1" ;;
	esac
}
sbindir=$(under_prefix "$3") bindir=$(under_prefix "$4")
mandir=$(under_prefix "$5") sysconfdir=$(under_prefix "$6")

for tool in pkg-config systemd-analyze systemd-sysusers systemd-tmpfiles; do
	if ! command -v $tool >/dev/null 2>&1; then
		echo "FAIL: $tool not found (bash .ci/deps installs it)" >&2
		exit 1
	fi
done
pkg-config --exists systemd || { echo "FAIL: no systemd.pc (package systemd)" >&2; exit 1; }

# Where systemd says, re-rooted like systemd/meson.build does.
define=
if [ "$(pkg-config --variable=prefix systemd)" != "$prefix" ]; then
	define="--define-variable=prefix=$prefix --define-variable=rootprefix=$prefix --define-variable=root_prefix=$prefix"
fi
# shellcheck disable=SC2086
unitdir=$(pkg-config $define --variable=systemdsystemunitdir systemd)
# shellcheck disable=SC2086
sysusersdir=$(pkg-config $define --variable=sysusersdir systemd)
# shellcheck disable=SC2086
tmpfilesdir=$(pkg-config $define --variable=tmpfilesdir systemd)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
if ! meson install -C "$build" --destdir "$root" --no-rebuild > "$tmp/install.log" 2>&1; then
	sed 's/^/  /' "$tmp/install.log" >&2
	echo "FAIL: meson install" >&2
	exit 1
fi

for f in "$unitdir/tensord.service" "$unitdir/tensord.socket" \
		"$sysusersdir/tensord.conf" "$tmpfilesdir/tensord.conf" \
		"$sbindir/tensord" "$bindir/tensorctl" "$sysconfdir/tensord.conf" \
		"$mandir/man8/tensord.8" "$mandir/man1/tensorctl.1"; do
	if [ -f "$root$f" ]; then
		echo "ok: installed $f"
	else
		fail "$f is not installed; meson put:"
		(cd "$root" && find . -type f | sed 's/^\./  /') >&2
	fi
done
[ $status -eq 0 ] || exit $status

exec_start=$(sed -n 's/^ExecStart=//p' "$root$unitdir/tensord.service")
case $exec_start in
"$sbindir/tensord --config $sysconfdir/tensord.conf") echo "ok: ExecStart=$exec_start" ;;
*) fail "ExecStart=$exec_start does not run $sbindir/tensord with $sysconfdir/tensord.conf" ;;
esac
[ -x "$root$sbindir/tensord" ] || fail "$sbindir/tensord is not executable"
# The shipped config file must be one the daemon accepts (--print-config
# loads it; --help would exit before reading it).
if ! "$root$sbindir/tensord" --config "$root$sysconfdir/tensord.conf" --print-config > /dev/null 2>"$tmp/conf.log"; then
	fail "tensord refuses the installed $sysconfdir/tensord.conf:"
	sed 's/^/  /' "$tmp/conf.log" >&2
fi
# ExecReload= checks it the same way before every reload.
if ! "$root$sbindir/tensord" --check-config "$root$sysconfdir/tensord.conf" > /dev/null 2>"$tmp/check.log"; then
	fail "tensord --check-config refuses the installed $sysconfdir/tensord.conf:"
	sed 's/^/  /' "$tmp/check.log" >&2
fi

# The targets the units name (sockets.target, sysinit.target...) come from
# the host's systemd, copied into the scratch root.
for d in /usr/lib/systemd/system /lib/systemd/system; do
	if [ -d "$d" ] && [ ! -L "$d" ]; then
		mkdir -p "$root$d"
		cp -an "$d/." "$root$d/"
	fi
done
# So does /bin/kill of ExecReload=.
mkdir -p "$root/bin"
[ -e "$root/bin/kill" ] || cp /bin/kill "$root/bin/kill"
if systemd-analyze verify --man=no --generators=no --root="$root" \
		"$unitdir/tensord.socket" "$unitdir/tensord.service" > "$tmp/verify.log" 2>&1 &&
		! grep -Eq 'Unknown (key|section)|[Ii]nvalid|[Ff]ailed|not executable|[Ww]arning' "$tmp/verify.log"; then
	echo "ok: systemd-analyze verify accepts the installed units"
	sed 's/^/  /' "$tmp/verify.log"
else
	fail "systemd-analyze verify:"
	sed 's/^/  /' "$tmp/verify.log" >&2
fi

# Exposure is 0 (locked down) to 10 (no sandbox); the shipped unit rates 2.7.
# --threshold is in tenths.
if systemd-analyze security --offline=yes --root="$root" --threshold=35 --no-pager \
		"$unitdir/tensord.service" > "$tmp/security.log" 2>&1; then
	echo "ok: systemd-analyze security: $(grep -o 'Overall exposure level.*' "$tmp/security.log")"
else
	fail "systemd-analyze security rates the sandbox above 3.5:"
	grep -E '✗|Overall' "$tmp/security.log" | sed 's/^/  /' >&2
fi

# sysusers.d and tmpfiles.d from where they were installed (both tools search
# /usr/local/lib/... as well as /usr/lib/...).
mkdir -p "$root/etc"
if systemd-sysusers --root="$root" > "$tmp/sysusers.log" 2>&1 &&
		grep -q '^tensord:' "$root/etc/passwd" && grep -q '^tensord:' "$root/etc/group" &&
		grep -Eq '^video:.*[:,]tensord(,|$)' "$root/etc/group" &&
		grep -Eq '^render:.*[:,]tensord(,|$)' "$root/etc/group"; then
	echo "ok: systemd-sysusers creates user and group tensord, member of video and render"
else
	fail "systemd-sysusers with the installed entry:"
	sed 's/^/  /' "$tmp/sysusers.log" "$root/etc/passwd" "$root/etc/group" >&2 || true
fi
if systemd-tmpfiles --root="$root" --create > "$tmp/tmpfiles.log" 2>&1 &&
		[ -d "$root/var/lib/tensord" ] &&
		[ "$(stat -c %a "$root/var/lib/tensord")" = 750 ]; then
	echo "ok: systemd-tmpfiles creates /var/lib/tensord (0750)"
else
	fail "systemd-tmpfiles with the installed entry:"
	sed 's/^/  /' "$tmp/tmpfiles.log" >&2
fi
exit $status
