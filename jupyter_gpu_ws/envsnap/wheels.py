"""Makes wheels of installed packages (built from source, or fetched at their version) and finds them in the store."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..store import Store
from .commands import Log, find_uv, run_command

WHEELS = "wheels"


@dataclass
class WheelFailure:
    name: str
    message: str


def wheel_identity(filename: str) -> tuple[str, str] | None:
    """(normalized name, version) of a wheel file name; None for anything that is not a wheel."""
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return str(name), str(version)


def same_version(a: str, b: str) -> bool:
    """PEP 440 equality (1.0 == 1.0.0), falling back to text for versions PEP 440 cannot read."""
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def find_wheels(filenames: Iterable[str], name: str, version: str) -> list[str]:
    """The wheels among `filenames` for this exact package (one per platform tag, if several)."""
    name = canonicalize_name(name)
    found = []
    for filename in filenames:
        identity = wheel_identity(filename)
        if identity and identity[0] == name and same_version(identity[1], version):
            found.append(filename)
    return sorted(found)


def stored_wheels(store: Store) -> list[str]:
    """File names of the wheels kept in the store's `.gpuws/wheels/`."""
    prefix = store.state_key(WHEELS)
    return sorted(
        f.key.rpartition("/")[2] for f in store.backend.list(prefix) if f.key.endswith(".whl")
    )


def pip_python(python: str) -> str:
    """An interpreter whose pip can build for `python`: its own, else ours (a venv made by uv has none)."""
    if _runs([python, "-m", "pip", "--version"]):
        return python
    return sys.executable


def _runs(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def source_of(package: dict[str, Any]) -> str | None:
    """What `pip wheel` builds this package from: its folder, archive, URL or VCS commit."""
    origin = package.get("origin") or {}
    url = origin.get("url") or ""
    if origin.get("kind") == "vcs" and origin.get("vcs") and origin.get("commit"):
        return f"{origin['vcs']}+{url}@{origin['commit']}"
    if url.startswith("file://"):
        path = unquote(urlparse(url).path)
        return path if os.path.exists(path) else None
    return url or None


def build_wheels(
    packages: list[dict[str, Any]],
    python: str,
    out_dir: str,
    log: Log | None = None,
    indexes: list[str] | None = None,
    doing: Log | None = None,
) -> list[WheelFailure]:
    """Wheels into `out_dir` for every package: index ones fetched at their exact version
    (`indexes`: extra installer options, such as PyTorch's index), the others built from their
    source. `doing` hears what is under way, in words ("building a wheel of mypkg"). Returns
    the packages for which none could be made."""
    pip = pip_python(python)
    from_index = [
        p for p in packages if (p.get("origin") or {}).get("kind", "index") in ("index", "unknown")
    ]
    from_source = [p for p in packages if p not in from_index]
    if from_index and doing:
        doing(
            f"fetching {len(from_index)} wheels from the index"
            if len(from_index) > 1
            else f"fetching a wheel of {from_index[0]['name']}"
        )
    failures = _fetch(from_index, pip, out_dir, log, indexes or [])
    for package in from_source:
        if doing:
            doing(f"building a wheel of {package['name']}")
        failure = _build(package, python, pip, out_dir, log)
        if failure:
            failures.append(failure)
    return failures


def _fetch(
    packages: list[dict[str, Any]], pip: str, out_dir: str, log: Log | None, indexes: list[str]
) -> list[WheelFailure]:
    """One `pip download` for all (fast); one by one only when the batch fails, to find which."""
    if not packages:
        return []
    pins = [f"{p['name']}=={p['version']}" for p in packages]
    download = [
        pip,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        out_dir,
        *indexes,
    ]
    # "--" before what comes from a package record: never read as an option.
    if run_command(download + ["--", *pins], log) is None:
        return []
    failures = []
    for package, pin in zip(packages, pins, strict=False):
        if run_command(download + ["--", pin], log) is None:
            continue
        # No wheel on the index (an sdist only): build one at that exact version.
        error = run_command(
            [pip, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out_dir, *indexes, "--", pin],
            log,
        )
        if error is not None:
            failures.append(
                WheelFailure(
                    package["name"], f"no wheel of {pin} could be fetched or built: {error}"
                )
            )
    return failures


def _build(
    package: dict[str, Any], python: str, pip: str, out_dir: str, log: Log | None
) -> WheelFailure | None:
    """A wheel from the package's source: built with what the environment has installed, else
    in an isolated build environment (which needs the index): uv's (fast) or pip's."""
    source = source_of(package)
    if source is None:
        url = (package.get("origin") or {}).get("url", "?")
        return WheelFailure(
            package["name"], f"its source {url} no longer exists: it cannot be rebuilt"
        )
    if source.endswith(".whl") and os.path.isfile(source):
        shutil.copy(source, out_dir)  # installed from a wheel file that is still there
        return None
    wheel = [pip, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out_dir]
    attempts = [wheel + ["--no-build-isolation", "--", source]]
    uv = find_uv()
    if uv and os.path.exists(source):  # uv builds folders and source archives, not URLs
        attempts.append(
            [uv, "build", "--wheel", "--out-dir", out_dir, "--python", python, "--", source]
        )
    attempts.append(wheel + ["--", source])
    errors, output = [], []

    def keep(line: str) -> None:  # the build's own words: the cause is often above pip's last lines
        output.append(line)
        if log:
            log(line)

    for command in attempts:
        error = run_command(command, keep)
        if error is None:
            return None
        errors.append(error)
    return WheelFailure(
        package["name"],
        f"could not build a wheel of {package['name']} from {source}: "
        f"{build_failure(errors, output, package['name'])}",
    )


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def build_failure(errors: list[str], output: list[str], name: str) -> str:
    """Why a package's wheel could not be built, from its attempts' errors and output, with what
    to do: a build backend missing from the environment (the usual case for a project installed
    from its folder without build isolation) is named, with the install that mends it."""
    for line in [*errors, *output]:
        missing = _MISSING_MODULE.search(line)
        if missing:
            module = missing.group(1).split(".")[0]
            return (
                f"No module named '{module}' (pip install {module} in this environment, so the next "
                f"snapshot can build it; or install {name} from an index or a wheel)"
            )
    return errors[-1] if errors else "no attempt was made"
