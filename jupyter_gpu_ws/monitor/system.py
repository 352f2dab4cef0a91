"""CPU, memory and disk figures through psutil, bounded by the container's cgroup limits."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# cgroup v1 writes "no limit" as a huge page-rounded number; anything above this is no limit.
_UNLIMITED = 2**60


@dataclass
class CgroupFigures:
    """What the process's cgroup says; None where it sets no limit or has no such file.

    Usage is read only where there is a limit: without one, the host's figures apply.
    """

    version: int | None = None
    memory_limit: int | None = None
    memory_used: int | None = None
    cpu_limit: float | None = None  # in cores, from the CFS quota
    cpu_usage_seconds: float | None = None


@dataclass
class DiskInfo:
    label: str
    path: str
    used: int
    total: int


@dataclass
class SystemInfo:
    cpu_percent: float
    cpu_count: float
    memory_used: int
    memory_total: int
    limits: str  # "cgroup" when a container limit bounds the figures, else "host"
    disks: list[DiskInfo] = field(default_factory=list)


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _stat_value(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return None


def _own_cgroup_dir(root: Path, proc_cgroup: str, controller: str | None) -> Path:
    """The cgroup directory of this process for a v1 controller (or v2 when None).

    Inside a container the namespace usually shows "/", and the files sit at the mount root;
    on a host the process's own path is appended.
    """
    base = root if controller is None else root / controller
    for line in (_read(Path(proc_cgroup)) or "").splitlines():
        _, controllers, rel = line.split(":", 2)
        wanted = controllers == "" if controller is None else controller in controllers.split(",")
        if wanted and rel not in ("", "/"):
            candidate = base / rel.lstrip("/")
            if candidate.is_dir():
                return candidate
    return base


class CgroupReader:
    """Reads memory and CPU limits and usage from cgroup v2, or v1 where v2 has none.

    Which files to read is settled once; each `read()` then opens just those few files,
    since it runs on every sampler tick.
    """

    def __init__(
        self, root: Path = Path("/sys/fs/cgroup"), proc_cgroup: str = "/proc/self/cgroup"
    ) -> None:
        v2 = _own_cgroup_dir(root, proc_cgroup, None)
        self.version: int | None = 2 if (v2 / "cgroup.controllers").exists() else None
        if self.version == 2:
            self.memory_dir = self.cpu_dir = self.cpuacct_dir = v2
        else:
            self.memory_dir = _own_cgroup_dir(root, proc_cgroup, "memory")
            self.cpu_dir = _own_cgroup_dir(root, proc_cgroup, "cpu")
            self.cpuacct_dir = _own_cgroup_dir(root, proc_cgroup, "cpuacct")

    def read(self) -> CgroupFigures:
        return self._read_v2() if self.version == 2 else self._read_v1()

    def _read_v2(self) -> CgroupFigures:
        v2 = self.memory_dir
        figures = CgroupFigures(version=2)
        limit = _read(v2 / "memory.max")
        if limit and limit != "max":
            figures.memory_limit = int(limit)
        # Usage files are costly to read (the kernel sums them up), and only matter under a limit.
        current = _read(v2 / "memory.current") if figures.memory_limit else None
        if current is not None:
            # Like `docker stats`: page cache that can be dropped is not counted as used.
            inactive = _stat_value(_read(v2 / "memory.stat"), "inactive_file") or 0
            figures.memory_used = max(int(current) - inactive, 0)
        cpu = (_read(v2 / "cpu.max") or "max").split()
        if cpu[0] != "max" and len(cpu) == 2:
            figures.cpu_limit = int(cpu[0]) / int(cpu[1])
        usage = _stat_value(_read(v2 / "cpu.stat"), "usage_usec") if figures.cpu_limit else None
        if usage is not None:
            figures.cpu_usage_seconds = usage / 1e6
        return figures

    def _read_v1(self) -> CgroupFigures:
        figures = CgroupFigures()
        limit = _read(self.memory_dir / "memory.limit_in_bytes")
        if limit is not None:
            figures.version = 1
            if int(limit) < _UNLIMITED:
                figures.memory_limit = int(limit)
            usage = (
                _read(self.memory_dir / "memory.usage_in_bytes") if figures.memory_limit else None
            )
            if usage is not None:
                inactive = (
                    _stat_value(_read(self.memory_dir / "memory.stat"), "total_inactive_file") or 0
                )
                figures.memory_used = max(int(usage) - inactive, 0)
        quota, period = (
            _read(self.cpu_dir / "cpu.cfs_quota_us"),
            _read(self.cpu_dir / "cpu.cfs_period_us"),
        )
        if quota and period and int(quota) > 0:
            figures.version = 1
            figures.cpu_limit = int(quota) / int(period)
        acct = _read(self.cpuacct_dir / "cpuacct.usage") if figures.cpu_limit else None
        if acct is not None:
            figures.cpu_usage_seconds = int(acct) / 1e9
        return figures


def read_cgroup(
    root: Path = Path("/sys/fs/cgroup"), proc_cgroup: str = "/proc/self/cgroup"
) -> CgroupFigures:
    """One reading of this process's cgroup (see `CgroupReader`)."""
    return CgroupReader(root, proc_cgroup).read()


class SystemReader:
    """Reads CPU %, memory and the disks of the given folders.

    Where the cgroup sets a CPU quota or memory limit below the host's, those are the
    figures that matter: a container with 2 cores on a 64-core host is full at 2 cores.
    """

    def __init__(
        self,
        disks: dict[str, str],
        cgroup: Callable[[], CgroupFigures] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.disks = disks
        self._cgroup = cgroup or CgroupReader().read
        self._clock = clock
        self._last_cpu: tuple[float, float] | None = None
        psutil.cpu_percent(interval=None)  # prime psutil's delta

    def read(self) -> SystemInfo:
        cg = self._cgroup()
        host_cpus = float(psutil.cpu_count() or 1)
        vm = psutil.virtual_memory()
        limited_cpu = cg.cpu_limit is not None and cg.cpu_limit < host_cpus
        limited_mem = cg.memory_limit is not None and cg.memory_limit < vm.total

        cpu_count = cg.cpu_limit if limited_cpu and cg.cpu_limit is not None else host_cpus
        if limited_cpu and cg.cpu_usage_seconds is not None:
            cpu_percent = self._cgroup_cpu_percent(cg.cpu_usage_seconds, cpu_count)
        else:
            cpu_percent = psutil.cpu_percent(interval=None)

        if limited_mem:
            memory_total = int(cg.memory_limit or 0)
            memory_used = int(cg.memory_used or 0)
        else:
            memory_total, memory_used = vm.total, vm.total - vm.available

        return SystemInfo(
            cpu_percent=round(cpu_percent, 1),
            cpu_count=round(cpu_count, 2),
            memory_used=memory_used,
            memory_total=memory_total,
            limits="cgroup" if (limited_cpu or limited_mem) else "host",
            disks=self._read_disks(),
        )

    def _cgroup_cpu_percent(self, usage: float, cores: float) -> float:
        now = self._clock()
        last, self._last_cpu = self._last_cpu, (now, usage)
        if last is None or now <= last[0]:
            return 0.0
        busy = (usage - last[1]) / (now - last[0])
        return max(0.0, min(100.0, 100.0 * busy / cores))

    def _read_disks(self) -> list[DiskInfo]:
        disks = []
        for label, path in self.disks.items():
            try:
                usage = psutil.disk_usage(_nearest_existing(path))
            except OSError:
                continue  # unreadable (a vanished mount): not shown rather than a failed tick
            disks.append(
                DiskInfo(label=label, path=os.fspath(path), used=usage.used, total=usage.total)
            )
        return disks


def _nearest_existing(path: str) -> str:
    """A folder not made yet (a store before its first sync) lives on its parent's disk."""
    current = Path(path)
    while not current.exists() and current != current.parent:
        current = current.parent
    return os.fspath(current)
