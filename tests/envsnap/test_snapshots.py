"""save_snapshot / list_snapshots / load_snapshot and the lock: what the store keeps, in what order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.envsnap import (
    SaveResult,
    SnapshotNotFoundError,
    capture,
    list_snapshots,
    load_snapshot,
    lock_text,
    save_snapshot,
)
from jupyter_gpu_ws.envsnap.capture import content_hash
from jupyter_gpu_ws.envsnap.lock import index_options
from jupyter_gpu_ws.envsnap.wheels import stored_wheels, wheel_identity
from tests.envsnap.conftest import EDITABLE, LOCAL, PINNED, packages, store_at

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


def with_version(snapshot: dict[str, Any], name: str, version: str) -> dict[str, Any]:
    changed = {
        **snapshot,
        "packages": [
            {**p, "version": version} if p["name"] == name else p for p in snapshot["packages"]
        ],
    }
    return {**changed, "hash": content_hash(changed)}


def test_every_package_gets_a_wheel_in_the_store_with_keep_all_wheels(
    snapshot_store: tuple[Path, SaveResult],
) -> None:
    root, result = snapshot_store
    store = store_at(root)
    kept = {wheel_identity(name) for name in stored_wheels(store)}
    snapshot = load_snapshot(store)
    assert result.new and snapshot["id"] == result.id
    assert set(packages(snapshot).items()) <= kept
    assert set(snapshot["wheels"]) == set(packages(snapshot))


def test_only_what_no_index_gives_back_is_built_by_default(
    source_python: str, tmp_path: Path
) -> None:
    store = store_at(tmp_path / "store")
    result = save_snapshot(store, capture(source_python, machine=False))
    assert {wheel_identity(name) for name in result.wheels_added} == {LOCAL, EDITABLE}
    assert result.not_reproducible == []


def test_same_content_again_is_not_a_new_snapshot(
    snapshot_store: tuple[Path, SaveResult], source_python: str
) -> None:
    root, first = snapshot_store
    again = save_snapshot(store_at(root), capture(source_python))
    assert not again.new and again.id == first.id and again.wheels_added == []
    assert [info.id for info in list_snapshots(store_at(root))] == [first.id]


def test_a_change_is_a_new_snapshot_and_the_latest(store_copy: Any) -> None:
    first = load_snapshot(store_copy)
    second = with_version({**first, "captured_at": first["captured_at"] + 60}, "six", "1.17.0")
    result = save_snapshot(store_copy, second)
    assert result.new and result.id != first["id"]
    assert [info.id for info in list_snapshots(store_copy)] == [first["id"], result.id]
    assert packages(load_snapshot(store_copy))["six"] == "1.17.0"
    assert packages(load_snapshot(store_copy, first["id"]))["six"] == PINNED["six"]


def test_latest_is_written_last_so_an_interrupted_save_keeps_the_previous_one(
    store_copy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_snapshot(store_copy)
    written = []

    def crash_on_snapshot(name: str, value: Any) -> None:
        written.append(name)
        raise OSError("power cut")

    monkeypatch.setattr(store_copy, "write_json", crash_on_snapshot)
    with pytest.raises(OSError):
        save_snapshot(store_copy, with_version(first, "six", "1.17.0"))
    monkeypatch.undo()
    assert written[0].endswith(".json") and written[0] != "env/latest.json"
    assert load_snapshot(store_copy)["id"] == first["id"]


def test_an_empty_store_has_no_snapshot_to_load(tmp_path: Path) -> None:
    with pytest.raises(SnapshotNotFoundError, match="No environment snapshot"):
        load_snapshot(store_at(tmp_path / "empty"))


def test_an_unknown_or_malformed_id_is_refused(store_copy: Any) -> None:
    with pytest.raises(SnapshotNotFoundError, match="No snapshot"):
        load_snapshot(store_copy, "20200101T000000.000000Z-0123456789ab")
    with pytest.raises(SnapshotNotFoundError, match="Not a snapshot id"):
        load_snapshot(store_copy, "../../etc/passwd")


def test_the_lock_is_stored_beside_the_snapshot_and_pins_every_package(
    snapshot_store: tuple[Path, SaveResult],
) -> None:
    root, result = snapshot_store
    text = (root / "ws" / ".gpuws" / "env" / f"{result.id}.txt").read_text()
    lines = {line for line in text.splitlines() if not line.startswith("#")}
    snapshot = json.loads((root / "ws" / ".gpuws" / "env" / f"{result.id}.json").read_text())
    assert lines == {f"{name}=={version}" for name, version in packages(snapshot).items()}


def test_lock_comments_what_cannot_be_reproduced_and_adds_pytorch_index() -> None:
    snapshot = {
        "packages": [
            {"name": "torch", "version": "2.5.1+cu121", "origin": {"kind": "index"}},
            {
                "name": "mine",
                "version": "0.1",
                "origin": {"kind": "editable", "url": "file:///gone/mine"},
            },
            {
                "name": "tool",
                "version": "2.0",
                "origin": {
                    "kind": "vcs",
                    "vcs": "git",
                    "url": "https://g/t.git",
                    "commit": "abc123",
                },
            },
        ]
    }
    lines = lock_text(snapshot).splitlines()
    assert "--extra-index-url https://download.pytorch.org/whl/cu121" in lines
    assert index_options(snapshot) == [
        "--extra-index-url",
        "https://download.pytorch.org/whl/cu121",
    ]
    assert "torch==2.5.1+cu121" in lines
    assert "tool @ git+https://g/t.git@abc123" in lines
    assert any(
        line.startswith("# mine==0.1: not reproducible: editable install from file:///gone/mine")
        for line in lines
    )
