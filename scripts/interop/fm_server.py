"""The third downstream server of the client matrix (scripts/interop.sh), written
with FastMCP (`fastmcp` 4.2.3, pinned in requirements.txt) and served over
Streamable HTTP on 127.0.0.1.

It binds port 0 itself and prints `listening on 127.0.0.1:PORT` first (like
py_server.py), so the caller never races another process for a port.

What the matrix's flow asks of a server: tools (one per feature), a prompt, a
resource and a resource template, progress, logging, sampling, elicitation,
roots, a tool added at run time (tools/list_changed), and a tool that can be
cancelled, with a second tool that tells whether it was (a client cannot see
that a server stopped working on a call; this one can say so).

FastMCP 4.2.3's Context has no sampling or roots helper, so those use the SDK
session underneath (`ctx.session`), as py_server.py does.
"""

from __future__ import annotations

import socket
import sys

import anyio
import mcp_types
import uvicorn
from fastmcp import Context, FastMCP
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel

server = FastMCP("fm-interop", instructions="FastMCP server of the interop check")

# Calls of `cancellable` that were cancelled, by tag, for `cancelled` (clients run at once, each
# with a tag of its own).
CANCELLED: dict[str, int] = {}


@server.tool(description="Echoes the text back")
def echo(text: str) -> str:
    return f"fm echo: {text}"


@server.tool(description="Sends `steps` progress notifications, then answers")
async def progress(steps: int, ctx: Context) -> str:
    for step in range(1, steps + 1):
        await anyio.sleep(0.05)
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return f"fm done after {steps} steps"


@server.tool(description="Sends a log message (notifications/message) at the given level")
async def log(level: str, message: str, ctx: Context) -> str:
    await ctx.log(message, level=level)  # type: ignore[arg-type]
    return f"fm logged at {level}"


@server.tool(description="Asks the client's LLM (sampling/createMessage)")
async def sample(prompt: str, ctx: Context) -> str:
    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=50,
        related_request_id=ctx.request_id,
    )
    content = result.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"fm sampled: {text}"


class Answer(BaseModel):
    name: str


@server.tool(description="Asks the user for a name (elicitation/create)")
async def ask(ctx: Context) -> str:
    result = await ctx.elicit("What is your name?", Answer)
    if result.action == "accept" and result.data is not None:
        return f"fm elicited: {result.data.name}"
    return f"fm elicited: {result.action}"


@server.tool(description="Lists the client's roots (roots/list)")
async def roots(ctx: Context) -> str:
    result = await ctx.session.list_roots()
    return "fm roots: " + ", ".join(str(root.uri) for root in result.roots)


@server.tool(description="Registers a new tool named `name` and announces it with tools/list_changed")
async def add_tool(name: str, ctx: Context) -> str:
    def added() -> str:
        return f"{name} was added at run time"

    server.tool(name=name, description="Added by add_tool")(added)
    # FastMCP 4.2.3 does not announce a tool added at run time; Context sends the notification
    # on the request's own stream (unlike py_server.py's, which goes on the GET stream).
    await ctx.send_notification(mcp_types.ToolListChangedNotification())
    return f"fm added {name}"


@server.tool(description="Waits `ms` milliseconds unless cancelled first")
async def cancellable(ms: int, tag: str = "") -> str:
    try:
        await anyio.sleep(ms / 1000)
    except anyio.get_cancelled_exc_class():
        CANCELLED[tag] = CANCELLED.get(tag, 0) + 1
        raise
    return "fm not cancelled"


@server.tool(description="How many calls of `cancellable` with this tag were cancelled so far")
def cancelled(tag: str = "") -> str:
    return f"fm cancelled: {CANCELLED.get(tag, 0)}"


@server.prompt(description="Greets someone")
def greet(name: str) -> str:
    return f"Hello, {name}, from FastMCP!"


@server.resource("fm://readme", name="readme", description="A static text", mime_type="text/plain")
def readme() -> str:
    return "readme of the FastMCP server"


@server.resource("fm://items/{item}", name="item", description="One item", mime_type="text/plain")
def item(item: str) -> str:
    return f"fm item {item}"


async def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen(2048)  # listening before it says so (interop.sh checks the socket right after)
    app = server.http_app(path="/mcp")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        sys.exit(0)
