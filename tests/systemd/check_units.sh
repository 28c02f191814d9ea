#!/bin/sh
# Checks tensord's systemd units: usage check_units.sh SERVICE SOCKET SYSUSERS TMPFILES
#
# Always: every file parses (INI for units, whitespace-separated columns for
# sysusers.d/tmpfiles.d) and carries the keys tensord depends on.
# Then `systemd-analyze verify` on the units as written (it needs no running
# systemd); check_install.sh verifies them once installed.
set -eu

if [ $# -ne 4 ]; then
	echo "usage: $0 SERVICE SOCKET SYSUSERS TMPFILES" >&2
	exit 2
fi
service=$1 socket=$2 sysusers=$3 tmpfiles=$4
status=0

fail() {
	echo "FAIL: $*" >&2
	status=1
}

# Prints "Section.Key=Value" for every assignment; exits 1 on a line that is
# neither a section header, an assignment, a comment nor blank.
ini_flatten() {
	awk '
	/^[ \t]*$/ || /^[ \t]*[#;]/ { next }
	/^\[[A-Za-z]+\][ \t]*$/ { sub(/[ \t]*$/, ""); sec = substr($0, 2, length($0) - 2); next }
	/^[A-Za-z0-9_]+[ \t]*=/ {
		if (sec == "") { printf "%s:%d: key outside a section\n", FILENAME, NR > "/dev/stderr"; bad = 1; next }
		key = $0; sub(/[ \t]*=.*/, "", key)
		val = $0; sub(/^[^=]*=[ \t]*/, "", val)
		print sec "." key "=" val
		next
	}
	{ printf "%s:%d: not INI: %s\n", FILENAME, NR, $0 > "/dev/stderr"; bad = 1 }
	END { exit bad }' "$1"
}

# require FLAT_FILE NAME KEY [EXPECTED_VALUE]
require() {
	if ! grep -q "^$3=" "$1"; then
		fail "$2: missing $3"
	elif [ $# -ge 4 ] && ! grep -qx "$3=$4" "$1"; then
		fail "$2: $3 is not '$4'"
	fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ini_flatten "$service" > "$tmp/service.flat" || fail "$service does not parse"
ini_flatten "$socket" > "$tmp/socket.flat" || fail "$socket does not parse"

s=tensord.service
require "$tmp/service.flat" $s Unit.Description
require "$tmp/service.flat" $s Unit.Requires tensord.socket
require "$tmp/service.flat" $s Service.Type notify
require "$tmp/service.flat" $s Service.ExecStart
require "$tmp/service.flat" $s Service.User tensord
require "$tmp/service.flat" $s Service.Group tensord
require "$tmp/service.flat" $s Service.StateDirectory tensord
require "$tmp/service.flat" $s Service.WatchdogSec
# max_connections (1024) plus the daemon's own 256 descriptors must fit, and
# the stop timeout must exceed request_timeout + stop_timeout (10 + 15 s).
require "$tmp/service.flat" $s Service.LimitNOFILE 4096
require "$tmp/service.flat" $s Service.TimeoutStopSec 30s
require "$tmp/service.flat" $s Service.Restart on-failure
require "$tmp/service.flat" $s Install.WantedBy
require "$tmp/service.flat" $s Service.NotifyAccess main
require "$tmp/service.flat" $s Service.ExecReload '/bin/kill -HUP $MAINPID'
require "$tmp/service.flat" $s Service.RuntimeDirectory tensord
# Without it, stopping the service would delete /run/tensord and with it the
# socket that tensord.socket keeps listening on.
require "$tmp/service.flat" $s Service.RuntimeDirectoryPreserve yes
require "$tmp/service.flat" $s Service.ProtectSystem strict
require "$tmp/service.flat" $s Service.ProtectHome yes
require "$tmp/service.flat" $s Service.PrivateNetwork yes
require "$tmp/service.flat" $s Service.RestrictAddressFamilies AF_UNIX
require "$tmp/service.flat" $s Service.NoNewPrivileges yes
require "$tmp/service.flat" $s Service.DevicePolicy closed
require "$tmp/service.flat" $s Service.SupplementaryGroups 'video render'
for allow in 'char-drm rw' 'char-nvidia\* rw'; do
	grep -qx "Service\.DeviceAllow=$allow" "$tmp/service.flat" ||
		fail "$s: no DeviceAllow=$allow"
done
exec_start=$(sed -n 's/^Service\.ExecStart=//p' "$tmp/service.flat")
case $exec_start in
*@*) fail "$s: unsubstituted @variable@ in ExecStart=$exec_start" ;;
/*/tensord|/*/tensord\ *) ;;
*) fail "$s: ExecStart is not an absolute path to tensord: $exec_start" ;;
esac
# `systemctl reload` checks the file first, the same one ExecStart= reads,
# and fails on a bad one (systemd runs ExecReload= lines in order).
reload_check=$(sed -n 's/^Service\.ExecReload=\(.*--check-config .*\)/\1/p' "$tmp/service.flat")
start_conf=$(printf '%s\n' "$exec_start" | sed -n 's/.* --config \([^ ]*\).*/\1/p')
case $reload_check in
/*/tensord\ --check-config\ "$start_conf")
	[ -n "$start_conf" ] || fail "$s: ExecStart= passes no --config"
	first_reload=$(sed -n 's/^Service\.ExecReload=//p' "$tmp/service.flat" | head -n 1)
	[ "$first_reload" = "$reload_check" ] ||
		fail "$s: ExecReload= --check-config must come before the SIGHUP" ;;
*) fail "$s: no ExecReload=.../tensord --check-config FILE with ExecStart's --config $start_conf" ;;
esac
for bad in PrivateDevices MemoryDenyWriteExecute PrivateUsers; do
	if grep -q "^Service\.$bad=[1yt]" "$tmp/service.flat"; then
		fail "$s: $bad= would hide the GPU from Vulkan"
	fi
done

s=tensord.socket
require "$tmp/socket.flat" $s Socket.ListenStream /run/tensord/tensord.sock
require "$tmp/socket.flat" $s Socket.SocketGroup tensord
require "$tmp/socket.flat" $s Socket.SocketMode 0660
require "$tmp/socket.flat" $s Socket.Accept no
require "$tmp/socket.flat" $s Install.WantedBy sockets.target

# sysusers.d: types u g m r, and the user tensord.
if ! awk '/^[ \t]*(#|$)/ { next } $1 !~ /^[ugmr]!?$/ || NF < 2 { exit 1 }' "$sysusers"; then
	fail "$sysusers: a line is not a sysusers.d entry"
fi
grep -Eq '^u[ \t]+tensord[ \t]' "$sysusers" || fail "$sysusers: no user tensord"
# tmpfiles.d: at least TYPE PATH, and the state directory.
if ! awk '/^[ \t]*(#|$)/ { next } NF < 2 || $2 !~ /^\// { exit 1 }' "$tmpfiles"; then
	fail "$tmpfiles: a line is not a tmpfiles.d entry"
fi
grep -Eq '^d[ \t]+/var/lib/tensord[ \t]' "$tmpfiles" || fail "$tmpfiles: no /var/lib/tensord"

[ $status -eq 0 ] && echo "ok: units parse and carry the required keys"

# sysusers.d and tmpfiles.d through systemd's own tools, into a scratch root
# (they need no running systemd).
if ! command -v systemd-sysusers >/dev/null 2>&1 || ! command -v systemd-tmpfiles >/dev/null 2>&1; then
	fail "systemd-sysusers or systemd-tmpfiles not found (package systemd)"
else
	mkdir -p "$tmp/root/etc"
	# Absolute paths: the tools resolve relative ones inside --root.
	cp "$sysusers" "$tmp/sysusers.conf"
	cp "$tmpfiles" "$tmp/tmpfiles.conf"
	if ! systemd-sysusers --root="$tmp/root" "$tmp/sysusers.conf" > "$tmp/sysusers.log" 2>&1 ||
			! grep -q '^tensord:' "$tmp/root/etc/passwd"; then
		fail "systemd-sysusers $sysusers:"
		sed 's/^/  /' "$tmp/sysusers.log" >&2
	elif ! systemd-tmpfiles --root="$tmp/root" --create "$tmp/tmpfiles.conf" > "$tmp/tmpfiles.log" 2>&1 ||
			! [ -d "$tmp/root/var/lib/tensord" ]; then
		fail "systemd-tmpfiles $tmpfiles:"
		sed 's/^/  /' "$tmp/tmpfiles.log" >&2
	else
		echo "ok: systemd-sysusers and systemd-tmpfiles accept the entries"
	fi
fi

# systemd-analyze verify, where it works. The probe tells "systemd cannot
# run here" apart from "our units are wrong".
if ! command -v systemd-analyze >/dev/null 2>&1; then
	fail "systemd-analyze not found (bash .ci/deps installs package systemd)"
	exit $status
fi
mkdir "$tmp/probe" "$tmp/units"
printf '[Unit]\nDescription=probe\n[Service]\nExecStart=/bin/true\n' > "$tmp/probe/probe.service"
if ! systemd-analyze verify --man=no --generators=no "$tmp/probe/probe.service" > "$tmp/probe.log" 2>&1; then
	fail "systemd-analyze verify does not work here, not even on a trivial unit:"
	sed 's/^/  /' "$tmp/probe.log" >&2
	exit 1
fi
# verify wants ExecStart= to exist; check_install.sh verifies the real one.
sed -e 's|^ExecStart=[^ ]*|ExecStart=/bin/true|' \
	-e 's|^ExecReload=[^ ]*/tensord |ExecReload=/bin/true |' "$service" > "$tmp/units/tensord.service"
cp "$socket" "$tmp/units/tensord.socket"
if systemd-analyze verify --man=no --generators=no \
		"$tmp/units/tensord.socket" "$tmp/units/tensord.service" > "$tmp/verify.log" 2>&1 &&
		! grep -Eq 'Unknown (key|section)|[Ii]nvalid|[Ff]ailed to parse' "$tmp/verify.log"; then
	echo "ok: systemd-analyze verify"
	sed 's/^/  /' "$tmp/verify.log"
else
	fail "systemd-analyze verify:"
	sed 's/^/  /' "$tmp/verify.log" >&2
fi
exit $status
