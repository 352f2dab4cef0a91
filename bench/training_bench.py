"""What `gpuws.step(i, loss=…)` costs the training loop, side by side with an empty call, in one run.

    python bench/training_bench.py [--calls 1000000] [--device cuda] [--steps 2000]

Prints, per call, median of 5 rounds (timeit): an empty Python call `f(i, loss=x)`; `gpuws.step(i)`
with nothing due; `gpuws.step(i, loss=t)` with a CPU tensor loss and nothing due; the same with a
second scalar. The background reader runs meanwhile (as in a kernel), so its share of the GIL is
in the figures. With `--device cuda`: a small training loop on the GPU (matmuls queued faster than
the GPU runs them) timed with and without `gpuws.step(i, loss=loss)`; no added synchronisation
means the two loop times are within noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import jupyter_gpu_ws as gpuws  # noqa: E402
from jupyter_gpu_ws.checkpoints import tracker as tracker_module  # noqa: E402


def per_call_ns(statement: str, namespace: dict, calls: int) -> float:
    rounds = [
        timeit.timeit(statement, globals=namespace, number=calls) / calls * 1e9 for _ in range(5)
    ]
    return statistics.median(rounds)


def cuda_loop(steps: int, with_step: bool) -> float:
    """Seconds for `steps` iterations of a loop that only queues GPU work (never reads it)."""
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    w = torch.randn(2048, 2048, device=device, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1e-6)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(steps):
        loss = (a @ w).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if with_step:
            gpuws.step(i, loss=loss)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("GPUWS_WORKDIR", tempfile.mkdtemp(prefix="gpuws-bench-"))
    gpuws.progress(
        total=10**12, name="bench"
    )  # a run with a total: the recorder and its reader run
    loss = torch.tensor(0.25)
    namespace = {"step": gpuws.step, "loss": loss, "f": lambda i, loss=None: None, "lr": 0.01}
    empty = per_call_ns("f(7, loss=loss)", namespace, args.calls)
    bare = per_call_ns("step(7)", namespace, args.calls)
    with_loss = per_call_ns("step(7, loss=loss)", namespace, args.calls)
    with_two = per_call_ns("step(7, loss=loss, lr=lr)", namespace, args.calls)
    tracker_module.default_tracker().training.flush()
    print(
        f"# training_bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"{args.calls:,} calls, median of 5\n"
    )
    print("| call | per call | added to an empty call |")
    print("|---|---|---|")
    print(f"| empty Python call f(i, loss=t) | {empty:.0f} ns | |")
    print(f"| gpuws.step(i), nothing due | {bare:.0f} ns | {bare - empty:+.0f} ns |")
    print(
        f"| gpuws.step(i, loss=t), CPU tensor, nothing due | {with_loss:.0f} ns | {with_loss - empty:+.0f} ns |"
    )
    print(
        f"| gpuws.step(i, loss=t, lr=x), nothing due | {with_two:.0f} ns | {with_two - empty:+.0f} ns |"
    )
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("--device cuda: no CUDA device here")
        cuda_loop(50, True)  # warm-up: kernels, allocator, pinned buffer
        without = [cuda_loop(args.steps, False) for _ in range(5)]
        with_step = [cuda_loop(args.steps, True) for _ in range(5)]
        name = torch.cuda.get_device_name()
        a, b = statistics.median(without), statistics.median(with_step)
        print(
            f"\n{args.steps} steps of (2048x2048 matmul, backward, SGD) on {name}, median of 5 "
            f"(spread {min(without):.3f}-{max(without):.3f} s without, {min(with_step):.3f}-{max(with_step):.3f} s with):"
        )
        print(
            f"  without gpuws.step: {a:.3f} s   with gpuws.step(i, loss=loss): {b:.3f} s   ({(b / a - 1) * 100:+.1f} %)"
        )


if __name__ == "__main__":
    main()
