#!/usr/bin/env bash
# Keeps the stores a release writes, so that later code is tested against them
# (tests/suite/store_upgrade.rs): a store written by a release must open with the code under
# test and read back exactly as that release read it.
#
# Usage: tests/data/stores/make-current.sh PEERGATE_BINARY
#
# PEERGATE_BINARY is a build of the release to keep (e.g. `cargo build --release` at its tag).
# With it this script fills a SQLite store and a PostgreSQL store the same way, through the
# release's own command line and a briefly served gateway (echo backend): administrators with
# budgets and roles, peers with tokens, an API key, a password, limits, an expiry, a bound
# certificate, a revoked peer; answered messages in two conversations (tasks, contexts,
# messages with parts, usage); push-notification configs and two dead-lettered deliveries
# (the callback refuses, push.max_attempts = 1); the audit log of all of it. It then writes,
# beside itself:
#
#   release-V-schema-N.sqlite3                  the SQLite store (`peergate backup`)
#   release-V-postgres-schema-N.sql             the PostgreSQL store (pg_dump --no-owner
#                                               --no-privileges, less its \restrict lines)
#   <each of them>.expected.json                what that release read back from it: the
#                                               command line's --json listings, and door and
#                                               admin API calls with the credentials it issued
#   release-V-push.key                          the key that sealed both stores' push configs
#
# V is the release's version, N its schema version (the last migration it applied). The tests
# name these files: a new release's fixtures are new files and new tests beside the old ones.
# The credentials in the expected files open only these fixtures.
#
# Needs bash, curl, jq, sqlite3 and Debian's postgresql package (a throwaway cluster is started
# from /usr/lib/postgresql/*/bin, as the tests start theirs; as root it runs as the postgres
# user). Nothing is left running; the temporary directories go when the script ends.
set -euo pipefail

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 PEERGATE_BINARY" >&2
    exit 2
fi
bin=$(realpath "$1")
out=$(cd "$(dirname "$0")" && pwd)
version=$("$bin" --version | awk '{print $2}')
work=$(mktemp -d)
pg_dir=$(mktemp -d)
server_pid=""
pg_bin=""
pg_data=""

cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$pg_data" ] && as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1
    rm -rf "$work" "$pg_dir"
}
trap cleanup EXIT

# PostgreSQL refuses to run as root.
as_postgres() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The release's command line on the store being filled (store=(--data DIR [--store URL])), run
# in the work directory, so its defaults are the release's embedded policy.
cli() {
    (cd "$work" && "$bin" "$@" "${store[@]}" 2>>"$work/cli.log")
}

key="$out/release-$version-push.key"
rm -f "$key"
"$bin" keys push --out "$key" >/dev/null 2>&1

# The policy served: push on (the test gateway reads the same: tests/suite/store_upgrade.rs,
# `release_policy`), tasks kept a year, API keys accepted.
cat >"$work/policy.toml" <<EOF
[tasks]
retention_hours = 8760
[auth]
schemes = ["bearer", "api_key"]
[capabilities]
push_notifications = true
[push]
dangerous_allow_loopback_callbacks = true
max_attempts = 1
key_file = "$key"
EOF

# Accounts, through the command line.
fill_accounts() {
    echo "ada's password, long enough" | cli admin add ada >/dev/null
    echo "ops's password, long enough" | cli admin add ops >/dev/null
    cli admin budget ops --model allow --tokens-per-day 50000 --tokens-per-month 900000 >/dev/null
    cli admin role ops auditor >/dev/null
    alice=$(cli peer add alice --owner ada)
    echo "alice's password, long enough" | cli peer password alice >/dev/null
    cli peer streams alice 4 >/dev/null
    cli peer trace alice trusted >/dev/null
    cli peer budget alice --tokens-per-day 50000 >/dev/null
    cli peer add bob --owner ops --rate 20/min >/dev/null
    bob=$(cli peer key bob)
    cli peer expire bob 2100-01-01 >/dev/null
    cli peer add carol --owner ada --no-token >/dev/null
    cli peer bind carol --certificate-san spiffe://example.org/carol >/dev/null
    cli peer add dave --owner ada >/dev/null
    cli peer revoke dave >/dev/null
    ada=$(cli admin token ada)
}

# Serves the store until `stop_serving`; sets door and admin.
serve() {
    (cd "$work" && exec "$bin" serve --policy "$work/policy.toml" --listen 127.0.0.1:0 \
        --admin-listen 127.0.0.1:0 "${store[@]}" 2>"$work/serve.log") &
    server_pid=$!
    for _ in $(seq 100); do
        grep -q "listening on http://" "$work/serve.log" 2>/dev/null && break
        sleep 0.1
    done
    door="http://$(grep -o 'listening on http://[0-9.:]*' "$work/serve.log" | cut -d/ -f3)/a2a/v1"
    admin="http://$(grep -o 'admin API on http://[0-9.:]*' "$work/serve.log" | cut -d/ -f3)"
}

stop_serving() {
    kill "$server_pid"
    wait "$server_pid" || true
    server_pid=""
}

# A JSON-RPC call on the door: HEADER METHOD PARAMS.
call() {
    curl -sS -H "$1" -H 'Content-Type: application/json' "$door" \
        -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}"
}

# Conversations, tasks, usage and push configs, through the door.
fill_traffic() {
    local message='{"message":{"messageId":"m-1","contextId":"ctx-1","role":"ROLE_USER","parts":[{"text":"hello"},{"data":{"b":1,"a":[2]}}]},"configuration":{"taskPushNotificationConfig":{"id":"cfg-1","url":"http://127.0.0.1:9/hook","token":"tok-1"}}}'
    task=$(call "Authorization: Bearer $alice" SendMessage "$message" | jq -r .result.task.id)
    message='{"message":{"messageId":"m-2","contextId":"ctx-1","role":"ROLE_USER","parts":[{"text":"and again"}]}}'
    second=$(call "Authorization: Bearer $alice" SendMessage "$message" | jq -r .result.task.id)
    call "Authorization: Bearer $alice" CreateTaskPushNotificationConfig \
        "{\"taskId\":\"$second\",\"id\":\"cfg-2\",\"url\":\"http://127.0.0.1:9/other\",\"token\":\"tok-2\"}" >/dev/null
    message='{"message":{"messageId":"m-3","contextId":"ctx-b","role":"ROLE_USER","parts":[{"text":"status?"}]}}'
    bob_task=$(call "X-API-Key: $bob" SendMessage "$message" | jq -r .result.task.id)
    # Both deliveries of the first task fail at once and are given up.
    for _ in $(seq 100); do
        failed=$(curl -sS -H "Authorization: Bearer $ada" "$admin/v1/push/failed" | jq '.deliveries | length')
        [ "$failed" = 2 ] && break
        sleep 0.1
    done
    [ "$failed" = 2 ] || { echo "the deliveries were not given up" >&2; exit 1; }
}

# What the door and the admin API answer, as JSON: [{as, method, params, response}] and
# [{as, path, response}]; and when they were asked.
read_served() {
    local as params response
    door_reads="[]"
    for read in "alice GetTask {\"id\":\"$task\"}" "alice ListTasks {}" \
        "alice ListTaskPushNotificationConfigs {\"taskId\":\"$task\"}" \
        "alice ListTaskPushNotificationConfigs {\"taskId\":\"$second\"}" \
        "bob GetTask {\"id\":\"$bob_task\"}"; do
        read -r as method params <<<"$read"
        if [ "$as" = alice ]; then header="Authorization: Bearer $alice"; else header="X-API-Key: $bob"; fi
        response=$(call "$header" "$method" "$params")
        door_reads=$(jq -c --arg who "$as" --arg method "$method" --argjson params "$params" \
            --argjson response "$response" '. + [{"as": $who, "method": $method, "params": $params, "response": $response}]' <<<"$door_reads")
    done
    response=$(curl -sS -H "Authorization: Bearer $ada" "$admin/v1/push/failed")
    admin_reads=$(jq -cn --argjson response "$response" '[{"as": "ada", "path": "/v1/push/failed", "response": $response}]')
    read_at=$(date +%s%3N)
}

# What the command line lists, as {"ARGS": JSON}: each ARGS is run as it reads, on the store.
read_listed() {
    local day
    day=$(date -u +%F)
    listed="{}"
    for args in "peer list --json" "admin list --json" "audit --json" \
        "usage --period $day --json" "usage --period ${day:0:7} --owner ada --json" \
        "conversations list --json" "conversations show alice ctx-1 --json" \
        "conversations show bob ctx-b --json"; do
        # shellcheck disable=SC2086 # ARGS are words
        listed=$(jq -c --arg args "$args" --argjson read "$(cli $args)" '. + {($args): $read}' <<<"$listed")
    done
}

# Fills the store named by store=(…) and writes what it read to $1.
fill_and_read() {
    fill_accounts
    serve
    fill_traffic
    read_served
    stop_serving
    # Changed after serving, so the listings show them.
    cli peer operations bob read-only >/dev/null
    read_listed
    jq -n --arg release "$("$bin" --version)" --argjson schema "$(schema)" \
        --argjson readAt "$read_at" --argjson listed "$listed" \
        --argjson door "$door_reads" --argjson admin "$admin_reads" \
        --arg alice "$alice" --arg bob "$bob" --arg ada "$ada" \
        '{release: $release, schema: $schema, readAt: $readAt,
          credentials: {alice: ("Bearer " + $alice), bob: $bob, ada: ("Bearer " + $ada)},
          listed: $listed, door: $door, admin: $admin}' >"$1"
}

# --- SQLite -------------------------------------------------------------------------------
mkdir "$work/sqlite"
store=(--data "$work/sqlite")
schema() {
    sqlite3 "$work/sqlite/peergate.sqlite3" "SELECT max(version) FROM _sqlx_migrations WHERE success"
}
fill_and_read "$work/expected.json"
sqlite_file="$out/release-$version-schema-$(schema).sqlite3"
rm -f "$sqlite_file"
cli backup "$sqlite_file" >/dev/null
mv "$work/expected.json" "$sqlite_file.expected.json"

# --- PostgreSQL ---------------------------------------------------------------------------
pg_bin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d | sort -V | tail -1)
[ -x "$pg_bin/initdb" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && chown postgres: "$pg_dir"
pg_data="$pg_dir/data"
as_postgres "$pg_bin/initdb" -D "$pg_data" --auth=trust --username=postgres -E UTF8 --no-sync >/dev/null
port=$((20000 + RANDOM % 20000))
as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w \
    -o "-k $pg_dir -p $port -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
url="postgres://postgres@127.0.0.1:$port/peergate"
"$pg_bin/psql" -q "postgres://postgres@127.0.0.1:$port/postgres" -c "CREATE DATABASE peergate"
mkdir "$work/postgres"
store=(--data "$work/postgres" --store "$url")
schema() {
    "$pg_bin/psql" -tA "$url" -c "SELECT max(version) FROM _sqlx_migrations WHERE success"
}
fill_and_read "$work/expected.json"
dump="$out/release-$version-postgres-schema-$(schema).sql"
# Without the \restrict lines of a recent pg_dump (a random key each time, which an older psql
# does not know): the dump is ours, and restores on the tests' psql whatever its version.
"$pg_bin/pg_dump" --no-owner --no-privileges "$url" | grep -v '^\\\(un\)\?restrict ' >"$dump"
mv "$work/expected.json" "$dump.expected.json"

echo "wrote $(basename "$sqlite_file"), $(basename "$dump"), their .expected.json and $(basename "$key")"
