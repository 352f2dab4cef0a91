"""Which job records may run: each is signed with HMAC-SHA256 under a key kept outside the
store, so a record someone else wrote into the store (or changed there) is never run unasked."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from .record import JobRecord

KEY_ENV = "GPUWS_JOB_KEY"


class JobKeyError(OSError):
    """The job key cannot be read or made (the message says where and why)."""


def key_path() -> Path:
    """Where the key lives when the environment gives none: the user's configuration folder."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "jupyter_gpu_ws" / "job-key"


def job_key() -> bytes:
    """`$GPUWS_JOB_KEY`, else the key file, made on first use with mode 0600 (only its owner
    reads it). Another machine of the same user needs the same key to relaunch this one's jobs
    without asking: set GPUWS_JOB_KEY there (docs/jobs.md)."""
    given = os.environ.get(KEY_ENV)
    if given:
        return given.encode()
    path = key_path()
    try:
        text = path.read_text(encoding="ascii").strip()
        if text:
            return text.encode()
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as err:
        raise JobKeyError(f"Cannot read the job key {path}: {err}") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return path.read_text(encoding="ascii").strip().encode()
    except OSError as err:
        raise JobKeyError(f"Cannot make the job key {path}: {err.strerror or err}") from None
    text = secrets.token_hex(32)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text + "\n")
    return text.encode()


def _canonical(record: JobRecord) -> bytes:
    body: dict[str, Any] = record.to_json()
    body.pop("signature", None)
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign(record: JobRecord, key: bytes) -> None:
    record.signature = hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()


def why_untrusted(record: JobRecord, key: bytes, workspace: str) -> str | None:
    """None when this machine's key signed the record for this workspace; else why it is not
    run without the user's say, in their words."""
    if not record.signature:
        return "not signed"
    expected = hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, record.signature):
        return "signed with another key, or changed in the store since"
    if record.workspace != workspace:
        return f"started in another workspace ({record.workspace})"
    return None
