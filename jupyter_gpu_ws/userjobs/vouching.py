"""What a successor checks before it relaunches a job by itself, past the record's signature
(trust.py): that the record is not an older copy than one this runtime has seen (a replay), that
it was signed recently enough (`relaunch_window`: a copy put back from long ago waits for the
user), and that the code the restore brought back is the code the record's key signed
(manifest.py). Anything else waits for the user's approval, with the reason and the files."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..diskio import replace_whole
from ..store.names import shown
from . import manifest
from .record import JobRecord

log = logging.getLogger(__name__)

SEEN_FILE = "jobs-seen.json"
MAX_SEEN = 100_000


class SeenRecords:
    """The newest `seq` of each job's record this runtime has read or written, kept in its
    state folder so that a server started again on the same machine remembers it too: an older
    signed copy of a record put back into the store is refused, not run. A job forgotten here
    is remembered one past its last record, so no copy of it comes back."""

    def __init__(self, state_dir: Path | None) -> None:
        self.path = state_dir / SEEN_FILE if state_dir is not None else None
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._dirty = False
        if self.path is not None:
            try:
                data = json.loads(self.path.read_bytes())
                if isinstance(data, dict):
                    self._seen = {
                        k: v
                        for k, v in list(data.items())[:MAX_SEEN]
                        if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                    }
            except FileNotFoundError:
                pass
            except (OSError, ValueError, RecursionError) as err:  # rebuilt from what is seen next
                log.warning("gpuws: %s could not be read (%s); starting it afresh", self.path, err)

    def newest(self, job_id: str) -> int:
        with self._lock:
            return self._seen.get(job_id, -1)

    def saw(self, job_id: str, seq: int) -> None:
        with self._lock:
            if seq > self._seen.get(job_id, -1):
                self._seen[job_id] = seq
                self._dirty = True

    def save(self) -> None:
        """Written whole or not at all; a failure is logged (the store's copy still holds)."""
        if self.path is None:
            return
        with self._lock:
            if not self._dirty:
                return
            text = json.dumps(self._seen, sort_keys=True).encode()
            self._dirty = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_whole(self.path, lambda f: f.write(text))
        except OSError as err:
            with self._lock:
                self._dirty = True
            log.warning("gpuws: %s not written: %s", self.path, err)


@dataclass
class Verdict:
    """Why a record does not relaunch by itself (None: it may), and the files that differ."""

    reason: str | None = None
    changed: list[tuple[str, str]] = field(default_factory=list)
    changed_more: int = 0


def judge(
    record: JobRecord, code_now: manifest.CodeManifest | None, window: float, now: float
) -> Verdict:
    """Whether a signed, interrupted record relaunches by itself here and now."""
    age = now - record.updated
    if age > window:
        return Verdict(
            f"its record was last written {_age(age)} ago, longer than relaunch_window "
            f"({_age(window)}) allows without you: restart it to go on"
        )
    if record.code is None:
        return Verdict("its record holds no list of the code it ran: look at it, then restart it")
    if code_now is None:
        return Verdict("its code could not be read here")
    signed = manifest.from_json(record.code)
    changed, more = manifest.changes(signed, code_now)
    if changed or more:
        # Names from the work directory, which the store filled: shown escaped (a line break
        # in one would forge a line of the server's log, a direction mark turn the text).
        names = ", ".join(f"{shown(path)} ({change})" for path, change in changed[:5])
        count = len(changed) + more
        return Verdict(
            f"its code changed since your key signed it: {names or f'{count} file(s)'}"
            + (f" and {count - 5} more" if len(changed) > 5 else ""),
            changed,
            more,
        )
    return Verdict()


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"
