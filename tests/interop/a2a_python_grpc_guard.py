#!/usr/bin/env python3
"""The gRPC binding's guard, seen by the official gRPC stubs (a2a-sdk's a2a_pb2_grpc, grpcio):
the credential in the `authorization` metadata, refusals as gRPC statuses with their
google.rpc details, another peer's task answered exactly like no task, the protocol version
read from metadata, and gRPC health checking.

Usage: a2a_python_grpc_guard.py --grpc HOST:PORT --token T --other-token O --limited-token L
(L belongs to a peer limited to a few requests a minute.) Prints one JSON summary on stdout;
exits 1 with a one-line reason on stderr if a call did something no check expects.
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


def details_of(error):
    """The status's details: (ErrorInfo reason, domain) pairs and the RetryInfo delay."""
    out = {"reasons": [], "retry_seconds": None}
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out["reasons"].append([info.reason, info.domain])
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                out["retry_seconds"] = retry.retry_delay.seconds
    return out


def metadata_of(error, name):
    return [value for key, value in (error.trailing_metadata() or ()) if key == name]


async def refused(call):
    """The status a call ends with, with its details: it must not succeed."""
    try:
        await call
    except grpc.aio.AioRpcError as e:
        return {"code": e.code().name, "message": e.details(), **details_of(e)}, e
    raise RuntimeError("a call that must be refused was answered")


async def run(address, token, other, limited):
    out = {}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        message = new_text_message("over grpc", role=a2a_pb2.Role.ROLE_USER)

        # Health: as /ready, for the server and the A2A service; another service is unknown.
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        out["health"] = (await check(b"")).hex()
        out["health_a2a"] = (await check(b"\n\x14lf.a2a.v1.A2AService")).hex()
        out["health_other"], _ = await refused(check(b"\n\x05other"))

        # Who the caller is.
        request = a2a_pb2.SendMessageRequest(message=message)
        out["no_credential"], e = await refused(stub.SendMessage(request, metadata=[V1]))
        out["no_credential_challenge"] = metadata_of(e, "www-authenticate")
        out["wrong_credential"], _ = await refused(
            stub.SendMessage(request, metadata=bearer("pg_not_a_token")))

        # The protocol version, from metadata.
        out["old_version"], _ = await refused(stub.SendMessage(
            request, metadata=[("authorization", f"Bearer {token}"), ("a2a-version", "0.3")]))

        # A task, and another peer asking for it: exactly like asking for no task.
        answered = await stub.SendMessage(request, metadata=bearer(token))
        task_id = answered.task.id
        out["state"] = a2a_pb2.TaskState.Name(answered.task.status.state)
        out["reply"] = answered.task.artifacts[0].parts[0].text
        got = await stub.GetTask(a2a_pb2.GetTaskRequest(id=task_id, history_length=1),
                                 metadata=bearer(token))
        out["got_history"] = len(got.history)
        listed = await stub.ListTasks(
            a2a_pb2.ListTasksRequest(status=a2a_pb2.TaskState.TASK_STATE_COMPLETED),
            metadata=bearer(token))
        out["listed"] = [t.id == task_id for t in listed.tasks]
        out["others_task"], _ = await refused(
            stub.GetTask(a2a_pb2.GetTaskRequest(id=task_id), metadata=bearer(other)))
        out["no_task"], _ = await refused(
            stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=bearer(other)))
        out["others_cancel"], _ = await refused(
            stub.CancelTask(a2a_pb2.CancelTaskRequest(id=task_id), metadata=bearer(other)))

        # What the protocol refuses, by the one error table.
        out["cancel_finished"], _ = await refused(
            stub.CancelTask(a2a_pb2.CancelTaskRequest(id=task_id), metadata=bearer(token)))
        card = await stub.GetExtendedAgentCard(a2a_pb2.GetExtendedAgentCardRequest(),
                                               metadata=bearer(token))
        out["card_bindings"] = sorted(i.protocol_binding for i in card.supported_interfaces)
        garbage = channel.unary_unary("/lf.a2a.v1.A2AService/SendMessage")
        out["garbage"], _ = await refused(garbage(b"\xff\xff\xff", metadata=bearer(token)))
        nothing = channel.unary_unary("/lf.a2a.v1.A2AService/NoSuchMethod")
        out["no_method"], _ = await refused(nothing(b"", metadata=bearer(token)))

        # How often: past its limit, a peer is told when to come back.
        for _ in range(20):
            try:
                await stub.GetTask(a2a_pb2.GetTaskRequest(id="x"), metadata=bearer(limited))
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    out["limited"] = {"code": e.code().name, **details_of(e)}
                    out["limited_retry_after"] = metadata_of(e, "retry-after")
                    break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--other-token", required=True)
    ap.add_argument("--limited-token", required=True)
    args = ap.parse_args()
    try:
        summary = asyncio.run(run(args.grpc, args.token, args.other_token, args.limited_token))
    except Exception as e:
        reason = " ".join(str(e).split())
        print(f"FAIL: {type(e).__name__}: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
