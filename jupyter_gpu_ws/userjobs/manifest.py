"""What a job runs, as hashes: its script or notebook and the work directory's own code it may
import, taken at each attempt's start and signed in its record (trust.py). A successor restores
the work directory from the store, which anyone with write access to it may have changed; it
relaunches a job by itself only when the code it has is the code the user's key signed, file
for file, and otherwise names the files that differ and waits for the user.

Code is every file of the work directory (whatever the sync mirrors or leaves out: a restore
brings back what the store holds) with a suffix Python or a shell runs or imports (`.py`,
`.pyc`, `.sh`, compiled extensions, `.pth`), every build or task file a tool runs (a Makefile,
`pyproject.toml`, …), and every file the job names: its notebook, its program when that is a
path (`./train`), each argument that is a file (`bash run.sh`, `python train.py`,
`--config=cfg.yaml`). `__pycache__` folders are not read: what is in them is this machine's own
(a restore never brings bytecode, sync/ignore.py `is_bytecode`), written by its Python as a job
runs.
Other notebooks are not imported by a script, and editing them while a job runs does not hold
its relaunch back. Data (datasets, configuration files no argument names, checkpoints) is not
code: a checkpoint is loaded without running anything (docs/security.md), and what a script
reads from a data file is its own affair.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CODE_SUFFIXES = frozenset(
    {".py", ".pyi", ".pyx", ".pxd", ".pyc", ".pyo", ".sh", ".bash", ".so", ".pth", ".mk", ".smk"}
)
# Files a build or task tool runs by their name alone (make, just, snakemake, pip's build
# backends, tox, docker).
CODE_NAMES = frozenset(
    {
        "Makefile",
        "makefile",
        "GNUmakefile",
        "justfile",
        "Justfile",
        "Snakefile",
        "pyproject.toml",
        "setup.cfg",
        "tox.ini",
        "Dockerfile",
        "Containerfile",
    }
)
# Folders never code of the project (the sync's default excludes skip them too).
SKIPPED_FOLDERS = frozenset({"__pycache__", "node_modules", ".git", ".gpuws", ".ipynb_checkpoints"})
# The record lists each file's hash (the first 128 bits) while the list stays under this size;
# beyond it only the digest and the count are kept, and a change is told without the names.
LIST_BYTES = 512 * 2**10
HASH_SHOWN = 32
_CHUNK = 2**20


@dataclass
class CodeManifest:
    """`digest`: SHA-256 over every (path, SHA-256) in path order; `files`: path → the first
    128 bits of its hash, hex (None when too many to list)."""

    digest: str
    count: int
    files: dict[str, str] | None

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "count": self.count, "files": self.files}


class ManifestError(ValueError):
    """A manifest in a record that is not one this project wrote."""


def from_json(data: Any) -> CodeManifest:
    if not isinstance(data, dict) or set(data) != {"digest", "count", "files"}:
        raise ManifestError("'code' must be an object with digest, count and files")
    digest, count, files = data["digest"], data["count"], data["files"]
    if not isinstance(digest, str) or len(digest) != 64 or not _hex(digest):
        raise ManifestError("'code.digest' must be 64 hex digits")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10**7:
        raise ManifestError("'code.count' must be a number of files")
    if files is not None:
        if not isinstance(files, dict) or len(files) != count:
            raise ManifestError("'code.files' must list count files")
        for path, short in files.items():
            if not isinstance(path, str) or not 0 < len(path) <= 4096 or "\x00" in path:
                raise ManifestError("'code.files' names must be paths")
            if not isinstance(short, str) or len(short) != HASH_SHOWN or not _hex(short):
                raise ManifestError(f"'code.files' hashes must be {HASH_SHOWN} hex digits")
    return CodeManifest(digest, count, files)


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def is_code(rel: str, named: frozenset[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return rel in named or name in CODE_NAMES or os.path.splitext(name)[1].lower() in CODE_SUFFIXES


def named_files(command: list[str], cwd: str, workdir: Path) -> frozenset[str]:
    """The work directory's files the command names (relative, '/'-separated): its program when
    that is a path, and each argument that is a file of the work directory."""
    root = workdir.resolve()
    folder = root / cwd if cwd else root
    named = set()
    for word in command[:4096]:
        # `--config=cfg.yaml` names cfg.yaml; a bare option names nothing.
        arg = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if not arg or "\x00" in arg or len(arg) > 4096 or arg.startswith("-"):
            continue
        path = Path(os.path.normpath(folder / arg))
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            continue
        if rel != "." and not rel.startswith("../"):
            named.add(rel)
    return frozenset(named)


def walk(workdir: Path) -> Iterator[str]:
    """Every regular file under `workdir` (relative), links not followed, the folders of
    SKIPPED_FOLDERS and Python environments (never restored from a store) left out."""
    root = str(workdir)
    stack = [""]
    while stack:
        under = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, under) if under else root))
        except OSError:
            continue
        for entry in entries:
            rel = f"{under}/{entry.name}" if under else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in SKIPPED_FOLDERS or _environment(entry.path):
                        continue
                    stack.append(rel)
                elif entry.is_file(follow_symlinks=False):
                    yield rel
            except OSError:
                continue


def _environment(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg")) or os.path.isdir(
        os.path.join(path, "conda-meta")
    )


def take(workdir: Path, files: Iterable[str], named: frozenset[str]) -> CodeManifest:
    """The manifest of the code among `files` (relative paths of `workdir`)."""
    hashes = {}
    for rel in files:
        if is_code(rel, named):
            hashes[rel] = file_hash(workdir / rel)
    for rel in named:  # named but not among the files: its absence is part of what was signed
        if rel not in hashes and (workdir / rel).is_file():
            hashes[rel] = file_hash(workdir / rel)
    total = hashlib.sha256()
    for rel in sorted(hashes):
        total.update(rel.encode("utf-8", "surrogateescape") + b"\x00" + hashes[rel].encode())
        total.update(b"\n")
    listed: dict[str, str] | None = {rel: hashes[rel][:HASH_SHOWN] for rel in sorted(hashes)}
    if sum(len(rel) + HASH_SHOWN + 6 for rel in hashes) > LIST_BYTES:
        listed = None
    return CodeManifest(total.hexdigest(), len(hashes), listed)


def file_hash(path: Path) -> str:
    """SHA-256 of a regular file, read without following a link at its end and without blocking
    (a FIFO or device is never read); what cannot be read has a hash that says so, so that a
    file becoming readable or not is a change too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        return hashlib.sha256(f"unreadable:{err.errno}".encode()).hexdigest()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return hashlib.sha256(b"not a regular file").hexdigest()
        digest = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError as err:
        return hashlib.sha256(f"unreadable:{err.errno}".encode()).hexdigest()
    finally:
        os.close(fd)


def changes(signed: CodeManifest, now: CodeManifest) -> tuple[list[tuple[str, str]], int]:
    """The files that differ between what was signed and what is here now (path, and "changed",
    "added" or "missing"), and how many more differ than are named (when a list was too long to keep)."""
    if signed.digest == now.digest:
        return [], 0
    if signed.files is None or now.files is None:
        return [], max(1, abs(signed.count - now.count))
    found = []
    for path in sorted(set(signed.files) | set(now.files)):
        before, after = signed.files.get(path), now.files.get(path)
        if before == after:
            continue
        found.append(
            (path, "added" if before is None else "missing" if after is None else "changed")
        )
    if not found:  # the same shortened hashes, other full ones: said without a name
        return [], 1
    return found, 0
