"""cgroup parsing from sample files, and figures bounded by container limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpu_ws.monitor.system import CgroupFigures, SystemReader, read_cgroup


def files(root: Path, contents: dict[str, str]) -> Path:
    for name, text in contents.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def proc_cgroup(tmp_path: Path, text: str) -> str:
    path = tmp_path / "proc-self-cgroup"
    path.write_text(text)
    return str(path)


V2_STAT = "anon 1000\nfile 900\ninactive_file 268435456\nactive_file 10\n"


def test_v2_memory_and_cpu_limits(tmp_path: Path) -> None:
    root = files(
        tmp_path / "cg",
        {
            "cgroup.controllers": "cpu memory",
            "memory.max": "4294967296\n",
            "memory.current": "1342177280\n",
            "memory.stat": V2_STAT,
            "cpu.max": "200000 100000\n",
            "cpu.stat": "usage_usec 5000000\nuser_usec 4000000\n",
        },
    )
    figures = read_cgroup(root, proc_cgroup(tmp_path, "0::/\n"))
    assert figures == CgroupFigures(
        version=2, memory_limit=4 * 2**30, memory_used=2**30, cpu_limit=2.0, cpu_usage_seconds=5.0
    )


def test_v2_without_limits(tmp_path: Path) -> None:
    root = files(
        tmp_path / "cg",
        {
            "cgroup.controllers": "cpu memory",
            "memory.max": "max",
            "memory.current": "100",
            "cpu.max": "max 100000",
            "cpu.stat": "usage_usec 1",
        },
    )
    figures = read_cgroup(root, proc_cgroup(tmp_path, "0::/\n"))
    assert (figures.version, figures.memory_limit, figures.cpu_limit) == (2, None, None)


def test_v2_follows_the_process_own_cgroup_path(tmp_path: Path) -> None:
    root = files(
        tmp_path / "cg",
        {
            "cgroup.controllers": "cpu memory",
            "user.slice/jupyter.scope/cgroup.controllers": "memory",
            "user.slice/jupyter.scope/memory.max": "1073741824",
            "user.slice/jupyter.scope/memory.current": "0",
        },
    )
    figures = read_cgroup(root, proc_cgroup(tmp_path, "0::/user.slice/jupyter.scope\n"))
    assert figures.memory_limit == 2**30


def test_v1_limits_and_unlimited_sentinel(tmp_path: Path) -> None:
    root = files(
        tmp_path / "cg",
        {
            "memory/memory.limit_in_bytes": "2147483648",
            "memory/memory.usage_in_bytes": "1610612736",
            "memory/memory.stat": "cache 5\ntotal_inactive_file 536870912\n",
            "cpu/cpu.cfs_quota_us": "150000",
            "cpu/cpu.cfs_period_us": "100000",
            "cpuacct/cpuacct.usage": "3000000000",
        },
    )
    cgroup_file = proc_cgroup(tmp_path, "4:memory:/\n2:cpu,cpuacct:/\n0::/\n")
    figures = read_cgroup(root, cgroup_file)
    assert figures == CgroupFigures(
        version=1, memory_limit=2 * 2**30, memory_used=2**30, cpu_limit=1.5, cpu_usage_seconds=3.0
    )
    (root / "memory/memory.limit_in_bytes").write_text("9223372036854771712")
    (root / "cpu/cpu.cfs_quota_us").write_text("-1")
    unlimited = read_cgroup(root, cgroup_file)
    assert (unlimited.memory_limit, unlimited.cpu_limit) == (None, None)


def test_no_cgroup_files_at_all(tmp_path: Path) -> None:
    assert read_cgroup(tmp_path / "missing", proc_cgroup(tmp_path, "")) == CgroupFigures()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_container_limits_replace_host_figures(tmp_path: Path) -> None:
    usage = {"seconds": 10.0}
    clock = Clock()

    def cgroup() -> CgroupFigures:
        return CgroupFigures(
            version=2,
            memory_limit=2**30,
            memory_used=2**29,
            cpu_limit=0.5,
            cpu_usage_seconds=usage["seconds"],
        )

    reader = SystemReader({"workdir": str(tmp_path)}, cgroup=cgroup, clock=clock)
    reader.read()
    clock.now += 2.0
    usage["seconds"] += 0.5  # 0.25 core busy over 2 s, of a 0.5-core quota: 50 %
    info = reader.read()
    assert info.limits == "cgroup"
    assert (info.memory_total, info.memory_used, info.cpu_count) == (2**30, 2**29, 0.5)
    assert info.cpu_percent == pytest.approx(50.0)


def test_host_figures_when_the_limits_exceed_the_host(tmp_path: Path) -> None:
    reader = SystemReader(
        {"workdir": str(tmp_path)},
        cgroup=lambda: CgroupFigures(version=2, memory_limit=2**62, cpu_limit=10_000.0),
    )
    info = reader.read()
    assert info.limits == "host" and info.memory_total < 2**62 and info.cpu_count < 10_000


def test_disks_of_each_folder_and_nearest_existing_parent(tmp_path: Path) -> None:
    reader = SystemReader(
        {"workdir": str(tmp_path), "store": str(tmp_path / "not" / "made" / "yet")},
        cgroup=CgroupFigures,
    )
    disks = {d.label: d for d in reader.read().disks}
    assert set(disks) == {"workdir", "store"}
    assert disks["workdir"].total > 0 and 0 < disks["workdir"].used <= disks["workdir"].total
    assert disks["store"].path == str(tmp_path / "not" / "made" / "yet")
