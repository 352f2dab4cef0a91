"""A job's command fitted to the GPUs this runtime has: a job that asked for more GPUs than there
are runs on those there are, and a `torchrun` that started one process per asked GPU starts one
per GPU here (its distributed checkpoints reshard on load)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")
LAUNCHER_MODULE = "torch.distributed.run"


@dataclass
class Fitted:
    command: list[str]
    gpus: int | None  # the GPUs it runs on (CUDA_VISIBLE_DEVICES 0..n-1); None: none asked
    note: str | None  # what changed, in the user's words; None when it runs as asked


def fit_to_gpus(
    command: list[str], asked: int | None, available: int | None, relaunch: bool = False
) -> Fitted:
    """The command and GPU count a job runs with: min(asked, available) GPUs where this runtime
    has at least one (unknown or none: as asked, for the user's own CUDA_VISIBLE_DEVICES to
    make sense of), and a torchrun's process count that equalled the GPUs asked becomes the
    GPUs it runs on. More GPUs than asked keep the count asked: the user chose it."""
    if asked is None or available is None or available < 1 or available >= asked:
        return Fitted(list(command), asked, None)
    n = available
    fitted, flag_end = _with_nproc(command, asked, n)
    words = f"{'relaunched' if relaunch else 'runs'} on {n} GPU{'' if n == 1 else 's'} of the {asked} asked"
    if flag_end is not None:
        words += f": {shlex.join(fitted[:flag_end])}"
    return Fitted(fitted, n, words)


def _launcher_end(command: list[str]) -> int | None:
    """Where torchrun's own options start: after `torchrun`, or after `python … -m
    torch.distributed.run`; None when the command is not one."""
    if not command:
        return None
    if Path(command[0]).name == "torchrun":
        return 1
    if Path(command[0]).name.startswith("python"):
        for i, arg in enumerate(command[1:-1], start=1):
            if arg == "-m":
                return i + 2 if command[i + 1] == LAUNCHER_MODULE else None
            if not arg.startswith("-"):  # the script: python's own options are over
                return None
    return None


def _with_nproc(command: list[str], asked: int, n: int) -> tuple[list[str], int | None]:
    """The command with its launcher's `--nproc-per-node K` (or `=K`) made `n` where K is the
    count asked, and the index just past that option; unchanged and None otherwise."""
    start = _launcher_end(command)
    out = list(command)
    if start is None:
        return out, None
    for i in range(start, len(command)):
        arg = command[i]
        if arg == "--" or arg.endswith(".py"):  # the training script: its arguments are its own
            break
        for flag in NPROC_FLAGS:
            if arg == flag and i + 1 < len(command):
                if command[i + 1] != str(asked):
                    return out, None
                out[i + 1] = str(n)
                return out, i + 2
            if arg.startswith(f"{flag}="):
                if arg.split("=", 1)[1] != str(asked):
                    return out, None
                out[i] = f"{flag}={n}"
                return out, i + 1
    return out, None
