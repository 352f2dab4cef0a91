"""NvmlReader against the NVML test double: every figure, MIG, and each NVML failure."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.monitor.fake_nvml import FakeNvml
from jupyter_gpu_ws.monitor.nvml import INIT_RETRY_SECONDS, NvmlReader
from tests.conftest import GIB, gpu_spec, write_spec


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reader_for(path: Path, spec: dict[str, Any], clock: Clock | None = None) -> NvmlReader:
    write_spec(path, spec)
    return NvmlReader(FakeNvml(str(path)), clock=clock or Clock())


def test_reads_every_figure_of_every_gpu(tmp_path: Path) -> None:
    reading = reader_for(tmp_path / "g.json", gpu_spec()).read()
    assert reading.error is None
    assert reading.driver_version == "550.54.15" and reading.cuda_driver_version == "12.4"
    gpu0, gpu1 = reading.gpus
    assert (gpu0.index, gpu0.name, gpu0.utilization) == (0, "NVIDIA A100-SXM4-40GB", 87)
    assert (gpu0.memory_used, gpu0.memory_total) == (12 * GIB, 40 * GIB)
    assert (gpu0.temperature, gpu0.power_draw, gpu0.power_limit, gpu0.sm_clock) == (
        61,
        250.5,
        400.0,
        1410,
    )
    assert [(p.pid, p.memory_used) for p in gpu0.processes] == [(4242, 3 * GIB)]
    assert gpu0.uuid != gpu1.uuid
    assert gpu0.mig == []


def test_lists_mig_devices_and_their_processes(tmp_path: Path) -> None:
    gpu1 = reader_for(tmp_path / "g.json", gpu_spec()).read().gpus[1]
    assert [(m.index, m.memory_used, m.memory_total) for m in gpu1.mig] == [
        (0, GIB, 10 * GIB),
        (1, 0, 10 * GIB),
    ]
    assert [p.pid for p in gpu1.mig[0].processes] == [4343]
    assert gpu1.mig[0].uuid.startswith("MIG-") and gpu1.mig[0].uuid != gpu1.mig[1].uuid


def test_unsupported_figures_are_none_not_errors(tmp_path: Path) -> None:
    spec = gpu_spec()
    spec["gpus"][0]["errors"] = {
        q: "NOT_SUPPORTED" for q in ("power", "power_limit", "temperature", "clock", "utilization")
    }
    gpu = reader_for(tmp_path / "g.json", spec).read().gpus[0]
    assert (gpu.power_draw, gpu.power_limit, gpu.temperature, gpu.sm_clock, gpu.utilization) == (
        None,
    ) * 5
    assert gpu.memory_total == 40 * GIB


def test_process_list_without_permission_is_empty(tmp_path: Path) -> None:
    spec = gpu_spec()
    spec["gpus"][0]["errors"] = {"processes": "NO_PERMISSION"}
    reading = reader_for(tmp_path / "g.json", spec).read()
    assert reading.error is None and reading.gpus[0].processes == []


def test_unavailable_process_memory_is_none(tmp_path: Path) -> None:
    spec = gpu_spec()
    spec["gpus"][0]["processes"] = [{"pid": 7, "memory_used": 2**64 - 1}]
    assert reader_for(tmp_path / "g.json", spec).read().gpus[0].processes[0].memory_used is None


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("LIBRARY_NOT_FOUND", "No NVIDIA driver is installed (NVML library not found)"),
        ("DRIVER_NOT_LOADED", "The NVIDIA driver is not loaded"),
        ("NO_PERMISSION", "No permission to query the NVIDIA driver"),
        (
            "LIB_RM_VERSION_MISMATCH",
            "The NVIDIA driver and its library do not match; a reboot may be needed",
        ),
        ("UNKNOWN", "NVML failed to start: Unknown Error"),
    ],
)
def test_init_failure_gives_an_empty_list_and_the_reason(
    tmp_path: Path, code: str, reason: str
) -> None:
    reading = reader_for(tmp_path / "g.json", gpu_spec(init_error=code)).read()
    assert reading.gpus == [] and reading.error == reason


def test_no_gpu_at_all_is_reported(tmp_path: Path) -> None:
    reading = reader_for(tmp_path / "g.json", gpu_spec(gpus=[])).read()
    assert reading.gpus == [] and reading.error == "No NVIDIA GPU was found"


def test_failed_init_is_retried_only_after_a_pause(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "g.json"
    reader = reader_for(path, gpu_spec(init_error="DRIVER_NOT_LOADED"), clock)
    assert reader.read().gpus == []
    write_spec(path, gpu_spec())  # the driver comes up
    clock.now += INIT_RETRY_SECONDS / 2
    assert reader.read().gpus == []  # not retried yet: init is not hammered every tick
    clock.now += INIT_RETRY_SECONDS
    assert len(reader.read().gpus) == 2


def test_gpu_lost_mid_run_is_dropped_with_the_reason_then_recovers(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    reader = reader_for(path, gpu_spec())
    assert len(reader.read().gpus) == 2
    lost = gpu_spec()
    lost["gpus"][1]["errors"] = {"all": "GPU_IS_LOST"}
    write_spec(path, lost)
    reading = reader.read()
    assert [g.index for g in reading.gpus] == [0]
    assert reading.error == "GPU 1: GPU is lost"
    write_spec(path, gpu_spec())  # after a reset
    assert len(reader.read().gpus) == 2


def test_every_gpu_lost_gives_an_empty_list(tmp_path: Path) -> None:
    spec = gpu_spec()
    for gpu in spec["gpus"]:
        gpu["errors"] = {"memory": "GPU_IS_LOST"}
    reading = reader_for(tmp_path / "g.json", spec).read()
    assert reading.gpus == [] and "GPU is lost" in (reading.error or "")


def test_count_failure_is_an_error_not_a_crash(tmp_path: Path) -> None:
    reader = reader_for(tmp_path / "g.json", gpu_spec())
    reader.read()
    reader.nvml.nvmlShutdown()  # the driver goes away under the reader
    reading = reader.read()
    assert reading.gpus == [] and reading.error


def test_logs_one_line_per_problem_not_per_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "g.json"
    clock = Clock()
    reader = reader_for(path, gpu_spec(init_error="DRIVER_NOT_LOADED"), clock)
    with caplog.at_level(logging.INFO, logger="jupyter_gpu_ws.monitor.nvml"):
        for _ in range(10):
            reader.read()
            clock.now += INIT_RETRY_SECONDS + 1
        write_spec(path, gpu_spec())
        reader.read()
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "GPU monitor: The NVIDIA driver is not loaded",
        "GPU monitor: GPUs readable again",
    ]


def test_utilization_series_moves_between_reads(tmp_path: Path) -> None:
    spec = gpu_spec()
    spec["gpus"][0]["utilization"] = [10, 50, 90]
    reader = reader_for(tmp_path / "g.json", spec)
    values = {reader.read().gpus[0].utilization for _ in range(3)}
    assert values == {10, 50, 90}
