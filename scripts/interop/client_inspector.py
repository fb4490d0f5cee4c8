"""The client matrix's MCP Inspector CLI (`@modelcontextprotocol/inspector` 2.12.0,
`--cli` mode, which runs on the TypeScript SDK 2.x client): flow.py running one
`mcp-inspector --cli URL --method M ... --format json` per operation, as a
script or an agent does.

Each run is a session of its own (initialize, the method, exit). The CLI reads
every page of a list itself, prints the result only (no progress, log or other
notifications), declares roots but no sampling or elicitation, and has no way
to cancel: those features are n/a. logging is logging/setLevel alone.

    python client_inspector.py --url URL --target direct:py|mcpgate --out FILE
    (INSPECTOR_BIN: the package's clients/launcher/build/index.js; NODE: the node to run it with)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import anyio

import flow


class CliError(Exception):
    pass


class InspectorCli(flow.Adapter):
    name = "inspector-cli"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # The Inspector keeps a catalog and secrets under ~/.mcp-inspector: a home of its own.
        self.env = dict(os.environ, HOME=tempfile.mkdtemp(prefix="inspector-home-"))
        self.lists: dict[str, list[str]] = {}

    async def cli(self, method: str, *extra: str) -> Any:
        command = [os.environ.get("NODE", "node"), os.environ["INSPECTOR_BIN"], "--cli", self.url,
                   "--transport", "http", "--method", method, "--format", "json", *extra]  # fmt: skip
        result = await anyio.run_process(command, env=self.env, check=False)
        out = result.stdout.decode(errors="replace").strip()
        err = result.stderr.decode(errors="replace").strip()
        try:
            parsed = json.loads(out or err or "{}")
        except ValueError:
            raise CliError(f"exit {result.returncode}: {flow.short(out or err, 200)}") from None
        if result.returncode != 0 or "error" in parsed:
            raise CliError(f"exit {result.returncode}: {flow.short(json.dumps(parsed.get('error', parsed)), 200)}")
        return parsed.get("result", parsed)

    def has_notifications(self) -> bool:
        return False

    async def connect(self) -> str:
        await self.list_page("tools", None)  # the first run: initialize, tools/list
        return "inspector-cli: one session per operation"

    async def list_page(self, kind: str, cursor: str | None) -> tuple[list[str], str | None]:
        if kind not in self.lists:
            method = {"tools": "tools/list", "prompts": "prompts/list", "resources": "resources/list",
                      "templates": "resources/templates/list"}[kind]  # fmt: skip
            result = await self.cli(method)
            field = {"tools": "tools", "prompts": "prompts", "resources": "resources", "templates": "resourceTemplates"}[kind]
            key = {"tools": "name", "prompts": "name", "resources": "uri", "templates": "uriTemplate"}[kind]
            self.lists[kind] = [item[key] for item in result.get(field, [])]
        return self.lists[kind], None  # the CLI walked every page

    async def call(self, name: str, args: dict[str, Any], on_progress: Any = None) -> str:
        if on_progress is not None:
            raise flow.NotAvailable("the CLI does not show progress")
        result = await self.cli("tools/call", "--tool-name", name, "--tool-args-json", json.dumps(args))
        text = "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        if result.get("isError"):
            raise RuntimeError(f"isError: {text}")
        return text

    async def get_prompt(self, name: str, args: dict[str, str]) -> str:
        pairs = [f"{k}={v}" for k, v in args.items()]
        result = await self.cli("prompts/get", "--prompt-name", name, "--prompt-args", *pairs)
        return " ".join(m.get("content", {}).get("text", "") for m in result.get("messages", []))

    async def read(self, uri: str) -> str:
        result = await self.cli("resources/read", "--uri", uri)
        return " ".join(c.get("text", "") for c in result.get("contents", []))


class InspectorFlow(flow.Flow):
    """logging is logging/setLevel alone; server-to-client requests are n/a (not declared)."""

    async def f_logging(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        try:
            await self.a.cli("logging/setLevel", "--log-level", "debug")  # type: ignore[attr-defined]
        except CliError as e:
            if "does not support logging" in str(e):
                raise flow.NotAvailable(f"setLevel not sent: {e}") from None
            raise
        return True, "logging/setLevel debug accepted (the CLI shows no notifications/message)"

    async def f_sampling(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        raise flow.NotAvailable("the CLI does not declare sampling")

    async def f_elicitation(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        raise flow.NotAvailable("the CLI does not declare elicitation")

    async def f_roots(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        raise flow.NotAvailable("the CLI declares roots but has none to give")

    async def f_cancel(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        raise flow.NotAvailable("the CLI cannot cancel a call")


if __name__ == "__main__":
    sys.exit(flow.main(InspectorCli, InspectorFlow))
