"""Turns the raw results of scripts/bench.sh into one table (sections 1 to 4:
HTTP servers; 5: a stdio server).

    report.py RESULTS.jsonl CHURN.csv full|smoke --versions TEXT --command TEXT

Full mode writes docs/BENCHMARKS.md and docs/churn.svg; smoke mode writes
.bench/BENCHMARKS.smoke.md. Both print the table. The exit status is 1 when
a correctness check fails (an error in a call, a DELETE missing, a thread
left behind); timing targets are reported, never enforced: they depend on
the machine and its load.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Where the section of scripts/cross.sh --full starts in docs/BENCHMARKS.md (to the end of the file).
BOARDS_MARK = "<!-- boards: written by scripts/cross.sh --full -->"


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) // (1024 * 1024)
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}), {mem} GiB, Linux {platform.release()}"


def load(path: str) -> list[dict]:
    return [json.loads(line) for line in open(path) if line.strip()]


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def overhead(rows: list[dict], server: str):
    """Per client count: the median over rounds of p50, p99 and throughput, per target."""
    table: dict[int, dict[str, dict]] = {}
    for row in rows:
        if row["part"] != "overhead" or row["server"] != server:
            continue
        r = row["result"]
        cell = table.setdefault(r["clients"], {}).setdefault(row["target"], {"p50": [], "p99": [], "tput": [], "errors": 0})
        cell["p50"].append(r["p50_us"])
        cell["p99"].append(r["p99_us"])
        cell["tput"].append(r["throughput"])
        cell["errors"] += r["errors"]
    return {
        clients: {t: {k: (median(v) if k != "errors" else v) for k, v in cell.items()} for t, cell in targets.items()}
        for clients, targets in sorted(table.items())
    }


def fmt_us(v):
    return "-" if v is None else f"{v / 1000:.2f} ms"


def svg(samples: list[dict], path: str) -> None:
    """RSS and threads over the churn run, as two lines on one time axis."""
    if not samples:
        return
    w, h, left, right, top, bottom = 760, 300, 60, 60, 20, 40
    t_max = max(s["t"] for s in samples) or 1
    rss_max = max(s["rss"] for s in samples) * 1.1 or 1
    th_max = max(s["threads"] for s in samples) * 1.1 or 1

    def x(t):
        return left + (w - left - right) * t / t_max

    def y(v, vmax):
        return top + (h - top - bottom) * (1 - v / vmax)

    rss_line = " ".join(f"{x(s['t']):.1f},{y(s['rss'], rss_max):.1f}" for s in samples)
    th_line = " ".join(f"{x(s['t']):.1f},{y(s['threads'], th_max):.1f}" for s in samples)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#444"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#1f77b4"/>',
        f'<line x1="{w - right}" y1="{top}" x2="{w - right}" y2="{h - bottom}" stroke="#d62728"/>',
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{rss_line}"/>',
        f'<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="{th_line}"/>',
        f'<text x="{left}" y="{top - 6}" fill="#1f77b4">RSS (MiB)</text>',
        f'<text x="{w - right}" y="{top - 6}" fill="#d62728" text-anchor="end">threads</text>',
        f'<text x="{(w) / 2}" y="{h - 8}" text-anchor="middle">seconds into the churn run</text>',
    ]
    for i in range(5):
        frac = i / 4
        yy = top + (h - top - bottom) * (1 - frac)
        parts.append(f'<text x="{left - 6}" y="{yy + 4:.0f}" text-anchor="end" fill="#1f77b4">{rss_max * frac / 1048576:.1f}</text>')
        parts.append(f'<text x="{w - right + 6}" y="{yy + 4:.0f}" fill="#d62728">{th_max * frac:.0f}</text>')
        xx = left + (w - left - right) * frac
        parts.append(f'<text x="{xx:.0f}" y="{h - bottom + 14}" text-anchor="middle">{t_max * frac:.0f}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def fmt_kib(kib):
    return f"{kib / 1024:.1f} MiB"


def ratio(a, b, digits=2):
    return "-" if not a or not b else f"{a / b:.{digits}f}"


# Issue 43's floor: what mcpgate must reach against the bare relay in the same rounds, per era,
# result size and client count.
RELAY_THROUGHPUT, RELAY_P99, RELAY_CPU = 0.9, 1.2, 1.2


def round_ratios(gate_runs, relay_runs):
    """mcpgate's throughput, p99 and CPU per call over the bare relay's, each the median of the
    rounds' own ratios (the two measured one after the other in each round), with the rounds'
    range beside it when there is more than one. A round the host spent elsewhere moves one
    ratio, not the target; the tables beside show the rounds pooled."""
    relay = {r.get("round", 1): r for r in relay_runs}
    pairs = [(g, relay[g.get("round", 1)]) for g in gate_runs if g.get("round", 1) in relay]

    def per_call(r):
        ticks = r.get("gateway_ticks")
        return None if ticks is None else ticks / max(r["result"]["calls"], 1)

    def paired(of):
        ratios = sorted(a / b for a, b in ((of(g), of(f)) for g, f in pairs) if a and b)
        if not ratios:
            return None
        spread = f" (rounds {ratios[0]:.2f} to {ratios[-1]:.2f})" if len(ratios) > 1 else ""
        return median(ratios), spread

    return {
        "tput": paired(lambda r: r["result"]["throughput"]),
        "p99": paired(lambda r: r["result"]["p99_us"]),
        "cpu": paired(per_call),
    }


def cpu_section(rows, say, failures, era="session"):
    """1d, for the session era and for 2026-07-28 (measured in step 1c): CPU per call (user + sys from /proc) of the
    relaying process and of the server, with latency and throughput, per target, result size and
    client count; the floor is the bare relay, and the targets are against it. Correctness (smoke
    too): as many server requests per call through mcpgate as direct, and no threads or
    descriptors left behind."""
    cpu = [r for r in rows if r["part"] == "cpu" and r.get("era", "session") == era]
    targets = []
    if not cpu:
        return targets
    rounds = max((r.get("round", 1) for r in cpu), default=1)
    if era == "session":
        say("## 1d. CPU per call: direct, the bare relay (the floor), mcpgate, the FastMCP proxy")
        say("")
        say(
            f"Interleaved, in {rounds} round(s) (the FastMCP proxy in the first only). CPU is user + sys of the "
            "process from `/proc/PID/stat` over the points, summed over the rounds and divided by their calls: of "
            "the relaying process (the bare relay, mcpgate, the FastMCP proxy), and of the server (mcp-fixture). "
            "p50, p99 and req/s are the medians of the rounds. The targets against the bare relay are the medians "
            "of each round's own ratio, mcpgate's over the relay's, measured one after the other; the two swap "
            "places every other round. Results of about 100 B (`echo`), 100 KB and 1 MB "
            "(`big`). Where mcpgate's CPU goes: [PROFILE.md](PROFILE.md) (`scripts/profile.sh`, perf)."
        )
    else:
        say("## 1d, protocol 2026-07-28: CPU per call: direct, the bare relay (the floor), mcpgate")
        say("")
        say(
            f"As 1d, in {rounds} round(s), with clients of 2026-07-28 and `mcp-fixture --modern` (section 1c's "
            "servers): each call is one POST, which mcpgate sends on to the server as one POST of that era."
        )
    say("")
    say("| result | clients | target | relay CPU/call | server CPU/call | p50 / p99 | req/s | server requests/call |")
    say("|---|---|---|---|---|---|---|---|")
    # The rounds of each point, in the order the points first ran.
    points: dict = {}
    for r in cpu:
        points.setdefault((r["size"], r["result"]["clients"], r["target"]), []).append(r)
    cell: dict = {}
    for (size, clients, target), runs in points.items():
        calls = sum(r["result"]["calls"] for r in runs)
        per = 1e6 / runs[0]["clk_tck"] / max(calls, 1)
        ticks = [r["gateway_ticks"] for r in runs]
        gw = None if None in ticks else sum(ticks) * per
        sv = sum(r["server_ticks"] for r in runs) * per
        requests = sum(r["server_requests"] for r in runs)
        errors = sum(r["result"]["errors"] for r in runs)
        p50, p99 = median([r["result"]["p50_us"] for r in runs]), median([r["result"]["p99_us"] for r in runs])
        tput = median([r["result"]["throughput"] for r in runs])
        cell[(size, clients, target)] = {"gw": gw, "sv": sv, "p50": p50, "p99": p99, "tput": tput,
                                         "rpc": requests / max(calls, 1), "errors": errors, "calls": calls,
                                         "sessions": clients * len(runs)}
        if errors:
            failures.append(f"cpu: {errors} failed calls ({target}, {size}, {clients} clients)")
        say(
            f"| {size} | {clients} | {target} | {'-' if gw is None else f'{gw:.0f} µs'} | {sv:.0f} µs "
            f"| {fmt_us(p50)} / {fmt_us(p99)} | {tput:.0f} | {requests / max(calls, 1):.3f} |"
        )
    say("")
    # Requests the server saw beyond the calls, per client session: opening, the warm-up call,
    # DELETE. mcpgate may add its own few per session (the lists it merges), never any per call.
    for (size, clients, target), c in sorted(cell.items()):
        if target != "mcpgate":
            continue
        d = cell.get((size, clients, "direct"))
        if not d:
            continue
        extra = (c["rpc"] - 1) * c["calls"] / c["sessions"]
        extra_direct = (d["rpc"] - 1) * d["calls"] / d["sessions"]
        if extra - extra_direct > 4:
            failures.append(
                f"cpu: the server saw {extra:.1f} requests per session beyond the calls through mcpgate, "
                f"{extra_direct:.1f} direct ({size}, {clients} clients): more than a session's opening and closing"
            )
    # Growth per call would be thousands over the step. What may differ is the lanes' kept-alive
    # connections to the server (calls_per_server: 64, the default), which the server closes when
    # idle and a later call opens again. (Section 1d's mcpgate only: 1c's is stopped after its points.)
    growth = next((r for r in rows if r["part"] == "cpu-growth" and era == "session"), None)
    lanes = 64
    if growth and (
        growth["threads_after"] > growth["threads_before"] or growth["fds_after"] > growth["fds_before"] + lanes
    ):
        failures.append(
            f"cpu: mcpgate kept {growth['threads_after'] - growth['threads_before']} threads and "
            f"{growth['fds_after'] - growth['fds_before']} descriptors after its clients left"
        )
    name = "session era" if era == "session" else era
    for size in ("100B", "100KB", "1MB"):
        for clients in sorted({k[1] for k in cell}):
            g, f = cell.get((size, clients, "mcpgate")), cell.get((size, clients, "relay"))
            if not (g and f and f["tput"] and f["p99"]):
                continue
            point = f"{name}, {size}, {clients} client{'s' if clients > 1 else ''}"
            paired = round_ratios(points.get((size, clients, "mcpgate"), []), points.get((size, clients, "relay"), []))
            r, spread = paired["tput"] or (0.0, "")
            targets.append((f"throughput >= {RELAY_THROUGHPUT} of the bare relay's ({point})", f"{r:.2f}{spread} ({g['tput']:.0f} / {f['tput']:.0f} req/s)", r >= RELAY_THROUGHPUT, ""))
            r, spread = paired["p99"] or (float("inf"), "")
            targets.append((f"p99 <= {RELAY_P99} x the bare relay's ({point})", f"{r:.2f} x{spread} ({fmt_us(g['p99'])} / {fmt_us(f['p99'])})", r <= RELAY_P99, ""))
            if g["gw"] and f["gw"] and paired["cpu"]:
                r, spread = paired["cpu"]
                targets.append((f"CPU per call <= {RELAY_CPU} x the bare relay's ({point})", f"{r:.2f} x{spread} ({g['gw']:.0f} / {f['gw']:.0f} µs)", r <= RELAY_CPU, ""))
    d1, g1 = cell.get(("100B", 1, "direct")), cell.get(("100B", 1, "mcpgate"))
    if era == "session" and d1 and g1:
        added = (g1["p50"] - d1["p50"]) / 1000
        targets.append(("added p50 < 0.1 ms (1 client, 100 B)", f"{added:.3f} ms", added < 0.1, ""))
    return targets


def auth_tls_section(rows, say, failures):
    """1f: what a JWT costs per call next to a static token (it is checked once, then kept by its
    hash), and what TLS costs: a new connection's handshake, and a call on a kept-alive one.
    Correctness (smoke too): no call failed, the JWT was checked once, every handshake worked."""
    targets = []
    auth = [r for r in rows if r["part"] == "auth"]
    connect = [r for r in rows if r["part"] == "tls-connect"]
    if not auth and not connect:
        return targets

    def per(r, count):
        return r["gateway_ticks"] * 1e6 / r["clk_tck"] / max(count, 1)

    say("## 1f. OAuth and TLS")
    say("")
    say(
        "mcpgate in front of mcp-fixture with a static token and `auth.oauth` (the bench's own issuer, "
        "scripts/bench/jwt_issuer.py: RS256). The JWT's signature and claims are checked on its first request; "
        "after that it is found by its SHA-256, so the rows show what each call costs. CPU: mcpgate's user + sys "
        "from `/proc` over the point, divided by the calls. Median of the rounds."
    )
    say("")
    say("| clients | static token p50 / p99 | JWT p50 / p99 | added p50 | static CPU/call | JWT CPU/call | added CPU/call |")
    say("|---|---|---|---|---|---|---|")
    cells: dict = {}
    for r in auth:
        res = r["result"]
        if res["errors"]:
            failures.append(f"auth: {res['errors']} failed calls with the {r['token']} token ({res['clients']} clients)")
        c = cells.setdefault((res["clients"], r["token"]), {"p50": [], "p99": [], "cpu": []})
        c["p50"].append(res["p50_us"])
        c["p99"].append(res["p99_us"])
        c["cpu"].append(per(r, res["calls"]))
    for clients in sorted({k[0] for k in cells}):
        st, jw = cells.get((clients, "static")), cells.get((clients, "jwt"))
        if not (st and jw):
            continue
        s50, j50, scpu, jcpu = median(st["p50"]), median(jw["p50"]), median(st["cpu"]), median(jw["cpu"])
        say(
            f"| {clients} | {fmt_us(s50)} / {fmt_us(median(st['p99']))} | {fmt_us(j50)} / {fmt_us(median(jw['p99']))} "
            f"| {(j50 - s50) / 1000:.3f} ms | {scpu:.0f} µs | {jcpu:.0f} µs | {jcpu - scpu:.0f} µs |"
        )
        if clients == 1:
            targets.append(("a JWT adds < 0.02 ms p50 to a call over a static token (1 client)", f"{(j50 - s50) / 1000:.3f} ms", j50 - s50 < 20, ""))
            targets.append(("a JWT adds < 10 µs of mcpgate's CPU per call (1 client)", f"{jcpu - scpu:.0f} µs", jcpu - scpu < 10, ""))
    checked = next((r for r in rows if r["part"] == "auth-checked"), None)
    if checked:
        say("")
        say(f"Tokens checked by signature in the whole run: **{checked['oauth_checked']}** (one JWT, whatever the calls); refused: {checked['refused']}.")
        if checked["oauth_checked"] != 1 or checked["refused"]:
            failures.append(f"auth: the JWT was checked {checked['oauth_checked']} times (not once), {checked['refused']} requests refused")
    say("")
    if connect:
        say(
            "TLS on the front door (`tls`: ECDSA P-256 certificate, TLS 1.3, ring): new connections one after the other, "
            "each a `GET /healthz` on a connection of its own (TCP connect, handshake, answer), and calls on one kept-alive "
            "connection; the same gate config but for `tls`."
        )
        say("")
        say("| measure | HTTP | HTTPS | added by TLS |")
        say("|---|---|---|---|")
        by: dict = {}
        for r in connect + [r for r in rows if r["part"] == "tls-calls"]:
            res = r["result"]
            if res["errors"]:
                failures.append(f"tls: {res['errors']} failed requests ({r['part']}, {r['scheme']})")
            count = res.get("count", res.get("calls", 0))
            c = by.setdefault((r["part"], r["scheme"]), {"p50": [], "mean": [], "cpu": []})
            c["p50"].append(res["p50_us"])
            c["mean"].append(res.get("mean_us"))
            c["cpu"].append(per(r, count))
        rows_shown = (
            ("new connection, p50", "tls-connect", "p50", fmt_us),
            ("new connection, mcpgate CPU", "tls-connect", "cpu", lambda v: f"{v:.0f} µs"),
            ("call on a kept-alive connection, p50", "tls-calls", "p50", fmt_us),
            ("call on a kept-alive connection, mcpgate CPU", "tls-calls", "cpu", lambda v: f"{v:.0f} µs"),
        )
        for label, part, key, show in rows_shown:
            h, t = by.get((part, "http")), by.get((part, "https"))
            if not (h and t):
                continue
            hv, tv = median(h[key]), median(t[key])
            added = show(tv - hv) if key == "cpu" else f"{(tv - hv) / 1000:.3f} ms"
            say(f"| {label} | {show(hv)} | {show(tv)} | {added} |")
            if part == "tls-connect" and key == "cpu":
                targets.append(("a TLS handshake costs mcpgate < 1 ms of CPU", f"{(tv - hv) / 1000:.3f} ms", tv - hv < 1000, ""))
        hs = next((r for r in rows if r["part"] == "tls-handshakes"), None)
        if hs:
            expected = sum(r["result"]["count"] for r in connect if r["scheme"] == "https")
            if hs["handshakes"]["handshake_failures"] or hs["handshakes"]["handshakes"] < expected:
                failures.append(f"tls: {hs['handshakes']} for {expected} new connections")
        say("")
    return targets


def govern_section(rows, say, failures):
    """1g: what tracing (at a ratio of 1.0 and of 0.01) and the audit log add to each call's CPU in
    mcpgate, next to the same calls without them, in the same rounds. Correctness (smoke too): no
    call failed, no audit record was dropped."""
    targets = []
    govern = [r for r in rows if r["part"] == "govern"]
    if not govern:
        return targets
    names = {"plain": "neither", "trace-1": "tracing, ratio 1.0", "trace-0.01": "tracing, ratio 0.01", "audit": "audit log"}
    say("## 1g. Tracing and the audit log")
    say("")
    say(
        "Four mcpgates in front of mcp-fixture, the points interleaved in each round: without tracing or an audit log, "
        "tracing every call (`sample_ratio` 1.0: a SERVER and a CLIENT span each, exported as OTLP/HTTP protobuf to "
        "a receiver that answers without decoding, scripts/bench/otlp_sink.py), tracing at 0.01, and the audit log (a "
        "file). CPU: mcpgate's user + sys from `/proc` over the point, summed over the rounds and divided by the calls."
    )
    say("")
    say("| clients | " + " | ".join(f"{names[v]}: CPU/call, p50" for v in names) + " |")
    say("|---|" + "---|" * len(names))
    cells: dict = {}
    for r in govern:
        res = r["result"]
        if res["errors"]:
            failures.append(f"govern: {res['errors']} failed calls with {names[r['variant']]} ({res['clients']} clients)")
        c = cells.setdefault((res["clients"], r["variant"]), {"ticks": 0, "calls": 0, "tck": r["clk_tck"], "p50": []})
        c["ticks"] += r["gateway_ticks"]
        c["calls"] += res["calls"]
        c["p50"].append(res["p50_us"])
    for clients in sorted({k[0] for k in cells}):
        cpu = {}
        for v in names:
            c = cells.get((clients, v))
            if c:
                cpu[v] = c["ticks"] * 1e6 / c["tck"] / max(c["calls"], 1)
        base = cpu.get("plain")
        if not base:
            continue
        shown = []
        for v in names:
            if v not in cpu:
                shown.append("-")
                continue
            added = f" ({(cpu[v] / base - 1) * 100:+.1f} %)" if v != "plain" else ""
            shown.append(f"{cpu[v]:.0f} µs{added}, {fmt_us(median(cells[(clients, v)]['p50']))}")
        say(f"| {clients} | " + " | ".join(shown) + " |")
        if "trace-0.01" in cpu:
            r = cpu["trace-0.01"] / base - 1
            name = f"tracing at a ratio of 0.01 adds <= 5 % CPU per call ({clients} client{'s' if clients > 1 else ''})"
            targets.append((name, f"{r * 100:+.1f} % ({cpu['trace-0.01']:.0f} / {base:.0f} µs)", r <= 0.05, ""))
    say("")
    for r in rows:
        if r["part"] == "govern-spans":
            say(f"Spans of the gate traced at {names[r['variant']].split()[-1]}: {r['exported']} exported, {r['dropped']} dropped (a full queue drops).")
        if r["part"] == "govern-audit":
            say(f"Audit records: {r['written']} written, {r['dropped']} dropped.")
            if r["dropped"]:
                failures.append(f"govern: {r['dropped']} audit records dropped")
    say("")
    return targets


def stdio_section(rows, fixture, say, failures):
    """Section 5, stdio servers; returns its rows for the targets table:
    (name, measured, met, note)."""
    targets = []
    stdio = overhead(rows, "stdio")
    peer_missing = next((r["missing"] for r in rows if r["part"] == "stdio-peer"), None)
    if not stdio:
        return targets
    say("## 5. stdio servers")
    say("")
    say(
        "The server is `mcp-fixture --stdio`, a process per client session: started by mcpgate (`\"command\"`, "
        "`\"sharing\": \"session\"`), by the load generator itself over the process's pipes (direct: what a desktop "
        "client does), or by supergateway (`--stdio \"exec ...\" --outputTransport streamableHttp --stateful`, "
        "a process per session too)."
    )
    if peer_missing:
        say("")
        say(f"**supergateway: not measured: {peer_missing}.**")
    say("")
    say("### 5.1 `tools/call` latency and throughput")
    say("")
    say("Median of the rounds; each client has its own session, so its own process, and calls `echo` in a loop, the targets interleaved.")
    say("")
    say(
        "| clients | direct (stdio) p50 / p99 | req/s | mcpgate p50 / p99 | req/s | p50 mcpgate / direct | req/s mcpgate / direct "
        "| supergateway p50 / p99 | req/s | req/s supergateway / direct | req/s mcpgate / supergateway |"
    )
    say("|---|---|---|---|---|---|---|---|---|---|---|")
    for clients, t in stdio.items():
        d, g, p = t.get("direct", {}), t.get("mcpgate", {}), t.get("supergateway", {})
        for name, cell in (("direct stdio", d), ("mcpgate to stdio", g), ("supergateway", p)):
            if cell and cell["errors"]:
                failures.append(f"{cell['errors']} failed calls at {clients} clients ({name})")
        say(
            "| "
            + " | ".join(
                [
                    str(clients),
                    f"{fmt_us(d.get('p50'))} / {fmt_us(d.get('p99'))}",
                    f"{d.get('tput', 0):.0f}",
                    f"{fmt_us(g.get('p50'))} / {fmt_us(g.get('p99'))}",
                    f"{g.get('tput', 0):.0f}",
                    ratio(g.get("p50"), d.get("p50")),
                    ratio(g.get("tput"), d.get("tput")),
                    f"{fmt_us(p['p50'])} / {fmt_us(p['p99'])}" if p else "not measured",
                    f"{p['tput']:.0f}" if p else "-",
                    ratio(p.get("tput"), d.get("tput")),
                    ratio(g.get("tput"), p.get("tput")),
                ]
            )
            + " |"
        )
    say("")
    say(
        "Direct, the load generator writes lines to the server's pipes itself, with no HTTP at all: the ratios to it "
        "include what a Streamable HTTP front costs. The targets compare mcpgate to a stdio server with mcpgate to an "
        "HTTP one (section 1, below) and with supergateway, the same HTTP front before the same server."
    )
    say("")
    said = False
    for clients, t in stdio.items():
        g, h = t.get("mcpgate", {}), fixture.get(clients, {}).get("mcpgate", {})
        if g and h:
            if not said:
                say("Through mcpgate, a stdio server next to an HTTP one (section 1, same run, same clients):")
                say("")
                say("| clients | mcpgate to stdio p50 / req/s | mcpgate to HTTP p50 / req/s | p50 stdio / HTTP | req/s stdio / HTTP | direct: req/s stdio / HTTP |")
                say("|---|---|---|---|---|---|")
                said = True
            ds, dh = t.get("direct", {}), fixture.get(clients, {}).get("direct", {})
            say(
                f"| {clients} | {fmt_us(g['p50'])} / {g['tput']:.0f} | {fmt_us(h['p50'])} / {h['tput']:.0f} "
                f"| {ratio(g['p50'], h['p50'])} | {ratio(g['tput'], h['tput'])} | {ratio(ds.get('tput'), dh.get('tput'))} |"
            )
    if said:
        say("")
        say(
            "The last column is the same ratio without mcpgate: the load generator driving the fixture over its "
            "pipes (a process per client) against the fixture over HTTP (one process), from sections 5a and 1."
        )
        say("")
    t16 = stdio.get(16, {})
    if t16.get("mcpgate") and fixture.get(16, {}).get("mcpgate"):
        r = t16["mcpgate"]["tput"] / fixture[16]["mcpgate"]["tput"]
        targets.append(("stdio: throughput through mcpgate to a stdio server >= 0.9 of to an HTTP one (16 clients)", f"{r:.2f}", r >= 0.9, ""))
    t1 = stdio.get(1, {})
    if t1.get("mcpgate") and fixture.get(1, {}).get("mcpgate"):
        r = t1["mcpgate"]["p50"] / fixture[1]["mcpgate"]["p50"]
        targets.append(("stdio: p50 through mcpgate to a stdio server <= 1.1 x to an HTTP one (1 client)", f"{r:.2f}", r <= 1.1, ""))
    for clients in (16, 1):
        t = stdio.get(clients, {})
        if t.get("mcpgate") and t.get("supergateway"):
            r = t["mcpgate"]["tput"] / t["supergateway"]["tput"]
            targets.append((f"stdio: throughput through mcpgate >= supergateway's ({clients} client{'s' if clients > 1 else ''})", f"{r:.2f} x", r >= 1, ""))
            break

    # 5.2 cold start
    cold: dict[str, dict] = {}
    for r in rows:
        if r["part"] == "cold":
            c = cold.setdefault(r["target"], {"p50": [], "p99": [], "mean": [], "errors": 0, "count": 0})
            c["p50"].append(r["result"]["p50_us"])
            c["p99"].append(r["result"]["p99_us"])
            c["mean"].append(r["result"]["mean_us"])
            c["errors"] += r["result"]["errors"]
            c["count"] += r["result"]["count"]
    cold = {k: {m: (median(v) if isinstance(v, list) else v) for m, v in c.items()} for k, c in cold.items()}
    if cold:
        say("### 5.2 Cold start")
        say("")
        n = next(iter(cold.values()))["count"]
        say(
            f"A new client session, one after the other ({n} per path, in interleaved rounds): from the start of its `initialize` "
            "(a new connection; for direct stdio, the spawn) to its first `tools/call` answered; then DELETE (or stdin closed), "
            "not timed. Median of the rounds."
        )
        say("")
        base = cold.get("mcpgate-http", {}).get("p50")
        say("| path | p50 | p99 | mean | p50 / mcpgate to HTTP |")
        say("|---|---|---|---|---|")
        names = {
            "direct-http": "direct, HTTP server (mcp-fixture)",
            "mcpgate-http": "mcpgate to the HTTP server",
            "direct-stdio": "direct, stdio server (the load generator starts it)",
            "mcpgate-stdio": "mcpgate to the stdio server (its process started for the session)",
            "supergateway-stdio": "supergateway to the stdio server (`--stateful`)",
        }
        for key, name in names.items():
            c = cold.get(key)
            if not c:
                if key.startswith("supergateway"):
                    say(f"| {name} | not measured | - | - | - |")
                continue
            if c["errors"]:
                failures.append(f"cold start: {c['errors']} failed sessions ({key})")
            say(f"| {name} | {fmt_us(c['p50'])} | {fmt_us(c['p99'])} | {fmt_us(c['mean'])} | {ratio(c['p50'], base)} |")
        say("")
        gs, gh, ds = (cold.get(k, {}).get("p50") for k in ("mcpgate-stdio", "mcpgate-http", "direct-stdio"))
        if gs and gh and ds:
            dh = cold.get("direct-http", {}).get("p50") or 0
            say(
                f"mcpgate to stdio / mcpgate to HTTP: **{gs / gh:.2f}**. What mcpgate adds to a cold start: "
                f"{(gs - ds) / 1000:.2f} ms over starting the stdio server directly, {(gh - dh) / 1000:.2f} ms over the HTTP server directly."
            )
            say("")
            # The spawn should cost no more inside mcpgate than outside: a stdio
            # cold start through mcpgate within an HTTP one through mcpgate
            # plus starting the server directly.
            r = gs / (gh + ds)
            targets.append(
                (
                    "stdio: cold start through mcpgate <= through mcpgate to HTTP + starting the stdio server directly (p50)",
                    f"{r:.2f} x ({fmt_us(gs)} / ({fmt_us(gh)} + {fmt_us(ds)}))",
                    r <= 1,
                    "",
                )
            )
            sg = cold.get("supergateway-stdio", {}).get("p50")
            if sg:
                targets.append(("stdio: cold start through mcpgate <= supergateway's (p50)", f"{gs / sg:.2f} x", gs <= sg, ""))

    # 5.3 footprint
    fp = [r for r in rows if r["part"] == "stdio-footprint"]
    if fp:
        say("### 5.3 Footprint per stdio session")
        say("")
        say(
            "Client sessions opened and left open (no client connection held), each with its own child. RSS from "
            "/proc/PID/status, threads counted in /proc/PID/task, and as the status page reports them (one more: the "
            "connection thread that answers it); the children's RSS added up apart."
        )
        say("")
        say("| gateway | client sessions | RSS | threads (/proc) | threads (status page) | children | children's RSS |")
        say("|---|---|---|---|---|---|---|")
        for r in fp:
            p = r["procs"]
            when = {"fresh": " (fresh)", "after one session": " (after one session: the spawner thread stays)"}.get(r["when"], "")
            say(
                f"| {r['target']} | {r['sessions']}{when} | {fmt_kib(p['rss_kib'])} | {p['threads']} | {r.get('status_threads', '-')} "
                f"| {p['children']} | {fmt_kib(p['children_rss_kib'])} |"
            )
        say("")
        mc_held = None
        for target in ("mcpgate", "supergateway"):
            lo = next((r for r in fp if r["target"] == target and r["sessions"] == 0 and r["when"] != "fresh"), None)
            hi = next((r for r in fp if r["target"] == target and r["sessions"] > 0), None)
            if not (lo and hi):
                continue
            n = hi["sessions"]
            d_rss = (hi["procs"]["rss_kib"] - lo["procs"]["rss_kib"]) / n
            d_thr = (hi["procs"]["threads"] - lo["procs"]["threads"]) / n
            child = hi["procs"]["children_rss_kib"] / max(hi["procs"]["children"], 1)
            say(
                f"{target}, per stdio session (0 to {n}): **{d_rss:.1f} KiB RSS and {d_thr:.2f} threads** of its own; "
                f"its child adds {child / 1024:.2f} MiB RSS ({hi['procs']['children']} children for {n} sessions)."
                + (" Node's RSS is mostly its garbage-collected heap, which grows and shrinks by more than that." if target == "supergateway" else "")
            )
            say("")
            if target == "mcpgate":
                if hi["procs"]["children"] != n or hi.get("live") != n:
                    failures.append(f"stdio footprint: {hi['procs']['children']} children in /proc, {hi.get('live')} live on the status page, for {n} sessions")
                targets.append(("stdio: 2 threads per session (stdout reader, stderr logger)", f"{d_thr:.2f}", abs(d_thr - 2) < 0.01, ""))
                targets.append(("stdio: <= 64 KiB RSS in mcpgate per stdio session", f"{d_rss:.1f} KiB", d_rss <= 64, ""))
                mc_held = hi["procs"]["rss_kib"]
            elif mc_held is not None:
                r = mc_held / hi["procs"]["rss_kib"]
                targets.append(
                    (
                        f"stdio: mcpgate's RSS with {n} sessions (children apart) <= supergateway's",
                        f"{r:.3f} x ({fmt_kib(mc_held)} / {fmt_kib(hi['procs']['rss_kib'])})",
                        r <= 1,
                        "",
                    )
                )

    # 5.4 churn
    ch = next((r for r in rows if r["part"] == "stdio-churn"), None)
    if ch:
        res, pr, base, end = ch["result"], ch["processes"], ch["base"], ch["end"]
        say("### 5.4 Churn with a child per session")
        say("")
        say(
            f"{res['cycles']} cycles of initialize, one call, DELETE, 4 at a time; after each call the load generator notes "
            "mcpgate's children (a scan of /proc), and at the end looks each one up again. Threads and RSS from /proc, "
            "the baseline taken after one session (the spawner thread stays)."
        )
        say("")
        say("| measure | value |")
        say("|---|---|")
        say(f"| time per cycle | {res['ms_per_cycle']:.2f} ms ({res['seconds']:.1f} s in all) |")
        say(f"| failed cycles | {res['errors']} |")
        say(f"| processes spawned / reaped / live (status page) | {pr['spawned']} / {pr['reaped']} / {pr['live']} (balanced: {str(pr['balanced']).lower()}) |")
        say(f"| children seen by the load generator / gone from /proc at the end | {res['children_seen']} / {res['children_seen'] - res['children_left']} |")
        say(f"| zombies among mcpgate's children at the end | {end['zombies']} ({end['children']} children in all) |")
        say(f"| threads before / after (/proc) | {base['threads']} / {end['threads']} (status page: {ch['status_threads']}) |")
        say(f"| RSS before / after | {fmt_kib(base['rss_kib'])} / {fmt_kib(end['rss_kib'])} |")
        if res.get("quiet_rss_after_first"):
            say(
                f"| RSS at the quiet points, after {res['first_cycles']} cycles / after all | {res['quiet_rss_after_first'] / 1048576:.2f} MiB / "
                f"{res['quiet_rss_at_end'] / 1048576:.2f} MiB |"
            )
        say("")
        # The status page counts children of the whole run (one warm-up session first).
        spawned_in_run = pr["spawned"] - 1
        problems = []
        if res["errors"]:
            problems.append(f"{res['errors']} cycles failed")
        if pr["spawned"] != pr["reaped"] or pr["live"] != 0 or not pr["balanced"]:
            problems.append(f"spawned {pr['spawned']}, reaped {pr['reaped']}, live {pr['live']}")
        if res["children_seen"] != spawned_in_run:
            problems.append(f"{res['children_seen']} children seen for {spawned_in_run} spawned")
        if res["children_left"] or end["children"] or end["zombies"]:
            problems.append(f"{res['children_left']} of the children seen still in /proc ({res['children_left_zombies']} zombies); {end['children']} children, {end['zombies']} zombies at the end")
        if end["threads"] != base["threads"]:
            problems.append(f"{end['threads']} threads at the end, {base['threads']} before")
        failures.extend(f"stdio churn: {p}" for p in problems)
        targets.append(
            (
                "stdio churn: spawned == reaped == seen, 0 zombies, threads back to baseline",
                f"{pr['spawned'] - 1} == {pr['reaped'] - 1} == {res['children_seen']}; {end['zombies']} zombies; {end['threads']} == {base['threads']}",
                not problems,
                "",
            )
        )

    # 5.5 kill -9
    k = next((r for r in rows if r["part"] == "stdio-kill"), None)
    if k:
        res = k["result"]
        say("### 5.5 kill -9 of mcpgate with children")
        say("")
        reaper = f" by pid {res['zombie_parent']}, which they were reparented to" if res.get("zombie_parent") else ""
        gone = f"{res['all_gone_ms']:.0f} ms" if res.get("all_gone_ms") is not None else f"not within {res['seconds'] + 10:.0f} s ({res['left_at_end']} left)"
        say(
            f"mcpgate held {res['children']} children, one per session, and got SIGKILL. Each child's pid watched in /proc every 2 ms: "
            f"none running after **{res['all_dead_ms']:.0f} ms** (`PR_SET_PDEATHSIG`); after {res['seconds']:.0f} s, "
            f"{res['running_at_deadline']} running and {res['zombies_at_deadline']} zombies; every one gone from /proc (reaped{reaper}) after {gone}. Until then the dead children are zombies: mcpgate is gone and cannot reap them; its parent, or pid 1, does."
        )
        say("")
        st = next((r for r in rows if r["part"] == "stdio-peer-stop"), None)
        if st:
            say(
                f"supergateway, stopped at the end with SIGTERM (not SIGKILL) while it held {st['children_before']} children: "
                f"{st['left_after']} of them still running after it exited."
            )
            say("")
        if not res["killed"] or res["running_at_deadline"]:
            failures.append(f"kill -9: {res['running_at_deadline']} of {res['children']} children still running after {res['seconds']} s")
        zombies = res["zombies_at_deadline"]
        targets.append(
            (
                f"stdio: kill -9 of mcpgate with {res['children']} children: none left after {res['seconds']:.0f} s",
                f"{res['running_at_deadline']} running, {zombies} zombies",
                res["running_at_deadline"] == 0 and zombies == 0,
                f" ({zombies} zombies that pid {res.get('zombie_parent')} had not reaped yet: not mcpgate's to reap)" if zombies else "",
            )
        )
    bal = next((r for r in rows if r["part"] == "stdio-balance"), None)
    if bal:
        pr = bal["processes"]
        if pr["spawned"] != pr["reaped"] or pr["live"] or bal["children"]["children"]:
            failures.append(f"stdio calls: spawned {pr['spawned']}, reaped {pr['reaped']}, live {pr['live']}, {bal['children']['children']} children left")
    return targets


def pasted_section(rows, say, failures):
    """5.6: the six servers users paste (scripts/interop/pasted.sh), one process per server for
    every session: the whole tree's RSS and PSS with 1 session and with 10. Returns its targets."""
    row = next((r for r in rows if r["part"] == "pasted-footprint"), None)
    if not row:
        return []
    say("### 5.6 The servers users paste: what the processes cost")
    say("")
    if not row.get("result"):
        say(f"**Not measured: {row.get('missing', 'no result (see .bench/run/pasted-footprint.err)')}.**")
        say("")
        failures.append(f"pasted servers: not measured: {row.get('missing', 'no result')}")
        return []
    res = row["result"]
    one, many, n = res["one"], res["many"], res["sessions"]
    say(
        "server-filesystem, -memory and -sequential-thinking through `npx -y`, mcp-server-fetch, -time and -git "
        "through `uvx`, exactly as their READMEs paste them, pinned (scripts/interop/pasted_spec.json), from warm "
        "caches and offline; mcpgate with its defaults (`\"sharing\": \"user\"`: without auth, one process per "
        f"server for every session). A session calls one tool of each server; then {n} sessions do and stay open. "
        "RSS from /proc/PID/status and PSS from /proc/PID/smaps_rollup, of mcpgate and every process below it "
        "(npx runs `npm exec`, which runs `sh -c` and node; `uvx` is `uv tool uvx`, which runs python), each "
        "cell RSS / PSS. PSS shares each page among the processes that map it, so the tree's PSS is close to what "
        "a cgroup (the unit's `MemoryMax`) is charged for it, page cache apart."
    )
    say("")
    kinds = ["mcpgate", "npm exec", "node", "sh", "uv", "python", "git", "other"]
    shown = [k for k in kinds if k in one["kinds"] or k in many["kinds"]]
    say("| sessions | processes | RSS | PSS | " + " | ".join(shown) + " |")
    say("|---|---|---|---|---|" + "---|" * (len(shown) - 1))
    for count, t in ((1, one), (n, many)):
        cells = []
        for k in shown:
            v = t["kinds"].get(k)
            cells.append(f"{v['count']}: {fmt_kib(v['rss_kib'])} / {fmt_kib(v['pss_kib'])}" if v else "-")
        say(f"| {count} | {t['processes']} ({t['children']} children) | {fmt_kib(t['rss_kib'])} | {fmt_kib(t['pss_kib'])} | " + " | ".join(cells) + " |")
    say("")
    gate = many["kinds"].get("mcpgate", {"rss_kib": 0, "pss_kib": 0})
    servers_rss, servers_pss = many["rss_kib"] - gate["rss_kib"], many["pss_kib"] - gate["pss_kib"]
    say(
        f"The six servers cost **{fmt_kib(servers_rss)} RSS, {fmt_kib(servers_pss)} PSS** with {n} sessions; mcpgate "
        f"itself {fmt_kib(gate['rss_kib'])} RSS. Sizing a unit's `MemoryMax`: the tree's PSS with the sessions "
        f"expected ({fmt_kib(many['pss_kib'])} here), and half again for the page cache the runners read and for the "
        "servers' heaps as they work; each server added costs what its row above says."
    )
    if row.get("versions"):
        say("")
        say(f"Versions: {row['versions']}.")
    say("")
    for t, label in ((one, "1 session"), (many, f"{n} sessions")):
        if t["errors"]:
            failures.append(f"pasted servers, {label}: {'; '.join(t['errors'][:3])}")
        if t["zombies"]:
            failures.append(f"pasted servers, {label}: zombies {t['zombies']}")
    r = many["rss_kib"] / max(one["rss_kib"], 1)
    return [
        (
            f"the six pasted servers: RSS of mcpgate and its descendants with {n} sessions <= 1.2 x with 1",
            f"{r:.2f} x ({fmt_kib(many['rss_kib'])} / {fmt_kib(one['rss_kib'])}; PSS {fmt_kib(many['pss_kib'])} / {fmt_kib(one['pss_kib'])})",
            r <= 1.2,
            "",
        )
    ]


def tool_search_section(rows, say, failures):
    """find_tools latency and the bytes of tools/list with and without the mode."""
    ts = [r for r in rows if r["part"] == "tool-search"]
    if not ts:
        return
    say("## Tool search: `find_tools` and the size of `tools/list`")
    say("")
    say(
        "The corpus of `tests/tool_search.rs` (3 servers of 100 real tools), and the same with every tool 10 times; "
        "one client calling `find_tools` (`create a pull request`) in a loop. The list's bytes are every page of "
        "`tools/list`, as JSON, with the mode off and on."
    )
    say("")
    say("| tools | find_tools p50 / p99 | req/s | index | tools/list, mode off | mode on | first result |")
    say("|---|---|---|---|---|---|---|")
    for r in ts:
        res, sz, st = r["result"], r["sizes"], r["status"]
        if res["errors"] or not res["calls"]:
            failures.append(f"find_tools failed at {r['tools']} tools: {res}")
        if sz["tools_plain"] != r["tools"] or sz["tools_search"] != 2:
            failures.append(f"tool search at {r['tools']} tools: listed {sz['tools_plain']} without, {sz['tools_search']} with")
        if not (sz["first_result"] or "").startswith("dev__create_pull_request"):
            failures.append(f"tool search at {r['tools']} tools: first result {sz['first_result']}")
        say(
            f"| {r['tools']} | {fmt_us(res['p50_us'])} / {fmt_us(res['p99_us'])} | {res['throughput']:.0f} "
            f"| {st['index_tools']} tools, {st['index_bytes'] / 1024:.0f} KiB "
            f"| {sz['list_bytes_plain'] / 1024:.0f} KiB | {sz['list_bytes_search'] / 1024:.1f} KiB | `{sz['first_result']}` |"
        )
    say("")


def list_cache_section(rows, say, failures):
    """RSS of sessions that each list one big server: near one copy of its list."""
    lc = sorted((r for r in rows if r["part"] == "list-cache"), key=lambda r: r["sessions"])
    if len(lc) < 3:
        return
    rest, one, many = lc[0], lc[1], lc[-1]
    copy = max(one["rss_kib"] - rest["rss_kib"], 1)
    more = many["rss_kib"] - one["rss_kib"]
    say("## 2c. One list for every session")
    say("")
    say(
        f"A server of {one['tools']:,} tools; {many['sessions']:,} sessions each ask the first page of `tools/list`. "
        "The list is held once per server and client view and shared by the sessions (issue 20 found 200 MB per "
        "session for a 100,000-tool list before)."
    )
    say("")
    say("| sessions | RSS | charged to max_memory_mb | fetches of the list at the server |")
    say("|---|---|---|---|")
    for r in lc:
        say(f"| {r['sessions']:,} | {fmt_kib(r['rss_kib'])} | {r['buffered'] / 1048576:.1f} of {r['limit'] / 1048576:.0f} MiB | {r['fetches']} |")
    say("")
    say(
        f"One copy of the list: {fmt_kib(copy)}; {many['sessions'] - 1:,} more sessions listing it: "
        f"{fmt_kib(more)} more (**{more / copy:.2f} copies**, which is the sessions themselves: their downstream "
        "sessions and state)."
    )
    say("")
    if many["fetches"] != 1:
        failures.append(f"list cache: the server was asked for its list {many['fetches']} times, not once")
    if many["buffered"] > many["limit"]:
        failures.append(f"list cache: {many['buffered']} bytes charged, past the limit {many['limit']}")


def era_memory_section(rows, say, failures):
    """Section 2d, RSS under full-speed clients of each era; returns its rows for the targets table:
    (name, measured, met, note)."""
    mem = [r for r in rows if r["part"] == "era-memory"]
    targets = []
    if not mem:
        return targets
    say("## 2d. Memory under full-speed clients of 2026-07-28 and of the session era")
    say("")
    say(
        f"A fresh mcpgate per row (`max_memory_mb` {mem[0]['limit_mb']}) in front of a session-era mcp-fixture; the "
        "clients call `echo` as fast as they can. RSS at rest (after a first call), its peak (read every 0.1 s) and "
        "2 s after the clients stopped. Issue 38 measured 238-343 MB at the peak for 2026-07-28 clients: each call "
        "ran on a thread that was joined only on the reaper's round, keeping its stack until then."
    )
    say("")
    say("| era | clients | calls/s | RSS at rest | peak | after | charged after |")
    say("|---|---|---|---|---|---|---|")
    by = {}
    for r in mem:
        res = r["result"]
        if res.get("errors"):
            failures.append(f"era memory: {res['errors']} failed calls ({r['era']}, {r['clients']} clients)")
        if r.get("charged_after"):
            failures.append(f"era memory: {r['charged_after']} bytes still charged to calls after they ended ({r['clients']} clients)")
        by[(r["era"], r["clients"])] = r
        say(
            f"| {r['era']} | {r['clients']} | {res.get('throughput', 0):.0f} | {fmt_kib(r['rest_kib'])} "
            f"| {fmt_kib(r['peak_kib'])} | {fmt_kib(r['after_kib'])} | {r.get('charged_after', 0)} B |"
        )
    say("")
    for clients in sorted({c for _, c in by}):
        modern, session = by.get(("2026-07-28", clients)), by.get(("session", clients))
        plural = "s" if clients > 1 else ""
        if modern and session:
            r = modern["peak_kib"] / session["peak_kib"]
            targets.append((f"2026-07-28: peak RSS <= 1.5 x the session era's under the same load ({clients} client{plural})", f"{r:.2f} x ({fmt_kib(modern['peak_kib'])} / {fmt_kib(session['peak_kib'])})", r <= 1.5, ""))
        if modern:
            bound = modern["rest_kib"] + modern["limit_mb"] * 1024
            targets.append((f"2026-07-28: peak RSS <= max_memory_mb + the RSS at rest ({clients} client{plural})", f"{fmt_kib(modern['peak_kib'])} (bound {fmt_kib(bound)})", modern["peak_kib"] <= bound, ""))
    return targets


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("churn_csv")
    ap.add_argument("mode", choices=["full", "smoke"])
    ap.add_argument("--versions", default="")
    ap.add_argument("--command", default="scripts/bench.sh")
    a = ap.parse_args()
    rows = load(a.results)
    failures: list[str] = []
    out: list[str] = []
    say = out.append

    say("# mcpgate benchmark")
    say("")
    say(f"- Run: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, `{a.command}`")
    say(f"- Machine: {machine()}; load generator, gateways and servers share it, all on 127.0.0.1")
    say(f"- Versions: {a.versions}")
    say("- Builds: release (`opt-level = \"s\"`, LTO, `panic = \"abort\"`); the downstream is mcp-fixture unless named")
    say("")

    # 1. overhead
    say("## 1. Overhead: `tools/call` latency and throughput")
    say("")
    say("Median of the rounds; each point is a fresh session per client calling `echo` in a loop, the targets interleaved.")
    say("")
    say("| clients | direct p50 / p99 | req/s | mcpgate p50 / p99 | req/s | added p50 | mcpgate / direct | FastMCP proxy p50 / p99 | req/s | FastMCP / direct |")
    say("|---|---|---|---|---|---|---|---|---|---|")
    fixture = overhead(rows, "fixture")
    for clients, t in fixture.items():
        d, g, f = t.get("direct", {}), t.get("mcpgate", {}), t.get("fastmcp", {})
        for name, cell in (("direct", d), ("mcpgate", g)):
            if cell and cell["errors"]:
                failures.append(f"{cell['errors']} failed calls at {clients} clients ({name})")
        added = g["p50"] - d["p50"] if d and g else None
        cells = [
            str(clients),
            f"{fmt_us(d.get('p50'))} / {fmt_us(d.get('p99'))}",
            f"{d.get('tput', 0):.0f}",
            f"{fmt_us(g.get('p50'))} / {fmt_us(g.get('p99'))}",
            f"{g.get('tput', 0):.0f}",
            "-" if added is None else f"{added / 1000:.3f} ms",
            f"{g['tput'] / d['tput']:.2f}" if d and g else "-",
            f"{fmt_us(f['p50'])} / {fmt_us(f['p99'])}" if f else "-",
            f"{f['tput']:.0f}" if f else "-",
            f"{f['tput'] / d['tput']:.2f}" if d and f else "-",
        ]
        say("| " + " | ".join(cells) + " |")
    say("")
    for server, intro in (
        ("python-sdk", "A third-party downstream, a server written with the official Python SDK (`mcp` 2.3.0):"),
        (
            "sse",
            "The old HTTP+SSE transport (protocol 2024-11-05, `\"type\": \"sse\"`): `mcp-fixture --sse-transport` "
            "reached directly over SSE (each client holds the `GET` stream and `POST`s to its endpoint, as the SDKs' "
            "SSE clients do), and through mcpgate (clients speak Streamable HTTP to it; it holds one stream per "
            "session):",
        ),
        (
            "sessionless",
            "Protocol 2026-07-28, without sessions: clients of that era calling `mcp-fixture --modern` directly, "
            "and through mcpgate (which speaks 2026-07-28 to it too; each call runs on the connection thread "
            "that read it, as a session's does), median of the rounds, interleaved like the rows above:",
        ),
    ):
        table = overhead(rows, server)
        if not table:
            continue
        say(intro)
        say("")
        say("| clients | direct p50 / p99 | req/s | mcpgate p50 / p99 | req/s | added p50 | mcpgate / direct |")
        say("|---|---|---|---|---|---|---|")
        for clients, t in table.items():
            d, g = t.get("direct", {}), t.get("mcpgate", {})
            if d.get("errors") or g.get("errors") or not d.get("tput") or not g.get("tput"):
                failures.append(f"{server} calls failed at {clients} clients")
                continue
            say(
                f"| {clients} | {fmt_us(d.get('p50'))} / {fmt_us(d.get('p99'))} | {d.get('tput', 0):.0f} "
                f"| {fmt_us(g.get('p50'))} / {fmt_us(g.get('p99'))} | {g.get('tput', 0):.0f} "
                f"| {(g['p50'] - d['p50']) / 1000:.3f} ms | {g['tput'] / d['tput']:.2f} |"
            )
        say("")

    for balance in (r for r in rows if r["part"] == "sse-balance"):
        if balance["opened"] != balance["closed"] or balance["open"]:
            failures.append(
                f"HTTP+SSE: the fixture counted {balance['opened']} streams opened, {balance['closed']} closed, "
                f"{balance['open']} open"
            )
        else:
            say(f"Every HTTP+SSE stream was closed: the fixture counted {balance['opened']} opened, {balance['closed']} closed.")
            say("")

    cpu_targets = cpu_section(rows, say, failures)
    cpu_targets += cpu_section(rows, say, failures, era="2026-07-28")
    cpu_targets += auth_tls_section(rows, say, failures)
    cpu_targets += govern_section(rows, say, failures)

    tool_search_section(rows, say, failures)
    list_cache_section(rows, say, failures)

    # 2. footprint
    say("## 2. Footprint")
    say("")
    say("Client sessions that each hold 2 downstream sessions with open `GET` streams (the client itself keeps no connection).")
    say("")
    say("| gateway | client sessions | RSS | threads | reader threads |")
    say("|---|---|---|---|---|")
    fp = [r for r in rows if r["part"] == "footprint"]
    for r in fp:
        say(f"| {r['target']} | {r['sessions']} | {r['rss_kib'] / 1024:.1f} MiB | {r['threads']} | {r['readers'] if r['target'] == 'mcpgate' else '-'} |")
    gate_fp = sorted((r for r in fp if r["target"] == "mcpgate"), key=lambda r: r["sessions"])
    per_ds_bytes = per_ds_threads = None
    if len(gate_fp) >= 3:
        lo, hi = gate_fp[1], gate_fp[-1]
        downstream = 2 * (hi["sessions"] - lo["sessions"])
        per_ds_bytes = (hi["rss_kib"] - lo["rss_kib"]) * 1024 / downstream
        per_ds_threads = (hi["threads"] - lo["threads"]) / downstream
        say("")
        say(
            f"Per downstream session (from {lo['sessions']} to {hi['sessions']} client sessions, including its share of the "
            f"client session): **{per_ds_bytes / 1024:.1f} KiB RSS and {per_ds_threads:.2f} threads**."
        )
        for r in gate_fp:
            if r["readers"] != 2 * r["sessions"]:
                failures.append(f"{r['sessions']} sessions: {r['readers']} reader threads, not {2 * r['sessions']}")
    say("")

    era_targets = era_memory_section(rows, say, failures)

    # 3. churn
    churn = next((r for r in rows if r["part"] == "churn"), None)
    samples = []
    if os.path.exists(a.churn_csv):
        with open(a.churn_csv) as f:
            for s in csv.DictReader(f):
                samples.append({"t": float(s["seconds"]), "rss": int(s["rss_bytes"]), "threads": int(s["threads"]), "done": int(s["cycles_done"])})
    rss_1k = rss_end = None
    if churn:
        res = churn["result"]
        say("## 3. Churn")
        say("")
        say(
            f"{res['cycles']} cycles of initialize, one call, then DELETE (even cycles) or walking away (odd: idle "
            "eviction after 1 s), 4 at a time, 2 servers. The run pauses after the first tenth until every idle "
            "session is evicted, and again at the end; RSS is compared at those two quiet points."
        )
        say("")
        first_k = res.get("first_cycles", 1000)
        # Both taken at a quiet point (every idle session evicted), so they compare.
        rss_1k = res.get("quiet_rss_after_first") or None
        rss_end = res.get("quiet_rss_at_end") or churn["end_rss_kib"] * 1024
        say("| measure | value |")
        say("|---|---|")
        say(f"| time per cycle | {res['ms_per_cycle']:.2f} ms ({res['seconds']:.1f} s in all) |")
        say(f"| failed cycles | {res['errors']} |")
        say(f"| downstream sessions opened / closed (mcpgate) | {churn['opened']} / {churn['closed']} |")
        say(f"| initialize / DELETE counted at the servers | {churn['initialize']} / {churn['delete']} |")
        say(f"| threads before / after | {churn['base_threads']} / {churn['end_threads']} |")
        if rss_1k:
            say(
                f"| RSS once idle, after {first_k} cycles / after all {res['cycles']} | {rss_1k / 1048576:.2f} MiB / "
                f"{rss_end / 1048576:.2f} MiB ({(rss_end - rss_1k) / 1048576:+.2f} MiB) |"
            )
        say("")
        if a.mode == "full":
            say("![RSS and threads over the churn run](churn.svg)")
            say("")
        if res["errors"]:
            failures.append(f"{res['errors']} churn cycles failed")
        if churn["initialize"] != churn["delete"]:
            failures.append(f"churn: {churn['initialize']} initialize but {churn['delete']} DELETE at the servers")
        if churn["opened"] != churn["closed"]:
            failures.append(f"churn: opened {churn['opened']} != closed {churn['closed']}")
        if churn["end_threads"] != churn["base_threads"]:
            failures.append(f"churn: {churn['end_threads']} threads at the end, {churn['base_threads']} before")

    # 4. shutdown
    sd = next((r for r in rows if r["part"] == "shutdown"), None)
    if sd:
        say("## 4. Shutdown")
        say("")
        say(f"SIGTERM with {sd['sessions']} live client sessions ({2 * sd['sessions']} downstream sessions): exit {sd['exit']} after **{sd['seconds']:.2f} s**; the servers counted {sd['delete']} DELETEs for {sd['initialize']} sessions.")
        say("")
        if sd["exit"] != 0:
            failures.append(f"shutdown exit status {sd['exit']}")
        if sd["delete"] != sd["initialize"]:
            failures.append(f"shutdown: {sd['delete']} DELETE for {sd['initialize']} sessions")

    stdio_targets = stdio_section(rows, fixture, say, failures)
    stdio_targets += pasted_section(rows, say, failures)

    # targets
    say("## Targets")
    say("")
    say("| target | measured | met |")
    say("|---|---|---|")

    def target(name, value, ok, note=""):
        say(f"| {name} | {value} | {'yes' if ok else 'no'}{note} |")

    # Not targets: what direct calls reach. "Of direct" was the floor until no relay on this host
    # reached it (issue 22's note: the bare relay 0.55 to 0.63, nginx 0.60 to 0.73); the targets of
    # throughput, p99 and CPU are against the bare relay, in sections 1d and 1e (below).
    sessionless = overhead(rows, "sessionless")
    for clients, t in sessionless.items():
        d = t.get("direct")
        for key, what in (("mcpgate", "mcpgate"), ("relay", "the bare relay"), ("nginx", "nginx")):
            relay = t.get(key)
            if relay and relay["errors"]:
                failures.append(f"sessionless calls through {what} failed at {clients} clients")
            elif d and relay and d["tput"] and d["p99"]:
                say(
                    f"| sessionless (2026-07-28), for scale: {what} ({clients} client{'s' if clients > 1 else ''}) "
                    f"| {relay['tput'] / d['tput']:.2f} of direct, p99 {relay['p99'] / d['p99']:.2f} x | - |"
                )
    t16 = fixture.get(16, {})
    if t16.get("direct") and t16.get("mcpgate"):
        r = t16["mcpgate"]["tput"] / t16["direct"]["tput"]
        say(f"| session era, for scale: mcpgate (16 clients) | {r:.2f} of direct | - |")
    t1 = fixture.get(1, {})
    if t1.get("direct") and t1.get("mcpgate"):
        added = (t1["mcpgate"]["p50"] - t1["direct"]["p50"]) / 1000
        target("p50 added latency < 0.2 ms (1 client)", f"{added:.3f} ms", added < 0.2)
    rest = next((r for r in fp if r["target"] == "mcpgate" and r["sessions"] == 0), None)
    ordered = next((r for r in fp if r["target"] == "mcpgate, ordered" and r["sessions"] == 0), None)
    if ordered:
        plain = f"; `cargo build --release` alone: {rest['rss_kib'] * 1024 / 1e6:.2f} MB" if rest else ""
        target(
            "RSS at rest < 4 MB (the release build linked by scripts/ordered.sh)",
            f"{ordered['rss_kib'] * 1024 / 1e6:.2f} MB ({ordered['threads']} threads){plain}",
            ordered["rss_kib"] * 1024 < 4e6,
        )
    elif rest:
        target("RSS at rest < 4 MB", f"{rest['rss_kib'] * 1024 / 1e6:.2f} MB ({rest['threads']} threads)", rest["rss_kib"] * 1024 < 4e6)
    if per_ds_bytes is not None:
        target("<= 64 KiB RSS per downstream session with an open GET stream", f"{per_ds_bytes / 1024:.1f} KiB", per_ds_bytes <= 64 * 1024)
        target("exactly 1 reader thread per such downstream session", f"{per_ds_threads:.2f} threads; readers == 2 x sessions at each point", abs(per_ds_threads - 1) < 0.01)
    if churn and rss_1k:
        grow = (rss_end - rss_1k) / 1048576
        target(
            f"churn: RSS after {churn['result']['cycles']} cycles within 1 MB of after the first {churn['result'].get('first_cycles', 1000)}",
            f"{grow:+.2f} MiB",
            abs(grow) <= 1,
            " (it fell: no growth)" if grow < -1 else "",
        )
        target("churn: DELETEs == opens, threads back to baseline", f"{churn['delete']} == {churn['initialize']}; {churn['end_threads']} == {churn['base_threads']}", churn["delete"] == churn["initialize"] and churn["end_threads"] == churn["base_threads"])
    if sd:
        target(f"shutdown with {sd['sessions']} sessions < 2 s, every DELETE sent", f"{sd['seconds']:.2f} s, {sd['delete']}/{sd['initialize']}", sd["seconds"] < 2 and sd["delete"] == sd["initialize"])
    for name, value, ok, note in era_targets + stdio_targets + cpu_targets:
        target(name, value, ok, note)
    say("")
    if failures:
        say("## Correctness failures")
        say("")
        for f in failures:
            say(f"- {f}")
        say("")

    text = "\n".join(out) + "\n"
    print(text)
    if a.mode == "full":
        path = os.path.join(ROOT, "docs", "BENCHMARKS.md")
        # The boards' figures come from another run (scripts/cross.sh --full): kept as they are.
        boards = ""
        if os.path.exists(path):
            with open(path) as f:
                before = f.read()
            if BOARDS_MARK in before:
                boards = "\n" + before[before.index(BOARDS_MARK) :]
        with open(path, "w") as f:
            f.write(text + boards)
        svg(samples, os.path.join(ROOT, "docs", "churn.svg"))
    else:
        with open(os.path.join(ROOT, ".bench", "BENCHMARKS.smoke.md"), "w") as f:
            f.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
