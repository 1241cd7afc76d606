#!/usr/bin/env bash
# Runs the A2A conformance kit (github.com/a2aproject/a2a-tck, branch 1.0-dev) against peergate
# on loopback, with one of the repository's policies, over every binding the card lists (set
# TCK_TRANSPORT=jsonrpc to run one).
#
#   conformance/tck.sh TCK_DIR [default|full]
#
# TCK_DIR is a checkout of the kit with its environment installed:
#   git clone -b 1.0-dev https://github.com/a2aproject/a2a-tck TCK_DIR
#   python3 -m venv TCK_DIR/.venv && TCK_DIR/.venv/bin/pip install -e TCK_DIR
#
# The kit sends no credentials, so haproxy (apt-get install haproxy) sits in front of peergate
# and adds a peer's bearer token to every request (over HTTP/2 for the gRPC listener, when the
# policy has one); the card's URLs (server.public_base_url, grpc.public_address) name haproxy, the per-IP limit is raised so the kit's bursts are not refused, and push
# callbacks may reach loopback (the kit's webhook receiver is on http://localhost). Reports land
# in TCK_DIR/reports/; the summary is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
tck=$(cd "${1:?usage: conformance/tck.sh TCK_DIR [default|full]}" && pwd)
name=${2:-default}
gate_port=18300
admin_port=18301
proxy_port=18302
grpc_port=18303
grpc_proxy_port=18304

command -v haproxy >/dev/null || { echo "haproxy is needed: apt-get install haproxy" >&2; exit 1; }
cargo build --quiet --release --bin peergate
# shellcheck source=bench/common.sh
source bench/common.sh
target_dir=$(target_dir)
peergate="$target_dir/release/peergate"

with_workdir

token=$("$peergate" peer add tck --rate 1000000/min --data "$work/data" 2>/dev/null)
python3 - "policies/$name.toml" "$work/policy.toml" "$proxy_port" "$grpc_port" "$grpc_proxy_port" <<'PY'
import re, sys
source, target, port, grpc_port, grpc_proxy_port = sys.argv[1:]
text = open(source).read()
text = re.sub(r'(\[grpc\]\n(?:#.*\n)*)listen = "[^"]*"',
              rf'\1listen = "127.0.0.1:{grpc_port}"\npublic_address = "127.0.0.1:{grpc_proxy_port}"', text)
text = text.replace("[server]\n", f'[server]\npublic_base_url = "http://127.0.0.1:{port}"\n', 1)
text = text.replace("per_ip_per_minute = 120", "per_ip_per_minute = 1000000", 1)
# One peer runs every test of the kit, some leaving a subscription open until the run ends.
text = text.replace("streams_per_peer = 8", "streams_per_peer = 1000", 1)
# The kit's webhook receiver listens on http://localhost: allowed for this run only.
text = text.replace("dangerous_allow_loopback_callbacks = false", "dangerous_allow_loopback_callbacks = true", 1)
open(target, "w").write(text)
PY
"$peergate" serve --policy "$work/policy.toml" --listen "127.0.0.1:$gate_port" --admin-listen "127.0.0.1:$admin_port" --data "$work/data" 2>"$work/peergate.log" &
pids+=($!)
cat >"$work/haproxy.cfg" <<CFG
global
  maxconn 256
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
frontend door
  bind 127.0.0.1:$proxy_port
  http-request set-header Authorization "Bearer $token"
  default_backend gate
backend gate
  server peergate 127.0.0.1:$gate_port
frontend grpc
  bind 127.0.0.1:$grpc_proxy_port proto h2
  http-request set-header Authorization "Bearer $token"
  default_backend grpc_gate
backend grpc_gate
  server peergate 127.0.0.1:$grpc_port proto h2
CFG
haproxy -f "$work/haproxy.cfg" -db >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$gate_port"
wait_for_port "$proxy_port"
echo "a2a-tck $(git -C "$tck" rev-parse --short HEAD) against policies/$name.toml (every binding its card lists)"
(cd "$tck" && .venv/bin/python run_tck.py --sut-host "http://127.0.0.1:$proxy_port" ${TCK_TRANSPORT:+--transport "$TCK_TRANSPORT"} -- -rA) >"$work/tck.log" 2>&1 || true
grep -E "^FAILED tests|^[0-9]+ (failed|passed)" "$work/tck.log" | sort -u
# Per binding: a test names its transport in brackets ([grpc], [CORE-SEND-003-grpc]), or lives
# in the transport's folder; the card's tests belong to none.
for transport in jsonrpc http_json grpc; do
  passed=$(grep -cE "^PASSED tests/([^ ]*\[$transport\]|[^ ]*-$transport\]|compatibility/$transport/)" "$work/tck.log" || true)
  failed=$(grep -cE "^FAILED tests/([^ ]*\[$transport\]|[^ ]*-$transport\]|compatibility/$transport/)" "$work/tck.log" || true)
  echo "$transport: $passed passed, $failed failed"
done
echo "skipped, by reason:"
grep -E "^SKIPPED" "$work/tck.log" \
  | sed -E 's/^SKIPPED \[([0-9]+)\] [^:]+:[0-9]+: (.*)/\1\t\2/' \
  | awk -F'\t' '{n[$2] += $1} END {for (r in n) printf "%5d  %s\n", n[r], r}' | sort -rn
if [ -n "${TCK_KEEP:-}" ]; then cp "$work/tck.log" "$TCK_KEEP/"; fi
