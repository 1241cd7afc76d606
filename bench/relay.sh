#!/usr/bin/env bash
# peergate in front of an agent: the official Python A2A agent (a2a-sdk's server,
# tests/interop/a2a_python_upstream.py) measured alone and through peergate (`backend = "a2a"`)
# in the same run, alternating, with wrk: SendMessage over JSON-RPC, then SendStreamingMessage
# (the stream read to its end). Prints requests/s, p50 and p99 of each, the ratio of peergate's
# throughput to the agent's, what peergate adds to the agent's p50, and the connections peergate
# opened to the agent during its runs (a good client opens about as many as it has requests in
# flight, once).
#
#   bench/relay.sh [SECONDS_PER_RUN] [CONNECTIONS]     (defaults: 10 and 10)
#
# ROUNDS=N alternates N times (default 2). BENCH_PEERGATE=FILE measures another build.
# UPSTREAM_TLS=1 serves the agent over TLS (the test CA's certificate in tests/data/tls, for
# 127.0.0.1; peergate trusts that CA, wrk checks no certificate): a good client pays the
# handshake once per connection it keeps, not once per message.
# Runs policies/bench.toml with streaming switched on and the agent as its backend: not for
# production. The agent and the gateway share this machine's cores, as they would share a host.
# Needs wrk and python3 with venv (the agent's SDK is installed once into the target
# directory). Everything listens on 127.0.0.1 and is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-10}
connections=${2:-10}
rounds=${ROUNDS:-2}
agent_port=18701
port=18702
admin_port=18703

# shellcheck source=bench/common.sh
source bench/common.sh
need_tools wrk
cargo build --quiet --release --bin peergate
peergate=${BENCH_PEERGATE:-$(target_dir)/release/peergate}
python=$(bench_python)
with_workdir

upstream_token=bench-upstream-credential-7f3a
scheme=http tls_args=()
if [ -n "${UPSTREAM_TLS:-}" ]; then
  scheme=https tls_args=(--tls tests/data/tls/server.pem tests/data/tls/server.key)
fi
UPSTREAM_TOKEN=$upstream_token "$python" tests/interop/a2a_python_upstream.py --port "$agent_port" \
  --sign-jwk tests/data/upstream/signing.private.jwk.json "${tls_args[@]}" >/dev/null 2>"$work/agent.log" &
pids+=($!)
wait_for_port "$agent_port"

python3 - policies/bench.toml "$work/policy.toml" "$agent_port" "$scheme" <<'PY'
import sys
source, target, agent_port, scheme = sys.argv[1:]
text = open(source).read()
assert 'backend = "echo"' in text
text = text.replace('backend = "echo"', 'backend = "a2a"', 1)
text += f'''
[model.a2a]
url = "{scheme}://127.0.0.1:{agent_port}"
card_jwks_file = "tests/data/upstream/signing.jwks.json"
token_env = "BENCH_UPSTREAM_TOKEN"
'''
if scheme == "https":
    text += 'ca_file = "tests/data/tls/ca.pem"\n'
# Each of wrk's connections holds a stream open at a time: more than the default cap of 8.
assert "streams_per_peer" not in text
text = text.replace("[limits]", "[limits]\nstreams_per_peer = 1000", 1)
if "[capabilities]" in text:
    text = text.replace("[capabilities]", "[capabilities]\nstreaming = true", 1)
else:
    text += "\n[capabilities]\nstreaming = true\n"
open(target, "w").write(text)
PY
token=$("$peergate" peer add bench --rate 1000000000/min --data "$work/data" 2>/dev/null)
BENCH_UPSTREAM_TOKEN=$upstream_token "$peergate" serve --policy "$work/policy.toml" \
  --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin_port" --data "$work/data" \
  2>"$work/server.log" &
pids+=($!)
wait_for_port "$port"

stream_body=${send_body/\"SendMessage\"/\"SendStreamingMessage\"}

# measure NAME URL AUTH BODY [ACCEPT]: one wrk run; prints a line and sets req_s and p50_ms.
measure() {
  local name=$1 url=$2 auth=$3 body=$4 accept=${5:-}
  local out
  out=$(AUTH="$auth" BODY="$body" ACCEPT="$accept" wrk -t1 -c"$connections" -d"${duration}s" --latency \
    -s bench/wrk/post.lua "$url")
  req_s=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50_ms=$(awk '$1 == "50%" {print $2}' <<<"$out" | to_ms)
  local p99_ms non2xx
  p99_ms=$(awk '$1 == "99%" {print $2}' <<<"$out" | to_ms)
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  printf '%-44s %9s req/s  p50 %7s ms  p99 %7s ms%s\n' "$name" "$req_s" "$p50_ms" "$p99_ms" \
    "${non2xx:+  ($non2xx not 2xx)}"
}

# to_ms: wrk's latency (850.00us, 1.20ms, 2.01s) in milliseconds.
to_ms() {
  awk '{ v = $1; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms$/, "", v) } else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 }; printf "%.2f", v }'
}

# Connections peergate holds or held to the agent: established now, and closed (TIME-WAIT).
agent_connections() {
  local open closed
  open=$(ss -Htn state established "( dport = :$agent_port )" | wc -l)
  closed=$(ss -Htn state time-wait "( dport = :$agent_port )" | wc -l)
  echo "$open open, $closed closed"
}

echo "the official Python agent ($scheme) alone, and peergate in front of it: wrk -t1 -c$connections -d${duration}s"
for round in $(seq "$rounds"); do
  for kind in SendMessage SendStreamingMessage; do
    body=$send_body accept=
    if [ "$kind" = SendStreamingMessage ]; then body=$stream_body accept=text/event-stream; fi
    measure "agent alone, $kind" "$scheme://127.0.0.1:$agent_port/" "Bearer $upstream_token" "$body" "$accept"
    alone_req_s=$req_s alone_p50=$p50_ms
    sleep 2
    before=$(agent_connections)
    measure "through peergate, $kind" "http://127.0.0.1:$port/a2a/v1" "Bearer $token" "$body" "$accept"
    python3 -c "import sys; a, g, ap, gp = map(float, sys.argv[1:]); print(f'  round $round: {g / a:.2f} of the agent\'s throughput, {gp - ap:+.2f} ms at p50')" \
      "$alone_req_s" "$req_s" "$alone_p50" "$p50_ms"
    echo "  connections to the agent: before the run $before; after it $(agent_connections)"
    sleep 2
  done
done
