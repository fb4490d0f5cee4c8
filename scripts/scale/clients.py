"""Clients of scripts/scale.sh: N official Python SDK clients (`mcp` 2.3.0,
`mcp.Client`, handshake era) behind one load balancer, each calling a tool
in a loop while the SDK holds its GET stream. After --steady seconds it
kills one mcpgate instance (SIGKILL, --victim-pid; or --event stop: SIGSTOP
for --stop-secs, then SIGCONT; or --event none) and goes on for --after
seconds. A failed call is counted and the client calls on with the same
session; only a session the SDK says is terminated makes it initialize
again (a new `mcp.Client`), as an application does, and that is counted.

Prints one JSON report on stdout: per-instance sessions before the kill,
calls and failures before and after it, and how long the victim's clients
took to recover (first failed call to the next successful one).

    python clients.py --url URL --clients 60 --steady 20 --after 20 \
        --victim-pid PID --victim-id gw-b --tool alpha__add
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import time
import urllib.request
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


class One:
    """One client: its session's instance, its calls, its failures."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.session: str | None = None
        self.instance_at_kill: str | None = None
        self.calls_before = 0
        self.calls_after = 0
        self.failed_before: list[str] = []
        self.failed_after: list[str] = []
        self.exit_errors: list[str] = []
        self.first_failure: float | None = None
        self.recovered_in: float | None = None
        self.sessions: list[str] = []
        self.instances: set[str] = set()
        self.moved_before_kill = False
        self.reinitialized = 0


def instance_of(session: str | None) -> str:
    return session.split(".", 1)[0] if session and "." in session else "?"


async def run_client(one: One, args: Any, state: dict[str, Any], deadline: float) -> None:
    attempts = 0
    while time.monotonic() < deadline and attempts < 20:
        attempts += 1

        async def seen(request: httpx2.Request, one: One = one) -> None:
            sid = request.headers.get("mcp-session-id")
            if sid and sid != one.session:
                one.session = sid
                one.sessions.append(sid)

        http = create_mcp_http_client()
        http.event_hooks["request"].append(seen)
        one.session = None
        try:
            async with http, Client(streamable_http_client(args.url, http_client=http), mode="legacy", cache=None,
                                    read_timeout_seconds=args.call_timeout) as client:
                while time.monotonic() < deadline:
                    try:
                        with anyio.fail_after(args.call_timeout):
                            result = await client.call_tool(args.tool, {"a": one.n, "b": 1})
                        ok = not result.is_error
                        why = "" if ok else str(result.content)[:200]
                    except Exception as e:  # every failure is counted and reported
                        ok, why = False, f"{type(e).__name__}: {e}"[:200]
                    if one.session:
                        one.instances.add(instance_of(one.session))
                    now = time.monotonic()
                    # A call in flight at the kill fails because of it: counted after the kill.
                    killed = state["killed_at"]
                    if ok:
                        if killed is None:
                            one.calls_before += 1
                        else:
                            one.calls_after += 1
                            if one.first_failure is not None and one.recovered_in is None:
                                one.recovered_in = now - one.first_failure
                    else:
                        if killed is None:
                            one.failed_before.append(why)
                        else:
                            one.failed_after.append(why)
                            if one.first_failure is None:
                                one.first_failure = now
                        gone = ("terminated", "404", "unknown or ended session")
                        if any(g in why.lower() for g in gone):
                            one.reinitialized += 1
                            break  # the session is gone: a new client initializes again
                    await anyio.sleep(args.pause)
        except Exception as e:
            # Connecting failed (a failed call), or closing a session already gone did (not a call).
            why = f"connect or close: {type(e).__name__}: {e}"[:200]
            if one.session and one.instances:
                one.exit_errors.append(why)
            else:
                (one.failed_before if state["killed_at"] is None else one.failed_after).append(why)
                if state["killed_at"] is not None and one.first_failure is None:
                    one.first_failure = time.monotonic()
            await anyio.sleep(0.2)


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--clients", type=int, default=60)
    p.add_argument("--steady", type=float, default=20)
    p.add_argument("--after", type=float, default=20)
    p.add_argument("--pause", type=float, default=0.25)
    p.add_argument("--call-timeout", type=float, default=10)
    p.add_argument("--victim-pid", type=int, required=True)
    p.add_argument("--victim-id", required=True)
    p.add_argument("--tool", default="alpha__add")
    p.add_argument("--status", action="append", default=[], help="ID=URL of an instance's /status.json")
    p.add_argument("--event", choices=["kill", "stop", "none"], default="kill")
    p.add_argument("--stop-secs", type=float, default=5)
    args = p.parse_args()

    ones = [One(n) for n in range(args.clients)]
    state: dict[str, Any] = {"killed_at": None}
    start = time.monotonic()
    deadline = start + args.steady + args.after
    per_instance: dict[str, int] = {}
    status_live: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        for one in ones:
            tg.start_soon(run_client, one, args, state, deadline)
            await anyio.sleep(0.02)
        await anyio.sleep(max(0.0, start + args.steady - time.monotonic()))
        for one in ones:
            one.instance_at_kill = instance_of(one.session)
            one.moved_before_kill = len(one.instances) > 1
        per_instance = dict(collections.Counter(o.instance_at_kill for o in ones))
        for spec in args.status:
            name, url = spec.split("=", 1)
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    status_live[name] = json.load(r)["sessions"]["live"]
            except Exception as e:
                status_live[name] = f"{type(e).__name__}: {e}"
        if args.event == "kill":
            os.kill(args.victim_pid, signal.SIGKILL)
        elif args.event == "stop":
            os.kill(args.victim_pid, signal.SIGSTOP)
        state["killed_at"] = time.monotonic()
        if args.event == "stop":
            await anyio.sleep(args.stop_secs)
            os.kill(args.victim_pid, signal.SIGCONT)

    victims = [o for o in ones if o.instance_at_kill == args.victim_id]
    others = [o for o in ones if o.instance_at_kill != args.victim_id]
    recovered = [o.recovered_in for o in victims if o.recovered_in is not None]
    not_found_before = sum("terminated" in w.lower() or "404" in w for o in ones for w in o.failed_before)
    report = {
        "clients": args.clients,
        "sessions_per_instance_at_kill": per_instance,
        "calls_before_kill": sum(o.calls_before for o in ones),
        "failed_before_kill": sum(len(o.failed_before) for o in ones),
        "session_not_found_before_kill": not_found_before,
        "clients_moved_before_kill": sum(o.moved_before_kill for o in ones),
        "status_sessions_live_at_kill": status_live,
        "victim": args.victim_id,
        "victim_clients": len(victims),
        "victim_clients_recovered": len(recovered),
        "victim_clients_unrecovered": sum(o.first_failure is not None and o.recovered_in is None for o in victims),
        "recover_max_s": round(max(recovered), 3) if recovered else None,
        "recover_median_s": round(sorted(recovered)[len(recovered) // 2], 3) if recovered else None,
        "victim_calls_failed": sum(len(o.failed_after) for o in victims),
        "victim_calls_after": sum(o.calls_after for o in victims),
        "victim_clients_now_on": dict(collections.Counter(instance_of(o.session) for o in victims)),
        "other_clients": len(others),
        "other_calls_failed": sum(len(o.failed_after) for o in others),
        "other_calls_after": sum(o.calls_after for o in others),
        "sessions_initialized": sum(len(o.sessions) for o in ones),
        "clients_reinitialized": sum(o.reinitialized > 0 for o in ones),
        "clients_kept_their_id": sum(len(set(o.sessions)) == 1 for o in ones),
        "calls_failed_after": sum(len(o.failed_after) for o in ones),
        "calls_attempted": sum(o.calls_before + o.calls_after + len(o.failed_before) + len(o.failed_after) for o in ones),
        "close_errors_of_dead_sessions": sum(len(o.exit_errors) for o in ones),
        "failures_sample": sorted({w for o in ones for w in o.failed_before + o.failed_after + o.exit_errors})[:8],
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
