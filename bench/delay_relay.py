#!/usr/bin/env python3
"""A TCP relay that delays every byte by a fixed time each way: a server one network hop away,
on loopback.

    bench/delay_relay.py LISTEN_PORT TARGET_PORT [DELAY_MS]     (default delay: 1 ms)

Each chunk read from one side is written to the other DELAY_MS after it arrived, in order;
chunks behind it are not held up by more than that (pipelined commands stay pipelined), so the
relay adds latency, not a throughput limit. Each direction is a reader thread and a writer
thread sleeping with the system's fine timer (an event loop's timers round up to whole
milliseconds, which would add up to a millisecond more). Listens on 127.0.0.1 only.
"""

import queue
import socket
import sys
import threading
import time


def direction(source, target, delay):
    """Copies source to target, each chunk `delay` seconds after it arrived."""
    chunks = queue.Queue()

    def read():
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            chunks.put((time.monotonic() + delay, data))
            if not data:
                return

    def write():
        while True:
            due, data = chunks.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                target.sendall(data)
            except OSError:
                break
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    for work in (read, write):
        threading.Thread(target=work, daemon=True).start()


def main():
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    delay = (float(sys.argv[3]) if len(sys.argv) > 3 else 1.0) / 1000
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", listen_port))
    listener.listen(128)
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection(("127.0.0.1", target_port))
        except OSError:
            client.close()
            continue
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        direction(client, server, delay)
        direction(server, client, delay)


if __name__ == "__main__":
    main()
