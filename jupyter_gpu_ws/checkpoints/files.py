"""Checkpoints on disk: one folder per checkpoint, complete only once its manifest is there.

    <root>/<run>/ckpt-000000123-20261129T154210Z/
        tensors.bin     the bytes of every tensor, back to back (written at disk speed)
        state.pt        every tracked object's state with tensors replaced by their place in
                        tensors.bin (torch.save of plain values: loads with weights_only=True)
        rng.pt          Python, NumPy and torch RNG states, as tensors and plain values
        manifest.json   written last: step, time, objects, and size + xxh3 of each file

A checkpoint is written under a temporary name, each file fsynced, the manifest written and
fsynced, then the folder renamed: a reader sees a whole checkpoint or none (restic's order:
data first, the index last).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

MANIFEST = "manifest.json"
FORMAT = 1
_NAME = re.compile(r"^ckpt-(\d{9})-(\d{8}T\d{6}Z)(?:-\d+)?$")
TMP_PREFIX = ".tmp-ckpt-"


class CheckpointError(Exception):
    """A checkpoint could not be written or loaded; the message names the object or file."""


@dataclass
class CheckpointInfo:
    path: Path
    step: int
    time: float
    bytes: int
    objects: list[str]
    request_id: str | None = None


def run_dir(root: str | os.PathLike[str], run: str) -> Path:
    """A run's folder: the run name (a notebook path) made into one safe folder name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", run.replace("/", "--")).strip("-") or "default"
    return Path(root) / safe


def checksum(path: Path) -> str:
    hasher = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_tmp_dir(run_path: Path) -> Path:
    run_path.mkdir(parents=True, exist_ok=True)
    path = run_path / f"{TMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir()
    return path


def finish(tmp: Path, step: int, objects: list[str], extra: dict[str, Any],
           known: dict[str, str] | None = None) -> CheckpointInfo:
    """Checksum and fsync the files, write the manifest last, and rename into place.

    `known` gives checksums computed while writing, so large files are not read again.
    """
    files = {}
    total = 0
    for path in sorted(tmp.iterdir()):
        fsync_file(path)
        size = path.stat().st_size
        files[path.name] = {"size": size, "xxh3": (known or {}).get(path.name) or checksum(path)}
        total += size
    return commit(tmp, step, {"objects": objects, "files": files, "bytes": total, **extra})


def commit(tmp: Path, step: int, fields: dict[str, Any]) -> CheckpointInfo:
    """Write the manifest (the files in it already fsynced) and rename the folder into place:
    the one moment the checkpoint becomes complete."""
    now = time.time()
    manifest = {"format": FORMAT, "step": step, "time": now, **fields}
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    final = tmp.parent / f"ckpt-{step:09d}-{stamp}"
    n = 1
    while final.exists():
        n += 1
        final = tmp.parent / f"ckpt-{step:09d}-{stamp}-{n}"
    os.rename(tmp, final)
    fsync_file(tmp.parent)
    return CheckpointInfo(final, step, now, int(manifest.get("bytes", 0)), list(manifest.get("objects", [])),
                          manifest.get("request_id"))


def folder_order(name: str) -> tuple[int, str, int] | None:
    """How a checkpoint folder's name sorts, newest last: (step, stamp, n); None for a name that
    is not a checkpoint folder's (a temporary folder of a write in progress, anything else)."""
    match = _NAME.match(name)
    if match is None:
        return None
    suffix = name[match.end(2) + 1:]
    return int(match.group(1)), match.group(2), int(suffix) if suffix else 1


def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        with open(path / MANIFEST, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def verify(path: Path, manifest: dict[str, Any], names: list[str] | None = None) -> str | None:
    """None if every file (or each of `names`) is there with its size and checksum; else what is
    wrong."""
    files = manifest.get("files", {})
    for name, meta in files.items() if names is None else ((n, files[n]) for n in names):
        file = path / name
        try:
            size = file.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != meta["size"]:
            return f"{name} has {size} bytes, the manifest says {meta['size']}"
        if checksum(file) != meta["xxh3"]:
            return f"{name} fails its checksum"
    return None


def complete_checkpoints(run_path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Folders with a manifest, newest step last (not yet verified)."""
    found = []
    if not run_path.is_dir():
        return found
    for entry in run_path.iterdir():
        if entry.is_dir() and _NAME.match(entry.name):
            manifest = read_manifest(entry)
            if manifest is not None:
                found.append((entry, manifest))
    return sorted(found, key=lambda item: (item[1]["step"], item[1]["time"]))


def find_checkpoint(root: str | os.PathLike[str], run: str, step: int | None = None) -> tuple[Path, dict[str, Any]]:
    """The newest complete checkpoint (of `step`, if given) that passes its checksums, of a run
    named as `track()` named it, or of a run folder, or a checkpoint folder itself; a
    CheckpointError that says what there is otherwise."""
    given = Path(run)
    if given.is_dir() and read_manifest(given) is not None:
        candidates = [(given, read_manifest(given) or {})]
    else:
        folder = given if given.is_dir() else run_dir(root, run)
        if not folder.is_dir():
            try:
                runs = sorted(p.name for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                runs = []
            raise CheckpointError(f"No checkpoints of {run!r} in {root}"
                                  + (f" (runs there: {', '.join(runs)})" if runs else " (it holds no runs)"))
        candidates = complete_checkpoints(folder)
    if step is not None:
        steps = sorted({int(m["step"]) for _, m in candidates})
        candidates = [(p, m) for p, m in candidates if int(m["step"]) == step]
        if not candidates:
            raise CheckpointError(f"No complete checkpoint of step {step}"
                                  + (f" (steps: {', '.join(map(str, steps))})" if steps else ""))
    problems = []
    for path, manifest in reversed(candidates):
        problem = verify(path, manifest)
        if problem is None:
            return path, manifest
        problems.append(f"{path.name}: {problem}")
    raise CheckpointError("No complete checkpoint" + (f" passes its checksums ({'; '.join(problems[:3])})"
                                                      if problems else f" of {run!r}"))


def info_of(path: Path, manifest: dict[str, Any]) -> CheckpointInfo:
    return CheckpointInfo(path, int(manifest["step"]), float(manifest["time"]), int(manifest.get("bytes", 0)),
                          list(manifest.get("objects", [])), manifest.get("request_id"))


def apply_retention(run_path: Path, keep_last: int, writing: Path | None = None) -> list[Path]:
    """Keep the newest `keep_last` complete checkpoints (never fewer than one); remove older
    ones and leftovers of interrupted writes. Returns what was removed."""
    removed = []
    complete = complete_checkpoints(run_path)
    for path, _ in complete[: max(0, len(complete) - max(1, keep_last))]:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    for entry in run_path.iterdir() if run_path.is_dir() else []:
        if entry.name.startswith(TMP_PREFIX) and entry != writing and not _alive(entry.name):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(tmp_name: str) -> bool:
    """A temporary folder of a process still running is being written: leave it."""
    try:
        pid = int(tmp_name[len(TMP_PREFIX):].split("-")[0])
    except ValueError:
        return False
    if pid == os.getpid():
        return False  # ours: `writing` names the one in flight
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
