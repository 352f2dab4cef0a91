"""The Linux inotify watcher of the sync service (sync/inotify.py) on real folders: what it
reports, and that it does not wake while nothing changes."""

from __future__ import annotations

import os
import queue
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync import inotify
from jupyter_gpu_ws.sync.inotify import Batch, TreeWatcher, WatchError
from tests.waiting import until

pytestmark = pytest.mark.skipif(not inotify.available(), reason="inotify is Linux only")


class Running:
    """A TreeWatcher read on its own thread, as the service does; reports land in a queue."""

    def __init__(
        self, root: Path, quiet_ms: int = 20, start: bool = True, **options: object
    ) -> None:
        self.watcher = TreeWatcher(str(root), **options)  # type: ignore[arg-type]
        self.reports: queue.Queue[Batch | None | Exception] = queue.Queue()
        self.tid = 0
        self.thread = threading.Thread(target=self._run, args=(quiet_ms,), daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Begin reading: the kernel has queued every event since the watches were added."""
        self.thread.start()
        while not self.tid:
            time.sleep(0.001)

    def _run(self, quiet_ms: int) -> None:
        self.tid = threading.get_native_id()
        try:
            for batch in self.watcher.changes(quiet_ms):
                self.reports.put(batch)
        except Exception as err:  # noqa: BLE001 - handed to the test
            self.reports.put(err)

    def next(self, timeout: float = 5.0) -> Batch | None | Exception:
        return self.reports.get(timeout=timeout)

    def collect(self, until: set[str], timeout: float = 5.0) -> set[str]:
        """Reports merged until they cover `until`."""
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while not until <= seen:
            batch = self.next(max(0.01, deadline - time.monotonic()))
            assert isinstance(batch, Batch), batch
            seen |= batch.paths
        return seen

    def asleep(self) -> bool:
        """The thread sleeps in its untimed poll: it has read every event queued before this
        call (a queued event wakes it, and a poll entered with one waiting returns at once) and
        has handed over every report (the watcher yields before it polls again)."""
        task = Path(f"/proc/self/task/{self.tid}")
        state = task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
        call = task.joinpath("syscall").read_text().split()
        # poll(fds, n, -1) on x86-64; ppoll(fds, n, NULL, ...) elsewhere and from newer libcs.
        untimed = (call[0] == "7" and call[3] == "0xffffffff") or (
            call[0] in ("73", "271") and call[3] == "0x0"
        )
        return state == "S" and untimed

    def settle(self) -> list[Batch | None | Exception]:
        """Every report of the changes made so far, once the watcher has made them all."""
        until(self.asleep, 10, "the watcher's thread asleep in its untimed poll")
        reports = []
        while not self.reports.empty():
            reports.append(self.reports.get_nowait())
        return reports

    def wakeups(self) -> int:
        """The thread's context switches so far: each wake-up from a sleep adds one."""
        text = Path(f"/proc/self/task/{self.tid}/status").read_text()
        return sum(
            int(line.split()[1])
            for line in text.splitlines()
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
        )

    def stop(self) -> None:
        self.watcher.close()
        self.thread.join(5)
        assert not self.thread.is_alive()
        self.watcher.release()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "skipped").mkdir()
    return root


@pytest.fixture
def running(tree: Path) -> Iterator[Running]:
    watching = Running(tree, skip=lambda rel, path: rel == "skipped")
    yield watching
    watching.stop()


def test_changes_in_nested_folders_are_reported_by_relative_path(
    running: Running, tree: Path
) -> None:
    (tree / "src" / "pkg" / "mod.py").write_text("x = 2\n")
    (tree / "notes.md").write_text("hello")
    assert running.collect({"src/pkg/mod.py", "notes.md"}) == {"src/pkg/mod.py", "notes.md"}
    (tree / "notes.md").unlink()
    assert running.collect({"notes.md"}) == {"notes.md"}


def test_a_burst_of_writes_is_one_report_after_the_quiet_time(tree: Path) -> None:
    # The burst is written before the watcher reads: written while it reads, a pause of the
    # writer longer than the quiet time (a loaded machine) rightly makes a report of its own.
    running = Running(tree, start=False)
    try:
        with open(tree / "big.bin", "wb") as f:
            for _ in range(50):
                f.write(b"x" * 65536)
                f.flush()
        running.start()
        assert running.next() == Batch({"big.bin"}, set())  # closed: not being written any more
        with pytest.raises(queue.Empty):
            running.next(0.2)
    finally:
        running.stop()


def test_a_file_still_open_for_writing_says_so(running: Running, tree: Path) -> None:
    with open(tree / "log.txt", "w") as f:
        f.write("first line\n")
        f.flush()
        # The creation and the write, in one report or (on a loaded machine) two.
        reports = running.settle()
        assert reports and all(r == Batch({"log.txt"}, {"log.txt"}) for r in reports), reports
    assert running.next() == Batch({"log.txt"}, set())  # the close


def test_a_new_folder_is_reported_whole_and_watched_from_then_on(
    running: Running, tree: Path
) -> None:
    (tree / "data" / "raw").mkdir(parents=True)
    (tree / "data" / "raw" / "a.csv").write_text("1,2\n")
    assert "data" in running.collect({"data"})
    running.settle()  # and whatever else the first writes made
    (tree / "data" / "raw" / "a.csv").write_text("3,4\n")
    assert running.collect({"data/raw/a.csv"}) == {"data/raw/a.csv"}


def test_a_moved_folder_is_reported_under_both_names_and_followed(
    running: Running, tree: Path
) -> None:
    (tree / "src").rename(tree / "lib")
    assert running.collect({"src", "lib"}) == {"src", "lib"}
    (tree / "lib" / "pkg" / "mod.py").write_text("x = 3\n")
    assert running.collect({"lib/pkg/mod.py"}) == {"lib/pkg/mod.py"}
    assert not [rel for rel in running.watcher.wds if rel.startswith("src")]


def test_a_skipped_folder_is_not_watched(running: Running, tree: Path) -> None:
    assert "skipped" not in running.watcher.wds
    (tree / "skipped" / "cache.bin").write_text("ignored")
    (tree / "seen.txt").write_text("seen")
    assert running.collect({"seen.txt"}) == {"seen.txt"}


def test_nothing_changing_wakes_nothing(running: Running, tree: Path) -> None:
    (tree / "a.txt").write_text("a")
    running.collect({"a.txt"})
    running.settle()
    before = running.wakeups()
    time.sleep(1.0)
    # A polling watcher (watchfiles wakes every `step` ms) would have switched ~100 times.
    assert running.wakeups() - before == 0


def test_the_work_directory_going_away_ends_the_watch_with_a_clear_error(tree: Path) -> None:
    watching = Running(tree)
    shutil.rmtree(tree)
    error = None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        item = watching.next()
        if isinstance(item, Exception):
            error = item
            break
    assert isinstance(error, WatchError) and "was moved or deleted" in str(error)
    watching.thread.join(5)
    watching.watcher.release()


def test_a_missing_work_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WatchError, match="does not exist"):
        TreeWatcher(str(tmp_path / "nope"))


def test_close_ends_the_watch_at_once(tree: Path) -> None:
    watching = Running(tree)
    started = time.monotonic()
    watching.stop()
    assert time.monotonic() - started < 1.0
    assert os.path.isdir(tree)


def test_a_work_directory_reached_through_a_link_is_watched(tree: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-work"
    link.symlink_to(tree, target_is_directory=True)
    watching = Running(link)
    try:
        (tree / "src" / "pkg" / "mod.py").write_text("x = 9\n")
        assert watching.collect({"src/pkg/mod.py"}) == {"src/pkg/mod.py"}
    finally:
        watching.stop()


def overflowing_file_count() -> int:
    """Empty files whose creation queues more events (a create and a close each) than the
    kernel keeps for one watcher (fs.inotify.max_queued_events), with some to spare."""
    return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text()) // 2 + 2000


def test_an_overflowing_queue_is_reported_as_a_rescan(tree: Path) -> None:
    watcher = TreeWatcher(str(tree))
    try:
        for i in range(overflowing_file_count()):  # nobody reads meanwhile: the queue overflows
            (tree / "src" / f"f{i:05d}").touch()
        reports = watcher.changes(20)
        assert next(reports) is None  # "look at everything", not a partial list of paths
        (tree / "after.txt").write_text("x")  # and it goes on watching
        assert next(reports) == Batch({"after.txt"}, set())
    finally:
        watcher.release()
