"""The server side: which kernels run the agent and what they track, and asking them to
checkpoint over a comm opened on a kernel subshell, so the request arrives while a training
cell runs. No browser is involved: the server is a client of the kernel itself."""

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

    async def request(self, kernel_id: str, timeout: float = 10.0) -> dict[str, Any]:
        if kernel_id not in set(self.kernel_manager.list_kernel_ids()):
            raise CheckpointRequestError(f"No running kernel {kernel_id!r}")
        if kernel_id not in self.agent_states():
            raise CheckpointRequestError(
                f"Kernel {kernel_id} does not run the checkpoint agent: run %load_ext jupyter_gpu_ws "
                "and gpuws.track(...) in it", status=409)
        request_id = uuid.uuid4().hex[:12]
        record = {"kernel_id": kernel_id, "request_id": request_id, "state": "sent", "time": time.time(),
                  "subshell": False, "message": None}
        self.requests[request_id] = record
        kernel = self.kernel_manager.get_kernel(kernel_id)
        client = kernel.client()
        client.start_channels()
        try:
            record.update(await self._send(client, request_id, timeout))
        except (asyncio.TimeoutError, TimeoutError):
            record.update(state="accepted" if not record["subshell"] else "error",
                          message="The kernel did not answer in time; the request waits for it")
        finally:
            client.stop_channels()
        return dict(record)

    async def _send(self, client: Any, request_id: str, timeout: float) -> dict[str, Any]:
        # kernel_info on the control channel: the shell one waits behind a running cell.
        info_msg = client.session.msg("kernel_info_request", {})
        client.control_channel.send(info_msg)
        info = await self._reply(client.get_control_msg, info_msg["header"]["msg_id"], timeout)
        features = info["content"].get("supported_features", [])
        subshell_id = None
        if "kernel subshells" in features:
            msg = client.session.msg("create_subshell_request", {})
            client.control_channel.send(msg)
            reply = await self._reply(client.get_control_msg, msg["header"]["msg_id"], timeout)
            subshell_id = reply["content"].get("subshell_id")
        comm_id = uuid.uuid4().hex
        open_msg = client.session.msg("comm_open", {
            "comm_id": comm_id, "target_name": protocol.TARGET,
            "data": {"type": protocol.CHECKPOINT, "request_id": request_id},
        })
        if subshell_id:
            open_msg["header"]["subshell_id"] = subshell_id
        client.shell_channel.send(open_msg)
        if not subshell_id:
            # Without subshells the kernel reads the request once the running cell ends.
            return {"state": "accepted", "subshell": False,
                    "message": "This kernel has no subshells: the checkpoint waits for the running cell to end"}
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while True:
                left = deadline - asyncio.get_running_loop().time()
                msg = await client.get_iopub_msg(timeout=max(left, 0.01))
                content = msg.get("content", {})
                if msg["msg_type"] == "comm_msg" and content.get("comm_id") == comm_id:
                    data = content.get("data", {})
                    kind = data.get("type")
                    if kind == protocol.DONE:
                        return {"state": "done", "subshell": True, "step": data.get("step"), "bytes": data.get("bytes")}
                    if kind == protocol.ACCEPTED:
                        return {"state": "accepted", "subshell": True, "step": data.get("step"),
                                "message": "Saving at the next step()"}
                    return {"state": "error", "subshell": True, "message": data.get("message")}
                if msg["msg_type"] == "comm_close" and content.get("comm_id") == comm_id:
                    return {"state": "error", "subshell": True, "message": "The kernel has no checkpoint agent"}
        finally:
            if subshell_id:
                msg = client.session.msg("delete_subshell_request", {"subshell_id": subshell_id})
                client.control_channel.send(msg)

    @staticmethod
    async def _reply(get: Callable[..., Awaitable[dict[str, Any]]], msg_id: str, timeout: float) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            msg = await get(timeout=max(deadline - asyncio.get_running_loop().time(), 0.01))
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

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
