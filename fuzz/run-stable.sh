#!/usr/bin/env bash
# Coverage-guided fuzzing without a nightly toolchain: builds the fuzz targets on stable with
# LLVM's SanitizerCoverage instrumentation (the flags cargo-fuzz passes, minus the sanitizer,
# which needs nightly) and runs each for a bounded time on a scratch copy of its corpus.
#
#   fuzz/run-stable.sh [SECONDS_PER_TARGET]      (default 30)
#   FUZZ_RUNS=10000000 fuzz/run-stable.sh        (each target for that many inputs instead)
#   FUZZ_TARGETS="policy grpc_request" …         (only these targets)
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-30}
if [ -n "${FUZZ_RUNS:-}" ]; then bound="-runs=$FUZZ_RUNS"; else bound="-max_total_time=$seconds"; fi
target_dir="$(cd .. && pwd)/target/fuzz-sancov"
triple=$(rustc -vV | awk '/^host:/ {print $2}')
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
  CARGO_TARGET_DIR="$target_dir" cargo build --release --target "$triple"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in ${FUZZ_TARGETS:-$(ls fuzz_targets | sed 's/\.rs$//')}; do
  mkdir -p "$scratch/$target"
  cp corpus/"$target"/* "$scratch/$target/"
  "$target_dir/$triple/release/$target" "$scratch/$target" "$bound" \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$PWD/artifacts-$target-" \
    2>"$scratch/$target.log" || { echo "$target: FOUND A FAILURE (see fuzz/artifacts-$target-*)"; tail -20 "$scratch/$target.log"; exit 1; }
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$scratch/$target.log" | grep -oE '[0-9]+$')
  took=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$scratch/$target.log" | grep -oE '[0-9]+ second' || echo "${seconds} second")
  echo "$target: $runs inputs in ${took}s, no failure"
done
