"""`jupyter gpuws env export`: a snapshot as a Dockerfile hadolint passes, a requirements file that
installs offline from the store's wheels, a conda environment.yml PyYAML reads back, and bad input
refused in one line with exit 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_gpu_ws.envsnap import capture, content_hash, export_snapshot, save_snapshot
from jupyter_gpu_ws.store import Store
from tests.deploy.test_deploy import _hadolint
from tests.envsnap.conftest import make_project, run, store_at

SNAPSHOT_ID = "20261204T120000.000000Z-0123456789ab"


def gpuws_export(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-W",
        "ignore::UserWarning",
        "-m",
        "jupyter_gpu_ws.cli",
        "env",
        "export",
        *map(str, args),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


def snapshot_of(
    packages: dict[str, str], python: str = "3.11.7", cuda: str | None = None
) -> dict[str, Any]:
    """A snapshot as capture records one, of packages an index serves."""
    snapshot: dict[str, Any] = {
        "format": 1,
        "captured_at": time.time(),
        "python": {"implementation": "cpython", "version": python, "executable": sys.executable},
        "platform": {"system": "Linux", "machine": "x86_64"},
        "packages": [
            {"name": n, "version": v, "origin": {"kind": "index"}}
            for n, v in sorted(packages.items())
        ],
        "torch": {"version": packages["torch"], "cuda": cuda} if "torch" in packages else None,
    }
    snapshot["hash"] = content_hash(snapshot)
    return snapshot


def saved(tmp_path: Path, snapshot: dict[str, Any]) -> list[str]:
    """`snapshot` kept in the store at tmp_path/store (workspace ws) as `env snapshot` keeps one."""
    save_snapshot(store_at(tmp_path / "store"), snapshot)
    return ["--store", str(tmp_path / "store"), "--workspace", "ws"]


def hadolint(dockerfile: Path) -> subprocess.CompletedProcess:
    # hadolint's default threshold fails on any finding, "info" included: stricter than asked.
    return subprocess.run(
        [_hadolint(), str(dockerfile)], capture_output=True, text=True, timeout=60
    )


def test_a_cuda_torch_snapshot_becomes_a_dockerfile_on_the_matching_cuda_image_that_passes_hadolint(
    tmp_path: Path,
) -> None:
    where = saved(tmp_path, snapshot_of({"torch": "2.5.1+cu124", "six": "1.16.0"}, cuda="12.4"))
    result = gpuws_export("--format", "dockerfile", "--to", f"{tmp_path / 'image'}/", *where)
    assert result.returncode == 0, result.stderr
    dockerfile = (tmp_path / "image" / "Dockerfile").read_text()
    assert "\nFROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04\n" in dockerfile
    assert (
        "uv venv --seed --python 3.11 /opt/venv" in dockerfile
    )  # the snapshot's Python, not the image's
    assert "pip install --no-cache-dir --no-deps -r /tmp/gpuws/requirements.txt" in dockerfile
    assert "jupyter_gpu_ws==" in dockerfile and "\nUSER 10001\n" in dockerfile
    requirements = (tmp_path / "image" / "requirements.txt").read_text().splitlines()
    assert {
        "torch==2.5.1+cu124",
        "six==1.16.0",
        "--extra-index-url https://download.pytorch.org/whl/cu124",
    } <= set(requirements)
    linted = hadolint(tmp_path / "image" / "Dockerfile")
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_a_cpu_snapshot_with_kept_wheels_gets_the_slim_image_of_its_python_and_passes_hadolint() -> (
    None
):
    snapshot = snapshot_of({"torch": "2.5.1+cpu", "numpy": "2.1.0"}, python="3.12.4")
    snapshot["packages"].append(
        {"name": "mypkg", "version": "0.3", "origin": {"kind": "dir", "url": "file:///src"}}
    )
    result = export_snapshot(
        snapshot,
        "dockerfile",
        ["mypkg-0.3-py3-none-any.whl", "other-1.0-py3-none-any.whl"],
        extension_version="0.1.0",
    )
    text = result.files["Dockerfile"]
    assert "\nFROM python:3.12-slim\n" in text and "nvidia/cuda" not in text
    assert "COPY wheels/ /tmp/gpuws/wheels/" in text
    assert result.wheels == ["mypkg-0.3-py3-none-any.whl"]  # only what no index has
    assert "--find-links wheels/" in result.files["requirements.txt"].splitlines()


def test_the_slim_dockerfile_with_wheels_passes_hadolint(tmp_path: Path) -> None:
    snapshot = snapshot_of({"numpy": "2.1.0"}, python="3.10.14")
    snapshot["packages"].append(
        {"name": "mypkg", "version": "0.3", "origin": {"kind": "dir", "url": "file:///src"}}
    )
    (tmp_path / "Dockerfile").write_text(
        export_snapshot(
            snapshot, "dockerfile", ["mypkg-0.3-py3-none-any.whl"], extension_version="0.1.0"
        ).files["Dockerfile"]
    )
    linted = hadolint(tmp_path / "Dockerfile")
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_a_package_no_index_has_and_no_wheel_kept_is_a_comment_and_a_warning() -> None:
    snapshot = snapshot_of({"six": "1.16.0"})
    snapshot["packages"].append(
        {
            "name": "mine",
            "version": "1.0",
            "origin": {"kind": "editable", "url": "file:///home/me/mine"},
        }
    )
    result = export_snapshot(snapshot, "requirements", [])
    assert "mine==1.0" not in result.files["requirements.txt"].splitlines()
    assert any(
        line.startswith("mine==1.0: not reproducible: editable install") for line in result.warnings
    )


def test_a_snapshot_taken_on_another_system_is_exported_with_a_warning() -> None:
    snapshot = snapshot_of({"six": "1.16.0"})
    snapshot["platform"] = {"system": "Darwin", "machine": "arm64"}
    result = export_snapshot(snapshot, "dockerfile", [], extension_version="0.1.0")
    assert any(w.startswith("the snapshot was taken on Darwin:") for w in result.warnings)
    assert "six==1.16.0" in result.files["requirements.txt"].splitlines()


@pytest.fixture
def local_wheel(tmp_path: Path) -> Path:
    """A wheel of a one-module project, built here without an index."""
    project = make_project(tmp_path / "tiny", "tiny-pkg", "0.2.0")
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        tmp_path / "built",
        project,
    )
    [wheel] = (tmp_path / "built").glob("*.whl")
    return wheel


def test_the_requirements_install_offline_into_a_fresh_venv_from_the_stores_wheels(
    tmp_path: Path, local_wheel: Path, new_venv: Callable[[str], str], no_index: Callable[[], None]
) -> None:
    no_index()
    source = new_venv("source")
    run(source, "-m", "pip", "install", "-q", "--no-index", "--no-deps", local_wheel)
    store = store_at(tmp_path / "store")
    assert save_snapshot(store, capture(source, include_torch=False, machine=False)).new
    local_wheel.unlink()  # from here on the store's copy is the only one
    shutil.rmtree(tmp_path / "tiny")

    result = gpuws_export(
        "--format",
        "requirements",
        "--to",
        tmp_path / "export" / "requirements.txt",
        "--store",
        tmp_path / "store",
        "--workspace",
        "ws",
    )
    assert result.returncode == 0, result.stderr
    assert [w.name for w in (tmp_path / "export" / "wheels").iterdir()] == [local_wheel.name]
    requirements = (tmp_path / "export" / "requirements.txt").read_text().splitlines()
    assert "--find-links wheels/" in requirements and "tiny-pkg==0.2.0" in requirements

    fresh = new_venv("fresh")
    # From another folder: the file's own --find-links finds the wheels beside it.
    run(
        fresh,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "-r",
        tmp_path / "export" / "requirements.txt",
    )
    assert run(fresh, "-c", "import tinypkg; print(tinypkg.VALUE)").strip() == "0.2.0"


def test_the_conda_environment_reads_back_to_the_same_pins(tmp_path: Path) -> None:
    pins = {"torch": "2.4.0+cu121", "six": "1.16.0", "numpy": "1.26.4"}
    where = saved(tmp_path, snapshot_of(pins, python="3.10.14", cuda="12.1"))
    result = gpuws_export("--format", "conda", "--name", "train-env", *where)
    assert result.returncode == 0, result.stderr
    environment = yaml.safe_load(result.stdout)
    assert environment["name"] == "train-env" and environment["channels"] == ["conda-forge"]
    dependencies = environment["dependencies"]
    assert "python=3.10" in dependencies
    [pip] = [item["pip"] for item in dependencies if isinstance(item, dict)]
    assert dict(line.split("==") for line in pip if "==" in line) == pins
    assert "--extra-index-url https://download.pytorch.org/whl/cu121" in pip


def test_stdout_gets_the_recipe_and_stderr_says_what_was_not_written(tmp_path: Path) -> None:
    where = saved(tmp_path, snapshot_of({"six": "1.16.0"}))
    result = gpuws_export("--format", "dockerfile", *where, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.startswith("# The environment of snapshot ")
        and "\nFROM python:3.11-slim\n" in result.stdout
    )
    assert "not written: requirements.txt (give --to FOLDER" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_no_snapshot_is_one_line_and_exit_2(tmp_path: Path) -> None:
    store = store_at(tmp_path / "store")
    store.backend.write_bytes(
        store.file_key("notes.txt"), b"a workspace with files, no snapshot yet"
    )
    result = gpuws_export(
        "--format", "requirements", "--store", tmp_path / "store", "--workspace", "ws"
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(
        "jupyter gpuws: error: No environment snapshot in the store"
    )


def test_an_unknown_format_is_exit_2(tmp_path: Path) -> None:
    result = gpuws_export(
        "--format", "dockerfiles", "--store", tmp_path / "store", "--workspace", "ws"
    )
    assert result.returncode == 2 and "invalid choice: 'dockerfiles'" in result.stderr


def hostile(store: Store, snapshot: Any) -> None:
    """A snapshot someone else wrote into the store, named by latest.json."""
    store.write_json(f"env/{SNAPSHOT_ID}.json", snapshot)
    store.write_json("env/latest.json", {"id": SNAPSHOT_ID, "hash": "0123456789ab"})


@pytest.mark.parametrize(
    "packages, reason",
    [
        ([{"name": "six;touch /tmp/pwned", "version": "1.16.0"}], "not a normalized package name"),
        ([{"name": "six", "version": "1.0$(touch /tmp/pwned)"}], "not a PEP 440 version"),
        ("six==1.16.0", "its packages are not a list"),
    ],
)
def test_a_malformed_snapshot_or_one_with_shell_metacharacters_is_refused_in_one_line_with_exit_2(
    tmp_path: Path, packages: Any, reason: str
) -> None:
    store = store_at(tmp_path / "store")
    hostile(store, {"captured_at": 1.0, "python": {"version": "3.11.7"}, "packages": packages})
    result = gpuws_export(
        "--format",
        "dockerfile",
        "--to",
        f"{tmp_path / 'out'}/",
        "--store",
        tmp_path / "store",
        "--workspace",
        "ws",
    )
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if not line.startswith("store: ")]
    assert (
        line.startswith(f"jupyter gpuws: error: The snapshot {SNAPSHOT_ID} is refused: ")
        and reason in line
    )
    assert not (tmp_path / "out").exists()


def test_a_python_version_that_is_not_one_is_refused_before_it_reaches_a_dockerfile(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path / "store")
    hostile(
        store,
        {
            "captured_at": 1.0,
            "python": {"version": "3.11 /opt/venv && curl evil"},
            "packages": [{"name": "six", "version": "1.16.0"}],
        },
    )
    result = gpuws_export(
        "--format", "dockerfile", "--store", tmp_path / "store", "--workspace", "ws"
    )
    assert result.returncode == 2 and result.stdout == ""
    assert "is not a CPython 3 version" in result.stderr.splitlines()[-1]


def test_a_destination_inside_a_file_is_refused_in_one_line_and_the_file_is_left_alone(
    tmp_path: Path,
) -> None:
    where = saved(tmp_path, snapshot_of({"six": "1.16.0"}))
    (tmp_path / "notes").write_text("mine")
    result = gpuws_export(
        "--format", "requirements", "--to", tmp_path / "notes" / "requirements.txt", *where
    )
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[-1]
        == f"jupyter gpuws: error: {tmp_path / 'notes'} is not a folder"
    )
    assert (tmp_path / "notes").read_text() == "mine"
