#!/usr/bin/env bash
# Runs the A2A conformance kit's JSON-RPC tests twice against the same agent: once reached
# directly, once through peergate (policies/full.toml, backend = "a2a") standing in front of it,
# and prints both summaries and the failures seen only through peergate.
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
  >"$work/agent.log" 2>&1 &
pids+=($!)

token=$("$peergate" peer add tck --rate 1000000/min --data "$work/data" 2>/dev/null)
python3 - policies/full.toml "$work/policy.toml" "$gate_proxy_port" "$agent_port" "$work/agent-jwks.json" <<'PY'
import sys
source, target, port, agent_port, jwks = sys.argv[1:]
text = open(source).read()
text = text.replace("[server]\n", f'[server]\npublic_base_url = "http://127.0.0.1:{port}"\n', 1)
text = text.replace("per_ip_per_minute = 120", "per_ip_per_minute = 1000000", 1)
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

proxy() { # proxy PORT TARGET_PORT TOKEN
  cat >"$work/haproxy-$1.cfg" <<CFG
global
  maxconn 256
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
frontend door
  bind 127.0.0.1:$1
  http-request set-header Authorization "Bearer $3"
  default_backend upstream
backend upstream
  server target 127.0.0.1:$2
CFG
  haproxy -f "$work/haproxy-$1.cfg" -db >/dev/null 2>&1 &
  pids+=($!)
}
proxy "$direct_port" "$agent_port" "$agent_token"
wait_for_port "$agent_port"
wait_for_port "$direct_port"

run_kit() { # run_kit PORT LOG
  (cd "$tck" && .venv/bin/python run_tck.py --sut-host "http://127.0.0.1:$1" --transport jsonrpc -- -rfs) >"$2" 2>&1 || true
  grep -E "^[0-9]+ (failed|passed)|^=+ .*(passed|failed).* =+$" "$2" | tail -1
}
failures() { grep -E "^FAILED tests/" "$1" | sed -E 's/^FAILED ([^ ]+).*/\1/' | sort -u; }

echo "a2a-tck $(git -C "$tck" rev-parse --short HEAD), JSON-RPC, the agent reached directly:"
run_kit "$direct_port" "$work/direct.log"

"$peergate" serve --policy "$work/policy.toml" --listen "127.0.0.1:$gate_port" --admin-listen "127.0.0.1:$admin_port" --data "$work/data" 2>"$work/peergate.log" &
pids+=($!)
proxy "$gate_proxy_port" "$gate_port" "$token"
wait_for_port "$gate_port"
wait_for_port "$gate_proxy_port"
echo "the same agent through peergate (policies/full.toml, backend = \"a2a\"):"
run_kit "$gate_proxy_port" "$work/gateway.log"

echo "failed directly:"
failures "$work/direct.log" | sed 's/^/  /'
echo "failed through peergate only:"
comm -13 <(failures "$work/direct.log") <(failures "$work/gateway.log") | sed 's/^/  /'
if [ -n "${TCK_KEEP:-}" ]; then cp "$work"/*.log "$TCK_KEEP"/; fi
