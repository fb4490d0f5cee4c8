"""A plain MCP client for the board checks (scripts/cross.sh, systemd.sh, initd.sh): the standard
library only, so that it runs wherever python3 does, next to an mcpgate under qemu-user or under
a real systemd.

    smoke.py calls URL --servers web,local   initialize; tools/list holds each server's echo; a
                                             tools/call to each answers; DELETE answers 200
    smoke.py open URL --count N [--ids FILE] N sessions initialized and left open (their ids
                                             in FILE, one a line)
    smoke.py call URL --id ID --tool NAME     one tools/call on an open session (exit 1 on 404)

Each command prints what it did and exits 1, saying what failed, on the first check that fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

PROTOCOL = "2025-06-18"
TIMEOUT = 60.0  # an mcpgate under qemu-user on a loaded 2-core host answers in far less


class Failed(Exception):
    pass


def post(url: str, message: dict[str, Any], session: str | None) -> tuple[int, str | None, Any]:
    """One JSON-RPC message; the answer as JSON, whether it came as JSON or as an SSE stream."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = PROTOCOL
    request = urllib.request.Request(url, data=json.dumps(message).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            status, sid, body = response.status, response.headers.get("Mcp-Session-Id"), response.read().decode()
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, None, e.read().decode(errors="replace")
    if not body:
        return status, sid, None
    if kind.startswith("text/event-stream"):
        answers = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]
        answers = [a for a in answers if "id" in a and ("result" in a or "error" in a)]
        return status, sid, answers[-1] if answers else None
    return status, sid, json.loads(body)


def delete(url: str, session: str) -> int:
    request = urllib.request.Request(url, headers={"Mcp-Session-Id": session}, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def initialize(url: str) -> str:
    params = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "board-smoke", "version": "1"}}
    status, sid, answer = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, None)
    if status != 200 or not sid or not answer or "result" not in answer:
        raise Failed(f"initialize: HTTP {status}, session {sid}, answer {answer}")
    status, _, _ = post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    if status != 202:
        raise Failed(f"notifications/initialized: HTTP {status}, not 202")
    return sid


def call(url: str, session: str, tool: str, text: str) -> str:
    message = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": tool, "arguments": {"text": text}}}
    status, _, answer = post(url, message, session)
    if status != 200 or not answer or "result" not in answer:
        raise Failed(f"tools/call {tool}: HTTP {status}, answer {answer}")
    said = "".join(c.get("text", "") for c in answer["result"].get("content", []))
    if text not in said:
        raise Failed(f"tools/call {tool}: answered {said!r}, not the text sent ({text!r})")
    return said


def calls(url: str, servers: list[str]) -> None:
    session = initialize(url)
    print(f"initialize: session {session[:12]}...")
    status, _, answer = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}, session)
    names = [t["name"] for t in (answer or {}).get("result", {}).get("tools", [])]
    missing = [f"{s}__echo" for s in servers if f"{s}__echo" not in names]
    if status != 200 or missing:
        raise Failed(f"tools/list: HTTP {status}, {len(names)} tools, missing {missing}")
    print(f"tools/list: {len(names)} tools, {', '.join(f'{s}__echo' for s in servers)} among them")
    for server in servers:
        said = call(url, session, f"{server}__echo", f"hello from {server}")
        print(f"tools/call {server}__echo: {said!r}")
    status = delete(url, session)
    if status != 200:
        raise Failed(f"DELETE: HTTP {status}, not 200")
    print("DELETE: 200")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["calls", "open", "call"])
    parser.add_argument("url")
    parser.add_argument("--servers", default="web,local")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--ids")
    parser.add_argument("--id")
    parser.add_argument("--tool", default="web__echo")
    args = parser.parse_args()
    try:
        if args.command == "calls":
            calls(args.url, args.servers.split(","))
        elif args.command == "open":
            ids = [initialize(args.url) for _ in range(args.count)]
            if args.ids:
                with open(args.ids, "w") as f:
                    f.write("".join(f"{i}\n" for i in ids))
            print(f"open: {len(ids)} session(s) initialized and left open")
        else:
            said = call(args.url, args.id, args.tool, "still here")
            print(f"tools/call {args.tool} on session {args.id[:12]}...: {said!r}")
    except (Failed, OSError, ValueError) as e:
        print(f"smoke.py {args.command}: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
