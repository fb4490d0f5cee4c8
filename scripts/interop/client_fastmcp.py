"""The client matrix's fastmcp client (`fastmcp` 4.2.3, .interop/venv): flow.py
with `fastmcp.Client` in its default `mode="auto"` (server/discover, then
`initialize` where the server is not of 2026-07-28), with sampling, elicitation
and roots handlers. It has no resources/subscribe of its own: that is n/a.

    python client_fastmcp.py --url URL --target direct:py|mcpgate --out FILE
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp_types
from fastmcp import Client

import flow
from checks import text_of


class FastMCPClient(flow.Adapter):
    name = "fastmcp"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.client: Client[Any] | None = None

    async def on_sampling(self, messages: Any, params: Any, context: Any) -> str:
        self.callbacks["sampling"] += 1
        return flow.SAMPLED

    async def on_elicitation(self, message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        self.callbacks["elicitation"] += 1
        return flow.fill_form(getattr(params, "requested_schema", None) or {})

    async def on_roots(self, context: Any) -> list[str]:
        self.callbacks["roots"] += 1
        return [flow.ROOT_URI]

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notes.append(("exception", repr(message)))
            return
        params = getattr(message, "params", None)
        dumped = params.model_dump(mode="json", by_alias=True) if hasattr(params, "model_dump") else params
        self.notes.append((getattr(message, "method", type(message).__name__), dumped))

    async def on_log(self, message: Any) -> None:
        pass  # also seen by on_message

    async def connect(self) -> str:
        self.client = Client(
            self.url,
            mode=os.environ.get("MATRIX_MODE", "auto"),
            roots=self.on_roots,
            sampling_handler=self.on_sampling,
            elicitation_handler=self.on_elicitation,
            log_handler=self.on_log,
            message_handler=self.on_message,
            timeout=flow.STEP_TIMEOUT,
            client_info=mcp_types.Implementation(name="interop-matrix-fastmcp", version="1.0"),
        )
        await self.client.__aenter__()
        info = self.client.server_info
        return f"protocol {self.client.protocol_version}, server {info.name if info else None}"

    async def list_page(self, kind: str, cursor: str | None) -> tuple[list[str], str | None]:
        c = self.client
        assert c is not None
        if kind == "tools":
            page = await c.list_tools_mcp(cursor=cursor)
            return [t.name for t in page.tools], page.next_cursor
        if kind == "prompts":
            page = await c.list_prompts_mcp(cursor=cursor)
            return [p.name for p in page.prompts], page.next_cursor
        if kind == "resources":
            page = await c.list_resources_mcp(cursor=cursor)
            return [str(r.uri) for r in page.resources], page.next_cursor
        page = await c.list_resource_templates_mcp(cursor=cursor)
        return [t.uri_template for t in page.resource_templates], page.next_cursor

    async def call(self, name: str, args: dict[str, Any], on_progress: Any = None) -> str:
        assert self.client is not None
        handler = None
        if on_progress is not None:

            async def handler(progress: float, total: float | None, message: str | None) -> None:
                on_progress(progress)

        result = await self.client.call_tool_mcp(name, args, progress_handler=handler)
        if result.is_error:
            raise RuntimeError(f"isError: {text_of(result)}")
        return text_of(result)

    async def get_prompt(self, name: str, args: dict[str, str]) -> str:
        assert self.client is not None
        result = await self.client.get_prompt_mcp(name, args)
        return " ".join(getattr(m.content, "text", "") for m in result.messages)

    async def read(self, uri: str) -> str:
        assert self.client is not None
        contents = await self.client.read_resource(uri)
        return " ".join(getattr(c, "text", "") or "" for c in contents)

    async def ping(self) -> None:
        assert self.client is not None
        if not await self.client.ping():
            raise RuntimeError("ping: not an empty result")

    async def cache_scope(self, uri: str) -> str:
        assert self.client is not None
        return flow.scope_on_the_wire(await self.client.read_resource_mcp(uri), self.client.protocol_version)

    async def set_level(self, level: str) -> None:
        assert self.client is not None
        await self.client.set_logging_level(level)  # type: ignore[arg-type]

    async def subscribe(self, uri: str, on: bool) -> None:
        raise flow.NotAvailable("fastmcp.Client has no resources/subscribe")

    async def call_then_cancel(self, name: str, args: dict[str, Any], after: float) -> None:
        assert self.client is not None
        with anyio.move_on_after(after):  # a cancelled call: the SDK underneath sends notifications/cancelled
            await self.client.call_tool_mcp(name, args)

    async def resume(self, name: str, args: dict[str, Any]) -> str:
        raise flow.NotAvailable("no API to resume a request")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.__aexit__(None, None, None)


if __name__ == "__main__":
    sys.exit(flow.main(FastMCPClient))
