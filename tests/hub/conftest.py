"""A real JupyterHub (configurable-http-proxy from npm, local single-user servers, the idle
culler as a service) on 127.0.0.1, with a real S3 store (SeaweedFS), for the acceptance tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.servers import free_port
from tests.sync.conftest import S3_BUCKET, s3_server  # noqa: F401 - the session's S3 server
from tests.sync.s3server import S3Server
from tests.waiting import until

HERE = Path(__file__).parent
CHP = HERE / "node_modules" / ".bin" / "configurable-http-proxy"
TOKEN = "hub-test-service-token-0123456789"


@dataclass
class Pod:
    """One start of a user's server: its folders and, once it runs, its address and token."""

    folder: Path

    @property
    def home(self) -> Path:
        return next((self.folder / "home").iterdir())

    @property
    def runtime(self) -> Path:
        return self.folder / "runtime"

    def info(self) -> dict[str, Any]:
        files = list(self.runtime.glob("jpserver-*.json"))
        if not files:
            raise OSError("no server file yet")
        return json.loads(files[0].read_text())

    def api(self, path: str, method: str = "GET", body: Any = None, timeout: float = 30) -> Any:
        """Straight to the single-user server, not through the proxy, and without counting as
        activity: the tests must not keep a server alive by watching it."""
        info = self.info()
        sep = "&" if "?" in path else "?"
        request = urllib.request.Request(
            f"{info['url'].rstrip('/')}/{path.lstrip('/')}{sep}no_track_activity=1",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {info['token']}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")


@dataclass
class Hub:
    folder: Path
    hub_port: int
    store_url: str
    s3: S3Server
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.folder / "hub.log"

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.hub_port}/hub/api/{path.lstrip('/')}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def server(self, user: str) -> dict[str, Any] | None:
        """The hub's model of the user's default server; None when it is not running."""
        return (self.api(f"users/{user}").get("servers") or {}).get("")

    def pods(self, user: str) -> list[Pod]:
        starts = self.folder / "starts" / user
        return (
            [Pod(p) for p in sorted(starts.iterdir(), key=lambda p: int(p.name))]
            if starts.is_dir()
            else []
        )

    def start(self, user: str) -> Pod:
        """The user's server started through the hub API, once it is ready and the extension's
        sync runs."""
        try:
            self.api(f"users/{user}", "POST")
        except urllib.error.HTTPError as err:
            if err.code != 409:  # 409: the user exists
                raise
        self.api(f"users/{user}/server", "POST")
        until(lambda: (self.server(user) or {}).get("ready"), 120, f"{user}'s server ready")
        pod = self.pods(user)[-1]
        until(
            lambda: pod.api("gpuws/api/sync")["state"] in ("idle", "syncing"), 120, f"{user}'s sync"
        )
        return pod

    def stop(self, user: str, timeout: float = 90) -> None:
        self.api(f"users/{user}/server", "DELETE")
        until(lambda: self.server(user) is None, timeout, f"{user}'s server stopped")

    def tail(self, pod: Pod | None = None) -> str:
        text = self.log.read_text(errors="replace")[-4000:]
        return text


@contextmanager
def running_hub(
    folder: Path,
    s3: S3Server,
    *,
    cull_timeout: int,
    cull_every: int,
    cull_warning: float,
    environment: dict[str, str] | None = None,
    user_environment: dict[str, dict[str, str]] | None = None,
) -> Iterator[Hub]:
    if not CHP.exists():
        pytest.fail(
            f"configurable-http-proxy is missing: run `npm install` in {HERE}", pytrace=False
        )
    folder.mkdir(parents=True, exist_ok=True)
    hub = Hub(folder, free_port(), f"s3://{S3_BUCKET}/hub-{uuid.uuid4().hex[:8]}/{{username}}", s3)
    settings = {
        "folder": str(folder),
        "proxy_port": free_port(),
        "hub_port": hub.hub_port,
        "proxy_api_port": free_port(),
        "chp": str(CHP),
        "token": TOKEN,
        "store_url": hub.store_url,
        "cull_timeout": cull_timeout,
        "cull_every": cull_every,
        "cull_warning": cull_warning,
        "grace": 30,
        "environment": {**s3.env(), **(environment or {})},
        "user_environment": user_environment or {},
    }
    env = dict(os.environ, GPUWS_HUB_TEST=json.dumps(settings), **s3.env())
    log = open(hub.log, "wb")
    hub.proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(HERE / "jupyterhub_config.py")],
        cwd=folder,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        until(lambda: hub.api("")["version"], 60, "JupyterHub answering")
        yield hub
    finally:
        _stop_hub(hub)
        log.close()


def _stop_hub(hub: Hub) -> None:
    """The hub stops its users' servers on the way out; anything left is killed."""
    assert hub.proc is not None
    if hub.proc.poll() is None:
        hub.proc.send_signal(signal.SIGTERM)
        try:
            hub.proc.wait(60)
        except subprocess.TimeoutExpired:
            pass
    for proc in psutil.process_iter(["pid", "environ"]):
        try:
            if (proc.info["environ"] or {}).get("GPUWS_HUB_TEST", "").find(
                str(hub.folder)
            ) >= 0 or str(hub.folder) in " ".join(proc.cmdline()):
                proc.kill()
        except psutil.Error:
            continue
    if hub.proc.poll() is None:
        os.killpg(hub.proc.pid, signal.SIGKILL)
        hub.proc.wait()
