#!/usr/bin/env python3
"""Interop check: the official Python SDK client signs in to an A2A 1.0 agent
with an access token it obtained itself, by OAuth 2.0 client credentials, from
the identity provider the agent's card names.

With --discover it reads nothing of the card's schemes: it calls without a token, follows the
401's resource_metadata (RFC 9728) to the authorization server's metadata (RFC 8414) and asks
its token endpoint for a token for the resource (RFC 8707).

Usage: a2a_python_oauth.py --base-url URL --client-id ID --client-secret SECRET [--discover]
Prints one JSON summary on stdout; exits 0 only if every expectation held,
otherwise prints a one-line reason on stderr and exits 1.
"""
import argparse
import re
import sys
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_message_text, new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest, TaskState

from summary import report


class Failed(Exception):
    """A broken expectation; its message is the one-line reason."""


def expect(cond, reason):
    if not cond:
        raise Failed(reason)


async def from_the_card(anonymous, card, client_id, client_secret, out):
    """A token from the token endpoint the card's client-credentials flow names."""
    token_url, scheme_name, scopes = None, None, []
    for name, scheme in card.security_schemes.items():
        if scheme.HasField("oauth2_security_scheme"):
            flow = scheme.oauth2_security_scheme.flows.client_credentials
            if flow.token_url:
                token_url, scheme_name, scopes = flow.token_url, name, list(flow.scopes.keys())
    expect(token_url, "the card names no client-credentials token URL")
    out.update(scheme=scheme_name, scopes=sorted(scopes))
    granted = await anonymous.post(
        token_url,
        auth=(client_id, client_secret),
        data={"grant_type": "client_credentials", "scope": "a2a:message a2a:tasks:read"},
    )
    expect(granted.status_code == 200, f"token endpoint answered {granted.status_code}")
    out["token_type"] = granted.json().get("token_type")
    return granted.json()["access_token"]


async def discovered(anonymous, card, client_id, client_secret):
    """A token found from the door's 401 alone: challenge → resource metadata → server metadata."""
    door = next(i.url for i in card.supported_interfaces if i.protocol_binding == "JSONRPC")
    refused = await anonymous.post(door, json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
                                               "params": {}}, headers={"A2A-Version": "1.0"})
    expect(refused.status_code == 401, f"the door answered {refused.status_code} without a token")
    pointers = [m.group(1) for value in refused.headers.get_list("www-authenticate")
                for m in [re.search(r'resource_metadata="([^"]+)"', value)] if m]
    expect(pointers, "no resource_metadata in the 401's challenges")
    metadata = (await anonymous.get(pointers[0])).json()
    expect(metadata["resource"] == door, f"metadata for {metadata['resource']}, not {door}")
    issuer = metadata["authorization_servers"][0]
    parts = urlsplit(issuer)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    token_url = None
    for url in (f"{origin}/.well-known/oauth-authorization-server{path}",
                f"{origin}{path}/.well-known/openid-configuration"):
        answer = await anonymous.get(url)
        if answer.status_code == 200 and answer.json().get("issuer") == issuer:
            token_url = answer.json()["token_endpoint"]
            break
    expect(token_url, f"no metadata of {issuer} names its token endpoint")
    granted = await anonymous.post(
        token_url,
        auth=(client_id, client_secret),
        data={"grant_type": "client_credentials", "scope": "a2a:message a2a:tasks:read",
              "resource": metadata["resource"]},
    )
    expect(granted.status_code == 200, f"token endpoint answered {granted.status_code}")
    return granted.json()["access_token"], {"resource": metadata["resource"],
                                            "authorization_server": issuer}


async def run(base_url, client_id, client_secret, discover):
    out = {}
    async with httpx.AsyncClient(timeout=30) as anonymous:
        card = await A2ACardResolver(anonymous, base_url).get_agent_card()
        if discover:
            token, found = await discovered(anonymous, card, client_id, client_secret)
            out.update(found)
        else:
            token = await from_the_card(anonymous, card, client_id, client_secret, out)
    return await called(card, token, out)


async def called(card, token, out):
    """One message through the SDK's client with `token`."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        config = ClientConfig(httpx_client=http, streaming=False, supported_protocol_bindings=["JSONRPC"])
        client = ClientFactory(config).create(card)
        msg = new_text_message("hello with a provider's token", role=Role.ROLE_USER)
        events = [ev async for ev in client.send_message(SendMessageRequest(message=msg))]
        expect(len(events) == 1 and events[0].HasField("task"), f"unexpected answer: {events}")
        task = events[0].task
        out["state"] = TaskState.Name(task.status.state)
        out["reply"] = get_message_text(task.status.message)
        await client.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--client-id", required=True)
    ap.add_argument("--client-secret", required=True)
    ap.add_argument("--discover", action="store_true")
    args = ap.parse_args()
    return report(run(args.base_url.rstrip("/"), args.client_id, args.client_secret,
                      args.discover))

if __name__ == "__main__":
    sys.exit(main())
