"""The local record's running totals (count and bytes) against a count of the table itself."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from jupyter_gpu_ws.sync.index import Record, SyncIndex


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
