#!/usr/bin/env python3
"""Interop check against policies/full.toml: the official Python SDK client
(a2a-sdk, see requirements.txt) streams a message, lists tasks, sends without
blocking, follows the task, meets the errors for cancelling and subscribing
to a finished task, and creates, reads, lists and deletes a push-notification
config on its own task.

Usage: a2a_python_full.py --base-url http://127.0.0.1:PORT --token TOKEN [--binding GRPC]
The client speaks the card's interface of that binding (JSONRPC by default); over gRPC the
token travels in the `authorization` metadata.
Prints one JSON summary on stdout; exits 0 only if every expectation held,
otherwise prints a one-line reason on stderr and exits 1.
"""
import argparse
import asyncio
import json
import sys

import grpc
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_message_text, new_text_message
from a2a.types.a2a_pb2 import (AuthenticationInfo, CancelTaskRequest,
                               DeleteTaskPushNotificationConfigRequest,
                               GetTaskPushNotificationConfigRequest, GetTaskRequest,
                               ListTaskPushNotificationConfigsRequest, ListTasksRequest, Role,
                               SendMessageConfiguration, SendMessageRequest,
                               SubscribeToTaskRequest, TaskPushNotificationConfig, TaskState)
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError


class Failed(Exception):
    """A broken expectation; its message is the one-line reason."""


def expect(cond, reason):
    if not cond:
        raise Failed(reason)


def code_of(error):
    return JSON_RPC_ERROR_CODE_MAP.get(type(error))


def with_token(details, token):
    metadata = list(details.metadata or []) + [("authorization", f"Bearer {token}")]
    return details._replace(metadata=metadata)


# One object per kind of call: grpc.aio files an interceptor under the first kind it is.
class UnaryCredential(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds the bearer token to every unary call's metadata."""

    def __init__(self, token):
        self.token = token

    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(with_token(details, self.token), request)


class StreamCredential(grpc.aio.UnaryStreamClientInterceptor):
    """Adds the bearer token to every streaming call's metadata."""

    def __init__(self, token):
        self.token = token

    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(with_token(details, self.token), request)


def client(http, card, token, binding, streaming):
    config = ClientConfig(httpx_client=http, streaming=streaming,
                          supported_protocol_bindings=[binding],
                          grpc_channel_factory=lambda url: grpc.aio.insecure_channel(
                              url, interceptors=[UnaryCredential(token),
                                                 StreamCredential(token)]))
    return ClientFactory(config).create(card)


async def run(base_url, token, binding):
    out = {}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        expect(card.capabilities.streaming, "the card does not say streaming")
        out["interface"] = [i.url for i in card.supported_interfaces if i.protocol_binding == binding]
        streaming = client(http, card, token, binding, streaming=True)
        blocking = client(http, card, token, binding, streaming=False)

        # 1. A streamed message: the task, the text as it arrives, the final status.
        msg = new_text_message("stream this", role=Role.ROLE_USER)
        events = [ev async for ev in streaming.send_message(SendMessageRequest(message=msg))]
        expect(events and events[0].HasField("task"), f"the stream did not open with the task: {events[:1]}")
        task_id = events[0].task.id
        pieces = [get_message_text(ev.status_update.status.message) for ev in events
                  if ev.HasField("status_update")
                  and ev.status_update.status.state == TaskState.TASK_STATE_WORKING]
        finals = [ev.status_update.status for ev in events if ev.HasField("status_update")
                  and ev.status_update.status.state != TaskState.TASK_STATE_WORKING]
        expect(len(finals) == 1, f"expected one final status, got {len(finals)}")
        out["stream_final_state"] = TaskState.Name(finals[0].state)
        out["stream_pieces"] = len(pieces)
        out["stream_text_matches"] = "".join(pieces) == get_message_text(finals[0].message)

        # 2. ListTasks finds it, with the page fields the specification asks for.
        listed = await blocking.list_tasks(ListTasksRequest(page_size=10))
        out["listed_ids"] = [t.id for t in listed.tasks]
        out["listed_contains_streamed"] = task_id in out["listed_ids"]
        out["next_page_token"] = listed.next_page_token
        out["total_size"] = listed.total_size

        # 3. A non-blocking send, followed with GetTask to its final state.
        msg = new_text_message("do not wait", role=Role.ROLE_USER)
        request = SendMessageRequest(message=msg,
                                     configuration=SendMessageConfiguration(return_immediately=True))
        answered = [ev async for ev in blocking.send_message(request)]
        expect(answered and answered[0].HasField("task"), f"non-blocking send: {answered}")
        later_id = answered[0].task.id
        state = answered[0].task.status.state
        out["non_blocking_first_state"] = TaskState.Name(state)
        for _ in range(100):
            if state != TaskState.TASK_STATE_WORKING:
                break
            await asyncio.sleep(0.05)
            state = (await blocking.get_task(GetTaskRequest(id=later_id))).status.state
        out["non_blocking_final_state"] = TaskState.Name(state)

        # 4. Cancelling and subscribing to a finished task are the specification's errors.
        try:
            await blocking.cancel_task(CancelTaskRequest(id=task_id))
            raise Failed("cancel_task on a finished task did not raise")
        except A2AError as e:
            out["cancel_finished_code"] = code_of(e)
        try:
            [ev async for ev in streaming.subscribe(SubscribeToTaskRequest(id=task_id))]
            raise Failed("subscribe on a finished task did not raise")
        except A2AError as e:
            out["subscribe_finished_code"] = code_of(e)

        # 5. A push-notification config on its own task (a public address written in the URL:
        #    the gateway checks where a callback resolves before storing it).
        expect(card.capabilities.push_notifications, "the card does not say pushNotifications")
        made = await blocking.create_task_push_notification_config(TaskPushNotificationConfig(
            task_id=task_id, id="sdk-hook", url="https://93.184.215.14/a2a-hook", token="sdk-token",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="sdk-credential")))
        out["push_created_id"] = made.id
        read = await blocking.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="sdk-hook"))
        out["push_read"] = [read.url, read.token, read.authentication.scheme,
                            read.authentication.credentials]
        configs = await blocking.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        out["push_listed"] = [c.id for c in configs.configs]
        await blocking.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="sdk-hook"))
        try:
            await blocking.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="sdk-hook"))
            raise Failed("a deleted push config was still read")
        except A2AError as e:
            out["push_deleted_code"] = code_of(e)
        await streaming.close()
        await blocking.close()
    return out


def main(run=run, doc=__doc__):
    """Runs `run(base_url, token, binding)` from the command line and prints its summary."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--binding", default="JSONRPC", choices=["JSONRPC", "HTTP+JSON", "GRPC"])
    args = ap.parse_args()
    try:
        summary = asyncio.run(run(args.base_url.rstrip("/"), args.token, args.binding))
    except Failed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # transport / SDK errors are failures too
        reason = " ".join(str(e).split())
        print(f"FAIL: {type(e).__name__}: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
