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
