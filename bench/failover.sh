#!/usr/bin/env bash
# Two instances on PostgreSQL + Redis behind haproxy (checking /ready), one of them killed with
# SIGKILL halfway through a load run, and what must still hold afterwards:
#
#   - every answer wrk counted is a completed task in the store (nothing answered is lost);
#   - the dead instance's turns in flight are failed by the survivor once its lease lapsed (no
#     task is left working);
#   - a peer driven past its quota was admitted at most once per instance beyond it;
#
# plus what the load saw: requests per second and latency over the run, and the errors around
# the kill. The model is a small OpenAI-compatible server on loopback answering after 200 ms,
# so turns are in flight when the instance dies.
#
# With MODE `hang`, Redis is stopped with SIGSTOP halfway instead (it keeps its connections and
# answers nothing) and continued at three quarters; a second load, started one second into the
# hang, measures what peers see once the circuit breaker is open.
#
#   bench/failover.sh [SECONDS] [CONNECTIONS] [kill|hang]     (defaults: 60, 50, kill)
#
# Needs wrk, haproxy, postgresql and redis-server. Everything listens on 127.0.0.1 only, keeps
# its data in a temporary directory, and is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-60}
connections=${2:-50}
mode=${3:-kill}
proxy_port=18291
a_port=18293
b_port=18294
pg_port=18296
redis_port=18297
model_port=18298
admin_base=18300
lease_seconds=3
quota_per_minute=600

# shellcheck source=bench/common.sh
source bench/common.sh
need_tools wrk haproxy redis-server psql

cargo build --quiet --release --bin peergate
peergate=${BENCH_PEERGATE:-$(target_dir)/release/peergate}

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  stop_postgres "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT

# The model: 200 ms an answer, 18 tokens.
python3 bench/model.py "$model_port" --delay 0.2 >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$model_port"

start_postgres "$work/pg" "$pg_port" max_connections=200
psql "$admin_url" -qc 'CREATE DATABASE peergate' >/dev/null
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
pids+=($!)
redis_pid=$!
wait_for_port "$redis_port"
export PEERGATE_STORE_URL="postgres://postgres@127.0.0.1:$pg_port/peergate"
export PEERGATE_REDIS_URL="redis://127.0.0.1:$redis_port"
store() { psql "$PEERGATE_STORE_URL" -tAc "$1"; }

"$peergate" keys generate --alg EdDSA --kid bench-failover --out "$work/card.pem" >/dev/null 2>&1
python3 - policies/bench.toml "$work/policy.toml" "$work/card.pem" "$model_port" "$lease_seconds" <<'PY'
import sys
source, target, key, model_port, lease = sys.argv[1:]
text = open(source).read().replace("[server]\n", '[server]\npublic_base_url = "http://127.0.0.1:18291"\n', 1)
text = text.replace('backend = "echo"', 'backend = "openai"', 1)
text += '\n[model.openai]\nbase_url = "http://127.0.0.1:%s/v1"\nmodel = "bench"\n' % model_port
text += '\n[cluster]\nlease_seconds = %s\n' % lease
text += '\n[[signing.keys]]\nkid = "bench-failover"\nalg = "EdDSA"\nprivate_key_file = "%s"\n' % key
open(target, "w").write(text)
PY
token=$("$peergate" peer add bench --rate 1000000000/min 2>/dev/null)
quota_token=$("$peergate" peer add quota --rate "$quota_per_minute/min" 2>/dev/null)

serve() {
  "$peergate" serve --policy "$work/policy.toml" --listen "127.0.0.1:$1" --admin-listen "127.0.0.1:$2" 2>"$work/$3.log" &
  pids+=($!)
}
serve "$a_port" "$((admin_base + 1))" a
a_pid=${pids[-1]}
serve "$b_port" "$((admin_base + 2))" b
wait_for_port "$a_port"
wait_for_port "$b_port"
{
  printf 'global\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 60s\n  timeout server 60s\n  option http-keep-alive\n  retries 0\n'
  printf 'frontend door\n  bind 127.0.0.1:%s\n  default_backend instances\n' "$proxy_port"
  printf 'backend instances\n  balance roundrobin\n  option httpchk GET /ready\n  default-server inter 500ms fall 2 rise 2\n'
  printf '  server a 127.0.0.1:%s check\n  server b 127.0.0.1:%s check\n' "$a_port" "$b_port"
} >"$work/haproxy.cfg"
haproxy -f "$work/haproxy.cfg" -db >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$proxy_port"
sleep 1

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
if [ "$mode" = hang ]; then
  echo "wrk -t1 -c$connections -d${duration}s through haproxy; Redis stopped (SIGSTOP) from $((duration / 2)) s to $((duration * 3 / 4)) s"
else
  echo "wrk -t1 -c$connections -d${duration}s through haproxy; instance a is killed (SIGKILL) after $((duration / 2)) s; lease $lease_seconds s"
fi
url="http://127.0.0.1:$proxy_port/a2a/v1"
AUTH="Bearer $token" wrk -t1 -c"$connections" -d"${duration}s" --latency -s bench/wrk/post.lua "$url" >"$work/load.out" &
load=$!
AUTH="Bearer $quota_token" wrk -t1 -c4 -d"${duration}s" -s bench/wrk/post.lua "$url" >"$work/quota.out" &
quota_load=$!
started=$(date +%s.%N)
sleep $((duration / 2))
working_at_kill=$(store "SELECT count(*) FROM tasks WHERE state = 'TASK_STATE_WORKING'")
if [ "$mode" = hang ]; then
  kill -STOP "$redis_pid"
  sleep 1
  hung=$((duration / 4 - 2))
  AUTH="Bearer $token" wrk -t1 -c"$connections" -d"${hung}s" --latency -s bench/wrk/post.lua "$url" >"$work/hung.out"
  sleep 1
  kill -CONT "$redis_pid"
else
  kill -9 "$a_pid"
fi
wait "$load" "$quota_load"
ended=$(date +%s.%N)

# The survivor fails the dead instance's working tasks within about lease × 7/3.
sleep $((lease_seconds * 3 + 2))
left_working=$(store "SELECT count(*) FROM tasks WHERE state = 'TASK_STATE_WORKING'")
interrupted=$(store "SELECT count(*) FROM tasks WHERE state = 'TASK_STATE_FAILED'")
bench_id=$(store "SELECT id FROM peers WHERE name = 'bench'")
quota_id=$(store "SELECT id FROM peers WHERE name = 'quota'")
completed=$(store "SELECT count(*) FROM tasks WHERE state = 'TASK_STATE_COMPLETED' AND peer_id = '$bench_id'")
quota_completed=$(store "SELECT count(*) FROM tasks WHERE peer_id = '$quota_id'")

load_out=$(cat "$work/load.out")
requests=$(awk '/requests in/ {print $1}' <<<"$load_out")
non_2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$load_out")
errors=$(grep -o 'Socket errors:.*' <<<"$load_out" || echo "Socket errors: none")
answered=$((requests - ${non_2xx:-0}))
elapsed=$(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.1f", b - a}')
# GCRA: a whole minute's quota at once, then the rate; one more per instance is the bound.
allowance=$(awk -v q="$quota_per_minute" -v t="$elapsed" 'BEGIN {printf "%d", q + t * q / 60}')

echo
echo "load: $(awk '/^Requests\/sec:/ {print $2}' <<<"$load_out") requests/s; p50 $(awk '$1 == "50%" {print $2}' <<<"$load_out"), p99 $(awk '$1 == "99%" {print $2}' <<<"$load_out"), max $(awk '/Latency/ {print $4; exit}' <<<"$load_out")"
echo "load: $requests requests, $answered answered 2xx, ${non_2xx:-0} non-2xx; $errors"
echo "store: $completed completed tasks of the loaded peer (wrk counted $answered answers)"
if [ "$mode" = hang ]; then
  hung_out=$(cat "$work/hung.out")
  echo "Redis hung, from 1 s in: $(awk '/^Requests\/sec:/ {print $2}' <<<"$hung_out") requests/s; p50 $(awk '$1 == "50%" {print $2}' <<<"$hung_out"), p99 $(awk '$1 == "99%" {print $2}' <<<"$hung_out"), max $(awk '/Latency/ {print $4; exit}' <<<"$hung_out"); $(awk '/Non-2xx or 3xx responses:/ {n = $5} END {print n + 0}' <<<"$hung_out") non-2xx"
  for instance in a b; do
    echo "breaker of $instance: opened $(grep -c 'circuit breaker is open' "$work/$instance.log") time(s), closed $(grep -c 'circuit breaker is closed' "$work/$instance.log") time(s)"
  done
fi
echo "$mode: $working_at_kill tasks working just before; $left_working still working $((lease_seconds * 3 + 2)) s after the run; $interrupted failed in all"
echo "quota: $quota_completed tasks admitted for a peer at $quota_per_minute/min over ${elapsed} s (GCRA allows $allowance, +1 per instance = $((allowance + 2)))"
status=0
if [ "$completed" -lt "$answered" ]; then echo "LOST: fewer completed tasks than answers" >&2; status=1; fi
if [ "$left_working" -ne 0 ]; then echo "tasks left working after the lease" >&2; status=1; fi
if [ "$quota_completed" -gt $((allowance + 2)) ]; then echo "the quota was exceeded" >&2; status=1; fi
exit $status
