"""The client matrix's Python SDK 2.x client (`mcp` 2.3.0, .interop/venv): flow.py
with `mcp.Client` in its default `mode="auto"` (server/discover, then `initialize`
where the server is not of 2026-07-28), declaring sampling, elicitation and roots.
With MATRIX_MODE=2026-07-28 it is pinned to that era instead (no discover at all):
the matrix's `python-sdk-2.x-pinned`.

    python client_py2.py --url URL --target direct:py|mcpgate --out FILE
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, MCPDeprecationWarning

import flow
from checks import text_of

# logging/setLevel, resources/subscribe and roots are deprecated in 2026-07-28, used here on purpose.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


MODE = os.environ.get("MATRIX_MODE", "auto")


class Py2(flow.Adapter):
    name = "python-sdk-2.x-pinned" if MODE == "2026-07-28" else "python-sdk-2.x"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.stack: Any = None
        self.client: Client | None = None

    async def on_sampling(self, context: Any, params: Any) -> types.CreateMessageResult:
        self.callbacks["sampling"] += 1
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=flow.SAMPLED), model="interop", stop_reason="endTurn"
        )

    async def on_elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.callbacks["elicitation"] += 1
        schema = getattr(params, "requested_schema", None)
        if schema is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=flow.fill_form(schema))

    async def on_roots(self, context: Any) -> types.ListRootsResult:
        self.callbacks["roots"] += 1
        return types.ListRootsResult(roots=[types.Root(uri=flow.ROOT_URI, name="interop-root")])

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notes.append(("exception", repr(message)))
            return
        params = getattr(message, "params", None)
        dumped = params.model_dump(mode="json", by_alias=True) if hasattr(params, "model_dump") else params
        self.notes.append((getattr(message, "method", type(message).__name__), dumped))

    async def on_log(self, params: Any) -> None:
        pass  # also seen by on_message

    async def connect(self) -> str:
        self.client = Client(
            self.url,
            mode=MODE,
            read_timeout_seconds=flow.STEP_TIMEOUT,
            sampling_callback=self.on_sampling,
            elicitation_callback=self.on_elicitation,
            list_roots_callback=self.on_roots,
            logging_callback=self.on_log,
            message_handler=self.on_message,
            client_info=types.Implementation(name="interop-matrix-py2", version="1.0"),
            cache=None,
        )
        await self.client.__aenter__()
        info = self.client.server_info
        return f"protocol {self.client.protocol_version}, server {info.name if info else None}"

    async def list_page(self, kind: str, cursor: str | None) -> tuple[list[str], str | None]:
        c = self.client
        assert c is not None
        if kind == "tools":
            page = await c.list_tools(cursor=cursor)
            return [t.name for t in page.tools], page.next_cursor
        if kind == "prompts":
            page = await c.list_prompts(cursor=cursor)
            return [p.name for p in page.prompts], page.next_cursor
        if kind == "resources":
            page = await c.list_resources(cursor=cursor)
            return [str(r.uri) for r in page.resources], page.next_cursor
        page = await c.list_resource_templates(cursor=cursor)
        return [t.uri_template for t in page.resource_templates], page.next_cursor

    async def call(self, name: str, args: dict[str, Any], on_progress: Any = None) -> str:
        assert self.client is not None
        callback = None
        if on_progress is not None:

            async def callback(progress: float, total: float | None, message: str | None) -> None:
                on_progress(progress)

        result = await self.client.call_tool(name, args, progress_callback=callback)
        if result.is_error:
            raise RuntimeError(f"isError: {text_of(result)}")
        return text_of(result)

    async def get_prompt(self, name: str, args: dict[str, str]) -> str:
        assert self.client is not None
        result = await self.client.get_prompt(name, args)
        return " ".join(getattr(m.content, "text", "") for m in result.messages)

    async def read(self, uri: str) -> str:
        assert self.client is not None
        result = await self.client.read_resource(uri)
        return " ".join(getattr(c, "text", "") or "" for c in result.contents)

    async def ping(self) -> None:
        assert self.client is not None
        await self.client.send_ping()

    async def cache_scope(self, uri: str) -> str:
        assert self.client is not None
        return flow.scope_on_the_wire(await self.client.read_resource(uri), self.client.protocol_version)

    async def set_level(self, level: str) -> None:
        assert self.client is not None
        await self.client.set_logging_level(level)  # type: ignore[arg-type]

    async def subscribe(self, uri: str, on: bool) -> None:
        assert self.client is not None
        if on:
            await self.client.subscribe_resource(uri)
        else:
            await self.client.unsubscribe_resource(uri)

    async def call_then_cancel(self, name: str, args: dict[str, Any], after: float) -> None:
        assert self.client is not None
        with anyio.move_on_after(after):  # the SDK sends notifications/cancelled for a cancelled call
            await self.client.call_tool(name, args)

    async def resume(self, name: str, args: dict[str, Any]) -> str:
        raise flow.NotAvailable("no API to resume a request (the SDK resumes a dropped stream itself)")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.__aexit__(None, None, None)


if __name__ == "__main__":
    sys.exit(flow.main(Py2))
