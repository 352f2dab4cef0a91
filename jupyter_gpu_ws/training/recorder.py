"""In the kernel: what `gpuws.step(i, loss=…)` and `gpuws.log(…)` record, read off the loop's thread.

The loop only appends `(step, monotonic time, loss, scalars)` to a bounded deque: the values,
tensors included, are kept as references. A background thread takes them a few times a second
and reads them there: CPU tensors with `item()`, CUDA tensors gathered per device, copied into
pinned memory with `non_blocking=True` after the work already queued on the device's default
stream, and read once a CUDA event says the copy is done. The loop never waits for the device.

From what it reads the thread keeps the run's curves (`History`), the steps where the loss was
not finite (a checkpoint taken then is marked suspect), TensorBoard event files when asked, and
appends a progress record to the kernel's training stream for the server (protocol.py).
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import sys
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Any

from ..checkpoints import protocol
from ..checkpoints.files import default_run_name
from .history import History, HistoryError, valid_name

log = logging.getLogger(__name__)

# Entries the loop may leave before the reader takes them; past this the oldest are dropped
# (only a loop of tens of thousands of steps a second gets there, and the curve keeps its shape).
MAX_PENDING = 8192
# How often the background thread reads what the loop recorded.
READ_EVERY = 0.2
# Steps read per look at most: a loop faster than this many steps per READ_EVERY is sampled
# evenly (its last step always), so the reader's share of the GIL stays small at any pace.
MAX_READ = 256
# A pause longer than this between two steps is not training time (a cell ended, the user left).
MAX_STEP_GAP = 60.0
# A W&B run id is a short token; anything else read from a checkpoint is ignored.
_WANDB_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")

Entry = tuple  # (step or None for log(), monotonic seconds, loss, scalars dict or None)


class Recorder:
    """One kernel's (one tracker's) training progress: fed by the loop, read in the background."""

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque(maxlen=MAX_PENDING)
        self.run: str | None = None
        self.total: int | None = None
        self.history = History()
        self.stream: Path | None = None  # the kernel's training stream, set by the agent
        self.tensorboard: Path | None = None
        self.last_step: int | None = None
        self.last_time: float | None = None  # epoch seconds of the last step
        self.last_values: dict[str, float] = {}
        self.elapsed = 0.0  # seconds of stepping, across resumes
        self.bad_spans: list[
            list[Any]
        ] = []  # [first step with a non-finite loss, first finite step after or None, "nan"]
        self.warnings: list[str] = []
        self._previous_step_at: float | None = None
        self._announce = True
        self._stream_bytes = 0
        self._writer: Any = None  # the TensorBoard SummaryWriter
        self._unreadable: set[str] = set()
        self._lock = threading.RLock()

    # -- set-up ------------------------------------------------------------------------------

    def start(self) -> None:
        """Read in the background from now on (one thread per process, for every recorder)."""
        _register(self)

    def configure(self, run: str | None = None, total: int | None = None) -> None:
        with self._lock:
            if run is not None and run != self.run:
                self.run = run
                self._announce = True
            if total is not None:
                if isinstance(total, bool) or not isinstance(total, int) or total < 1:
                    raise ValueError(
                        f"total_steps must be a whole number of at least 1, not {total!r}"
                    )
                self.total = total
                self._announce = True

    def use_tensorboard(self, folder: Path | None, purge_step: int | None = None) -> None:
        """Write every scalar as TensorBoard events into `folder` (None: stop). `purge_step`
        hides the events a resumed run does again (TensorBoard's own rule)."""
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self.tensorboard = folder
            if folder is None:
                return
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                self.tensorboard = None
                raise ImportError(
                    f"tensorboard=True needs the tensorboard package: pip install tensorboard ({err})"
                ) from None
            folder.mkdir(parents=True, exist_ok=True)
            self._writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step, flush_secs=30)
            self._announce = True

    # -- reading what the loop recorded --------------------------------------------------------

    def drain(self) -> None:
        """Read every value recorded so far, update the curves, and tell the server."""
        with self._lock:
            batch = []
            take = self.entries.popleft
            while True:
                try:
                    batch.append(take())
                except IndexError:
                    break
            records: list[dict[str, Any]] = []
            if self._announce:
                self._announce = False
                records.append(self._run_record())
            if batch:
                steps = sum(1 for entry in batch if entry[0] is not None)
                if len(batch) > MAX_READ:
                    stride = len(batch) / MAX_READ
                    chosen = {int(k * stride) for k in range(MAX_READ)} | {len(batch) - 1}
                    batch = [e for k, e in enumerate(batch) if k in chosen or e[0] is None]
                records += self._absorb(self._resolve(batch), steps)
            if records:
                self._send(records)

    def flush(self) -> None:
        """Everything recorded so far read, and the TensorBoard files written out."""
        self.drain()
        with self._lock:
            if self._writer is not None:
                self._writer.flush()

    def _resolve(self, batch: list[Entry]) -> list[tuple[int | None, float, dict[str, float]]]:
        rows: list[tuple[int | None, float, dict[str, float]]] = []
        tensors: list[tuple[dict[str, float], str, Any]] = []
        torch = sys.modules.get("torch")
        # torch may be half imported on the loop's thread (a `track()` after the first steps): no
        # tensor exists before its Tensor class does, so every value is then a plain one.
        tensor = getattr(torch, "Tensor", None)
        for step, at, loss, scalars in batch:
            given = dict(scalars) if scalars else {}
            if loss is not None:
                given["loss"] = loss
            values: dict[str, float] = {}
            for name, value in given.items():
                if tensor is not None and isinstance(value, tensor):
                    tensors.append((values, name, value))
                    values[name] = math.nan  # until read
                elif isinstance(value, bool) or value is None:
                    continue
                else:
                    try:
                        values[name] = float(value)
                    except (TypeError, ValueError):
                        self._cannot_read(name, value)
            rows.append((step, at, values))
        if tensors:
            read = read_tensors([t for _, _, t in tensors])
            for (values, name, _), value in zip(tensors, read, strict=True):
                if value is None:
                    del values[name]
                else:
                    values[name] = value
        return rows

    def _cannot_read(self, name: str, value: Any) -> None:
        if name not in self._unreadable:
            self._unreadable.add(name)
            message = (
                f"gpuws: {name!r} is a {type(value).__name__}, not a number or tensor: not recorded"
            )
            self.warnings.append(message)
            log.warning(message)

    def _absorb(
        self, rows: list[tuple[int | None, float, dict[str, float]]], steps: int
    ) -> list[dict[str, Any]]:
        """The records these rows make: a progress record, and where the loop started a new
        segment (its first step, or a step back: a cell run again, Restart and Run All), the
        progress of the rows before it, then the segment's start, then the rest."""
        wall = time.time() - time.monotonic()  # monotonic → epoch
        records: list[dict[str, Any]] = []
        part = _Part()
        counted = 0  # steps in the parts already closed
        for step, at, values in rows:
            if step is None:  # log(): the values belong to the last step
                step = self.last_step if self.last_step is not None else 0
            else:
                if self.last_step is None or step < self.last_step:
                    records += self._progress(part, part.steps)
                    counted += part.steps
                    part = _Part()
                    records.append(self._restarted(step))
                if (
                    self._previous_step_at is not None
                    and 0 <= at - self._previous_step_at <= MAX_STEP_GAP
                ):
                    self.elapsed += at - self._previous_step_at
                self._previous_step_at = at
                self.last_step, self.last_time = step, wall + at
                part.steps += 1
            for name, value in values.items():
                if name == "loss":
                    self._loss_health(step, value)
                if self._writer is not None and valid_name(name):
                    self._writer.add_scalar(name, value, step, walltime=wall + at)
                if math.isfinite(value):
                    s = part.sums.get(name)
                    if s is None:
                        part.sums[name] = [value, 1, value, value, value, step]
                    else:
                        s[0] += value
                        s[1] += 1
                        s[2] = min(s[2], value)
                        s[3] = max(s[3], value)
                        s[4], s[5] = value, step
                    self.last_values[name] = value
                else:
                    bad = part.nonfinite.setdefault(
                        name, {"step": step, "value": _text(value), "count": 0}
                    )
                    bad["count"] += 1
        # The loop may go faster than the reader samples it: the last part counts what was not read.
        return records + self._progress(part, max(steps - counted, part.steps))

    def _progress(self, part: _Part, steps: int) -> list[dict[str, Any]]:
        """A part's values into the curves, and its progress record (none for an empty part)."""
        at = self.last_time if self.last_time is not None else time.time()
        for name, (total, count, _low, _high, _last, step) in part.sums.items():
            self.history.add(name, step, at, total / count)
        for name, bad in part.nonfinite.items():
            if name not in part.sums:
                self.history.add(
                    name, bad["step"], at, None
                )  # a gap where the value was not finite
        if not part.sums and not part.nonfinite and not steps:
            return []
        return [
            {
                "type": protocol.PROGRESS,
                "run": self.run_name,
                "time": at,
                "step": self.last_step,
                "steps": steps,
                "total": self.total,
                "elapsed": round(self.elapsed, 3),
                "values": {
                    name: {"mean": total / count, "min": low, "max": high, "last": last, "n": count}
                    for name, (total, count, low, high, last, _) in part.sums.items()
                },
                "nonfinite": part.nonfinite,
                "loss_bad": self.loss_bad(),
            }
        ]

    def _restarted(self, step: int) -> dict[str, Any]:
        """A new segment from `step`: the curve goes on from there, and the server, told by the
        record returned, judges the loss against this segment's alone."""
        self.history.truncate_after(step - 1)
        self.bad_spans = [span for span in self.bad_spans if span[0] < step]
        if self.bad_spans and (self.bad_spans[-1][1] is None or self.bad_spans[-1][1] >= step):
            self.bad_spans[-1][1] = None
        return self._resumed_record(step - 1)

    # -- the loss's health -------------------------------------------------------------------

    def _loss_health(self, step: int, value: float) -> None:
        spans = self.bad_spans
        if math.isfinite(value):
            if spans and spans[-1][1] is None:
                spans[-1][1] = step
        elif not spans or spans[-1][1] is not None:
            spans.append([step, None, _text(value)])
            del spans[:-100]

    def loss_bad(self) -> dict[str, Any] | None:
        """The ongoing episode of a non-finite loss: since which step, and what it was."""
        if self.bad_spans and self.bad_spans[-1][1] is None:
            first, _, value = self.bad_spans[-1]
            return {"since": first, "value": value}
        return None

    def suspect_at(self, step: int) -> dict[str, Any] | None:
        """Why a checkpoint at `step` is suspect (the loss was not finite then), or None."""
        with self._lock:
            for first, end, value in reversed(self.bad_spans):
                if first <= step and (end is None or end > step):
                    return {"since": first, "value": value}
        return None

    # -- checkpoints and resume --------------------------------------------------------------

    def checkpoint_metrics(self, step: int) -> dict[str, Any]:
        """What a checkpoint at `step` holds of the training: the curves up to it, the time
        spent, the total, whether the loss was finite, the W&B run. Called off the loop."""
        self.flush()
        with self._lock:
            history = History.from_dict(self.history.to_dict(), self.history.max_points)
            history.truncate_after(step)
            suspect = self.suspect_at(step)
            return {
                "format": 1,
                "run": self.run_name,
                "step": step,
                "total": self.total,
                "elapsed": round(self.elapsed, 3),
                "health": "suspect" if suspect else "healthy",
                "suspect": suspect,
                "history": history.to_dict(),
                "wandb": wandb_run(),
            }

    def resumed(
        self, step: int, metrics: dict[str, Any] | None, run_path: Path | None = None
    ) -> None:
        """The tracker resumed at `step` from a checkpoint holding `metrics` (untrusted: from
        the store): the curves go on from there, here and on the server."""
        self.drain()  # what was recorded before belongs to the run that is being replaced
        with self._lock:
            history = History()
            if isinstance(metrics, dict) and "history" in metrics:
                try:
                    history = History.from_dict(metrics["history"])
                except HistoryError as err:
                    self.warnings.append(
                        f"gpuws: the checkpoint's curves cannot be read ({err}): starting them anew"
                    )
            history.truncate_after(step)
            self.history = history
            elapsed = metrics.get("elapsed") if isinstance(metrics, dict) else None
            self.elapsed = (
                float(elapsed)
                if isinstance(elapsed, (int, float))
                and math.isfinite(elapsed)
                and 0 <= elapsed < 10 * 365 * 86400
                else 0.0
            )
            total = metrics.get("total") if isinstance(metrics, dict) else None
            if (
                self.total is None
                and isinstance(total, int)
                and not isinstance(total, bool)
                and total > 0
            ):
                self.total = total
            self.bad_spans = []
            self.last_step, self.last_time, self._previous_step_at = step, time.time(), None
            if self.tensorboard is not None:
                self.use_tensorboard(self.tensorboard, purge_step=step + 1)
            self._send([self._run_record(), self._resumed_record(step)])
            self._announce = False

    # -- the stream to the server -----------------------------------------------------------

    @property
    def run_name(self) -> str:
        if self.run is None:
            self.run = default_run_name()
        return self.run

    def _run_record(self) -> dict[str, Any]:
        return {
            "type": protocol.RUN,
            "run": self.run_name,
            "total": self.total,
            "time": time.time(),
            "tensorboard": str(self.tensorboard) if self.tensorboard else None,
        }

    def _resumed_record(self, step: int) -> dict[str, Any]:
        return {
            "type": protocol.RESUMED,
            "run": self.run_name,
            "step": step,
            "time": time.time(),
            "total": self.total,
            "elapsed": round(self.elapsed, 3),
            "history": self.history.to_dict(),
        }

    def _send(self, records: list[dict[str, Any]]) -> None:
        if self.stream is None:
            return
        text = "".join(
            json.dumps(r, separators=(",", ":"), allow_nan=False, default=str) + "\n"
            for r in records
        )
        try:
            if self._stream_bytes + len(text) > protocol.TRAINING_STREAM_MAX:
                self._replace_stream()  # it holds everything these records say
                return
            with open(self.stream, "a", encoding="utf-8") as f:
                f.write(text)
            self._stream_bytes += len(text)
        except OSError as err:  # the server's folder went away: nobody to tell
            log.debug("gpuws: cannot write the training stream %s: %s", self.stream, err)

    def _replace_stream(self) -> None:
        """One snapshot record instead of the long stream: the server starts over from it."""
        assert self.stream is not None
        snapshot = {
            **self._resumed_record(self.last_step if self.last_step is not None else -1),
            "type": protocol.SNAPSHOT,
            "last_time": self.last_time,
            "loss_bad": self.loss_bad(),
            "values": {k: v for k, v in self.last_values.items() if math.isfinite(v)},
            "tensorboard": str(self.tensorboard) if self.tensorboard else None,
        }
        text = json.dumps(snapshot, separators=(",", ":"), allow_nan=False) + "\n"
        tmp = self.stream.with_name(self.stream.name + f".tmp{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.stream)
        self._stream_bytes = len(text)

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


class _Part:
    """The values of consecutive rows of one segment: per name [sum, count, min, max, last, step]."""

    def __init__(self) -> None:
        self.sums: dict[str, list[Any]] = {}
        self.nonfinite: dict[str, dict[str, Any]] = {}
        self.steps = 0


def read_tensors(tensors: list[Any]) -> list[float | None]:
    """Each tensor's value as a float (the mean of a tensor with several elements; None when
    it cannot be read), without making the training loop wait.

    CUDA tensors are stacked per device and copied into pinned memory after the work already
    queued on that device's default stream; this thread then polls a CUDA event. No
    `synchronize()`, no blocking copy: the loop's thread never waits for the device.
    """
    import torch

    out: list[float | None] = [None] * len(tensors)
    on_cuda: dict[Any, list[tuple[int, Any]]] = {}
    for k, tensor in enumerate(tensors):
        try:
            t = tensor.detach()
            if t.numel() == 0 or t.is_complex():
                continue
            if t.numel() > 1:
                t = t.float().mean()
            if t.device.type == "cuda":
                on_cuda.setdefault(t.device, []).append((k, t.reshape(())))
            else:
                out[k] = float(t.item())
        except Exception:  # an odd tensor (sparse, meta): not recorded, the loop goes on
            continue
    for device, items in on_cuda.items():
        with torch.cuda.device(device):
            values = torch.stack([t.to(torch.float64) for _, t in items])
            host = torch.empty(len(items), dtype=torch.float64, pin_memory=True)
            host.copy_(values, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
            while not copied.query():
                time.sleep(0.001)
        for (k, _), value in zip(items, host.tolist(), strict=True):
            out[k] = value
    return out


def wandb_run() -> dict[str, str] | None:
    """The W&B run active in this process, if any: its id, project and entity."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return None
    try:
        info = {"run_id": str(run.id)}
    except Exception:
        return None
    for key in ("project", "entity"):
        try:
            value = getattr(run, key)
        except Exception:
            continue
        if isinstance(value, str) and value:
            info[key] = value
    return info


def continue_wandb(info: Any) -> str | None:
    """Make the next `wandb.init()` continue the run a checkpoint names (WANDB_RUN_ID and
    WANDB_RESUME=allow); returns what to tell the user. The id comes from the store: only a
    plain token is used."""
    if (
        not isinstance(info, dict)
        or not isinstance(info.get("run_id"), str)
        or not _WANDB_ID.fullmatch(info["run_id"])
    ):
        return None
    run_id = info["run_id"]
    os.environ["WANDB_RUN_ID"] = run_id
    os.environ["WANDB_RESUME"] = "allow"
    project = info.get("project")
    if (
        isinstance(project, str)
        and _WANDB_ID.fullmatch(project)
        and not os.environ.get("WANDB_PROJECT")
    ):
        os.environ["WANDB_PROJECT"] = project
    active = wandb_run()
    if active is not None and active["run_id"] != run_id:
        return (
            f"gpuws: the checkpoint belongs to W&B run {run_id}, but run {active['run_id']} is active: "
            f"wandb.finish(), then wandb.init() continues {run_id}"
        )
    if active is None:
        return (
            f"gpuws: W&B run {run_id} continues: wandb.init() resumes it (WANDB_RUN_ID is set; after an "
            f"earlier wandb.init() in this kernel, pass id={run_id!r}, resume='allow')"
        )
    return None


def _text(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


# -- the one background thread ------------------------------------------------------------------

_recorders: weakref.WeakSet[Recorder] = weakref.WeakSet()
_reader: threading.Thread | None = None
_reader_lock = threading.Lock()
_stopping = threading.Event()


def _register(recorder: Recorder) -> None:
    global _reader
    with _reader_lock:
        _recorders.add(recorder)
        if _reader is None or not _reader.is_alive():
            _reader = threading.Thread(target=_read_forever, name="gpuws-training", daemon=True)
            _reader.start()


def _read_forever() -> None:
    failing: set[int] = set()
    while not _stopping.wait(READ_EVERY):
        for recorder in list(_recorders):
            try:
                recorder.drain()
                failing.discard(id(recorder))
            except Exception:  # the loop must go on; say it once
                if id(recorder) not in failing:
                    failing.add(id(recorder))
                    log.exception("gpuws: reading the training scalars failed")


@atexit.register
def _stop_reading() -> None:
    """At the interpreter's exit the thread stops between two looks: caught inside torch while
    the interpreter tears down, it would abort the user's script ("terminate called without an
    active exception", exit status 134)."""
    _stopping.set()
    reader = _reader
    if reader is not None and reader.is_alive():
        reader.join(timeout=5)
        if reader.is_alive():
            return  # stuck in a read (it holds a recorder's lock): nothing more at exit
    # What the loop recorded since the reader's last look: the run's last steps and values, which
    # the server would otherwise never see (a finished job's step is its loop's last).
    for recorder in list(_recorders):
        try:
            recorder.drain()
        except Exception:  # noqa: BLE001 - the interpreter is ending: nothing to tell
            log.debug("gpuws: the last training values were not read", exc_info=True)
