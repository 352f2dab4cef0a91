"""Adds up the pytest and Playwright reports into one closing line: 'N passed, N failed'."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def pytest_counts(path: Path) -> tuple[int, int, int]:
    if not path.exists():
        return 0, 1, 0  # the run did not even report: count it as a failure
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total, failed = (
        int(suite.get("tests", 0)),
        int(suite.get("failures", 0)) + int(suite.get("errors", 0)),
    )
    skipped = int(suite.get("skipped", 0))
    return total - failed - skipped, failed, skipped


def playwright_counts(path: Path) -> tuple[int, int, int]:
    if not path.exists():
        return 0, 1, 0
    stats = json.loads(path.read_text())["stats"]
    return stats["expected"] + stats.get("flaky", 0), stats["unexpected"], stats["skipped"]


def main() -> int:
    reports = Path(sys.argv[1])
    py = pytest_counts(reports / "pytest.xml")
    ui = playwright_counts(reports / "playwright.json")
    print(f"pytest: {py[0]} passed, {py[1]} failed, {py[2]} skipped")
    print(f"galata: {ui[0]} passed, {ui[1]} failed, {ui[2]} skipped")
    passed, failed, skipped = (a + b for a, b in zip(py, ui, strict=True))
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
