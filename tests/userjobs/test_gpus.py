"""A job's command fitted to the GPUs there are (fit_to_gpus): fewer GPUs run fewer torchrun
processes, more keep what was asked, and an unknown count changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jupyter_gpu_ws.userjobs.gpus import fit_to_gpus
from jupyter_gpu_ws.userjobs.manager import JobManager, JobSettings
from tests.waiting import until

TORCHRUN = ["torchrun", "--nproc-per-node", "2", "train.py", "--nproc-per-node", "2"]


def test_a_torchrun_asked_for_two_gpus_relaunches_on_the_one_there_is_and_says_so() -> None:
    fitted = fit_to_gpus(TORCHRUN, asked=2, available=1, relaunch=True)
    # Only the launcher's option changes: the script's arguments are its own.
    assert fitted.command == [
        "torchrun",
        "--nproc-per-node",
        "1",
        "train.py",
        "--nproc-per-node",
        "2",
    ]
    assert fitted.gpus == 1
    assert fitted.note == "relaunched on 1 GPU of the 2 asked: torchrun --nproc-per-node 1"


def test_the_equals_form_and_the_underscore_spelling_of_python_m_torch_distributed_run_are_rewritten() -> (
    None
):
    command = [
        "python3",
        "-u",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=4",
        "t.py",
    ]
    fitted = fit_to_gpus(command, asked=4, available=2)
    assert fitted.command == [
        "python3",
        "-u",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "t.py",
    ]
    assert fitted.gpus == 2
    assert fitted.note == (
        "runs on 2 GPUs of the 4 asked: "
        "python3 -u -m torch.distributed.run --standalone --nproc_per_node=2"
    )


def test_more_gpus_than_asked_keep_the_count_the_user_asked_for() -> None:
    fitted = fit_to_gpus(TORCHRUN, asked=2, available=8, relaunch=True)
    assert fitted.command == TORCHRUN and fitted.gpus == 2 and fitted.note is None


def test_an_unknown_or_empty_gpu_count_leaves_the_command_as_it_is() -> None:
    for available in (None, 0):
        fitted = fit_to_gpus(TORCHRUN, asked=2, available=available)
        assert fitted.command == TORCHRUN and fitted.gpus == 2 and fitted.note is None


def test_a_process_count_other_than_the_gpus_asked_is_the_users_and_stays() -> None:
    command = ["torchrun", "--nproc-per-node=3", "train.py"]
    fitted = fit_to_gpus(command, asked=2, available=1)
    assert fitted.command == command and fitted.gpus == 1
    assert fitted.note == "runs on 1 GPU of the 2 asked"


def test_a_plain_script_runs_on_fewer_gpus_with_its_command_unchanged() -> None:
    command = ["python", "train.py", "--nproc-per-node", "2"]
    fitted = fit_to_gpus(command, asked=2, available=1)
    assert (
        fitted.command == command
        and fitted.gpus == 1
        and fitted.note == "runs on 1 GPU of the 2 asked"
    )


def test_a_job_that_asked_for_no_gpus_is_left_alone() -> None:
    fitted = fit_to_gpus(TORCHRUN, asked=None, available=1)
    assert fitted.command == TORCHRUN and fitted.gpus is None and fitted.note is None


def test_a_job_started_on_fewer_gpus_than_asked_sees_only_those_and_its_reason_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUWS_JOB_KEY", "a-test-key-that-is-long-enough-0123456789")
    settings = JobSettings(
        workdir=tmp_path, workspace="ws", host="here", runtime_id="r-1", backoff=(0.1,)
    )
    manager = JobManager(settings, gpu_count=lambda: 1)
    go = tmp_path / "go"
    show = (
        "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
        "print(os.environ['CUDA_VISIBLE_DEVICES'], sys.argv[2:])"
    )
    record = manager.submit([sys.executable, "-c", show, str(go), "--nproc-per-node", "2"], gpus=2)
    job = manager.get(record.id)
    try:
        until(
            lambda: job.process is not None and record.reason,
            30,
            "the job's process and its reason",
        )
        assert record.state == "running" and record.reason == "runs on 1 GPU of the 2 asked"
    finally:
        go.touch()  # the job ends, whatever the asserts found
    assert job.thread is not None
    job.thread.join(60)
    assert record.state == "finished", record
    assert record.attempts[0].runs_on == "runs on 1 GPU of the 2 asked"
    assert (
        manager.tail(record.id, 5)[-1] == "0 ['--nproc-per-node', '2']"
    )  # not a torchrun: as asked
