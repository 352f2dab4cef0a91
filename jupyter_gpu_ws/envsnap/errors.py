"""What can go wrong with environment snapshots, as classes the app maps to HTTP codes and the CLI to one line."""

from __future__ import annotations


class EnvError(Exception):
    """Base: the message is one clear line for the user."""


class InterpreterError(EnvError):
    """The Python interpreter to capture or restore is missing or does not run."""


class SnapshotNotFoundError(EnvError):
    """The store holds no snapshot, or none with the asked id."""


class InstallerError(EnvError):
    """Neither uv nor pip can install into the target interpreter."""


class UnsafeSnapshotError(EnvError):
    """A snapshot from the store has an entry no installer wrote (a name that is an option, a
    version that is not PEP 440, an origin URL with spaces): it is refused whole."""

    def __init__(self, reason: str, snapshot_id: str | None = None) -> None:
        self.reason = reason
        where = f"The snapshot {snapshot_id}" if snapshot_id else "The snapshot"
        super().__init__(f"{where} is refused: {reason}; nothing of it is installed or shown")


class SourcesNotAllowedError(EnvError):
    """Restoring would fetch and build packages from VCS or URL sources, which runs their build
    code: only with the user's explicit `allow_sources`."""

    def __init__(self, sources: list[dict[str, str]]) -> None:
        self.sources = sources
        listed = "; ".join(f"{s['name']} {s['version']} from {s['source']}" for s in sources[:5])
        more = f" and {len(sources) - 5} more" if len(sources) > 5 else ""
        super().__init__(
            f"Restoring would fetch and build {len(sources)} package{'s' * (len(sources) != 1)} from their "
            f"sources (their build code runs here): {listed}{more}. Allow sources to do so (the restore "
            "dialog's checkbox, allow_sources, --allow-sources), or keep wheels of them in the store. "
            "Nothing was installed."
        )
