"""An OTLP/HTTP receiver for the telemetry tests: decodes what an exporter sends with the
official opentelemetry-proto messages and serves it back as JSON.

    python otlp_receiver.py PORT_FILE [--hang]

Listens on 127.0.0.1 on a free port, written to PORT_FILE once it listens.

- POST /v1/traces, /v1/metrics: an ExportTraceServiceRequest or ExportMetricsServiceRequest
  (protobuf; gzip when Content-Encoding says so), kept; answered with the empty success message.
  With --hang, the request is read and never answered (an endpoint that hangs).
- GET /spans: every span received so far, one JSON object each, with the resource's and the
  scope's attributes beside it and the request's headers (names in lower case).
- GET /metrics-received: the metrics received so far: name, unit, the resource's attributes
  and each histogram point's attributes and count.
"""

import base64
import gzip
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

SPANS = []
METRICS = []
LOCK = threading.Lock()
HANG = "--hang" in sys.argv


def attributes(items):
    """OTLP KeyValues as a plain dict (arrays as lists)."""
    out = {}
    for item in items:
        value = item.get("value", {})
        out[item["key"]] = plain(value)
    return out


def plain(value):
    if "string_value" in value:
        return value["string_value"]
    if "int_value" in value:
        return int(value["int_value"])
    if "double_value" in value:
        return value["double_value"]
    if "bool_value" in value:
        return value["bool_value"]
    if "array_value" in value:
        return [plain(v) for v in value["array_value"].get("values", [])]
    return None


def hex_ids(item):
    """Trace and span ids in hex, as traceparent writes them (JSON has them in base64)."""
    for key in ("trace_id", "span_id", "parent_span_id"):
        if key in item:
            item[key] = base64.b64decode(item[key]).hex()


def keep_traces(body, headers):
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.ParseFromString(body)
    data = MessageToDict(request, preserving_proto_field_name=True)
    kept = []
    for resource_spans in data.get("resource_spans", []):
        resource = attributes(resource_spans.get("resource", {}).get("attributes", []))
        for scope_spans in resource_spans.get("scope_spans", []):
            scope = scope_spans.get("scope", {})
            for span in scope_spans.get("spans", []):
                hex_ids(span)
                span["attributes"] = attributes(span.get("attributes", []))
                for event in span.get("events", []):
                    event["attributes"] = attributes(event.get("attributes", []))
                for link in span.get("links", []):
                    hex_ids(link)
                    link["attributes"] = attributes(link.get("attributes", []))
                span["resource"] = resource
                span["scope"] = scope.get("name", "")
                span["headers"] = headers
                kept.append(span)
    with LOCK:
        SPANS.extend(kept)
    return trace_service_pb2.ExportTraceServiceResponse().SerializeToString()


def keep_metrics(body, _headers):
    request = metrics_service_pb2.ExportMetricsServiceRequest()
    request.ParseFromString(body)
    data = MessageToDict(request, preserving_proto_field_name=True)
    kept = []
    for resource_metrics in data.get("resource_metrics", []):
        resource = attributes(resource_metrics.get("resource", {}).get("attributes", []))
        for scope_metrics in resource_metrics.get("scope_metrics", []):
            for metric in scope_metrics.get("metrics", []):
                points = metric.get("histogram", {}).get("data_points", [])
                kept.append({
                    "name": metric["name"],
                    "unit": metric.get("unit", ""),
                    "resource": resource,
                    "points": [{"attributes": attributes(p.get("attributes", [])),
                                "count": int(p.get("count", 0))} for p in points],
                })
    with LOCK:
        METRICS.extend(kept)
    return metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        if HANG:
            time.sleep(3600)
            return
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        headers = {k.lower(): v for k, v in self.headers.items()}
        keep = {"/v1/traces": keep_traces, "/v1/metrics": keep_metrics}.get(self.path)
        if keep is None:
            self.answer(404, b"", "text/plain")
            return
        try:
            answer = keep(body, headers)
        except Exception as error:  # a body that is not the message: the test fails on it
            self.answer(400, str(error).encode(), "text/plain")
            return
        self.answer(200, answer, "application/x-protobuf")

    def do_GET(self):
        with LOCK:
            if self.path == "/spans":
                body = json.dumps(SPANS).encode()
            elif self.path == "/metrics-received":
                body = json.dumps(METRICS).encode()
            else:
                self.answer(404, b"", "text/plain")
                return
        self.answer(200, body, "application/json")

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os

    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
