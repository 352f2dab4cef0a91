"""Launching distributed_run.py under a real `torchrun` (CPU, gloo) from tests, and reading what
it wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import torch

SCRIPT = Path(__file__).with_name("distributed_run.py")
ROOT = Path(__file__).resolve().parents[2]


class Run:
    """One `torchrun --standalone` (a free port: fixed ones are taken on shared machines)."""

    def __init__(
        self, nproc: int, *args: str, log: Path, env: dict[str, str] | None = None
    ) -> None:
        environment = dict(os.environ if env is None else env)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT), environment.get("PYTHONPATH")])
        )
        environment["OMP_NUM_THREADS"] = "1"
        self.log = log
        self._out = open(log, "ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={nproc}",
                "--monitor-interval=0.2",
                str(SCRIPT),
                *args,
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )

    def wait(self, timeout: float = 240) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"torchrun did not end within {timeout} s:\n{self.text()[-4000:]}"
            ) from None
        finally:
            self._out.close()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL to torchrun and every worker."""
        try:
            parent = psutil.Process(self.process.pid)
            for process in [*parent.children(recursive=True), parent]:
                process.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
        self.process.wait(30)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.process.poll() is None:
            self.kill()
        self._out.close()


def run(
    nproc: int,
    *args: str,
    log: Path,
    env: dict[str, str] | None = None,
    expect: int | None = 0,
    timeout: float = 240,
) -> str:
    """Run to the end; the output. `expect` None: any exit status (a run that kills itself)."""
    with Run(nproc, *args, log=log, env=env) as started:
        code = started.wait(timeout)
        text = started.text()
    if expect is not None:
        assert code == expect, f"torchrun exited with {code}:\n{text[-6000:]}"
    return text


def losses(out: Path, rank: int) -> dict[int, str]:
    """Step → loss (exact, as float.hex) of one rank; a later line for a step wins (a resume)."""
    found: dict[int, str] = {}
    path = out / f"losses-{rank}.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.strip():
            entry = json.loads(line)
            found[entry["step"]] = entry["loss"]
    return found


def load(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two nested states differ (tensors bitwise, with dtype and shape); [] when equal."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
        return [] if same else [where or "."]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(map(str, set(a) ^ set(b)))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: lengths {len(a)} and {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=False))
            for d in differences(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]
