"""A test double of the `pynvml` module: simulated GPUs described by a JSON file.

It answers the same functions with the same types and raises pynvml's own error classes, so
`NvmlReader` runs its real code against it. Selected with `c.GpuWorkspace.nvml_test_double`;
the file is re-read when it changes, so a test can add a process or lose a GPU mid-run.

The JSON file (all keys optional):

    {"driver_version": "550.54.15", "cuda_driver_version": 12040,
     "init_error": "DRIVER_NOT_LOADED",           # nvmlInit fails with this NVML error
     "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-...",
               "utilization": [35, 80, 95],        # a number, or a list cycled per read
               "memory_used": 1073741824, "memory_total": 42949672960,
               "temperature": 61, "power_draw": 250.5, "power_limit": 400.0, "sm_clock": 1410,
               "processes": [{"pid": 1234, "memory_used": 1073741824}],
               "mig": [{"uuid": "MIG-...", "memory_used": 0, "memory_total": 10737418240,
                        "processes": []}],
               "errors": {"power": "NOT_SUPPORTED", "all": "GPU_IS_LOST"}}]}

`errors` makes one query fail with the named NVML error: `utilization`, `power`,
`power_limit`, `temperature`, `clock`, `processes`, `memory`, or `all` (every query).

The same file may also simulate what `torch.cuda` reports inside each process (`FakeTorchCuda`,
for the kernels' own GPU use where NVML's PIDs are the host's), keyed by the process's PID as
that process sees it:

    {"torch_cuda": {"57": [{"uuid": "GPU-...", "reserved": 15032385536, "allocated": 12884901888}]}}
"""

from __future__ import annotations

import json
import os
import threading
from collections import namedtuple
from typing import Any

import pynvml

Memory = namedtuple("Memory", "total free used")
Utilization = namedtuple("Utilization", "gpu memory")
Process = namedtuple("Process", "pid usedGpuMemory")
DeviceProperties = namedtuple("DeviceProperties", "name uuid total_memory")


def _error(code_name: str) -> pynvml.NVMLError:
    return pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{code_name}"))


class _Handle:
    def __init__(self, spec: dict[str, Any], index: int, parent: _Handle | None = None) -> None:
        self.spec = spec
        self.index = index
        self.parent = parent


class FakeNvml:
    """Behaves as the `pynvml` module for the functions the monitor calls."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._spec: dict[str, Any] = {}
        self._reads = 0
        self._initialized = False

    def __getattr__(self, name: str) -> Any:
        # Error classes and constants are pynvml's own, so `except nvml.NVMLError_...` matches.
        if name.startswith(("NVMLError", "NVML_")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- spec loading ------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        with self._lock:
            try:
                mtime = os.stat(self.path).st_mtime_ns
            except FileNotFoundError:
                raise _error("LIBRARY_NOT_FOUND") from None
            if mtime != self._mtime:
                with open(self.path, encoding="utf-8") as f:
                    self._spec = json.load(f)
                self._mtime = mtime
            return self._spec

    def _check(self, handle: _Handle, query: str) -> None:
        errors = handle.spec.get("errors", {})
        name = errors.get(query) or errors.get("all")
        if name:
            raise _error(name)

    # -- pynvml's surface ----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        spec = self._load()
        if spec.get("init_error"):
            raise _error(spec["init_error"])
        self._initialized = True

    def nvmlShutdown(self) -> None:
        self._initialized = False

    def _require_init(self) -> dict[str, Any]:
        if not self._initialized:
            raise _error("UNINITIALIZED")
        return self._load()

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._require_init().get("driver_version", "550.54.15"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self._require_init().get("cuda_driver_version", 12040))

    def nvmlDeviceGetCount(self) -> int:
        self._reads += 1
        return len(self._require_init().get("gpus", []))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        gpus = self._require_init().get("gpus", [])
        if not 0 <= index < len(gpus):
            raise _error("INVALID_ARGUMENT")
        handle = _Handle(gpus[index], index)
        self._check(handle, "handle")
        return handle

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        self._check(handle, "name")
        return handle.spec.get("name", "NVIDIA Test GPU")

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        self._check(handle, "compute_capability")
        major, minor = handle.spec.get("compute_capability", [8, 0])
        return int(major), int(minor)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._check(handle, "uuid")
        prefix = "MIG" if handle.parent else "GPU"
        parent = handle.parent.index if handle.parent else 0
        return handle.spec.get(
            "uuid", f"{prefix}-00000000-0000-0000-{parent:04d}-{handle.index:012d}"
        )

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Memory:
        self._check(handle, "memory")
        total = int(handle.spec.get("memory_total", 16 * 2**30))
        used = int(handle.spec.get("memory_used", 0))
        return Memory(total, total - used, used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Utilization:
        self._check(handle, "utilization")
        if handle.parent is not None:
            raise _error("NOT_SUPPORTED")
        value = handle.spec.get("utilization", 0)
        if isinstance(value, list):
            value = value[self._reads % len(value)] if value else 0
        return Utilization(int(value), 0)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        self._check(handle, "temperature")
        return int(handle.spec.get("temperature", 40))

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        self._check(handle, "power")
        return int(float(handle.spec.get("power_draw", 50.0)) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        self._check(handle, "power_limit")
        return int(float(handle.spec.get("power_limit", 300.0)) * 1000)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        self._check(handle, "clock")
        return int(handle.spec.get("sm_clock", 1400))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Process]:
        self._check(handle, "processes")
        return [
            Process(int(p["pid"]), p.get("memory_used")) for p in handle.spec.get("processes", [])
        ]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[Process]:
        self._check(handle, "processes")
        return []

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> tuple[int, int]:
        self._check(handle, "mig")
        if "mig" not in handle.spec:
            raise _error("NOT_SUPPORTED")
        return (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        migs = handle.spec.get("mig", [])
        if index >= len(migs):
            raise _error("NOT_FOUND")
        return _Handle(migs[index], index, parent=handle)


class FakeTorchCuda:
    """Behaves as `torch.cuda` for the memory figures a kernel reports of itself: the devices
    listed under `torch_cuda` for this process's PID, in that order (device 0, 1, …)."""

    def __init__(self, path: str) -> None:
        self._nvml = FakeNvml(path)

    def _devices(self) -> list[dict[str, Any]]:
        try:
            spec = self._nvml._load()
        except pynvml.NVMLError:
            return []
        return list((spec.get("torch_cuda") or {}).get(str(os.getpid()), []))

    def is_initialized(self) -> bool:
        return bool(self._devices())

    def device_count(self) -> int:
        return len(self._devices())

    def _device(self, device: int) -> dict[str, Any]:
        devices = self._devices()
        if not 0 <= device < len(devices):
            raise RuntimeError(f"CUDA error: invalid device ordinal {device}")
        return devices[device]

    def memory_reserved(self, device: int) -> int:
        return int(self._device(device).get("reserved", 0))

    def memory_allocated(self, device: int) -> int:
        return int(self._device(device).get("allocated", 0))

    def get_device_properties(self, device: int) -> DeviceProperties:
        spec = self._device(device)
        uuid = str(spec.get("uuid", ""))
        # torch spells the UUID without NVML's "GPU-" prefix.
        return DeviceProperties(
            "NVIDIA Test GPU",
            uuid[4:] if uuid.startswith("GPU-") else uuid,
            int(spec.get("total", 16 * 2**30)),
        )
