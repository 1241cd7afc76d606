#!/usr/bin/env bash
# The benchmark harness in one command: criterion benches of the hot functions, then the load
# test on 127.0.0.1 (bench/load.sh; arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench hot_paths
bench/load.sh "$@"
