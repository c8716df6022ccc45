#!/usr/bin/env python3
"""Runs the conformance suite on every leg and writes CONFORMANCE.md (``make conformance``).

    python conformance/run.py                      # both allocator modes, writes CONFORMANCE.md
    python conformance/run.py --check CONFORMANCE.md   # writes a temp file, fails if they differ
    python conformance/run.py --modes plain --examples 100 --output /tmp/c.md   # a quick look
    python conformance/run.py --report-only --results build/conformance          # no re-run
    python conformance/run.py --jobs 1     # the two allocator modes one after the other
    python conformance/run.py --reuse plain  # plain's results are already in --results (CI: make test's)

Legs: one pytest run per allocator mode (``plain``; ``debug`` = ``PYTHONMALLOC=debug -X dev``),
split by the loop parameter of each case, so four legs: asyncio, uvloop, asyncio+debug,
uvloop+debug. Each run writes JSON through conformance/_rules.py (``--conformance-json``). The
two runs go side by side by default (the suite mostly waits on sockets; on two cores this halves
the wall-clock time); --jobs 1 runs them one after the other. --workers N spreads each run's
cases over N pytest-xdist workers (default 0 here: none; `make conformance` passes 2, see
conformance.mk).

Fails (exit 1) when: a case that is not an expected failure fails on any leg (an xfail(strict)
case that passes counts as failed), a rule of spec/ has no case, a marker names an id spec/ does
not hold, a proven rule has a case that is skipped or xfailed, a planned rule has a case that
passes without xfail, or a run produced no results. The summary goes to stdout, one line per leg.
CONFORMANCE.md holds no timestamp, duration or port: the same results give the same bytes.
"""
from __future__ import annotations

import argparse
import collections
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _rules import SpecError, load_spec  # noqa: E402

LOOPS = ("asyncio", "uvloop")
MODES = {
    # mode: (leg suffix, extra interpreter options, extra environment)
    "plain": ("", [], {}),
    # PYTHONDEVMODE as well as -X dev: the pytest-xdist workers are new interpreters, and they
    # inherit the environment, not the options. SKIRR_DEVMODE_TESTS_ONLY: conftest.py takes
    # PYTHONDEVMODE out again where the cases run, so the servers they start as child processes
    # get PYTHONMALLOC=debug only, as they did without xdist.
    "debug": ("+debug", ["-X", "dev"], {"PYTHONMALLOC": "debug", "PYTHONDEVMODE": "1",
                                        "SKIRR_DEVMODE_TESTS_ONLY": "1"}),
}
DEFAULT_EXAMPLES = 2000
FAILED_OUTCOMES = ("failed", "error", "xpassed")


def legs_of(modes: list[str]) -> list[str]:
    return [loop + MODES[m][0] for m in modes for loop in LOOPS]


def run_modes(modes: list[str], results: Path, examples: int, pytest_args: list[str],
              jobs: int, workers: int = 0) -> dict[str, float]:
    """One pytest run of the whole suite per mode, up to `jobs` at once (their output goes to
    results/<mode>.log and is printed when the run ends), each in `workers` pytest-xdist workers
    (0: in the pytest process itself). Returns wall-clock seconds per mode."""
    pending = list(modes)
    running: dict[str, tuple] = {}
    seconds: dict[str, float] = {}
    while pending or running:
        while pending and len(running) < max(1, jobs):
            mode = pending.pop(0)
            _suffix, opts, env_extra = MODES[mode]
            out = results / f"{mode}.json"
            if out.exists():
                out.unlink()
            env = dict(os.environ)
            env.update(env_extra)
            env["SKIRR_HYPOTHESIS_EXAMPLES"] = str(examples)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            cmd = [sys.executable, *opts, "-m", "pytest", "conformance", "-q", "-p",
                   "no:cacheprovider", "--strict-rules", "--conformance-json", str(out),
                   *(["-n", str(workers)] if workers else []), *pytest_args]
            print(f"== {mode}: {' '.join(cmd[1:])}"
                  + (f"  [{' '.join(f'{k}={v}' for k, v in env_extra.items())}]" if env_extra else ""),
                  flush=True)
            log = open(results / f"{mode}.log", "w", encoding="utf-8")
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[mode] = (proc, log, time.monotonic())
        time.sleep(0.2)
        for mode, (proc, log, t0) in list(running.items()):
            if proc.poll() is None:
                continue
            seconds[mode] = time.monotonic() - t0
            log.close()
            del running[mode]
            print(f"== {mode} done in {seconds[mode]:.0f} s (exit {proc.returncode}):", flush=True)
            sys.stdout.write((results / f"{mode}.log").read_text(encoding="utf-8", errors="replace"))
            sys.stdout.flush()
    return seconds


def load_results(results: Path, modes: list[str]) -> tuple[dict, list[str], set]:
    """{leg: {case: {"outcome", "rules", "duration"}}}, the problems found, and the hypothesis
    example counts the runs used."""
    by_leg: dict[str, dict[str, dict]] = {leg: {} for leg in legs_of(modes)}
    problems: list[str] = []
    examples: set = set()
    for mode in modes:
        path = results / f"{mode}.json"
        if not path.exists():
            problems.append(f"{mode}: the pytest run wrote no results ({path})")
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        examples.add(str(data.get("examples", "default")))
        if not data["cases"]:
            problems.append(f"{mode}: no case ran")
        for rec in data["cases"]:
            loops = [rec["loop"]] if rec["loop"] in LOOPS else list(LOOPS)
            for loop in loops:
                leg = loop + MODES[mode][0]
                by_leg[leg][rec["case"]] = rec
    return by_leg, problems, examples


def rule_status(rule: dict, outcomes: list[str]) -> tuple[str, bool]:
    """(cell text, ok) for one rule on one leg, from the outcomes of its cases there."""
    if not outcomes:
        return "no case", False
    planned = rule["status"] == "planned"
    if any(o in FAILED_OUTCOMES for o in outcomes):
        if planned and all(o in ("xpassed", "xfailed") for o in outcomes):
            return "XPASS: flip to proven", False
        return "FAILED", False
    if any(o == "skipped" for o in outcomes):
        return "skipped", False
    if planned:
        if all(o == "xfailed" for o in outcomes):
            return f"planned #{rule['issue']}", True
        return "passes: flip to proven", False
    if any(o == "xfailed" for o in outcomes):
        return "xfail in a proven rule", False
    return "proven", True


def md_escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(rules: list[dict], by_leg: dict, modes: list[str], examples: set) -> tuple[str, list[str]]:
    legs = legs_of(modes)
    problems: list[str] = []
    known = {r["id"] for r in rules}
    cases_of: dict[str, set[str]] = collections.defaultdict(set)
    all_cases: set[str] = set()
    unmarked: set[str] = set()
    no_loop: set[str] = set()
    for leg in legs:
        for case, rec in by_leg[leg].items():
            all_cases.add(case)
            if not rec["rules"]:
                unmarked.add(case)
            if rec["loop"] not in LOOPS:
                no_loop.add(case)
            for rid in rec["rules"]:
                if rid not in known:
                    problems.append(f"{case}: marker names unknown rule {rid!r}")
                cases_of[rid].add(case)

    status: dict[tuple[str, str], str] = {}
    for rule in rules:
        rid = rule["id"]
        if not cases_of[rid]:
            problems.append(f"{rid} ({rule['file']}): no case carries this rule")
        for leg in legs:
            outs = [by_leg[leg][c]["outcome"] for c in sorted(cases_of[rid]) if c in by_leg[leg]]
            cell, ok = rule_status(rule, outs)
            status[rid, leg] = cell
            if not ok and cases_of[rid]:
                problems.append(f"{rid} on {leg}: {cell}")

    lines: list[str] = []
    add = lines.append
    add("# Conformance matrix")
    add("")
    add("Generated by `make conformance` (`conformance/run.py`) from the rules in `spec/*.toml` and")
    add("the cases in `conformance/` that carry their ids (`@pytest.mark.rule`). Do not edit: `make")
    add("conformance-check` fails when this file differs from what a run produces.")
    add("")
    add("Legs: every case runs on asyncio and on uvloop (its loop parameter), once with the default")
    add("allocator and once under `PYTHONMALLOC=debug -X dev` (`+debug`). A rule is `proven` on a")
    add("leg when every case carrying it passed there; a `planned` rule's cases are strict expected")
    add("failures and it names the issue that builds it. The hypothesis properties ran")
    add(f"{' / '.join(sorted(examples)) or 'no'} examples each (`SKIRR_HYPOTHESIS_EXAMPLES`).")
    add("")
    add("## Totals")
    add("")
    add("| | " + " | ".join(legs) + " |")
    add("|---|" + "---|" * len(legs))
    counters = {leg: collections.Counter(r["outcome"] for r in by_leg[leg].values()) for leg in legs}
    for label, keys in (("cases passed", ("passed",)), ("cases failed", FAILED_OUTCOMES),
                        ("cases xfailed (planned)", ("xfailed",)), ("cases skipped", ("skipped",))):
        add(f"| {label} | " + " | ".join(str(sum(counters[leg][k] for k in keys)) for leg in legs) + " |")
    for label, pred in (("rules proven", lambda s: s == "proven"),
                        ("rules planned", lambda s: s.startswith("planned")),
                        ("rules not proven", lambda s: s != "proven" and not s.startswith("planned"))):
        add(f"| {label} | " + " | ".join(
            str(sum(1 for r in rules if pred(status[r["id"], leg]))) for leg in legs) + " |")
    add("")
    families: dict[str, list[dict]] = collections.OrderedDict()
    for rule in rules:
        families.setdefault(rule["file"], []).append(rule)
    n_planned = sum(1 for r in rules if r["status"] == "planned")
    add(f"{len(rules)} rules ({len(rules) - n_planned} proven, {n_planned} planned) in "
        f"{len(families)} families; {len(all_cases)} cases, each run on every leg.")
    add("")
    add("| Family | File | Rules | Planned |")
    add("|---|---|---|---|")
    for file, rs in families.items():
        add(f"| {md_escape(rs[0]['family'])} | `spec/{file}` | {len(rs)} | "
            f"{sum(1 for r in rs if r['status'] == 'planned')} |")
    add("")
    planned = [r for r in rules if r["status"] == "planned"]
    if planned:
        add("## Planned")
        add("")
        for r in planned:
            add(f"- `{r['id']}` (issue {r['issue']}): {md_escape(r['rule'])}")
        add("")
    for file, rs in families.items():
        add(f"## {md_escape(rs[0]['family'])} (`spec/{file}`)")
        add("")
        add("| Rule | Source | Strength | Cases | " + " | ".join(legs) + " |")
        add("|---|---|---|---|" + "---|" * len(legs))
        for r in rs:
            cases = "<br>".join(f"`{md_escape(c)}`" for c in sorted(cases_of[r["id"]])) or "—"
            add(f"| `{r['id']}` | {md_escape(r['source'])} | {r['strength']} | {cases} | "
                + " | ".join(status[r["id"], leg] for leg in legs) + " |")
        add("")
    if unmarked:
        add("## Cases that carry no rule")
        add("")
        for c in sorted(unmarked):
            add(f"- `{md_escape(c)}`")
        add("")
    if no_loop:
        add("## Cases without a loop parameter (counted on both loops)")
        add("")
        for c in sorted(no_loop):
            add(f"- `{md_escape(c)}`")
        add("")
    return "\n".join(lines), problems


def summary(by_leg: dict, modes: list[str], seconds: dict[str, float]) -> list[str]:
    out = []
    for leg in legs_of(modes):
        c = collections.Counter(r["outcome"] for r in by_leg[leg].values())
        failed = sum(c[k] for k in FAILED_OUTCOMES)
        line = f"{leg}: {c['passed']} passed, {failed} failed"
        if c["xfailed"]:
            line += f", {c['xfailed']} xfailed (planned)"
        if c["skipped"]:
            line += f", {c['skipped']} skipped"
        dur = sum(r.get("duration", 0.0) for r in by_leg[leg].values())
        line += f"  [{dur:.0f} s in cases]"
        out.append(line)
    for mode, s in seconds.items():
        out.append(f"{mode} run: {s:.0f} s wall-clock")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="plain,debug",
                    help="comma-separated allocator modes to run: plain, debug (default both)")
    ap.add_argument("--examples", type=int,
                    default=int(os.environ.get("SKIRR_HYPOTHESIS_EXAMPLES", DEFAULT_EXAMPLES)),
                    help="hypothesis examples per property (SKIRR_HYPOTHESIS_EXAMPLES; default 2000)")
    ap.add_argument("--output", default=str(ROOT / "CONFORMANCE.md"), help="where to write the matrix")
    ap.add_argument("--check", metavar="FILE",
                    help="write the matrix to a temporary file and fail if FILE differs from it")
    ap.add_argument("--results", default=str(ROOT / "build" / "conformance"),
                    help="directory for the per-mode JSON results")
    ap.add_argument("--jobs", type=int, default=2,
                    help="modes run at once (default 2: the plain and debug runs side by side)")
    ap.add_argument("--workers", type=int, default=0,
                    help="pytest-xdist workers per mode (default 0: each mode in one process)")
    ap.add_argument("--reuse", default="", metavar="MODES",
                    help="comma-separated modes whose results are already in --results, written by "
                         "a pytest run of the whole suite with --strict-rules --conformance-json "
                         "RESULTS/<mode>.json at the same --examples (CI: make test's run is the "
                         "plain mode's): loaded, not run again")
    ap.add_argument("--report-only", action="store_true",
                    help="do not run pytest; regenerate from the JSON already in --results")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)

    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}")
    try:
        rules = load_spec()
    except SpecError as e:
        print(f"conformance: spec/: {e}", file=sys.stderr)
        return 1
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    reuse = [m for m in args.reuse.split(",") if m]
    for m in reuse:
        if m not in modes:
            ap.error(f"--reuse {m!r}: not one of --modes")
    seconds: dict[str, float] = {}
    if not args.report_only:
        seconds = run_modes([m for m in modes if m not in reuse], results, args.examples,
                            args.pytest_args, args.jobs, args.workers)
    by_leg, problems, examples = load_results(results, modes)
    if reuse and not args.report_only and examples != {str(args.examples)}:
        # A reused run must have had as many examples per property as the runs made here.
        problems.append(f"--reuse {args.reuse}: results at {' / '.join(sorted(examples))} "
                        f"examples, this run {args.examples}")
    text, more = render(rules, by_leg, modes, examples)
    problems += more

    print()
    for line in summary(by_leg, modes, seconds):
        print(line)
    if args.check:
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as f:
            f.write(text + "\n")
            tmp = f.name
        same = filecmp.cmp(tmp, args.check, shallow=False) if Path(args.check).exists() else False
        if not same:
            problems.append(f"{args.check} differs from this run's matrix ({tmp}); "
                            f"run `make conformance` and commit it")
        else:
            os.unlink(tmp)
    else:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    if problems:
        print(f"\nconformance: {len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print("conformance: every leg passed; every rule has a case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
