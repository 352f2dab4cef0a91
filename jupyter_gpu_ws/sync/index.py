"""The local record of what was synced: per path its size, mtime and (when known) content hash.

SQLite on the local disk, outside the work directory: a lookup per changed path, so an idle
workspace costs nothing and one change in a 100,000-file tree needs no walk and no listing.
Lost on a fresh machine, and rebuilt by the restore.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Record:
    path: str
    size: int
    mtime_ns: int
    hash: str | None
    synced_at: float


class SyncIndex:
    def __init__(self, db_path: str) -> None:
        os.makedirs(os.path.dirname(db_path) or ".", exist_ok=True)
        self.db_path = db_path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, "
            "mtime_ns INTEGER NOT NULL, hash TEXT, synced_at REAL NOT NULL)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")

    def get(self, path: str) -> Record | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM files WHERE path = ?", (path,)).fetchone()
        return Record(*row) if row else None

    def all(self) -> dict[str, Record]:
        with self._lock:
            return {row[0]: Record(*row) for row in self._db.execute("SELECT * FROM files")}

    def paths(self) -> Iterator[str]:
        with self._lock:
            rows = self._db.execute("SELECT path FROM files").fetchall()
        return (row[0] for row in rows)

    def paths_under(self, folder: str) -> list[str]:
        """Recorded paths inside `folder` (a folder deleted or moved away as a whole)."""
        prefix = folder.rstrip("/") + "/"
        with self._lock:
            rows = self._db.execute(
                "SELECT path FROM files WHERE path >= ? AND path < ?", (prefix, prefix[:-1] + "0")
            ).fetchall()
        return [row[0] for row in rows]

    def put_many(self, records: Iterable[Record]) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
                [(r.path, r.size, r.mtime_ns, r.hash, r.synced_at) for r in records],
            )
            self._db.execute("COMMIT")

    def delete_many(self, paths: Iterable[str]) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM files WHERE path = ?", [(p,) for p in paths])
            self._db.execute("COMMIT")

    def count_and_bytes(self) -> tuple[int, int]:
        with self._lock:
            count, total = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM files").fetchone()
        return int(count), int(total)

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def close(self) -> None:
        with self._lock:
            self._db.close()
