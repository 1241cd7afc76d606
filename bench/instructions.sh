#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: a figure that does not move with
# the machine's other load, for an A/B whose difference is smaller than wrk's spread between
# two runs of the same build (a few per cent on two shared cores). The server runs under
# callgrind (some 50 times slower), takes a warm-up, then its counters are zeroed, wrk sends
# four connections' worth for the measured seconds, and the counters are dumped; the total
# over the requests wrk counted is the figure. Startup, warm-up and background tasks between
# runs are not in it; the per-second background work (the readiness probe, cache housekeeping)
# is, and is the same in both builds.
#
#   bench/instructions.sh [SECONDS]            (default 15)
#
# BENCH_AUTHORIZATION=FILE adds `[authorization] policies = FILE` and a flood of calls the
# policies deny (403).
# BENCH_RECEIPTS=MODE adds `[receipts] mode = MODE` (signed receipts of finished tasks).
# BENCH_CONTENT=1 adds the content guard's starting pack, every group, both directions.
# BENCH_PEERGATE=FILE counts another build (run once per build; the scenarios are the same).
# Needs valgrind and wrk (Debian: apt-get install valgrind wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
port=18191

for tool in valgrind callgrind_control callgrind_annotate wrk; do
  command -v "$tool" >/dev/null || { echo "$tool is needed: apt-get install valgrind wrk" >&2; exit 1; }
done
if [ -z "${BENCH_PEERGATE:-}" ]; then cargo build --quiet --release --bin peergate; fi
# shellcheck source=bench/common.sh
source bench/common.sh
peergate=${BENCH_PEERGATE:-$(target_dir)/release/peergate}
with_workdir

data="$work/data"
token=$("$peergate" peer add bench --rate 1000000000/min --data "$data" 2>/dev/null)
limited=$("$peergate" peer add limited --rate 1/min --data "$data" 2>/dev/null)
outsider=$("$peergate" peer add outsider --rate 1000000000/min --data "$data" 2>/dev/null)
policy="$work/policy.toml"
cp policies/bench.toml "$policy"
if [ -n "${BENCH_AUTHORIZATION:-}" ]; then
  printf '\n[authorization]\npolicies = "%s"\n' "$BENCH_AUTHORIZATION" >>"$policy"
fi
if [ -n "${BENCH_CONTENT:-}" ]; then
  groups='["secrets", "personal_data", "instruction_override"]'
  printf '\n[content_guard.starter]\ninbound = %s\noutbound = %s\n' "$groups" "$groups" >>"$policy"
fi
if [ -n "${BENCH_RECEIPTS:-}" ]; then
  printf '\n[receipts]\nmode = "%s"\n' "$BENCH_RECEIPTS" >>"$policy"
fi
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" --dump-instr=no \
  "$peergate" serve --policy "$policy" --listen "127.0.0.1:$port" \
  --admin-listen "127.0.0.1:$((port + 1))" --data "$data" 2>"$work/peergate.log" &
pids+=($!)
server=$!
for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
door="http://127.0.0.1:$port/a2a/v1"
get_body='{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"0190a0a0-0000-7000-8000-000000000000"}}'

# count NAME URL AUTH BODY: instructions per request of one scenario.
count() {
  local name=$1 url=$2 auth=$3 body=$4 out requests total dumps
  AUTH="$auth" BODY="$body" wrk -t1 -c4 -d3s -s bench/wrk/post.lua "$url" >/dev/null
  callgrind_control -z "$server" >/dev/null 2>&1
  out=$(AUTH="$auth" BODY="$body" wrk -t1 -c4 -d"${seconds}s" -s bench/wrk/post.lua "$url")
  callgrind_control -d "$server" >/dev/null 2>&1
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  dumps=$(ls -t "$work"/callgrind.out.* | head -1)
  total=$(callgrind_annotate "$dumps" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
  printf '%-34s %9s requests %9d instructions/request\n' "$name" "$requests" $((total / requests))
}

echo "peergate: $peergate"
curl -s -o /dev/null -H "Authorization: Bearer $limited" -H 'Content-Type: application/json' --data "$get_body" "$door"
count "429 flood: peer over its limit" "$door" "Bearer $limited" "$get_body"
count "401 flood: token failing checksum" "$door" "Bearer ${token%??????}AAAAAA" "$get_body"
if [ -n "${BENCH_AUTHORIZATION:-}" ]; then
  count "403 flood: denied by policy" "$door" "Bearer $outsider" "$get_body"
fi
count "GetTask, peer token" "$door" "Bearer $token" "$get_body"
count "SendMessage, echo, task persisted" "$door" "Bearer $token" "$send_body"
