"""The runtime's side of the jobs run elsewhere (elsewhere.py): what it lists of their areas in the
store, and bringing a job's results home into the work directory.

Anyone who can write the store writes those areas, so nothing there is run or trusted: a job's id
must look like one, its record is read only up to MAX_RECORD_BYTES and only for the fields shown,
at most MAX_LOOKED files of an area are looked at, at most MAX_JOBS areas are listed, and an area
that cannot be read is listed among `problems` with why, never keeping another from being listed.
Names are shown as names.shown() writes them.

Bringing a job home copies its outputs and the complete checkpoints of its runs into the work
directory, each file whole (landing.py) and never over a file the user changed meanwhile: a file
here is the job's to replace only when it is as the job began from it, which is when this
runtime's record of the file matches it (no change here since it was last synced) and the
workspace's copy in the store is older than the job's `started.json` (no change synced since the
job began; both times are the store's own clock). Otherwise the job's version lands beside it, as
`name.from-<job id>.ext`, and the answer lists it.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import strictjson
from ..checkpoints.files import MANIFEST, MAX_MANIFEST_BYTES, folder_order
from ..store import Store, open_backend
from ..store.backend import PART_SUFFIX, TEMP_FOLDER, Backend, RemoteFile
from ..store.crypto import keys, protect
from ..store.errors import SyncError
from ..store.hashing import fd_hash, file_hash
from ..store.names import decode, shown
from ..sync.ignore import is_bytecode
from ..sync.landing import IncomingFile
from ..sync.restore import checkpoint_folder
from ..sync.scan import local_path
from . import manifest
from .elsewhere import JOB_ID, RECORD, STARTED, area_url

if TYPE_CHECKING:
    from ..sync.engine import SyncEngine

log = logging.getLogger(__name__)

# Areas listed at most (the others counted), and how often the store is looked at again.
MAX_JOBS = 50
LOOK_EVERY = 10.0
# A job's record is a few hundred bytes: one larger than this is not one.
MAX_RECORD_BYTES = 64 * 2**10
# Files of one area looked at for the listing and for bringing it home, and named per job.
MAX_LOOKED = 10_000
SHOWN_OUTPUTS = 20
# Paths named per list in the answer of a bring-home (the counts are whole).
MAX_NAMED = 500
STATES = ("running", "ended")
MAX_TEXT = 4096
# A run's checkpoints looked at for the newest complete one, newest first, per look.
CHECKED_PER_RUN = 3


class NoSuchJobElsewhere(LookupError):
    """No area of that job in the workspace's store."""


class JobsElsewhere:
    """The jobs run elsewhere of the workspace the runtime syncs: looked at by a thread of its
    own every LOOK_EVERY seconds (never on a request), and brought home on the user's word."""

    def __init__(self, engine: Callable[[], SyncEngine | None], every: float = LOOK_EVERY) -> None:
        self.engine = engine
        self.every = every
        self._view: dict[str, Any] = {"jobs": [], "more": 0, "problems": [], "error": None}
        self._backend: tuple[str, Backend] | None = None
        self._lock = threading.Lock()  # one look or bring-home at a time
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuws-elsewhere", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except Exception as err:  # noqa: BLE001 - said in the listing; the thread lives on
                log.exception("GPU workspace: the look at the jobs run elsewhere failed")
                self._view = {**self._view, "error": f"the jobs run elsewhere: {err}"}
            self._wake.wait(self.every)
            self._wake.clear()

    def view(self) -> dict[str, Any]:
        """What the last look found: `jobs`, `more` (areas not listed), `problems` ([{id,
        reason}]), `error` (the store could not be looked at)."""
        return self._view

    # -- looking ---------------------------------------------------------------------------------

    def _area(self, engine: SyncEngine) -> Backend:
        """The store's folder of the workspace's jobs' areas (opened once per workspace)."""
        settings = engine.settings
        url = area_url(settings.store_url, settings.workspace)
        if self._backend is None or self._backend[0] != url:
            backend = open_backend(url, settings.storage_options, True, settings.concurrency)
            self._backend = (url, backend)
        return self._backend[1]

    def _store(self, engine: SyncEngine, job_id: str) -> Store:
        """One job's area, as a workspace of its own, encrypted as the workspace is. Only read:
        an area of an encrypted workspace that is not encrypted is refused, never made so."""
        area, encryption = self._area(engine), engine.settings.encryption
        if encryption is not None and keys.read_marker(area, job_id) is None:
            raise ValueError("its area is not encrypted as the workspace is: not read")
        return Store(protect(area, job_id, encryption), job_id)

    def look(self) -> None:
        engine = self.engine()
        if engine is None:
            return
        with self._lock:
            try:
                area = self._area(engine)
                # A folder store has no such folder before a job ran elsewhere: none, not missing.
                names = sorted(area.folders("")) if area.present("") else []
            except FileNotFoundError:
                names = []
            except SyncError as err:
                self._view = {**self._view, "error": f"the jobs run elsewhere: {err}"}
                return
            jobs: list[dict[str, Any]] = []
            problems: list[dict[str, str]] = []
            more = 0
            for name in names:
                if name == TEMP_FOLDER:
                    continue  # the store's own short-lived objects (a probe of its writes)
                if len(jobs) + len(problems) >= MAX_JOBS:
                    more += 1
                elif not JOB_ID.match(name):
                    problems.append(
                        {"id": shown(name)[:200], "reason": "not a job's id: not looked at"}
                    )
                else:
                    try:
                        jobs.append(self._describe(engine, name))
                    except (SyncError, ValueError, OSError) as err:
                        problems.append({"id": name, "reason": shown(str(err))[:MAX_TEXT]})
            # A link or a special file where an area would be (a folder store): named with why.
            for key, why in sorted(area.skipped.items()):
                if "/" in key:
                    continue
                if len(jobs) + len(problems) >= MAX_JOBS:
                    more += 1
                else:
                    problems.append({"id": shown(key)[:200], "reason": f"{why}: not looked at"})
            jobs.sort(key=lambda job: -(job["updated"] or 0))
            self._view = {"jobs": jobs, "more": more, "problems": problems, "error": None}

    def _describe(self, engine: SyncEngine, job_id: str) -> dict[str, Any]:
        store = self._store(engine, job_id)
        record, updated = _read_record(store)
        why = self._area(engine).skipped.get(store.state_key(RECORD))
        if why is not None:  # a link or a FIFO where its record goes: no job is "starting"
            raise ValueError(f"its record is {why}")
        files, more = _files(store)
        outputs = sorted(
            (rel, f.size) for rel, f in files.items() if checkpoint_folder(rel) is None
        )
        step, newest = complete_newest(store, files)
        started = store.backend.stat(store.state_key(STARTED))
        return {
            "id": job_id,
            "name": _text(record.get("name")) or job_id,
            "state": record.get("state") if record.get("state") in STATES else "starting",
            "returncode": _whole(record.get("returncode")),
            "host": _text(record.get("host")),
            "command": _words(record.get("command")),
            "cwd": _text(record.get("cwd")) or "",
            "error": _text(record.get("error")),
            "step": step,
            "checkpoints": [
                {"run": shown(run), "checkpoint": shown(folder)}
                for run, folder in sorted(newest.items())
            ],
            "outputs": [{"path": shown(rel), "size": size} for rel, size in outputs][
                :SHOWN_OUTPUTS
            ],
            "outputs_count": len(outputs),
            "outputs_bytes": sum(size for _, size in outputs),
            "files_more": more,
            "started": started.mtime if started is not None else None,
            "updated": updated,
        }

    # -- bringing home ---------------------------------------------------------------------------

    def bring_home(self, job_id: str) -> dict[str, Any]:
        """The job's outputs and the complete checkpoints of its runs into the work directory:
        what is new here lands, what is here as the job began from it is replaced, what the user
        changed meanwhile stays and the job's version lands beside it. ValueError: not a job's
        id; NoSuchJobElsewhere: no area of it; SyncError: the store cannot be read."""
        if not JOB_ID.match(job_id or ""):
            raise ValueError(f"Not a job id: {shown(job_id)!r} (j- and 12 hex digits)")
        engine = self.engine()
        if engine is None:
            raise SyncError("the store is not open yet")
        with self._lock:
            area = self._area(engine)
            if not area.present("") or not area.present(job_id):
                raise NoSuchJobElsewhere(f"No job {job_id} has run elsewhere in this workspace")
            store = self._store(engine, job_id)
            files, more = _files(store)
            started = store.backend.stat(store.state_key(STARTED))
            if not files and started is None:
                raise NoSuchJobElsewhere(f"No job {job_id} has run elsewhere in this workspace")
            home = _Homecoming(engine, store, job_id, started.mtime if started else None)
            answer = home.run(files, area.skipped)
        answer["files_more"] = more
        self._wake.set()  # the listing follows
        return answer


class _Homecoming:
    """One bring-home: each file's fate, and the answer that lists them."""

    def __init__(self, engine: SyncEngine, store: Store, job_id: str, started: float | None):
        self.engine = engine
        self.store = store
        self.job_id = job_id
        self.started = started  # the store's time of started.json; None: unknown
        self.workdir = engine.workdir
        self.real_workdir = os.path.realpath(engine.workdir)
        self._workspace_files: dict[str, RemoteFile] | None = None
        # What became of each file: named (MAX_NAMED per list) and counted.
        self.lists: dict[str, list[Any]] = {
            "brought": [],
            "replaced": [],
            "beside": [],
            "skipped": [],
        }
        self.counts = dict.fromkeys(self.lists, 0)
        self.same = 0
        self.errors: list[str] = []

    def run(self, files: dict[str, RemoteFile], skipped: dict[str, str]) -> dict[str, Any]:
        # Links and special files in the job's area (a folder store): named, never brought.
        prefix = f"{self.job_id}/files/"
        for key, why in sorted(skipped.items()):
            if key.startswith(prefix):
                self._note("skipped", {"path": shown(decode(key[len(prefix) :])), "reason": why})
        # The checkpoint folders whose manifest is in the store with every file it lists, at the
        # size it lists (a manifest alone, or planted, is no checkpoint), and why the others not.
        incomplete: dict[str, str] = {}
        for rel in files:
            found = checkpoint_folder(rel)
            if found is not None and found[1] not in incomplete:
                incomplete[found[1]] = "its checkpoint is not complete in the store yet"
        for folder in incomplete:
            if f"{folder}/{MANIFEST}" in files:
                incomplete[folder] = checkpoint_problem(self.store, folder, files) or ""
        # A checkpoint's manifest last: a run finds it whole here or not at all.
        for rel in sorted(files, key=lambda rel: (rel.endswith("/" + MANIFEST), rel)):
            found = checkpoint_folder(rel)
            if found is not None and incomplete[found[1]]:
                self._note("skipped", {"path": shown(rel), "reason": incomplete[found[1]]})
                continue
            problem = _path_problem(rel) or (None if found else _not_data(rel))
            if problem is not None:
                self._note("skipped", {"path": shown(rel), "reason": problem})
                continue
            try:
                self._one(rel, files[rel], checkpoint=found is not None)
            except (OSError, SyncError) as err:
                self.errors.append(f"{shown(rel)}: {err}")
        return {
            "id": self.job_id,
            **self.lists,
            "counts": {**self.counts, "same": self.same},
            "errors": self.errors[:MAX_NAMED],
        }

    def _note(self, name: str, item: Any) -> None:
        self.counts[name] += 1
        if len(self.lists[name]) < MAX_NAMED:
            self.lists[name].append(item)

    def _one(self, rel: str, remote: RemoteFile, checkpoint: bool) -> None:
        target = local_path(self.workdir, rel)
        folder = os.path.dirname(target)
        if not _inside(os.path.realpath(folder), self.real_workdir):
            self._note(
                "skipped",
                {"path": shown(rel), "reason": "its folder here leads out of the work directory"},
            )
            return
        try:
            here = os.lstat(target)
        except FileNotFoundError:
            here = None
        regular = here is not None and stat.S_ISREG(here.st_mode)
        if checkpoint and regular and here is not None and here.st_size == remote.size:
            self.same += 1  # a checkpoint's files never change once it is complete
            return
        os.makedirs(folder, exist_ok=True)
        with IncomingFile(target) as incoming:
            written = self.store.backend.read_into(remote.key, incoming.fd, etag=remote.etag)
            if written != remote.size or os.fstat(incoming.fd).st_size != remote.size:
                raise SyncError(f"{remote.size:,} bytes in the store, {written:,} came")
            if here is None:
                try:
                    incoming.link(target)
                    self._note("brought", shown(rel))
                    return
                except FileExistsError:
                    pass  # saved here meanwhile: kept, the job's version beside it
            elif regular and _same_bytes(incoming.fd, target, remote.size):
                self.same += 1
                return
            elif regular and self._as_the_job_began(rel, target):
                self._replace(incoming, target, rel)
                return
            self._note("beside", {"path": shown(rel), "beside": shown(self._beside(incoming, rel))})

    def _as_the_job_began(self, rel: str, target: str) -> bool:
        """Whether the file here is as the job found it: unchanged since this runtime last synced
        it, and that copy in the store older than the job's start (the store's clock)."""
        record = self.engine.index.get(rel)
        try:
            here = os.lstat(target)
        except FileNotFoundError:
            return False
        if record is None or (record.size, record.mtime_ns) != (here.st_size, here.st_mtime_ns):
            return False
        if self._workspace_files is None:
            self._workspace_files = self.engine.store.list_files()
        stored = self._workspace_files.get(rel)
        return (
            self.started is not None
            and stored is not None
            and stored.mtime is not None
            and stored.mtime < self.started
        )

    def _replace(self, incoming: IncomingFile, target: str, rel: str) -> None:
        """The job's version in place of the file here, in one rename (the file here is in the
        workspace's store already, and the sync keeps it as a previous version there)."""
        folder, name = os.path.split(target)
        temporary = os.path.join(folder, f".~{name}{PART_SUFFIX}-{self.job_id}")
        incoming.link(temporary)
        os.replace(temporary, target)
        self._note("replaced", shown(rel))

    def _beside(self, incoming: IncomingFile, rel: str) -> str:
        base, ext = os.path.splitext(rel)
        for n in range(1, 1000):
            name = (
                f"{base}.from-{self.job_id}{ext}"
                if n == 1
                else f"{base}.from-{self.job_id}-{n}{ext}"
            )
            try:
                incoming.link(local_path(self.workdir, name))
                return name
            except FileExistsError:
                continue
        raise SyncError(f"no free name beside {shown(rel)} for the job's version")


def checkpoint_problem(store: Store, folder: str, files: dict[str, RemoteFile]) -> str | None:
    """None where the area holds every file the folder's manifest lists, at its size; else
    why the checkpoint is not complete there. The manifest is only read, as JSON."""
    remote = files[f"{folder}/{MANIFEST}"]
    if remote.size > MAX_MANIFEST_BYTES:
        return f"its {MANIFEST} is larger than {MAX_MANIFEST_BYTES // 1024} KiB"
    try:
        data = store.backend.read_bytes(remote.key)
        manifest = strictjson.loads(data or b"")
    except (ValueError, OSError, SyncError) as err:
        return f"its {MANIFEST} cannot be read: {shown(str(err))[:200]}"
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict) or not listed:
        return f"its {MANIFEST} lists no files"
    for name, meta in listed.items():
        size = meta.get("size") if isinstance(meta, dict) else None
        there = files.get(f"{folder}/{name}") if isinstance(name, str) else None
        if there is None or _path_problem(f"{folder}/{name}") is not None:
            return f"{shown(str(name))[:200]}, which its {MANIFEST} lists, is not in the store"
        if there.size != size:
            return f"{shown(name)[:200]} in the store is not the size its {MANIFEST} gives"
    return None


def complete_newest(
    store: Store, files: dict[str, RemoteFile]
) -> tuple[int | None, dict[str, str]]:
    """As elsewhere.newest_step(), but of the checkpoints complete in the area (a manifest alone,
    or planted, is none): each run's newest, of its CHECKED_PER_RUN newest with a manifest."""
    by_run: dict[str, list[tuple[tuple[int, str, int], str]]] = {}
    for rel in files:
        found = checkpoint_folder(rel)
        if found is not None and rel == f"{found[1]}/{MANIFEST}":
            order = folder_order(found[1].rpartition("/")[2])
            if order is not None:
                by_run.setdefault(found[0], []).append((order, found[1]))
    newest: dict[str, str] = {}
    step: int | None = None
    for run, folders in by_run.items():
        for order, folder in sorted(folders, reverse=True)[:CHECKED_PER_RUN]:
            if checkpoint_problem(store, folder, files) is None:
                newest[run] = folder
                step = order[0] if step is None else max(step, order[0])
                break
    return step, newest


def _files(store: Store) -> tuple[dict[str, RemoteFile], int]:
    """The area's files, MAX_LOOKED at most, and how many more there are (counted up to as
    many again)."""
    found: dict[str, RemoteFile] = {}
    more = 0
    prefix = f"{store.workspace}/files/"
    for f in store.backend.list(prefix.rstrip("/")):
        if len(found) >= MAX_LOOKED:
            more += 1
            if more >= MAX_LOOKED:
                break
            continue
        found[decode(f.key[len(prefix) :])] = f
    return found, more


def _read_record(store: Store) -> tuple[dict[str, Any], float | None]:
    """The job's record (its fields read only as the listing shows them) and when the store
    last had it written; an empty record before the job's first write."""
    key = store.state_key(RECORD)
    found = store.backend.stat(key)
    if found is None:
        return {}, None
    if found.size > MAX_RECORD_BYTES:
        raise ValueError(f"its record is larger than {MAX_RECORD_BYTES // 1024} KiB: not read")
    data = store.backend.read_bytes(key)
    if data is None:
        return {}, None
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"its record is larger than {MAX_RECORD_BYTES // 1024} KiB: not read")
    value = strictjson.loads(data)
    if not isinstance(value, dict):
        raise ValueError("its record is not a JSON object")
    return value, found.mtime


def _text(value: Any) -> str | None:
    return shown(value)[:MAX_TEXT] if isinstance(value, str) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _words(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [shown(word)[:MAX_TEXT] for word in value[:64] if isinstance(word, str)]


def _path_problem(rel: str) -> str | None:
    parts = rel.split("/")
    if any(part in ("", ".", "..") or "\0" in part for part in parts):
        return "not a path inside the work directory"
    if PART_SUFFIX in parts[-1]:
        return "a temporary file"
    if is_bytecode(rel):
        return "compiled Python: this runtime compiles its own, and none from the store is loaded"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in rel):
        # An escape sequence or a hidden direction mark in a name from the store: never a
        # file of the work directory, whose name a terminal would then act on.
        return "its name has control characters"
    return None


def _not_data(rel: str) -> str | None:
    """Why a file of a job's area is not brought home as the job's output: code (a script, a
    build file: what a later run would execute, userjobs/manifest.py) or a hidden file (a Git
    hook, an IPython startup file, `.gpuwsignore`). Anyone who can write the store writes the
    area, and nothing there is signed, so only data comes home; the user copies the rest by
    hand where the job made it."""
    if any(part.startswith(".") for part in rel.split("/")):
        kind = "a hidden file"
    elif manifest.is_code(rel, frozenset()):
        kind = "code"
    else:
        return None
    return (
        f"{kind}, which bringing home never brings (nothing in a job's area is signed): "
        "copy it from the store by hand if the job made it"
    )


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _same_bytes(fd: int, target: str, size: int) -> bool:
    try:
        return os.path.getsize(target) == size and fd_hash(fd) == file_hash(target)
    except OSError:
        return False
