"""Planning a pass: what changed since the record, what the store should delete, what is held
back (too large, over the quota, still being written), and in what order the rest goes.

Nothing here writes to the store; the engine (engine.py) runs the plan through transfer.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..checkpoints.files import MANIFEST, folder_order
from .errors import DeletionGuardError, WorkdirError
from .ignore import IGNORE_FILE, IgnoreRules
from .index import Record, SyncIndex
from .links import entry_of, is_link_item, items_of, link_target
from .pending import PendingSet
from .restore import CHECKPOINTS_PREFIX
from .scan import LocalFile, local_path, present, scan, stat_path
from .settle import Settling

# Below this many deletions the share guard does not apply (deleting 2 of 3 files is normal).
GUARD_MIN_DELETIONS = 10
# In an emergency pass, files under this size (outside checkpoints) go first.
URGENT_SMALL = 1 << 20
# The speed an emergency pass counts on before it has measured one (bytes/s): a local folder,
# and a store across a network. A larger file than fits in the time left is not started.
URGENT_GUESS_LOCAL = 200 * 2**20
URGENT_GUESS_REMOTE = 20 * 2**20
# From this many unrecorded files in a pass, one listing of the store answers "is it there
# already?" instead of a request per file.
LIST_INSTEAD_OF_STAT = 32


@dataclass
class PassReport:
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    found_in_store: int = 0  # changed here, but the store had these bytes already
    bytes_uploaded: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # too large, ignored
    problems: list[str] = field(default_factory=list)  # "path: reason", files that cannot be synced
    stopped: str | None = None  # why the pass stopped before trying every file
    # Files still being written, held back (path → seconds until they may settle).
    settling: dict[str, float] = field(default_factory=dict)
    # "path: why" of files an emergency persist did not start: they could not end in its time.
    left_behind: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def include(self, other: PassReport) -> None:
        """Count what an earlier pass (one a Persist now waited for) put in the store."""
        self.uploaded = list(dict.fromkeys(other.uploaded + self.uploaded))
        self.deleted = list(dict.fromkeys(other.deleted + self.deleted))
        self.bytes_uploaded += other.bytes_uploaded


class Planner:
    """A pass's plan from the work directory, the ignore rules and the local record; with a
    `baseline` (the record of the restore the work directory began from), a file as that
    restore left it is no change of this engine's: only what differs from it is sent."""

    def __init__(
        self,
        workdir: str,
        rules: IgnoreRules,
        index: SyncIndex,
        pending_set: PendingSet,
        baseline: SyncIndex | None = None,
    ) -> None:
        self.workdir = workdir
        self.rules = rules
        self.index = index
        self.pending_set = pending_set
        self.baseline = baseline

    def plan(
        self, paths: Iterable[str] | None = None
    ) -> tuple[list[LocalFile], list[str], int, int]:
        """What a pass would do: (files to upload, paths to delete, unchanged count, records).
        `paths`: just these (from the watcher); None: a full rescan.

        Refuses an emptied work directory outright: that is a vanished mount, not a cleanup.
        """
        check_workdir(self.workdir)
        self.rules.reload()
        changed: list[LocalFile] = []
        deleted: list[str] = []
        unchanged = 0
        if paths is None:
            unreadable: dict[str, str] = {}
            local = {
                f.path: f for f in scan(self.workdir, self.rules, problems=unreadable.__setitem__)
            }
            self.pending_set.scan_problems(unreadable)
            records = self.index.all()
            for f in local.values():
                if _same(f, records.get(f.path)):
                    unchanged += 1
                else:
                    changed.append(f)
            deleted = [p for p in records if p not in local and self.gone(p)]
            total_records = len(records)
            if records and not local:
                if _has_files(self.workdir):
                    raise DeletionGuardError(
                        f"Nothing in the work directory is mirrored any more (every file is excluded by "
                        f"{IGNORE_FILE} or the defaults), but the store mirrors {len(records)} files: nothing "
                        f"was deleted. Check {IGNORE_FILE}."
                    )
                raise DeletionGuardError(
                    f"The work directory {self.workdir} is empty but the store mirrors {len(records)} "
                    "files: nothing was deleted. Restore it, or delete the files from the store by hand."
                )
        else:
            total_records = self.index.count_and_bytes()[0]
            for rel in sorted(self._expand(paths)):
                found = stat_path(self.workdir, rel, self.rules, self.pending_set.problem)
                record = self.index.get(rel)
                if found is not None:
                    if is_link_item(rel):
                        self.pending_set.clear_problem(entry_of(rel))  # a link mended
                    if _same(found, record):
                        unchanged += 1
                    else:
                        changed.append(found)
                elif record is not None and self.gone(rel):
                    deleted.append(rel)
        if self.baseline is not None and changed:
            restored = self.baseline.get_many([f.path for f in changed])
            kept = [f for f in changed if not _same(f, restored.get(f.path))]
            unchanged += len(changed) - len(kept)
            changed = kept
        return changed, deleted, unchanged, total_records

    def _expand(self, paths: Iterable[str]) -> set[str]:
        """A folder event stands for every file in it: created or moved in (scan it), or
        deleted or moved away (the recorded files under it)."""
        out: set[str] = set()
        for rel in paths:
            rel = rel.strip("/")
            if not rel:
                continue
            path = self.abs(rel)
            if os.path.isdir(path) and not os.path.islink(path):
                if not self.rules.ignored(rel, is_dir=True):
                    out.update(f.path for f in scan(self.workdir, self.rules, rel))
                out.update(p for p in self.index.paths_under(rel) if not present(self.workdir, p))
                out.update(
                    name for name in items_of(rel) if self.index.get(name) is not None
                )  # a file (or link) that became a folder of its name
            else:
                out.update(items_of(rel))  # a file, or a link
                # Gone, or a file now where a folder was: what was recorded under it is gone.
                out.update(self.index.paths_under(rel))
        return out

    def guard_deletions(self, deleted: list[str], total_records: int, max_fraction: float) -> None:
        """Refuse a pass that would delete more than `max_fraction` of the mirror: a work
        directory that vanished or was emptied by mistake, not a cleanup. Checkpoints that their
        run's retention replaced are no sign of that."""
        guarded = [rel for rel in deleted if not self.retired_checkpoint(rel)] if deleted else []
        if len(guarded) >= GUARD_MIN_DELETIONS and len(guarded) > max_fraction * total_records:
            raise DeletionGuardError(
                f"This pass would remove {len(guarded)} of the {total_records} files in the store "
                f"(more than {max_fraction:.0%}): stopped, nothing was deleted. "
                "Check the work directory and .gpuwsignore; previous versions stay in the store."
            )

    def apply_limits(
        self,
        changed: list[LocalFile],
        report: PassReport,
        max_file_size: int | None,
        quota: int | None,
        used: int,
    ) -> tuple[list[LocalFile], str | None]:
        """Leave out files over max_file_size; refuse what would take the store's use (`used`,
        versions included) over the quota. Returns what may go, and a warning when the store is
        nearly full."""
        keep = []
        for f in changed:
            if max_file_size is not None and f.size > max_file_size:
                reason = f"larger than max_file_size ({size_text(f.size)} > {size_text(max_file_size)}): not synced"
                report.skipped.append(f.path)
                report.problems.append(f"{f.path}: {reason}")
                self.pending_set.problem(f.path, reason, f)
                continue
            keep.append(f)
        if quota is None:
            return keep, None
        allowed = []
        for f in sorted(keep, key=lambda item: item.size):
            record = self.index.get(f.path)
            after = used - (record.size if record else 0) + f.size
            if after > quota:
                error = (
                    f"Quota exceeded: {f.path} ({size_text(f.size)}) would take the store to "
                    f"{size_text(after)} of its {size_text(quota)} quota (previous versions included). "
                    "The file stays here, pending."
                )
                report.errors.append(error)
                self.pending_set.failing(f.path, f.size, error)
                continue
            used = after
            allowed.append(f)
        warning = (
            f"The store is {used / quota:.0%} full ({size_text(used)} of {size_text(quota)}, "
            "previous versions included)"
            if used >= 0.9 * quota
            else None
        )
        return allowed, warning

    def gone(self, rel: str) -> bool:
        """Whether the file `rel` is no more: nothing there, or a folder now of its name; a
        link's: no link there, or one that no longer points inside (listed among the problems)."""
        if is_link_item(rel):
            return link_target(self.workdir, entry_of(rel))[0] is None
        path = self.abs(rel)
        return not os.path.lexists(path) or (os.path.isdir(path) and not os.path.islink(path))

    def hold_unsettled(
        self, changed: list[LocalFile], report: PassReport, settling: Settling
    ) -> list[LocalFile]:
        """The files that may go now; those still being written wait (pending, saying so)."""
        ready = []
        for f in changed:
            wait = settling.wait(f)
            if wait > 0:
                report.settling[f.path] = wait
                self.pending_set.writing(f.path, f.size, settling.interval, settling.longest)
            else:
                ready.append(f)
        return ready

    def retired_checkpoint(self, rel: str) -> bool:
        """A file of a checkpoint folder whose run still has a complete checkpoint here."""
        if not rel.startswith(CHECKPOINTS_PREFIX):
            return False
        parts = rel[len(CHECKPOINTS_PREFIX) :].split("/")
        if len(parts) != 3 or not folder_order(parts[1]) is not None:
            return False
        run = self.abs(CHECKPOINTS_PREFIX + parts[0])
        try:
            return any(
                folder_order(entry.name) is not None
                and entry.is_dir(follow_symlinks=False)
                and os.path.isfile(os.path.join(entry.path, MANIFEST))
                for entry in os.scandir(run)
            )
        except OSError:
            return False

    def abs(self, rel: str) -> str:
        return local_path(self.workdir, rel)


def needs_listing(changed: list[LocalFile], known: dict[str, Record | None]) -> bool:
    """Whether a pass has so many files this runtime has no record of (a new machine, a lost
    record) that one listing of the store beats asking per file."""
    return sum(1 for f in changed if known.get(f.path) is None) >= LIST_INSTEAD_OF_STAT


def upload_phases(files: list[LocalFile], urgent: bool) -> list[list[LocalFile]]:
    """The files in the order they go, in phases that each end before the next begins: a
    checkpoint folder's manifest only after the data of every checkpoint folder (a reader
    elsewhere never finds a manifest without its data). Normally checkpoints first (data, then
    manifests), then the rest; in an emergency (`urgent`) small files first, then the
    checkpoints, then the large rest."""
    ordered = sorted(files, key=_urgent_order(files) if urgent else _normal_order)
    is_manifest = [checkpoint_manifest(f.path) for f in ordered]
    phases = [
        [
            f
            for f, m in zip(ordered, is_manifest, strict=True)
            if not m and f.path.startswith(CHECKPOINTS_PREFIX)
        ],
        [f for f, m in zip(ordered, is_manifest, strict=True) if m],
        [f for f in ordered if not f.path.startswith(CHECKPOINTS_PREFIX)],
    ]
    if urgent:
        small = [f for f in phases[2] if f.size < URGENT_SMALL]
        phases = [small, phases[0], phases[1], [f for f in phases[2] if f.size >= URGENT_SMALL]]
    return phases


def left_behind(
    f: LocalFile, until: float | None, now: float, speed: float, remote: bool
) -> str | None:
    """In an emergency persist with a deadline (`until`, monotonic like `now`): why `f` is not
    started, if it cannot be finished in time at the pass's measured `speed` (bytes/s; 0: not
    measured yet, a guess for a `remote` store or a local one); None: it goes."""
    if until is None:
        return None
    left = until - now
    if f.size < URGENT_SMALL and left > 0:
        return None
    speed = speed if speed > 0 else (URGENT_GUESS_REMOTE if remote else URGENT_GUESS_LOCAL)
    need = f.size / speed
    if need <= left:
        return None
    return (
        f"left behind by the emergency persist: it would take about {need:.0f} s at "
        f"{size_text(speed)}/s, and {max(0.0, left):.0f} s were left"
    )


def check_workdir(workdir: str) -> None:
    if not os.path.isdir(workdir):
        raise WorkdirError(f"The work directory {workdir} does not exist (or is not a directory)")
    if not os.access(workdir, os.R_OK | os.X_OK):
        raise WorkdirError(f"The work directory {workdir} is not readable")


def checkpoint_manifest(rel: str) -> bool:
    return rel.startswith(CHECKPOINTS_PREFIX) and rel.endswith("/" + MANIFEST)


def files_text(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def size_text(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _same(local: LocalFile, record: Record | None) -> bool:
    return record is not None and record.size == local.size and record.mtime_ns == local.mtime_ns


def _has_files(folder: str) -> bool:
    """Whether any regular file lies below `folder` (stops at the first one found)."""
    for _, _, files in os.walk(folder):
        if files:
            return True
    return False


def _normal_order(f: LocalFile) -> tuple[bool, int]:
    """Checkpoints first, newest first (what a preempted run needs most), then large files:
    they set the pass's length; small ones fill the gaps."""
    if f.path.startswith(CHECKPOINTS_PREFIX):
        return (False, -f.mtime_ns)
    return (True, -f.size)


def _urgent_order(files: list[LocalFile]) -> Callable[[LocalFile], tuple[int, int, int, int]]:
    """Small files (code, notebooks, configuration) first, then the checkpoints, newest folder
    first and each folder's manifest after its data, then the rest, small before large."""
    newest: dict[str, int] = {}
    for f in files:
        if f.path.startswith(CHECKPOINTS_PREFIX):
            folder = f.path.rpartition("/")[0]
            newest[folder] = max(newest.get(folder, 0), f.mtime_ns)

    def key(f: LocalFile) -> tuple[int, int, int, int]:
        if f.path.startswith(CHECKPOINTS_PREFIX):
            return (1, -newest[f.path.rpartition("/")[0]], f.path.endswith("/manifest.json"), 0)
        if f.size < URGENT_SMALL:
            return (0, 0, 0, f.size)
        return (2, 0, 0, f.size)

    return key
