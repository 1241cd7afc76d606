#!/usr/bin/env python3
"""Interop check: drive a running A2A 1.0 JSON-RPC server with the official
Python SDK client (a2a-sdk, see requirements.txt).

Usage: a2a_python_client.py --base-url http://127.0.0.1:PORT --token TOKEN
Prints one JSON summary on stdout; exits 0 only if every expectation held,
otherwise prints a one-line reason on stderr and exits 1.
"""
import argparse
import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_message_text, new_text_message
from a2a.types.a2a_pb2 import GetTaskRequest, Role, SendMessageRequest, TaskState
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


class Failed(Exception):
    """A broken expectation; its message is the one-line reason."""


def expect(cond, reason):
    if not cond:
        raise Failed(reason)


async def send(client, text, context_id=None):
    """Send one user text message; return the Task the server answered with."""
    msg = new_text_message(text, context_id=context_id, role=Role.ROLE_USER)
    events = [ev async for ev in client.send_message(SendMessageRequest(message=msg))]
    expect(len(events) == 1, f"send {text!r}: expected 1 response, got {len(events)}")
    expect(events[0].HasField("task"), f"send {text!r}: response is not a Task: {events[0]}")
    return events[0].task


def check_completed(task, text, what):
    state = TaskState.Name(task.status.state)
    expect(state == "TASK_STATE_COMPLETED", f"{what}: state {state}, want TASK_STATE_COMPLETED")
    expect(task.id, f"{what}: task has no id")
    expect(task.context_id, f"{what}: task has no contextId")
    reply = task.status.message
    expect(reply.role == Role.ROLE_AGENT, f"{what}: status.message role is {Role.Name(reply.role)}")
    expect(text in get_message_text(reply), f"{what}: reply {get_message_text(reply)!r} lacks {text!r}")


async def run(base_url, token):
    out = {}
    # One httpx client carrying the bearer token on every request (card fetch
    # included). The SDK adds "A2A-Version: 1.0" to it as a default header.
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        out["card_name"] = card.name
        expect(card.supported_interfaces, "card has no supportedInterfaces")
        iface = card.supported_interfaces[0]
        out["interface"] = {"url": iface.url, "protocolBinding": iface.protocol_binding,
                            "protocolVersion": iface.protocol_version}
        expect(iface.protocol_binding == "JSONRPC", f"interface binding {iface.protocol_binding!r}")
        expect(iface.protocol_version == "1.0", f"interface version {iface.protocol_version!r}")
        out["streaming"] = card.capabilities.streaming

        # Non-streaming JSON-RPC client built from the card (shared httpx client).
        config = ClientConfig(httpx_client=http, streaming=False, supported_protocol_bindings=["JSONRPC"])
        client = ClientFactory(config).create(card)

        # 1. First message, no contextId: the server opens a new context.
        first = await send(client, "hello from python")
        check_completed(first, "hello from python", "first send")
        out.update(first_task=first.id, context_id=first.context_id,
                   first_state=TaskState.Name(first.status.state),
                   first_reply=get_message_text(first.status.message))

        # 2. GetTask on the task we just got.
        got = await client.get_task(GetTaskRequest(id=first.id))
        expect(got.id == first.id, f"get_task: id {got.id!r}, want {first.id!r}")
        expect(got.status.state == first.status.state,
               f"get_task: state {TaskState.Name(got.status.state)}, want {out['first_state']}")
        out["get_task_state"] = TaskState.Name(got.status.state)

        # 3. Follow-up in the same context: new task, same contextId.
        follow = await send(client, "second message", context_id=first.context_id)
        check_completed(follow, "second message", "follow-up send")
        expect(follow.context_id == first.context_id,
               f"follow-up contextId {follow.context_id!r}, want {first.context_id!r}")
        expect(follow.id != first.id, "follow-up reused the first task id")
        out.update(followup_task=follow.id, followup_same_context=True,
                   followup_reply=get_message_text(follow.status.message))

        # 4. Unknown task id must surface as the SDK's TaskNotFoundError (-32001).
        try:
            await client.get_task(GetTaskRequest(id=UNKNOWN_ID))
            raise Failed("get_task on unknown id did not raise")
        except A2AError as e:
            code = JSON_RPC_ERROR_CODE_MAP.get(type(e))
            out.update(unknown_task_error_class=type(e).__name__,
                       unknown_task_error_code=code, unknown_task_error_message=e.message)
            expect(code == -32001, f"unknown task raised {type(e).__name__} ({code}): {e}")
        await client.close()  # does not close the shared httpx client
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--token", required=True)
    args = ap.parse_args()
    try:
        summary = asyncio.run(run(args.base_url.rstrip("/"), args.token))
    except Failed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # transport / SDK errors are failures too
        reason = " ".join(str(e).split())  # httpx errors span several lines
        print(f"FAIL: {type(e).__name__}: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
