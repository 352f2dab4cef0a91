"""capture(): what an environment is made of, read from the interpreter itself."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_gpu_ws.envsnap import InterpreterError, capture, content_hash, read_machine
from tests.envsnap.conftest import EDITABLE, LOCAL, PINNED, packages

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture(scope="module")
def captured(source_venv: Path) -> dict[str, Any]:
    return capture(str(source_venv / "bin" / "python"), machine=False)


def by_name(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in snapshot["packages"] if p["name"] == name)


def test_every_installed_package_is_listed_with_its_version(captured: dict[str, Any]) -> None:
    found = packages(captured)
    for name, version in [*PINNED.items(), LOCAL, EDITABLE]:
        assert found[name] == version
    assert "pip" in found


def test_installer_and_requested_come_from_the_dist_info(captured: dict[str, Any]) -> None:
    six = by_name(captured, "six")
    assert six["installer"] == "pip" and six["requested"] is True


def test_origins_follow_pep_610(captured: dict[str, Any], projects: dict[str, Path]) -> None:
    assert by_name(captured, "six")["origin"] == {"kind": "index"}
    local = by_name(captured, LOCAL[0])["origin"]
    assert local["kind"] == "dir" and local["url"] == projects[LOCAL[0]].as_uri()
    editable = by_name(captured, EDITABLE[0])["origin"]
    assert editable["kind"] == "editable" and editable["url"] == projects[EDITABLE[0]].as_uri()


def test_python_and_platform_are_those_of_the_target_interpreter(
    captured: dict[str, Any], source_venv: Path
) -> None:
    assert captured["python"]["prefix"] == str(source_venv)
    assert captured["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert captured["platform"]["system"] == "Linux"
    assert captured["torch"] is None  # not installed there


def test_torch_build_is_described_where_torch_is_installed() -> None:
    torch = capture(sys.executable, machine=False)["torch"]
    import torch as real

    assert torch["version"] == real.__version__
    assert torch["cuda"] == real.version.cuda
    assert torch["arch_list"] == real.cuda.get_arch_list()


def test_content_hash_ignores_time_paths_and_machine_but_not_versions(
    captured: dict[str, Any],
) -> None:
    moved = {
        **captured,
        "captured_at": 0,
        "machine": {"gpus": [{"name": "X"}]},
        "python": {
            **captured["python"],
            "prefix": "/elsewhere",
            "executable": "/elsewhere/bin/python",
        },
    }
    assert content_hash(moved) == captured["hash"]
    bumped = {
        **captured,
        "packages": [
            {**p, "version": "9.9"} if p["name"] == "six" else p for p in captured["packages"]
        ],
    }
    assert content_hash(bumped) != captured["hash"]


def test_a_missing_interpreter_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InterpreterError, match="not found"):
        capture(str(tmp_path / "no" / "python"))


class FakeNvml:
    """The NVML calls read_machine makes, answering for one A100 and one H100."""

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"535.104.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, handle: SimpleNamespace) -> str:
        return ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"][handle.index]

    def nvmlDeviceGetCudaComputeCapability(self, handle: SimpleNamespace) -> tuple[int, int]:
        return [(8, 0), (9, 0)][handle.index]


def test_machine_records_driver_and_each_gpu_capability() -> None:
    assert read_machine(FakeNvml()) == {
        "driver_version": "535.104.05",
        "cuda_driver_version": "12.2",
        "gpus": [
            {"name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"},
            {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
        ],
    }


def test_no_nvml_means_no_machine_record_and_no_error() -> None:
    assert read_machine(FakeNvml(fail_init=True)) is None


def test_the_probe_runs_nothing_from_a_shared_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's json.py in a shared /tmp would be imported by `python -c` run there."""
    import tempfile

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    (shared / "json.py").write_text(
        "open(__file__ + '.ran', 'w').close()\nraise SystemExit('shadowed')\n"
    )
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    from jupyter_gpu_ws.envsnap.capture import probe_environment

    found = probe_environment(sys.executable, include_torch=False)
    assert found["python"] and not (shared / "json.py.ran").exists()
