"""Jupyter servers with the extension as separate processes, the way users run them, for tests
that need more than the in-process test server: signals, several servers on one machine."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.waiting import until

TOKEN = "server-process-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port: int, path: str, method: str = "GET", body: Any = None) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    # Generous: POST /gpuws/api/checkpoints waits up to 10 s for the kernels to pick it up.
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    root: Path
    store: Path
    state: Path
    runtime: Path
    log: Path
    config: dict[str, Any] = field(default_factory=dict)  # its c.GpuWorkspace settings

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        return api(self.port, path, method, body)


@contextmanager
def server_process(
    folder: Path,
    runtime: Path,
    extra_config: dict[str, Any] | None = None,
    root: Path | None = None,
    hostname: str | None = None,
    pid_namespace: bool = False,
) -> Iterator[ServerProcess]:
    """A server with its own root, local store and state under `folder`, its kernels' connection
    files (and agents' registrations) in `runtime`, which other servers may share; killed at
    the end (its whole process group). Yields once the extension answers.

    `root`: the work directory elsewhere; `hostname`: the server runs in a UTS namespace of its
    own with that host name (`unshare -u`), as a server on another machine would;
    `pid_namespace`: the server and its kernels run in a PID namespace of their own
    (`unshare -p -f --mount-proc`), as in a container: their PIDs there are not the host's."""
    state = folder / "state"
    store = (
        Path(extra_config["store_url"])
        if extra_config and "store_url" in extra_config
        else folder / "store"
    )
    root = root or folder / "root"
    folder.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = {
        "ServerApp": {
            "port": port,
            "root_dir": str(root),
            "open_browser": False,
            "allow_root": True,
            # JupyterLab's own extension is left out: these tests speak to the REST API, and
            # loading it (and the yarn and npm it asks) costs each server ~0.7 s of CPU.
            "jpserver_extensions": {"jupyter_gpu_ws": True, "jupyterlab": False},
        },
        "IdentityProvider": {"token": TOKEN},
        "GpuWorkspace": {
            "store_url": str(store),
            "workspace": "test-ws",
            "state_dir": str(state),
            "sync_debounce": 3600.0,
            "grace_period": 25.0,
            **(extra_config or {}),
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    env = dict(
        os.environ, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTER_CONFIG_DIR=str(folder / "jcfg")
    )
    log = open(folder / "server.log", "wb")
    command = [sys.executable, "-m", "jupyter_server", f"--config={folder / 'config.json'}"]
    if hostname:
        command = ["unshare", "-u", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *command]
    if pid_namespace:
        command = ["unshare", "-p", "-f", "--mount-proc", *command]
    proc = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = ServerProcess(
        proc, port, root, store, state, runtime, folder / "server.log", config["GpuWorkspace"]
    )
    try:
        until(lambda: server.api("/gpuws/api/runtime"), 60, "the server with the extension")
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
