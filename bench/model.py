"""An OpenAI-compatible model for the load scripts, on 127.0.0.1: every chat completion is
answered with "an answer" and 18 tokens, after DELAY seconds, or once the file RELEASE exists.

    python3 bench/model.py PORT [--delay SECONDS] [--release FILE]
"""
import argparse
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("--delay", type=float, default=0.0)
parser.add_argument("--release")
args = parser.parse_args()

ANSWER = json.dumps({
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "an answer"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
}).encode()


class Model(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        time.sleep(args.delay)
        while args.release and not os.path.exists(args.release):
            time.sleep(0.05)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *_):
        pass


ThreadingHTTPServer.daemon_threads = True
# Many turns connect at once: the default backlog of 5 drops connection attempts.
ThreadingHTTPServer.request_queue_size = 1024
ThreadingHTTPServer(("127.0.0.1", args.port), Model).serve_forever()
