"""Which work directory, store and workspace a `jupyter gpuws` command means, by one rule for every
command: its flags first; else the running server whose work directory is this folder or holds
it; else the work directory this machine synced that holds it; else an error saying what to pass.

A server is asked for its settings (`GET /gpuws/api/sync`: workdir, store_url, workspace,
state_dir); this machine's records are the sync's own (sync/index.py, in the state folder).
Neither gives the store's options (they may hold credentials): `--storage-option` and the
environment say those, as for any command.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from .defaults import default_state_dir, default_store_url
from .store.errors import SyncError
from .store.redact import is_redacted, redact
from .sync.index import synced_folders

# What a command cannot do without: a work directory (and its store and workspace), a
# workspace (and its store), or only a store.
Needs = Literal["workdir", "workspace", "store"]

# Seconds a running server has to say its settings before it is passed over.
SERVER_TIMEOUT = 5.0


class NoWorkspaceHereError(SyncError):
    """Neither the flags nor a server nor this machine's record say what the command means."""


@dataclass(frozen=True)
class KnownFolder:
    """A work directory known here, with the store and workspace it syncs to."""

    workdir: str
    store_url: str
    workspace: str
    state_dir: str | None  # a server's own record folder; None for this machine's default
    source: str  # in the user's words, for the line that says what was resolved


@dataclass(frozen=True)
class Resolved:
    workdir: str | None
    store_url: str | None
    # None: the work directory's default name, which the caller derives (it asks the store
    # whether only the name an earlier version derived is there).
    workspace: str | None
    state_dir: str
    source: str | None  # where what the flags left out came from; None when they said it all


def resolve(
    needs: Needs,
    workdir: str | None = None,
    store: str | None = None,
    workspace: str | None = None,
    state_dir: str | None = None,
    cwd: str | None = None,
    runtime_dir: str | None = None,
) -> Resolved:
    """The work directory, store and workspace a command means (see the module's rule).

    A folder named with `workdir` must be the work directory itself to take a server's or a
    record's settings; the current folder may be anywhere inside one. With a work directory or a
    workspace named, a store not named is the default one ($GPUWS_STORE, else the local folder),
    as a server started there would use; with nothing named, only $GPUWS_STORE."""
    named = os.path.abspath(os.path.expanduser(workdir)) if workdir else None
    said_all = store and (workspace or needs == "store") and (named or needs != "workdir")
    here = cwd or os.getcwd()
    known = (
        None
        if said_all
        else known_folder(
            named or here, exact=named is not None, state_dir=state_dir, runtime_dir=runtime_dir
        )
    )
    workdir = named or (known.workdir if known else None)
    if not store and known and is_redacted(known.store_url):
        # A server never shows a password in its store URL: this machine's record of that
        # folder may hold the whole URL; otherwise the user gives it.
        record = _innermost(
            os.path.realpath(known.workdir), True, _records(known.state_dir or state_dir)
        )
        if record is None or redact(record.store_url) != known.store_url:
            raise NoWorkspaceHereError(
                f"The store URL of the server that syncs {known.workdir} holds a secret, which "
                f"the server never shows ({known.store_url}): pass --store URL"
            )
        known = KnownFolder(
            known.workdir, record.store_url, known.workspace, known.state_dir, known.source
        )
    store = (
        store
        or (known.store_url if known else None)
        or (default_store_url() if named or workspace else os.environ.get("GPUWS_STORE"))
    )
    workspace = workspace or (known.workspace if known else None)
    wanted = [
        flag
        for flag, lacking in (
            ("--workdir DIR", needs == "workdir" and workdir is None),
            (
                "--workspace NAME (or --workdir DIR)",
                needs == "workspace" and workspace is None and workdir is None,
            ),
            (
                "--store URL (or set GPUWS_STORE)" if needs == "store" else "--store URL",
                store is None,
            ),
        )
        if lacking
    ]
    if wanted:
        raise NoWorkspaceHereError(
            f"{here} is not in a work directory (of a running Jupyter Server with this "
            f"extension, or one this machine synced): pass {' and '.join(wanted)}"
        )
    return Resolved(
        workdir,
        store,
        workspace,
        state_dir or (known.state_dir if known else None) or default_state_dir(),
        known.source if known else None,
    )


def known_folder(
    folder: str, exact: bool, state_dir: str | None = None, runtime_dir: str | None = None
) -> KnownFolder | None:
    """The work directory that is `folder` (with `exact`) or holds it: a running server's, else
    the one this machine synced; the innermost where several hold it."""
    folder = os.path.realpath(folder)
    return _innermost(folder, exact, _servers(runtime_dir)) or _innermost(
        folder, exact, _records(state_dir)
    )


def _innermost(folder: str, exact: bool, known: list[KnownFolder]) -> KnownFolder | None:
    fitting = [k for k in known if _holds(os.path.realpath(k.workdir), folder, exact)]
    return max(
        fitting, key=lambda k: len(os.path.realpath(k.workdir)), default=None
    )  # the first of equals


def _holds(workdir: str, folder: str, exact: bool) -> bool:
    return folder == workdir or (not exact and folder.startswith(workdir.rstrip(os.sep) + os.sep))


def _servers(runtime_dir: str | None) -> list[KnownFolder]:
    """The running servers with this extension, as each says where it syncs; a server that does
    not answer, or has no such settings (without this extension, or older), is passed over."""
    from .client import ServerUnreachable, request, running_servers

    found = []
    for url, token in running_servers(runtime_dir):
        try:
            answer = request(url, token, "gpuws/api/sync", timeout=SERVER_TIMEOUT)
        except (ServerUnreachable, ValueError):
            continue
        settings = [
            answer.get(key) if isinstance(answer, dict) else None
            for key in ("workdir", "store_url", "workspace", "state_dir")
        ]
        if all(isinstance(value, str) and value for value in settings):
            workdir, store_url, workspace, own_state = settings
            found.append(
                KnownFolder(
                    workdir,
                    store_url,
                    workspace,
                    own_state,
                    f"as the server at {url} syncs {workdir}",
                )
            )
    return found


def _records(state_dir: str | None) -> list[KnownFolder]:
    return [
        KnownFolder(
            f.workdir, f.store_url, f.workspace, None, f"as this machine last synced {f.workdir}"
        )
        for f in synced_folders(state_dir or default_state_dir())
    ]
