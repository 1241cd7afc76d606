#!/usr/bin/env python3
"""The gRPC binding over TLS, seen by the official gRPC stubs (a2a-sdk's a2a_pb2_grpc, grpcio):
the listener serves the door's certificate, a token whose scopes do not cover an operation is
refused PERMISSION_DENIED for it and admitted for what it covers, and a request message past the
door's body limit is refused RESOURCE_EXHAUSTED without reaching the service.

Usage: a2a_python_grpc_tls.py --grpc HOST:PORT --ca FILE --token T --read-only-token R
       --too-large BYTES [--limited-token L]
(T is a peer token; R an access token bound to a peer with the scope a2a:tasks:read only; L the
token of a peer its administrator limited to read-only operations.)
Prints one JSON summary on stdout; exits 1 with a one-line reason on stderr if a call did
something no check expects.
"""
import argparse
import asyncio
import json
import sys

import grpc
from a2a.helpers import new_text_message
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

V1 = ("a2a-version", "1.0")


def bearer(token):
    return [("authorization", f"Bearer {token}"), V1]


def reasons_of(error):
    out = []
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        for detail in status_pb2.Status.FromString(value).details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out.append([info.reason, info.domain])
    return out


async def refused(call):
    """The status a call ends with: it must not succeed."""
    try:
        await call
    except grpc.aio.AioRpcError as e:
        challenge = [v for k, v in (e.trailing_metadata() or ()) if k == "www-authenticate"]
        return {"code": e.code().name, "message": e.details(), "reasons": reasons_of(e),
                "challenge": challenge}
    raise RuntimeError("a call that must be refused was answered")


async def refused_stream(call):
    """The status a streaming call ends with before its first event: it must not stream."""
    try:
        await call.read()
    except grpc.aio.AioRpcError as e:
        return {"code": e.code().name, "message": e.details(), "reasons": reasons_of(e)}
    raise RuntimeError("a stream that must be refused was answered")


async def limited(stub, request, token):
    """What a peer limited to read-only operations gets: changes refused, reads answered."""
    out = {"send": await refused(stub.SendMessage(request, metadata=bearer(token))),
           "stream": await refused_stream(
               stub.SendStreamingMessage(request, metadata=bearer(token))),
           "cancel": await refused(stub.CancelTask(
               a2a_pb2.CancelTaskRequest(id="no-such-task"), metadata=bearer(token)))}
    listed = await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=bearer(token))
    out["listed"] = len(listed.tasks)
    return out


async def run(address, ca, token, read_only, too_large, limited_token=None):
    out = {}
    with open(ca, "rb") as f:
        credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
    async with grpc.aio.secure_channel(address, credentials) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = a2a_pb2.SendMessageRequest(
            message=new_text_message("over tls", role=a2a_pb2.Role.ROLE_USER))

        answered = await stub.SendMessage(request, metadata=bearer(token))
        out["state"] = a2a_pb2.TaskState.Name(answered.task.status.state)
        out["reply"] = answered.task.artifacts[0].parts[0].text

        # What the token's scopes do not cover, and what they do.
        out["read_only_send"] = await refused(stub.SendMessage(request, metadata=bearer(read_only)))
        out["read_only_get"] = await refused(
            stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=bearer(read_only)))
        listed = await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=bearer(read_only))
        out["read_only_listed"] = len(listed.tasks)
        if limited_token:
            out["limited"] = await limited(stub, request, limited_token)

        # A message past the body limit.
        large = a2a_pb2.SendMessageRequest(
            message=new_text_message("x" * too_large, role=a2a_pb2.Role.ROLE_USER))
        out["too_large"] = await refused(stub.SendMessage(large, metadata=bearer(token)))
        # The connection serves on afterwards.
        again = await stub.SendMessage(request, metadata=bearer(token))
        out["after_too_large"] = a2a_pb2.TaskState.Name(again.task.status.state)

    # The listener speaks TLS only: a plaintext client is not answered.
    async with grpc.aio.insecure_channel(address) as plain:
        stub = a2a_pb2_grpc.A2AServiceStub(plain)
        out["plaintext"] = await refused(stub.SendMessage(request, metadata=bearer(token),
                                                          timeout=5))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--read-only-token", required=True)
    ap.add_argument("--too-large", type=int, required=True)
    ap.add_argument("--limited-token")
    args = ap.parse_args()
    try:
        summary = asyncio.run(run(args.grpc, args.ca, args.token, args.read_only_token,
                                  args.too_large, args.limited_token))
    except Exception as e:
        reason = " ".join(str(e).split())
        print(f"FAIL: {type(e).__name__}: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
