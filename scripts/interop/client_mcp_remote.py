"""The client matrix's mcp-remote (npm, the stdio-to-HTTP bridge Claude Desktop
users run): flow.py speaking JSON-RPC lines on mcp-remote's stdin and stdout,
as a desktop host does, while mcp-remote speaks Streamable HTTP to the target.

The driver plays the host: it initializes with sampling, elicitation and roots,
answers the server's requests, sends notifications/cancelled for a call it
gives up on (mcp-remote only relays), and closes mcp-remote's stdin at the end.

    python client_mcp_remote.py --url URL --target direct:py|mcpgate --out FILE
    (MCP_REMOTE_BIN: mcp-remote's dist/proxy.js; NODE: the node to run it with;
    MCP_REMOTE_LOG: where its stderr goes)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

import flow


class RpcError(Exception):
    pass


class StdioRpc(flow.Adapter):
    """A JSON-RPC host on a child's stdio."""

    def __init__(self, url: str, command: list[str], env: dict[str, str], stderr_path: str) -> None:
        super().__init__(url)
        self.command, self.env, self.stderr_path = command, env, stderr_path
        self.process: Any = None
        self.ids = iter(range(1, 1_000_000))
        self.waiting: dict[int, Any] = {}
        self.answers: dict[int, dict[str, Any]] = {}
        self.progress: dict[str, Any] = {}
        self.group: Any = None
        self.server_version = ""

    async def start(self) -> None:
        self.stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - the child's stderr, closed in close()
        self.process = await anyio.open_process(self.command, env=self.env, stderr=self.stderr)
        self.group = anyio.create_task_group()
        await self.group.__aenter__()
        self.group.start_soon(self.reader)

    async def send(self, message: dict[str, Any]) -> None:
        await self.process.stdin.send((json.dumps(message) + "\n").encode())

    async def reader(self) -> None:
        stream = BufferedByteReceiveStream(self.process.stdout)
        while True:
            try:
                line = await stream.receive_until(b"\n", 16 * 1024 * 1024)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                return
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.notes.append(("bad line", line[:200].decode(errors="replace")))
                continue
            await self.dispatch(message)

    async def dispatch(self, m: dict[str, Any]) -> None:
        if "method" in m and "id" in m:  # a request of the server, through the bridge
            self.group.start_soon(self.answer, m)
        elif "method" in m:
            params = m.get("params") or {}
            if m["method"] == "notifications/progress" and str(params.get("progressToken")) in self.progress:
                self.progress[str(params["progressToken"])](params.get("progress"))
            self.notes.append((m["method"], params))
        elif m.get("id") in self.waiting:
            self.answers[m["id"]] = m
            self.waiting.pop(m["id"]).set()

    async def answer(self, m: dict[str, Any]) -> None:
        method, params = m["method"], m.get("params") or {}
        if method == "sampling/createMessage":
            self.callbacks["sampling"] += 1
            result: dict[str, Any] = {"role": "assistant", "content": {"type": "text", "text": flow.SAMPLED},
                                      "model": "interop", "stopReason": "endTurn"}  # fmt: skip
        elif method == "elicitation/create":
            self.callbacks["elicitation"] += 1
            schema = params.get("requestedSchema")
            result = {"action": "accept", "content": flow.fill_form(schema)} if schema else {"action": "decline"}
        elif method == "roots/list":
            self.callbacks["roots"] += 1
            result = {"roots": [{"uri": flow.ROOT_URI, "name": "interop-root"}]}
        elif method == "ping":
            result = {}
        else:
            await self.send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "Method not found"}})
            return
        await self.send({"jsonrpc": "2.0", "id": m["id"], "result": result})

    async def request(self, method: str, params: dict[str, Any] | None = None, request_id: int | None = None) -> Any:
        request_id = request_id if request_id is not None else next(self.ids)
        done = anyio.Event()
        self.waiting[request_id] = done
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        await done.wait()
        answer = self.answers.pop(request_id)
        if "error" in answer:
            raise RpcError(f"error {answer['error'].get('code')}: {answer['error'].get('message')}")
        return answer.get("result")

    async def connect(self) -> str:
        await self.start()
        result = await self.request(
            "initialize",
            {"protocolVersion": "2025-11-25",
             "capabilities": {"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": True}},
             "clientInfo": {"name": "interop-matrix-host", "version": "1.0"}},
        )  # fmt: skip
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return f"protocol {result.get('protocolVersion')}, server {result.get('serverInfo', {}).get('name')}"

    async def list_page(self, kind: str, cursor: str | None) -> tuple[list[str], str | None]:
        method = {"tools": "tools/list", "prompts": "prompts/list", "resources": "resources/list",
                  "templates": "resources/templates/list"}[kind]  # fmt: skip
        result = await self.request(method, {"cursor": cursor} if cursor else {})
        field = {"tools": "tools", "prompts": "prompts", "resources": "resources", "templates": "resourceTemplates"}[kind]
        key = {"tools": "name", "prompts": "name", "resources": "uri", "templates": "uriTemplate"}[kind]
        return [item[key] for item in result.get(field, [])], result.get("nextCursor")

    async def call(self, name: str, args: dict[str, Any], on_progress: Any = None) -> str:
        params: dict[str, Any] = {"name": name, "arguments": args}
        token = None
        if on_progress is not None:
            token = f"p{next(self.ids)}"
            self.progress[token] = on_progress
            params["_meta"] = {"progressToken": token}
        try:
            result = await self.request("tools/call", params)
        finally:
            self.progress.pop(token or "", None)
        text = "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        if result.get("isError"):
            raise RuntimeError(f"isError: {text}")
        return text

    async def get_prompt(self, name: str, args: dict[str, str]) -> str:
        result = await self.request("prompts/get", {"name": name, "arguments": args})
        return " ".join(m.get("content", {}).get("text", "") for m in result.get("messages", []))

    async def read(self, uri: str) -> str:
        result = await self.request("resources/read", {"uri": uri})
        return " ".join(c.get("text", "") for c in result.get("contents", []))

    async def set_level(self, level: str) -> None:
        await self.request("logging/setLevel", {"level": level})

    async def subscribe(self, uri: str, on: bool) -> None:
        await self.request("resources/subscribe" if on else "resources/unsubscribe", {"uri": uri})

    async def call_then_cancel(self, name: str, args: dict[str, Any], after: float) -> None:
        request_id = next(self.ids)
        with anyio.move_on_after(after):
            await self.request("tools/call", {"name": name, "arguments": args}, request_id=request_id)
        self.waiting.pop(request_id, None)
        await self.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": request_id, "reason": "the host gave up"}})  # fmt: skip

    async def resume(self, name: str, args: dict[str, Any]) -> str:
        raise flow.NotAvailable("a stdio host cannot ask the bridge to resume a stream")

    async def close(self) -> None:
        if self.process is None:
            return
        await self.process.stdin.aclose()  # what a host does when it quits: the bridge should DELETE and exit
        with anyio.move_on_after(5):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.terminate()
            with anyio.move_on_after(3):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
        self.group.cancel_scope.cancel()
        await self.group.__aexit__(None, None, None)
        self.stderr.close()


class McpRemote(StdioRpc):
    name = "mcp-remote"

    def __init__(self, url: str) -> None:
        # mcp-remote keeps OAuth state under ~/.mcp-auth: a home of its own for the run.
        home = tempfile.mkdtemp(prefix="mcp-remote-home-")
        env = dict(os.environ, HOME=home, MCP_REMOTE_CONFIG_DIR=os.path.join(home, ".mcp-auth"))
        command = [os.environ.get("NODE", "node"), os.environ["MCP_REMOTE_BIN"], url, "--transport", "http-only", "--allow-http"]
        super().__init__(url, command, env, os.environ.get("MCP_REMOTE_LOG", os.devnull))


if __name__ == "__main__":
    sys.exit(flow.main(McpRemote))
