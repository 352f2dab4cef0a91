"""Environment snapshots: capture a Python environment, keep it in the store, diff it, restore it.

No Tornado or Jupyter Server here: the server's handlers, the CLI and the magic call these.
"""

from .capture import capture, content_hash, read_machine
from .diff import Change, EnvDiff, Verdict, compatibility, diff
from .errors import EnvError, InstallerError, InterpreterError, SnapshotNotFoundError
from .lock import lock_text, requirement
from .restore import RestoreReport, restore
from .snapshots import (
    SaveResult,
    SnapshotInfo,
    list_snapshots,
    load_snapshot,
    save_snapshot,
)

__all__ = [
    "Change", "EnvDiff", "EnvError", "InstallerError", "InterpreterError", "RestoreReport", "SaveResult",
    "SnapshotInfo", "SnapshotNotFoundError", "Verdict", "capture", "compatibility", "content_hash", "diff",
    "list_snapshots", "load_snapshot", "lock_text", "read_machine", "requirement", "restore", "save_snapshot",
]
