"""Turns an environment snapshot into a recipe that rebuilds it elsewhere: a Dockerfile, a requirements file or a conda environment.yml.

`export_snapshot` only composes text from the snapshot (checked first: it comes from the store, and its
names end up in a Dockerfile); `write_export` puts the recipe in a folder with the wheels it
needs beside it, copied from the store's `.gpuws/wheels/`, the recipe itself last.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from ..store import Store
from .errors import EnvError
from .lock import pinned_lines
from .restore import fetch_wheels
from .snapshots import SNAPSHOT_ID, needs_wheel
from .validate import check_version, safe_text, validate_snapshot
from .wheels import find_wheels, wheel_identity

# Each format's file, as `docker build`, `pip install -r` and `conda env create` expect it.
FORMATS = {
    "dockerfile": "Dockerfile",
    "requirements": "requirements.txt",
    "conda": "environment.yml",
}
REQUIREMENTS = FORMATS["requirements"]
WHEEL_DIR = "wheels"
# The image's user: a number, so that Kubernetes can tell it is not root; above the 1000 that
# base images give their own user (ubuntu:24.04's `ubuntu`).
USER_ID = 10001
EXTENSION = "jupyter-gpu-ws"
# uv brings the snapshot's own Python into a CUDA image, which has none; pinned, as hadolint asks.
UV_IMAGE = "ghcr.io/astral-sh/uv:0.12.1"
# nvidia/cuda tags of the CUDA releases PyTorch builds for: the last patch of each, and the
# cuDNN the matching torch wheels were built against (8 up to 12.1, 9 after, tagged bare).
CUDA_IMAGES = {
    "11.8": "11.8.0-cudnn8-runtime-ubuntu22.04",
    "12.1": "12.1.1-cudnn8-runtime-ubuntu22.04",
    "12.4": "12.4.1-cudnn-runtime-ubuntu22.04",
    "12.6": "12.6.3-cudnn-runtime-ubuntu22.04",
    "12.8": "12.8.1-cudnn-runtime-ubuntu22.04",
    "12.9": "12.9.1-cudnn-runtime-ubuntu22.04",
    "13.0": "13.0.1-cudnn-runtime-ubuntu24.04",
}
PYTHON = re.compile(r"^3\.([0-9]{1,2})(?:\.[0-9]{1,3})?(?:(?:a|b|rc)[0-9]{1,3})?\+?$")
CUDA = re.compile(r"^([0-9]{2})\.([0-9])$")
# What a wheel's name or a version may hold before it is written into a recipe: PEP 427 and
# PEP 440 need no more, and none of it means anything to a shell.
PLAIN = re.compile(r"^[A-Za-z0-9._+!-]{1,200}$")


class ExportError(EnvError):
    """The snapshot cannot be written as the asked recipe (bad input: the CLI exits 2)."""


@dataclass
class Export:
    """A recipe: its files by name (the main one first), the store's wheels it needs in
    `wheels/`, and what the user should know (packages nothing can bring back)."""

    format: str
    files: dict[str, str]
    wheels: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def main(self) -> str:
        return FORMATS[self.format]


def python_minor(snapshot: dict[str, Any]) -> str:
    """The snapshot's Python as `3.X`, or ExportError when it records none a recipe can name."""
    python = snapshot.get("python") or {}
    version = python.get("version")
    if python.get("implementation", "cpython") != "cpython":
        raise ExportError(
            f"The snapshot's Python is {safe_text(python.get('implementation'), 40)}: "
            "only CPython environments can be exported"
        )
    match = PYTHON.match(version) if isinstance(version, str) else None
    if not match:
        raise ExportError(
            f"The snapshot's Python version {safe_text(version, 40)} is not a CPython 3 version"
        )
    return f"3.{match.group(1)}"


def cuda_release(snapshot: dict[str, Any]) -> str | None:
    """`12.4` for a torch built for CUDA 12.4 (`2.5.1+cu124`, else the CUDA torch itself
    reported); None for a CPU or ROCm build, or no torch."""
    torch = next((p for p in snapshot.get("packages", []) if p["name"] == "torch"), None)
    if torch is None:
        return None
    local = Version(torch["version"]).local or ""
    if local.startswith("cu") and local[2:].isdigit() and len(local) >= 4:
        return f"{int(local[2:-1])}.{local[-1]}"
    if local:  # cpu, rocm6.2, …: no CUDA image fits
        return None
    reported = (snapshot.get("torch") or {}).get("cuda")
    return reported if isinstance(reported, str) and CUDA.match(reported) else None


def cuda_image(release: str) -> str:
    """The nvidia/cuda runtime image with cuDNN for a CUDA release (its first patch when the
    release is newer than this table)."""
    return f"nvidia/cuda:{CUDA_IMAGES.get(release) or f'{release}.0-cudnn-runtime-ubuntu24.04'}"


def wheels_needed(snapshot: dict[str, Any], stored: list[str]) -> list[str]:
    """The store's wheels of the packages no index has (built from a folder, a URL, a commit)."""
    usable = [w for w in stored if PLAIN.match(w) and wheel_identity(w)]
    return sorted(
        {
            w
            for p in snapshot["packages"]
            if needs_wheel(p)
            for w in find_wheels(usable, p["name"], p["version"])
        }
    )


def export_snapshot(
    snapshot: dict[str, Any],
    format: str,
    stored: list[str],
    *,
    name: str = "gpuws",
    extension_version: str | None = None,
) -> Export:
    """The recipe of `snapshot` in `format` (dockerfile, requirements, conda). `stored`: the
    wheel files the store keeps; `name`: the conda environment's; `extension_version`: the
    jupyter_gpu_ws a Dockerfile installs when the snapshot has none."""
    if format not in FORMATS:
        raise ExportError(f"Unknown format {safe_text(format, 40)}: one of {', '.join(FORMATS)}")
    validate_snapshot(snapshot)  # its names and versions are PEP 503 and 440: nothing a shell reads
    python = python_minor(snapshot)
    wheels = wheels_needed(snapshot, stored)
    kept = {identity[0] for w in wheels if (identity := wheel_identity(w))}
    lines = pinned_lines(snapshot, kept)
    warnings = [line[2:] for line in lines if line.startswith("# ")]
    result = Export(format, {}, wheels, warnings)
    if format == "conda":
        result.files[FORMATS[format]] = environment_yml(snapshot, python, lines, bool(wheels), name)
        return result
    result.files[REQUIREMENTS] = requirements_txt(snapshot, python, lines, bool(wheels))
    if format == "dockerfile":
        platform = snapshot.get("platform") or {}
        if platform.get("system") not in (None, "Linux"):
            warnings.append(
                f"the snapshot was taken on {safe_text(platform.get('system'), 40)}: its packages' "
                "Linux builds are installed in the image, and its kept wheels may be for that system"
            )
        version = _extension_version(snapshot, extension_version, EXTENSION in kept, warnings)
        result.files = {
            "Dockerfile": dockerfile(snapshot, python, version, bool(wheels)),
            **result.files,
        }
    return result


def _describe(snapshot: dict[str, Any], python: str) -> str:
    """`snapshot 2026…-0123456789ab, Python 3.11, torch 2.5.1+cu124, 120 packages`, for a recipe's first line."""
    snapshot_id = snapshot.get("id")
    torch = next((p["version"] for p in snapshot["packages"] if p["name"] == "torch"), None)
    return ", ".join(
        filter(
            None,
            [
                f"snapshot {snapshot_id}"
                if isinstance(snapshot_id, str) and SNAPSHOT_ID.match(snapshot_id)
                else "snapshot",
                f"Python {python}",
                f"torch {torch}" if torch else "",
                f"{len(snapshot['packages'])} packages",
            ],
        )
    )


def requirements_txt(snapshot: dict[str, Any], python: str, lines: list[str], wheels: bool) -> str:
    head = [
        f"# The environment of {_describe(snapshot, python)}: exact versions, dependencies included.",
        "# Install into a new environment with `pip install --no-deps -r requirements.txt`"
        + ("; the wheels of packages" if wheels else "."),
    ]
    if wheels:
        head += ["# no index has are in wheels/ beside this file.", f"--find-links {WHEEL_DIR}/"]
    return "\n".join(head + lines) + "\n"


def environment_yml(
    snapshot: dict[str, Any], python: str, lines: list[str], wheels: bool, name: str
) -> str:
    """conda's environment file: conda's Python at the snapshot's minor version, every package
    through pip at its exact version (conda hands the pip list to pip as a requirements file
    beside this one, so `--find-links wheels/` finds the wheels beside it too)."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name):
        raise ExportError(
            f"Not a conda environment name: {safe_text(name, 40)} (letters, digits, '.', '_', '-')"
        )
    pip = ([f"--find-links {WHEEL_DIR}/"] if wheels else []) + [
        line for line in lines if not line.startswith("#")
    ]
    document = {
        "name": name,
        "channels": ["conda-forge"],
        "dependencies": [f"python={python}", "pip", {"pip": pip}],
    }
    head = (
        f"# The environment of {_describe(snapshot, python)}.\n"
        "# Create it with `conda env create -f environment.yml`"
        + (
            ", in this folder: the wheels of packages no index has are in wheels/.\n"
            if wheels
            else ".\n"
        )
    )
    return head + yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)


def _extension_version(
    snapshot: dict[str, Any], fallback: str | None, has_wheel: bool, warnings: list[str]
) -> str:
    """The jupyter_gpu_ws the image gets: the snapshot's own, else `fallback` (this one)."""
    version = next((p["version"] for p in snapshot["packages"] if p["name"] == EXTENSION), fallback)
    if version is None or check_version(version) or not PLAIN.match(version):
        raise ExportError(f"No jupyter_gpu_ws version to install: {safe_text(version, 40)}")
    try:
        parsed = Version(version)
    except InvalidVersion:  # check_version has refused it already
        raise ExportError(f"Not a version: {safe_text(version, 40)}") from None
    if (parsed.local or parsed.is_devrelease) and not has_wheel:
        warnings.append(
            f"jupyter_gpu_ws {version} is a development version that no index has, and the store keeps "
            "no wheel of it: change the Dockerfile's line that installs it"
        )
    return version


def dockerfile(snapshot: dict[str, Any], python: str, extension: str, wheels: bool) -> str:
    """An image of the snapshot: a base matching its torch's CUDA build (else python:3.X-slim),
    a virtual environment with every pinned package, this extension, a non-root user."""
    release = cuda_release(snapshot)
    lines = [
        f"# The environment of {_describe(snapshot, python)}.",
        "# Written by `jupyter gpuws env export --format dockerfile`; build it in this folder:",
        "#   docker build -t my-environment .",
    ]
    if release:
        lines += [
            f"FROM {cuda_image(release)}",
            "",
            "# The CUDA image has no Python: the snapshot's comes from uv's standalone builds, kept in",
            "# /opt where the non-root user below can run it.",
            f"COPY --from={UV_IMAGE} /uv /usr/local/bin/uv",
            "ENV UV_PYTHON_INSTALL_DIR=/opt/python",
            f"RUN uv venv --seed --python {python} /opt/venv",
        ]
    else:
        lines += [f"FROM python:{python}-slim", "", "RUN python -m venv /opt/venv"]
    find_links = f" --find-links /tmp/gpuws/{WHEEL_DIR}" if wheels else ""
    lines += [
        "ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH",
        "",
        "# Every package at the snapshot's version (its own dependencies are among them), the wheels",
        "# of those no index has, then this extension: `jupyter gpuws restore` and `sync` in a job.",
        f"COPY {REQUIREMENTS} /tmp/gpuws/{REQUIREMENTS}",
        *([f"COPY {WHEEL_DIR}/ /tmp/gpuws/{WHEEL_DIR}/"] if wheels else []),
        f"RUN pip install --no-cache-dir --no-deps -r /tmp/gpuws/{REQUIREMENTS} \\",
        f"    && pip install --no-cache-dir{find_links} jupyter_gpu_ws=={extension} \\",
        "    && rm -rf /tmp/gpuws",
        "",
        "# Not root; /work is the work directory (a Kubernetes Job mounts its own volume there).",
        f"RUN useradd --no-log-init --create-home --uid {USER_ID} gpuws && mkdir /work && chown {USER_ID} /work",
        f"USER {USER_ID}",
        "WORKDIR /work",
    ]
    return "\n".join(lines) + "\n"


def target_folder(to: str, format: str) -> tuple[Path, Path]:
    """(the folder the recipe goes in, the main file's path) for `--to`: a folder (existing, or
    written with a trailing slash) gets the format's usual file name."""
    path = Path(os.path.expanduser(to))
    if path.is_dir() or to.endswith(("/", os.sep)):
        return path, path / FORMATS[format]
    return path.parent, path


def write_export(result: Export, store: Store, to: str) -> list[Path]:
    """Write the recipe at `to` (a file, or a folder) with its wheels in `wheels/` beside it:
    the wheels first, the recipe last, each file whole or not at all. The paths written."""
    folder, main = target_folder(to, result.format)
    others = [name for name in result.files if name != result.main]
    if main.name in others:
        raise ExportError(
            f"{main} is the {main.name} the {result.main} needs beside it: give a folder or another name"
        )
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{folder} is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if result.wheels:
        fetch_wheels(store, result.wheels, str(folder / WHEEL_DIR))
        written += [folder / WHEEL_DIR / w for w in result.wheels]
    for name in [*others, result.main]:
        path = main if name == result.main else folder / name
        _write_whole(path, result.files[name])
        written.append(path)
    return written


def _write_whole(path: Path, text: str) -> None:
    """Write through a temporary file beside `path`: a failure leaves what was there."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
