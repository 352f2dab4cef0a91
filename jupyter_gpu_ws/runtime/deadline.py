"""When this runtime ends: every deadline source, the earliest of them, and what is due before it."""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_PERSIST_LEAD_TIME = 600.0
DEFAULT_WARNING_LEADS = (1800.0, 600.0, 120.0)

_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms])", re.IGNORECASE)
_DURATION_WHOLE = re.compile(r"^(?:\s*\d+(?:\.\d+)?\s*[dhms]\s*)+$", re.IGNORECASE)


def parse_duration(value: str | float) -> float:
    """Seconds from "12h", "90m", "1h30m", "45s", "2d" or a bare number of seconds ("3600")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip()
        if not text:
            raise ValueError("empty duration: give seconds or e.g. '12h', '90m', '1h30m'")
        try:
            seconds = float(text)
        except ValueError:
            if not _DURATION_WHOLE.match(text):
                raise ValueError(
                    f"cannot read duration {text!r}: give seconds or e.g. '12h', '90m', '1h30m'"
                ) from None
            seconds = sum(
                float(n) * _UNIT_SECONDS[unit.lower()] for n, unit in _DURATION_PART.findall(text)
            )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"duration must be a finite number of seconds, at least 0, not {value!r}")
    return seconds


def parse_deadline(value: str | float) -> float:
    """Epoch seconds from ISO 8601 (a time without a zone is UTC) or from epoch seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if not text:
        raise ValueError("empty deadline: give ISO 8601 (2026-11-29T14:00:00Z) or epoch seconds")
    try:
        return float(text)
    except ValueError:
        pass
    try:
        # Python 3.11 reads "Z", offsets, a space for "T" and fractional seconds.
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"cannot read deadline {text!r}: give ISO 8601 (2026-11-29T14:00:00Z) or epoch seconds"
        ) from None
    if moment.tzinfo is None:
        # A platform writing a bare timestamp almost always means UTC; local time would
        # silently shift the deadline by hours on a machine in another zone.
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


@dataclass(frozen=True)
class Deadline:
    """One source's answer: when the runtime ends according to it."""

    at: float
    source: str
    detail: str | None = None


class DeadlineFile:
    """A file a platform or script may write at any time; re-read whenever it changes.

    The file holds one deadline (ISO 8601 or epoch seconds). Missing or empty means no deadline
    from this source; a malformed file is reported in `error` and gives no deadline, and the
    runtime goes on.
    """

    source = "deadline_file"

    def __init__(self, path: str) -> None:
        self.path = path
        self.error: str | None = None
        self._key: tuple[int, int] | None = None
        self._deadline: Deadline | None = None
        self._lock = threading.Lock()

    def read(self) -> Deadline | None:
        with self._lock:
            try:
                st = os.stat(self.path)
                key: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
            except OSError:
                key = None
            if key == self._key and self._key is not None:
                return self._deadline
            self._key = key
            self._deadline, self.error = self._load() if key is not None else (None, None)
            return self._deadline

    def _load(self) -> tuple[Deadline | None, str | None]:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError) as err:
            return None, self._report(f"cannot read deadline file {self.path}: {err}")
        if not text:
            return None, None
        try:
            return Deadline(parse_deadline(text.splitlines()[0]), self.source, self.path), None
        except ValueError as err:
            return None, self._report(f"deadline file {self.path}: {err}")

    @staticmethod
    def _report(message: str) -> str:
        log.warning("GPU workspace: %s", message)
        return message


@dataclass(frozen=True)
class KernelActivity:
    """What Jupyter Server knows about one kernel, for its culling rule."""

    kernel_id: str
    last_activity: float
    busy: bool = False
    connections: int = 0


@dataclass(frozen=True)
class IdleInputs:
    """Jupyter Server's culling settings and last-activity times, as the server reads them.

    Timeouts of 0 mean off, as in `ServerApp.shutdown_no_activity_timeout` and
    `MappingKernelManager.cull_idle_timeout`.
    """

    server_last_activity: float
    shutdown_no_activity_timeout: float = 0.0
    cull_idle_timeout: float = 0.0
    cull_connected: bool = False
    cull_busy: bool = False
    kernels: tuple[KernelActivity, ...] = ()

    def kernel_cull_times(self) -> dict[str, float | None]:
        """Kernel id → when the culler would shut it down (None: never, under these settings)."""
        times: dict[str, float | None] = {}
        for kernel in self.kernels:
            cullable = (
                self.cull_idle_timeout > 0
                and (self.cull_busy or not kernel.busy)
                and (self.cull_connected or kernel.connections == 0)
            )
            times[kernel.kernel_id] = (
                kernel.last_activity + self.cull_idle_timeout if cullable else None
            )
        return times

    def idle_for(self, now: float) -> float:
        """How long nothing has happened: none while a kernel runs code (a cell that trains
        is work, whatever the browser does meanwhile); else since the latest activity of the
        server or any kernel."""
        if any(kernel.busy for kernel in self.kernels):
            return 0.0
        last = max([self.server_last_activity] + [k.last_activity for k in self.kernels])
        return max(0.0, now - last)

    def shutdown_at(self) -> float | None:
        """When the server would stop itself for inactivity, if nothing happens until then.

        The server only stops once no kernel runs, so every kernel must be culled first; the
        kernels' activity counts as the server's activity.
        """
        if self.shutdown_no_activity_timeout <= 0:
            return None
        culls = self.kernel_cull_times()
        if any(at is None for at in culls.values()):
            return None
        last = max([self.server_last_activity] + [k.last_activity for k in self.kernels])
        return max(
            [last + self.shutdown_no_activity_timeout]
            + [at for at in culls.values() if at is not None]
        )


@dataclass(frozen=True)
class HubLimits:
    """JupyterHub's limits on this server, and the times they count from.

    `max_age`: the culler's `--max-age` (the server is stopped that long after it started,
    active or not); `cull_timeout`: its `--timeout` (stopped after that long without activity
    as the hub sees it). The culler acts on its next round, up to `--cull-every` later: the
    deadlines here are the earliest it may act.
    """

    max_age: float | None = None
    cull_timeout: float | None = None
    started: float | None = None
    started_from: str = "the hub"
    last_activity: float | None = None
    activity_from: str = "the hub"

    def deadlines(self) -> list[Deadline]:
        found = []
        if self.max_age and self.started is not None:
            found.append(
                Deadline(
                    self.started + self.max_age,
                    HUB_MAX_AGE,
                    f"max age {self.max_age:g} s from the start ({self.started_from})",
                )
            )
        if self.cull_timeout and self.last_activity is not None:
            found.append(
                Deadline(
                    self.last_activity + self.cull_timeout,
                    HUB_IDLE_CULL,
                    f"idle {self.cull_timeout:g} s after the last activity ({self.activity_from})",
                )
            )
        return found


HUB_MAX_AGE = "hub:max_age"
HUB_IDLE_CULL = "hub:idle_cull"
DEFAULT_CULL_WARNING_LEAD = 600.0


@dataclass(frozen=True)
class RuntimeEvent:
    """Something the server acts on: a warning to show, or the automatic persist to start."""

    kind: str  # "warning" or "persist"
    deadline: float
    source: str
    remaining: float
    lead: float


@dataclass
class RuntimeSettings:
    """The runtime part of the app's configuration, as plain values."""

    max_runtime: float | None = None
    deadline: float | None = None
    deadline_source: str = "deadline"  # "deadline" (config) or "GPUWS_DEADLINE" (environment)
    deadline_file: str | None = None
    persist_lead_time: float = DEFAULT_PERSIST_LEAD_TIME
    warning_leads: Sequence[float] = field(default_factory=lambda: DEFAULT_WARNING_LEADS)
    # Whatever the other warnings say, the user hears this long before the hub's idle cull.
    cull_warning_lead: float = DEFAULT_CULL_WARNING_LEAD

    @classmethod
    def from_config(
        cls,
        max_runtime: str | float | None = None,
        deadline: str | float | None = None,
        persist_lead_time: str | float = DEFAULT_PERSIST_LEAD_TIME,
        warning_leads: Iterable[str | float] = DEFAULT_WARNING_LEADS,
        environ: dict[str, str] | None = None,
    ) -> RuntimeSettings:
        """Reads the config values and the environment (GPUWS_DEADLINE, GPUWS_DEADLINE_FILE).

        Raises ValueError naming the setting that cannot be read. The configured `deadline`
        wins over the environment variable.
        """
        env = os.environ if environ is None else environ
        settings = cls(
            persist_lead_time=_named(parse_duration, "persist_lead_time", persist_lead_time)
        )
        settings.warning_leads = tuple(
            sorted(
                (_named(parse_duration, "warning lead time", v) for v in warning_leads),
                reverse=True,
            )
        )
        if max_runtime not in (None, "", 0):
            settings.max_runtime = _named(parse_duration, "max_runtime", max_runtime) or None
        if deadline not in (None, ""):
            settings.deadline = _named(parse_deadline, "deadline", deadline)
        elif env.get("GPUWS_DEADLINE", "").strip():
            settings.deadline = _named(parse_deadline, "GPUWS_DEADLINE", env["GPUWS_DEADLINE"])
            settings.deadline_source = "GPUWS_DEADLINE"
        settings.deadline_file = env.get("GPUWS_DEADLINE_FILE") or None
        return settings


def _named(parse: Callable[[Any], float], name: str, value: Any) -> float:
    try:
        return parse(value)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


class RuntimeClock:
    """The runtime's countdown: sources, the earliest deadline, warnings and the automatic persist.

    `clock` is injectable so tests (and the server) decide what "now" is. The server calls
    `poll()` every second or so and acts on the events it returns (listeners see them too);
    `state()` answers `GET /gpuws/api/runtime`. Safe to use from several threads.
    """

    def __init__(
        self,
        settings: RuntimeSettings,
        clock: Callable[[], float] = time.time,
        start: float | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.start = clock() if start is None else start
        self.deadline_file = (
            DeadlineFile(settings.deadline_file) if settings.deadline_file else None
        )
        self.idle: IdleInputs | None = None
        self.preemption: dict[str, Any] | None = None
        self.hub: HubLimits | None = None
        self._cull_warned: float | None = None  # the idle-cull deadline already warned of
        self._listeners: list[Callable[[RuntimeEvent], None]] = []
        self._warned: set[float] = set()
        self._persist_announced = False
        self._lock = threading.RLock()

    # --- inputs from the server -------------------------------------------------------------

    def update_idle(self, inputs: IdleInputs | None) -> None:
        """The server's latest activity times and culling settings."""
        with self._lock:
            self.idle = inputs

    def record_preemption(self, cloud: str, detail: str, at: float, deadline: float | None) -> None:
        """A preemption notice: from now on it is a deadline source ("preemption:<cloud>")."""
        with self._lock:
            if self.preemption is None:
                self.preemption = {
                    "cloud": cloud,
                    "detail": detail,
                    "noticed": at,
                    "deadline": deadline,
                }

    def update_hub(self, limits: HubLimits | None) -> None:
        """JupyterHub's limits and the times they count from (read from the hub API)."""
        with self._lock:
            self.hub = limits

    def subscribe(self, listener: Callable[[RuntimeEvent], None]) -> None:
        self._listeners.append(listener)

    # --- the arithmetic ---------------------------------------------------------------------

    def deadlines(self) -> list[Deadline]:
        """Every source that currently gives a deadline."""
        found: list[Deadline] = []
        s = self.settings
        if s.max_runtime:
            found.append(Deadline(self.start + s.max_runtime, "max_runtime"))
        if s.deadline is not None:
            found.append(Deadline(s.deadline, s.deadline_source))
        if self.deadline_file is not None and (from_file := self.deadline_file.read()) is not None:
            found.append(from_file)
        with self._lock:
            idle, preemption, hub = self.idle, self.preemption, self.hub
        if hub is not None:
            found.extend(hub.deadlines())
        if idle is not None and (idle_at := idle.shutdown_at()) is not None:
            found.append(Deadline(idle_at, "idle_shutdown"))
        if preemption is not None and preemption["deadline"] is not None:
            found.append(
                Deadline(
                    preemption["deadline"],
                    f"preemption:{preemption['cloud']}",
                    preemption["detail"],
                )
            )
        return found

    def earliest(self) -> Deadline | None:
        found = self.deadlines()
        return min(found, key=lambda d: d.at) if found else None

    def remaining(self) -> float | None:
        deadline = self.earliest()
        return None if deadline is None else max(0.0, deadline.at - self.clock())

    def next_persist(self, deadline: Deadline | None = None) -> float | None:
        """When the automatic persist starts: `persist_lead_time` before the earliest deadline."""
        deadline = deadline or self.earliest()
        return None if deadline is None else deadline.at - self.settings.persist_lead_time

    # --- what is due ------------------------------------------------------------------------

    def poll(self) -> list[RuntimeEvent]:
        """Warnings whose lead time has been crossed, and the automatic persist once it is due.

        Each is returned once per deadline: a deadline moved later (a new deadline file) arms
        them again. When several lead times are crossed at once (a short runtime) only the
        nearest is announced, so the user sees one warning, not three.
        """
        deadline = self.earliest()
        now = self.clock()
        events: list[RuntimeEvent] = []
        with self._lock:
            if deadline is None:
                self._warned.clear()
                self._persist_announced = False
                return events
            remaining = deadline.at - now
            # Re-arm what lies ahead again (the deadline moved later).
            self._warned = {lead for lead in self._warned if remaining <= lead}
            crossed = [
                lead
                for lead in self.settings.warning_leads
                if remaining <= lead and lead not in self._warned
            ]
            if crossed:
                lead = min(crossed)
                self._warned.update(crossed)
                events.append(
                    RuntimeEvent("warning", deadline.at, deadline.source, max(0.0, remaining), lead)
                )
                if deadline.source == HUB_IDLE_CULL:
                    self._cull_warned = deadline.at  # that warning says it: no second one
            events.extend(self._cull_warning(now))
            persist_at = deadline.at - self.settings.persist_lead_time
            if now < persist_at:
                self._persist_announced = False  # not yet due, or due again for a later deadline
            if now >= persist_at and not self._persist_announced:
                self._persist_announced = True
                events.append(
                    RuntimeEvent(
                        "persist",
                        deadline.at,
                        deadline.source,
                        max(0.0, remaining),
                        self.settings.persist_lead_time,
                    )
                )
        for event in events:
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:  # one broken listener must not stop the countdown
                    log.exception("GPU workspace: runtime listener failed on %s", event)
        return events

    def _cull_warning(self, now: float) -> list[RuntimeEvent]:
        """The hub's idle cull, `cull_warning_lead` ahead, even when another deadline is earlier
        (the user can avoid this one by coming back). Once per cull deadline: activity that
        moves it later arms the warning again."""
        cull = next(
            (d for d in (self.hub.deadlines() if self.hub else []) if d.source == HUB_IDLE_CULL),
            None,
        )
        if cull is None:
            return []
        remaining = cull.at - now
        if self._cull_warned is not None and cull.at > self._cull_warned + 1.0:
            self._cull_warned = None  # activity moved the cull later
        if remaining > self.settings.cull_warning_lead or self._cull_warned is not None:
            return []
        self._cull_warned = cull.at
        return [
            RuntimeEvent(
                "warning",
                cull.at,
                cull.source,
                max(0.0, remaining),
                self.settings.cull_warning_lead,
            )
        ]

    def state(self) -> dict[str, Any]:
        """The answer of `GET /gpuws/api/runtime`: times are epoch seconds, durations seconds."""
        now = self.clock()
        found = self.deadlines()
        deadline = min(found, key=lambda d: d.at) if found else None
        with self._lock:
            idle, preemption = self.idle, dict(self.preemption) if self.preemption else None
        errors = (
            [self.deadline_file.error] if self.deadline_file and self.deadline_file.error else []
        )
        return {
            "now": now,
            "start": self.start,
            "elapsed": now - self.start,
            "deadline": deadline.at if deadline else None,
            "source": deadline.source if deadline else None,
            "remaining": max(0.0, deadline.at - now) if deadline else None,
            "sources": [asdict(d) for d in sorted(found, key=lambda d: d.at)],
            "idle_seconds": idle.idle_for(now) if idle else None,
            "idle_deadline": idle.shutdown_at() if idle else None,
            "kernel_culls": idle.kernel_cull_times() if idle else {},
            "preemption": preemption,
            "next_persist": self.next_persist(deadline),
            "persist_lead_time": self.settings.persist_lead_time,
            "warning_leads": list(self.settings.warning_leads),
            "errors": errors,
        }
