"""The boards' section of docs/BENCHMARKS.md, from what scripts/cross.sh --full measured: stripped
binary sizes per target and feature set, and RSS and threads at rest and with 100 sessions under
qemu-user next to native x86_64. It replaces the section (from its mark to the end of the file),
which scripts/bench/report.py keeps when it rewrites the rest.

    figures.py --sizes SIZES.tsv --footprint FOOTPRINT.tsv --churn CHURN.tsv --qemu-threads "N1 N2 Q1 Q2" \\
        --toolchain TEXT --write docs/BENCHMARKS.md

SIZES.tsv: target, features (`tls`, `redis`: tls and redis, or `none`), bytes. FOOTPRINT.tsv: label, RSS KiB and threads at
rest, RSS KiB and threads with 100 sessions. CHURN.tsv: label, cycles, failed cycles, RSS bytes after the
first tenth and at the end, ms per cycle, threads at the end. N1 N2 Q1 Q2: RSS KiB of threads.c after
100 and 1,000 threads, natively and under qemu-aarch64.
"""

from __future__ import annotations

import argparse
import datetime
import os

MARK = "<!-- boards: written by scripts/cross.sh --full -->"
# Issue 43's target: the stripped aarch64 binary with `tls` (a board build), in bytes.
ARM_TARGET = 2_500_000


def mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def render(
    sizes: list[list[str]], footprint: list[list[str]], churn: list[list[str]], qemu_threads: str, toolchain: str
) -> str:
    native_100, native_1000, qemu_100, qemu_1000 = (int(x) for x in qemu_threads.split())
    threads = (
        f"`scripts/board/threads.c`, which starts and joins 1,000 threads, goes from {mib(qemu_100)} after 100 to "
        f"{mib(qemu_1000)} after 1,000 under qemu-aarch64, and from {mib(native_100)} to {mib(native_1000)} natively"
    )
    out = [MARK, "## 6. Boards: ARM builds, sizes, and footprint under qemu-user", ""]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out += [
        f"- Run: {when}, `scripts/cross.sh --full`; {toolchain}",
        "- Builds: the glibc targets are board builds (Cargo.toml's `board` profile: the release build at "
        "`opt-level = \"z\"`, LTO, `panic = \"abort\"`, stripped; no unwind tables, lld's identical code folding), "
        "with Debian's cross compilers; the x86_64 glibc row is the release build (`opt-level = \"s\"`), the musl "
        "rows release builds with `-Zbuild-std` and zig (`scripts/cross-musl.sh`)",
        "",
        "Stripped size of `mcpgate` with `tls` (https:// servers, rustls and the webpki roots: a board's), with `tls` "
        "and `redis` (the default features: the session store across hosts besides), and with neither "
        "(`--no-default-features`: http:// servers only, for a box whose TLS is done elsewhere):",
        "",
        "| target | `tls` | `tls` and `redis` | neither |",
        "|---|---|---|---|",
    ]
    by = {(t, f): int(b) for t, f, b in sizes}
    for target in sorted({t for t, _, _ in sizes}, key=lambda t: (not t.startswith("x86"), t)):
        cells = [by.get((target, f)) for f in ("tls", "redis", "none")]
        out.append(f"| {target} | " + " | ".join(mb(c) if c else "-" for c in cells) + " |")
    aarch64 = by.get(("aarch64-unknown-linux-gnu", "tls"))
    if aarch64:
        met = "met" if aarch64 <= ARM_TARGET else "not met"
        out += ["", f"Target: the aarch64 glibc binary with `tls` at most {mb(ARM_TARGET)}: {mb(aarch64)}, {met}."]
    out += [
        "",
        "RSS and threads of one mcpgate in front of one HTTP server (the fixture), at rest and with 100 client "
        "sessions, each holding a downstream session and its reader thread. The ARM builds run under qemu-user on "
        "the x86 host: their RSS is qemu's own (its translator and the code it generated) plus mcpgate's, so it "
        "overstates what a board uses; the x86 rows are the same code natively, for scale. Under qemu one thread "
        "more is counted: qemu's own.",
        "",
        "| build | RSS at rest | threads | RSS, 100 sessions | threads | per session |",
        "|---|---|---|---|---|---|",
    ]
    native = None
    rows = []
    for label, rest_kib, rest_threads, busy_kib, busy_threads in footprint:
        rest_kib, busy_kib = float(rest_kib), float(busy_kib)
        per = (busy_kib - rest_kib) / 100
        if label.startswith("x86_64-unknown-linux-gnu"):
            native = (rest_kib, per)
        rows.append((label, rest_kib, per))
        out.append(
            f"| {label} | {mib(rest_kib)} | {rest_threads} | {mib(busy_kib)} | {busy_threads} | {per:.1f} KiB |"
        )
    if native:
        out += ["", "What qemu-user adds, against the native x86 glibc build:", ""]
        for label, rest_kib, per in rows:
            if "qemu" not in label:
                continue
            out.append(
                f"- {label}: at rest {mib(rest_kib - native[0])} more ({rest_kib / native[0]:.1f} x), "
                f"per session {per - native[1]:+.1f} KiB ({per / native[1]:.2f} x)"
            )
    out += [
        "",
        "Churn: cycles of initialize, one call and DELETE, 4 at a time (`mcp-load churn --all-delete`), each opening "
        "and closing one downstream session and its reader thread; RSS at the quiet point after the first tenth of "
        "the cycles and at the end. On glibc mcpgate holds malloc to two arenas and calls `malloc_trim` after "
        "sessions close; musl has neither call (its allocator, mallocng, gives freed memory back as it goes): the "
        "native musl row shows what mcpgate's RSS does without them. Under qemu-user (7.2) every guest thread that "
        f"ends leaves memory behind in qemu ({threads}), so the qemu rows measure qemu, the same on glibc and musl, "
        "not mcpgate.",
        "",
        "| build | cycles | failed | RSS after a tenth | RSS at the end | growth | ms per cycle | threads at end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, cycles, errors, first, end, ms, threads in churn:
        first_b, end_b = int(first), int(end)
        out.append(
            f"| {label} | {cycles} | {errors} | {mib(first_b / 1024)} | {mib(end_b / 1024)} | "
            f"{(end_b - first_b) / 1048576:+.2f} MiB | {ms} | {threads} |"
        )
    out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--footprint", required=True)
    parser.add_argument("--churn", required=True)
    parser.add_argument("--qemu-threads", required=True, help="RSS KiB after 100 and 1,000 threads: native, qemu")
    parser.add_argument("--toolchain", default="")
    parser.add_argument("--write", required=True)
    a = parser.parse_args()

    def rows(path: str) -> list[list[str]]:
        with open(path) as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]

    section = render(rows(a.sizes), rows(a.footprint), rows(a.churn), a.qemu_threads, a.toolchain)
    print(section)
    text = ""
    if os.path.exists(a.write):
        with open(a.write) as f:
            text = f.read()
    if MARK in text:
        text = text[: text.index(MARK)]
    with open(a.write, "w") as f:
        f.write(text.rstrip("\n") + "\n\n" + section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
