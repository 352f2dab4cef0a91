"""Emergency persist: from SIGTERM to "everything persisted", against the grace period.

    python bench/sigterm_bench.py [--files-mb 200] [--model-mb 512] [--trials 3]

A real Jupyter Server (this extension, a local-folder store) with a kernel training a model of
about `--model-mb` MB (tracked by gpuws) and `--files-mb` MB of files not yet synced (the
settle delay is set to an hour so the watcher holds them back). SIGTERM goes to the server;
measured: until its emergency report is written (everything persisted, or what was not) and
until the process has exited. Side by side: what a user would run by hand in the same
situation, `torch.save` of the same model then `cp -r` of the work directory and `sync`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

TOKEN = "sigterm-bench"
TRAINING = """\
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range({layers})])
gpuws.track(model=model)
for i in range(10**9):
    with torch.no_grad():
        model[0].weight.add_(1e-6)
    gpuws.step(i)
    time.sleep(0.01)
"""


def api(port: int, path: str, method: str = "GET", body: Any = None) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def until(check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if value := check():
                return value
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("not reached in time")


def write_files(root: Path, total_mb: int) -> None:
    """Half in 400 small files (code, notebooks, results), half in a few large ones."""
    small = total_mb * 2**20 // 2 // 400
    for i in range(400):
        (root / "src" / f"file{i:03d}.py").write_bytes(os.urandom(small))
    for i in range(4):
        (root / "data" / f"part{i}.bin").write_bytes(os.urandom(total_mb * 2**20 // 2 // 4))


def one_trial(tmp: Path, files_mb: int, layers: int) -> dict[str, float]:
    root, store, state, runtime = (tmp / n for n in ("root", "store", "state", "runtime"))
    for folder in (root / "src", root / "data", runtime):
        folder.mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {
        "ServerApp": {
            "port": port,
            "root_dir": str(root),
            "open_browser": False,
            "allow_root": True,
            "jpserver_extensions": {"jupyter_gpu_ws": True},
        },
        "IdentityProvider": {"token": TOKEN},
        "GpuWorkspace": {
            "store_url": str(store),
            "workspace": "bench",
            "state_dir": str(state),
            "sync_debounce": 3600.0,
        },
    }
    (tmp / "config.json").write_text(json.dumps(config))
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTER_CONFIG_DIR=str(tmp / "jcfg"))
    with open(tmp / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", f"--config={tmp / 'config.json'}"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        until(lambda: api(port, "/gpuws/api/sync")["state"] == "idle", 60)
        from jupyter_client import BlockingKernelClient

        session = api(
            port,
            "/api/sessions",
            "POST",
            {
                "path": "train.ipynb",
                "type": "notebook",
                "name": "train.ipynb",
                "kernel": {"name": "python3"},
            },
        )
        client = BlockingKernelClient(
            connection_file=str(runtime / f"kernel-{session['kernel']['id']}.json")
        )
        client.load_connection_file()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        client.execute(TRAINING.format(layers=layers))
        until(
            lambda: any(k.get("run") for k in api(port, "/gpuws/api/checkpoints")["kernels"]), 120
        )
        write_files(root, files_mb)
        time.sleep(1.0)  # the watcher has seen them
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        report_file = state / "emergency-report.json"
        until(report_file.exists, 120)
        reported = time.monotonic() - started
        proc.wait(timeout=120)
        exited = time.monotonic() - started
        client.stop_channels()
        report = json.loads(report_file.read_text())
        return {
            "reported": reported,
            "exited": exited,
            "persisted": report["seconds"],
            "pending": report["pending_count"],
            "errors": len(report["errors"]),
        }
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def by_hand(tmp: Path, files_mb: int, layers: int) -> float:
    """torch.save of the same model, then cp -r of the work directory and sync."""
    import torch

    root = tmp / "hand-root"
    for folder in (root / "src", root / "data"):
        folder.mkdir(parents=True)
    write_files(root, files_mb)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(layers)])
    subprocess.run(["sync"], check=True)
    started = time.monotonic()
    torch.save(model.state_dict(), root / "model.pt")
    subprocess.run(["cp", "-r", str(root), str(tmp / "hand-store")], check=True)
    subprocess.run(["sync"], check=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files-mb", type=int, default=200)
    parser.add_argument("--model-mb", type=int, default=512)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    layers = max(1, round(args.model_mb * 2**20 / (2048 * 2049 * 4)))
    results, hand = [], []
    for _ in range(args.trials):
        tmp = Path(tempfile.mkdtemp(prefix="gpuws-sigterm-bench-"))
        try:
            results.append(one_trial(tmp, args.files_mb, layers))
            hand.append(by_hand(tmp, args.files_mb, layers))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    print(
        f"# sigterm_bench: {args.files_mb} MB of unsynced files (400 small, 4 large) + a model of "
        f"{layers * 2048 * 2049 * 4 / 1e6:.0f} MB being trained; local-folder store; "
        f"{os.cpu_count()} CPUs; median of {args.trials}\n"
    )
    print("| measure | seconds | against the 25 s grace |")
    print("|---|---|---|")
    print(
        f"| SIGTERM → emergency persist done (checkpoint + sync + report) | {med['persisted']:.2f} | "
        f"{med['persisted'] / 25:.0%} |"
    )
    print(f"| SIGTERM → report written | {med['reported']:.2f} | {med['reported'] / 25:.0%} |")
    print(f"| SIGTERM → server process exited | {med['exited']:.2f} | {med['exited'] / 25:.0%} |")
    print(
        f"| by hand: torch.save + cp -r + sync | {statistics.median(hand):.2f} | "
        f"{statistics.median(hand) / 25:.0%} |"
    )
    print(
        f"\nFiles not persisted: {max(r['pending'] for r in results)}; errors: {max(r['errors'] for r in results)}"
    )


if __name__ == "__main__":
    main()
