"""Turns samples into alert episodes: each starts once, stays while its cause lasts, then ends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AlertPolicy:
    """The thresholds, from the app's configuration."""

    gpu_idle_percent: float = 5.0
    gpu_idle_seconds: float = 600.0
    gpu_memory_fraction: float = 0.95
    disk_fraction: float = 0.90
    # An episode ends only once the figure is this far back under its threshold, so a value
    # hovering at the line does not notify again and again.
    hysteresis: float = 0.03


@dataclass
class Alert:
    """One episode. `id` is stable for the episode's life: the browser notifies once per id."""

    id: str
    kind: str  # "gpu-idle", "gpu-memory" or "disk"
    subject: str
    message: str
    since: float


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


class AlertTracker:
    """Keeps the open episodes between samples."""

    def __init__(self, policy: AlertPolicy) -> None:
        self.policy = policy
        self._open: dict[tuple[str, str], Alert] = {}
        self._idle_since: dict[str, float] = {}

    def update(
        self, gpus: list[dict[str, Any]], disks: list[dict[str, Any]], now: float
    ) -> list[Alert]:
        """Feed one sample (as plain dicts); answer the episodes open after it."""
        p = self.policy
        seen: set[tuple[str, str]] = set()

        for gpu in gpus:
            subject = f"GPU {gpu['index']}"
            used, total = gpu.get("memory_used"), gpu.get("memory_total")
            if used is not None and total:
                fraction = used / total
                threshold = p.gpu_memory_fraction
                if fraction > threshold or (
                    ("gpu-memory", subject) in self._open and fraction > threshold - p.hysteresis
                ):
                    self._keep(
                        seen,
                        "gpu-memory",
                        subject,
                        now,
                        f"{subject} ({gpu['name']}) memory is {fraction:.0%} full "
                        f"({_gib(used)} of {_gib(total)}): the next allocation may fail.",
                    )

            held_by_kernel = any(proc.get("kernel_id") for proc in _all_processes(gpu))
            util = gpu.get("utilization")
            if held_by_kernel and util is not None and util < p.gpu_idle_percent:
                started = self._idle_since.setdefault(subject, now)
                if now - started >= p.gpu_idle_seconds:
                    notebooks = sorted(
                        {
                            proc.get("notebook") or proc["kernel_id"][:8]
                            for proc in _all_processes(gpu)
                            if proc.get("kernel_id")
                        }
                    )
                    self._keep(
                        seen,
                        "gpu-idle",
                        subject,
                        started,
                        f"{subject} has been idle for {(now - started) / 60:.0f} min while "
                        f"{', '.join(notebooks)} holds memory on it.",
                    )
            else:
                self._idle_since.pop(subject, None)

        for disk in disks:
            total = disk.get("total") or 0
            if total:
                fraction = disk["used"] / total
                subject = f"disk {disk['label']}"
                threshold = p.disk_fraction
                if fraction > threshold or (
                    ("disk", subject) in self._open and fraction > threshold - p.hysteresis
                ):
                    self._keep(
                        seen,
                        "disk",
                        subject,
                        now,
                        f"The {disk['label']} disk ({disk['path']}) is {fraction:.0%} full: "
                        f"{_gib(total - disk['used'])} left.",
                    )

        for key in list(self._open):
            if key not in seen:
                del self._open[key]
        return list(self._open.values())

    def _keep(
        self, seen: set[tuple[str, str]], kind: str, subject: str, since: float, message: str
    ) -> None:
        key = (kind, subject)
        seen.add(key)
        alert = self._open.get(key)
        if alert is None:
            self._open[key] = Alert(f"{kind}:{subject}:{since:.3f}", kind, subject, message, since)
        else:
            alert.message = message  # figures move; the episode (and its id) stays


def _all_processes(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    procs = list(gpu.get("processes", []))
    for mig in gpu.get("mig", []):
        procs.extend(mig.get("processes", []))
    return procs
