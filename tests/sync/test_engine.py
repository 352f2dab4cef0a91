"""The sync engine on the embedded default store (a local folder), with real files."""

from __future__ import annotations

import datetime
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws import diskio
from jupyter_gpu_ws.store.backend import PART_SUFFIX
from jupyter_gpu_ws.sync import (
    DeletionGuardError,
    LeaseHeldError,
    LocalBackend,
    StoreConfigError,
    SyncEngine,
    SyncError,
    WorkdirError,
)
from jupyter_gpu_ws.sync.progress import Progress
from tests.sync.conftest import same_trees, tree_files, write

Make = Callable[..., SyncEngine]


def mirror(store_dir: Path, workspace: str = "ws") -> Path:
    return store_dir / workspace / "files"


def test_round_trip_of_many_small_and_a_few_large_files(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    for i in range(3000):
        write(workdir, f"data/part{i % 30:02d}/file{i:05d}.txt", f"line {i}\n" * (i % 7))
    for i in range(3):
        write(workdir, f"models/big{i}.bin", os.urandom(5 * 2**20 + i))
    engine = make_engine(workdir)
    report = engine.sync()
    assert report.ok and len(report.uploaded) == 3003
    assert same_trees(workdir, mirror(store_dir))

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    restored = make_engine(fresh, state="state2").restore()
    assert len(restored.restored) == 3003 and not restored.conflicts
    assert same_trees(workdir, fresh)


def test_second_pass_with_nothing_changed_uploads_nothing(workdir: Path, make_engine: Make) -> None:
    write(workdir, "a.txt", "a")
    engine = make_engine(workdir)
    engine.sync()
    report = engine.sync()
    assert report.uploaded == [] and report.unchanged == 1


def test_changed_file_is_uploaded_and_its_previous_version_kept(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "notes.md", "first")
    engine = make_engine(workdir)
    engine.sync()
    time.sleep(0.01)
    write(workdir, "notes.md", "second version")
    assert engine.sync(["notes.md"]).uploaded == ["notes.md"]
    assert (mirror(store_dir) / "notes.md").read_text() == "second version"
    versions = engine.versions("notes.md")
    assert len(versions) == 1
    restored_as = engine.restore_version("notes.md", versions[0]["version"])
    assert (workdir / restored_as).read_text() == "first"
    assert (workdir / "notes.md").read_text() == "second version"


def test_deleted_file_leaves_the_mirror_but_stays_as_a_version(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "keep.txt", "k")
    write(workdir, "gone.txt", "precious")
    engine = make_engine(workdir)
    engine.sync()
    (workdir / "gone.txt").unlink()
    assert engine.sync(["gone.txt"]).deleted == ["gone.txt"]
    assert not (mirror(store_dir) / "gone.txt").exists()
    [version] = engine.versions("gone.txt")
    target = engine.restore_version("gone.txt", version["version"], "gone.txt")
    assert (workdir / target).read_text() == "precious"


def test_rename_is_followed(workdir: Path, store_dir: Path, make_engine: Make) -> None:
    write(workdir, "old/name.py", "print(1)")
    engine = make_engine(workdir)
    engine.sync()
    (workdir / "new").mkdir()
    (workdir / "old" / "name.py").rename(workdir / "new" / "name.py")
    report = engine.sync()
    assert report.uploaded == ["new/name.py"] and report.deleted == ["old/name.py"]
    assert tree_files(mirror(store_dir)) == {"new/name.py": b"print(1)"}
    assert engine.versions("old/name.py")


def test_emptied_work_directory_does_not_empty_the_store(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    for i in range(5):
        write(workdir, f"f{i}.txt", str(i))
    engine = make_engine(workdir)
    engine.sync()
    for path in workdir.iterdir():
        path.unlink()
    with pytest.raises(DeletionGuardError, match="empty"):
        engine.sync()
    assert len(tree_files(mirror(store_dir))) == 5
    assert engine.status()["state"] == "error"


def test_a_pass_deleting_most_of_the_store_stops_before_deleting(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    for i in range(30):
        write(workdir, f"f{i:02d}.txt", str(i))
    engine = make_engine(workdir)
    engine.sync()
    for i in range(20):
        (workdir / f"f{i:02d}.txt").unlink()
    with pytest.raises(DeletionGuardError, match="20 of the 30"):
        engine.sync()
    assert len(tree_files(mirror(store_dir))) == 30


def test_vanished_work_directory_is_a_clear_error_and_deletes_nothing(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    engine = make_engine(workdir)
    engine.sync()
    (workdir / "a.txt").unlink()
    workdir.rmdir()
    with pytest.raises(WorkdirError, match="does not exist"):
        engine.sync()
    assert (mirror(store_dir) / "a.txt").exists()


def test_missing_work_directory_refused_at_start(tmp_path: Path, make_engine: Make) -> None:
    with pytest.raises(WorkdirError):
        make_engine(tmp_path / "nope")


@pytest.mark.parametrize("url", ["", "nosuchproto://bucket/x", "s3://", "file://host/x"])
def test_malformed_store_url_is_a_clear_error(workdir: Path, make_engine: Make, url: str) -> None:
    with pytest.raises(StoreConfigError):
        make_engine(workdir, store_url=url or " ")


def test_excludes_defaults_gpuwsignore_and_virtual_environments(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "train.py", "x")
    write(workdir, ".ipynb_checkpoints/train-checkpoint.ipynb", "x")
    write(workdir, "pkg/__pycache__/m.cpython-311.pyc", "x")
    write(workdir, "node_modules/left-pad/index.js", "x")
    write(workdir, "myenv/pyvenv.cfg", "home = /usr")
    write(workdir, "myenv/lib/site.py", "x")
    write(workdir, "data/raw/huge.csv", "x")
    write(workdir, "data/keep.csv", "x")
    write(workdir, ".gpuwsignore", "data/raw/\n*.tmp\n")
    write(workdir, "scratch.tmp", "x")
    engine = make_engine(workdir)
    engine.sync()
    assert set(tree_files(mirror(store_dir))) == {"train.py", "data/keep.csv", ".gpuwsignore"}
    # The watcher path applies the same rules.
    write(workdir, "myenv/lib/other.py", "x")
    write(workdir, "data/raw/more.csv", "x")
    assert engine.sync(["myenv/lib/other.py", "data/raw/more.csv"]).uploaded == []


def test_max_file_size_skips_and_reports(workdir: Path, make_engine: Make) -> None:
    write(workdir, "small.txt", "x")
    write(workdir, "big.bin", b"x" * 2000)
    report = make_engine(workdir, max_file_size=1000).sync()
    assert report.uploaded == ["small.txt"] and report.skipped == ["big.bin"]


def test_quota_refuses_with_a_clear_error_and_keeps_the_file_pending(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.bin", b"a" * 600)
    engine = make_engine(workdir, quota_bytes=1000)
    engine.sync()
    write(workdir, "b.bin", b"b" * 600)
    engine.mark_dirty(["b.bin"])
    report = engine.sync(["b.bin"])
    assert report.uploaded == []
    assert "Quota exceeded" in report.errors[0] and "b.bin" in report.errors[0]
    assert (workdir / "b.bin").exists() and not (mirror(store_dir) / "b.bin").exists()
    assert engine.pending() == (1, 600)
    status = engine.status()
    assert status["state"] == "error" and "Quota" in status["last_error"]
    assert status["quota_warning"] is None  # 600 of 1000 is under 90 %


def test_quota_warns_at_90_percent(workdir: Path, make_engine: Make) -> None:
    write(workdir, "a.bin", b"a" * 950)
    engine = make_engine(workdir, quota_bytes=1000)
    engine.sync()
    assert "95%" in engine.status()["quota_warning"]


def test_pending_counts_changed_files_and_clears_after_sync(
    workdir: Path, make_engine: Make
) -> None:
    engine = make_engine(workdir)
    write(workdir, "a.txt", "12345")
    write(workdir, "b.txt", "123")
    engine.mark_dirty(["a.txt", "b.txt"])
    assert engine.pending() == (2, 8)
    engine.sync(engine.take_dirty())
    assert engine.pending() == (0, 0)


class ChangingSource(LocalBackend):
    """Appends to the source file while the first copy of it is being made."""

    def __init__(self, root: str, source: Path) -> None:
        super().__init__(root)
        self.source = source
        self.puts = 0

    def put(
        self, local: str, key: str, progress: Any = None, check: Any = None, **options: Any
    ) -> int:
        self.puts += 1
        if self.puts == 1:
            time.sleep(0.01)
            with open(self.source, "ab") as f:
                f.write(b" and more")
        return super().put(local, key, progress, check, **options)


def test_file_changing_during_upload_is_uploaded_again_never_torn(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    source = write(workdir, "log.txt", "start")
    backend = ChangingSource(str(store_dir), source)
    engine = make_engine(workdir, backend=backend)
    engine.sync()
    assert backend.puts == 2
    assert (mirror(store_dir) / "log.txt").read_text() == "start and more"
    assert not [p for p in store_dir.rglob("*") if PART_SUFFIX in p.name]


def test_restore_never_overwrites_local_work_and_keeps_both(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    write(workdir, "same.txt", "identical")
    write(workdir, "differs.txt", "store version")
    write(workdir, "only-in-store.txt", "s")
    make_engine(workdir).sync()
    fresh = tmp_path / "fresh"
    write(fresh, "same.txt", "identical")
    write(fresh, "differs.txt", "local edits, longer")
    write(fresh, "only-local.txt", "mine")
    report = make_engine(fresh, state="state2").restore()
    files = tree_files(fresh)
    assert files["differs.txt"] == b"local edits, longer"
    [conflict] = report.conflicts
    assert conflict.startswith("differs.conflict-") and conflict.endswith(".txt")
    assert files[conflict] == b"store version"
    assert files["only-in-store.txt"] == b"s" and files["only-local.txt"] == b"mine"
    assert report.restored == ["only-in-store.txt"] and report.already_present == 1


def test_second_engine_on_the_same_workspace_is_read_only(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    first = make_engine(workdir)
    other = tmp_path / "other"
    other.mkdir()
    second = make_engine(other, state="state2")
    assert second.read_only and "Another runtime is writing this workspace" in (
        second.read_only_reason or ""
    )
    with pytest.raises(LeaseHeldError):
        second.sync()
    assert second.status()["state"] == "read-only"
    first.sync()  # the holder keeps writing
    first.close()  # releases: the next start gets the lease
    third = make_engine(other, state="state3")
    assert not third.read_only


def test_full_store_disk_is_a_clear_error_and_nothing_is_recorded(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    from jupyter_gpu_ws.store.local import _raise_os_error

    class Full(LocalBackend):
        def put(
            self, local: str, key: str, progress: Any = None, check: Any = None, **options: Any
        ) -> int:
            _raise_os_error(OSError(28, "No space left on device"), key)
            return 0

    write(workdir, "a.txt", "a")
    engine = make_engine(workdir, backend=Full(str(store_dir)))
    report = engine.sync()
    assert report.uploaded == [] and "The store's disk is full" in report.errors[0]
    assert engine.status()["state"] == "error" and engine.status()["synced_files"] == 0
    assert (workdir / "a.txt").read_text() == "a"


def test_only_the_newest_keep_versions_versions_are_kept(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    engine = make_engine(workdir, keep_versions=2, settle_interval=0)  # every rewrite a version
    for n in range(5):
        write(workdir, "model.txt", f"v{n}" * (n + 1))  # a new size each time: always a change
        assert engine.sync(["model.txt"]).uploaded == ["model.txt"]
    kept = [
        (store_dir / "ws" / ".gpuws" / "versions" / "model.txt" / v["version"]).read_text()
        for v in engine.versions("model.txt")
    ]
    assert kept == ["v2" * 3, "v3" * 4]


class CountingBackend(LocalBackend):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.listed: list[str] = []
        self.stats: list[str] = []

    def list(self, prefix: str) -> Any:
        self.listed.append(prefix)
        return super().list(prefix)

    def stat(self, key: str) -> Any:
        self.stats.append(key)
        return super().stat(key)


def test_uploading_many_new_files_asks_the_store_once(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    # A request per file (to learn whether the store holds it already, or to prune versions a
    # new file cannot have) doubles the requests on S3: one listing answers for all of them.
    for i in range(50):
        write(workdir, f"f{i:02d}.txt", str(i))
    backend = CountingBackend(str(store_dir))
    engine = make_engine(workdir, backend=backend)
    assert len(engine.sync().uploaded) == 50
    assert backend.listed == ["ws/files"]
    assert backend.stats == []
    backend.listed.clear()
    write(workdir, "f00.txt", "changed")
    engine.sync(["f00.txt"])
    assert backend.listed == ["ws/.gpuws/versions/f00.txt"]  # an overwrite does prune its versions


class ThreadsBackend(LocalBackend):
    """Notes the thread of each put and how many run at once; `pause`: each put waits so long
    first, as on a disk whose writes wait."""

    def __init__(self, root: str, pause: float = 0.0) -> None:
        super().__init__(root)
        self.pause = pause
        self.threads: set[int] = set()
        self.lock = threading.Lock()
        self.active = self.most_active = 0

    def put(self, *args: Any, **kwargs: Any) -> int:
        with self.lock:
            self.threads.add(threading.get_ident())
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.pause)
            return super().put(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


@pytest.mark.parametrize("pause", [0.0, 0.02])
def test_small_files_into_a_fast_local_disk_go_one_after_the_other_in_the_passs_thread(
    workdir: Path, store_dir: Path, make_engine: Make, pause: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From the page cache a small file costs a few system calls: threads handing the GIL to
    # each other at every one cost more than they bring (diskio.waits_on_disk). Files that
    # wait on the disk go `concurrency` at once.
    if not pause:  # a pass that a loaded machine slows must not count as a disk that waits
        monkeypatch.setattr(diskio, "WAIT_PER_FILE", 10.0)
    for i in range(120):
        write(workdir, f"d{i % 6}/f{i:03d}.txt", str(i) * (i + 1))
    backend = ThreadsBackend(str(store_dir), pause)
    engine = make_engine(workdir, backend=backend, concurrency=4)
    assert len(engine.sync().uploaded) == 120
    if pause:
        assert backend.most_active == 4
    else:
        assert backend.most_active == 1
        assert backend.threads == {threading.get_ident()}
    assert {
        p.relative_to(store_dir / "ws" / "files").as_posix(): p.read_bytes()
        for p in (store_dir / "ws" / "files").rglob("*.txt")
    } == {f"d{i % 6}/f{i:03d}.txt": (str(i) * (i + 1)).encode() for i in range(120)}


def test_a_lease_left_by_a_crashed_process_of_this_machine_is_taken_at_start(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    import json
    import subprocess

    first = make_engine(workdir)
    first.keeper.stop()  # it "crashes": nothing renews its lease any more
    lease_file = Path(first.store.backend.root) / "ws" / ".gpuws" / "lease.json"  # type: ignore[attr-defined]
    dead = subprocess.Popen(["true"])
    dead.wait()
    lease = json.loads(lease_file.read_text())
    lease.update(holder="crashed", pid=dead.pid)  # as if a server on this machine died holding it
    lease_file.write_text(json.dumps(lease))
    other = tmp_path / "other"
    other.mkdir()
    assert not make_engine(other, state="state2").read_only


def test_sync_without_the_lease_is_refused(workdir: Path, tmp_path: Path, store_dir: Path) -> None:
    from jupyter_gpu_ws.sync import SyncSettings

    engine = SyncEngine(SyncSettings(str(workdir), str(store_dir), "ws", str(tmp_path / "s")))
    with pytest.raises(LeaseHeldError, match="does not hold the workspace lease"):
        engine.sync()
    engine.close()


@pytest.mark.parametrize("url", ["local", "memory"])
def test_temporary_files_of_interrupted_writes_are_swept_by_the_first_pass_of_the_lease_holder(
    url: str, workdir: Path, store_dir: Path, make_engine: Callable[..., SyncEngine]
) -> None:
    import fsspec

    store_url = str(store_dir) if url == "local" else f"memory://sweep-{uuid.uuid4().hex[:8]}"
    stale = f"ws/files/models/.~w.pt{PART_SUFFIX}-dead1"
    fresh = f"ws/files/models/.~w.pt{PART_SUFFIX}-live2"
    if url == "local":
        for key in (stale, fresh):
            (store_dir / key).parent.mkdir(parents=True, exist_ok=True)
            (store_dir / key).write_bytes(b"partial")
        old = time.time() - 7200
        os.utime(store_dir / stale, (old, old))
        kept = store_dir / "ws" / "files" / "keep.txt"
        kept.write_text("a user's file")
    else:
        fs = fsspec.filesystem("memory")
        root = store_url[len("memory://") :]
        for key in (stale, fresh):
            fs.pipe_file(f"/{root}/{key}", b"partial")
        fs.store[f"/{root}/{stale}"].created = datetime.datetime.fromtimestamp(
            time.time() - 7200, tz=datetime.timezone.utc
        )
    engine = make_engine(workdir, store_url)
    engine.sync()  # the writer's housekeeping runs off the lease's thread, before its first pass
    names = {f.key for f in engine.backend.list("ws")}  # parts are never listed
    assert not any(PART_SUFFIX in name for name in names)
    if url == "local":
        assert not (store_dir / stale).exists() and (store_dir / fresh).exists()
        assert kept.read_text() == "a user's file"
    else:
        assert not fs.exists(f"/{root}/{stale}") and fs.exists(f"/{root}/{fresh}")


# -- a store written by someone else: links and special files are never followed ---------------


def outside_snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else b"<folder>"
        for p in sorted(folder.rglob("*"))
    }


def test_a_folder_link_in_the_store_gets_no_write_and_the_pass_reports_it(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    outside = tmp_path / "outside"
    write(outside, "a.txt", "not the store's")
    write(outside, "old.txt", "keep me")
    before = outside_snapshot(outside)
    write(workdir, "data/a.txt", "mine")
    write(workdir, "notes.md", "notes")
    write(workdir, "model.txt", "v1")
    write(workdir, "gone.txt", "g")
    (mirror(store_dir) / "data").parent.mkdir(parents=True)
    (mirror(store_dir) / "data").symlink_to(outside)
    engine = make_engine(workdir)

    report = engine.sync()
    assert sorted(report.uploaded) == ["gone.txt", "model.txt", "notes.md"]
    assert len(report.errors) == 1 and "ws/files/data" in report.errors[0]
    assert "symbolic link" in report.errors[0]
    assert engine.status()["state"] == "error"
    assert "ws/files/data" in engine.status()["store_skipped"]

    # Keeping a version (an overwrite) and a deletion (a move into versions) through a link.
    versions = store_dir / "ws" / ".gpuws" / "versions"
    versions.parent.mkdir(parents=True, exist_ok=True)
    versions.symlink_to(outside)
    write(workdir, "model.txt", "v2, longer")
    (workdir / "gone.txt").unlink()
    report = engine.sync(["model.txt", "gone.txt"])
    assert len(report.errors) == 2 and all("symbolic link" in e for e in report.errors)
    assert outside_snapshot(outside) == before
    # Without a place for the previous version, the store's copy is neither overwritten nor moved.
    assert (mirror(store_dir) / "model.txt").read_text() == "v1"
    assert (mirror(store_dir) / "gone.txt").read_text() == "g"
    changed, deleted, _, _ = engine.plan()  # all three stay to do, once the store is fixed
    assert sorted(f.path for f in changed) == ["data/a.txt", "model.txt"] and deleted == [
        "gone.txt"
    ]

    # Links replaced by real folders: the next pass does it all, and nothing is reported any more.
    (mirror(store_dir) / "data").unlink()
    versions.unlink()
    assert engine.sync().ok
    assert (mirror(store_dir) / "data" / "a.txt").read_text() == "mine"
    assert [v["size"] for v in engine.versions("model.txt")] == [2]
    assert engine.status()["store_skipped"] == {} and engine.status()["state"] == "idle"
    assert outside_snapshot(outside) == before


def test_restore_never_brings_a_file_a_store_link_points_at(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    write(workdir, "notes.md", "notes")
    make_engine(workdir).sync()
    secret = write(tmp_path / "host", "passwd", "root:x:0:0")
    write(tmp_path / "host", "ssh/id_rsa", "private")
    (mirror(store_dir) / "passwd").symlink_to(secret)
    (mirror(store_dir) / "ssh").symlink_to(tmp_path / "host" / "ssh")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, state="state2")
    report = engine.restore()
    assert report.restored == ["notes.md"] and not report.errors
    assert tree_files(fresh) == {"notes.md": b"notes"}
    assert set(engine.status()["store_skipped"]) == {"ws/files/passwd", "ws/files/ssh"}


def test_restore_skips_a_fifo_in_the_store_and_brings_the_rest(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    import threading

    write(workdir, "a.txt", "a")
    write(workdir, "sub/b.txt", "b")
    make_engine(workdir).sync()
    pipe = mirror(store_dir) / "sub" / "pipe"
    os.mkfifo(pipe)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    engine = make_engine(fresh, state="state2")
    done: list[Any] = []
    restorer = threading.Thread(target=lambda: done.append(engine.restore()), daemon=True)
    restorer.start()
    restorer.join(60)
    if restorer.is_alive():  # a regression: let the blocked read go, then fail
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        restorer.join(10)
        pytest.fail("restore blocked on a FIFO in the store")
    [report] = done
    assert sorted(report.restored) == ["a.txt", "sub/b.txt"] and not report.errors
    assert tree_files(fresh) == {"a.txt": b"a", "sub/b.txt": b"b"}
    assert not os.path.lexists(fresh / "sub" / "pipe")
    assert "FIFO" in engine.status()["store_skipped"]["ws/files/sub/pipe"]


class ModeKeepingBackend(LocalBackend):
    """A store whose downloads keep the stored file's mode (as a `shutil.copy2` or an rsync
    would), and that notes whether the restore lock is held while it is read."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.lock_held_while_reading: list[bool] = []
        self.engine: SyncEngine | None = None

    def read_into(
        self,
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Any = None,
        etag: str | None = None,
    ) -> int:
        size = super().read_into(key, fd, offset, length, progress, etag)
        os.fchmod(fd, os.stat(self._path(key)).st_mode & 0o7777)
        if self.engine is not None:
            self.lock_held_while_reading.append(self.engine.restore_lock.locked())
        return size


def test_nothing_restored_is_executable_whatever_the_store_says(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    """A hook under .git/hooks/ (or any script) from the store needs the user's own chmod to run."""
    for rel in (".git/hooks/post-commit", ".git/hooks/pre-push", "scripts/run.sh"):
        path = write(mirror(store_dir), rel, "#!/bin/sh\ntouch /tmp/owned\n")
        path.chmod(0o6755)  # executable, even setuid and setgid
    backend = ModeKeepingBackend(str(store_dir))
    engine = make_engine(workdir, backend=backend)
    backend.engine = engine
    report = engine.restore()
    assert sorted(report.restored) == [
        ".git/hooks/post-commit",
        ".git/hooks/pre-push",
        "scripts/run.sh",
    ]
    for rel in report.restored:
        mode = (workdir / rel).stat().st_mode
        assert mode & 0o7111 == 0 and mode & 0o600 == 0o600, (rel, oct(mode))
    assert backend.lock_held_while_reading == [True] * 3  # the Git tier waits for it
    assert not engine.restore_lock.locked()


def test_the_record_keeps_when_the_last_pass_ended_even_with_nothing_to_send(
    workdir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    engine = make_engine(workdir)
    engine.sync()
    sent_at = engine.index.get("a.txt").synced_at
    assert engine.sync().ok  # nothing changed, yet it is a sync: `jupyter gpuws status` says so
    assert engine.last_sync is not None and engine.last_sync > sent_at
    assert engine.index.last_pass() == engine.last_sync


def test_a_pass_that_fails_on_something_unforeseen_keeps_the_watchers_news(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    class Broken(LocalBackend):
        broken = True

        def put(self, local: str, key: str, *args: Any, **kwargs: Any) -> int:
            if self.broken:
                raise RuntimeError("a bug in a backend")
            return super().put(local, key, *args, **kwargs)

    backend = Broken(str(store_dir))
    engine = make_engine(workdir, backend=backend)
    write(workdir, "a.txt", "a")
    with pytest.raises(SyncError, match="Sync failed: a bug in a backend"):
        engine.sync(["a.txt"])
    assert engine.status()["state"] == "error"
    backend.broken = False
    # What the watcher had noticed comes with the next pass, not an hour later with the rescan.
    assert engine.sync(engine.take_dirty()).uploaded == ["a.txt"]


def test_a_large_file_sent_again_after_changing_mid_copy_is_counted_once_in_the_progress(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    """The panel's "N MiB of M MiB" never runs past its total: the abandoned copy's bytes are
    taken back and the total follows the file's new size (it read "599 MiB of 312 MiB")."""
    big = workdir / "big.bin"
    big.write_bytes(bytes(65 << 20))  # above the size whose progress is counted as it goes
    backend = ChangingSource(str(store_dir), big)
    engine = make_engine(workdir, backend=backend)
    progress = Progress()
    engine.sync(progress=progress)
    assert backend.puts == 2
    final = big.stat().st_size
    seen = progress.snapshot()
    assert (seen["bytes_done"], seen["bytes_total"]) == (final, final)
    assert (mirror(store_dir) / "big.bin").stat().st_size == final


@pytest.mark.parametrize("seen", ["rescan", "watcher"])
def test_a_file_replaced_by_a_folder_of_its_name_and_back_syncs_keeping_each_old_one(
    seen: str, workdir: Path, store_dir: Path, make_engine: Callable[..., SyncEngine]
) -> None:
    # What a pass is told: nothing (a full rescan), or the paths the watcher saw change.
    told = None if seen == "rescan" else ["data", "data/part1.csv"]
    engine = make_engine(workdir)
    write(workdir, "data", "a file")
    assert engine.sync().ok
    (workdir / "data").unlink()
    write(workdir, "data/part1.csv", "1,2\n")
    report = engine.sync(told)
    assert report.ok, report.errors
    assert tree_files(store_dir / "ws" / "files") == {"data/part1.csv": b"1,2\n"}
    assert len(engine.versions("data")) == 1  # the file it replaced, kept
    (workdir / "data" / "part1.csv").unlink()
    (workdir / "data").rmdir()
    write(workdir, "data", "a file again")
    report = engine.sync(told)
    assert report.ok, report.errors
    assert tree_files(store_dir / "ws" / "files") == {"data": b"a file again"}
    assert len(engine.versions("data/part1.csv")) == 1
    assert engine.status()["state"] == "idle" and engine.status()["pending_files"] == 0
