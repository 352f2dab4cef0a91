"""Every store a user's platform gives them, through the product's own engine, against a real
server on 127.0.0.1: SeaweedFS S3 over HTTPS, Azurite (Azure Blob) and an SFTP server (fsspec);
plain S3 over HTTP runs the same way in tests/sync. For each: a round trip byte for byte, a
restore into an empty folder, versions on overwrite and delete, an encrypted workspace, two
runtimes racing for the lease, and a store that stops answering for 20 s and comes back with
nothing lost. GCS: see test_a_gcs_store_restores_what_it_holds (its emulator takes no writes)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.store.crypto import Encryption
from jupyter_gpu_ws.store.fsspec_store import SESSION_TIMEOUT
from jupyter_gpu_ws.store.objectstore import PART
from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from jupyter_gpu_ws.sync.service import SyncService
from tests.stores.conftest import BUCKET
from tests.sync.conftest import tree_files, write
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@dataclass
class StoreUnderTest:
    name: str
    url: str
    options: dict[str, Any]
    server: Any  # stop() and start() again at the same address
    exclusive: bool  # whether the lease is enforced (a compare-and-swap) on this store


@pytest.fixture(params=["s3-https", "azure", "sftp"])
def store(request: pytest.FixtureRequest, prefix: str) -> Iterator[StoreUnderTest]:
    if request.param == "s3-https":
        server = request.getfixturevalue("s3_https_env")
        yield StoreUnderTest("s3-https", f"s3://{BUCKET}/{prefix}", {}, server, True)
    elif request.param == "azure":
        server = request.getfixturevalue("azurite_env")
        yield StoreUnderTest("azure", f"az://{BUCKET}/{prefix}", {}, server, True)
    else:
        server = request.getfixturevalue("sftp_server")
        options = {
            k: v
            for k, v in server.storage_options().items()
            if k not in ("host", "port", "username")
        }
        yield StoreUnderTest("sftp", f"{server.url}{prefix}", options, server, False)


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Callable[..., SyncEngine]]:
    made: list[SyncEngine] = []

    def make(
        store: StoreUnderTest, workdir: Path, state: str = "state", **options: Any
    ) -> SyncEngine:
        workdir.mkdir(parents=True, exist_ok=True)
        engine = SyncEngine(
            SyncSettings(
                str(workdir),
                store.url,
                "ws",
                str(tmp_path / state),
                storage_options=dict(store.options),
                retry_backoff=0.05,
                **options,
            )
        )
        engine.open()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        try:
            engine.close()
        except Exception:  # noqa: BLE001 - a store a test stopped
            pass


def some_files(root: Path) -> dict[str, bytes]:
    files = {
        "notebook.ipynb": b'{"cells": []}',
        "src/train.py": b"print('train')\n",
        "data/empty.bin": b"",
        "names/ünïcødé and space.txt": "é".encode() * 300,
        "models/weights.bin": os.urandom(PART + 12345),
    }  # a multipart upload on the clouds
    for rel, data in files.items():
        write(root, rel, data)
    return files


def test_a_round_trip_and_a_restore_into_an_empty_folder_are_byte_for_byte(
    store: StoreUnderTest, tmp_path: Path, engines: Callable[..., SyncEngine]
) -> None:
    files = some_files(tmp_path / "work")
    engine = engines(store, tmp_path / "work")
    report = engine.sync()
    assert report.ok and sorted(report.uploaded) == sorted(files)
    assert engine.status()["lease_exclusive"] is store.exclusive
    if not store.exclusive:
        assert "one writer is not enforced" in engine.status()["lease_note"]
    fresh = engines(store, tmp_path / "fresh", state="state-fresh")
    restored = fresh.restore()
    assert not restored.errors and sorted(restored.restored) == sorted(files)
    assert tree_files(tmp_path / "fresh") == files


def test_versions_are_kept_on_overwrite_and_delete(
    store: StoreUnderTest, tmp_path: Path, engines: Callable[..., SyncEngine]
) -> None:
    work = tmp_path / "work"
    write(work, "notes.md", "first")
    write(work, "gone.txt", "to be deleted")
    engine = engines(store, work, settle_interval=0)
    engine.sync()
    write(work, "notes.md", "second, longer")
    (work / "gone.txt").unlink()
    report = engine.sync()
    assert (report.uploaded, report.deleted, report.errors) == (["notes.md"], ["gone.txt"], [])
    kept = {v["path"]: v for v in engine.versions("notes.md") + engine.versions("gone.txt")}
    assert set(kept) == {"notes.md", "gone.txt"}
    engine.restore_version("notes.md", kept["notes.md"]["version"], "notes.before.md")
    assert (work / "notes.before.md").read_text() == "first"


def test_an_encrypted_workspace_round_trips(
    store: StoreUnderTest, tmp_path: Path, engines: Callable[..., SyncEngine]
) -> None:
    files = some_files(tmp_path / "work")
    engine = engines(store, tmp_path / "work", encryption=Encryption("a passphrase for the matrix"))
    assert engine.sync().ok
    fresh = engines(
        store,
        tmp_path / "fresh",
        state="state-fresh",
        encryption=Encryption("a passphrase for the matrix"),
    )
    assert not fresh.restore().errors
    assert tree_files(tmp_path / "fresh") == files


def test_two_runtimes_racing_for_the_lease_exactly_one_writes(
    store: StoreUnderTest, tmp_path: Path
) -> None:
    if not store.exclusive:
        pytest.xfail(
            f"{store.name}: no compare-and-swap, the lease is advisory (said in the status)"
        )
    for round_ in range(5):
        start = threading.Barrier(2)
        made: list[SyncEngine] = []

        def open_one(name: str) -> None:
            engine = SyncEngine(
                SyncSettings(
                    str(tmp_path / f"{round_}-{name}"),
                    f"{store.url}-{round_}",
                    "ws",
                    str(tmp_path / f"state-{round_}-{name}"),
                    host=f"host-{name}",
                )
            )
            made.append(engine)
            start.wait()
            engine.open()

        for name in "ab":
            (tmp_path / f"{round_}-{name}").mkdir()
        threads = [threading.Thread(target=open_one, args=(name,)) for name in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        try:
            assert sorted(engine.writable for engine in made) == [False, True], f"round {round_}"
        finally:
            for engine in made:
                engine.close()


def test_a_store_that_stops_answering_for_20_s_loses_nothing(
    store: StoreUnderTest, tmp_path: Path, engines: Callable[..., SyncEngine]
) -> None:
    work = tmp_path / "work"
    write(work, "before.txt", "before")
    engine = engines(store, work, lease_ttl=30.0)
    service = SyncService(engine, debounce=0.05, rescan_interval=3600)
    service.start()
    away = False
    try:
        until(lambda: engine.pending() == (0, 0) and engine.last_sync, 30, "the first file stored")
        store.server.stop()
        away, stopped = True, time.monotonic()
        for i in range(5):
            write(work, f"during/{i}.txt", f"written while the store was away {i}")
        # A server that goes silent on an open SFTP session is given up on after the session's
        # bounded wait (SESSION_TIMEOUT, 10 s), twice where a second request waited behind the
        # first: seen 10.1 s and 20.0 s here, so the 20 s this allowed failed once in CI.
        until(
            lambda: engine.status()["state"] == "error",
            2 * SESSION_TIMEOUT + 15,
            "the error shown",
        )
        assert engine.pending()[0] == 5
        # Away for 20 s in all, from the stop: longer than the sync's longest wait between tries
        # (RETRY_MAX, 15 s), however long the error took to show.
        time.sleep(max(0.0, 20 - (time.monotonic() - stopped)))
        store.server.start()
        away = False
        until(
            lambda: engine.pending() == (0, 0) and engine.status()["state"] == "idle",
            60,
            "every file in the store, with no click",
        )
    finally:
        service.stop()
        if away:  # failed while it was away: back for the tests after this one
            store.server.start()
    fresh = engines(store, tmp_path / "fresh", state="state-fresh")
    assert not fresh.restore().errors
    assert tree_files(tmp_path / "fresh") == tree_files(work)


def test_a_gcs_store_restores_what_it_holds(gcs_env: Any, prefix: str, tmp_path: Path) -> None:
    """fake-gcs-server takes none of obstore's writes (tests/stores/gcsserver.py): the objects
    are put in place through its JSON API, and the engine's listing, reads and restore run on
    obstore's GCS store."""
    files = {"notebook.ipynb": b"{}", "data/part.bin": os.urandom(300_000)}
    for rel, data in files.items():
        gcs_env.upload(f"{prefix}/ws/files/{rel}", data)
    (tmp_path / "work").mkdir()
    engine = SyncEngine(
        SyncSettings(
            str(tmp_path / "work"),
            f"gs://{BUCKET}/{prefix}",
            "ws",
            str(tmp_path / "state"),
            storage_options={"allow_http": True},
        )
    )  # the emulator speaks plain HTTP
    report = engine.restore()
    engine.close()
    assert not report.errors and sorted(report.restored) == sorted(files)
    assert tree_files(tmp_path / "work") == files
