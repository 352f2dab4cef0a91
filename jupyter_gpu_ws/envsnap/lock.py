"""Turns a snapshot into requirement lines that pip or uv can install (`pip install --no-deps -r lock.txt`)."""

from __future__ import annotations

import re
from typing import Any

# PyPI carries only one build of these; a local version label (+cu121, +cpu) names a build that
# only PyTorch's own index has.
PYTORCH_PACKAGES = {"torch", "torchvision", "torchaudio"}
PYTORCH_INDEX = "https://download.pytorch.org/whl/{label}"


def requirement(package: dict[str, Any], kept_wheel: bool = False) -> str | None:
    """The line that brings this exact package back, or None when no index or URL can.

    A kept wheel is asked for by name and version: the installer finds it with --find-links,
    so the restored package reads as an ordinary one rather than a direct URL.
    """
    name, version, origin = package["name"], package["version"], package.get("origin") or {}
    kind = origin.get("kind", "index")
    if kept_wheel or kind in ("index", "unknown"):
        return f"{name}=={version}"
    url = origin.get("url") or ""
    if kind == "vcs" and origin.get("commit") and origin.get("vcs"):
        return f"{name} @ {origin['vcs']}+{url}@{origin['commit']}"
    if kind in ("archive", "url") and url.startswith(("http://", "https://")):
        digest = origin.get("hash")
        return f"{name} @ {url}#{digest}" if digest and "#" not in url else f"{name} @ {url}"
    return None


def unreproducible_reason(package: dict[str, Any]) -> str:
    """Why `requirement` gave nothing: one line for the lock file and the restore report."""
    origin = package.get("origin") or {}
    kind, url = origin.get("kind"), origin.get("url", "")
    if kind == "editable":
        return f"editable install from {url}, and no wheel of it is kept in the store"
    if kind == "dir":
        return f"installed from the folder {url}, and no wheel of it is kept in the store"
    return f"installed from {url or 'an unknown source'}, and no wheel of it is kept in the store"


def extra_indexes(snapshot: dict[str, Any]) -> list[str]:
    """Indexes beyond PyPI that the snapshot's packages need (PyTorch's CUDA builds)."""
    labels = set()
    for package in snapshot.get("packages", []):
        match = re.search(r"\+([a-z]+[0-9]*)$", package["version"])
        if package["name"] in PYTORCH_PACKAGES and match:
            labels.add(match.group(1))
    return [PYTORCH_INDEX.format(label=label) for label in sorted(labels)]


def index_options(snapshot: dict[str, Any]) -> list[str]:
    """Installer options for those indexes (pip and uv spell them alike)."""
    return [option for url in extra_indexes(snapshot) for option in ("--extra-index-url", url)]


def lock_text(snapshot: dict[str, Any]) -> str:
    """Requirements text for the whole snapshot; kept wheels come from `.gpuws/wheels/`."""
    wheels = snapshot.get("wheels") or {}
    python = snapshot.get("python") or {}
    lines = [
        (
            f"# Environment snapshot {snapshot.get('id', '')} of {python.get('implementation', '')} "
            f"{python.get('version', '')}, {len(snapshot.get('packages', []))} packages."
        ),
        "# Exact versions, dependencies included: install with `pip install --no-deps -r THIS`,",
        "# adding `--find-links DIR` for a copy of the store's .gpuws/wheels/ folder.",
    ]
    return "\n".join(lines + pinned_lines(snapshot, set(wheels))) + "\n"


def pinned_lines(snapshot: dict[str, Any], kept: set[str]) -> list[str]:
    """The indexes the snapshot needs, then one line per package: `name==version` where a wheel
    of it is at hand (`kept`: names) or an index has it, its VCS or URL requirement otherwise,
    and a comment saying why for a package nothing can bring back."""
    lines = [f"--extra-index-url {url}" for url in extra_indexes(snapshot)]
    for package in snapshot.get("packages", []):
        line = requirement(package, kept_wheel=package["name"] in kept)
        if line is None:
            line = f"# {package['name']}=={package['version']}: not reproducible: {unreproducible_reason(package)}"
        lines.append(line)
    return lines
