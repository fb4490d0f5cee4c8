"""A protected MCP server for scripts/interop/oauth_out.sh, built on FastMCP (`fastmcp` 4.2.3, pinned
in requirements.txt): its own JWT verification (JWTVerifier: the issuer's JWKS, its `iss`, and this
server's URL as the audience) behind RemoteAuthProvider, which answers a request without a good
token with 401 and `WWW-Authenticate: Bearer resource_metadata=...`, and serves the protected
resource metadata (RFC 9728) naming the authorization server. Its one tool, `whoami`, answers the
subject and the audience of the token it was called with: what mcpgate sent on the user's behalf.

It binds port 0 itself and prints `listening on 127.0.0.1:PORT` first.

    python oauth_out_fm_server.py --issuer URL [--name NAME]
"""

from __future__ import annotations

import argparse
import socket
import sys

import anyio
import uvicorn
from fastmcp import FastMCP
from fastmcp.server.auth import RemoteAuthProvider
from fastmcp.server.auth.providers.jwt import JWTVerifier
from fastmcp.server.dependencies import get_access_token


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--name", default="protected")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen(256)
    base = f"http://127.0.0.1:{port}"
    verifier = JWTVerifier(
        jwks_uri=f"{args.issuer}/jwks", issuer=args.issuer, audience=f"{base}/mcp", algorithm="ES256"
    )
    auth = RemoteAuthProvider(token_verifier=verifier, authorization_servers=[args.issuer], base_url=base,
                              resource_name=args.name, scopes_supported=["mcp"])  # fmt: skip
    server = FastMCP(args.name, auth=auth)

    @server.tool(description="The subject and audience of the token this call came with")
    def whoami() -> str:
        token = get_access_token()
        if token is None:
            return "nobody"
        aud = token.claims.get("aud")
        return f"{token.claims.get('sub')} {aud if isinstance(aud, str) else ','.join(aud or [])}"

    app = server.http_app(path="/mcp")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        sys.exit(0)
