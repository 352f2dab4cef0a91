"""The checks that need a real GPU, in one short run: the NVML reader and a CUDA checkpoint.

    python bench/gpu_check.py

Prints what the real NVML reader (monitor/nvml.py, not its test double) reads before and while
this process holds GPU memory, and whether this process is found among the GPU's processes;
then trains a small CUDA model with dropout (so the CUDA RNG state matters) straight through,
and again stopped half-way with a checkpoint, resumed into a fresh model with other weights
and RNG, and continued: the two end states must be equal bit for bit. The loop's stall for a
checkpoint on the GPU is `bench/checkpoint_bench.py --device cuda`. Exits non-zero if a check
fails. Run on a machine with a GPU (the tests run without one); its figures are in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from jupyter_gpu_ws.checkpoints.tracker import Tracker  # noqa: E402
from jupyter_gpu_ws.monitor.nvml import NvmlReader  # noqa: E402

DEVICE = "cuda"  # "cpu" only to try the script itself on a machine without a GPU


def show_reading(title: str, reader: NvmlReader) -> bool:
    """Print one NVML reading; whether this process was among a GPU's processes."""
    reading = reader.read()
    print(
        f"{title}: error={reading.error!r} driver={reading.driver_version!r} cuda={reading.cuda_driver_version!r}"
    )
    found = False
    for gpu in reading.gpus:
        used = gpu.memory_used / 2**20 if gpu.memory_used is not None else None
        total = gpu.memory_total / 2**20 if gpu.memory_total is not None else None
        print(
            f"  GPU {gpu.index} {gpu.name} util={gpu.utilization}% mem={used} of {total} MiB "
            f"temp={gpu.temperature} power={gpu.power_draw}/{gpu.power_limit} W sm={gpu.sm_clock} MHz "
            f"mig={len(gpu.mig)}"
        )
        for proc in gpu.processes:
            mine = proc.pid == os.getpid()
            found = found or mine
            mem = proc.memory_used / 2**20 if proc.memory_used is not None else None
            print(
                f"    pid {proc.pid}{' (this process)' if mine else ''} {mem} MiB visible={proc.visible}"
            )
    return found


def train(
    model: torch.nn.Module, opt: torch.optim.Optimizer, tracker: Tracker, start: int, stop: int
) -> None:
    gen = torch.Generator(device=DEVICE)
    for i in range(start, stop):
        gen.manual_seed(i)  # the data: a function of the step alone
        x = torch.randn(64, 256, device=DEVICE, generator=gen)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        tracker.step(i, loss=loss)


def small_model(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(512, 1)
    ).to(DEVICE)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def bitwise_resume(root: str) -> bool:
    model, opt = small_model(0)
    straight = Tracker().track("straight", model=model, optimizer=opt, root=root + "/straight")
    train(model, opt, straight, 0, 40)
    expected = [p.detach().clone() for p in model.parameters()]

    model, opt = small_model(0)
    first = Tracker().track("run", model=model, optimizer=opt, root=root + "/run")
    train(model, opt, first, 0, 20)
    info = first.checkpoint(wait=True)
    print(f"checkpoint at step {info.step if info else None}: {info.path if info else None}")

    model, opt = small_model(123)  # another process: other weights, other RNG
    torch.manual_seed(999)
    if DEVICE == "cuda":
        torch.cuda.manual_seed(999)
    second = Tracker().track("run", model=model, optimizer=opt, root=root + "/run")
    start = second.resume()
    train(model, opt, second, start, 40)
    equal = all(torch.equal(a, b) for a, b in zip(expected, model.parameters(), strict=True))
    print(f"resumed at {start}; end state equal bit for bit to the straight run: {equal}")
    return start == 20 and equal


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    print(
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, device {torch.cuda.get_device_name(0)}"
    )
    reader = NvmlReader()
    show_reading("NVML before this process used the GPU", reader)
    hold = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB held
    torch.cuda.synchronize()
    time.sleep(0.5)
    seen = show_reading("NVML with 1 GiB held by this process", reader)
    print(f"this process among the GPU's processes: {seen}")
    del hold
    reader.close()
    with tempfile.TemporaryDirectory() as root:
        ok = bitwise_resume(root)
    print("PASS" if ok else "FAIL: the CUDA resume was not bitwise")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
