"""The server side: which kernels run the agent and what they track, and asking them to
checkpoint, also while a training cell runs (see protocol.py for the channel). No browser is
involved."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable

from . import protocol

log = logging.getLogger(__name__)


class CheckpointRequestError(Exception):
    """A request that cannot be made: unknown or dead kernel, no agent in it."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


class CheckpointCoordinator:
    def __init__(self, kernel_manager: Any, runtime_dir: str,
                 notebooks: Callable[[], Awaitable[dict[str, str]]]) -> None:
        self.kernel_manager = kernel_manager
        self.agents_dir = Path(runtime_dir) / protocol.AGENTS_DIR
        self.notebooks = notebooks
        self.requests: dict[str, dict[str, Any]] = {}  # request id → what we asked and heard

    # -- what runs -----------------------------------------------------------------------------

    def agent_states(self) -> dict[str, dict[str, Any]]:
        """Registration files of kernels still running (stale ones are removed)."""
        alive = set(self.kernel_manager.list_kernel_ids())
        states = {}
        if not self.agents_dir.is_dir():
            return states
        for path in self.agents_dir.glob("*.json"):
            if path.name.endswith(protocol.REQUEST_SUFFIX):
                if path.name[: -len(protocol.REQUEST_SUFFIX)] not in alive:
                    path.unlink(missing_ok=True)
                continue
            kernel_id = path.stem
            if kernel_id not in alive:
                path.unlink(missing_ok=True)
                continue
            try:
                states[kernel_id] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
        return states

    async def list(self) -> list[dict[str, Any]]:
        notebooks = await self.notebooks()
        out = []
        for kernel_id, state in sorted(self.agent_states().items()):
            state = dict(state)
            state["kernel_id"] = kernel_id
            state["notebook"] = notebooks.get(kernel_id)
            last = state.get("last") or {}
            request = next((r for r in self.requests.values()
                            if r["kernel_id"] == kernel_id and r["state"] in ("sent", "accepted")), None)
            if request and last.get("request_id") == request["request_id"]:
                request["state"] = "done"
                request = None
            state["request"] = request
            out.append(state)
        return out

    # -- asking --------------------------------------------------------------------------------

    async def request(self, kernel_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """Ask a kernel's agent for a checkpoint at its next safe point (at once if idle)."""
        if kernel_id not in set(self.kernel_manager.list_kernel_ids()):
            raise CheckpointRequestError(f"No running kernel {kernel_id!r}")
        if kernel_id not in self.agent_states():
            raise CheckpointRequestError(
                f"Kernel {kernel_id} does not run the checkpoint agent: run %load_ext jupyter_gpu_ws "
                "and gpuws.track(...) in it", status=409)
        request_id = uuid.uuid4().hex[:12]
        record: dict[str, Any] = {"kernel_id": kernel_id, "request_id": request_id, "state": "sent",
                                  "time": time.time(), "message": None}
        self.requests[request_id] = record
        path = self.agents_dir / f"{kernel_id}{protocol.REQUEST_SUFFIX}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"request_id": request_id, "time": record["time"]}))
        tmp.replace(path)
        # The agent picks it up within ~0.1 s: say whether it is saving now or at the next step.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.agent_states().get(kernel_id) or {}
            last, pending = state.get("last") or {}, state.get("pending") or {}
            if last.get("request_id") == request_id:
                record.update(state="done", step=last.get("step"), bytes=last.get("bytes"))
                break
            if pending.get("request_id") == request_id or (state.get("writing") and not pending):
                record.update(state="accepted", step=state.get("step"),
                              message="Saving at the next step()" if state.get("cell_running") else "Saving")
                break
            await asyncio.sleep(0.05)
        else:
            record.update(state="accepted", message="The kernel has not picked up the request yet")
        return dict(record)

    async def request_all(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        kernels = list(self.agent_states())
        results = await asyncio.gather(*(self.request(k, timeout) for k in kernels), return_exceptions=True)
        out = []
        for kernel_id, result in zip(kernels, results):
            if isinstance(result, BaseException):
                out.append({"kernel_id": kernel_id, "state": "error", "message": str(result)})
            else:
                out.append(result)
        return out

    async def wait_done(self, request_ids: list[str], timeout: float) -> list[str]:
        """Wait until each request's checkpoint is complete; returns those still not done."""
        deadline = time.monotonic() + timeout
        waiting = [r for r in request_ids if self.requests.get(r, {}).get("state") != "done"]
        while waiting and time.monotonic() < deadline:
            states = self.agent_states()
            for rid in list(waiting):
                record = self.requests[rid]
                last = (states.get(record["kernel_id"]) or {}).get("last") or {}
                if last.get("request_id") == rid or record["kernel_id"] not in states:
                    record["state"] = "done" if last.get("request_id") == rid else "error"
                    waiting.remove(rid)
            if waiting:
                await asyncio.sleep(0.2)
        return waiting
