"""A rank of a run that is not a kernel (launched by `torchrun` from a Jupyter terminal, by
`!torchrun` in a notebook, or by the server as a job: userjobs/) registers with the Jupyter server its shell came from, the way a
kernel's agent does: the server lists the run and can ask it for a checkpoint (protocol.py)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import protocol

log = logging.getLogger(__name__)

# The job a process runs as (the server's userjobs/ sets it): its run is the job's.
JOB_ID_ENV = "GPUWS_JOB_ID"
_JOB_ID = re.compile(r"j-([0-9a-f]{12})")


class ProcessAgent:
    """The registration file of one rank, rewritten on each change of its tracker, and the
    request file the server writes, watched by a thread."""

    def __init__(self, tracker: Any, folder: Path, name: str, server_id: str) -> None:
        self.tracker = tracker
        self.server_id = server_id
        self.file = protocol.registration_file(folder, name)
        self.request_file = protocol.request_file(folder, name)
        self.process = protocol.process_identity()
        self.command = (
            [os.path.basename(sys.argv[0])] + sys.argv[1:8] if sys.argv and sys.argv[0] else []
        )
        self._handled: str | None = None
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        tracker.on_change = self.publish
        self.publish()
        threading.Thread(
            target=protocol.watch_requests,
            args=(self.request_file, self._on_request, self._stop),
            name="gpuws-process-agent",
            daemon=True,
        ).start()

    def _on_request(self, request_id: str) -> None:
        if request_id != self._handled and self.tracker.objects:
            self._handled = request_id
            self.tracker.request(
                request_id
            )  # rank 0 agrees a step with the others at its next step()

    def state(self) -> dict[str, Any]:
        return {
            "kind": "process",
            "server_id": self.server_id,
            **self.process,
            "command": self.command,
            "job": os.environ.get(JOB_ID_ENV),
            "updated": time.time(),
            **self.tracker.describe(),
        }

    def publish(self) -> None:
        with self._write_lock:
            if self._stop.is_set():
                return
            try:
                # A server's folder is its own to make: once the server has gone, nobody can ask.
                tmp = self.file.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(self.state(), default=str))
                os.replace(tmp, self.file)
            except OSError as err:
                log.debug("gpuws: cannot write %s: %s", self.file, err)

    def close(self) -> None:
        """The process ends (its tracker has finished its last checkpoint): nothing left to ask."""
        with self._write_lock:
            self._stop.set()
            self.file.unlink(missing_ok=True)
            self.request_file.unlink(missing_ok=True)


def start_for(tracker: Any) -> ProcessAgent | None:
    """Register this rank with the server it came from; None when there is none to tell (no
    server identity in the environment, the server gone) or a kernel's agent does it already."""
    server_id = os.environ.get(protocol.SERVER_ID_ENV)
    if (
        not protocol.valid_server_id(server_id)
        or tracker.run_id is None
        or protocol.kernel_identity()[0] is not None
    ):
        return None
    assert server_id is not None
    folder = protocol.registrations_folder(protocol.runtime_folder(), server_id)
    if not (folder / protocol.SERVER_FILE).is_file():
        return None
    name = protocol.process_name(tracker.run_id, tracker.rank)
    agent = ProcessAgent(tracker, folder, name, server_id)
    if os.environ.get(JOB_ID_ENV) and tracker.rank == 0:
        # A job's run shows its step and ETA: rank 0 (the one that records) streams its progress.
        # Set once the registration is written: a stream without one is of a process that ended.
        tracker.training.stream = protocol.training_file(folder, name)
    return agent


def start_for_job(tracker: Any) -> ProcessAgent | None:
    """A plain process the server runs as a job (`python train.py`, or a notebook's kernel under
    the job's nbclient) registers as the job's run, named after the job: the server lists it,
    reads its training stream and asks it for checkpoints as it does a torchrun rank's."""
    match = _JOB_ID.fullmatch(os.environ.get(JOB_ID_ENV) or "")
    if match is None or getattr(tracker, "agent", None) is not None:
        return None
    server_id = os.environ.get(protocol.SERVER_ID_ENV)
    if not protocol.valid_server_id(server_id):
        return None
    assert server_id is not None
    folder = protocol.registrations_folder(protocol.runtime_folder(), server_id)
    if not (folder / protocol.SERVER_FILE).is_file():
        return None
    tracker.run_id, tracker.rank = match.group(1), 0
    name = protocol.process_name(tracker.run_id, 0)
    tracker.agent = ProcessAgent(tracker, folder, name, server_id)
    # Set once the registration is written: a stream without one is of a process that ended.
    tracker.training.stream = protocol.training_file(folder, name)
    return tracker.agent
