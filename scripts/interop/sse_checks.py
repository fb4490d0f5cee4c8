"""The official Python client (`mcp` 2.3.0, Streamable HTTP) against an mcpgate whose servers
include two of the old HTTP+SSE transport (scripts/interop/sse.sh): server-everything in its
`sse` mode (`everything`) and a Python SDK server on `sse_app` (`pysse`), beside mcp-fixture
over Streamable HTTP (`fx`) and over stdio (`fxs`).

    sse_checks.py checks --url URL --json OUT
        one session: the tools of all four, a call of each, and of the two SSE servers
        progress, sampling, elicitation, roots, a log message, a list change and a cancel;
        it ends with DELETE (the SDK client's exit)
    sse_checks.py hold --url URL --sessions N
        N sessions opened (initialize, notifications/initialized) and left open: no DELETE,
        for the reload and SIGTERM phases; prints their ids

Prints one PASS/FAIL line per check; writes the rows for report.py (--json); exits 1 if one failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import mcp.types as types
from mcp import Client

from checks import check, finish, post, record, short, text_of
from client_checks import CALL_TIMEOUT

SAMPLED = "sampled through mcpgate over HTTP+SSE"
ROOT = "file:///srv/interop-sse"
SERVERS = ("everything", "pysse", "fx", "fxs")


class Seen:
    """What the servers sent the client through mcpgate."""

    def __init__(self) -> None:
        self.asked = {"sampling": 0, "elicitation": 0, "roots": 0}
        self.logs: list[Any] = []
        self.methods: list[str] = []

    async def on_sampling(self, context: Any, params: Any) -> types.CreateMessageResult:
        self.asked["sampling"] += 1
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=SAMPLED), model="interop"
        )

    async def on_elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked["elicitation"] += 1
        schema = getattr(params, "requested_schema", None) or {}
        content = {k: p["default"] for k, p in schema.get("properties", {}).items() if "default" in p}
        for field in schema.get("required", []):
            content.setdefault(field, "Ada")
        return types.ElicitResult(action="accept", content=content)

    async def on_roots(self, context: Any) -> types.ListRootsResult:
        self.asked["roots"] += 1
        return types.ListRootsResult(roots=[types.Root(uri=ROOT, name="interop-sse")])

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def on_message(self, message: Any) -> None:
        self.methods.append(getattr(message, "method", type(message).__name__))

    async def until(self, done: Callable[[], bool], timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        return done()


async def checks(url: str) -> None:
    seen = Seen()
    client = Client(
        url,
        mode="legacy",
        read_timeout_seconds=CALL_TIMEOUT,
        sampling_callback=seen.on_sampling,
        elicitation_callback=seen.on_elicitation,
        list_roots_callback=seen.on_roots,
        logging_callback=seen.on_log,
        message_handler=seen.on_message,
        client_info=types.Implementation(name="mcpgate-interop-sse", version="1.0"),
        cache=None,
    )
    async with client:
        names: list[str] = []
        cursor = None
        for _ in range(50):
            page = await client.list_tools(cursor=cursor)
            names += [t.name for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        by_server = {s: sum(1 for n in names if n.startswith(f"{s}__")) for s in SERVERS}
        record(
            "tools/list: the tools of both HTTP+SSE servers beside the Streamable HTTP and stdio ones",
            all(by_server.values()),
            ", ".join(f"{s} {n}" for s, n in by_server.items()),
        )
        for tool, args, want in [
            ("everything__echo", {"message": "old transport"}, "Echo: old transport"),
            ("pysse__echo", {"text": "old transport"}, "py echo: old transport"),
            ("fx__echo", {"text": "streamable"}, "streamable"),
            ("fxs__echo", {"text": "stdio"}, "stdio"),
        ]:

            async def call(tool: str = tool, args: dict[str, Any] = args, want: str = want) -> tuple[bool, str]:
                text = text_of(await client.call_tool(tool, args))
                return text == want, short(text)

            await check(f"{tool}", call)

        for tool, args, steps in [
            ("everything__trigger-long-running-operation", {"duration": 1, "steps": 3}, 3),
            ("pysse__progress", {"steps": 3}, 3),
        ]:

            async def progress(tool: str = tool, args: dict[str, Any] = args, steps: int = steps) -> tuple[bool, str]:
                got: list[float] = []

                async def on_progress(value: float, total: float | None, message: str | None) -> None:
                    got.append(value)

                await client.call_tool(tool, args, progress_callback=on_progress)
                return got == sorted(set(got)) and len(got) == steps, f"progress {got}"

            await check(f"{tool}: progress notifications reach the client", progress)

        for kind, tool, args in [
            ("sampling", "everything__trigger-sampling-request", {"prompt": "hi"}),
            ("sampling", "pysse__sample", {"prompt": "hi"}),
            ("elicitation", "everything__trigger-elicitation-request", {}),
            ("elicitation", "pysse__ask", {}),
            ("roots", "everything__get-roots-list", {}),
            ("roots", "pysse__roots", {}),
        ]:

            async def asks(kind: str = kind, tool: str = tool, args: dict[str, Any] = args) -> tuple[bool, str]:
                before = seen.asked[kind]
                text = text_of(await client.call_tool(tool, args))
                want = {"sampling": SAMPLED, "elicitation": "Ada", "roots": ROOT}[kind]
                # server-everything asks for the roots once initialized, and answers from what it got.
                asked = seen.asked[kind] == before + 1 or (kind == "roots" and seen.asked[kind] > 0)
                return asked and want in text, f"asked {seen.asked[kind] - before}x; {short(text)}"

            await check(f"{tool}: the server's {kind} request, answered by the client", asks)

        async def log() -> tuple[bool, str]:
            before = len(seen.logs)
            await client.call_tool("pysse__log", {"level": "warning", "message": "interop-sse-log"})
            ok = await seen.until(lambda: any(m.data == "interop-sse-log" for m in seen.logs[before:]))
            return ok, f"{len(seen.logs) - before} log message(s)"

        await check("pysse__log: notifications/message reaches the client", log)

        async def list_changed() -> tuple[bool, str]:
            before = len(seen.methods)
            await client.call_tool("pysse__add_tool", {"name": "added_over_sse"})
            method = "notifications/tools/list_changed"
            ok = await seen.until(lambda: method in seen.methods[before:])
            names = [t.name for t in (await client.list_tools()).tools]
            return ok and "pysse__added_over_sse" in names, f"{method}: {ok}; listed: {'pysse__added_over_sse' in names}"

        await check("pysse__add_tool: tools/list_changed reaches the client, the new tool is listed", list_changed)

        async def cancel() -> tuple[bool, str]:
            with anyio.move_on_after(0.5):
                await client.call_tool("pysse__cancellable", {"ms": 20_000, "tag": "sse"})
            deadline = time.monotonic() + 5
            text = ""
            while time.monotonic() < deadline:
                text = text_of(await client.call_tool("pysse__cancelled", {"tag": "sse"}))
                if text == "py cancelled: 1":
                    break
                await anyio.sleep(0.1)
            return text == "py cancelled: 1", text

        await check("pysse__cancellable: the client's cancel reaches the server", cancel)
    print(f"INFO  asked of the client {seen.asked}", flush=True)


def hold(url: str, sessions: int) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "hold", "version": "1"}}
    for _ in range(sessions):
        status, session, _ = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, None)
        post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        print(f"{status} {session}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["checks", "hold"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--json")
    parser.add_argument("--sessions", type=int, default=1)
    args = parser.parse_args()
    if args.mode == "hold":
        hold(args.url, args.sessions)
        return 0
    try:
        anyio.run(checks, args.url)
    except Exception as e:  # the client itself failed: a row says so
        record("the Python client ran to its end", False, f"{type(e).__name__}: {e}")
    return finish("python client through mcpgate, HTTP+SSE servers", args.json)


if __name__ == "__main__":
    sys.exit(main())
