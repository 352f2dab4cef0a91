"""A notebook run as a job: executed headless with nbclient, its outputs written into a copy beside
it as each cell finishes, the original left as it was.

`python -m jupyter_gpu_ws.userjobs.notebook NB [--output OUT] [--kernel NAME]` exits 0 when every
cell ran, 1 when a cell failed (the error's name and value the last line on stderr), 2 on bad input
(one line), and 128 + the signal's number when stopped by SIGTERM or SIGINT (the kernel given the
SIGTERM, where a tracked loop saves at its next step, or interrupted for SIGINT, then shut down, the
copy written first).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import NoSuchKernel
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

from ..diskio import replace_whole
from .failure import CANNOT_CHANGE

# How long an interrupted cell has to end before the kernel is shut down regardless.
_INTERRUPT_GRACE_S = 10.0
# How long a kernel given SIGTERM has to save and end (a tracked loop saves at its next step;
# without a step it ends within termination.STEP_WAIT); the job's supervisor may end it sooner.
_TERM_GRACE_S = 120.0
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A Unix socket's path has 107 bytes on Linux; the kernel's are the folder's, "kernel-" and a number.
_SOCKET_PATH_ROOM = 96


class BadInput(Exception):
    """The notebook cannot be run as it is: missing, not JSON, not a version 4 notebook."""


def output_path(notebook: Path) -> Path:
    """Where a notebook's job writes its outputs: "train.ipynb" -> "train.job.ipynb" beside it."""
    return notebook.with_name(f"{notebook.stem}.job{notebook.suffix or '.ipynb'}")


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at `path`, checked: a version 4 notebook that nbformat's schema accepts."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path.name}: no such notebook") from None
    except IsADirectoryError:
        raise BadInput(f"{path.name} is a folder, not a notebook") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path.name} cannot be read: {e}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{path.name} is not valid JSON ({e})") from None
    if not isinstance(raw, dict) or raw.get("nbformat") != 4:
        version = raw.get("nbformat") if isinstance(raw, dict) else None
        found = f"nbformat {version}" if version is not None else "no nbformat version"
        raise BadInput(f"{path.name} is not a version 4 notebook ({found})")
    try:
        notebook = nbformat.reads(
            text, as_version=4
        )  # version 4 already: no conversion, source lines joined
        nbformat.validate(notebook)
    except nbformat.ValidationError as e:
        raise BadInput(f"{path.name} is not a valid notebook ({e.message})") from None
    return notebook


def write_notebook(notebook: nbformat.NotebookNode, path: Path) -> None:
    """Write `notebook` whole or not at all: a temporary file beside it, then a rename, so a job
    killed mid-write leaves the previous copy, never half of one."""
    replace_whole(path, lambda f: f.write(nbformat.writes(notebook).encode("utf-8")))


class _JobClient(NotebookClient):  # type: ignore[misc]
    """nbclient's client that also passes each cell's printed text through to this process's own
    stdout and stderr as it arrives: they are the job's log."""

    def process_message(
        self, msg: dict[str, Any], cell: nbformat.NotebookNode, cell_index: int
    ) -> Any:
        if msg.get("msg_type") == "stream":
            content = msg.get("content") or {}
            stream = sys.stderr if content.get("name") == "stderr" else sys.stdout
            stream.write(str(content.get("text", "")))
            stream.flush()
        return super().process_message(msg, cell, cell_index)


async def _run(
    notebook: nbformat.NotebookNode, source: Path, output: Path, kernel: str | None
) -> int:
    client = _JobClient(
        notebook, kernel_name=kernel or "", resources={"metadata": {"path": str(source.parent)}}
    )
    loop = asyncio.get_running_loop()
    stopped: list[int] = []
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        stopped.append(signum)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    # The kernel is started and stopped here rather than in nbclient's async_setup_kernel: that
    # one puts in signal handlers of its own that shut the kernel down and carry on running cells.
    km = client.create_kernel_manager()
    sockets = _private_sockets(km)
    try:
        await (
            client.async_start_new_kernel()
        )  # in the notebook's folder, with this process's environment
        await client.async_start_new_kernel_client()
        assert client.kc is not None
        reply = await client.async_wait_for_reply(await _maybe_await(client.kc.kernel_info()))
        if reply is not None and "language_info" in reply["content"]:
            notebook.metadata["language_info"] = reply["content"]["language_info"]
        # A copy from a run before is replaced only once this run has a kernel to run in.
        write_notebook(notebook, output)
        for index, cell in enumerate(notebook.cells):
            if stopped:
                break
            running = asyncio.ensure_future(
                client.async_execute_cell(
                    cell, index, execution_count=client.code_cells_executed + 1
                )
            )
            waiting = asyncio.ensure_future(stop.wait())
            await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if stopped:
                # Stopped mid-cell. SIGTERM (the job stopped, its runtime ending) is passed on to
                # the kernel, in a session of its own: a loop with gpuws.track() saves at its next
                # step and the kernel ends, as a script's process would. SIGINT interrupts the
                # cell (a KeyboardInterrupt handler may still save). Then the kernel is shut down
                # on the way out; whatever the cell ended with, the run was stopped.
                if not running.done():
                    terminate = stopped[0] == signal.SIGTERM
                    with contextlib.suppress(Exception):
                        if terminate:
                            await _maybe_await(km.signal_kernel(signal.SIGTERM))
                        else:
                            await _maybe_await(km.interrupt_kernel())
                    await asyncio.wait(
                        {running}, timeout=_TERM_GRACE_S if terminate else _INTERRUPT_GRACE_S
                    )
                    running.cancel()
                with contextlib.suppress(BaseException):
                    await running
                break
            write_notebook(notebook, output)
            error = running.exception()
            if isinstance(error, CellExecutionError):
                _report_error(index, cell, error)
                return 1
            running.result()  # anything else (the kernel died) ends the run here
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        with contextlib.suppress(Exception):
            if await _maybe_await(km.is_alive()):
                await _maybe_await(km.shutdown_kernel())
        with contextlib.suppress(Exception):
            await _maybe_await(km.cleanup_resources())
        if sockets is not None:
            sockets.cleanup()
    write_notebook(notebook, output)
    if stopped:
        print(f"stopped by {signal.Signals(stopped[0]).name}", file=sys.stderr, flush=True)
        return 128 + stopped[0]
    return 0


def _private_sockets(km: Any) -> tempfile.TemporaryDirectory[str] | None:
    """An ipykernel kernel talks to this process over Unix sockets in a folder of its own that
    only this user can open (its IPC transport), not over TCP: it is this process's child on the
    same machine, and over TCP ipykernel warns at its start that its messages go unencrypted,
    a warning the job's log would open with although it is none of the notebook's output. Other
    kernels, which may not know IPC, keep TCP; so does a kernel where the folder's path is too long
    for a socket's (107 bytes on Linux). The folder is for the caller to remove at the end."""
    if not any("ipykernel" in part for part in km.kernel_spec.argv):
        return None
    folder = tempfile.TemporaryDirectory(prefix="gpuws-kernel-")
    path = os.path.join(folder.name, "kernel")
    if len(path.encode()) > _SOCKET_PATH_ROOM:
        folder.cleanup()
        return None
    km.transport, km.ip = "ipc", path
    return folder


async def _maybe_await(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) or asyncio.isfuture(value) else value


def _report_error(index: int, cell: nbformat.NotebookNode, error: CellExecutionError) -> None:
    traceback = next(
        (o.get("traceback") for o in cell.get("outputs", []) if o.get("output_type") == "error"),
        None,
    )
    print(f"cell {index + 1} failed:", file=sys.stderr)
    last = f"{error.ename}: {error.evalue}"
    lines = _ANSI.sub("", "\n".join(traceback or [])).rstrip("\n").split("\n")
    if lines and lines[-1] == last:
        lines.pop()  # IPython's traceback ends with it too; it is printed once, last
    for line in lines:
        print(line, file=sys.stderr)
    print(last, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_gpu_ws.userjobs.notebook",
        description="Run a notebook headless, its outputs written into a copy as cells finish.",
    )
    parser.add_argument("notebook", type=Path)
    parser.add_argument(
        "--output", type=Path, help="the copy with the outputs (default: NB.job.ipynb beside NB)"
    )
    parser.add_argument(
        "--kernel", help="the kernel to run it in (default: the one the notebook names)"
    )
    args = parser.parse_args(argv)
    source: Path = args.notebook
    output: Path = args.output or output_path(source)
    try:
        if output.resolve() == source.resolve():
            raise BadInput(
                f"the output would overwrite {source.name}: the original is never changed"
            )
        if not output.parent.is_dir():
            raise BadInput(f"{output.parent} is not a folder to write {output.name} into")
        notebook = read_notebook(source)
    except BadInput as e:
        said = " ".join(str(e).split())  # one line, however the parser put it
        print(f"{said[:300]} — {CANNOT_CHANGE}", file=sys.stderr, flush=True)
        return 2
    for cell in notebook.cells:  # the copy holds this run's outputs only, none left from before
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    try:
        return asyncio.run(_run(notebook, source, output, args.kernel))
    except NoSuchKernel as e:
        print(
            f"no kernel named {e.name!r} here (--kernel NAME picks another) — {CANNOT_CHANGE}",
            file=sys.stderr,
            flush=True,
        )
        return 2
    except DeadKernelError as e:
        write_notebook(notebook, output)
        print(f"DeadKernelError: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
