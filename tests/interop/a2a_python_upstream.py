#!/usr/bin/env python3
"""A scripted A2A 1.0 agent on the official Python SDK (a2a-sdk), the upstream peergate's
`a2a` backend is tested against. It listens on 127.0.0.1 on a free port (or `--port`) and prints
`PORT <n>` once it serves.

The card (GET /.well-known/agent-card.json) is public, signed with --sign-jwk when given; the
JSON-RPC endpoint (POST /) needs `Authorization: Bearer $UPSTREAM_TOKEN` (401 otherwise).

What it answers, chosen by the text of the message:
    "message"  a direct Message (no task)
    "input"    a task in TASK_STATE_INPUT_REQUIRED; a follow-up naming it completes it,
               echoing the follow-up's text
    "fail"     a failed task;  "reject"  a rejected task
    "parts"    a completed task with text, data, url and raw parts in two artifacts
    "slow"     working, three "step N" updates 0.5 s apart, then completed
    "secret-chunks"  working, a test card number split across three status updates, then a
               completed task whose artifact holds it whole
    "context"  a completed task whose answer is the contextId the agent saw
    "cancels"  a completed task whose answer counts the cancels the agent received
    "connections"  a completed task whose answer counts the connections the agent was asked
               over (every request's client address and port, card and probes included)
    "message-id"  a completed task whose answer is the messageId the agent saw
    "methods"  a completed task whose answer counts the JSON-RPC methods the agent was asked
               with so far ("SendMessage=N SendStreamingMessage=M"), this one included
    otherwise  a completed task answering "upstream says: <text>"

And, chosen by the request's metadata, whatever the message holds:
    {"script": "received"}  a completed task whose answer is one data part: the message and the
               request metadata the agent received, as ProtoJSON ({"message": …, "metadata": …})
"""

import argparse
import asyncio
import json
import logging
import os
import socket
import sys

import httpx
import jwt
import uvicorn

from google.protobuf import json_format

from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers import (
    get_message_text,
    new_data_part,
    new_raw_part,
    new_text_message,
    new_text_part,
    new_url_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
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
    AgentProvider,
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


RPC_PATH = '/'
CANCELS = 0
# Every (address, port) a request came from: one per connection the agent was asked over.
CONNECTIONS = set()
# The JSON-RPC methods the agent was asked with, and how often.
METHODS = {}
log = logging.getLogger('sdk-upstream')


def submitted(context: RequestContext) -> Task:
    """The first event of a task-shaped answer: the Task, submitted, the user's message in its
    history."""
    return Task(
        id=context.task_id,
        context_id=context.context_id,
        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
        history=[context.message],
    )


class ScriptedExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message) if context.message else ''
        task = context.current_task  # set when the message carries a known taskId

        if context.metadata.get('script') == 'received':
            received = {
                'message': json_format.MessageToDict(context.message),
                'metadata': context.metadata,
            }
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await event_queue.enqueue_event(submitted(context))
            await updater.add_artifact([new_data_part(received)], name='received')
            await updater.complete()
            return

        if task is None and text == 'message':
            # Direct answer: enqueue a single Message and return; no task is created.
            await event_queue.enqueue_event(
                new_text_message(
                    'a direct message answer',
                    context_id=context.context_id,
                    role=Role.ROLE_AGENT,
                )
            )
            return

        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if task is None:
            # First event of a task-shaped answer: the Task itself (submitted, with the
            # user's message in its history).
            await event_queue.enqueue_event(submitted(context))
        elif task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            # Follow-up to an input-required task: finish it, echoing the new text.
            await updater.add_artifact([new_text_part(f'you said: {text}')], name='echo')
            await updater.complete()
            return

        if text == 'message-id':
            await updater.add_artifact([new_text_part(context.message.message_id)], name='answer')
            await updater.complete()
            return
        if text == 'cancels':
            await updater.add_artifact([new_text_part(f'cancels: {CANCELS}')], name='answer')
            await updater.complete()
            return
        if text == 'methods':
            counted = ' '.join(f'{m}={METHODS.get(m, 0)}' for m in ('SendMessage', 'SendStreamingMessage'))
            await updater.add_artifact([new_text_part(counted)], name='answer')
            await updater.complete()
            return
        if text == 'connections':
            await updater.add_artifact([new_text_part(f'connections: {len(CONNECTIONS)}')], name='answer')
            await updater.complete()
            return
        if text == 'context':
            await updater.add_artifact([new_text_part(context.context_id)], name='answer')
            await updater.complete()
            return
        if text == 'input':
            await updater.requires_input(
                updater.new_agent_message([new_text_part('need more input: send it with this taskId')])
            )
        elif text == 'fail':
            await updater.start_work()
            await updater.failed(updater.new_agent_message([new_text_part('it failed on purpose')]))
        elif text == 'reject':
            await updater.reject(updater.new_agent_message([new_text_part('rejected on purpose')]))
        elif text == 'parts':
            await updater.add_artifact(
                [
                    new_text_part('plain text part'),
                    new_data_part({'key': 'value', 'count': 42, 'nested': {'ok': True}}),
                    new_url_part('https://example.com/report.pdf', media_type='application/pdf',
                                 filename='report.pdf'),
                ],
                name='mixed',
            )
            await updater.add_artifact(
                [new_raw_part(b'hello bytes', media_type='text/plain', filename='hello.txt')],
                name='raw-file',
            )
            await updater.complete()
        elif text == 'secret-chunks':
            # A card number split across three status updates, then whole in the artifact.
            await updater.start_work()
            for chunk in ('the card is 4111 11', '11 1111 ', '1111, keep it'):
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    updater.new_agent_message([new_text_part(chunk)]),
                )
            await updater.add_artifact(
                [new_text_part('the card is 4111 1111 1111 1111, keep it')], name='answer')
            await updater.complete()
        elif text == 'slow':
            await updater.start_work()
            for i in range(1, 4):
                await asyncio.sleep(0.5)
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    updater.new_agent_message([new_text_part(f'step {i}')]),
                )
            await updater.add_artifact([new_text_part('slow work done')], name='result')
            await updater.complete()
        else:
            await updater.start_work()
            await updater.add_artifact([new_text_part(f'upstream says: {text}')], name='answer')
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        global CANCELS
        CANCELS += 1
        # The framework has already cancelled the running execute() coroutine.
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part('canceled on request')]))


class BearerOnRpc(BaseHTTPMiddleware):
    """401 on the JSON-RPC endpoint unless `Authorization: Bearer <token>`; card stays public."""

    def __init__(self, app, token: str):
        super().__init__(app)
        self.expected = f'Bearer {token}'

    async def dispatch(self, request, call_next):
        if request.method == 'POST' and request.url.path == RPC_PATH:
            if request.headers.get('authorization') != self.expected:
                return JSONResponse(
                    {'error': 'unauthorized'},
                    status_code=401,
                    headers={'WWW-Authenticate': 'Bearer realm="sdk-upstream"'},
                )
        return await call_next(request)


class VerifyCaller:
    """Checks the assertion peergate sends with every JSON-RPC request (X-Peergate-Caller), as an
    agent behind peergate would, offline, with PyJWT: against the key set in JWKS_FILE (peergate's
    JWKS, read when a request comes), its type, audience (this agent's JSON-RPC URL), lifetime
    (a minute at most) and each id once. A refused request gets 401 and nothing runs.
    GET /callers answers the claims it verified (and their tokens) and why it refused others."""

    def __init__(self, app, jwks_file: str, audience: str):
        self.app = app
        self.jwks_file = jwks_file
        self.audience = audience
        self.seen = set()
        self.verified = []
        self.refused = []

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http':
            return await self.app(scope, receive, send)
        if scope['path'] == '/callers':
            return await answer(send, 200, {'verified': self.verified, 'refused': self.refused})
        if scope['path'] == RPC_PATH and scope['method'] == 'POST':
            headers = {k.decode().lower(): v.decode() for k, v in scope['headers']}
            token = headers.get('x-peergate-caller')
            why = self.check(token)
            if why:
                self.refused.append(why)
                return await answer(send, 401, {'error': f'caller assertion refused: {why}'})
        await self.app(scope, receive, send)

    def check(self, token):
        if not token:
            return 'missing'
        try:
            header = jwt.get_unverified_header(token)
            if header.get('typ') != 'peergate-caller+jwt':
                return 'type'
            keys = jwt.PyJWKSet.from_dict(json.load(open(self.jwks_file)))
            key = next((k for k in keys.keys if k.key_id == header.get('kid')), None)
            if key is None:
                return 'unknown key'
            claims = jwt.decode(token, key.key, algorithms=['EdDSA', 'ES256'],
                                audience=self.audience,
                                options={'require': ['exp', 'iat', 'jti', 'sub', 'iss', 'aud']})
        except jwt.ExpiredSignatureError:
            return 'expired'
        except jwt.InvalidAudienceError:
            return 'audience'
        except jwt.PyJWTError as error:
            return f'invalid ({type(error).__name__})'
        if claims['exp'] - claims['iat'] > 60:
            return 'lifetime'
        if claims['jti'] in self.seen:
            return 'replayed'
        self.seen.add(claims['jti'])
        self.verified.append({'claims': claims, 'token': token})
        return None


async def answer(send, status, body):
    data = json.dumps(body).encode()
    await send({'type': 'http.response.start', 'status': status,
                'headers': [(b'content-type', b'application/json'),
                            (b'content-length', str(len(data)).encode())]})
    await send({'type': 'http.response.body', 'body': data})


class CountConnections:
    """Notes the client address and port of every request (card, probes, messages): one per
    connection the agent is asked over."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope['type'] == 'http' and scope.get('client'):
            CONNECTIONS.add(tuple(scope['client']))
        await self.app(scope, receive, send)


class CountMethods:
    """Counts the JSON-RPC method of every request to the RPC path (its body read, then handed
    on unchanged)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http' or scope.get('method') != 'POST':
            return await self.app(scope, receive, send)
        messages, body = [], b''
        while True:
            message = await receive()
            messages.append(message)
            body += message.get('body', b'')
            if not message.get('more_body'):
                break
        try:
            method = json.loads(body).get('method')
        except (ValueError, AttributeError):
            method = None
        if isinstance(method, str):
            METHODS[method] = METHODS.get(method, 0) + 1

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


class LateStreamEnd:
    """Ends each event stream `delay` seconds after its last event, as a stream across a network
    may end: a client that stops reading at the last event and drops the response loses its
    connection, one that reads on to the end keeps it."""

    def __init__(self, app, delay: float):
        self.app = app
        self.delay = delay

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http':
            return await self.app(scope, receive, send)
        streaming = False

        async def ending_late(message):
            nonlocal streaming
            if message['type'] == 'http.response.start':
                streaming = any(name == b'content-type' and value.startswith(b'text/event-stream')
                                for name, value in message.get('headers', []))
            elif message['type'] == 'http.response.body' and streaming and not message.get('more_body'):
                await asyncio.sleep(self.delay)
            await send(message)

        await self.app(scope, receive, ending_late)


def build_card(port: int, streaming: bool, scheme: str = 'http') -> AgentCard:
    return AgentCard(
        name='SDK upstream',
        description='Scripted A2A 1.0 agent built on a2a-sdk 1.3.0',
        version='1.0.0',
        provider=AgentProvider(organization='test', url='https://example.com'),
        supported_interfaces=[
            AgentInterface(
                url=f'{scheme}://127.0.0.1:{port}{RPC_PATH}',
                protocol_binding='JSONRPC',
                protocol_version='1.0',
            )
        ],
        capabilities=AgentCapabilities(streaming=streaming, push_notifications=True),
        security_schemes={
            'bearer': SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(scheme='Bearer')
            )
        },
        security_requirements=[SecurityRequirement(schemes={'bearer': StringList(list=[])})],
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain', 'application/json'],
        skills=[
            AgentSkill(
                id='scripted',
                name='Scripted answers',
                description='message/input/fail/reject/parts/slow/echo',
                tags=['test'],
                examples=['message', 'input', 'parts'],
            )
        ],
    )


def make_signer(jwk_path: str):
    """Returns an async card_modifier that signs the card with the private JWK in jwk_path."""
    from jwt.api_jwk import PyJWK

    from a2a.utils.signing import create_agent_card_signer

    with open(jwk_path) as f:
        jwk = json.load(f)
    key = PyJWK.from_dict(jwk)  # kty oct -> HS256, EC P-256 -> ES256, OKP Ed25519 -> EdDSA, RSA -> RS256
    alg = jwk.get('alg') or key.algorithm_name
    protected = {'alg': alg, 'typ': 'JOSE', 'kid': jwk.get('kid', 'key-1')}
    if os.environ.get('UPSTREAM_JKU'):
        protected['jku'] = os.environ['UPSTREAM_JKU']
    sign = create_agent_card_signer(signing_key=key, protected_header=protected)

    async def modifier(card: AgentCard) -> AgentCard:
        signed = AgentCard()
        signed.CopyFrom(card)  # the signer appends to card.signatures; never touch the original
        return sign(signed)

    return modifier


def build_app(port: int, token: str, sign_jwk: str | None, streaming: bool,
              stream_end_delay: float = 0, scheme: str = 'http') -> Starlette:
    card = build_card(port, streaming, scheme)
    push_store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=ScriptedExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=push_store,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(), push_store),
        # A test upstream: allow loopback push callbacks (the SDK blocks them by default).
        push_url_validator=_allow_any_url,
    )
    routes = create_agent_card_routes(
        card, card_modifier=make_signer(sign_jwk) if sign_jwk else None
    )
    routes += create_jsonrpc_routes(handler, rpc_url=RPC_PATH)
    app = Starlette(routes=routes)
    app.add_middleware(BearerOnRpc, token=token)
    app.add_middleware(CountConnections)
    app.add_middleware(CountMethods)
    if stream_end_delay:
        app.add_middleware(LateStreamEnd, delay=stream_end_delay)
    return app


def traced(app, endpoint):
    """The app with OpenTelemetry on, as an operator of the agent would run it: a tracer
    provider exporting to `endpoint`, the ASGI middleware continuing each request's
    traceparent, and the SDK's own spans (a2a.utils.telemetry) as its children."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({'service.name': 'upstream-agent'}))
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip('/') + '/v1/traces')
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return OpenTelemetryMiddleware(app)


async def _allow_any_url(url: str) -> bool:
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--sign-jwk', help='JSON file holding a private JWK; the served card is signed with it')
    ap.add_argument('--no-streaming', action='store_true', help='the card says the agent does not stream')
    ap.add_argument('--port', type=int, default=0, help='the port to listen on (default: a free one)')
    ap.add_argument('--tls', nargs=2, metavar=('CERT', 'KEY'),
                    help='serve over TLS with this certificate chain and key (PEM files)')
    ap.add_argument('--stream-end-delay', type=float, default=0,
                    help='seconds between an event stream\'s last event and its end (default 0)')
    ap.add_argument('--telemetry', metavar='OTLP_ENDPOINT',
                    help='export the agent\'s spans (and the SDK\'s) over OTLP/HTTP to this base URL, '
                         'continuing the trace context each request carries')
    ap.add_argument('--verify-caller', metavar='JWKS_FILE',
                    help='refuse JSON-RPC requests whose caller assertion does not verify against '
                         'the key set in this file (read at each request)')
    args = ap.parse_args()
    token = os.environ.get('UPSTREAM_TOKEN')
    if not token:
        sys.exit('UPSTREAM_TOKEN must be set')
    logging.basicConfig(level=logging.WARNING)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(('127.0.0.1', args.port))
    port = sock.getsockname()[1]
    scheme = 'https' if args.tls else 'http'
    app = build_app(port, token, args.sign_jwk, not args.no_streaming, args.stream_end_delay, scheme)
    if args.verify_caller:
        app = VerifyCaller(app, args.verify_caller, f'{scheme}://127.0.0.1:{port}{RPC_PATH}')
    if args.telemetry:
        app = traced(app, args.telemetry)
    tls = {'ssl_certfile': args.tls[0], 'ssl_keyfile': args.tls[1]} if args.tls else {}
    server = uvicorn.Server(uvicorn.Config(app, log_level='warning', **tls))
    print(f'PORT {port}', flush=True)
    server.run(sockets=[sock])


if __name__ == '__main__':
    main()
