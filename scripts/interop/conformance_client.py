"""The `--command` of `conformance client`: makes mcpgate the client the suite judges.

The suite starts its mock server, then runs `conformance_client.py URL` with
MCP_CONFORMANCE_SCENARIO set. This script starts mcpgate (MCPGATE_BIN) with
that URL as its only server (`"prefix": ""`), drives mcpgate with the
official Python client as the scenario expects, closes the session (mcpgate
DELETEs its downstream session) and stops mcpgate with SIGTERM.

    initialize                           initialize (mcpgate initializes the mock), list tools
    tools_call                           call add_numbers {a, b}
    sse-retry                            call test_reconnection (the mock closes the POST stream
                                         after a priming event with retry: 500; mcpgate must
                                         wait 500 ms and resume with GET + Last-Event-ID)
    elicitation-sep1034-client-defaults  call test_client_elicitation_defaults and accept the
                                         form with every default applied (the Python client
                                         does that; mcpgate relays both ways)

Other scenarios: initialize and list tools. Exit status 0 when everything the
scenario needs went through.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client

from checks import text_of


def log(message: str) -> None:
    print(f"[conformance_client] {message}", flush=True)


def defaults_of(schema: dict[str, Any]) -> dict[str, Any]:
    """The answer of a user who accepts the form as it is: every default applied (SEP-1034)."""
    return {name: prop["default"] for name, prop in schema.get("properties", {}).items() if "default" in prop}


async def on_elicitation(context: Any, params: Any) -> types.ElicitResult:
    schema = getattr(params, "requested_schema", None)
    if schema is None:
        return types.ElicitResult(action="decline")
    content = defaults_of(schema)
    log(f"elicitation/create: accepting with defaults {content}")
    return types.ElicitResult(action="accept", content=content)


async def on_sampling(context: Any, params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="ok"), model="interop", stop_reason="endTurn"
    )


async def drive(url: str, scenario: str) -> bool:
    async with Client(
        url,
        mode="legacy",
        read_timeout_seconds=20,
        elicitation_callback=on_elicitation,
        sampling_callback=on_sampling,
        client_info=types.Implementation(name="mcpgate-conformance-driver", version="1.0"),
        cache=None,
    ) as client:
        log(f"initialized through mcpgate: protocol {client.protocol_version}")
        tools = (await client.list_tools()).tools
        names = [t.name for t in tools]
        log(f"tools/list: {names}")
        if scenario == "tools_call":
            result = await client.call_tool("add_numbers", {"a": 5, "b": 3})
            log(f"add_numbers: {text_of(result)!r}")
            return not result.is_error and "8" in text_of(result)
        if scenario == "sse-retry":
            started = time.monotonic()
            result = await client.call_tool("test_reconnection", {})
            log(f"test_reconnection after {time.monotonic() - started:.3f} s: {text_of(result)!r}")
            return not result.is_error and "completed successfully" in text_of(result)
        if scenario == "elicitation-sep1034-client-defaults":
            result = await client.call_tool("test_client_elicitation_defaults", {})
            log(f"test_client_elicitation_defaults: {text_of(result)!r}")
            return not result.is_error
        return True


def start_mcpgate(binary: str, server_url: str, workdir: Path) -> tuple[subprocess.Popen[str], str]:
    config = {"listen": "127.0.0.1:0", "mcpServers": {"mock": {"url": server_url, "prefix": ""}}}
    config_path = workdir / "mcpgate.json"
    config_path.write_text(json.dumps(config))
    log_file = open(workdir / "mcpgate.log", "w")  # noqa: SIM115 - handed to the child
    env = dict(os.environ, MCPGATE_LOG=os.environ.get("MCPGATE_LOG", "info"))
    process = subprocess.Popen(
        [binary, "--config", str(config_path)], stdout=subprocess.PIPE, stderr=log_file, text=True, env=env
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()  # `listening on http://127.0.0.1:PORT/mcp`
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"mcpgate did not start: {line!r}; see {workdir / 'mcpgate.log'}")
    url = line.removeprefix("listening on ")
    health = url.rsplit("/", 1)[0] + "/healthz"
    for _ in range(100):
        try:
            with urllib.request.urlopen(health, timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.05)
    return process, url


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    server_url = sys.argv[-1].replace("://localhost:", "://127.0.0.1:")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    binary = os.environ["MCPGATE_BIN"]
    workdir = Path(os.environ.get("INTEROP_CLIENT_DIR", "/tmp")) / f"client-{scenario}"
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"scenario {scenario}: mcpgate in front of {server_url}")
    process, url = start_mcpgate(binary, server_url, workdir)
    try:
        ok = anyio.run(drive, url, scenario)
    except Exception as e:  # the scenario failed; say why
        log(f"failed: {type(e).__name__}: {e}")
        ok = False
    finally:
        stop(process)
    log(f"mcpgate exited with {process.returncode}; log in {workdir / 'mcpgate.log'}")
    return 0 if ok and process.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
