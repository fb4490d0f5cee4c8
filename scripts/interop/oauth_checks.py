"""The official Python SDK's OAuth client (`mcp` 2.3.0, OAuthClientProvider) through mcpgate, over
HTTPS with the test's own CA, against a real authorization server (oidc-provider): discovery from
the 401 (RFC 9728), dynamic client registration, authorization code with PKCE (the consent given
by oauth_browser.py), the token for the resource (RFC 8707), then initialize, tools/list and a
call. Then what mcpgate must refuse, with the tokens the server issued: another subject on the
session, a token for another resource, no token at all (the 401's challenge).

    python oauth_checks.py --url URL --ca FILE --issuer URL --json OUT
                           [--other-resource-url URL] [--opaque-url URL] [--fixture-stats URL]

--opaque-url: an mcpgate whose resource gets opaque access tokens, which it introspects.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import ssl
import sys
import traceback
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

import oauth_browser
from checks import record, write

# A check's detail may be a response body or a trace: 400 characters of it are kept, 200 printed.
check = functools.partial(record, clip=400)


class Memory:
    """TokenStorage: what the SDK registers and receives, kept for the checks."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def claims_of(token: str) -> dict[str, Any]:
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


async def sign_in(url: str, ctx: ssl.SSLContext, login: str) -> tuple[Memory, str, str]:
    """The whole flow for `login`: the storage (token, registration), the session id, the echo."""
    storage = Memory()
    final: dict[str, str] = {}

    async def redirect_handler(authorization_url: str) -> None:
        final["url"] = await anyio.to_thread.run_sync(oauth_browser.authorize, authorization_url, login)

    async def callback_handler() -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(final["url"]).query)
        if "error" in query:
            raise RuntimeError(f"the authorization server refused: {query}")
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                       iss=query.get("iss", [None])[0])  # fmt: skip

    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name=f"mcpgate interop, Python SDK ({login})",
            redirect_uris=["http://localhost:9/callback"],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    session = {}

    async def remember(response: httpx2.Response) -> None:
        if response.headers.get("mcp-session-id"):
            session["id"] = response.headers["mcp-session-id"]

    http = httpx2.AsyncClient(auth=provider, verify=ctx, timeout=30, event_hooks={"response": [remember]})
    async with http, Client(streamable_http_client(url, http_client=http, terminate_on_close=False), mode="legacy") as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("fx__echo", {"text": f"hello from {login}"})
        text = " ".join(getattr(c, "text", "") for c in result.content)
        check(f"{login}: initialize, tools/list ({len(tools)} tools), tools/call through mcpgate",
              "fx__echo" in tools and text == f"hello from {login}", f"tools {tools[:5]}, answer {text!r}")  # fmt: skip
    return storage, session.get("id", ""), text


def post(http: httpx2.Client, url: str, token: str | None, session: str | None, body: dict[str, Any]) -> httpx2.Response:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if session:
        headers["Mcp-Session-Id"] = session
    return http.post(url, headers=headers, json=body)


async def run(args: argparse.Namespace) -> None:
    ctx = ssl.create_default_context(cafile=args.ca)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}  # fmt: skip
    with httpx2.Client(verify=ctx, timeout=15) as http:
        missing = post(http, args.url, None, None, init)
        challenge = missing.headers.get("www-authenticate", "")
        check("no token: 401 with a Bearer challenge naming the metadata (RFC 9728)",
              missing.status_code == 401 and "resource_metadata=" in challenge, f"{missing.status_code} {challenge}")  # fmt: skip
        metadata_url = challenge.split('resource_metadata="')[1].split('"')[0] if "resource_metadata=" in challenge else ""
        doc = http.get(metadata_url).json() if metadata_url else {}
        check("the metadata names the resource and the authorization server",
              doc.get("resource") == args.url and doc.get("authorization_servers") == [args.issuer], json.dumps(doc))  # fmt: skip

    alice, alice_session, _ = await sign_in(args.url, ctx, "alice")
    token = alice.tokens.access_token if alice.tokens else ""
    claims = claims_of(token) if token.count(".") == 2 else {}
    check("the access token is a JWT for the resource, from the issuer, with scope mcp (RFC 8707, RFC 9068)",
          claims.get("aud") == args.url and claims.get("iss") == args.issuer and "mcp" in str(claims.get("scope")),
          json.dumps({k: claims.get(k) for k in ("iss", "aud", "sub", "scope", "client_id")}))  # fmt: skip
    check("the client registered itself (dynamic client registration)", bool(alice.client and alice.client.client_id),
          f"client_id {alice.client.client_id if alice.client else None}")  # fmt: skip
    bob, _, _ = await sign_in(args.url, ctx, "bob")
    bob_token = bob.tokens.access_token if bob.tokens else ""
    with httpx2.Client(verify=ctx, timeout=15) as http:
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        own = post(http, args.url, token, alice_session, listing)
        check("alice's session answers alice's token", own.status_code == 200, f"HTTP {own.status_code}")
        stolen = post(http, args.url, bob_token, alice_session, listing)
        check("bob's valid token on alice's session: 404", stolen.status_code == 404, f"HTTP {stolen.status_code}")
        if args.other_resource_url:
            other = post(http, args.other_resource_url, token, None, init)
            said = other.headers.get("www-authenticate", "")
            check("a token for another resource: 401 invalid_token naming the audience",
                  other.status_code == 401 and "invalid_token" in said and "audience" in said, f"{other.status_code} {said}")  # fmt: skip
    if args.opaque_url:
        erin, _, _ = await sign_in(args.opaque_url, ctx, "erin")
        opaque = erin.tokens.access_token if erin.tokens else ""
        check("an opaque access token (not a JWT) was taken by introspection (RFC 7662)", opaque.count(".") != 2,
              f"a token of {len(opaque)} characters")  # fmt: skip
    if args.fixture_stats:
        stats = httpx2.get(args.fixture_stats, timeout=5).json()
        seen = stats.get("authorizations", [])
        check("no token passthrough: the server behind mcpgate never saw a client's token",
              token not in seen and bob_token not in seen and seen == [""], f"Authorization values it saw: {seen}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--other-resource-url")
    parser.add_argument("--opaque-url")
    parser.add_argument("--fixture-stats")
    args = parser.parse_args()
    try:
        anyio.run(run, args)
    except Exception as e:  # any failure is a failed check, with its trace
        check("the Python SDK's OAuth flow ran to its end", False, f"{type(e).__name__}: {e}")
        traceback.print_exc()
    return 1 if write(args.json) else 0


if __name__ == "__main__":
    sys.exit(main())
