"""Who holds each GPU's memory: NVML's process list mapped to kernels by PID, joined with what
each kernel's agent reports of its own use, for the PIDs this server cannot see (a container)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil

from .kernels import KernelRef, find_owner
from .own_use import normalise_uuid

# `memory_source` of a process entry: NVML's own per-process figure, or a kernel's report of
# itself (`kernel:nvml`, `kernel:torch_reserved`, `kernel:torch_allocated`).
FROM_NVML = "nvml"
KERNEL_PREFIX = "kernel:"


@dataclass(frozen=True)
class KernelReport:
    """One kernel's report of the memory it holds on one GPU (from its agent's registration)."""

    kernel: KernelRef
    pid: int | None
    uuid: str
    memory_used: int
    figure: str


def attribute(
    gpus: list[dict[str, Any]],
    kernels: Mapping[int, KernelRef],
    reports: Iterable[KernelReport] = (),
) -> None:
    """Fill in, in place, each process's kernel and whether its PID exists here, then add the
    kernels that reported memory on a GPU where no NVML process could be mapped to them."""
    reports = list(reports)
    for gpu in gpus:
        devices = [gpu, *gpu.get("mig", [])]
        for device in devices:
            for proc in device["processes"]:
                proc.setdefault("memory_source", FROM_NVML)
                owner = find_owner(proc["pid"], kernels)
                if owner is not None:
                    proc.update(
                        kernel_id=owner.kernel_id,
                        kernel_name=owner.name,
                        notebook=owner.notebook,
                        visible=True,
                    )
                else:
                    # NVML gives the host's PIDs; in a container most are not processes here.
                    proc["visible"] = psutil.pid_exists(proc["pid"]) if proc["pid"] > 0 else False
        if not reports:
            continue
        mapped = {proc.get("kernel_id") for device in devices for proc in device["processes"]}
        by_uuid = {
            normalise_uuid(device["uuid"]): device for device in devices if device.get("uuid")
        }
        for report in reports:
            device = by_uuid.get(normalise_uuid(report.uuid))
            if device is None or report.kernel.kernel_id in mapped:
                continue
            device["processes"].append(
                {
                    "pid": report.pid,
                    "memory_used": report.memory_used,
                    "kernel_id": report.kernel.kernel_id,
                    "kernel_name": report.kernel.name,
                    "notebook": report.kernel.notebook,
                    "memory_source": KERNEL_PREFIX + report.figure,
                    "visible": True,
                }
            )
            mapped.add(report.kernel.kernel_id)


def reports_from_registration(
    kernel: KernelRef, registration: Mapping[str, Any]
) -> list[KernelReport]:
    """The GPU use an agent wrote in its registration file; anything malformed is skipped (the
    file is the kernel's to write, and a kernel runs the user's code)."""
    found = []
    pid = registration.get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    for entry in registration.get("gpu") or []:
        if not isinstance(entry, dict):
            continue
        uuid, used, figure = entry.get("uuid"), entry.get("memory_used"), entry.get("figure")
        if (
            isinstance(uuid, str)
            and uuid
            and isinstance(used, int)
            and not isinstance(used, bool)
            and used >= 0
            and isinstance(figure, str)
            and figure.isidentifier()
        ):
            found.append(KernelReport(kernel, pid, uuid, used, figure))
    return found
