"""Shared fixtures: a real Jupyter Server with the extension, reading simulated GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import zmq

pytest_plugins = ("pytest_jupyter.jupyter_server", "tests.timing")


def _collected_without_term(self: zmq.Context) -> None:
    """A zmq context the garbage collector finds in this process (a finished test server's
    kernel manager, long gone) closes its sockets without lingering and is not terminated.
    pyzmq's own __del__ calls term(), which waits for every socket of the context, those of a
    shadow context (zmq.asyncio's) too: one still referenced made whichever test the collector
    happened to run in hang for ever (seen once in CI, inside pytest.approx). The suite's
    process ends soon anyway; nothing in the package relies on a context being collected."""
    if getattr(self, "_shadow", True) or self.closed:
        return
    for socket in list(getattr(self, "_sockets", None) or ()):
        if not socket.closed:
            socket.close(linger=0)


zmq.Context.__del__ = _collected_without_term  # type: ignore[method-assign]

GIB = 2**30


def gpu_spec(**overrides: Any) -> dict[str, Any]:
    """Two A100s: one busy with a process, one MIG-partitioned."""
    spec: dict[str, Any] = {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-40GB",
                "utilization": 87,
                "memory_used": 12 * GIB,
                "memory_total": 40 * GIB,
                "temperature": 61,
                "power_draw": 250.5,
                "power_limit": 400.0,
                "sm_clock": 1410,
                "processes": [{"pid": 4242, "memory_used": 3 * GIB}],
            },
            {
                "name": "NVIDIA A100-SXM4-40GB",
                "utilization": 0,
                "memory_used": 1 * GIB,
                "memory_total": 40 * GIB,
                "mig": [
                    {
                        "memory_used": 1 * GIB,
                        "memory_total": 10 * GIB,
                        "processes": [{"pid": 4343, "memory_used": GIB}],
                    },
                    {"memory_used": 0, "memory_total": 10 * GIB},
                ],
            },
        ],
    }
    spec.update(overrides)
    return spec


def write_spec(path: Path, spec: dict[str, Any]) -> Path:
    # Write then rename, so the sampler thread never reads a half-written file.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(spec))
    tmp.replace(path)
    return path


@pytest.fixture
def fake_gpus(tmp_path: Path) -> Path:
    return write_spec(tmp_path / "gpus.json", gpu_spec())


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def gpuws_config(fake_gpus: Path, store_dir: Path, tmp_path: Path) -> dict[str, Any]:
    """`c.GpuWorkspace` for the test server; tests override it to change the set-up."""
    return {
        "nvml_test_double": str(fake_gpus),
        "sample_interval": 0.1,
        "store_url": str(store_dir),
        "workspace": "test-ws",
        "state_dir": str(tmp_path / "sync-state"),
        "sync_debounce": 0.02,
        # Snapshotting the test environment itself (torch, an editable install) is slow and
        # beside the point; the environment tests turn it on with small virtual environments.
        "env_snapshot_on_persist": False,
    }


@pytest.fixture
def server_authorizer() -> type | None:
    """The test server's `ServerApp.authorizer_class`; parametrize it to deny access."""
    return None


@pytest.fixture
def jp_server_config(
    gpuws_config: dict[str, Any], server_authorizer: type | None
) -> dict[str, Any]:
    server: dict[str, Any] = {
        "jpserver_extensions": {"jupyter_gpu_ws": True},
        "allow_unauthenticated_access": False,
    }
    if server_authorizer is not None:
        server["authorizer_class"] = server_authorizer
    return {"ServerApp": server, "GpuWorkspace": gpuws_config}


@pytest.fixture
def gpuws_app(jp_serverapp: Any) -> Any:
    """The running GpuWorkspaceApp inside the test server."""
    for ext in jp_serverapp.extension_manager.extensions[
        "jupyter_gpu_ws"
    ].extension_points.values():
        return ext.app
    raise AssertionError("jupyter_gpu_ws is not loaded")


def _printable(text: str) -> str:
    """`text` with any lone surrogate (a file name that is not UTF-8, as Python decodes it)
    written as its escape, so the report can be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Reports that pytest-xdist's workers can send: their captured output and failure text
    encoded as UTF-8 (the tests of names that are not UTF-8 log such names)."""
    report = yield
    report.sections = [(title, _printable(content)) for title, content in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _printable(text) != text:
            report.longrepr = _printable(text)
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow modules' tests first, in their order, then the rest: run in several processes
    (pytest-xdist), a long test started last would leave the other processes idle at the end
    (the hub's idle cull, ~1 min, did so by 60 s)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
