"""Where a test run's time went, as the Markdown tables of docs/testing.md.

Usage: python scripts/test_timings.py TIMINGS.jsonl [PLAYWRIGHT.json] [--top N]

TIMINGS.jsonl is what tests/timing.py wrote (GPUWS_TEST_TIMINGS=…): each test's wall and CPU
time per phase. The CPU time is the whole machine's, so "waiting" (wall − CPU, never below 0)
is only the test's own in a run of one process at a time; a parallel run's figures are
printed as they are, with its workers named.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def per_test(lines: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in lines:
        figures = tests[line["test"]]
        figures[line["phase"]] += line["wall"]
        figures["wall"] += line["wall"]
        figures["cpu"] += line["cpu"]
    return tests


def file_table(tests: dict[str, dict[str, float]]) -> list[str]:
    files: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, figures in tests.items():
        row = files[name.split("::")[0]]
        row["tests"] += 1
        for key in ("setup", "call", "teardown", "wall", "cpu"):
            row[key] += figures.get(key, 0.0)
    rows = sorted(files.items(), key=lambda item: -item[1]["wall"])
    total = defaultdict(float)
    out = [
        "| file | tests | wall s | setup s | call s | teardown s | CPU s | waiting s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows:
        for key, value in row.items():
            total[key] += value
        out.append(_file_row(f"`{name}`", row))
    out.append(_file_row("**all**", total))
    return out


def _file_row(name: str, row: dict[str, float]) -> str:
    waiting = max(0.0, row["wall"] - row["cpu"])
    return (
        f"| {name} | {int(row['tests'])} | {row['wall']:.1f} | {row['setup']:.1f} | "
        f"{row['call']:.1f} | {row['teardown']:.1f} | {row['cpu']:.1f} | {waiting:.1f} |"
    )


def slowest_table(tests: dict[str, dict[str, float]], top: int) -> list[str]:
    rows = sorted(tests.items(), key=lambda item: -item[1]["wall"])[:top]
    out = ["| # | test | wall s | CPU s | waiting s |", "|---:|---|---:|---:|---:|"]
    for rank, (name, figures) in enumerate(rows, 1):
        waiting = max(0.0, figures["wall"] - figures["cpu"])
        out.append(
            f"| {rank} | `{name}` | {figures['wall']:.1f} | {figures['cpu']:.1f} | {waiting:.1f} |"
        )
    return out


def playwright_table(path: Path) -> list[str]:
    report = json.loads(path.read_text())
    specs: dict[str, list[float]] = defaultdict(list)

    def walk(suite: dict[str, Any], file: str) -> None:
        file = suite.get("file", file)
        for spec in suite.get("specs", []):
            for test in spec.get("tests", []):
                for result in test.get("results", []):
                    specs[file].append(result.get("duration", 0) / 1000)
        for child in suite.get("suites", []):
            walk(child, file)

    for suite in report.get("suites", []):
        walk(suite, suite.get("file", "?"))
    out = ["| spec file | tests | wall s |", "|---|---:|---:|"]
    for file, durations in sorted(specs.items(), key=lambda item: -sum(item[1])):
        out.append(f"| `{file}` | {len(durations)} | {sum(durations):.1f} |")
    total = [d for durations in specs.values() for d in durations]
    out.append(f"| **all** | {len(total)} | {sum(total):.1f} |")
    run = report.get("stats", {}).get("duration")
    if run is not None:
        out.append(f"\nThe Playwright run took {run / 1000:.0f} s from start to end.")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timings", type=Path)
    parser.add_argument("playwright", type=Path, nargs="?")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    tests = per_test(read_lines(args.timings))
    print("\n".join(file_table(tests)))
    print(f"\nThe {args.top} slowest tests:\n")
    print("\n".join(slowest_table(tests, args.top)))
    if args.playwright:
        print("\nBrowser tests:\n")
        print("\n".join(playwright_table(args.playwright)))


if __name__ == "__main__":
    main()
