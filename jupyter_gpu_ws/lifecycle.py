"""The runtime's end, on the server: the countdown ticks, warnings, the automatic persist before
the deadline, the emergency persist on SIGTERM or a preemption notice, and persist-and-release."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tornado.ioloop import PeriodicCallback

from .checkpoints.coordinator import CheckpointCoordinator
from .documents import BrowserPages
from .environment import EnvironmentSupervisor
from .jobs import Job, JobRunner, Step
from .monitor import Sampler
from .persist import start_persist
from .runtime import (
    HubLimits,
    IdleInputs,
    KernelActivity,
    PreemptionNotice,
    PreemptionWatcher,
    RuntimeClock,
    RuntimeEvent,
    RuntimeSettings,
    make_checks,
    parse_duration,
)
from .runtime.deadline import HUB_IDLE_CULL
from .runtime.hub import HubClient, HubError, HubView, Platform
from .store.names import shown
from .sync.errors import LeaseHeldError, SyncError
from .sync.supervisor import SyncSupervisor
from .userjobs.service import JobService
from .vocabulary import deadline_source

if TYPE_CHECKING:
    from jupyter_server.serverapp import ServerApp

# Notices kept for the browser (each shown once per browser, by id).
KEEP_NOTICES = 20
# How often the idle inputs (activity times, culling settings) are read from the server.
IDLE_EVERY = 10.0
# How often the Git status shown in the sidebar is refreshed (it runs `git status`).
GIT_STATUS_EVERY = 30.0
# The emergency persist waits at most this long for the browsers to save their open documents:
# a user's unsaved edits are worth a tenth of the grace, not more (the files come first).
EMERGENCY_DOCUMENTS_TIMEOUT = 2.0
# What starts a persist in ordinary times (an emergency's trigger is its reason: SIGTERM, preemption:…).
ORDINARY = ("user", "auto", "release")
# A tracked run whose step moved within this many seconds is stepping (its agent looks every 2 s).
STEPPING_WINDOW = 30.0
# Kept out of the grace for the server's own exit after the emergency persist.
EXIT_MARGIN = 1.0


def _epoch(value: Any) -> float:
    """Jupyter Server keeps activity as aware datetimes."""
    return value.timestamp() if hasattr(value, "timestamp") else float(value or 0)


@dataclass(frozen=True)
class LifecycleSettings:
    """Plain values from the app's traits (the same names), read once at the server's start."""

    workdir: str
    state_dir: str
    max_runtime: str
    deadline: str
    persist_lead_time: float
    warning_lead_times: tuple[float, ...]
    grace_period: float
    termination_grace_period: float | None
    checkpoint_timeout: float
    document_save_timeout: float
    env_snapshot_on_persist: bool
    gpu_idle_percent: float
    hub_max_age: str
    hub_cull_timeout: str
    hub_cull_warning: float
    hub_keep_alive: bool
    hub_poll_interval: float
    preemption_clouds: tuple[str, ...]
    preemption_poll_interval: float
    aws_metadata_url: str
    gcp_metadata_url: str
    azure_metadata_url: str
    git_versioning: bool
    git_init: bool
    git_include: tuple[str, ...]
    git_max_file_size: int
    git_remote: str
    git_branch: str


class RuntimeSupervisor:
    """Owns the RuntimeClock, the preemption watcher and the Git versioning for the server."""

    def __init__(
        self,
        settings: LifecycleSettings,
        *,
        server: ServerApp,
        sync: SyncSupervisor,
        checkpoints: CheckpointCoordinator,
        sampler: Sampler,
        jobs: JobRunner,
        pages: BrowserPages,
        environment: EnvironmentSupervisor,
        userjobs: JobService,
        run_async: Callable[..., Any],
        log: logging.Logger | logging.LoggerAdapter,
    ) -> None:
        self.settings = settings
        # Jupyter Server itself: its activity and kernels (the idle deadline), its loop, its stop.
        self.server = server
        self.sync = sync
        self.checkpoints = checkpoints
        self.sampler = sampler
        self.jobs = jobs
        self.pages = pages
        self.environment = environment
        self.userjobs = userjobs
        self.run_async = run_async
        self.log = log
        clock_settings = RuntimeSettings.from_config(
            settings.max_runtime or None,
            settings.deadline or None,
            settings.persist_lead_time,
            settings.warning_lead_times,
        )
        clock_settings.cull_warning_lead = settings.hub_cull_warning
        self.clock = RuntimeClock(clock_settings)
        self.platform = Platform.detect()
        self.hub = HubClient(self.platform.hub) if self.platform.hub else None
        self.hub_view: HubView | None = None
        self.hub_max_age = parse_duration(settings.hub_max_age) if settings.hub_max_age else None
        self.hub_cull_timeout = (
            parse_duration(settings.hub_cull_timeout) if settings.hub_cull_timeout else None
        )
        self._hub_read = 0.0
        self._hub_reading = False
        self.keep_alive: dict[str, Any] = {
            "enabled": bool(settings.hub_keep_alive and self.hub),
            "active": False,
            "reason": None,
            "last_sent": None,
            "error": None,
        }
        self._activity_sent: float | None = None
        self.previous_emergency: dict[str, Any] | None = (
            None  # the last runtime's report, from the store
        )
        self._previous_read = False
        self.notices: list[dict[str, Any]] = []
        self._notice_ids = 0
        self.auto_persist: Job | None = None
        self.emergency: dict[str, Any] | None = None
        self.release: dict[str, Any] | None = None
        self.git = self._make_git()
        self.git_status: dict[str, Any] | None = None
        self._git_checked = 0.0
        self._idle_read = 0.0
        self._ticker: PeriodicCallback | None = None
        self._previous_sigterm: Any = None
        self.watcher = PreemptionWatcher(
            make_checks(
                "aws" in settings.preemption_clouds,
                "gcp" in settings.preemption_clouds,
                "azure" in settings.preemption_clouds,
                settings.aws_metadata_url or None,
                settings.gcp_metadata_url or None,
                settings.azure_metadata_url or None,
            ),
            self._on_preemption,
            interval=settings.preemption_poll_interval,
        )

    def _make_git(self) -> Any:
        if not self.settings.git_versioning:
            return None
        from .runtime.gitrepo import DEFAULT_INCLUDE, GitSettings, GitVersioning

        config = self.settings
        return GitVersioning(
            GitSettings(
                workdir=config.workdir,
                init=config.git_init,
                max_file_size=config.git_max_file_size,
                remote=config.git_remote or None,
                branch=config.git_branch or None,
                include=config.git_include or DEFAULT_INCLUDE,
            ),
            restore_lock=self.sync.restore_lock,
        )

    # -- start and stop ----------------------------------------------------------------------

    def start(self) -> None:
        self._ticker = PeriodicCallback(self._tick, 1000)
        self._ticker.start()
        self.watcher.start()
        # After the server has installed its own signal handlers: ours runs first, then theirs.
        self.server.io_loop.add_callback(self._install_sigterm)

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
        self.watcher.stop(timeout=5)
        if (
            self._previous_sigterm is not None
            and threading.current_thread() is threading.main_thread()
        ):
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._previous_sigterm)

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)

    # -- the countdown -----------------------------------------------------------------------

    async def _tick(self) -> None:
        now = time.monotonic()
        if now - self._idle_read >= IDLE_EVERY:
            self._idle_read = now
            self.clock.update_idle(self._idle_inputs())
        if self.git is not None and now - self._git_checked >= GIT_STATUS_EVERY:
            self._git_checked = now
            self.git_status = await asyncio.get_running_loop().run_in_executor(
                None, self.git.status
            )
        if (
            self.hub is not None
            and now - self._hub_read >= self.settings.hub_poll_interval
            and not self._hub_reading
        ):
            self._hub_read = now
            asyncio.ensure_future(self._read_hub())
        if self.keep_alive["enabled"]:
            await self._keep_alive()
        if not self._previous_read and self.sync.service is not None:
            self._previous_read = True
            asyncio.ensure_future(self._read_previous_emergency())
        for event in self.clock.poll():
            self._on_event(event)

    # -- JupyterHub --------------------------------------------------------------------------

    async def _read_hub(self) -> None:
        assert self.hub is not None
        self._hub_reading = True
        try:
            view = await asyncio.get_running_loop().run_in_executor(
                None, self.hub.read, time.time()
            )
        finally:
            self._hub_reading = False
        if view.error and (self.hub_view is None or self.hub_view.error != view.error):
            self.log.warning(
                "GPU workspace: the hub's view of this server is unavailable: %s", view.error
            )
        self.hub_view = view
        self._update_hub_limits()

    def _update_hub_limits(self) -> None:
        """The hub's limits, counted from the hub's own times where its token may read them, else
        from what this server knows (its start; its own last activity and what it reported)."""
        if not (self.hub_max_age or self.hub_cull_timeout):
            return
        view = self.hub_view or HubView()
        started, started_from = view.started, "the hub"
        if started is None:
            started, started_from = (
                self.clock.start,
                "this server's start: the token cannot read the hub's",
            )
        activity, activity_from = view.last_activity, f"the hub, {view.activity_of}'s"
        if activity is None:
            activity = _epoch(self.server.web_app.last_activity())
            activity_from = "this server's own: the token cannot read the hub's"
        if self._activity_sent is not None and self._activity_sent > activity:
            activity, activity_from = self._activity_sent, "the keep-alive's report to the hub"
        self.clock.update_hub(
            HubLimits(
                self.hub_max_age,
                self.hub_cull_timeout,
                started,
                started_from,
                activity,
                activity_from,
            )
        )

    async def _keep_alive(self) -> None:
        """While training runs without a sound, tell the hub so, as the single-user server does
        for a user's clicks: at most every quarter of the cull timeout (and every minute)."""
        every = min(60.0, (self.hub_cull_timeout or 240.0) / 4)
        reason = self._busy_reason()
        self.keep_alive.update(active=reason is not None, reason=reason)
        if reason is None or (
            self._activity_sent is not None and time.time() - self._activity_sent < every
        ):
            return
        assert self.hub is not None
        when = time.time()
        self._activity_sent = when  # also on failure: retried a period later, not every second
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.hub.report_activity, when)
        except HubError as err:
            if self.keep_alive["error"] != str(err):
                self.log.warning("GPU workspace: keep-alive could not report activity: %s", err)
            self.keep_alive["error"] = str(err)
            return
        self.keep_alive.update(last_sent=when, error=None)
        self._update_hub_limits()

    def _busy_reason(self) -> str | None:
        """Why this server is busy though nobody clicks: a tracked run stepping, or a notebook's
        GPU working. None when neither holds."""
        now = time.time()
        for kernel_id, state in self.checkpoints.agent_states().items():
            stepped = state.get("stepped_at")
            # The step moves only while the loop runs: no need to know which cell runs it (an
            # agent loaded by the training cell itself never saw that cell start).
            if isinstance(stepped, (int, float)) and now - stepped < STEPPING_WINDOW:
                return f"the tracked run {state.get('run') or kernel_id} is stepping"
        latest = self.sampler.latest or {}
        for gpu in latest.get("gpus", []):
            holders = [p for p in gpu["processes"] if p.get("kernel_id")]
            util = gpu.get("utilization")
            if holders and util is not None and util >= self.settings.gpu_idle_percent:
                return f"GPU {gpu['index']} is {util}% busy for {holders[0].get('notebook') or holders[0]['kernel_id']}"
        return None

    # -- the grace under Kubernetes ----------------------------------------------------------

    async def _read_previous_emergency(self) -> None:
        service = self.sync.service
        if service is None:
            return
        try:
            report = await asyncio.get_running_loop().run_in_executor(
                None, service.engine.store.read_json, "emergency-report.json"
            )
        except Exception as err:  # a missing or unreadable report only leaves the estimate unknown
            self.log.debug("GPU workspace: no previous emergency report: %s", err)
            return
        if isinstance(report, dict) and isinstance(report.get("seconds"), (int, float)):
            self.previous_emergency = report

    def emergency_estimate(self) -> tuple[float | None, str | None]:
        """How long an emergency persist takes here, measured: this runtime's own, else the last
        runtime's (its report in the store), else this runtime's last full persist."""
        if self.emergency and isinstance(self.emergency.get("seconds"), (int, float)):
            return float(self.emergency["seconds"]), "this runtime's emergency persist"
        if self.previous_emergency is not None:
            return float(self.previous_emergency["seconds"]), "the last runtime's emergency persist"
        last = self.jobs.latest("persist")
        if last is not None and last.state == "done" and last.finished:
            return round(last.finished - last.started, 3), "the last persist"
        return None, None

    def grace(self) -> dict[str, Any]:
        """The grace this server gets before it is killed, where it is known, and whether the
        emergency persist fits in it."""
        seconds = self.settings.termination_grace_period
        source = None
        if seconds is not None:
            source = (
                "GPUWS_GRACE_PERIOD"
                if os.environ.get("GPUWS_GRACE_PERIOD", "").strip()
                else "termination_grace_period"
            )
        estimate, measured_by = self.emergency_estimate()
        warning = None
        if seconds is None and self.platform.kubespawner:
            warning = (
                "Running under KubeSpawner, whose delete_grace_period is 1 s unless the admin set it: "
                "the emergency persist would be cut off. Set c.KubeSpawner.delete_grace_period and "
                "GPUWS_GRACE_PERIOD, and a preStop hook (see docs/deploy.md)."
            )
        elif seconds is not None and estimate is not None and seconds - EXIT_MARGIN < estimate:
            warning = (
                f"The pod's grace ({seconds:g} s) is shorter than the emergency persist takes here "
                f"({estimate:.1f} s, {measured_by}): work may be lost when the pod stops. Persist now, "
                "and ask the admin for a longer c.KubeSpawner.delete_grace_period."
            )
        return {
            "seconds": seconds,
            "source": source,
            "emergency_seconds": estimate,
            "emergency_measured_by": measured_by,
            "budget": self.emergency_budget(),
            "warning": warning,
        }

    def emergency_budget(self) -> float:
        """The emergency persist's budget: `grace_period`, inside the platform's grace if known."""
        grace = self.settings.termination_grace_period
        return (
            min(self.settings.grace_period, max(1.0, grace - EXIT_MARGIN))
            if grace
            else self.settings.grace_period
        )

    def _idle_inputs(self) -> IdleInputs | None:
        server = self.server
        try:
            km = server.kernel_manager
            kernels = []
            for kernel_id in list(km.list_kernel_ids()):
                kernel = km.get_kernel(kernel_id)
                kernels.append(
                    KernelActivity(
                        kernel_id,
                        _epoch(getattr(kernel, "last_activity", 0)),
                        getattr(kernel, "execution_state", "") == "busy",
                        int(getattr(km, "_kernel_connections", {}).get(kernel_id, 0)),
                    )
                )
            return IdleInputs(
                server_last_activity=_epoch(server.web_app.last_activity()),
                shutdown_no_activity_timeout=float(
                    getattr(server, "shutdown_no_activity_timeout", 0) or 0
                ),
                cull_idle_timeout=float(getattr(km, "cull_idle_timeout", 0) or 0),
                cull_connected=bool(getattr(km, "cull_connected", False)),
                cull_busy=bool(getattr(km, "cull_busy", False)),
                kernels=tuple(kernels),
            )
        except Exception as err:  # activity is best effort: the other deadlines still count
            self.log.debug("GPU workspace: idle inputs unavailable: %s", err)
            return None

    def _on_event(self, event: RuntimeEvent) -> None:
        minutes = max(1, round(event.remaining / 60))
        if event.kind == "warning" and event.source == HUB_IDLE_CULL:
            keep = (
                " (keep-alive reports activity only while training runs)"
                if self.keep_alive["enabled"]
                else ""
            )
            self._notice(
                "warning",
                f"JupyterHub stops this idle server in about {minutes} "
                f"minute{'s' * (minutes != 1)} ({event.source}){keep}. Persist now to keep "
                "your work, or use the server to keep it running.",
            )
        elif event.kind == "warning":
            self._notice(
                "warning",
                f"This runtime ends in about {minutes} minute{'s' * (minutes != 1)} "
                f"({deadline_source(event.source)}). Persist now to keep your work.",
            )
        elif event.kind == "persist":
            self.log.warning(
                "GPU workspace: %s ends in %.0f s: persisting automatically",
                event.source,
                event.remaining,
            )
            job = self._persist("auto")
            if job is not None:
                self.auto_persist = job
                asyncio.ensure_future(self._stop_jobs_after(job))
                self._notice(
                    "info",
                    f"Persisting automatically: the runtime ends in about {minutes} "
                    f"minute{'s' * (minutes != 1)} ({deadline_source(event.source)}).",
                    job.id,
                )

    async def _stop_jobs_after(self, job: Job) -> None:
        """The deadline's persist has checkpointed the jobs' runs too: they stop, interrupted at
        that checkpoint, so the next runtime relaunches them from it."""
        while job.state == "running":
            await asyncio.sleep(0.5)
        stopped = await self.userjobs.interrupt_async(checkpoint=job.state != "done")
        if stopped:
            self._notice(
                "info",
                f"{len(stopped)} job{'s' * (len(stopped) != 1)} stopped at a checkpoint before the "
                "runtime's end: the next runtime relaunches them.",
            )

    def _notice(self, level: str, message: str, job_id: str | None = None) -> None:
        self._notice_ids += 1
        self.notices.append(
            {
                "id": self._notice_ids,
                "level": level,
                "message": message,
                "time": time.time(),
                "job_id": job_id,
            }
        )
        del self.notices[:-KEEP_NOTICES]

    def persist(
        self,
        trigger: str,
        checkpoint_timeout: float | None = None,
        documents_timeout: float | None = None,
    ) -> Job:
        """Start the persist pipeline (or join the one running): the browsers' open documents,
        checkpoints, environment, Git, sync. A SyncError says why it cannot run (no sync, a
        read-only runtime)."""
        config = self.settings
        service = self.sync.require()
        refusal = service.engine.why_not_writable()
        if refusal is not None:
            raise LeaseHeldError(refusal)
        git = None
        if self.git is not None:
            from .runtime.gitrepo import git_step

            git = git_step(self.git)
        # An emergency has no seconds to spare for reading the environment.
        environment = None
        if config.env_snapshot_on_persist and trigger in ORDINARY:
            environment = _tolerant(self.environment.snapshot_step())
        job = start_persist(
            self.jobs,
            service,
            self.checkpoints,
            self.run_async,
            checkpoint_timeout if checkpoint_timeout is not None else config.checkpoint_timeout,
            git=git,
            environment=environment,
            trigger=trigger,
            pages=self.pages,
            key=None if trigger in ORDINARY else "emergency",
            documents_timeout=(
                documents_timeout if documents_timeout is not None else config.document_save_timeout
            ),
        )
        self._git_checked = 0.0  # the sidebar shows the new commit soon after
        return job

    def _persist(
        self,
        trigger: str,
        checkpoint_timeout: float | None = None,
        documents_timeout: float | None = None,
    ) -> Job | None:
        try:
            return self.persist(trigger, checkpoint_timeout, documents_timeout)
        except SyncError as err:
            self.log.error("GPU workspace: cannot persist (%s): %s", trigger, err)
            self._notice("error", f"Could not persist: {err}")
            return None

    # -- emergencies -------------------------------------------------------------------------

    def _on_preemption(self, notice: PreemptionNotice) -> None:
        # On the watcher's thread: the clock learns the new deadline, the loop runs the persist.
        self.clock.record_preemption(notice.cloud, notice.detail, notice.noticed, notice.deadline)
        self.server.io_loop.add_callback(
            self.emergency_persist, f"preemption:{notice.cloud}", False
        )

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.emergency is not None and self.emergency.get("exiting"):
            self._stop_server()  # a second SIGTERM: stop now
            return
        self.server.io_loop.asyncio_loop.call_soon_threadsafe(
            lambda: asyncio.ensure_future(self.emergency_persist("SIGTERM", True))
        )

    async def emergency_persist(self, reason: str, exit_after: bool) -> dict[str, Any]:
        """Checkpoint every tracked kernel briefly, sync what matters most first, report what
        could not be persisted, all within `grace_period`; then stop the server if asked."""
        grace = self.emergency_budget()
        started = time.monotonic()
        self.emergency = {
            "reason": reason,
            "started": time.time(),
            "state": "running",
            "exiting": exit_after,
        }
        self.log.warning("GPU workspace: %s: emergency persist within %.0f s", reason, grace)
        self._notice(
            "error",
            f"{deadline_source(reason)}: this runtime is going away. Persisting everything now.",
        )
        service = self.sync.service
        if service is not None:
            service.engine.urgent = True
            # No file is started that cannot end by then, and one under way stops there.
            service.engine.urgent_until = started + grace - 1
        # A persist already running waits with the patience of ordinary times (a minute for a
        # checkpoint, the browsers' documents): one that has not reached its sync yet is stopped
        # before its next step. This one runs beside it on the grace's own timeouts (its sync
        # joins a pass already running); another emergency's persist is joined.
        ordinary = self.jobs.latest("persist")
        if (
            ordinary is not None
            and ordinary.state == "running"
            and ordinary.result.get("trigger") in ORDINARY
            and next(s.state for s in ordinary.steps if s.name == "sync") == "pending"
        ):
            ordinary.cancel_event.set()
        else:
            ordinary = None
        job = self._persist(
            reason,
            checkpoint_timeout=max(1.0, min(self.settings.checkpoint_timeout, grace * 0.3)),
            documents_timeout=min(
                self.settings.document_save_timeout, EMERGENCY_DOCUMENTS_TIMEOUT, grace * 0.1
            ),
        )
        if ordinary is not None:
            ordinary.result["superseded_by"] = job.id if job is not None else None
        if job is not None:
            while job.state == "running" and time.monotonic() - started < grace - 1:
                await asyncio.sleep(0.05)
            if job.state == "running":
                job.cancel_event.set()  # out of time: what is done is done
        # The jobs' runs were asked with the kernels (the persist's checkpoint step): they stop now,
        # recorded interrupted in the store, for the next runtime to relaunch.
        await self.userjobs.interrupt_async(max(1.0, grace - (time.monotonic() - started) - 2))
        report = await asyncio.get_running_loop().run_in_executor(
            None, self._emergency_report, reason, job, time.monotonic() - started
        )
        self.emergency.update(report, state="done")
        await asyncio.get_running_loop().run_in_executor(None, self._write_report, report)
        if service is not None:
            service.engine.urgent, service.engine.urgent_until = False, None
        if exit_after:
            if service is not None and report["pending_files"]:
                service.final_pass = False  # out of grace: do not start another full pass
            self._stop_server()
        return report

    def _emergency_report(self, reason: str, job: Job | None, seconds: float) -> dict[str, Any]:
        service = self.sync.service
        errors = list(job.errors) if job is not None else ["the sync is not running"]
        pending: list[str] = []
        if service is not None:
            try:  # what still differs from the store, by the same rule a pass uses
                changed, deleted, _, _ = service.engine.plan()
                pending = sorted([f.path for f in changed] + deleted)
            except SyncError as err:
                errors.append(str(err))
        left_behind = list(job.result.get("left_behind") or []) if job is not None else []
        report = {
            "reason": reason,
            "time": time.time(),
            "seconds": round(seconds, 3),
            "job": job.to_dict() if job is not None else None,
            "errors": errors,
            "pending_files": pending[:200],
            "pending_count": len(pending),
            # "path: why" of each file not started (or cut off): it could not end in the grace
            "left_behind": left_behind[:200],
        }
        if pending or errors:
            # Each file named with why where the persist said (left behind: not started, or cut
            # off in the grace), the others by name: changed after the persist took its list.
            why = dict(item.split(": ", 1) for item in left_behind if ": " in item)
            named = [f"{shown(p)} ({why[p]})" if p in why else shown(p) for p in pending[:5]]
            self.log.error(
                "GPU workspace: emergency persist left %d file(s) unpersisted%s%s",
                len(pending),
                f": {', '.join(named)}{' …' if len(pending) > 5 else ''}" if named else "",
                f"; errors: {'; '.join(errors)}" if errors else "",
            )
        else:
            self.log.warning("GPU workspace: emergency persist complete in %.1f s", seconds)
        return report

    def _write_report(self, report: dict[str, Any]) -> None:
        """Next to the sync record, and in the store, where the next runtime finds it."""
        text = json.dumps(report, indent=1, default=str)
        try:
            os.makedirs(self.settings.state_dir, exist_ok=True)
            with open(
                os.path.join(self.settings.state_dir, "emergency-report.json"),
                "w",
                encoding="utf-8",
            ) as f:
                f.write(text)
        except OSError as err:
            self.log.error("GPU workspace: cannot write the emergency report: %s", err)
        service = self.sync.service
        if service is not None:
            try:
                service.engine.write_state("emergency-report.json", json.loads(text))
            except Exception as err:  # the store may be the reason
                self.log.error(
                    "GPU workspace: cannot put the emergency report in the store: %s", err
                )

    def _stop_server(self) -> None:
        self.log.warning("GPU workspace: stopping the server")
        self.server.stop()

    # -- persist and release -----------------------------------------------------------------

    def persist_and_release(self, force: bool = False) -> Job | None:
        """Persist, then shut the server down so a paid runtime stops. A persist that fails
        leaves the server running (with the reason) unless `force`."""
        job = self.persist("release")
        self.release = {"job_id": job.id, "state": "persisting", "force": force, "error": None}
        self.server.io_loop.add_callback(self._release_when_done, job, force)
        return job

    async def _release_when_done(self, job: Job, force: bool) -> None:
        while True:
            while job.state == "running" and not job.result.get("superseded_by"):
                await asyncio.sleep(0.1)
            # Stopped for an emergency persist (though maybe still in its step): the release
            # follows that one instead.
            successor = self.jobs.get(job.result.get("superseded_by") or "")
            if successor is None:
                break
            job = successor
            self.release = {**(self.release or {}), "job_id": job.id}
        assert self.release is not None
        if job.state != "done" and not force:
            self.release.update(state="kept", error="; ".join(job.errors) or job.state)
            self._notice(
                "error", f"Persist failed, so the runtime was not released: {self.release['error']}"
            )
            return
        self.release["state"] = "releasing"
        self._notice("info", "Everything is persisted. Shutting the server down.")
        await asyncio.sleep(1.0)  # the browser's next poll learns it before the server goes
        self._stop_server()

    # -- the API -----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        state = self.clock.state()
        state["preemption_watch"] = self.watcher.state()
        state["notices"] = list(self.notices)
        state["auto_persist"] = (
            self.auto_persist.to_dict() if self.auto_persist is not None else None
        )
        state["emergency"] = {k: v for k, v in (self.emergency or {}).items() if k != "job"} or None
        state["release"] = self.release
        state["grace_period"] = self.settings.grace_period
        hub = self.platform.hub
        state["platform"] = {
            "jupyterhub": None
            if hub is None
            else {
                "user": hub.user,
                "server_name": hub.server_name,
                "api_url": hub.api_url,
                "started": self.hub_view.started if self.hub_view else None,
                "last_activity": self.hub_view.last_activity if self.hub_view else None,
                "activity_of": self.hub_view.activity_of if self.hub_view else None,
                "read_at": self.hub_view.read_at if self.hub_view else None,
                "error": self.hub_view.error if self.hub_view else None,
                "max_age": self.hub_max_age,
                "cull_timeout": self.hub_cull_timeout,
            },
            "kubernetes": self.platform.kubernetes,
            "kubespawner": self.platform.kubespawner,
            "grace": self.grace(),
            "keep_alive": dict(self.keep_alive),
        }
        state["git"] = self.git_status if self.git is not None else {"enabled": False}
        return state


def _tolerant(step: Callable[[Job, Step], None]) -> Callable[[Job, Step], None]:
    """A failed snapshot is reported in the job, and the sync still runs."""

    def run(job: Job, current: Step) -> None:
        try:
            step(job, current)
        except Exception as err:  # noqa: BLE001 - reported, not raised: the files matter more
            current.detail = f"failed: {err}"
            job.errors.append(f"environment snapshot: {err}")

    return run
