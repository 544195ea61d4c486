"""pytest plugin (`-p upstream_suite_outcomes`): each case's outcome as one JSON line.

Written to $UPSTREAM_SUITE_OUTCOMES: {"id", "outcome", "reason"} per test case (passed, failed,
skipped, error) and per file that did not collect, and a last line naming the `tokamax` the
run imported, so a run cannot silently test the wrong tree.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_out = None


def _write(record: dict[str, Any]) -> None:
    global _out
    if _out is None:
        _out = open(os.environ["UPSTREAM_SUITE_OUTCOMES"], "w")
    _out.write(json.dumps(record) + "\n")


def _reason(report: Any) -> str:
    if report.passed:
        return ""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (file, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _write({"id": report.nodeid, "outcome": "collection error", "reason": _reason(report)})


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call" or (report.when == "setup" and not report.passed) or (
            report.when == "teardown" and report.failed):
        outcome = report.outcome if report.when == "call" else ("error" if report.failed else report.outcome)
        _write({"id": report.nodeid, "outcome": outcome, "reason": _reason(report)})


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    module = sys.modules.get("tokamax")
    _write({"tokamax": getattr(module, "__file__", None), "exitstatus": int(exitstatus)})
    if _out is not None:
        _out.close()
