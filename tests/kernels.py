"""Driving real kernels from tests: sessions as JupyterLab creates them, code run and awaited."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


async def run_in_kernel(client: Any, code: str, timeout: float = 120) -> str:
    """Execute `code` and return what it printed; raise with the traceback on error."""
    msg_id = client.execute(code)
    return await collect(client, msg_id, timeout)


async def collect(client: Any, msg_id: str, timeout: float = 120) -> str:
    """What the cell printed, once it has ended."""
    return (await outputs(client, msg_id, timeout))[0]


async def outputs(
    client: Any, msg_id: str, timeout: float = 120
) -> tuple[str, list[dict[str, Any]]]:
    """What the cell printed and what it displayed (each display's data by MIME type), once it
    has ended.

    The end is its execute_reply, not an idle status: a subshell handling a comm while the
    cell runs publishes busy/idle under the cell's parent header (an ipykernel quirk). Every
    message the cell published is on IOPub before the kernel answers a request sent after the
    reply: the idle status of a kernel_info request, which the main shell handles once the cell
    is done, marks the end of the cell's output without waiting for a quiet second.
    """
    while True:
        reply = await client.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    marker = client.kernel_info()
    out, displays, error = [], [], None
    while True:
        msg = await client.get_iopub_msg(timeout=timeout)
        parent = msg["parent_header"].get("msg_id")
        if parent == marker:
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            continue
        if parent != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        if msg["msg_type"] in ("display_data", "execute_result"):
            displays.append(msg["content"]["data"])
        if msg["msg_type"] == "error":
            error = "\n".join(msg["content"]["traceback"])
    if error or reply["content"].get("status") == "error":
        raise AssertionError(error or reply["content"].get("evalue"))
    return "".join(out), displays


class Notebook:
    """A notebook session with a real kernel, and a client to run code in it."""

    def __init__(self, jp_fetch: Any, app: Any, path: str) -> None:
        self.jp_fetch, self.app, self.path = jp_fetch, app, path

    async def __aenter__(self) -> Notebook:
        response = await self.jp_fetch(
            "api",
            "sessions",
            method="POST",
            body=json.dumps(
                {
                    "path": self.path,
                    "type": "notebook",
                    "name": self.path.rsplit("/", 1)[-1],
                    "kernel": {"name": "python3"},
                }
            ),
        )
        session = json.loads(response.body)
        self.session_id, self.kernel_id = session["id"], session["kernel"]["id"]
        self.kernel = self.app.serverapp.kernel_manager.get_kernel(self.kernel_id)
        self.client = self.kernel.client()
        self.client.start_channels()
        await self.client.wait_for_ready(timeout=60)
        return self

    async def run(self, code: str, timeout: float = 120) -> str:
        return await run_in_kernel(self.client, code, timeout)

    async def display(self, code: str, timeout: float = 120) -> list[dict[str, Any]]:
        """What running `code` displayed: one MIME bundle per display."""
        return (await outputs(self.client, self.client.execute(code), timeout))[1]

    @property
    def pid(self) -> int:
        return int(self.kernel.provisioner.pid)

    async def __aexit__(self, *exc: Any) -> None:
        self.client.stop_channels()
        try:
            await self.jp_fetch("api", "sessions", self.session_id, method="DELETE")
        except Exception:
            pass  # the kernel may have been killed on purpose


def connected_client(connection_file: Path, timeout: float = 120) -> Any:
    """A blocking client of the kernel whose connection file this is, once the kernel answers
    kernel_info and its IOPub reaches the client.

    No heartbeat channel: on a loaded machine a kernel still importing misses its 1 s beat, and
    jupyter_client's wait_for_ready then says "Kernel died before replying to kernel_info"; the
    reply, within `timeout`, is what says it is ready."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels(hb=False)
    try:
        client.wait_for_ready(timeout=timeout)
    except BaseException:
        client.stop_channels()
        raise
    return client
