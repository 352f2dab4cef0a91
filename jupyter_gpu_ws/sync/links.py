"""Symbolic links in the work directory: mirrored as what they are, and brought back as links.

A link is not followed (it may loop or leave the work directory) but mirrored as a small file
named after it with LINK_SUFFIX that holds its target: rclone's convention (`rclone --links`),
so ordinary tools read and restore it as a link too. Only a link that stays inside the work
directory is mirrored (an absolute one is stored relative, so that it holds on a machine where
the folder sits elsewhere); one that points outside or loops is listed with the reason among
the files that cannot be synced, never left out in silence.

The store may have been written by someone else, so a restore makes a link only of a target
that stays inside the work directory by its words, makes it after every file of the restore
has landed (no file is ever written through a link it made), and checks at the end that each
link it made still leads inside when the others are followed too, removing any that does not.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable

from ..store.backend import Backend, RemoteFile
from ..store.errors import StoreUnavailableError
from ..store.names import shown
from .index import Record, SyncIndex

log = logging.getLogger(__name__)

LINK_SUFFIX = ".rclonelink"
# A target longer than PATH_MAX is no link's: a store entry holding one is not made a link.
LINK_MAX = 4096
NAME_TAKEN = (
    f"its name ends in {LINK_SUFFIX}, which the store keeps for symbolic links "
    "(rclone's convention): rename it to sync it"
)


def is_link_item(rel: str) -> bool:
    """Whether `rel` (a name in the record and the store) stands for a symbolic link."""
    return rel.endswith(LINK_SUFFIX)


def items_of(rel: str) -> tuple[str, ...]:
    """The names a path the watcher reports may have in the record: a file, or a link (whose
    own name may end in the suffix too: `x.rclonelink` is mirrored as `x.rclonelink.rclonelink`)."""
    return (rel, rel + LINK_SUFFIX)


def entry_of(rel: str) -> str:
    """The work directory's entry that the name `rel` stands for (a link's, less its suffix)."""
    return rel[: -len(LINK_SUFFIX)] if rel.endswith(LINK_SUFFIX) else rel


def link_target(workdir: str, rel: str) -> tuple[bytes | None, str | None]:
    """For the link at `rel` (its own path, relative): (the target to store, None) where it
    stays inside the work directory, else (None, why it is not mirrored). Not a link: (None,
    None)."""
    path = _here(workdir, rel)
    try:
        target = os.readlink(path)
    except OSError:
        return None, None
    folder = os.path.dirname(rel)
    if os.path.isabs(target):
        absolute = os.path.normpath(target)
        # The work directory as given, or as it really is (it may be reached through a link).
        for root in (os.path.normpath(workdir), os.path.realpath(workdir)):
            if absolute == root or absolute.startswith(root.rstrip("/") + "/"):
                stored = os.path.relpath(absolute, os.path.join(root, folder))
                break
        else:
            return None, (
                f"a symbolic link pointing outside the work directory (to {shown(target)})"
            )
    else:
        stored = target
    if not inside(folder, stored):
        return None, f"a symbolic link pointing outside the work directory (to {shown(target)})"
    if holds(folder, stored):
        return None, (
            f"a symbolic link to a folder that holds it (to {shown(target)}): a loop for "
            "whatever follows links, not mirrored"
        )
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return None, f"a symbolic link that loops (to {shown(target)}): nothing to mirror"
        # Pointing at nothing (yet): mirrored as it is, like any link inside.
    else:
        if not _leads_inside(workdir, path):
            return None, (
                f"a symbolic link that leads outside the work directory through another "
                f"link (to {shown(target)})"
            )
    data = os.fsencode(stored)
    if len(data) > LINK_MAX:
        return None, "a symbolic link whose target is too long"
    return data, None


def inside(folder: str, target: str) -> bool:
    """Whether the relative `target` of a link in `folder` (relative to the work directory)
    names a place inside the work directory, read by its words alone."""
    if not target or target.startswith("/") or "\0" in target:
        return False
    joined = os.path.normpath(os.path.join(folder, target) if folder else target)
    return joined != ".." and not joined.startswith("../")


def holds(folder: str, target: str) -> bool:
    """Whether the relative `target` of a link in `folder` names that folder or one above it."""
    joined = os.path.normpath(os.path.join(folder, target) if folder else target)
    return joined == "." or folder == joined or folder.startswith(joined + "/")


def _here(workdir: str, rel: str) -> str:
    return os.path.join(workdir, *rel.split("/")) if rel else workdir


def _leads_inside(workdir: str, path: str) -> bool:
    real_root = os.path.realpath(workdir)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


class LinkRestore:
    """The store's links (names with LINK_SUFFIX) made in the work directory, once the restore's
    files are in place. What is not made is said: `left_out` (store name → why) for what the
    store holds that cannot be a link here, `errors` for what failed."""

    def __init__(
        self, workdir: str, backend: Backend, index: SyncIndex, clock: Callable[[], float]
    ) -> None:
        self.workdir = workdir
        self.backend = backend
        self.index = index
        self.clock = clock
        self.restored: list[str] = []
        self.present = 0
        self.left_out: dict[str, str] = {}
        self.errors: list[str] = []

    def run(self, links: dict[str, RemoteFile]) -> None:
        made: dict[str, str] = {}  # store name → the target made
        records: list[Record] = []
        for rel in sorted(links):
            remote = links[rel]
            entry = rel[: -len(LINK_SUFFIX)]
            if remote.size > LINK_MAX:
                self.left_out[rel] = "too long to be a symbolic link's target: not restored"
                continue
            try:
                data = self.backend.read_bytes(remote.key)
            except StoreUnavailableError as err:
                self.errors.append(f"{rel}: {err}")
                continue
            if data is None:
                continue  # gone from the store since the listing
            target = os.fsdecode(data)
            if not inside(os.path.dirname(entry), target):
                self.left_out[rel] = (
                    f"a symbolic link pointing outside the work directory (to {shown(target) or 'nothing'}): "
                    "not restored"
                )
                continue
            if holds(os.path.dirname(entry), target):
                # `sub/up -> ..`: a loop for whatever follows links, and a step that makes
                # another link's `..` lead further up than its words say.
                self.left_out[rel] = (
                    f"a symbolic link to a folder that holds it (to {shown(target)}): not restored"
                )
                continue
            path = _here(self.workdir, entry)
            why = self._folder_ready(os.path.dirname(entry))
            if why is None:
                why = self._make(path, target)
            if why == "present":
                self.present += 1
            elif why is not None:
                self.left_out[rel] = why
                continue
            else:
                made[rel] = target
                self.restored.append(rel)
            records.append(Record(rel, len(data), os.lstat(path).st_mtime_ns, None, self.clock()))
        # Every link made, followed through the others: one that leads outside goes again.
        for rel, target in made.items():
            path = _here(self.workdir, rel[: -len(LINK_SUFFIX)])
            if _leads_inside(self.workdir, path):
                continue
            try:
                if os.readlink(path) == target:
                    os.unlink(path)
            except OSError:
                pass
            self.restored.remove(rel)
            records = [r for r in records if r.path != rel]
            self.left_out[rel] = (
                f"a symbolic link that leads outside the work directory through another link "
                f"(to {shown(target)}): not restored"
            )
        if records:
            self.index.put_many(records)
        for rel, why in self.left_out.items():
            log.warning("Restore: %s: %s", shown(rel), why)

    def _folder_ready(self, folder: str) -> str | None:
        """Make the link's folder, each part a real folder (never through a link); why not."""
        path = self.workdir
        for part in folder.split("/") if folder else []:
            path = os.path.join(path, part)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                try:
                    os.mkdir(path)
                    continue
                except OSError as err:
                    return f"its folder cannot be made here: {err.strerror or err}"
            if not stat.S_ISDIR(st.st_mode):
                return f"{shown(part)} on its way is not a folder here: not restored"
        return None

    def _make(self, path: str, target: str) -> str | None:
        try:
            os.symlink(target, path)
            return None
        except FileExistsError:
            pass
        except OSError as err:
            return f"cannot be made here: {err.strerror or err}"
        try:
            if os.readlink(path) == target:
                return "present"
        except OSError:
            pass
        return (
            f"something else of that name is here: the store's link (to {shown(target)}) "
            "is not restored over it"
        )
