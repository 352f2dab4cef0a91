"""Helpers for the sync engine tests: trees of real files and engines over real stores."""

from __future__ import annotations

import filecmp
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from jupyter_gpu_ws.sync import SyncEngine, SyncSettings


def write(root: Path, rel: str, data: bytes | str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def tree_files(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path → content), skipping none."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def same_trees(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_trees(a / d, b / d) for d in cmp.common_dirs)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def make_engine(tmp_path: Path, store_dir: Path) -> Callable[..., SyncEngine]:
    engines: list[SyncEngine] = []

    def make(workdir: Path, store_url: str | None = None, state: str = "state", **options: Any) -> SyncEngine:
        backend = options.pop("backend", None)
        settings = SyncSettings(
            workdir=str(workdir),
            store_url=store_url or str(store_dir),
            workspace=options.pop("workspace", "ws"),
            state_dir=str(tmp_path / state),
            retry_backoff=0.01,
            **options,
        )
        engine = SyncEngine(settings, backend=backend)
        engine.open()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        try:
            engine.close()
        except Exception:
            pass
