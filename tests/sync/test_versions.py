"""Nothing is overwritten without a version, and versions stay bounded: pruned across the whole
store, none for checkpoints that the run's retention replaced, and counted in the quota."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from jupyter_gpu_ws.store import version_stamp
from jupyter_gpu_ws.sync import SyncEngine
from jupyter_gpu_ws.sync.service import SyncService
from tests.sync.conftest import write
from tests.waiting import until

Make = Callable[..., SyncEngine]


def versions_under(store_dir: Path) -> dict[str, list[bytes]]:
    base = store_dir / "ws" / ".gpuws" / "versions"
    out: dict[str, list[bytes]] = {}
    for path in sorted(base.rglob("*")) if base.exists() else []:
        if path.is_file():
            out.setdefault(path.parent.relative_to(base).as_posix(), []).append(path.read_bytes())
    return out


def test_a_store_copy_differing_from_an_unrecorded_local_file_is_kept_as_a_version(
    workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make
) -> None:
    """A new machine, a lost record, `jupyter gpuws sync` on another folder: the store's copy
    (perhaps the newer work) is never overwritten without a version."""
    write(workdir, "notes.md", "the store's newer text")
    first = make_engine(workdir)
    assert first.sync().uploaded == ["notes.md"]
    first.close()  # the first machine is gone
    fresh = tmp_path / "fresh"
    write(fresh, "notes.md", "an older local copy")
    second = make_engine(fresh, state="state2")  # no record of notes.md here
    assert second.sync().uploaded == ["notes.md"]
    assert (store_dir / "ws" / "files" / "notes.md").read_text() == "an older local copy"
    assert versions_under(store_dir) == {"notes.md": [b"the store's newer text"]}


def test_an_unrecorded_file_the_store_already_holds_is_not_sent_again(
    workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "same.bin", b"same bytes" * 1000)
    first = make_engine(workdir)
    first.sync()
    first.close()
    stored = store_dir / "ws" / "files" / "same.bin"
    before = stored.stat().st_mtime_ns
    fresh = tmp_path / "fresh"
    write(fresh, "same.bin", b"same bytes" * 1000)
    report = make_engine(fresh, state="state2").sync()
    assert report.ok and report.bytes_uploaded == 0  # compared, found equal, recorded
    assert stored.stat().st_mtime_ns == before and versions_under(store_dir) == {}


def test_the_whole_store_is_pruned_by_count_and_age_and_counted(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    engine = make_engine(workdir, keep_versions=2, version_max_age=3600)
    base = store_dir / "ws" / ".gpuws" / "versions"
    # Versions of paths no pass will touch again: a deleted folder's files, old and many.
    for i in range(5):
        write(base / "gone" / "a.txt", version_stamp(time.time() - 60 * (i + 1)), b"x" * 10)
    write(base / "gone" / "b.txt", version_stamp(time.time() - 7200), b"y" * 100)  # too old
    removed = engine.prune_versions()
    assert removed == 4
    left = versions_under(store_dir)
    assert list(left) == ["gone/a.txt"] and len(left["gone/a.txt"]) == 2
    status = engine.status()
    assert status["versions_bytes"] == 20 and status["versions_count"] == 2


def test_the_quota_counts_the_versions(workdir: Path, store_dir: Path, make_engine: Make) -> None:
    engine = make_engine(workdir, quota_bytes=10_000)
    write(workdir, "data.bin", os.urandom(4_000))
    assert engine.sync().ok
    write(workdir, "data.bin", os.urandom(4_000))
    assert engine.sync().ok  # 4,000 in the mirror, 4,000 in versions
    engine.prune_versions()  # counts them
    write(workdir, "more.bin", os.urandom(3_000))
    report = engine.sync()
    assert (
        not report.ok
        and "Quota exceeded" in report.errors[0]
        and "versions included" in report.errors[0]
    )
    assert engine.pending()[0] == 1


def test_a_tracked_run_with_retention_leaves_bounded_versions(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    """300 steps of a real tracked model, a checkpoint every step, the last 3 kept, the sync
    following as a server's does: versions stay within keep_versions per path, and no version
    is kept of a checkpoint that the retention replaced."""
    import torch

    from jupyter_gpu_ws.checkpoints.tracker import Tracker

    engine = make_engine(workdir, keep_versions=3)
    service = SyncService(engine, debounce=0.01, rescan_interval=3600)
    service.start()
    try:
        model = torch.nn.Linear(64, 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        tracker = Tracker()
        tracker.track(
            "train",
            model=model,
            optimizer=opt,
            every_steps=1,
            keep_last=3,
            root=str(workdir / ".gpuws" / "checkpoints"),
        )
        for step in range(1, 301):
            opt.zero_grad()
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
            tracker.step(step)
            tracker.wait()
            if step % 50 == 0:
                write(workdir, "log.txt", f"step {step}")  # a file overwritten now and then
        until(lambda: engine.pending() == (0, 0) and engine.state == "idle", 60, "nothing pending")
        engine.prune_versions()
    finally:
        service.stop()
    versions = versions_under(store_dir)
    assert not [
        p for p in versions if p.startswith(".gpuws/checkpoints/")
    ]  # none of retired checkpoints
    assert all(len(kept) <= 3 for kept in versions.values())
    mirrored = sorted(
        p.name for p in (store_dir / "ws/files/.gpuws/checkpoints/train").iterdir()
    )  # no empty folders
    assert len(mirrored) == 3 and mirrored[-1].startswith("ckpt-000000300-")
    status = engine.status()
    assert status["versions_bytes"] == sum(len(b) for kept in versions.values() for b in kept)
    assert status["versions_bytes"] < 1000  # a few log.txt versions, not 300 checkpoints


def test_a_user_deleting_a_whole_run_keeps_its_checkpoints_as_versions(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    folder = workdir / ".gpuws/checkpoints/run/ckpt-000000001-20261201T000000Z"
    write(folder, "tensors.bin", b"weights")
    write(folder, "manifest.json", b"{}")
    write(workdir, "train.py", "print('training')")
    engine = make_engine(workdir)
    assert engine.sync().ok
    import shutil

    shutil.rmtree(workdir / ".gpuws/checkpoints/run")  # no newer checkpoint: this is not retention
    assert engine.sync().ok
    assert versions_under(store_dir)[
        ".gpuws/checkpoints/run/ckpt-000000001-20261201T000000Z/tensors.bin"
    ] == [b"weights"]


def test_many_retired_checkpoints_in_one_pass_do_not_trip_the_deletion_guard(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    import shutil

    run = workdir / ".gpuws/checkpoints/run"
    for step in range(1, 6):
        for name in ("tensors.bin", "state.pt", "rng.pt", "manifest.json"):
            write(run / f"ckpt-{step:09d}-20261201T000000Z", name, f"{step}{name}")
    engine = make_engine(workdir)
    assert engine.sync().ok
    for step in range(1, 5):  # 16 of the 20 files go: far past the guard's share
        shutil.rmtree(run / f"ckpt-{step:09d}-20261201T000000Z")
    report = engine.sync()
    assert report.ok and len(report.deleted) == 16
    assert [p.name for p in (store_dir / "ws/files/.gpuws/checkpoints/run").iterdir()] == [
        "ckpt-000000005-20261201T000000Z"
    ]
