"""docs/openapi.yaml against a live server: Schemathesis sends generated requests, valid and
hostile, to every operation the description lists and fails on any 5xx or any answer the
description does not allow; and every operation refuses a request without credentials.

Schemathesis runs through its command line: its pytest integration does not work with pytest
9.2 (it reads a node attribute that pytest no longer has), and the command line runs all its
phases (boundary cases, random data, sequences of calls) with one report.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import gpu_spec, write_spec
from tests.servers import free_port
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

SPEC = Path(__file__).resolve().parents[1] / "docs" / "openapi.yaml"
TOKEN = "openapi-test-token"
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")

# Operations the fuzzer leaves out, and why. Every other operation in docs/openapi.yaml is
# fuzzed, those added later included, with no change here.
NOT_FUZZED = {
    # Persists, then shuts the server down: the requests after it would find no server.
    # tests/test_runtime_api.py covers it with the server's stop replaced.
    "POST /gpuws/api/runtime/release",
    # A websocket: a plain HTTP request can only be refused (400), which is documented but is
    # all a fuzzer could see. tests/test_handlers.py covers the stream; the credentials test
    # below covers its refusal.
    "GET /gpuws/api/metrics/stream",
    # The same for the pages' documents websocket; tests/test_documents.py covers it.
    "GET /gpuws/api/documents/stream",
    # Starts programs: a generated name that happens to be one on PATH (`yes`) would run.
    # tests/userjobs/test_jobs_api.py covers its answers, what it refuses included.
    "POST /gpuws/api/jobs",
}
# Environment restores are fuzzed, made safe rather than left out: they install into
# `env_python`, here an empty virtual environment made for this test and snapshotted before
# the run, so a restore has nothing to install, ends at once and touches no real environment.

# Schemathesis checks left out, and why; all others run.
SKIPPED_CHECKS = {
    # Expects 401 when the Authorization header is missing; Jupyter Server answers 403, by
    # design and for every API it serves. 401 or 403 on every route: the test below.
    "missing_required_header",
    # Expects a 404 for a job after its DELETE; DELETE cancels a job, which stays readable
    # (state "cancelled") while the server runs, as docs/api.md says.
    "use_after_free",
}

# Per operation and phase: enough to reach every documented answer, bodies of every JSON type
# and keys no operation takes, while the whole module stays near a minute on two cores. What
# a generator does not make (nesting thousands deep, UTF-16, NaN) is in test_request_bodies.py.
MAX_EXAMPLES = 40
# One seed, so a run in CI is repeatable; GPUWS_FUZZ_SEED=<n> explores other data.
SEED = os.environ.get("GPUWS_FUZZ_SEED", "20261201")


@dataclass
class LiveServer:
    url: str
    log: Path


def request(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    token: str | None = TOKEN,
    headers: dict[str, str] | None = None,
) -> Any:
    headers = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        headers["Authorization"] = f"token {token}"
    with urllib.request.urlopen(
        urllib.request.Request(url, data=body, method=method, headers=headers), timeout=10
    ) as response:
        return json.loads(response.read() or b"null")


def start_server(tmp: Path) -> Iterator[LiveServer]:
    """A real Jupyter Server process with the extension: a token, a scratch work directory, a
    local-folder store, simulated GPUs, and an empty environment (already snapshotted) as the
    kernels' environment."""
    root, store, state, runtime = (tmp / n for n in ("root", "store", "state", "runtime"))
    for folder in (root, runtime):
        folder.mkdir()
    (root / "notes.md").write_text("something to sync")
    venv = tmp / "kernel-env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    port = free_port()
    config = {
        "ServerApp": {
            "port": port,
            "ip": "127.0.0.1",
            "root_dir": str(root),
            "open_browser": False,
            "allow_root": True,
            "allow_unauthenticated_access": False,
            "jpserver_extensions": {"jupyter_gpu_ws": True},
        },
        "IdentityProvider": {"token": TOKEN},
        "GpuWorkspace": {
            "store_url": str(store),
            "workspace": "fuzz-ws",
            "state_dir": str(state),
            "nvml_test_double": str(write_spec(tmp / "gpus.json", gpu_spec())),
            "sample_interval": 0.2,
            "sync_debounce": 0.05,
            "env_python": str(venv / "bin" / "python"),
            "env_snapshot_on_persist": False,
        },
    }
    (tmp / "config.json").write_text(json.dumps(config))
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTER_CONFIG_DIR=str(tmp / "jcfg"))
    url = f"http://127.0.0.1:{port}"
    api = f"{url}/gpuws/api"
    log_path = tmp / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", f"--config={tmp / 'config.json'}"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            until(
                lambda: request(f"{api}/sync")["state"] in ("idle", "syncing"),
                60,
                "the server and its sync",
            )
            job = request(f"{api}/env/snapshots", "POST", b"{}")
            until(
                lambda: request(f"{api}/env/snapshots/{job['id']}")["state"] == "done",
                60,
                "the first environment snapshot",
            )
            yield LiveServer(url, log_path)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from start_server(tmp_path_factory.mktemp("live"))


def operations() -> list[tuple[str, str]]:
    """Every (method, path) in docs/openapi.yaml."""
    paths = yaml.safe_load(SPEC.read_text())["paths"]
    return [
        (method.upper(), path)
        for path, item in paths.items()
        for method in item
        if method in HTTP_METHODS
    ]


def test_every_operation_answers_as_documented(live_server: LiveServer, tmp_path: Path) -> None:
    excluded = [arg for name in sorted(NOT_FUZZED) for arg in ("--exclude-name", name)]
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--no-color",
        "run",
        str(SPEC),
        "--url",
        live_server.url,
        "--header",
        f"Authorization: token {TOKEN}",
        "--checks",
        "all",
        "--exclude-checks",
        ",".join(sorted(SKIPPED_CHECKS)),
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        SEED,
        "--workers",
        "1",
        "--request-timeout",
        "30",
        *excluded,
    ]
    # In a folder of its own: no schemathesis.toml from elsewhere, and its caches go there.
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    report = done.stdout[-20000:] + done.stderr[-5000:]
    assert done.returncode == 0, (
        report + "\nThe server's log ends:\n" + live_server.log.read_text()[-5000:]
    )
    tested = re.search(r"Tested: (\d+)", done.stdout)  # every operation but those left out, by name
    assert tested and int(tested.group(1)) == len(operations()) - len(NOT_FUZZED), report


@pytest.mark.parametrize(("method", "path"), operations())
def test_a_request_without_credentials_is_refused(
    live_server: LiveServer, method: str, path: str
) -> None:
    # With a matching XSRF cookie and header, so what refuses is the missing credentials.
    xsrf = {"Cookie": "_xsrf=c0ffee", "X-XSRFToken": "c0ffee"}
    body = b"{}" if method in ("POST", "PUT", "PATCH", "DELETE") else None
    url = live_server.url + path.replace("{id}", "0123456789ab")
    with pytest.raises(
        urllib.error.HTTPError
    ) as refused:  # a redirect to the login page fails here
        request(url, method, body, token=None, headers=xsrf)
    assert refused.value.code in (401, 403)
    with pytest.raises(urllib.error.HTTPError) as refused:
        request(url, method, body, token="not-the-token", headers=xsrf)
    assert refused.value.code in (401, 403)
