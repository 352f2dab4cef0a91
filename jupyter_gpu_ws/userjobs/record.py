"""A job's record: what was started, where, and what became of each attempt, as strict JSON.

The record comes back from the store, which this machine does not control: it is read field by
field, every type and size checked, and nothing in it is run unless its signature verifies
(trust.py)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

STATES = (
    "queued",
    "running",
    "interrupted",
    "relaunched",
    "retrying",
    "finished",
    "failed",
    "stopped",
    "held",
)
# States in which the job's process runs (or is about to, between attempts).
ACTIVE = ("queued", "running", "relaunched", "retrying")
KINDS = ("command", "notebook")
JOB_ID = re.compile(r"j-[0-9a-f]{12}")
MAX_ARGS, MAX_ARG = 256, 4096
MAX_TEXT = 2000
MAX_ATTEMPTS = 100
MAX_TAIL = 200
# The records' folder under the workspace's .gpuws/ in the store, and the largest record read.
RECORDS = "jobs"
MAX_RECORD_BYTES = 2**20


class RecordError(ValueError):
    """A record that is not one this project wrote: a wrong type, an unknown key, too large."""


@dataclass
class Attempt:
    number: int
    started: float
    ended: float | None = None
    host: str = ""
    returncode: int | None = None
    reason: str | None = None
    retryable: bool | None = None
    step: int | None = None
    runs_on: str | None = (
        None  # what it ran on where not what was asked ("relaunched on 1 GPU of the 2 asked: …")
    )


@dataclass
class JobRecord:
    id: str
    name: str
    kind: str
    command: list[str]
    workspace: str
    notebook: str | None = None
    output: str | None = None
    cwd: str = ""
    gpus: int | None = None
    retries: int = 0
    state: str = "queued"
    reason: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    run: str | None = None
    step: int | None = None
    log_tail: list[str] = field(default_factory=list)
    held: bool = False
    created: float = 0.0
    updated: float = 0.0
    signature: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def signed_part(self) -> dict[str, Any]:
        """What the signature covers: what would be run and where, and whose workspace it is.
        The state and attempts change on every write and say nothing about what runs."""
        return {
            "id": self.id,
            "kind": self.kind,
            "command": self.command,
            "notebook": self.notebook,
            "cwd": self.cwd,
            "gpus": self.gpus,
            "retries": self.retries,
            "workspace": self.workspace,
            "created": self.created,
        }

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def _text(data: dict[str, Any], key: str, *, optional: bool = False, limit: int = MAX_TEXT) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise RecordError(f"{key!r} must be text of at most {limit} characters")
    return value


def _whole(data: dict[str, Any], key: str, *, optional: bool = True, minimum: int = 0) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecordError(f"{key!r} must be a whole number of at least {minimum}")
    return value


def _time(data: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e11:
        raise RecordError(f"{key!r} must be a time in seconds")
    return float(value)


def _only(data: Any, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RecordError(f"{what} must be a JSON object")
    unknown = sorted(set(data) - keys)
    if unknown:
        raise RecordError(f"{what} has unknown keys: {', '.join(map(repr, unknown[:5]))}")
    return data


def attempt_from_json(data: Any) -> Attempt:
    data = _only(data, {f for f in Attempt.__dataclass_fields__}, "an attempt")
    retryable = data.get("retryable")
    if retryable is not None and not isinstance(retryable, bool):
        raise RecordError("'retryable' must be true, false or null")
    return Attempt(
        number=_whole(data, "number", optional=False, minimum=1),
        started=_time(data, "started"),
        ended=_time(data, "ended", optional=True),
        host=_text(data, "host", limit=255),
        returncode=_returncode(data.get("returncode")),
        reason=_text(data, "reason", optional=True),
        retryable=retryable,
        step=_whole(data, "step"),
        runs_on=_text(data, "runs_on", optional=True),
    )


def _returncode(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -256 < value < 256:
        raise RecordError("'returncode' must be an exit status")
    return value


def from_json(data: Any) -> JobRecord:
    """A record read back (from the store, or a file): checked field by field."""
    data = _only(data, set(JobRecord.__dataclass_fields__), "a job record")
    job_id = _text(data, "id", limit=20)
    if not JOB_ID.fullmatch(job_id):
        raise RecordError(f"{job_id!r} is not a job id")
    kind = _text(data, "kind", limit=20)
    if kind not in KINDS:
        raise RecordError(f"'kind' must be one of {', '.join(KINDS)}")
    state = _text(data, "state", limit=20)
    if state not in STATES:
        raise RecordError(f"'state' must be one of {', '.join(STATES)}")
    command = data.get("command")
    if (
        not isinstance(command, list)
        or not command
        or len(command) > MAX_ARGS
        or not all(isinstance(a, str) and len(a) <= MAX_ARG and "\x00" not in a for a in command)
    ):
        raise RecordError("'command' must be a non-empty list of text arguments")
    attempts = data.get("attempts", [])
    if not isinstance(attempts, list) or len(attempts) > MAX_ATTEMPTS:
        raise RecordError(f"'attempts' must be a list of at most {MAX_ATTEMPTS}")
    tail = data.get("log_tail", [])
    if (
        not isinstance(tail, list)
        or len(tail) > MAX_TAIL
        or not all(isinstance(t, str) for t in tail)
    ):
        raise RecordError("'log_tail' must be a list of text lines")
    held = data.get("held", False)
    if not isinstance(held, bool):
        raise RecordError("'held' must be true or false")
    return JobRecord(
        id=job_id,
        name=_text(data, "name", limit=200),
        kind=kind,
        command=list(command),
        workspace=_text(data, "workspace", limit=1000),
        notebook=_text(data, "notebook", optional=True),
        output=_text(data, "output", optional=True),
        cwd=_text(data, "cwd", limit=4096),
        gpus=_whole(data, "gpus", minimum=1),
        retries=_whole(data, "retries", optional=False),
        state=state,
        reason=_text(data, "reason", optional=True),
        attempts=[attempt_from_json(a) for a in attempts],
        run=_text(data, "run", optional=True, limit=1000),
        step=_whole(data, "step", minimum=-1),
        log_tail=[t[:MAX_TEXT] for t in tail],
        held=held,
        created=_time(data, "created"),
        updated=_time(data, "updated"),
        signature=_text(data, "signature", optional=True, limit=128),
    )


def stored_records(store: Any) -> list[tuple[str, Any]]:
    """Every record file of a workspace (`layout.Store`): its name and its JSON (None where it
    is not JSON or too large: from_json then refuses it)."""
    found: list[tuple[str, Any]] = []
    for remote in store.backend.list(store.state_key(RECORDS)):
        name = remote.key.rsplit("/", 1)[-1]
        if not name.endswith(".json"):
            continue
        data = store.backend.read_bytes(remote.key) if remote.size <= MAX_RECORD_BYTES else None
        try:
            found.append((name, json.loads(data) if data is not None else None))
        except ValueError:
            found.append((name, None))
    return found
