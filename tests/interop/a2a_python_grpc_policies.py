#!/usr/bin/env python3
"""The authorization policies on the gRPC binding, seen by the official gRPC stubs (a2a-sdk's
a2a_pb2_grpc, grpcio): a peer the policies keep to reads is refused every change with
PERMISSION_DENIED before anything is read, and reads.

Usage: a2a_python_grpc_policies.py --grpc HOST:PORT --token T --reader-token R
(T may send; R is kept to reads.) Prints one JSON summary on stdout; exits 1 with a one-line
reason on stderr if a call did something no check expects.
"""
import argparse
import asyncio
import json
import sys

import grpc
from a2a.helpers import new_text_message
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2


def bearer(token):
    return [("authorization", f"Bearer {token}"), ("a2a-version", "1.0")]


def reasons_of(error):
    out = []
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    out.append([info.reason, info.domain])
    return out


async def refused(call, stream=False):
    """The status a call ends with: it must not succeed (a stream before its first event)."""
    try:
        await (call.read() if stream else call)
    except grpc.aio.AioRpcError as e:
        return {"code": e.code().name, "message": e.details(), "reasons": reasons_of(e)}
    raise RuntimeError("a call that must be refused was answered")


async def run(address, token, reader):
    out = {}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = a2a_pb2.SendMessageRequest(
            message=new_text_message("over grpc", role=a2a_pb2.Role.ROLE_USER))
        answered = await stub.SendMessage(request, metadata=bearer(token))
        task_id = answered.task.id
        out["state"] = a2a_pb2.TaskState.Name(answered.task.status.state)
        push = a2a_pb2.TaskPushNotificationConfig(task_id=task_id,
                                                  url="https://hooks.example/a2a")
        out["send"] = await refused(stub.SendMessage(request, metadata=bearer(reader)))
        out["stream"] = await refused(
            stub.SendStreamingMessage(request, metadata=bearer(reader)), stream=True)
        out["cancel"] = await refused(
            stub.CancelTask(a2a_pb2.CancelTaskRequest(id=task_id), metadata=bearer(reader)))
        out["push"] = await refused(
            stub.CreateTaskPushNotificationConfig(push, metadata=bearer(reader)))
        listed = await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=bearer(reader))
        out["listed"] = len(listed.tasks)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--reader-token", required=True)
    args = ap.parse_args()
    try:
        summary = asyncio.run(run(args.grpc, args.token, args.reader_token))
    except Exception as e:
        reason = " ".join(str(e).split())
        print(f"FAIL: {type(e).__name__}: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
