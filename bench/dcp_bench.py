"""Loop stall per checkpoint of a distributed run: gpuws (DCP async_save, staging reused) against a
blocking `dcp.save` and against `torch.save` on rank 0, in one run.

    python bench/dcp_bench.py [--nproc 2] [--parallel ddp|fsdp] [--layers 4] [--width 2048] [--trials 5]
                              [--device cpu|cuda] [--dir /path/on/the/disk]

Starts itself under `torchrun --standalone` (gloo on the CPU, nccl with gloo for CPU tensors on
CUDA). Model: `layers` x Linear(width, width) with AdamW (whose state is twice the weights'),
under DDP (each rank holds it all; DCP writes each tensor once) or FSDP2 (each rank a shard).
A loop's stall is the slowest rank's time in the call (the others wait for it at the next
collective); each measure is the median of `trials` after one untimed checkpoint.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="where the model lives: cpu or cuda")
    parser.add_argument(
        "--dir", default=None, help="a folder on the disk to measure (default: a temp dir)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse()
    if "LOCAL_RANK" not in os.environ:  # not under torchrun yet: start it
        directory = tempfile.mkdtemp(prefix="gpuws-dcp-bench-", dir=args.dir)
        try:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={args.nproc}",
                __file__,
                *_for_the_ranks(sys.argv[1:]),
                "--dir",
                directory,
            ]
            sys.exit(subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    bench(args)


def _for_the_ranks(argv: list[str]) -> list[str]:
    """The arguments without --nproc (the launcher's: torchrun's own parser would take it for an
    abbreviation of its --nproc-per-node) and --dir (given anew)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--nproc", "--dir"):
            skip = True
            continue
        if arg.startswith(("--nproc=", "--dir=")):
            continue
        out.append(arg)
    return out


def bench(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    import jupyter_gpu_ws as gpuws
    from jupyter_gpu_ws.checkpoints.tracker import default_tracker

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    root = Path(args.dir)
    torch.manual_seed(0)
    model: Any = torch.nn.Sequential(
        *[torch.nn.Linear(args.width, args.width) for _ in range(args.layers)]
    ).to(device)
    if args.parallel == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        model = fully_shard(model, mesh=mesh)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step() -> None:
        loss = model(torch.randn(8, args.width, device=device)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    train_step()  # the optimizer's state exists from here on
    local_mb = (
        sum(t.numel() * t.element_size() for t in _tensors(get_state_dict(model, optimizer)))
        / 2**20
    )
    total_mb = _sum(local_mb, world) if args.parallel == "fsdp" else local_mb

    def slowest(
        call: Callable[[], Any], after: Callable[[], Any] | None = None
    ) -> tuple[float, float]:
        """(the slowest rank's time in `call`, the time until `after` returned on every rank)."""
        dist.barrier()
        started = time.perf_counter()
        result = call()
        stall = time.perf_counter() - started
        if after is not None:
            after(result)
        dist.barrier()
        total = time.perf_counter() - started
        times = [None] * world
        dist.all_gather_object(times, (stall, total))
        return max(t[0] for t in times), max(t[1] for t in times)

    def measure(
        name: str, call: Callable[[int], Any], after: Callable[[Any], Any] | None = None
    ) -> dict[str, float]:
        runs = []
        for i in range(args.trials + 1):
            train_step()
            runs.append(slowest(lambda i=i: call(i), after))
        first, rest = runs[0], runs[1:]
        return {
            "name": name,
            "stall": statistics.median(r[0] for r in rest),
            "total": statistics.median(r[1] for r in rest),
            "first": first[0],
        }

    results = []
    # gpuws: every rank at the same step, DCP async_save with the stager kept by the tracker.
    gpuws.track("bench", model=model, optimizer=optimizer, root=str(root / "gpuws"), keep_last=1)
    tracker = default_tracker()

    def landed(_: Any) -> None:
        tracker.wait()
        if tracker.last_error:  # a failed checkpoint is no figure: it would read as a fast one
            raise SystemExit(f"rank {rank}: {tracker.last_error}")

    results.append(
        measure(
            "gpuws.checkpoint() (DCP async_save, staging reused)",
            lambda i: tracker.checkpoint(),
            landed,
        )
    )

    # DCP's async_save as its examples show it: a new stager (new CPU buffers) each time.
    group = dist.new_group(backend="gloo")

    def async_fresh(i: int) -> Any:
        state = dict(zip(("model", "optimizer"), get_state_dict(model, optimizer), strict=False))
        stager = DefaultStager(StagingOptions(cuda, False, False, cuda))
        return dcp.async_save(
            state, checkpoint_id=str(root / f"async-{i}"), process_group=group, async_stager=stager
        )

    results.append(
        measure("dcp.async_save, a new stager each time", async_fresh, lambda f: f.result())
    )

    def blocking(i: int) -> None:
        state = dict(zip(("model", "optimizer"), get_state_dict(model, optimizer), strict=False))
        dcp.save(state, checkpoint_id=str(root / f"blocking-{i}"))

    results.append(measure("dcp.save (blocking, files fsynced)", blocking))

    full = StateDictOptions(full_state_dict=True, cpu_offload=True)

    def rank0_save(durable: bool) -> Callable[[int], None]:
        def save(i: int) -> None:
            model_state, optim_state = get_state_dict(
                model, optimizer, options=full
            )  # all ranks: a gather
            if rank == 0:
                path = root / f"torch-{i}.pt"
                with open(path, "wb") as f:
                    torch.save({"model": model_state, "optimizer": optim_state}, f)
                    if durable:
                        f.flush()
                        os.fsync(f.fileno())

        return save

    results.append(measure("torch.save on rank 0 + fsync", rank0_save(True)))
    results.append(measure("torch.save on rank 0 (page cache)", rank0_save(False)))

    from jupyter_gpu_ws.checkpoints.tracker import Tracker

    n = 200_000
    step_ns = max(_gather(timeit.timeit(lambda: tracker.step(7), number=n) / n * 1e9, world))
    plain = Tracker().track("plain", model=torch.nn.Linear(2, 2), root=str(root / "plain"))
    plain_ns = max(_gather(timeit.timeit(lambda: plain.step(7), number=n) / n * 1e9, world))
    if rank == 0:
        where = torch.cuda.get_device_name(0) if cuda else "CPU"
        base = results[2]["stall"]
        print(
            f"\n# dcp_bench: {args.parallel} on {world} ranks ({where}, {os.cpu_count()} cores, torch "
            f"{torch.__version__}), {args.layers} x Linear({args.width}, {args.width}) + AdamW: {total_mb:.0f} MiB "
            f"of state ({local_mb:.0f} MiB per rank), median of {args.trials}\n"
        )
        print(
            "| checkpoint | loop stall | ratio to blocking dcp.save | until complete on every rank | first |"
        )
        print("|---|---|---|---|---|")
        for r in results:
            print(
                f"| {r['name']} | {r['stall'] * 1e3:.0f} ms | {r['stall'] / base:.1%} | {r['total'] * 1e3:.0f} ms | "
                f"{r['first'] * 1e3:.0f} ms |"
            )
        print(
            f"| step() with nothing pending | {step_ns:.0f} ns (a single-process tracker here: "
            f"{plain_ns:.0f} ns) | | | |"
        )
    dist.barrier()
    tracker._at_exit()
    dist.destroy_process_group()


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value.to_local() if hasattr(value, "to_local") else value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _gather(value: float, world: int) -> list[float]:
    import torch.distributed as dist

    found: list[Any] = [None] * world
    dist.all_gather_object(found, value)
    return found


def _sum(value: float, world: int) -> float:
    return sum(_gather(value, world))


if __name__ == "__main__":
    main()
