#!/usr/bin/env python3
"""Writes vectors.json: the receipt digests of fixed values, computed with the official A2A
Python SDK's protobuf types (a2a-sdk, tests/interop/requirements.txt) and Google's protobuf
JSON printer, independently of peergate. Run with the SDK's Python:
    python make-vectors.py > vectors.json
"""
import base64, hashlib, json, math
from google.protobuf.json_format import MessageToDict, ParseDict
from a2a.types import a2a_pb2 as pb

EXT = "urn:peergate:ext:receipts:v1"


def jcs(value):
    """RFC 8785 for the values here: sorted members, no spaces, integral numbers as integers."""
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + jcs(value[k]) for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    if isinstance(value, float):
        assert value.is_integer() and abs(value) < 1e21, value
        return str(int(value))
    return json.dumps(value, ensure_ascii=False)


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def canonical(value, kind):
    return MessageToDict(ParseDict(value, kind(), ignore_unknown_fields=True))


def digest(value, kind):
    return b64(hashlib.sha256(jcs(canonical(value, kind)).encode()).digest())


message = {"messageId": "m-1", "role": "ROLE_USER", "contextId": "c-1",
           "parts": [{"text": "What is the price of A-1?"}, {"data": {"sku": "A-1", "qty": 2}},
                     {"url": "https://files.example/a1.pdf", "filename": "a1.pdf",
                      "mediaType": "application/pdf"}],
           "metadata": {"order": "o-77"}}
status = {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-05T10:00:00.250Z",
          "message": {"messageId": "a-1", "contextId": "c-1", "taskId": "t-1",
                      "role": "ROLE_AGENT", "parts": [{"text": "A-1 costs 12.50 EUR."}]}}
task = {"id": "t-1", "contextId": "c-1", "status": status,
        "artifacts": [{"artifactId": "r-1", "parts": [{"text": "A-1 costs 12.50 EUR."}]}],
        "history": [message],
        "metadata": {EXT: "the receipt itself, left out", "peergate": {"unreadParts": [{"index": 2, "content": "url"}]}}}
projection = {k: v for k, v in task.items() if k != "history"}
projection["metadata"] = {k: v for k, v in task["metadata"].items() if k != EXT}
events = [
    {"task": {"id": "t-1", "contextId": "c-1",
              "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-05T10:00:00.000Z"}}},
    {"statusUpdate": {"taskId": "t-1", "contextId": "c-1",
                      "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-05T10:00:00.150Z",
                                 "message": {"messageId": "p-1", "contextId": "c-1", "taskId": "t-1",
                                             "role": "ROLE_AGENT", "parts": [{"text": "A-1 costs "}]}}}},
    {"artifactUpdate": {"taskId": "t-1", "contextId": "c-1", "lastChunk": True,
                        "artifact": {"artifactId": "r-1", "parts": [{"text": "A-1 costs 12.50 EUR."}]}}},
    {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": status,
                      "metadata": {EXT: "the receipt itself, left out"}}},
]
chain = bytes(32)
for event in events:
    event = json.loads(json.dumps(event))
    for inner in event.values():
        inner.get("metadata", {}).pop(EXT, None)
        if inner.get("metadata") == {}:
            del inner["metadata"]
    one = hashlib.sha256(jcs(canonical(event, pb.StreamResponse)).encode()).digest()
    chain = hashlib.sha256(chain + one).digest()

print(json.dumps({
    "about": "Receipt digests, computed by make-vectors.py with the official A2A Python SDK's "
             "protobuf types and Google's protobuf JSON printer: each digest is base64url(SHA-256("
             "RFC 8785 of the value's canonical ProtoJSON)). req: `message`; ans: `task` without "
             "`history` and without the receipt in its metadata (`answer_projection`); evt: "
             "`events` chained from 32 zero bytes, h = SHA-256(h || SHA-256(event)), the receipt "
             "taken out of the last.",
    "message": message, "req": digest(message, pb.Message),
    "task": task, "answer_projection": projection, "ans": digest(projection, pb.Task),
    "events": events, "evt": {"n": len(events), "chain": b64(chain)},
}, indent=2, ensure_ascii=False))
