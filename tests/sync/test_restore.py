"""Restore (sync/restore.py): the order resume() needs, many files at once, large files in
ranged parts, every file whole, and fetch_checkpoint for a kernel's resume().

Local-folder stores and a real S3 server (SeaweedFS on loopback); backends are the real ones,
subclassed only to watch or hold back their reads."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws import diskio
from jupyter_gpu_ws.store.backend import PART_SUFFIX
from jupyter_gpu_ws.store.objectstore import ObjectStoreBackend
from jupyter_gpu_ws.sync import (
    CancelledError,
    LocalBackend,
    Progress,
    StoreUnavailableError,
    SyncEngine,
    SyncError,
    SyncSettings,
)
from jupyter_gpu_ws.sync import restore as restore_module
from jupyter_gpu_ws.sync.landing import unnamed_files_work
from jupyter_gpu_ws.sync.parts_in_flight import PartsInFlight
from tests.sync.conftest import S3_BUCKET, tree_files, write
from tests.sync.s3server import S3Server, closed_port
from tests.waiting import until

Make = Callable[..., SyncEngine]
MiB = 2**20
# Parts of 1 MiB from 2 MiB on in these tests: many parts from small files.
PART_SIZE = MiB
PARTS_FROM = 2 * PART_SIZE
REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("restore_child.py")

RUN = ".gpuws/checkpoints/train.ipynb"
OLD = f"{RUN}/ckpt-000000100-20261130T100000Z"
NEW = f"{RUN}/ckpt-000000200-20261130T110000Z"
UNFINISHED = f"{RUN}/ckpt-000000300-20261130T120000Z"  # no manifest: not a checkpoint yet
CHECKPOINT_FILES = ("tensors.bin", "state.pt", "rng.pt")
CODE = ["train.ipynb", "src/model.py", "README.md", "configs/run.yaml"]
DATA = ["data/big.bin", "data/medium.bin"]


class WatchedBackend(LocalBackend):
    """The local backend, reporting each read as it starts and, where asked, holding it until
    released; counts how many reads run at once."""

    def __init__(
        self,
        root: str,
        hold: Callable[[str], bool] = lambda key: False,
        pause: float = 0.0,
        on_read: Callable[[str], None] | None = None,
        round_trips: bool = False,
    ) -> None:
        super().__init__(root)
        self.hold = hold
        self.released = threading.Event()
        self.held_over = threading.Event()  # a held read went on (released, or given up)
        self.pause = pause
        self.on_read = on_read
        self._round_trips = round_trips  # as if it were (or were not) on a network file system
        self.lock = threading.Lock()
        self.reads: list[str] = []
        self.active = 0
        self.most_active = 0
        self.failures: list[BaseException] = []

    def read_into(
        self,
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Callable[[int], None] | None = None,
        etag: str | None = None,
    ) -> int:
        with self.lock:
            self.reads.append(key)
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            if self.on_read is not None:
                try:
                    self.on_read(key)
                except BaseException as err:  # seen by the test, not swallowed by the restore
                    self.failures.append(err)
            if self.hold(key):
                try:
                    assert self.released.wait(30), "never released"
                finally:
                    self.held_over.set()
            if self.pause:
                time.sleep(self.pause)
            return super().read_into(key, fd, offset, length, progress, etag)
        finally:
            with self.lock:
                self.active -= 1


def checkpoint(workdir: Path, folder: str, tensors: bytes, manifest: bool = True) -> None:
    write(workdir, f"{folder}/tensors.bin", tensors)
    write(workdir, f"{folder}/state.pt", b"state of " + folder.encode())
    write(workdir, f"{folder}/rng.pt", b"rng of " + folder.encode())
    if manifest:
        write(workdir, f"{folder}/manifest.json", json.dumps({"format": 1, "folder": folder}))


def workspace(workdir: Path, tensors: int = 256 * 1024) -> None:
    """A project as a fresh machine finds it in the store: checkpoints, code, data."""
    checkpoint(workdir, OLD, os.urandom(tensors))
    checkpoint(workdir, NEW, os.urandom(tensors))
    checkpoint(workdir, UNFINISHED, os.urandom(tensors), manifest=False)
    for rel in CODE:
        write(workdir, rel, f"# {rel}\n")
    write(workdir, "data/big.bin", os.urandom(3 * MiB))
    write(workdir, "data/medium.bin", os.urandom(MiB))


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restore_module, "PART_SIZE", PART_SIZE)
    monkeypatch.setattr(restore_module, "PARTS_FROM", PARTS_FROM)


def key_of(rel: str) -> str:
    return f"ws/files/{rel}"


def rel_of(key: str) -> str:
    return key.split("/files/", 1)[1]


@pytest.fixture
def synced(workdir: Path, make_engine: Make) -> Path:
    workspace(workdir)
    assert make_engine(workdir).sync().ok
    return workdir


def fresh_engine(
    tmp_path: Path, make_engine: Make, backend: LocalBackend, **options: Any
) -> tuple[SyncEngine, Path]:
    fresh = tmp_path / "fresh"
    fresh.mkdir(exist_ok=True)
    return make_engine(fresh, state="state-fresh", backend=backend, **options), fresh


# -- the order ------------------------------------------------------------------------------------


def test_the_newest_checkpoint_comes_first_its_manifest_after_its_data_then_code_then_large_data(
    synced: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    fresh = tmp_path / "fresh"

    def here(rel: str) -> bool:
        return (fresh / rel).is_file()

    def check(key: str) -> None:
        rel = rel_of(key)
        if rel == f"{NEW}/manifest.json":
            assert all(here(f"{NEW}/{name}") for name in CHECKPOINT_FILES), (
                "the manifest before its data"
            )
        if rel in CODE:
            assert here(f"{NEW}/manifest.json"), f"{rel} before the newest checkpoint was complete"
        if rel in DATA or rel.startswith(OLD) or rel.startswith(UNFINISHED):
            assert all(here(code) for code in CODE), f"{rel} before the notebooks and code"
        if rel == f"{OLD}/manifest.json":
            assert all(here(f"{OLD}/{name}") for name in CHECKPOINT_FILES), (
                "an old manifest before its data"
            )

    backend = WatchedBackend(str(store_dir), on_read=check)
    engine, fresh = fresh_engine(tmp_path, make_engine, backend, concurrency=4)
    report = engine.restore()
    assert not report.errors and not backend.failures, backend.failures
    assert tree_files(fresh) == tree_files(synced)
    assert rel_of(backend.reads[0]).startswith(NEW)  # the newest checkpoint's data is read first
    assert engine.restoring.describe()["runs"] == {
        RUN: {"checkpoint": NEW, "local": True, "error": None}
    }


def test_one_at_a_time_the_order_is_checkpoint_data_largest_first_its_manifest_code_then_the_rest_smallest_first(
    synced: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    backend = WatchedBackend(str(store_dir))
    engine, fresh = fresh_engine(tmp_path, make_engine, backend, concurrency=1)
    assert not engine.restore().errors
    order = list(dict.fromkeys(rel_of(key) for key in backend.reads))  # a file in parts once
    sizes = {rel: len(data) for rel, data in tree_files(synced).items()}
    newest = [f"{NEW}/{name}" for name in CHECKPOINT_FILES]
    assert order[:3] == sorted(newest, key=lambda rel: (-sizes[rel], rel))
    assert order[3] == f"{NEW}/manifest.json"
    assert order[4:8] == sorted(CODE, key=lambda rel: (sizes[rel], rel))
    rest = order[8:]
    assert [sizes[rel] for rel in rest if not rel.endswith("manifest.json")] == sorted(
        sizes[rel] for rel in rest if not rel.endswith("manifest.json")
    )
    assert rest[-1] == "data/big.bin"
    assert rest.index(f"{OLD}/manifest.json") > max(
        rest.index(f"{OLD}/{name}") for name in CHECKPOINT_FILES
    )
    assert tree_files(fresh) == tree_files(synced)


def test_a_checkpoint_whose_data_cannot_be_restored_stays_without_its_manifest(
    synced: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    (
        store_dir / "ws" / "files" / NEW / "state.pt"
    ).unlink()  # gone from the store after the listing
    listed: dict[str, Any] = {}

    class Forgetful(WatchedBackend):
        def list(self, prefix: str) -> Iterator[Any]:  # the listing from before the removal
            items = listed.setdefault(prefix, list(super().list(prefix)))
            if prefix.endswith("/files"):
                from jupyter_gpu_ws.store.backend import RemoteFile

                yield RemoteFile(key_of(f"{NEW}/state.pt"), 12, None)
            yield from items

    engine, fresh = fresh_engine(tmp_path, make_engine, Forgetful(str(store_dir)))
    report = engine.restore()
    assert (fresh / NEW / "tensors.bin").is_file()
    assert not (fresh / NEW / "manifest.json").exists()  # never looks complete without its data
    assert any("manifest.json: not restored" in error for error in report.errors)
    state = engine.restoring.describe()["runs"][RUN]
    assert not state["local"] and "state.pt" in state["error"]
    assert (fresh / OLD / "manifest.json").is_file() and (fresh / "train.ipynb").is_file()


# -- speed: many at once, large files in parts ----------------------------------------------------


def test_downloads_run_concurrency_at_once_from_a_local_folder(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    for i in range(40):
        write(workdir, f"files/f{i:02d}.txt", f"file {i}")
    assert make_engine(workdir).sync().ok
    backend = WatchedBackend(str(store_dir), pause=0.05)
    engine, fresh = fresh_engine(tmp_path, make_engine, backend, concurrency=4)
    report = engine.restore()
    assert len(report.restored) == 40
    assert backend.most_active == 4
    assert tree_files(fresh) == tree_files(workdir)


def test_whole_files_from_a_fast_local_disk_are_copied_one_after_the_other_by_the_restores_thread(
    workdir: Path,
    store_dir: Path,
    tmp_path: Path,
    make_engine: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # From the page cache a small file costs a few system calls: threads handing the GIL to
    # each other at every one cost more than they bring (diskio.waits_on_disk). A disk whose
    # files wait (the test above) gets `concurrency` at once instead.
    monkeypatch.setattr(diskio, "WAIT_PER_FILE", 10.0)  # a loaded machine is not a slow disk
    for i in range(200):
        write(workdir, f"files/f{i:03d}.txt", f"file {i}" * (i + 1))
    assert make_engine(workdir).sync().ok
    threads: set[int] = set()
    backend = WatchedBackend(str(store_dir), on_read=lambda key: threads.add(threading.get_ident()))
    engine, fresh = fresh_engine(tmp_path, make_engine, backend, concurrency=4)
    report = engine.restore()
    assert len(report.restored) == 200 and not report.errors
    assert backend.most_active == 1
    assert threads == {threading.get_ident()}
    assert tree_files(fresh) == tree_files(workdir)


def test_a_store_with_round_trips_keeps_many_small_requests_in_flight(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    for i in range(80):
        write(workdir, f"files/f{i:02d}.txt", f"file {i}")
    assert make_engine(workdir).sync().ok
    backend = WatchedBackend(str(store_dir), pause=0.1, round_trips=True)
    engine, fresh = fresh_engine(tmp_path, make_engine, backend, concurrency=2)
    report = engine.restore()
    assert len(report.restored) == 80
    assert (
        backend.most_active > 2 * 4
    )  # well beyond `concurrency`: latency, not bandwidth, sets the pace
    assert tree_files(fresh) == tree_files(workdir)


def test_a_local_store_on_a_network_file_system_is_read_with_many_requests_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.store import local

    store = tmp_path / "mnt" / "share" / "store"
    mountinfo = tmp_path / "mountinfo"  # Linux's format: the mount point is the fifth field
    mountinfo.write_text(
        "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        f"90 22 0:50 / {tmp_path / 'mnt' / 'share'} rw,relatime shared:40 - nfs4 server:/export rw\n"
    )
    monkeypatch.setattr(local, "MOUNTINFO", str(mountinfo))
    assert LocalBackend(str(store)).round_trips
    assert not LocalBackend(
        str(tmp_path / "mnt" / "sharewhat")
    ).round_trips  # a sibling, on the local disk
    assert not LocalBackend(str(tmp_path / "elsewhere")).round_trips


def test_a_large_file_comes_in_parallel_ranged_parts_byte_exact(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    data = random.Random(5).randbytes(PARTS_FROM + 3 * PART_SIZE + 12345)
    write(workdir, "models/weights.bin", data)
    assert make_engine(workdir).sync().ok
    backend = WatchedBackend(str(store_dir), pause=0.05)
    engine, fresh = fresh_engine(tmp_path, make_engine, backend, concurrency=4)
    progress = Progress()
    report = engine.restore(progress)
    assert report.restored == ["models/weights.bin"]
    parts = -(-len(data) // PART_SIZE)
    assert backend.reads.count(key_of("models/weights.bin")) == parts
    assert backend.most_active == 4
    assert (fresh / "models" / "weights.bin").read_bytes() == data
    snapshot = progress.snapshot()
    assert (snapshot["files_done"], snapshot["bytes_done"]) == (1, len(data))


class Overlaps:
    """Wraps a write function (os.copy_file_range, os.pwrite) whose file descriptor is its
    argument number `fd_at`: each call lingers a moment; counts how many run at once into the
    same file."""

    def __init__(self, real: Callable[..., int], fd_at: int, linger: float) -> None:
        self.real, self.fd_at, self.linger = real, fd_at, linger
        self.lock = threading.Lock()
        self.active: dict[int, int] = {}
        self.most_same = 0  # the most calls at once into one file
        self.calls = 0

    def __call__(self, *args: Any) -> int:
        fd = args[self.fd_at]
        with self.lock:
            self.calls += 1
            self.active[fd] = self.active.get(fd, 0) + 1
            self.most_same = max(self.most_same, self.active[fd])
        try:
            time.sleep(self.linger)
            return self.real(*args)
        finally:
            with self.lock:
                self.active[fd] -= 1


def test_the_parts_of_a_large_file_come_at_once_and_are_written_in_turn(
    workdir: Path,
    store_dir: Path,
    tmp_path: Path,
    make_engine: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ext4 lets one write into a file at a time and has the others spin on a CPU meanwhile: the
    # parts' threads take turns in user space, where a waiting thread sleeps (diskio.take_turns).
    data = {
        f"models/{name}.bin": random.Random(name).randbytes(PARTS_FROM + 2 * PART_SIZE + 99)
        for name in "ab"
    }
    for rel, body in data.items():
        write(workdir, rel, body)
    assert make_engine(workdir).sync().ok
    backend = WatchedBackend(str(store_dir), pause=0.05)
    engine, fresh = fresh_engine(tmp_path, make_engine, backend, concurrency=4)
    copies = Overlaps(os.copy_file_range, 1, 0.01)
    monkeypatch.setattr(os, "copy_file_range", copies)
    report = engine.restore()
    assert sorted(report.restored) == sorted(data)
    assert backend.most_active == 4  # the parts are fetched at once
    assert copies.calls >= 2 * (-(-len(data["models/a.bin"]) // PART_SIZE))
    assert copies.most_same == 1  # and written one at a time
    for rel, body in data.items():
        assert (fresh / rel).read_bytes() == body
    assert not diskio._turns  # none left behind for a later file with the same descriptor


def count_fetches(backend: ObjectStoreBackend) -> dict[str, int]:
    """Counts, as the restore goes, the objects fetched whole (one request each, many at once
    or one by one) and the ranged parts."""
    fetched = {"ranges": 0, "whole": 0}
    read_into, read_many = backend.read_into, backend.read_many

    def one(key: str, fd: int, offset: int = 0, length: int | None = None, *args: Any) -> int:
        fetched["whole" if length is None else "ranges"] += 1
        return read_into(key, fd, offset, length, *args)

    def many(items: list[Any], landed: Callable[[Any, bytes], None], *args: Any) -> Any:
        def counted(token: Any, body: bytes) -> None:
            fetched["whole"] += 1
            landed(token, body)

        return read_many(items, counted, *args)

    backend.read_into = one  # type: ignore[method-assign]
    backend.read_many = many  # type: ignore[method-assign]
    return fetched


def test_through_s3_small_files_and_a_large_one_in_ranged_parts_arrive_byte_exact(
    workdir: Path, tmp_path: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    big = random.Random(6).randbytes(PARTS_FROM + PART_SIZE // 2 + 7)
    write(workdir, "models/weights.bin", big)
    names = [
        "plain.txt",
        "with space/and+plus.txt",
        "q?mark#hash.txt",
        "ünïcødé/日本語.txt",
        "pct%41.txt",
    ]
    for i, name in enumerate(names):
        write(workdir, name, f"small file {i}\n" * (i + 1))
    assert make_engine(workdir, store_url=s3_url).sync().ok
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, store_url=s3_url, state="state2")
    backend = engine.backend
    assert isinstance(backend, ObjectStoreBackend)
    fetched = count_fetches(backend)
    report = engine.restore()
    assert not report.errors and not report.conflicts
    assert tree_files(fresh) == tree_files(workdir)
    parts = -(-len(big) // PART_SIZE)
    assert fetched == {
        "ranges": parts,
        "whole": len(names),
    }  # the large file in ranged parts, the rest whole


def test_through_s3_the_parts_of_a_large_file_are_written_in_turn(
    workdir: Path,
    tmp_path: Path,
    s3_url: str,
    s3_env: S3Server,
    make_engine: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = random.Random(7).randbytes(PARTS_FROM + 2 * PART_SIZE + 3)
    write(workdir, "models/weights.bin", big)
    assert make_engine(workdir, store_url=s3_url).sync().ok
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, store_url=s3_url, state="state2", concurrency=4)
    fetches = Overlaps(engine.backend.read_into, 0, 0.0)  # counted by key: the parts of one file
    monkeypatch.setattr(engine.backend, "read_into", fetches)
    writes = Overlaps(os.pwrite, 0, 0.02)
    monkeypatch.setattr(os, "pwrite", writes)
    report = engine.restore()
    assert report.restored == ["models/weights.bin"] and not report.errors
    assert (fresh / "models" / "weights.bin").read_bytes() == big
    assert fetches.most_same > 1  # the parts are fetched at once
    assert writes.calls >= -(-len(big) // PART_SIZE)  # each part written as it arrives
    assert writes.most_same == 1  # and written one at a time
    assert not diskio._turns


def test_through_s3_parts_in_flight_grow_past_the_concurrency_and_the_file_arrives_byte_exact(
    workdir: Path,
    tmp_path: Path,
    s3_url: str,
    s3_env: S3Server,
    make_engine: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Parts of 1 MiB, so that a file of 24 parts stays small; each fetch lingers, so that parts
    # overlap; the controller is the real one, told that every level is growth (gain -1), so it
    # climbs whatever this machine's speed: the gate must let the extra parts in, at their offsets.
    monkeypatch.setattr(restore_module, "PART_SIZE", 1 << 20)
    monkeypatch.setattr(restore_module, "PARTS_FROM", 2 << 20)
    made: list[PartsInFlight] = []

    def always_growing(start: int, most: int) -> PartsInFlight:
        made.append(PartsInFlight(start, most, gain=-1.0, window=0.0, patience=1))
        return made[-1]

    monkeypatch.setattr(restore_module, "PartsInFlight", always_growing)
    big = random.Random(8).randbytes(24 * (1 << 20) - 5)
    write(workdir, "models/weights.bin", big)
    assert make_engine(workdir, store_url=s3_url).sync().ok
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, store_url=s3_url, state="state2", concurrency=2)
    fetches = Overlaps(engine.backend.read_into, 1, 0.05)
    monkeypatch.setattr(engine.backend, "read_into", fetches)
    report = engine.restore()
    assert report.restored == ["models/weights.bin"] and not report.errors
    assert (fresh / "models" / "weights.bin").read_bytes() == big
    assert (
        made[0].limit > 2 and made[0].most == 16
    )  # grew from the concurrency, bounded by the workers
    assert fetches.most_same > 2  # more parts at once than the concurrency


def test_through_s3_many_small_files_come_many_at_once_from_one_thread_in_order_and_a_gone_one_is_skipped(
    workdir: Path, tmp_path: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    shards = [f"{NEW}/shard-{i:02d}.pt" for i in range(40)]
    for rel in shards:
        write(workdir, rel, os.urandom(random.Random(rel).randrange(0, 9000)))
    write(workdir, f"{NEW}/manifest.json", json.dumps({"format": 1, "folder": NEW}))
    code = [f"src/mod{i:03d}.py" for i in range(120)]
    data = [f"data/part{i:03d}.bin" for i in range(200)]
    for rel in code + data:
        write(workdir, rel, os.urandom(random.Random(rel).randrange(1, 20000)))
    assert make_engine(workdir, store_url=s3_url).sync().ok
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, store_url=s3_url, state="state2")
    backend = engine.backend
    assert isinstance(backend, ObjectStoreBackend)
    original = backend.read_many
    calls: list[int] = []
    active = [0, 0]  # now, most
    lock = threading.Lock()
    problems: list[str] = []
    prefix = s3_url.split(f"s3://{S3_BUCKET}/", 1)[1]

    def watched(
        items: list[tuple[str, Any, Any]],
        landed: Callable[[Any, bytes], None],
        in_flight: int,
        stop: Any = None,
    ) -> Any:
        if not calls:  # deleted by another runtime after the listing
            s3_env.client().delete_object(
                Bucket=S3_BUCKET, Key=f"{prefix}/ws/files/data/part007.bin"
            )
        with lock:
            calls.append(len(items))
            active[0] += 1
            active[1] = max(active)

        def check(token: Any, body: bytes) -> None:
            rel = token.rel
            if rel == f"{NEW}/manifest.json" and not all(
                (fresh / shard).is_file() for shard in shards
            ):
                problems.append("the manifest landed before its folder was complete")
            if rel in code and not (fresh / NEW / "manifest.json").is_file():
                problems.append(f"{rel} before the newest checkpoint was complete")
            landed(token, body)

        try:
            return original(items, check, in_flight, stop)
        finally:
            with lock:
                active[0] -= 1

    backend.read_many = watched  # type: ignore[method-assign]
    report = engine.restore()
    assert not report.errors and not problems, (report.errors, problems)
    expected = {rel: data for rel, data in tree_files(workdir).items() if rel != "data/part007.bin"}
    assert tree_files(fresh) == expected  # every file whole; the deleted one skipped, not an error
    assert max(calls) > 1 and sum(calls) >= len(expected) - 1  # small files went many at a time
    assert (
        active[1] <= restore_module.MANY_LOOPS
    )  # a few threads, each with many requests in flight
    assert engine.restoring.describe()["runs"] == {
        RUN: {"checkpoint": NEW, "local": True, "error": None}
    }


def test_through_s3_a_restore_of_many_small_files_holds_few_files_open(
    workdir: Path, tmp_path: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    import resource

    names = [f"d{i % 20}/f{i:04d}.txt" for i in range(2000)]
    for name in names:
        write(workdir, name, name.encode() * 3)
    assert make_engine(workdir, store_url=s3_url).sync().ok
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, store_url=s3_url, state="state2")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Room for a connection per request the restore may have in flight at once (all of them
    # new at its start, before any can be reused) and a few files, far from a file per file of
    # the batches waiting for their turn (2,000 here): a user's limit is often 1,024. (150 in all
    # was too few on a loaded machine, where fewer connections are reused: EMFILE.)
    requests = engine.settings.concurrency * restore_module.MANY_IN_FLIGHT
    room = len(os.listdir("/proc/self/fd")) + requests + 64
    resource.setrlimit(resource.RLIMIT_NOFILE, (room, hard))
    try:
        report = engine.restore()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not report.errors, report.errors[:3]
    assert tree_files(fresh) == tree_files(workdir)


def test_through_s3_what_many_at_once_gives_back_goes_the_ordinary_way_on_every_worker(
    workdir: Path,
    tmp_path: Path,
    s3_url: str,
    s3_env: S3Server,
    make_engine: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"f{i:03d}.txt" for i in range(100)]
    for name in names:
        write(workdir, name, name.encode())
    assert make_engine(workdir, store_url=s3_url).sync().ok
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, store_url=s3_url, state="state2")
    monkeypatch.setattr(restore_module, "MANY_LOOPS", 1)  # 100 files: 4 batches of 25
    backend = engine.backend
    assert isinstance(backend, ObjectStoreBackend)
    given: list[int] = []
    busy = [0, 0]  # now, most
    lock = threading.Lock()
    original = backend.read_into

    def nothing_comes(items: list[Any], landed: Any, in_flight: int, stop: Any = None) -> list[Any]:
        given.append(len(items))  # as a store that went silent would: everything back
        return [token for _, _, token in items]

    def slow(*args: Any, **kwargs: Any) -> int:
        with lock:
            busy[0] += 1
            busy[1] = max(busy)
        try:
            time.sleep(0.05)
            return original(*args, **kwargs)
        finally:
            with lock:
                busy[0] -= 1

    backend.read_many = nothing_comes  # type: ignore[method-assign]
    backend.read_into = slow  # type: ignore[method-assign]
    report = engine.restore()
    assert not report.errors
    assert tree_files(fresh) == tree_files(workdir)
    assert given == [25, 25, 25, 25]  # what came back is not offered to read_many again
    assert busy[1] > 4  # spread over the workers, not one after the other in the four batches'


def test_a_large_object_replaced_in_s3_during_the_restore_is_not_stitched_together(
    workdir: Path, tmp_path: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    first = random.Random(1).randbytes(PARTS_FROM + 5)
    write(workdir, "models/weights.bin", first)
    assert make_engine(workdir, store_url=s3_url).sync().ok
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(
        fresh, store_url=s3_url, state="state2", concurrency=1
    )  # one part after the other
    backend = engine.backend
    assert isinstance(backend, ObjectStoreBackend)
    original = backend.read_into
    replaced = threading.Event()

    def replace_after_the_first_part(
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Any = None,
        etag: str | None = None,
    ) -> int:
        n = original(key, fd, offset, length, progress, etag)
        if not replaced.is_set():
            replaced.set()  # another runtime writes a new version meanwhile
            prefix = s3_url.split(f"s3://{S3_BUCKET}/", 1)[1]
            s3_env.client().put_object(
                Bucket=S3_BUCKET,
                Key=f"{prefix}/ws/files/models/weights.bin",
                Body=random.Random(2).randbytes(PARTS_FROM + 5),
            )
        return n

    backend.read_into = replace_after_the_first_part  # type: ignore[method-assign]
    report = engine.restore()
    assert not (fresh / "models" / "weights.bin").exists()  # parts of two versions never land
    assert report.errors and "changed in the store" in report.errors[0]
    report = make_engine(
        fresh, store_url=s3_url, state="state3"
    ).restore()  # the next restore gets it
    assert not report.errors
    assert (fresh / "models" / "weights.bin").read_bytes() == random.Random(2).randbytes(
        PARTS_FROM + 5
    )


# -- every file whole -----------------------------------------------------------------------------


def run_child(settings: dict[str, Any], kill_after: float | None) -> tuple[bool, float, str]:
    """One restore in a child process; with `kill_after`, SIGKILL that many seconds into it.
    (killed, seconds from the start of the restore to the end of the process, output)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "PYTHONWARNINGS": "ignore",
    }
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), json.dumps(settings), str(PART_SIZE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.strip() == "restoring", first + proc.communicate()[1]
        started = time.monotonic()
        if kill_after is not None:
            time.sleep(kill_after)
            proc.send_signal(signal.SIGKILL)  # a no-op if it has ended already
        out, err = proc.communicate(timeout=300)
        seconds = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode == -signal.SIGKILL, seconds, out + err


def child_settings(work: Path, store: Path, state: Path) -> dict[str, Any]:
    return {
        "workdir": str(work),
        "store_url": str(store),
        "workspace": "ws",
        "state_dir": str(state),
        "durable": False,
    }


KILL_POINTS = 6


@pytest.fixture(scope="module")
def kill_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """A synced tree (many small files, large ones that come in parts, a checkpoint), and how
    long an uninterrupted restore of it takes here and now."""
    root = tmp_path_factory.mktemp("kill")
    work, store = root / "work", root / "store"
    rng = random.Random(8)
    for i in range(600):
        write(work, f"d{i % 12:02d}/f{i:04d}.dat", rng.randbytes(rng.randint(0, 6000)))
    write(work, "models/a.bin", rng.randbytes(40 * PART_SIZE + 1))
    write(work, "models/b.bin", rng.randbytes(25 * PART_SIZE + 77))
    checkpoint(work, NEW, rng.randbytes(30 * PART_SIZE + 1))
    engine = SyncEngine(SyncSettings(**child_settings(work, store, root / "state")))
    engine.open()
    assert engine.sync().ok
    engine.close()
    seconds = []
    for n in range(2):
        target = root / f"measure{n}"
        target.mkdir()
        killed, took, output = run_child(
            child_settings(target, store, root / f"measure-state{n}"), None
        )
        assert not killed and output.startswith("done"), output
        seconds.append(took)
        shutil.rmtree(target)
    return work, store, min(seconds)


@pytest.mark.parametrize("point", range(KILL_POINTS))
def test_a_restore_killed_at_any_moment_leaves_no_partial_file_under_its_name(
    point: int, kill_tree: tuple[Path, Path, float], tmp_path: Path
) -> None:
    source, store, seconds = kill_tree
    delay = seconds * (point + random.Random(point).random()) / KILL_POINTS
    for attempt in range(5):  # a restore that ended before its signal: again, killed earlier
        work = tmp_path / f"work{attempt}"
        work.mkdir()
        killed, _, _ = run_child(child_settings(work, store, tmp_path / f"state{attempt}"), delay)
        if killed:
            break
        delay /= 2
    assert killed, "every restore ended before its signal"
    unnamed = unnamed_files_work(str(work))
    for rel, data in tree_files(work).items():
        if PART_SUFFIX in rel:
            assert not unnamed, (
                f"an unnamed file was expected, and a temporary name was left: {rel}"
            )
            continue
        assert data == (source / rel).read_bytes(), f"{rel} is under its name but not whole"
    if (work / NEW / "manifest.json").exists():  # a checkpoint that looks complete is complete
        for name in CHECKPOINT_FILES:
            assert (work / NEW / name).read_bytes() == (source / NEW / name).read_bytes()
    # The next restore completes the work directory.
    engine = SyncEngine(SyncSettings(**child_settings(work, store, tmp_path / f"state{attempt}")))
    report = engine.restore()
    engine.close()
    assert not report.errors and not report.conflicts, report
    assert tree_files(work) == tree_files(source)


def test_without_unnamed_files_a_hidden_temporary_name_is_linked_into_place_and_removed(
    synced: Path,
    store_dir: Path,
    tmp_path: Path,
    make_engine: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jupyter_gpu_ws.sync import landing

    monkeypatch.setattr(landing, "O_TMPFILE", 0)  # as on NFS or an older overlay mount
    created: list[str] = []
    real_open = os.open

    def watching_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if PART_SUFFIX in str(path):
            created.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(landing.os, "open", watching_open)
    fresh = tmp_path / "fresh"
    write(
        fresh, "train.ipynb", "local edits"
    )  # differs from the store's: kept, the store's beside it
    engine = make_engine(fresh, state="state-fresh", backend=LocalBackend(str(store_dir)))
    report = engine.restore()
    # Every file came this way (the store's own writes, such as the lease's, are not landings).
    landed = [path for path in created if path.startswith(str(fresh))]
    assert not report.errors and len(landed) == len(tree_files(synced))
    files = tree_files(fresh)
    assert not [rel for rel in files if PART_SUFFIX in rel]
    assert files.pop("train.ipynb") == b"local edits"
    [conflict] = report.conflicts
    assert files.pop(conflict) == (synced / "train.ipynb").read_bytes()
    expected = tree_files(synced)
    expected.pop("train.ipynb")
    assert files == expected


def test_cancel_stops_the_restore_and_leaves_only_whole_files(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    for i in range(30):
        write(workdir, f"files/f{i:02d}.bin", os.urandom(100_000))
    assert make_engine(workdir).sync().ok
    cancel = threading.Event()
    reads = 0

    def count(key: str) -> None:
        nonlocal reads
        reads += 1
        if reads == 5:
            cancel.set()

    engine, fresh = fresh_engine(
        tmp_path, make_engine, WatchedBackend(str(store_dir), on_read=count), concurrency=1
    )
    with pytest.raises(CancelledError):
        engine.restore(cancel=cancel)
    restored = tree_files(fresh)
    assert 0 < len(restored) <= 5  # nothing started after the cancel
    assert all(data == (workdir / rel).read_bytes() for rel, data in restored.items())


# -- fetch_checkpoint: what resume() asks for -----------------------------------------------------


def test_fetch_checkpoint_waits_for_a_running_restore_and_returns_the_newest_complete_checkpoint(
    synced: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    backend = WatchedBackend(str(store_dir), hold=lambda key: key == key_of(f"{NEW}/tensors.bin"))
    engine, fresh = fresh_engine(tmp_path, make_engine, backend)
    restoring = threading.Thread(target=engine.restore)
    restoring.start()
    try:
        # The restore is under way.
        until(lambda: key_of(f"{NEW}/tensors.bin") in backend.reads, 10, interval=0.01)
        answer: list[Any] = []
        asking = threading.Thread(
            target=lambda: answer.append(engine.fetch_checkpoint(RUN, timeout=20))
        )
        asking.start()
        asking.join(0.5)
        assert asking.is_alive() and not answer  # waiting: the newest checkpoint is not here yet
        backend.released.set()
        asking.join(20)
        assert answer == [NEW]
        assert (fresh / NEW / "manifest.json").is_file()
        assert all(
            (fresh / NEW / name).read_bytes() == (synced / NEW / name).read_bytes()
            for name in (*CHECKPOINT_FILES, "manifest.json")
        )
    finally:
        backend.released.set()
        restoring.join(30)
    assert backend.reads.count(key_of(f"{NEW}/tensors.bin")) == 1  # it came once, by the restore


def test_fetch_checkpoint_without_a_restore_fetches_only_the_newest_complete_checkpoint(
    synced: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    backend = WatchedBackend(str(store_dir))
    engine, fresh = fresh_engine(tmp_path, make_engine, backend)
    assert engine.fetch_checkpoint(f"/{RUN}/") == NEW
    assert sorted(tree_files(fresh)) == sorted(
        f"{NEW}/{name}" for name in (*CHECKPOINT_FILES, "manifest.json")
    )
    assert backend.reads[-1] == key_of(f"{NEW}/manifest.json")  # the manifest last
    # Complete here now: asked again, nothing more is read.
    reads = len(backend.reads)
    assert engine.fetch_checkpoint(RUN) == NEW
    assert len(backend.reads) == reads
    # A file missing from it is fetched again; the others stay as they are.
    (fresh / NEW / "rng.pt").unlink()
    assert engine.fetch_checkpoint(RUN) == NEW
    assert backend.reads[reads:] == [key_of(f"{NEW}/rng.pt")]
    assert (fresh / NEW / "rng.pt").read_bytes() == (synced / NEW / "rng.pt").read_bytes()


def test_fetch_checkpoint_is_none_for_a_run_without_a_complete_checkpoint(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    checkpoint(
        workdir, ".gpuws/checkpoints/other/ckpt-000000001-20261130T100000Z", b"t", manifest=False
    )
    checkpoint(workdir, NEW, b"t")
    assert make_engine(workdir).sync().ok
    backend = WatchedBackend(str(store_dir))
    engine, fresh = fresh_engine(tmp_path, make_engine, backend)
    assert engine.fetch_checkpoint(".gpuws/checkpoints/other") is None
    assert engine.fetch_checkpoint(".gpuws/checkpoints/never-ran") is None
    assert backend.reads == [] and tree_files(fresh) == {}
    with pytest.raises(SyncError, match="not a run folder"):
        engine.fetch_checkpoint("../elsewhere")


def test_fetch_checkpoint_times_out_with_a_clear_error(
    synced: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    backend = WatchedBackend(str(store_dir), hold=lambda key: key == key_of(f"{NEW}/tensors.bin"))
    engine, _ = fresh_engine(tmp_path, make_engine, backend)
    restoring = threading.Thread(target=engine.restore)
    restoring.start()
    try:
        until(lambda: key_of(f"{NEW}/tensors.bin") in backend.reads, 10, interval=0.01)
        with pytest.raises(SyncError, match="Timed out after 0.3 s"):
            engine.fetch_checkpoint(RUN, timeout=0.3)
        # It gave up while the restore was still held, and fetched nothing itself.
        assert not backend.held_over.is_set()
        assert backend.reads.count(key_of(f"{NEW}/tensors.bin")) == 1
    finally:
        backend.released.set()
        restoring.join(30)


def test_fetch_checkpoint_raises_when_the_store_cannot_be_reached(
    tmp_path: Path, s3_env: S3Server
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    settings = SyncSettings(
        str(work),
        f"s3://{S3_BUCKET}/nowhere",
        "ws",
        str(tmp_path / "state"),
        storage_options={"endpoint_url": f"http://127.0.0.1:{closed_port()}"},
        retry_backoff=0.01,
    )
    engine = SyncEngine(settings)
    try:
        with pytest.raises(StoreUnavailableError):
            engine.fetch_checkpoint(RUN, timeout=60)
    finally:
        engine.close()
    assert tree_files(work) == {}


def test_fetch_checkpoint_needs_no_lease_and_goes_on_while_a_pass_runs(
    synced: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    # The fresh engine is read-only (the first one holds the lease) and a pass of the first
    # engine holds its own pass lock meanwhile: neither stops a fetch.
    engine, fresh = fresh_engine(tmp_path, make_engine, WatchedBackend(str(store_dir)))
    assert engine.read_only
    with engine._pass_lock:
        assert engine.fetch_checkpoint(RUN, timeout=10) == NEW
    assert (fresh / NEW / "manifest.json").is_file()
