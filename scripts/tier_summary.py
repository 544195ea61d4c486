"""Sums the tiers' JUnit reports; fails if a tier is missing, failed, ran nothing or only skipped."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def counts(report: Path) -> dict[str, int]:
    """tests/failures/errors/skipped of one pytest JUnit report."""
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def main(reports: list[str]) -> int:
    ok, total = True, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for name in reports:
        path = Path(name)
        if not path.exists():
            print(f"tier {path.stem}: no report (the tier did not run)")
            ok = False
            continue
        c = counts(path)
        total = {k: total[k] + c[k] for k in total}
        ran = c["tests"] - c["skipped"]
        print(f"tier {path.stem}: {c['tests']} tests, {ran} ran, {c['skipped']} skipped, "
              f"{c['failures'] + c['errors']} failed")
        if ran == 0:
            print(f"tier {path.stem}: ran no test; that counts as a failure")
            ok = False
    failed = total["failures"] + total["errors"]
    passed = total["tests"] - total["skipped"] - failed
    print(f"TOTAL: {passed} passed, {failed} failed, {total['skipped']} skipped")
    return 0 if ok and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
