"""SIGTERM in a process with `gpuws.track()` (termination.py): a plain `python train.py` and a
real IPython kernel, with no Jupyter server, save at the next step, wait for the checkpoint, and
end as SIGTERM would have (or run the program's own handler, or go on where it ignores SIGTERM);
a loop that stops stepping ends within the bound; a second SIGTERM ends at once; a kernel's
interrupt, shutdown and restart are as before. A server's job saves on the SIGTERM its killed
server's supervisor passes on, and ends without another save when the server stopped it after
asking for its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client import KernelManager

from jupyter_gpu_ws.checkpoints.files import complete_checkpoints
from jupyter_gpu_ws.checkpoints.termination import STEP_WAIT
from tests.servers import ServerProcess, server_process
from tests.userjobs.jobfiles import job_key
from tests.waiting import until

pytestmark = pytest.mark.slow  # real processes and kernels (docs/testing.md)

ROOT = Path(__file__).resolve().parents[2]
RUN = "sigterm-run"

# The model, its optimizer and a loop that writes the step it reached (atomically) before each
# step(); `train(first, last, pause)` is what a script runs and what a kernel's cell calls.
TRAINING = f"""
import os, time
from pathlib import Path
import torch
import jupyter_gpu_ws as gpuws

torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
gpuws.track({RUN!r}, model=model, optimizer=optimizer)


def reached(name, value=""):
    Path(name + ".tmp").write_text(str(value))
    os.replace(name + ".tmp", name)


reached("pid", os.getpid())

def train(first, last, pause):
    for i in range(first, last):
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        reached("step", i)
        gpuws.step(i, loss=loss)
        time.sleep(pause)
"""

# The program's own SIGTERM handler, set before track(): it lists the checkpoints there are
# when it runs, and exits 3.
OWN_HANDLER = """
import json, signal, sys
from pathlib import Path

def theirs(signum, frame):
    folder = Path(".gpuws/checkpoints/sigterm-run")
    Path("theirs.json").write_text(json.dumps(sorted(p.name for p in folder.iterdir())))
    sys.exit(3)

signal.signal(signal.SIGTERM, theirs)
"""

RESUME = f"""
import torch
import jupyter_gpu_ws as gpuws
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
gpuws.track({RUN!r}, model=model, optimizer=optimizer)
print("continues at", gpuws.resume())
"""


def environment(workdir: Path) -> dict[str, str]:
    """This checkout's package, the work directory, and no Jupyter server to register with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWS_", "JPY_"))}
    env.update(
        GPUWS_WORKDIR=str(workdir),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )
    return env


def reached_step(workdir: Path) -> int | None:
    """The step the loop last reached (its step() called or about to be)."""
    try:
        return int((workdir / "step").read_text())
    except (FileNotFoundError, ValueError):
        return None


class Script:
    """`python train.py` in `workdir`, its output in a log."""

    def __init__(self, workdir: Path, source: str) -> None:
        self.workdir = workdir
        (workdir / "train.py").write_text(source)
        self.log = workdir / "train.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "train.py"],
                cwd=workdir,
                env=environment(workdir),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def step(self) -> int | None:
        return reached_step(self.workdir)

    def stepped_past(self, n: int) -> bool:
        step = self.step()
        return step is not None and step >= n

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"train.py still runs after {timeout} s:\n{self.text()[-3000:]}"
            ) from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def scripts(tmp_path: Path) -> Iterator[list[Script]]:
    started: list[Script] = []
    yield started
    for script in started:
        script.kill()


def start(scripts: list[Script], workdir: Path, source: str) -> Script:
    script = Script(workdir, source)
    scripts.append(script)
    return script


def checkpoint_steps(workdir: Path) -> list[int]:
    return [m["step"] for _, m in complete_checkpoints(workdir / ".gpuws/checkpoints" / RUN)]


def resumed_at(workdir: Path) -> int:
    """What gpuws.resume() returns in a new process on this work directory."""
    done = subprocess.run(
        [sys.executable, "-c", RESUME],
        cwd=workdir,
        env=environment(workdir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("continues at")[1].split()[0])


# -- a plain script ------------------------------------------------------------------------------


def test_a_script_saves_at_the_next_step_after_sigterm_and_then_ends_killed_by_it(
    tmp_path: Path, scripts: list[Script]
) -> None:
    script = start(scripts, tmp_path, TRAINING + "train(0, 10**6, 0.02)\n")
    until(lambda: script.stepped_past(5), 120, "the script training")
    at_signal = script.step()
    assert at_signal is not None
    sent = time.monotonic()
    script.proc.send_signal(signal.SIGTERM)
    assert script.wait(30) == -signal.SIGTERM
    assert time.monotonic() - sent < STEP_WAIT  # at the next step, not the bound
    [saved] = checkpoint_steps(tmp_path)
    assert saved >= at_signal
    assert script.step() == saved  # it trained no step past the one it saved
    assert f"checkpoint at step {saved} complete after SIGTERM: ending" in script.text()
    assert resumed_at(tmp_path) == saved + 1


def test_the_programs_own_handler_runs_once_the_checkpoint_is_complete(
    tmp_path: Path, scripts: list[Script]
) -> None:
    script = start(scripts, tmp_path, OWN_HANDLER + TRAINING + "train(0, 10**6, 0.02)\n")
    until(lambda: script.stepped_past(5), 120, "the script training")
    script.proc.send_signal(signal.SIGTERM)
    assert script.wait(30) == 3  # its handler's sys.exit(3)
    [(path, manifest)] = complete_checkpoints(tmp_path / ".gpuws/checkpoints" / RUN)
    # When the program's handler ran, the checkpoint was there, complete (no temporary folder).
    assert (tmp_path / "theirs.json").read_text() == f'["{path.name}"]'
    assert manifest["request_id"] == "SIGTERM"
    assert "passing SIGTERM on to the program's own handler" in script.text()


def test_a_program_that_ignores_sigterm_saves_and_goes_on_training(
    tmp_path: Path, scripts: list[Script]
) -> None:
    ignore = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    script = start(scripts, tmp_path, ignore + TRAINING + "train(0, 10**6, 0.02)\n")
    until(lambda: script.stepped_past(5), 120, "the script training")
    script.proc.send_signal(signal.SIGTERM)
    [saved] = until(lambda: checkpoint_steps(tmp_path), 30, "the checkpoint for SIGTERM")
    until(lambda: script.stepped_past(saved + 20), 60, "the loop going on past the checkpoint")
    assert script.proc.poll() is None
    assert "going on (this program ignores SIGTERM)" in script.text()


def test_a_loop_that_stops_stepping_ends_within_the_bound_without_a_checkpoint(
    tmp_path: Path, scripts: list[Script]
) -> None:
    stops = TRAINING + "train(0, 5, 0)\nreached('stopped')\ntime.sleep(600)\n"
    script = start(scripts, tmp_path, stops)
    until(lambda: (tmp_path / "stopped").exists(), 120, "the loop over")
    sent = time.monotonic()
    script.proc.send_signal(signal.SIGTERM)
    assert script.wait(STEP_WAIT + 15) == -signal.SIGTERM
    assert STEP_WAIT <= time.monotonic() - sent < STEP_WAIT + 10  # the grace is about 30 s
    assert checkpoint_steps(tmp_path) == []
    assert (
        script.text().count(
            f"gpuws: no step() within {STEP_WAIT:.0f} s of SIGTERM: ending without a checkpoint"
        )
        == 1
    )


def test_a_second_sigterm_ends_the_script_at_once(tmp_path: Path, scripts: list[Script]) -> None:
    script = start(scripts, tmp_path, TRAINING + "train(0, 10**6, 60)\n")  # a step a minute
    until(lambda: script.stepped_past(0), 120, "the first step")
    script.proc.send_signal(signal.SIGTERM)
    until(lambda: "saving at the next step" in script.text(), 30, "the first SIGTERM handled")
    script.proc.send_signal(signal.SIGTERM)
    assert script.wait(10) == -signal.SIGTERM
    assert checkpoint_steps(tmp_path) == []


def test_a_process_forked_after_track_ends_on_sigterm_as_before(
    tmp_path: Path, scripts: list[Script]
) -> None:
    """A DataLoader worker forked from the training process inherits the handler: it must not
    wait for a step it never takes."""
    fork = (
        "import multiprocessing\n"
        "worker = multiprocessing.get_context('fork').Process(target=time.sleep, args=(600,))\n"
        "worker.start()\n"
        "reached('worker', worker.pid)\n"
        "worker.join()\n"
        "reached('worker-ended', worker.exitcode)\n"
        "time.sleep(600)\n"
    )
    script = start(scripts, tmp_path, TRAINING + fork)
    worker = int(until(lambda: (tmp_path / "worker").read_text(), 120, "the worker forked"))
    os.kill(worker, signal.SIGTERM)
    ended = until(lambda: (tmp_path / "worker-ended").read_text(), 5, "the worker's end")
    assert int(ended) == -signal.SIGTERM
    assert script.proc.poll() is None and checkpoint_steps(tmp_path) == []


# -- a kernel ------------------------------------------------------------------------------------


class Kernel:
    """A real IPython kernel (jupyter_client, no Jupyter server) working in `workdir`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.manager = KernelManager(kernel_name="python3")
        self.log = open(workdir / "kernel.log", "wb")
        self.manager.start_kernel(
            cwd=str(workdir), env=environment(workdir), stdout=self.log, stderr=self.log
        )
        self.process: subprocess.Popen[bytes] = self.manager.provisioner.process  # type: ignore[union-attr]
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 120) -> dict[str, Any]:
        """Run a cell to its end; its execute_reply's content."""
        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=lambda m: None)
        return reply["content"]

    def start(self, code: str) -> str:
        # Not aborting what comes next when it fails: a request sent just after an interrupted
        # cell would be answered "aborted" (ipykernel's stop_on_error), kernel or no tracker.
        return self.client.execute(code, stop_on_error=False)

    def step(self) -> int | None:
        return reached_step(self.workdir)

    def ended(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the kernel still runs after {timeout} s") from None

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)
        self.log.close()


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    started = Kernel(tmp_path)
    yield started
    started.close()


def test_a_kernel_saves_at_the_next_step_of_its_running_cell_and_then_ends(
    tmp_path: Path, kernel: Kernel
) -> None:
    assert kernel.run(TRAINING)["status"] == "ok"
    kernel.start("train(0, 10**6, 0.02)")
    until(lambda: (kernel.step() or 0) >= 5, 60, "the cell training")
    at_signal = kernel.step()
    assert at_signal is not None
    sent = time.monotonic()
    kernel.process.send_signal(signal.SIGTERM)
    assert kernel.ended(30) == -signal.SIGTERM
    assert time.monotonic() - sent < STEP_WAIT
    [saved] = checkpoint_steps(tmp_path)
    assert saved >= at_signal and kernel.step() == saved
    assert resumed_at(tmp_path) == saved + 1


def test_an_idle_kernel_saves_its_last_state_at_once_and_then_ends(
    tmp_path: Path, kernel: Kernel
) -> None:
    assert kernel.run(TRAINING + "train(0, 7, 0)")["status"] == "ok"
    sent = time.monotonic()
    kernel.process.send_signal(signal.SIGTERM)
    assert kernel.ended(30) == -signal.SIGTERM
    assert time.monotonic() - sent < STEP_WAIT
    assert checkpoint_steps(tmp_path) == [6]  # the state the last cell left
    assert resumed_at(tmp_path) == 7


def test_a_cell_that_ends_without_a_step_after_sigterm_saves_at_its_end_and_the_kernel_ends(
    tmp_path: Path, kernel: Kernel
) -> None:
    assert kernel.run(TRAINING)["status"] == "ok"
    kernel.start("train(0, 3, 0)\nreached('evaluating')\ntime.sleep(3)")
    until(lambda: (tmp_path / "evaluating").exists(), 60, "the loop over, the cell still running")
    sent = time.monotonic()
    kernel.process.send_signal(signal.SIGTERM)
    assert kernel.ended(30) == -signal.SIGTERM
    assert time.monotonic() - sent < STEP_WAIT  # at the cell's end, not the bound
    assert checkpoint_steps(tmp_path) == [2]


def test_a_tracking_kernel_is_still_interrupted_shut_down_and_restarted_as_jupyter_does(
    tmp_path: Path, kernel: Kernel
) -> None:
    assert kernel.run(TRAINING)["status"] == "ok"
    msg_id = kernel.start("train(0, 10**6, 0.02)")
    until(lambda: (kernel.step() or 0) >= 3, 60, "the cell training")
    kernel.manager.interrupt_kernel()  # SIGINT: the cell ends with KeyboardInterrupt
    reply = kernel.client.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert kernel.run("1 + 1")["status"] == "ok"  # alive, and not ending
    assert checkpoint_steps(tmp_path) == []  # an interrupt is not a SIGTERM
    # A restart: the shutdown_request ends the kernel, or, where its exit takes longer than
    # half of shutdown_wait_time (torch's objects collected at the interpreter's end take ~2.5 s
    # here, with or without gpuws), Jupyter's SIGTERM does at once; never its SIGKILL.
    old = kernel.process
    kernel.manager.restart_kernel()
    assert old.wait(0) in (0, -signal.SIGTERM)
    kernel.process = kernel.manager.provisioner.process  # type: ignore[union-attr,assignment]
    kernel.client.wait_for_ready(timeout=120)
    assert kernel.run(TRAINING + "train(0, 2, 0)")["status"] == "ok"
    kernel.manager.shutdown_kernel()
    assert kernel.process.wait(0) in (0, -signal.SIGTERM)
    assert checkpoint_steps(tmp_path) == []


# -- a job of a Jupyter server -------------------------------------------------------------------


def all_checkpoints(workdir: Path) -> list[dict[str, Any]]:
    """The manifests of every run's complete checkpoints (whatever the job's run is named)."""
    folder = workdir / ".gpuws" / "checkpoints"
    runs = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    return [manifest for run in runs for _, manifest in complete_checkpoints(run)]


def training_job(server: ServerProcess) -> tuple[dict[str, Any], int]:
    """A tracked training loop started as a job of `server`, once it steps; and its pid."""
    until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
    (server.root / "train.py").write_text(TRAINING + "train(0, 10**6, 0.05)\n")
    job = server.api("/gpuws/api/jobs", "POST", {"command": [sys.executable, "train.py"]})
    until(lambda: (reached_step(server.root) or 0) >= 5, 120, "the job training")
    return job, int((server.root / "pid").read_text())


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_job_whose_server_is_killed_saves_at_its_next_step_and_ends(tmp_path: Path) -> None:
    with (
        job_key("termination-test-key-long-enough-0123456789"),
        server_process(tmp_path / "a", tmp_path / "runtime", {"job_stop_grace": 30}) as a,
    ):
        _, pid = training_job(a)
        at_kill = reached_step(a.root)
        assert at_kill is not None
        a.proc.kill()  # its supervisor passes the SIGTERM of the server's death on to the job
        a.proc.wait()
        until(lambda: gone(pid), 30, "the job's end")
        [manifest] = all_checkpoints(a.root)
    assert manifest["request_id"] == "SIGTERM" and manifest["step"] >= at_kill
    assert reached_step(a.root) == manifest["step"]


def test_a_job_the_server_stops_ends_on_sigterm_at_the_checkpoint_the_server_asked_for(
    tmp_path: Path,
) -> None:
    with (
        job_key("termination-test-key-long-enough-0123456789"),
        server_process(tmp_path / "a", tmp_path / "runtime", {"job_stop_grace": 30}) as a,
    ):
        job, pid = training_job(a)
        a.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")  # a checkpoint request, then SIGTERM
        assert a.api(f"/gpuws/api/jobs/{job['id']}")["state"] == "stopped"
        assert gone(pid)
        [manifest] = all_checkpoints(a.root)  # no second one for the SIGTERM
        log = "\n".join(a.api(f"/gpuws/api/jobs/{job['id']}/log?lines=1000")["lines"])
    assert manifest["request_id"] not in (None, "SIGTERM")
    assert (
        f"after the checkpoint the server asked for (step {manifest['step']}): ending without another"
        in log
    )
