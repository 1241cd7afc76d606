#!/usr/bin/env bash
# Many streams at once on one instance: PEERS peers (default 100), each with a task held working
# by a model that answers only when told, and STREAMS_PER_PEER SubscribeToTask streams on each
# task (default 100: 10,000 streams). With STREAMS_BINDING=jsonrpc (the default) each stream is
# an SSE response on a connection of its own, as JSON-RPC clients open them; with
# STREAMS_BINDING=grpc each peer opens one HTTP/2 connection to the gRPC listener and carries
# its streams on it, as gRPC clients do (this needs the official SDK's gRPC client, installed
# once into a virtual environment in the target directory from tests/interop/requirements.txt). Measures the resident memory per open stream, the CPU used
# while they idle, that every stream receives its task's events in order once the model
# answers, what is left after they close, and that one stream past a peer's cap is refused
# while the other peers' streams carry on.
#
#   [STREAMS_BINDING=jsonrpc|grpc] bench/streams.sh [PEERS] [STREAMS_PER_PEER]
#
# Runs policies/full.toml with the caps raised for the run (streams per peer, connections per
# address, the request limits a single load generator would meet): not for production. Raises
# its own open-file limit (each stream is a socket on each side). Everything listens on
# 127.0.0.1 and is stopped when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

peers=${1:-100}
per_peer=${2:-100}
binding=${STREAMS_BINDING:-jsonrpc}
port=18393
admin_port=18394
model_port=18395
grpc_port=18396
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --quiet --release --bin peergate
peergate=${BENCH_PEERGATE:-$(target_dir)/release/peergate}
python=python3
case $binding in
  jsonrpc) ;;
  grpc) python=$(bench_python) ;;
  *) echo "STREAMS_BINDING is jsonrpc or grpc, not $binding" >&2; exit 1 ;;
esac
with_workdir

# The model answers each call once $work/release exists.
python3 bench/model.py "$model_port" --release "$work/release" >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$model_port"

python3 - policies/full.toml "$work/policy.toml" "$model_port" "$per_peer" <<'PY'
import sys
source, target, model_port, per_peer = sys.argv[1:]
text = open(source).read()
for old, new in [
    ("streams_per_peer = 8", "streams_per_peer = %s" % per_peer),
    ("max_connections = 1024", "max_connections = 100000"),
    ("max_connections_per_address = 64", "max_connections_per_address = 100000"),
    ("per_ip_per_minute = 120", "per_ip_per_minute = 100000000"),
    ("default_rate_per_minute = 30", "default_rate_per_minute = 1000000"),
    ('backend = "echo"', 'backend = "openai"'),
    ("max_concurrent_streams = 100", "max_concurrent_streams = %s" % max(100, int(per_peer))),
    ("request_timeout_seconds = 200", "request_timeout_seconds = 900"),
]:
    assert old in text, old
    text = text.replace(old, new, 1)
text += '\n[model.openai]\nbase_url = "http://127.0.0.1:%s/v1"\nmodel = "bench"\n' % model_port
open(target, "w").write(text)
PY
sed -i 's/^timeout_seconds = 60$/timeout_seconds = 300/' "$work/policy.toml"
for n in $(seq "$peers"); do
  "$peergate" peer add "p$n" --rate 1000000/min --data "$work/data" 2>/dev/null >>"$work/tokens"
done
"$peergate" serve --policy "$work/policy.toml" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin_port" --grpc-listen "127.0.0.1:$grpc_port" --data "$work/data" 2>"$work/server.log" &
server=$!
pids+=("$server")
wait_for_port "$port"

wait_for_port "$grpc_port"

"$python" - "$port" "$server" "$work/tokens" "$per_peer" "$work/release" "$binding" "$grpc_port" <<'PY'
import asyncio, json, os, sys, time

port, server, tokens_file, per_peer, release = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
binding, grpc_port = sys.argv[6], int(sys.argv[7])
tokens = open(tokens_file).read().split()
tick = os.sysconf("SC_CLK_TCK")

def rss_kib():
    for line in open(f"/proc/{server}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

def cpu_seconds():
    fields = open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick

def request(token, body, stream):
    body = json.dumps(body)
    return (f"POST /a2a/v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nA2A-Version: 1.0\r\n"
            f"{'Accept: text/event-stream' + chr(13) + chr(10) if stream else ''}"
            f"Content-Length: {len(body)}\r\n\r\n{body}").encode()

async def head(reader):
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers

async def body_of(reader, headers):
    if headers.get("transfer-encoding") == "chunked":
        data = b""
        while (size := int((await reader.readline()).strip(), 16)):
            data += await reader.readexactly(size)
            await reader.readline()
        await reader.readline()
        return data
    return await reader.readexactly(int(headers.get("content-length", 0)))

async def working_task(token):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request(token, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": os.urandom(8).hex(), "role": "ROLE_USER", "parts": [{"text": "hold"}]},
        "configuration": {"returnImmediately": True}}}, False))
    status, headers = await head(reader)
    answer = json.loads(await body_of(reader, headers))
    writer.close()
    return answer["result"]["task"]["id"]

class Stream:
    def __init__(self):
        self.states, self.events, self.refused, self.closed = [], 0, None, False

async def subscribe_jsonrpc(token, task, stream, opened):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request(token, {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task}}, True))
    status, headers = await head(reader)
    if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
        stream.refused = (status, headers.get("retry-after"), (await body_of(reader, headers))[:200])
        opened.release()
        writer.close()
        return
    opened.release()
    buffer = b""
    while True:
        size_line = await reader.readline()
        if not size_line or not (size := int(size_line.strip() or b"0", 16)):
            break
        buffer += await reader.readexactly(size)
        await reader.readline()
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    result = json.loads(line[5:])["result"]
                    stream.events += 1
                    if "task" in result:
                        stream.states.append(result["task"]["status"]["state"])
                    elif "statusUpdate" in result:
                        stream.states.append(result["statusUpdate"]["status"]["state"])
    stream.closed = True
    writer.close()

if binding == "grpc":
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    def connect():
        """An HTTP/2 connection of the bench's own (grpcio shares one between channels unless
        told not to)."""
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}", options=[("grpc.use_local_subchannel_pool", 1)])
        channels.append(channel)
        return channel

    peer_channels = {}

channels = []

async def close_connections():
    """Closes the gRPC connections (each JSON-RPC stream closed its own)."""
    for channel in channels:
        await channel.close()
    channels.clear()
    if binding == "grpc":
        peer_channels.clear()

async def subscribe_grpc(stub, token, task, stream, opened):
    call = stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(id=task),
                                metadata=[("authorization", f"Bearer {token}"), ("a2a-version", "1.0")])
    told = False
    try:
        async for response in call:
            if not told:
                told = True
                opened.release()
            stream.events += 1
            if response.HasField("task"):
                stream.states.append(a2a_pb2.TaskState.Name(response.task.status.state))
            elif response.HasField("status_update"):
                stream.states.append(a2a_pb2.TaskState.Name(response.status_update.status.state))
    except grpc.aio.AioRpcError as error:
        if told:
            raise
        stream.refused = (error.code().name, None, error.details()[:200])
        opened.release()
        return
    if not told:
        opened.release()
    stream.closed = True

def subscribe(token, task, stream, opened, own_connection=False):
    """A SubscribeToTask stream in the bench's binding: over gRPC, on the peer's one connection
    (or, with own_connection, on a new one)."""
    if binding == "jsonrpc":
        return subscribe_jsonrpc(token, task, stream, opened)
    if own_connection:
        channel = connect()
    else:
        channel = peer_channels.get(token) or peer_channels.setdefault(token, connect())
    return subscribe_grpc(a2a_pb2_grpc.A2AServiceStub(channel), token, task, stream, opened)

async def open_wave(tokens, tasks, opened):
    """per_peer subscriptions to each peer's task, once every one has opened (or been refused)."""
    streams, running = [], []
    for token, task in zip(tokens, tasks):
        for _ in range(per_peer):
            stream = Stream()
            streams.append(stream)
            running.append(asyncio.create_task(subscribe(token, task, stream, opened)))
    for _ in streams:
        await opened.acquire()
    return streams, running


async def main():
    tasks = await asyncio.gather(*(working_task(t) for t in tokens))
    await asyncio.sleep(1)
    before = rss_kib()
    opened = asyncio.Semaphore(0)
    start = time.time()
    streams, running = await open_wave(tokens, tasks, opened)
    open_after = time.time() - start
    refused = [s.refused for s in streams if s.refused]
    # Let everything settle, then the memory held by the open streams, and the CPU they cost idle.
    await asyncio.sleep(3)
    held = rss_kib()
    cpu0 = cpu_seconds()
    idle = float(os.environ.get("IDLE_SECONDS", "10"))
    print(f"idling {idle:.0f} s with the streams open (server pid {server})", flush=True)
    await asyncio.sleep(idle)
    idle_cpu = (cpu_seconds() - cpu0) * 10 / idle
    # Again once they idled: the allocator has had time to give back what opening them freed.
    held_idle = rss_kib()
    # One more on the first peer: past its cap.
    extra = Stream()
    one_more = asyncio.create_task(subscribe(tokens[0], tasks[0], extra, opened, own_connection=True))
    await opened.acquire()
    # The answers: every stream sees its task complete, in order, and closes.
    open(release, "w").close()
    done_start = time.time()
    await asyncio.wait_for(asyncio.gather(*running), timeout=600)
    await one_more
    await close_connections()
    delivered = time.time() - done_start
    await asyncio.sleep(3)
    after = rss_kib()
    await asyncio.sleep(27)
    later = rss_kib()
    sockets = sum(1 for fd in os.listdir(f"/proc/{server}/fd") if os.readlink(f"/proc/{server}/fd/{fd}").startswith("socket:"))
    order = ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    in_order = sum(1 for s in streams if not s.refused and s.closed and s.states and s.states[-1] == "TASK_STATE_COMPLETED"
                   and all(order.index(a) <= order.index(b) for a, b in zip(s.states, s.states[1:]) if a in order and b in order))
    n = len(streams) - len(refused)
    print(f"streams: {len(streams)} asked, {n} open after {open_after:.1f} s, {len(refused)} refused {refused[:2]}")
    print(f"memory: {before} KiB before, {held} KiB with the streams open: {(held - before) / max(n, 1):.1f} KiB per stream, {held_idle} KiB after they idled {idle:.0f} s: {(held_idle - before) / max(n, 1):.1f} KiB per stream; {after} KiB 3 s after they closed ({100 * (after - before) / before:+.1f} % of before), {later} KiB 30 s after ({100 * (later - before) / before:+.1f} %), with {sockets} sockets open")
    print(f"idle: {idle_cpu:.2f} s of CPU in 10 s with {n} streams open")
    print(f"events: {in_order} of {n} streams saw their task complete, in order, and closed; all delivered {delivered:.1f} s after the model answered; {sum(s.events for s in streams)} events")
    print(f"past the cap: {extra.refused}")
    # A second wave of the same size: memory that grows again is held by peergate; memory that
    # does not is the allocator keeping what the first wave freed, for reuse.
    os.remove(release)
    tasks = await asyncio.gather(*(working_task(t) for t in tokens))
    second, waiting = await open_wave(tokens, tasks, opened)
    await asyncio.sleep(3)
    held_again = rss_kib()
    open(release, "w").close()
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=600)
    await close_connections()
    await asyncio.sleep(3)
    print(f"a second wave: {held_again} KiB with its {sum(1 for s in second if not s.refused)} streams open ({(held_again - held) / 1024:+.1f} MiB against the first), {rss_kib()} KiB after")
    short = [(s.states, s.closed) for s in streams if not s.refused and not (s.closed and s.states and s.states[-1] == "TASK_STATE_COMPLETED")]
    if short:
        from collections import Counter
        print(f"streams that did not end completed: {Counter(repr(x) for x in short).most_common(3)}")
    ok = n == len(streams) and in_order == n and extra.refused and extra.refused[0] in (429, "RESOURCE_EXHAUSTED")
    sys.exit(0 if ok else 1)

asyncio.run(main())
PY
