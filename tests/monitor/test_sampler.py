"""The sampler: bounded history, one read per tick for any number of listeners, clean stop."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_gpu_ws.monitor.alerts import AlertPolicy, AlertTracker
from jupyter_gpu_ws.monitor.fake_nvml import FakeNvml
from jupyter_gpu_ws.monitor.kernels import KernelRef
from jupyter_gpu_ws.monitor.nvml import NvmlReader
from jupyter_gpu_ws.monitor.sampler import Sampler
from jupyter_gpu_ws.monitor.system import CgroupFigures, SystemReader
from tests.conftest import gpu_spec, write_spec
from tests.waiting import until


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def reader(tmp_path: Path) -> NvmlReader:
    return NvmlReader(FakeNvml(str(write_spec(tmp_path / "g.json", gpu_spec()))))


def make_sampler(reader: NvmlReader, tmp_path: Path, **kwargs: object) -> Sampler:
    system = SystemReader({"workdir": str(tmp_path)}, cgroup=CgroupFigures)
    return Sampler(reader, system, **kwargs)  # type: ignore[arg-type]


def test_history_is_bounded_by_history_seconds(reader: NvmlReader, tmp_path: Path) -> None:
    sampler = make_sampler(reader, tmp_path, interval=1.0, history_seconds=5, clock=Clock())
    for _ in range(12):
        sampler.sample_once()
    times = [s["time"] for s in sampler.history(0)]
    assert times == [1008.0, 1009.0, 1010.0, 1011.0, 1012.0]
    assert [s["time"] for s in sampler.history(1010.0)] == [1011.0, 1012.0]
    assert sampler.history(2000.0) == []


def test_every_subscriber_gets_the_same_serialised_sample_from_one_read(
    reader: NvmlReader, tmp_path: Path
) -> None:
    sampler = make_sampler(reader, tmp_path)
    got: list[list[str]] = [[] for _ in range(10)]
    for bucket in got:
        sampler.subscribe(lambda sample, text, bucket=bucket: bucket.append(text))
    sampler.sample_once()
    sampler.sample_once()
    assert reader.queries == 2
    assert all(bucket == got[0] and len(bucket) == 2 for bucket in got)
    assert got[0][-1] == sampler.latest_json


def test_a_failing_subscriber_does_not_stop_the_others(reader: NvmlReader, tmp_path: Path) -> None:
    sampler = make_sampler(reader, tmp_path)
    seen: list[float] = []

    def broken(sample: dict, text: str) -> None:
        raise RuntimeError("browser went away")

    sampler.subscribe(broken)
    sampler.subscribe(lambda sample, text: seen.append(sample["time"]))
    sampler.sample_once()
    assert len(seen) == 1


def test_unsubscribe_stops_delivery(reader: NvmlReader, tmp_path: Path) -> None:
    sampler = make_sampler(reader, tmp_path)
    seen: list[str] = []
    unsubscribe = sampler.subscribe(lambda sample, text: seen.append(text))
    sampler.sample_once()
    unsubscribe()
    sampler.sample_once()
    assert len(seen) == 1


def test_processes_are_mapped_to_their_kernel_and_notebook(
    reader: NvmlReader, tmp_path: Path
) -> None:
    import os

    # The spec's PIDs are not real; map the test process itself and give the GPU its PID.
    write_spec(
        Path(reader.nvml.path),
        gpu_spec(gpus=[{"processes": [{"pid": os.getpid(), "memory_used": 5}]}]),
    )
    kernels = {os.getpid(): KernelRef("kid-1", "python3", "work/train.ipynb")}
    sampler = make_sampler(reader, tmp_path, kernels=lambda: kernels)
    proc = sampler.sample_once()["gpus"][0]["processes"][0]
    assert (proc["kernel_id"], proc["kernel_name"], proc["notebook"]) == (
        "kid-1",
        "python3",
        "work/train.ipynb",
    )


def test_alerts_ride_along_in_the_sample(reader: NvmlReader, tmp_path: Path) -> None:
    write_spec(Path(reader.nvml.path), gpu_spec(gpus=[{"memory_used": 99, "memory_total": 100}]))
    sampler = make_sampler(reader, tmp_path, alerts=AlertTracker(AlertPolicy()))
    assert [a["kind"] for a in sampler.sample_once()["alerts"]] == ["gpu-memory"]


def test_thread_samples_at_the_interval_and_stops_cleanly(
    reader: NvmlReader, tmp_path: Path
) -> None:
    sampler = make_sampler(reader, tmp_path, interval=0.05)
    sampler.start()
    time.sleep(0.6)
    sampler.stop()
    ticks = sampler.ticks
    assert 5 <= ticks <= 14
    time.sleep(0.2)
    assert sampler.ticks == ticks  # really stopped


def test_a_failing_tick_is_logged_and_sampling_goes_on(
    reader: NvmlReader, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = {"n": 0}

    class Flaky:
        def read(self):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] <= 3:
                raise OSError("disk vanished")
            return SystemReader({}, cgroup=CgroupFigures).read()

    sampler = Sampler(reader, Flaky(), interval=0.05)  # type: ignore[arg-type]
    sampler.start()
    try:
        until(lambda: sampler.ticks >= 2, 10, "two ticks")
    finally:
        sampler.stop()
    assert len([r for r in caplog.records if "sampler failed" in r.getMessage()]) == 1


def test_interval_must_be_positive(reader: NvmlReader, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make_sampler(reader, tmp_path, interval=0)
