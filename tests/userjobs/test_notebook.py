"""A notebook run as a job (userjobs/notebook.py), through `python -m` as the server runs it: its
outputs in a copy beside it, the original untouched, a failing cell, bad input, SIGTERM and kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import psutil
import pytest

from jupyter_gpu_ws.userjobs.failure import CANNOT_CHANGE
from jupyter_gpu_ws.userjobs.notebook import output_path
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

RUNNER = [sys.executable, "-m", "jupyter_gpu_ws.userjobs.notebook"]


def _notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_markdown_cell("# Training")] + [
        nbformat.v4.new_code_cell(s) for s in sources
    ]
    nbformat.write(nb, path)
    return path


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def _start(notebook: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """The runner in the background, its output in files (a pipe nobody reads would fill and
    hold it up)."""
    with (
        open(notebook.with_suffix(".out"), "wb") as out,
        open(notebook.with_suffix(".err"), "wb") as err,
    ):
        return subprocess.Popen([*RUNNER, str(notebook)], stdout=out, stderr=err, env=env)


def _outputs(notebook: Path) -> list[list[dict[str, object]]]:
    nb = nbformat.read(notebook, as_version=4)
    return [cell.outputs for cell in nb.cells if cell.cell_type == "code"]


def _text(outputs: list[dict[str, object]]) -> str:
    return "".join(str(o.get("text", "")) for o in outputs)


def _copy_has_output_of_first_cell(copy: Path) -> bool:
    try:
        return bool(copy.exists() and _outputs(copy)[0])
    except Exception:  # noqa: BLE001 only ever the previous copy or the next: never half of one
        return False


def test_the_copy_beside_a_notebook_is_named_for_the_job() -> None:
    assert output_path(Path("runs/train.ipynb")) == Path("runs/train.job.ipynb")


def test_a_notebook_runs_headless_into_a_copy_and_the_original_is_untouched(tmp_path: Path) -> None:
    (tmp_path / "lr.txt").write_text("0.1")
    source = _notebook(
        tmp_path / "train.ipynb",
        "import os\nprint('job', os.environ['GPUWS_JOB_ID'], 'lr', open('lr.txt').read())",
        "import torch\ntorch.manual_seed(0)\nw = torch.arange(6.0).reshape(2, 3)\n(w @ w.T).sum().item()",
        "print('done')",
    )
    before = source.read_bytes()
    result = _run(str(source), env={"GPUWS_JOB_ID": "j-3f2a9c"})
    assert result.returncode == 0, result.stderr
    assert source.read_bytes() == before
    printed, computed, done = _outputs(tmp_path / "train.job.ipynb")
    # The job's environment reached the kernel, which ran in the notebook's folder.
    assert _text(printed) == "job j-3f2a9c lr 0.1\n"
    assert computed[0]["data"] == {"text/plain": "83.0"}  # type: ignore[index]  # [[5, 14], [14, 50]]
    assert _text(done) == "done\n"
    assert "job j-3f2a9c lr 0.1" in result.stdout  # the cells' printing is the job's log too


def test_a_failing_cell_exits_1_with_its_error_last_on_stderr(tmp_path: Path) -> None:
    source = _notebook(tmp_path / "train.ipynb", "print('loading')", "1 / 0", "print('never')")
    nb = nbformat.read(source, as_version=4)
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", text="from a run before\n")]
    nbformat.write(nb, source)
    result = _run(str(source), "--output", str(tmp_path / "out.ipynb"))
    assert result.returncode == 1
    assert result.stderr.rstrip("\n").splitlines()[-1] == "ZeroDivisionError: division by zero"
    loading, failed, never = _outputs(tmp_path / "out.ipynb")
    assert _text(loading) == "loading\n"
    assert failed[0]["ename"] == "ZeroDivisionError"
    assert never == []  # not run, and nothing left from the run before
    assert not (tmp_path / "train.job.ipynb").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "train.ipynb: no such notebook"),
        ("{ not json", "train.ipynb is not valid JSON"),
        (
            '{"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}',
            "train.ipynb is not a version 4 notebook (nbformat 3)",
        ),
        (
            '{"nbformat": 4, "nbformat_minor": 5, "cells": "none"}',
            "train.ipynb is not a valid notebook",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: str | None, says: str) -> None:
    source = tmp_path / "train.ipynb"
    if content is not None:
        source.write_text(content)
    result = _run(str(source))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(says) and result.stderr.rstrip().endswith(CANNOT_CHANGE)
    assert not (tmp_path / "train.job.ipynb").exists()
    if content is not None:
        assert source.read_text() == content


def test_an_output_that_would_overwrite_the_notebook_is_refused(tmp_path: Path) -> None:
    source = _notebook(tmp_path / "train.ipynb", "print(1)")
    before = source.read_bytes()
    result = _run(str(source), "--output", str(source))
    assert result.returncode == 2 and "the original is never changed" in result.stderr
    assert source.read_bytes() == before


def test_a_kernel_that_is_not_here_is_bad_input(tmp_path: Path) -> None:
    source = _notebook(tmp_path / "train.ipynb", "print(1)")
    result = _run(str(source), "--kernel", "no-such-kernel-for-gpuws")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"no kernel named 'no-such-kernel-for-gpuws' here (--kernel NAME picks another) — {CANNOT_CHANGE}"
    ]
    assert not (tmp_path / "train.job.ipynb").exists()


def test_sigint_interrupts_the_cell_writes_the_copy_and_exits_130(tmp_path: Path) -> None:
    source = _notebook(
        tmp_path / "train.ipynb",
        "import os\nopen('kernel.pid', 'w').write(str(os.getpid()))",
        "import time\nopen('looping', 'w').close()\ntry:\n    for step in range(100_000):\n        time.sleep(0.05)\n"
        "except KeyboardInterrupt:\n    print('saving at step', step)\n    raise",
        "print('never')",
    )
    copy = tmp_path / "train.job.ipynb"
    job = _start(source)
    try:
        until(lambda: (tmp_path / "looping").exists())
        job.send_signal(signal.SIGINT)
        job.wait(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 130
    assert (tmp_path / "train.err").read_text().rstrip("\n").splitlines()[-1] == "stopped by SIGINT"
    _, interrupted, never = _outputs(copy)
    assert "saving at step" in _text(interrupted)  # the cell was interrupted, not killed
    assert never == []
    kernel = int((tmp_path / "kernel.pid").read_text())
    until(
        lambda: (
            not psutil.pid_exists(kernel) or psutil.Process(kernel).status() == psutil.STATUS_ZOMBIE
        )
    )


def test_sigterm_reaches_the_kernel_whose_tracked_loop_saves_at_its_next_step_then_exits_143(
    tmp_path: Path,
) -> None:
    """As the job's supervisor passes the runtime's end on: the kernel (in a session of its own)
    gets the SIGTERM itself, not an interrupt, so gpuws.track() saves as in a script."""
    from jupyter_gpu_ws.checkpoints.catalog import complete_checkpoints

    source = _notebook(
        tmp_path / "train.ipynb",
        "import os\nopen('kernel.pid', 'w').write(str(os.getpid()))",
        "import time, torch, jupyter_gpu_ws as gpuws\n"
        "model = torch.nn.Linear(4, 2)\n"
        "gpuws.track('nb-run', model=model)\n"
        "for step in range(100_000):\n"
        "    open('step.tmp', 'w').write(str(step)); os.replace('step.tmp', 'step')\n"
        "    gpuws.step(step)\n"
        "    time.sleep(0.05)",
        "print('never')",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWS_", "JPY_"))}
    job = _start(source, {**env, "GPUWS_WORKDIR": str(tmp_path), "OMP_NUM_THREADS": "1"})
    try:
        until(
            lambda: (tmp_path / "step").exists() and int((tmp_path / "step").read_text()) >= 3, 120
        )
        at_signal = int((tmp_path / "step").read_text())
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 143, (tmp_path / "train.err").read_text()
    saved = [m["step"] for _, m in complete_checkpoints(tmp_path / ".gpuws/checkpoints/nb-run")]
    assert saved and max(saved) >= at_signal, (saved, at_signal)
    _, _, never = _outputs(tmp_path / "train.job.ipynb")
    assert never == []
    kernel = int((tmp_path / "kernel.pid").read_text())
    until(
        lambda: (
            not psutil.pid_exists(kernel) or psutil.Process(kernel).status() == psutil.STATUS_ZOMBIE
        )
    )


def test_a_kill_9_mid_run_leaves_a_copy_nbformat_validates_and_no_kernel(tmp_path: Path) -> None:
    source = _notebook(
        tmp_path / "train.ipynb",
        "import os\nopen('kernel.pid', 'w').write(str(os.getpid()))\nprint('x' * 100_000)",
        "import time\nfor step in range(100_000):\n    print('step', step, flush=True)\n    time.sleep(0.01)",
    )
    copy = tmp_path / "train.job.ipynb"
    job = _start(source)
    try:
        until(lambda: _copy_has_output_of_first_cell(copy))
        # The second cell runs: its steps reach the runner's output (the copy has them at its end).
        until(lambda: b"step " in source.with_suffix(".out").read_bytes(), 60, "the steps")
        job.kill()
        job.wait(timeout=60)
    finally:
        job.kill()
    nb = nbformat.read(copy, as_version=4)
    nbformat.validate(nb)
    assert _text(nb.cells[1].outputs) == "x" * 100_000 + "\n"
    # The kernel notices its parent is gone and ends: no orphan goes on training.
    kernel = int((tmp_path / "kernel.pid").read_text())
    until(
        lambda: (
            not psutil.pid_exists(kernel) or psutil.Process(kernel).status() == psutil.STATUS_ZOMBIE
        )
    )
