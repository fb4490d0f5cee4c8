"""A server of protocol 2026-07-28 only, for scripts/interop.sh, written with the official Python
SDK (`mcp` 2.3.0, its `MCPServer`) and served over Streamable HTTP on 127.0.0.1.

The SDK serves both eras on one /mcp: its session manager sends a request whose
`MCP-Protocol-Version` names a session-era version (or none) to `initialize` and sessions, any
other to its 2026-07-28 entry. 2.3.0 has no switch to serve one era alone, so this server routes
every request to that entry (`ModernOnlySessionManager`): `initialize` is refused (HTTP 400,
-32602: it carries no 2026-07-28 `_meta`), GET and DELETE are 405, and `server/discover` names
2026-07-28 alone (what the SDK's servers of both eras answer too; the difference is that this
one does not take `initialize`).

Its tools ask the client through the SDK's input_required API (SEP-2322): resolvers returning
`Sample`, `Elicit` and `ListRoots`, which the SDK turns into an `input_required` result with a
sealed `requestState`, and resumes when the client retries with its answers.

Tools: echo, add, progress (progress notifications), sample (sampling), ask (elicitation),
roots (roots/list), add_tool (registers a tool, then publishes tools list_changed to
`subscriptions/listen` streams), cancellable with cancelled (whether a call was cancelled: a
2026-07-28 client cancels by closing the answer's stream). One prompt, one resource.

Also, hand-rolled as the conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12)
describes them, the tools and the prompt of its input-required-result-* scenarios; with
`--conformance` only those (so that they sit beside mcp-fixture --conformance behind one mcpgate
with `"prefix": ""`, without a clash of names).

It binds port 0 itself and prints `listening on 127.0.0.1:PORT` first (like mcp-fixture).

    py_modern_server.py [--conformance]
"""

from __future__ import annotations

import socket
import sys
from typing import Annotated, Any

import anyio
import mcp.server.lowlevel.server as lowlevel
import uvicorn
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.types import (
    CreateMessageResult,
    InputRequiredResult,
    ListRootsResult,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel


class ModernOnlySessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with every request sent to its 2026-07-28 entry, whatever its
    `MCP-Protocol-Version` says: no `initialize`, no sessions."""

    async def _handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        if self._task_group is None:
            raise RuntimeError("Task group is not initialized. Make sure to use run().")
        await handle_modern_request(
            self.app, self.security_settings, self.json_response, self._lifespan_state, scope, receive, send
        )


# `Server.streamable_http_app` builds its manager by this name.
lowlevel.StreamableHTTPSessionManager = ModernOnlySessionManager  # type: ignore[misc]

CONFORMANCE_ONLY = "--conformance" in sys.argv[1:]
server = MCPServer("py-modern-interop", instructions="Python SDK server of protocol 2026-07-28 only", log_level="WARNING")

# --- the interop tools ----------------------------------------------------------------------


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def sample_for(prompt: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=50)


def client_roots() -> ListRoots:
    return ListRoots()


CANCELLED: dict[str, int] = {}


def interop_tools() -> None:
    @server.tool(description="Echoes the text back")
    def echo(text: str) -> str:
        return f"pym echo: {text}"

    @server.tool(description="Adds two integers")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Sends `steps` progress notifications, then answers")
    async def progress(steps: int, ctx: Context) -> str:
        for step in range(1, steps + 1):
            await anyio.sleep(0.05)
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
        return f"done after {steps} steps"

    @server.tool(description="Asks the client's LLM (sampling/createMessage, as input_required)")
    def sample(prompt: str, sampled: Annotated[CreateMessageResult, Resolve(sample_for)]) -> str:
        content = sampled.content
        text = content.text if isinstance(content, TextContent) else str(content)
        return f"pym sampled: {text}"

    @server.tool(description="Asks the user for a name (elicitation/create, as input_required)")
    def ask(answer: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"pym elicited: {answer.name}"

    @server.tool(description="Lists the client's roots (roots/list, as input_required)")
    def roots(listed: Annotated[ListRootsResult, Resolve(client_roots)]) -> str:
        return "pym roots: " + ", ".join(str(root.uri) for root in listed.roots)

    @server.tool(description="Registers a new tool named `name` and announces it on subscriptions/listen")
    async def add_tool(name: str, ctx: Context) -> str:
        def added() -> str:
            return f"{name} was added at run time"

        server.add_tool(added, name=name, description="Added by add_tool")
        await ctx.notify_tools_changed()
        return f"added {name}"

    @server.tool(description="Waits `ms` milliseconds unless cancelled first")
    async def cancellable(ms: int, tag: str = "") -> str:
        try:
            await anyio.sleep(ms / 1000)
        except anyio.get_cancelled_exc_class():
            CANCELLED[tag] = CANCELLED.get(tag, 0) + 1
            raise
        return "pym not cancelled"

    @server.tool(description="How many calls of `cancellable` with this tag were cancelled so far")
    def cancelled(tag: str = "") -> str:
        return f"pym cancelled: {CANCELLED.get(tag, 0)}"

    @server.prompt(description="Greets someone")
    def greet(name: str) -> str:
        return f"Hello, {name}, from Python (2026-07-28)!"

    @server.resource("pym://readme", name="readme", description="A static text", mime_type="text/plain")
    def readme() -> str:
        return "readme of the 2026-07-28 Python server"


# --- the conformance suite's input-required-result-* tools -------------------------------------


def elicit(message: str, field: str, kind: str = "string") -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "message": message,
            "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}, "required": [field]},
        },
    }


def sampling(text: str, max_tokens: int) -> dict[str, Any]:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens},
    }


LIST_ROOTS = {"method": "roots/list", "params": {}}


def answer(ctx: Context, key: str) -> dict[str, Any] | None:
    """The client's answer to `key`, as a dict, or None when it is missing or not an object."""
    value = (ctx.input_responses or {}).get(key)
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        value = value.model_dump(by_alias=True, exclude_none=True)
    return value if isinstance(value, dict) else None


def asking(requests: dict[str, Any], state: str | None = None) -> InputRequiredResult:
    return InputRequiredResult.model_validate(
        {"resultType": "input_required", "inputRequests": requests, **({"requestState": state} if state else {})}
    )


def accepted(response: dict[str, Any] | None, field: str) -> str | None:
    content = (response or {}).get("content") or {}
    return str(content[field]) if response and response.get("action") == "accept" and field in content else None


def conformance_tools() -> None:
    @server.tool(name="test_input_required_result_elicitation", description="input_required: one elicitation")
    def ir_elicitation(ctx: Context) -> str | InputRequiredResult:
        name = accepted(answer(ctx, "user_name"), "name")
        if name is None:
            return asking({"user_name": elicit("What is your name?", "name")})
        return f"Hello, {name}!"

    @server.tool(name="test_input_required_result_sampling", description="input_required: one sampling request")
    def ir_sampling(ctx: Context) -> str | InputRequiredResult:
        response = answer(ctx, "capital_question")
        content = (response or {}).get("content")
        if not isinstance(content, dict) or "text" not in content:
            return asking({"capital_question": sampling("What is the capital of France?", 100)})
        return f"The model said: {content['text']}"

    @server.tool(name="test_input_required_result_list_roots", description="input_required: roots/list")
    def ir_roots(ctx: Context) -> str | InputRequiredResult:
        response = answer(ctx, "client_roots")
        if response is None or not isinstance(response.get("roots"), list):
            return asking({"client_roots": LIST_ROOTS})
        return "roots: " + ", ".join(str(r.get("uri")) for r in response["roots"] if isinstance(r, dict))

    @server.tool(name="test_input_required_result_request_state", description="input_required with requestState")
    def ir_state(ctx: Context) -> str | InputRequiredResult:
        if ctx.request_state != "confirm-pending" or answer(ctx, "confirm") is None:
            return asking({"confirm": elicit("Please confirm", "ok", "boolean")}, "confirm-pending")
        return "state-ok: confirmed"

    @server.tool(name="test_input_required_result_multiple_inputs", description="input_required: three requests")
    def ir_multiple(ctx: Context) -> str | InputRequiredResult:
        keys = ("user_name", "greeting", "client_roots")
        if ctx.request_state != "multiple-pending" or any(answer(ctx, k) is None for k in keys):
            requests = {
                "user_name": elicit("What is your name?", "name"),
                "greeting": sampling("Generate a greeting", 50),
                "client_roots": LIST_ROOTS,
            }
            return asking(requests, "multiple-pending")
        return "all three answered"

    @server.tool(name="test_input_required_result_multi_round", description="input_required over two rounds")
    def ir_rounds(ctx: Context) -> str | InputRequiredResult:
        state = ctx.request_state or ""
        if state.startswith("round-2:"):
            color = accepted(answer(ctx, "step2"), "color")
            if color is not None:
                return f"{state.removeprefix('round-2:')} likes {color}"
            return asking({"step2": elicit("Step 2: What is your favorite color?", "color")}, state)
        name = accepted(answer(ctx, "step1"), "name") if state == "round-1" else None
        if name is None:
            return asking({"step1": elicit("Step 1: What is your name?", "name")}, "round-1")
        return asking({"step2": elicit("Step 2: What is your favorite color?", "color")}, f"round-2:{name}")

    @server.tool(name="test_input_required_result_tampered_state", description="input_required, sealed state")
    def ir_tampered(ctx: Context) -> str | InputRequiredResult:
        # The SDK seals requestState (AES-GCM) and refuses one that was altered before this runs.
        if ctx.request_state != "sealed" or answer(ctx, "confirm") is None:
            return asking({"confirm": elicit("Please confirm", "ok", "boolean")}, "sealed")
        return "state verified"

    @server.tool(name="test_input_required_result_capabilities", description="input_required, as declared")
    def ir_capabilities(ctx: Context) -> str | InputRequiredResult:
        caps = ctx.client_capabilities
        requests: dict[str, Any] = {}
        if caps is not None and caps.sampling is not None and answer(ctx, "greeting") is None:
            requests["greeting"] = sampling("Generate a greeting", 50)
        if caps is not None and caps.elicitation is not None and answer(ctx, "user_name") is None:
            requests["user_name"] = elicit("What is your name?", "name")
        return asking(requests) if requests else "nothing to ask"

    @server.prompt(name="test_input_required_result_prompt", description="input_required on prompts/get")
    def ir_prompt(ctx: Context) -> str | InputRequiredResult:
        context = accepted(answer(ctx, "user_context"), "context")
        if context is None:
            return asking({"user_context": elicit("What context should the prompt use?", "context")})
        return f"Use this context: {context}"


if not CONFORMANCE_ONLY:
    interop_tools()
conformance_tools()


async def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen(2048)
    app = server.streamable_http_app(host="127.0.0.1")
    assert isinstance(server.session_manager, ModernOnlySessionManager)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        sys.exit(0)
