"""Tracked training state: `track`, the `step` safe point, `checkpoint`, `resume`.

At a safe point the tracked state is copied into reusable CPU staging buffers (pinned when on
CUDA), and a background thread writes it, so the loop stalls for the copy alone. At most one
write is in flight; requests arriving during a write are coalesced into the next safe point.
torch is imported only when something is tracked, so `import jupyter_gpu_ws` stays light; without
torch, plain values are saved as JSON (plainstate.py), and a checkpoint needs neither torch nor NumPy.

`step(i, loss=…, **scalars)` also records the training's progress (training/recorder.py): a
reference to each value, read in the background; each checkpoint holds the curves up to its
step and whether the loss was finite, and `resume()` prefers the newest healthy checkpoint.
"""

from __future__ import annotations

import atexit
import copy
import errno
import json
import logging
import os
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from ..training.recorder import Recorder, continue_wandb
from ..vocabulary import age
from . import dcpfiles, plainstate, termination
from .files import (
    CheckpointError,
    CheckpointInfo,
    apply_retention,
    complete_checkpoints,
    default_run_name,
    finish,
    info_of,
    new_tmp_dir,
    read_json,
    run_dir,
    verify,
)
from .formats import capture_rng, read_checkpoint, restore_rng, restore_value, write_tensors
from .fromstore import NONE, bring_newest
from .process_agent import start_for_job

logger = logging.getLogger(__name__)

PLAIN = (int, float, str, bool, type(None), list, tuple, dict)
# The curves, time and health of the training at a checkpoint's step (training/recorder.py).
METRICS = "metrics.json"
# A checkpoint's metrics file is read only up to this size: it comes from the store.
MAX_METRICS_BYTES = 32 * 2**20
_monotonic = time.monotonic

# The checkpoint writers started in this process, joined at its exit (_finish_writes).
_writers: list[threading.Thread] = []
# How long a script's exit waits for a checkpoint still being written.
EXIT_WAIT = 120.0
# The request id of a checkpoint taken because of a SIGTERM (in its manifest).
SIGTERM_REQUEST = "SIGTERM"


def default_root() -> str:
    """Checkpoints live in the work directory (so the sync engine carries them to the store)."""
    return os.path.join(os.environ.get("GPUWS_WORKDIR") or os.getcwd(), ".gpuws", "checkpoints")


@dataclass
class Policy:
    every_steps: int | None = None
    every_seconds: float | None = None
    keep_last: int = 3


@dataclass
class Pending:
    """A request to checkpoint at the next safe point (from the server, a callback, or the user)."""

    request_id: str | None = None
    requested: float = field(default_factory=time.time)


class Tracker:
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.run: str | None = None
        self.root = default_root()
        self.policy = Policy()
        self.step_value = -1
        # The requests whose checkpoint is complete, newest last: a later save (the policy's, or
        # the next request's) replaces `last`, and the server asking still learns its request was met.
        self.answered: deque[str] = deque(maxlen=32)
        # The requests whose checkpoint failed, with why, newest last: the server asking ends its
        # wait at once with the kernel's own reason instead of running out of time.
        self.failed: deque[dict[str, str]] = deque(maxlen=32)
        self._last: CheckpointInfo | None = None
        self.last_health: str | None = None  # "healthy" or "suspect" (the loss was not finite)
        self.last_error: str | None = None
        self.restored: dict[str, Any] = {}
        self.on_change: Callable[[], None] | None = None
        self._pending: Pending | None = None
        self._next_time = float("inf")
        self._staging: dict[str, Any] = {}
        self._writer: threading.Thread | None = None
        self._write_done = threading.Event()
        self._write_done.set()
        self._lock = threading.Lock()
        self.last_save_started = float("-inf")  # monotonic: a SIGTERM's save is one after it
        # Monotonic: when a checkpoint that a request of the server asked for was complete here
        # (the server has one before it stops a job; termination.py).
        self.requested_saved_at = float("-inf")
        self.cuda = False
        self._caller_reports = False  # a checkpoint(wait=True) raises the write's failure itself
        self.training = Recorder()
        # The first recorded step starts the background reader; then this is the deque's append.
        self._record: Callable[[tuple], None] = self._start_recording

    @property
    def last(self) -> CheckpointInfo | None:
        """The newest checkpoint this tracker wrote (or resumed from)."""
        return self._last

    @last.setter
    def last(self, info: CheckpointInfo | None) -> None:
        self._last = info
        if info is not None and info.request_id:
            self.answered.append(info.request_id)

    def __repr__(self) -> str:
        """What a cell ending in `gpuws.track(...)` shows: the run, what is tracked, where it goes."""
        tracked = ", ".join(self.objects) or "nothing yet"
        return f"<gpuws run {self.run or default_run_name()!r}: {tracked}; checkpoints in {_place(self.run_path)}>"

    # -- set-up ------------------------------------------------------------------------------

    def track(
        self,
        name: str | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = None,
        root: str | None = None,
        total_steps: int | None = None,
        tensorboard: bool | None = None,
        **objects: Any,
    ) -> Tracker:
        for key, obj in objects.items():
            stateful = callable(getattr(obj, "state_dict", None)) and callable(
                getattr(obj, "load_state_dict", None)
            )
            if not stateful and not isinstance(obj, PLAIN):
                raise TypeError(
                    f"gpuws.track: {key!r} is a {type(obj).__name__} without state_dict()/load_state_dict(). "
                    "Track models, optimizers, schedulers, AMP scalers, or plain values "
                    "(numbers, strings, lists, dicts)."
                )
        if every_steps is not None and every_steps < 1:
            raise ValueError("every_steps must be at least 1")
        if every_seconds is not None and every_seconds <= 0:
            raise ValueError("every_seconds must be positive")
        if keep_last is not None and keep_last < 1:
            raise ValueError("keep_last must be at least 1 (the newest checkpoint is always kept)")
        _check_total(total_steps)
        self.objects.update(objects)
        self.run = name or self.run or default_run_name()
        if root is not None:
            self.root = root
        if every_steps is not None:
            self.policy.every_steps = every_steps
        if every_seconds is not None:
            self.policy.every_seconds = every_seconds
            self._next_time = time.monotonic() + every_seconds
        if keep_last is not None:
            self.policy.keep_last = keep_last
        self.cuda = _uses_cuda(self.objects.values())
        self.progress(total_steps, tensorboard=tensorboard)
        if type(self) is Tracker and os.environ.get("GPUWS_JOB_ID"):
            start_for_job(self)  # a job's run registers with the server that runs the job
        termination.install(self)  # SIGTERM saves at the next step first (termination.py)
        self._changed()
        return self

    def progress(
        self, total: int | None = None, name: str | None = None, tensorboard: bool | None = None
    ) -> Tracker:
        """Say how many steps the run has (for its ETA against the deadline) and, optionally,
        its name and whether its scalars are also written as TensorBoard event files (into
        `<run folder>/tensorboard/`, where the sync carries them to the store)."""
        _check_total(total)
        if name is not None:
            self.run = name
        self.run = self.run or default_run_name()
        self.training.configure(run=self.run, total=total)
        if tensorboard is not None:
            self.training.use_tensorboard(self.run_path / "tensorboard" if tensorboard else None)
        self.training.start()
        return self

    @property
    def run_path(self) -> Path:
        return run_dir(self.root, self.run or default_run_name())

    # -- the safe point ----------------------------------------------------------------------

    def step(self, i: int, loss: Any = None, scalars: dict[str, Any] | None = None) -> None:
        """Call once per iteration, after optimizer.step(): records the step (and a reference to
        each value, read later in the background), and saves here when a checkpoint is due."""
        now = _monotonic()
        self._record((i, now, loss, scalars))
        self.step_value = i
        if self._pending is None:
            every = self.policy.every_steps
            if every and i % every == 0 and i > 0:
                self._pending = Pending()
            elif self._next_time <= now:
                self._pending = Pending()
            else:
                return
        if not self._write_done.is_set():
            return  # a write is in flight: this request joins the next safe point after it
        self._save(i)
        termination.end_if_saved(self)

    def safe_point(self, i: int) -> None:
        """The safe point alone, for callbacks that record their steps with `record()`: saves
        here when a checkpoint is due (`step()` does both, inline, for the loop's sake)."""
        self.step_value = i
        if self._pending is None:
            every = self.policy.every_steps
            if every and i % every == 0 and i > 0:
                self._pending = Pending()
            elif self._next_time <= _monotonic():
                self._pending = Pending()
            else:
                return
        if self._write_done.is_set():
            self._save(i)
            termination.end_if_saved(self)

    def record(self, i: int, loss: Any = None, scalars: dict[str, Any] | None = None) -> None:
        """Record step `i`'s values without a safe point (the callbacks save at their own)."""
        self._record((i, _monotonic(), loss, scalars))

    def log(self, scalars: dict[str, Any]) -> None:
        """Values outside the step (a validation score): they belong to the last step recorded."""
        self._record((None, _monotonic(), None, scalars))

    def _start_recording(self, entry: tuple) -> None:
        self.training.start()
        self._record = self.training.entries.append
        self._record(entry)

    def request(self, request_id: str | None = None) -> None:
        """Ask for a checkpoint at the next safe point (thread-safe; the comm handler calls it)."""
        with self._lock:
            if self._pending is None:
                self._pending = Pending(request_id)
            elif request_id:
                self._pending.request_id = request_id
        self._changed()

    @property
    def pending(self) -> Pending | None:
        return self._pending

    # -- SIGTERM (termination.py) --------------------------------------------------------------

    # A save needs no other process: one may be taken outside the loop (a kernel between cells).
    saves_alone = True

    @property
    def sigterm_label(self) -> str:
        """How the SIGTERM lines name this process (a rank, in a distributed run)."""
        return ""

    def ask_on_sigterm(self) -> None:
        """From the SIGTERM handler: a checkpoint at the next step. It may interrupt the loop
        holding the lock, so it takes none (a request already pending is met by that save)."""
        if self._pending is None:
            self._pending = Pending(SIGTERM_REQUEST)

    def checkpoint(self, wait: bool = False) -> CheckpointInfo | None:
        """Save now, at the current step. With `wait`, return once the files are complete."""
        if not self.objects:
            raise CheckpointError(
                "Nothing is tracked: call gpuws.track(model=..., optimizer=...) first"
            )
        self._write_done.wait()
        if self._pending is None:
            self._pending = Pending()
        self._caller_reports = wait
        self._save(max(self.step_value, 0), explicit=True)
        if wait:
            self._write_done.wait()
            if self.last_error:
                raise CheckpointError(self.last_error)
            return self.last
        return None

    def wait(self, timeout: float | None = None) -> bool:
        return self._write_done.wait(timeout)

    @property
    def writing(self) -> bool:
        """A checkpoint is being written (read without a lock: a signal handler may ask)."""
        return not self._write_done.is_set()

    # -- saving ------------------------------------------------------------------------------

    def _save(self, step: int, explicit: bool = False) -> None:
        torch = plainstate.optional_torch()

        # One save at a time: the slot and the request are taken together, so a second thread
        # arriving at the same moment (the agent's, while the loop steps) finds the write
        # started and leaves its request for the next safe point, never a second writer whose
        # checkpoint would hide the first's request id.
        with self._lock:
            if not self._write_done.is_set():
                return
            pending, self._pending = self._pending, None
            self._write_done.clear()
        self.last_save_started = time.monotonic()
        started = time.perf_counter()
        try:
            # The values recorded up to this step, read now: the checkpoint's curve then ends at
            # its step, even when the loop has gone on by the time the writer asks for it.
            self.training.drain()
            state = {name: self._stage(name, _state_of(obj)) for name, obj in self.objects.items()}
            rng = capture_rng(torch)
            if self.cuda and torch is not None:
                torch.cuda.synchronize()
        except BaseException as err:
            interrupted = not isinstance(
                err, Exception
            )  # Ctrl-C, SystemExit: not the state's fault
            with self._lock:
                if interrupted and self._pending is None:
                    self._pending = (
                        pending  # nothing was written: the request stays for the next safe point
                    )
                self._write_done.set()
            if interrupted:
                raise
            # The state could not be read (a state_dict() that raises, no memory for the copy).
            # The request is answered as failed, with the reason; a checkpoint() the user called
            # raises it, but a safe point in the loop never does: a click on Persist now or a
            # policy must not end a training run. The policy tries again at its next time.
            message = f"Checkpoint at step {step} failed: {str(err) or type(err).__name__}"
            self._failed(pending, message)
            if self.policy.every_seconds:
                self._next_time = time.monotonic() + self.policy.every_seconds
            if explicit:
                raise CheckpointError(message) from err
            logger.error("gpuws: %s (the training goes on)", message)
            return
        stall = time.perf_counter() - started
        if self.policy.every_seconds:
            self._next_time = time.monotonic() + self.policy.every_seconds
        self._writer = threading.Thread(
            target=self._write,
            args=(state, rng, step, pending, stall),
            name="gpuws-checkpoint",
            daemon=True,
        )
        self._writer.start()
        _writers[:] = [t for t in _writers if t.is_alive()] + [self._writer]

    def _stage(self, prefix: str, value: Any) -> Any:
        """A copy whose tensors live in reused CPU buffers: the loop may go on at once."""
        torch = sys.modules.get("torch")  # not imported: nothing tracked holds a tensor
        if torch is not None and isinstance(value, torch.Tensor):
            buffer = self._staging.get(prefix)
            source = value.detach()
            if buffer is None or buffer.shape != source.shape or buffer.dtype != source.dtype:
                buffer = torch.empty(
                    source.shape, dtype=source.dtype, device="cpu", pin_memory=source.is_cuda
                )
                self._staging[prefix] = buffer
            buffer.copy_(source, non_blocking=source.is_cuda)
            return buffer
        if isinstance(value, dict):
            return {k: self._stage(f"{prefix}.{k}", v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            staged = [self._stage(f"{prefix}.{i}", v) for i, v in enumerate(value)]
            return type(value)(staged) if isinstance(value, tuple) else staged
        return copy.deepcopy(value)

    def _write(
        self,
        state: dict[str, Any],
        rng: dict[str, Any],
        step: int,
        pending: Pending | None,
        stall: float,
    ) -> None:
        torch = plainstate.optional_torch()
        started = time.perf_counter()
        tmp: Path | None = None
        try:
            tmp = new_tmp_dir(self.run_path)
            known: dict[str, str] = {}  # checksums computed while writing
            if torch is None:  # plain values only (nothing can hold a tensor): JSON
                (tmp / plainstate.STATE).write_bytes(plainstate.dumps(state))
                (tmp / plainstate.RNG).write_bytes(plainstate.dumps(rng))
            else:
                skeleton, known["tensors.bin"] = write_tensors(state, tmp / "tensors.bin")
                torch.save(skeleton, tmp / "state.pt")
                torch.save(rng, tmp / "rng.pt")
            metrics = self.training.checkpoint_metrics(
                step
            )  # the curves up to here, the loss's health
            with open(tmp / METRICS, "w", encoding="utf-8") as f:
                json.dump(metrics, f, separators=(",", ":"), allow_nan=False)
            extra = {
                "run": self.run,
                "request_id": pending.request_id if pending else None,
                "stall_seconds": stall,
                "health": metrics["health"],
                "suspect": metrics["suspect"],
                "total_steps": metrics["total"],
                "wandb": metrics["wandb"],
            }
            info = finish(tmp, step, sorted(self.objects), extra, known=known)
            info.request_id = pending.request_id if pending else None
            if info.request_id not in (None, SIGTERM_REQUEST):
                self.requested_saved_at = time.monotonic()
            self.last = info
            self.last_health = metrics["health"]
            self.last_seconds = stall + time.perf_counter() - started
            self.last_error = None
            apply_retention(self.run_path, self.policy.keep_last)
        except Exception as err:  # the training goes on; the failure is reported
            self._failed(pending, f"Checkpoint at step {step} failed: {self._why_not_written(err)}")
            if not self._caller_reports:  # else it raises this, and one line is enough
                logger.error(self.last_error)
            if tmp is not None:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            self._caller_reports = False
            self._write_done.set()
            self._changed()

    def _failed(self, pending: Pending | None, message: str) -> None:
        self.last_error = message
        if pending is not None and pending.request_id:
            self.failed.append({"request_id": pending.request_id, "message": message})
        self._changed()

    def _why_not_written(self, err: Exception) -> str:
        """A failed write in one line: the cause, and for a disk's refusal what to do."""
        if isinstance(err, OSError) and err.strerror:
            where = _place(Path(err.filename)) if err.filename else _place(self.run_path)
            if err.errno == errno.ENOSPC:
                return (
                    f"no space left on the disk of {where}: free some, or keep fewer checkpoints "
                    "with gpuws.track(keep_last=1)"
                )
            return (
                f"cannot write {where} ({err.strerror}): choose a folder this kernel can write with "
                "gpuws.track(root=...)"
            )
        text = str(err).strip()
        return text.splitlines()[0] if text else type(err).__name__

    # -- resuming ----------------------------------------------------------------------------

    def resume(self, timeout: float = 600.0) -> int:
        """Load the newest complete checkpoint into the tracked objects, restore the RNG
        states, and return the step to continue from.

        Under a Jupyter server with the extension, the store is asked first: a restore that
        is bringing the run's checkpoints is waited for (up to `timeout` seconds, with one line
        said), and a newer checkpoint in the store than here is fetched. A store that cannot
        be read is an error, never a silent 0; 0 comes with a line saying why.
        """
        if not self.objects:
            raise CheckpointError(
                "Nothing is tracked: call gpuws.track(model=..., optimizer=...) first"
            )
        origin = bring_newest(self.run_path, self.run or default_run_name(), timeout)
        found = newest_checkpoint(self.run_path, stacklevel=3, distributed=True)
        if found is None:
            where = (
                "in the store"
                if origin == NONE
                else "here (no Jupyter server with jupyter_gpu_ws to ask the store)"
            )
            print(f"gpuws: no checkpoint of {self.run} {where}: starting from 0", flush=True)
            return 0
        path, manifest, state, rng = found
        if state is None or rng is None:  # both None together
            # Saved by a distributed run (torchrun) through DCP: loaded whole into this process.
            dcpfiles.load_whole(self.objects, self.restored, path, manifest)
        else:
            self._load(state, path)
            restore_rng(plainstate.optional_torch(), rng)
        self.last = info_of(path, manifest)
        self.step_value = int(manifest["step"])
        self._continue_run(path, manifest)
        self._changed()
        self._say_resumed()
        return self.step_value + 1

    def _say_resumed(self) -> None:
        """One line on what resume() did, as it says when it starts from 0."""
        when = self.last.time if self.last is not None else time.time()
        print(
            f"gpuws: resumed {self.run!r} at step {self.step_value:,} from the checkpoint of {_clock(when)} "
            f"({age(when)}); the loop goes on from step {self.step_value + 1:,}",
            flush=True,
        )

    def _continue_run(self, path: Path, manifest: dict[str, Any]) -> None:
        """After a resume from `path`: its health, the curves from its metrics, and its W&B run."""
        self.last_health = (
            manifest.get("health") if manifest.get("health") in ("healthy", "suspect") else None
        )
        self.training.configure(run=self.run)
        self.training.resumed(self.step_value, read_metrics(path, manifest))
        note = continue_wandb(manifest.get("wandb"))
        if note:
            print(note, flush=True)

    def _load(self, state: dict[str, Any], path: Path) -> None:
        missing = [name for name in self.objects if name not in state]
        if missing:
            raise CheckpointError(
                f"Checkpoint {path.name} has no state for {', '.join(map(repr, missing))}"
            )
        for name, obj in self.objects.items():
            value = state[name]
            try:
                if callable(getattr(obj, "load_state_dict", None)):
                    obj.load_state_dict(value)
                else:
                    restore_value(self.objects, self.restored, name, value)
            except (RuntimeError, ValueError, KeyError, TypeError) as err:
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise CheckpointError(
                    f"Checkpoint {path.name} does not fit the tracked {name!r}: {first}"
                ) from err

    # -- reporting ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        last = self.last
        return {
            "run": self.run,
            "objects": {name: type(obj).__name__ for name, obj in self.objects.items()},
            "step": self.step_value,
            "policy": vars(self.policy),
            "pending": None if self._pending is None else vars(self._pending),
            "writing": not self._write_done.is_set(),
            "last": None
            if last is None
            else {
                "step": last.step,
                "time": last.time,
                "bytes": last.bytes,
                "path": str(last.path),
                "request_id": last.request_id,
                "seconds": getattr(self, "last_seconds", None),
                "health": self.last_health,
            },
            "last_error": self.last_error,
            "answered": list(self.answered),
            "failed": list(self.failed),
            "root": self.root,
        }

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:
                logger.exception("gpuws: reporting the checkpoint state failed")


# Without `distributed` a checkpoint found has its state and RNG states (only DCP's have none).
@overload
def newest_checkpoint(
    run_path: Path, stacklevel: int = 2, distributed: Literal[False] = False
) -> tuple[Path, dict[str, Any], dict[str, Any], dict[str, Any]] | None: ...
@overload
def newest_checkpoint(
    run_path: Path, stacklevel: int = 2, distributed: bool = False
) -> tuple[Path, dict[str, Any], dict[str, Any] | None, dict[str, Any] | None] | None: ...
def newest_checkpoint(
    run_path: Path,
    stacklevel: int = 2,
    distributed: bool = False,
) -> tuple[Path, dict[str, Any], dict[str, Any] | None, dict[str, Any] | None] | None:
    """The newest healthy complete checkpoint that passes its checksums and loads: (folder,
    manifest, state, RNG states). The others are skipped with a warning saying why. With
    `distributed`, a checkpoint saved through DCP counts too (its state and RNG states None: it
    loads through DCP); without, it cannot be read here and is skipped.

    A checkpoint taken while the loss was not finite (NaN, inf) is suspect: the newest healthy
    one is preferred, and a line says which was passed over and why. Only when none is healthy
    is the newest suspect one used, with a warning.
    """
    unusable: list[tuple[Path, str]] = []
    healthy, suspect = healthy_first(complete_checkpoints(run_path, unusable))
    for path, reason in sorted(unusable, reverse=True):
        warnings.warn(f"gpuws: skipping checkpoint {path.name}: {reason}", stacklevel=stacklevel)
    for path, manifest in healthy + suspect:
        problem = verify(path, manifest)
        if problem:
            warnings.warn(
                f"gpuws: skipping checkpoint {path.name}: {problem}", stacklevel=stacklevel
            )
            continue
        if distributed and manifest.get("kind") == "dcp":
            try:
                dcpfiles.read_metadata(
                    path, manifest
                )  # small; refused when it holds anything but DCP's records
            except Exception as err:
                warnings.warn(
                    f"gpuws: skipping checkpoint {path.name}: {unreadable(err)}",
                    stacklevel=stacklevel,
                )
                continue
            say_health(manifest, suspect, stacklevel + 1)
            return path, manifest, None, None
        try:
            state, rng = read_checkpoint(path, manifest)
        except Exception as err:
            warnings.warn(
                f"gpuws: skipping checkpoint {path.name}: {unreadable(err)}", stacklevel=stacklevel
            )
            continue
        say_health(manifest, suspect, stacklevel + 1)
        return path, manifest, state, rng
    return None


def unreadable(err: BaseException) -> str:
    """Why a checkpoint that passed its checksums still cannot be used: a CheckpointError names
    the file and says what is wrong with it; anything else is what the reader said."""
    return str(err) if isinstance(err, CheckpointError) else f"cannot be read ({err})"


def healthy_first(
    complete: list[tuple[Path, dict[str, Any]]],
) -> tuple[list[tuple[Path, dict[str, Any]]], list[tuple[Path, dict[str, Any]]]]:
    """The checkpoints (oldest first) as (healthy, suspect), each newest first."""
    newest_first = list(reversed(complete))
    return (
        [item for item in newest_first if item[1].get("health") != "suspect"],
        [item for item in newest_first if item[1].get("health") == "suspect"],
    )


def say_health(
    manifest: dict[str, Any], suspect: list[tuple[Any, dict[str, Any]]], stacklevel: int
) -> None:
    """Tell the user when the checkpoint resumed from is suspect, or newer suspect ones were passed over."""
    passed = [m for _, m in suspect if m["step"] > manifest["step"]]
    if manifest.get("health") == "suspect":
        warnings.warn(
            f"gpuws: no healthy checkpoint of this run: resuming from step {manifest['step']}, "
            f"taken while {_why_suspect(manifest)}",
            stacklevel=stacklevel,
        )
    elif passed:
        steps = ", ".join(str(m["step"]) for m in sorted(passed, key=lambda m: m["step"]))
        print(
            f"gpuws: resuming from the newest healthy checkpoint, at step {manifest['step']}; passed over "
            f"the checkpoint{'s' * (len(passed) > 1)} at step {steps}, taken after {_why_suspect(passed[-1])}",
            flush=True,
        )


def _why_suspect(manifest: dict[str, Any]) -> str:
    suspect = manifest.get("suspect")
    if (
        isinstance(suspect, dict)
        and isinstance(suspect.get("since"), int)
        and suspect.get("value") in ("nan", "inf", "-inf")
    ):
        return f"the loss became {suspect['value']} at step {suspect['since']}"
    return "the loss stopped being finite"


def read_metrics(path: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """A checkpoint's metrics.json (checked by its manifest's checksum already), or None."""
    return read_json(path, manifest, METRICS, MAX_METRICS_BYTES, checked=True)


def _place(path: Path) -> str:
    """A path as the user knows it: inside the work directory relative to it."""
    workdir = os.environ.get("GPUWS_WORKDIR") or os.getcwd()
    try:
        return str(path.resolve().relative_to(Path(workdir).resolve()))
    except (ValueError, OSError):
        return str(path)


def _clock(moment: float) -> str:
    """A checkpoint's time: "14:02" today, with the date on another day."""
    local = time.localtime(moment)
    same_day = time.localtime()[:3] == local[:3]
    return time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M", local)


def _state_of(obj: Any) -> Any:
    if callable(getattr(obj, "state_dict", None)):
        return obj.state_dict()
    return obj


def _uses_cuda(objects: Any) -> bool:
    torch = plainstate.optional_torch()
    if torch is None or not torch.cuda.is_available():
        return False
    for obj in objects:
        params = getattr(obj, "parameters", None)
        if callable(params):
            for p in params():
                return bool(p.is_cuda)
    return False


_default: Tracker | None = None


def default_tracker() -> Tracker:
    global _default
    if _default is None:
        _default = Tracker()
    return _default


def current_tracker() -> Tracker | None:
    """The tracker the module-level functions use, None before one is made."""
    return _default


def use_tracker(tracker: Tracker) -> None:
    """Make `tracker` the one the module-level functions use (distributed.py's own, once
    torch.distributed runs)."""
    global _default
    _default = tracker


def _check_total(total: Any) -> None:
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 1):
        raise ValueError(f"total_steps must be a whole number of at least 1, not {total!r}")


def step(i: int, loss: Any = None, **scalars: Any) -> None:
    """The safe point, and the step's values: module-level and cheap when nothing is due (the
    values are kept as references and read in the background)."""
    (_default or default_tracker()).step(i, loss, scalars)


def log(**scalars: Any) -> None:
    """Values outside the step (validation scores, the learning rate), at the last step."""
    (_default or default_tracker()).log(scalars)


def progress(
    total: int | None = None, name: str | None = None, tensorboard: bool | None = None
) -> Tracker:
    """The run's total number of steps (for its ETA), its name, TensorBoard event files."""
    return default_tracker().progress(total, name, tensorboard)


@atexit.register
def _finish_writes() -> None:
    """A script that ends while a checkpoint is being written waits for it (up to EXIT_WAIT):
    the checkpoint lands whole, and no writer is caught inside torch while the interpreter
    tears down, which aborts the process ("terminate called without an active exception")."""
    deadline = time.monotonic() + EXIT_WAIT
    for writer in list(_writers):
        writer.join(timeout=max(0.0, deadline - time.monotonic()))
