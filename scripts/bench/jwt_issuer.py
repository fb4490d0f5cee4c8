"""The issuer of scripts/bench.sh's OAuth rows: an RSA key made at start (cryptography), its JWKS
and OpenID metadata served on 127.0.0.1, and one RS256 access token (PyJWT) for the resource,
valid for an hour, written to a file. Both packages are pinned in scripts/interop/requirements.txt.
It is the bench's own issuer, not an imitation of a product: the flow with a real authorization
server is scripts/interop/oauth.sh.

    python jwt_issuer.py --resource URL --token-file PATH

Prints `listening on http://127.0.0.1:PORT` (the issuer) once it listens.
"""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resource", required=True)
    parser.add_argument("--token-file", required=True)
    args = parser.parse_args()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="bench-1", use="sig", alg="RS256")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/.well-known/openid-configuration":
                body = {"issuer": issuer, "jwks_uri": f"{issuer}/jwks"}
            elif self.path == "/jwks":
                body = {"keys": [jwk]}
            else:
                self.send_error(404)
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    now = int(time.time())
    claims = {"iss": issuer, "sub": "bench", "aud": args.resource, "scope": "mcp", "iat": now, "exp": now + 3600}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "bench-1", "typ": "at+jwt"})
    with open(args.token_file, "w") as f:
        f.write(token)
    print(f"listening on {issuer}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
