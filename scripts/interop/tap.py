"""A recording HTTP proxy for the client matrix: a client talks to the tap, the tap
to the server (mcpgate, or a server directly), and the tap writes down every
request and every message of every answer, as JSON lines.

Why: the clients differ in what they show. The tap sees what each one sends
(its opening sequence, its DELETE, its GET stream) and every message that
mcpgate sends to any client, which validate.cjs then checks against the
TypeScript SDK's schemas. It forwards bytes as they come (SSE streams too),
so clients see the server's timing.

    python tap.py --dir DIR --label LABEL --upstream NAME=http://127.0.0.1:PORT [--upstream ...]
      one listener per upstream, each announced as `listening on 127.0.0.1:PORT NAME`; what
      goes through NAME's listener is written to DIR/<LABEL>--<NAME>.jsonl. `POST /__tap/mark`
      with a new label as the body switches every listener to it.

Records: {"type": "request", "seq", "t", "method", "path", "headers", "body"},
{"type": "response", "seq", "status", "headers"}, {"type": "message", "seq", "id", "data"}
(one per JSON body or SSE event; data is the parsed JSON, or the text when it is not JSON),
{"type": "end", "seq", "note"}. Authorization values are logged as their length only.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host"}
LOGGED_REQUEST = [
    "accept", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id", "authorization",
    "mcp-method", "mcp-name", "origin", "user-agent",
]  # fmt: skip
LOGGED_RESPONSE = ["content-type", "mcp-session-id", "www-authenticate", "content-length", "location", "allow"]
STREAM_TIMEOUT = 600  # seconds a GET stream may stay silent (interop.sh stops the tap long before)


class Log:
    def __init__(self, directory: str, label: str) -> None:
        self.directory = directory
        self.label = label
        self.lock = threading.Lock()
        self.seq = 0

    def next_seq(self) -> tuple[int, str]:
        with self.lock:
            self.seq += 1
            return self.seq, self.label

    def write(self, label: str, record: dict[str, Any]) -> None:
        record["t"] = round(time.time(), 3)
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self.lock, open(os.path.join(self.directory, f"{label}.jsonl"), "a") as f:
            f.write(line)


LOG: Log


def parse(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data[:2000]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: urllib.parse.SplitResult
    name: str

    @property
    def log(self) -> Listener:
        return Listener(self.name)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (quiet)
        pass

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def handle_any(self) -> None:
        self.close_connection = True
        body = self.read_body()
        if self.path == "/__tap/mark":
            with self.log.lock:
                self.log.label = re.sub(r"[^A-Za-z0-9_.:-]", "_", body.decode().strip())[:100] or "unlabelled"
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        seq, label = self.log.next_seq()
        logged = {}
        for name in LOGGED_REQUEST:
            value = self.headers.get(name)
            if value is not None:
                logged[name] = f"<{len(value)} chars>" if name == "authorization" else value
        self.log.write(
            label,
            {"type": "request", "seq": seq, "method": self.command, "path": self.path, "headers": logged,
             "body": parse(body.decode(errors="replace")) if body else None},
        )  # fmt: skip
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Host"] = self.upstream.netloc
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=STREAM_TIMEOUT)
        note = "done"
        try:
            connection.request(self.command, self.path, body=body or None, headers=headers)
            response = connection.getresponse()
            self.relay(seq, label, response)
        except (BrokenPipeError, ConnectionResetError) as e:
            note = f"client went away: {type(e).__name__}"
        except Exception as e:  # the upstream failed: tell the client, as a gateway would
            note = f"upstream failed: {type(e).__name__}: {e}"
            try:
                self.send_response(502)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except OSError:
                pass
        finally:
            connection.close()
            self.log.write(label, {"type": "end", "seq": seq, "note": note})

    def relay(self, seq: int, label: str, response: http.client.HTTPResponse) -> None:
        self.log.write(
            label,
            {"type": "response", "seq": seq, "status": response.status,
             "headers": {k: response.getheader(k) for k in LOGGED_RESPONSE if response.getheader(k) is not None}},
        )  # fmt: skip
        self.send_response_only(response.status, response.reason)
        length = response.getheader("Content-Length")
        for key, value in response.getheaders():
            if key.lower() not in HOP and key.lower() != "content-length":
                self.send_header(key, value)
        chunked = length is None and self.command != "HEAD" and response.status not in (204, 304)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif length is not None:
            self.send_header("Content-Length", length)
        self.send_header("Connection", "close")
        self.end_headers()
        sse = "text/event-stream" in (response.getheader("Content-Type") or "")
        buffer = ""
        whole = b""
        while True:
            chunk = response.read1(65536) if not response.isclosed() else b""
            if not chunk:
                break
            if chunked:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            else:
                self.wfile.write(chunk)
            self.wfile.flush()
            if sse:
                buffer += chunk.decode(errors="replace").replace("\r\n", "\n")
                while "\n\n" in buffer:
                    event, buffer = buffer.split("\n\n", 1)
                    self.record_event(seq, label, event)
            else:
                whole += chunk
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        if not sse and whole.strip():
            self.log.write(label, {"type": "message", "seq": seq, "id": None, "data": parse(whole.decode(errors="replace"))})

    def record_event(self, seq: int, label: str, event: str) -> None:
        event_id, data = None, []
        for line in event.split("\n"):
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data and "".join(data).strip():
            self.log.write(label, {"type": "message", "seq": seq, "id": event_id, "data": parse("\n".join(data))})

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = do_HEAD = handle_any


class Listener:
    """The shared log, as one listener writes it: files named <label>--<listener>."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = LOG.lock

    @property
    def label(self) -> str:
        return LOG.label

    @label.setter
    def label(self, value: str) -> None:
        LOG.label = value

    def next_seq(self) -> tuple[int, str]:
        seq, label = LOG.next_seq()
        return seq, f"{label}--{self.name}"

    def write(self, label: str, record: dict[str, Any]) -> None:
        LOG.write(label, record)


def main() -> int:
    global LOG
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", action="append", required=True, help="NAME=URL")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--label", default="unlabelled")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    LOG = Log(args.dir, args.label)
    servers = []
    for spec in args.upstream:
        name, _, url = spec.partition("=")
        handler = type(f"Handler_{name}", (Handler,), {"upstream": urllib.parse.urlsplit(url), "name": name})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        print(f"listening on 127.0.0.1:{server.server_address[1]} {name}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
