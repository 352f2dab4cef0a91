"""The agreement round on the step every rank saves at, over a real c10d TCPStore (ranks played by
threads of this process), and that steps without a request never start one."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from jupyter_gpu_ws.checkpoints.agreement import AgreementError, StepAgreement


@pytest.fixture
def store() -> Iterator[Any]:
    master = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    yield dist.PrefixStore("gpuws/test/", master)


def rank(
    store: Any,
    number: int,
    world: int,
    step: Any,
    log: list[Any] | None = None,
    asked: threading.Event | None = None,
    timeout: float = 10,
) -> StepAgreement:
    def current() -> int:
        if log is not None:
            log.append("step read")
        return step() if callable(step) else step

    return StepAgreement(
        store,
        number,
        world,
        current,
        on_round=lambda n: log.append(("hold", n)) if log is not None else None,
        on_ask=lambda: asked.set() if asked is not None else None,
        timeout=timeout,
    )


def test_a_rank_ahead_of_rank_0_sets_the_target_one_step_past_where_it_is(store: Any) -> None:
    log: list[Any] = []
    other = rank(store, 1, 2, 12, log)
    leader = rank(store, 0, 2, 10)
    assert leader.agree(10, {"request_id": "r1"}) == 13
    assert other.answer(1, timeout=5) == (13, {"request_id": "r1"})
    # The loop is told to wait before its step is read: it cannot have passed the target.
    assert log == [("hold", 1), "step read"]
    other.close()
    leader.close()


def test_ranks_behind_rank_0_save_at_rank_0s_step(store: Any) -> None:
    others = [rank(store, r, 3, 7 + r) for r in (1, 2)]
    leader = rank(store, 0, 3, 10)
    assert leader.agree(10, {"request_id": None}) == 10
    assert [o.answer(1, timeout=5)[0] for o in others] == [10, 10]
    # A second round goes the same way (the first round's keys are gone).
    assert leader.agree(20, {"request_id": "r2"}) == 20
    assert [o.answer(2, timeout=5) for o in others] == [(20, {"request_id": "r2"})] * 2
    assert not store.check(["r1", "r1/T", "r1/at1"])
    for agreement in [*others, leader]:
        agreement.close()


def test_another_ranks_request_reaches_rank_0(store: Any) -> None:
    asked = threading.Event()
    leader = rank(store, 0, 2, 0, asked=asked)
    other = rank(store, 1, 2, 0)
    other.ask()
    assert asked.wait(5)
    leader.close()
    other.close()


def test_a_rank_that_does_not_answer_fails_the_round_and_releases_the_others(store: Any) -> None:
    answering = rank(store, 1, 3, 5, timeout=1)  # rank 2 never comes
    leader = rank(store, 0, 3, 5, timeout=1)
    with pytest.raises(AgreementError, match="did not answer"):
        leader.agree(5, {"request_id": None})
    with pytest.raises(AgreementError, match="gave up"):
        answering.answer(1, timeout=5)
    leader.close()
    answering.close()


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[Any]:
    """This process as a world of one rank, the way `torchrun --nproc-per-node 1` starts one."""
    master = dist.TCPStore("127.0.0.1", 0, 1, True)
    dist.init_process_group("gloo", store=master, rank=0, world_size=1)
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield master
    finally:
        dist.destroy_process_group()
        signal.signal(signal.SIGTERM, before)


def test_steps_without_a_request_never_start_a_round(tmp_path: Path, one_rank: Any) -> None:
    from jupyter_gpu_ws.checkpoints.distributed import DistributedTracker

    model = torch.nn.Linear(4, 4)
    tracker = DistributedTracker().track("one", model=model, root=str(tmp_path))
    rounds: list[int] = []
    agree = tracker.agreement.agree
    tracker.agreement.agree = lambda step, info: rounds.append(step) or agree(step, info)
    for i in range(20000):
        tracker.step(i)
    assert rounds == [] and tracker.last is None
    tracker.request("asked")
    tracker.step(20000)
    tracker.wait()
    assert rounds == [20000] and tracker.last.step == 20000 and tracker.last.request_id == "asked"
    tracker._at_exit()
