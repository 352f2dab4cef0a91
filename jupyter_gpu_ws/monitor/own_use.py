"""What this process (a kernel) holds on each GPU, read from inside it, so the server can name
the notebook even where NVML's process IDs mean nothing to it (a container: NVML reports the
host's PIDs, and the driver does not translate them into the container's PID namespace)."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

log = logging.getLogger(__name__)

# Which figure a report holds, strongest first: NVML's own accounting for this PID (what the
# server would have shown), else PyTorch's caching allocator (the context and other libraries'
# memory are not in it).
NVML = "nvml"
TORCH_RESERVED = "torch_reserved"
TORCH_ALLOCATED = "torch_allocated"

# Set by the server for its kernels when it reads the NVML test double (tests, demos).
TEST_DOUBLE_ENV = "GPUWS_NVML_TEST_DOUBLE"


@dataclass(frozen=True)
class OwnGpuUse:
    """Memory this process holds on one GPU, and which figure it is."""

    uuid: str
    memory_used: int
    figure: str


class CudaMemory(Protocol):
    """The part of `torch.cuda` this reader needs (the test double offers the same)."""

    def is_initialized(self) -> bool: ...
    def device_count(self) -> int: ...
    def memory_reserved(self, device: int) -> int: ...
    def memory_allocated(self, device: int) -> int: ...
    def get_device_properties(self, device: int) -> Any: ...


def normalise_uuid(uuid: Any) -> str:
    """NVML writes `GPU-<uuid>`, torch a bare `<uuid>`: one spelling to compare them by."""
    text = str(uuid).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


class OwnGpuUseReader:
    """Reads this process's GPU memory: NVML's per-process figure where NVML lists this PID (a
    shared PID namespace, a bare VM), else torch.cuda's reserved (or allocated) bytes.

    Nothing is imported or initialised on behalf of the user: without torch already imported
    and its CUDA context already made, this process holds no GPU memory through torch, and the
    reader answers an empty list at no cost.
    """

    def __init__(self, nvml: Any = None, cuda: CudaMemory | None = None) -> None:
        self._nvml = nvml
        self._cuda = cuda
        self._nvml_ready = False
        self._nvml_failed = False

    @classmethod
    def from_environment(cls) -> OwnGpuUseReader:
        """The test double when the server says so, else the real NVML and torch.cuda."""
        path = os.environ.get(TEST_DOUBLE_ENV)
        if path:
            from .fake_nvml import FakeNvml, FakeTorchCuda

            return cls(FakeNvml(path), FakeTorchCuda(path))
        return cls()

    def read(self) -> list[OwnGpuUse]:
        cuda = self._cuda if self._cuda is not None else _loaded_torch_cuda()
        try:
            if cuda is None or not cuda.is_initialized():
                return []
            torch_use = self._torch_use(cuda)
        except Exception as err:  # a broken CUDA state must not break the kernel's agent
            log.debug("gpuws: torch.cuda memory unreadable: %s", err)
            return []
        nvml_use = self._nvml_use()
        found = {use.uuid: use for use in torch_use}
        found.update(nvml_use)  # NVML's figure wins where it sees this process
        return sorted(found.values(), key=lambda u: u.uuid)

    def _torch_use(self, cuda: CudaMemory) -> list[OwnGpuUse]:
        found = []
        for device in range(cuda.device_count()):
            uuid = normalise_uuid(getattr(cuda.get_device_properties(device), "uuid", ""))
            reserved = int(cuda.memory_reserved(device))
            if reserved > 0:
                found.append(OwnGpuUse(uuid, reserved, TORCH_RESERVED))
                continue
            allocated = int(cuda.memory_allocated(device))
            if allocated > 0:
                found.append(OwnGpuUse(uuid, allocated, TORCH_ALLOCATED))
        return [use for use in found if use.uuid]

    def _nvml_use(self) -> dict[str, OwnGpuUse]:
        nvml = self._ensure_nvml()
        if nvml is None:
            return {}
        mine = _self_and_children()
        found: dict[str, OwnGpuUse] = {}
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                used = 0
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle) or []:
                    memory = getattr(proc, "usedGpuMemory", None)
                    if proc.pid in mine and memory is not None and memory < 2**63:
                        used += int(memory)
                if used:
                    uuid = normalise_uuid(_text(nvml.nvmlDeviceGetUUID(handle)))
                    found[uuid] = OwnGpuUse(uuid, used, NVML)
        except Exception as err:  # NVMLError and friends: torch's figure stands
            log.debug("gpuws: NVML unreadable from the kernel: %s", err)
        return found

    def _ensure_nvml(self) -> Any:
        if self._nvml_failed:
            return None
        if self._nvml_ready:
            return self._nvml
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
        except Exception as err:  # no driver seen from here: torch's figure alone
            log.debug("gpuws: NVML unavailable in the kernel: %s", err)
            self._nvml_failed = True
            return None
        self._nvml_ready = True
        return self._nvml


def _loaded_torch_cuda() -> Any:
    torch = sys.modules.get("torch")
    return getattr(torch, "cuda", None) if torch is not None else None


def _self_and_children() -> set[int]:
    """This process and its descendants (DataLoader workers hold CUDA memory of their own)."""
    pids = {os.getpid()}
    try:
        pids.update(child.pid for child in psutil.Process().children(recursive=True))
    except psutil.Error:
        pass
    return pids


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
