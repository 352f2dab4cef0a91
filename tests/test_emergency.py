"""Emergency persist: SIGTERM to a real server process with a training kernel and unsynced
files, and a preemption notice from a fake metadata server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kernels import connected_client
from tests.servers import ServerProcess, api, server_process
from tests.test_sync_api import get, mirror, sync_running
from tests.waiting import async_until, until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

TRAINING = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.AdamW(model.parameters())
gpuws.track(model=model, optimizer=opt)
print("tracking", flush=True)
for i in range(10**9):
    opt.zero_grad(); model(torch.randn(16, 256)).sum().backward(); opt.step()
    gpuws.step(i)
    time.sleep(0.01)
"""


@pytest.fixture
def extra_config() -> dict[str, Any]:
    """More `c.GpuWorkspace` settings for the server process; a test class overrides it."""
    return {}


@pytest.fixture
def server(tmp_path: Path, extra_config: dict[str, Any]) -> Iterator[ServerProcess]:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    with server_process(tmp_path, runtime, extra_config) as running:
        until(
            lambda: running.api("/gpuws/api/sync")["state"] in ("idle", "syncing"),
            60,
            "the server's sync",
        )
        yield running


@contextlib.contextmanager
def tracking_kernel(server: ServerProcess, code: str, path: str = "train.ipynb") -> Iterator[None]:
    """A notebook's kernel on `server` running `code` (which tracks something), once its
    agent has registered what it tracks; the client lets go at the end."""
    session = api(
        server.port,
        "/api/sessions",
        "POST",
        {"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}},
    )
    client = connected_client(server.runtime / f"kernel-{session['kernel']['id']}.json")
    try:
        client.execute(code)
        until(
            lambda: any(
                k.get("objects") for k in api(server.port, "/gpuws/api/checkpoints")["kernels"]
            ),
            90,
            "the kernel's agent",
        )
        yield
    finally:
        client.stop_channels()


def pending(port: int) -> set[str]:
    """The files the server's sync has seen and not yet sent."""
    return {f["path"] for f in api(port, "/gpuws/api/sync/pending")["files"]}


def checkpoint_step_running(server: ServerProcess, job_id: str) -> None:
    until(
        lambda: (
            next(
                s
                for s in api(server.port, f"/gpuws/api/persist/{job_id}")["steps"]
                if s["name"] == "checkpoints"
            )["state"]
            == "running"
        ),
        30,
        "the persist's checkpoint step",
    )


def test_sigterm_persists_files_and_a_fresh_checkpoint_before_exit(server: ServerProcess) -> None:
    port, root, store = server.port, server.root, server.store
    with tracking_kernel(server, TRAINING):  # trains until the server goes
        until(
            lambda: any(k.get("run") for k in api(port, "/gpuws/api/checkpoints")["kernels"]),
            90,
            "the training kernel's agent",
        )
        data = os.urandom(6 * 2**20)  # large: the watcher holds it for the (endless) settle delay
        (root / "results.bin").write_bytes(data)
        (root / "notes.md").write_text("last words")
        until(lambda: "results.bin" in pending(port), 30, "results.bin pending")  # seen, not sent
        assert not (mirror(store) / "results.bin").exists()

        signalled = time.time()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=60)
    took = time.time() - signalled

    assert (mirror(store) / "results.bin").read_bytes() == data
    assert (mirror(store) / "notes.md").read_text() == "last words"
    manifests = list(
        (mirror(store) / ".gpuws" / "checkpoints" / "train.ipynb").glob("ckpt-*/manifest.json")
    )
    assert manifests, server.log.read_text()[-3000:]
    newest = max(json.loads(m.read_text())["time"] for m in manifests)
    assert newest >= signalled  # a checkpoint taken because of the SIGTERM
    report = json.loads((server.state / "emergency-report.json").read_text())
    assert report["reason"] == "SIGTERM" and report["pending_count"] == 0 and report["errors"] == []
    assert report["seconds"] < 25 and took < 60


STUCK = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
model = torch.nn.Linear(8, 1)
gpuws.track(model=model)
print("tracking", flush=True)
time.sleep(3600)  # a long evaluation: no step() in which a checkpoint could be taken
"""


class TestStuckPersist:
    @pytest.fixture
    def extra_config(self) -> dict[str, Any]:
        return {"checkpoint_timeout": 300.0, "grace_period": 15.0}

    def test_sigterm_during_a_persist_stuck_on_a_checkpoint_still_syncs_within_the_grace(
        self, server: ServerProcess
    ) -> None:
        """A Persist now waits up to checkpoint_timeout (here 5 minutes) for a kernel between
        steps. A SIGTERM meanwhile must not wait with it: the emergency stops that persist
        and runs its own on the grace's timeouts, so the files reach the store in time."""
        port, root, store = server.port, server.root, server.store
        with tracking_kernel(server, STUCK, "eval.ipynb"):
            data = os.urandom(6 * 2**20)  # held back by the watcher's settle delay
            (root / "results.bin").write_bytes(data)
            user = api(port, "/gpuws/api/persist", "POST", {})
            checkpoint_step_running(server, user["id"])
            until(lambda: "results.bin" in pending(port), 30, "results.bin pending")
            signalled = time.time()
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(timeout=60)
        took = time.time() - signalled

        assert (mirror(store) / "results.bin").read_bytes() == data, server.log.read_text()[-3000:]
        report = json.loads((server.state / "emergency-report.json").read_text())
        assert report["pending_count"] == 0
        assert report["job"]["id"] != user["id"]  # its own job, not the stuck one
        assert report["job"]["result"]["trigger"] == "SIGTERM"
        assert any(
            "no checkpoint within" in e for e in report["errors"]
        )  # the kernel is named, not waited for
        assert took < 15 + 10


class TestDeadline:
    @pytest.fixture
    def extra_config(self) -> dict[str, Any]:
        return {"max_runtime": "1m", "persist_lead_time": 40}

    def test_a_server_process_persists_by_itself_before_its_deadline(
        self, server: ServerProcess
    ) -> None:
        port, root, store = server.port, server.root, server.store
        (root / "results.bin").write_bytes(
            b"r" * (6 * 2**20)
        )  # held back by the hour-long settle delay
        state = api(port, "/gpuws/api/runtime")
        assert state["source"] == "max_runtime" and state["next_persist"] < state["deadline"]

        def persisted() -> Any:
            job = api(port, "/gpuws/api/runtime")["auto_persist"]
            return job if job and job["state"] != "running" else None

        job = until(persisted, 50, "the automatic persist")
        assert job["state"] == "done" and job["result"]["trigger"] == "auto"
        assert job["finished"] < state["deadline"]
        assert (mirror(store) / "results.bin").stat().st_size == 6 * 2**20


class FakeMetadata(http.server.BaseHTTPRequestHandler):
    preempted = False

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if (
            self.path.endswith("/instance/preempted")
            and self.headers.get("Metadata-Flavor") == "Google"
        ):
            body = b"TRUE" if FakeMetadata.preempted else b"FALSE"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def metadata() -> Iterator[str]:
    FakeMetadata.preempted = False
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeMetadata)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any], metadata: str) -> dict[str, Any]:
    return {
        **gpuws_config,
        "preemption_clouds": ["gcp"],
        "gcp_metadata_url": metadata,
        "preemption_poll_interval": 0.2,
    }


class TestReleaseThenPreemption:
    @pytest.fixture
    def extra_config(self, metadata: str) -> dict[str, Any]:
        return {
            "checkpoint_timeout": 300.0,
            "grace_period": 15.0,
            "preemption_clouds": ["gcp"],
            "gcp_metadata_url": metadata,
            "preemption_poll_interval": 0.2,
        }

    def test_a_release_waiting_on_a_stuck_persist_follows_the_emergency_persist(
        self, server: ServerProcess
    ) -> None:
        port, root, store = server.port, server.root, server.store
        with tracking_kernel(server, STUCK, "eval.ipynb"):
            (root / "results.bin").write_bytes(b"r" * (6 * 2**20))
            stuck = api(port, "/gpuws/api/runtime/release", "POST", {"force": False})
            checkpoint_step_running(server, stuck["id"])
            FakeMetadata.preempted = True
            state = until(
                lambda: (
                    lambda s: s if s["emergency"] and s["emergency"]["state"] == "done" else None
                )(api(port, "/gpuws/api/runtime")),
                30,
                "the emergency persist",
            )
            release = until(
                lambda: (lambda r: r if r["state"] != "persisting" else None)(
                    api(port, "/gpuws/api/runtime")["release"]
                ),
                30,
                "the release's decision",
            )
        assert (mirror(store) / "results.bin").is_file(), state["emergency"]  # its report, if not
        assert (mirror(store) / "results.bin").stat().st_size == 6 * 2**20
        assert state["emergency"]["pending_count"] == 0
        # The release now follows the emergency's persist, whose failure (the kernel gave no
        # checkpoint) it reports, instead of the "cancelled" of the persist it had waited on.
        assert release["job_id"] != stuck["id"]
        assert release["state"] == "kept" and "no checkpoint within" in release["error"]
        # The persist it had waited on is still in its checkpoint wait, but its sync never starts.
        assert api(port, f"/gpuws/api/persist/{stuck['id']}")["steps"][-1]["state"] == "pending"


async def test_a_preemption_notice_runs_the_emergency_persist(
    jp_fetch: Any, jp_root_dir: Path, store_dir: Path, gpuws_app: Any
) -> None:
    await sync_running(jp_fetch)
    gpuws_app.sync.service.debounce = 3600
    (jp_root_dir / "model.bin").write_bytes(b"m" * (5 * 2**20))
    state = await get(jp_fetch, "runtime")
    assert state["preemption_watch"]["watching"] == ["gcp"] and state["emergency"] is None

    FakeMetadata.preempted = True

    async def handled() -> Any:
        s = await get(jp_fetch, "runtime")
        return s if s["emergency"] and s["emergency"]["state"] == "done" else None

    state = await async_until(handled, timeout=20)
    assert state["emergency"]["reason"] == "preemption:gcp"
    assert state["source"] == "preemption:gcp"  # the notice is now the deadline
    assert (mirror(store_dir) / "model.bin").stat().st_size == 5 * 2**20
    assert state["emergency"]["pending_count"] == 0
