"""Defaults shared by the server extension and the command line (no Tornado here)."""

from __future__ import annotations

import getpass
import hashlib
import os
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir


def default_store_url() -> str:
    """`GPUWS_STORE`, or the embedded default: a local folder that needs no credentials."""
    return os.environ.get("GPUWS_STORE") or embedded_store_url()


def embedded_store_url() -> str:
    """The embedded default store: a folder in Jupyter's data directory, made on first use."""
    return (Path(jupyter_data_dir()) / "gpuws" / "store").as_uri()


def is_embedded_store(url: str) -> bool:
    """Whether `url` names the embedded default store (made by itself, kept out of the mirror)."""
    path = local_store_path(url.strip())
    return path is not None and os.path.abspath(os.path.expanduser(path)) == local_store_path(
        embedded_store_url()
    )


def default_state_dir() -> str:
    """Where the local record of what was synced lives: local disk, outside the work directory."""
    return str(Path(jupyter_data_dir()) / "gpuws" / "state")


def local_store_path(url: str) -> str | None:
    """The folder behind a local store URL, for showing its disk; None for remote stores."""
    if url.startswith("file://"):
        return url[len("file://") :]
    if "://" not in url and "::" not in url:
        return url
    return None


def derive_workspace_name(workdir: str) -> str:
    """`<user>-<folder>`: the same for the same project folder on any machine, wherever the
    folder sits (a fresh machine often mounts it elsewhere)."""
    return _safe(f"{_user()}-{Path(workdir).name or 'root'}")


def legacy_workspace_name(workdir: str) -> str:
    """The name versions before 0.2 derived, `<user>-<folder>-<hash of the absolute path>`: a
    workspace with this name and none with the new one keeps being used."""
    digest = hashlib.sha1(os.path.abspath(workdir).encode("utf-8", "surrogateescape")).hexdigest()[
        :8
    ]
    return f"{derive_workspace_name(workdir)}-{digest}"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "user"


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
