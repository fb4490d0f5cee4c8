"""The client matrix's verdicts: reads what each client run measured (flow.py and
ts_client.cjs write one JSON file per client and target) and what the taps saw
(tap.py), and writes the matrix as markdown, the opening sequences, and one
result row per client and feature for interop.sh's summary table.

    matrix.py --runs DIR --taps DIR --xfail FILE --md FILE --out RESULTS.tsv

A cell is `direct / through`: direct is the client against each server on its
own, through is the same client through mcpgate in front of all three (a
server's names prefixed there, compared by the original name). Each is ok,
FAIL (naming the servers that failed), or n/a (the client cannot do it; no
server has it: -). A cell that is ok directly for a server and not through
mcpgate for the same server FAILs the run, unless the XFAIL file names it
(`matrix:<client>:<feature>|reason`): XFAIL. A list through mcpgate must also
hold what the direct list held (minus tools added at run time). A feature of one era
(ERA_ONLY: cacheScope) that is n/a through mcpgate because the client landed there in
the session era is not compared: whether that era was the right one is the era row's
verdict (mcpgate's rule for servers of mixed eras), and the client pinned to 2026-07-28
still compares it.

DELETE is read from the taps: every session the client opened must have been
ended with a DELETE answered 2xx, and the client must have closed without an
error.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flow import FEATURES, SERVERS
from report import append, load_xfails

CLIENTS = [
    "typescript-sdk", "typescript-sdk-2", "inspector-cli", "mcp-remote", "python-sdk-1.x", "python-sdk-2.x",
    "python-sdk-2.x-pinned", "fastmcp", "rmcp",
]  # fmt: skip
# Clients pinned to 2026-07-28: they do not negotiate, so their era through mcpgate may differ.
PINNED = {"python-sdk-2.x-pinned"}
MCP_PATH = "/mcp"
MODERN = "2026-07-28"
# Features only 2026-07-28 has: n/a through mcpgate when the client negotiated the session era there.
ERA_ONLY = {"cacheScope"}


def era_of(features: dict[str, Any], server: str) -> str | None:
    """The protocol version a run negotiated with `server`, from its initialize cell ("protocol X, ...")."""
    cell = features.get("initialize", {}).get(server)
    if not cell or cell.get("ok") is not True:
        return None
    match = re.search(r"protocol (\S+?)[,;]", cell.get("detail", "") + ",")
    return match.group(1) if match else None


def era_from_tap(rows: list[dict[str, Any]]) -> str | None:
    """The protocol version a client's run spoke, from what its tap saw (for clients that do not
    say it): the version of the first request sent with MCP-Protocol-Version after its opening."""
    for r in rows:
        if r["type"] == "request" and isinstance(r.get("body"), dict) and r["body"].get("method") != "server/discover":
            version = r["headers"].get("mcp-protocol-version")
            if version:
                return version
    return None


def family(version: str | None) -> str | None:
    """2026-07-28, or `session` for a version of the session era (2025-11-25 and before)."""
    return None if version is None else (MODERN if version == MODERN else "session")


def era_verdict(client: str, runs: dict[str, dict[str, Any]], taps: str) -> tuple[bool | None, str, str]:
    """Whether `client` negotiated through mcpgate the era it negotiated directly: 2026-07-28 when it did
    so with every server, else the session era (mcpgate's rule for servers of mixed eras). Returns the
    verdict (None: nothing to compare), the cell for the table, and the detail."""

    def tapped(target: str) -> str | None:
        return era_from_tap(load_tap(os.path.join(taps, f"{client}--{target.replace(':', '-')}.jsonl")))

    direct = {
        t.split(":", 1)[1]: era_of(f, t.split(":", 1)[1]) or tapped(t) for t, f in runs.items() if t.startswith("direct:")
    }
    through = {era_of(runs.get("mcpgate", {}), s) for s in SERVERS} - {None}
    through_version = next(iter(through), None) or (tapped("mcpgate") if "mcpgate" in runs else None)
    cell = ",".join(direct.get(s) or "-" for s in SERVERS if s in direct) + f" / {through_version or '-'}"
    known = {s: v for s, v in direct.items() if v}
    if not known:
        return None, cell, f"no version seen directly: {direct}"
    if through_version is None:
        return (None if client in PINNED else False), cell, f"direct {known}; no version seen through mcpgate"
    expected = MODERN if all(v == MODERN for v in known.values()) else "session"
    detail = (
        f"direct: {', '.join(f'{s} {v}' for s, v in known.items())}; through mcpgate: {through_version} "
        f"(as directly: {expected}{'' if expected == MODERN else ', as not every server spoke 2026-07-28'})"
    )
    ok = family(through_version) == expected
    if not ok and client in PINNED:
        return None, cell, detail + "; pinned, not negotiated"
    return ok, cell, detail


def load_tap(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def delete_verdict(rows: list[dict[str, Any]], close_error: dict[str, Any] | None) -> tuple[bool | None, str]:
    """Whether every session the client opened was ended by a DELETE answered 2xx."""
    sessions: set[str] = set()
    deleted: set[str] = set()
    status = {r["seq"]: r["status"] for r in rows if r["type"] == "response"}
    initialize = {r["seq"] for r in rows if r["type"] == "request" and isinstance(r.get("body"), dict)
                  and r["body"].get("method") == "initialize"}  # fmt: skip
    for r in rows:  # a session: what a successful initialize answered with
        if r["type"] == "response" and r["seq"] in initialize and 200 <= r["status"] < 300 and r["headers"].get("mcp-session-id"):
            sessions.add(r["headers"]["mcp-session-id"])
    for r in rows:
        if r["type"] == "request" and r["method"] == "DELETE":
            sid = r["headers"].get("mcp-session-id", "")
            if 200 <= status.get(r["seq"], 0) < 300:
                deleted.add(sid)
    if not rows:
        return False, "the tap saw nothing"
    if not sessions:
        return None, "no session (sessionless)"
    ok = sessions <= deleted and close_error is None
    detail = f"{len(deleted & sessions)} of {len(sessions)} session(s) ended with DELETE"
    if close_error:
        detail += f"; closing failed: {close_error['detail']}"
    return ok, detail


def opening(rows: list[dict[str, Any]], upto: int = 16) -> list[str]:
    """The client's first requests and their answers, up to its first list request."""
    out: list[str] = []
    status: dict[int, dict[str, Any]] = {r["seq"]: r for r in rows if r["type"] == "response"}
    for r in rows:
        if r["type"] != "request":
            continue
        body = r.get("body")
        method = body.get("method") if isinstance(body, dict) else ("batch" if isinstance(body, list) else "")
        h = r["headers"]
        what = f"{r['method']} {r['path']}" + (f" {method}" if method else "")
        extras = []
        if isinstance(body, dict) and method == "initialize":
            extras.append(f"protocolVersion {body.get('params', {}).get('protocolVersion')}")
        if h.get("mcp-protocol-version"):
            extras.append(f"MCP-Protocol-Version {h['mcp-protocol-version']}")
        if r["method"] == "GET" and r["path"] == MCP_PATH:
            extras.append("with session" if h.get("mcp-session-id") else "no session")
        if h.get("authorization"):
            extras.append("Authorization")
        answer = status.get(r["seq"])
        got = f"{answer['status']} {(answer['headers'].get('content-type') or '').split(';')[0]}".strip() if answer else "no answer"
        if answer and answer["headers"].get("www-authenticate"):
            got += f" (WWW-Authenticate: {answer['headers']['www-authenticate'][:80]})"
        out.append(f"{what}{' [' + ', '.join(extras) + ']' if extras else ''} -> {got}")
        if len(out) >= upto or (method or "").endswith("/list"):
            break
    return out


def summarize(cells: dict[str, dict[str, Any]]) -> str:
    if not cells:
        return "-"
    values = {s: c["ok"] for s, c in cells.items()}
    if all(v is None for v in values.values()):
        return "n/a"
    failed = [s for s in SERVERS if values.get(s) is False]
    if failed:
        return "FAIL(" + ",".join(failed) + ")"
    return "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True)
    parser.add_argument("--taps", required=True)
    parser.add_argument("--xfail", required=True)
    parser.add_argument("--md", required=True)
    parser.add_argument("--openings", required=True, help="write the opening sequences here")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    xfails = load_xfails(args.xfail, "matrix")

    # runs[client][target] = features
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted(glob.glob(os.path.join(args.runs, "*.json"))):
        with open(path) as f:
            data = json.load(f)
        runs.setdefault(data["client"], {})[data["target"]] = data["features"]
    clients = [c for c in CLIENTS if c in runs] + sorted(c for c in runs if c not in CLIENTS)

    # DELETE from the taps; direct: `<client>--direct-<server>.jsonl`, through: `<client>--mcpgate.jsonl`.
    for client in clients:
        for target, features in runs[client].items():
            label = f"{client}--{target.replace(':', '-')}"
            ok, detail = delete_verdict(load_tap(os.path.join(args.taps, f"{label}.jsonl")), features.get("_error", {}).get("close"))
            servers = SERVERS if target == "mcpgate" else [target.split(":", 1)[1]]
            features["DELETE"] = {s: {"ok": ok, "detail": detail} for s in servers}

    # Cells, and what differs between direct and through.
    rows: list[str] = []
    failures: list[str] = []
    table: dict[str, dict[str, str]] = {f: {} for f in FEATURES}
    for client in clients:
        through = runs[client].get("mcpgate", {})
        direct: dict[str, dict[str, Any]] = {}
        lists: dict[str, list[str]] = {}
        for target, features in runs[client].items():
            if target.startswith("direct:"):
                for feature in FEATURES:
                    direct.setdefault(feature, {}).update(features.get(feature, {}))
                lists.update(features.get("_lists", {}))
        through_lists = through.get("_lists", {})
        same: list[str] = []
        compared = 0
        for feature in FEATURES:
            d, t = direct.get(feature, {}), dict(through.get(feature, {}))
            # A list through mcpgate must hold every item the server listed directly.
            for key, items in lists.items():
                kind, server = key.split(":")
                if feature == f"{kind}/list" and server in t and t[server]["ok"]:
                    missing = sorted(set(items) - set(through_lists.get(key, [])))
                    if missing:
                        t[server] = {"ok": False, "detail": f"through mcpgate lacks {missing} (listed directly)"}
            table[feature][client] = f"{summarize(d)} / {summarize(t)}" if d or t else "-"
            broken = [
                s for s in SERVERS
                if d.get(s, {}).get("ok") is True and t.get(s, {}).get("ok") is not True
                and not (feature in ERA_ONLY and s in t and t[s]["ok"] is None)
            ]  # fmt: skip
            reason = xfails.get(f"{client}:{feature}")
            if broken:
                detail = "; ".join(
                    f"{s}: direct {d[s]['detail']!r} / through {t.get(s, {}).get('detail', 'not run')!r}" for s in broken
                )
                status = "XFAIL" if reason else "FAIL"
                append(args.out, "client matrix: direct vs through mcpgate", f"{client}: {feature}", 0, 1, status,
                       reason if reason else detail)  # fmt: skip
                failures.append(f"{status} {client} {feature}: {detail}" + (f" (XFAIL: {reason})" if reason else ""))
            elif reason:
                append(args.out, "client matrix: direct vs through mcpgate", f"{client}: {feature}", 1, 1, "XPASS", reason)
            if feature in ERA_ONLY and t and all(c["ok"] is None for c in t.values()):
                continue  # not compared (see the docstring): in the table, not in the count
            if d or t:
                compared = compared + 1 if broken else compared
                same.append(feature) if not broken else None
        # One row for what holds: every feature that works directly works through mcpgate.
        append(args.out, "client matrix: direct vs through mcpgate",
               f"{client}: {len(same)} of {len(same) + compared} features as good through mcpgate as directly",
               len(same), len(same) + compared, "PASS", ", ".join(same))  # fmt: skip

    # The era each client negotiated, directly with each server and through mcpgate.
    eras: dict[str, str] = {}
    for client in clients:
        ok, cell, detail = era_verdict(client, runs[client], args.taps)
        eras[client] = cell
        name = f"{client}: negotiates through mcpgate the era it negotiates directly"
        if ok is None:
            append(args.out, "client matrix: protocol era", name, 0, 0, "SKIP", detail)
        else:
            append(args.out, "client matrix: protocol era", name, int(ok), 1, "PASS" if ok else "FAIL", detail)
            if not ok:
                failures.append(f"FAIL {client} era: {detail}")

    # The markdown.
    rows.append("| feature | " + " | ".join(clients) + " |")
    rows.append("|---|" + "---|" * len(clients))
    rows.append("| era | " + " | ".join(eras.get(c, "-") for c in clients) + " |")
    for feature in FEATURES:
        rows.append(f"| {feature} | " + " | ".join(table[feature].get(c, "-") for c in clients) + " |")
    notes = [
        "",
        "era: the protocol version negotiated directly with everything, py, fm / through mcpgate; through mcpgate it",
        "must be 2026-07-28 when it was so with every server, else the session era (a pinned client is not judged).",
        "Each cell: direct / through mcpgate. direct: the client against each server on its own; through: the same",
        "client through one mcpgate in front of server-everything (`everything`), the Python SDK server (`py`) and",
        "the FastMCP server (`fm`). ok, FAIL(servers), n/a (the client cannot), - (no server has it).",
    ]
    with open(args.md, "w") as f:
        f.write("\n".join(rows + notes) + "\n")
        if failures:
            f.write("\nDirect ok, through mcpgate not:\n\n" + "\n".join(f"- {x}" for x in failures) + "\n")
        f.write("\nDetails of each cell that is not ok:\n\n")
        for client in clients:
            for target, features in sorted(runs[client].items()):
                for feature in FEATURES:
                    for server, cell in features.get(feature, {}).items():
                        if cell["ok"] is False:
                            f.write(f"- {client}, {target}, {feature}, {server}: {cell['detail']}\n")
                for key, cell in features.get("_error", {}).items():
                    f.write(f"- {client}, {target}, the client ({key}): {cell['detail']}\n")

    # Opening sequences: every run has a tap of its own.
    with open(args.openings, "w") as f:
        for path in sorted(glob.glob(os.path.join(args.taps, "*.jsonl"))):
            label = os.path.basename(path)[: -len(".jsonl")]
            if label.startswith("open--") or label.endswith("--direct-everything") or label.endswith("--mcpgate"):
                f.write(f"{label}:\n" + "".join(f"  {line}\n" for line in opening(load_tap(path))) + "\n")
    print("\n".join(rows))
    for x in failures:
        print(x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
