"""The kernel side in one process: what step() records, read in the background, into the curves,
the stream the server reads, the checkpoints and back (real PyTorch, CPU)."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from jupyter_gpu_ws.checkpoints import protocol
from jupyter_gpu_ws.checkpoints.files import complete_checkpoints
from jupyter_gpu_ws.checkpoints.tracker import Tracker
from jupyter_gpu_ws.training import recorder as recorder_module
from jupyter_gpu_ws.training.anomalies import AnomalyPolicy
from jupyter_gpu_ws.training.watch import TrainingWatch, WatchSettings


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def tracker(tmp_path: Path) -> Tracker:
    tracker = Tracker()
    tracker.training.stream = tmp_path / "k.training.jsonl"
    model = torch.nn.Linear(2, 1)
    tracker.track("run", model=model, root=str(tmp_path / "ckpt"), total_steps=100)
    # No background reader for this tracker: the tests read (flush) when they choose.
    with tracker.training._lock:
        _unregister(tracker.training)
    tracker._record = tracker.training.entries.append
    return tracker


def _unregister(recorder: Any) -> None:
    recorder_module._recorders.discard(recorder)


def test_tensors_and_numbers_are_read_later_into_the_curve_and_the_stream(
    tracker: Tracker, tmp_path: Path
) -> None:
    for i in range(10):
        tracker.step(i, torch.tensor(float(i)), {"lr": 0.5, "acc": torch.tensor([0.0, 1.0])})
    assert tracker.training.history.points("loss") == []  # nothing read on the loop's thread
    tracker.training.flush()
    [run, start, progress] = records(tracker.training.stream)
    assert run == {
        "type": "run",
        "run": "run",
        "total": 100,
        "time": run["time"],
        "tensorboard": None,
    }
    assert (start["type"], start["step"], start["history"]["series"]) == (
        "resumed",
        -1,
        {},
    )  # a new segment
    assert progress["step"] == 9 and progress["steps"] == 10
    assert progress["values"]["loss"] == {"mean": 4.5, "min": 0.0, "max": 9.0, "last": 9.0, "n": 10}
    assert progress["values"]["acc"]["mean"] == 0.5  # a tensor of several values: its mean
    assert [p[2] for p in tracker.training.history.points("loss")] == [4.5]


def test_a_value_that_is_not_a_number_is_named_once_and_left_out(tracker: Tracker) -> None:
    tracker.step(0, 1.0, {"note": "hello"})
    tracker.step(1, 1.0, {"note": "again"})
    tracker.training.flush()
    assert tracker.training.warnings == [
        "gpuws: 'note' is a str, not a number or tensor: not recorded"
    ]
    assert "note" not in tracker.training.history.series


def test_plain_values_are_read_while_torch_is_still_being_imported(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a restart, a step() before track() (which imports torch) meets a torch module that
    # another thread is importing: it has no Tensor yet.
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    tracker.step(0, 1.0, {"lr": 0.5})
    tracker.training.flush()
    assert [p[2] for p in tracker.training.history.points("loss")] == [1.0]
    assert tracker.training.warnings == []


def test_a_loop_faster_than_the_reader_is_sampled_but_counted_exactly(tracker: Tracker) -> None:
    for i in range(5000):
        tracker.step(i, torch.tensor(1.0))
    tracker.training.flush()
    progress = [
        r for r in records(tracker.training.stream) if r["type"] == "progress"
    ]  # the reader may look mid-loop
    assert sum(r["steps"] for r in progress) == 5000 and progress[-1]["step"] == 4999
    read = [r["values"]["loss"]["n"] for r in progress]
    assert max(read) <= recorder_module.MAX_READ + 1 and sum(read) < 5000


def test_a_checkpoint_taken_while_the_loss_was_not_finite_is_suspect(tracker: Tracker) -> None:
    losses = [1.0, 1.0, math.nan, math.inf, 1.0, 1.0]  # an fp16 overflow at steps 2 and 3
    for i, value in enumerate(losses):
        tracker.step(i, torch.tensor(value))
    tracker.training.flush()
    assert [tracker.training.suspect_at(s) for s in range(6)] == [
        None,
        None,
        {"since": 2, "value": "nan"},
        {"since": 2, "value": "nan"},
        None,
        None,
    ]


def test_a_loop_run_again_from_an_earlier_step_continues_the_curve_from_there(
    tracker: Tracker,
) -> None:
    watch = TrainingWatch(
        WatchSettings(policy=AnomalyPolicy()),
        streams=lambda: {"k": tracker.training.stream},
        kernel_busy=lambda k: True,
        deadline=lambda: None,
    )
    for i in range(20):
        tracker.step(i, float(i))
        if i % 5 == 4:
            tracker.training.flush()
    watch.tick()  # the server has the curve to step 19
    for i in range(10, 15):
        tracker.step(i, 100.0)
    tracker.training.flush()
    watch.tick()
    steps = [p[0] for p in tracker.training.history.points("loss")]
    assert steps == sorted(steps) and max(steps) == 14
    # Two segments: the first step's, and the loop's from step 10.
    assert [r["step"] for r in records(tracker.training.stream) if r["type"] == "resumed"] == [
        -1,
        9,
    ]
    on_server = watch.history("run")["runs"]["run"]["series"]["loss"]
    assert [p[0] for p in on_server] == steps and on_server[-1][
        2
    ] == 100.0  # the same curve, not doubled back


def test_a_checkpoint_holds_the_curve_up_to_its_step_and_a_resume_brings_it_back(
    tracker: Tracker, tmp_path: Path
) -> None:
    for i in range(30):
        tracker.step(i, float(30 - i))
        if i % 10 == 9:
            tracker.training.flush()
        if i == 19:
            tracker.checkpoint(wait=True)
    [(path, manifest)] = complete_checkpoints(tracker.run_path)
    metrics = json.loads((path / "metrics.json").read_text())
    assert (
        manifest["health"] == "healthy"
        and manifest["total_steps"] == 100
        and "metrics.json" in manifest["files"]
    )
    assert max(p[0] for p in metrics["history"]["series"]["loss"]) == 19

    fresh = Tracker()
    fresh.training.stream = tmp_path / "k2.training.jsonl"
    fresh.track("run", model=torch.nn.Linear(2, 1), root=str(tmp_path / "ckpt"))
    assert fresh.resume() == 20
    assert fresh.training.total == 100 and fresh.training.elapsed == metrics["elapsed"]
    assert [p[0] for p in fresh.training.history.points("loss")] == [9, 19]
    resumed = records(fresh.training.stream)[-1]
    assert resumed["type"] == "resumed" and resumed["step"] == 19
    assert [p[0] for p in resumed["history"]["series"]["loss"]] == [9, 19]


def test_a_stream_grown_too_long_is_replaced_by_a_snapshot_the_server_reads_whole(
    tracker: Tracker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(protocol, "TRAINING_STREAM_MAX", 2000)
    watch = TrainingWatch(
        WatchSettings(policy=AnomalyPolicy()),
        streams=lambda: {"k": tracker.training.stream},
        kernel_busy=lambda k: True,
        deadline=lambda: None,
    )
    for i in range(60):
        tracker.step(i, float(i))
        tracker.training.flush()
        if i == 5:
            watch.tick()  # the server has read the start of the stream
    assert tracker.training.stream.stat().st_size < 4000
    assert records(tracker.training.stream)[0]["type"] == "snapshot"
    watch.tick()
    curve = watch.history("run")["runs"]["run"]["series"]["loss"]
    assert [p[0] for p in curve] == list(range(60))  # whole: nothing lost, nothing doubled


def a_kernel(tmp_path: Path, kernel_id: str) -> Tracker:
    """A kernel's tracker of the run "train.ipynb", its stream read only when the test flushes."""
    tracker = Tracker()
    tracker.training.stream = tmp_path / f"{kernel_id}.training.jsonl"
    tracker.track("train.ipynb", epoch=0, root=str(tmp_path / "ckpt"))
    with tracker.training._lock:
        _unregister(tracker.training)
    tracker._record = tracker.training.entries.append
    return tracker


def train_and_watch(tracker: Tracker, watch: TrainingWatch, losses: list[float]) -> None:
    for i, loss in enumerate(losses):
        tracker.step(i, loss)
        if i % 5 == 4:  # a progress record every 5 steps, as the background reader makes them
            tracker.training.flush()
            watch.tick()


# Falls to 1e-6; its last two steps are read with the rerun's first five (one record of mixed runs before).
FIRST_RUN = [5.0 * (1e-6 / 5.0) ** (i / 201) for i in range(202)]
RERUN = [5.0 * 0.99**i for i in range(200)]  # from 5.0 again, falling steadily


@pytest.mark.parametrize("rerun_in", ["a new kernel", "the same kernel"])
def test_restart_and_run_all_is_a_new_segment_judged_on_its_own(
    tmp_path: Path, rerun_in: str
) -> None:
    streams = {"k1": tmp_path / "k1.training.jsonl"}
    watch = TrainingWatch(
        WatchSettings(policy=AnomalyPolicy()),
        streams=lambda: dict(streams),
        kernel_busy=lambda k: True,
        deadline=lambda: None,
    )
    first = a_kernel(tmp_path, "k1")
    train_and_watch(first, watch, FIRST_RUN)
    if rerun_in == "a new kernel":
        del streams["k1"]
        watch.tick()
        streams["k2"] = tmp_path / "k2.training.jsonl"
        second = a_kernel(tmp_path, "k2")
    else:
        second = first
    train_and_watch(second, watch, RERUN)
    state = watch.state()
    assert state["anomalies"] == []
    [run] = state["runs"]
    assert run["step"] == 199 and run["live"]
    curve = watch.history("train.ipynb")["runs"]["train.ipynb"]["series"]["loss"]
    assert [p[0] for p in curve] == list(
        range(4, 200, 5)
    )  # the rerun's points alone, from its start
    assert curve[0][2] == pytest.approx(sum(RERUN[:5]) / 5)


def test_a_loss_that_rises_within_the_rerun_is_still_divergence(tmp_path: Path) -> None:
    streams = {"k1": tmp_path / "k1.training.jsonl"}
    watch = TrainingWatch(
        WatchSettings(policy=AnomalyPolicy()),
        streams=lambda: dict(streams),
        kernel_busy=lambda k: True,
        deadline=lambda: None,
    )
    tracker = a_kernel(tmp_path, "k1")
    train_and_watch(tracker, watch, FIRST_RUN)
    train_and_watch(
        tracker, watch, [5.0 * 0.95**i for i in range(100)] + [0.03 * 1.1**i for i in range(60)]
    )
    [divergence] = [a for a in watch.state()["anomalies"] if a["kind"] == "divergence"]
    assert divergence["kind"] == "divergence" and divergence["run"] == "train.ipynb"
    assert "times its best (0.0" in divergence["message"]  # its best in this segment, not 1e-06
