"""A job run away from its runtime (the pod of `run --export k8s`, or a command started by hand on
another machine with the same store) and its own area of the workspace in the store, which it alone
writes, under a lease of its own: the runtime's lease is never needed, so the runtime that
exported it writes on undisturbed meanwhile.

    <store>/<workspace>/.gpuws/elsewhere/<job id>/files/<path>          what the job created or changed
    <store>/<workspace>/.gpuws/elsewhere/<job id>/.gpuws/started.json   written once, before its first restore
    <store>/<workspace>/.gpuws/elsewhere/<job id>/.gpuws/job.json       its state, step, host, command
    <store>/<workspace>/.gpuws/elsewhere/<job id>/.gpuws/lease.json     its own lease

To the sync engine the area is a workspace of its own: its store is the workspace's
`.gpuws/elsewhere` folder, its name the job's id, and its baseline the record of the restore the job
began from, so that only what the job created or changed is sent, never the workspace again.
`started.json` is written before that restore lists the workspace: its time in the store (the
store's own clock) is the job's start, against which the runtime that brings the results home tells
a file its user changed meanwhile (bringhome.py).

`restore_for_job` is `jupyter gpuws restore --job ID`, `run_job` is `jupyter gpuws sync --job ID --
COMMAND …`: the two commands of the exported pod's containers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

from ..checkpoints.files import folder_order
from ..store.backend import PreconditionFailed
from ..store.errors import SyncError
from ..store.layout import Store
from ..sync.engine import SyncEngine, SyncSettings
from ..sync.restore import RestoreReport, newest_checkpoints

AREA = "elsewhere"
STARTED = "started.json"
RECORD = "job.json"
JOB_ID = re.compile(r"^j-[0-9a-f]{12}$")
# Seconds between two passes while the command runs: what a pod killed outright loses at most.
EVERY = 60.0
# Versions of an output the area keeps when the job writes it again (a log, a metrics file).
KEEP_VERSIONS = 2
# How long the last pass waits for the area's lease: a previous attempt's (a container killed
# and restarted) runs out first, a lease time at most.
LEASE_WAIT = 120.0
# The signals the container's first process gets (the kubelet's SIGTERM, Ctrl-C by hand),
# passed on to the command, which checkpoints on them (gpuws.track()).
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def new_job_id() -> str:
    """An id in the form of the server's jobs' (`j-` and 12 hex digits)."""
    return f"j-{uuid.uuid4().hex[:12]}"


def check_job_id(job_id: str) -> str:
    if not JOB_ID.match(job_id or ""):
        raise ValueError(
            f"Not a job id: {job_id!r} (j- and 12 hex digits, as `jupyter gpuws run --export k8s` "
            "writes it)"
        )
    return job_id


def area_url(store_url: str, workspace: str) -> str:
    """The store URL of the workspace's jobs' areas: its `.gpuws/elsewhere` folder."""
    tail = f"{workspace}/.gpuws/{AREA}"
    if "://" not in store_url:
        return os.path.join(store_url, tail)
    parts = urlsplit(store_url)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{tail}"))


def area_settings(workspace: SyncSettings, job_id: str, baseline: str | None) -> SyncSettings:
    """The engine settings of the job's area: the workspace's store, options and encryption,
    the area's URL and the job's id for a workspace; `baseline`: the record of the workspace's
    restore the job began from (None: a restore of the area itself, which sends nothing)."""
    return dataclasses.replace(
        workspace,
        store_url=area_url(workspace.store_url, workspace.workspace),
        workspace=check_job_id(job_id),
        baseline=baseline,
        create_store=True,  # a folder of the workspace, which is there: never a drive to mistake
        keep_versions=KEEP_VERSIONS,
    )


def mark_start(store: Store, job_id: str) -> None:
    """`started.json`, once: a later attempt (a container restarted, a new pod) keeps the time
    the job began at, in the store."""
    data = json.dumps({"id": job_id, "host": socket.gethostname(), "started": time.time()})
    try:
        store.backend.write_if(store.state_key(STARTED), data.encode(), None)
    except PreconditionFailed:
        pass


def restore_for_job(
    workspace: SyncEngine, area: SyncEngine, progress: Any = None, cancel: Any = None
) -> tuple[RestoreReport, RestoreReport]:
    """The job's start in a new folder: its start marked, then its own files (the newest
    checkpoints and outputs of an earlier attempt) and the workspace's others. Returns the
    restores' reports: the area's, the workspace's."""
    mark_start(area.store, area.settings.workspace)
    own = area.restore(progress, cancel)
    rest = workspace.restore(progress, cancel, leave=set(area.index.paths()))
    return own, rest


def newest_step(paths: Iterable[str]) -> tuple[int | None, dict[str, str]]:
    """The highest step of the newest complete checkpoints among `paths`, and each run folder's
    newest checkpoint folder."""
    newest = newest_checkpoints(paths)
    steps = [order[0] for folder in newest.values() if (order := folder_order(_name(folder)))]
    return (max(steps) if steps else None), newest


def _name(folder: str) -> str:
    return folder.rpartition("/")[2]


class JobArea:
    """The job's area as its own process writes it: passes of what the job created or changed,
    and its record."""

    def __init__(self, engine: SyncEngine, record: dict[str, Any], say: TextIO) -> None:
        self.engine = engine
        self.record = record
        self.say = say
        self.last_error: str | None = None

    def send(self, final: bool) -> str | None:
        """One pass (the last one sends what is still being written too, and waits for the
        lease where an earlier attempt's has not run out); the record follows. Returns why it
        failed, or None."""
        if final:
            deadline = time.monotonic() + LEASE_WAIT
            while not self.engine.writable and time.monotonic() < deadline:
                time.sleep(0.2)
        try:
            report = self.engine.sync(None, durable=final)
            error = report.errors[0] if report.errors else None
        except SyncError as err:
            error = str(err)
        if error is not None and error != self.last_error:
            print(f"jupyter gpuws: the job's files were not all sent: {error}", file=self.say)
        self.last_error = error
        self.write()
        return error

    def write(self, **changes: Any) -> None:
        self.record.update(changes)
        files, size = self.engine.index.count_and_bytes()
        step, newest = newest_step(self.engine.index.paths())
        self.record.update(
            updated=time.time(),
            step=step,
            checkpoints=newest,
            outputs={"files": files, "bytes": size},
            error=self.last_error,
        )
        try:
            self.engine.write_state(RECORD, self.record)
        except SyncError:
            pass  # not the writer yet (an earlier attempt's lease): the next pass writes it


def run_job(
    engine: SyncEngine,
    command: list[str],
    record: dict[str, Any],
    every: float = EVERY,
    say: TextIO = sys.stderr,
    cwd: str | None = None,
) -> int:
    """Run `command` here (in `cwd`, else this process's folder) as the job's own process, its
    output this process's, the signals this process gets passed on to it; its area gets what it created or changed every `every` seconds
    and once more at its end, with its record. Returns the command's exit status (128 + N for a
    signal, 127 when it cannot start), or 1 for a command that succeeded whose last pass failed,
    so that a cluster runs it again."""
    engine.open(take_over=True)  # the job's own area: an earlier attempt's lease is waited out
    area = JobArea(engine, record, say)
    try:
        area.write(state="running", started=time.time(), returncode=None, ended=None)
        try:
            child = subprocess.Popen(command, cwd=cwd)
        except OSError as err:
            print(f"jupyter gpuws: error: cannot start {command[0]}: {err.strerror}", file=say)
            area.send(final=True)
            area.write(state="ended", returncode=127, ended=time.time())
            return 127
        # Kept until the last send is done: a second SIGTERM must not cut it short.
        previous = {sig: signal.signal(sig, _pass_on(child)) for sig in PASSED_ON}
        try:
            while True:
                try:
                    returncode = child.wait(timeout=every)
                    break
                except subprocess.TimeoutExpired:
                    area.send(final=False)
            failed = area.send(final=True)
            area.write(state="ended", returncode=returncode, ended=time.time())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        engine.close()
    status = 128 - returncode if returncode < 0 else returncode
    return 1 if failed is not None and status == 0 else status


def _pass_on(child: subprocess.Popen[bytes]) -> Any:
    def handler(sig: int, _frame: Any) -> None:
        if child.poll() is None:
            child.send_signal(sig)

    return handler
