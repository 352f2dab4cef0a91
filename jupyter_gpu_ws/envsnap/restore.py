"""Brings an interpreter's environment back to a snapshot: installs only what differs, from the store's wheels first."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..store import Store
from .capture import packages_by_name, probe_environment, resolve_python
from .commands import Log, find_uv, run_command
from .errors import InstallerError, SourcesNotAllowedError
from .lock import index_options, requirement, unreproducible_reason
from .validate import validate_snapshot
from .wheels import WHEELS, find_wheels, pip_python, same_version, stored_wheels

Progress = Callable[
    [int, int, str], None
]  # (packages done, packages in all, what is being installed)
InstallerChoice = Literal["auto", "uv", "pip"]
# Never removed by `uninstall=True`: without them no later restore could install anything.
PROTECTED = {"pip", "uv"}


@dataclass
class RestoreReport:
    """What a restore did; `pending` are the packages a cancel left out."""

    installed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    cancelled: bool = False
    installer: str = ""
    sources: list[dict[str, str]] = field(default_factory=list)  # fetched and built (allow_sources)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.cancelled

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass
class Installer:
    """uv (fast: no per-run start-up of pip, parallel unpacking) or the target's own pip."""

    kind: Literal["uv", "pip"]
    python: str
    uv: str | None = None

    # "--" ends the options: whatever a requirement or a name says, it is never read as one.
    def install(self, options: list[str], requirements: list[str]) -> list[str]:
        if self.kind == "uv":
            return [
                self.uv or "uv",
                "pip",
                "install",
                "--python",
                self.python,
                *options,
                "--",
                *requirements,
            ]
        return [
            self.python,
            "-m",
            "pip",
            "install",
            "--no-input",
            "--disable-pip-version-check",
            *options,
            "--",
            *requirements,
        ]

    def uninstall(self, names: list[str]) -> list[str]:
        if self.kind == "uv":
            return [self.uv or "uv", "pip", "uninstall", "--python", self.python, "--", *names]
        return [
            self.python,
            "-m",
            "pip",
            "uninstall",
            "--yes",
            "--disable-pip-version-check",
            "--",
            *names,
        ]


def choose_installer(python: str, prefer: InstallerChoice = "auto") -> Installer:
    """uv when there is one (unless pip is asked for), else the target's pip."""
    uv = find_uv() if prefer in ("auto", "uv") else None
    if uv:
        return Installer("uv", python, uv)
    if prefer == "uv":
        raise InstallerError("uv was asked for but is not installed: `pip install uv`, or use pip")
    if pip_python(python) != python:
        raise InstallerError(
            f"{python} has no pip and uv is not installed: `pip install uv` to restore into it"
        )
    return Installer("pip", python)


def plan(
    snapshot: dict[str, Any], current: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(packages to install, names already right, names here that the snapshot lacks)."""
    now = packages_by_name(current)
    install, skip = [], []
    for package in snapshot["packages"]:
        here = now.get(package["name"])
        if here and same_version(here["version"], package["version"]):
            skip.append(package["name"])
        else:
            install.append(package)
    wanted = {p["name"] for p in snapshot["packages"]}
    extra = sorted(name for name in now if name not in wanted)
    return install, skip, extra


class _Run:
    """One restore in progress: the report, the callbacks, and the installer's runs."""

    def __init__(
        self,
        installer: Installer,
        total: int,
        progress: Progress | None,
        cancel: threading.Event | None,
        log: Log | None,
        report: RestoreReport,
    ) -> None:
        self.installer, self.total = installer, total
        self.progress, self.cancel, self.log = progress, cancel, log
        self.report = report
        self.done = 0

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def step(self, current: str, count: int = 0) -> None:
        self.done += count
        if self.progress:
            self.progress(self.done, self.total, current)

    def run(self, command: list[str]) -> str | None:
        return run_command(command, self.log)

    def install(
        self, options: list[str], items: list[tuple[dict[str, Any], str]], what: str
    ) -> None:
        """All of `items` in one run; one by one when that fails, so one bad package stops no other."""
        if not items:
            return
        if self.cancelled():
            self.report.pending += [p["name"] for p, _ in items]
            return
        self.step(f"{len(items)} packages {what}")
        if (
            len(items) > 1
            and self.run(self.installer.install(options, [line for _, line in items])) is None
        ):
            self.report.installed += [p["name"] for p, _ in items]
            self.step("", len(items))
            return
        for index, (package, line) in enumerate(items):
            if self.cancelled():
                self.report.pending += [p["name"] for p, _ in items[index:]]
                return
            self.step(package["name"])
            error = self.run(self.installer.install(options, [line]))
            if error is None:
                self.report.installed.append(package["name"])
            else:
                self.report.failed.append({"name": package["name"], "message": error})
            self.step("", 1)


def fetch_wheels(store: Store, filenames: list[str], cache_dir: str) -> None:
    """Copy wheels from the store's `.gpuws/wheels/` into `cache_dir` (those not already there)."""
    os.makedirs(cache_dir, exist_ok=True)
    for filename in filenames:
        target = os.path.join(cache_dir, filename)
        if os.path.exists(target):
            continue
        partial = f"{target}.part"
        store.backend.get(store.state_key(f"{WHEELS}/{filename}"), partial)
        os.replace(partial, target)  # an interrupted copy is never taken for a wheel


def source_of(package: dict[str, Any]) -> str | None:
    """What restoring `package` from its origin fetches and builds (a VCS commit, a URL), or None
    for a package an index serves by name and version."""
    kind = (package.get("origin") or {}).get("kind", "index")
    if kind in ("index", "unknown"):
        return None
    line = requirement(package)
    return line.split(" @ ", 1)[1] if line else None


def sources_to_build(packages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Those of `packages` that would be fetched and built from VCS or URL sources."""
    return [
        {"name": p["name"], "version": p["version"], "kind": p["origin"]["kind"], "source": source}
        for p in packages
        if (source := source_of(p))
    ]


def split_by_wheel(
    packages: list[dict[str, Any]], kept: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(those with a wheel among `kept`, the rest)."""
    from_store: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for package in packages:
        (from_store if find_wheels(kept, package["name"], package["version"]) else others).append(
            package
        )
    return from_store, others


def restore_sources(
    snapshot: dict[str, Any],
    store: Store,
    python: str,
    offline: bool = False,
    current: dict[str, Any] | None = None,
) -> list[dict[str, str]]:
    """The VCS and URL sources a restore of `snapshot` into `python` would fetch and build: the
    packages it would install that have no wheel in the store (none when `offline`)."""
    if offline:
        return []
    validate_snapshot(snapshot)
    if current is None:
        current = probe_environment(resolve_python(python), include_torch=False)
    to_install, _, _ = plan(snapshot, current)
    _, from_index = split_by_wheel(to_install, stored_wheels(store) if to_install else [])
    return sources_to_build(from_index)


def restore(
    snapshot: dict[str, Any],
    store: Store,
    python: str = sys.executable,
    offline: bool = True,
    uninstall: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    log: Log | None = None,
    installer: InstallerChoice = "auto",
    cache_dir: str | None = None,
    allow_sources: bool = False,
) -> RestoreReport:
    """Install into `python` what differs from `snapshot` (missing, or at another version).

    The snapshot is checked first (`validate_snapshot`): one bad entry and nothing is installed.
    Packages with a wheel in the store are installed from it without an index; the rest come
    from the index unless `offline`, and are reported failed if they cannot. Packages whose
    origin is a VCS commit or a URL are fetched and built (running their build code) only with
    `allow_sources`; without it, SourcesNotAllowedError names them before anything is
    installed. A local folder is never built from the path a snapshot names: only its wheel
    in the store restores it. Packages the snapshot lacks are removed only with `uninstall`.
    `cancel` is honoured between installer runs: a run that started finishes, so no package is
    left half-installed. Meant to run in a thread; `progress` and `log` are called from it.
    """
    validate_snapshot(snapshot)
    python = resolve_python(python)
    chosen = choose_installer(python, installer)
    current = probe_environment(python, include_torch=False)
    to_install, skipped, extra = plan(snapshot, current)
    kept = stored_wheels(store) if to_install else []
    from_store, from_index = split_by_wheel(to_install, kept)
    sources = [] if offline else sources_to_build(from_index)
    if sources and not allow_sources:
        raise SourcesNotAllowedError(sources)
    removals = sorted(set(extra) - PROTECTED) if uninstall else []
    report = RestoreReport(skipped=skipped, installer=chosen.kind, sources=sources)
    run = _Run(chosen, len(to_install) + len(removals), progress, cancel, log, report)
    run.step("")
    with tempfile.TemporaryDirectory(prefix="gpuws-restore-") as scratch:
        cache = cache_dir or scratch
        fetch_wheels(
            store,
            [w for p in from_store for w in find_wheels(kept, p["name"], p["version"])],
            cache,
        )
        run.install(
            ["--no-deps", "--no-index", "--find-links", cache],
            [(p, f"{p['name']}=={p['version']}") for p in from_store],
            "from the store's wheels",
        )
        asked = _from_index(from_index, offline, report)
        if len(asked) < len(from_index):
            run.step("", len(from_index) - len(asked))  # reported failed without a run
        run.install(["--no-deps", *index_options(snapshot)], asked, "from the index")
    if removals and not run.cancelled():
        _remove(run, removals)
    elif removals:
        report.cancelled = True
    report.cancelled = report.cancelled or bool(report.pending)
    return report


def _from_index(
    packages: list[dict[str, Any]], offline: bool, report: RestoreReport
) -> list[tuple[dict[str, Any], str]]:
    """The requirement lines to ask the index for; what cannot be asked for is reported failed."""
    items = []
    for package in packages:
        line = requirement(package)
        if line is None:
            report.failed.append(
                {
                    "name": package["name"],
                    "message": f"not reproducible: {unreproducible_reason(package)}",
                }
            )
        elif offline:
            report.failed.append(
                {
                    "name": package["name"],
                    "message": f"no wheel of {line} in the store, and the restore is offline "
                    "(snapshot with --keep-all-wheels, or restore without --offline)",
                }
            )
        else:
            items.append((package, line))
    return items


def _remove(run: _Run, names: list[str]) -> None:
    run.step(f"removing {len(names)} packages")
    error = run.run(run.installer.uninstall(names))
    if error is None:
        run.report.removed += names
    else:
        run.report.failed += [
            {"name": name, "message": f"could not be removed: {error}"} for name in names
        ]
    run.step("", len(names))
