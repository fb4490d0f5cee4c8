"""mcp-remote 0.15.1 (npm, .interop/clients), the stdio-to-HTTP bridge Claude Desktop users run,
through mcpgate over HTTPS with its own OAuth client: it finds the authorization server from the
401, registers, runs authorization code with PKCE with its own callback server on localhost, and
opens the sign-in page with the `open` package, which on a host without a display runs $BROWSER:
oauth_open.sh, the person at the browser (oauth_browser.py). The host's side is
client_mcp_remote.py's JSON-RPC on mcp-remote's stdio: initialize, tools/list and a call.

    python oauth_remote.py --url URL --out FILE
    (MCP_REMOTE_BIN: mcp-remote's dist/proxy.js; NODE; NODE_EXTRA_CA_CERTS: the test's CA;
    MCP_REMOTE_LOG: where its stderr goes; VPY: this venv's python, for the browser)
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile

import anyio

import client_mcp_remote
from checks import record, write

# A check's detail may be a response body or a trace: 400 characters of it are kept, 200 printed.
check = functools.partial(record, clip=400)


async def run(url: str) -> None:
    home = tempfile.mkdtemp(prefix="mcp-remote-oauth-")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, HOME=home, MCP_REMOTE_CONFIG_DIR=os.path.join(home, ".mcp-auth"),
               BROWSER=os.path.join(here, "oauth_open.sh"), DISPLAY="", WAYLAND_DISPLAY="")  # fmt: skip
    command = [os.environ.get("NODE", "node"), os.environ["MCP_REMOTE_BIN"], url, "--transport", "http-only"]
    rpc = client_mcp_remote.StdioRpc(url, command, env, os.environ.get("MCP_REMOTE_LOG", os.devnull))
    # No time limit here (its task group must not nest in one): oauth.sh runs this under `timeout`.
    try:
        opened = await rpc.connect()
        tools, _ = await rpc.list_page("tools", None)
        text = await rpc.call("fx__echo", {"text": "hello from dave"})
        check(f"mcp-remote signed in by itself; initialize ({opened}), tools/list, tools/call through mcpgate",
              "fx__echo" in tools and text == "hello from dave", f"{len(tools)} tools, answer {text!r}")  # fmt: skip
    finally:
        await rpc.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        anyio.run(run, args.url)
    except Exception as e:  # any failure is a failed check
        check("mcp-remote's OAuth flow ran to its end", False, f"{type(e).__name__}: {e}")
    return 1 if write(args.out) else 0


if __name__ == "__main__":
    sys.exit(main())
