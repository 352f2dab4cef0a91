"""A pass's plan on its own (sync/plan.py): the order files go in, what an emergency leaves
behind, the deletion guard and the limits, on a real work directory and a real record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync.errors import DeletionGuardError
from jupyter_gpu_ws.sync.ignore import IgnoreRules
from jupyter_gpu_ws.sync.index import Record, SyncIndex
from jupyter_gpu_ws.sync.pending import PendingSet
from jupyter_gpu_ws.sync.plan import (
    URGENT_GUESS_REMOTE,
    URGENT_SMALL,
    PassReport,
    Planner,
    left_behind,
    needs_listing,
    upload_phases,
)
from jupyter_gpu_ws.sync.scan import LocalFile

RUN = ".gpuws/checkpoints/train.ipynb"


def test_checkpoint_data_goes_before_any_manifest_and_large_files_lead_the_rest() -> None:
    files = [
        LocalFile("notes.md", 10, 1),
        LocalFile("data.bin", 50 << 20, 1),
        LocalFile(f"{RUN}/ckpt-000000010-20261204T020000Z/manifest.json", 100, 10),
        LocalFile(f"{RUN}/ckpt-000000010-20261204T020000Z/model.pt", 5 << 20, 10),
        LocalFile(f"{RUN}/ckpt-000000020-20261204T021000Z/model.pt", 5 << 20, 20),
        LocalFile(f"{RUN}/ckpt-000000020-20261204T021000Z/manifest.json", 100, 20),
    ]
    phases = [[f.path for f in phase] for phase in upload_phases(files, urgent=False)]
    assert phases == [
        [
            f"{RUN}/ckpt-000000020-20261204T021000Z/model.pt",
            f"{RUN}/ckpt-000000010-20261204T020000Z/model.pt",
        ],  # newest first
        [
            f"{RUN}/ckpt-000000020-20261204T021000Z/manifest.json",
            f"{RUN}/ckpt-000000010-20261204T020000Z/manifest.json",
        ],
        ["data.bin", "notes.md"],
    ]


def test_an_emergency_sends_small_files_first_and_large_ones_last() -> None:
    files = [
        LocalFile("data.bin", 50 << 20, 1),
        LocalFile("train.py", 2_000, 1),
        LocalFile("config.yaml", 300, 1),
        LocalFile(f"{RUN}/ckpt-000000020-20261204T021000Z/model.pt", 5 << 20, 20),
        LocalFile(f"{RUN}/ckpt-000000020-20261204T021000Z/manifest.json", 100, 20),
    ]
    phases = [[f.path for f in phase] for phase in upload_phases(files, urgent=True)]
    assert phases == [
        ["config.yaml", "train.py"],
        [f"{RUN}/ckpt-000000020-20261204T021000Z/model.pt"],
        [f"{RUN}/ckpt-000000020-20261204T021000Z/manifest.json"],
        ["data.bin"],
    ]


def test_an_emergency_leaves_behind_only_what_cannot_end_in_time() -> None:
    big = LocalFile("data.bin", 1 << 30, 1)
    small = LocalFile("train.py", URGENT_SMALL - 1, 1)
    assert left_behind(big, None, 100.0, 0, remote=True) is None  # no deadline: everything goes
    assert left_behind(small, 101.0, 100.0, 0, remote=True) is None
    assert left_behind(big, 200.0, 100.0, 100 << 20, remote=True) is None  # 10 s needed, 100 s left
    why = left_behind(big, 110.0, 100.0, 0, remote=True)  # no speed measured: the remote guess
    assert (
        why is not None
        and f"{(1 << 30) / URGENT_GUESS_REMOTE:.0f} s" in why
        and "10 s were left" in why
    )
    assert left_behind(small, 99.0, 100.0, 0, remote=True) is not None  # the time is up even for it


@pytest.fixture
def planner(tmp_path: Path) -> Planner:
    workdir = tmp_path / "work"
    workdir.mkdir()
    index = SyncIndex(str(tmp_path / "state" / "index.sqlite3"))
    return Planner(
        str(workdir), IgnoreRules(str(workdir)), index, PendingSet(str(workdir), index.get)
    )


def test_the_deletion_guard_counts_everything_but_retired_checkpoints(planner: Planner) -> None:
    mirrored = [f"file{i}.txt" for i in range(12)]
    with pytest.raises(DeletionGuardError, match="remove 12 of the 20 files"):
        planner.guard_deletions(mirrored, 20, 0.5)
    planner.guard_deletions(mirrored[:9], 12, 0.5)  # under the guard's minimum count
    planner.guard_deletions(mirrored, 30, 0.5)  # under the fraction

    # Checkpoints their run replaced (a newer complete one is here) are no sign of a vanished folder.
    newer = Path(planner.workdir, *RUN.split("/"), "ckpt-000000099-20261204T029000Z")
    newer.mkdir(parents=True)
    (newer / "manifest.json").write_text("{}")
    retired = [f"{RUN}/ckpt-{i:09d}-20261204T020000Z/model.pt" for i in range(12)]
    planner.guard_deletions(retired, 20, 0.5)
    (newer / "manifest.json").unlink()  # no complete checkpoint left here: they count again
    with pytest.raises(DeletionGuardError):
        planner.guard_deletions(retired, 20, 0.5)


def test_limits_leave_out_files_too_large_and_refuse_what_exceeds_the_quota(
    planner: Planner,
) -> None:
    planner.index.put_many([Record("old.bin", 400, 1, None, 0.0)])
    changed = [
        LocalFile("huge.bin", 5_000, 1),
        LocalFile("a.bin", 300, 1),
        LocalFile("b.bin", 500, 1),
        LocalFile("old.bin", 450, 2),
    ]
    report = PassReport()
    allowed, warning = planner.apply_limits(
        changed, report, max_file_size=1_000, quota=1_300, used=400
    )
    # old.bin replaces its 400 bytes (+50), a.bin fits (+300): 750; b.bin would make 1,250 ≤ 1,300.
    assert sorted(f.path for f in allowed) == ["a.bin", "b.bin", "old.bin"]
    assert report.skipped == ["huge.bin"] and "larger than max_file_size" in report.problems[0]
    assert warning is not None and "96% full" in warning
    allowed, _ = planner.apply_limits(changed, PassReport(), None, quota=1_000, used=400)
    assert "huge.bin" not in {f.path for f in allowed}
    refused = PassReport()
    allowed, _ = planner.apply_limits(
        [LocalFile("c.bin", 700, 1)], refused, None, quota=1_000, used=400
    )
    assert allowed == [] and refused.errors[0].startswith("Quota exceeded: c.bin")


def test_a_folder_event_stands_for_its_files_and_a_vanished_folder_for_its_records(
    planner: Planner,
) -> None:
    folder = Path(planner.workdir, "runs")
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    (folder / "b.txt").write_text("b")
    changed, deleted, unchanged, _ = planner.plan(["runs"])
    assert (
        sorted(f.path for f in changed) == ["runs/a.txt", "runs/b.txt"]
        and deleted == []
        and unchanged == 0
    )
    planner.index.put_many([Record(f.path, f.size, f.mtime_ns, None, 0.0) for f in changed])
    for name in ("a.txt", "b.txt"):
        os.unlink(folder / name)
    folder.rmdir()
    (Path(planner.workdir) / "keep.txt").write_text(
        "k"
    )  # not empty: no guard against an emptied folder
    changed, deleted, _, total = planner.plan(["runs"])
    assert changed == [] and sorted(deleted) == ["runs/a.txt", "runs/b.txt"] and total == 2


def test_one_listing_answers_for_many_unrecorded_files() -> None:
    many = [LocalFile(f"f{i}", 1, 1) for i in range(40)]
    assert needs_listing(many, {})
    assert not needs_listing(many[:5], {})
    assert not needs_listing(many, {f.path: Record(f.path, 1, 1, None, 0.0) for f in many})


def test_the_ignore_rules_use_the_matcher_that_takes_names_that_are_not_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pathspec picks the fastest back end installed by default; its RE2 one (google-re2, which
    # another package may bring) raises on a non-UTF-8 name's surrogate escapes, and every pass
    # of such a work directory failed with it installed (seen running tests/sync/test_names.py).
    import pathspec

    asked: list[object] = []
    original = pathspec.GitIgnoreSpec.from_lines.__func__  # type: ignore[attr-defined]

    def from_lines(cls: type, lines: list[str], *args: object, **kwargs: object) -> object:
        asked.append(kwargs.get("backend"))
        return original(cls, lines, *args, **kwargs)

    monkeypatch.setattr(pathspec.GitIgnoreSpec, "from_lines", classmethod(from_lines))
    (tmp_path / ".gpuwsignore").write_text("data/\n*.tmp\n")
    rules = IgnoreRules(str(tmp_path))
    assert asked and set(asked) == {"simple"}
    name = os.fsdecode(b"caf\xe9")
    assert rules.ignored(f"data/{name}.csv") and rules.ignored(f"{name}.tmp")
    assert not rules.ignored(f"{name}.csv")
