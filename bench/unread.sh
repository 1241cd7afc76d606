#!/usr/bin/env bash
# Answers nobody reads, over gRPC: one peer at the default 30 requests a minute lists its tasks
# on CONNECTIONS HTTP/2 connections (default 4) whose flow-control windows it never opens, for
# SECONDS (default 120), with TASKS tasks of TEXT_BYTES of text each behind every page (default
# 100 of 60,000 bytes, so each ListTasks answer is a few tens of MB). Prints the gateway's
# resident memory every ten seconds and for forty seconds after the client stops: it must stay
# flat while the client holds on, and come down once it leaves.
#
#   bench/unread.sh [SECONDS] [CONNECTIONS]
#
# BENCH_PEERGATE and BENCH_POLICY run another build and its own policy file (an A/B against a
# release without grpc.idle_timeout_seconds needs that release's policies/full.toml).
# Everything listens on 127.0.0.1 and is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-120}
connections=${2:-4}
tasks=${TASKS:-100}
text_bytes=${TEXT_BYTES:-60000}
port=18411
admin_port=18412
grpc_port=18413

# shellcheck source=bench/common.sh
source bench/common.sh
need_tools curl
cargo build --quiet --release --bin peergate --example h2_hoarder
peergate=${BENCH_PEERGATE:-$(target_dir)/release/peergate}
hoarder="$(target_dir)/release/examples/h2_hoarder"
with_workdir

"$peergate" serve --policy "${BENCH_POLICY:-policies/full.toml}" --listen "127.0.0.1:$port" \
  --admin-listen "127.0.0.1:$admin_port" --grpc-listen "127.0.0.1:$grpc_port" \
  --data "$work/data" 2>"$work/server.log" &
pids+=($!)
server=$!
wait_for_port "$port"

# The tasks are made quickly under a quota of their own; the attack runs under the default.
token=$("$peergate" peer add alice --rate 100000/min --data "$work/data" 2>/dev/null)
text=$(head -c "$text_bytes" /dev/zero | tr '\0' 'a')
for i in $(seq "$tasks"); do
  printf '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m%s","role":"ROLE_USER","parts":[{"text":"%s"}]}}}' \
    "$i" "$text" >"$work/body.json"
  curl -s -o /dev/null "http://127.0.0.1:$port/a2a/v1" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' --data-binary @"$work/body.json"
done
"$peergate" peer limit alice 30/min --data "$work/data" >/dev/null 2>&1
sleep 2
echo "before: $(grep VmRSS /proc/$server/status)"

# ListTasksRequest{page_size: 100, history_length: 10, include_artifacts: true}.
"$hoarder" "127.0.0.1:$grpc_port" "$token" ListTasks 2064300a4001 "$connections" "$seconds" "$server"
for i in 1 2 3 4; do
  sleep 10
  echo "the client gone ${i}0 s: $(grep VmRSS /proc/$server/status)"
done
