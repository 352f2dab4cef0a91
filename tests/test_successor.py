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

from tests.kernels import connected_client
from tests.servers import ServerProcess, server_process
from tests.sync.s3server import S3Server
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

ACCESS_KEY, SECRET_KEY, BUCKET = (
    "gpuws-successor-key",
    "gpuws-successor-secret-0123456789",
    "gpuws-successor",
)
REPO = Path(__file__).resolve().parents[1]

LEASE_TTL = 10.0

MODEL = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
"""

TRAIN = (
    MODEL
    + """\
gpuws.track(model=model, optimizer=opt, every_steps=5, keep_last=3)
start = gpuws.resume()
print("tracking", start, flush=True)
for i in range(start, 10**9):
    opt.zero_grad(); model(torch.randn(16, 64)).sum().backward(); opt.step()
    gpuws.step(i)
    time.sleep(0.02)
"""
)

RESUME = (
    MODEL
    + """\
gpuws.track(model=model, optimizer=opt, every_steps=5, keep_last=3)
print("resumed", gpuws.resume(), flush=True)
"""
)


def kernel_client(server: ServerProcess, notebook: str) -> Any:
    """A notebook session, as JupyterLab opens one, and a client of its kernel."""
    session = server.api(
        "/api/sessions",
        "POST",
        {"path": notebook, "type": "notebook", "name": notebook, "kernel": {"name": "python3"}},
    )
    return connected_client(server.runtime / f"kernel-{session['kernel']['id']}.json")


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


def _backend(server: ServerProcess) -> Any:
    """The store as the server sees it, through the same code (a local folder or S3)."""
    from jupyter_gpu_ws.store import open_backend

    return open_backend(server.config["store_url"], server.config.get("storage_options", {}))


def mirrored(
    server: ServerProcess, workspace: str, known: dict[str, bytes] | None = None
) -> dict[str, str]:
    """Every file of the workspace's mirror: its path and the SHA-256 of its bytes (those whose
    bytes the test knows, of the same size in the store, are not downloaded again)."""
    import tempfile

    backend = _backend(server)
    prefix = f"{workspace}/files/"
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        for f in backend.list(f"{workspace}/files"):
            path = f.key[len(prefix) :]
            if known and path in known and len(known[path]) == f.size:
                out[path] = hashlib.sha256(known[path]).hexdigest()
                continue
            local = os.path.join(scratch, "f")
            backend.get(f.key, local)
            with open(local, "rb") as data:
                out[path] = hashlib.sha256(data.read()).hexdigest()
    backend.close()
    return out


def newest_stored_step_of(paths: Any) -> int:
    steps = [
        int(p.split("/")[3].split("-")[1])
        for p in paths
        if p.startswith(".gpuws/checkpoints/train.ipynb/ckpt-") and p.endswith("/manifest.json")
    ]
    return max(steps) if steps else -1


def newest_stored_step(server: ServerProcess, workspace: str) -> int:
    backend = _backend(server)
    try:
        keys = [
            f.key[len(workspace) + len("/files/") :]
            for f in backend.list(f"{workspace}/files/.gpuws/checkpoints")
        ]
    finally:
        backend.close()
    return newest_stored_step_of(keys)


def lease_record(server: ServerProcess, workspace: str) -> dict[str, Any]:
    backend = _backend(server)
    try:
        return json.loads(backend.read_bytes(f"{workspace}/.gpuws/lease.json") or b"{}")
    finally:
        backend.close()


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


@pytest.fixture
def far_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real S3 server (SeaweedFS) for the first machine, and the same server 200 ms away for
    the second (a proxy that holds each chunk back 100 ms each way): the second's restore takes
    seconds. The test pauses the proxy (SIGSTOP) while its kernel starts, so that the restore is
    still under way when resume() runs however long the start takes."""
    import subprocess
    import sys

    server = S3Server(tmp_path / "seaweedfs", ACCESS_KEY, SECRET_KEY)
    server.start()
    server.create_bucket(BUCKET)
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    proxy = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "bench" / "latency_proxy.py"),
            str(server.port),
            "--delay-ms",
            "100",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout is not None
    far_port = int(proxy.stdout.readline().split()[1])
    yield {"near": server.endpoint, "far": f"http://127.0.0.1:{far_port}", "proxy": proxy}
    proxy.kill()
    proxy.wait()
    server.stop(grace=2)  # its data goes with the test


@pytest.mark.parametrize(
    "restoring", [False, True], ids=["after-the-restore", "during-the-restore"]
)
def test_a_successor_seconds_after_a_kill_gets_everything_back_and_resumes(
    tmp_path: Path, shared_store: Path, restoring: bool, request: Any
) -> None:
    config: dict[str, Any] = {
        "store_url": str(shared_store),
        "workspace": "",
        "sync_debounce": 0.05,
        "lease_ttl": LEASE_TTL,
        "checkpoint_timeout": 10.0,
    }
    second_config = config
    if restoring:
        endpoints = request.getfixturevalue("far_s3")
        config = {
            **config,
            "store_url": f"s3://{BUCKET}/team",
            "storage_options": {"endpoint_url": endpoints["near"]},
        }
        second_config = {**config, "storage_options": {"endpoint_url": endpoints["far"]}}
    first_root = tmp_path / "machine-a" / "home" / "project"
    with server_process(
        tmp_path / "a", tmp_path / "runtime-a", config, root=first_root, hostname="machine-a"
    ) as a:
        (first_root / "notes.md").write_text("what I learned today\n")
        data = first_root / "data"
        data.mkdir()
        dataset = {f"data/{i:05d}.csv": os.urandom(4096) for i in range(3000 if restoring else 20)}
        for path, content in dataset.items():  # from far away, the restore takes a while
            (first_root / path).write_bytes(content)
        workspace = until(
            lambda: a.api("/gpuws/api/sync").get("workspace"), 60, "the first server's engine"
        )
        assert workspace.endswith("-project")
        trainer = kernel_client(a, "train.ipynb")
        trainer.execute(TRAIN)  # runs until the machine dies
        until(lambda: newest_stored_step(a, workspace) >= 20, 120, "checkpoints in the store")
        until(
            lambda: a.api("/gpuws/api/sync")["pending_files"] == 0,
            120,
            "everything written uploaded",
        )
        kill_everything(a)
        killed = time.time()
        trainer.stop_channels()
    lease = lease_record(a, workspace)
    assert lease["host"] == "machine-a" and lease["expires"] > time.time()  # still fresh
    stored = mirrored(a, workspace, dataset)  # what the store holds at the kill
    last_step = newest_stored_step_of(stored)

    time.sleep(2)
    second_root = (
        tmp_path / "machine-b" / "srv" / "work" / "project"
    )  # another path, same folder name
    with server_process(
        tmp_path / "b",
        tmp_path / "runtime-b",
        second_config,
        root=second_root,
        hostname="machine-b",
    ) as b:

        def engine() -> str | None:
            # The status names the workspace from the start: wait for the engine itself, which
            # restores (the state stays "starting" while it does where the dead lease is out
            # already by the store's clock) or follows the work directory.
            status = b.api("/gpuws/api/sync")
            up = status.get("restoring") if restoring else status["state"] != "starting"
            return status.get("workspace") if up else None

        assert (
            until(engine, 60, "the successor's engine") == workspace
        )  # found by the folder's name, wherever it sits
        engine_up = (
            time.time()
        )  # it has read the dead runtime's lease by now (the engine opens with it)
        if restoring:  # the far store held still while the kernel starts: none of it is restored
            far = request.getfixturevalue("far_s3")["proxy"]
            far.send_signal(signal.SIGSTOP)
        client = kernel_client(b, "train.ipynb")
        if restoring:  # the restore goes on while resume() runs
            assert b.api("/gpuws/api/sync").get("restoring"), b.api("/gpuws/api/sync")
            far.send_signal(signal.SIGCONT)
        printed = run(client, RESUME)
        assert re.search(rf"^resumed {last_step + 1}$", printed, re.M), printed
        client.stop_channels()

        def everything_back() -> bool:
            here = {
                p.relative_to(second_root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in second_root.rglob("*")
                if p.is_file()
            }
            return all(here.get(path) == digest for path, digest in stored.items())

        until(everything_back, 120, "every stored file back in the new work directory")

        def writing() -> Any:
            s = b.api("/gpuws/api/sync")
            return s if s["lease_held"] and s.get("lease_writing") else None

        until(writing, LEASE_TTL + 30, "the successor writing")
        # When it became the writer, by its own record (the test looked later, after resume()).
        # The dead lease's times are not trusted (another machine's clock): it is out once the
        # successor has seen it unchanged for lease_ttl on its own clock, so the successor writes
        # within lease_ttl (+ a few seconds) of its engine's start, even while its own restore
        # still runs (its uploads start when that is done).
        lease_now = lease_record(b, workspace)
        took = lease_now["acquired"] - engine_up
        restored_after = b.api("/gpuws/api/sync")["restore"]["time"] - killed
        print(
            f"the successor writes {lease_now['acquired'] - killed:.1f} s after the kill, {took:.1f} s after its "
            f"engine started (lease_ttl {LEASE_TTL:.0f} s; restore done {restored_after:.1f} s after the kill)"
        )
        assert lease_now["host"] == "machine-b" and took <= LEASE_TTL + 5
        (second_root / "after.txt").write_text("written on the successor")
        until(lambda: "after.txt" in mirrored(b, workspace, dataset), 60, "the successor's write")


def test_two_servers_on_one_store_never_both_write_even_through_a_pass_longer_than_the_lease(
    tmp_path: Path, shared_store: Path
) -> None:
    """The first server's pass uploads a file for several lease lifetimes (a bandwidth cap); the
    second, started meanwhile on another host, must stay read-only the whole time: the store ends
    with the holder's bytes only, never the intruder's."""
    ttl = 3.0
    config = {
        "store_url": str(shared_store),
        "workspace": "shared",
        "sync_debounce": 0.05,
        "lease_ttl": ttl,
    }
    holder_bytes = os.urandom(12 * 2**20)
    with server_process(
        tmp_path / "a",
        tmp_path / "runtime-a",
        {**config, "bandwidth_limit": 1 * 2**20},
        hostname="machine-a",
    ) as a:
        # Whole at once (renamed into place): a copy caught half written would be uploaded,
        # then replaced by the whole one, leaving a version of the holder's own.
        (tmp_path / "shared.bin").write_bytes(holder_bytes)
        os.replace(tmp_path / "shared.bin", a.root / "shared.bin")
        until(
            lambda: (a.api("/gpuws/api/sync").get("progress") or {}).get("bytes_done"),
            30,
            "the long upload",
        )
        with server_process(
            tmp_path / "b", tmp_path / "runtime-b", config, hostname="machine-b"
        ) as b:
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
