"""Keeps environment snapshots in the store: wheels first, then the snapshot, then the `latest` pointer.

    <workspace>/.gpuws/wheels/<wheel file>            wheels a restore installs without an index
    <workspace>/.gpuws/env/<stamp>-<hash12>.json      one snapshot
    <workspace>/.gpuws/env/<stamp>-<hash12>.txt       its requirements lock
    <workspace>/.gpuws/env/latest.json                {id, hash}: the newest complete snapshot

An interrupted save leaves at most wheels that no snapshot names yet, never a snapshot whose
wheels are missing, nor a `latest` that points at nothing.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from ..store import Store, version_stamp
from .commands import Log
from .errors import SnapshotNotFoundError, UnsafeSnapshotError
from .lock import index_options, lock_text
from .validate import safe_text, validate_snapshot
from .wheels import WHEELS, build_wheels, find_wheels, stored_wheels, wheel_identity

ENV = "env"
LATEST = f"{ENV}/latest.json"
SNAPSHOT_ID = re.compile(r"^[0-9]{8}T[0-9]{6}\.[0-9]{6}Z-[0-9a-f]{12}$")


@dataclass
class SaveResult:
    """What `save_snapshot` did: the snapshot's id, whether it is a new one, the wheels it added."""

    id: str
    new: bool
    wheels_added: list[str] = field(default_factory=list)
    not_reproducible: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SnapshotInfo:
    """One snapshot as listed, without reading it: id, when it was taken, its hash prefix."""

    id: str
    stamp: str
    hash12: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_id(snapshot: dict[str, Any]) -> str:
    """`<UTC stamp>-<first 12 of the content hash>`: sortable by time, telling by content."""
    return f"{version_stamp(snapshot['captured_at'])}-{snapshot['hash'][:12]}"


def needs_wheel(package: dict[str, Any]) -> bool:
    """Whether no index can give this package back (a folder, an editable, VCS, a URL)."""
    return (package.get("origin") or {}).get("kind", "index") not in ("index", "unknown")


def save_snapshot(
    store: Store,
    snapshot: dict[str, Any],
    python: str | None = None,
    keep_all_wheels: bool = False,
    log: Log | None = None,
    doing: Log | None = None,
) -> SaveResult:
    """Keep `snapshot` (from `capture`) in the store unless the latest one has the same content.

    Wheels of the packages no index can give back are built and stored first; with
    `keep_all_wheels` every package gets its wheel, so a restore needs no index. `python` is
    the interpreter that builds them (default: the snapshot's own). `doing` hears what is
    under way, in words.
    """
    latest = _usable_latest(store)
    # The stored snapshot with the same content, if there is one: nothing new to keep then.
    same = latest if latest and latest.get("hash") == snapshot["hash"] else None
    new = same is None
    if same is not None and not keep_all_wheels:
        return SaveResult(same["id"], new=False)
    kept = stored_wheels(store)
    wanted = [
        p
        for p in snapshot["packages"]
        if (needs_wheel(p) and new)
        or (keep_all_wheels and not find_wheels(kept, p["name"], p["version"]))
    ]
    added, failures = _store_wheels(
        store,
        wanted,
        python or snapshot["python"]["executable"],
        log,
        index_options(snapshot),
        doing,
    )
    if same is not None:
        return SaveResult(same["id"], new=False, wheels_added=added)
    kept = sorted(set(kept) | set(added))
    snapshot = dict(snapshot)
    snapshot["id"] = snapshot_id(snapshot)
    snapshot["wheels"] = {
        p["name"]: found[0]
        for p in snapshot["packages"]
        if (found := find_wheels(kept, p["name"], p["version"]))
    }
    snapshot["not_reproducible"] = [{"name": f.name, "message": f.message} for f in failures]
    # The lock and the snapshot only once the wheels are durable; the pointer last.
    store.backend.write_bytes(
        store.state_key(f"{ENV}/{snapshot['id']}.txt"), lock_text(snapshot).encode()
    )
    store.write_json(f"{ENV}/{snapshot['id']}.json", snapshot)
    store.write_json(LATEST, {"id": snapshot["id"], "hash": snapshot["hash"]})
    return SaveResult(
        snapshot["id"], new=True, wheels_added=added, not_reproducible=snapshot["not_reproducible"]
    )


def _usable_latest(store: Store) -> dict[str, Any] | None:
    """{id, hash} of the latest snapshot if it can be used; a refused one (or a pointer to
    nothing) counts as none, so the new snapshot replaces it whatever hash it claims."""
    try:
        latest = load_snapshot(store)
    except (SnapshotNotFoundError, UnsafeSnapshotError):
        return None
    return {"id": latest["id"], "hash": latest.get("hash")}


def _store_wheels(
    store: Store,
    packages: list[dict[str, Any]],
    python: str,
    log: Log | None,
    indexes: list[str],
    doing: Log | None = None,
) -> tuple[list[str], list[Any]]:
    """Build or fetch wheels for `packages` into a temporary folder, then put them in the store."""
    if not packages:
        return [], []
    with tempfile.TemporaryDirectory(prefix="gpuws-wheels-") as out_dir:
        failures = build_wheels(packages, python, out_dir, log, indexes, doing)
        names = {p["name"] for p in packages}
        added = []
        for filename in sorted(os.listdir(out_dir)):
            identity = wheel_identity(filename)
            if identity and identity[0] in names:  # not a build dependency pip left beside it
                store.backend.put(
                    os.path.join(out_dir, filename), store.state_key(f"{WHEELS}/{filename}")
                )
                added.append(filename)
        store.backend.flush()
    return added, failures


def list_snapshots(store: Store) -> list[SnapshotInfo]:
    """Every complete snapshot in the store, oldest first."""
    prefix = store.state_key(ENV)
    out = []
    for item in store.backend.list(prefix):
        name = item.key.rpartition("/")[2]
        stem = name[: -len(".json")]
        if name.endswith(".json") and SNAPSHOT_ID.match(stem):
            stamp, _, hash12 = stem.rpartition("-")
            out.append(SnapshotInfo(stem, stamp, hash12))
    return sorted(out, key=lambda info: info.id)


def load_snapshot(store: Store, snapshot_id: str | None = None) -> dict[str, Any]:
    """The snapshot with this id, or the latest one; SnapshotNotFoundError when there is none."""
    where = f"{store.backend.description}/{store.workspace}"
    if snapshot_id is None:
        latest = _read(store, LATEST, None)
        if not latest:
            raise SnapshotNotFoundError(
                f"No environment snapshot in the store {where}: take one with `jupyter gpuws env snapshot`"
            )
        if (
            not isinstance(latest, dict)
            or not isinstance(latest.get("id"), str)
            or not SNAPSHOT_ID.match(latest["id"])
        ):
            raise UnsafeSnapshotError(
                f"{LATEST} in {where} does not name a snapshot (see `jupyter gpuws env list`)"
            )
        snapshot_id = latest["id"]
    if not SNAPSHOT_ID.match(snapshot_id):
        raise SnapshotNotFoundError(
            f"Not a snapshot id: {safe_text(snapshot_id)} (see `jupyter gpuws env list`)"
        )
    snapshot = _read(store, f"{ENV}/{snapshot_id}.json", snapshot_id)
    if snapshot is None:
        raise SnapshotNotFoundError(
            f"No snapshot {snapshot_id} in the store {where} (see `jupyter gpuws env list`)"
        )
    try:
        validate_snapshot(snapshot)
    except UnsafeSnapshotError as err:
        raise UnsafeSnapshotError(err.reason, snapshot_id) from None
    snapshot["id"] = snapshot_id  # the file's name, checked above; never the text inside it
    return snapshot


def _read(store: Store, name: str, snapshot_id: str | None) -> Any:
    try:
        return store.read_json(name)
    except ValueError as err:  # not JSON (UnicodeDecodeError is one too)
        raise UnsafeSnapshotError(
            f"{name} is not JSON ({safe_text(str(err))})", snapshot_id
        ) from None
