"""Two agent frameworks at their default timeouts against mcpgate in front of the six pasted
servers (scripts/interop/pasted.sh), no LLM involved: openai-agents' MCPServerStreamableHttp
(client_session_timeout_seconds: 5 by default) and pydantic-ai's MCPToolset given the URL
(Streamable HTTP through FastMCP's client; init_timeout: 5 by default). Each connects --count times,
one after the other: opens its session (timed), lists the tools, calls one, and closes.

    pasted_agents.py --url URL [--count 10] [--tool NAME --args JSON] --json OUT

Runs in a venv of its own (.interop/agents, scripts/interop/requirements-agents.txt). Prints a
line per connect; writes the rows for report.py (--json) with the times; exit status 1 if one
failed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import statistics
import sys
import time
from typing import Any

from checks import record, short, text_of, write

TOOL = "time__get_current_time"
ARGS = {"timezone": "Etc/UTC"}


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


async def openai_agents(url: str, tool: str, args: dict[str, Any]) -> tuple[float, int, str]:
    """Connect (timed), list, call, clean up; the connect's seconds, the tools listed, the result."""
    from agents.mcp import MCPServerStreamableHttp

    server = MCPServerStreamableHttp(params={"url": url})
    t0 = time.monotonic()
    try:
        await server.connect()
        took = time.monotonic() - t0
        tools = await server.list_tools()
        if tool not in {t.name for t in tools}:
            raise RuntimeError(f"{tool} not among the {len(tools)} tools listed")
        result = await server.call_tool(tool, args)
        if result.is_error:
            raise RuntimeError(f"isError: {short(text_of(result), 100)}")
        return took, len(tools), text_of(result)
    finally:
        await server.cleanup()


async def pydantic_ai(url: str, tool: str, args: dict[str, Any]) -> tuple[float, int, str]:
    from pydantic_ai.mcp import MCPToolset

    toolset = MCPToolset(url)
    t0 = time.monotonic()
    async with toolset:
        took = time.monotonic() - t0
        tools = await toolset.list_tools()
        if tool not in {t.name for t in tools}:
            raise RuntimeError(f"{tool} not among the {len(tools)} tools listed")
        result = await toolset.direct_call_tool(tool, args)
        return took, len(tools), result if isinstance(result, str) else json.dumps(result, default=str)


def defaults() -> dict[str, str]:
    """The timeouts each framework uses when given nothing but the URL, read from them."""
    import inspect

    from agents.mcp import MCPServerStreamableHttp
    from pydantic_ai.mcp import MCPToolset

    openai = inspect.signature(MCPServerStreamableHttp.__init__).parameters["client_session_timeout_seconds"].default
    toolset = MCPToolset("http://127.0.0.1:9/mcp")
    options = getattr(toolset, "_client_options", None) or {}
    return {
        "openai-agents client_session_timeout_seconds": str(openai),
        "pydantic-ai init_timeout": str(options.get("init_timeout", "?")),
        "pydantic-ai read_timeout": str(options.get("read_timeout", "?")),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    call_args = json.loads(args.args)
    figures: dict[str, Any] = {"defaults": defaults()}
    print(f"defaults: {figures['defaults']}")
    for name, dist, run in (
        ("openai-agents", "openai-agents", openai_agents),
        ("pydantic-ai", "pydantic-ai-slim", pydantic_ai),
    ):
        times: list[float] = []
        failed: list[str] = []
        listed: set[int] = set()
        for i in range(args.count):
            t0 = time.monotonic()
            try:
                with anyio.fail_after(60):
                    took, count, text = await run(args.url, args.tool, call_args)
                times.append(took)
                listed.add(count)
                print(f"  {name} #{i + 1}: connected in {took * 1000:.0f} ms, {count} tools, {short(text, 60)}")
            except Exception as e:  # a failed connect, list or call
                failed.append(f"#{i + 1} after {time.monotonic() - t0:.1f} s: {type(e).__name__}: {short(e, 140)}")
                print(f"  {name} #{i + 1}: {failed[-1]}")
        ordered = sorted(times)
        p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] if ordered else 0
        figures[name] = {
            "version": version(dist),
            "ok": len(times),
            "count": args.count,
            "connect_ms": [round(t * 1000) for t in times],
            "failed": failed,
        }
        record(
            f"{name} {version(dist)} at its default timeouts: connects, lists the tools and calls {args.tool}, "
            f"{args.count} of {args.count} times",
            not failed and len(times) == args.count,
            f"{len(times)} of {args.count}; connect p50 "
            + (f"{statistics.median(times) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(times) * 1000:.0f} ms" if times else "-")
            + f"; tools listed {sorted(listed)}"
            + (f"; failed: {'; '.join(failed)}" if failed else ""),
        )
    figures["versions"] = {d: version(d) for d in ("openai-agents", "pydantic-ai-slim", "fastmcp-slim", "mcp")}
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--tool", default=TOOL)
    parser.add_argument("--args", default=json.dumps(ARGS))
    parser.add_argument("--json", required=True)
    parser.add_argument("--figures")
    args = parser.parse_args()
    import anyio

    figures = anyio.run(main_async, args)
    print(f"versions: {figures['versions']}")
    if args.figures:
        with open(args.figures, "w") as f:
            json.dump(figures, f, indent=1)
    failed = write(args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
