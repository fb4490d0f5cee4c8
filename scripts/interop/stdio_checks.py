"""The official Python client (`mcp` 2.3.0, Streamable HTTP) against an mcpgate
whose servers are real stdio servers it starts itself (scripts/interop/stdio.sh):
server-filesystem, server-memory (`"sharing": "shared"`), server-everything in
stdio mode and mcp-server-time.

Session A (declaring sampling, elicitation and roots): initialize, the tools of
all four (exactly the lists of stdio_spec.json), the filesystem server's roots
request at its start (answered by A), write_file/read_text_file, memory
create_entities/read_graph, echo, server-everything's environment (its own `env`
and mcpgate's base and env_passthrough variables, nothing else of mcpgate's), get_current_time,
progress, sampling, elicitation, roots. Then session B, while A is open: B sees A's entity, an update
of the resource A subscribed to when B writes (one process), and, by status.json
and /proc, one memory process for the two sessions and one of each other server
per session. Both sessions end with DELETE.

    stdio_checks.py --url URL --spec stdio_spec.json --roots DIR --gateway-pid PID --json OUT

The roots: DIR/py-a for A, DIR/py-b for B (made here), below the directory the
filesystem server was given in its args (DIR), which holds `outside.txt`.
Prints one PASS/FAIL line per check; writes the rows for report.py (--json);
exits 1 if one failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import urllib.request
import warnings
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, MCPDeprecationWarning
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

import stdio_procs
from checks import RESULTS, check, record, short, text_of, write

# resources/subscribe and roots are deprecated in 2026-07-28, and used here on purpose.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

CALL_TIMEOUT = 20
NONCE = f"py{os.getpid()}x{int(time.time()) % 100000}"


def fill_form(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """An answer to a form: every default, and `name` for the required `name` (server-everything's form)."""
    content = {k: p["default"] for k, p in schema.get("properties", {}).items() if "default" in p}
    for field in schema.get("required", []):
        content.setdefault(field, name if field == "name" else "Interop")
    return content


class Session:
    """One client session: the SDK client and what the server side sent it."""

    def __init__(self, url: str, label: str, root: str, sampled: str) -> None:
        self.label = label
        self.root = root
        self.sampled = sampled
        self.asked = {"sampling": 0, "elicitation": 0, "roots": 0}
        self.notes: list[tuple[str, Any]] = []
        self.client = Client(
            url,
            mode="legacy",
            read_timeout_seconds=CALL_TIMEOUT,
            sampling_callback=self.on_sampling,
            elicitation_callback=self.on_elicitation,
            list_roots_callback=self.on_roots,
            message_handler=self.on_message,
            client_info=types.Implementation(name=f"mcpgate-interop-stdio-{label}", version="1.0"),
            cache=None,
        )

    async def on_sampling(self, context: Any, params: Any) -> types.CreateMessageResult:
        self.asked["sampling"] += 1
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=self.sampled),
            model="interop",
            stop_reason="endTurn",
        )

    async def on_elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked["elicitation"] += 1
        schema = getattr(params, "requested_schema", None)
        if schema is None:  # URL mode
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=fill_form(schema, f"Name {NONCE}"))

    async def on_roots(self, context: Any) -> types.ListRootsResult:
        self.asked["roots"] += 1
        return types.ListRootsResult(roots=[types.Root(uri=f"file://{self.root}", name=f"interop-{self.label}")])

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notes.append(("exception", repr(message)))
            return
        params = getattr(message, "params", None)
        dumped = params.model_dump(mode="json", by_alias=True) if hasattr(params, "model_dump") else params
        self.notes.append((getattr(message, "method", type(message).__name__), dumped))

    async def call(self, name: str, args: dict[str, Any], **kw: Any) -> Any:
        return await self.client.call_tool(name, args, **kw)

    async def wait_note(self, method: str, after: int, timeout: float = 5.0) -> tuple[str, Any] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((n for n in self.notes[after:] if n[0] == method), None)
            if found:
                return found
            await anyio.sleep(0.05)
        return None


async def allowed_dirs(s: Session, want: str, timeout: float = 5.0) -> tuple[bool, str]:
    """list_allowed_directories until it names `want` alone (the roots answer may still be on its way)."""
    deadline = time.monotonic() + timeout
    while True:
        text = text_of(await s.call("filesystem__list_allowed_directories", {}))
        dirs = [line.strip() for line in text.splitlines()[1:] if line.strip()]
        if dirs == [want] or time.monotonic() > deadline:
            return dirs == [want], f"roots/list answered {s.asked['roots']}x; allowed: {dirs}"
        await anyio.sleep(0.1)


async def all_tools(c: Client) -> tuple[list[str], int]:
    """The names of the merged tool list, page by page, and how many pages."""
    names: list[str] = []
    cursor = None
    pages = 0
    while pages < 50:
        page = await c.list_tools(cursor=cursor)
        names += [t.name for t in page.tools]
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            break
    return names, pages


async def session_checks(s: Session, spec: dict[str, Any], fs_dir: str, gateway_pid: int) -> None:
    c = s.client
    record(
        "initialize through mcpgate (four stdio servers behind it)",
        c.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        and c.server_info is not None
        and c.server_info.name == "mcpgate",
        f"protocol {c.protocol_version}, server {c.server_info.name if c.server_info else None}",
    )

    names: list[str] = []
    pages = 0
    try:
        names, pages = await all_tools(c)
    except Exception as e:
        record("tools/list", False, f"{type(e).__name__}: {e}")
    for server, wanted in spec["tools"].items():
        listed = sorted(n.split("__", 1)[1] for n in names if n.startswith(f"{server}__"))
        missing = sorted(set(wanted) - set(listed))
        extra = sorted(set(listed) - set(wanted))
        record(
            f"tools/list: the {len(wanted)} tools of `{server}` as its pinned version lists them",
            not missing and not extra,
            f"{len(listed)} listed"
            + (f"; missing {missing}" if missing else "")
            + (f"; not expected {extra}" if extra else ""),
        )
    strays = sorted(n for n in names if n.split("__", 1)[0] not in spec["tools"])
    record(
        "tools/list: nothing else",
        not strays and len(names) == len(set(names)),
        ", ".join(strays) or f"{len(names)} tools in {pages} page(s)",
    )

    # server-filesystem asks the client for its roots once initialized (no call of the
    # client's running: mcpgate sends the request on the session's GET stream), and then
    # serves those instead of the directory of its args.
    await check(
        "filesystem: its roots/list request at start reached the client; it serves the client's root",
        lambda: allowed_dirs(s, s.root),
        CALL_TIMEOUT,
    )

    async def write_read() -> tuple[bool, str]:
        path = os.path.join(s.root, f"note-{s.label}.txt")
        content = f"written by the Python SDK through mcpgate, {NONCE}\nsecond line\n"
        wrote = await s.call("filesystem__write_file", {"path": path, "content": content})
        if wrote.is_error:
            return False, f"write_file: {short(text_of(wrote), 110)}"
        read = await s.call("filesystem__read_text_file", {"path": path})
        with open(path) as f:
            on_disk = f.read()
        ok = not read.is_error and text_of(read) == content and on_disk == content
        return (
            ok,
            f"write_file: {short(text_of(wrote), 50)}; read back {len(text_of(read))} chars, on disk {len(on_disk)}",
        )

    await check("filesystem: write_file, then read_text_file gives it back (and it is on disk)", write_read, CALL_TIMEOUT)

    async def outside() -> tuple[bool, str]:
        r = await s.call("filesystem__read_text_file", {"path": os.path.join(fs_dir, "outside.txt")})
        return r.is_error and "denied" in text_of(r).lower(), f"isError {r.is_error}: {short(text_of(r), 80)}"

    await check("filesystem: a file outside the client's root (in its args' directory) is refused", outside, CALL_TIMEOUT)

    entity = f"interop-{s.label}-{NONCE}"

    async def memory() -> tuple[bool, str]:
        made = await s.call(
            "memory__create_entities",
            {"entities": [{"name": entity, "entityType": "interop", "observations": [f"made by session {s.label}"]}]},
        )
        graph = await s.call("memory__read_graph", {})
        found = [e for e in (graph.structured_content or {}).get("entities", []) if e.get("name") == entity]
        ok = (
            not made.is_error
            and not graph.is_error
            and len(found) == 1
            and found[0]["observations"] == [f"made by session {s.label}"]
        )
        return ok, f"create_entities isError {made.is_error}; read_graph: {found or short(text_of(graph), 60)}"

    await check("memory: create_entities, then read_graph has the entity", memory, CALL_TIMEOUT)

    async def echo() -> tuple[bool, str]:
        r = await s.call("everything__echo", {"message": f"hello {NONCE}"})
        return text_of(r) == f"Echo: hello {NONCE}", short(text_of(r), 110)

    await check("everything: echo", echo, CALL_TIMEOUT)

    async def environment() -> tuple[bool, str]:
        r = await s.call("everything__get-env", {})
        env = json.loads(text_of(r))
        gateway = gateway_environ(gateway_pid)
        passed = [k for k in gateway if any(k.startswith(p[:-1]) if p.endswith("*") else k == p for p in spec["passthrough_env"])]
        allowed = set(spec["base_env"]) | set(spec["everything_env"]) | set(passed)
        extra = sorted(set(env) - allowed)
        own = all(env.get(k) == v for k, v in spec["everything_env"].items())
        # What it passes of mcpgate's own environment is mcpgate's value, unchanged.
        changed = sorted(k for k in passed if k in env and k not in spec["everything_env"] and env[k] != gateway[k])
        # The variable stdio.sh set for mcpgate alone is in mcpgate's environment and not the server's.
        secret = spec["gateway_only_env"]
        leak_checked = secret in gateway and secret not in env
        ok = own and not extra and not changed and leak_checked and "PATH" in env
        return ok, (
            f"{sorted(env)}"
            + (f"; not expected: {extra}" if extra else "")
            + (f"; changed from mcpgate's: {changed}" if changed else "")
            + ("" if leak_checked else f"; {secret} not in mcpgate's environment or passed on")
        )

    await check("everything: its environment is its own `env`, mcpgate's base variables and env_passthrough only (get-env)", environment, CALL_TIMEOUT)

    async def now_in_tokyo() -> tuple[bool, str]:
        r = await s.call("time__get_current_time", {"timezone": "Asia/Tokyo"})
        got = r.structured_content or {}
        when = dt.datetime.fromisoformat(got.get("datetime", "1970-01-01T00:00:00+00:00"))
        now = dt.datetime.now(dt.timezone.utc)  # not dt.UTC: that is 3.11's, and the venv may be 3.10
        skew = abs((when - now).total_seconds())
        ok = (
            not r.is_error
            and got.get("timezone") == "Asia/Tokyo"
            and when.utcoffset() == dt.timedelta(hours=9)
            and skew < 120
        )
        return ok, f"{got.get('timezone')} {got.get('datetime')} ({got.get('day_of_week')}), {skew:.0f} s from now"

    await check("time: get_current_time in Asia/Tokyo is now, at +09:00", now_in_tokyo, CALL_TIMEOUT)

    async def progress() -> tuple[bool, str]:
        want = spec["progress"]
        seen: list[tuple[float, float | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, total))

        r = await s.call("everything__trigger-long-running-operation", dict(want), progress_callback=on_progress)
        values = [v for v, _ in seen]
        ok = (
            len(seen) == want["steps"]
            and values == sorted(set(values))
            and all(t == want["steps"] for _, t in seen)
            and "completed" in text_of(r).lower()
        )
        return (
            ok,
            f"{len(seen)} progress {values} of {seen[-1][1] if seen else None} (want {want['steps']}); "
            + short(text_of(r), 60),
        )

    await check("everything: progress of trigger-long-running-operation (progressToken)", progress, CALL_TIMEOUT)

    async def sampling() -> tuple[bool, str]:
        before = s.asked["sampling"]
        r = await s.call("everything__trigger-sampling-request", {"prompt": f"say {NONCE}"})
        asked = s.asked["sampling"] - before
        return asked == 1 and s.sampled in text_of(r), f"sampling callback ran {asked}x; {short(text_of(r), 80)}"

    await check("everything: sampling/createMessage answered by the client", sampling, CALL_TIMEOUT)

    async def elicitation() -> tuple[bool, str]:
        before = s.asked["elicitation"]
        r = await s.call("everything__trigger-elicitation-request", {})
        asked = s.asked["elicitation"] - before
        text = text_of(r)
        return (
            asked == 1 and "accept" in text and f"Name {NONCE}" in text,
            f"elicitation callback ran {asked}x; {short(text, 80)}",
        )

    await check("everything: elicitation/create answered by the client", elicitation, CALL_TIMEOUT)

    async def roots() -> tuple[bool, str]:
        r = await s.call("everything__get-roots-list", {})
        return f"file://{s.root}" in text_of(r), short(text_of(r), 100)

    await check("everything: roots (get-roots-list has the client's root)", roots, CALL_TIMEOUT)


def gateway_environ(pid: int) -> dict[str, str]:
    """mcpgate's own environment, from /proc."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/status.json", timeout=5) as response:
        return json.load(response)


async def shared_checks(a: Session, b: Session, spec: dict[str, Any], gateway_pid: int, url: str) -> None:
    """Session B next to A: the one memory process is both of theirs; the others are per session."""
    entity = f"interop-{a.label}-{NONCE}"
    await all_tools(b.client)  # the SDK checks structured content against the output schemas listed

    async def sees() -> tuple[bool, str]:
        graph = await b.call("memory__read_graph", {})
        names = [e.get("name") for e in (graph.structured_content or {}).get("entities", [])]
        return entity in names, f"session B's read_graph: {names}"

    await check("memory shared: session B sees the entity session A made", sees, CALL_TIMEOUT)

    async def subscription() -> tuple[bool, str]:
        # The subscription is kept in the server's process: an update of what B writes reaches A
        # only if A's and B's calls go to one process.
        uri = spec["memory_resource"]
        await a.client.subscribe_resource(uri)
        a_before, b_before = len(a.notes), len(b.notes)
        made = await b.call(
            "memory__create_entities",
            {"entities": [{"name": f"interop-{b.label}-{NONCE}", "entityType": "interop", "observations": []}]},
        )
        got = await a.wait_note("notifications/resources/updated", a_before)
        await a.client.unsubscribe_resource(uri)
        b_got = any(m == "notifications/resources/updated" for m, _ in b.notes[b_before:])
        ok = not made.is_error and got is not None and (got[1] or {}).get("uri") == uri
        return ok, (
            f"A subscribed to {uri}, B's create_entities -> A got {got[1] if got else 'nothing'}; "
            f"B (not subscribed) got one too: {'yes' if b_got else 'no'}"
        )

    await check("memory shared: A's subscription sees B's write (one process behind both sessions)", subscription, CALL_TIMEOUT)

    async def own_roots() -> tuple[bool, str]:
        return await allowed_dirs(b, b.root)

    await check("filesystem per session: session B's process serves session B's root", own_roots, CALL_TIMEOUT)

    async def uses_the_others() -> tuple[bool, str]:
        # A process starts when its session first needs it, not at initialize: B calls each.
        echo = await b.call("everything__echo", {"message": f"from B {NONCE}"})
        now = await b.call("time__get_current_time", {"timezone": "Etc/UTC"})
        return not echo.is_error and not now.is_error, f"echo: {short(text_of(echo), 60)}; time: {short(text_of(now), 60)}"

    await check("session B calls everything and time (their processes start when first needed)", uses_the_others, CALL_TIMEOUT)

    async def counted() -> tuple[bool, str]:
        servers = status(url)["servers"]
        got = {n: (servers[n]["processes"]["live"], servers[n]["processes"]["spawned"]) for n in spec["tools"]}
        ok = got["memory"] == (1, 1) and all(got[n][0] == 2 for n in spec["tools"] if n != "memory")
        return ok, "live/spawned: " + ", ".join(f"{n} {live}/{spawned}" for n, (live, spawned) in got.items())

    await check("status.json, two sessions open: 1 memory process (shared), 2 of each other server", counted, CALL_TIMEOUT)

    async def proc() -> tuple[bool, str]:
        children = stdio_procs.descendants(gateway_pid)
        kinds: dict[str, list[int]] = {}
        for p in children:
            kinds.setdefault(stdio_procs.server_of(p["cmdline"]) or "other", []).append(p["pid"])
        want = {n: 1 if n == "memory" else 2 for n in spec["tools"]}
        ok = {k: len(v) for k, v in kinds.items()} == want and all(p["ppid"] == gateway_pid for p in children)
        return ok, "mcpgate's children: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))

    await check("/proc, two sessions open: mcpgate's children are 1 memory process and 2 of each other server", proc, CALL_TIMEOUT)


async def run(args: argparse.Namespace) -> None:
    with open(args.spec) as f:
        spec = json.load(f)
    roots = {label: os.path.join(args.roots, f"py-{label.lower()}") for label in ("A", "B")}
    for path in roots.values():
        os.makedirs(path, exist_ok=True)
    a = Session(args.url, "A", roots["A"], spec["sampled"])
    b = Session(args.url, "B", roots["B"], spec["sampled"])
    t0 = time.monotonic()
    async with a.client:
        print(f"INFO  session A initialized in {time.monotonic() - t0:.2f} s", flush=True)
        await session_checks(a, spec, args.roots, args.gateway_pid)
        t1 = time.monotonic()
        async with b.client:
            print(f"INFO  session B initialized in {time.monotonic() - t1:.2f} s", flush=True)
            await shared_checks(a, b, spec, args.gateway_pid, args.url)
    print(f"INFO  took {time.monotonic() - t0:.1f} s; asked of A {a.asked}, of B {b.asked}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--roots", required=True, help="the filesystem server's directory; the roots are made below it")
    parser.add_argument("--gateway-pid", type=int, required=True)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    try:
        anyio.run(run, args)
    except Exception as e:  # the client itself failed: a row says so
        record("the Python client ran to its end", False, f"{type(e).__name__}: {e}")
    failed = write(args.json)
    print(f"python client: {len(RESULTS)} checks, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
