"""Rate limits and the audit log through mcpgate with the official Python client (mcp 2.3.0) as
two users, alice and bob, each with a bearer token of their own (mcpgate's `auth.tokens`).

alice calls until a `rate_limit` refuses her; bob then calls as many times as his bucket holds,
untouched by alice's; alice's second session finds her bucket as empty as she left it. The audit
log is read back: one record per call that ran, with its user, tool and outcome, and the
refusals as `rate_limited`.

    python govern_checks.py --url URL --alice TOKEN --bob TOKEN --burst N --audit FILE
Prints one line per check: `1<TAB>check<TAB>detail` (passed) or `0<TAB>...`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def calls_until_refused(url: str, token: str, limit: int) -> tuple[int, str]:
    """Calls `fx__echo` in one session until a call fails (at most `limit` + 2 times): how many
    answered, and what the refusal said."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    answered, refusal = 0, ""
    try:
        async with http, Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as client:
            for _ in range(limit + 2):
                result = await client.call_tool("fx__echo", {"text": "hello"})
                if result.is_error:
                    refusal = " ".join(getattr(c, "text", "") for c in result.content)
                    break
                answered += 1
    except BaseException as e:  # the SDK raises on a 429, from its transport's task group
        refusal = "; ".join(f"{type(c).__name__}: {c}" for c in leaves(e))
    return answered, refusal


def leaves(e: BaseException) -> list[BaseException]:
    """The exceptions inside nested exception groups."""
    inner = getattr(e, "exceptions", None)  # an exception group's
    if isinstance(inner, (list, tuple)):
        return [leaf for one in inner for leaf in leaves(one)]
    return [e]


def records(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


async def main(a: argparse.Namespace) -> int:
    rows: list[tuple[bool, str, str]] = []
    alice, alice_said = await calls_until_refused(a.url, a.alice, a.burst)
    rows.append((alice == a.burst, f"alice: {a.burst} calls answered, then refused", f"{alice} answered; then {alice_said[:160]}"))
    rows.append(("429" in alice_said or "rate_limit" in alice_said, "alice: the refusal says 429 or names the limit", alice_said[:160]))
    bob, bob_said = await calls_until_refused(a.url, a.bob, a.burst)
    rows.append((bob == a.burst, f"bob: his own {a.burst} calls, untouched by alice's", f"{bob} answered; then {bob_said[:120]}"))
    again, _ = await calls_until_refused(a.url, a.alice, a.burst)
    rows.append((again == 0, "alice: a new session does not refill her bucket", f"{again} answered"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        audit = records(a.audit)
        if sum(1 for r in audit if r.get("outcome") == "rate_limited") >= 3:
            break
        await anyio.sleep(0.1)
    audit = records(a.audit)
    calls = [r for r in audit if r.get("event") == "call"]
    by = lambda who, outcome: [r for r in calls if r.get("principal", {}).get("token") == who and r.get("outcome") == outcome]  # noqa: E731
    ok_alice, ok_bob = by("alice", "ok"), by("bob", "ok")
    rows.append((len(ok_alice) == alice and len(ok_bob) == bob, "audit: one ok record per call that ran, per user",
                 f"alice {len(ok_alice)}, bob {len(ok_bob)}"))
    tools = {r.get("tool") for r in ok_alice + ok_bob}
    rows.append((tools == {"echo"} and all(r.get("server") == "fx" for r in ok_alice + ok_bob), "audit: server and tool", str(tools)))
    refused = by("alice", "rate_limited") + by("bob", "rate_limited")
    rows.append((len(refused) == 3, "audit: each refusal is a rate_limited record", f"{len(refused)}: {[r.get('limit') for r in refused][:3]}"))
    opened = len([r for r in audit if r.get("event") == "session_open"])
    rows.append((opened == 3, "audit: three sessions opened", f"{opened} session_open records"))
    for ok, name, detail in rows:
        print(f"{int(ok)}\t{name}\t{detail}")
    return 0 if all(ok for ok, _, _ in rows) else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    for flag in ("--url", "--alice", "--bob", "--audit"):
        p.add_argument(flag, required=True)
    p.add_argument("--burst", type=int, required=True)
    sys.exit(anyio.run(main, p.parse_args()))
