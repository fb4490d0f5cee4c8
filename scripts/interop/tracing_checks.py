"""Traces through mcpgate, read back from Arize Phoenix (scripts/interop/tracing.sh).

A client instrumented with the official OpenTelemetry SDK (its OTLP/HTTP exporter sends its own
spans to Phoenix too) calls, through mcpgate, a tool of mcp-fixture over HTTP (`fx`) and of
mcp-fixture as a stdio server (`local`) with the official Python MCP SDK (`mcp` 2.3.0); each call
in a CLIENT span of its own whose context goes in `params._meta` (SEP-414), as the propagator
writes it. Then, for each server, from Phoenix's REST API and the fixture's /stats:

  - one trace links the client's span, mcpgate's SERVER span and mcpgate's CLIENT span;
  - mcpgate's spans carry the attributes of the MCP conventions;
  - the server received mcpgate's CLIENT span as the parent of its work (in `_meta`; over HTTP in
    the `traceparent` header too).

Prints one PASS/FAIL line per check; writes them as JSON (--json) for interop.sh's table; exits 1
if any failed.

    tracing_checks.py --gateway URL --phoenix URL --fixture-stats URL --gate-log FILE --json FILE
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from typing import Any

import anyio
from mcp import Client
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from checks import finish, record, short

SERVERS = {"fx": "tcp", "local": "pipe"}


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


async def calls(gateway: str, tracer: trace.Tracer) -> dict[str, tuple[str, str]]:
    """Calls `echo` of each server in a client span of its own: the span's (trace id, span id)."""
    spans = {}
    async with Client(gateway, mode="legacy", read_timeout_seconds=30) as client:
        for server in SERVERS:
            with tracer.start_as_current_span(f"tools/call {server}__echo", kind=trace.SpanKind.CLIENT) as span:
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
                result = await client.call_tool(f"{server}__echo", {"text": server}, meta=carrier)
                text = "".join(getattr(c, "text", "") for c in result.content)
                record(f"{server}: the call answers through mcpgate", text == server, short(text))
                ctx = span.get_span_context()
                spans[server] = (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    return spans


def phoenix_spans(phoenix: str) -> list[dict[str, Any]]:
    return get_json(f"{phoenix}/v1/projects/default/spans?limit=1000")["data"]


def chain(spans: list[dict[str, Any]], trace_id: str, client_span: str, server: str) -> tuple[Any, Any]:
    """mcpgate's SERVER span under the client's, and its CLIENT span under that, if both came."""
    mine = [s for s in spans if s["context"]["trace_id"] == trace_id]
    received = [s for s in mine if s["parent_id"] == client_span and s["name"] == f"tools/call {server}__echo"]
    sent = [s for s in mine if received and s["parent_id"] == received[0]["context"]["span_id"]]
    return (received[0] if received else None, sent[0] if sent else None)


def attributes_ok(span: dict[str, Any], want: dict[str, Any]) -> tuple[bool, str]:
    got = span["attributes"]
    wrong = {k: got.get(k) for k, v in want.items() if (got.get(k) != v if v is not None else not got.get(k))}
    return not wrong, f"wrong or missing: {wrong}" if wrong else ", ".join(f"{k}={got[k]}" for k in want)


def seen_by(stats_url: str) -> dict[str, Any]:
    calls = [c for c in get_json(stats_url)["trace_context"] if c["method"] == "tools/call"]
    return calls[-1] if calls else {}


def stdio_stats(log: str) -> str | None:
    """The /stats URL the stdio fixture announced on its stderr (in mcpgate's log)."""
    with open(log) as f:
        found = re.findall(r"server `local` \(stderr\): listening on (\S+)", f.read())
    return f"http://{found[-1]}/stats" if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--phoenix", required=True)
    parser.add_argument("--fixture-stats", required=True)
    parser.add_argument("--gate-log", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()

    provider = TracerProvider(resource=Resource.create({"service.name": "interop-client"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{args.phoenix}/v1/traces")))
    client_spans = anyio.run(calls, args.gateway, provider.get_tracer("interop"))
    provider.force_flush()

    found: dict[str, tuple[Any, Any]] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        spans = phoenix_spans(args.phoenix)
        found = {s: chain(spans, *client_spans[s], s) for s in client_spans}
        clients = {s["context"]["span_id"] for s in spans}
        if all(r and c for r, c in found.values()) and all(cs[1] in clients for cs in client_spans.values()):
            break
        time.sleep(0.5)
    stats = {"fx": args.fixture_stats, "local": stdio_stats(args.gate_log)}
    for server, transport in SERVERS.items():
        trace_id, client_span = client_spans[server]
        received, sent = found.get(server, (None, None))
        record(
            f"{server}: one trace in Phoenix links the client's span, mcpgate's SERVER span and its CLIENT span",
            bool(received and sent),
            f"trace {trace_id}: client {client_span} > SERVER {received and received['context']['span_id']}"
            f" > CLIENT {sent and sent['context']['span_id']}",
        )
        if not (received and sent):
            continue
        ok, detail = attributes_ok(
            received,
            {"mcp.method.name": "tools/call", "gen_ai.tool.name": f"{server}__echo", "gen_ai.operation.name": "execute_tool",
             "jsonrpc.request.id": None, "mcp.session.id": None, "mcp.protocol.version": None, "network.transport": "tcp"},
        )  # fmt: skip
        record(f"{server}: mcpgate's SERVER span has the MCP attributes", ok, detail)
        want = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "network.transport": transport}
        if transport == "tcp":
            want.update({"server.address": "127.0.0.1", "server.port": None, "mcp.session.id": None})
        ok, detail = attributes_ok(sent, want)
        record(f"{server}: mcpgate's CLIENT span has the MCP attributes", ok, detail)
        parent = f"00-{trace_id}-{sent['context']['span_id']}-01"
        seen = seen_by(stats[server]) if stats[server] else {}
        carried = seen.get("meta", {}).get("traceparent") == parent
        if transport == "tcp":
            carried = carried and seen.get("header", {}).get("traceparent") == parent
        record(
            f"{server}: the server received mcpgate's CLIENT span as its parent", carried, f"want {parent}, saw {seen}"
        )
    return finish("tracing checks", args.json)


if __name__ == "__main__":
    sys.exit(main())
