"""The server's view of training: every run its kernels report (their training streams) or its
checkpoints hold, with pace, ETA, the verdict against the deadline, curves and anomalies, and
the GPUs' utilisation and memory over the hours beside them."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from ..checkpoints import protocol
from ..checkpoints.coordinator import process_ended
from ..checkpoints.files import complete_checkpoints, read_json, real_folders
from .anomalies import AnomalyPolicy, RunAnomalies, RunSignals
from .history import History, HistoryError
from .progress import DeadlineView, RateMeter, forecast

log = logging.getLogger(__name__)

# Bytes of one kernel's stream read per look: a backlog is caught up over a few looks.
READ_LIMIT = 4 * 2**20
# Runs kept: the live ones, then the most recent of the others.
MAX_RUNS = 50
# Points of the loss in a run's sparkline, spread over the whole run.
SPARKLINE_POINTS = 60
METRICS_FILE = "metrics.json"
MAX_METRICS_BYTES = 32 * 2**20


@dataclass(frozen=True)
class WatchSettings:
    policy: AnomalyPolicy = field(default_factory=AnomalyPolicy)
    gpu_bucket_seconds: float = 5.0  # the GPU charts' resolution over the hours
    gpu_history_seconds: float = 24 * 3600.0
    rescan_seconds: float = 30.0  # how often the checkpoints folder is looked at for runs not live


@dataclass
class Run:
    name: str
    anomalies: RunAnomalies
    history: History = field(default_factory=History)
    meter: RateMeter = field(default_factory=RateMeter)
    kernel_id: str | None = None
    live: bool = False
    total: int | None = None
    step: int | None = None
    last_time: float | None = None
    elapsed: float | None = None
    values: dict[str, float] = field(default_factory=dict)
    tensorboard: str | None = None
    checkpoint: dict[str, Any] | None = None  # step, health, path of its newest checkpoint
    from_checkpoint: str | None = None  # the checkpoint folder its curves were read from (not live)
    verdict: dict[str, Any] = field(default_factory=dict)
    open: list[Any] = field(default_factory=list)
    busy: bool = False


# The start of a stream, kept to tell a replaced stream from the one read so far: the kernel
# replaces it with a snapshot by rename, and the new file may get the old one's inode number.
HEAD_BYTES = 256


@dataclass
class _Cursor:
    path: Path
    inode: int
    head: bytes = b""
    offset: int = 0
    partial: bytes = b""


class TrainingWatch:
    """Fed by `tick()` (every second or so, off the event loop) and by `on_sample()` (the
    monitor's thread); read by `state()` and `history()`. Thread-safe."""

    def __init__(
        self,
        settings: WatchSettings,
        streams: Callable[[], dict[str, Path]],
        kernel_busy: Callable[[str], bool],
        deadline: Callable[[], DeadlineView | None],
        checkpoints_root: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.streams = streams
        self.kernel_busy = kernel_busy
        self.deadline = deadline
        self.checkpoints_root = checkpoints_root
        self.clock = clock
        self.runs: dict[str, Run] = {}
        self.errors: list[str] = []
        self._cursors: dict[str, _Cursor] = {}
        self._kernel_run: dict[str, str] = {}  # kernel id → the run it reported last
        self._scanned = -math.inf
        self._ended: set[str] = set()  # kernels whose process has ended, at the last look
        self._lock = threading.RLock()
        self._gpu_points: dict[int, deque[list[float | None]]] = {}
        self._gpu_names: dict[int, str] = {}
        self._bucket: dict[
            int, list[float]
        ] = {}  # index → [sum util, sum memory fraction, samples, bucket end]
        self._kernel_util: dict[str, deque[tuple[float, float]]] = {}
        self._kernel_memory: dict[str, list[dict[str, Any]]] = {}

    # -- the monitor's samples ---------------------------------------------------------------

    def on_sample(self, sample: dict[str, Any], text: str = "") -> None:
        """Each monitor sample: the GPUs' hours-long history, and which GPUs each kernel uses."""
        now = float(sample.get("time") or self.clock())
        bucket_seconds = self.settings.gpu_bucket_seconds
        keep = max(1, int(self.settings.gpu_history_seconds / bucket_seconds))
        per_kernel: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        with self._lock:
            for gpu in sample.get("gpus") or []:
                index = gpu.get("index")
                if not isinstance(index, int):
                    continue
                self._gpu_names[index] = str(gpu.get("name") or f"GPU {index}")
                util, used, total = (
                    gpu.get("utilization"),
                    gpu.get("memory_used"),
                    gpu.get("memory_total"),
                )
                fraction = used / total if isinstance(used, (int, float)) and total else None
                acc = self._bucket.get(index)
                end = (math.floor(now / bucket_seconds) + 1) * bucket_seconds
                if acc is not None and acc[3] != end:
                    self._close_bucket(index, acc, keep)
                    acc = None
                if acc is None:
                    acc = self._bucket[index] = [0.0, 0.0, 0, end, 0, 0]
                if util is not None:
                    acc[0] += util
                    acc[4] += 1
                if fraction is not None:
                    acc[1] += fraction
                    acc[5] += 1
                acc[2] += 1
                for proc in _processes(gpu):
                    kernel_id = proc.get("kernel_id")
                    if kernel_id:
                        per_kernel.setdefault(kernel_id, []).append((util, gpu))
            horizon = self.settings.policy.input_bound_seconds * 1.5
            for kernel_id, gpus in per_kernel.items():
                utils = [u for u, _ in gpus if isinstance(u, (int, float))]
                series = self._kernel_util.setdefault(kernel_id, deque())
                if utils:
                    series.append((now, sum(utils) / len(utils)))
                while series and series[0][0] < now - horizon:
                    series.popleft()
                seen = {}
                for _, gpu in gpus:
                    seen[gpu.get("index")] = {
                        "index": gpu.get("index"),
                        "name": gpu.get("name"),
                        "used": gpu.get("memory_used") or 0,
                        "total": gpu.get("memory_total") or 0,
                    }
                self._kernel_memory[kernel_id] = list(seen.values())
            for kernel_id in list(self._kernel_memory):
                if kernel_id not in per_kernel:
                    del self._kernel_memory[kernel_id]  # it holds no GPU memory now

    def _close_bucket(self, index: int, acc: list[float], keep: int) -> None:
        points = self._gpu_points.setdefault(index, deque(maxlen=keep))
        util = acc[0] / acc[4] if acc[4] else None
        memory = acc[1] / acc[5] if acc[5] else None
        points.append([acc[3], util, memory])

    # -- the kernels' streams -----------------------------------------------------------------

    def tick(self) -> None:
        """Read what the kernels reported since the last look; judge every live run."""
        now = self.clock()
        streams = self.streams()
        with self._lock:
            for kernel_id in list(self._cursors):
                if kernel_id not in streams:
                    del self._cursors[kernel_id]  # the kernel has gone
                    self._kernel_run.pop(kernel_id, None)
                    self._kernel_util.pop(kernel_id, None)
                    self._scanned = -math.inf  # its runs are now what their newest checkpoints hold
            for kernel_id, path in streams.items():
                try:
                    self._read(kernel_id, path, now)
                except Exception as err:  # one odd stream must not stop the others
                    self._error(f"training stream of kernel {kernel_id[:8]}: {err}")
            # Each kernel's registration, read once a look: its process, its last checkpoint.
            registrations = {
                kernel_id: _read_json(self._registration(kernel_id)) for kernel_id in self._cursors
            }
            ended = {
                kernel_id
                for kernel_id, reg in registrations.items()
                if reg is not None and process_ended(reg)
            }
            if ended - self._ended:
                # A kernel whose process died (kill -9, out of memory) while Jupyter keeps its id
                # (its restarter starts it again): its runs are now what their newest checkpoints
                # hold, as for a kernel that has gone, not at the next periodic look.
                self._scanned = -math.inf
            self._ended = ended
            self._forget_ended_processes(registrations)
            for run in self.runs.values():
                # A kernel's run is the last one it reported (a notebook may train several in turn),
                # while the process that reported it runs: a kernel that died (out of memory, a
                # crash, kill -9) stays listed, and its last status "busy", until it is restarted,
                # and then trains nothing until a cell calls gpuws.track again.
                run.live = (
                    run.kernel_id in self._cursors
                    and self._kernel_run.get(run.kernel_id) == run.name
                    and run.kernel_id not in ended
                )
            if now - self._scanned >= self.settings.rescan_seconds:
                self._scanned = now
                self._scan_checkpoints()
            deadline = self.deadline()
            for run in self.runs.values():
                self._judge(run, now, deadline, registrations.get(run.kernel_id or ""))
            self._trim()

    def _read(self, kernel_id: str, path: Path, now: float) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        cursor = self._cursors.get(kernel_id)
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
            if (
                cursor is None
                or cursor.inode != st.st_ino
                or st.st_size < cursor.offset
                or head[: len(cursor.head)] != cursor.head
            ):
                cursor = self._cursors[kernel_id] = _Cursor(
                    path, st.st_ino
                )  # new, or replaced by a snapshot
            if st.st_size == cursor.offset:
                return
            if len(cursor.head) < HEAD_BYTES:
                cursor.head = head
            f.seek(cursor.offset)
            data = f.read(min(READ_LIMIT, st.st_size - cursor.offset))
        cursor.offset += len(data)
        data = cursor.partial + data
        lines = data.split(b"\n")
        cursor.partial = lines.pop()  # a line still being written
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(record, dict)
                and isinstance(record.get("run"), str)
                and 0 < len(record["run"]) <= 1000
            ):
                self._apply(kernel_id, record, now)

    def _apply(self, kernel_id: str, record: dict[str, Any], now: float) -> None:
        kind = record.get("type")
        run = self._run(record["run"])
        run.kernel_id = kernel_id
        self._kernel_run[kernel_id] = run.name
        run.live = True
        run.from_checkpoint = None
        if _whole(record.get("total"), 1):
            run.total = record["total"]
        if kind == protocol.RUN:
            run.tensorboard = (
                record.get("tensorboard") if isinstance(record.get("tensorboard"), str) else None
            )
        elif kind == protocol.PROGRESS:
            step, at = record.get("step"), record.get("time")
            if not _whole(step, 0) or not _number(at):
                return
            if run.step is not None and step < run.step:
                # Kernels say where a new segment starts (a resumed record) before its progress;
                # a step back without one is a new segment all the same: never judged against
                # an earlier run's best.
                run.meter.reset()
                run.anomalies.restart()
            run.step, run.last_time = step, at
            if _number(record.get("elapsed")):
                run.elapsed = record["elapsed"]
            if _whole(record.get("steps"), 1):
                run.meter.add(at, step)
            for name, value in (record.get("values") or {}).items():
                if isinstance(value, dict) and _number(value.get("mean")):
                    run.history.add(name, step, at, value["mean"])
                    if _number(value.get("last")):
                        run.values[name] = value["last"]
            for name, bad in (record.get("nonfinite") or {}).items():
                if isinstance(bad, dict) and name not in (record.get("values") or {}):
                    run.history.add(name, step, at, None)
            run.anomalies.feed(record, now)
        elif kind in (protocol.RESUMED, protocol.SNAPSHOT):
            try:
                run.history = History.from_dict(record.get("history"))
            except HistoryError as err:
                self._error(f"run {run.name}: curves not readable ({err})")
                run.history = History()
            step = record.get("step")
            run.step = step if _whole(step, -1) else None
            run.last_time = record.get("last_time") if _number(record.get("last_time")) else None
            if _number(record.get("elapsed")):
                run.elapsed = record["elapsed"]
            run.meter.reset()
            run.anomalies.restart()
            if kind == protocol.SNAPSHOT:
                if isinstance(record.get("loss_bad"), dict):
                    run.anomalies.feed({"loss_bad": record["loss_bad"]}, now)
                values = record.get("values")
                if isinstance(values, dict):
                    run.values = {
                        k: v for k, v in values.items() if isinstance(k, str) and _number(v)
                    }
                if isinstance(record.get("tensorboard"), str):
                    run.tensorboard = record["tensorboard"]

    def _run(self, name: str) -> Run:
        run = self.runs.get(name)
        if run is None:
            run = self.runs[name] = Run(name, RunAnomalies(name, self.settings.policy))
        return run

    def _judge(
        self,
        run: Run,
        now: float,
        deadline: DeadlineView | None,
        registration: dict[str, Any] | None,
    ) -> None:
        if run.live and run.kernel_id is not None:
            last = (registration or {}).get("last")
            if isinstance(last, dict) and _whole(last.get("step"), 0):
                run.checkpoint = {
                    "step": last["step"],
                    "health": last.get("health"),
                    "path": last.get("path"),
                    "time": last.get("time"),
                }
            run.busy = bool(self.kernel_busy(run.kernel_id))
        else:
            run.busy = False
        step = run.step if run.step is not None else -1
        finished = run.total is not None and step + 1 >= run.total
        rate = run.meter.rate
        run.verdict = (
            forecast(
                step,
                run.total,
                rate,
                now,
                deadline,
                run.checkpoint["step"] if run.checkpoint else None,
            )
            if run.live
            else {}
        )
        if not run.live:
            run.anomalies.open.clear()
            run.open = []
            return
        util = list(self._kernel_util.get(run.kernel_id or "", ()))
        memory = list(self._kernel_memory.get(run.kernel_id or "", ()))
        run.open = run.anomalies.update(
            RunSignals(
                now=now,
                kernel_id=run.kernel_id,
                busy=run.busy,
                last_step=run.step,
                last_step_time=run.last_time,
                rate=rate,
                finished=finished,
                gpu_util=util,
                gpu_memory=memory,
                verdict=run.verdict,
            )
        )

    def _forget_ended_processes(self, registrations: dict[str, Any]) -> None:
        """A process's stream (a job's, a rank's) outlives the process: its registration is
        gone (removed at its exit, or by the coordinator once its process ended), and the stream,
        read to its end just now (its last steps), goes too."""
        for kernel_id, registration in registrations.items():
            if registration is not None or not kernel_id.startswith(protocol.PROCESS_PREFIX):
                continue
            cursor = self._cursors[kernel_id]
            if os.path.lexists(protocol.registration_file(cursor.path.parent, kernel_id)):
                continue  # there, and unreadable for a moment (being rewritten)
            cursor.path.unlink(missing_ok=True)
            del self._cursors[kernel_id]
            self._kernel_run.pop(kernel_id, None)
            self._kernel_util.pop(kernel_id, None)

    def _registration(self, kernel_id: str) -> Path | None:
        """The registration beside a kernel's stream (its last checkpoint and its health)."""
        cursor = self._cursors.get(kernel_id)
        if cursor is None:
            return None
        return protocol.registration_file(cursor.path.parent, kernel_id)

    # -- runs that are not live: their newest checkpoint's curves ------------------------------

    def _scan_checkpoints(self) -> None:
        root = self.checkpoints_root
        if root is None or not root.is_dir():
            return
        for folder in real_folders(root):  # a link to a folder elsewhere is not one of the runs
            try:
                complete = complete_checkpoints(folder)
            except OSError:
                continue
            if not complete:
                continue
            path, manifest = complete[-1]
            name = manifest.get("run")
            if not isinstance(name, str) or not 0 < len(name) <= 1000:  # a manifest from the store
                name = folder.name
            run = self.runs.get(name)
            if run is not None and (run.live or run.from_checkpoint == str(path)):
                continue
            # Where a process reported the run past its last checkpoint (the loop's last steps),
            # that is where it ended.
            reported = (
                (run.step, run.last_time)
                if run is not None and run.from_checkpoint is None and run.step is not None
                else None
            )
            metrics = _read_metrics(path, manifest)
            run = self._run(name)
            run.from_checkpoint = str(path)
            run.kernel_id, run.live = None, False
            saved_step = manifest["step"] if _whole(manifest.get("step"), 0) else None
            saved_time = manifest.get("time") if _number(manifest.get("time")) else None
            run.step, run.last_time = saved_step, saved_time
            if reported is not None and (run.step is None or reported[0] > run.step):
                run.step, run.last_time = reported
            run.checkpoint = {  # the checkpoint's own step, whatever the run reached after it
                "step": saved_step,
                "health": manifest.get("health"),
                "path": str(path),
                "time": saved_time,
            }
            if _whole(manifest.get("total_steps"), 1):
                run.total = manifest["total_steps"]
            if metrics is not None:
                try:
                    run.history = History.from_dict(metrics.get("history"))
                except HistoryError as err:
                    self._error(f"run {name}: the curves in {path.name} are not readable ({err})")
                if _number(metrics.get("elapsed")):
                    run.elapsed = metrics["elapsed"]

    def _trim(self) -> None:
        if len(self.runs) <= MAX_RUNS:
            return
        others = sorted(
            (r for r in self.runs.values() if not r.live), key=lambda r: r.last_time or 0
        )
        for run in others[: len(self.runs) - MAX_RUNS]:
            del self.runs[run.name]

    def _error(self, message: str) -> None:
        if message not in self.errors:
            log.warning("GPU workspace: %s", message)
            self.errors.append(message)
            del self.errors[:-10]

    # -- answers ------------------------------------------------------------------------------

    def state(self, notebooks: dict[str, str] | None = None) -> dict[str, Any]:
        """`GET /gpuws/api/training`: every run with its pace, ETA, verdict and anomalies."""
        notebooks = notebooks or {}
        with self._lock:
            deadline = self.deadline()
            runs = sorted(self.runs.values(), key=lambda r: (not r.live, -(r.last_time or 0)))
            out = [self._describe(run, notebooks) for run in runs]
            anomalies = [a.to_dict() for run in runs for a in run.open]
        return {
            "now": self.clock(),
            "deadline": None
            if deadline is None
            else {
                "at": deadline.at,
                "source": deadline.source,
                "next_persist": deadline.next_persist,
                "persist_lead_time": deadline.persist_lead_time,
            },
            "runs": out,
            "anomalies": anomalies,
            "errors": list(self.errors),
        }

    def _describe(self, run: Run, notebooks: dict[str, str]) -> dict[str, Any]:
        step = run.step
        finished = run.total is not None and step is not None and step + 1 >= run.total
        stalled = any(a.kind == "stall" for a in run.open)
        if not run.live:
            state = "done" if finished else "stopped"
        elif finished:
            state = "done"
        elif stalled:
            state = "stalled"
        else:
            state = "running" if run.busy else "paused"
        verdict = run.verdict
        return {
            "run": run.name,
            "kernel_id": run.kernel_id,
            "notebook": notebooks.get(run.kernel_id or ""),
            "live": run.live,
            "state": state,
            "step": step,
            "done_steps": None if step is None else step + 1,
            "total": run.total,
            "rate": run.meter.rate if run.live else None,
            "elapsed": run.elapsed,
            "last_time": run.last_time,
            "eta": verdict.get("eta"),
            "finish_at": verdict.get("finish_at"),
            "verdict": verdict or None,
            "values": dict(run.values),
            "scalars": sorted(run.history.series),
            "sparkline": [[p[0], p[2]] for p in run.history.overview("loss", SPARKLINE_POINTS)],
            "anomalies": [a.to_dict() for a in run.open],
            "checkpoint": run.checkpoint,
            "tensorboard": run.tensorboard,
        }

    def history(self, run: str | None = None) -> dict[str, Any] | None:
        """`GET /gpuws/api/training/history`: the curves of every run (or one; None if unknown)
        and the GPUs' utilisation and memory over time."""
        with self._lock:
            if run is not None and run not in self.runs:
                return None
            chosen = [self.runs[run]] if run is not None else list(self.runs.values())
            gpus = []
            for index in sorted(self._gpu_points.keys() | self._bucket.keys()):
                points = [list(p) for p in self._gpu_points.get(index, ())]
                acc = self._bucket.get(index)
                if acc is not None and acc[2]:  # the bucket still filling, as it stands
                    points.append(
                        [
                            acc[3],
                            acc[0] / acc[4] if acc[4] else None,
                            acc[1] / acc[5] if acc[5] else None,
                        ]
                    )
                gpus.append(
                    {
                        "index": index,
                        "name": self._gpu_names.get(index, f"GPU {index}"),
                        "points": points,
                    }
                )
            return {
                "now": self.clock(),
                "runs": {
                    r.name: {
                        "series": r.history.to_dict()["series"],
                        "total": r.total,
                        "step": r.step,
                        "live": r.live,
                    }
                    for r in chosen
                },
                "gpus": gpus,
                "gpu_bucket_seconds": self.settings.gpu_bucket_seconds,
            }


def _read_metrics(path: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """A checkpoint's metrics.json, only if it matches its manifest (a file still arriving from
    the store does not); JSON only, nothing in it is run, and read only as a checkpoint's file
    (checkpoints/files.py: never through a link, from a FIFO or a device)."""
    return read_json(path, manifest, METRICS_FILE, MAX_METRICS_BYTES)


def _read_json(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _processes(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    procs = list(gpu.get("processes") or [])
    for mig in gpu.get("mig") or []:
        procs.extend(mig.get("processes") or [])
    return procs


def _whole(value: Any, minimum: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value < 2**62


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
