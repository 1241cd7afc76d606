#!/usr/bin/env bash
# The same SendMessage over JSON-RPC and over gRPC, in one run, with one load generator
# (h2load: HTTP/1.1 for the JSON-RPC door, HTTP/2 for the gRPC listener), peergate on
# policies/bench.toml with a [grpc] listener, in three shapes of load:
#   - per connection: CONNECTIONS connections with one request in flight on each, HTTP/1.1's
#     shape, forced on gRPC too;
#   - one channel: gRPC's own shape, one HTTP/2 connection with CONNECTIONS calls in flight (a
#     gRPC client's channel multiplexes its calls on one connection), against the JSON-RPC
#     run per connection;
#   - one at a time: one connection, one request after the other (one call's latency).
# First the floor: the bare server of examples/bare_axum.rs answering a fixed 200 bytes over
# HTTP/1.1 and, through tonic's server core, over gRPC on HTTP/2, with the same requests, in the
# same shapes (one at a time too: what HTTP/2 alone adds to one call's latency).
# Prints requests/s, p50 and p99 of each, the server's CPU time per answer (user + system, all
# its threads, from /proc: what one request costs the server, whatever the load generator on
# the same cores costs), and each gRPC run's ratio to the HTTP/1.1 run before it, by requests/s
# and by CPU per answer; then checks that every request was answered (the store holds one task
# per answer).
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

policy="$work/policy.toml"
cp policies/bench.toml "$policy"
printf '\n[grpc]\nlisten = "127.0.0.1:%s"\n' "$grpc_port" >>"$policy"

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

# start_peergate: a peergate on a new, empty store (each run writes one task per answer, and a
# store grown by the runs before would make the later runs slower), with a peer whose token is
# $token, and one request each way answered, not refused. $server is its pid.
start_peergate() {
  data="$work/data-$((++stores))"
  token=$("$peergate" peer add bench --rate 1000000000/min --data "$data" 2>/dev/null)
  "$peergate" serve --policy "$policy" --listen "127.0.0.1:$gate_port" --admin-listen "127.0.0.1:$admin_port" \
    --data "$data" 2>"$work/peergate.log" &
  server=$!
  pids+=("$server")
  wait_for_port "$gate_port"
  wait_for_port "$grpc_port"
  curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    --data-binary @"$work/send.json" "http://127.0.0.1:$gate_port/a2a/v1" | grep -qx 200 \
    || { echo "the JSON-RPC SendMessage was not answered 200" >&2; exit 1; }
  curl -s --http2-prior-knowledge -o /dev/null -D - -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/grpc' -H 'TE: trailers' --data-binary @"$work/send.grpc" \
    "http://127.0.0.1:$grpc_port/lf.a2a.v1.A2AService/SendMessage" -w '%{http_code}' >"$work/grpc-check" || true
  grep -qi '^grpc-status: 0' "$work/grpc-check" \
    || { echo "the gRPC SendMessage was not answered with grpc-status 0:" >&2; cat "$work/grpc-check" >&2; exit 1; }
}

# stop_peergate: stops it, and checks that every answer h2load counted (and the two checks)
# is a completed task in its store: a gRPC error is HTTP 200 too.
stop_peergate() {
  kill "$server"
  wait "$server" 2>/dev/null || true
  local stored
  stored=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM tasks WHERE state = ?", ("TASK_STATE_COMPLETED",)).fetchone()[0])' "$data/peergate.sqlite3")
  if [ "$stored" -lt $((counted + 2)) ]; then
    echo "h2load counted $counted answers, the store holds $stored completed tasks: the run measured failures" >&2
    exit 1
  fi
  checked=$((checked + 1))
}

results=()
baseline=""
baseline_cpu=""
stores=0
checked=0
ticks_per_second=$(getconf CLK_TCK)
# cpu_ticks PID: the process's user + system time so far, in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}
# run NAME URL BODY CONTENT_TYPE CONNECTIONS IN_FLIGHT [--h1]; $server is the pid that answers.
run() {
  local name=$1 url=$2 body=$3 type=$4 clients=$5 streams=$6
  shift 6
  local log="$work/h2load.log"
  rm -f "$log"
  local out before after
  before=$(cpu_ticks "$server")
  out=$(h2load "$@" -c "$clients" -m "$streams" -D "$duration" --log-file="$log" \
    -H "authorization: Bearer $token" -H "content-type: $type" -H 'te: trailers' \
    -d "$body" "$url")
  after=$(cpu_ticks "$server")
  local rps ok
  rps=$(awk '/^finished in/ {print $4}' <<<"$out")
  ok=$(awk '/^status codes:/ {print $3}' <<<"$out")
  # The log's third column is each request's time in microseconds.
  local p50 p99
  read -r p50 p99 < <(awk '{print $3}' "$log" | sort -n | awk '{a[NR]=$1} END {printf "%.2fms %.2fms\n", a[int(NR*0.5)]/1000, a[int(NR*0.99)]/1000}')
  local cpu
  cpu=$(awk -v t=$((after - before)) -v hz="$ticks_per_second" -v n="$ok" 'BEGIN {printf "%.1f", 1e6 * t / hz / n}')
  # An HTTP/1.1 run is the baseline of the gRPC runs after it.
  local ratio="" cpu_ratio=""
  if [ "${1:-}" = --h1 ]; then
    baseline=$rps
    baseline_cpu=$cpu
  else
    ratio=$(awk -v a="$rps" -v b="$baseline" 'BEGIN {printf "%.0f%%", 100 * a / b}')
    cpu_ratio=$(awk -v a="$cpu" -v b="$baseline_cpu" 'BEGIN {printf "%.0f%%", 100 * a / b}')
  fi
  results+=("$(printf '%-50s %11s %8s %8s %9s %6s %6s %s' "$name" "$rps" "$p50" "$p99" "${cpu}us" "$ratio" "$cpu_ratio" "(2xx: $ok)")")
  counted=$ok
}

# measure NAME URL BODY CONTENT_TYPE CONNECTIONS IN_FLIGHT [--h1]: one run against a new peergate.
measure() {
  start_peergate
  run "$@"
  stop_peergate
}

printf '{"jsonrpc":"2.0","id":1}' >"$work/bare.json"
"$bare" "127.0.0.1:$bare_port" "127.0.0.1:$bare_grpc_port" 2>/dev/null &
server=$!
pids+=("$server")
wait_for_port "$bare_port"
wait_for_port "$bare_grpc_port"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "h2load, $duration s a run, server and load generator on the same cores"
bare_h1="http://127.0.0.1:$bare_port/a2a/v1"
bare_h2="http://127.0.0.1:$bare_grpc_port/lf.a2a.v1.A2AService/SendMessage"
json_rpc="http://127.0.0.1:$gate_port/a2a/v1"
grpc="http://127.0.0.1:$grpc_port/lf.a2a.v1.A2AService/SendMessage"
c=$connections
token=""
run "bare axum 200 B, HTTP/1.1: $c conn x 1" "$bare_h1" "$work/bare.json" application/json "$c" 1 --h1
run "bare tonic 200 B, HTTP/2: $c conn x 1" "$bare_h2" "$work/send.grpc" application/grpc "$c" 1
run "bare tonic 200 B, HTTP/2: 1 conn x $c" "$bare_h2" "$work/send.grpc" application/grpc 1 "$c"
run "bare axum 200 B, HTTP/1.1: one at a time" "$bare_h1" "$work/bare.json" application/json 1 1 --h1
run "bare tonic 200 B, HTTP/2: one at a time" "$bare_h2" "$work/send.grpc" application/grpc 1 1
measure "SendMessage JSON-RPC: $c conn x 1" "$json_rpc" "$work/send.json" application/json "$c" 1 --h1
measure "SendMessage gRPC: $c conn x 1 (per connection)" "$grpc" "$work/send.grpc" application/grpc "$c" 1
measure "SendMessage gRPC: 1 conn x $c (one channel)" "$grpc" "$work/send.grpc" application/grpc 1 "$c"
measure "SendMessage JSON-RPC: one at a time" "$json_rpc" "$work/send.json" application/json 1 1 --h1
measure "SendMessage gRPC: one at a time" "$grpc" "$work/send.grpc" application/grpc 1 1
printf '%-50s %11s %8s %8s %9s %6s %6s\n' "scenario" "requests/s" "p50" "p99" "CPU/req" "ratio" "CPU"
printf '%s\n' "${results[@]}"
echo "SendMessage: each of the $checked runs ran on a new store, which held a completed task for every answer h2load counted"
