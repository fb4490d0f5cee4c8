"""Both protocol eras through mcpgate, with the official Python SDK (`mcp` 2.3.0) as the client.

mcpgate fronts two Python SDK servers: py_server.py (prefix `py`), which serves both eras and
which mcpgate speaks to in the session era, and py_modern_server.py (prefix `pym`), which
serves 2026-07-28 alone; that mcpgate also fronts mcp-fixture, of the session era only. The
same client runs three times: `mode="legacy"` (initialize and a session), `mode="2026-07-28"`
(sessionless, pinned: no discover) and `mode="auto"`, which must settle on the session era there
(not every server speaks 2026-07-28, and server/discover says so as a session-era server would),
and on 2026-07-28 through a second mcpgate (--url-2026) in front of the two Python servers only. For each client era and server, each feature: call,
progress, sampling, elicitation, roots, list_changed (the session's notification, or
`subscriptions/listen`), cancel (notifications/cancelled, or closing the call's stream).

Prints one PASS/FAIL line per check, then the table client era x server x feature; writes the
results as JSON (--json) for interop.sh's table; exits 1 if any check failed.

    modern_checks.py --url http://127.0.0.1:PORT/mcp --url-2026 http://127.0.0.1:PORT2/mcp [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
import uuid
import warnings
from typing import Any

import anyio
from mcp import Client, MCPDeprecationWarning

from checks import RESULTS, check, finish, record, short, text_of
from client_checks import REC, ROOT_URI, SAMPLED, new_client

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

MODERN = "2026-07-28"
SERVERS = {"py": "session era (py_server.py, both eras)", "pym": "2026-07-28 only (py_modern_server.py)"}
FEATURES = ["call", "progress", "sampling", "elicitation", "roots", "list_changed", "cancel"]
# (client era, server prefix, feature) -> passed
TABLE: dict[tuple[str, str, str], bool] = {}


async def feature(era: str, server: str, name: str, body: Any, timeout: float = 30) -> None:
    before = len(RESULTS)
    await check(f"{era} client -> {server} server: {name}", body, timeout)
    TABLE[(era, server, name)] = len(RESULTS) > before and RESULTS[-1]["ok"]


async def call_text(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"isError: {short(text_of(result))}")
    return text_of(result)


async def features(client: Client, era: str, server: str) -> None:
    p = f"{server}__"
    await client.list_tools()  # a 2026-07-28 client calls only what it listed

    async def call() -> tuple[bool, str]:
        text = await call_text(client, p + "echo", {"text": era})
        return text.endswith(f"echo: {era}"), text

    async def progress() -> tuple[bool, str]:
        seen: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            seen.append(value)

        result = await client.call_tool(p + "progress", {"steps": 3}, progress_callback=on_progress)
        return seen == [1.0, 2.0, 3.0] and "done after 3" in text_of(result), f"progress {seen}; {text_of(result)}"

    async def sampling() -> tuple[bool, str]:
        before = REC.sampling
        text = await call_text(client, p + "sample", {"prompt": "hello"})
        return SAMPLED in text and REC.sampling == before + 1, f"{text} (callback ran {REC.sampling - before}x)"

    async def elicitation() -> tuple[bool, str]:
        before = REC.elicitation
        text = await call_text(client, p + "ask", {})
        return "elicited: Interop" in text and REC.elicitation == before + 1, f"{text} ({REC.elicitation - before}x)"

    async def roots() -> tuple[bool, str]:
        before = REC.roots
        text = await call_text(client, p + "roots", {})
        return ROOT_URI in text and REC.roots == before + 1, f"{text} ({REC.roots - before}x)"

    async def list_changed() -> tuple[bool, str]:
        name = f"dyn_{era.replace('-', '')}_{uuid.uuid4().hex[:6]}"
        if era == "legacy":
            before = REC.count("notifications/tools/list_changed")
            await call_text(client, p + "add_tool", {"name": name})
            came = await REC.wait_for("notifications/tools/list_changed", before, 5.0)
        else:
            came = False
            async with client.listen(tools_list_changed=True) as subscription:
                await call_text(client, p + "add_tool", {"name": name})
                with anyio.move_on_after(5):
                    async for _event in subscription:
                        came = True
                        break
        listed = any(t.name == p + name for t in (await client.list_tools()).tools)
        text = await call_text(client, p + name, {}) if listed else ""
        return came and listed and "added at run time" in text, f"list_changed {came}; listed {listed}; {text}"

    async def cancel() -> tuple[bool, str]:
        tag = uuid.uuid4().hex[:8]
        with anyio.move_on_after(0.5):
            await client.call_tool(p + "cancellable", {"ms": 10000, "tag": tag})
        deadline = time.monotonic() + 5
        text = ""
        while time.monotonic() < deadline:
            text = await call_text(client, p + "cancelled", {"tag": tag})
            if text.endswith("cancelled: 1"):
                return True, f"the server saw the call cancelled: {text}"
            await anyio.sleep(0.1)
        return False, f"after 5 s the server says {text!r}"

    for name, body in [
        ("call", call),
        ("progress", progress),
        ("sampling", sampling),
        ("elicitation", elicitation),
        ("roots", roots),
        ("list_changed", list_changed),
        ("cancel", cancel),
    ]:
        await feature(era, server, name, body)


def discover_probe(url: str, meta: bool, offered: bool) -> tuple[bool, str]:
    """server/discover by hand: as a 2026-07-28 client sends it (its `_meta` and version header),
    or bare (neither), as a client that does not know the era yet may."""
    params: dict[str, Any] = {}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if meta:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "mcpgate-interop", "version": "1.0"},
        }
        headers |= {"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": params}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, answer = response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        status, answer = e.code, json.loads(e.read() or b"{}")
    result = answer.get("result", {})
    versions = result.get("supportedVersions", [])
    detail = f"HTTP {status}, supportedVersions {versions}, ttlMs {result.get('ttlMs')} {answer.get('error', '')}"
    if not offered:
        # What a session-era server answers a request without a session: every SDK's auto mode initializes then.
        return status == 400 and answer.get("error", {}).get("code") == -32600, detail
    return status == 200 and MODERN in versions and "2025-11-25" in versions, detail


async def run(url: str, url_2026: str) -> None:
    for gate, offered, what in [(url, False, "session era only (a server of it behind)"), (url_2026, True, "both eras")]:
        for meta, how in [(True, "with the era's _meta and headers"), (False, "bare (no _meta, no version header)")]:
            try:
                ok, detail = discover_probe(gate, meta, offered)
            except Exception as e:  # a failed check, whatever the cause
                ok, detail = False, f"{type(e).__name__}: {e}"
            record(f"server/discover {how}: {what} offered", ok, detail)
    for mode, era in [("legacy", "legacy"), (MODERN, MODERN)]:
        try:
            async with new_client(url, mode=mode) as client:
                version = client.protocol_version
                modern = version == MODERN
                record(f'Client(mode="{mode}") through mcpgate', modern == (mode == MODERN), f"protocol {version}")
                for server in SERVERS:
                    await features(client, era, server)
        except Exception as e:  # the client itself failed: count it
            record(f'Client(mode="{mode}") through mcpgate', False, f"{type(e).__name__}: {e}")

    def auto(gate: str, want_modern: bool) -> Any:
        async def body() -> tuple[bool, str]:
            async with new_client(gate, mode="auto") as client:
                version = client.protocol_version
                await client.list_tools()
                texts = [await call_text(client, f"{s}__echo", {"text": "auto"}) for s in SERVERS]
                ok = (version == MODERN) == want_modern and all(t.endswith("echo: auto") for t in texts)
                return ok, f"negotiated {version}; {texts}"

        return body

    await check('Client(mode="auto") settles on the session era where a server speaks only that', auto(url, False))
    await check('Client(mode="auto") settles on 2026-07-28 where every server speaks it', auto(url_2026, True))


def print_table() -> None:
    print("\nclient era x server x feature (through mcpgate):")
    print(f"{'client':<11} {'server':<40} " + " ".join(f"{f:<12}" for f in FEATURES))
    for era in ["legacy", MODERN]:
        for server, label in SERVERS.items():
            cells = []
            for f in FEATURES:
                ok = TABLE.get((era, server, f))
                cells.append(f"{'-' if ok is None else 'works' if ok else 'FAILS':<12}")
            print(f"{era:<11} {label:<40} " + " ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="mcpgate's /mcp endpoint, in front of py, pym and the fixture")
    parser.add_argument("--url-2026", required=True, help="an mcpgate in front of py and pym only")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    try:
        anyio.run(run, args.url, args.url_2026)
    except Exception as e:  # the run itself failed: count it
        record("modern_checks.py ran to its end", False, f"{type(e).__name__}: {e}")
    print_table()
    return finish("Both-era checks", args.json)


if __name__ == "__main__":
    sys.exit(main())
