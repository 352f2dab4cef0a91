"""Two Jupyter servers of one user on one machine, sharing the runtime folder, each with a
training kernel: each server keeps, lists and checkpoints its own kernel, whatever the other
server's polls do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.checkpoints import protocol
from tests.kernels import connected_client
from tests.servers import ServerProcess, server_process
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

SETUP = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
gpuws.track(model=model, optimizer=opt)
"""

TRAINING = """\
for i in range(10**9):
    opt.zero_grad(); model(torch.randn(16, 64)).sum().backward(); opt.step()
    gpuws.step(i)
    time.sleep(0.02)
"""


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    runtime = tmp_path / "runtime"  # one user, one machine: one Jupyter runtime folder
    runtime.mkdir()
    with server_process(tmp_path / "a", runtime) as a, server_process(tmp_path / "b", runtime) as b:
        yield a, b


def start_training(server: ServerProcess, stack: ExitStack) -> str:
    """A notebook session on `server`, tracking a model, running the training cell (until the end)."""
    session = server.api(
        "/api/sessions",
        "POST",
        {
            "path": "train.ipynb",
            "type": "notebook",
            "name": "train.ipynb",
            "kernel": {"name": "python3"},
        },
    )
    kernel_id = session["kernel"]["id"]
    stack.callback(shut_down, server, kernel_id)
    client = connected_client(server.runtime / f"kernel-{kernel_id}.json")
    stack.callback(client.stop_channels)
    setup = client.execute(SETUP)
    while (reply := client.get_shell_msg(timeout=120))["parent_header"].get("msg_id") != setup:
        pass
    assert reply["content"]["status"] == "ok", reply["content"]
    client.execute(TRAINING)
    return kernel_id


def shut_down(server: ServerProcess, kernel_id: str) -> None:
    try:
        server.api(f"/api/kernels/{kernel_id}", "DELETE")
    except OSError:
        pass  # the server has gone already: the kernel goes with it


def listed(server: ServerProcess) -> list[str]:
    return [k["kernel_id"] for k in server.api("/gpuws/api/checkpoints")["kernels"]]


def tracking(server: ServerProcess) -> list[str]:
    """The kernels that have reached gpuws.track(...) (the agent registers at %load_ext)."""
    return [
        k["kernel_id"] for k in server.api("/gpuws/api/checkpoints")["kernels"] if k.get("objects")
    ]


def registration(runtime: Path, kernel_id: str) -> list[Path]:
    return list((runtime / protocol.AGENTS_DIR).rglob(f"{kernel_id}.json"))


def test_two_servers_sharing_a_runtime_folder_each_keep_and_checkpoint_their_own_kernel(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = two_servers
    with ExitStack() as stack:
        kernels = {a.port: start_training(a, stack), b.port: start_training(b, stack)}
        for server in (a, b):
            until(
                lambda: tracking(server) == [kernels[server.port]],
                120,
                "the server's training kernel listed",
            )

        # Each server's polls read (and tidy) the shared folder: neither loses the other's kernel.
        for _ in range(5):
            for server in (a, b):
                assert listed(server) == [kernels[server.port]]
        # Each kernel registered once, in its own server's folder (one level below the top).
        [[in_a], [in_b]] = (registration(a.runtime, kernels[server.port]) for server in (a, b))
        assert (
            in_a.parent != in_b.parent
            and in_a.parent.parent == in_b.parent.parent == a.runtime / protocol.AGENTS_DIR
        )

        for server in (a, b):
            own = kernels[server.port]
            [request] = server.api("/gpuws/api/checkpoints", "POST", {"all": True})["requests"]
            assert request["kernel_id"] == own and request["state"] in ("accepted", "done"), request

            def saved() -> Any:
                [kernel] = server.api("/gpuws/api/checkpoints")["kernels"]
                last = kernel.get("last") or {}
                return kernel if last.get("request_id") == request["request_id"] else None

            kernel = until(saved, 60, "the requested checkpoint")
            assert kernel["kernel_id"] == own and kernel["cell_running"] is True  # saved mid-cell
            manifest = Path(kernel["last"]["path"]) / "manifest.json"
            assert manifest.is_relative_to(server.root / ".gpuws" / "checkpoints" / "train.ipynb")
            assert json.loads(manifest.read_text())["step"] == kernel["last"]["step"]

        # Persist now on one server checkpoints its kernel, and only its kernel.
        job = a.api("/gpuws/api/persist", "POST")

        def finished() -> Any:
            current = a.api(f"/gpuws/api/persist/{job['id']}")
            return current if current["state"] != "running" else None

        done = until(finished, 90, "Persist now")
        assert done["state"] == "done", done["errors"]
        steps = {step["name"]: step for step in done["steps"]}
        assert steps["checkpoints"] == {
            "name": "checkpoints",
            "state": "done",
            "detail": "1 of 1 kernels checkpointed",
        }
        assert listed(b) == [kernels[b.port]]
