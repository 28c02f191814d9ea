#!/usr/bin/env bash
# Run tensord's checks and benchmarks on a bare NVIDIA GPU host (see
# ../shared/gpu/README.md). Prepare on the development machine:
#
#   ../shared/gpu/prepare.sh libcmocka0 libglvnd0 libglx0 libegl1 libgl1 libopengl0
#   meson setup build-release --buildtype=release && meson compile -C build-release
#
# (the NVIDIA Vulkan ICD needs libglvnd's libraries, which the host lacks), carry
# .gpu-runtime and build-release there, and run:  bash bench/gpu_host.sh [BUILD]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
. .gpu-runtime/enter.sh
tmp=$(mktemp -d)
sock="$tmp/tensord.sock"
"$build/daemon/tensord" --socket "$sock" --state-dir "$tmp/state" -v >"$tmp/tensord.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do "$build/client/ctl/tensorctl" --socket "$sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$build/client/ctl/tensorctl" --socket "$sock" info
echo "== request path"
"$build/bench/bench_rpc" --socket "$sock" --pings 5000
if [ -f bench/bench_ops.py ]; then
  echo "== ops"
  python3 bench/bench_ops.py --socket "$sock" || true
fi
echo "== integration tests on this GPU"
for t in "$build"/tests/integration/test-integration-*; do
  [ -f "$t" ] && [ -x "$t" ] || continue   # not meson's *.p folders
  echo "-- ${t##*/}"
  TENSORD_BIN=$PWD/$build/daemon/tensord "$t" 2>&1 | tail -3
done
head -5 "$tmp/tensord.log"
