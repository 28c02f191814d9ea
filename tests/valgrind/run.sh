#!/usr/bin/env bash
# Run the C integration tests (tests/integration/test_integration_*.c, every
# program build/tests/integration/test-integration-*) against a tensord that
# runs under valgrind's memcheck on lavapipe, then require of every daemon run:
# exit status 0 after SIGTERM, no memcheck error (invalid read or write, use
# of uninitialised memory, bad free) and no definitely lost block.
#
#   tests/valgrind/run.sh [BUILD_DIR]        (default: build)
#
# Timeouts of the test are stretched by TENSORD_TEST_TIME_SCALE (default 40
# here): memcheck runs the daemon, and lavapipe's shader compiler, some 20 to
# 50 times slower; tests/valgrind/valgrind.conf raises the daemon's GPU time
# limits to match. The memcheck reports stay in $VALGRIND_LOG_DIR (default: a
# temporary directory, printed).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
logs=${VALGRIND_LOG_DIR:-$(mktemp -d /tmp/tensord-valgrind-XXXXXX)}
mkdir -p "$logs"
rm -f "$logs"/tensord-valgrind.*.log

# The programs, not meson's test-integration-*.p object folders.
programs=()
for f in "$build"/tests/integration/test-integration-*; do
  [ -f "$f" ] && [ -x "$f" ] && programs+=("$f")
done
if [ ${#programs[@]} -eq 0 ]; then
  echo "!! no integration test program in $build/tests/integration"
  exit 1
fi
rc=0
for prog in "${programs[@]}"; do
  name=${prog##*/}
  echo "== $name against tensord under valgrind (reports in $logs)"
  start=$(date +%s)
  TENSORD_REAL_BIN="$build/daemon/tensord" \
  TENSORD_BIN="$PWD/tests/valgrind/tensord-valgrind.sh" \
  VALGRIND_LOG_DIR="$logs" \
  TENSORD_TEST_TIME_SCALE=${TENSORD_TEST_TIME_SCALE:-40} \
  TENSORD_CONFIG="$PWD/tests/valgrind/valgrind.conf" \
    "$prog"
  prc=$?
  echo "== $name exited $prc after $(( $(date +%s) - start )) s"
  [ "$prc" -eq 0 ] || rc=$prc
done

status=$rc
shopt -s nullglob
reports=("$logs"/tensord-valgrind.*.log)
if [ ${#reports[@]} -eq 0 ]; then
  echo "!! no valgrind report was written"
  status=1
fi
for f in "${reports[@]}"; do
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$f" | tail -1)
  lost=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tail -1)
  grep -q "All heap blocks were freed" "$f" && lost=0
  echo "$(basename "$f"): ${errors:-?} errors, ${lost:-?} bytes definitely lost"
  if [ "${errors:-x}" != 0 ] || [ "${lost:-x}" != 0 ]; then
    status=1
    echo "!! memcheck found problems; the report:"
    cat "$f"
  fi
done
exit "$status"
