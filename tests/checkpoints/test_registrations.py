"""Kernel registrations in a runtime folder that several servers share: what a server reads,
and what it removes (only what provably nobody needs). The two-server case with real server
processes is test_two_servers.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.multikernelmanager import MultiKernelManager

from jupyter_gpu_ws.checkpoints import protocol
from jupyter_gpu_ws.checkpoints.coordinator import CheckpointCoordinator
from tests.kernels import Notebook
from tests.waiting import async_until, until

TRACKED = """
%load_ext jupyter_gpu_ws
import torch, jupyter_gpu_ws as gpuws
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gpuws.track(model=model, optimizer=opt)
for i in range(3):
    opt.zero_grad(); model(torch.randn(2, 16)).sum().backward(); opt.step(); gpuws.step(i)
"""


async def no_notebooks() -> dict[str, str]:
    return {}


def ended_process() -> dict[str, Any]:
    """The identity of a process that has run and ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return {**protocol.process_identity(), "pid": proc.pid}


def running_process() -> dict[str, Any]:
    return protocol.process_identity()  # this test's own process


def register(folder: Path, kernel_id: str, process: dict[str, Any], request: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = protocol.registration_file(folder, kernel_id)
    path.write_text(json.dumps({"kernel_id": kernel_id, **process, "run": "train.ipynb"}))
    if request:
        protocol.request_file(folder, kernel_id).write_text(json.dumps({"request_id": "r1"}))
    return path


def server_folder(runtime: Path, server_id: str, process: dict[str, Any]) -> Path:
    folder = protocol.registrations_folder(runtime, server_id)
    folder.mkdir(parents=True)
    (folder / protocol.SERVER_FILE).write_text(json.dumps(process))
    return folder


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    return tmp_path / "runtime"


@pytest.fixture
def coordinator(runtime: Path) -> Iterator[CheckpointCoordinator]:
    """A server that runs no kernel, over the shared runtime folder."""
    coordinator = CheckpointCoordinator(MultiKernelManager(), str(runtime), no_notebooks)
    yield coordinator
    coordinator.close()


def test_a_server_makes_its_own_folder_saying_it_runs_and_removes_it_when_it_stops(
    runtime: Path,
) -> None:
    coordinator = CheckpointCoordinator(MultiKernelManager(), str(runtime), no_notebooks)
    folder = protocol.registrations_folder(runtime, coordinator.server_id)
    assert coordinator.agents_dir == folder != protocol.agents_root(runtime)
    server = json.loads((folder / protocol.SERVER_FILE).read_text())
    assert server["pid"] == os.getpid() and server["process_space"] == protocol.process_space()
    coordinator.close()
    assert not folder.exists()


def test_another_running_servers_registrations_survive_this_servers_reads(
    coordinator: CheckpointCoordinator, runtime: Path
) -> None:
    other = server_folder(runtime, "other-server", running_process())
    theirs = register(other, "k-theirs", running_process(), request=True)
    unowned = register(protocol.agents_root(runtime), "k-no-identity", running_process())

    assert coordinator.agent_states() == {}  # neither is this server's kernel
    coordinator.sweep()

    assert theirs.exists() and protocol.request_file(other, "k-theirs").exists()
    assert unowned.exists()


def test_this_servers_registration_of_a_kernel_it_no_longer_runs_is_removed(
    coordinator: CheckpointCoordinator,
) -> None:
    mine = register(coordinator.agents_dir, "k-shut-down", running_process(), request=True)
    assert coordinator.agent_states() == {}
    assert (
        not mine.exists()
        and not protocol.request_file(coordinator.agents_dir, "k-shut-down").exists()
    )


def test_a_registration_whose_kernel_process_has_ended_is_removed_by_any_server(
    coordinator: CheckpointCoordinator, runtime: Path
) -> None:
    other = server_folder(runtime, "other-server", running_process())
    stale = register(other, "k-dead", ended_process(), request=True)
    stale_top = register(protocol.agents_root(runtime), "k-dead-no-identity", ended_process())
    alive = register(other, "k-alive", running_process())

    coordinator.sweep()

    assert not stale.exists() and not protocol.request_file(other, "k-dead").exists()
    assert not stale_top.exists()
    assert alive.exists() and (other / protocol.SERVER_FILE).exists()


def test_a_registration_of_a_kernel_process_ended_but_not_yet_reaped_is_removed(
    coordinator: CheckpointCoordinator, runtime: Path
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])  # ends; nobody waits for it yet
    try:
        until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, 30, "a zombie")
        zombie = register(
            protocol.agents_root(runtime),
            "k-zombie",
            {**running_process(), "pid": proc.pid, "process_started": None},
        )
        coordinator.sweep()
        assert not zombie.exists()
    finally:
        proc.wait()


def test_a_registration_whose_pid_now_belongs_to_a_later_process_is_removed(
    coordinator: CheckpointCoordinator, runtime: Path
) -> None:
    reused = running_process()
    reused["process_started"] -= (
        3600  # the kernel with this pid started an hour before this process
    )
    stale = register(protocol.agents_root(runtime), "k-reused-pid", reused)
    coordinator.sweep()
    assert not stale.exists()


def test_the_folder_of_a_server_whose_process_has_ended_is_removed_whole(
    coordinator: CheckpointCoordinator, runtime: Path
) -> None:
    gone = server_folder(runtime, "gone-server", ended_process())
    register(gone, "k-orphan", running_process(), request=True)
    running = server_folder(runtime, "running-server", running_process())

    coordinator.sweep()

    assert not gone.exists()
    assert (running / protocol.SERVER_FILE).exists() and coordinator.agents_dir.is_dir()


def test_registrations_from_another_process_space_are_left_alone(
    coordinator: CheckpointCoordinator, runtime: Path
) -> None:
    # Another container or machine sharing the folder: its pids name other processes than ours.
    elsewhere = {**ended_process(), "process_space": "another-host/another-boot/4026531836"}
    folder = server_folder(runtime, "server-elsewhere", elsewhere)
    theirs = register(folder, "k-elsewhere", elsewhere)
    coordinator.sweep()
    assert theirs.exists()


def test_a_kernel_registers_in_its_servers_folder_and_at_the_top_without_one(runtime: Path) -> None:
    assert protocol.registrations_folder(runtime, "a1b2") == protocol.agents_root(runtime) / "a1b2"
    for not_an_identity in (None, "", "../elsewhere", "a/b", ".hidden"):
        assert protocol.registrations_folder(runtime, not_an_identity) == protocol.agents_root(
            runtime
        )


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any]) -> dict[str, Any]:
    return {**gpuws_config, "sync_enabled": False}  # checkpoints alone here


async def test_a_kernel_started_without_a_server_identity_is_found_by_the_server_that_runs_it(
    jp_fetch: Any, gpuws_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(protocol.SERVER_ID_ENV)  # as for a kernel started by an older version
    async with Notebook(jp_fetch, gpuws_app, "plain.ipynb") as nb:
        await nb.run(TRACKED)
        top = protocol.agents_root(gpuws_app.serverapp.runtime_dir)
        assert protocol.registration_file(top, nb.kernel_id).exists()

        response = await jp_fetch(
            "gpuws",
            "api",
            "checkpoints",
            method="POST",
            body=json.dumps({"kernel_id": nb.kernel_id}),
        )
        [request] = json.loads(response.body)["requests"]

        async def saved() -> Any:
            kernels = json.loads((await jp_fetch("gpuws", "api", "checkpoints")).body)["kernels"]
            return [
                k
                for k in kernels
                if (k.get("last") or {}).get("request_id") == request["request_id"]
            ]

        [kernel] = await async_until(saved, timeout=30)
        assert kernel["kernel_id"] == nb.kernel_id and kernel["last"]["step"] == 2
