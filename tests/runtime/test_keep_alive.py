"""Why the keep-alive tells JupyterHub that this server is busy though nobody clicks: a tracked
run stepping, or a notebook's GPU working (RuntimeSupervisor._busy_reason), from the sampler's
own reading of NVML (the test double here) and the kernels' agents."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jupyter_gpu_ws.lifecycle import RuntimeSupervisor
from jupyter_gpu_ws.monitor.fake_nvml import FakeNvml
from jupyter_gpu_ws.monitor.kernels import KernelRef
from jupyter_gpu_ws.monitor.nvml import NvmlReader
from jupyter_gpu_ws.monitor.sampler import Sampler
from jupyter_gpu_ws.monitor.system import CgroupFigures, SystemReader
from tests.conftest import gpu_spec, write_spec

KERNEL_PID = 4242  # the process of gpu_spec's first GPU


def _supervisor(
    tmp_path: Path,
    utilization: int,
    kernel: bool,
    agents: dict[str, Any] | None = None,
    idle_percent: float = 5.0,
) -> RuntimeSupervisor:
    spec = gpu_spec()
    spec["gpus"][0]["utilization"] = utilization
    reader = NvmlReader(FakeNvml(str(write_spec(tmp_path / "gpus.json", spec))))
    kernels = {KERNEL_PID: KernelRef("k-1", "python3", "train.ipynb")} if kernel else {}
    sampler = Sampler(
        reader,
        SystemReader({"workdir": str(tmp_path)}, cgroup=CgroupFigures),
        kernels=lambda: kernels,
    )
    sampler.sample_once()
    supervisor = RuntimeSupervisor.__new__(RuntimeSupervisor)  # only what _busy_reason reads
    supervisor.sampler = sampler
    supervisor.settings = SimpleNamespace(gpu_idle_percent=idle_percent)  # type: ignore[assignment]
    supervisor.checkpoints = SimpleNamespace(agent_states=lambda: agents or {})  # type: ignore[assignment]
    return supervisor


def test_a_notebooks_busy_gpu_keeps_the_server_alive(tmp_path: Path) -> None:
    assert (
        _supervisor(tmp_path, 87, kernel=True)._busy_reason() == "GPU 0 is 87% busy for train.ipynb"
    )


def test_a_gpu_idle_below_the_threshold_or_busy_for_no_notebook_does_not(tmp_path: Path) -> None:
    assert _supervisor(tmp_path, 3, kernel=True)._busy_reason() is None
    assert _supervisor(tmp_path, 87, kernel=True, idle_percent=90)._busy_reason() is None
    # Another user's process (not a kernel of this server) keeps nobody's server alive.
    assert _supervisor(tmp_path, 87, kernel=False)._busy_reason() is None


def test_a_tracked_run_stepping_keeps_it_alive_and_one_that_stopped_does_not(
    tmp_path: Path,
) -> None:
    stepping = {"k-2": {"run": "train.ipynb", "stepped_at": time.time() - 1}}
    assert (
        _supervisor(tmp_path, 0, kernel=False, agents=stepping)._busy_reason()
        == "the tracked run train.ipynb is stepping"
    )
    stopped = {"k-2": {"run": "train.ipynb", "stepped_at": time.time() - 3600}}
    assert _supervisor(tmp_path, 0, kernel=False, agents=stopped)._busy_reason() is None
