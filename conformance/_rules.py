"""The link between spec/*.toml and the cases: the ``rule`` marker, its validation, and the record
of outcomes that ``conformance/run.py`` turns into CONFORMANCE.md.

Loaded by conftest.py (``pytest_addoption`` / ``pytest_configure`` call in here). What it does:

- registers ``@pytest.mark.rule("ID", ...)`` (one or more rule ids per marker);
- fails the session (UsageError) when spec/ itself is malformed (``load_spec`` checks every
  field), and, with ``--strict-rules`` (conformance/run.py passes it), when a marker names an id
  that spec/ does not hold (without it such ids are only recorded: run.py reports them);
- with ``--conformance-json PATH``, writes one record per case that ran:
  ``{"nodeid", "case", "loop", "rules", "outcome"}``, where ``case`` is the nodeid without the loop
  parameter (the same case on both loops), ``loop`` is the value of the ``loop_name`` or ``loop``
  parameter (None when the case has neither), and ``outcome`` is passed, failed, error, skipped,
  xfailed or xpassed (a strict xfail that passes is reported by pytest as failed); under
  pytest-xdist (``-n``) the controller writes it from the records the workers' reports carry.

Never: changes the outcome of a case, or marks anything xfail on its own (a planned rule's cases
carry their own ``xfail(strict=True)``).
"""
from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIR = ROOT / "spec"
LOOP_PARAMS = ("loop_name", "loop")

FIELDS = ("id", "source", "strength", "rule", "decision", "status")
STRENGTHS = ("MUST", "SHOULD", "MAY", "skirr")
STATUSES = ("proven", "planned")
SOURCE_PREFIXES = ("RFC 9110", "RFC 9112", "RFC 6585", "RFC 6455", "RFC 7239", "RFC 7692",
                   "RFC 8297", "ASGI www 2.5", "ASGI lifespan 2.0", "ASGI websocket 2.4",
                   "ASGI extensions", "skirr")
# TLS (issue 32): TLS 1.3 and 1.2, their profile for servers, ALPN, SNI, the ASGI tls extension.
SOURCE_PREFIXES += ("RFC 8446", "RFC 5246", "RFC 9325", "RFC 8996", "RFC 7301", "RFC 6066",
                    "ASGI TLS 0.2")
# HTTP/2 (issue 33): RFC 9113 and HPACK (RFC 7541).
SOURCE_PREFIXES += ("RFC 9113", "RFC 7541")


class SpecError(Exception):
    pass


def load_spec(spec_dir: Path = SPEC_DIR) -> list[dict]:
    """Every [[rule]] of spec/*.toml, in file order (files sorted by name), each with a ``file``
    key added. Raises SpecError naming the first problem found."""
    rules: list[dict] = []
    seen: dict[str, str] = {}
    for path in sorted(spec_dir.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{path.name}: {e}") from None
        extra = set(data) - {"family", "rule"}
        if extra:
            raise SpecError(f"{path.name}: unknown top-level keys {sorted(extra)}")
        for i, rule in enumerate(data.get("rule", [])):
            where = f"{path.name} rule #{i + 1}"
            for f in FIELDS:
                if not isinstance(rule.get(f), str):
                    raise SpecError(f"{where}: {f!r} missing or not a string")
            rid = rule["id"]
            where = f"{path.name} {rid}"
            unknown = set(rule) - set(FIELDS) - {"issue"}
            if unknown:
                raise SpecError(f"{where}: unknown keys {sorted(unknown)}")
            if rid in seen:
                raise SpecError(f"{where}: id already used in {seen[rid]}")
            if rule["strength"] not in STRENGTHS:
                raise SpecError(f"{where}: strength {rule['strength']!r} not in {STRENGTHS}")
            if rule["status"] not in STATUSES:
                raise SpecError(f"{where}: status {rule['status']!r} not in {STATUSES}")
            if not rule["source"].startswith(SOURCE_PREFIXES):
                raise SpecError(f"{where}: source {rule['source']!r} names no known document")
            issue = rule.get("issue", 0)
            if not isinstance(issue, int) or issue < 0:
                raise SpecError(f"{where}: issue must be a non-negative integer")
            if rule["status"] == "planned" and issue == 0:
                raise SpecError(f"{where}: a planned rule names the issue that builds it")
            if not rule["rule"].strip():
                raise SpecError(f"{where}: empty rule text")
            seen[rid] = path.name
            rules.append(dict(rule, issue=issue, file=path.name,
                              family=data.get("family", path.stem)))
    return rules


def marker_rules(item: pytest.Item) -> list[str]:
    """The rule ids a case carries, in marker order (module, class and function markers)."""
    out: list[str] = []
    for mark in item.iter_markers("rule"):
        for rid in mark.args:
            if rid not in out:
                out.append(rid)
    return out


def loop_of(item: pytest.Item) -> Optional[str]:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name in LOOP_PARAMS:
        if name in callspec.params:
            return str(callspec.params[name])
    return None


def case_id(nodeid: str, loop: Optional[str]) -> str:
    """The nodeid with the loop's parameter id removed: ``f.py::t[asyncio-x]`` -> ``f.py::t[x]``."""
    if loop is None or not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    base, _, params = nodeid[:-1].partition("[")
    parts = params.split("-")
    if loop in parts:
        parts.remove(loop)
    return f"{base}[{'-'.join(parts)}]" if parts else base


CASE_PROPERTY = "skirr-case"  # the user_properties key of a case's record (see Recorder)


class Recorder:
    """Collects one outcome per case (the worst of its setup/call/teardown phases)."""

    def __init__(self, config: pytest.Config, known: set[str]) -> None:
        self.config = config
        self.known = known
        self.items: dict[str, dict[str, Any]] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        unknown: dict[str, list[str]] = {}
        for item in items:
            for rid in marker_rules(item):
                if rid not in self.known:
                    unknown.setdefault(rid, []).append(item.nodeid)
        if unknown and config.getoption("strict_rules"):
            lines = [f"  {rid}: {nodes[0]}" + (f" (+{len(nodes) - 1})" if len(nodes) > 1 else "")
                     for rid, nodes in sorted(unknown.items())]
            raise pytest.UsageError(
                "rule markers name ids that spec/*.toml does not hold:\n" + "\n".join(lines)
            )
        for item in items:
            loop = loop_of(item)
            rec = {
                "nodeid": item.nodeid,
                "case": case_id(item.nodeid, loop),
                "loop": loop,
                "rules": marker_rules(item),
                "outcome": None,
                "duration": 0.0,
            }
            self.items[item.nodeid] = rec
            # Under pytest-xdist the controller collects nothing: each report carries its case's
            # record (user_properties travel with the report) for the controller to file.
            item.user_properties.append((CASE_PROPERTY, dict(rec)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rec = self.items.get(report.nodeid)
        if rec is None:
            rec = next((dict(v) for k, v in report.user_properties if k == CASE_PROPERTY), None)
            if rec is None:
                return
            self.items[report.nodeid] = rec
        rec["duration"] = round(rec["duration"] + report.duration, 3)
        outcome = rec["outcome"]
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
                outcome = "xpassed"  # a planned rule's case passes: flip the rule to proven
            elif report.failed:
                outcome = "failed" if report.when == "call" else "error"
            elif report.skipped:
                outcome = "skipped"
            else:
                outcome = "passed"
        elif report.when == "teardown" and report.failed:
            outcome = "error"
        rec["outcome"] = outcome

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        path = self.config.getoption("conformance_json")
        if not path or hasattr(self.config, "workerinput"):
            return  # no file asked for, or an xdist worker: the controller writes it
        records = [r for r in self.items.values() if r["outcome"] is not None]
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"exitstatus": int(exitstatus),
                       "examples": os.environ.get("SKIRR_HYPOTHESIS_EXAMPLES", "default"),
                       "cases": records}, f, indent=1)
        os.replace(tmp, path)


def addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--conformance-json", dest="conformance_json", default=None, metavar="PATH",
        help="write (nodeid, loop, rules, outcome) of every case that ran to PATH (JSON)",
    )
    parser.addoption(
        "--strict-rules", dest="strict_rules", action="store_true", default=False,
        help="refuse to run when a rule marker names an id that spec/*.toml does not hold",
    )


def configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rule(*ids): the spec/*.toml rule id(s) this case proves"
    )
    try:
        rules = load_spec()
    except SpecError as e:
        raise pytest.UsageError(f"spec/: {e}") from None
    config.pluginmanager.register(Recorder(config, {r["id"] for r in rules}), "skirr-rules")
