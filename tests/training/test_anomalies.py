"""Anomaly episodes from a run's records and signals, and the watch's per-notebook GPU view
(fed the monitor's own sample dictionaries, as the NVML test double makes them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_gpu_ws.checkpoints import protocol
from jupyter_gpu_ws.training.anomalies import AnomalyPolicy, RunAnomalies, RunSignals
from jupyter_gpu_ws.training.watch import TrainingWatch, WatchSettings

NOW = 1_000_000.0
GIB = 2**30


def record(
    step: int, mean: float, high: float | None = None, at: float | None = None
) -> dict[str, Any]:
    return {
        "type": "progress",
        "run": "r",
        "time": at or NOW + step,
        "step": step,
        "steps": 1,
        "values": {
            "loss": {
                "mean": mean,
                "min": mean,
                "max": high if high is not None else mean,
                "last": mean,
                "n": 1,
            }
        },
        "nonfinite": {},
        "loss_bad": None,
    }


def kinds(anomalies: list[Any]) -> list[str]:
    return sorted(a.kind for a in anomalies)


def test_a_spike_opens_one_episode_that_ends_once_the_loss_is_back_in_range() -> None:
    run = RunAnomalies("r", AnomalyPolicy())
    for i in range(30):
        run.feed(record(i, 1.0 + 0.01 * (i % 3)), NOW)
    run.feed(record(30, 1.0, high=9.0), NOW)
    [spike] = run.update(RunSignals(now=NOW))
    assert spike.kind == "loss-spike" and "9" in spike.message and spike.step == 30
    run.feed(record(31, 1.0, high=8.0), NOW)
    assert [a.id for a in run.update(RunSignals(now=NOW))] == [spike.id]  # the same episode
    for i in range(32, 38):
        run.feed(record(i, 1.0), NOW)
    assert run.update(RunSignals(now=NOW)) == []


def test_noise_within_the_recent_range_is_not_a_spike() -> None:
    run = RunAnomalies("r", AnomalyPolicy())
    for i in range(200):
        run.feed(record(i, 1.0 + 0.3 * ((i * 7919) % 11) / 10), NOW)
    assert run.update(RunSignals(now=NOW)) == []


def test_a_loss_rising_to_twice_its_best_is_divergence() -> None:
    run = RunAnomalies("r", AnomalyPolicy())
    for i in range(20):
        run.feed(record(i, 1.0 - 0.02 * i), NOW)  # down to 0.62
    for i in range(20, 40):
        run.feed(record(i, 0.62 * 1.15 ** (i - 19)), NOW)
    [divergence] = [a for a in run.update(RunSignals(now=NOW)) if a.kind == "divergence"]
    assert "diverging" in divergence.message and "learning rate" in divergence.advice


def test_a_nan_loss_is_an_error_at_once_and_stays_for_a_while_after_the_last_one() -> None:
    run = RunAnomalies("r", AnomalyPolicy(nan_hold=30))
    run.feed(
        {
            **record(12, 1.0),
            "values": {},
            "nonfinite": {"loss": {"step": 12, "value": "nan", "count": 1}},
            "loss_bad": {"since": 12, "value": "nan"},
        },
        NOW,
    )
    [nan] = run.update(RunSignals(now=NOW))
    assert (nan.kind, nan.level, nan.step) == ("nan-loss", "error", 12)
    run.feed(record(13, 1.0), NOW + 1)  # finite again (an fp16 overflow the scaler skipped)
    assert kinds(run.update(RunSignals(now=NOW + 10))) == ["nan-loss"]
    assert run.update(RunSignals(now=NOW + 31)) == []


def test_a_busy_kernel_without_a_step_for_ten_step_times_and_the_floor_is_stalled() -> None:
    run = RunAnomalies("r", AnomalyPolicy(stall_factor=10, stall_seconds=5))
    signals = dict(kernel_id="k", last_step=100, last_step_time=NOW, rate=2.0)
    assert run.update(RunSignals(now=NOW + 4.9, busy=True, **signals)) == []  # under the 5 s floor
    [stall] = run.update(RunSignals(now=NOW + 6, busy=True, **signals))
    assert stall.kind == "stall" and stall.step == 100 and "500 ms a step" in stall.message
    assert (
        run.update(RunSignals(now=NOW + 7, busy=False, **signals)) == []
    )  # the cell ended: no stall


def test_eta_past_the_deadline_is_one_episode_while_it_lasts() -> None:
    run = RunAnomalies("r", AnomalyPolicy())
    short = {"state": "short", "message": "Does not finish"}
    [a] = run.update(RunSignals(now=NOW, verdict=short))
    [b] = run.update(RunSignals(now=NOW + 5, verdict=short))
    assert a.id == b.id and a.kind == "eta-past-deadline"
    assert run.update(RunSignals(now=NOW + 6, verdict={"state": "finishes"})) == []


def sample(at: float, util: int, used: int, kernel: str | None = "k1") -> dict[str, Any]:
    procs = [{"pid": 10, "memory_used": GIB, "kernel_id": kernel}] if kernel else []
    return {
        "time": at,
        "gpus": [
            {
                "index": 0,
                "name": "A100",
                "utilization": util,
                "memory_used": used,
                "memory_total": 40 * GIB,
                "processes": procs,
                "mig": [],
            }
        ],
    }


def watch_with_a_stepping_run(
    tmp_path: Path, busy: bool = True
) -> tuple[TrainingWatch, dict[str, float]]:
    stream = protocol.training_file(tmp_path, "k1")
    clock = {"now": NOW}
    watch = TrainingWatch(
        WatchSettings(policy=AnomalyPolicy(input_bound_seconds=60, input_bound_percent=50)),
        streams=lambda: {"k1": stream},
        kernel_busy=lambda k: busy,
        deadline=lambda: None,
        clock=lambda: clock["now"],
    )
    lines = [{"type": "run", "run": "nb.ipynb", "total": 100000}]
    lines += [{**record(i * 10, 1.0, at=NOW - 100 + i), "run": "nb.ipynb"} for i in range(101)]
    stream.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return watch, clock


def test_a_run_stepping_on_a_mostly_idle_gpu_of_its_notebook_is_input_bound(tmp_path: Path) -> None:
    watch, clock = watch_with_a_stepping_run(tmp_path)
    for k in range(100):
        watch.on_sample(sample(NOW - 99 + k, util=20, used=10 * GIB))
    watch.tick()
    [run] = watch.state()["runs"]
    assert run["state"] == "running" and run["rate"] == 10.0
    [bound] = run["anomalies"]
    assert (
        bound["kind"] == "input-bound"
        and "20 %" in bound["message"]
        and "num_workers" in bound["advice"]
    )


def test_another_notebooks_idle_gpu_says_nothing_about_this_run(tmp_path: Path) -> None:
    watch, _ = watch_with_a_stepping_run(tmp_path)
    for k in range(100):
        watch.on_sample(sample(NOW - 99 + k, util=20, used=10 * GIB, kernel="someone-else"))
    watch.tick()
    assert watch.state()["anomalies"] == []


def test_the_notebooks_gpu_memory_near_full_is_an_oom_risk(tmp_path: Path) -> None:
    watch, _ = watch_with_a_stepping_run(tmp_path)
    watch.on_sample(sample(NOW, util=95, used=39 * GIB))
    watch.tick()
    [risk] = watch.state()["anomalies"]
    assert (
        risk["kind"] == "gpu-memory"
        and "98%" in risk["message"]
        and "out of memory" in risk["message"]
    )


def test_the_gpu_history_keeps_one_point_per_bucket(tmp_path: Path) -> None:
    watch, _ = watch_with_a_stepping_run(tmp_path)
    for k in range(20):  # 20 s at one sample a second: four 5 s buckets
        watch.on_sample(sample(NOW + k, util=10 * (k // 5), used=20 * GIB))
    [gpu] = watch.history()["gpus"]
    assert [p[1] for p in gpu["points"]] == [0, 10, 20, 30] and all(
        p[2] == 0.5 for p in gpu["points"]
    )
