#!/usr/bin/env python3
"""Interop check: the official Python SDK client signs in to an A2A 1.0 agent
with an access token it obtained itself, by OAuth 2.0 client credentials, from
the identity provider the agent's card names.

Usage: a2a_python_oauth.py --base-url URL --client-id ID --client-secret SECRET
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
from a2a.types.a2a_pb2 import Role, SendMessageRequest, TaskState


class Failed(Exception):
    """A broken expectation; its message is the one-line reason."""


def expect(cond, reason):
    if not cond:
        raise Failed(reason)


async def run(base_url, client_id, client_secret):
    out = {}
    async with httpx.AsyncClient(timeout=30) as anonymous:
        card = await A2ACardResolver(anonymous, base_url).get_agent_card()
        # The card's oauth2 scheme with a client-credentials flow names the token endpoint.
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
        token = granted.json()["access_token"]
        out["token_type"] = granted.json().get("token_type")

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
    args = ap.parse_args()
    try:
        summary = asyncio.run(run(args.base_url.rstrip("/"), args.client_id, args.client_secret))
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
