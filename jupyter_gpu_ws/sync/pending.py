"""What differs from the store and why, kept true: the files waiting to go, going or failing,
and those that cannot be synced for a local reason (unreadable, a name too long), each with
its reason, so the panel never says "all saved" when something is not in the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from .index import Record
from .links import entry_of, is_link_item
from .scan import LocalFile, present

# How many pending paths a status check re-examines (a lstat each) for having vanished.
RECHECK_LIMIT = 5000


@dataclass
class PendingFile:
    path: str
    size: int
    state: str = "waiting"  # waiting, writing (still being written), uploading, failing, deleting
    error: str | None = None
    since: float = 0.0
    note: str | None = None  # why it waits, where that is not an error


@dataclass
class LocalProblem:
    """A file (or folder, path ending in '/') that cannot be synced for a reason of its own; it is
    not tried again until it changes (its size or mtime) or a Persist now asks for everything."""

    path: str
    reason: str
    size: int = 0
    mtime_ns: int = 0


class PendingSet:
    """Fed by the watcher (one path at a time), set whole by each full plan, and told by each
    pass what it did; a path that vanished without a record is dropped whenever it is looked at."""

    def __init__(self, workdir: str, record_of: Callable[[str], Record | None]) -> None:
        self.workdir = workdir
        self.record_of = record_of
        self._lock = threading.Lock()
        self._items: dict[str, PendingFile] = {}
        self.problems: dict[str, LocalProblem] = {}
        self._scanned: set[str] = set()  # the problems the last full scan found (scan_problems)

    # -- what differs ----------------------------------------------------------------------------

    def note(self, rel: str, local: LocalFile | None, record: Record | None, exists: bool) -> None:
        """One path, as it is now: a file differing from its record is pending; a recorded file
        that is gone is a deletion to carry; anything else is not pending."""
        with self._lock:
            if local is not None and is_link_item(rel):
                self.problems.pop(entry_of(rel), None)  # the link points inside again
            if local is not None and not (
                record is not None
                and (record.size, record.mtime_ns) == (local.size, local.mtime_ns)
            ):
                self._set(rel, local.size, "waiting")
                self._clear_problem_if_changed(rel, local)
            elif local is None and record is not None and not exists:
                self._set(rel, 0, "deleting")
            else:
                self._items.pop(rel, None)
            if local is None and not exists:
                # A folder that went away (a checkpoint renamed into place, a tree deleted):
                # nothing under it is pending any more unless recorded (then it is a deletion).
                prefix = rel.rstrip("/") + "/"
                for path in [p for p in self._items if p.startswith(prefix)]:
                    if self.record_of(path) is None:
                        del self._items[path]
                for path in [p for p in self.problems if p.startswith(prefix) or p == rel]:
                    del self.problems[path]

    def include(self, changed: Iterable[LocalFile], deleted: Iterable[str]) -> None:
        """What a pass over some paths found to differ (the files of a new folder, which the
        watcher reports as one path, among them)."""
        with self._lock:
            for f in changed:
                if not self._known(f):
                    self._set(f.path, f.size, "waiting")
            for rel in deleted:
                self._set(rel, 0, "deleting")

    def replace(self, changed: Iterable[LocalFile], deleted: Iterable[str]) -> None:
        """After a full plan: exactly these differ (their states and errors are kept)."""
        now = time.time()
        with self._lock:
            items: dict[str, PendingFile] = {}
            for f in changed:
                if self.problems and self._known(f):
                    continue  # listed with its reason among the problems, not as waiting
                old = self._items.get(f.path)
                if old is None:
                    items[f.path] = PendingFile(f.path, f.size, since=now)
                else:
                    items[f.path] = old
                    old.size = f.size
            for rel in deleted:
                old = self._items.get(rel)
                items[rel] = old if old is not None else PendingFile(rel, 0, "deleting", since=now)
            self._items = items

    def _set(self, rel: str, size: int, state: str) -> None:
        item = self._items.get(rel)
        if item is None:
            self._items[rel] = PendingFile(rel, size, state, since=time.time())
        else:
            item.size = size
            if item.state not in ("failing", "writing"):
                item.state = state

    # -- what a pass does ------------------------------------------------------------------------

    def writing(self, rel: str, size: int, settle: float, every: float) -> None:
        """A file held back because it is still being written (a copy goes `every` seconds)."""
        with self._lock:
            item = self._items.setdefault(rel, PendingFile(rel, size, since=time.time()))
            item.size, item.state, item.error = size, "writing", None
            item.note = (
                f"still being written: it goes once it has not changed for {settle:g} s, "
                f"and as it is every {every:g} s meanwhile"
            )

    def uploading(self, rel: str, note: str | None = None) -> None:
        with self._lock:
            item = self._items.get(rel)
            if item is not None:
                item.state, item.note = "uploading", note

    def done(self, rel: str) -> None:
        self.done_many((rel,))

    def done_many(self, rels: Iterable[str]) -> None:
        with self._lock:
            for rel in rels:
                self._items.pop(rel, None)
                self.problems.pop(rel, None)

    def failing(self, rel: str, size: int, error: str) -> None:
        with self._lock:
            item = self._items.setdefault(rel, PendingFile(rel, size, since=time.time()))
            item.state, item.error = "failing", error

    def waiting(self, rels: Iterable[str]) -> None:
        """A pass ended (stopped, cancelled) before these were tried: they wait again."""
        with self._lock:
            for rel in rels:
                item = self._items.get(rel)
                if item is not None and item.state == "uploading":
                    item.state = "waiting"

    def held(self, why: str) -> None:
        """The store stopped a pass: each file still waiting says why (the next try clears it)."""
        with self._lock:
            for item in self._items.values():
                if item.state == "waiting":
                    item.note = f"waiting for the store: {why}"

    # -- local problems --------------------------------------------------------------------------

    def problem(self, rel: str, reason: str, local: LocalFile | None = None) -> None:
        with self._lock:
            self._items.pop(rel, None)
            self.problems[rel] = LocalProblem(
                rel, reason, local.size if local else 0, local.mtime_ns if local else 0
            )

    def scan_problems(self, found: dict[str, str]) -> None:
        """What a full scan found that cannot be synced (an unreadable folder, a link pointing
        outside, a name that takes the links' suffix): those it no longer finds are mended."""
        with self._lock:
            for rel in self._scanned - found.keys():
                self.problems.pop(rel, None)
            for rel, reason in found.items():
                self._items.pop(rel, None)
                self.problems[rel] = LocalProblem(rel, reason)
            self._scanned = set(found)

    def clear_problem(self, rel: str) -> None:
        with self._lock:
            self.problems.pop(rel, None)

    def without_known_problems(self, files: list[LocalFile]) -> list[LocalFile]:
        """`files` less those that failed for a local reason and have not changed since: they
        are not tried again."""
        with self._lock:
            if not self.problems:
                return files
            return [f for f in files if not self._known(f)]

    def _known(self, f: LocalFile) -> bool:
        known = self.problems.get(f.path)
        return known is not None and (known.size, known.mtime_ns) == (f.size, f.mtime_ns)

    def forget_problems(self) -> None:
        with self._lock:
            self.problems.clear()

    def _clear_problem_if_changed(self, rel: str, local: LocalFile) -> None:
        known = self.problems.get(rel)
        if known is not None and (known.size, known.mtime_ns) != (local.size, local.mtime_ns):
            del self.problems[rel]

    # -- reading ---------------------------------------------------------------------------------

    def _prune_vanished(self) -> None:
        """Drop what is gone from the work directory and was never in the store."""
        with self._lock:
            candidates = [p for p, item in self._items.items() if item.state != "deleting"][
                :RECHECK_LIMIT
            ]
        gone = [p for p in candidates if not present(self.workdir, p)]
        gone = [p for p in gone if self.record_of(p) is None]
        if gone:
            with self._lock:
                for path in gone:
                    item = self._items.get(path)
                    if item is not None and item.state != "uploading":
                        del self._items[path]

    def totals(self) -> tuple[int, int]:
        self._prune_vanished()
        with self._lock:
            return len(self._items), sum(item.size for item in self._items.values())

    def paths(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def listing(self, limit: int = 200) -> dict[str, Any]:
        """The pending files (failing first, then uploading, then waiting; largest first within
        each) and the files that cannot be synced, for the panel's expandable list."""
        self._prune_vanished()
        order = {"failing": 0, "uploading": 1, "deleting": 2, "writing": 3, "waiting": 4}
        with self._lock:
            items = sorted(
                self._items.values(), key=lambda i: (order.get(i.state, 9), -i.size, i.path)
            )
            problems = sorted(self.problems.values(), key=lambda p: p.path)
            return {
                "files": [asdict(item) for item in items[:limit]],
                "total": len(items),
                "problems": [asdict(problem) for problem in problems[:limit]],
                "problems_total": len(problems),
            }
