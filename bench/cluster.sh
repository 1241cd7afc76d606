#!/usr/bin/env bash
# Several instances on loopback, as an operator would run them: a PostgreSQL cluster, a Redis
# server, two peergate instances serving one database with Redis, and haproxy in front of them.
# Measures an authenticated SendMessage (echo backend, task persisted) for:
#
#   - the bare axum server (the baseline, directly and through haproxy),
#   - one peergate on the embedded SQLite store (as bench/load.sh runs it),
#   - one peergate on PostgreSQL alone (no Redis), and one on PostgreSQL + Redis,
#   - two peergate instances on PostgreSQL + Redis behind haproxy (round robin),
#
# and counts the PostgreSQL statements and the Redis commands per SendMessage.
# Every answer counted is checked against the completed tasks in the store afterwards.
#
# Last, Redis one hop away: one instance on PostgreSQL + Redis, with Redis directly and then
# behind bench/delay_relay.py (1 ms added each way), one request at a time so each latency
# shows: an authenticated SendMessage, and a refusal (429, a peer past its quota).
#
#   bench/cluster.sh [SECONDS_PER_RUN] [CONNECTIONS]     (defaults: 10 and 50)
#
# BENCH_PEERGATE=FILE measures another build of peergate (an A/B of two commits).
#
# Needs wrk, haproxy, postgresql and redis-server (Debian: apt-get install wrk haproxy
# postgresql redis-server). Everything listens on 127.0.0.1 only, keeps its data in a temporary
# directory, and is stopped when the script ends. PostgreSQL runs with its defaults (fsync and
# synchronous commit on), so each commit waits for the disk as SQLite's does.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-10}
connections=${2:-50}
bare_port=18190
proxy_port=18191
one_port=18192
a_port=18193
b_port=18194
sqlite_port=18195
pg_port=18196
redis_port=18197
relay_port=18198
admin_base=18200

cargo build --quiet --release --bin peergate --example bare_axum
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
peergate=${BENCH_PEERGATE:-$target_dir/release/peergate}
bare="$target_dir/release/examples/bare_axum"

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  stop_postgres "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT


# wait_for_port and send_body
# shellcheck source=bench/common.sh
source bench/common.sh
need_tools wrk haproxy redis-server psql

results=()
baseline=""
answered=0
# run NAME URL AUTH: wrk with the SendMessage body; checks one request gets 200 first.
run() {
  local name=$1 url=$2 auth=$3
  local got
  got=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: $auth" -H 'Content-Type: application/json' --data "$send_body" "$url")
  if [ "$got" != 200 ]; then
    echo "$name: expected HTTP 200 before the run, got $got" >&2
    exit 1
  fi
  local out
  out=$(AUTH="$auth" BODY="$send_body" wrk -t1 -c"$connections" -d"${duration}s" --latency -s bench/wrk/post.lua "$url")
  answered=$(awk '/requests in/ {print $1}' <<<"$out")
  local rps p50 p99 other ratio
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  other=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
  [ -n "$baseline" ] || baseline=$rps
  ratio=$(awk -v a="$rps" -v b="$baseline" 'BEGIN {printf "%.1f%%", 100 * a / b}')
  results+=("$(printf '%-46s %12s %9s %9s %7s %s' "$name" "$rps" "$p50" "$p99" "$ratio" "${other:+(non-2xx: $other)}")")
}

# haproxy_to PORT...: haproxy on proxy_port, round robin over the given ports.
haproxy_to() {
  {
    printf 'global\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  option http-keep-alive\n'
    printf 'frontend door\n  bind 127.0.0.1:%s\n  default_backend instances\n' "$proxy_port"
    printf 'backend instances\n  balance roundrobin\n'
    for port in "$@"; do printf '  server i%s 127.0.0.1:%s\n' "$port" "$port"; done
  } >"$work/haproxy.cfg"
  haproxy -f "$work/haproxy.cfg" -db >/dev/null 2>&1 &
  pids+=($!)
  wait_for_port "$proxy_port"
}

stop_last() {
  kill "${pids[-1]}" 2>/dev/null || true
  wait "${pids[-1]}" 2>/dev/null || true
  unset 'pids[-1]'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "wrk -t1 -c$connections -d${duration}s --latency; every server, PostgreSQL, Redis, haproxy and wrk share the same cores"

# The baseline, directly and through haproxy.
"$bare" "127.0.0.1:$bare_port" 2>/dev/null &
bare_pid=$!
pids+=("$bare_pid")
wait_for_port "$bare_port"
run "bare axum POST" "http://127.0.0.1:$bare_port/a2a/v1" "none"
haproxy_to "$bare_port"
run "bare axum POST through haproxy" "http://127.0.0.1:$proxy_port/a2a/v1" "none"
stop_last
kill "$bare_pid"

# One instance on the embedded store.
token=$("$peergate" peer add bench --rate 1000000000/min --data "$work/sqlite" 2>/dev/null)
"$peergate" serve --policy policies/bench.toml --listen "127.0.0.1:$sqlite_port" --admin-listen "127.0.0.1:$((admin_base))" --data "$work/sqlite" 2>"$work/sqlite.log" &
pids+=($!)
wait_for_port "$sqlite_port"
run "peergate, SQLite, one instance" "http://127.0.0.1:$sqlite_port/a2a/v1" "Bearer $token"
stop_last

# PostgreSQL (defaults, on a socket of its own) and Redis (nothing on disk).
start_postgres "$work/pg" "$pg_port" max_connections=200 shared_preload_libraries=pg_stat_statements
psql "$admin_url" -qc 'CREATE DATABASE peergate' -c 'CREATE EXTENSION pg_stat_statements' >/dev/null
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
pids+=($!)
wait_for_port "$redis_port"
export PEERGATE_STORE_URL="postgres://postgres@127.0.0.1:$pg_port/peergate"
export PEERGATE_REDIS_URL="redis://127.0.0.1:$redis_port"

# Instances serving together need the same card: its URL and its keys.
"$peergate" keys generate --alg EdDSA --kid bench-cluster --out "$work/card.pem" >/dev/null 2>&1
python3 - policies/bench.toml "$work/cluster.toml" "$work/card.pem" <<'PY'
import sys
source, target, key = sys.argv[1:]
text = open(source).read().replace("[server]\n", '[server]\npublic_base_url = "http://127.0.0.1:%s"\n' % "18191", 1)
text += '\n[[signing.keys]]\nkid = "bench-cluster"\nalg = "EdDSA"\nprivate_key_file = "%s"\n' % key
open(target, "w").write(text)
PY
cluster_token=$("$peergate" peer add bench --rate 1000000000/min 2>"$work/peer-add.log") || { cat "$work/peer-add.log" >&2; exit 1; }

# Statements PostgreSQL ran for peergate (BEGIN and COMMIT included: each is a round trip) and
# commands Redis ran, so far.
counters() {
  local statements commands
  statements=$(psql "$admin_url" -tAc "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'peergate'")
  commands=$(redis-cli -p "$redis_port" info commandstats | awk -F'[=,:]' '/^cmdstat_/ && !/cmdstat_info/ {n += $3} END {print n + 0}')
  echo "$statements $commands"
}
per_request=()
pg_answered=0
# measure NAME URL: a run, then what each answer cost the store and Redis (the check request
# before the run included).
measure() {
  local before after
  before=$(counters)
  run "$1" "$2" "Bearer $cluster_token"
  after=$(counters)
  pg_answered=$((pg_answered + answered + 1))
  per_request+=("$(awk -v b="$before" -v a="$after" -v n="$((answered + 1))" -v name="$1" 'BEGIN {
    split(b, x, " "); split(a, y, " ");
    printf "%-46s %6.2f PostgreSQL statements, %5.2f Redis commands (scripts\x27 inner calls included) per SendMessage", name, (y[1]-x[1])/n, (y[2]-x[2])/n }')")
}

# Alone on PostgreSQL (no Redis: nothing shared, a second instance would be refused), to
# separate what the store costs from what sharing costs.
env -u PEERGATE_REDIS_URL "$peergate" serve --policy "$work/cluster.toml" --listen "127.0.0.1:$one_port" --admin-listen "127.0.0.1:$((admin_base + 1))" 2>"$work/alone.log" &
pids+=($!)
wait_for_port "$one_port"
measure "peergate, PostgreSQL alone, one instance" "http://127.0.0.1:$one_port/a2a/v1"
stop_last

"$peergate" serve --policy "$work/cluster.toml" --listen "127.0.0.1:$one_port" --admin-listen "127.0.0.1:$((admin_base + 1))" 2>"$work/one.log" &
pids+=($!)
wait_for_port "$one_port"
measure "peergate, PostgreSQL + Redis, one instance" "http://127.0.0.1:$one_port/a2a/v1"
stop_last

"$peergate" serve --policy "$work/cluster.toml" --listen "127.0.0.1:$a_port" --admin-listen "127.0.0.1:$((admin_base + 2))" 2>"$work/a.log" &
pids+=($!)
"$peergate" serve --policy "$work/cluster.toml" --listen "127.0.0.1:$b_port" --admin-listen "127.0.0.1:$((admin_base + 3))" 2>"$work/b.log" &
pids+=($!)
wait_for_port "$a_port"
wait_for_port "$b_port"
haproxy_to "$a_port" "$b_port"
measure "peergate, PostgreSQL + Redis, two behind haproxy" "http://127.0.0.1:$proxy_port/a2a/v1"

completed=$(psql "$PEERGATE_STORE_URL" -tAc "SELECT count(*) FROM tasks WHERE state = 'TASK_STATE_COMPLETED'")
echo "PostgreSQL runs: wrk counted $pg_answered answers; the store holds $completed completed tasks"
if [ "$completed" -lt "$pg_answered" ]; then
  echo "fewer completed tasks than answers: the run measured failures" >&2
  exit 1
fi

# Redis one hop away. latency NAME URL AUTH STATUS: one connection, every answer STATUS.
hop_results=()
latency() {
  local name=$1 url=$2 auth=$3 status=$4
  local got out
  got=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: $auth" -H 'Content-Type: application/json' --data "$send_body" "$url")
  if [ "$got" != "$status" ]; then
    echo "$name: expected HTTP $status before the run, got $got" >&2
    exit 1
  fi
  out=$(AUTH="$auth" BODY="$send_body" wrk -t1 -c1 -d"${duration}s" --latency -s bench/wrk/post.lua "$url")
  hop_results+=("$(printf '%-46s %9s %9s %9s' "$name" \
    "$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")" \
    "$(awk '$1 == "50%" {print $2}' <<<"$out")" \
    "$(awk '$1 == "99%" {print $2}' <<<"$out")")")
}
python3 bench/delay_relay.py "$relay_port" "$redis_port" 1 &
pids+=($!)
wait_for_port "$relay_port"
limited_token=$("$peergate" peer add limited --rate 1/min 2>>"$work/peer-add.log")
curl -s -o /dev/null -H "Authorization: Bearer $limited_token" -H 'Content-Type: application/json' --data "$send_body" "http://127.0.0.1:$a_port/a2a/v1"
for hop in direct relay; do
  port=$redis_port
  [ "$hop" = direct ] || port=$relay_port
  PEERGATE_REDIS_URL="redis://127.0.0.1:$port" "$peergate" serve --policy "$work/cluster.toml" --listen "127.0.0.1:$one_port" --admin-listen "127.0.0.1:$((admin_base + 1))" 2>"$work/hop-$hop.log" &
  pids+=($!)
  wait_for_port "$one_port"
  label="Redis direct"
  [ "$hop" = direct ] || label="Redis 1 ms away each way"
  latency "SendMessage, $label" "http://127.0.0.1:$one_port/a2a/v1" "Bearer $cluster_token" 200
  latency "429 (peer past its quota), $label" "http://127.0.0.1:$one_port/a2a/v1" "Bearer $limited_token" 429
  stop_last
done

printf '\n%-46s %12s %9s %9s %7s\n' "scenario (SendMessage, echo)" "requests/s" "p50" "p99" "vs bare"
printf '%s\n' "${results[@]}"
printf '\n%s\n' "${per_request[@]}"
printf '\n%-46s %9s %9s %9s\n' "one request at a time, PostgreSQL + Redis" "req/s" "p50" "p99"
printf '%s\n' "${hop_results[@]}"
