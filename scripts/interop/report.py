"""Results of scripts/interop.sh: parses what each part produced, prints it,
keeps one row per check or scenario in a TSV file, and prints the final table.

    report.py conformance --dir D --label L --xfail F --out T [--compare-to D2 --compare-label L2]
    report.py checks --json J --section S --out T
    report.py row --section S --name N --ok 0|1 [--detail D] --out T
    report.py schema --json J --xfail F --section S --out T  (validate.cjs's report)
    report.py table --out T            (exit status 1 when a row FAILed)

A conformance scenario passes when none of its checks is a FAILURE or a
WARNING (the suite's own verdict); passed/total counts SUCCESS out of
SUCCESS+FAILURE, as the suite prints it. A scenario named in the XFAIL file
that fails is XFAIL; one that passes is XPASS (a notice, not a failure).
The XFAIL file has `run:scenario|reason` lines; --xfail-run picks the run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass

FIELDS = ["section", "name", "passed", "total", "status", "note"]


@dataclass
class Scenario:
    name: str
    passed: int
    total: int
    warnings: int
    failures: list[str]

    @property
    def ok(self) -> bool:
        return self.total - self.passed == 0 and self.warnings == 0

    def score(self) -> str:
        extra = f" +{self.warnings}W" if self.warnings else ""
        return f"{self.passed}/{self.total}{extra}"


def load_scenarios(directory: str) -> dict[str, Scenario]:
    """The suite's `-o DIR`: one `<kind>-<scenario>-<timestamp>/checks.json` per scenario."""
    found: dict[str, Scenario] = {}
    for path in sorted(glob.glob(os.path.join(directory, "*", "checks.json"))):
        folder = os.path.basename(os.path.dirname(path))
        name = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", folder)
        name = re.sub(r"^server-", "", name)
        try:
            with open(path) as f:
                checks = json.load(f)
        except (OSError, ValueError) as e:
            found[name] = Scenario(name, 0, 1, 0, [f"unreadable checks.json: {e}"])
            continue
        passed = sum(1 for c in checks if c.get("status") == "SUCCESS")
        failed = [c for c in checks if c.get("status") == "FAILURE"]
        warned = [c for c in checks if c.get("status") == "WARNING"]
        problems = [f"{c.get('status')} {c.get('id')}: {c.get('errorMessage', '')}" for c in failed + warned]
        found[name] = Scenario(name, passed, passed + len(failed), len(warned), problems)
    return found


def load_xfails(path: str | None, run: str | None) -> dict[str, str]:
    """The `run:scenario|reason` lines of `path` for `run`, as scenario -> reason."""
    xfails: dict[str, str] = {}
    if not path or not os.path.exists(path):
        return xfails
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, reason = line.partition("|")
                which, _, name = key.strip().rpartition(":")
                if which == run:
                    xfails[name] = reason.strip()
    return xfails


def append(out: str, section: str, name: str, passed: int, total: int, status: str, note: str = "") -> None:
    note = " ".join(note.split()).replace("\t", " ")
    with open(out, "a") as f:
        f.write("\t".join([section, name, str(passed), str(total), status, note]) + "\n")


def verdict(ok: bool, xfail_reason: str | None) -> str:
    if xfail_reason is None:
        return "PASS" if ok else "FAIL"
    return "XPASS" if ok else "XFAIL"


def cmd_conformance(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.dir)
    expected = [s for s in (args.expect or "").split(",") if s]
    for name in expected:
        if name not in scenarios:
            scenarios[name] = Scenario(name, 0, 1, 0, ["no results: the scenario did not run"])
    other = load_scenarios(args.compare_to) if args.compare_to else {}
    xfails = load_xfails(args.xfail, args.xfail_run)
    width = max((len(n) for n in scenarios), default=10)
    for name in sorted(scenarios, key=lambda n: (expected.index(n) if n in expected else len(expected), n)):
        s = scenarios[name]
        status = verdict(s.ok, xfails.get(name))
        line = f"  {status:<5} {name:<{width}}  {args.label} {s.score():<8}"
        if name in other:
            o = other[name]
            line += f" {args.compare_label} {o.score():<8}"
            if not s.ok and o.ok:
                line += f" -> {args.label} only: attributable to {args.label}"
            elif not s.ok and not o.ok:
                line += f" -> fails {args.compare_label} too: attributable to the server"
        if s.total == 0 and s.warnings == 0:
            line += " (informational checks only)"
        print(line)
        for problem in s.failures:
            print(f"          {problem[:300]}")
        if status in ("XFAIL", "XPASS"):
            print(f"          {status}: {xfails[name]}")
        note = "; ".join(s.failures)[:200]
        if status in ("XFAIL", "XPASS"):
            note = xfails[name]
        elif s.total == 0 and s.warnings == 0:
            note = "informational checks only"
        append(args.out, args.section, name, s.passed, s.total, status, note)
    return 0


def cmd_checks(args: argparse.Namespace) -> int:
    try:
        with open(args.json) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        append(args.out, args.section, "results file", 0, 1, "FAIL", f"cannot read {args.json}: {e}")
        return 0
    for r in results:
        append(args.out, args.section, r["name"], int(r["ok"]), 1, "PASS" if r["ok"] else "FAIL", r.get("detail", ""))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """validate.cjs's report: one row per kind of invalid message mcpgate sent (an XFAIL line
    `schema:<category>` covers a category, e.g. `schema:id-null`), one per bad request."""
    try:
        with open(args.json) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        append(args.out, args.section, "validate.cjs report", 0, 1, "FAIL", f"cannot read {args.json}: {e}")
        return 0
    xfails = load_xfails(args.xfail, "schema")
    groups: dict[tuple[str, str], list[dict]] = {}
    for f in report["failures"]:
        groups.setdefault((f["category"], f"{f['schema']}: {'; '.join(f['errors'])}"), []).append(f)
    if not groups:
        append(args.out, args.section, f"all {report['messages']} messages mcpgate sent are valid", 1, 1, "PASS")
    for (category, what), found in groups.items():
        reason = xfails.get(category)
        example = found[0]
        note = reason or f"{len(found)}x, e.g. {example['http']}: {example['message'][:150]}"
        append(args.out, args.section, f"sent by mcpgate [{category}] {what}", 0, len(found), "XFAIL" if reason else "FAIL", note)
    for case in report["bad"]["mcpgate"]:
        invalid = list(case["failures"])
        categories = {x["category"] for x in invalid}
        reason = next((xfails[c] for c in categories if c in xfails), None) if invalid else None
        status = ("XFAIL" if reason and all(c in xfails for c in categories) else "FAIL") if invalid else "PASS"
        note = reason if status == "XFAIL" else f"HTTP {case['status']}: {case['body'][:150]}"
        append(args.out, args.section, f"bad request answered validly: {case['name']}", int(not invalid), 1, status, note)
    return 0


def cmd_row(args: argparse.Namespace) -> int:
    ok = args.ok == "1"
    status = verdict(ok, args.xfail_reason) if args.xfail_reason else ("PASS" if ok else "FAIL")
    append(args.out, args.section, args.name, int(ok), 1, status, args.detail or "")
    print(f"{'PASS' if ok else 'FAIL'}  {args.name}" + (f" -- {args.detail}" if args.detail else ""))
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    rows = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            rows = [dict(zip(FIELDS, line.rstrip("\n").split("\t"), strict=False)) for line in f if line.strip()]
    order = list(dict.fromkeys(r["section"] for r in rows))
    rows.sort(key=lambda r: order.index(r["section"]))  # stable: each section's rows together
    width = max((len(r["name"]) for r in rows), default=20)
    width = min(width, 78)
    section = None
    counts = {"PASS": 0, "FAIL": 0, "XFAIL": 0, "XPASS": 0}
    print(f"\n{'=' * 20} interop summary {'=' * 20}")
    for r in rows:
        if r["section"] != section:
            section = r["section"]
            print(f"\n[{section}]")
            print(f"  {'check or scenario':<{width}}  {'passed/total':>12}  status")
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        name = r["name"] if len(r["name"]) <= width else r["name"][: width - 3] + "..."
        print(f"  {name:<{width}}  {r['passed'] + '/' + r['total']:>12}  {r['status']}")
    failed = [r for r in rows if r["status"] == "FAIL"]
    xfailed = [r for r in rows if r["status"] == "XFAIL"]
    xpassed = [r for r in rows if r["status"] == "XPASS"]
    if xfailed:
        print("\nExpected failures (XFAIL):")
        for r in xfailed:
            print(f"  {r['section']}: {r['name']} -- {r['note']}")
    if xpassed:
        print("\nNOTICE: expected failures that now pass (XPASS; remove them from the XFAIL list?):")
        for r in xpassed:
            print(f"  {r['section']}: {r['name']}")
    if failed:
        print("\nFAILED:")
        for r in failed:
            print(f"  {r['section']}: {r['name']} -- {r['note']}")
    print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['XFAIL']} xfailed, {counts['XPASS']} xpassed")
    return 1 if failed or not rows else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("conformance")
    p.add_argument("--dir", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--section", required=True)
    p.add_argument("--expect", help="comma-separated scenarios that must have results")
    p.add_argument("--xfail", help="file of `run:scenario|reason` lines")
    p.add_argument("--xfail-run", help="the run whose lines apply: direct, mcpgate or client")
    p.add_argument("--compare-to")
    p.add_argument("--compare-label", default="other")
    p.add_argument("--out", required=True)
    p = sub.add_parser("checks")
    p.add_argument("--json", required=True)
    p.add_argument("--section", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("row")
    p.add_argument("--section", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--ok", required=True, choices=["0", "1"])
    p.add_argument("--detail")
    p.add_argument("--xfail-reason")
    p.add_argument("--out", required=True)
    p = sub.add_parser("schema")
    p.add_argument("--json", required=True)
    p.add_argument("--xfail", required=True)
    p.add_argument("--section", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("table")
    p.add_argument("--out", required=True)
    args = parser.parse_args()
    commands = {"conformance": cmd_conformance, "checks": cmd_checks, "row": cmd_row, "schema": cmd_schema, "table": cmd_table}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
