"""The client matrix's Rust SDK client (rmcp 3.11.0): flow.py, each operation sent to the
small rmcp program of scripts/interop/rmcp_client/ (built into .interop/ by interop.sh) as one
JSON line on its stdin; it answers on its stdout, where the notifications it got and the
server requests it answered come too. rmcp runs in its `auto` lifecycle: server/discover,
then `initialize` where the server is not of 2026-07-28.

    python client_rmcp.py --url URL --target direct:py|mcpgate --out FILE   (RMCP_CLIENT: the binary)
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from typing import Any

import anyio

import flow

BINARY = os.environ.get("RMCP_CLIENT", "")


class Rmcp(flow.Adapter):
    name = "rmcp"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.proc: subprocess.Popen[str] | None = None
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        # The progress callback of the call running now: rmcp puts a progressToken of its own
        # in every request, and the flow runs one call at a time.
        self.on_progress: Any = None

    def pump(self) -> None:
        """Reads the program's stdout: answers to the queue, events to notes and callbacks."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            event = message.get("event")
            if event is None:
                self.answers.put(message)
            elif "callback" in event:
                self.callbacks[event["callback"]] += 1
            elif "notification" in event:
                params = event.get("params") or {}
                self.notes.append((event["notification"], params))
                on = self.on_progress
                if event["notification"] == "notifications/progress" and on is not None:
                    on(params.get("progress"))
        self.answers.put({"error": "the rmcp client ended"})

    async def ask(self, command: dict[str, Any], timeout: float = flow.STEP_TIMEOUT) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        try:
            answer = await anyio.to_thread.run_sync(lambda: self.answers.get(timeout=timeout))
        except queue.Empty:
            raise TimeoutError(f"the rmcp client did not answer {command['op']} within {timeout} s") from None
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["reply"]

    async def connect(self) -> str:
        if not BINARY or not os.access(BINARY, os.X_OK):
            raise RuntimeError(f"no rmcp client binary at RMCP_CLIENT={BINARY!r} (interop.sh builds it)")
        self.proc = subprocess.Popen([BINARY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        threading.Thread(target=self.pump, daemon=True).start()
        reply = await self.ask({"op": "connect", "url": self.url})
        return reply["info"]

    async def list_page(self, kind: str, cursor: str | None) -> tuple[list[str], str | None]:
        reply = await self.ask({"op": "list", "kind": kind, "cursor": cursor})
        return [str(i) for i in reply["items"]], reply.get("next")

    async def call(self, name: str, args: dict[str, Any], on_progress: Any = None) -> str:
        self.on_progress = on_progress
        try:
            reply = await self.ask({"op": "call", "name": name, "args": args})
        finally:
            self.on_progress = None
        if reply["is_error"]:
            raise RuntimeError(f"isError: {reply['text']}")
        return reply["text"]

    async def get_prompt(self, name: str, args: dict[str, str]) -> str:
        return (await self.ask({"op": "prompt", "name": name, "args": args}))["text"]

    async def read(self, uri: str) -> str:
        return (await self.ask({"op": "read", "uri": uri}))["text"]

    async def set_level(self, level: str) -> None:
        await self.ask({"op": "set_level", "level": level})

    async def subscribe(self, uri: str, on: bool) -> None:
        await self.ask({"op": "subscribe", "uri": uri, "on": on})

    async def call_then_cancel(self, name: str, args: dict[str, Any], after: float) -> None:
        await self.ask({"op": "call_then_cancel", "name": name, "args": args, "after_ms": int(after * 1000)})

    async def resume(self, name: str, args: dict[str, Any]) -> str:
        raise flow.NotAvailable("no API to resume a request")

    async def close(self) -> None:
        if self.proc is None:
            return
        try:
            await self.ask({"op": "close"}, timeout=10)
        finally:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    sys.exit(flow.main(Rmcp))
