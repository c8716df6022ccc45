"""The committed benchmark reports that rules proven by measurement read.

A speed or cost target is measured in bench/ (ratios against a baseline in the same run, the
server pinned, several rounds), never timed inside a test. Such a rule's case reads the verdict
line that bench/harness/report.py wrote into the newest committed report holding it:
bench/RESULTS.md (the whole matrix, ``make bench``) or a one-row summary (``make bench-costs``
writes bench/COSTS.md, ``make bench-workers`` bench/WORKERS.md). Each report opens with
``- Date: <ISO 8601>; commit <sha>``.

Never: measures anything, or accepts a report without the verdict line (the case fails, naming
the make target that writes it).
"""
from __future__ import annotations

import datetime
import re
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
REPORTS = ("RESULTS.md", "COSTS.md", "WORKERS.md")


def newest_verdict(pattern: str) -> tuple[str, re.Match[str]]:
    """(report file name, match) of `pattern` (a multi-line regex for one verdict line) in the
    newest report of REPORTS, by its Date line, that has such a line; AssertionError if none has."""
    found = []
    for name in REPORTS:
        path = BENCH / name
        if not path.exists():
            continue
        text = path.read_text()
        m = re.search(pattern, text, re.M)
        date = re.search(r"^- Date: (\S+?);", text, re.M)
        if m and date:
            found.append((datetime.datetime.fromisoformat(date[1]), name, m))
    assert found, f"no bench report in {', '.join(REPORTS)} has a line matching {pattern!r}"
    _, name, m = max(found, key=lambda f: f[0])
    return name, m
