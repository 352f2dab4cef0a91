"""The messages between the server and the kernel agent, and the files that carry them, defined
once for both sides.

They live in the runtime folder a server shares with its kernels, and with every other Jupyter
server of the same user on the machine:

    <runtime>/gpuws-agents/<server id>/server.json            the server: pid, process start, process space
    <runtime>/gpuws-agents/<server id>/<kernel id>.json       a kernel's registration
    <runtime>/gpuws-agents/<server id>/<kernel id>.request.json
    <runtime>/gpuws-agents/<server id>/<kernel id>.training.jsonl   the kernel's training progress
    <runtime>/gpuws-agents/<kernel id>.json                   a kernel without a server identity
    <runtime>/gpuws-agents/<kernel id>.request.json
    <runtime>/gpuws-agents/<kernel id>.training.jsonl
    <runtime>/gpuws-agents/<server id>/proc-<run id>-<rank>.json          one rank of a torchrun run
    <runtime>/gpuws-agents/<server id>/proc-<run id>-<rank>.request.json

- `<server id>`: each server process makes a fresh one and exports it to its kernels as
  `GPUWS_SERVER_ID` (they inherit the server's environment). A kernel started without it (or
  with a malformed one) registers at the top, as before servers had folders; a server reads
  there only the kernels it runs.
- The registration: the agent's state, rewritten whenever it changes (what it tracks, its last
  checkpoint, a pending request), with the kernel process's identity (`process_identity`).
- The request: `{"request_id": ...}`, written by the server to ask for a checkpoint. An agent
  thread watches it, so the request arrives while a training cell runs, on any kernel, and the
  kernel's Jupyter messaging is left alone.
- The training stream: JSON lines the kernel appends a few times a second while a loop steps
  (`PROGRESS` records: the last step, its time, the scalars' mean/min/max since the previous
  record, non-finite values), a `RUN` record when the run's name or total changes, a `RESUMED`
  record (with the run's history up to the checkpoint) after `gpuws.resume()`, and one (with the
  history up to the step before) where a new segment starts: the loop's first step without a
  resume, or a step back; the server judges anomalies within a segment only. When it grows
  past `TRAINING_STREAM_MAX` bytes the kernel replaces it by one `SNAPSHOT` record (the whole
  history), so the server, which reads it from where it stopped, starts over from that.
- A process that is not a kernel (each rank of a run launched by `torchrun` from a Jupyter
  terminal or `!torchrun` in a notebook, which inherit `GPUWS_SERVER_ID`) registers the same way
  under `proc-<run id>-<rank>`: the ranks of one run share the run id, so the server shows them
  as one run, and asks rank 0, which brings every rank to the same step. Only a server's own
  folder holds them (nobody could ask a process registered at the top), and they go when the
  process ends (no kernel list says whether it runs).

Who removes what, so that no server unprotects another's training: a server removes the
registrations in its own folder whose kernel it no longer runs; anyone removes a registration
whose kernel process has provably ended, and the whole folder of a server whose process has.
"Provably" means in the same process space (`process_space`): a pid written on another machine
or in another container that shares the folder says nothing here, and is left alone.

Why not a comm on an ipykernel 7 subshell: with ipykernel 7.4, any message a second client
sends on a subshell while the main shell runs a cell takes over the main shell's reply
routing, and that cell's execute_reply never reaches the notebook (docs/subshell_probe.py
shows it). The agent still answers the comm target `TARGET` (`{"type": "checkpoint" |
"status"}`), which suits clients on an idle kernel.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

import psutil

TARGET = "jupyter_gpu_ws.checkpoints"
AGENTS_DIR = "gpuws-agents"
SERVER_ID_ENV = "GPUWS_SERVER_ID"
SERVER_FILE = "server.json"
REGISTRATION_SUFFIX = ".json"
REQUEST_SUFFIX = ".request.json"
TRAINING_SUFFIX = ".training.jsonl"
TRAINING_STREAM_MAX = 8 * 2**20

# Record types of the training stream.
RUN = "run"
PROGRESS = "progress"
RESUMED = "resumed"
SNAPSHOT = "snapshot"
PROCESS_PREFIX = "proc-"
# The exported environment variable that names the runtime folder of the server (a process
# that is not a kernel has no connection file to find it by).
RUNTIME_DIR_ENV = "GPUWS_RUNTIME_DIR"

CHECKPOINT = "checkpoint"
STATUS = "status"
ACCEPTED = "accepted"
DONE = "done"
ERROR = "error"

# A server id becomes a folder name: nothing that could climb out of the agents folder.
_SERVER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# A process registration's name: a run id (hex) and a rank.
_PROCESS = re.compile(r"proc-([0-9a-f]{8,32})-(\d{1,6})")


def agents_root(runtime_dir: str | Path) -> Path:
    return Path(runtime_dir) / AGENTS_DIR


def valid_server_id(value: str | None) -> TypeGuard[str]:
    return value is not None and _SERVER_ID.fullmatch(value) is not None


def registrations_folder(runtime_dir: str | Path, server_id: str | None) -> Path:
    """Where the kernels of server `server_id` register; the top for a kernel without one."""
    root = agents_root(runtime_dir)
    return root / server_id if valid_server_id(server_id) else root


def registration_file(folder: Path, kernel_id: str) -> Path:
    return folder / f"{kernel_id}{REGISTRATION_SUFFIX}"


def request_file(folder: Path, kernel_id: str) -> Path:
    return folder / f"{kernel_id}{REQUEST_SUFFIX}"


def training_file(folder: Path, kernel_id: str) -> Path:
    return folder / f"{kernel_id}{TRAINING_SUFFIX}"


def registered_kernel(path: Path) -> str | None:
    """The kernel id a registration file is named after; None for any other file."""
    name = path.name
    if (
        name == SERVER_FILE
        or name.endswith(REQUEST_SUFFIX)
        or name.endswith(TRAINING_SUFFIX)
        or not name.endswith(REGISTRATION_SUFFIX)
    ):
        return None
    if name.startswith(PROCESS_PREFIX):
        return None  # a rank of a torchrun run: registered_process
    return name[: -len(REGISTRATION_SUFFIX)] or None


def process_name(run_id: str, rank: int) -> str:
    """The name a rank of a distributed run registers under (files `<name>.json`, `<name>.request.json`)."""
    return f"{PROCESS_PREFIX}{run_id}-{rank}"


def registered_process(path: Path) -> tuple[str, int] | None:
    """(run id, rank) of a process registration file; None for any other file."""
    name = path.name
    if name.endswith(REQUEST_SUFFIX) or not name.endswith(REGISTRATION_SUFFIX):
        return None
    match = _PROCESS.fullmatch(name[: -len(REGISTRATION_SUFFIX)])
    return (match.group(1), int(match.group(2))) if match else None


@functools.lru_cache(maxsize=1)
def process_space() -> str:
    """What makes a pid mean one process: this host, its boot, and the pid namespace.

    Two containers, or two machines sharing a home folder, number their processes
    independently; a pid recorded under another space cannot be checked from here.
    """
    parts = [socket.gethostname()]
    for probe in (
        lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        lambda: str(os.stat("/proc/self/ns/pid").st_ino),
    ):
        try:
            parts.append(probe())
        except OSError:
            pass  # not Linux, or /proc hidden: the host name alone
    return "/".join(parts)


def process_identity() -> dict[str, Any]:
    """This process, as recorded in a registration or server file so that others can tell
    when it has ended (its start time tells a reused pid from the original)."""
    pid = os.getpid()
    try:
        started: float | None = psutil.Process(pid).create_time()
    except psutil.Error:
        started = None
    return {"pid": pid, "process_started": started, "process_space": process_space()}


def kernel_identity() -> tuple[str | None, Path | None]:
    """This kernel's id and the runtime folder it shares with its server."""
    try:
        from ipykernel.connect import get_connection_file

        path = Path(get_connection_file())
    except Exception:
        return None, None
    name = path.stem
    return (name[len("kernel-") :] if name.startswith("kernel-") else name), path.parent


def runtime_folder() -> Path:
    """The runtime folder of the server this process came from (exported by the server; else
    Jupyter's default, which is the server's unless configured otherwise)."""
    exported = os.environ.get(RUNTIME_DIR_ENV)
    if exported:
        return Path(exported)
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def watch_requests(
    path: Path,
    on_request: Callable[[str], None],
    stop: threading.Event | None = None,
    tick: Callable[[], None] | None = None,
) -> None:
    """Check a request file ten times a second (one stat, no Python work otherwise) and call
    `on_request` with each new request id the server writes there (and `tick` each time)."""
    if stop is None:
        stop = threading.Event()  # never set: watched as long as the process lives
    last_mtime = None
    while not stop.wait(0.1):
        if tick is not None:
            tick()
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            continue
        if mtime == last_mtime:
            continue
        last_mtime = mtime
        try:
            request_id = json.loads(path.read_text()).get("request_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(request_id, str) and request_id:
            on_request(request_id)
