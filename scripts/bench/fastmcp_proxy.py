"""The peer gateway of scripts/bench.sh: the FastMCP proxy (fastmcp 4.2.3,
`create_proxy`) in front of one MCP server, served over Streamable HTTP on
127.0.0.1. It binds port 0 itself and prints `listening on 127.0.0.1:PORT`.

    python fastmcp_proxy.py http://127.0.0.1:PORT/mcp
"""

import asyncio
import logging
import socket
import sys

import uvicorn
from fastmcp.server.server import create_proxy


async def main(target: str) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    proxy = create_proxy(target, name="fastmcp-proxy")
    app = proxy.http_app(path="/mcp")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
