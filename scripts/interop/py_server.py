"""A second downstream server for scripts/interop.sh, written with the official
Python SDK (`mcp` 2.3.0, its FastMCP-style `MCPServer`) and served over
Streamable HTTP on 127.0.0.1.

It binds port 0 itself and prints `listening on 127.0.0.1:PORT` first (like
mcp-fixture), so the caller never races another process for a port.

With `--sse` it serves the old HTTP+SSE transport instead (the SDK's
`sse_app`: `GET /sse`, messages POSTed to `/messages/?session_id=...`), and
counts its streams itself: `GET /stats` answers `{"sse_opened": N,
"sse_closed": M}`, a stream counted closed once the SDK's handler of it
returned (its client went away).

Tools: echo, add, progress (progress notifications), add_tool (registers a
tool, then sends notifications/tools/list_changed), sample (sampling),
ask (elicitation), roots (roots/list), log (notifications/message), and
cancellable with cancelled, which tells whether a call of cancellable was
cancelled (the client matrix checks that a cancellation reached the server).
One prompt, one resource, one resource template.
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("py-interop", instructions="Python SDK server of the interop check", log_level="WARNING")


@server.tool(description="Echoes the text back")
def echo(text: str) -> str:
    return f"py echo: {text}"


@server.tool(description="Adds two integers")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Sends `steps` progress notifications, then answers")
async def progress(steps: int, ctx: Context) -> str:
    for step in range(1, steps + 1):
        await anyio.sleep(0.05)
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return f"done after {steps} steps"


@server.tool(description="Registers a new tool named `name` and announces it with tools/list_changed")
async def add_tool(name: str, ctx: Context) -> str:
    def added() -> str:
        return f"{name} was added at run time"

    server.add_tool(added, name=name, description="Added by add_tool")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool(description="Asks the client's LLM (sampling/createMessage)")
async def sample(prompt: str, ctx: Context) -> str:
    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=50,
        related_request_id=ctx.request_id,
    )
    content = result.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"py sampled: {text}"


class Answer(BaseModel):
    name: str


@server.tool(description="Asks the user for a name (elicitation/create)")
async def ask(ctx: Context) -> str:
    result = await ctx.elicit("What is your name?", Answer)
    if result.action == "accept" and result.data is not None:
        return f"py elicited: {result.data.name}"
    return f"py elicited: {result.action}"


@server.tool(description="Lists the client's roots (roots/list)")
async def roots(ctx: Context) -> str:
    result = await ctx.session.list_roots()
    return "py roots: " + ", ".join(str(root.uri) for root in result.roots)


@server.tool(description="Sends a log message (notifications/message) at the given level")
async def log(level: str, message: str, ctx: Context) -> str:
    await ctx.log(level, message)  # type: ignore[arg-type]
    return f"py logged at {level}"


# Calls of `cancellable` that were cancelled, by tag, for `cancelled` (clients run at once, each
# with a tag of its own).
CANCELLED: dict[str, int] = {}


@server.tool(description="Waits `ms` milliseconds unless cancelled first")
async def cancellable(ms: int, tag: str = "") -> str:
    try:
        await anyio.sleep(ms / 1000)
    except anyio.get_cancelled_exc_class():
        CANCELLED[tag] = CANCELLED.get(tag, 0) + 1
        raise
    return "py not cancelled"


@server.tool(description="How many calls of `cancellable` with this tag were cancelled so far")
def cancelled(tag: str = "") -> str:
    return f"py cancelled: {CANCELLED.get(tag, 0)}"


@server.prompt(description="Greets someone")
def greet(name: str) -> str:
    return f"Hello, {name}, from Python!"


@server.resource("py://readme", name="readme", description="A static text", mime_type="text/plain")
def readme() -> str:
    return "readme of the Python server"


@server.resource("py://items/{item}", name="item", description="One item", mime_type="text/plain")
def item(item: str) -> str:
    return f"py item {item}"


def counting_streams(app: Any) -> Any:
    """The SSE app, with `GET /stats`: its streams opened, and closed (the handler returned)."""
    counts = {"sse_opened": 0, "sse_closed": 0}

    async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/stats":
            body = json.dumps(counts).encode()
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "http" or scope["path"] != "/sse":
            return await app(scope, receive, send)
        counts["sse_opened"] += 1
        try:
            await app(scope, receive, send)
        finally:
            counts["sse_closed"] += 1

    return counted


async def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen(2048)  # listening before it says so (interop.sh checks the socket right after)
    if "--sse" in sys.argv[1:]:
        app = counting_streams(server.sse_app(host="127.0.0.1"))
    else:
        app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        sys.exit(0)
