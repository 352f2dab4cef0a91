"""A small training run for `torchrun` on CPU (gloo), checkpointed through gpuws: the script the
distributed tests launch. Not a test module.

Every rank draws its data and dropout masks from its own RNGs (torch, Python, NumPy), seeded
per rank, so a resume that restores them goes on bitwise like the uninterrupted run. It writes,
in --out:
    losses-<rank>.jsonl       one line per step: {"step", "loss"}
    final-<rank>.pt           this rank's own state at the end (local shards, optimizer, RNG)
    full-<step>.pt            (rank 0, --dump-full) the whole model and optimizer state at each
                              checkpoint step, gathered from every rank
    resumed.pt                (rank 0) the whole state right after resume()
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time

import numpy as np
import psutil
import torch
import torch.distributed as dist

import jupyter_gpu_ws as gpuws
from jupyter_gpu_ws.checkpoints.tracker import default_tracker


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--parallel", choices=["ddp", "fsdp", "plain"], default="ddp")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=None)
    p.add_argument("--keep", type=int, default=10)
    p.add_argument("--root", required=True)
    p.add_argument("--name", default="dist-run")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--sleep", type=float, default=0.0, help="seconds per step (time for requests to arrive)"
    )
    p.add_argument(
        "--kill-at",
        type=int,
        default=None,
        help="rank 0 kills the whole run (SIGKILL) after this step",
    )
    p.add_argument(
        "--kill-in-save",
        type=int,
        default=None,
        help="at this step every rank starts a checkpoint and the last rank kills the run at once",
    )
    p.add_argument(
        "--dump-full",
        action="store_true",
        help="rank 0 writes the whole state at each checkpoint step",
    )
    p.add_argument("--no-resume", action="store_true")
    p.add_argument("--width", type=int, default=32)
    p.add_argument(
        "--stager-closes-after-staging",
        action="store_true",
        help="DCP's DefaultStager closes itself after each staging, as torch 2.11's does",
    )
    p.add_argument(
        "--linger",
        type=float,
        default=0.0,
        help="seconds spent after the loop (a final evaluation)",
    )
    return p.parse_args()


def build(parallel: str, width: int) -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(16, width),
        torch.nn.Dropout(0.1),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 1),
    )
    if parallel == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    if parallel == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in (model[0], model[3], model[5]):
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    return model


def kill_run() -> None:
    """What a machine that vanishes does: every process of the run (torchrun and its workers) gets
    SIGKILL at once."""
    agent = psutil.Process(os.getppid())
    for process in [*agent.children(recursive=True), agent]:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    return {"model": model_state, "optimizer": optim_state}


def local(value):  # a DTensor's own shard, anything else as it is
    if hasattr(value, "to_local"):
        return value.to_local().clone()
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: local(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(local(v) for v in value)
    return value


def stager_closes_after_staging() -> None:
    """DCP's DefaultStager as torch 2.11 has it (seen on an H200): `_stage` closes its
    StateDictStager after every staging (to break a reference cycle), which empties that
    stager's deepcopy table, so a second staging through the same DefaultStager fails with
    KeyError: <class 'type'>. torch 2.13 leaves it open."""
    from torch.distributed.checkpoint.staging import DefaultStager

    stage = DefaultStager._stage

    def _stage(self: DefaultStager, state_dict: dict, **kwargs: object) -> dict:
        staged = stage(self, state_dict, **kwargs)
        self._state_dict_stager.close()
        return staged

    DefaultStager._stage = _stage  # type: ignore[method-assign]


def main() -> int:
    args = parse()
    if args.stager_closes_after_staging:
        stager_closes_after_staging()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(args.out, exist_ok=True)
    model = build(args.parallel, args.width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.5)
    progress = {"samples": 0}
    torch.manual_seed(1000 + rank)  # each rank's own data and dropout
    random.seed(2000 + rank)
    np.random.seed(3000 + rank)
    gpuws.track(
        args.name,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        progress=progress,
        every_steps=args.every,
        keep_last=args.keep,
        root=args.root,
        total_steps=args.steps,
    )
    tracker = default_tracker()
    start = 0 if args.no_resume else gpuws.resume()
    if rank == 0 and not args.no_resume:
        torch.save(
            full_state(model, optimizer) | {"progress": dict(progress), "start": start},
            os.path.join(args.out, "resumed.pt"),
        )
    elif not args.no_resume:
        full_state(model, optimizer)  # a collective: every rank takes part
    print(f"rank {rank} of {world} starts at step {start}", flush=True)
    with open(os.path.join(args.out, f"losses-{rank}.jsonl"), "a") as losses:
        for i in range(start, args.steps):
            x = torch.randn(8, 16)
            y = x.sum(dim=1, keepdim=True) * (1 + 0.01 * random.random()) + 0.01 * float(
                np.random.randn()
            )
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            progress["samples"] += x.shape[0]
            losses.write(json.dumps({"step": i, "loss": loss.item().hex()}) + "\n")
            losses.flush()
            saving = args.every and i % args.every == 0 and i > 0
            if args.dump_full and saving:
                state = full_state(model, optimizer)
                if rank == 0:
                    torch.save(
                        state | {"progress": dict(progress)}, os.path.join(args.out, f"full-{i}.pt")
                    )
            gpuws.step(i, loss=loss)  # rank 0 records the loss, read in the background
            if args.kill_in_save == i:
                tracker.wait()  # the previous checkpoint is complete
                gpuws.checkpoint()  # and this one is being written when the run dies
                if rank == world - 1:
                    kill_run()  # at once: the save needs every rank's part, which takes longer
                time.sleep(60)
            if args.kill_at == i and rank == 0:
                kill_run()
            if args.sleep:
                time.sleep(args.sleep)
    if args.linger:
        print(f"rank {rank} lingers", flush=True)
        time.sleep(args.linger)
    tracker.wait()
    torch.save(
        {
            "model": local(model.state_dict()),
            "optimizer": local(optimizer.state_dict()),
            "rng": torch.get_rng_state(),
            "python": random.random(),
            "numpy": float(np.random.rand()),
            "progress": dict(progress),
        },
        os.path.join(args.out, f"final-{rank}.pt"),
    )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
