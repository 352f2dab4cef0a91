"""Reads every GPU through NVML into plain records, turning each NVML failure into a reason."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# How long to wait before trying nvmlInit again after it failed (no driver, no permission).
INIT_RETRY_SECONDS = 30.0


@dataclass
class GpuProcess:
    """A process holding memory on a GPU, and the Jupyter kernel that owns it if any.

    `visible`: whether the PID is a process this server can see (NVML reports the host's PIDs,
    which mean nothing inside a container); `memory_source`: "nvml", or "kernel:<figure>" for an
    entry the kernel reported of itself (see monitor/attribution.py).
    """

    pid: int
    memory_used: int | None
    kernel_id: str | None = None
    kernel_name: str | None = None
    notebook: str | None = None
    visible: bool = True
    memory_source: str = "nvml"


@dataclass
class MigDevice:
    """A MIG instance carved out of a GPU; NVML reports no utilisation for these."""

    index: int
    uuid: str
    memory_used: int | None
    memory_total: int | None
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class GpuInfo:
    """One physical GPU at one moment. A figure NVML does not support on it is None."""

    index: int
    name: str
    uuid: str
    utilization: int | None
    memory_used: int | None
    memory_total: int | None
    temperature: int | None
    power_draw: float | None
    power_limit: float | None
    sm_clock: int | None
    processes: list[GpuProcess] = field(default_factory=list)
    mig: list[MigDevice] = field(default_factory=list)


@dataclass
class GpuReading:
    """What one read found: the GPUs, or an empty list and why."""

    gpus: list[GpuInfo]
    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Reads GPUs through an NVML binding: the real `pynvml` module or a test double of it.

    The binding is anything with pynvml's functions, constants and `NVMLError` class, so the
    test double exercises every line of this reader. Failures never raise out of `read()`:
    they become `GpuReading.error`, logged once per distinct reason.
    """

    def __init__(self, nvml: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        if nvml is None:
            import pynvml  # nvidia-ml-py

            nvml = pynvml
        self.nvml = nvml
        self._clock = clock
        self._initialized = False
        self._init_error: str | None = None
        self._next_init = 0.0
        self._driver: str | None = None
        self._cuda: str | None = None
        self._last_logged: str | None = None
        self.queries = 0  # NVML device reads so far; lets tests and benchmarks count them

    def read(self) -> GpuReading:
        if not self._ensure_init():
            return self._failed(self._init_error or "NVML is not available")
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as err:
            self._shutdown()
            return self._failed(f"NVML could not count GPUs: {err}")
        gpus: list[GpuInfo] = []
        lost: list[str] = []
        for index in range(count):
            try:
                gpus.append(self._read_gpu(index))
            except nvml.NVMLError as err:
                lost.append(f"GPU {index}: {err}")
        self.queries += 1
        if lost:
            # A lost GPU usually needs a reset; start over with a fresh init next time.
            self._shutdown()
            self._next_init = 0.0
            return self._reported(GpuReading(gpus, "; ".join(lost), self._driver, self._cuda))
        if not gpus:
            return self._reported(
                GpuReading([], "No NVIDIA GPU was found", self._driver, self._cuda)
            )
        return self._reported(GpuReading(gpus, None, self._driver, self._cuda))

    def close(self) -> None:
        self._shutdown()

    # -- internals -------------------------------------------------------------------------

    def _ensure_init(self) -> bool:
        if self._initialized:
            return True
        now = self._clock()
        if now < self._next_init:
            return False
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            self._init_error = _init_reason(nvml, err)
            self._next_init = now + INIT_RETRY_SECONDS
            return False
        except OSError as err:  # a broken libnvidia-ml can fail below NVML's own errors
            self._init_error = f"NVML could not be loaded: {err}"
            self._next_init = now + INIT_RETRY_SECONDS
            return False
        self._initialized = True
        self._init_error = None
        self._driver = self._optional(nvml.nvmlSystemGetDriverVersion)
        cuda = self._optional(nvml.nvmlSystemGetCudaDriverVersion)
        self._cuda = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        if isinstance(self._driver, bytes):
            self._driver = self._driver.decode()
        return True

    def _shutdown(self) -> None:
        if self._initialized:
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass
            self._initialized = False

    def _failed(self, reason: str) -> GpuReading:
        return self._reported(GpuReading([], reason, self._driver, self._cuda))

    def _reported(self, reading: GpuReading) -> GpuReading:
        if reading.error != self._last_logged:
            if reading.error:
                log.warning("GPU monitor: %s", reading.error)
            elif self._last_logged:
                log.info("GPU monitor: GPUs readable again")
            self._last_logged = reading.error
        return reading

    def _optional(self, query: Callable[..., Any], *args: Any) -> Any:
        """A figure some GPUs or drivers do not support: None instead of an error.

        A lost GPU still raises, so that the caller drops the whole device.
        """
        nvml = self.nvml
        try:
            return query(*args)
        except nvml.NVMLError as err:
            if isinstance(err, nvml.NVMLError_GpuIsLost):
                raise
            return None

    def _read_gpu(self, index: int) -> GpuInfo:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        util = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        power = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
        limit = self._optional(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        return GpuInfo(
            index=index,
            name=_text(nvml.nvmlDeviceGetName(handle)),
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            utilization=None if util is None else int(util.gpu),
            memory_used=int(memory.used),
            memory_total=int(memory.total),
            temperature=self._optional(
                nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
            ),
            power_draw=None if power is None else power / 1000.0,
            power_limit=None if limit is None else limit / 1000.0,
            sm_clock=self._optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            processes=self._processes(handle),
            mig=self._mig_devices(handle),
        )

    def _processes(self, handle: Any) -> list[GpuProcess]:
        nvml = self.nvml
        found: dict[int, GpuProcess] = {}
        for query in (
            nvml.nvmlDeviceGetComputeRunningProcesses,
            nvml.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            for proc in self._optional(query, handle) or []:
                used = getattr(proc, "usedGpuMemory", None)
                # NVML marks "not available" (e.g. without permission) with a huge sentinel.
                if used is not None and used >= 2**63:
                    used = None
                if proc.pid in found and used is not None:
                    found[proc.pid].memory_used = (found[proc.pid].memory_used or 0) + used
                else:
                    found.setdefault(proc.pid, GpuProcess(pid=int(proc.pid), memory_used=used))
        return sorted(found.values(), key=lambda p: p.pid)

    def _mig_devices(self, handle: Any) -> list[MigDevice]:
        nvml = self.nvml
        mode = self._optional(nvml.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        devices: list[MigDevice] = []
        for slot in range(self._optional(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            mig = self._optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            if mig is None:  # empty slot: NVML answers NotFound
                continue
            memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, mig)
            devices.append(
                MigDevice(
                    index=slot,
                    uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    memory_used=None if memory is None else int(memory.used),
                    memory_total=None if memory is None else int(memory.total),
                    processes=self._processes(mig),
                )
            )
        return devices


def _init_reason(nvml: Any, err: Exception) -> str:
    """Say in the user's words why there are no GPUs to show."""
    kinds = [
        ("NVMLError_LibraryNotFound", "No NVIDIA driver is installed (NVML library not found)"),
        ("NVMLError_DriverNotLoaded", "The NVIDIA driver is not loaded"),
        ("NVMLError_NoPermission", "No permission to query the NVIDIA driver"),
        (
            "NVMLError_LibRmVersionMismatch",
            "The NVIDIA driver and its library do not match; a reboot may be needed",
        ),
    ]
    for name, reason in kinds:
        cls = getattr(nvml, name, None)
        if cls is not None and isinstance(err, cls):
            return reason
    return f"NVML failed to start: {err}"
