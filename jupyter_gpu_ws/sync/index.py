"""The local record of what was synced: per path its size, mtime and (when known) content hash.

SQLite on the local disk, outside the work directory: a lookup per changed path, so an idle
workspace costs nothing and one change in a 100,000-file tree needs no walk and no listing.
Lost on a fresh machine, and rebuilt by the restore. Paths are kept as key text (names.py):
SQLite takes only valid UTF-8, and a name may hold any bytes.

A pass may record files before the store has made them durable (the flush follows in the
background): those paths are also listed as unflushed, in the same transaction, until the flush
is done. After an unclean stop the engine forgets their records, and sends them again.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..store.names import decode, encode


class Record(NamedTuple):
    # A tuple, not a dataclass: a pass holds one per file, and the garbage collector stops
    # looking at a tuple of strings and numbers (a pass of 100,000 files spent 15 % of its
    # time in the collector).
    path: str
    size: int
    mtime_ns: int
    hash: str | None
    synced_at: float


# Paths looked up in one query (SQLite allows at least 999 parameters).
LOOKUP_CHUNK = 500
# A put_many or delete_many of more paths than this (and than an eighth of those recorded)
# counts the table again when next asked instead of looking each path up to keep the totals:
# one scan of the table is far cheaper than a lookup per path (a first pass of 100,000 files
# spent 16 % of its time writing its records, most of it in these lookups).
RECOUNT_FROM = 1000
# The meta key of when the last complete pass ended (what `jupyter gpuws status` says).
LAST_PASS = "last_pass"
# The meta key of the work directory, store and workspace the record is of: how a command run
# inside a work directory finds them again (synced_folders).
PLACE = "place"


log = logging.getLogger(__name__)


class SyncIndex:
    """Opened from `db_path`; a file that is not a readable record (corrupt, truncated, another
    program's) is moved aside and an empty record started, with `rebuilt` saying so. Every path
    is then unknown to the engine, which compares each with the store before writing it, so
    nothing is overwritten without a version and nothing is deleted."""

    def __init__(self, db_path: str) -> None:
        os.makedirs(os.path.dirname(db_path) or ".", exist_ok=True)
        self.db_path = db_path
        self._lock = threading.Lock()
        self.rebuilt: str | None = None
        try:
            self._open()
        except sqlite3.DatabaseError as err:
            try:
                self._db.close()
            except Exception:  # noqa: BLE001 - it may never have opened
                pass
            aside = f"{db_path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(db_path + suffix):
                    os.replace(db_path + suffix, aside + suffix)
            self.rebuilt = (
                f"The local sync record was unreadable ({err}) and was started afresh "
                f"(the old one is kept as {os.path.basename(aside)}): every file is compared "
                "with the store once before it is sent"
            )
            self._open()
        self._totals: tuple[int, int] | None = None  # (paths, bytes), once counted
        self._data_version: int | None = None  # SQLite's count of other connections' commits

    def _open(self) -> None:
        self._db = sqlite3.connect(self.db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, "
            "mtime_ns INTEGER NOT NULL, hash TEXT, synced_at REAL NOT NULL)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        # Recorded, not yet durable in the store; the rowid orders them against a flush.
        self._db.execute("CREATE TABLE IF NOT EXISTS unflushed (path TEXT PRIMARY KEY)")
        # Sent while still being written (a partial copy): never kept as a previous version.
        self._db.execute("CREATE TABLE IF NOT EXISTS partial (path TEXT PRIMARY KEY)")
        # A damaged file can open and fail only when read: read it whole once here.
        row = self._db.execute("PRAGMA quick_check").fetchone()
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {row[0] if row else 'no answer'}")

    def get(self, path: str) -> Record | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM files WHERE path = ?", (encode(path),)).fetchone()
        return _record(row) if row else None

    def get_many(self, paths: list[str]) -> dict[str, Record | None]:
        """The record of each of `paths` (None where there is none), LOOKUP_CHUNK to a query: a
        pass of 100,000 new files asks SQLite 200 times, not 100,000."""
        found: dict[str, Record] = {}
        keys = list(dict.fromkeys(encode(p) for p in paths))
        with self._lock:
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start : start + LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                for row in self._db.execute(f"SELECT * FROM files WHERE path IN ({marks})", chunk):
                    record = _record(row)
                    found[record.path] = record
        return {path: found.get(path) for path in paths}

    def all(self) -> dict[str, Record]:
        with self._lock:
            records = [_record(row) for row in self._db.execute("SELECT * FROM files")]
        return {record.path: record for record in records}

    def paths(self) -> Iterator[str]:
        with self._lock:
            rows = self._db.execute("SELECT path FROM files").fetchall()
        return (decode(row[0]) for row in rows)

    def paths_under(self, folder: str) -> list[str]:
        """Recorded paths inside `folder` (a folder deleted or moved away as a whole)."""
        # A name's key text is the key text of its folder, "/", then its own: a range still works.
        prefix = encode(folder.rstrip("/")) + "/"
        with self._lock:
            rows = self._db.execute(
                "SELECT path FROM files WHERE path >= ? AND path < ?", (prefix, prefix[:-1] + "0")
            ).fetchall()
        return [decode(row[0]) for row in rows]

    def _sizes(self, paths: list[str]) -> dict[str, int]:
        """The recorded size of each of `paths` that has a record (under the lock)."""
        out: dict[str, int] = {}
        for start in range(0, len(paths), LOOKUP_CHUNK):
            chunk = paths[start : start + LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            out.update(
                self._db.execute(
                    f"SELECT path, size FROM files WHERE path IN ({marks})", chunk
                ).fetchall()
            )
        return out

    def put_many(self, records: Iterable[Record], unflushed: bool = False) -> None:
        """Record `records`; `unflushed`: the store has not made them durable yet."""
        rows = [(encode(r.path), r.size, r.mtime_ns, r.hash, r.synced_at) for r in records]
        with self._lock:
            self._recount_if_many(len(rows))
            self._db.execute("BEGIN")
            try:
                before = self._sizes([row[0] for row in rows]) if self._totals is not None else {}
                self._db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)", rows)
                if unflushed:
                    # REPLACE gives a path recorded again a new, higher rowid.
                    self._db.executemany(
                        "INSERT OR REPLACE INTO unflushed VALUES (?)", [row[:1] for row in rows]
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if self._totals is not None:
                count, total = self._totals
                for path, size, *_ in {row[0]: row for row in rows}.values():
                    if path in before:
                        total += size - before[path]
                    else:
                        count, total = count + 1, total + size
                self._totals = (count, total)

    def _recount_if_many(self, n: int) -> None:
        """Under the lock: forget the totals before changing `n` paths where counting them again
        costs less than keeping them (RECOUNT_FROM)."""
        if self._totals is not None and n > max(RECOUNT_FROM, self._totals[0] // 8):
            self._totals = None

    def delete_many(self, paths: Iterable[str]) -> None:
        self._delete_keys(list(dict.fromkeys(encode(p) for p in paths)))

    def _delete_keys(self, paths: list[str]) -> None:
        """delete_many() of paths already in key text."""
        with self._lock:
            self._recount_if_many(len(paths))
            self._db.execute("BEGIN")
            try:
                before = self._sizes(paths) if self._totals is not None else {}
                self._db.executemany("DELETE FROM files WHERE path = ?", [(p,) for p in paths])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if self._totals is not None:
                self._totals = (
                    self._totals[0] - len(before),
                    self._totals[1] - sum(before.values()),
                )

    def unflushed_mark(self) -> int:
        """Taken before a flush: every path listed up to this mark is durable once it is done."""
        with self._lock:
            return int(
                self._db.execute("SELECT COALESCE(MAX(rowid), 0) FROM unflushed").fetchone()[0]
            )

    def unflushed_paths(self) -> list[str]:
        with self._lock:
            return [
                decode(row[0])
                for row in self._db.execute("SELECT path FROM unflushed ORDER BY rowid")
            ]

    def clear_unflushed(self, upto: int) -> None:
        """The flush that began after unflushed_mark() returned `upto` is done."""
        with self._lock:
            newest = self._db.execute("SELECT COALESCE(MAX(rowid), 0) FROM unflushed").fetchone()
            if upto >= newest[0]:
                # Everything: a DELETE without WHERE drops the table's pages at once instead of
                # removing 100,000 rows and their index entries one by one.
                self._db.execute("DELETE FROM unflushed")
            else:
                self._db.execute("DELETE FROM unflushed WHERE rowid <= ?", (upto,))

    def forget_unflushed(self, upto: int | None = None) -> list[str]:
        """Drop the records of paths not known to be durable (up to a mark, or all): a failed
        flush, or an unclean stop before one. The next pass sends them again."""
        with self._lock:
            query = "SELECT path FROM unflushed" + (" WHERE rowid <= ?" if upto is not None else "")
            paths = [row[0] for row in self._db.execute(query, () if upto is None else (upto,))]
        if paths:
            self._delete_keys(list(dict.fromkeys(paths)))
            with self._lock:
                self._db.executemany("DELETE FROM unflushed WHERE path = ?", [(p,) for p in paths])
        return [decode(p) for p in paths]

    def partial_paths(self) -> list[str]:
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT path FROM partial")]

    def set_partial(self, path: str, partial: bool) -> None:
        with self._lock:
            if partial:
                self._db.execute("INSERT OR REPLACE INTO partial VALUES (?)", (path,))
            else:
                self._db.execute("DELETE FROM partial WHERE path = ?", (path,))

    def count_and_bytes(self) -> tuple[int, int]:
        """How many paths are recorded and their total size: counted once, then kept up to
        date by put_many and delete_many, so a pass over one file never counts the table; and
        counted again whenever another process changed the record meanwhile (two servers on
        one state folder: the one that writes after the other stopped sees its records)."""
        with self._lock:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                self._totals, self._data_version = None, version
            if self._totals is None:
                count, total = self._db.execute(
                    "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM files"
                ).fetchone()
                self._totals = (int(count), int(total))
            return self._totals

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def last_pass(self) -> float | None:
        """When a pass from this work directory last ended with everything in the store (epoch
        seconds): as recorded, or, in a record from before that was kept, the last file sent."""
        value = self.get_meta(LAST_PASS)
        if value is not None:
            try:
                return float(value)
            except ValueError:
                pass
        with self._lock:
            row = self._db.execute("SELECT MAX(synced_at) FROM files").fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def record_pass(self, when: float) -> None:
        self.set_meta(LAST_PASS, repr(when))

    def note_place(self, workdir: str, store_url: str, workspace: str) -> None:
        """Say in the record which work directory, store and workspace it is of (written only
        when that changed, so an engine that only looks does not write)."""
        value = json.dumps(
            {"workdir": workdir, "store_url": store_url, "workspace": workspace}, sort_keys=True
        )
        if self.get_meta(PLACE) != value:
            self.set_meta(PLACE, value)

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass(frozen=True)
class SyncedFolder:
    """A work directory this machine has synced, as its record says."""

    workdir: str
    store_url: str
    workspace: str
    last_sync: float  # epoch seconds: the last complete pass, or the last file sent or restored


def synced_folders(state_dir: str) -> list[SyncedFolder]:
    """The work directories whose records in `state_dir` hold a sync (files, or a complete pass),
    newest first. Read only; a record that cannot be read, or that does not say its place (one
    written before records did), is passed over."""
    try:
        names = sorted(name for name in os.listdir(state_dir) if name.endswith(".sqlite3"))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            db = sqlite3.connect(Path(state_dir, name).as_uri() + "?mode=ro", uri=True)
            try:
                meta = dict(
                    db.execute(
                        "SELECT key, value FROM meta WHERE key IN (?, ?)", (PLACE, LAST_PASS)
                    )
                )
                newest = db.execute("SELECT MAX(synced_at) FROM files").fetchone()[0]
            finally:
                db.close()
            place = json.loads(meta[PLACE])
            when = float(meta[LAST_PASS]) if LAST_PASS in meta else newest
            if when is not None:
                found.append(
                    SyncedFolder(
                        str(place["workdir"]),
                        str(place["store_url"]),
                        str(place["workspace"]),
                        float(when),
                    )
                )
        except (sqlite3.Error, KeyError, ValueError, TypeError):
            continue
    return sorted(found, key=lambda f: -f.last_sync)


def _record(row: tuple[str, int, int, str | None, float]) -> Record:
    return Record(decode(row[0]), *row[1:])
