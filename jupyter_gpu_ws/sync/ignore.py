"""Which paths of the work directory are mirrored: gitignore-syntax rules and a size limit."""

from __future__ import annotations

from pathlib import Path

import pathspec

IGNORE_FILE = ".gpuwsignore"

# Caches, environments and build output: rebuilt, not restored.
DEFAULT_EXCLUDES = [
    ".ipynb_checkpoints/",
    "__pycache__/",
    "*.pyc",
    ".venv/",  # and any folder with a pyvenv.cfg or conda-meta/: see scan.py
    "node_modules/",
    ".cache/",
    ".Trash-*/",
    ".nfs*",
    ".DS_Store",
    "*.gpuws-part",  # our own temporary files
    ".~*.gpuws-part-*",
]


class IgnoreRules:
    """Default excludes plus the work directory's `.gpuwsignore` (re-read when it changes)."""

    def __init__(self, workdir: str, extra: list[str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.extra = list(extra or [])
        self._mtime: int | None = -1
        self._spec = pathspec.GitIgnoreSpec.from_lines(DEFAULT_EXCLUDES + self.extra)
        self.reload()

    def reload(self) -> None:
        path = self.workdir / IGNORE_FILE
        try:
            mtime: int | None = path.stat().st_mtime_ns
        except OSError:
            mtime = None
        if mtime == self._mtime:
            return
        lines = DEFAULT_EXCLUDES + self.extra
        if mtime is not None:
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
        self._spec = pathspec.GitIgnoreSpec.from_lines(lines)
        self._mtime = mtime

    def ignored(self, rel: str, is_dir: bool = False) -> bool:
        """`rel` uses '/' separators, relative to the work directory."""
        return self._spec.match_file(rel + "/" if is_dir else rel)
