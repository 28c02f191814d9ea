#!/usr/bin/env bash
# tensord under valgrind's memcheck: what $TENSORD_BIN points at during
# tests/valgrind/run.sh. The real binary is $TENSORD_REAL_BIN. valgrind runs
# the daemon in this same process (exec), so the fixture's SIGTERM reaches it,
# and its exit status is 99 when memcheck saw an invalid access, a use of
# uninitialised memory or a definite leak.
here=$(cd "$(dirname "$0")" && pwd)
exec valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
  --show-leak-kinds=definite --num-callers=40 --track-origins=no \
  --suppressions="$here/lavapipe.supp" \
  --log-file="${VALGRIND_LOG_DIR:-/tmp}/tensord-valgrind.%p.log" \
  "${TENSORD_REAL_BIN:?TENSORD_REAL_BIN is not set}" "$@"
