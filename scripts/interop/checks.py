"""What the checks of scripts/interop/ (and bench/) share: one result row per check, printed as
it is made (`PASS  name -- detail`) and kept in RESULTS for report.py, the text of a tool result,
a shortened detail, and a JSON-RPC POST by hand. One copy, so every check prints and records
alike.

Only the standard library at import: bench/tool_search.py runs on the system's python3 (with
PYTHONPATH=scripts/interop); `check` imports anyio, which every SDK venv has, when it runs.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

PROTOCOL = "2025-11-25"  # the version header of a session opened by `post`
RESULTS: list[dict[str, Any]] = []


def record(name: str, ok: bool, detail: str = "", clip: int | None = None) -> bool:
    """One result row; `clip` keeps that many characters of the detail (half of them printed)."""
    kept = detail if clip is None else detail[:clip]
    RESULTS.append({"name": name, "ok": bool(ok), "detail": kept})
    shown = kept if clip is None else kept[: clip // 2]
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f" -- {shown}" if shown else ""), flush=True)
    return ok


async def check(name: str, body: Callable[[], Awaitable[tuple[bool, str]]], timeout: float = 30) -> None:
    """Runs `body` (its verdict and detail) within `timeout` seconds; an exception fails the check."""
    import anyio

    try:
        with anyio.fail_after(timeout):
            ok, detail = await body()
    except Exception as e:  # a failed check, whatever the cause
        ok, detail = False, f"{type(e).__name__}: {e}"
    record(name, ok, detail)


def write(path: str) -> list[dict[str, Any]]:
    """Writes RESULTS to `path` as JSON (report.py reads it); the rows that failed."""
    with open(path, "w") as out:
        json.dump(RESULTS, out, indent=1)
    return [r for r in RESULTS if not r["ok"]]


def finish(title: str, json_path: str | None) -> int:
    """Prints the count of RESULTS, writes them to `json_path`; the exit status."""
    failed = [r for r in RESULTS if not r["ok"]]
    print(f"\n{title}: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    if json_path:
        write(json_path)
    return 1 if failed else 0


def text_of(result: Any) -> str:
    """The text parts of a tool result (any SDK's), one per line."""
    return "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []) if getattr(c, "type", "") == "text")


def short(text: Any, n: int = 90) -> str:
    """`text` on one line, at most `n` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def post(url: str, body: dict[str, Any], session: str | None, timeout: float = 30) -> tuple[int, str | None, bytes]:
    """A JSON-RPC message POSTed by hand, in `session` if one is given: the status, the session
    (the one the answer names, else `session`) and the answer's JSON (of an SSE answer, its last
    event's data)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = PROTOCOL
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
        session = response.headers.get("Mcp-Session-Id", session)
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            datas = [line[5:].strip() for line in raw.decode().splitlines() if line.startswith("data:")]
            raw = next((d for d in reversed(datas) if d), "{}").encode()
        return response.status, session, raw
