"""tool_search through mcpgate with the official Python client (mcp 2.3.0): tools/list shows
find_tools, call_tool and the pinned tool; find_tools finds the fixture's echo; call_tool calls it.

    python search_checks.py --url URL --pinned NAME --find QUERY --expect NAME
Prints one line per check: `1<TAB>check<TAB>detail` (passed) or `0<TAB>...`.
"""

from __future__ import annotations

import argparse
import json
import sys

import anyio
from mcp import Client


async def main(a: argparse.Namespace) -> int:
    rows: list[tuple[bool, str, str]] = []
    async with Client(a.url, mode="legacy", cache=None) as client:
        listed = await client.list_tools()
        names = [t.name for t in listed.tools]
        rows.append((names == ["find_tools", "call_tool", a.pinned], "tools/list: find_tools, call_tool, the pinned", str(names)))
        found = await client.call_tool("find_tools", {"query": a.find})
        tools = (found.structured_content or {}).get("tools", [])
        first = tools[0]["name"] if tools else None
        rows.append((first == a.expect, f"find_tools {a.find!r} answers {a.expect} first", f"first: {first}"))
        called = await client.call_tool("call_tool", {"name": a.expect, "arguments": {"text": "found and called"}})
        text = " ".join(getattr(c, "text", "") for c in called.content)
        rows.append((text == "found and called" and not called.is_error, "call_tool calls it", json.dumps(text)))
    for ok, name, detail in rows:
        print(f"{int(ok)}\t{name}\t{detail}")
    return 0 if all(ok for ok, _, _ in rows) else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    for flag in ("--url", "--pinned", "--find", "--expect"):
        p.add_argument(flag, required=True)
    sys.exit(anyio.run(main, p.parse_args()))
