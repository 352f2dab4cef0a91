"""The local record: its running totals (count and bytes) against a count of the table itself, the
flush marks, and the work directories it tells this machine synced."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from jupyter_gpu_ws.sync.index import (
    RECOUNT_FROM,
    Record,
    SyncedFolder,
    SyncIndex,
    synced_folders,
)


def counted(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        count, total = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM files").fetchone()
    return count, total


def test_totals_follow_every_put_replace_and_delete(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    index = SyncIndex(str(db))
    rng = random.Random(7)
    paths = [f"d{i % 13}/f{i}.txt" for i in range(1200)]
    index.put_many(Record(p, rng.randrange(10_000), 1, None, 0.0) for p in paths[:300])
    assert index.count_and_bytes() == counted(db)  # counted once here, kept from now on
    for _ in range(60):
        if rng.random() < 0.6:
            batch = rng.sample(paths, rng.randrange(1, 700))  # new paths and replaced ones
            batch += batch[:3]  # the same path twice in one batch: the last one wins
            index.put_many(Record(p, rng.randrange(10_000), 2, None, 0.0) for p in batch)
        else:
            index.delete_many(rng.sample(paths, rng.randrange(1, 700)) + ["never-recorded.txt"])
        assert index.count_and_bytes() == counted(db)
    index.close()
    reopened = SyncIndex(str(db))
    assert reopened.count_and_bytes() == counted(db)
    reopened.close()


def test_totals_stay_right_when_many_paths_change_at_once(tmp_path: Path) -> None:
    # More than RECOUNT_FROM paths at once: the table is counted again when next asked instead
    # of each path being looked up first.
    db = tmp_path / "index.sqlite"
    index = SyncIndex(str(db))
    rng = random.Random(11)
    paths = [f"d{i % 17}/f{i}.txt" for i in range(12_000)]
    index.put_many(Record(p, rng.randrange(10_000), 1, None, 0.0) for p in paths[:500])
    assert index.count_and_bytes() == counted(db)
    statements: list[str] = []
    index._db.set_trace_callback(statements.append)  # which queries the record makes
    for size in (RECOUNT_FROM + 1, 5_000, 40, 8_000, 3, 2_500):
        batch = rng.sample(paths, size)
        recorded = counted(db)[0]
        statements.clear()
        index.put_many(Record(p, rng.randrange(10_000), 2, None, 0.0) for p in batch)
        looked_up = any(q.startswith("SELECT path, size") for q in statements)
        assert looked_up == (size <= max(RECOUNT_FROM, recorded // 8))  # many: no lookup per path
        assert index.count_and_bytes() == counted(db)
        index.delete_many(rng.sample(paths, size // 2 + 1))
        assert index.count_and_bytes() == counted(db)
    index.close()


def test_a_flush_clears_only_what_was_recorded_before_it_began(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    index = SyncIndex(str(db))
    index.put_many([Record("durable.txt", 5, 1, None, 0.0)])
    index.put_many(
        [Record("a.txt", 1, 1, None, 0.0), Record("b.txt", 2, 1, None, 0.0)], unflushed=True
    )
    mark = index.unflushed_mark()
    # Recorded while the flush runs: "a.txt" again (written anew) and "c.txt".
    index.put_many(
        [Record("a.txt", 3, 2, None, 0.0), Record("c.txt", 4, 1, None, 0.0)], unflushed=True
    )
    index.clear_unflushed(mark)
    assert index.unflushed_paths() == ["a.txt", "c.txt"]
    index.close()

    # An unclean stop here: the reopened record forgets what may not be durable, totals too.
    reopened = SyncIndex(str(db))
    assert sorted(reopened.forget_unflushed()) == ["a.txt", "c.txt"]
    assert reopened.get("a.txt") is None and reopened.get("c.txt") is None
    assert reopened.get("b.txt") is not None and reopened.get("durable.txt") is not None
    assert reopened.unflushed_paths() == [] and reopened.count_and_bytes() == counted(db) == (2, 7)
    assert reopened.forget_unflushed() == []
    reopened.close()


def test_a_failed_flush_forgets_up_to_its_mark_only(tmp_path: Path) -> None:
    index = SyncIndex(str(tmp_path / "index.sqlite"))
    index.put_many([Record("a.txt", 1, 1, None, 0.0)], unflushed=True)
    mark = index.unflushed_mark()
    index.put_many([Record("b.txt", 2, 1, None, 0.0)], unflushed=True)
    assert index.forget_unflushed(mark) == ["a.txt"]
    assert index.unflushed_paths() == ["b.txt"] and index.get("b.txt") is not None
    assert index.count_and_bytes() == (1, 2)
    index.close()


def test_the_records_tell_which_folders_this_machine_synced_and_to_where(tmp_path: Path) -> None:
    state = tmp_path / "state"
    synced = SyncIndex(str(state / "a.sqlite3"))
    synced.note_place("/home/me/proj", "s3://bucket/me", "me-proj")
    synced.record_pass(1000.0)
    restored = SyncIndex(str(state / "b.sqlite3"))  # a restore records files, and no pass
    restored.note_place("/home/me/other", "/mnt/store", "me-other")
    restored.put_many([Record("a.txt", 1, 1, None, 2000.0)])
    looked = SyncIndex(str(state / "c.sqlite3"))  # a status that only looked: nothing synced
    looked.note_place("/home/me/looked", "/mnt/store", "me-looked")
    older = SyncIndex(str(state / "d.sqlite3"))  # a record from before records said their place
    older.record_pass(3000.0)
    (state / "e.sqlite3").write_bytes(b"not a record")
    for index in (synced, restored, looked, older):
        index.close()
    assert synced_folders(str(state)) == [
        SyncedFolder("/home/me/other", "/mnt/store", "me-other", 2000.0),
        SyncedFolder("/home/me/proj", "s3://bucket/me", "me-proj", 1000.0),
    ]
    assert (
        state / "e.sqlite3"
    ).read_bytes() == b"not a record"  # read only: nothing moved or changed
    assert synced_folders(str(tmp_path / "missing")) == [] and not (tmp_path / "missing").exists()
