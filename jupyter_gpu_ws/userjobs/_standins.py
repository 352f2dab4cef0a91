"""Stand-ins for the leaves i31-leaves writes (joblog.py, failure.py, notebook.py), to their
signatures in the shared design, until that branch is merged; then this file goes."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO


class JobLog:
    def __init__(self, path: Path, max_bytes: int = 8 * 2**20, keep: int = 2) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep

    def follow(self, stream: IO[bytes]) -> threading.Thread:
        def run() -> None:
            out = open(self.path, "ab")
            for line in stream:
                if out.tell() + len(line) > self.max_bytes:
                    out.close()
                    for n in range(self.keep - 1, 0, -1):
                        if Path(f"{self.path}.{n}").exists():
                            Path(f"{self.path}.{n}").replace(f"{self.path}.{n + 1}")
                    self.path.replace(f"{self.path}.1")
                    out = open(self.path, "ab")
                out.write(line)
                out.flush()
            out.close()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def tail(self, lines: int = 20) -> list[str]:
        found: deque[str] = deque(maxlen=lines)
        for path in [Path(f"{self.path}.1"), self.path]:
            if path.exists():
                found.extend(path.read_bytes().decode("utf-8", "replace").splitlines())
        return list(found)

    def close(self) -> None:
        pass


@dataclass
class Outcome:
    state: str
    reason: str | None
    retryable: bool


def classify(returncode: int | None, log_tail: list[str], *, step: int | None = None, interrupted: bool = False,
             nan_loss: bool = False, oom_killed: bool = False) -> Outcome:
    if interrupted:
        return Outcome("interrupted", "stopped for the runtime's end", True)
    if returncode == 0:
        return Outcome("finished", None, False)
    for line in reversed(log_tail):
        if line.startswith(("SyntaxError", "ModuleNotFoundError", "FileNotFoundError")):
            return Outcome("failed", line.split(":")[0], False)
    return Outcome("failed", f"exit code {returncode}", True)


def oom_kills() -> int | None:
    return None
