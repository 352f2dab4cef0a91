"""A mounted drive as the store (Google Drive on Colab): a real FUSE folder (tests/fusefs.py) that
stalls, stops answering ("Transport endpoint is not connected") or fills up mid-pass. Each shows
in the sync status within seconds with a reason that names the drive and what to do; the files
not written stay pending with that reason; nothing local is lost; healed, the runtime catches up
by itself."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from jupyter_gpu_ws.sync.service import SyncService
from tests.fusefs import MountedDrive, mounted_drive  # noqa: F401  (a fixture)
from tests.sync.conftest import eventually, tree_files, write

FILES = 12


def files_of(workdir: Path) -> dict[str, bytes]:
    return tree_files(workdir)


@pytest.fixture
def on_drive(tmp_path: Path, workdir: Path, mounted_drive: MountedDrive) -> Iterator[tuple[SyncEngine, SyncService]]:
    """An engine whose store is a folder on the drive, with the service that keeps it in sync."""
    for i in range(FILES):
        write(workdir, f"notes/{i}.txt", f"note {i}\n" * 20)
    engine = SyncEngine(SyncSettings(workdir=str(workdir), store_url=os.path.join(mounted_drive.mountpoint, "gpuws"),
                                     workspace="ws", state_dir=str(tmp_path / "state"), retry_backoff=0.05,
                                     create_store=True))
    engine.open()
    service = SyncService(engine, debounce=0.05, rescan_interval=3600)
    try:
        yield engine, service
    finally:
        mounted_drive.heal()
        service.stop()
        engine.close()


def stored(drive: MountedDrive) -> dict[str, bytes]:
    root = Path(drive.backing) / "gpuws" / "ws" / "files"
    return tree_files(root) if root.exists() else {}


def settled(engine: SyncEngine) -> bool:
    return engine.pending() == (0, 0) and engine.status()["state"] == "idle"


# -- the test drive itself --------------------------------------------------------------------

def test_the_test_drive_passes_files_through_counts_operations_and_fails_as_told(
        mounted_drive: MountedDrive) -> None:
    mnt = Path(mounted_drive.mountpoint)
    (mnt / "a.txt").write_text("hello")
    assert (Path(mounted_drive.backing) / "a.txt").read_text() == "hello"
    mounted_drive.reset_counts()
    assert (mnt / "a.txt").read_text() == "hello"
    counts = mounted_drive.counts()
    assert counts["open"] == 1 and counts["read"] >= 1 and counts["getattr"] >= 1
    mounted_drive.fault("disconnect")
    with pytest.raises(OSError) as err:
        (mnt / "a.txt").stat()
    assert err.value.errno == errno.ENOTCONN
    mounted_drive.fault("full")
    with pytest.raises(OSError) as err:
        (mnt / "b.txt").write_text("more")
    assert err.value.errno == errno.ENOSPC
    mounted_drive.heal()
    assert sorted(os.listdir(mnt)) == ["a.txt"]
