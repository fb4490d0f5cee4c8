"""The official Python client (`mcp` 2.3.0, Streamable HTTP) against mcpgate,
which fronts server-everything (prefix `everything`), the Python SDK server
of py_server.py (prefix `py`) and mcp-fixture (prefix `fx`).

With the SDK client (declaring sampling, elicitation and roots): tool lists and
calls, progress, sampling/elicitation/roots round trips, list_changed,
logging, cancellation, resources, prompts, completion, ping. With bare HTTP,
what the SDK does not do on demand: dropping and resuming SSE streams with
Last-Event-ID, a 2025-03-26 batch. (The 2026-07-28 era, and `mode="auto"`: modern_checks.py.)

Prints one PASS/FAIL line per check and a summary; writes the results as JSON
(--json) for interop.sh's table; exits 1 if any check failed.

    client_checks.py --url http://127.0.0.1:PORT/mcp --fixture-stats http://127.0.0.1:PORT/stats
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import sys
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
from mcp import Client, MCPDeprecationWarning, MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

import flow
from checks import check, finish, record, short, text_of

# logging/setLevel, resources/subscribe and roots are deprecated in 2026-07-28, and exercised here on purpose.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

EV, PY, FX = "everything", "py", "fx"
SAMPLED = "interop-sampled-text"
ROOT_URI = "file:///tmp/interop-root"
CALL_TIMEOUT = 30

# server-everything 2026.8.31: registerTools, plus registerConditionalTools for a client that
# declares sampling, elicitation and roots (src: dist/tools/index.js).
EVERYTHING_TOOLS = [
    "echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
    "get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource",
    "toggle-simulated-logging", "toggle-subscriber-updates", "trigger-long-running-operation",
    "get-roots-list", "trigger-elicitation-request", "trigger-sampling-request", "trigger-url-elicitation",
]  # fmt: skip
PY_TOOLS = ["echo", "add", "progress", "add_tool", "sample", "ask", "roots"]
FIXTURE_TOOLS = [
    "echo", "add", "whoami", "slow", "sample", "elicit", "roots", "notify", "log", "cancellable", "fail", "big",
]  # fmt: skip
# Listed, but not called here, and why.
NOT_CALLED = {
    f"{EV}__trigger-url-elicitation": "URL-mode elicitation: needs a browser flow",
    f"{EV}__simulate-research-query": "task-augmented (experimental tasks API)",
    f"{EV}__trigger-sampling-request-async": "task-augmented (experimental tasks API)",
    f"{EV}__trigger-elicitation-request-async": "task-augmented (experimental tasks API)",
}


class Recorder:
    """What the server side sent the client: notifications, logs, requests."""

    def __init__(self) -> None:
        self.notifications: list[tuple[str, Any]] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.sampling = 0
        self.elicitation = 0
        self.roots = 0

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.notifications if m == method)

    async def wait_for(self, method: str, above: int, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(method) > above:
                return True
            await anyio.sleep(0.05)
        return False


REC = Recorder()


async def on_sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    REC.sampling += 1
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED),
        model="interop-model",
        stop_reason="endTurn",
    )


async def on_elicitation(context: Any, params: Any) -> types.ElicitResult:
    REC.elicitation += 1
    schema = getattr(params, "requested_schema", None)
    if schema is None:  # URL mode
        return types.ElicitResult(action="decline")
    return types.ElicitResult(action="accept", content=flow.fill_form(schema))


async def on_roots(context: Any) -> types.ListRootsResult:
    REC.roots += 1
    return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="interop-root")])


async def on_log(params: types.LoggingMessageNotificationParams) -> None:
    REC.logs.append(params)


async def on_message(message: Any) -> None:
    if isinstance(message, Exception):
        REC.notifications.append(("exception", repr(message)))
        return
    REC.notifications.append((getattr(message, "method", type(message).__name__), getattr(message, "params", None)))


def new_client(url: str, mode: str = "legacy") -> Client:
    return Client(
        url,
        mode=mode,
        read_timeout_seconds=CALL_TIMEOUT,
        sampling_callback=on_sampling,
        elicitation_callback=on_elicitation,
        list_roots_callback=on_roots,
        logging_callback=on_log,
        message_handler=on_message,
        client_info=types.Implementation(name="mcpgate-interop", version="1.0"),
        cache=None,
    )


PAGES: dict[str, int] = {}


async def all_pages(fetch: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a list, page by page (`PAGES[field]`: how many pages it took)."""
    items: list[Any] = []
    cursor = None
    for pages in range(1, 101):
        page = await fetch(cursor=cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        PAGES[field] = pages
        if not cursor:
            break
    return items


def fixture_cancels(stats_url: str) -> list[Any]:
    with urllib.request.urlopen(stats_url, timeout=5) as response:
        return json.load(response).get("cancelled", [])


async def run(url: str, stats_url: str) -> None:
    async with new_client(url) as client:
        record(
            "initialize (legacy handshake) through mcpgate",
            client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS,
            f"protocol {client.protocol_version}, server {client.server_info.name if client.server_info else None}",
        )
        await tools_checks(client)
        await call_checks(client)
        await progress_checks(client)
        await round_trip_checks(client)
        await list_changed_checks(client)
        await logging_checks(client)
        await cancellation_check(client, stats_url)
        await resource_checks(client)
        await prompt_checks(client)
        await check("ping", lambda: _ping(client))
    await transport_checks(url)


async def _ping(client: Client) -> tuple[bool, str]:
    await client.session.send_ping()
    return True, "empty result"


async def tools_checks(client: Client) -> None:
    tools = await all_pages(client.list_tools, "tools")
    names = {t.name for t in tools}
    expected = {
        EV: [f"{EV}__{n}" for n in EVERYTHING_TOOLS],
        PY: [f"{PY}__{n}" for n in PY_TOOLS],
        FX: [f"{FX}__{n}" for n in FIXTURE_TOOLS],
    }
    for server, wanted in expected.items():
        missing = [n for n in wanted if n not in names]
        listed = sorted(n for n in names if n.startswith(f"{server}__"))
        record(
            f"tools/list: every {server} tool under prefix `{server}__`",
            not missing,
            f"{len(listed)} listed" + (f"; missing {missing}" if missing else ""),
        )
    strays = sorted(n for n in names if n.split("__", 1)[0] not in (EV, PY, FX))
    record(
        "tools/list: no tool without a server prefix",
        not strays,
        ", ".join(strays) or f"{len(names)} tools in {PAGES['tools']} page(s)",
    )
    extra = sorted(n for n in names if n.startswith(f"{EV}__") and n.removeprefix(f"{EV}__") not in EVERYTHING_TOOLS)
    if extra:
        print(f"INFO  server-everything also lists: {', '.join(extra)}")
    skipped = [f"{n} ({why})" for n, why in NOT_CALLED.items() if n in names]
    if skipped:
        print(f"INFO  listed but not called: {'; '.join(skipped)}")


def expect_text(
    client: Client, name: str, args: dict[str, Any], needle: str
) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def body() -> tuple[bool, str]:
        result = await client.call_tool(name, args)
        text = text_of(result)
        return (not result.is_error and needle in text), short(text)

    return body


def expect_content(
    client: Client, name: str, args: dict[str, Any], kind: str
) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def body() -> tuple[bool, str]:
        result = await client.call_tool(name, args)
        kinds = [getattr(c, "type", "?") for c in result.content]
        return (not result.is_error and kind in kinds), f"content types {kinds}"

    return body


async def call_checks(client: Client) -> None:
    calls: list[tuple[str, Callable[[], Awaitable[tuple[bool, str]]]]] = [
        (f"{EV}__echo", expect_text(client, f"{EV}__echo", {"message": "hello interop"}, "Echo: hello interop")),
        (f"{EV}__get-sum", expect_text(client, f"{EV}__get-sum", {"a": 2, "b": 3}, "is 5")),
        (f"{EV}__get-tiny-image", expect_content(client, f"{EV}__get-tiny-image", {}, "image")),
        (
            f"{EV}__get-annotated-message",
            expect_content(client, f"{EV}__get-annotated-message", {"messageType": "success"}, "text"),
        ),
        (
            f"{EV}__get-resource-links",
            expect_content(client, f"{EV}__get-resource-links", {"count": 2}, "resource_link"),
        ),
        (
            f"{EV}__get-resource-reference",
            expect_content(
                client, f"{EV}__get-resource-reference", {"resourceType": "Text", "resourceId": 1}, "resource"
            ),
        ),
        (f"{EV}__get-structured-content", lambda: structured(client)),
        (f"{EV}__get-env", expect_content(client, f"{EV}__get-env", {}, "text")),
        (f"{EV}__toggle-simulated-logging (on, then off)", lambda: toggle(client, f"{EV}__toggle-simulated-logging")),
        (f"{EV}__toggle-subscriber-updates (on, then off)", lambda: toggle(client, f"{EV}__toggle-subscriber-updates")),
        (f"{PY}__echo", expect_text(client, f"{PY}__echo", {"text": "hi"}, "py echo: hi")),
        (f"{PY}__add", expect_text(client, f"{PY}__add", {"a": 20, "b": 22}, "42")),
        (f"{FX}__echo", expect_text(client, f"{FX}__echo", {"text": "hi fixture"}, "hi fixture")),
        (f"{FX}__add (structured content)", lambda: fixture_add(client)),
        (f"{FX}__whoami", expect_text(client, f"{FX}__whoami", {}, "fx:")),
        (f"{FX}__fail (tool error passes through)", lambda: tool_error(client)),
        (f"{FX}__big (100 kB result)", lambda: big(client)),
        (
            f"{FX}__cancellable (runs to its end)",
            expect_text(client, f"{FX}__cancellable", {"ms": 100}, "not cancelled"),
        ),
        ("of an unknown tool: JSON-RPC error -32602", lambda: unknown_tool(client)),
    ]
    for name, body in calls:
        await check(f"tools/call {name}", body)


async def structured(client: Client) -> tuple[bool, str]:
    result = await client.call_tool(f"{EV}__get-structured-content", {"location": "Chicago"})
    data = result.structured_content or {}
    return (not result.is_error and "temperature" in data), f"structuredContent {data}"


async def toggle(client: Client, name: str) -> tuple[bool, str]:
    on = await client.call_tool(name, {})
    off = await client.call_tool(name, {})
    ok = not on.is_error and not off.is_error and "Started" in text_of(on) and "Stopped" in text_of(off)
    return ok, f"{short(text_of(on), 40)} / {short(text_of(off), 40)}"


async def unknown_tool(client: Client) -> tuple[bool, str]:
    try:
        result = await client.call_tool(f"{FX}__no_such_tool", {})
    except MCPError as e:
        return e.code == -32602, f"error {e.code}: {short(str(e), 60)}"
    return False, f"a result instead of an error: {short(text_of(result))}"


async def fixture_add(client: Client) -> tuple[bool, str]:
    result = await client.call_tool(f"{FX}__add", {"a": 2, "b": 40})
    return (result.structured_content == {"sum": 42}), f"structuredContent {result.structured_content}"


async def tool_error(client: Client) -> tuple[bool, str]:
    result = await client.call_tool(f"{FX}__fail", {})
    return bool(result.is_error), f"isError={result.is_error}: {short(text_of(result))}"


async def big(client: Client) -> tuple[bool, str]:
    result = await client.call_tool(f"{FX}__big", {"bytes": 100_000})
    return len(text_of(result)) == 100_000, f"{len(text_of(result))} bytes"


def progress_call(
    client: Client, name: str, args: dict[str, Any], want: int
) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def body() -> tuple[bool, str]:
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        result = await client.call_tool(name, args, progress_callback=on_progress)
        increasing = all(a < b for a, b in itertools.pairwise(seen))
        ok = not result.is_error and len(seen) == want and increasing
        return ok, f"{len(seen)} progress notifications {seen} (want {want}); result {short(text_of(result), 50)}"

    return body


async def progress_checks(client: Client) -> None:
    await check(
        f"progress during tools/call {EV}__trigger-long-running-operation",
        progress_call(client, f"{EV}__trigger-long-running-operation", {"duration": 1, "steps": 4}, 4),
    )
    await check(f"progress during tools/call {PY}__progress", progress_call(client, f"{PY}__progress", {"steps": 3}, 3))
    await check(
        f"progress during tools/call {FX}__slow", progress_call(client, f"{FX}__slow", {"ms": 400, "steps": 4}, 4)
    )
    await check(f"progress of 3 concurrent {FX}__slow calls stays with its call", lambda: concurrent_progress(client))


async def concurrent_progress(client: Client) -> tuple[bool, str]:
    """Three calls at once on one session: each gets its own progress and its own result."""
    seen: dict[int, list[float]] = {0: [], 1: [], 2: []}
    texts: dict[int, str] = {}

    async def one(n: int) -> None:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen[n].append(progress)

        steps = n + 2
        result = await client.call_tool(f"{FX}__slow", {"ms": 300, "steps": steps}, progress_callback=on_progress)
        texts[n] = text_of(result)

    async with anyio.create_task_group() as group:
        for n in range(3):
            group.start_soon(one, n)
    ok = all(seen[n] == [float(i) for i in range(1, n + 3)] and texts.get(n) == "done" for n in range(3))
    return ok, f"progress per call {seen}; results {texts}"


async def round_trip_checks(client: Client) -> None:
    cases = [
        ("sampling", f"{EV}__trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20}, SAMPLED),
        ("sampling", f"{PY}__sample", {"prompt": "say hi"}, f"py sampled: {SAMPLED}"),
        ("sampling", f"{FX}__sample", {"prompt": "say hi"}, f"sampled: {SAMPLED}"),
        ("elicitation", f"{EV}__trigger-elicitation-request", {}, "Name: Interop"),
        ("elicitation", f"{PY}__ask", {}, "py elicited: Interop"),
        ("elicitation", f"{FX}__elicit", {"message": "name?"}, "elicited: accept"),
        ("roots", f"{EV}__get-roots-list", {}, ROOT_URI),
        ("roots", f"{PY}__roots", {}, ROOT_URI),
        ("roots", f"{FX}__roots", {}, ROOT_URI),
    ]
    for kind, name, args, needle in cases:
        await check(f"{kind} round trip via tools/call {name}", expect_text(client, name, args, needle))
    print(f"INFO  callbacks ran: sampling {REC.sampling}, elicitation {REC.elicitation}, roots {REC.roots}")

    async def concurrent() -> tuple[bool, str]:
        # Three servers ask the client at once; each answer must reach the server that asked.
        calls = {
            f"{EV}__trigger-elicitation-request": ({}, "Name: Interop"),
            f"{PY}__sample": ({"prompt": "x"}, f"py sampled: {SAMPLED}"),
            f"{FX}__roots": ({}, ROOT_URI),
            f"{PY}__ask": ({}, "py elicited: Interop"),
            f"{FX}__sample": ({"prompt": "y"}, f"sampled: {SAMPLED}"),
        }
        texts: dict[str, str] = {}

        async def one(name: str) -> None:
            texts[name] = text_of(await client.call_tool(name, calls[name][0]))

        async with anyio.create_task_group() as group:
            for name in calls:
                group.start_soon(one, name)
        wrong = [n for n, (_, needle) in calls.items() if needle not in texts.get(n, "")]
        return not wrong, f"{len(calls) - len(wrong)}/{len(calls)} answered right" + (
            f"; wrong: {wrong}" if wrong else ""
        )

    await check("5 concurrent server->client requests from 3 servers each reach the right server", concurrent)

    async def roots_changed() -> tuple[bool, str]:
        # server-everything answers notifications/roots/list_changed (once it synced roots, which
        # get-roots-list above did) with a roots/list request of its own, on its GET stream.
        before = REC.roots
        await client.session.send_roots_list_changed()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and REC.roots == before:
            await anyio.sleep(0.05)
        return REC.roots > before, f"roots/list requests after the notification: {REC.roots - before}"

    await check(
        "notifications/roots/list_changed reaches servers; server-everything asks roots/list again", roots_changed
    )


async def list_changed_checks(client: Client) -> None:
    for kind in ("tools", "prompts", "resources"):
        method = f"notifications/{kind}/list_changed"

        async def body(kind: str = kind, method: str = method) -> tuple[bool, str]:
            before = REC.count(method)
            result = await client.call_tool(f"{FX}__notify", {"kind": kind})
            arrived = await REC.wait_for(method, before)
            return arrived, f"fixture answered `{text_of(result)}`; {method} {'arrived' if arrived else 'never came'}"

        await check(f"{kind}/list_changed from mcp-fixture (its GET stream) reaches the client", body)

    async def added_tool() -> tuple[bool, str]:
        method = "notifications/tools/list_changed"
        before = REC.count(method)
        await client.call_tool(f"{PY}__add_tool", {"name": "dyn_tool"})
        arrived = await REC.wait_for(method, before)
        names = {t.name for t in await all_pages(client.list_tools, "tools")}
        listed = f"{PY}__dyn_tool" in names
        called = text_of(await client.call_tool(f"{PY}__dyn_tool", {})) if listed else ""
        ok = arrived and listed and "added at run time" in called
        return ok, f"list_changed {'arrived' if arrived else 'missing'}; listed={listed}; call: {short(called, 40)}"

    await check("tools/list_changed from the Python server; new tool listed and callable", added_tool)

    async def everything_resource() -> tuple[bool, str]:
        method = "notifications/resources/list_changed"
        before = REC.count(method)
        data = "data:text/plain;base64,aGVsbG8gaW50ZXJvcA=="
        args = {"name": "interop.txt.gz", "data": data, "outputType": "resource"}
        result = await client.call_tool(f"{EV}__gzip-file-as-resource", args)
        arrived = await REC.wait_for(method, before)
        uri = next((c.resource.uri for c in result.content if getattr(c, "type", "") == "resource"), None)
        read = await client.read_resource(str(uri)) if uri else None
        ok = not result.is_error and arrived and read is not None and len(read.contents) == 1
        return ok, f"resource {uri}; list_changed {'arrived' if arrived else 'missing'}; read {'ok' if read else 'no'}"

    await check(f"resources/list_changed from server-everything ({EV}__gzip-file-as-resource)", everything_resource)


async def logging_checks(client: Client) -> None:
    async def body() -> tuple[bool, str]:
        await client.set_logging_level("info")
        before = len(REC.logs)
        await client.call_tool(f"{FX}__log", {"level": "warning", "message": "interop-log-line"})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(log.data == "interop-log-line" for log in REC.logs[before:]):
            await anyio.sleep(0.05)
        got = [log for log in REC.logs[before:] if log.data == "interop-log-line"]
        return bool(got), f"{len(got)} log message(s) at {[log.level for log in got]}"

    await check("logging/setLevel, then notifications/message from a tool", body)


async def cancellation_check(client: Client, stats_url: str) -> None:
    async def body() -> tuple[bool, str]:
        before = len(fixture_cancels(stats_url))
        with anyio.move_on_after(0.5):
            await client.call_tool(f"{FX}__cancellable", {"ms": 20_000})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(fixture_cancels(stats_url)) <= before:
            await anyio.sleep(0.1)
        cancels = fixture_cancels(stats_url)[before:]
        after = text_of(await client.call_tool(f"{FX}__echo", {"text": "still here"}))
        ok = len(cancels) == 1 and after == "still here"
        return ok, f"fixture saw {len(cancels)} notifications/cancelled {cancels}; session still answers: {after!r}"

    await check("notifications/cancelled reaches the server working on the call", body)


async def resource_checks(client: Client) -> None:
    async def listing() -> tuple[bool, str]:
        resources = await all_pages(client.list_resources, "resources")
        uris = [str(r.uri) for r in resources]
        want = ["py://readme", f"fixture://{FX}/readme"]
        everything = [u for u in uris if u.startswith("demo://")]
        ok = all(u in uris for u in want) and bool(everything)
        return ok, f"{len(uris)} resources ({len(everything)} from server-everything)"

    await check("resources/list merges all servers", listing)

    async def templates() -> tuple[bool, str]:
        found = await all_pages(client.list_resource_templates, "resource_templates")
        uris = [t.uri_template for t in found]
        want = ["demo://resource/dynamic/text/{resourceId}", f"fixture://{FX}/items/{{id}}"]
        return all(u in uris for u in want), f"{uris}"

    await check("resources/templates/list merges all servers", templates)

    resources = await all_pages(client.list_resources, "resources")
    first_everything = next((str(r.uri) for r in resources if str(r.uri).startswith("demo://")), "demo://none")
    reads = [
        (first_everything, None),
        ("py://readme", "readme of the Python server"),
        (f"fixture://{FX}/readme", f"readme of {FX}"),
        ("demo://resource/dynamic/text/1", "1"),
        (f"fixture://{FX}/items/42", f"item 42 of {FX}"),
    ]
    for uri, needle in reads:

        async def read(uri: str = uri, needle: str | None = needle) -> tuple[bool, str]:
            result = await client.read_resource(uri)
            content = result.contents[0]
            text = getattr(content, "text", None) or f"<blob {len(getattr(content, 'blob', ''))} chars>"
            ok = len(result.contents) >= 1 and (needle is None or needle in text)
            return ok, short(text, 60)

        await check(f"resources/read {uri}", read)

    async def subscribe() -> tuple[bool, str]:
        method = "notifications/resources/updated"
        before = REC.count(method)
        await client.subscribe_resource(f"fixture://{FX}/readme")
        arrived = await REC.wait_for(method, before)
        await client.unsubscribe_resource(f"fixture://{FX}/readme")
        return arrived, f"{method} {'arrived' if arrived else 'never came'}"

    await check("resources/subscribe (fixture) -> notifications/resources/updated", subscribe)


async def prompt_checks(client: Client) -> None:
    async def listing() -> tuple[bool, str]:
        names = {p.name for p in await all_pages(client.list_prompts, "prompts")}
        want = [f"{EV}__simple-prompt", f"{EV}__args-prompt", f"{PY}__greet", f"{FX}__greet"]
        missing = [n for n in want if n not in names]
        return not missing, f"{len(names)} prompts" + (f"; missing {missing}" if missing else "")

    await check("prompts/list merges all servers under prefixes", listing)
    gets = [
        (f"{EV}__simple-prompt", None, "This is a simple prompt without arguments."),
        (f"{EV}__args-prompt", {"city": "Paris"}, "Paris"),
        (f"{PY}__greet", {"name": "Ada"}, "Hello, Ada, from Python!"),
        (f"{FX}__greet", {"name": "Ada"}, "Hello, Ada!"),
    ]
    for name, args, needle in gets:

        async def get(name: str = name, args: dict[str, str] | None = args, needle: str = needle) -> tuple[bool, str]:
            result = await client.get_prompt(name, args)
            texts = " ".join(getattr(m.content, "text", "") for m in result.messages)
            return needle in texts, short(texts, 60)

        await check(f"prompts/get {name}", get)

    async def complete() -> tuple[bool, str]:
        ref = types.PromptReference(type="ref/prompt", name=f"{FX}__greet")
        result = await client.complete(ref, {"name": "name", "value": "a"})
        values = result.completion.values
        return "alice" in values, f"values {values}"

    await check(f"completion/complete for prompt {FX}__greet", complete)


class RawSession:
    """Bare HTTP to mcpgate, for what the SDK client does not do on demand: drop a stream."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        self.session_id = ""
        self.version = "2025-11-25"

    def headers(self, accept: str = "application/json, text/event-stream") -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept, "MCP-Protocol-Version": self.version}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    def post(self, message: dict[str, Any]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        connection.request("POST", self.path, json.dumps(message), self.headers())
        return connection, connection.getresponse()

    def initialize(self) -> None:
        params = {"protocolVersion": self.version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        connection, response = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        self.session_id = response.getheader("Mcp-Session-Id") or ""
        response.read()
        connection.close()
        connection, response = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        response.read()
        connection.close()

    def get(self, last_event_id: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        headers = self.headers("text/event-stream")
        headers["Last-Event-ID"] = last_event_id
        connection.request("GET", self.path, headers=headers)
        return connection, connection.getresponse()

    def delete(self) -> None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        connection.request("DELETE", self.path, headers=self.headers())
        connection.getresponse().read()
        connection.close()


def sse_events(response: http.client.HTTPResponse) -> Any:
    """(id, data) of each SSE event until the stream ends."""
    event_id, data = None, []
    while True:
        line = response.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line == "":
            if event_id is not None or data:
                yield event_id, "\n".join(data)
            event_id, data = None, []
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def upstream_resume(url: str, away: float) -> tuple[bool, str]:
    """A client loses the SSE answer of a tools/call (900 ms, 3 progress steps) after one
    progress event and resumes it `away` seconds later with GET + Last-Event-ID: it must get
    the rest (no duplicate) and the response, whether the call ended meanwhile or not."""
    raw = RawSession(url)
    raw.initialize()
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": f"{FX}__slow", "arguments": {"ms": 900, "steps": 3}, "_meta": {"progressToken": "p"}},
    }
    connection, response = raw.post(call)
    content_type = response.getheader("Content-Type", "")
    first: list[tuple[str | None, str]] = []
    for event in sse_events(response):
        first.append(event)
        if event[1]:  # the first message after the priming event
            break
    connection.sock.close() if connection.sock else None  # the client goes away mid-stream
    connection.close()
    time.sleep(away)
    last_id = next((i for i, _ in reversed(first) if i), None)
    if last_id is None:
        raw.delete()
        return False, f"no event id before the drop ({content_type}): {first}"
    connection, response = raw.get(last_id)
    status = response.status
    rest = list(sse_events(response)) if status == 200 else []
    connection.close()
    raw.delete()
    messages = [json.loads(d) for _, d in first + rest if d]
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    answered = [m for m in messages if m.get("id") == 7 and "result" in m]
    ids = [i for i, _ in first + rest if i]
    streams = {i.split("-")[0] for i in ids}
    ok = status == 200 and progress == [1, 2, 3] and len(answered) == 1 and len(streams) == 1
    return ok, (
        f"before the drop {len(first)} event(s), last id {last_id}; GET + Last-Event-ID -> HTTP {status}, "
        f"{len(rest)} more event(s); progress {progress}; response {'once' if len(answered) == 1 else len(answered)}; "
        f"ids {ids}"
    )


def read_events_for(response: http.client.HTTPResponse, seconds: float) -> list[tuple[str | None, str]]:
    """The events of a GET stream that arrive within `seconds` (it stays open)."""
    sock = getattr(getattr(response.fp, "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(seconds)
    events: list[tuple[str | None, str]] = []
    try:
        for event in sse_events(response):
            events.append(event)
    except OSError:  # the timeout: nothing more for now
        pass
    return events


def get_stream_resume_twice(url: str) -> tuple[bool, str]:
    """The standalone GET stream, lost and resumed twice. Each time a notification is sent
    while the client is away; the client resumes with the id of the last event it received,
    as an EventSource does. Both notifications must arrive."""
    raw = RawSession(url)
    raw.initialize()
    ids = iter(range(100, 200))

    def notify(kind: str) -> None:
        params = {"name": f"{FX}__notify", "arguments": {"kind": kind}}
        connection, response = raw.post({"jsonrpc": "2.0", "id": next(ids), "method": "tools/call", "params": params})
        response.read()
        connection.close()

    seen: list[list[tuple[str | None, str]]] = []
    connection, response = raw.get("")
    seen.append(read_events_for(response, 0.5))
    for kind in ("prompts", "resources"):
        last = [i for batch in seen for i, _ in batch if i][-1]
        connection.close()  # the client goes away
        time.sleep(0.2)
        notify(kind)
        time.sleep(0.2)
        connection, response = raw.get(last)
        seen.append(read_events_for(response, 1.0))
    connection.close()
    raw.delete()
    got = [d for batch in seen for _, d in batch if d]
    missing = [k for k in ("prompts", "resources") if not any(f"notifications/{k}/list_changed" in d for d in got)]
    trail = " | ".join(",".join(i or "-" for i, _ in batch) for batch in seen)
    return not missing, f"event ids per connection: {trail}" + (f"; LOST: {missing} list_changed" if missing else "")


def batch_2025_03_26(url: str) -> tuple[bool, str]:
    """A 2025-03-26 client may batch; mcpgate answers a batch with an array of responses."""
    raw = RawSession(url)
    raw.version = "2025-03-26"
    raw.initialize()
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": f"{FX}__echo", "arguments": {"text": "b"}},
        },
    ]
    connection = http.client.HTTPConnection(raw.host, raw.port, timeout=10)
    connection.request("POST", raw.path, json.dumps(batch), raw.headers())
    response = connection.getresponse()
    body = response.read()
    connection.close()
    raw.delete()
    try:
        answers = json.loads(body)
    except ValueError:
        return False, f"HTTP {response.status}: {body[:120]!r}"
    by_id = {a.get("id"): a for a in answers} if isinstance(answers, list) else {}
    echoed = by_id.get(2, {}).get("result", {}).get("content", [{}])[0].get("text")
    ok = response.status == 200 and by_id.get(1, {}).get("result") == {} and echoed == "b"
    return ok, f"HTTP {response.status}, {len(by_id)} answers; ping {by_id.get(1, {}).get('result')}, echo {echoed!r}"


async def transport_checks(url: str) -> None:
    ok, detail = await anyio.to_thread.run_sync(upstream_resume, url, 1.2)
    record("tools/call SSE answer lost, resumed (GET + Last-Event-ID) after the call ended: rest replayed", ok, detail)
    ok, detail = await anyio.to_thread.run_sync(upstream_resume, url, 0.05)
    record("tools/call SSE answer lost, resumed (GET + Last-Event-ID) while the call runs: rest follows", ok, detail)
    ok, detail = await anyio.to_thread.run_sync(get_stream_resume_twice, url)
    record("GET stream lost and resumed twice (Last-Event-ID = last id received): nothing lost", ok, detail)
    ok, detail = await anyio.to_thread.run_sync(batch_2025_03_26, url)
    record("protocol 2025-03-26 session: a JSON-RPC batch is answered with an array", ok, detail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="mcpgate's /mcp endpoint")
    parser.add_argument("--fixture-stats", required=True, help="mcp-fixture's /stats URL")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    try:
        anyio.run(run, args.url, args.fixture_stats)
    except Exception as e:  # the session itself failed: count it
        record("client session through mcpgate", False, f"{type(e).__name__}: {e}")
    return finish("Python client checks", args.json)


if __name__ == "__main__":
    sys.exit(main())
