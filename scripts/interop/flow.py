"""The client matrix's flow, for every client driven from Python: the Python SDK
1.x and 2.x clients, the fastmcp client, mcp-remote (over its stdio) and the
MCP Inspector CLI. ts_client.cjs runs the same flow for the TypeScript SDK.

A client is an adapter (class Adapter): the few operations the flow needs, in
that client's own API. The flow runs every feature of FEATURES against every
server of matrix_spec.json that has it, either directly (one server, its own
names) or through mcpgate (all servers, names `<server>__<name>`), and writes
one JSON file: {client, target, features: {feature: {server: {ok, detail}}}},
where ok is true, false, or null for "n/a" (the client cannot do it).

    python client_X.py --url URL --target direct:py|mcpgate --out FILE
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from checks import short

# The flow uses deprecated parts of the protocol on purpose (logging/setLevel, resources/subscribe,
# roots are deprecated in 2026-07-28); the SDKs' warnings about them say nothing here.
warnings.simplefilter("ignore", DeprecationWarning)

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "matrix_spec.json")) as f:
    SPEC = json.load(f)
SAMPLED = SPEC["sampled"]
ROOT_URI = SPEC["root_uri"]
SERVERS = list(SPEC["servers"])

FEATURES = [
    "initialize", "ping", "tools/list", "prompts/list", "resources/list", "templates/list", "tools/call",
    "prompts/get", "resources/read", "cacheScope", "progress", "logging", "sampling", "elicitation", "roots",
    "subscribe", "list_changed", "GET stream", "resume", "cancel", "DELETE",
]  # fmt: skip
LISTS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources", "templates/list": "templates"}
STEP_TIMEOUT = 20  # seconds, per feature and server


class NotAvailable(Exception):
    """The client cannot do this (n/a, not a failure)."""


class Adapter:
    """One client. Subclasses implement what their client can do; the rest is n/a."""

    name = "?"

    def __init__(self, url: str) -> None:
        self.url = url
        self.notes: list[tuple[str, Any]] = []  # notifications received: (method, params as dict)
        self.callbacks = {"sampling": 0, "elicitation": 0, "roots": 0}

    async def connect(self) -> str:  # returns "protocol version, server name"
        raise NotAvailable

    async def list_page(self, kind: str, cursor: str | None) -> tuple[list[str], str | None]:
        raise NotAvailable  # kind: tools | prompts | resources | templates; names or URIs

    async def call(self, name: str, args: dict[str, Any], on_progress: Callable[[float], None] | None = None) -> str:
        raise NotAvailable  # the text of the result; raises on a JSON-RPC error or isError

    async def get_prompt(self, name: str, args: dict[str, str]) -> str:
        raise NotAvailable

    async def read(self, uri: str) -> str:
        raise NotAvailable

    async def ping(self) -> None:
        raise NotAvailable  # raises when the server does not answer it

    async def cache_scope(self, uri: str) -> str:
        raise NotAvailable  # the `cacheScope` of the read's answer as it came; NotAvailable in an era without one

    async def set_level(self, level: str) -> None:
        raise NotAvailable

    async def subscribe(self, uri: str, on: bool) -> None:
        raise NotAvailable

    async def call_then_cancel(self, name: str, args: dict[str, Any], after: float) -> None:
        raise NotAvailable

    async def resume(self, name: str, args: dict[str, Any]) -> str:
        raise NotAvailable

    async def close(self) -> None:
        pass

    def has_notifications(self) -> bool:
        """Whether this client shows the notifications it receives (else those features are n/a)."""
        return True

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.notes if m == method)

    async def wait_for(self, method: str, above: int, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(method) > above:
                return True
            await anyio.sleep(0.05)
        return False


# --- what every client answers when a server asks --------------------------------------------


def value_for(prop: dict[str, Any]) -> Any:
    kind = prop.get("type")
    if "enum" in prop:
        return prop["enum"][0]
    if "oneOf" in prop:
        return prop["oneOf"][0]["const"]
    if kind == "string":
        return {"email": "interop@example.com", "uri": "https://example.com", "date": "2000-01-01"}.get(
            prop.get("format", ""), "Interop"
        )
    if kind == "integer":
        return int(prop.get("minimum", 7))
    if kind == "number":
        return float(prop.get("minimum", 1.5))
    if kind == "boolean":
        return True
    if kind == "array":
        return [value_for(prop.get("items", {}))]
    return "Interop"


def fill_form(schema: dict[str, Any]) -> dict[str, Any]:
    """An answer to an elicitation form: every default, and a value for each required field."""
    required = set(schema.get("required", []))
    content: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        if "default" in prop:
            content[name] = prop["default"]
        elif name in required:
            content[name] = value_for(prop)
    return content


# --- the flow ---------------------------------------------------------------------------------


class Flow:
    def __init__(self, adapter: Adapter, target: str, dyn: str) -> None:
        self.a = adapter
        self.target = target
        self.through = target == "mcpgate"
        self.servers = SERVERS if self.through else [target.split(":", 1)[1]]
        self.dyn = dyn  # a name for tools added at run time, unique per run
        self.results: dict[str, dict[str, dict[str, Any]]] = {f: {} for f in FEATURES}

    def name(self, server: str, name: str) -> str:
        return f"{server}__{name}" if self.through else name

    def args(self, args: dict[str, Any]) -> dict[str, Any]:
        """`@dyn`: a new name each time; `@run`: a tag of this run (clients run at once)."""
        fresh = {"@dyn": lambda: f"{self.dyn}_{int(time.monotonic() * 1000) % 100000}", "@run": lambda: f"{self.dyn}_{os.getpid()}"}
        return {k: (fresh[v]() if isinstance(v, str) and v in fresh else v) for k, v in args.items()}

    def record(self, feature: str, server: str, ok: bool | None, detail: str) -> None:
        self.results[feature][server] = {"ok": ok, "detail": short(detail, 300)}
        mark = {True: "ok  ", False: "FAIL", None: "n/a "}[ok]
        print(f"  {mark} {feature:<15} {server:<11} {short(detail, 110)}", flush=True)

    async def step(self, feature: str, server: str, body: Callable[[], Awaitable[tuple[bool, str]]]) -> None:
        try:
            with anyio.fail_after(STEP_TIMEOUT):
                ok, detail = await body()
        except NotAvailable as e:
            self.record(feature, server, None, str(e) or f"{self.a.name} cannot do this")
            return
        except Exception as e:  # a failed check, whatever the cause
            self.record(feature, server, False, f"{type(e).__name__}: {e}")
            return
        self.record(feature, server, ok, detail)

    async def all_pages(self, kind: str) -> tuple[list[str], int]:
        items: list[str] = []
        cursor = None
        for pages in range(1, 51):
            page, cursor = await self.a.list_page(kind, cursor)
            items.extend(page)
            if not cursor:
                return items, pages
        raise RuntimeError("more than 50 pages")

    async def run(self) -> None:
        started = time.monotonic()
        try:
            # Not under fail_after: a client's connect enters task groups that outlive this call.
            # Its own timeouts bound it, and interop.sh bounds the whole process.
            info = await self.a.connect()
        except Exception as e:
            for server in self.servers:
                self.record("initialize", server, False, f"{type(e).__name__}: {e}")
            return
        for server in self.servers:
            self.record("initialize", server, True, info)
        # MATRIX_OPEN_ONLY=1 (the opening sequences): initialize and list the tools, nothing else.
        for feature in ["tools/list"] if os.environ.get("MATRIX_OPEN_ONLY") else FEATURES[1:]:
            for server in self.servers:
                spec = SPEC["servers"][server]
                await self.feature(feature, server, spec)
        print(f"  flow took {time.monotonic() - started:.1f} s", flush=True)

    async def feature(self, feature: str, server: str, spec: dict[str, Any]) -> None:
        if feature in LISTS:
            kind = LISTS[feature]
            want = spec.get(kind, [])
            if not want:
                return

            async def listing() -> tuple[bool, str]:
                items, pages = await self.all_pages(kind)
                mine = [i for i in items if not self.through or kind in ("resources", "templates") or i.startswith(f"{server}__")]
                if self.through and kind in ("tools", "prompts"):
                    mine = [i.split("__", 1)[1] for i in mine]
                if self.through and kind in ("resources", "templates"):
                    mine = [i for i in mine if owner(i) == server]
                missing = [w for w in want if w not in mine]
                listed = sorted({i for i in mine if not i.startswith("dyn_")})
                self.results.setdefault("_lists", {})[f"{kind}:{server}"] = listed  # type: ignore[index]
                detail = f"{len(listed)} in {pages} page(s)" + (f"; missing {missing}" if missing else "")
                return not missing, detail

            await self.step(feature, server, listing)
            return
        key = {
            "ping": "ping", "cacheScope": "cache",
            "tools/call": "call", "prompts/get": "prompt", "resources/read": "read", "progress": "progress",
            "logging": "logging", "sampling": "sampling", "elicitation": "elicitation", "roots": "roots",
            "subscribe": "subscribe", "list_changed": "list_changed", "GET stream": "get_stream",
            "resume": "resume", "cancel": "cancel", "DELETE": "delete",
        }[feature]  # fmt: skip
        if feature == "DELETE":
            return  # judged from what the client sent (the tap's log), after the client closed
        s = spec.get(key)
        if s is None:
            return
        body = getattr(self, "f_" + key)
        await self.step(feature, server, lambda: body(server, s))

    async def f_call(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        text = await self.a.call(self.name(server, s["tool"]), self.args(s["args"]))
        return s["expect"] in text, short(text, 80)

    async def f_prompt(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        text = await self.a.get_prompt(self.name(server, s["name"]), s["args"])
        return s["expect"] in text, short(text, 80)

    async def f_read(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        text = await self.a.read(s["uri"])
        return s["expect"] in text, short(text, 80)

    async def f_ping(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        await self.a.ping()
        return True, "answered"

    async def f_cache(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        # What the server says of the resource (matrix_spec.json): a cache shared between users
        # must not be told it may serve one user's resource to another.
        scope = await self.a.cache_scope(s["uri"])
        return scope == s["scope"], f"cacheScope {scope!r} (the server's: {s['scope']!r})"

    async def f_progress(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        seen: list[float] = []
        text = await self.a.call(self.name(server, s["tool"]), s["args"], on_progress=seen.append)
        increasing = all(x < y for x, y in itertools.pairwise(seen))
        return len(seen) == s["steps"] and increasing, f"{len(seen)} progress {seen} (want {s['steps']}); {short(text, 40)}"

    async def toggled(self, server: str, s: dict[str, Any], method: str, needle: str | None) -> tuple[bool, str]:
        before = len(self.a.notes)
        text = await self.a.call(self.name(server, s["tool"]), self.args(s["args"]))
        deadline = time.monotonic() + 5
        got: list[Any] = []
        while time.monotonic() < deadline and not got:
            got = [p for m, p in self.a.notes[before:] if m == method and (needle is None or needle in json.dumps(p))]
            await anyio.sleep(0.05)
        if s.get("toggle"):
            await self.a.call(self.name(server, s["tool"]), s["args"])  # off again
        return bool(got), f"{method}: {short(json.dumps(got[0]), 70) if got else 'never came'}; {short(text, 30)}"

    async def f_logging(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        if not self.a.has_notifications():
            raise NotAvailable(f"{self.a.name} does not show notifications")
        # A server without logging/setLevel (py_server.py's MCPServer has none) still logs; its
        # "method not found" is noted, not a failure. Any other error is one.
        try:
            await self.a.set_level("debug")
            level = "setLevel ok"
        except NotAvailable:
            raise
        except Exception as e:
            if "not found" not in str(e).lower() and "-32601" not in str(e):
                return False, f"logging/setLevel failed: {type(e).__name__}: {e}"
            level = f"setLevel: {short(str(e), 40)}"
        ok, detail = await self.toggled(server, s, "notifications/message", s["expect"])
        return ok, f"{level}; {detail}"

    async def f_get_stream(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        if not self.a.has_notifications():
            raise NotAvailable(f"{self.a.name} does not show notifications")
        return await self.toggled(server, s, s["notification"], None)

    async def f_list_changed(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        if not self.a.has_notifications():
            raise NotAvailable(f"{self.a.name} does not show notifications")
        return await self.toggled(server, s, s["notification"], None)

    async def round_trip(self, server: str, s: dict[str, Any], kind: str) -> tuple[bool, str]:
        before = self.a.callbacks[kind]
        text = await self.a.call(self.name(server, s["tool"]), s["args"])
        asked = self.a.callbacks[kind] - before
        # server-everything asks for roots once, after initialize, and keeps them: the answer
        # naming the client's root is the proof there.
        ok = s["expect"] in text and (asked >= 1 or kind == "roots")
        return ok, f"{kind} callback ran {asked}x; {short(text, 70)}"

    async def f_sampling(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        return await self.round_trip(server, s, "sampling")

    async def f_elicitation(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        return await self.round_trip(server, s, "elicitation")

    async def f_roots(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        return await self.round_trip(server, s, "roots")

    async def f_subscribe(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        if not self.a.has_notifications():
            raise NotAvailable(f"{self.a.name} does not show notifications")
        method = "notifications/resources/updated"
        before = self.a.count(method)
        await self.a.subscribe(s["uri"], True)
        await self.a.call(self.name(server, s["tool"]), s["args"])  # updates on
        arrived = await self.a.wait_for(method, before)
        await self.a.call(self.name(server, s["tool"]), s["args"])  # off
        await self.a.subscribe(s["uri"], False)
        return arrived, f"{method} {'arrived' if arrived else 'never came'}"

    async def f_resume(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        text = await self.a.resume(self.name(server, s["tool"]), s["args"])
        return "completed" in text.lower() or "Long running operation completed" in text, short(text, 100)

    async def f_cancel(self, server: str, s: dict[str, Any]) -> tuple[bool, str]:
        count_tool, count_args = self.name(server, s["count_tool"]), self.args(s["count_args"])
        before = await self.a.call(count_tool, count_args)
        await self.a.call_then_cancel(self.name(server, s["tool"]), self.args(s["args"]), 0.5)
        deadline = time.monotonic() + 3
        after = before
        while time.monotonic() < deadline and after == before:
            await anyio.sleep(0.1)
            after = await self.a.call(count_tool, count_args)
        return after != before, f"server's count of cancelled calls: {before!r} -> {after!r}"


def owner(uri: str) -> str:
    """The server a resource URI (or template) of matrix_spec.json belongs to."""
    return {"demo": "everything", "py": "py", "fm": "fm"}.get(uri.split(":", 1)[0], "?")


def scope_on_the_wire(result: Any, version: str | None) -> str:
    """The `cacheScope` a read's answer carried, for the SDKs' result models (which default it to
    private when it was not sent); NotAvailable in the session era, which has none."""
    if "cache_scope" not in getattr(result, "model_fields_set", set()):
        raise NotAvailable(f"no cacheScope in protocol {version}")
    return str(result.cache_scope)


def main(make: Callable[[str], Adapter], flow_class: type[Flow] = Flow) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--target", required=True, help="mcpgate, or direct:<server>")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    adapter = make(args.url)
    flow = flow_class(adapter, args.target, f"dyn_{adapter.name.replace('-', '_').replace('.', '_')}")

    async def go() -> None:
        try:
            await flow.run()
        finally:
            # In the task and cancel scope that connected (the clients' task groups insist);
            # interop.sh bounds the process in time.
            try:
                await adapter.close()
            except Exception as e:
                print(f"  close: {type(e).__name__}: {e}", flush=True)
                flow.results.setdefault("_error", {})["close"] = {"ok": False, "detail": f"{type(e).__name__}: {e}"}

    try:
        anyio.run(go)
    except BaseException as e:  # the client itself broke: keep what was measured
        print(f"  the client failed: {type(e).__name__}: {e}", flush=True)
        traceback.print_exc()
        flow.results.setdefault("_error", {})["client"] = {"ok": False, "detail": f"{type(e).__name__}: {e}"}
    with open(args.out, "w") as out:
        json.dump({"client": adapter.name, "target": args.target, "features": flow.results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit("flow.py is a library; run one of the client_*.py scripts")
