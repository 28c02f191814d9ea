#!/usr/bin/env bash
# Build the libFuzzer programs (clang, AddressSanitizer + UndefinedBehaviorSanitizer)
# and run each for a bounded time from its seed corpus.
#
#   tests/fuzz/run.sh [SECONDS] [NAME...]     (default: 60 s each, all harnesses)
#
# NAME is a harness in tests/fuzz/ (fuzz_NAME.c): rpc, params. Inputs the
# fuzzer finds interesting go to a scratch corpus, not into the repository;
# a crash leaves its input in $FUZZ_ARTIFACTS (default build-fuzz/artifacts)
# and fails the run. Keep such an input as tests/fuzz/corpus/NAME/regress-WHAT
# once the bug is fixed, so the normal test suite replays it (fuzz_NAME_corpus).
# The build directory is $FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
[ $# -gt 0 ] && shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(rpc params)
build=${FUZZ_BUILD_DIR:-build-fuzz}
artifacts=${FUZZ_ARTIFACTS:-$build/artifacts}

if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" --werror -Dfuzz=true \
    -Db_sanitize=address,undefined -Db_lundef=false
fi
targets=()
for n in "${names[@]}"; do targets+=("fuzz-$n"); done
meson compile -C "$build" "${targets[@]}"
mkdir -p "$artifacts"

summary=()
status=0
for n in "${names[@]}"; do
  # Longer inputs only repeat what short ones reach, more slowly: a request
  # stream for params (puts with data), a few messages for rpc.
  case "$n" in
    params) max_len=16384 ;;
    *) max_len=4096 ;;
  esac
  scratch=$(mktemp -d)
  log="$artifacts/fuzz-$n.log"
  echo "== fuzz-$n for ${secs} s (log: $log)"
  set +e
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/fuzz-$n" -max_total_time="$secs" -print_final_stats=1 \
      -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
      -dict="tests/fuzz/$n.dict" -artifact_prefix="$artifacts/$n-" \
      "$scratch" "tests/fuzz/corpus/$n" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$scratch" -type f | wc -l)
  rm -rf "$scratch"
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "!! fuzz-$n failed (exit $rc); the end of its log:"
    tail -n 60 "$log"
    summary+=("fuzz-$n: FAILED after ${execs:-?} executions")
  else
    summary+=("fuzz-$n: ${execs:-?} executions in ${secs} s (${rate:-?}/s), $corpus new corpus inputs, no failure")
  fi
done
printf '%s\n' "${summary[@]}"
exit "$status"
