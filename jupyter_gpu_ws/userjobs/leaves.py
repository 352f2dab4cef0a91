"""The leaf modules the manager uses (joblog, failure, notebook), in one place: i31-leaves'
modules where they are merged, the stand-ins until then."""

from __future__ import annotations

try:
    from .failure import Outcome, classify, oom_kills
    from .joblog import JobLog
except ImportError:  # before i31-leaves is merged
    from ._standins import JobLog, Outcome, classify, oom_kills  # type: ignore[assignment]

try:
    from .notebook import output_path
except ImportError:
    from pathlib import Path

    def output_path(notebook: Path) -> Path:  # type: ignore[misc]
        return notebook.with_name(notebook.name[: -len(".ipynb")] + ".job.ipynb")

__all__ = ["JobLog", "Outcome", "classify", "oom_kills", "output_path"]
