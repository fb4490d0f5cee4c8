"""The receiver of scripts/bench.sh's tracing rows: takes OTLP/HTTP `POST /v1/traces` on 127.0.0.1
and answers 200, without decoding, so that the rows measure what tracing costs mcpgate and not a
receiver's work; `GET /stats` says how many exports and bytes came. What mcpgate's spans are, read
back from a real receiver, is scripts/interop/tracing.sh (Arize Phoenix) and tests/tracing.rs.

    python otlp_sink.py

Prints `listening on http://127.0.0.1:PORT` once it listens. Only the standard library.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTS = {"exports": 0, "bytes": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with LOCK:
            COUNTS["exports"] += 1
            COUNTS["bytes"] += len(body)
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        with LOCK:
            data = json.dumps(COUNTS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
