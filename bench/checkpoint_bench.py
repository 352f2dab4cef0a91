"""Checkpoint cost, side by side with a blocking torch.save, in one run.

    python bench/checkpoint_bench.py [--layers 8] [--trials 5] [--dir /path/on/the/disk] [--device cuda]

Prints: the training loop's stall per checkpoint (the copy into reused staging buffers)
against `torch.save` + fsync (a checkpoint counts once durable) and `torch.save` alone; the
background write's throughput against the disk's own (`dd` with fsync); and `gpuws.step()`
with nothing pending. Model: `layers` x Linear(4096, 4096), about 64 MiB each, on the CPU or,
with `--device cuda`, on the GPU (staged into pinned buffers; torch.save copies it out itself).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from jupyter_gpu_ws.checkpoints.tracker import Tracker  # noqa: E402


def blocking_save(state: dict, path: Path, durable: bool) -> float:
    started = time.perf_counter()
    torch.save(state, path)
    if durable:
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    return time.perf_counter() - started


def dd_throughput(directory: Path, size_mb: int) -> float:
    target = directory / "dd.bin"
    started = time.perf_counter()
    subprocess.run(
        [
            "dd",
            "if=/dev/zero",
            f"of={target}",
            "bs=16M",
            f"count={max(1, size_mb // 16)}",
            "conv=fsync",
        ],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - started
    target.unlink()
    return (max(1, size_mb // 16) * 16) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="where the model lives: cpu or cuda")
    parser.add_argument(
        "--dir", default=None, help="a folder on the disk to measure (default: a temp dir)"
    )
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="gpuws-ckpt-bench-", dir=args.dir))
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(args.layers)]).to(
            args.device
        )
        state_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        tracker = Tracker().track("bench", model=model, root=str(directory / "ckpts"), keep_last=1)

        stalls, writes = [], []
        for i in range(args.trials + 1):
            tracker.request()
            started = time.perf_counter()
            tracker.step(i)  # the safe point: the loop waits for the staging copy only
            stall = time.perf_counter() - started
            tracker.wait()
            total = time.perf_counter() - started
            stalls.append(stall)
            writes.append(total - stall)
        first_stall, stalls, writes = stalls[0], stalls[1:], writes[1:]

        state = model.state_dict()
        durable = [
            blocking_save(state, directory / f"save{i}.pt", True) for i in range(args.trials)
        ]
        cached = [
            blocking_save(state, directory / f"save{i}.pt", False) for i in range(args.trials)
        ]
        dd = statistics.median(dd_throughput(directory, int(state_mb)) for _ in range(3))

        n = 1_000_000
        step_ns = (
            timeit.timeit("step(7)", setup="from jupyter_gpu_ws import step", number=n) / n * 1e9
        )
        empty_ns = timeit.timeit("f()", setup="f = lambda: None", number=n) / n * 1e9
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    stall, save, save_cached = (
        statistics.median(stalls),
        statistics.median(durable),
        statistics.median(cached),
    )
    write_mb_s = state_mb / statistics.median(writes)
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(
        f"# checkpoint_bench: {state_mb:.0f} MiB of fp32 state ({args.layers} x Linear(4096, 4096)), "
        f"{where}, {os.cpu_count()} cores, torch {torch.__version__}, median of {args.trials}\n"
    )
    print("| measure | jupyter_gpu_ws | baseline | ratio |")
    print("|---|---|---|---|")
    print(
        f"| loop stall per checkpoint | {stall * 1e3:.0f} ms | torch.save + fsync {save * 1e3:.0f} ms | "
        f"{stall / save:.1%} of the blocking save (goal ≤ 15 %) |"
    )
    print(
        f"| loop stall per checkpoint | {stall * 1e3:.0f} ms | torch.save (page cache) {save_cached * 1e3:.0f} ms | "
        f"{stall / save_cached:.1%} |"
    )
    print(f"| first checkpoint's stall (allocates staging) | {first_stall * 1e3:.0f} ms | | |")
    print(
        f"| background write, durable | {write_mb_s:.0f} MiB/s | dd conv=fsync {dd:.0f} MiB/s | "
        f"{write_mb_s / dd:.0%} of the disk (goal ≥ 70 %) |"
    )
    print(
        f"| gpuws.step() with nothing pending | {step_ns:.0f} ns | empty Python call {empty_ns:.0f} ns | "
        f"goal < 2000 ns |"
    )


if __name__ == "__main__":
    main()
