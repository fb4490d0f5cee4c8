"""What the session store adds, for scripts/bench.sh: `initialize` and one
`tools/call` through an mcpgate, one after the other on one keep-alive
connection, timed each. Prints one JSON line: the count, p50 and p99 in
milliseconds of each.

    python3 store_cost.py --url http://127.0.0.1:PORT/mcp --initializes 300 --calls 2000 --tool echo
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
import urllib.parse

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def post(conn: http.client.HTTPConnection, path: str, body: dict, headers: dict[str, str]) -> tuple[int, str, bytes]:
    conn.request("POST", path, json.dumps(body), {**HEADERS, **headers})
    r = conn.getresponse()
    data = r.read()
    return r.status, r.getheader("mcp-session-id") or "", data


def percentiles(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {"n": len(s), "p50_ms": round(s[len(s) // 2], 3), "p99_ms": round(s[min(len(s) - 1, len(s) * 99 // 100)], 3)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--initializes", type=int, default=300)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--tool", default="echo")
    args = p.parse_args()
    u = urllib.parse.urlsplit(args.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    inits = []
    for _ in range(args.initializes):
        t = time.perf_counter()
        status, sid, _ = post(conn, u.path, INIT, {})
        inits.append((time.perf_counter() - t) * 1000)
        if status != 200:
            print(f"initialize answered {status}", file=sys.stderr)
            return 1
        conn.request("DELETE", u.path, headers={"Mcp-Session-Id": sid})
        conn.getresponse().read()
    _, sid, _ = post(conn, u.path, INIT, {})
    session = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    post(conn, u.path, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    calls = []
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": args.tool, "arguments": {"text": "x"}},
    }
    for i in range(args.calls):
        call["id"] = i + 2
        t = time.perf_counter()
        status, _, body = post(conn, u.path, call, session)
        calls.append((time.perf_counter() - t) * 1000)
        if status != 200 or b'"error"' in body:
            print(f"a call answered {status}: {body[:200]!r}", file=sys.stderr)
            return 1
    conn.request("DELETE", u.path, headers={"Mcp-Session-Id": sid})
    conn.getresponse().read()
    print(json.dumps({"initialize": percentiles(inits), "call": percentiles(calls)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
