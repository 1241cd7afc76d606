#!/usr/bin/env bash
# Runs the A2A conformance kit twice against the same agent, over every binding (JSON-RPC,
# HTTP+JSON, gRPC; TCK_TRANSPORT=jsonrpc runs one): once reached directly, once through
# peergate (policies/full.toml, backend = "a2a") standing in front of it, and prints both
# summaries, per binding, and the failures seen only through peergate. peergate asks the agent
# over JSON-RPC whichever binding the kit used.
#
#   conformance/tck-upstream.sh TCK_DIR
#
# TCK_DIR is set up as for conformance/tck.sh. The agent is conformance/tck_agent.py on the
# official Python SDK, behaving as the kit's scenarios describe; its environment is built once
# in TCK_DIR/.peergate-agent-venv from tests/interop/requirements.txt. Neither the kit nor the
# agent knows about credentials the other needs, so haproxy adds them: the agent's token on the
# direct run, a peer's token on the run through peergate (which presents the agent's token
# itself, from PEERGATE_TCK_AGENT_TOKEN).
set -euo pipefail
cd "$(dirname "$0")/.."
tck=$(cd "${1:?usage: conformance/tck-upstream.sh TCK_DIR}" && pwd)
agent_port=18310
direct_port=18311
gate_port=18312
admin_port=18313
gate_proxy_port=18314
agent_grpc_port=18315
direct_grpc_port=18316
gate_grpc_port=18317
gate_grpc_proxy_port=18318

command -v haproxy >/dev/null || { echo "haproxy is needed: apt-get install haproxy" >&2; exit 1; }
cargo build --quiet --release --bin peergate
# shellcheck source=bench/common.sh
source bench/common.sh
target_dir=$(target_dir)
peergate="$target_dir/release/peergate"
venv="$tck/.peergate-agent-venv"
if ! cmp -s tests/interop/requirements.txt "$venv/installed-requirements.txt" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/interop/requirements.txt
  cp tests/interop/requirements.txt "$venv/installed-requirements.txt"
fi

with_workdir

agent_token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
export TCK_AGENT_TOKEN=$agent_token PEERGATE_TCK_AGENT_TOKEN=$agent_token
# The card names the direct proxy: the kit reads it there, and peergate is told the JSON-RPC
# endpoint itself (model.a2a.rpc_url).
"$venv/bin/python" conformance/tck_agent.py --port "$agent_port" \
  --public-url "http://127.0.0.1:$direct_port" --sign-jwks-out "$work/agent-jwks.json" \
  --grpc-port "$agent_grpc_port" --grpc-public "127.0.0.1:$direct_grpc_port" \
  >"$work/agent.log" 2>&1 &
pids+=($!)

token=$("$peergate" peer add tck --rate 1000000/min --data "$work/data" 2>/dev/null)
python3 - policies/full.toml "$work/policy.toml" "$gate_proxy_port" "$agent_port" "$work/agent-jwks.json" "$gate_grpc_port" "$gate_grpc_proxy_port" <<'PY'
import re, sys
source, target, port, agent_port, jwks, grpc_port, grpc_proxy_port = sys.argv[1:]
text = open(source).read()
text = re.sub(r'(\[grpc\]\n(?:#.*\n)*)listen = "[^"]*"',
              rf'\1listen = "127.0.0.1:{grpc_port}"\npublic_address = "127.0.0.1:{grpc_proxy_port}"', text)
text = text.replace("[server]\n", f'[server]\npublic_base_url = "http://127.0.0.1:{port}"\n', 1)
text = text.replace("per_ip_per_minute = 120", "per_ip_per_minute = 1000000", 1)
# One peer runs every test of the kit, some leaving a subscription open until the run ends.
text = text.replace("streams_per_peer = 8", "streams_per_peer = 1000", 1)
text = text.replace("dangerous_allow_loopback_callbacks = false", "dangerous_allow_loopback_callbacks = true", 1)
assert 'backend = "echo"' in text
text = text.replace('backend = "echo"', 'backend = "a2a"', 1)
text += f'''
[model.a2a]
url = "http://127.0.0.1:{agent_port}"
rpc_url = "http://127.0.0.1:{agent_port}/"
card_jwks_file = "{jwks}"
token_env = "PEERGATE_TCK_AGENT_TOKEN"
'''
open(target, "w").write(text)
PY

proxy() { # proxy PORT TARGET_PORT TOKEN [h2]: HTTP/1.1, or with h2 HTTP/2 both ways (gRPC)
  local proto=${4:+ proto h2}
  cat >"$work/haproxy-$1.cfg" <<CFG
global
  maxconn 256
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
frontend door
  bind 127.0.0.1:$1$proto
  http-request set-header Authorization "Bearer $3"
  default_backend upstream
backend upstream
  server target 127.0.0.1:$2$proto
CFG
  haproxy -f "$work/haproxy-$1.cfg" -db >/dev/null 2>&1 &
  pids+=($!)
}
proxy "$direct_port" "$agent_port" "$agent_token"
proxy "$direct_grpc_port" "$agent_grpc_port" "$agent_token" h2
wait_for_port "$agent_port"
wait_for_port "$direct_port"

run_kit() { # run_kit PORT LOG
  (cd "$tck" && .venv/bin/python run_tck.py --sut-host "http://127.0.0.1:$1" ${TCK_TRANSPORT:+--transport "$TCK_TRANSPORT"} -- -rA) >"$2" 2>&1 || true
  grep -E "^[0-9]+ (failed|passed)|^=+ .*(passed|failed).* =+$" "$2" | tail -1
  # Per binding: the kit names each test's transport in brackets.
  for transport in jsonrpc http_json grpc; do
    local passed failed
    passed=$(grep -cE "^PASSED tests/([^ ]*\[$transport\]|[^ ]*-$transport\]|compatibility/$transport/)" "$2" || true)
    failed=$(grep -cE "^FAILED tests/([^ ]*\[$transport\]|[^ ]*-$transport\]|compatibility/$transport/)" "$2" || true)
    echo "  $transport: $passed passed, $failed failed"
  done
}
failures() { grep -E "^FAILED tests/" "$1" | sed -E 's/^FAILED ([^ ]+).*/\1/' | sort -u; }

echo "a2a-tck $(git -C "$tck" rev-parse --short HEAD), the agent reached directly:"
run_kit "$direct_port" "$work/direct.log"

"$peergate" serve --policy "$work/policy.toml" --listen "127.0.0.1:$gate_port" --admin-listen "127.0.0.1:$admin_port" --data "$work/data" 2>"$work/peergate.log" &
pids+=($!)
proxy "$gate_proxy_port" "$gate_port" "$token"
proxy "$gate_grpc_proxy_port" "$gate_grpc_port" "$token" h2
wait_for_port "$gate_port"
wait_for_port "$gate_proxy_port"
echo "the same agent through peergate (policies/full.toml, backend = \"a2a\"):"
run_kit "$gate_proxy_port" "$work/gateway.log"

echo "failed directly:"
failures "$work/direct.log" | sed 's/^/  /'
echo "failed through peergate only:"
comm -13 <(failures "$work/direct.log") <(failures "$work/gateway.log") | sed 's/^/  /'
if [ -n "${TCK_KEEP:-}" ]; then cp "$work"/*.log "$TCK_KEEP"/; fi
