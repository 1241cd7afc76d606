# Shared by the load scripts: sourced, not run.

# wait_for_port PORT: waits up to 20 s for something to listen on 127.0.0.1:PORT.
wait_for_port() {
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  exit 1
}

# The SendMessage every script measures.
send_body='{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"What are your opening hours on public holidays?"}]}}}'

# target_dir: prints cargo's target directory (CARGO_TARGET_DIR or ./target).
target_dir() {
  cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])'
}

# with_workdir: makes $work, a temporary directory, and kills every pid a script appends to
# the array `pids`, then removes $work, when the script exits.
with_workdir() {
  work=$(mktemp -d)
  pids=()
  trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
}
