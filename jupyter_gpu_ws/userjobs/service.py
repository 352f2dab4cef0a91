"""The job manager wired into the server: its records through the sync's store, its checkpoint
requests through the coordinator, its runs' step and ETA from the training view, and the
relaunch once the start-up restore is done and this runtime holds the lease."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..checkpoints.coordinator import CheckpointRequestError
from ..store.errors import StoreUnavailableError, SyncError
from .bringhome import JobsElsewhere
from .manager import RELAUNCH_WINDOW, Job, JobManager, JobSettings
from .record import RECORDS, stored_records

if TYPE_CHECKING:
    from ..checkpoints.coordinator import CheckpointCoordinator
    from ..monitor.sampler import Sampler
    from ..sync.supervisor import SyncSupervisor
    from ..training.watch import TrainingWatch

log = logging.getLogger(__name__)


class JobHost(Protocol):
    """What the service reads of the running extension (app.py's GpuWorkspaceApp), read live
    rather than copied once: the workspace can change while the server runs (use_workspace),
    and the training view is made after the service."""

    workdir: str
    workspace: str
    relaunch_jobs: bool
    relaunch_window: float
    state_dir: str
    job_stop_grace: float
    relaunch_restores_environment: bool
    checkpoint_timeout: float
    sync: SyncSupervisor
    checkpoints: CheckpointCoordinator
    sampler: Sampler
    training: TrainingWatch

    def run_async(self, coroutine: Any, timeout: float | None = None) -> Any: ...


TICK = 1.0
# While another runtime writes the workspace, its records are read again this often.
RELOAD = 5.0
# The relaunch waits this long at most for the environment's first check.
ENV_CHECK_WAIT = 60.0
# … and this long at most for the restore of the snapshot's difference, where it is allowed.
ENV_RESTORE_WAIT = 1800.0


class StoreRecords:
    """`<workspace>/.gpuws/jobs/<id>.json`, written fenced by the lease like every write."""

    def __init__(self, app: JobHost) -> None:
        self.app = app

    def _engine(self) -> Any:
        engine = self.app.sync.engine
        if engine is None:
            raise SyncError("the store is not open yet")
        return engine

    def why_not_writable(self) -> str | None:
        engine = self.app.sync.engine
        if engine is None:
            return "the store is not open yet"
        return engine.why_not_writable()

    def write(self, job_id: str, record: dict[str, Any]) -> None:
        self._engine().write_state(f"{RECORDS}/{job_id}.json", record)

    def read_all(self) -> list[tuple[str, Any]]:
        return stored_records(self._engine().store)

    def any_records(self) -> bool:
        """Whether the workspace has job records in the store (one listing, nothing read)."""
        engine = self._engine()
        return (
            next(iter(engine.store.backend.list(engine.store.state_key(RECORDS))), None) is not None
        )

    def writer_gone(self) -> tuple[str, float, float] | None:
        """While another runtime holds the lease and has not renewed it for over half its
        lifetime (it renews every quarter): its host, the seconds until its lease runs out here,
        and for how long it has been silent. None while this runtime writes, or the writer is
        renewing."""
        engine = self.app.sync.engine
        if engine is None or engine.lease.held:
            return None
        info = engine.keeper.waiting_for
        if info is None:
            return None
        quiet = engine.lease.unchanged_for()
        if quiet < info.ttl / 2:
            return None
        return info.host, engine.lease.free_in(info), quiet

    def delete(self, job_id: str) -> None:
        engine = self._engine()
        engine.lease.fence()
        engine.store.backend.delete(engine.store.state_key(f"{RECORDS}/{job_id}.json"))


class JobService:
    """The app's `userjobs`: the manager, and a thread that reads the store's records once the
    restore is done, writes what could not be written, and relaunches."""

    def __init__(self, app: JobHost, env: dict[str, str]) -> None:
        self.app = app
        settings = JobSettings(
            workdir=Path(app.workdir),
            workspace=app.workspace,
            host=socket.gethostname(),
            runtime_id=app.checkpoints.server_id,
            env=env,
            relaunch=app.relaunch_jobs,
            stop_grace=app.job_stop_grace,
            state_dir=Path(app.state_dir) if getattr(app, "state_dir", None) else None,
            relaunch_window=getattr(app, "relaunch_window", RELAUNCH_WINDOW),
        )
        self.records = StoreRecords(app)
        # The jobs run elsewhere (a cluster's pod): listed from their areas, brought home.
        self.elsewhere = JobsElsewhere(lambda: app.sync.engine)
        self.manager = JobManager(
            settings,
            self.records,
            checkpoint=self._checkpoint,
            run_view=self._run_view,
            run_ended=lambda job: self.app.training.tick(),
            gpu_count=self._gpu_count,
            elsewhere=self.elsewhere.view,
        )
        self._stop = threading.Event()
        self._said: str | None = None  # the store's fault the log last told of
        # Set to look at once, not at the next tick: the sync's restore at start is over (the
        # relaunch waits for it), or the server stops.
        self._wake = threading.Event()
        app.sync.on_running.append(self._wake.set)
        self._relaunched = False
        self._settled = False  # the store's records read as the workspace's writer
        self._environment_checked = False  # whether the store was looked at for job records
        self._environment_to_note = False  # relaunched before the check was done: say it after
        self._read = 0.0
        self._thread = threading.Thread(target=self._tick, name="gpuws-jobs", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self.elsewhere.start()

    def _tick(self) -> None:
        while True:
            self._wake.wait(TICK)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.check()

    def check(self) -> None:
        """One look (the tick's); a failure shows in the jobs' list until a look succeeds, not
        only in the log: it may be what keeps a job from being relaunched."""
        try:
            self._once()
        except StoreUnavailableError as err:
            # The store away: the Sync section says so (one box), the tick looks again in a
            # second; the log says it once per fault, not a traceback every tick.
            if str(err) != self._said:
                self._said = str(err)
                log.warning("GPU workspace: the jobs wait for the store: %s", err)
            self.manager.check_error = f"the jobs wait for the store: {err}"
        except Exception as err:  # noqa: BLE001 - said in the list, and logged whole
            log.exception("GPU workspace: the jobs' tick failed")
            self.manager.check_error = (
                f"the jobs' background check failed: {err} (the server's log has the rest)"
            )
        else:
            self.manager.check_error = None
            self._said = None

    def _once(self) -> None:
        manager = self.manager
        manager.settings.workspace = (
            self.app.workspace
        )  # a legacy name may have been chosen at start
        if self.app.sync.engine is None or manager.store is None:
            # The store is not open yet; where the sync could not open it, the list says why
            # (the sync's fault, which the panel's Sync section shows) instead of "being read".
            sync = self.app.sync
            manager.unopened = sync.error if sync.state == "error" else None
            return
        manager.unopened = None
        self._check_environment_early()
        # The restore at start is over once the sync's service runs (supervisor.py): the jobs'
        # checkpoints are in the work directory by then. Until then the records are read as
        # another runtime's (listed, with when they relaunch here), never taken as orphans.
        restored = self.app.sync.service is not None
        writable = restored and manager.store.why_not_writable() is None
        if self._settled and self.app.sync.engine.read_only:
            # This runtime wrote the workspace, and another has taken it over (this one was
            # stalled past its lease: a paused machine): that one relaunches the jobs, so they
            # stop here. Two copies of a job never run at once.
            self._settled = self._relaunched = False
            self._read = 0.0  # the records read again below: they are the new writer's now
            stopped = manager.hand_over(self.app.sync.engine.read_only_reason or "")
            if stopped:
                log.warning(
                    "GPU workspace: another runtime took the workspace over; stopped here: %s",
                    ", ".join(stopped),
                )
        if writable and not self._settled:
            # The writer now: no other runtime runs the workspace's jobs, an active record's is gone.
            self._settled = manager.load(orphans=True)
        elif not writable and (not manager.loaded or time.monotonic() - self._read >= RELOAD):
            manager.load(orphans=False)  # another runtime writes: its jobs as it records them
            self._read = time.monotonic()
        manager.flush()
        if writable:
            manager.renew()
            manager.record_steps()
        manager.stop_on_nan_loss()
        self._note_environment()
        if not self._settled or self._relaunched or not writable:
            return  # the lease decides: only its holder relaunches
        self._relaunched = True
        if not manager.relaunch_pending():
            return
        self._prepare_environment()
        started = manager.relaunch()
        if started:
            log.warning("GPU workspace: relaunched %d job(s): %s", len(started), ", ".join(started))

    def _check_environment_early(self) -> None:
        """Where the store holds job records and this runtime relaunches, the environment's
        check starts as soon as the store is open: it runs beside the restore and the wait for
        the lease, not after them, before the first relaunched step."""
        if self._environment_checked or not self.app.relaunch_jobs:
            return
        environment = getattr(self.app, "environment", None)
        if environment is None:
            return
        has_records = self.records.any_records()  # the store's fault is the tick's: looked at again
        self._environment_checked = True
        if has_records:
            environment.watch()

    def _wait_for_environment(self) -> None:
        """The environment is checked before a job runs in it (its state then says whether it
        matches the snapshot); a check that takes too long does not hold the jobs back."""
        environment = getattr(self.app, "environment", None)
        if environment is None:
            return
        environment.watch()
        deadline = time.monotonic() + ENV_CHECK_WAIT
        while time.monotonic() < deadline and not self._stop.is_set():
            if environment.state().get("state") != "capturing":
                return
            time.sleep(0.5)

    def _prepare_environment(self) -> None:
        """Check the environment; where it differs from the snapshot, restore the difference
        first if `relaunch_restores_environment` allows it, else relaunch on it all the same.
        Either way each relaunched job's `relaunch` says on which environment it runs. Where
        the restore is not allowed, the relaunch does not wait for a check still running (it
        imports torch: seconds): the jobs start, and their word follows once the check is done
        (_note_environment, at the next ticks)."""
        environment = getattr(self.app, "environment", None)
        if not self.app.relaunch_restores_environment:
            if environment is not None:
                environment.watch()
                self._environment_to_note = True
                self._note_environment()
            return
        self._wait_for_environment()
        state = environment.state() if environment is not None else {}
        if state.get("state") != "differs":
            return
        count = _differing(state.get("diff"))
        differs = _differs(count)
        self.manager.environment_note = (
            f"after the environment's restore of the snapshot's difference ({count})"
        )
        self.manager.environment_note = self._restore_environment(environment, count, differs)

    def _note_environment(self) -> None:
        """Once the environment's check is done: where it differs from the snapshot, the jobs
        relaunched meanwhile say they run on it (and so does every later relaunch)."""
        environment = getattr(self.app, "environment", None)
        if not self._environment_to_note or environment is None:
            return
        state = environment.state()
        if state.get("state") == "capturing":
            return
        self._environment_to_note = False
        if state.get("state") == "differs":
            self.manager.note_environment(_differs(_differing(state.get("diff"))))

    def _restore_environment(self, environment: Any, count: str, differs: str) -> str:
        """Run the environment's restore job and wait for it: what the relaunch then runs on."""
        try:
            job = environment.start_restore(None, offline=False, uninstall=False)
        except Exception as err:  # noqa: BLE001 - refused (sources to build, the store away): relaunched as is
            log.warning(
                "GPU workspace: the environment's restore before the relaunch was refused: %s", err
            )
            return f"{differs} (its restore was refused: {err})"
        deadline = time.monotonic() + ENV_RESTORE_WAIT
        while job.state == "running" and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.5)
        if job.state == "running":
            return f"{differs} (its restore, job {job.id}, was still running)"
        if job.state != "done" or job.errors:
            why = "; ".join(job.errors) or job.state
            return f"{differs} (its restore, job {job.id}, failed: {why})"
        return f"after restoring the snapshot's difference ({count}; job {job.id})"

    # -- the manager's callables -----------------------------------------------------------------

    def _checkpoint(self, job: Job) -> str | None:
        """Ask the job's run for a checkpoint and wait for it (None), or say why there is none."""
        coordinator = self.app.checkpoints
        timeout = float(self.app.checkpoint_timeout)
        live = self._live_run(job)
        if live is None:
            return "its process has not registered a run (no gpuws.track() yet)"
        run_id = live["run_id"]

        async def ask() -> str | None:
            result = await coordinator.request_run(run_id)
            if result.get("state") == "error":
                return str(result.get("message"))
            left = await coordinator.wait_done([result["request_id"]], timeout)
            if left:
                return f"no checkpoint within {timeout:.0f} s"
            record = coordinator.requests.get(result["request_id"]) or {}
            return str(record.get("message")) if record.get("state") == "error" else None

        try:
            return self.app.run_async(ask(), timeout + 10)
        except CheckpointRequestError as err:
            return str(err)
        except Exception as err:  # noqa: BLE001 - the stop goes on without it
            return f"the checkpoint request failed: {err}"

    def _live_run(self, job: Job) -> dict[str, Any] | None:
        """The run the job's processes registered: a plain process under the job's own id, the
        ranks of a torchrun job under their run's, each saying whose job it is."""
        runs = self.app.checkpoints.run_states()
        return runs.get(job.record.id[2:]) or next(
            (r for r in runs.values() if r.get("job") == job.record.id), None
        )

    def _gpu_count(self) -> int | None:
        """This runtime's GPUs as the monitor's newest sample has them; None before its first
        sample or where it cannot read them (no NVML): a job then runs as asked."""
        sample = self.app.sampler.latest
        gpus = sample.get("gpus") if sample else None
        return len(gpus) if gpus else None

    def _run_view(self, job: Job) -> dict[str, Any]:
        """The job's run as the server sees it: registered (live) or in the training view."""
        record = job.record
        live = self._live_run(job)
        if live and isinstance(live.get("run"), str):
            record.run = live["run"]
        if not record.run:
            return {}
        out: dict[str, Any] = {"run": record.run}
        if live and isinstance(live.get("step"), int) and live["step"] >= 0:
            out["step"] = live["step"]
        last = (live or {}).get("last")
        if isinstance(last, dict) and isinstance(last.get("step"), int):
            out["checkpoint_step"] = last["step"]
        training = self.app.training.state()
        for run in training.get("runs", []):
            if run.get("run") == record.run:
                if isinstance(
                    run.get("step"), int
                ):  # the stream's: newer than the registration's, mostly
                    out["step"] = max(run["step"], out.get("step", -1))
                verdict = run.get("verdict") or {}
                nan = next(
                    (a for a in run.get("anomalies") or [] if a.get("kind") == "nan-loss"), None
                )
                out.update(
                    total_steps=run.get("total"),
                    eta_seconds=run.get("eta"),
                    # Without a deadline the verdict only says the ETA, which the job has already.
                    verdict=None
                    if verdict.get("state") == "no-deadline"
                    else verdict.get("message") or None,
                    nan_loss=nan is not None,
                )
                if (
                    nan is not None
                ):  # when the view saw it and from which step: the manager stops on it
                    out.update(nan_since=nan.get("since"), nan_step=nan.get("step"))
                break
        if "checkpoint_step" in out:  # a run is at least where its last checkpoint was taken
            out["step"] = max(out["checkpoint_step"], out.get("step", -1))
        return out

    # -- the runtime's end -----------------------------------------------------------------------

    def interrupt(self, grace: float | None = None, checkpoint: bool = False) -> list[str]:
        """Stop the running jobs for the runtime's end and record them interrupted (blocking)."""
        return self.manager.interrupt_all(grace, checkpoint=checkpoint)

    async def interrupt_async(
        self, grace: float | None = None, checkpoint: bool = False
    ) -> list[str]:
        return await asyncio.get_running_loop().run_in_executor(
            None, self.interrupt, grace, checkpoint
        )

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.elsewhere.stop()


def _differs(count: str) -> str:
    """What a relaunch on an environment unlike the snapshot runs on, in the job's words."""
    return f"on this environment, which differs from the snapshot: {count}"


def _differing(diff: Any) -> str:
    """ "2 packages": how many the environment has more, fewer or at another version."""
    diff = diff if isinstance(diff, dict) else {}
    count = sum(len(diff.get(key) or []) for key in ("added", "removed", "changed"))
    return f"{count} package{'' if count == 1 else 's'}"
