"""Previous versions under `.gpuws/versions/<path>/<stamp>`: the store's copy is kept before an
overwrite and a deletion is a move into them; at most one per path every `min_interval` seconds
(a copy that lived less long was a moment of a file being rewritten, not a version of it),
pruned by count per path and by age across the whole store (not only the paths a pass
touched), and counted, so the quota sees them."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from .backend import Backend, RemoteFile
from .errors import SyncError
from .layout import Store, version_stamp

log = logging.getLogger(__name__)


class Versions:
    def __init__(
        self,
        store: Store,
        keep: int,
        max_age: float,
        clock: Callable[[], float],
        fence: Callable[[], None],
        min_interval: float = 0.0,
    ) -> None:
        self.store = store
        self.backend: Backend = store.backend
        self.keep_count = max(0, keep)
        self.max_age = max_age
        self.clock = clock
        self.fence = fence
        self._lock = threading.Lock()
        self.min_interval = min_interval
        self._kept_at: dict[str, float] = {}  # path → when (monotonic) its last version was kept
        self._bytes: int | None = None  # known once the whole store was pruned (or counted)
        self._count: int | None = None

    @property
    def bytes(self) -> int | None:
        """The size of every kept version, once counted; kept up to date since."""
        with self._lock:
            return self._bytes

    @property
    def count(self) -> int | None:
        with self._lock:
            return self._count

    def _add(self, files: int, size: int) -> None:
        with self._lock:
            if self._bytes is not None and self._count is not None:
                self._bytes = max(0, self._bytes + size)
                self._count = max(0, self._count + files)

    # -- keeping -------------------------------------------------------------------------------

    def keep(self, rel: str, current: RemoteFile | None = None) -> None:
        """Before an overwrite: the store's current copy (`current`, when the caller looked
        already) becomes a version."""
        now = time.monotonic()
        with self._lock:
            last = self._kept_at.get(rel)
        if last is not None and now - last < self.min_interval:
            return  # one kept within the interval already
        key = self.store.file_key(rel)
        current = current or self.backend.stat(key)
        if current is None:
            return
        self.fence()
        self.backend.copy(key, self.store.version_key(rel, version_stamp(self.clock())))
        self._add(1, current.size)
        with self._lock:
            if len(self._kept_at) > 10_000:  # only recent ones matter
                self._kept_at = {
                    p: t for p, t in self._kept_at.items() if now - t < self.min_interval
                }
            self._kept_at[rel] = now

    def retire(self, rel: str) -> None:
        """A deletion: the store's copy moves into the versions."""
        key = self.store.file_key(rel)
        current = self.backend.stat(
            key
        )  # looked up again on a retry: a lost reply may have moved it
        if current is None:
            return
        self.fence()
        self.backend.move(key, self.store.version_key(rel, version_stamp(self.clock())))
        self._add(1, current.size)

    # -- pruning -------------------------------------------------------------------------------

    def prune(self, paths: Iterable[str] | None = None) -> int:
        """Remove versions beyond `keep` per path and older than `max_age`: of `paths`, or, with
        None, of the whole store (one listing), which also counts what the versions hold."""
        if paths is not None:
            paths = set(paths)
            if not paths:
                return 0
        cutoff = version_stamp(self.clock() - self.max_age)
        by_path: dict[str, list[tuple[str, int]]] = defaultdict(list)
        try:
            if paths is None:
                for rel, stamp, f in self.store.list_versions():
                    by_path[rel].append((stamp, f.size))
            else:
                for rel in paths:
                    for _, stamp, f in self.store.list_versions(rel):
                        by_path[rel].append((stamp, f.size))
        except SyncError as err:
            log.warning("Sync: cannot list the versions to prune them: %s", err)
            return 0
        removed = removed_bytes = 0
        total = count = 0
        for rel, versions in by_path.items():
            versions.sort()
            doomed = {stamp for stamp, _ in versions[: max(0, len(versions) - self.keep_count)]}
            doomed |= {stamp for stamp, _ in versions if stamp < cutoff}
            for stamp, size in versions:
                if stamp not in doomed:
                    total, count = total + size, count + 1
                    continue
                self.fence()
                self.backend.delete(self.store.version_key(rel, stamp))
                removed, removed_bytes = removed + 1, removed_bytes + size
        if paths is None:
            with self._lock:
                self._bytes, self._count = total, count
        else:
            self._add(-removed, -removed_bytes)
        return removed
