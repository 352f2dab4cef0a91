"""The kernel side: answers checkpoint requests arriving over a comm and tells the server,
through a small registration file, what this kernel tracks and its last checkpoint."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

from ..monitor.own_use import OwnGpuUseReader
from . import protocol
from .tracker import Tracker, default_tracker

log = logging.getLogger(__name__)

# How often the agent looks at its own GPU memory and the loop's step, and rewrites its
# registration when either changed: the server's sampler and keep-alive read them from there.
OBSERVE_EVERY = 2.0


class Agent:
    def __init__(self, ip: Any, tracker: Tracker | None = None) -> None:
        self.ip = ip
        self._tracker = tracker
        self.kernel_id, runtime = protocol.kernel_identity()
        # The server that started this kernel exported its identity: register in its folder,
        # where no other server of this user removes us. Without one, at the top, as before.
        server_id = os.environ.get(protocol.SERVER_ID_ENV)
        self.server_id = server_id if protocol.valid_server_id(server_id) else None
        self.process = protocol.process_identity()
        self.file = (
            protocol.registration_file(
                protocol.registrations_folder(runtime, self.server_id), self.kernel_id
            )
            if runtime and self.kernel_id
            else None
        )
        if self.file is not None and self.kernel_id:
            # The loop's progress goes to the server beside the registration.
            self.tracker.training.stream = protocol.training_file(self.file.parent, self.kernel_id)
        # Loaded by `%load_ext` in the training cell itself, the agent starts inside a running
        # cell whose pre_run_cell has passed: the loop is the one to save, at its next step().
        self.cell_running = (
            getattr(getattr(ip, "displayhook", None), "exec_result", None) is not None
        )
        self.gpu_reader = OwnGpuUseReader.from_environment()
        self.gpu: list[dict[str, Any]] = []
        self.stepped_at: float | None = None  # when the loop's step was last seen to change
        self._seen_step: Any = None
        self._write_lock = threading.Lock()
        self.tracker.on_change = self.publish
        ip.events.register("pre_run_cell", self._pre_run)
        ip.events.register("post_run_cell", self._post_run)
        from comm import get_comm_manager

        get_comm_manager().register_target(protocol.TARGET, self._on_open)
        self.publish()
        self._handled: str | None = None
        if self.file is not None and self.kernel_id:
            self.request_file = protocol.request_file(self.file.parent, self.kernel_id)
            threading.Thread(target=self._watch_requests, name="gpuws-agent", daemon=True).start()

    @property
    def tracker(self) -> Tracker:
        # The kernel's tracker, looked up each time: gpuws.track() replaces it by a distributed
        # one when the kernel joins a torch.distributed process group.
        return self._tracker or default_tracker()

    # -- requests from the server ------------------------------------------------------------

    def _watch_requests(self) -> None:
        """Checks the request file ten times a second (one stat, no Python work otherwise), and
        observes this kernel's own GPU use every OBSERVE_EVERY seconds."""
        next_observation = 0.0

        def tick() -> None:
            nonlocal next_observation
            if time.monotonic() >= next_observation:
                next_observation = time.monotonic() + OBSERVE_EVERY
                self.observe()

        protocol.watch_requests(self.request_file, self._on_request_id, tick=tick)

    def _on_request_id(self, request_id: str) -> None:
        if request_id != self._handled:
            self._handled = request_id
            self.on_request(request_id)

    def on_request(self, request_id: str) -> None:
        if not self.tracker.objects:
            return
        self.tracker.request(request_id)
        if not self.cell_running:
            self._save_now()  # the main thread is idle: nothing races us for the tracked state

    def observe(self) -> None:
        """Publish this kernel's GPU memory and the loop's progress when they changed."""
        try:
            gpu = [
                {"uuid": u.uuid, "memory_used": u.memory_used, "figure": u.figure}
                for u in self.gpu_reader.read()
            ]
        except Exception as err:  # never let monitoring break the kernel
            log.debug("gpuws agent: own GPU use unreadable: %s", err)
            gpu = self.gpu
        step = self.tracker.step_value
        changed = gpu != self.gpu
        if step != self._seen_step:
            if self._seen_step is not None:  # the first look only learns where the loop is
                self.stepped_at = time.time()
                changed = True
            self._seen_step = step
        if changed:
            self.gpu = gpu
            self.publish()

    # -- the cell in progress ----------------------------------------------------------------

    def _pre_run(self, info: Any) -> None:
        self.cell_running = True
        if self.tracker.objects:
            self.publish()

    def _post_run(self, result: Any) -> None:
        self.cell_running = False
        if self.tracker.objects:
            self.publish()
        pending = self.tracker.pending
        if pending is not None and self.tracker.objects:
            # A request that arrived during the cell, never honoured by a step(): save now.
            self._save_now()

    # -- comm --------------------------------------------------------------------------------

    def _on_open(self, comm: Any, msg: dict[str, Any]) -> None:
        comm.on_msg(lambda m: self._on_msg(comm, m))
        data = msg.get("content", {}).get("data") or {}
        if data:
            self._handle(comm, data)

    def _on_msg(self, comm: Any, msg: dict[str, Any]) -> None:
        self._handle(comm, msg.get("content", {}).get("data") or {})

    def _handle(self, comm: Any, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == protocol.STATUS:
            comm.send({"type": protocol.STATUS, **self.state()})
        elif kind == protocol.CHECKPOINT:
            if not self.tracker.objects:
                comm.send(
                    {
                        "type": protocol.ERROR,
                        "message": "This kernel tracks nothing yet (gpuws.track)",
                    }
                )
                return
            request_id = data.get("request_id")
            self.tracker.request(request_id)
            if self.cell_running:
                comm.send(
                    {
                        "type": protocol.ACCEPTED,
                        "request_id": request_id,
                        "step": self.tracker.step_value,
                    }
                )
            else:
                # The main thread is idle: nothing races us for the tracked state.
                info = self._save_now()
                if info is None:
                    comm.send(
                        {
                            "type": protocol.ERROR,
                            "request_id": request_id,
                            "message": self.tracker.last_error or "checkpoint failed",
                        }
                    )
                else:
                    comm.send(
                        {
                            "type": protocol.DONE,
                            "request_id": request_id,
                            "step": info.step,
                            "bytes": info.bytes,
                            "path": str(info.path),
                        }
                    )
        else:
            comm.send({"type": protocol.ERROR, "message": f"unknown request {kind!r}"})

    def _save_now(self) -> Any:
        try:
            return self.tracker.checkpoint(wait=True)
        except Exception as err:
            self.tracker.last_error = str(err)
            return None

    # -- registration ------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id,
            "server_id": self.server_id,
            **self.process,
            "cell_running": self.cell_running,
            "updated": time.time(),
            "gpu": self.gpu,
            "stepped_at": self.stepped_at,
            **self.tracker.describe(),
        }

    def publish(self) -> None:
        if self.file is None:
            return
        with self._write_lock:
            try:
                if self.server_id is None:
                    self.file.parent.mkdir(parents=True, exist_ok=True)
                # A server's folder is its own to make: once the server has gone (and its folder
                # with it), nobody could ask this kernel for anything, so nothing is written.
                tmp = self.file.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(self.state(), default=str))
                os.replace(tmp, self.file)
            except OSError as err:
                log.debug("gpuws agent: cannot write %s: %s", self.file, err)


_agent: Agent | None = None


def start(ip: Any) -> Agent:
    global _agent
    if _agent is None:
        _agent = Agent(ip)
    return _agent
