#!/usr/bin/env bash
# Runs bench_rpc against a fresh tensord and a fresh redis-server, side by side,
# each on its own Unix socket in a temporary directory, and prints the table.
#
# usage: bench/compare_redis.sh [BUILD_DIR] [-- BENCH_RPC_ARGS...]
#   BUILD_DIR   meson build directory (default $TENSORD_BUILD_DIR, else build)
# environment:
#   TENSORD         the daemon binary   (default BUILD_DIR/daemon/tensord)
#   BENCH_RPC       the bench program   (default BUILD_DIR/bench/bench_rpc)
#   TENSORD_DEVICE  --device for tensord (default auto)
#   REDIS_SERVER    redis-server binary  (default: from PATH)
# example: bench/compare_redis.sh build -- --json
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

build=${TENSORD_BUILD_DIR:-build}
if [[ $# -gt 0 && $1 != -- ]]; then
	build=$1
	shift
fi
if [[ $# -gt 0 && $1 == -- ]]; then
	shift
fi
case $build in
/*) ;;
*) [[ -d $build ]] || build=$root/$build ;;
esac

tensord=${TENSORD:-$build/daemon/tensord}
bench=${BENCH_RPC:-$build/bench/bench_rpc}
device=${TENSORD_DEVICE:-auto}
redis=${REDIS_SERVER:-$(command -v redis-server || true)}

die() {
	echo "compare_redis: $*" >&2
	exit 1
}
[[ -x $tensord ]] || die "no tensord at $tensord (build it: meson compile -C $build)"
[[ -x $bench ]] || die "no bench_rpc at $bench (build it: meson compile -C $build)"
[[ -n $redis && -x $redis ]] || die "no redis-server (Debian: apt-get install redis-server)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tensord-bench.XXXXXX")
tensord_pid=
redis_pid=
bench_pid=

# Stops one server with SIGTERM and waits for it; SIGKILL after 10 s.
# Prints a warning when tensord does not exit 0, as a clean shutdown must.
stop() {
	local name=$1 pid=$2 rc=0
	[[ -n $pid ]] || return 0
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "compare_redis: $name did not stop on SIGTERM within 10 s; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || rc=$?
	if [[ $rc -ne 0 ]]; then
		echo "compare_redis: $name exited with status $rc after SIGTERM" >&2
	fi
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $bench_pid ]] && kill -0 "$bench_pid" 2>/dev/null; then
		kill -TERM "$bench_pid" 2>/dev/null || true
		wait "$bench_pid" 2>/dev/null || true
	fi
	stop tensord "$tensord_pid"
	stop redis-server "$redis_pid"
	if [[ $rc -ne 0 ]]; then
		for log in "$tmp/tensord.log" "$tmp/redis.log"; do
			[[ -s $log ]] || continue
			echo "--- last lines of $(basename "$log"):" >&2
			tail -n 20 "$log" >&2
		done
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits until a server has created its socket, failing early if it died.
wait_socket() {
	local name=$1 pid=$2 sock=$3
	for _ in $(seq 600); do
		[[ -S $sock ]] && return 0
		kill -0 "$pid" 2>/dev/null || die "$name exited before creating $sock"
		sleep 0.1
	done
	die "$name did not create $sock within 60 s"
}

"$redis" --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 \
	--save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
redis_pid=$!

# A plain child process: no socket activation, no systemd notification.
env -u LISTEN_FDS -u LISTEN_PID -u LISTEN_FDNAMES -u NOTIFY_SOCKET -u WATCHDOG_USEC \
	"$tensord" --socket "$tmp/tensord.sock" --device "$device" \
	--state-dir "$tmp/state" >"$tmp/tensord.log" 2>&1 &
tensord_pid=$!

wait_socket redis-server "$redis_pid" "$tmp/redis.sock"
wait_socket tensord "$tensord_pid" "$tmp/tensord.sock"

# In the background so that an interrupt is handled at once, not after the run.
"$bench" --socket "$tmp/tensord.sock" --redis "$tmp/redis.sock" --wait 30 "$@" &
bench_pid=$!
wait "$bench_pid"
