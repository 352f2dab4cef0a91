"""Checkpoints on disk: one folder per checkpoint, complete only once its manifest is there.

    <root>/<run>/ckpt-000000123-20261129T154210Z/
        tensors.bin     the bytes of every tensor, back to back (written at disk speed)
        metrics.json    the training's curves up to this step, its time and total, whether
                        the loss was finite ("health": "healthy" or "suspect"), the W&B run
        state.pt        every tracked object's state with tensors replaced by their place in
                        tensors.bin (torch.save of plain values: loads with weights_only=True)
        rng.pt          Python, NumPy and torch RNG states, as tensors and plain values
        state.json, rng.json   instead of the three above where torch is not installed: plain
                        values as JSON (plainstate.py)
        manifest.json   written last: step, time, objects, and size + xxh3 of each file

A checkpoint is written under a temporary name, each file fsynced, the manifest written and
fsynced, then the folder renamed: a reader sees a whole checkpoint or none (restic's order:
data first, the index last).

A checkpoint folder may come from the store, written by anyone: it is read only through
`CheckpointFolder`, which opens the files its manifest lists, by plain name, as regular files of
the stated size, never following a symbolic link or waiting on a FIFO or device, and never
reading past that size. Anything else makes the checkpoint unusable, with the reason.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import shutil
import stat
import sys
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import xxhash

from ..diskio import file_kind

MANIFEST = "manifest.json"
FORMAT = 1
_NAME = re.compile(r"^ckpt-(\d{9})-(\d{8}T\d{6}Z)(?:-\d+)?$")
TMP_PREFIX = ".tmp-ckpt-"
# A manifest holds names, sizes, checksums and a few fields: one larger than this is not ours.
MAX_MANIFEST_BYTES = 4 * 2**20
# Never follow the last component, never wait for a writer of a FIFO, never leak into children.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_HASH_CHUNK = 16 << 20


class CheckpointError(Exception):
    """A checkpoint could not be written or loaded; the message names the object or file."""


@dataclass
class CheckpointInfo:
    path: Path
    step: int
    time: float
    bytes: int
    objects: list[str]
    request_id: str | None = None


# The run a job's process tracks (the server's userjobs/ sets it): its own, never another job's.
RUN_ENV = "GPUWS_RUN"
# The longest run name read from a manifest or a job's record (both may come from the store).
MAX_RUN_NAME = 1000
# Where checkpoints go under a work directory, by default (gpuws.track(root=...) picks another).
CHECKPOINTS_FOLDER = (".gpuws", "checkpoints")


def run_dir(root: str | os.PathLike[str], run: str) -> Path:
    """A run's folder: the run name (a notebook path) made into one safe folder name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", run.replace("/", "--")).strip("-")
    # "." and ".." would be the root or its parent, not a folder of their own.
    return Path(root) / (safe if safe.strip(".") else "default")


def checkpoints_root(workdir: str | os.PathLike[str]) -> Path:
    """The folder of a work directory's runs (each run a folder of it)."""
    return Path(workdir).joinpath(*CHECKPOINTS_FOLDER)


def plain_run_name(text: str, limit: int = 100) -> str:
    """`text` as a run name that is its own folder's name (run_dir leaves it as it is): letters,
    digits, `.`, `_` and `-`, neither starting nor ending with `.` or `-`; "" when nothing of
    it is left. What a job's run is called in the store, the panel and on disk alike. Accented
    letters keep their letter ("expérience" is "experience"), never cut the word in two."""
    letters = "".join(
        c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
    )
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", letters.replace("/", "--")).strip("-.")
    return safe[:limit].rstrip("-.")


def default_run_name() -> str:
    """The job's run (the server names it: userjobs/), else the notebook's path (Jupyter Server
    tells the kernel), else the script's name. `gpuws.track("name", ...)` overrides all three."""
    job_run = os.environ.get(RUN_ENV)
    if job_run:
        return job_run
    name = os.environ.get("JPY_SESSION_NAME")
    if name:
        workdir = os.environ.get("GPUWS_WORKDIR")
        if workdir and os.path.isabs(name) and name.startswith(workdir.rstrip("/") + "/"):
            name = name[len(workdir.rstrip("/")) + 1 :]
        return name
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.basename(main) if main else "default"


def checksum(path: Path) -> str:
    """The xxh3 of a regular file (a symbolic link, FIFO or device is refused, never read)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with io.BufferedReader(_open_regular(folder, path.name)) as f:
            return _hash(f)
    finally:
        os.close(folder)


def _hash(f: BinaryIO) -> str:
    hasher = xxhash.xxh3_128()
    while chunk := f.read(_HASH_CHUNK):
        hasher.update(chunk)
    return hasher.hexdigest()


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_tmp_dir(run_path: Path) -> Path:
    run_path.mkdir(parents=True, exist_ok=True)
    path = run_path / f"{TMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir()
    return path


def finish(
    tmp: Path,
    step: int,
    objects: list[str],
    extra: dict[str, Any],
    known: dict[str, str] | None = None,
) -> CheckpointInfo:
    """Checksum and fsync the files, write the manifest last, and rename into place.

    `known` gives checksums computed while writing, so large files are not read again.
    """
    files = {}
    total = 0
    for path in sorted(tmp.iterdir()):
        fsync_file(path)
        size = path.stat().st_size
        files[path.name] = {"size": size, "xxh3": (known or {}).get(path.name) or checksum(path)}
        total += size
    return commit(tmp, step, {"objects": objects, "files": files, "bytes": total, **extra})


def commit(tmp: Path, step: int, fields: dict[str, Any]) -> CheckpointInfo:
    """Write the manifest (the files in it already fsynced) and rename the folder into place:
    the one moment the checkpoint becomes complete."""
    now = time.time()
    manifest = {"format": FORMAT, "step": step, "time": now, **fields}
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    final = tmp.parent / f"ckpt-{step:09d}-{stamp}"
    n = 1
    while final.exists():
        n += 1
        final = tmp.parent / f"ckpt-{step:09d}-{stamp}-{n}"
    os.rename(tmp, final)
    fsync_file(tmp.parent)
    return CheckpointInfo(
        final,
        step,
        now,
        int(manifest.get("bytes", 0)),
        list(manifest.get("objects", [])),
        manifest.get("request_id"),
    )


def folder_order(name: str) -> tuple[int, str, int] | None:
    """How a checkpoint folder's name sorts, newest last: (step, stamp, n); None for a name that
    is not a checkpoint folder's (a temporary folder of a write in progress, anything else)."""
    match = _NAME.match(name)
    if match is None:
        return None
    suffix = name[match.end(2) + 1 :]
    return int(match.group(1)), match.group(2), int(suffix) if suffix else 1


# -- reading a checkpoint that may come from the store -----------------------------------------


class CheckpointFile(io.RawIOBase):
    """One regular file of a checkpoint, read by position and never past the size it had when it
    was opened (a file growing meanwhile adds nothing to what is read)."""

    def __init__(self, fd: int, size: int, name: str) -> None:
        super().__init__()
        self.fd, self.size, self.name = fd, size, name
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self.size - self._position)
        if want <= 0:
            return 0
        got = os.preadv(self.fd, [memoryview(buffer).cast("B")[:want]], self._position)
        self._position += got
        return got

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(f"{self.name}: seek before its start")
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def _kind_problem(name: str, st: os.stat_result) -> str | None:
    """Why a file of this kind is never read (None: a regular file)."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return None
    kind = file_kind(mode)
    if stat.S_ISLNK(mode):
        return f"{name} is {kind}, never followed"
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return f"{name} is {kind}, never read"
    if stat.S_ISDIR(mode):
        return f"{name} is {kind}, not a file"
    return f"{name} is not a plain file"


def _open_regular(
    folder: int, name: str, size: int | None = None, limit: int | None = None, what: str = "file"
) -> CheckpointFile:
    """`name` in the folder open as `folder`, if it is a regular file (of `size` bytes, or at most
    `limit`); a CheckpointError saying what it is otherwise. Its kind is looked at before it is
    opened (opening a device can do something) and again once open (it may have been replaced)."""
    try:
        before = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        raise CheckpointError(f"{name} is missing") from None
    except OSError as err:
        raise CheckpointError(f"{name} cannot be read ({err.strerror})") from None
    problem = _kind_problem(name, before)
    if problem is None:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=folder)
        except OSError as err:
            problem = (
                f"{name} is a symbolic link, never followed"
                if err.errno == errno.ELOOP
                else f"{name} cannot be read ({err.strerror})"
            )
    if problem is not None:
        raise CheckpointError(problem)
    try:
        st = os.fstat(fd)
        problem = _kind_problem(name, st)
        if problem is None and size is not None and st.st_size != size:
            problem = f"{name} has {st.st_size} bytes, the manifest says {size}"
        if problem is None and limit is not None and st.st_size > limit:
            problem = (
                f"{name} has {st.st_size} bytes, more than a {what} of a checkpoint has ({limit})"
            )
    except BaseException:
        os.close(fd)
        raise
    if problem is not None:
        os.close(fd)
        raise CheckpointError(problem)
    return CheckpointFile(fd, st.st_size, name)


def name_problem(name: Any, where: str = "the manifest") -> str | None:
    """Why a name in a manifest (or a DCP index) is not a file of its folder (None: it is)."""
    if not isinstance(name, str) or not name or name == "." or "\0" in name:
        return f"{where} names {name!r}, which is not a file name"
    if "/" in name or name == "..":
        return f"{where} names {name!r}, which is outside its folder"
    return None


def _listing_problem(files: Any) -> str | None:
    """Why a manifest's list of files cannot be trusted to open (None: every entry is a plain
    name with a size and a checksum)."""
    if not isinstance(files, dict):
        return "the manifest lists no files"
    for name, meta in files.items():
        problem = name_problem(name)
        if problem is not None:
            return problem
        if (
            not isinstance(meta, dict)
            or not _whole(meta.get("size"))
            or not isinstance(meta.get("xxh3"), str)
        ):
            return f"the manifest gives {name} no size and checksum"
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class CheckpointFolder:
    """A checkpoint folder open for reading: the files its manifest lists, each a regular file of
    the size stated there, and nothing else (see the module's docstring).

    The folder itself is opened without following a symbolic link, and every file relative to
    it, so a folder swapped meanwhile is never read through."""

    def __init__(self, path: Path, manifest: dict[str, Any] | None = None) -> None:
        self.path = path
        files = (manifest or {}).get("files")
        self.files: dict[str, Any] = files if isinstance(files, dict) else {}
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise CheckpointError(
                    f"{path.name} is not a folder (a symbolic link is never followed)"
                ) from None
            raise CheckpointError(f"{path.name} cannot be read ({err.strerror})") from None

    def __enter__(self) -> CheckpointFolder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(self, name: str) -> BinaryIO:
        """One of the manifest's files, buffered, bounded by its stated size."""
        return io.BufferedReader(self._raw(name))

    def read(self, name: str) -> bytearray:
        """One of the manifest's files, whole (its stated size, no more)."""
        with self._raw(name) as raw:
            data = bytearray(raw.size)
            view, done = memoryview(data), 0
            while done < raw.size:
                got = raw.readinto(view[done:])
                if not got:
                    raise CheckpointError(
                        f"{name} ended after {done} of its {raw.size} bytes (it is being changed)"
                    )
                done += got
        return data

    def size(self, name: str) -> int:
        """The size the manifest states for `name` (CheckpointError if it does not list it)."""
        problem = name_problem(name)
        if problem is not None:
            raise CheckpointError(problem)
        meta = self.files.get(name)
        if meta is None:
            raise CheckpointError(f"the manifest does not list {name}")
        if not isinstance(meta, dict) or not _whole(meta.get("size")):
            raise CheckpointError(f"the manifest gives {name} no size")
        return int(meta["size"])

    def _raw(self, name: str) -> CheckpointFile:
        return _open_regular(self.fd, name, size=self.size(name))

    def manifest(self) -> dict[str, Any]:
        """The folder's manifest, parsed (a regular file of at most MAX_MANIFEST_BYTES)."""
        with _open_regular(self.fd, MANIFEST, limit=MAX_MANIFEST_BYTES, what="manifest") as raw:
            text = io.BufferedReader(raw).read()
        try:
            return json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise CheckpointError(f"{MANIFEST} is not JSON ({err})") from None


def open_file(path: Path, manifest: dict[str, Any], name: str) -> BinaryIO:
    """One file of a checkpoint folder, as CheckpointFolder opens it (for torch.load)."""
    with CheckpointFolder(path, manifest) as folder:
        return folder.open(name)  # open on its own descriptor: the folder's may close


def manifest_or_problem(path: Path) -> dict[str, Any] | str | None:
    """A checkpoint folder's manifest; None when it has none (yet: a restore brings it last) or
    one of another format; else why it cannot be used."""
    try:
        with CheckpointFolder(path) as folder:
            manifest = folder.manifest()
    except CheckpointError as err:
        return None if str(err) == f"{MANIFEST} is missing" else str(err)
    if not isinstance(manifest, dict):
        return f"{MANIFEST} is not an object"
    if manifest.get("format") != FORMAT:
        return None
    if not _whole(manifest.get("step")):
        return f"{MANIFEST} gives no step"
    moment = manifest.get("time")
    if (
        isinstance(moment, bool)
        or not isinstance(moment, (int, float))
        or not math.isfinite(moment)
    ):
        return f"{MANIFEST} gives no time"
    return manifest


def read_json(
    path: Path, manifest: dict[str, Any], name: str, limit: int, checked: bool = False
) -> dict[str, Any] | None:
    """A JSON object in one of a checkpoint's files (metrics.json), if the manifest lists it at
    no more than `limit` bytes, it reads as one (and, if not `checked` already, its bytes match
    the manifest's checksum); else None."""
    try:
        with CheckpointFolder(path, manifest) as folder:
            if folder.size(name) > limit:
                return None
            data = folder.read(name)
        if not checked and xxhash.xxh3_128(data).hexdigest() != manifest["files"][name].get("xxh3"):
            return None
        value = json.loads(data.decode("utf-8"))
    except (CheckpointError, OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_manifest(path: Path) -> dict[str, Any] | None:
    """A checkpoint folder's manifest, or None when it has none that can be used."""
    manifest = manifest_or_problem(path)
    return manifest if isinstance(manifest, dict) else None


def verify(path: Path, manifest: dict[str, Any], names: list[str] | None = None) -> str | None:
    """None if every file (or each of `names`) is there, a regular file with its size and
    checksum; else what is wrong. Every name the manifest lists is checked as a name first, so a
    manifest naming a file outside its folder is refused whatever share of it is read."""
    files: Any = manifest.get("files")  # the manifest's, as read: _listing_problem checks it
    problem = _listing_problem(files)
    if problem is not None:
        return problem
    try:
        with CheckpointFolder(path, manifest) as folder:
            for name in files if names is None else names:
                with folder.open(name) as f:
                    if _hash(f) != files[name]["xxh3"]:
                        return f"{name} fails its checksum"
    except CheckpointError as err:
        return str(err)
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    return None


def real_folders(root: Path) -> list[Path]:
    """The folders in `root` that are folders themselves, not symbolic links to one elsewhere."""
    try:
        with os.scandir(root) as entries:
            return [Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def complete_checkpoints(
    run_path: Path,
    unusable: list[tuple[Path, str]] | None = None,
) -> list[tuple[Path, dict[str, Any]]]:
    """Folders with a manifest, newest step last (not yet verified). A checkpoint folder whose
    manifest cannot be used (a symbolic link, a FIFO, too large, not JSON) is left out, and
    added to `unusable` with the reason, if given."""
    found = []
    for entry in real_folders(run_path):
        if not _NAME.match(entry.name):
            continue
        manifest = manifest_or_problem(entry)
        if isinstance(manifest, dict):
            found.append((entry, manifest))
        elif manifest is not None and unusable is not None:
            unusable.append((entry, manifest))
    return sorted(found, key=lambda item: (item[1]["step"], item[1]["time"]))


def find_checkpoint(
    root: str | os.PathLike[str], run: str, step: int | None = None
) -> tuple[Path, dict[str, Any]]:
    """The newest complete checkpoint (of `step`, if given) that passes its checksums, of a run
    named as `track()` named it, or of a run folder, or a checkpoint folder itself; a
    CheckpointError that says what there is otherwise."""
    given = Path(run)
    unusable: list[tuple[Path, str]] = []
    # A checkpoint folder the user named, wherever a link of theirs points: its files are still
    # read only as its manifest lists them.
    own = manifest_or_problem(given.resolve()) if given.is_dir() else None
    if isinstance(own, str):
        raise CheckpointError(f"{given.name}: {own}")
    if own is not None:
        candidates = [(given.resolve(), own)]
    else:
        folder = given if given.is_dir() else run_dir(root, run)
        if not folder.is_dir():
            try:
                runs = sorted(
                    p.name
                    for p in Path(root).iterdir()
                    if p.is_dir() and not p.name.startswith(".")
                )
            except OSError:
                runs = []
            raise CheckpointError(
                f"No checkpoints of {run!r} in {root}"
                + (f" (runs there: {', '.join(runs)})" if runs else " (it holds no runs)")
            )
        candidates = complete_checkpoints(folder, unusable)
    if step is not None:
        steps = sorted({int(m["step"]) for _, m in candidates})
        candidates = [(p, m) for p, m in candidates if int(m["step"]) == step]
        if not candidates:
            raise CheckpointError(
                f"No complete checkpoint of step {step}"
                + (f" (steps: {', '.join(map(str, steps))})" if steps else "")
            )
    problems = []
    for path, manifest in reversed(candidates):
        problem = verify(path, manifest)
        if problem is None:
            return path, manifest
        problems.append(f"{path.name}: {problem}")
    problems += [f"{path.name}: {problem}" for path, problem in sorted(unusable, reverse=True)]
    raise CheckpointError(
        "No complete checkpoint"
        + (f" can be read ({'; '.join(problems[:3])})" if problems else f" of {run!r}")
    )


def info_of(path: Path, manifest: dict[str, Any]) -> CheckpointInfo:
    return CheckpointInfo(
        path,
        int(manifest["step"]),
        float(manifest["time"]),
        int(manifest.get("bytes", 0)),
        list(manifest.get("objects", [])),
        manifest.get("request_id"),
    )


def apply_retention(run_path: Path, keep_last: int, writing: Path | None = None) -> list[Path]:
    """Keep the newest `keep_last` complete checkpoints (never fewer than one), and always the
    newest healthy one (a run whose loss went NaN must still be able to go back before it);
    remove older ones and leftovers of interrupted writes. Returns what was removed."""
    removed = []
    complete = complete_checkpoints(run_path)
    healthy = [path for path, manifest in complete if manifest.get("health") != "suspect"]
    newest_healthy = healthy[-1] if healthy else None
    for path, _ in complete[: max(0, len(complete) - max(1, keep_last))]:
        if path == newest_healthy:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    for entry in run_path.iterdir() if run_path.is_dir() else []:
        if entry.name.startswith(TMP_PREFIX) and entry != writing and not _alive(entry.name):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(tmp_name: str) -> bool:
    """A temporary folder of a process still running is being written: leave it."""
    try:
        pid = int(tmp_name[len(TMP_PREFIX) :].split("-")[0])
    except ValueError:
        return False
    if pid == os.getpid():
        return False  # ours: `writing` names the one in flight
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
