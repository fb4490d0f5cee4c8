"""The client matrix's Python SDK 1.x client (`mcp` 1.30.0, the newest 1.x, in
.interop/venv-v1 of its own: scripts/interop/requirements-v1.txt): flow.py with
`ClientSession` over `streamable_http_client`, declaring sampling, elicitation
and roots.

    python client_py1.py --url URL --target direct:py|mcpgate --out FILE
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import AnyUrl

import flow
from checks import text_of


class Py1(flow.Adapter):
    name = "python-sdk-1.x"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.stack = AsyncExitStack()
        self.session: ClientSession | None = None

    async def on_sampling(self, context: Any, params: Any) -> types.CreateMessageResult:
        self.callbacks["sampling"] += 1
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=flow.SAMPLED), model="interop", stopReason="endTurn"
        )

    async def on_elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.callbacks["elicitation"] += 1
        schema = getattr(params, "requestedSchema", None)
        if schema is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=flow.fill_form(schema))

    async def on_roots(self, context: Any) -> types.ListRootsResult:
        self.callbacks["roots"] += 1
        return types.ListRootsResult(roots=[types.Root(uri=AnyUrl(flow.ROOT_URI), name="interop-root")])

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notes.append(("exception", repr(message)))
            return
        root = getattr(message, "root", message)  # ServerNotification wraps the notification
        params = getattr(root, "params", None)
        dumped = params.model_dump(mode="json", by_alias=True) if hasattr(params, "model_dump") else params
        self.notes.append((getattr(root, "method", type(root).__name__), dumped))

    async def connect(self) -> str:
        read, write, _ = await self.stack.enter_async_context(streamable_http_client(self.url))
        self.session = await self.stack.enter_async_context(
            ClientSession(
                read,
                write,
                read_timeout_seconds=timedelta(seconds=flow.STEP_TIMEOUT),
                sampling_callback=self.on_sampling,
                elicitation_callback=self.on_elicitation,
                list_roots_callback=self.on_roots,
                message_handler=self.on_message,
                client_info=types.Implementation(name="interop-matrix-py1", version="1.0"),
            )
        )
        result = await self.session.initialize()
        return f"protocol {result.protocolVersion}, server {result.serverInfo.name}"

    async def list_page(self, kind: str, cursor: str | None) -> tuple[list[str], str | None]:
        s = self.session
        assert s is not None
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        if kind == "tools":
            page = await s.list_tools(params=params)
            return [t.name for t in page.tools], page.nextCursor
        if kind == "prompts":
            page = await s.list_prompts(params=params)
            return [p.name for p in page.prompts], page.nextCursor
        if kind == "resources":
            page = await s.list_resources(params=params)
            return [str(r.uri) for r in page.resources], page.nextCursor
        page = await s.list_resource_templates(params=params)
        return [t.uriTemplate for t in page.resourceTemplates], page.nextCursor

    async def call(self, name: str, args: dict[str, Any], on_progress: Any = None) -> str:
        assert self.session is not None
        callback = None
        if on_progress is not None:

            async def callback(progress: float, total: float | None, message: str | None) -> None:
                on_progress(progress)

        result = await self.session.call_tool(name, args, progress_callback=callback)
        if result.isError:
            raise RuntimeError(f"isError: {text_of(result)}")
        return text_of(result)

    async def get_prompt(self, name: str, args: dict[str, str]) -> str:
        assert self.session is not None
        result = await self.session.get_prompt(name, args)
        return " ".join(getattr(m.content, "text", "") for m in result.messages)

    async def read(self, uri: str) -> str:
        assert self.session is not None
        result = await self.session.read_resource(AnyUrl(uri))
        return " ".join(getattr(c, "text", "") or "" for c in result.contents)

    async def ping(self) -> None:
        assert self.session is not None
        await self.session.send_ping()

    async def set_level(self, level: str) -> None:
        assert self.session is not None
        await self.session.set_logging_level(level)  # type: ignore[arg-type]

    async def subscribe(self, uri: str, on: bool) -> None:
        assert self.session is not None
        if on:
            await self.session.subscribe_resource(AnyUrl(uri))
        else:
            await self.session.unsubscribe_resource(AnyUrl(uri))

    async def call_then_cancel(self, name: str, args: dict[str, Any], after: float) -> None:
        assert self.session is not None
        with anyio.move_on_after(after):  # what a 1.x application does to give up on a call
            await self.session.call_tool(name, args)

    async def resume(self, name: str, args: dict[str, Any]) -> str:
        raise flow.NotAvailable("no API to resume a request (the SDK resumes a dropped stream itself)")

    async def close(self) -> None:
        await self.stack.aclose()


if __name__ == "__main__":
    sys.exit(flow.main(Py1))
