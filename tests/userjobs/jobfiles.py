"""The scripts the job tests run, written into a work directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jupyter_gpu_ws.userjobs import trust

# A small deterministic CPU loop (argv: steps, seconds per step, steps between checkpoints): each step's batch comes from the step's own seed, so a run
# resumed at step k computes what an uninterrupted one does. Each step's loss goes to
# losses.txt (exact, as float.hex) before the safe point. Optionally (argv 4 and 5) the loss
# becomes NaN at a step, and stays so (the weights are then NaN), every time or only while a
# marker file does not exist yet (the attempt that reaches it first writes it).
TRAIN = """\
import os, sys, time
import torch
import jupyter_gpu_ws as gpuws

total, delay = int(sys.argv[1]), float(sys.argv[2])
every = int(sys.argv[3]) if len(sys.argv) > 3 else 5
nan_at = int(sys.argv[4]) if len(sys.argv) > 4 else -1
nan_once = sys.argv[5] if len(sys.argv) > 5 else None
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
gpuws.track(model=model, optimizer=opt, total_steps=total, every_steps=every)
start = gpuws.resume()
print(f"resumed {start}", flush=True)
for i in range(start, total):
    g = torch.Generator().manual_seed(i)
    x = torch.randn(32, 8, generator=g)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    if i == nan_at and not (nan_once and os.path.exists(nan_once)):
        if nan_once:
            open(nan_once, "w").close()
        loss = loss * float("nan")
    opt.zero_grad()
    loss.backward()
    opt.step()
    with open("losses.txt", "a") as f:
        f.write(f"{i} {loss.item().hex()}\\n")
    gpuws.step(i, loss=loss)
    time.sleep(delay)
print("done", flush=True)
"""

FAILING = "import sys\nprint('about to fail', flush=True)\nsys.exit(3)\n"
BROKEN = "print('never'\n"
FLOOD = "import sys\nline = b'x' * 100 + b'\\n'\nwhile True:\n    sys.stdout.buffer.write(line * 1000)\n"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def losses(path: Path) -> dict[int, str]:
    """Step → loss; a step run twice (after a resume) keeps its last value."""
    out: dict[int, str] = {}
    for line in path.read_text().splitlines():
        step, value = line.split()
        out[int(step)] = value
    return out


@contextmanager
def job_key(value: str) -> Iterator[None]:
    """$GPUWS_JOB_KEY for the servers a module-wide fixture starts (monkeypatch is per test)."""
    previous = os.environ.get(trust.KEY_ENV)
    os.environ[trust.KEY_ENV] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(trust.KEY_ENV, None)
        else:
            os.environ[trust.KEY_ENV] = previous
