"""A store that vanishes or lies: a mounted drive that drops is the store unavailable, never an
empty store made anew; when it comes back (or comes back older), the record is checked against
it and what it lacks goes again; a store is begun only on an explicit first use; the counts are
the store's."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.store import check_store_url, open_backend
from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from jupyter_gpu_ws.sync.errors import StoreConfigError, StoreMissingError
from jupyter_gpu_ws.sync.index import SyncIndex
from jupyter_gpu_ws.sync.service import SyncService
from tests.sync.conftest import tree_files, write
from tests.waiting import until

Make = Callable[..., SyncEngine]


def stored(store: Path) -> dict[str, bytes]:
    root = store / "ws" / "files"
    return tree_files(root) if root.exists() else {}


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    """Where a drive is mounted: an empty folder while it is not (/content/drive, /mnt/disk)."""
    path = tmp_path / "drive"
    path.mkdir()
    return path


def engine_on(
    tmp_path: Path, workdir: Path, store: Path, state: str = "state", **options: Any
) -> SyncEngine:
    engine = SyncEngine(
        SyncSettings(
            workdir=str(workdir),
            store_url=str(store),
            workspace="ws",
            state_dir=str(tmp_path / state),
            retry_backoff=0.01,
            **options,
        )
    )
    engine.open()
    return engine


# -- never made by accident -----------------------------------------------------------------------


def test_a_store_folder_in_an_empty_mount_point_is_unavailable_and_nothing_is_made(
    tmp_path: Path, workdir: Path, mount: Path
) -> None:
    store = mount / "MyDrive" / "gpuws"
    write(workdir, "a.txt", "mine")
    engine = engine_on(tmp_path, workdir, store, lease_ttl=0.4)
    try:
        status = engine.status()
        assert status["state"] == "error" and status["store_missing"] is True
        assert (
            "does not exist" in status["store_down"] and "unmounted drive" in status["store_down"]
        )
        time.sleep(1.0)  # the lease's thread keeps trying: it still makes nothing
        assert list(mount.iterdir()) == []
        # The drive is mounted (its folder is there): the engine writes by itself.
        store.mkdir(parents=True)
        until(lambda: engine.writable, 5, "the engine writing once the folder is there")
        assert engine.sync().uploaded == ["a.txt"]
        assert engine.status()["store_missing"] is False
    finally:
        engine.close()


def test_a_new_store_folder_is_made_where_its_parent_holds_other_things(
    tmp_path: Path, workdir: Path
) -> None:
    home = tmp_path / "home"
    write(home, "notes.txt", "a real folder")
    write(workdir, "a.txt", "mine")
    engine = engine_on(tmp_path, workdir, home / "gpuws-store")
    try:
        assert engine.writable and engine.sync().uploaded == ["a.txt"]
    finally:
        engine.close()


def test_create_store_makes_it_even_in_an_empty_folder(
    tmp_path: Path, workdir: Path, mount: Path
) -> None:
    engine = engine_on(tmp_path, workdir, mount / "store", create_store=True)
    try:
        assert engine.writable and (mount / "store").is_dir()
    finally:
        engine.close()


def test_a_store_this_machine_synced_to_is_never_made_again_even_with_create_store(
    tmp_path: Path, workdir: Path
) -> None:
    store = tmp_path / "store"
    write(workdir, "a.txt", "mine")
    first = engine_on(tmp_path, workdir, store)
    first.sync()
    first.close()
    shutil.rmtree(store)  # the drive dropped, or the folder was renamed
    engine = engine_on(tmp_path, workdir, store, create_store=True)
    try:
        status = engine.status()
        assert status["store_missing"] and "synced 1 file" in status["store_down"]
        assert not store.exists()
        # The user's word: start it again there, from this machine's files.
        engine.take_over()
        assert engine.writable
        assert engine.sync().uploaded == ["a.txt"]
        assert stored(store) == {"a.txt": b"mine"}
    finally:
        engine.close()


# -- a drive that drops while the runtime writes --------------------------------------------------


@pytest.mark.parametrize("what", ["store-folder", "workspace-folder"])
def test_a_store_that_vanishes_during_writes_gets_every_file_once_it_is_back(
    what: str, tmp_path: Path, workdir: Path, mount: Path
) -> None:
    """The store folder (a drive mounted at its parent) or the workspace's folder (a drive
    mounted at the store folder itself: the mount point stays, empty) goes away while files are
    written; nothing is made in its place, the status says so within seconds, and once it is back
    every file written meanwhile reaches it."""
    store = mount / "gpuws"
    store.mkdir()
    write(workdir, "before.txt", "before")
    engine = engine_on(tmp_path, workdir, store, lease_ttl=1.0)
    service = SyncService(engine, debounce=0.02, rescan_interval=3600)
    service.start()
    try:
        until(lambda: "before.txt" in stored(store), what="the first file")
        gone = store if what == "store-folder" else store / "ws"
        away = tmp_path / "away"
        gone.rename(away)  # the drive drops
        write(workdir, "during.txt", "written while the store was away")
        status = until(
            lambda: (s := engine.status())["store_missing"] and s, 10, "the status saying so"
        )
        assert status["state"] == "error" and "missing" in status["store_down"]
        assert status["pending_files"] >= 1
        time.sleep(1.5)
        # Nothing was made where the store was: no empty store taking the files.
        assert not (store / "ws").exists() if what == "workspace-folder" else not store.exists()
        away.rename(gone)  # the drive is back
        until(
            lambda: stored(store).get("during.txt") == b"written while the store was away",
            30,
            "the file written meanwhile reaching the store",
        )
        write(workdir, "after.txt", "after")
        until(lambda: "after.txt" in stored(store), 15, "the sync going on")
        until(
            lambda: not engine.status()["store_missing"] and engine.status()["pending_files"] == 0,
            10,
            "the status healed",
        )
    finally:
        service.stop()
        engine.close()


def test_a_store_that_comes_back_older_is_given_what_it_lacks(
    tmp_path: Path, workdir: Path
) -> None:
    """The drive comes back with an older copy of the store (a stale mount, a restored backup):
    the record says those files are synced, the store says otherwise, and the store is right."""
    store = tmp_path / "store"
    write(workdir, "old.txt", "old")
    engine = engine_on(tmp_path, workdir, store, lease_ttl=0.5)
    engine.sync()
    older = tmp_path / "older-copy"
    shutil.copytree(store, older)
    write(workdir, "new.txt", "new")
    write(workdir, "old.txt", "changed")
    engine.sync()
    engine.close()
    shutil.rmtree(store)
    older.rename(store)  # the older copy is what the drive shows now, with the lease of that time
    engine = engine_on(tmp_path, workdir, store, lease_ttl=0.5)
    try:
        until(lambda: engine.writable, 5, "the old lease out")
        report = engine.sync()
        assert sorted(report.uploaded) == ["new.txt", "old.txt"]
        assert stored(store) == {"old.txt": b"changed", "new.txt": b"new"}
        # A fresh machine restores the newest, not the stale copies.
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        other = engine_on(tmp_path, fresh, store, state="state-fresh")
        other.restore()
        assert tree_files(fresh) == {"old.txt": b"changed", "new.txt": b"new"}
        other.close()
    finally:
        engine.close()


def test_files_the_store_lost_behind_the_runtimes_back_go_again_after_a_take_over(
    tmp_path: Path, workdir: Path, make_engine: Make, store_dir: Path
) -> None:
    write(workdir, "a.txt", "a")
    write(workdir, "b.txt", "b")
    engine = make_engine(workdir)
    engine.sync()
    (store_dir / "ws" / "files" / "a.txt").unlink()  # someone else removed it
    assert engine.sync().uploaded == []  # the record is trusted between gaps
    engine.take_over()  # a gap: the lease (re)taken
    assert engine.sync().uploaded == ["a.txt"]
    assert stored(store_dir) == {"a.txt": b"a", "b.txt": b"b"}


def test_the_s3_store_that_lost_files_is_given_them_at_the_next_start(
    tmp_path: Path, workdir: Path, s3_url: str, s3_env: Any, make_engine: Make
) -> None:
    from tests.sync.conftest import S3_BUCKET

    write(workdir, "a.txt", "a")
    write(workdir, "sub/b.txt", "b")
    engine = make_engine(workdir, s3_url)
    engine.sync()
    engine.close()
    key = f"{s3_url.split(S3_BUCKET + '/', 1)[1]}/ws/files/sub/b.txt"
    s3_env.client().delete_object(Bucket=S3_BUCKET, Key=key)  # lost behind the runtime's back
    engine = make_engine(workdir, s3_url)
    assert engine.sync().uploaded == ["sub/b.txt"]
    assert s3_env.client().get_object(Bucket=S3_BUCKET, Key=key)["Body"].read() == b"b"


# -- the counts are the store's -------------------------------------------------------------------


def test_the_counts_follow_what_another_process_recorded(tmp_path: Path) -> None:
    """Two servers on one state folder share one record: each sees the other's changes."""
    from jupyter_gpu_ws.sync.index import Record

    path = str(tmp_path / "state" / "record.sqlite3")
    first, second = SyncIndex(path), SyncIndex(path)
    first.put_many([Record("a", 10, 1, None, 0.0), Record("b", 20, 1, None, 0.0)])
    assert second.count_and_bytes() == (2, 30)
    first.put_many([Record(f"f{i}", 1, 1, None, 0.0) for i in range(20)])
    assert second.count_and_bytes() == (22, 50)
    second.delete_many(["a"])
    assert first.count_and_bytes() == (21, 40)
    first.close()
    second.close()


def test_a_second_server_on_one_state_folder_counts_the_store_after_the_first_stops(
    tmp_path: Path, workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    write(workdir, "b.txt", "b")
    first = make_engine(workdir, lease_ttl=0.6)
    first.sync()
    second = make_engine(workdir, lease_ttl=0.6)  # the same work directory and state folder
    assert second.read_only and second.status()["synced_files"] == 2
    for i in range(20):
        write(workdir, f"more/{i}.txt", str(i))
    first.sync()
    first.close()
    until(lambda: second.writable, 5, "the second taking over")
    second.sync()
    status = second.status()
    assert status["synced_files"] == 22 == len(stored(store_dir))
    assert status["store_bytes"] == sum(len(v) for v in stored(store_dir).values())


# -- store URLs are checked -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, better",
    [
        ("s3:/bucket", "s3://bucket"),
        ("s3:bucket", "s3://bucket"),
        ("file:/tmp/x", "file:///tmp/x"),
        ("gs:bucket/prefix", "gs://bucket/prefix"),
        ("file://tmp/x", "file:///tmp/x"),
    ],
)
def test_a_mistyped_store_url_is_refused_with_the_corrected_form(url: str, better: str) -> None:
    with pytest.raises(StoreConfigError, match=f"did you mean '{better}'"):
        check_store_url(url)


def test_a_relative_store_path_is_refused_and_nothing_is_made(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)
    with pytest.raises(StoreConfigError, match="relative path"):
        open_backend("my-store")
    assert list(workdir.iterdir()) == []
    assert check_store_url("~/gpuws") == "~/gpuws"  # the home folder is absolute enough


def test_a_store_inside_the_work_directory_or_holding_it_is_refused(
    tmp_path: Path, workdir: Path
) -> None:
    write(workdir, "a.txt", "a")
    with pytest.raises(StoreConfigError, match="inside the work directory"):
        engine_on(tmp_path, workdir, workdir / "store")
    with pytest.raises(StoreConfigError, match="is inside the store folder"):
        engine_on(tmp_path, workdir, tmp_path)
    assert not (workdir / "store").exists()


def test_the_state_folder_inside_the_work_directory_is_left_out_of_the_mirror(
    tmp_path: Path, workdir: Path, store_dir: Path
) -> None:
    """A server started in the home folder keeps its record in ~/.local/share/…: never mirrored
    (every pass would change it, and send it again)."""
    write(workdir, "a.txt", "a")
    engine = SyncEngine(
        SyncSettings(
            workdir=str(workdir),
            store_url=str(store_dir),
            workspace="ws",
            state_dir=str(workdir / ".local" / "share" / "gpuws" / "state"),
        )
    )
    engine.open()
    try:
        assert engine.sync().uploaded == ["a.txt"]
        assert engine.sync().uploaded == []
    finally:
        engine.close()


def test_missing_store_is_one_clear_error_where_the_caller_reads_it(tmp_path: Path) -> None:
    backend = open_backend(str(tmp_path / "nowhere"))
    with pytest.raises(StoreMissingError, match="is missing"):
        list(backend.list("ws/files"))
