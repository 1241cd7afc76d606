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

# as_postgres COMMAND...: runs COMMAND as the postgres user when this script runs as root
# (PostgreSQL refuses to run as root).
as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# start_postgres DIR PORT [SETTING...]: a throwaway PostgreSQL cluster in DIR on 127.0.0.1:PORT
# (its socket in DIR too), with each SETTING as `-c SETTING`; sets admin_url. Stop it with
# stop_postgres DIR.
start_postgres() {
  local dir=$1 port=$2
  shift 2
  local settings="-p $port -k $dir -c listen_addresses=127.0.0.1"
  for setting in "$@"; do settings+=" -c $setting"; done
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  mkdir "$dir" && chown postgres:postgres "$dir" 2>/dev/null || true
  as_postgres "$pg_bin/initdb" -D "$dir" --auth=trust --username=postgres -E UTF8 >/dev/null
  as_postgres "$pg_bin/pg_ctl" -D "$dir" -l "$dir/log" -o "$settings" start >/dev/null
  wait_for_port "$port"
  admin_url="postgres://postgres@127.0.0.1:$port/postgres"
  for _ in $(seq 50); do psql "$admin_url" -qc 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
}

# stop_postgres DIR: stops the cluster start_postgres made there, if it runs.
stop_postgres() {
  [ -n "${pg_bin:-}" ] && as_postgres "$pg_bin/pg_ctl" -D "$1" -m fast stop >/dev/null 2>&1 || true
}

# need_tools TOOL...: stops naming the Debian package to install when a tool is missing.
need_tools() {
  local package
  for tool in "$@"; do
    case $tool in
      psql) package=postgresql ;;
      *) package=$tool ;;
    esac
    command -v "$tool" >/dev/null || { echo "$tool is needed: apt-get install $package" >&2; exit 1; }
  done
}

# bench_python: prints a Python with the official A2A SDK and its gRPC client
# (tests/interop/requirements.txt), installing them once into a virtual environment in the
# target directory.
bench_python() {
  local venv
  venv="$(target_dir)/bench-python"
  if ! cmp -s tests/interop/requirements.txt "$venv/installed-requirements.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet -r tests/interop/requirements.txt >&2
    cp tests/interop/requirements.txt "$venv/installed-requirements.txt"
  fi
  echo "$venv/bin/python"
}
