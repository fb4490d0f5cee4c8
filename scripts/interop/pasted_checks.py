"""The six servers users paste (scripts/interop/pasted.sh), through mcpgate, with the official
Python client (`mcp` 2.3.0): sessions that open at once, every tool of every server, what the
processes cost, clients that leave without DELETE. Counts come from /proc.

    pasted_checks.py check --url URL --spec pasted_spec.json --fs DIR --repo DIR --gateway-pid PID
                           --json OUT --figures FIGURES
        (a) 10 sessions opened one after the other, the first right after mcpgate started, then 10
            at once: each opens under 5 s, the initialize POST's p99 under 1 s; initialize starts no
            process; the first session, whose list cannot hold servers still starting, stays open,
            hears tools/list_changed, and lists all six then;
        (b) one session lists the tools until all six servers are in (list_changed or listing again,
            120 s at most), finds exactly the tools of pasted_spec.json, and calls each once with
            the spec's arguments: a result, no JSON-RPC error, no isError;
        (c) the footprint: RSS and PSS of mcpgate and every process below it with 1 session that
            used every server, and with 10: within 1.2 times;
        (d) 20 sessions as the Inspector's CLI leaves them (initialize, tools/list, gone without
            DELETE) add no process, and a later session calls a tool of each server;
        at each look at /proc, no zombie below mcpgate. Writes the rows (report.py checks) to OUT
        and the figures to FIGURES; exit status 1 if one failed.
    pasted_checks.py footprint --url URL --spec pasted_spec.json --fs DIR --repo DIR --gateway-pid PID
                               [--sessions 10]
        (c) alone, for scripts/bench.sh: one JSON line of figures on stdout.
    pasted_checks.py warm --config MCPGATE_JSON --spec pasted_spec.json [--offline] [--tries N] --json OUT
        Each stdio server of the config started as mcpgate would start it (its command and args, the
        base environment, its `env`), once, until it answers initialize, and calls the tool the
        spec's `warm` names: the package runners fill their caches. --offline: first with npm's and
        uv's offline flags (enough when the caches are warm), with the network when that fails.
    pasted_checks.py tree --gateway-pid PID
        RSS and PSS of mcpgate and its descendants by kind of process, as one JSON line.

The page for the fetch server is served here, on 127.0.0.1; {fs}, {repo}, {page} and {nonce} in
the spec's arguments are filled in here.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import math
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import stdio_checks
import stdio_procs
from checks import RESULTS, record, short, text_of, write

OPEN_LIMIT = 5.0  # each initialize under this many seconds
P99_LIMIT = 1.0  # and the p99 under this
LIST_LIMIT = 120.0  # seconds for the tool list to hold all six servers
FOOTPRINT_RATIO = 1.2  # 10 sessions within this times 1
CALL_TIMEOUT = 60.0  # a call to a server still starting waits for it (start_timeout_secs)
NONCE = f"p{os.getpid()}x{int(time.time()) % 100000}"
# What mcpgate passes a child of its own environment (config reference: mcpServers.<name>.env).
BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
# One tool of each server, cheap and without side effects: what a session of the footprint and a
# session after the abandoned ones call.
LIGHT = {
    "filesystem": ("list_allowed_directories", {}),
    "memory": ("read_graph", {}),
    "sequential-thinking": ("sequentialthinking", None),  # the spec's arguments
    "fetch": ("fetch", {"url": "{page}", "raw": True}),  # raw: no node run by readabilipy per call
    "time": ("get_current_time", {"timezone": "Etc/UTC"}),
    "git": ("git_status", None),
}


# --- /proc -------------------------------------------------------------------------------------


def kind_of(p: dict[str, Any], gateway: int) -> str:
    """mcpgate, or what a process below it runs: npx's `npm exec` wrapper, the `sh -c` it starts,
    node, uv (`uvx` is `uv tool uvx`), python, git or other."""
    if p["pid"] == gateway:
        return "mcpgate"
    cmd = p["cmdline"]
    argv0 = os.path.basename(cmd.split(" ", 1)[0])
    if cmd.startswith("npm exec"):
        return "npm exec"
    if argv0 in ("sh", "bash", "dash"):
        return "sh"
    if argv0.startswith("node"):
        return "node"
    if argv0 in ("uv", "uvx"):
        return "uv"
    if argv0.startswith("python"):
        return "python"
    if argv0 == "git":  # mcp-server-git's GitPython keeps `git cat-file --batch` processes
        return "git"
    return "other"


def memory_kib(pid: int) -> tuple[int, int]:
    """RSS (/proc/PID/status) and PSS (/proc/PID/smaps_rollup) in KiB; 0 for a process gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        with open(f"/proc/{pid}/smaps_rollup") as f:
            pss = next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
    except (OSError, ValueError):
        pass
    return rss, pss


def tree(gateway: int) -> dict[str, Any]:
    """mcpgate and every process below it: RSS and PSS in all and by kind, counts, zombies."""
    me = stdio_procs.stat(gateway)
    procs = ([me] if me else []) + stdio_procs.descendants(gateway)
    kinds: dict[str, dict[str, int]] = {}
    total_rss = total_pss = 0
    zombies = []
    for p in procs:
        if p["state"] == "Z":
            zombies.append(f"{p['pid']} (parent {p['ppid']})")
        rss, pss = memory_kib(p["pid"])
        k = kinds.setdefault(kind_of(p, gateway), {"count": 0, "rss_kib": 0, "pss_kib": 0})
        k["count"] += 1
        k["rss_kib"] += rss
        k["pss_kib"] += pss
        total_rss += rss
        total_pss += pss
    return {
        "processes": len(procs),
        "children": sum(1 for p in procs if p["ppid"] == gateway),
        "rss_kib": total_rss,
        "pss_kib": total_pss,
        "kinds": kinds,
        "zombies": zombies,
    }


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def tree_text(t: dict[str, Any]) -> str:
    kinds = ", ".join(
        f"{k} {v['count']}x {mib(v['rss_kib'])}/{mib(v['pss_kib'])}"
        for k, v in sorted(t["kinds"].items(), key=lambda kv: -kv[1]["rss_kib"])
    )
    return f"{t['processes']} processes, RSS {mib(t['rss_kib'])}, PSS {mib(t['pss_kib'])} (RSS/PSS: {kinds})"


ZOMBIES: list[str] = []


def look(gateway: int, when: str) -> dict[str, Any]:
    """A look at the tree; a zombie below mcpgate is noted for the row at the end."""
    t = tree(gateway)
    ZOMBIES.extend(f"{when}: {z}" for z in t["zombies"])
    return t


# --- what the spec's arguments need ------------------------------------------------------------


def png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x80\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def serve_page() -> str:
    """A page on 127.0.0.1 for the fetch server; its URL."""
    body = (
        "<html><head><title>pasted_checks</title></head><body><article><h1>pasted_checks</h1>"
        f"<p>This page was served for pasted checks {NONCE}, and the fetch server reads it.</p>"
        "<p>It is long enough to count as an article for the readability extraction, with a second "
        "paragraph that says nothing more.</p></article></body></html>"
    ).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/page.html"


def prepare(fs: str, repo: str) -> dict[str, str]:
    with open(os.path.join(fs, "hello.txt"), "w") as f:
        f.write("hello from pasted_checks\n")
    with open(os.path.join(fs, "pixel.png"), "wb") as f:
        f.write(png_1x1())
    with open(os.path.join(repo, f"file-{NONCE}.txt"), "w") as f:
        f.write(f"a file for mcp-server-git, {NONCE}\n")
    return {"fs": fs, "repo": repo, "page": serve_page(), "nonce": NONCE}


def fill(value: Any, words: dict[str, str]) -> Any:
    if isinstance(value, str):
        return re.sub(r"\{(\w+)\}", lambda m: words.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [fill(v, words) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, words) for k, v in value.items()}
    return value


def light_calls(spec: dict[str, Any], words: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for server, (tool, args) in LIGHT.items():
        calls.append((f"{server}__{tool}", fill(spec["tools"][server][tool] if args is None else args, words)))
    return calls


def status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/status.json", timeout=10) as r:
        return json.load(r)


def pct(values: list[float], q: float) -> float:
    """The nearest-rank percentile: of 10 values, p99 is the largest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return "-" if math.isinf(seconds) else f"{seconds * 1000:.0f} ms"


# --- sessions ----------------------------------------------------------------------------------


def why(e: BaseException) -> str:
    """An exception, or the first of a group's (a task group's) down to the one that was raised."""
    while getattr(e, "exceptions", None):  # an ExceptionGroup (Python 3.11)
        e = e.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(e).__name__}: {short(e, 160)}"


def timed_http(times: dict[str, float]) -> httpx2.AsyncClient:
    """The SDK's HTTP client, noting when the initialize POST went and when its answer's headers came
    (mcpgate answers it with JSON): the initialize itself, without the client's own work around it."""
    http = create_mcp_http_client()

    async def on_request(request: httpx2.Request) -> None:
        if request.method == "POST" and "sent" not in times and b'"initialize"' in request.content:
            times["sent"] = time.monotonic()

    async def on_response(response: httpx2.Response) -> None:
        if "sent" in times and "answered" not in times:
            times["answered"] = time.monotonic()

    http.event_hooks = {"request": [on_request], "response": [on_response]}
    return http


def client(url: str | Any, label: str, handler: Any = None) -> Client:
    return Client(
        url,
        mode="legacy",
        read_timeout_seconds=CALL_TIMEOUT,
        message_handler=handler,
        client_info=types.Implementation(name=f"pasted-{label}", version="1.0"),
        cache=None,
    )


async def all_tools(c: Any) -> list[str]:
    return (await stdio_checks.all_tools(c))[0]


def servers_in(names: list[str]) -> set[str]:
    return {n.split("__", 1)[0] for n in names}


async def one_session(url: str, label: str, out: dict[str, Any], gate: Any = None) -> None:
    """Opens a session (timed: the SDK's whole opening, and the initialize POST alone), lists the
    tools (timed), waits for `gate` if given, ends (DELETE)."""
    times: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        async with timed_http(times) as http, client(streamable_http_client(url, http_client=http), label) as c:
            out["open"] = time.monotonic() - t0
            out["init"] = times.get("answered", math.inf) - times.get("sent", 0)
            t1 = time.monotonic()
            names = await all_tools(c)
            out["list"] = time.monotonic() - t1
            out["servers"] = len(servers_in(names))
            if gate is not None:
                await gate.wait()
    except Exception as e:  # a failed session, counted by the row
        out.setdefault("open", time.monotonic() - t0)
        out["error"] = why(e)


async def first_session(url: str, out: dict[str, Any], listed: anyio.Event, hook: Any, wanted: set[str]) -> None:
    """The first session after mcpgate started: opens (timed), lets `hook` look, lists (the servers
    are still starting: the list holds those ready within list_wait_ms), sets `listed`, and stays
    open until list_changed has brought all of `wanted` (LIST_LIMIT at most)."""
    heard: list[float] = []

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            heard.append(time.monotonic())

    times: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        async with timed_http(times) as http, client(streamable_http_client(url, http_client=http), "first", on_message) as c:
            out["open"] = time.monotonic() - t0
            out["init"] = times.get("answered", math.inf) - times.get("sent", 0)
            hook()
            t1 = time.monotonic()
            names = await all_tools(c)
            out["list"] = time.monotonic() - t1
            out["servers"] = len(servers_in(names))
            listed.set()
            seen = 0
            while not wanted <= servers_in(names) and time.monotonic() - t1 < LIST_LIMIT:
                while len(heard) == seen and time.monotonic() - t1 < LIST_LIMIT:
                    await anyio.sleep(0.05)
                seen = len(heard)
                names = await all_tools(c)
            out["complete_s"] = time.monotonic() - t1
            out["servers_at_end"] = len(servers_in(names))
            out["list_changed"] = len(heard)
    except Exception as e:  # a failed session, counted by the rows
        out.setdefault("open", time.monotonic() - t0)
        out["error"] = why(e)
    finally:
        listed.set()


def unanswered(run: dict[str, Any], limit: float) -> None:
    """A session cut off at `limit` seconds counts as opened then, and failed."""
    run.setdefault("open", limit)
    if "list" not in run:
        run.setdefault("error", f"no answer within {limit:.0f} s")


def open_row(name: str, runs: list[dict[str, Any]], first_note: str = "") -> dict[str, Any]:
    """The row of a batch: each SDK opening under OPEN_LIMIT, the initialize POSTs' p99 under P99_LIMIT."""
    opens = [r["open"] for r in runs]
    inits = [r.get("init", math.inf) for r in runs]
    errors = [f"#{i + 1}: {r['error']}" for i, r in enumerate(runs) if "error" in r]
    figures = {
        "count": len(runs),
        "initialize_ms": {"p50": ms_of(statistics.median(inits)), "p99": ms_of(pct(inits, 99)), "max": ms_of(max(inits))},
        "open_ms": {"p50": ms_of(statistics.median(opens)), "p99": ms_of(pct(opens, 99)), "max": ms_of(max(opens))},
        "first_ms": {"initialize": ms_of(inits[0]), "open": ms_of(opens[0])},
        "list_ms": [ms_of(r.get("list", math.inf)) for r in runs],
        "servers_listed": [r.get("servers", 0) for r in runs],
        "errors": errors,
    }
    i, o = figures["initialize_ms"], figures["open_ms"]
    ok = not errors and max(opens) < OPEN_LIMIT and pct(inits, 99) < P99_LIMIT
    record(
        name,
        ok,
        f"initialize (its POST, sent to answered) p50 {i['p50']} ms, p99 {i['p99']} ms, max {i['max']} ms; "
        f"the SDK's whole opening p50 {o['p50']} ms, p99 {o['p99']} ms, max {o['max']} ms{first_note}; "
        f"tools/list ms {figures['list_ms']}, servers in each list {figures['servers_listed']}"
        + (f"; failed: {'; '.join(errors)}" if errors else ""),
    )
    return figures


def ms_of(seconds: float) -> int | None:
    return None if math.isinf(seconds) else round(seconds * 1000)


async def opening(url: str, gateway: int, figures: dict[str, Any]) -> None:
    """(a): 10 one after the other, the first right after mcpgate started; then 10 at once."""
    s = status(url)
    states = {n: v.get("state") for n, v in s["servers"].items()}
    record(
        "mcpgate started: no process yet, every server `not tried`",
        s["processes"]["spawned"] == 0 and set(states.values()) == {"not tried"},
        f"processes spawned {s['processes']['spawned']}; states {states}",
    )
    seen_after_init: list[int] = []
    sequential: list[dict[str, Any]] = [{}]
    wanted = set(s["servers"])
    async with anyio.create_task_group() as tg:
        listed = anyio.Event()
        tg.start_soon(
            first_session,
            url,
            sequential[0],
            listed,
            lambda: seen_after_init.append(status(url)["processes"]["spawned"]),
            wanted,
        )
        with anyio.move_on_after(OPEN_LIMIT + 60):
            await listed.wait()
        unanswered(sequential[0], OPEN_LIMIT + 60)
        for i in range(1, 10):
            run: dict[str, Any] = {}
            with anyio.move_on_after(OPEN_LIMIT + 60):
                await one_session(url, f"seq{i}", run)
            unanswered(run, OPEN_LIMIT + 60)
            sequential.append(run)
    first = sequential[0]
    record(
        "initialize starts no process (status.json after the first session's initialize)",
        seen_after_init == [0],
        f"processes spawned after it: {seen_after_init}",
    )
    record(
        "the first session, whose list lacked servers still starting, hears tools/list_changed and lists all six",
        "error" not in first
        and first.get("servers_at_end") == len(wanted)
        and (first.get("servers") == len(wanted) or first.get("list_changed", 0) >= 1),
        f"its first list: {first.get('servers')} server(s) after {ms(first.get('list', math.inf))}; "
        f"{first.get('list_changed', 0)} list_changed; all {first.get('servers_at_end')} listed "
        f"{first.get('complete_s', math.inf):.1f} s after the first list" + (f"; {first['error']}" if "error" in first else ""),
    )
    figures["sequential"] = open_row(
        "10 sessions one after the other, the first right after mcpgate started: each opens < 5 s, initialize p99 < 1 s",
        sequential,
        f"; the first: initialize {ms(sequential[0].get('init', math.inf))}, opening {ms(sequential[0]['open'])}",
    )
    look(gateway, "after the sequential sessions")
    concurrent: list[dict[str, Any]] = [{} for _ in range(10)]
    gate = anyio.Event()
    with anyio.move_on_after(OPEN_LIMIT + 90):
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one_session, url, f"con{i}", concurrent[i], gate)
            deadline = time.monotonic() + OPEN_LIMIT + 60
            while time.monotonic() < deadline and not all("list" in r or "error" in r for r in concurrent):
                await anyio.sleep(0.05)
            gate.set()
    for r in concurrent:
        unanswered(r, OPEN_LIMIT + 90)
    figures["concurrent"] = open_row("10 sessions opened at once: each opens < 5 s, initialize p99 < 1 s", concurrent)


async def every_tool(url: str, spec: dict[str, Any], words: dict[str, str], figures: dict[str, Any]) -> None:
    """(b): the tools of all six, exactly the spec's, each called once."""
    changed = anyio.Event()
    counts = {"list_changed": 0}

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            counts["list_changed"] += 1
            changed.set()

    wanted = set(spec["tools"])
    t0 = time.monotonic()
    async with client(url, "tools", on_message) as c:
        names: list[str] = []
        lists = 0
        while True:
            names = await all_tools(c)
            lists += 1
            if wanted <= servers_in(names) or time.monotonic() - t0 > LIST_LIMIT:
                break
            with anyio.move_on_after(1.0):
                await changed.wait()
            changed = anyio.Event()
        took = time.monotonic() - t0
        figures["all_listed_s"] = round(took, 2)
        record(
            f"tools/list holds all six servers within {LIST_LIMIT:.0f} s",
            wanted <= servers_in(names),
            f"after {took:.1f} s, {lists} list(s), {counts['list_changed']} list_changed; "
            f"missing: {sorted(wanted - servers_in(names)) or 'none'}",
        )
        for server, tools in spec["tools"].items():
            listed = sorted(n.split("__", 1)[1] for n in names if n.startswith(f"{server}__"))
            missing, extra = sorted(set(tools) - set(listed)), sorted(set(listed) - set(tools))
            record(
                f"tools/list: the {len(tools)} tools of `{server}` as pasted_spec.json knows them",
                not missing and not extra,
                f"{len(listed)} listed"
                + (f"; in the spec, not listed: {missing}" if missing else "")
                + (f"; listed, not in the spec (a new version? add it with arguments): {extra}" if extra else ""),
            )
            failed = []
            times = []
            for tool, args in tools.items():
                if tool not in listed:
                    continue
                name = f"{server}__{tool}"
                t1 = time.monotonic()
                try:
                    with anyio.fail_after(CALL_TIMEOUT):
                        result = await c.call_tool(name, fill(args, words))
                    text = text_of(result)
                    want = spec.get("expect", {}).get(name)
                    if result.is_error:
                        failed.append(f"{tool}: isError: {short(text, 120)}")
                    elif want and fill(want, words) not in text:
                        failed.append(f"{tool}: no {fill(want, words)!r} in {short(text, 120)}")
                    print(f"  {name}: {'ok' if not result.is_error else 'isError'} -- {short(text, 100)}")
                except Exception as e:  # a JSON-RPC error or a timeout
                    failed.append(f"{tool}: {type(e).__name__}: {short(e, 120)}")
                    print(f"  {name}: {type(e).__name__}: {short(e, 100)}")
                times.append(time.monotonic() - t1)
            called = len(times)
            record(
                f"{server}: each of its tools called once works (a result, no JSON-RPC error, no isError)",
                called == len(tools) and not failed,
                f"{called - len(failed)} of {len(tools)} worked"
                + (f", slowest {ms(max(times))}" if times else "")
                + (f"; {'; '.join(failed)}" if failed else ""),
            )
    s = status(url)
    states = {n: v.get("state") for n, v in s["servers"].items()}
    record(
        "status.json: each server `up` once it answered",
        set(states.values()) == {"up"},
        f"states {states}; starting {[n for n, v in s['servers'].items() if v.get('processes', {}).get('starting')]}",
    )


async def hold_sessions(url: str, count: int, calls: list[tuple[str, dict[str, Any]]], gateway: int) -> dict[str, Any]:
    """`count` sessions, each calling one tool of each server and staying open while the tree is
    measured; then they end (DELETE). The tree and the failures."""
    done: list[str | None] = [None] * count
    errors: list[str] = []
    release = anyio.Event()

    async def session(i: int) -> None:
        try:
            async with client(url, f"fp{count}-{i}") as c:
                for name, args in calls:
                    with anyio.fail_after(CALL_TIMEOUT):
                        result = await c.call_tool(name, args)
                    if result.is_error:
                        errors.append(f"{name}: {short(text_of(result), 80)}")
                done[i] = "ok"
                await release.wait()
        except Exception as e:  # counted below
            errors.append(f"session {i}: {why(e)}")
            done[i] = "failed"

    measured: dict[str, Any] = {}
    with anyio.move_on_after(CALL_TIMEOUT * 3):
        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(session, i)
            deadline = time.monotonic() + CALL_TIMEOUT * 2
            while time.monotonic() < deadline and None in done:
                await anyio.sleep(0.05)
            await anyio.sleep(1)  # what the calls left settles
            measured = look(gateway, f"{count} session(s) held")
            measured["live"] = status(url)["processes"]["live"]
            release.set()
    measured["errors"] = errors + [f"session {i}: unfinished" for i, d in enumerate(done) if d is None]
    return measured


async def footprint(url: str, spec: dict[str, Any], words: dict[str, str], gateway: int, sessions: int) -> dict[str, Any]:
    calls = light_calls(spec, words)
    one = await hold_sessions(url, 1, calls, gateway)
    many = await hold_sessions(url, sessions, calls, gateway)
    return {"one": one, "many": many, "sessions": sessions}


def footprint_rows(fp: dict[str, Any]) -> None:
    one, many, n = fp["one"], fp["many"], fp["sessions"]
    ratio = many["rss_kib"] / max(one["rss_kib"], 1)
    record(
        f"footprint: RSS of mcpgate and its descendants with {n} sessions within {FOOTPRINT_RATIO} x with 1",
        not one["errors"] and not many["errors"] and ratio <= FOOTPRINT_RATIO,
        f"{ratio:.2f} x; 1 session: {tree_text(one)}; {n} sessions: {tree_text(many)}"
        + (f"; failed: {'; '.join(one['errors'] + many['errors'])}" if one["errors"] or many["errors"] else ""),
    )
    record(
        f"footprint: {n} sessions share the processes of 1, one per server (status.json live, /proc)",
        one["children"] == many["children"] == one["live"] == many["live"] == len(LIGHT),
        f"children of mcpgate in /proc: {one['children']} and {many['children']}; live by status.json: "
        f"{one['live']} and {many['live']}; processes in the tree: {one['processes']} and {many['processes']}",
    )


def raw_post(url: str, body: dict[str, Any], session: str | None) -> tuple[str | None, dict[str, Any]]:
    """A message POSTed by hand (checks.post) and its answer as JSON."""
    from checks import post

    _, session, raw = post(url, body, session, timeout=30)
    return session, (json.loads(raw) if raw.strip() else {})


def abandon(url: str, count: int) -> list[str]:
    """`count` sessions as the Inspector's CLI leaves them: initialize, initialized, tools/list, and
    gone without DELETE. The failures."""
    failed = []
    for i in range(count):
        try:
            session, answer = raw_post(
                url,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "inspector-cli-like", "version": "1.0"},
                    },
                },
                None,
            )
            if "result" not in answer or not session:
                failed.append(f"#{i}: initialize: {short(answer, 100)}")
                continue
            raw_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
            _, listed = raw_post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
            if "result" not in listed:
                failed.append(f"#{i}: tools/list: {short(listed, 100)}")
        except Exception as e:  # counted by the row
            failed.append(f"#{i}: {type(e).__name__}: {short(e, 100)}")
    return failed


async def abandoned(url: str, spec: dict[str, Any], words: dict[str, str], gateway: int) -> dict[str, Any]:
    """(d): 20 sessions gone without DELETE add no process and refuse no later session."""
    before, t0 = status(url), look(gateway, "before the abandoned sessions")
    failed = await anyio.to_thread.run_sync(abandon, url, 20)
    mid, t1 = status(url), look(gateway, "after the abandoned sessions")
    record(
        "20 sessions as the Inspector's CLI leaves them (initialize, tools/list, no DELETE) add no process",
        not failed
        and mid["processes"]["spawned"] == before["processes"]["spawned"]
        and t1["processes"] == t0["processes"]
        and mid["processes"]["live"] == before["processes"]["live"],
        f"processes spawned {before['processes']['spawned']} -> {mid['processes']['spawned']}, live "
        f"{before['processes']['live']} -> {mid['processes']['live']}; in /proc {t0['processes']} -> {t1['processes']}; "
        f"client sessions live {mid['sessions']['live']}" + (f"; failed: {'; '.join(failed)}" if failed else ""),
    )
    later = await hold_sessions(url, 1, light_calls(spec, words), gateway)
    after = status(url)
    refused = after["processes"]["refused"] - before["processes"]["refused"]
    record(
        "a later session calls a tool of each of the six servers, with the 20 still open: nothing refused",
        not later["errors"] and refused == 0 and after["processes"]["spawned"] == before["processes"]["spawned"],
        f"{len(LIGHT)} calls; refused by the process limit {refused}; processes spawned "
        f"{after['processes']['spawned']}; health {after['health']}; client sessions live {after['sessions']['live']}"
        + (f"; failed: {'; '.join(later['errors'])}" if later["errors"] else ""),
    )
    return {"spawned": after["processes"]["spawned"], "sessions_live": after["sessions"]["live"], "refused": refused}


async def run_checks(args: argparse.Namespace) -> int:
    with open(args.spec) as f:
        spec = json.load(f)
    words = prepare(args.fs, args.repo)
    figures: dict[str, Any] = {}
    gateway = args.gateway_pid
    steps = (
        ("opening", lambda: opening(args.url, gateway, figures)),
        ("tools", lambda: every_tool(args.url, spec, words, figures)),
        ("footprint", lambda: footprint(args.url, spec, words, gateway, 10)),
        ("abandoned", lambda: abandoned(args.url, spec, words, gateway)),
    )
    for name, body in steps:
        t0 = time.monotonic()
        try:
            with anyio.fail_after(400):
                out = await body()
        except Exception as e:  # the step failed as a whole
            record(f"{name}: ran to its end", False, f"{type(e).__name__}: {short(e, 200)}")
            out = None
        print(f"-- {name}: {time.monotonic() - t0:.1f} s", flush=True)
        if name == "footprint" and out:
            footprint_rows(out)
            figures["footprint"] = out
        elif out is not None:
            figures[name] = out
    record("/proc: no zombie below mcpgate at any look", not ZOMBIES, "; ".join(ZOMBIES) or "none")
    figures["status"] = status(args.url)
    with open(args.figures, "w") as f:
        json.dump(figures, f, indent=1)
    failed = write(args.json)
    print(f"\npasted_checks: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


async def run_footprint(args: argparse.Namespace) -> int:
    with open(args.spec) as f:
        spec = json.load(f)
    words = prepare(args.fs, args.repo)
    fp = await footprint(args.url, spec, words, args.gateway_pid, args.sessions)
    print(json.dumps(fp))
    return 0 if not fp["one"]["errors"] and not fp["many"]["errors"] else 1


# --- warm --------------------------------------------------------------------------------------

OFFLINE_ENV = {"npm_config_offline": "true", "UV_OFFLINE": "1"}
# What this machine needs to reach the registries, which mcpgate does not pass its children: the
# online warm-up adds it (a CA file for a TLS-inspecting proxy: uv refuses the registry without it).
NETWORK_ENV = (
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
    "NO_PROXY", "no_proxy",
)


def start_once(server: dict[str, Any], warm: dict[str, Any] | None, extra: dict[str, str], limit: float) -> tuple[bool, float, str]:
    """Starts the server as mcpgate would, sends initialize and waits for its answer; then, if
    `warm` names one, calls a tool (a server that fetches more on its first call) and waits for a
    result without isError."""
    env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    env.update(server.get("env", {}))
    env.update(extra)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [server["command"], *server.get("args", [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    answers: dict[int, dict[str, Any]] = {}
    errors: list[bytes] = []
    arrived = threading.Condition()
    ended = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and isinstance(message.get("id"), int) and "method" not in message:
                    with arrived:
                        answers[message["id"]] = message
                        arrived.notify_all()
        with arrived:  # its stdout closed: no answer comes any more
            ended.append(True)
            arrived.notify_all()

    def read_err() -> None:
        assert proc.stderr is not None
        errors.extend(proc.stderr)

    def ask(message: dict[str, Any]) -> dict[str, Any] | None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        if "id" not in message:
            return None
        with arrived:
            arrived.wait_for(lambda: message["id"] in answers or ended, max(0.0, limit - (time.monotonic() - t0)))
        return answers.get(message["id"])

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=read_err, daemon=True).start()
    why = ""
    try:
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "warm", "version": "1"}}
        answer = ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        if not answer or "result" not in answer:
            why = f"initialize: {short(answer, 200) if answer else 'no answer'}"
        elif warm:
            ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"name": warm["tool"], "arguments": warm["arguments"]}
            answer = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            if not answer or "result" not in answer or answer["result"].get("isError"):
                why = f"tools/call {warm['tool']}: {short(answer, 200) if answer else 'no answer'}"
    except OSError as e:  # it ended before it read
        why = f"{type(e).__name__}: {e}"
    took = time.monotonic() - t0
    try:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        pass
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if why:
        why += "; stderr: " + b"".join(errors[-3:]).decode(errors="replace")
    return not why, took, short(why, 300)


def run_warm(args: argparse.Namespace) -> int:
    """Each server once, all at once: offline first when asked, else (or when that fails) with the
    network, up to --tries times (a registry's transient error)."""
    with open(args.config) as f:
        servers = json.load(f)["mcpServers"]
    with open(args.spec) as f:
        packages = json.load(f)["packages"]
    words = {"page": serve_page()}
    results: dict[str, dict[str, Any]] = {}

    def warm(name: str, server: dict[str, Any]) -> None:
        r: dict[str, Any] = {"tries": []}
        call = fill(packages.get(name, {}).get("warm"), words)
        if args.offline:
            ok, took, why = start_once(server, call, OFFLINE_ENV, 120)
            r["tries"].append({"offline": True, "ok": ok, "seconds": round(took, 1), "why": why})
            r["ok"] = ok
        network = {k: os.environ[k] for k in NETWORK_ENV if k in os.environ}
        for _ in range(args.tries if not r.get("ok") else 0):
            ok, took, why = start_once(server, call, network, 600)
            r["tries"].append({"offline": False, "ok": ok, "seconds": round(took, 1), "why": why})
            r["ok"] = ok
            if ok:
                break
            time.sleep(5)
        results[name] = r

    threads = [threading.Thread(target=warm, args=item) for item in servers.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, r in results.items():
        tries = ", ".join(
            f"{'offline' if t['offline'] else 'online'} {'ok' if t['ok'] else 'failed'} in {t['seconds']} s"
            + (f" ({t['why']})" if not t["ok"] else "")
            for t in r["tries"]
        )
        print(f"  {name}: {tries}")
    print(
        "; ".join(
            f"{name}: " + ", ".join(f"{'offline' if t['offline'] else 'online'} {'ok' if t['ok'] else 'failed'} {t['seconds']} s" for t in r["tries"])
            for name, r in results.items()
        )
    )
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(r.get("ok") for r in results.values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("check", "footprint"):
        p = sub.add_parser(name)
        p.add_argument("--url", required=True)
        p.add_argument("--spec", required=True)
        p.add_argument("--fs", required=True)
        p.add_argument("--repo", required=True)
        p.add_argument("--gateway-pid", type=int, required=True)
        if name == "check":
            p.add_argument("--json", required=True)
            p.add_argument("--figures", required=True)
        else:
            p.add_argument("--sessions", type=int, default=10)
    w = sub.add_parser("warm")
    w.add_argument("--config", required=True)
    w.add_argument("--spec", required=True)
    w.add_argument("--offline", action="store_true")
    w.add_argument("--tries", type=int, default=3)
    w.add_argument("--json", required=True)
    t = sub.add_parser("tree")
    t.add_argument("--gateway-pid", type=int, required=True)
    args = parser.parse_args()
    if args.command == "warm":
        return run_warm(args)
    if args.command == "tree":
        print(json.dumps(tree(args.gateway_pid)))
        return 0
    return anyio.run(run_checks if args.command == "check" else run_footprint, args)


if __name__ == "__main__":
    sys.exit(main())
