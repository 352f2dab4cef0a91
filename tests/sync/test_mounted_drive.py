"""A mounted drive as the store (Google Drive on Colab): a real FUSE folder (tests/fusefs.py) that
stalls, stops answering ("Transport endpoint is not connected") or fills up mid-pass. Each shows
in the sync status within seconds with a reason that names the drive and what to do; the files
not written stay pending with that reason; nothing local is lost; healed, the runtime catches up
by itself."""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from jupyter_gpu_ws.sync.service import SyncService
from tests.fusefs import (
    MountedDrive,  # the `mounted_drive` fixture comes from tests/sync/conftest.py
)
from tests.sync.conftest import tree_files, write
from tests.waiting import until

# A drive's fault is a store error: a thread of the engine that dies of it (the flusher did, on a
# close that failed with ENOTCONN) would never flush again, so that fails these tests.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning"),
]

FILES = 12


def files_of(workdir: Path) -> dict[str, bytes]:
    return tree_files(workdir)


@pytest.fixture
def on_drive(
    tmp_path: Path, workdir: Path, mounted_drive: MountedDrive
) -> Iterator[tuple[SyncEngine, SyncService]]:
    """An engine whose store is a folder on the drive, with the service that keeps it in sync."""
    for i in range(FILES):
        write(workdir, f"notes/{i}.txt", f"note {i}\n" * 20)
    engine = SyncEngine(
        SyncSettings(
            workdir=str(workdir),
            store_url=os.path.join(mounted_drive.mountpoint, "gpuws"),
            workspace="ws",
            state_dir=str(tmp_path / "state"),
            retry_backoff=0.05,
            create_store=True,
        )
    )
    engine.open()
    service = SyncService(engine, debounce=0.05, rescan_interval=3600)
    try:
        yield engine, service
    finally:
        mounted_drive.heal()
        service.stop()
        engine.close()


def stored(drive: MountedDrive) -> dict[str, bytes]:
    root = Path(drive.backing) / "gpuws" / "ws" / "files"
    return tree_files(root) if root.exists() else {}


def settled(engine: SyncEngine) -> bool:
    return engine.pending() == (0, 0) and engine.status()["state"] == "idle"


# -- the test drive itself --------------------------------------------------------------------


def test_the_test_drive_passes_files_through_counts_operations_and_fails_as_told(
    mounted_drive: MountedDrive,
) -> None:
    mnt = Path(mounted_drive.mountpoint)
    (mnt / "a.txt").write_text("hello")
    assert (Path(mounted_drive.backing) / "a.txt").read_text() == "hello"
    mounted_drive.reset_counts()
    assert (mnt / "a.txt").read_text() == "hello"
    counts = mounted_drive.counts()
    assert counts["open"] == 1 and counts["read"] >= 1 and counts["getattr"] >= 1
    mounted_drive.fault("disconnect")
    with pytest.raises(OSError) as err:
        (mnt / "a.txt").stat()
    assert err.value.errno == errno.ENOTCONN
    mounted_drive.fault("full")
    with pytest.raises(OSError) as err:
        (mnt / "b.txt").write_text("more")
    assert err.value.errno == errno.ENOSPC
    mounted_drive.heal()
    assert sorted(os.listdir(mnt)) == ["a.txt"]


# -- faults mid-pass ------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["disconnect", "full"])
def test_a_drive_that_fails_shows_in_the_status_keeps_files_pending_and_heals_by_itself(
    fault: str, workdir: Path, mounted_drive: MountedDrive, on_drive: tuple[SyncEngine, SyncService]
) -> None:
    engine, service = on_drive
    service.start()
    until(
        lambda: stored(mounted_drive) == files_of(workdir) and settled(engine),
        30,
        "the first files on the drive",
    )
    mine = files_of(workdir)
    mounted_drive.fault(fault)
    for i in range(5):
        write(workdir, f"new/{i}.txt", f"written while the drive fails {i}\n")
    status = until(
        lambda: (s := engine.status())["state"] == "error" and s, 10, "the error in the status"
    )
    reason = status["last_error"] or ""
    assert mounted_drive.mountpoint in reason and "drive" in reason
    assert ("free space" if fault == "full" else "mounted") in reason  # what to do

    # Each file not written is pending and says why: the drive's error, or waiting for the drive.
    def each_says_why() -> bool:
        listing = engine.pending_list()
        return listing["total"] >= 5 and all(
            mounted_drive.mountpoint in (item["error"] or item["note"] or "")
            for item in listing["files"]
        )

    try:
        until(each_says_why, 10, "every pending file with the drive's reason")
    except AssertionError:
        raise AssertionError(engine.pending_list()["files"]) from None
    assert files_of(workdir) == {
        **mine,
        **{f"new/{i}.txt": f"written while the drive fails {i}\n".encode() for i in range(5)},
    }
    mounted_drive.heal()
    until(lambda: settled(engine), 30, "every pending file on the drive, with no click")
    assert stored(mounted_drive) == files_of(workdir)


def test_a_first_pass_that_the_drive_fails_is_tried_again_in_full_once_it_answers(
    workdir: Path, mounted_drive: MountedDrive, on_drive: tuple[SyncEngine, SyncService]
) -> None:
    engine, service = on_drive
    mounted_drive.fault("disconnect")
    service.start()  # its first pass, over everything, fails
    until(lambda: engine.status()["state"] == "error", 10, "the error in the status")
    mounted_drive.heal()
    until(
        lambda: stored(mounted_drive) == files_of(workdir),
        30,
        "every file on the drive, with no click",
    )


def test_a_drive_that_stalls_mid_pass_shows_in_the_status_while_the_pass_waits_and_heals(
    workdir: Path, mounted_drive: MountedDrive, on_drive: tuple[SyncEngine, SyncService]
) -> None:
    engine, service = on_drive
    engine.sync()
    mounted_drive.fault("stall")
    for i in range(5):
        write(workdir, f"new/{i}.txt", f"written while the drive stalls {i}\n")
    passing = threading.Thread(target=lambda: engine.sync(), daemon=True)
    passing.start()
    status = until(
        lambda: (s := engine.status())["state"] == "error" and s, 10, "the stall in the status"
    )
    assert passing.is_alive()  # the status answered while the pass waits on the drive
    reason = status["last_error"] or ""
    assert mounted_drive.mountpoint in reason and "not answered" in reason and "mounted" in reason
    assert files_of(workdir)["new/0.txt"] == b"written while the drive stalls 0\n"
    mounted_drive.heal()
    passing.join(30)
    assert not passing.is_alive()
    service.start()
    until(lambda: settled(engine), 30, "every pending file on the drive, with no click")
    assert stored(mounted_drive) == files_of(workdir)


# -- what each file costs on the drive (operations counted by the drive, not time) ------------------

MANY = 200
METADATA = ("getattr", "readdir", "opendir", "releasedir", "access", "statfs")


def write_tree(root: Path, count: int) -> int:
    """`count` small files in 20 folders; returns the number of folders."""
    for i in range(count):
        write(root, f"data/d{i % 20:02d}/f{i:04d}.txt", f"file {i}\n" * (1 + i % 50))
    return 20


def per_file(counts: dict[str, int], kinds: tuple[str, ...], files: int) -> float:
    return sum(counts.get(kind, 0) for kind in kinds) / files


@pytest.fixture
def drive_store(mounted_drive: MountedDrive) -> str:
    store = os.path.join(mounted_drive.mountpoint, "gpuws")
    os.mkdir(store)  # a new store on the drive, made on purpose
    return store


def engine_for(tmp_path: Path, workdir: Path, store: str, state: str) -> SyncEngine:
    engine = SyncEngine(
        SyncSettings(
            workdir=str(workdir),
            store_url=store,
            workspace="ws",
            state_dir=str(tmp_path / state),
            retry_backoff=0.05,
        )
    )
    engine.open()
    return engine


def synced_then_restored(
    tmp_path: Path, workdir: Path, drive: MountedDrive, drive_store: str
) -> dict[str, int]:
    """`workdir` synced to the drive, then restored into a fresh folder: the operations that
    reached the drive during the restore (checked to have brought every file)."""
    engine = engine_for(tmp_path, workdir, drive_store, "state")
    try:
        engine.sync()
    finally:
        engine.close()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = engine_for(tmp_path, fresh, drive_store, "state-fresh")
    try:
        drive.reset_counts()
        report = engine.restore()
        counts = drive.counts()
    finally:
        engine.close()
    assert not report.errors and files_of(fresh) == files_of(workdir)
    return counts


def test_a_first_pass_to_a_mounted_drive_costs_a_few_operations_per_file_and_no_listing_per_file(
    tmp_path: Path, workdir: Path, mounted_drive: MountedDrive, drive_store: str
) -> None:
    folders = write_tree(workdir, MANY)
    engine = engine_for(tmp_path, workdir, drive_store, "state")
    try:
        mounted_drive.reset_counts()
        assert len(engine.sync().uploaded) == MANY
        counts = mounted_drive.counts()
    finally:
        engine.close()
    assert stored(mounted_drive) == files_of(workdir)
    assert (
        counts.get("create", 0) <= MANY + 10 and counts.get("write", 0) <= MANY + 10
    )  # each file written once
    assert counts.get("readdir", 0) <= folders + 5  # never a listing per file
    assert per_file(counts, METADATA, MANY) <= 6, counts


def test_a_pass_with_nothing_changed_asks_the_mounted_drive_nothing_per_file(
    tmp_path: Path, workdir: Path, mounted_drive: MountedDrive, drive_store: str
) -> None:
    write_tree(workdir, MANY)
    engine = engine_for(tmp_path, workdir, drive_store, "state")
    try:
        engine.sync()
        mounted_drive.reset_counts()
        report = engine.sync()  # a full rescan: nothing changed here
        counts = mounted_drive.counts()
    finally:
        engine.close()
    assert report.uploaded == [] and report.unchanged == MANY
    assert sum(counts.values()) <= 20, counts  # no stat of every file in the store, no listing


def test_a_restore_from_a_mounted_drive_opens_each_file_once_and_lists_each_folder_once(
    tmp_path: Path, workdir: Path, mounted_drive: MountedDrive, drive_store: str
) -> None:
    folders = write_tree(workdir, MANY)
    counts = synced_then_restored(tmp_path, workdir, mounted_drive, drive_store)
    assert counts.get("open", 0) <= MANY + 10  # each file opened once (and a few records)
    assert (
        counts.get("readdir", 0) <= folders + 10
    )  # each folder listed once, never a listing per file
    assert per_file(counts, METADATA, MANY) <= 4, counts


def test_a_restore_from_a_mounted_drive_reads_each_file_in_one_request_with_many_in_flight(
    tmp_path: Path, workdir: Path, mounted_drive: MountedDrive, drive_store: str
) -> None:
    # With many reads in flight Linux's readahead for a FUSE mount gives up and fetches a file a
    # page (4 KiB) at a time: 2.4-4.2 requests per file of 1-64 KiB here, each a round trip on a
    # real drive. The restore asks for each file as one request (local.py, _one_request).
    rng = random.Random(5)
    for i in range(MANY):
        (workdir / f"data/d{i % 10}").mkdir(parents=True, exist_ok=True)
        (workdir / f"data/d{i % 10}/f{i:04d}.bin").write_bytes(
            rng.randbytes(rng.randrange(8, 64) << 10)
        )
    counts = synced_then_restored(tmp_path, workdir, mounted_drive, drive_store)
    assert counts.get("read", 0) <= MANY + 10, counts  # one read a file (and a few records)
