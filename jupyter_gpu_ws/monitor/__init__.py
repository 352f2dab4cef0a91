"""GPU and system monitoring: NVML and psutil readers, the sampler and its alerts."""

from .alerts import Alert, AlertPolicy, AlertTracker
from .kernels import KernelRef, find_owner
from .nvml import GpuInfo, GpuProcess, GpuReading, MigDevice, NvmlReader
from .sampler import Sampler
from .system import CgroupReader, SystemReader, read_cgroup

__all__ = [
    "Alert",
    "AlertPolicy",
    "AlertTracker",
    "GpuInfo",
    "GpuProcess",
    "GpuReading",
    "KernelRef",
    "CgroupReader",
    "MigDevice",
    "NvmlReader",
    "Sampler",
    "SystemReader",
    "find_owner",
    "read_cgroup",
]
