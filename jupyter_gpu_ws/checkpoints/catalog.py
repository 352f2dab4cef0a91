"""The runs a work directory holds checkpoints of: each one's name and newest step (what a new
job may resume); as the Checkpoints view lists them, each distributed run's complete checkpoints
with their size per rank, and whether the newest loads on this machine ("saved on 8 ranks: loads
on the 2 GPUs here"), and any run folder's newest checkpoints (a job's plain process). Read from
the manifests alone: a few small reads."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import dcpfiles
from .files import MAX_RUN_NAME, complete_checkpoints, real_folders, run_dir

SHOWN = 5  # checkpoints listed per run, newest first


@dataclass(frozen=True)
class SavedRun:
    name: str  # as its newest checkpoint's manifest names it, else its folder's name
    folder: str  # its folder's name under the root
    step: int  # its newest complete checkpoint's step


def saved_runs(root: Path) -> list[SavedRun]:
    """The runs under `root` with at least one complete checkpoint, by folder name. A folder
    whose name starts with "." (a checkpoint being written) and a link to one elsewhere are
    not runs of it."""
    found = []
    for folder in sorted(real_folders(root)):
        if folder.name.startswith("."):
            continue
        complete = complete_checkpoints(folder)
        if not complete:
            continue
        manifest = complete[-1][1]  # its step checked a whole number (files.py)
        name = manifest.get("run")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_RUN_NAME:
            name = folder.name
        found.append(SavedRun(name, folder.name, int(manifest["step"])))
    return found


def distributed_runs(
    root: Path,
    extra_runs: Iterable[tuple[str, str]] = (),
    gpus: list[dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """By run folder: the runs under `root` (and the (root, run) pairs of live runs kept
    elsewhere) whose newest checkpoint was saved through DCP."""
    # Real folders only: a link to a folder elsewhere is not one of the runs, and is not read.
    folders = {str(entry): entry for entry in real_folders(root) if not entry.name.startswith(".")}
    for other_root, run in extra_runs:
        path = run_dir(other_root, run)
        folders.setdefault(str(path), path)
    out: dict[str, dict[str, Any]] = {}
    for key, folder in sorted(folders.items()):
        found = [(p, m) for p, m in complete_checkpoints(folder) if m.get("kind") == dcpfiles.KIND]
        if not found:
            continue
        newest = found[-1][1]
        out[key] = {
            "run": newest.get("run") or folder.name,
            "folder": str(folder),
            "checkpoints": [
                describe(path, manifest) for path, manifest in reversed(found[-SHOWN:])
            ],
            "resumable": resumable_here(newest, gpus or []),
        }
    return out


def run_checkpoints(folder: Path) -> list[dict[str, Any]]:
    """A run folder's newest complete checkpoints, newest first, whatever saved them: DCP (a
    torchrun run's) or one plain process (a job's, whose checkpoints have no ranks)."""
    return [
        describe(path, manifest)
        for path, manifest in reversed(complete_checkpoints(folder)[-SHOWN:])
    ]


def describe(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint as a run lists it; one saved by a plain process is its one rank's."""
    ranks = sorted(manifest.get("ranks") or [], key=lambda r: r.get("rank", 0))
    return {
        "step": manifest.get("step"),
        "time": manifest.get("time"),
        "bytes": manifest.get("bytes"),
        "world_size": manifest.get("world_size") or 1,
        "mesh": manifest.get("mesh"),
        "path": str(path),
        "bytes_per_rank": [r.get("bytes", 0) for r in ranks] or [manifest.get("bytes") or 0],
        "request_id": manifest.get("request_id"),
    }


def resumable_here(manifest: dict[str, Any], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether a DCP checkpoint loads on this machine's GPUs (DCP reshards it to any number of
    ranks; what can stop it is memory), in one sentence."""
    saved = int(manifest.get("world_size") or 1)
    ranks = f"{saved} rank{'s' * (saved != 1)}"
    total = int(manifest.get("bytes") or 0)
    sharded = (manifest.get("mesh") or {}).get("parallelism") == "sharded"
    if not gpus:
        return {
            "saved_on": saved,
            "gpus_here": 0,
            "fits": None,
            "message": f"saved on {ranks}: loads here on the CPU (no GPU found), in one process or under torchrun",
        }
    here = len(gpus)
    # Model and optimizer state on each GPU: a share of it when sharded, all of it when each rank
    # holds a replica (DDP). Activations come on top: this only rules out what cannot fit.
    per_gpu = total / here if sharded else total
    smallest = min(int(g.get("memory_total") or 0) for g in gpus)
    fits = smallest == 0 or per_gpu <= smallest
    message = f"saved on {ranks}: loads on the {here} GPU{'s' * (here != 1)} here"
    if saved != here:
        message += f" (resharded {saved} → {here})"
    if not fits:
        message += f", but its state needs about {_gib(per_gpu)} per GPU and a GPU here has {_gib(smallest)}"
    return {
        "saved_on": saved,
        "gpus_here": here,
        "fits": fits,
        "bytes_per_gpu": int(per_gpu),
        "message": message,
    }


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
