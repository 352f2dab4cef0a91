"""A run's anomalies as episodes: each opens once (one notification), stays while its cause
lasts, and closes, with a message saying what happened and advice saying what to do."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, TypeGuard

from .progress import duration


@dataclass(frozen=True)
class AnomalyPolicy:
    """The thresholds, from the app's configuration (the few users tune) and constants."""

    stall_factor: float = 10.0  # no step for this many usual step times …
    stall_seconds: float = 120.0  # … and at least this long, while the kernel is busy
    input_bound_percent: float = 50.0  # the notebook's GPUs busier than this on average …
    input_bound_seconds: float = 120.0  # … over this long while the run steps, or it is input-bound
    memory_fraction: float = 0.95  # the notebook's GPU memory fuller than this: OOM risk
    spike_factor: float = 6.0  # a record's loss this many robust deviations above the recent median
    spike_window: int = 50  # progress records that make "the recent range"
    divergence_ratio: float = 2.0  # the smoothed loss this many times its best so far
    min_records: int = 10  # records before spikes and divergence are judged
    nan_hold: float = 30.0  # a NaN episode stays open this long after the last non-finite loss
    hysteresis: float = 0.03


@dataclass
class Anomaly:
    """One episode. `id` is stable for the episode's life: the browser notifies once per id."""

    id: str
    kind: str  # nan-loss, loss-spike, divergence, stall, input-bound, gpu-memory, eta-past-deadline
    run: str
    level: str  # "error" or "warning"
    message: str
    advice: str
    since: float
    step: int | None = None
    kernel_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunSignals:
    """What the server knows of a run at one moment, beside its loss (fed record by record)."""

    now: float
    kernel_id: str | None = None
    busy: bool = False  # its kernel runs a cell
    last_step: int | None = None
    last_step_time: float | None = None
    rate: float | None = None
    finished: bool = False
    gpu_util: list[tuple[float, float]] = field(default_factory=list)  # (time, %) of its GPUs
    gpu_memory: list[dict[str, Any]] = field(
        default_factory=list
    )  # its GPUs now: index, name, used, total
    verdict: dict[str, Any] = field(default_factory=dict)


ADVICE = {
    "nan-loss": "Interrupt the loop: the checkpoints taken from now on are marked suspect, and gpuws.resume() "
    "goes back to the newest healthy one. Then lower the learning rate, clip the gradients "
    "(torch.nn.utils.clip_grad_norm_), or train in bf16, or in fp16 with a GradScaler.",
    "loss-spike": "One bad batch, or the start of an instability: watch the curve; if it does not come back, "
    "lower the learning rate or clip the gradients, and resume from the last checkpoint before it.",
    "divergence": "The loss keeps rising: lower the learning rate (or lengthen its warm-up), clip the gradients, "
    "and resume from a checkpoint taken before the rise.",
    "stall": "The loop waits for something: a DataLoader worker, a slow disk or network, another process, an "
    "input() prompt. Interrupt the kernel to see where it waits in the traceback.",
    "input-bound": "The GPU waits for data: give the DataLoader more workers (num_workers, persistent_workers=True) "
    "and pin_memory=True, make the batches larger, use mixed precision (torch.autocast), or move "
    "preprocessing onto the GPU.",
    "gpu-memory": "The next allocation may fail (CUDA out of memory): a smaller batch, mixed precision (bf16), "
    "gradient checkpointing or gradient accumulation. Persist now keeps what is done.",
    "eta-past-deadline": "The automatic persist saves a checkpoint before the runtime ends: gpuws.resume() on the next "
    "runtime continues from it. Persist now keeps everything up to now; fewer steps or a "
    "faster loop may still finish in time.",
}

LEVELS = {
    "nan-loss": "error",
    "divergence": "warning",
    "loss-spike": "warning",
    "stall": "warning",
    "input-bound": "warning",
    "gpu-memory": "warning",
    "eta-past-deadline": "warning",
}


class RunAnomalies:
    """The open episodes of one run, and the loss's recent range."""

    def __init__(self, run: str, policy: AnomalyPolicy) -> None:
        self.run = run
        self.policy = policy
        self.open: dict[str, Anomaly] = {}
        self._means: deque[float] = deque(maxlen=policy.spike_window)
        self._smoothed: deque[float] = deque(maxlen=5)
        self._best = math.inf
        self._records = 0
        self._calm = 0  # records in a row without a spike
        self._bad_seen: float | None = None  # when a non-finite loss was last reported
        self._bad: dict[str, Any] | None = None
        self._kernel_id: str | None = None

    # -- the loss, record by record ----------------------------------------------------------

    def feed(self, record: dict[str, Any], now: float) -> None:
        """One progress record from the kernel (protocol.PROGRESS)."""
        bad = (record.get("nonfinite") or {}).get("loss")
        ongoing = record.get("loss_bad")
        first = (
            ongoing
            if isinstance(ongoing, dict)
            else {"since": bad.get("step"), "value": bad.get("value")}
            if isinstance(bad, dict)
            else None
        )
        if first is not None:
            if self._bad is None:
                self._bad = first
            self._bad_seen = now
        loss = (record.get("values") or {}).get("loss")
        if not isinstance(loss, dict):
            return
        mean, high = loss.get("mean"), loss.get("max")
        if not _finite(mean) or not _finite(high):
            return
        p = self.policy
        self._records += 1
        if len(self._means) >= p.min_records:
            median = statistics.median(self._means)
            spread = statistics.median(abs(x - median) for x in self._means) * 1.4826
            scale = max(spread, 1e-3 * abs(median), 1e-12)
            if high > median + p.spike_factor * scale and high > median + 0.5 * abs(median):
                self._calm = 0
                self._open(
                    "loss-spike",
                    record.get("time") or now,
                    record.get("step"),
                    f"{self.run}: the loss jumped to {high:.4g} at about step {record.get('step')}, "
                    f"well above its recent range (median {median:.4g}).",
                )
            else:
                self._calm += 1
                if self._calm >= 5:
                    self.open.pop("loss-spike", None)
        self._means.append(mean)
        self._smoothed.append(mean)
        smoothed = statistics.median(self._smoothed)
        if self._records >= p.min_records:
            if 0 < self._best and smoothed > p.divergence_ratio * self._best:
                self._open(
                    "divergence",
                    record.get("time") or now,
                    record.get("step"),
                    f"{self.run}: the loss is diverging: {smoothed:.4g} now, "
                    f"{smoothed / self._best:.1f} times its best ({self._best:.4g}).",
                )
            elif smoothed < 0.75 * p.divergence_ratio * self._best:
                self.open.pop("divergence", None)
            self._best = min(self._best, smoothed)
        elif self._records >= 3:
            self._best = min(self._best, smoothed)

    def restart(self) -> None:
        """The run resumed (or a loop started over): its recent range is measured anew."""
        self._means.clear()
        self._smoothed.clear()
        self._best = math.inf
        self._records = 0
        self._bad = None
        self._bad_seen = None
        for kind in ("nan-loss", "loss-spike", "divergence", "stall"):
            self.open.pop(kind, None)

    # -- everything else, at each look --------------------------------------------------------

    def update(self, s: RunSignals) -> list[Anomaly]:
        p = self.policy
        self._kernel_id = s.kernel_id
        # NaN or inf: at once, and for a while after the last one, so no page misses it.
        if self._bad is not None:
            if self._bad_seen is not None and s.now - self._bad_seen <= p.nan_hold:
                self._open(
                    "nan-loss",
                    self._bad_seen,
                    self._bad.get("since"),
                    f"{self.run}: the loss became {self._bad.get('value')} at step {self._bad.get('since')}.",
                )
            else:
                self._bad = None
        if self._bad is None:
            self.open.pop("nan-loss", None)

        # A busy kernel whose run makes no step for several times its usual step time.
        stalled_for = None
        if s.busy and not s.finished and s.rate and s.last_step_time is not None:
            usual = 1.0 / s.rate
            if s.now - s.last_step_time > max(p.stall_factor * usual, p.stall_seconds):
                stalled_for = s.now - s.last_step_time
                self._open(
                    "stall",
                    s.last_step_time,
                    s.last_step,
                    f"{self.run} has made no step for {duration(stalled_for)} (usually "
                    f"{_seconds(usual)} a step) while its kernel is busy, since step {s.last_step}.",
                )
        if stalled_for is None:
            self.open.pop("stall", None)

        # Input-bound: the run steps, but the GPUs its notebook uses are mostly idle.
        stepping = (
            s.last_step_time is not None
            and not s.finished
            and s.rate is not None
            and s.now - s.last_step_time < max(10.0, 5.0 / s.rate)
        )
        window = [(t, u) for t, u in s.gpu_util if t >= s.now - p.input_bound_seconds]
        covered = bool(window) and window[-1][0] - window[0][0] >= 0.8 * p.input_bound_seconds
        mean_util = sum(u for _, u in window) / len(window) if window else None
        if stepping and covered and mean_util is not None and mean_util < p.input_bound_percent:
            self._open(
                "input-bound",
                window[0][0],
                s.last_step,
                f"{self.run} keeps its GPU busy only {mean_util:.0f} % of the time "
                f"(over {duration(p.input_bound_seconds)}) while it trains: it is input-bound.",
            )
        elif not stepping or (mean_util is not None and mean_util >= p.input_bound_percent + 10):
            self.open.pop("input-bound", None)

        # GPU memory close to full on a GPU the notebook uses.
        fullest = max(
            (g for g in s.gpu_memory if g.get("total")),
            key=lambda g: g["used"] / g["total"],
            default=None,
        )
        fraction = fullest["used"] / fullest["total"] if fullest else 0.0
        if fullest is not None and (
            fraction > p.memory_fraction
            or ("gpu-memory" in self.open and fraction > p.memory_fraction - p.hysteresis)
        ):
            self._open(
                "gpu-memory",
                s.now,
                s.last_step,
                f"{self.run}: GPU {fullest['index']} ({fullest.get('name') or 'GPU'}) memory is {fraction:.0%} "
                f"full ({fullest['used'] / 2**30:.1f} of {fullest['total'] / 2**30:.1f} GiB): risk of CUDA "
                "out of memory.",
            )
        else:
            self.open.pop("gpu-memory", None)

        # ETA past the deadline.
        if s.verdict.get("state") == "short":
            self._open(
                "eta-past-deadline", s.now, s.last_step, f"{self.run}: {s.verdict.get('message')}"
            )
        else:
            self.open.pop("eta-past-deadline", None)
        return list(self.open.values())

    def _open(self, kind: str, since: float, step: Any, message: str) -> None:
        episode = self.open.get(kind)
        if episode is None:
            self.open[kind] = Anomaly(
                f"{kind}:{self.run}:{since:.3f}",
                kind,
                self.run,
                LEVELS[kind],
                message,
                ADVICE[kind],
                since,
                step if isinstance(step, int) else None,
                self._kernel_id,
            )
        else:
            episode.message = message  # figures move; the episode (and its id) stays


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
