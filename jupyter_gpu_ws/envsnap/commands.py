"""Runs pip and uv: their output to a log callback line by line, a failure as one readable line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable

Log = Callable[[str], None]
# How many of the tool's last error lines explain a failure.
ERROR_LINES = 3
# pip's notice about a newer pip is noise in a restore's log; colours are escape codes there.
QUIET = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "NO_COLOR": "1"}
# Terminal escapes (colours, links, cursor moves) and other control characters: a tool may send
# them anyway (a package's own build, FORCE_COLOR), and the panel and the CLI show text.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|[\x00-\x08\x0b-\x1f\x7f]"
)


def printable(line: str) -> str:
    """`line` without terminal escapes and control characters (tabs kept)."""
    return _ESCAPES.sub("", line)


def run_command(command: list[str], log: Log | None = None) -> str | None:
    """None when `command` succeeded, else why it failed (its last error lines)."""
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **QUIET},
        )
    except OSError as err:
        return f"cannot run {command[0]}: {err.strerror or err}"
    assert proc.stdout is not None
    for line in proc.stdout:
        line = printable(line.rstrip())
        if log:
            log(line)
        if line.strip():
            tail = (tail + [line.strip()])[-40:]
    if proc.wait() == 0:
        return None
    # pip says "ERROR: …"; uv says "error: …" or draws "× …" / "╰─▶ …".
    errors = [line for line in tail if "error" in line.lower() or line.startswith(("×", "╰─▶"))]
    return " ".join((errors or tail or [f"exit status {proc.returncode}"])[-ERROR_LINES:])


def find_uv() -> str | None:
    """uv on PATH, beside our interpreter, or from the `uv` Python package."""
    found = shutil.which("uv") or shutil.which("uv", path=os.path.dirname(sys.executable))
    if found:
        return found
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return None
