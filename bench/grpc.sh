#!/usr/bin/env bash
# The same SendMessage over JSON-RPC and over gRPC, in one run, with one load generator
# (h2load: HTTP/1.1 for the JSON-RPC door, HTTP/2 for the gRPC listener, one request in
# flight per connection on both), peergate on policies/bench.toml with a [grpc] listener.
# First the floor: the bare server of examples/bare_axum.rs answering a fixed 200 bytes over
# HTTP/1.1 and, through tonic's server core, over gRPC on HTTP/2, with the same requests.
# Prints requests/s, p50 and p99 of each, and each gRPC run's ratio to the HTTP/1.1 run before
# it; then checks that every request was answered (the store holds one task per answer).
#
#   bench/grpc.sh [SECONDS_PER_RUN] [CONNECTIONS]     (defaults: 10 and 50)
#
# BENCH_PEERGATE=FILE measures another build of peergate.
# Needs h2load (Debian: apt-get install nghttp2-client). Every server it starts listens on
# 127.0.0.1 only and is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-10}
connections=${2:-50}
bare_port=18093
bare_grpc_port=18094
gate_port=18095
admin_port=18096
grpc_port=18097

command -v h2load >/dev/null || { echo "h2load is needed: apt-get install nghttp2-client" >&2; exit 1; }

cargo build --quiet --release --bin peergate --example bare_axum
# shellcheck source=bench/common.sh
source bench/common.sh
target_dir=$(target_dir)
peergate=${BENCH_PEERGATE:-$target_dir/release/peergate}
bare="$target_dir/release/examples/bare_axum"

with_workdir

data="$work/data"
token=$("$peergate" peer add bench --rate 1000000000/min --data "$data" 2>/dev/null)
policy="$work/policy.toml"
cp policies/bench.toml "$policy"
printf '\n[grpc]\nlisten = "127.0.0.1:%s"\n' "$grpc_port" >>"$policy"
"$peergate" serve --policy "$policy" --listen "127.0.0.1:$gate_port" --admin-listen "127.0.0.1:$admin_port" --data "$data" 2>"$work/peergate.log" &
pids+=($!)
wait_for_port "$gate_port"
wait_for_port "$grpc_port"

# The JSON-RPC body, and the same message as a gRPC frame: SendMessageRequest{message{
# message_id, role USER, parts[{text}]}} behind the 5-byte length prefix.
printf '%s' "$send_body" >"$work/send.json"
python3 - "$work/send.grpc" <<'PY'
import struct, sys
def field(number, payload):
    return bytes([number << 3 | 2]) + varint(len(payload)) + payload
def varint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out
text = b"What are your opening hours on public holidays?"
message = field(1, b"m1") + bytes([4 << 3, 1]) + field(5, field(1, text))
request = field(2, message)
open(sys.argv[1], "wb").write(b"\0" + struct.pack(">I", len(request)) + request)
PY

# One request each way first: both must be answered, not refused.
curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  --data-binary @"$work/send.json" "http://127.0.0.1:$gate_port/a2a/v1" | grep -qx 200 \
  || { echo "the JSON-RPC SendMessage was not answered 200" >&2; exit 1; }
curl -s --http2-prior-knowledge -o /dev/null -D - -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/grpc' -H 'TE: trailers' --data-binary @"$work/send.grpc" \
  "http://127.0.0.1:$grpc_port/lf.a2a.v1.A2AService/SendMessage" -w '%{http_code}' >"$work/grpc-check" || true
grep -qi '^grpc-status: 0' "$work/grpc-check" \
  || { echo "the gRPC SendMessage was not answered with grpc-status 0:" >&2; cat "$work/grpc-check" >&2; exit 1; }

results=()
baseline=""
# run NAME URL BODY CONTENT_TYPE [h2load flags...]
run() {
  local name=$1 url=$2 body=$3 type=$4
  shift 4
  local log="$work/h2load.log"
  rm -f "$log"
  local out
  out=$(h2load "$@" -c "$connections" -m 1 -D "$duration" --log-file="$log" \
    -H "authorization: Bearer $token" -H "content-type: $type" -H 'te: trailers' \
    -d "$body" "$url")
  local rps ok
  rps=$(awk '/^finished in/ {print $4}' <<<"$out")
  ok=$(awk '/^status codes:/ {print $3}' <<<"$out")
  # The log's third column is each request's time in microseconds.
  local p50 p99
  read -r p50 p99 < <(awk '{print $3}' "$log" | sort -n | awk '{a[NR]=$1} END {printf "%.2fms %.2fms\n", a[int(NR*0.5)]/1000, a[int(NR*0.99)]/1000}')
  # An HTTP/1.1 run is the baseline of the gRPC run after it.
  local ratio=""
  if [ "${1:-}" = --h1 ]; then
    baseline=$rps
  else
    ratio=$(awk -v a="$rps" -v b="$baseline" 'BEGIN {printf "%.0f%%", 100 * a / b}')
  fi
  results+=("$(printf '%-40s %12s %10s %10s %7s %s' "$name" "$rps" "$p50" "$p99" "$ratio" "(2xx: $ok)")")
  counted=$ok
}

answered=2
printf '{"jsonrpc":"2.0","id":1}' >"$work/bare.json"
"$bare" "127.0.0.1:$bare_port" "127.0.0.1:$bare_grpc_port" 2>/dev/null &
pids+=($!)
wait_for_port "$bare_port"
wait_for_port "$bare_grpc_port"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "h2load -c$connections -m1 -D$duration, server and load generator on the same cores"
run "bare axum POST, fixed 200 bytes (HTTP/1.1)" "http://127.0.0.1:$bare_port/a2a/v1" "$work/bare.json" application/json --h1
run "bare tonic unary, fixed 200 bytes (HTTP/2)" "http://127.0.0.1:$bare_grpc_port/lf.a2a.v1.A2AService/SendMessage" "$work/send.grpc" application/grpc
run "SendMessage, JSON-RPC (HTTP/1.1)" "http://127.0.0.1:$gate_port/a2a/v1" "$work/send.json" application/json --h1
answered=$((answered + counted))
run "SendMessage, gRPC (HTTP/2)" "http://127.0.0.1:$grpc_port/lf.a2a.v1.A2AService/SendMessage" "$work/send.grpc" application/grpc
answered=$((answered + counted))
printf '%-40s %12s %10s %10s %7s\n' "scenario" "requests/s" "p50" "p99" "ratio"
printf '%s\n' "${results[@]}"

# Every answer counted above must be a completed task in the store: a gRPC error is HTTP 200.
# peergate is the first server started; the bare one stays for the exit trap.
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
stored=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM tasks WHERE state = ?", ("TASK_STATE_COMPLETED",)).fetchone()[0])' "$data/peergate.sqlite3")
echo "SendMessage: h2load counted $answered answers (with the two checks); the store holds $stored completed tasks"
if [ "$stored" -lt "$answered" ]; then
  echo "fewer completed tasks than answers: the run measured failures" >&2
  exit 1
fi
