"""Maps a process ID seen on a GPU to the Jupyter kernel, and so the notebook, that owns it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psutil

# Deep enough for kernel → DataLoader worker → subprocess chains; stops runaway walks.
MAX_DEPTH = 16


@dataclass(frozen=True)
class KernelRef:
    """A running kernel: its id, its kernelspec name and the notebook (or console) using it."""

    kernel_id: str
    name: str
    notebook: str | None


def find_owner(pid: int, kernels: Mapping[int, KernelRef]) -> KernelRef | None:
    """The kernel whose process is `pid` or one of its ancestors, if any.

    Training often runs in children of the kernel (DataLoader workers, `torchrun`,
    `subprocess`), so the parent chain is walked up to `MAX_DEPTH` steps.
    """
    if not kernels:
        return None
    current: int | None = pid
    for _ in range(MAX_DEPTH):
        if current is None or current <= 1:
            return None
        if current in kernels:
            return kernels[current]
        try:
            current = psutil.Process(current).ppid()
        except (psutil.Error, OSError):
            return None
    return None
