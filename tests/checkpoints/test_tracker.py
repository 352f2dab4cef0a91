"""The tracker in one process: save, resume, verify, retention, bad input (real PyTorch, CPU)."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from jupyter_gpu_ws.checkpoints.files import CheckpointError, complete_checkpoints
from jupyter_gpu_ws.checkpoints.tracker import Tracker


def model_and_optimizer(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
    )
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train(
    model: torch.nn.Module, opt: torch.optim.Optimizer, tracker: Tracker, start: int, stop: int
) -> None:
    for i in range(start, stop):
        x = torch.randn(32, 8)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tracker.step(i)


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "ckpts")


def test_resume_continues_bitwise_where_the_checkpoint_was_taken(root: str) -> None:
    model, opt = model_and_optimizer()
    straight = Tracker().track("run", model=model, optimizer=opt, root=root + "-unused")
    train(model, opt, straight, 0, 30)
    expected = [p.detach().clone() for p in model.parameters()]

    model, opt = model_and_optimizer()
    first = Tracker().track("run", model=model, optimizer=opt, root=root)
    train(model, opt, first, 0, 15)
    info = first.checkpoint(wait=True)
    assert info is not None and info.step == 14

    model, opt = model_and_optimizer(seed=123)  # a new process: different weights and RNG
    torch.manual_seed(999)
    second = Tracker().track("run", model=model, optimizer=opt, root=root)
    start = second.resume()
    assert start == 15
    train(model, opt, second, start, 30)
    assert all(torch.equal(a, b) for a, b in zip(expected, model.parameters(), strict=True))


def test_python_and_numpy_random_states_come_back(root: str) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track("rng", model=model, optimizer=opt, root=root)
    random.seed(1)
    np.random.seed(2)
    tracker.checkpoint(wait=True)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(77)
    np.random.seed(78)
    tracker.resume()
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_nothing_to_resume_gives_step_zero(root: str) -> None:
    model, opt = model_and_optimizer()
    assert Tracker().track("fresh", model=model, optimizer=opt, root=root).resume() == 0


def test_plain_values_are_saved_and_containers_restored_in_place(root: str) -> None:
    model, _ = model_and_optimizer()
    config = {"lr": 0.1, "layers": [1, 2]}
    tracker = Tracker().track("plain", model=model, config=config, epoch=7, root=root)
    tracker.checkpoint(wait=True)
    config["lr"] = 99.0
    tracker.resume()
    assert config == {"lr": 0.1, "layers": [1, 2]} and tracker.restored["epoch"] == 7


def test_tracking_an_object_without_state_dict_names_it(root: str) -> None:
    with pytest.raises(TypeError, match="'loader' is a object without state_dict"):
        Tracker().track("bad", loader=object(), root=root)


def test_a_checkpoint_that_does_not_fit_names_the_object_and_damages_nothing(root: str) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track("fit", model=model, optimizer=opt, root=root)
    info = tracker.checkpoint(wait=True)
    before = {p.name: p.read_bytes() for p in info.path.iterdir()}
    other = Tracker().track("fit", model=torch.nn.Linear(3, 3), root=root)
    with pytest.raises(CheckpointError, match="does not fit the tracked 'model'"):
        other.resume()
    assert {p.name: p.read_bytes() for p in info.path.iterdir()} == before


def test_corrupted_checkpoint_is_skipped_with_a_warning_for_the_previous(root: str) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track("corrupt", model=model, optimizer=opt, root=root, keep_last=5)
    train(model, opt, tracker, 0, 3)
    good = tracker.checkpoint(wait=True)
    train(model, opt, tracker, 3, 6)
    bad = tracker.checkpoint(wait=True)
    data = bytearray((bad.path / "state.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad.path / "state.pt").write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="fails its checksum"):
        assert tracker.resume() == good.step + 1


def test_an_interrupted_write_is_not_a_checkpoint(root: str) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track("partial", model=model, optimizer=opt, root=root)
    good = tracker.checkpoint(wait=True)
    # What a write killed before its rename leaves behind: files, no manifest, a temporary name.
    partial = good.path.parent / ".tmp-ckpt-999999-1"
    shutil.copytree(good.path, partial)
    (partial / "manifest.json").unlink()
    assert [p for p, _ in complete_checkpoints(good.path.parent)] == [good.path]
    assert tracker.resume() == good.step + 1


def test_retention_keeps_the_last_k(root: str) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track("keep", model=model, optimizer=opt, root=root, keep_last=2)
    steps = []
    for i in range(5):
        tracker.step_value = i
        steps.append(tracker.checkpoint(wait=True).step)
    kept = [m["step"] for _, m in complete_checkpoints(tracker.run_path)]
    assert kept == steps[-2:]


def test_every_steps_policy_saves_at_the_safe_point(root: str) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track(
        "policy", model=model, optimizer=opt, root=root, every_steps=5, keep_last=10
    )
    for i in range(12):
        train(model, opt, tracker, i, i + 1)
        tracker.wait()  # each write done before the next step: no coalescing here
    assert [m["step"] for _, m in complete_checkpoints(tracker.run_path)] == [5, 10]


def test_requests_during_a_write_are_coalesced_into_one_later_save(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track("coalesce", model=model, optimizer=opt, root=root, keep_last=10)
    import jupyter_gpu_ws.checkpoints.tracker as module

    real_finish = module.finish
    gate = __import__("threading").Event()

    def slow_finish(*args, **kwargs):  # hold the first write open
        gate.wait(5)
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(module, "finish", slow_finish)
    tracker.request("first")
    tracker.step(1)  # starts the write
    for i, rid in ((2, "a"), (3, "b"), (4, "c")):
        tracker.request(rid)
        tracker.step(i)  # write in flight: coalesced, no second staging copy
    gate.set()
    tracker.wait()
    tracker.step(5)  # the next safe point after the write honours the coalesced request
    tracker.wait()
    saved = [(m["step"], m["request_id"]) for _, m in complete_checkpoints(tracker.run_path)]
    assert saved == [(1, "first"), (5, "c")]


def test_a_save_started_by_another_thread_meanwhile_is_not_doubled(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's thread and the loop reach a save together: one writer, and the request that
    came second is kept for the next safe point (a second writer's checkpoint, finishing
    last, would hide the first one's request id from the server that waits for it)."""
    model, opt = model_and_optimizer()
    tracker = Tracker().track("race", model=model, optimizer=opt, root=root, keep_last=10)
    import jupyter_gpu_ws.checkpoints.tracker as module

    real_capture = module.capture_rng
    raced = []

    def capture_while_the_loop_steps(torch_module):  # the other thread, in the middle of this save
        if not raced:
            raced.append(True)
            tracker.request("second")
            tracker.step(2)
        return real_capture(torch_module)

    monkeypatch.setattr(module, "capture_rng", capture_while_the_loop_steps)
    tracker.request("first")
    tracker.step(1)
    tracker.wait()
    assert [(m["step"], m["request_id"]) for _, m in complete_checkpoints(tracker.run_path)] == [
        (1, "first")
    ]
    assert tracker.last.request_id == "first" and tracker.pending.request_id == "second"
    tracker.step(3)
    tracker.wait()
    saved = [(m["step"], m["request_id"]) for _, m in complete_checkpoints(tracker.run_path)]
    assert saved == [(1, "first"), (3, "second")]


def test_a_save_that_fails_before_writing_keeps_its_request(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt = model_and_optimizer()
    tracker = Tracker().track("staging", model=model, optimizer=opt, root=root)
    import jupyter_gpu_ws.checkpoints.tracker as module

    real_capture = module.capture_rng
    monkeypatch.setattr(
        module, "capture_rng", lambda torch_module: (_ for _ in ()).throw(KeyboardInterrupt())
    )
    tracker.request("asked")
    with pytest.raises(KeyboardInterrupt):
        tracker.step(1)
    monkeypatch.setattr(module, "capture_rng", real_capture)
    assert tracker.pending.request_id == "asked" and tracker.wait(0)  # not stuck "writing"
    tracker.step(2)
    tracker.wait()
    assert [(m["step"], m["request_id"]) for _, m in complete_checkpoints(tracker.run_path)] == [
        (2, "asked")
    ]


class Flaky:
    """A stateful object whose state cannot be read while `broken`."""

    def __init__(self) -> None:
        self.broken = True
        self.value = 0

    def state_dict(self) -> dict:
        if self.broken:
            raise RuntimeError("the data loader's state is not ready")
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def test_a_state_that_cannot_be_read_never_ends_the_training_loop(root: str) -> None:
    model, opt = model_and_optimizer()
    flaky = Flaky()
    tracker = Tracker().track(
        "flaky", model=model, optimizer=opt, loader=flaky, every_steps=5, root=root
    )
    tracker.request("persist-1")
    train(
        model, opt, tracker, 0, 12
    )  # the request at step 0 and the policy at 5 and 10 all fail: no raise
    assert tracker.wait(5)
    assert "the data loader's state is not ready" in (tracker.last_error or "")
    assert [f["request_id"] for f in tracker.failed] == [
        "persist-1"
    ]  # answered as failed, not kept
    assert tracker.pending is None and complete_checkpoints(tracker.run_path) == []
    with pytest.raises(
        CheckpointError, match="not ready"
    ):  # a checkpoint the user asks for says why
        tracker.checkpoint(wait=True)
    flaky.broken = False
    train(model, opt, tracker, 12, 16)  # the policy's next time works
    tracker.wait()
    assert [m["step"] for _, m in complete_checkpoints(tracker.run_path)] == [15]


def test_a_request_met_stays_answered_after_a_later_save_replaces_the_last(root: str) -> None:
    # The server waits for its request id in the kernel's registration: a save right after (the
    # policy's, or the user's) must not hide that the request was met.
    from jupyter_gpu_ws.checkpoints.coordinator import answered

    model, opt = model_and_optimizer()
    tracker = Tracker().track("answered", model=model, optimizer=opt, root=root)
    tracker.request("req-1")
    train(model, opt, tracker, 0, 2)
    assert tracker.wait(30) and tracker.last is not None and tracker.last.request_id == "req-1"
    tracker.checkpoint(wait=True)  # a save of its own, with no request
    state = tracker.describe()
    assert state["last"]["request_id"] is None
    assert answered(state, "req-1") and not answered(state, "req-2")


def test_a_script_that_ends_while_a_checkpoint_is_written_waits_for_it_and_exits_cleanly(
    tmp_path: Path,
) -> None:
    """The writer thread is joined at the interpreter's exit: the checkpoint lands whole and the
    process ends with status 0, never "terminate called without an active exception" (134)."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "import jupyter_gpu_ws as gpuws\n"
        "model = torch.nn.Linear(2048, 4096)  # 32 MiB of weights: written after the script ends\n"
        "gpuws.track('big', model=model, root='ckpts')\n"
        "gpuws.checkpoint()  # not waited for\n"
    )
    for _ in range(3):
        shutil.rmtree(tmp_path / "ckpts", ignore_errors=True)
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert "terminate called" not in done.stderr
        [(_, manifest)] = complete_checkpoints(tmp_path / "ckpts" / "big")
        assert manifest["step"] == 0
