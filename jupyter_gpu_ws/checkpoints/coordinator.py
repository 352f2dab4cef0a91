"""The server side: which kernels run the agent and what they track, and asking them to
checkpoint, also while a training cell runs (see protocol.py for the channel). No browser is
involved."""

from __future__ import annotations

import asyncio
import builtins  # the class defines a method `list`: its annotations say builtins.list
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from . import protocol

log = logging.getLogger(__name__)


class CheckpointRequestError(Exception):
    """A request that cannot be made: unknown or dead kernel, no agent in it."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


class CheckpointCoordinator:
    """One server's view of the kernel agents: its own registrations folder (see protocol.py),
    the kernels it runs that registered without a server identity, and the clean-up of what
    provably nobody needs any more."""

    def __init__(
        self,
        kernel_manager: Any,
        runtime_dir: str,
        notebooks: Callable[[], Awaitable[dict[str, str]]],
        server_id: str | None = None,
    ) -> None:
        self.kernel_manager = kernel_manager
        self.server_id = server_id or uuid.uuid4().hex
        self.root = protocol.agents_root(runtime_dir)
        self.agents_dir = protocol.registrations_folder(runtime_dir, self.server_id)
        self.notebooks = notebooks
        self.requests: dict[str, dict[str, Any]] = {}  # request id → what we asked and heard
        self._claim_folder()
        self.sweep()

    def _claim_folder(self) -> None:
        """Make this server's folder, with its server file already inside.

        Built under a hidden name and renamed into place, so no other server ever sees the
        folder without the file that says whose it is and whether that server still runs.
        """
        staging = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{self.server_id}-", dir=self.root))
            (staging / protocol.SERVER_FILE).write_text(
                json.dumps({**protocol.process_identity(), "started": time.time()})
            )
            os.rename(staging, self.agents_dir)
        except OSError as err:
            log.warning(
                "GPU workspace: cannot make the kernel agents folder %s: %s", self.agents_dir, err
            )
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)

    def close(self) -> None:
        """Remove this server's folder: the server is stopping, nobody can ask its kernels now."""
        shutil.rmtree(self.agents_dir, ignore_errors=True)

    # -- what runs -----------------------------------------------------------------------------

    def agent_states(self) -> dict[str, dict[str, Any]]:
        """The registrations of the kernels this server runs, by kernel id."""
        return {kernel_id: state for kernel_id, (_, state) in self._registrations().items()}

    def tracking(self) -> list[str]:
        """The kernels whose agent tracks something: the only ones a checkpoint can come from.
        (An agent loaded before its `gpuws.track()`, e.g. while the cell still imports torch,
        has nothing to save and answers no request.)"""
        return [
            kernel_id
            for kernel_id, state in sorted(self.agent_states().items())
            if state.get("objects")
        ]

    def _registrations(self) -> dict[str, tuple[Path, dict[str, Any]]]:
        alive = set(self.kernel_manager.list_kernel_ids())
        if not self.agents_dir.is_dir():
            self._claim_folder()  # removed under us (a tidy-up by hand): kernels re-register into it
        found: dict[str, tuple[Path, dict[str, Any]]] = {}
        # Our folder holds only our kernels (and the ranks of runs started from our terminals,
        # which _processes reads): a kernel we no longer run has gone for good.
        for kernel_id, path, state in _read_folder(self.agents_dir):
            if kernel_id not in alive:
                _remove_kernel_files(self.agents_dir, kernel_id)
            elif state is not None:
                found[kernel_id] = (path, state)
        # Kernels started without our identity register at the top, beside other servers' such
        # kernels: ours are those we run, and the others are not ours to judge.
        for kernel_id, path, state in _read_folder(self.root):
            if kernel_id in alive and kernel_id not in found and state is not None:
                found[kernel_id] = (path, state)
        self.sweep()  # a few stats per registration: cheap beside the reads above
        return found

    def sweep(self) -> None:
        """Remove, in every folder but ours, what provably nobody needs: the folder of a server
        whose process has ended, and the registration of a kernel whose process has ended."""
        try:
            folders = [p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]
        except OSError:
            return
        for folder in [self.root, *folders]:
            if folder == self.agents_dir:
                continue
            if folder != self.root:
                server = _read_json(folder / protocol.SERVER_FILE)
                if server is not None and process_ended(server):
                    shutil.rmtree(folder, ignore_errors=True)
                    continue
            for kernel_id, _, state in _read_folder(folder):
                if state is not None and process_ended(state):
                    _remove_kernel_files(folder, kernel_id)

    def _processes(self) -> dict[str, dict[int, tuple[Path, dict[str, Any]]]]:
        """The ranks of distributed runs registered in our folder, by run id and rank; the
        registration of a rank whose process has ended is removed (no kernel list says it runs)."""
        runs: dict[str, dict[int, tuple[Path, dict[str, Any]]]] = {}
        try:
            paths = list(self.agents_dir.iterdir())
        except OSError:
            return runs
        for path in paths:
            ident = protocol.registered_process(path)
            if ident is None:
                continue
            state = _read_json(path)
            if state is None:
                continue
            if process_ended(state):
                # Its training stream stays: the training view reads it to its end (the run's
                # last steps), then removes it (training/watch.py).
                name = protocol.process_name(*ident)
                _remove_kernel_files(self.agents_dir, name, stream=False)
                continue
            runs.setdefault(ident[0], {})[ident[1]] = (path, state)
        return runs

    def run_states(self) -> dict[str, dict[str, Any]]:
        """Each run registered with this server by processes of its own, as one run: rank 0's
        view (its request, its last checkpoint) with every registered rank's own state. Its
        kind: `torchrun` (ranks of torch.distributed) or `process` (one plain process, a job's:
        it saves without DCP and has one rank, 0)."""
        out: dict[str, dict[str, Any]] = {}
        for run_id, ranks in self._processes().items():
            states = [(rank, state) for rank, (_, state) in sorted(ranks.items())]
            leader = ranks[0 if 0 in ranks else min(ranks)][1]
            spread = leader.get("distributed")
            out[run_id] = {
                "run_id": run_id,
                "kind": "process" if spread is None else "torchrun",
                "run": leader.get("run"),
                "command": leader.get("command"),
                "job": leader.get("job"),
                "world_size": len(ranks) if spread is None else spread.get("world_size"),
                "mesh": (spread or {}).get("mesh"),
                "objects": leader.get("objects"),
                "policy": leader.get("policy"),
                "root": leader.get("root"),
                "step": leader.get("step"),
                "pending": leader.get("pending"),
                "writing": any(s.get("writing") for _, s in states),
                "last": leader.get("last"),
                "last_error": next(
                    (s.get("last_error") for _, s in states if s.get("last_error")), None
                ),
                "ranks": [
                    {
                        # The registration's name says the rank, a plain process's too (0).
                        "rank": rank,
                        "local_rank": (s.get("distributed") or {}).get("local_rank"),
                        "host": (s.get("distributed") or {}).get("host"),
                        "pid": s.get("pid"),
                        "phase": (s.get("distributed") or {}).get("phase"),
                        "step": s.get("step"),
                        "writing": s.get("writing"),
                        "last_error": s.get("last_error"),
                        "terminating": (s.get("distributed") or {}).get("terminating"),
                    }
                    for rank, s in states
                ],
                "leader_registered": 0 in ranks,
            }
        return out

    async def list(self) -> list[dict[str, Any]]:
        notebooks = await self.notebooks()
        out = []
        for kernel_id, state in sorted(self.agent_states().items()):
            state = dict(state)
            state["kernel_id"] = kernel_id
            state["notebook"] = notebooks.get(kernel_id)
            request = next(
                (
                    r
                    for r in self.requests.values()
                    if r.get("kernel_id") == kernel_id and r["state"] in ("sent", "accepted")
                ),
                None,
            )
            if request and _settle(request, state):
                request = None
            state["request"] = request
            out.append(state)
        return out

    def runs(self) -> builtins.list[dict[str, Any]]:
        """The distributed runs, each with the server's request still in progress."""
        out = []
        for run_id, run in sorted(
            self.run_states().items(), key=lambda item: str(item[1].get("run"))
        ):
            request = next(
                (
                    r
                    for r in self.requests.values()
                    if r.get("run_id") == run_id and r["state"] in ("sent", "accepted")
                ),
                None,
            )
            if request and _settle(request, run):
                request = None
            out.append({**run, "request": request})
        return out

    # -- asking --------------------------------------------------------------------------------

    async def request(self, kernel_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """Ask a kernel's agent for a checkpoint at its next safe point (at once if idle)."""
        if kernel_id not in set(self.kernel_manager.list_kernel_ids()):
            raise CheckpointRequestError(f"No running kernel {kernel_id!r}")
        registration = self._registrations().get(kernel_id)
        if registration is None:
            raise CheckpointRequestError(
                f"Kernel {kernel_id} does not run the checkpoint agent: run %load_ext jupyter_gpu_ws "
                "and gpuws.track(...) in it",
                status=409,
            )
        if not registration[1].get("objects"):
            raise CheckpointRequestError(
                f"Kernel {kernel_id} tracks nothing yet: call gpuws.track(model=..., optimizer=...) in it",
                status=409,
            )
        request_id = uuid.uuid4().hex[:12]
        record: dict[str, Any] = {
            "kernel_id": kernel_id,
            "request_id": request_id,
            "state": "sent",
            "time": time.time(),
            "message": None,
        }
        self.requests[request_id] = record
        path = protocol.request_file(registration[0].parent, kernel_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"request_id": request_id, "time": record["time"]}))
        tmp.replace(path)
        # The agent picks it up within ~0.1 s: say whether it is saving now or at the next step.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.agent_states().get(kernel_id) or {}
            pending = state.get("pending") or {}
            if _settle(record, state):  # complete, or failed with the kernel's reason
                break
            if pending.get("request_id") == request_id or (state.get("writing") and not pending):
                record.update(
                    state="accepted",
                    step=state.get("step"),
                    message="Saving at the next step()" if state.get("cell_running") else "Saving",
                )
                break
            await asyncio.sleep(0.05)
        else:
            record.update(state="accepted", message="The kernel has not picked up the request yet")
        return dict(record)

    async def request_run(self, run_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """Ask a distributed run for a checkpoint: the request goes to rank 0, which agrees with
        every rank on the step to save at."""
        runs = self._processes()
        if run_id not in runs:
            raise CheckpointRequestError(
                f"No distributed run {run_id!r} is registered with this server"
            )
        if 0 not in runs[run_id]:
            raise CheckpointRequestError(
                f"Rank 0 of run {run_id} is not registered here (it runs on another machine): ask it there",
                status=409,
            )
        leader = protocol.process_name(run_id, 0)
        request_id = uuid.uuid4().hex[:12]
        record: dict[str, Any] = {
            "run_id": run_id,
            "request_id": request_id,
            "state": "sent",
            "time": time.time(),
            "message": None,
        }
        self.requests[request_id] = record
        path = protocol.request_file(self.agents_dir, leader)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"request_id": request_id, "time": record["time"]}))
        tmp.replace(path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = (self._processes().get(run_id) or {}).get(0, (None, {}))[1]
            pending = state.get("pending") or {}
            if _settle(record, state):  # complete, or failed with the kernel's reason
                break
            if pending.get("request_id") == request_id:
                record.update(
                    state="accepted",
                    step=state.get("step"),
                    message="Saving at the step all ranks agree on",
                )
                break
            await asyncio.sleep(0.05)
        else:
            record.update(state="accepted", message="Rank 0 has not picked up the request yet")
        return dict(record)

    async def request_all(self, timeout: float = 10.0) -> builtins.list[dict[str, Any]]:
        """Every kernel that tracks something, and every distributed run."""
        kernels = self.tracking()
        runs = [run_id for run_id, run in self.run_states().items() if run["leader_registered"]]
        results = await asyncio.gather(
            *(self.request(k, timeout) for k in kernels),
            *(self.request_run(r, timeout) for r in runs),
            return_exceptions=True,
        )
        asked = [("kernel_id", k) for k in kernels] + [("run_id", r) for r in runs]
        out = []
        for (kind, ident), result in zip(asked, results, strict=True):
            if isinstance(result, BaseException):
                out.append({kind: ident, "state": "error", "message": str(result)})
            else:
                out.append(result)
        return out

    async def wait_done(
        self, request_ids: builtins.list[str], timeout: float
    ) -> builtins.list[str]:
        """Wait until each request has ended: its checkpoint complete, or failed as its kernel
        reports (the record then says why, at once: nobody waits out the timeout for what has
        already failed), or its kernel gone. Returns those still not ended."""
        deadline = time.monotonic() + timeout
        waiting = [
            r for r in request_ids if self.requests.get(r, {}).get("state") not in ("done", "error")
        ]
        while waiting and time.monotonic() < deadline:
            states = self.agent_states()
            runs = {
                run_id: ranks[0][1] for run_id, ranks in self._processes().items() if 0 in ranks
            }
            for rid in list(waiting):
                record = self.requests[rid]
                if "kernel_id" in record:
                    state = states.get(record["kernel_id"])
                else:
                    state = runs.get(record["run_id"])
                if state is None:
                    record.update(
                        state="error", message="it stopped before its checkpoint was complete"
                    )
                    waiting.remove(rid)
                elif _settle(record, state):
                    waiting.remove(rid)
            if waiting:
                await asyncio.sleep(0.2)
        return waiting


def failure(state: dict[str, Any] | None, request_id: str) -> str | None:
    """Why a request's checkpoint failed, as its kernel (or run leader) reported; None if it did not."""
    for entry in (state or {}).get("failed") or ():
        if isinstance(entry, dict) and entry.get("request_id") == request_id:
            return str(entry.get("message") or "the checkpoint failed")
    return None


def _settle(record: dict[str, Any], state: dict[str, Any] | None) -> bool:
    """Mark a request done or failed by what its kernel's registration says; whether it ended.
    A later success (the request stays for the next safe point) counts over an earlier failure."""
    if answered(state, record["request_id"]):
        last = (state or {}).get("last") or {}
        record.update(state="done", message=None)
        if last.get("request_id") == record["request_id"]:
            record.update(step=last.get("step"), bytes=last.get("bytes"))
        return True
    reason = failure(state, record["request_id"])
    if reason is not None:
        record.update(state="error", message=reason)
        return True
    return False


def answered(state: dict[str, Any] | None, request_id: str) -> bool:
    """Whether a kernel's (or a run leader's) registration says the request's checkpoint is
    complete: its last checkpoint, or one since replaced by a later save."""
    state = state or {}
    return (state.get("last") or {}).get("request_id") == request_id or request_id in (
        state.get("answered") or ()
    )


# -- the files (see protocol.py for the layout and who removes what) ---------------------------


def process_ended(record: dict[str, Any]) -> bool:
    """Whether the process a registration or server file describes has provably ended: no
    process has its pid, or only a zombie, or one started after it (the pid was reused).

    Anything unsure counts as running: a pid written in another process space (another
    container or machine sharing the folder) or one that is not a number.
    """
    pid, started = record.get("pid"), record.get("process_started")
    space = record.get("process_space")
    if space is not None and space != protocol.process_space():
        return False
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        # create_time is rounded differently across reads: a second of slack.
        return isinstance(started, (int, float)) and process.create_time() > started + 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # it exists, and is not ours to inspect
        return False


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _read_folder(folder: Path) -> Iterator[tuple[str, Path, dict[str, Any] | None]]:
    """(kernel id, registration file, its content or None when unreadable) for each kernel
    registered in `folder`."""
    try:
        paths = list(folder.iterdir())
    except OSError:
        return
    for path in paths:
        kernel_id = protocol.registered_kernel(path)
        if kernel_id is not None:
            yield kernel_id, path, _read_json(path)


def _remove_kernel_files(folder: Path, kernel_id: str, stream: bool = True) -> None:
    protocol.registration_file(folder, kernel_id).unlink(missing_ok=True)
    protocol.request_file(folder, kernel_id).unlink(missing_ok=True)
    if stream:
        protocol.training_file(folder, kernel_id).unlink(missing_ok=True)
