"""Calls `test_reconnection` (mcp-fixture --conformance) with the official
Python client and checks its result arrives.

The tool answers the POST with an SSE stream (priming event with an id,
`retry: 500`) and ends it before the result, which it hands to the `GET`
that resumes the stream with `Last-Event-ID` (SEP-1699). Against mcpgate
this checks mcpgate's own resumption of a downstream stream: it must wait the
`retry` time, resume with GET + Last-Event-ID, and pass the result on.

    resume_check.py URL     (exit status 0 when the result came, after >= 450 ms)
"""

from __future__ import annotations

import sys
import time

import anyio
from mcp import Client

EXPECTED = "Reconnection test completed successfully"


async def run(url: str) -> int:
    async with Client(url, mode="legacy", read_timeout_seconds=20, cache=None) as client:
        started = time.monotonic()
        result = await client.call_tool("test_reconnection", {})
        took = time.monotonic() - started
    text = " ".join(getattr(c, "text", "") for c in result.content)
    ok = not result.is_error and text == EXPECTED and took >= 0.45
    print(f"result after {took * 1000:.0f} ms (retry is 500 ms): {text!r}")
    return 0 if ok else 1


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    try:
        return anyio.run(run, sys.argv[1])
    except Exception as e:  # a failed check
        print(f"failed: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
