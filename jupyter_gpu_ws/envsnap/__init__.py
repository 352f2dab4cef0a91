"""Environment snapshots: capture a Python environment, keep it in the store, diff it, restore it.

No Tornado or Jupyter Server here: the server's handlers, the CLI and the magic call these.
"""

from .capture import capture, content_hash, read_machine
from .diff import Change, EnvDiff, Verdict, compatibility, diff
from .errors import (
    EnvError,
    InstallerError,
    InterpreterError,
    SnapshotNotFoundError,
    SourcesNotAllowedError,
    UnsafeSnapshotError,
)
from .export import FORMATS, Export, ExportError, export_snapshot, write_export
from .lock import lock_text, requirement
from .restore import RestoreReport, restore, restore_sources
from .snapshots import (
    SaveResult,
    SnapshotInfo,
    list_snapshots,
    load_snapshot,
    save_snapshot,
)
from .validate import safe_text, validate_snapshot

__all__ = [
    "FORMATS",
    "Change",
    "EnvDiff",
    "EnvError",
    "Export",
    "ExportError",
    "InstallerError",
    "InterpreterError",
    "RestoreReport",
    "SaveResult",
    "SnapshotInfo",
    "SnapshotNotFoundError",
    "SourcesNotAllowedError",
    "UnsafeSnapshotError",
    "Verdict",
    "capture",
    "compatibility",
    "content_hash",
    "diff",
    "export_snapshot",
    "list_snapshots",
    "load_snapshot",
    "lock_text",
    "read_machine",
    "requirement",
    "restore",
    "restore_sources",
    "safe_text",
    "save_snapshot",
    "validate_snapshot",
    "write_export",
]
