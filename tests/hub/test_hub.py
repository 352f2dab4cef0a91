"""Acceptance with a real JupyterHub: a user's server started through the hub API with a
templated store, a tracked training kernel, the hub stopping the server (SIGTERM) and the
emergency persist landing in the user's store, a new empty work directory restoring it, the
countdown showing the hub's deadline, and the idle culler against keep-alive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.runtime.hub import _epoch
from tests.hub.conftest import Hub, Pod, running_hub
from tests.kernels import connected_client
from tests.sync.s3server import S3Server
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

TRAINING = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
gpuws.track(model=model, optimizer=opt)
for i in range(10**9):
    opt.zero_grad(); model(torch.randn(8, 64)).sum().backward(); opt.step()
    gpuws.step(i)
    time.sleep(0.02)
"""


def kernel_client(pod: Pod, notebook: str) -> Any:
    session = pod.api(
        "api/sessions",
        "POST",
        {"path": notebook, "type": "notebook", "name": notebook, "kernel": {"name": "python3"}},
    )
    return connected_client(pod.runtime / f"kernel-{session['kernel']['id']}.json")


def s3_files(s3: S3Server, prefix: str) -> set[str]:
    bucket, _, key = prefix[len("s3://") :].partition("/")
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/")
    return {obj["Key"][len(key) + 1 :] for page in pages for obj in page.get("Contents", [])}


@pytest.fixture
def hub(tmp_path: Path, s3_server: S3Server) -> Any:
    # The idle culler runs, slowly: this test is about stopping and starting again.
    with running_hub(
        tmp_path / "hub",
        s3_server,
        cull_timeout=600,
        cull_every=60,
        cull_warning=60,
        environment={"GPUWS_HUB_MAX_AGE": "1h", "GPUWS_HUB_CULL_TIMEOUT": "600"},
    ) as running:
        yield running


def test_the_hub_stops_a_training_server_and_a_new_pod_restores_it(
    hub: Hub, s3_server: S3Server
) -> None:
    pod = hub.start("alice")
    store = hub.store_url.replace("{username}", "alice")
    assert pod.api("gpuws/api/sync")["store"].rstrip("/").endswith(store[len("s3://") :])

    # The countdown: the hub's idle cull, from the hub's own times; its max age beside it.
    def hub_sources() -> Any:
        state = pod.api("gpuws/api/runtime")
        found = {s["source"]: s for s in state["sources"]}
        return (state, found) if {"hub:max_age", "hub:idle_cull"} <= set(found) else None

    state, sources = until(hub_sources, 30, "the hub's deadlines in the countdown")
    model = hub.server("alice")
    assert model is not None
    assert abs(sources["hub:max_age"]["at"] - (_epoch(model["started"]) + 3600)) < 2
    assert "the hub" in sources["hub:max_age"]["detail"]
    assert state["source"] == "hub:idle_cull" and state["platform"]["jupyterhub"]["user"] == "alice"
    assert state["platform"]["keep_alive"]["enabled"] is False

    (pod.home / "notes.md").write_text("written in the first pod")
    client = kernel_client(pod, "train.ipynb")
    try:
        client.execute(TRAINING)  # runs until the pod goes
        until(
            lambda: any(
                (k.get("step") or 0) > 20 for k in pod.api("gpuws/api/checkpoints")["kernels"]
            ),
            90,
            "the training kernel stepping",
        )
        # The preStop hook, as Kubernetes runs it in the pod: the server file and its token.
        hook = subprocess.run(
            [sys.executable, "-m", "jupyter_gpu_ws.cli", "persist", "--wait", "--timeout", "60"],
            env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(pod.runtime)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert hook.returncode == 0, (
            hook.stderr,
            pod.api("gpuws/api/checkpoints")["kernels"],
            hub.tail(pod),
        )
        hub.stop("alice")  # the hub's DELETE: SIGTERM, as Kubernetes deletes the pod
    finally:
        client.stop_channels()

    files = s3_files(s3_server, store)
    workspace = next(iter({key.split("/", 1)[0] for key in files}))
    assert f"{workspace}/files/notes.md" in files
    assert any(
        key.startswith(f"{workspace}/files/.gpuws/checkpoints/train.ipynb/")
        and key.endswith("manifest.json")
        for key in files
    ), sorted(files)[:20]
    assert f"{workspace}/.gpuws/emergency-report.json" in files

    second = hub.start("alice")
    assert second.folder != pod.folder
    until(
        lambda: (second.home / "notes.md").exists(), 60, "the restore into the new pod's empty home"
    )
    assert (second.home / "notes.md").read_text() == "written in the first pod"
    # The newest checkpoint came back complete (its manifest is written, and restored, last).
    manifests = until(
        lambda: list(
            (second.home / ".gpuws" / "checkpoints" / "train.ipynb").glob("ckpt-*/manifest.json")
        ),
        60,
        "the checkpoint restored",
    )
    assert max(json.loads(m.read_text())["step"] for m in manifests) > 20
    hub.stop("alice")


SILENT_TRAINING = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
model = torch.nn.Linear(8, 1)
gpuws.track(model=model)
for i in range(10**9):   # prints nothing: to the hub, this server looks idle
    gpuws.step(i)
    time.sleep(0.05)
"""

CULL_TIMEOUT = 30


def test_keep_alive_prevents_the_idle_cull_and_without_it_the_culler_acts_after_a_warning(
    tmp_path: Path, s3_server: S3Server
) -> None:
    with running_hub(
        tmp_path / "hub",
        s3_server,
        cull_timeout=CULL_TIMEOUT,
        cull_every=3,
        cull_warning=20,
        environment={"GPUWS_HUB_CULL_TIMEOUT": str(CULL_TIMEOUT)},
        user_environment={"keeper": {"GPUWS_HUB_KEEP_ALIVE": "1"}},
    ) as hub:
        keeper, idler = hub.start("keeper"), hub.start("idler")
        clients = [kernel_client(keeper, "train.ipynb"), kernel_client(idler, "train.ipynb")]
        try:
            for client in clients:
                client.execute(SILENT_TRAINING)
            started = time.monotonic()
            warned = None
            # Watch the idler until the culler stops it (its warning comes first).
            while hub.server("idler") is not None:
                assert time.monotonic() - started < CULL_TIMEOUT + 60, hub.tail()
                try:
                    notices = idler.api("gpuws/api/runtime", timeout=5)["notices"]
                except OSError:
                    notices = []  # going away
                warned = warned or next(
                    (n for n in notices if "JupyterHub stops this idle server" in n["message"]),
                    None,
                )
                time.sleep(1)
            culled_after = time.monotonic() - started
            assert warned is not None, "the idle cull came without a warning"
            assert warned["level"] == "warning"
            # The keeper ran the same silent loop for as long, and longer than the cull timeout.
            while time.monotonic() - started < CULL_TIMEOUT + 15:
                time.sleep(1)
            assert hub.server("keeper") is not None, hub.tail()
            keep = keeper.api("gpuws/api/runtime")["platform"]["keep_alive"]
            assert (
                keep["enabled"]
                and keep["active"]
                and keep["last_sent"]
                and "stepping" in keep["reason"]
            )
            assert culled_after < CULL_TIMEOUT + 30
        finally:
            for client in clients:
                client.stop_channels()
