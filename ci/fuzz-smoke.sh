#!/usr/bin/env bash
# Fuzz smoke test: run EVERY libFuzzer executable in BUILD/fuzz/ for a
# bounded time over a scratch copy of its committed seed corpus
# (fuzz/corpus/<name>/), so CI never grows the committed corpus. Fails if
# any target crashes, leaks, times out on an input or cannot run.
#
#   ci/fuzz-smoke.sh BUILD_DIR          (make fuzz-smoke)
#   FUZZ_SECONDS=5 ci/fuzz-smoke.sh build-fuzz
#
# Crash reproducers are kept in BUILD_DIR/fuzz-artifacts/.
set -euo pipefail

build=${1:?usage: ci/fuzz-smoke.sh BUILD_DIR}
secs=${FUZZ_SECONDS:-30}
src=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -d "$build/fuzz" ]; then
  echo "fuzz-smoke: $build/fuzz does not exist (configure with -DTETHER_FUZZ=ON: make fuzz)" >&2
  exit 1
fi

targets=()
for t in "$build"/fuzz/*; do
  if [ -f "$t" ] && [ -x "$t" ]; then targets+=("$t"); fi
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz-smoke: no fuzz targets in $build/fuzz" >&2
  exit 1
fi

work=$(mktemp -d /tmp/tether-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"

failed=()
for t in "${targets[@]}"; do
  name=$(basename "$t")
  corpus="$work/corpus-$name"
  mkdir -p "$corpus"
  if [ -d "$src/fuzz/corpus/$name" ]; then
    cp -R "$src/fuzz/corpus/$name/." "$corpus/"
  else
    echo "fuzz-smoke: warning: no seed corpus fuzz/corpus/$name/" >&2
  fi
  echo "fuzz-smoke: $name for ${secs}s over $(ls "$corpus" | wc -l) seeds"
  if "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$artifacts/$name-" "$corpus" >"$work/$name.log" 2>&1; then
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)" "$work/$name.log" | sed "s/^/  /" || true
  else
    echo "fuzz-smoke: $name FAILED; last lines of its log:" >&2
    tail -n 40 "$work/$name.log" >&2
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz-smoke: ${#failed[@]} target(s) failed: ${failed[*]} (reproducers in $artifacts)" >&2
  exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} target(s) ran ${secs}s without a crash"
