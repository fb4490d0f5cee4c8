"""The official Python SDK (`mcp` 2.3.0) through mcpgate in front of a server that wants OAuth
(oauth_out_fm_server.py, FastMCP's JWT verification, tokens from oidc-provider), for
scripts/interop/oauth_out.sh. Each user's consent is given in headless Chromium
(oauth_chromium.py), on the authorization server's own pages.

    python oauth_out_checks.py one --url GW --issuer AS --profile DIR --login NAME --phase P
                                   --state FILE --json OUT
    python oauth_out_checks.py modern --url GW --profile DIR --login NAME --json OUT
    python oauth_out_checks.py two --url GW --issuer AS --profiles DIR --json OUT

- `one`, the client of 2025-11-25 with URL elicitation, one user, mcpgate without `auth`; by phase:
  `first`: the first call gets the -32042 error (the SDK's URL-elicitation error path, read as
  UrlElicitationRequiredError), Chromium consents, the session hears
  notifications/elicitation/complete, and the call again answers the user's subject (the time
  from the first call to that answer is kept in --state); `again`: after mcpgate's restart, a call
  works without consent (the authorization server issued no new code); `refresh`: after the access
  token expired, the call works, and the authorization server counts a refresh; `signed-out`:
  after `mcpgate logout`, the call gets a link again.
- `modern`: the client of 2026-07-28: the link comes as an input request in an InputRequiredResult,
  the SDK's elicitation callback has Chromium consent, and its retry answers the subject.
- `two`: mcpgate with `auth.oauth` (the same authorization server); two users sign in to mcpgate
  with the SDK's OAuthClientProvider, each gets a link, the second user's browser opening the first
  user's link is refused, each consents in their own browser, and the server sees each user's own
  subject on every call; then a server that trusts the same issuer gets a token exchanged for each.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
import traceback
import urllib.request
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

import oauth_browser
from checks import record, write
from oauth_checks import Memory

check = functools.partial(record, clip=400)
HERE = os.path.dirname(os.path.abspath(__file__))


def chromium(url: str, profile: str, login: str) -> dict[str, Any]:
    """A person opens `url` in their own browser: where Chromium ended, as oauth_chromium.py says."""
    out = subprocess.run([sys.executable, os.path.join(HERE, "oauth_chromium.py"), url, "--profile", profile,
                          "--login", login, "--timeout", "60"], capture_output=True, text=True, timeout=120)  # fmt: skip
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "why": f"oauth_chromium.py: {out.returncode} {out.stderr[-300:]}"}


def stats(issuer: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{issuer}/stats", timeout=10) as answer:
        return json.load(answer)


def text_of(result: types.CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def asks_elicitation(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    """Declares URL elicitation (a callback of its own); nothing is asked of it in the error path."""
    return types.ElicitResult(action="decline")


async def call_or_link(client: Client, tool: str) -> tuple[str | None, UrlElicitationRequiredError | None]:
    """The tool's text, or the URL elicitation error it got."""
    try:
        return text_of(await client.call_tool(tool, {})), None
    except MCPError as e:
        if e.code != types.URL_ELICITATION_REQUIRED:
            raise
        return None, UrlElicitationRequiredError.from_error(e.error)


async def one(args: argparse.Namespace) -> None:
    saved: dict[str, Any] = {}
    if os.path.exists(args.state):
        with open(args.state) as f:
            saved = json.load(f)
    before = stats(args.issuer)
    completed: list[str] = []

    async def notes(message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            completed.append(message.params.elicitation_id)

    async with Client(args.url, mode="legacy", elicitation_callback=asks_elicitation, message_handler=notes) as client:
        if args.phase == "first":
            started = time.monotonic()
            text, error = await call_or_link(client, "prot__whoami")
            link = error.elicitations[0] if error else None
            check("the first call gets -32042 with a URL elicitation of mcpgate's own sign-in (UrlElicitationRequiredError)",
                  link is not None and link.url.startswith(args.url.rsplit("/mcp", 1)[0] + "/oauth/connect?e=")
                  and bool(link.elicitation_id), f"text {text!r}; elicitation {link}")  # fmt: skip
            if link is None:
                return
            page = chromium(link.url, args.profile, args.login)
            check("Chromium signs in on the authorization server's own pages and lands on mcpgate's page",
                  page.get("ok") and "signed in to server `prot`" in page.get("text", ""),
                  f"{page.get('title')}: {page.get('text', page.get('why'))[:200]} via {page.get('origins')}")  # fmt: skip
            with anyio.move_on_after(10):
                while link.elicitation_id not in completed:
                    await anyio.sleep(0.1)
            check("the session hears notifications/elicitation/complete for that elicitation",
                  link.elicitation_id in completed, f"completed {completed}")  # fmt: skip
            text, error = await call_or_link(client, "prot__whoami")
            took = time.monotonic() - started
            check("the call again answers the user's subject, for the server's audience",
                  (text or "").startswith(f"{args.login} http://127.0.0.1:"), f"{text!r} {error}")  # fmt: skip
            saved.update(first_call_to_authorized_secs=round(took, 2), codes=stats(args.issuer)["codes"])
        elif args.phase == "again":
            text, error = await call_or_link(client, "prot__whoami")
            after = stats(args.issuer)
            check("after mcpgate's restart the call works without consent (no new code, no registration)",
                  (text or "").startswith(args.login) and after["codes"] == before["codes"]
                  and after["registrations"] == before["registrations"], f"{text!r} {error}; {after['codes']} codes")  # fmt: skip
        elif args.phase == "refresh":
            text, error = await call_or_link(client, "prot__whoami")
            after = stats(args.issuer)
            check("after the access token expired the call works, refreshed (counted at the authorization server)",
                  (text or "").startswith(args.login) and after["refreshes"] > before["refreshes"]
                  and after["codes"] == before["codes"],
                  f"{text!r} {error}; refreshes {before['refreshes']} -> {after['refreshes']}")  # fmt: skip
            saved["refreshes"] = after["refreshes"]
        elif args.phase == "signed-out":
            text, error = await call_or_link(client, "prot__whoami")
            check("after `mcpgate logout prot` the call asks again (a new link)",
                  text is None and error is not None, f"{text!r} {error}")  # fmt: skip
    with open(args.state, "w") as out:
        json.dump(saved, out)


async def modern(args: argparse.Namespace) -> None:
    asked: list[str] = []

    async def consent(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        url = getattr(params, "url", "")
        asked.append(url)
        page = await anyio.to_thread.run_sync(chromium, url, args.profile, args.login)
        return types.ElicitResult(action="accept" if page.get("ok") else "cancel")

    async with Client(args.url, mode="2026-07-28", elicitation_callback=consent) as client:
        text = text_of(await client.call_tool("prot__whoami", {}))
    check("2026-07-28: the link comes as an input request (URL elicitation), Chromium consents, the retry answers the subject",
          len(asked) == 1 and "/oauth/connect?e=" in asked[0] and text.startswith(f"{args.login} "), f"{text!r}; asked {asked}")  # fmt: skip


def provider_for(url: str, login: str) -> OAuthClientProvider:
    """The SDK's OAuth client for mcpgate itself, its consent given over HTTP (oauth_browser.py)."""
    final: dict[str, str] = {}

    async def redirect_handler(authorization_url: str) -> None:
        final["url"] = await anyio.to_thread.run_sync(oauth_browser.authorize, authorization_url, login)

    async def callback_handler() -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(final["url"]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                       iss=query.get("iss", [None])[0])  # fmt: skip

    return OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name=f"mcpgate interop ({login})",
            redirect_uris=["http://localhost:9/callback"],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=Memory(),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )


async def two(args: argparse.Namespace) -> None:
    users = ["alice", "bob"]
    http = {u: httpx2.AsyncClient(auth=provider_for(args.url, u), timeout=60) for u in users}
    profile = {u: os.path.join(args.profiles, u) for u in users}
    async with (
        http["alice"], http["bob"],
        Client(streamable_http_client(args.url, http_client=http["alice"]), mode="legacy", elicitation_callback=asks_elicitation) as alice,
        Client(streamable_http_client(args.url, http_client=http["bob"]), mode="legacy", elicitation_callback=asks_elicitation) as bob,
    ):  # fmt: skip
        clients = {"alice": alice, "bob": bob}
        links = {}
        for user, client in clients.items():
            text, error = await call_or_link(client, "prot__whoami")
            links[user] = error.elicitations[0].url if error else None
        check("each user, signed in to mcpgate with their own OAuth token, gets a link of their own",
              all(links.values()) and links["alice"] != links["bob"], json.dumps(links))  # fmt: skip
        if not all(links.values()):
            return
        before = stats(args.issuer)
        page = chromium(links["alice"], profile["bob"], "bob")
        check("bob's browser, signed in at the issuer as bob, opening alice's link is refused",
              "another user" in page.get("text", "") and stats(args.issuer)["codes"] - before["codes"] <= 1,
              f"{page.get('title')}: {page.get('text', page.get('why'))[:200]}")  # fmt: skip
        for user in users:
            page = chromium(links[user], profile[user], user)
            check(f"{user} consents once, in their own browser", page.get("ok") and "signed in to server `prot`" in page.get("text", ""),
                  f"{page.get('title')}: {page.get('text', page.get('why'))[:200]}")  # fmt: skip
        seen = {u: [] for u in users}
        for _ in range(3):
            for user, client in clients.items():
                text, error = await call_or_link(client, "prot__whoami")
                seen[user].append((text or str(error)).split(" ")[0])
        check(
            "the server sees each user's own subject on every call",
            all(seen[u] == [u] * 3 for u in users),
            json.dumps(seen),
        )
        before = stats(args.issuer)
        exchanged = {}
        for user, client in clients.items():
            text, error = await call_or_link(client, "exch__whoami")
            exchanged[user] = text or str(error)
        after = stats(args.issuer)
        check("a server that trusts the same issuer gets a token exchanged for each user (RFC 8693): their subject, its audience",
              all(exchanged[u].startswith(f"{u} http://127.0.0.1:") for u in users)
              and exchanged["alice"].split(" ")[1] != args.url and after["exchanges"] >= 2
              and after["codes"] == before["codes"], f"{exchanged}; exchanges {before['exchanges']} -> {after['exchanges']}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["one", "modern", "two"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--issuer")
    parser.add_argument("--profile")
    parser.add_argument("--profiles")
    parser.add_argument("--login", default="alice")
    parser.add_argument("--phase", default="first")
    parser.add_argument("--state")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    run = {"one": one, "modern": modern, "two": two}[args.mode]
    try:
        anyio.run(run, args)
    except Exception as e:  # a failed run is one failed check, with its trace
        check(f"{args.mode} {args.phase if args.mode == 'one' else ''}: ran to its end", False,
              f"{type(e).__name__}: {e} {traceback.format_exc()[-600:]}")  # fmt: skip
    failed = write(args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
