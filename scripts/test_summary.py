"""Adds up the pytest and Playwright reports into one closing line: 'N passed, N failed', after
the name of each test that failed (the end of a long log is what a CI page shows)."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def pytest_counts(path: Path) -> tuple[int, int, int]:
    if not path.exists():
        return 0, 1, 0  # the run did not even report: count it as a failure
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return 0, 1, 0
    total, failed = (
        int(suite.get("tests", 0)),
        int(suite.get("failures", 0)) + int(suite.get("errors", 0)),
    )
    skipped = int(suite.get("skipped", 0))
    return total - failed - skipped, failed, skipped


def pytest_failures(path: Path) -> list[str]:
    if not path.exists():
        return []
    names = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            names.append(f"{case.get('classname')}::{case.get('name')}")
    return names


def playwright_failures(path: Path) -> list[str]:
    if not path.exists():
        return []
    names: list[str] = []

    def walk(suite: dict[str, Any], titles: list[str]) -> None:
        here = [*titles, suite["title"]] if suite.get("title") else titles
        for spec in suite.get("specs", []):
            for test in spec.get("tests", []):
                if test.get("status") == "unexpected":
                    names.append(" > ".join([*here, spec["title"]]))
        for child in suite.get("suites", []):
            walk(child, here)

    for suite in json.loads(path.read_text()).get("suites", []):
        walk(suite, [])
    return names


def playwright_counts(path: Path) -> tuple[int, int, int]:
    if not path.exists():
        return 0, 1, 0
    stats = json.loads(path.read_text())["stats"]
    return stats["expected"] + stats.get("flaky", 0), stats["unexpected"], stats["skipped"]


def main() -> int:
    reports = Path(sys.argv[1])
    py = pytest_counts(reports / "pytest.xml")
    ui = playwright_counts(reports / "playwright.json")
    for name in pytest_failures(reports / "pytest.xml"):
        print(f"FAILED (pytest) {name}")
    for name in playwright_failures(reports / "playwright.json"):
        print(f"FAILED (galata) {name}")
    print(f"pytest: {py[0]} passed, {py[1]} failed, {py[2]} skipped")
    print(f"galata: {ui[0]} passed, {ui[1]} failed, {ui[2]} skipped")
    passed, failed, skipped = (a + b for a, b in zip(py, ui, strict=True))
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
