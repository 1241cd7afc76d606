#!/usr/bin/env bash
# Soak run: several minutes of mixed traffic (SendMessage, GetTask, the card, a revoked token,
# a peer over its limit) against a release peergate with every layer on, sampling its resident
# memory every 10 s. Prints the answers by status and the memory samples.
#
#   bench/soak.sh [SECONDS] [CONNECTIONS]     (defaults: 300 and 50)
#
# Needs wrk. The server listens on 127.0.0.1 only and is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-300}
connections=${2:-50}
port=18093
admin_port=18094

command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
cargo build --quiet --release --bin peergate
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
peergate="$target_dir/release/peergate"

work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The default policy with every scheme on, and the per-IP limits raised so one load generator on
# one address exercises the layers behind them (not for production).
sed -e 's/^schemes = \["bearer"\]/schemes = ["bearer", "basic", "api_key"]/' \
    -e 's/^per_ip_per_minute = 120/per_ip_per_minute = 1000000000/' \
    -e 's/^failed_auth_per_ip_per_minute = 10/failed_auth_per_ip_per_minute = 1000000000/' \
    -e 's/^tokens_per_day = 1000000/tokens_per_day = 1000000000000/' \
    policies/default.toml > "$work/soak.toml"
data="$work/data"
good=$("$peergate" peer add soak --rate 1000000000/min --data "$data" 2>/dev/null)
limited=$("$peergate" peer add limited --rate 1/min --data "$data" 2>/dev/null)
revoked=$("$peergate" peer add revoked --data "$data" 2>/dev/null)
"$peergate" peer revoke revoked --data "$data" 2>/dev/null
"$peergate" serve --policy "$work/soak.toml" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin_port" --data "$data" 2>"$work/peergate.log" &
pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
echo "machine: $(nproc) cores; wrk -t1 -c$connections -d${duration}s; RSS in KiB every 10 s"
echo "rss at start: $(rss)"
(
  while kill -0 "$pid" 2>/dev/null; do sleep 10; echo "rss $(date +%s) $(rss)"; done
) > "$work/rss.txt" &
sampler=$!
GOOD=$good REVOKED=$revoked LIMITED=$limited \
  wrk -t1 -c"$connections" -d"${duration}s" --latency -s bench/wrk/soak.lua "http://127.0.0.1:$port" | tee "$work/wrk.txt"
kill "$sampler" 2>/dev/null || true
echo "rss samples (KiB):"
awk '{print $3}' "$work/rss.txt" | tr '\n' ' '; echo
echo "rss at end: $(rss)"
echo "server log lines at WARN or ERROR:"
grep -E ' (WARN|ERROR) ' "$work/peergate.log" | sort | uniq -c | head -20 || true
stored=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall())' "$data/peergate.sqlite3")
echo "tasks in the store by state: $stored"
