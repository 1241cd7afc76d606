#!/usr/bin/env bash
# Load test on 127.0.0.1: a bare axum server as the baseline, then peergate (policies/bench.toml)
# for the public card, an authenticated SendMessage on the echo backend, floods of bad tokens
# (401) and a peer over its limit (429). Prints requests/s, p99 and the ratio to the baseline.
#
#   bench/load.sh [SECONDS_PER_RUN] [CONNECTIONS]     (defaults: 10 and 50)
#
# Needs wrk (Debian: apt-get install wrk). Every server it starts listens on 127.0.0.1 only and
# is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-10}
connections=${2:-50}
bare_port=18090
gate_port=18091

if ! command -v wrk >/dev/null; then
  echo "wrk is needed: apt-get install wrk" >&2
  exit 1
fi

cargo build --quiet --release --bin peergate --example bare_axum
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
peergate="$target_dir/release/peergate"
bare="$target_dir/release/examples/bare_axum"

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

wait_for_port() {
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  exit 1
}

send_body='{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"What are your opening hours on public holidays?"}]}}}'

# status URL AUTH: the HTTP status one request gets, so every run is checked for what it measures.
status() {
  local url=$1 auth=$2
  if [ "$url" = "${url%/a2a/v1}" ]; then
    curl -s -o /dev/null -w '%{http_code}' "$url"
  else
    curl -s -o /dev/null -w '%{http_code}' -H "Authorization: $auth" -H 'Content-Type: application/json' --data "$send_body" "$url"
  fi
}

results=()
baseline=""
# run NAME EXPECTED_STATUS URL [AUTH]
run() {
  local name=$1 expected=$2 url=$3 auth=${4:-}
  local got
  got=$(status "$url" "$auth")
  if [ "$got" != "$expected" ]; then
    echo "$name: expected HTTP $expected before the run, got $got" >&2
    exit 1
  fi
  local out
  if [ "$url" = "${url%/a2a/v1}" ]; then
    out=$(wrk -t1 -c"$connections" -d"${duration}s" --latency "$url")
  else
    out=$(AUTH="$auth" BODY="$send_body" wrk -t1 -c"$connections" -d"${duration}s" --latency -s bench/wrk/post.lua "$url")
  fi
  local rps p99 other
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  other=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
  [ -n "$baseline" ] || baseline=$rps
  local ratio
  ratio=$(awk -v a="$rps" -v b="$baseline" 'BEGIN {printf "%.0f%%", 100 * a / b}')
  results+=("$(printf '%-34s %6s %12s %10s %7s %s' "$name" "$expected" "$rps" "$p99" "$ratio" "${other:+(non-2xx: $other)}")")
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "wrk -t1 -c$connections -d${duration}s --latency, server and load generator on the same cores"

"$bare" "127.0.0.1:$bare_port" 2>/dev/null &
pids+=($!)
wait_for_port "$bare_port"
run "bare axum, fixed 200-byte JSON" 200 "http://127.0.0.1:$bare_port/a2a/v1" "none"
kill "${pids[0]}"

data="$work/data"
token=$("$peergate" peer add bench --rate 1000000000/min --data "$data" 2>/dev/null)
limited=$("$peergate" peer add limited --rate 1/min --data "$data" 2>/dev/null)
revoked=$("$peergate" peer add revoked --data "$data" 2>/dev/null)
"$peergate" peer revoke revoked --data "$data" 2>/dev/null
"$peergate" serve --policy policies/bench.toml --listen "127.0.0.1:$gate_port" --data "$data" 2>"$work/peergate.log" &
pids+=($!)
wait_for_port "$gate_port"
door="http://127.0.0.1:$gate_port/a2a/v1"
run "public Agent Card" 200 "http://127.0.0.1:$gate_port/.well-known/agent-card.json"
run "SendMessage, echo, task persisted" 200 "$door" "Bearer $token"
run "401 flood: revoked token" 401 "$door" "Bearer $revoked"
run "401 flood: token failing checksum" 401 "$door" "Bearer ${token%??????}AAAAAA"
status "$door" "Bearer $limited" >/dev/null
run "429 flood: peer over its limit" 429 "$door" "Bearer $limited"

printf '\n%-34s %6s %12s %10s %7s\n' "scenario" "status" "requests/s" "p99" "vs bare"
printf '%s\n' "${results[@]}"
