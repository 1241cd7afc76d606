#!/usr/bin/env python3
"""The authorization policies on the gRPC binding, seen by the official gRPC stubs (a2a-sdk's
a2a_pb2_grpc, grpcio): a peer the policies keep to reads is refused every change with
PERMISSION_DENIED before anything is read, and reads.

Usage: a2a_python_grpc_policies.py --grpc HOST:PORT --token T --reader-token R
(T may send; R is kept to reads.) Prints one JSON summary on stdout; exits 1 with a one-line
reason on stderr if a call did something no check expects.
"""
import argparse
import sys

import grpc
from a2a.helpers import new_text_message
from a2a.types import a2a_pb2, a2a_pb2_grpc

from a2a_python_grpc_tls import bearer, refused, refused_stream
from summary import report


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
        out["stream"] = await refused_stream(
            stub.SendStreamingMessage(request, metadata=bearer(reader)))
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
    return report(run(args.grpc, args.token, args.reader_token))

if __name__ == "__main__":
    sys.exit(main())
