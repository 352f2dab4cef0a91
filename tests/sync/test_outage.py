"""A store that stops answering: the state turns to error with the reason at once, files are
not failed one timeout after another, and once the store answers again everything pending goes
by itself, with no multipart upload left behind. A real SeaweedFS, stopped and started again."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from jupyter_gpu_ws.sync.service import SyncService
from tests.sync.conftest import S3_ACCESS_KEY, S3_BUCKET, S3_SECRET_KEY, write
from tests.sync.s3server import S3Server, S3ServerError
from tests.waiting import elapsed_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture
def own_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A SeaweedFS of this test's own, which it may stop and start."""
    server = S3Server(tmp_path / "seaweedfs", S3_ACCESS_KEY, S3_SECRET_KEY)
    try:
        server.start()
        server.create_bucket(S3_BUCKET)
    except S3ServerError as err:
        pytest.fail(f"The SeaweedFS S3 server could not start: {err}", pytrace=False)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    yield server
    server.stop(grace=2)  # its data goes with the test


def stored(server: S3Server, prefix: str) -> dict[str, str]:
    client = server.client()
    out: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket=S3_BUCKET, Key=item["Key"])["Body"].read()
            out[item["Key"][len(prefix) :]] = hashlib.sha256(body).hexdigest()
    return out


def local(workdir: Path) -> dict[str, str]:
    return {
        p.relative_to(workdir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in workdir.rglob("*")
        if p.is_file()
    }


def test_a_store_outage_shows_at_once_and_heals_by_itself(
    own_s3: S3Server, workdir: Path, tmp_path: Path
) -> None:
    prefix = f"outage-{uuid.uuid4().hex[:8]}"
    engine = SyncEngine(
        SyncSettings(
            str(workdir),
            f"s3://{S3_BUCKET}/{prefix}",
            "ws",
            str(tmp_path / "state"),
            bandwidth_limit=8 * 2**20,
        )
    )
    engine.open()
    service = SyncService(engine, debounce=0.05, rescan_interval=3600)
    service.start()
    try:
        for i in range(10):
            write(workdir, f"before/{i}.txt", f"file {i}\n" * 50)
        elapsed_until(
            lambda: engine.pending() == (0, 0) and engine.last_sync,
            60,
            "the first files in the store",
        )

        # A large file starts going (a multipart upload at 8 MiB/s), and the store goes down
        # under it; then more work piles up.
        write(workdir, "model.bin", os.urandom(40 * 2**20))
        elapsed_until(
            lambda: (engine.status()["progress"] or {}).get("bytes_done", 0) > 0,
            30,
            "the large upload",
        )
        own_s3.stop()
        down = time.monotonic()
        for i in range(25):
            write(workdir, f"during/{i}.txt", f"written during the outage {i}\n" * 30)
        seen = elapsed_until(lambda: engine.status()["state"] == "error", 10, "the error state")
        status = engine.status()
        assert "store" in (status["last_error"] or "").lower() or status["store_down"]
        print(
            f"error shown {time.monotonic() - down:.1f} s after the store went down (waited {seen:.1f} s)"
        )
        # Everything written meanwhile waits, counted (the files of a folder the watcher saw
        # appear as one path included).
        try:
            elapsed_until(lambda: engine.pending()[0] == 26, 10, "the pending count")
        except AssertionError:
            listing = engine.pending_list(100)
            raise AssertionError(
                f"pending {listing['total']}: {sorted(f['path'] for f in listing['files'])}"
            ) from None
        time.sleep(3)  # an outage of some seconds: passes tried meanwhile fail fast
        assert engine.pending()[0] == 26 and engine.status()["state"] == "error"

        own_s3.start()  # the same ports, the same data
        back = time.monotonic()
        elapsed_until(
            lambda: engine.pending() == (0, 0) and engine.status()["state"] == "idle",
            60,
            "every pending file in the store, with no click",
        )
        print(f"converged {time.monotonic() - back:.1f} s after the store came back")
    finally:
        service.stop()
        engine.close()
    # Every file, byte for byte; the multipart upload the outage cut never became visible (its
    # parts, if the store kept them, wait for the bucket's lifecycle rule: docs/sync.md).
    assert stored(own_s3, f"{prefix}/ws/files/") == local(workdir)
