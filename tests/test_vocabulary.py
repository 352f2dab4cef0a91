"""The shared vocabulary: figures read naturally, and the panel's TypeScript says exactly what Python says."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from jupyter_gpu_ws import vocabulary as v

ROOT = Path(__file__).resolve().parents[1]

SIZES = [
    (0, "0 B"),
    (17, "17 B"),
    (1023, "1023 B"),
    (1024, "1.0 KiB"),
    (1280, "1.3 KiB"),
    (34_304, "33.5 KiB"),
    (160 * 2**20, "160 MiB"),
    (15 * 2**30, "15.0 GiB"),
    (99.96 * 2**20, "100.0 MiB"),
]
USAGES = [
    ((16_106_127_360, 42_949_672_960), "15.0/40 GiB"),
    ((400 * 2**20, 80 * 2**30), "0.4/80 GiB"),
    ((2**30, 10_200_547_328), "1.0/9.5 GiB"),
    ((300, 1000), "300/1000 B"),
]
SPANS = [
    (0, "0 s"),
    (42, "42 s"),
    (89, "89 s"),
    (254, "4 min"),
    (5399, "90 min"),
    (3 * 3600, "3 h"),
    (3 * 86400, "3 d"),
]
DURATIONS = [(40, "40 s"), (720, "12 min"), (2 * 3600 + 300, "2 h 5 min")]
COUNTS = [
    ((1, "file"), "1 file"),
    ((2, "file"), "2 files"),
    ((1, "conflict copy"), "1 conflict copy"),
    ((3, "conflict copy"), "3 conflict copies"),
    ((1204, "wheel"), "1,204 wheels"),
]


@pytest.mark.parametrize(("n", "text"), SIZES)
def test_sizes_take_the_unit_that_fits(n: float, text: str) -> None:
    assert v.size(n) == text


@pytest.mark.parametrize(("pair", "text"), USAGES)
def test_usage_is_used_of_total_in_the_totals_unit(pair: tuple[int, int], text: str) -> None:
    assert v.usage(*pair) == text


@pytest.mark.parametrize(("seconds", "text"), SPANS)
def test_ages_read_as_minutes_hours_and_days(seconds: float, text: str) -> None:
    assert v.span(seconds) == text
    assert v.age(1000.0, now=1000.0 + seconds) == f"{text} ago"


@pytest.mark.parametrize(("seconds", "text"), DURATIONS)
def test_durations(seconds: float, text: str) -> None:
    assert v.duration(seconds) == text


@pytest.mark.parametrize(("args", "text"), COUNTS)
def test_counts_agree_with_their_noun(args: tuple[int, str], text: str) -> None:
    assert v.count(*args) == text


def test_deadline_sources_and_time_left_in_words() -> None:
    assert v.deadline_source("max_runtime") == "runtime limit"
    assert v.deadline_source("preemption:gcp") == "GCP preemption"
    assert v.deadline_source("something_new") == "something_new"
    assert v.time_left(24 * 60 + 13) == "24 min left"
    assert v.time_left(2 * 3600 + 5 * 60) == "2 h 05 left"
    assert v.percent(47.4) == "47 %"


def test_sync_words_never_say_saved() -> None:
    now = 10_000.0
    assert v.sync_word({"state": "idle", "last_sync": now - 120, "pending_files": 0}, now) == (
        "synced 2 min ago",
        "ok",
    )
    assert v.sync_word({"state": "idle", "pending_files": 3}, now) == ("3 pending", "pending")
    assert v.sync_word({"state": "error", "store_down": "timeout"}, now) == ("store down", "error")
    assert (
        v.sync_word({"state": "idle", "last_sync": now, "store_same_disk": True}, now)[0]
        == "local store only"
    )
    assert v.sync_word({"state": "idle", "last_sync": None}, now)[0] == "nothing synced yet"
    # Writing goes on while the lease lasts, but its renewal fails: never "synced" beside it.
    assert v.sync_word(
        {"state": "idle", "last_sync": now, "lease_error": "Cannot renew the lease: 412"}, now
    ) == ("lease not renewed", "warning")


SAVED = {
    "documents": {"saved": ["a.ipynb"], "unanswered": []},
    "uploaded": 2,
    "bytes_uploaded": 2048,
    "stored": {"files": 5, "bytes": 4096, "checkpoints": [{"run": "a.ipynb", "step": 3}]},
}
PERSISTS = [
    # (state, errors, result, same disk, synced) → the one line
    (
        ("done", [], SAVED, False, True),
        "All saved: 1 document saved, 2 files uploaded (2.0 KiB), in the store: 5 files (4.0 KiB), a.ipynb at step 3.",
    ),
    (
        ("done", [], {**SAVED, "uploaded": 0}, False, True),
        "All saved: 1 document saved, nothing new to upload, in the store: 5 files (4.0 KiB), "
        "a.ipynb at step 3.",
    ),
    (
        (
            "done",
            [],
            {
                **SAVED,
                "found_in_store": 3,
                "checkpoints": [
                    {"kernel_id": "k1", "state": "done"},
                    {"kernel_id": "k2", "state": "error"},
                ],
            },
            False,
            True,
        ),
        "All saved: 1 document saved, 1 checkpoint taken, 2 files uploaded (2.0 KiB), 3 files "
        "already in the store, in the store: 5 files (4.0 KiB), a.ipynb at step 3.",
    ),
    (
        ("failed", ["a.ipynb: Checkpoint at step 3 failed: boom"], SAVED, False, True),
        "Files saved, not everything: 1 document saved, 2 files uploaded (2.0 KiB), in the store: 5 files "
        "(4.0 KiB), a.ipynb at step 3. Failed: a.ipynb: Checkpoint at step 3 failed: boom.",
    ),
    (("failed", ["the store is full"], {}, False, False), "Persist failed: the store is full."),
    (("cancelled", [], {}, False, False), "Persist cancelled: what was uploaded stays uploaded."),
    (
        (
            "done",
            [],
            {**SAVED, "documents": {"saved": [], "unanswered": ["JupyterLab /lab"]}},
            False,
            True,
        ),
        "Persisted: 2 files uploaded (2.0 KiB), in the store: 5 files (4.0 KiB), a.ipynb at step 3. 1 browser page "
        "did not answer (JupyterLab /lab): documents open there may be unsaved.",
    ),
]


@pytest.mark.parametrize(("args", "text"), PERSISTS)
def test_a_persist_is_one_line_that_says_all_saved_only_when_it_is(args: tuple, text: str) -> None:
    assert v.persist_summary(*args)["text"] == text


def test_a_persist_to_this_machines_disk_is_never_all_saved() -> None:
    summary = v.persist_summary("done", [], SAVED, True, True)
    assert (
        summary["headline"] == "Copied to this machine's disk only"
        and summary["level"] == "warning"
    )
    assert (
        summary["text"].endswith(v.WORDS["persist"]["local_advice"])
        and not summary["saved_elsewhere"]
    )
    # The panel shows the store's content and the advice beside the line: not in its short form.
    assert (
        summary["short"]
        == "Copied to this machine's disk only: 1 document saved, 2 files uploaded (2.0 KiB)."
    )


def test_the_panel_formats_figures_exactly_as_python_does(tmp_path: Path) -> None:
    """src/vocabulary.ts, compiled and run by Node, against the same examples."""
    tsc = ROOT / "node_modules" / ".bin" / "tsc"
    node = shutil.which("node")
    if not tsc.exists() or node is None:
        pytest.skip("needs Node.js and the frontend's node_modules (jlpm install)")
    compiled = subprocess.run(
        [
            str(tsc),
            "--module",
            "commonjs",
            "--target",
            "ES2020",
            "--esModuleInterop",
            "--resolveJsonModule",
            "--skipLibCheck",
            "--outDir",
            str(tmp_path / "out"),
            str(ROOT / "src" / "vocabulary.ts"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    # tsc writes out/src/vocabulary.js beside out/jupyter_gpu_ws/vocabulary.json, the file it reads.
    script = """
    const v = require(process.argv[1]);
    const cases = JSON.parse(process.argv[2]);
    const out = {
      sizes: cases.sizes.map(([n]) => v.size(n)),
      usages: cases.usages.map(([[u, t]]) => v.usage(u, t)),
      spans: cases.spans.map(([s]) => v.span(s)),
      durations: cases.durations.map(([s]) => v.duration(s)),
      counts: cases.counts.map(([[n, noun]]) => v.count(n, noun)),
      sources: ['max_runtime', 'preemption:gcp'].map(v.deadlineSource),
      left: [24 * 60 + 13, 2 * 3600 + 5 * 60].map(v.timeLeft)
    };
    console.log(JSON.stringify(out));
    """
    cases = {
        "sizes": SIZES,
        "usages": USAGES,
        "spans": SPANS,
        "durations": DURATIONS,
        "counts": COUNTS,
    }
    ran = subprocess.run(
        [node, "-e", script, str(tmp_path / "out" / "src" / "vocabulary.js"), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout)
    assert got["sizes"] == [text for _, text in SIZES]
    assert got["usages"] == [text for _, text in USAGES]
    assert got["spans"] == [text for _, text in SPANS]
    assert got["durations"] == [text for _, text in DURATIONS]
    assert got["counts"] == [text for _, text in COUNTS]
    assert got["sources"] == ["runtime limit", "GCP preemption"]
    assert got["left"] == ["24 min left", "2 h 05 left"]
