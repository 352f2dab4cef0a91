"""Checks a snapshot read from the store before anything uses it: names, versions and origins must
be what an installer records (PEP 503/508 names, PEP 440 versions, PEP 610 origins), never an
installer option, a second requirement or text meant to move a terminal's cursor.

The store may be written by someone else, and a snapshot's entries end up on an installer's
command line and on screens (the panel, `jupyter gpuws env diff`). One bad entry refuses the
whole snapshot, with a message naming it: a restore then installs nothing at all.
"""

from __future__ import annotations

import math
import re
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .errors import UnsafeSnapshotError
from .lock import requirement

# PEP 503's normalized form, which capture records: lower case, single '-' between runs.
NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,198}[a-z0-9])?$")
ORIGIN_KINDS = {"index", "unknown", "vcs", "archive", "url", "dir", "editable"}
VCS = {"git", "hg", "svn", "bzr"}  # what pip's VCS support (and PEP 610) names
# A commit id (git, hg: hex) or revision (svn: a number); never an option.
COMMIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._]{0,127}$")
HASH = re.compile(r"^(?:md5|sha1|sha224|sha256|sha384|sha512)=[0-9a-fA-F]{32,128}$")
# ASCII without spaces or control characters: a URL as pip and uv take it.
URL = re.compile(r"^[\x21-\x7e]{1,2048}$")
SCHEMES = {
    "vcs": ("https://", "http://", "ssh://", "git://", "file://"),
    "archive": ("https://", "http://", "file://"),
    "url": ("https://", "http://", "file://"),
    "dir": ("file://",),
    "editable": ("file://",),
}
MAX_PACKAGES = 100_000
SHORT = 128  # a Python or torch version, an implementation name, an architecture


def safe_text(value: Any, limit: int = 80) -> str:
    """`value` for a message: control and other unprintable characters escaped, long text cut."""
    text = value if isinstance(value, str) else repr(value)
    shown = "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _printable(value: Any, limit: int = SHORT) -> bool:
    return isinstance(value, str) and len(value) <= limit and value.isprintable()


def check_name(name: Any) -> str:
    """A distribution name as capture records it; the reason it is not, else ''."""
    if not isinstance(name, str) or not NAME.match(name) or canonicalize_name(name) != name:
        return "not a normalized package name (PEP 503: lower case letters, digits and single '-')"
    return ""


def check_version(version: Any) -> str:
    if (
        not isinstance(version, str)
        or not version
        or len(version) > SHORT
        or not version.isprintable()
        or any(ch.isspace() for ch in version)
    ):
        return "not a PEP 440 version"
    try:
        Version(version)
    except InvalidVersion:
        return "not a PEP 440 version"
    return ""


def check_origin(origin: Any) -> str:
    """Where the package came from (capture's PEP 610 record), or why it cannot be taken."""
    if origin is None:
        return ""
    if not isinstance(origin, dict):
        return "its origin is not a record"
    kind = origin.get("kind", "index")
    if kind not in ORIGIN_KINDS:
        return f"unknown origin kind {safe_text(kind, 40)}"
    if kind in ("index", "unknown"):
        return ""
    url = origin.get("url")
    if not isinstance(url, str) or not URL.match(url) or not url.startswith(SCHEMES[kind]):
        allowed = ", ".join(SCHEMES[kind])
        return f"its {kind} URL {safe_text(url)} is not a URL of {allowed} without spaces or control characters"
    if kind == "vcs":
        if origin.get("vcs") not in VCS:
            return f"unknown version control system {safe_text(origin.get('vcs'), 40)}"
        if not isinstance(origin.get("commit"), str) or not COMMIT.match(origin["commit"]):
            return f"its commit {safe_text(origin.get('commit'), 40)} is not a commit id"
        revision = origin.get("requested_revision")
        if revision is not None and not _printable(revision, 256):
            return "its requested revision is not printable text"
    if (
        kind == "archive"
        and origin.get("hash") is not None
        and not (isinstance(origin["hash"], str) and HASH.match(origin["hash"]))
    ):
        return f"its hash {safe_text(origin.get('hash'), 40)} is not <algorithm>=<hex digest>"
    return ""


def _check_package(index: int, package: Any, seen: set[str]) -> None:
    if not isinstance(package, dict):
        raise UnsafeSnapshotError(f"package #{index + 1} is not a record")
    # Whatever the file holds (Any): the checks below establish what they are.
    name: Any = package.get("name")
    version: Any = package.get("version")
    label = f"package #{index + 1} {safe_text(name)}"
    if reason := check_name(name):
        raise UnsafeSnapshotError(f"{label}: {reason}")
    if reason := check_version(version):
        raise UnsafeSnapshotError(f"{label} version {safe_text(version, 40)}: {reason}")
    if reason := check_origin(package.get("origin")):
        raise UnsafeSnapshotError(f"{label}: {reason}")
    if name in seen:
        raise UnsafeSnapshotError(f"{label}: listed twice")
    seen.add(name)
    # The line an installer would get must read as one PEP 508 requirement and nothing more.
    line = requirement(package) or f"{name}=={version}"
    try:
        parsed = Requirement(line)
    except InvalidRequirement as err:
        raise UnsafeSnapshotError(
            f"{label}: its requirement {safe_text(line)} does not parse ({err})"
        ) from None
    if canonicalize_name(parsed.name) != name:
        raise UnsafeSnapshotError(
            f"{label}: its requirement {safe_text(line)} names another package"
        )


def validate_snapshot(snapshot: Any) -> dict[str, Any]:
    """`snapshot` itself when every part an installer or a screen uses is well-formed;
    UnsafeSnapshotError naming the first part that is not."""
    if not isinstance(snapshot, dict):
        raise UnsafeSnapshotError("it is not a JSON object")
    packages = snapshot.get("packages")
    if not isinstance(packages, list) or len(packages) > MAX_PACKAGES:
        raise UnsafeSnapshotError(f"its packages are not a list of at most {MAX_PACKAGES}")
    seen: set[str] = set()
    for index, package in enumerate(packages):
        _check_package(index, package, seen)
    captured = snapshot.get("captured_at")
    if captured is not None and (
        isinstance(captured, bool)
        or not isinstance(captured, (int, float))
        or not math.isfinite(captured)
    ):
        raise UnsafeSnapshotError("its time (captured_at) is not a number")
    digest = snapshot.get("hash")
    if digest is not None and not (
        isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{12,128}", digest)
    ):
        raise UnsafeSnapshotError(f"its hash {safe_text(digest, 40)} is not a hex digest")
    python = snapshot.get("python")
    if python is not None:
        if not isinstance(python, dict) or not all(
            python.get(key) is None or _printable(python.get(key))
            for key in ("version", "implementation")
        ):
            raise UnsafeSnapshotError(
                "its Python version or implementation is not short printable text"
            )
    torch = snapshot.get("torch")
    if torch is not None:
        arch = torch.get("arch_list") if isinstance(torch, dict) else None
        if (
            not isinstance(torch, dict)
            or not all(
                torch.get(key) is None or _printable(torch.get(key))
                for key in ("version", "cuda", "hip")
            )
            or not (
                arch is None
                or (isinstance(arch, list) and len(arch) <= 64 and all(map(_printable, arch)))
            )
        ):
            raise UnsafeSnapshotError(
                "its torch record (version, CUDA, architectures) is not short printable text"
            )
    wheels = snapshot.get("wheels")
    if wheels is not None:
        if not isinstance(wheels, dict):
            raise UnsafeSnapshotError("its wheels are not a record of package names to wheel files")
        for name, filename in wheels.items():
            if (
                check_name(name)
                or not isinstance(filename, str)
                or "/" in filename
                or not _wheel(filename)
            ):
                raise UnsafeSnapshotError(
                    f"its wheel {safe_text(filename)} of {safe_text(name)} is not a wheel file name"
                )
    return snapshot


def _wheel(filename: str) -> bool:
    try:
        parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    return filename.isprintable()
