"""One sampler thread for the whole server: reads GPUs and system at a fixed rate, keeps a
bounded history, and hands each sample, serialised once, to every subscriber."""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any, Protocol

from .. import strictjson
from .alerts import AlertTracker
from .attribution import KernelReport, attribute
from .kernels import KernelRef
from .nvml import GpuReading
from .system import SystemInfo

log = logging.getLogger(__name__)

Sample = dict[str, Any]
Subscriber = Callable[[Sample, str], None]


class GpuSource(Protocol):
    def read(self) -> GpuReading: ...
    def close(self) -> None: ...


class SystemSource(Protocol):
    def read(self) -> SystemInfo: ...


class Sampler:
    """Samples on its own thread so NVML and psutil calls never block the server's event loop.

    The number of NVML queries depends on `interval` alone, never on how many browsers
    listen: they all receive the same serialised sample.
    """

    def __init__(
        self,
        gpus: GpuSource,
        system: SystemSource,
        *,
        interval: float = 1.0,
        history_seconds: float = 300.0,
        kernels: Callable[[], Mapping[int, KernelRef]] = dict,
        kernel_reports: Callable[[], Iterable[KernelReport]] = list,
        alerts: AlertTracker | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError("sample interval must be positive")
        self.gpus = gpus
        self.system = system
        self.interval = interval
        self.kernels = kernels
        self.kernel_reports = kernel_reports
        self.alerts = alerts
        self._clock = clock
        self._history: deque[Sample] = deque(maxlen=max(1, int(history_seconds / interval)))
        self._times: deque[float] = deque(maxlen=self._history.maxlen)
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self.latest: Sample | None = None
        self.latest_json: str | None = None
        self.ticks = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuws-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.gpus.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample_once()
                if self._failing:
                    log.info("GPU workspace sampler recovered")
                    self._failing = False
            except Exception:  # keep sampling: one bad tick must not end monitoring
                if not self._failing:
                    log.exception("GPU workspace sampler failed; will keep trying")
                    self._failing = True
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    # -- sampling ----------------------------------------------------------------------------

    def sample_once(self) -> Sample:
        """Take one sample now, record it and notify subscribers; returns it."""
        now = self._clock()
        reading = self.gpus.read()
        system = asdict(self.system.read())
        kernels = self.kernels()
        gpus = [asdict(gpu) for gpu in reading.gpus]
        attribute(gpus, kernels, self.kernel_reports())
        alerts = self.alerts.update(gpus, system["disks"], now) if self.alerts else []
        sample: Sample = {
            "time": now,
            "interval": self.interval,
            "gpus": gpus,
            "gpu_error": reading.error,
            "driver_version": reading.driver_version,
            "cuda_driver_version": reading.cuda_driver_version,
            "system": system,
            "alerts": [asdict(alert) for alert in alerts],
        }
        text = strictjson.dumps(
            sample, separators=(",", ":")
        )  # sent as is to the API and its stream
        with self._lock:
            self._history.append(sample)
            self._times.append(now)
            self.latest, self.latest_json = sample, text
            subscribers = list(self._subscribers)
        self.ticks += 1
        for subscriber in subscribers:
            try:
                subscriber(sample, text)
            except Exception:
                log.exception("GPU workspace sample subscriber failed")
        return sample

    # -- readers -----------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber(sample, json_text)` on the sampler thread after each sample."""
        with self._lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def history(self, since: float) -> list[Sample]:
        """Samples taken strictly after `since` (epoch seconds), oldest first."""
        with self._lock:
            times = list(self._times)
            start = bisect.bisect_right(times, since)
            return list(self._history)[start:]

    @property
    def history_capacity(self) -> int:
        return self._history.maxlen or 0
