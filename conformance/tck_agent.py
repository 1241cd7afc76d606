#!/usr/bin/env python3
"""An A2A 1.0 agent on the official Python SDK (a2a-sdk 1.3.0) that behaves as the conformance
kit's scenarios describe (scenarios/*.feature in a2aproject/a2a-tck): the kit picks a behaviour
by the prefix of a message's messageId. conformance/tck-upstream.sh runs the kit against it
directly and through peergate.

    TCK_AGENT_TOKEN=... tck_agent.py --port N --public-url URL [--sign-jwks-out FILE]

The card is public; the JSON-RPC endpoint needs `Authorization: Bearer $TCK_AGENT_TOKEN`. With
--sign-jwks-out, a fresh Ed25519 key signs the served card and its public half is written to
FILE as a JWKS.
"""

import argparse
import asyncio
import base64
import json
import os
import sys

import grpc
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers import (
    new_data_part,
    new_raw_part,
    new_text_message,
    new_text_part,
    new_url_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.routes.rest_routes import create_rest_routes
from a2a.types import a2a_pb2_grpc
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)

STREAMING_TIMEOUT_S = 2


# The text artifact each streaming scenario sends, by messageId prefix.
STREAMED_TEXT = {
    'tck-stream-001': 'Stream hello from TCK',
    'tck-stream-003': 'Stream task lifecycle',
    'tck-stream-ordering-001': 'Ordered output',
    'tck-stream-artifact-text': 'Streamed text content',
}


def streamed_text(message_id):
    return next((text for prefix, text in STREAMED_TEXT.items()
                 if message_id.startswith(prefix)), None)


def text_of(updater, text):
    return updater.new_agent_message([new_text_part(text)])


class ScenarioExecutor(AgentExecutor):
    """One behaviour per messageId prefix, longest prefix first."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message_id = context.message.message_id if context.message else ''
        if message_id.startswith('tck-message-response'):
            await event_queue.enqueue_event(
                new_text_message(
                    'Direct message response',
                    context_id=context.context_id,
                    role=Role.ROLE_AGENT,
                )
            )
            return
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
        if message_id.startswith('tck-complete-task'):
            await updater.complete(text_of(updater, 'Hello from TCK'))
        elif message_id.startswith('tck-artifact-text'):
            await updater.add_artifact([new_text_part('Generated text content')])
            await updater.complete()
        elif message_id.startswith('tck-artifact-file-url'):
            await updater.add_artifact([
                new_url_part('https://example.com/output.txt', media_type='text/plain',
                             filename='output.txt')
            ])
            await updater.complete()
        elif message_id.startswith('tck-artifact-file'):
            await updater.add_artifact([
                new_raw_part(b'file content', media_type='text/plain', filename='output.txt')
            ])
            await updater.complete()
        elif message_id.startswith('tck-artifact-data'):
            await updater.add_artifact([new_data_part({'key': 'value', 'count': 42})])
            await updater.complete()
        elif message_id.startswith('tck-input-required'):
            await updater.requires_input(text_of(updater, 'Please provide more input'))
        elif message_id.startswith('tck-reject-task'):
            await updater.reject(text_of(updater, 'rejected'))
        elif message_id.startswith('tck-stream-002'):
            await updater.complete()
        elif message_id.startswith('tck-stream-artifact-file'):
            await updater.start_work()
            await updater.add_artifact([
                new_raw_part(b'file content', media_type='text/plain', filename='output.txt')
            ])
            await updater.complete()
        elif streamed_text(message_id) is not None:
            await updater.start_work()
            await updater.add_artifact([new_text_part(streamed_text(message_id))])
            await updater.complete()
        elif message_id.startswith('tck-stream-artifact-chunked'):
            await updater.start_work()
            await updater.add_artifact([new_text_part('chunk-1 ')], artifact_id='chunked',
                                       append=False, last_chunk=False)
            await updater.add_artifact([new_text_part('chunk-2')], artifact_id='chunked',
                                       append=True, last_chunk=True)
            await updater.complete()
        elif message_id.startswith('test-resubscribe-message-id'):
            await updater.start_work()
            await asyncio.sleep(2 * STREAMING_TIMEOUT_S)
            await updater.complete()
        else:
            await updater.complete(text_of(updater, 'Unhandled messageId prefix'))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(text_of(updater, 'Canceled'))


class BearerOnRpc(BaseHTTPMiddleware):
    def __init__(self, app, token: str):
        super().__init__(app)
        self.expected = f'Bearer {token}'

    async def dispatch(self, request, call_next):
        # Every route but the card's: JSON-RPC posts, and the HTTP+JSON binding's reads too.
        guarded = not request.url.path.startswith('/.well-known/')
        if guarded and request.headers.get('authorization') != self.expected:
            return JSONResponse({'error': 'unauthorized'}, status_code=401)
        return await call_next(request)


def card(public_url: str, grpc_public: str | None) -> AgentCard:
    base = public_url.rstrip('/')
    interfaces = [
        AgentInterface(url=base + '/', protocol_binding='JSONRPC', protocol_version='1.0'),
        AgentInterface(url=base + '/rest', protocol_binding='HTTP+JSON', protocol_version='1.0'),
    ]
    if grpc_public:
        interfaces.append(AgentInterface(url=grpc_public, protocol_binding='GRPC',
                                         protocol_version='1.0'))
    return AgentCard(
        name='TCK scenario agent',
        description='Behaves as the conformance kit scenarios describe',
        version='1.0.0',
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes={'bearer': SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme='Bearer'))},
        security_requirements=[SecurityRequirement(schemes={'bearer': StringList(list=[])})],
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain', 'application/json'],
        skills=[AgentSkill(id='tck', name='TCK scenarios', description='messageId-driven',
                           tags=['test'])],
    )


def signer(jwks_out: str):
    """A card modifier signing with a fresh Ed25519 key; its public half goes to jwks_out."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from jwt.api_jwk import PyJWK

    from a2a.utils.signing import create_agent_card_signer

    key = Ed25519PrivateKey.generate()
    b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b'=').decode()
    d = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                          serialization.NoEncryption())
    x = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    public = {'kty': 'OKP', 'crv': 'Ed25519', 'alg': 'EdDSA', 'kid': 'tck-agent', 'x': b64(x)}
    with open(jwks_out, 'w') as f:
        json.dump({'keys': [public]}, f)
    sign = create_agent_card_signer(
        signing_key=PyJWK.from_dict({**public, 'd': b64(d)}),
        protected_header={'alg': 'EdDSA', 'kid': 'tck-agent', 'typ': 'JOSE'},
    )

    async def modifier(served: AgentCard) -> AgentCard:
        copy = AgentCard()
        copy.CopyFrom(served)
        return sign(copy)

    return modifier


async def any_url(url: str) -> bool:
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--public-url', required=True)
    parser.add_argument('--sign-jwks-out')
    parser.add_argument('--grpc-port', type=int, help='serve the gRPC binding here too')
    parser.add_argument('--grpc-public', help='the host:port the card names for gRPC')
    args = parser.parse_args()
    token = os.environ.get('TCK_AGENT_TOKEN') or sys.exit('TCK_AGENT_TOKEN must be set')
    served = card(args.public_url, args.grpc_public)
    pushes = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=ScenarioExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=served,
        push_config_store=pushes,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(), pushes),
        # The kit's webhook receiver is on loopback.
        push_url_validator=any_url,
    )
    routes = create_agent_card_routes(
        served, card_modifier=signer(args.sign_jwks_out) if args.sign_jwks_out else None,
        cache_control='max-age=60')
    routes += create_jsonrpc_routes(handler, rpc_url='/')
    routes += create_rest_routes(handler, path_prefix='/rest')
    app = Starlette(routes=routes)
    app.add_middleware(BearerOnRpc, token=token)
    asyncio.run(serve(app, handler, args))


async def serve(app, handler, args) -> None:
    """The HTTP bindings with uvicorn and, with --grpc-port, the gRPC binding beside them (the
    kit reaches that port only through the proxy that adds the token)."""
    if args.grpc_port:
        server = grpc.aio.server()
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
        server.add_insecure_port(f'127.0.0.1:{args.grpc_port}')
        await server.start()
    config = uvicorn.Config(app, host='127.0.0.1', port=args.port, log_level='warning')
    await uvicorn.Server(config).serve()


if __name__ == '__main__':
    main()
