"""The tool_search rows of scripts/bench.sh.

  tool_search.py corpus SRC DEST COPIES   writes DEST/{dev,web,work}.json: the corpus of SRC with
                                          each tool COPIES times (names suffixed _2, _3, ...)
  tool_search.py config PATH ON NAME=ADDR...
                                          writes a config of these servers (their own prefixes)
                                          with tool_search enabled (ON: true) or not, in one page
  tool_search.py sizes PLAIN SEARCH       prints a JSON object: the bytes of the whole tools/list
                                          through the gateway at PLAIN (mode off) and at SEARCH
                                          (mode on), the tools each lists, and the first result of
                                          one find_tools at SEARCH

It imports scripts/interop/checks.py (bench.sh puts scripts/interop on PYTHONPATH).
"""

import json
import os
import sys

from checks import PROTOCOL, post


def corpus(src: str, dest: str, copies: int) -> None:
    os.makedirs(dest, exist_ok=True)
    for name in ("dev", "web", "work"):
        with open(os.path.join(src, f"{name}.json")) as f:
            tools = json.load(f)["tools"]
        out = list(tools)
        for n in range(2, copies + 1):
            for tool in tools:
                out.append({**tool, "name": f"{tool['name']}_{n}"})
        with open(os.path.join(dest, f"{name}.json"), "w") as f:
            json.dump({"tools": out}, f)


def config(path: str, on: str, servers: list[str]) -> None:
    mcp = {s.split("=", 1)[0]: {"url": f"http://{s.split('=', 1)[1]}/mcp"} for s in servers}
    doc = {"listen": "127.0.0.1:0", "page_size": 100000, "tool_search": {"enabled": on == "true"}, "mcpServers": mcp}
    with open(path, "w") as f:
        json.dump(doc, f)


def rpc(url: str, body: dict, session: str | None) -> tuple[dict, str | None, int]:
    """The answer to `body`, the session, and the answer's size in bytes."""
    _, session, raw = post(url, body, session)
    return (json.loads(raw) if raw else {}), session, len(raw)


def open_session(url: str) -> str | None:
    params = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    _, session, _ = rpc(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, None)
    rpc(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return session


def list_tools(url: str) -> tuple[int, int]:
    """The bytes of every page of tools/list, and the tools."""
    session = open_session(url)
    size, count, cursor = 0, 0, None
    for n in range(1000):
        params = {"cursor": cursor} if cursor else {}
        answer, _, length = rpc(url, {"jsonrpc": "2.0", "id": n + 2, "method": "tools/list", "params": params}, session)
        size += length
        count += len(answer["result"]["tools"])
        cursor = answer["result"].get("nextCursor")
        if not cursor:
            break
    return size, count


def sizes(plain: str, search: str) -> None:
    plain_bytes, plain_tools = list_tools(plain)
    search_bytes, search_tools = list_tools(search)
    session = open_session(search)
    call = {"name": "find_tools", "arguments": {"query": "create a pull request"}}
    answer, _, _ = rpc(search, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call}, session)
    found = answer.get("result", {}).get("structuredContent", {}).get("tools", [])
    print(json.dumps({
        "list_bytes_plain": plain_bytes,
        "tools_plain": plain_tools,
        "list_bytes_search": search_bytes,
        "tools_search": search_tools,
        "first_result": found[0]["name"] if found else None,
    }))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "corpus":
        corpus(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "config":
        config(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "sizes":
        sizes(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
