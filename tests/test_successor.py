"""A crashed runtime's successor gets everything back by itself: two real servers on one store,
as two machines (other host names, other paths). The first trains a tracked model and is killed
with kill -9, kernel and all; the second starts seconds later on an empty work directory, with
the default workspace name, and with no API call but starting a kernel every stored file is back,
`resume()` continues from the last stored step, and it writes again once the dead lease is out."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.servers import ServerProcess, server_process, until

LEASE_TTL = 10.0

MODEL = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
"""

TRAIN = MODEL + """\
gpuws.track(model=model, optimizer=opt, every_steps=5, keep_last=3)
start = gpuws.resume()
print("tracking", start, flush=True)
for i in range(start, 10**9):
    opt.zero_grad(); model(torch.randn(16, 64)).sum().backward(); opt.step()
    gpuws.step(i)
    time.sleep(0.02)
"""

RESUME = MODEL + """\
gpuws.track(model=model, optimizer=opt, every_steps=5, keep_last=3)
print("resumed", gpuws.resume(), flush=True)
"""


def kernel_client(server: ServerProcess, notebook: str) -> Any:
    """A notebook session, as JupyterLab opens one, and a client of its kernel."""
    from jupyter_client import BlockingKernelClient

    session = server.api("/api/sessions", "POST", {"path": notebook, "type": "notebook", "name": notebook,
                                                   "kernel": {"name": "python3"}})
    client = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{session['kernel']['id']}.json"))
    client.load_connection_file()
    client.start_channels(hb=False)
    client.wait_for_ready(timeout=60)
    return client


def run(client: Any, code: str, timeout: float = 180) -> str:
    """Run a cell to its end and return what it printed (raising with the traceback on error)."""
    msg_id = client.execute(code)
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(out)
    raise AssertionError(f"the cell did not end within {timeout:.0f} s; it printed: {''.join(out)}")


def mirrored(store: Path, workspace: str) -> dict[str, str]:
    base = store / workspace / "files"
    return {p.relative_to(base).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in base.rglob("*") if p.is_file() and ".gpuws-part" not in p.name}


def newest_stored_step(store: Path, workspace: str) -> int:
    run = store / workspace / "files" / ".gpuws" / "checkpoints" / "train.ipynb"
    steps = [int(m.parent.name.split("-")[1]) for m in run.glob("ckpt-*/manifest.json")]
    return max(steps) if steps else -1


def kill_everything(server: ServerProcess) -> None:
    """kill -9 to the server's process group and to every process it started (its kernels
    run in sessions of their own)."""
    victims = psutil.Process(server.proc.pid).children(recursive=True)
    os.killpg(server.proc.pid, signal.SIGKILL)
    for victim in victims:
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            pass
    server.proc.wait()


@pytest.fixture
def shared_store(tmp_path: Path) -> Path:
    if shutil.which("unshare") is None:
        pytest.fail("`unshare` (util-linux) is needed to run servers as other hosts", pytrace=False)
    return tmp_path / "store"


@pytest.mark.parametrize("restoring", [False, True], ids=["after-the-restore", "during-the-restore"])
def test_a_successor_seconds_after_a_kill_gets_everything_back_and_resumes(tmp_path: Path, shared_store: Path,
                                                                           restoring: bool) -> None:
    config = {"store_url": str(shared_store), "workspace": "", "sync_debounce": 0.05, "lease_ttl": LEASE_TTL,
              "checkpoint_timeout": 10.0}
    first_root = tmp_path / "machine-a" / "home" / "project"
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config, root=first_root, hostname="machine-a") as a:
        (first_root / "notes.md").write_text("what I learned today\n")
        data = first_root / "data"
        data.mkdir()
        for i in range(1500 if restoring else 20):  # a dataset: the restore takes a while
            (data / f"{i:05d}.csv").write_bytes(os.urandom(8192))
        workspace = a.api("/gpuws/api/sync")["workspace"]
        assert workspace.endswith("-project")
        trainer = kernel_client(a, "train.ipynb")
        trainer.execute(TRAIN)  # runs until the machine dies
        until(lambda: newest_stored_step(shared_store, workspace) >= 20, 120, "checkpoints in the store")
        until(lambda: a.api("/gpuws/api/sync")["pending_files"] == 0, 60, "everything written uploaded")
        kill_everything(a)
        killed = time.monotonic()
        trainer.stop_channels()
    stored = mirrored(shared_store, workspace)
    last_step = newest_stored_step(shared_store, workspace)
    lease = json.loads((shared_store / workspace / ".gpuws" / "lease.json").read_text())
    assert lease["host"] == "machine-a" and lease["expires"] > time.time()  # still fresh

    time.sleep(2)
    second_root = tmp_path / "machine-b" / "srv" / "work" / "project"  # another path, same folder name
    with server_process(tmp_path / "b", tmp_path / "runtime-b", config, root=second_root, hostname="machine-b") as b:
        status = b.api("/gpuws/api/sync")
        assert status["workspace"] == workspace  # found by the folder's name, wherever it sits
        client = kernel_client(b, "train.ipynb")
        if restoring:
            assert b.api("/gpuws/api/sync").get("restoring") or b.api("/gpuws/api/sync")["state"] == "starting"
        printed = run(client, RESUME)
        assert re.search(rf"^resumed {last_step + 1}$", printed, re.M), printed
        client.stop_channels()

        def everything_back() -> bool:
            here = {p.relative_to(second_root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in second_root.rglob("*") if p.is_file()}
            return all(here.get(path) == digest for path, digest in stored.items())

        until(everything_back, 120, "every stored file back in the new work directory")

        def writing() -> Any:
            s = b.api("/gpuws/api/sync")
            return s if s["lease_held"] and s.get("lease_writing") else None

        until(writing, LEASE_TTL + 30, "the successor writing")
        took = time.monotonic() - killed
        print(f"the successor writes {took:.1f} s after the kill (lease_ttl {LEASE_TTL:.0f} s)")
        assert took <= LEASE_TTL + 5
        (second_root / "after.txt").write_text("written on the successor")
        until(lambda: (shared_store / workspace / "files" / "after.txt").exists(), 30, "the successor's write")
        assert json.loads((shared_store / workspace / ".gpuws" / "lease.json").read_text())["host"] == "machine-b"


def test_two_servers_on_one_store_never_both_write_even_through_a_pass_longer_than_the_lease(
        tmp_path: Path, shared_store: Path) -> None:
    """The first server's pass uploads a file for several lease lifetimes (a bandwidth cap); the
    second, started meanwhile on another host, must stay read-only the whole time: the store ends
    with the holder's bytes only, never the intruder's."""
    ttl = 3.0
    config = {"store_url": str(shared_store), "workspace": "shared", "sync_debounce": 0.05, "lease_ttl": ttl}
    holder_bytes = os.urandom(12 * 2**20)
    with server_process(tmp_path / "a", tmp_path / "runtime-a", {**config, "bandwidth_limit": 1 * 2**20},
                        hostname="machine-a") as a:
        (a.root / "shared.bin").write_bytes(holder_bytes)
        until(lambda: (a.api("/gpuws/api/sync").get("progress") or {}).get("bytes_done"), 30, "the long upload")
        with server_process(tmp_path / "b", tmp_path / "runtime-b", config, hostname="machine-b") as b:
            (b.root / "shared.bin").write_bytes(b"the intruder's version")
            seen = set()
            deadline = time.monotonic() + 4 * ttl
            while time.monotonic() < deadline:
                status = b.api("/gpuws/api/sync")
                seen.add((status["state"], status["lease_held"]))
                assert not status["lease_held"], "both servers held the lease"
                time.sleep(0.2)
            assert ("read-only", False) in seen
            until(lambda: a.api("/gpuws/api/sync")["pending_files"] == 0, 60, "the holder's upload")
            assert (shared_store / "shared" / "files" / "shared.bin").read_bytes() == holder_bytes
            assert not (shared_store / "shared" / ".gpuws" / "versions" / "shared.bin").exists()
