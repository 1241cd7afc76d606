#!/usr/bin/env bash
# Load test on 127.0.0.1: a bare axum server as the baseline (POST and GET), then peergate
# (policies/bench.toml) for the public card (fetched, and revalidated: 304), an authenticated
# SendMessage on the echo backend (checked afterwards against the tasks in the store), floods
# of bad tokens (401: one revoked token, one failing its checksum, and distinct unknown tokens)
# and a peer over its limit (429); then an identity provider's access tokens (the "jwt"
# scheme): a remembered token against a peer token, distinct forged tokens with a known kid
# (each a signature check), and a valid peer's latency while that flood runs.
# Prints requests/s, p50, p99 and the ratio to the bare server's run of the same method.
#
#   bench/load.sh [SECONDS_PER_RUN] [CONNECTIONS]     (defaults: 10 and 50)
#
# BENCH_POLICY=FILE serves peergate with another policy (an A/B of a policy switch).
# BENCH_AUTHORIZATION=FILE adds `[authorization] policies = FILE` (Cedar policies deciding every
# call) and a flood of calls they deny (403) by a peer no policy permits.
# BENCH_RECEIPTS=MODE adds `[receipts] mode = MODE` (signed receipts of finished tasks).
# BENCH_CONTENT=1 adds the content guard's starting pack, every group, both directions.
# BENCH_PEERGATE=FILE measures another build of peergate (an A/B of two commits in the same
# minutes: build the other commit, copy its binary aside, and run the script once with each).
#
# Needs wrk (Debian: apt-get install wrk). Every server it starts listens on 127.0.0.1 only and
# is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-10}
connections=${2:-50}
bare_port=18090
gate_port=18091
admin_port=18092

if ! command -v wrk >/dev/null; then
  echo "wrk is needed: apt-get install wrk" >&2
  exit 1
fi

cargo build --quiet --release --bin peergate --example bare_axum
# shellcheck source=bench/common.sh
source bench/common.sh
target_dir=$(target_dir)
peergate=${BENCH_PEERGATE:-$target_dir/release/peergate}
bare="$target_dir/release/examples/bare_axum"

with_workdir


# status URL AUTH: the HTTP status one request gets, so every run is checked for what it measures.
status() {
  local url=$1 auth=$2
  if [ "$url" = "${url%/a2a/v1}" ]; then
    curl -s -o /dev/null -w '%{http_code}' ${ETAG:+-H "If-None-Match: $ETAG"} "$url"
  else
    curl -s -o /dev/null -w '%{http_code}' -H "Authorization: $auth" -H 'Content-Type: application/json' --data "$send_body" "$url"
  fi
}

results=()
baseline_post=""
baseline_get=""
distinct_script=""
requests_done=0
# run NAME EXPECTED_STATUS URL [AUTH]
run() {
  local name=$1 expected=$2 url=$3 auth=${4:-}
  local got
  got=$(status "$url" "$auth")
  if [ "$got" != "$expected" ]; then
    echo "$name: expected HTTP $expected before the run, got $got" >&2
    exit 1
  fi
  local out script=${distinct_script:-bench/wrk/post.lua}
  if [ "$url" = "${url%/a2a/v1}" ]; then
    out=$(ETAG=${ETAG:-} wrk -t1 -c"$connections" -d"${duration}s" --latency ${ETAG:+-s bench/wrk/if_none_match.lua} "$url")
  else
    out=$(TOKENS="$work/tokens" AUTH="$auth" BODY="$send_body" wrk -t1 -c"$connections" -d"${duration}s" --latency -s "$script" "$url")
  fi
  distinct_script=""
  requests_done=$(awk '/requests in/ {print $1}' <<<"$out")
  local rps p50 p99 other
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  other=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
  # GETs compare with the bare server's GET, POSTs with its POST.
  local base=$baseline_post
  if [ "$url" = "${url%/a2a/v1}" ]; then base=${baseline_get:-$rps}; baseline_get=${baseline_get:-$rps}; fi
  [ -n "$base" ] || { base=$rps; baseline_post=$rps; }
  local ratio
  ratio=$(awk -v a="$rps" -v b="$base" 'BEGIN {printf "%.0f%%", 100 * a / b}')
  results+=("$(printf '%-34s %6s %12s %10s %10s %7s %s' "$name" "$expected" "$rps" "$p50" "$p99" "$ratio" "${other:+(non-2xx: $other)}")")
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "wrk -t1 -c$connections -d${duration}s --latency, server and load generator on the same cores"

"$bare" "127.0.0.1:$bare_port" 2>/dev/null &
pids+=($!)
wait_for_port "$bare_port"
run "bare axum POST, fixed 200-byte JSON" 200 "http://127.0.0.1:$bare_port/a2a/v1" "none"
run "bare axum GET, fixed 200-byte JSON" 200 "http://127.0.0.1:$bare_port/"
kill "${pids[0]}"

data="$work/data"
token=$("$peergate" peer add bench --rate 1000000000/min --data "$data" 2>/dev/null)
limited=$("$peergate" peer add limited --rate 1/min --data "$data" 2>/dev/null)
revoked=$("$peergate" peer add revoked --data "$data" 2>/dev/null)
"$peergate" peer revoke revoked --data "$data" 2>/dev/null
# An identity provider's key (ES256) and its JWKS, a peer bound to its subject, and a policy
# that takes its tokens besides peer tokens.
"$peergate" keys generate --alg ES256 --kid bench-idp --out "$work/idp.pem" >/dev/null 2>&1
"$peergate" peer add idp-peer --rate 1000000000/min --data "$data" >/dev/null 2>&1
openssl pkey -in "$work/idp.pem" -pubout -outform DER -out "$work/idp.pub.der"
policy="$work/policy.toml"
sed 's/^schemes = \["bearer"\]/schemes = ["bearer", "jwt"]/' "${BENCH_POLICY:-policies/bench.toml}" >"$policy"
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
printf '\n[[auth.issuers]]\nname = "bench"\nissuer = "https://idp.bench.example"\naudience = "https://gw.bench.example/a2a/v1"\njwks_file = "%s"\n' "$work/jwks.json" >>"$policy"
python3 - "$work" <<'PY'
import base64, json, os, secrets, subprocess, sys, time
work = sys.argv[1]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
point = open(f"{work}/idp.pub.der", "rb").read()[-65:]
json.dump({"keys": [{"kty": "EC", "crv": "P-256", "kid": "bench-idp", "alg": "ES256",
                     "x": b64(point[1:33]), "y": b64(point[33:65])}]}, open(f"{work}/jwks.json", "w"))
now = int(time.time())
header = b64(json.dumps({"alg": "ES256", "typ": "at+jwt", "kid": "bench-idp"}).encode())
def payload(jti):
    return b64(json.dumps({"iss": "https://idp.bench.example", "aud": "https://gw.bench.example/a2a/v1",
        "client_id": "bench-client", "scope": "a2a:message a2a:tasks:read", "iat": now,
        "exp": now + 3600, "jti": jti}).encode())
signing_input = f"{header}.{payload('bench')}"
der = subprocess.run(["openssl", "dgst", "-sha256", "-sign", f"{work}/idp.pem"],
                     input=signing_input.encode(), capture_output=True, check=True).stdout
# DER ECDSA-Sig-Value to r || s, 32 bytes each.
r_len = der[3]; r = der[4:4 + r_len]; s_len = der[5 + r_len]; s = der[6 + r_len:6 + r_len + s_len]
raw = r.lstrip(b"\0").rjust(32, b"\0") + s.lstrip(b"\0").rjust(32, b"\0")
open(f"{work}/jwt", "w").write(f"{signing_input}.{b64(raw)}")
# Distinct forged tokens: the known kid, each its own claims, a signature that is not one.
with open(f"{work}/forged", "w") as out:
    for i in range(200000):
        out.write(f"{header}.{payload(secrets.token_hex(8))}.{b64(secrets.token_bytes(64))}\n")
PY
# Bound once the policy names the issuer: a binding to an issuer it does not name is refused.
"$peergate" peer bind idp-peer --issuer bench --subject bench-client --policy "$policy" --data "$data" 2>/dev/null
jwt=$(cat "$work/jwt")
"$peergate" serve --policy "$policy" --listen "127.0.0.1:$gate_port" --admin-listen "127.0.0.1:$admin_port" --data "$data" 2>"$work/peergate.log" &
pids+=($!)
wait_for_port "$gate_port"
door="http://127.0.0.1:$gate_port/a2a/v1"
card_url="http://127.0.0.1:$gate_port/.well-known/agent-card.json"
run "public Agent Card" 200 "$card_url"
# A client that holds the card revalidates it: 304 with no body.
etag=$(curl -s -D - -o /dev/null "$card_url" | awk 'tolower($1) == "etag:" {print $2}' | tr -d '\r')
ETAG=$etag run "public Agent Card, revalidated" 304 "$card_url"
run "401 flood: revoked token" 401 "$door" "Bearer $revoked"
run "401 flood: token failing checksum" 401 "$door" "Bearer ${token%??????}AAAAAA"
# Checksum-valid tokens that exist nowhere, a new one each request: every one reads the store.
python3 - "$work/tokens" <<'PY'
import secrets, sys, zlib
alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
def b62(n):
    return "".join(secrets.choice(alphabet) for _ in range(n))
with open(sys.argv[1], "w") as out:
    for _ in range(200000):
        body = "pgt_" + b62(12) + "_" + b62(32)
        crc, digits = zlib.crc32(body.encode()), ""
        for _ in range(6):
            digits = alphabet[crc % 62] + digits
            crc //= 62
        out.write(body + digits + "\n")
PY
distinct_script=bench/wrk/distinct_tokens.lua
run "401 flood: distinct unknown tokens" 401 "$door" "Bearer $(head -1 "$work/tokens")"
status "$door" "Bearer $limited" >/dev/null
run "429 flood: peer over its limit" 429 "$door" "Bearer $limited"
if [ -n "${BENCH_AUTHORIZATION:-}" ]; then
  outsider=$("$peergate" peer add outsider --rate 1000000000/min --data "$data" 2>/dev/null)
  run "403 flood: denied by policy" 403 "$door" "Bearer $outsider"
fi
get_body='{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"0190a0a0-0000-7000-8000-000000000000"}}'
BODY_SAVED=$send_body
send_body=$get_body
run "GetTask, peer token" 200 "$door" "Bearer $token"
run "GetTask, remembered JWT" 200 "$door" "Bearer $jwt"
cp "$work/forged" "$work/tokens"
distinct_script=bench/wrk/distinct_tokens.lua
run "401 flood: distinct forged JWTs" 401 "$door" "Bearer $(head -1 "$work/forged")"
# A valid peer's latency while the forged-token flood runs beside it, half the connections each.
TOKENS="$work/forged" BODY="$get_body" wrk -t1 -c$((connections / 2)) -d"${duration}s" -s bench/wrk/distinct_tokens.lua "$door" >/dev/null &
flood=$!
saved_connections=$connections
connections=$((connections / 2))
run "GetTask, peer token, beside the flood" 200 "$door" "Bearer $token"
connections=$saved_connections
wait "$flood" || true
send_body=$BODY_SAVED
run "SendMessage, echo, remembered JWT" 200 "$door" "Bearer $jwt"
# Last: its writes would otherwise compete, as the kernel flushes them, with the runs after it.
run "SendMessage, echo, task persisted" 200 "$door" "Bearer $token"
# Every answer counted above must be a completed task in the store, not a JSON-RPC error.
stored=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM tasks WHERE state = ?", ("TASK_STATE_COMPLETED",)).fetchone()[0])' "$data/peergate.sqlite3")
echo "SendMessage: wrk counted $requests_done answers; the store holds $stored completed tasks"
if [ "$stored" -lt "$requests_done" ]; then
  echo "fewer completed tasks than answers: the run measured failures" >&2
  exit 1
fi

printf '\n%-34s %6s %12s %10s %10s %7s\n' "scenario" "status" "requests/s" "p50" "p99" "vs bare"
printf '%s\n' "${results[@]}"
