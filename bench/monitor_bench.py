"""Monitor cost, side by side with jupyter-resource-usage on the same Jupyter Server.

    python bench/monitor_bench.py [--requests 300] [--ticks 300]

Prints, in one run:
- CPU per sample: one tick of this extension's sampler (two simulated GPUs through the NVML
  test double, CPU, memory, two disks, cgroup limits, alerts, JSON once), measured in
  process; and the work one `/api/metrics/v1` request does (its server CPU per request minus
  that of `/api/status`, the server's cheapest authenticated API).
- Server CPU per request and client latency (median, p95) of `/gpuws/api/metrics`,
  `/api/metrics/v1` and `/api/status`, sequential requests over loopback.
- What N open browsers cost: this extension samples once per interval whatever N is;
  jupyter-resource-usage samples once per request, and its front end polls every 5 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FAKE_GPUS = ROOT / "ui-tests" / "fake-gpus.json"
TOKEN = "bench-token"


def tick_cost(ticks: int, workdir: str) -> float:
    """Seconds of CPU per sampler tick, as the app builds it."""
    from jupyter_gpu_ws.monitor import AlertPolicy, AlertTracker, NvmlReader, Sampler, SystemReader
    from jupyter_gpu_ws.monitor.fake_nvml import FakeNvml

    sampler = Sampler(
        NvmlReader(FakeNvml(str(FAKE_GPUS))),
        SystemReader({"workdir": workdir, "store": workdir}),
        alerts=AlertTracker(AlertPolicy()),
    )
    for _ in range(10):
        sampler.sample_once()
    started = time.process_time()
    for _ in range(ticks):
        sampler.sample_once()
    return (time.process_time() - started) / ticks


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: str, port: int) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "server",
        "--no-browser",
        "--allow-root",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--ServerApp.root_dir={workdir}",
        f"--IdentityProvider.token={TOKEN}",
        "--ServerApp.jpserver_extensions={'jupyter_gpu_ws': True, 'jupyter_resource_usage': True}",
        f"--GpuWorkspace.nvml_test_double={FAKE_GPUS}",
        "--GpuWorkspace.sample_interval=1",
        "--ResourceUseDisplay.track_cpu_percent=True",
        "--ResourceUseDisplay.track_disk_usage=True",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            get(port, "/api/status")
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the Jupyter Server did not start")


def get(port: int, path: str) -> bytes:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"token {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def measure(port: int, server: psutil.Process, path: str, n: int) -> dict[str, float]:
    for _ in range(10):
        get(port, path)
    latencies = []
    cpu_before = sum(server.cpu_times()[:2])
    for _ in range(n):
        started = time.perf_counter()
        get(port, path)
        latencies.append(time.perf_counter() - started)
    cpu = (sum(server.cpu_times()[:2]) - cpu_before) / n
    latencies.sort()
    return {
        "cpu_ms": cpu * 1e3,
        "median_ms": statistics.median(latencies) * 1e3,
        "p95_ms": latencies[int(0.95 * (len(latencies) - 1))] * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--ticks", type=int, default=300)
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="gpuws-bench-")
    port = free_port()
    server_proc = start_server(workdir, port)
    try:
        server = psutil.Process(server_proc.pid)
        # One kernel, as a user would have: jupyter-resource-usage measures every child process.
        get_kernel = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/kernels",
            data=b"{}",
            method="POST",
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        urllib.request.urlopen(get_kernel, timeout=60).read()
        time.sleep(3)
        json.loads(get(port, "/gpuws/api/metrics"))  # both endpoints answer before measuring
        json.loads(get(port, "/api/metrics/v1"))

        ours_tick = tick_cost(args.ticks, workdir) * 1e3
        results = {
            path: measure(port, server, path, args.requests)
            for path in ("/api/status", "/gpuws/api/metrics", "/api/metrics/v1")
        }
    finally:
        server_proc.terminate()
        server_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)

    base = results["/api/status"]["cpu_ms"]
    theirs_sample = max(results["/api/metrics/v1"]["cpu_ms"] - base, 0.0)
    ours, theirs = results["/gpuws/api/metrics"], results["/api/metrics/v1"]

    def ratio(a: float, b: float) -> str:
        return f"{b / a:.1f}x" if a > 0 else "n/a"

    print(
        f"# monitor_bench: {psutil.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"{args.requests} requests and {args.ticks} ticks, one kernel running\n"
    )
    print("| measure | jupyter_gpu_ws | jupyter-resource-usage | theirs / ours |")
    print("|---|---|---|---|")
    print(
        f"| CPU per sample (ms) | {ours_tick:.3f} (2 GPUs + system) | {theirs_sample:.3f} (system only) "
        f"| {ratio(ours_tick, theirs_sample)} |"
    )
    print(
        f"| server CPU per request (ms) | {ours['cpu_ms']:.3f} | {theirs['cpu_ms']:.3f} | "
        f"{ratio(ours['cpu_ms'], theirs['cpu_ms'])} |"
    )
    print(
        f"| latency median (ms) | {ours['median_ms']:.2f} | {theirs['median_ms']:.2f} | "
        f"{ratio(ours['median_ms'], theirs['median_ms'])} |"
    )
    print(
        f"| latency p95 (ms) | {ours['p95_ms']:.2f} | {theirs['p95_ms']:.2f} | "
        f"{ratio(ours['p95_ms'], theirs['p95_ms'])} |"
    )
    print(
        f"\nBaseline /api/status: server CPU {base:.3f} ms per request, "
        f"latency median {results['/api/status']['median_ms']:.2f} ms."
    )
    for browsers in (1, 10):
        ours_s = ours_tick / 1.0  # one tick per second, pushed to every browser
        theirs_s = browsers * theirs["cpu_ms"] / 5.0  # each browser polls every 5 s
        print(
            f"{browsers:>2} open browser(s): ours {ours_s:.2f} ms CPU/s sampling at 1 Hz; "
            f"theirs {theirs_s:.2f} ms CPU/s at one poll per 5 s each."
        )


if __name__ == "__main__":
    main()
