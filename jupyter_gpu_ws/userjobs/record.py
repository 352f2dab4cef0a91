"""A job's record: what was started, where, and what became of each attempt, as strict JSON.

The record comes back from the store, which this machine does not control: it is read field by
field, every type and size checked, and nothing in it is run unless its signature verifies
(trust.py)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

from .. import strictjson
from ..apischema import spec
from ..checkpoints.files import MAX_RUN_NAME
from . import manifest

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
MAX_TEXT = 2000
MAX_ATTEMPTS = 100
MAX_TAIL = 200
# The records' folder under the workspace's .gpuws/ in the store, and the largest record read:
# room for a command at its limits written with every character escaped, and for its code's
# manifest (manifest.LIST_BYTES).
RECORDS = "jobs"
MAX_RECORD_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Limits:
    """What a job may be, declared once in openapi.yaml (UserJobRequest) for the API and the
    records alike: a job the API took is never one its record's reader refuses."""

    args: int
    arg: int
    args_total: int
    name: int
    retries: int
    gpus: int
    path: int


@cache
def limits() -> Limits:
    fields = spec()["components"]["schemas"]["UserJobRequest"]["properties"]
    command = fields["command"]
    return Limits(
        args=command["maxItems"],
        arg=command["items"]["maxLength"],
        args_total=command["x-max-total-length"],
        name=fields["name"]["maxLength"],
        retries=fields["retries"]["maximum"],
        gpus=fields["gpus"]["maximum"],
        path=fields["cwd"]["maxLength"],
    )


def command_problem(command: Any) -> str | None:
    """Why `command` is not one a job may run (None when it may)."""
    bounds = limits()
    if (
        not isinstance(command, list)
        or not 0 < len(command) <= bounds.args
        or not all(
            isinstance(a, str) and 0 < len(a) <= bounds.arg and "\x00" not in a for a in command
        )
        or sum(len(a) for a in command) > bounds.args_total
    ):
        return (
            f"command must be a list of 1 to {bounds.args} arguments, each 1 to {bounds.arg} "
            f"characters without NUL, {bounds.args_total} in all"
        )
    return None


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
    # Its run, named when it was asked for (every attempt tracks it: GPUWS_RUN); None in a
    # record from before runs were named by job.
    run: str | None = None
    # Where it was asked to resume an existing run: that run's newest checkpoint's step then.
    resumed_step: int | None = None
    step: int | None = None
    log_tail: list[str] = field(default_factory=list)
    held: bool = False
    created: float = 0.0
    updated: float = 0.0
    # One more at every write: a copy of the record older than one a runtime has seen is refused.
    seq: int = 0
    # The code its newest attempt started with (manifest.py), as its JSON.
    code: dict[str, Any] | None = None
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
        raise RecordError(f"{key!r} must be text of at most {limit} characters without NUL")
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


def _bounded(data: dict[str, Any], key: str, low: int, high: int, *, optional: bool = True) -> Any:
    value = _whole(data, key, optional=optional, minimum=low)
    if value is not None and value > high:
        raise RecordError(f"{key!r} must be at most {high}")
    return value


def from_json(data: Any) -> JobRecord:
    """A record read back (from the store, or a file): checked field by field."""
    bounds = limits()
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
    problem = command_problem(command)
    if problem:
        raise RecordError(problem)
    code = data.get("code")
    if code is not None:
        try:
            code = manifest.from_json(code).to_json()
        except manifest.ManifestError as err:
            raise RecordError(str(err)) from None
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
        name=_text(data, "name", limit=bounds.name),
        kind=kind,
        command=list(command),
        workspace=_text(data, "workspace", limit=1000),
        notebook=_text(data, "notebook", optional=True, limit=bounds.path),
        output=_text(data, "output", optional=True, limit=bounds.path + 20),
        cwd=_text(data, "cwd", limit=bounds.path),
        gpus=_bounded(data, "gpus", 1, bounds.gpus),
        retries=_bounded(data, "retries", 0, bounds.retries, optional=False),
        state=state,
        reason=_text(data, "reason", optional=True),
        attempts=[attempt_from_json(a) for a in attempts],
        run=_text(data, "run", optional=True, limit=MAX_RUN_NAME),
        resumed_step=_whole(data, "resumed_step"),
        step=_whole(data, "step", minimum=-1),
        log_tail=[t[:MAX_TEXT] for t in tail],
        held=held,
        created=_time(data, "created"),
        updated=_time(data, "updated"),
        seq=_whole(data, "seq") or 0,
        code=code,
        signature=_text(data, "signature", optional=True, limit=128),
    )


def stored_records(store: Any) -> list[tuple[str, Any, str | None]]:
    """Every record file of a workspace (`layout.Store`): its name, its JSON, and why it cannot
    be read where it cannot (too large, not strict JSON, nested too deeply, a link or a special
    file; its JSON is then None). One file's fault is that file's alone."""
    found: list[tuple[str, Any, str | None]] = []
    folder = store.state_key(RECORDS)
    for remote in store.backend.list(folder):
        name = remote.key.rsplit("/", 1)[-1]
        if not name.endswith(".json"):
            continue
        if remote.size > MAX_RECORD_BYTES:
            found.append((name, None, f"larger than {MAX_RECORD_BYTES // 2**20} MiB"))
            continue
        try:
            data = store.backend.read_bytes(remote.key)
        except FileNotFoundError:
            continue  # gone since it was listed
        if len(data) > MAX_RECORD_BYTES:
            found.append((name, None, f"larger than {MAX_RECORD_BYTES // 2**20} MiB"))
            continue
        try:
            found.append((name, strictjson.loads(data), None))
        except ValueError as err:
            found.append((name, None, str(err)))
    # A link, FIFO or device where a record should be is never opened (store/local.py), and
    # listed with why, like any other record that cannot be read.
    for key, why in sorted(store.backend.skipped.items()):
        if key.startswith(folder + "/") and "/" not in key[len(folder) + 1 :]:
            found.append((key[len(folder) + 1 :], None, why))
    return found
