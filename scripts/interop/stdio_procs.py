"""mcpgate's child processes, as /proc shows them (scripts/interop/stdio.sh).

    stdio_procs.py watch --pid GATEWAY_PID --out FILE
        Until GATEWAY_PID is gone (or SIGTERM): every 50 ms, each new process below
        it (children, and theirs) as a JSON line of FILE: pid, ppid, pgid, start
        time (clock ticks since boot: with pid, one process), command line.
    stdio_procs.py check --seen FILE --gateway-pid PID --spawned N --json OUT
                         [--servers JSON] [--tree] [--env-mark KEY=VALUE]
        After mcpgate stopped: the watch saw N children of mcpgate (as many as it
        spawned, by status.json), each a stdio server's; every process it saw is
        gone (not merely re-parented, and no zombie), none is left in any of
        their process groups, and no process left in /proc runs one of the
        stdio servers' command lines. Writes the result rows (report.py checks)
        to OUT; exit status 1 if one failed. --servers: a file of
        {"name": "what tells its processes apart in their command lines"}
        instead of stdio.sh's four; --tree: the children may start processes
        of their own (npx starts node, uvx python), which the watch saw too;
        --env-mark: no process left in /proc has KEY=VALUE in its environment
        (one mcpgate's children inherit and nothing else on the host has).

The Python client imports `descendants` and `server_of` for its own look while
two sessions are open.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

# What tells each stdio server's process apart in its command line.
SERVERS = {
    "filesystem": "@modelcontextprotocol/server-filesystem/dist/index.js",
    "memory": "@modelcontextprotocol/server-memory/dist/index.js",
    "everything": "@modelcontextprotocol/server-everything/dist/index.js stdio",
    "time": "bin/mcp-server-time",
}


def server_of(cmdline: str) -> str | None:
    return next((name for name, needle in SERVERS.items() if needle in cmdline), None)


def stat(pid: int) -> dict[str, Any] | None:
    """pid, ppid, pgid, start time and command line of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: the rest follows the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return {
        "pid": pid,
        "state": fields[0],
        "ppid": int(fields[1]),
        "pgid": int(fields[2]),
        "start": int(fields[19]),
        "cmdline": cmdline,
    }


def processes() -> list[dict[str, Any]]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = stat(int(entry))
            if s is not None:
                found.append(s)
    return found


def descendants(pid: int, everything: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The processes below `pid`: its children, theirs, and so on."""
    everything = processes() if everything is None else everything
    below: list[dict[str, Any]] = []
    parents = {pid}
    while True:
        more = [p for p in everything if p["ppid"] in parents and p not in below]
        if not more:
            return below
        below.extend(more)
        parents = {p["pid"] for p in more}


def watch(gateway: int, out: str) -> int:
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    seen: set[tuple[int, int]] = set()
    own = (stat(gateway) or {}).get("cmdline")
    with open(out, "a") as f:
        while not stop and stat(gateway) is not None:
            for p in descendants(gateway):
                key = (p["pid"], p["start"])
                # Between fork and exec a child still shows mcpgate's own command line, and
                # in the middle of an exec none at all (CI once noted uvx so, and its server
                # then matched nothing): it is noted on a later look, once it runs its server.
                if key not in seen and p["cmdline"] not in ("", own):
                    seen.add(key)
                    f.write(json.dumps(p) + "\n")
                    f.flush()
            time.sleep(0.05)
    return 0


def environ_has(pid: int, mark: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return mark in f.read().split(b"\0")
    except OSError:
        return False


def check(seen_file: str, gateway: int, spawned: int, out: str, in_tree: bool = False, env_mark: str = "") -> int:
    rows: list[dict[str, Any]] = []

    def row(name: str, ok: bool, detail: str) -> None:
        rows.append({"name": name, "ok": ok, "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name} -- {detail}")

    try:
        with open(seen_file) as f:
            seen = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        seen = []
        row("/proc: the watch saw mcpgate's children", False, f"cannot read {seen_file}: {e}")
    gateway_gone = stat(gateway) is None
    now = processes()
    by_pid = {p["pid"]: p for p in now}
    # Gone: no process with that pid and start time (a pid may have been reused since).
    left = [p for p in seen if (q := by_pid.get(p["pid"])) is not None and q["start"] == p["start"]]
    groups = {p["pid"] for p in seen}
    in_groups = [p for p in now if p["pgid"] in groups]
    servers_left = [p for p in now if server_of(p["cmdline"])]
    kinds: dict[str, int] = {}
    for p in seen:
        kind = server_of(p["cmdline"]) or f"other: {p['cmdline'][:60]}"
        kinds[kind] = kinds.get(kind, 0) + 1
    summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    children = [p for p in seen if p["ppid"] == gateway]
    # With --tree the children's own processes count too: each must be below a child seen.
    below = {p["pid"] for p in children}
    for p in seen:
        if p["ppid"] in below:
            below.add(p["pid"])
    row(
        "/proc: the watch saw as many children of mcpgate as it spawned, each a stdio server's"
        + (" (and what they started)" if in_tree else ""),
        len(children) == spawned
        and (len(below) == len(seen) if in_tree else len(children) == len(seen))
        and all(server_of(p["cmdline"]) for p in (children if in_tree else seen)),
        f"{len(seen)} seen ({len(children)} children of PID {gateway}), status.json counted {spawned} spawned: "
        + (summary or "none"),
    )
    row(
        "/proc after mcpgate stopped: none of its children is left (by PID and start time)",
        gateway_gone and bool(seen) and not left,
        ("mcpgate still runs; " if not gateway_gone else "")
        + (
            "left: "
            + "; ".join(
                f"{p['pid']} (now {by_pid[p['pid']]['state']}, parent {by_pid[p['pid']]['ppid']}) {p['cmdline'][:80]}"
                for p in left
            )
            if left
            else f"all {len(seen)} PIDs gone: {' '.join(str(p['pid']) for p in seen)}"
        ),
    )
    row(
        "/proc after mcpgate stopped: nothing left in its children's process groups",
        not in_groups,
        "; ".join(f"{p['pid']} (group {p['pgid']}) {p['cmdline'][:80]}" for p in in_groups)
        or f"{len(groups)} groups empty",
    )
    row(
        "/proc after mcpgate stopped: no process runs a stdio server's command line",
        not servers_left,
        "; ".join(f"{p['pid']} (parent {p['ppid']}) {p['cmdline'][:80]}" for p in servers_left)
        or f"none of {len(now)} processes matches {', '.join(SERVERS.values())}",
    )
    if env_mark:
        marked = [p for p in now if environ_has(p["pid"], env_mark.encode())]
        row(
            f"/proc after mcpgate stopped: no process has {env_mark} in its environment (what mcpgate started has)",
            not marked,
            "; ".join(f"{p['pid']} ({p['state']}, parent {p['ppid']}) {p['cmdline'][:80]}" for p in marked)
            or f"none of {len(now)} processes",
        )
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch")
    w.add_argument("--pid", type=int, required=True)
    w.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("--seen", required=True)
    c.add_argument("--gateway-pid", type=int, required=True)
    c.add_argument("--spawned", type=int, required=True)
    c.add_argument("--json", required=True)
    c.add_argument("--servers")
    c.add_argument("--tree", action="store_true")
    c.add_argument("--env-mark", default="")
    args = parser.parse_args()
    if args.command == "watch":
        return watch(args.pid, args.out)
    if args.servers:
        with open(args.servers) as f:
            SERVERS.clear()
            SERVERS.update(json.load(f))
    return check(args.seen, args.gateway_pid, args.spawned, args.json, args.tree, args.env_mark)


if __name__ == "__main__":
    sys.exit(main())
