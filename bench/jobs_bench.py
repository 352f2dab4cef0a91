"""Jobs (issue 31): how soon a successor relaunches a job, and what supervising a job costs.

    python bench/jobs_bench.py [--quick] [--sizes 64,512] [--trials 3] [--steps 300] [--tmp DIR]

Starts real Jupyter servers with the extension (tests/servers.py), on one local-folder store,
as the done-when test does (tests/userjobs/test_successor_relaunch.py). Prints Markdown tables
with ratios (no assertions; the machine is shared and noisy).

- Relaunch: `python train.py` (a CPU torch model of the checkpoint's size: Linear(2048, 2048)
  layers of 16 MiB each, `gpuws.track` and `gpuws.step`, each step's time written to steps.txt)
  runs as a job on server A until a checkpoint reached the store; A is stopped, by SIGTERM (a
  clean end: the job is checkpointed and recorded interrupted, and the lease is given back) or
  by kill -9 of the server and its job (the lease must run out: the default `lease_ttl`, 20 s);
  successor B starts on the same store, in another work directory and, with `unshare -u`, as
  another host: at once, or (after a kill -9) once the dead lease ran out by the store's clock
  (the lease file's modification time), as a runtime started later would. Measured from B's
  start, and after a kill -9 also from the kill: its restore done (the newest
  checkpoint's files all in place in B's work directory) and the relaunched job's first new
  step; between them, when B started the job's process (its attempt's start). Beside it, `jupyter gpuws restore` of the same store into an empty folder (a process's
  start included, as B's is): "relaunch − restore" is what the goal (≤ 10 s) bounds.
- Supervision: the same loop (the 16 MiB model, no checkpoint, no sleep) run directly
  (`python train.py` in a subprocess) and as a job of a running server, interleaved; steps/s
  from the steps' own times (the process's start left out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sync_bench import emit, fmt_s, machine_line, median, ratio, table  # noqa: E402

from tests.servers import ServerProcess, server_process, until  # noqa: E402
from tests.test_successor import kill_everything  # noqa: E402
from tests.userjobs.jobfiles import write  # noqa: E402
from tests.userjobs.test_successor_relaunch import stored_checkpoint_steps  # noqa: E402

WORKSPACE = "jobs-bench"
LEASE_TTL = 20.0  # the default (app.py's lease_ttl): not set in the servers' configuration
GOAL = 10.0
# How A ends, and when B starts: the rows of the relaunch table.
CASES = {
    "sigterm": "SIGTERM (lease given back); B at once",
    "kill": f"kill -9; B at once (waits for the lease, {LEASE_TTL:.0f} s)",
    "kill-late": "kill -9; B once the lease ran out (store's clock)",
}
LAYER_MIB = 16  # one Linear(2048, 2048) in fp32

# argv: steps, seconds per step, steps between checkpoints, layers. Plain SGD: the checkpoint
# is the model alone, `layers` x 16 MiB; every checkpoint kept, so the one restored stays to be seen. Each step's time and host go to steps.txt.
TRAIN = """\
import socket, sys, time
import torch
import jupyter_gpu_ws as gpuws

total, delay, every, layers = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(layers)])
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
gpuws.track(model=model, optimizer=opt, total_steps=total, every_steps=every, keep_last=1000)
start = gpuws.resume()
host = socket.gethostname()
x = torch.randn(4, 2048)
with open("steps.txt", "a") as f:
    for i in range(start, total):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        gpuws.step(i, loss=loss)
        f.write(f"{i} {time.time()!r} {host}\\n")
        f.flush()
        time.sleep(delay)
"""


def steps(path: Path) -> list[tuple[int, float, str]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            out.append((int(parts[0]), float(parts[1]), parts[2]))
    return out


def checkpoint_folder(base: Path, step: int) -> Path:
    """The checkpoint of `step` under a work directory (or the store's copy of one), in
    whichever run folder the job's run is named."""
    folder = base / ".gpuws" / "checkpoints"
    named = (
        [p for p in folder.glob("*/ckpt-*") if int(p.name.split("-")[1]) == step]
        if folder.is_dir()
        else []
    )
    return named[0] if named else folder / "?" / f"ckpt-{step}"


def folder_bytes(folder: Path) -> int:
    return (
        sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else -1
    )


class Watch(threading.Thread):
    """Notes, from B's start, when the store's newest checkpoint is whole in B's work directory."""

    def __init__(self, root: Path, stored: Path, started: float) -> None:
        super().__init__(daemon=True)
        self.root, self.stored, self.started = root, stored, started
        self.done: float | None = None
        self.stop = False

    def run(self) -> None:
        want = folder_bytes(self.stored)
        step = int(self.stored.name.split("-")[1])
        while not self.stop and self.done is None:
            local = checkpoint_folder(self.root, step)
            if (local / "manifest.json").is_file() and folder_bytes(local) == want:
                self.done = time.time() - self.started
            time.sleep(0.02)


def config(store: Path) -> dict[str, Any]:
    return {
        "store_url": str(store),
        "workspace": WORKSPACE,
        "sync_debounce": 0.05,
        "checkpoint_timeout": 60.0,
    }


def relaunch_once(tmp: Path, layers: int, how: str) -> dict[str, float]:
    """One run: A trains, is stopped `how` (CASES), B relaunches; then a bare restore."""
    tmp.mkdir(parents=True)
    store = tmp / "store"
    hostname = shutil.which("unshare") is not None
    first_root = tmp / "machine-a" / "home" / "project"
    with server_process(
        tmp / "a",
        tmp / "runtime-a",
        config(store),
        root=first_root,
        hostname="machine-a" if hostname else None,
    ) as a:
        until(lambda: a.api("/gpuws/api/sync")["state"] != "starting", 120, "A's sync")
        write(first_root, "train.py", TRAIN)
        a.api(
            "/gpuws/api/jobs",
            "POST",
            {
                "command": ["python", "train.py", "1000000", "0.05", "20", str(layers)],
                "name": "train",
            },
        )
        until(lambda: stored_checkpoint_steps(store, WORKSPACE), 600, "a checkpoint in the store")
        if how == "sigterm":
            a.proc.send_signal(signal.SIGTERM)
            a.proc.wait(120)
        else:
            kill_everything(a)
        killed = time.time()
    if how == "kill-late":
        # A runtime started later: the dead lease has run out by the store's clock.
        lease = store / WORKSPACE / ".gpuws" / "lease.json"
        time.sleep(max(0.0, lease.stat().st_mtime + LEASE_TTL + 1.5 - time.time()))
    newest = stored_checkpoint_steps(store, WORKSPACE)[-1]
    stored = checkpoint_folder(store / WORKSPACE / "files", newest)

    second_root = tmp / "machine-b" / "srv" / "work" / "project"
    started = time.time()
    watch = Watch(second_root, stored, started)
    watch.start()
    try:
        with server_process(
            tmp / "b",
            tmp / "runtime-b",
            config(store),
            root=second_root,
            hostname="machine-b" if hostname else None,
        ) as b:
            new = until(
                lambda: [s for s in steps(second_root / "steps.txt") if s[1] > started],
                600,
                "the relaunched job's first step",
            )
            first = min(t for _, t, _ in new) - started
            record = b.api("/gpuws/api/jobs")["jobs"][0]
            relaunched = record["attempts"][-1]["started"] - started
            resumed_at = min(i for i, _, _ in new)
            until(lambda: watch.done is not None, 60, "the checkpoint whole in B's work directory")
    finally:
        watch.stop = True
    if resumed_at != newest + 1:
        emit(
            f"<!-- note: resumed at step {resumed_at}, the store's newest checkpoint was {newest} -->"
        )

    # The same store, with what B added before it was killed (a few steps, perhaps one more
    # checkpoint), restored by the CLI into an empty folder.
    empty = tmp / "restored"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWS_")}
    began = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_gpu_ws.cli",
            "restore",
            "--workdir",
            str(empty),
            "--store",
            str(store),
            "--workspace",
            WORKSPACE,
            "--state-dir",
            str(tmp / "state-r"),
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=600,
    )
    bare = time.perf_counter() - began
    if folder_bytes(checkpoint_folder(empty, newest)) != folder_bytes(stored):
        raise SystemExit(
            f"`jupyter gpuws restore` did not bring back the checkpoint of step {newest}"
        )
    result = {
        "restored": watch.done or float("nan"),
        "relaunched": relaunched,
        "first_step": first,
        "after_kill": first + started - killed,
        "bare": bare,
    }
    shutil.rmtree(tmp, ignore_errors=True)
    return result


def program_start(folder: Path, layers: int) -> float:
    """The script's own start, as a user would time it: started by hand with no server and no
    checkpoint (Python, torch's import, the model's building and `resume()` finding nothing),
    to its first step."""
    folder.mkdir(parents=True)
    write(folder, "train.py", TRAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWS_", "JPY_"))}
    env["GPUWS_WORKDIR"] = str(folder)
    began = time.time()
    process = subprocess.Popen(
        [sys.executable, "train.py", "1000000", "0.05", "1000000", str(layers)],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = until(lambda: steps(folder / "steps.txt"), 600, "the script's first step")
    finally:
        process.kill()
        process.wait()
    return first[0][1] - began


def part_relaunch(tmp: Path, sizes: list[int], trials: int) -> None:
    rows = []
    for size in sizes:
        layers = max(1, size // LAYER_MIB)
        own = median([program_start(tmp / f"p-{size}-{t}", layers) for t in range(trials)])
        for how, words in CASES.items():
            runs = [relaunch_once(tmp / f"r-{size}-{how}-{t}", layers, how) for t in range(trials)]
            restored = median([r["restored"] for r in runs])
            relaunched = median([r["relaunched"] for r in runs])
            first = median([r["first_step"] for r in runs])
            after_kill = median([r["after_kill"] for r in runs])
            bare = median([r["bare"] for r in runs])
            over = first - bare
            rows.append(
                [
                    f"{layers * LAYER_MIB} MiB",
                    words,
                    fmt_s(restored),
                    fmt_s(relaunched),
                    fmt_s(first),
                    fmt_s(after_kill) if how == "kill" else "",
                    fmt_s(bare),
                    fmt_s(own),
                    fmt_s(over),
                    fmt_s(over - own),
                    ratio(first, bare),
                    "met" if over <= GOAL else "not met",
                ]
            )
    emit(f"## Relaunch on a successor (median of {trials}; from B's start)\n")
    emit(
        table(
            [
                "checkpoint",
                "A's end",
                "B: restore done",
                "B: job relaunched",
                "B: first new step",
                "first new step after the kill",
                "`jupyter gpuws restore` alone",
                "the script's own start (no server)",
                "relaunch − restore",
                "relaunch − restore − own start",
                "relaunch / restore",
                f"goal ≤ {GOAL:.0f} s",
            ],
            rows,
        )
    )
    emit()


def step_rate(path: Path) -> float:
    times = [t for _, t, _ in steps(path)]
    return (len(times) - 1) / (times[-1] - times[0])


def run_direct(folder: Path, command: list[str]) -> float:
    folder.mkdir()
    write(folder, "train.py", TRAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWS_")}
    env["GPUWS_WORKDIR"] = str(folder)
    subprocess.run(
        [sys.executable, *command[1:]],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return step_rate(folder / "steps.txt")


def run_job(server: ServerProcess, cwd: str, command: list[str]) -> float:
    (server.root / cwd).mkdir()
    write(server.root / cwd, "train.py", TRAIN)
    job = server.api("/gpuws/api/jobs", "POST", {"command": command, "cwd": cwd})
    end = until(
        lambda: (
            (j := server.api(f"/gpuws/api/jobs/{job['id']}"))["state"] in ("finished", "failed")
            and j
        ),
        600,
        "the job's end",
    )
    if end["state"] != "finished":
        raise SystemExit(f"the job failed: {end['reason']}")
    return step_rate(server.root / cwd / "steps.txt")


def part_supervision(tmp: Path, n: int, trials: int) -> None:
    command = ["python", "train.py", str(n), "0", str(10 * n), "1"]
    direct_rates, job_rates = [], []
    tmp.mkdir(parents=True)
    with server_process(
        tmp / "s", tmp / "runtime-s", config(tmp / "store"), root=tmp / "root"
    ) as server:
        until(lambda: server.api("/gpuws/api/sync")["state"] != "starting", 120, "the sync")
        # One untimed round of each first: the server's start (its first sync pass, its
        # imports) and the first torch import must not fall on the first timed run.
        run_direct(tmp / "direct-warm", command)
        run_job(server, "job-warm", command)
        for t in range(trials):
            # Alternate which goes first: the machine's load drifts.
            for kind in ("direct", "job") if t % 2 == 0 else ("job", "direct"):
                if kind == "direct":
                    direct_rates.append(run_direct(tmp / f"direct-{t}", command))
                else:
                    job_rates.append(run_job(server, f"job-{t}", command))
    shutil.rmtree(tmp, ignore_errors=True)
    direct, supervised = median(direct_rates), median(job_rates)
    emit(f"## Supervision cost ({n} steps of a 16 MiB model, median of {trials}, interleaved)\n")
    emit(
        table(
            ["run", "steps/s", "per step", "ratio to direct"],
            [
                ["`python train.py` directly", f"{direct:.1f}", fmt_s(1 / direct), "1.00x"],
                [
                    "the same as a job of a running server",
                    f"{supervised:.1f}",
                    fmt_s(1 / supervised),
                    ratio(1 / supervised, 1 / direct) + " the time per step",
                ],
            ],
        )
    )
    emit(
        f"\nEach trial's steps/s, direct: {', '.join(f'{r:.1f}' for r in direct_rates)}; "
        f"job: {', '.join(f'{r:.1f}' for r in job_rates)}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 MiB, 1 trial, 200 steps")
    parser.add_argument(
        "--sizes", default=None, help="checkpoint sizes in MiB, comma-separated (default 64,512)"
    )
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="steps of the supervision loop")
    parser.add_argument("--parts", default="relaunch,supervision")
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("16" if args.quick else "64,512")).split(",")]
    trials = args.trials or (1 if args.quick else 3)
    n = args.steps or (200 if args.quick else 1000)
    os.environ.setdefault("GPUWS_JOB_KEY", "jobs-bench-the-same-user-on-both-machines")
    tmp = Path(tempfile.mkdtemp(prefix="gpuws-jobs-bench-", dir=args.tmp))
    emit(
        f"# jobs_bench: {machine_line()}; local-folder store; `unshare -u`: "
        f"{'yes' if shutil.which('unshare') else 'no'}\n"
    )
    try:
        if "relaunch" in args.parts:
            part_relaunch(tmp / "relaunch", sizes, trials)
        if "supervision" in args.parts:
            part_supervision(tmp / "supervision", n, trials)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
