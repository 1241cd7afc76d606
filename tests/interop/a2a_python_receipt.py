#!/usr/bin/env python3
"""Interop check: the official Python SDK client receives a finished task's receipt.

Usage: a2a_python_receipt.py --base-url http://127.0.0.1:PORT --token TOKEN [--binding GRPC]
Sends one message over the card's interface of that binding (JSONRPC by default), blocking
and streaming, and prints one JSON summary: the message as the SDK sent it and the task as it
received it, each as the SDK's protobuf prints in ProtoJSON, the receipt from the task's
metadata and from the stream's last event, the stream's events as printed, and the gateway's
key set. Exits 1 with a one-line reason on stderr when no receipt came.
"""
import sys

import httpx
from a2a_python_full import client, main
from a2a.helpers import new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict

EXT = "urn:peergate:ext:receipts:v1"


async def run(base_url, token, binding):
    from a2a.client import A2ACardResolver
    out = {}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        blocking = client(http, card, token, binding, streaming=False)
        msg = new_text_message("receipt, please", role=Role.ROLE_USER)
        events = [ev async for ev in blocking.send_message(SendMessageRequest(message=msg))]
        task = events[0].task
        out["message"] = MessageToDict(msg)
        out["task"] = MessageToDict(task)
        out["receipt"] = dict(task.metadata).get(EXT)
        streaming = client(http, card, token, binding, streaming=True)
        msg = new_text_message("a streamed receipt, please", role=Role.ROLE_USER)
        streamed = [ev async for ev in streaming.send_message(SendMessageRequest(message=msg))]
        out["stream_message"] = MessageToDict(msg)
        out["stream_events"] = [MessageToDict(ev) for ev in streamed]
        last = streamed[-1]
        out["stream_receipt"] = dict(last.status_update.metadata).get(EXT)
        out["jwks"] = (await http.get(f"{base_url}/.well-known/jwks.json")).json()
        await blocking.close()
        await streaming.close()
    if not out["receipt"] or not out["stream_receipt"]:
        raise RuntimeError(f"no receipt came: {out}")
    return out


if __name__ == "__main__":
    sys.exit(main(run, __doc__))
