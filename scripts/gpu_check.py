"""The checks that need a real NVIDIA GPU, in one short run (none of the test suite needs one).

    python3 scripts/gpu_check.py

1. The real NVML reader (`NvmlReader` over nvidia-ml-py): every GPU's figures, the utilisation
   rising under a matrix-product load, and this process listed with its memory on the GPU.
2. A CUDA checkpoint: a model and AdamW on the GPU, a checkpoint taken between steps, the loop's
   stall against `torch.save` + fsync of the same state, and a resume in a fresh process that
   goes on bitwise like the uninterrupted run (parameters, optimizer, and the CUDA RNG that
   dropout and the data draw from).
3. An environment snapshot there: torch's CUDA build and the machine (driver, GPUs) read
   through NVML, and the compatibility verdicts (none on its own machine; a warning for a
   build without this GPU's architecture).

Prints one line per figure and `GPU CHECK PASSED` or the first failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# GPUWS_CHECK_DEVICE=cpu dry-runs the checkpoint part on a machine without a GPU.
DEVICE = os.environ.get("GPUWS_CHECK_DEVICE", "cuda")

from jupyter_gpu_ws.monitor.nvml import NvmlReader  # noqa: E402


def check_nvml() -> None:
    import torch

    reader = NvmlReader()
    idle = reader.read()
    assert idle.error is None, idle.error
    assert idle.gpus, "NVML found no GPU"
    print(f"driver {idle.driver_version}, CUDA driver {idle.cuda_driver_version}")
    for gpu in idle.gpus:
        print(
            f"GPU {gpu.index}: {gpu.name} util {gpu.utilization}% mem {gpu.memory_used}/{gpu.memory_total} "
            f"temp {gpu.temperature} C power {gpu.power_draw}/{gpu.power_limit} W sm {gpu.sm_clock} MHz "
            f"mig {len(gpu.mig)} processes {len(gpu.processes)}"
        )
        assert gpu.memory_total and gpu.memory_total > 0

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            for _ in range(50):
                a @ a
            torch.cuda.synchronize()

    worker = threading.Thread(target=load)
    worker.start()
    try:
        peak, ours = 0, None
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            time.sleep(0.5)
            reading = reader.read()
            gpu = reading.gpus[0]
            peak = max(peak, gpu.utilization or 0)
            ours = next((p for p in gpu.processes if p.pid == os.getpid()), ours)
            if peak >= 50 and ours is not None:
                break
        pids = [(p.pid, p.memory_used) for p in gpu.processes]
    finally:
        stop.set()
        worker.join()
    print(
        f"under load: peak utilisation {peak}%, processes on GPU 0 {pids}, this pid {os.getpid()}"
    )
    assert peak >= 50, f"utilisation under a matrix-product load stayed at {peak}%"
    if ours is None:
        # In a container NVML may report host pids; say so rather than fail on it.
        print("NOTE: this process was not among NVML's processes (pid namespace of the container?)")
    else:
        print(f"this process holds {ours.memory_used} bytes on GPU 0")


def train(steps: range, model, opt, tracker=None, checkpoint_at: int | None = None) -> list[float]:
    import torch

    losses = []
    for i in steps:
        x = torch.randn(256, 4096, device=DEVICE)  # draws from the CUDA RNG
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if tracker is not None and i == checkpoint_at:
            started = time.perf_counter()
            tracker.request()
            tracker.step(i)  # the safe point: waits for the copy into pinned staging only
            stall = time.perf_counter() - started
            tracker.wait()
            print(
                f"checkpoint at step {i}: loop stall {stall * 1e3:.1f} ms, "
                f"whole write {(time.perf_counter() - started) * 1e3:.0f} ms"
            )
    return losses


def build(layers: int):
    import torch

    torch.manual_seed(0)  # seeds the CUDA generators too
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Dropout(0.1)]
    model = torch.nn.Sequential(*blocks).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt


def digest(model, opt) -> str:
    h = hashlib.sha256()
    for t in list(model.state_dict().values()) + [
        v for s in opt.state_dict()["state"].values() for v in s.values()
    ]:
        if hasattr(t, "cpu"):
            h.update(
                t.detach()
                .cpu()
                .contiguous()
                .view(-1)
                .view(dtype=__import__("torch").uint8)
                .numpy()
                .tobytes()
            )
    return h.hexdigest()


def child(root: str, layers: int, total: int) -> None:
    """A fresh process: resume from the checkpoint and finish the run."""
    import torch

    from jupyter_gpu_ws.checkpoints.tracker import Tracker

    torch.use_deterministic_algorithms(True)
    model, opt = build(layers)
    torch.randn(7, device=DEVICE)  # move the RNG on: the resume must put it back
    tracker = Tracker().track("gpu-check", model=model, optimizer=opt, root=root)
    start = tracker.resume()
    losses = train(range(start, total), model, opt)
    print(json.dumps({"start": start, "losses": losses, "digest": digest(model, opt)}))


def check_checkpoint(layers: int = 8, total: int = 12, at: int = 5) -> None:
    import torch

    from jupyter_gpu_ws.checkpoints.tracker import Tracker

    torch.use_deterministic_algorithms(True)
    root = tempfile.mkdtemp(prefix="gpuws-gpu-check-")
    model, opt = build(layers)
    tracker = Tracker().track("gpu-check", model=model, optimizer=opt, root=root)
    assert tracker.cuda or DEVICE == "cpu", "the tracker did not see the model on CUDA"
    train(range(0, 2), model, opt, tracker, checkpoint_at=1)  # allocates the pinned staging buffers
    losses = train(range(2, total), model, opt, tracker, checkpoint_at=at)
    reference = digest(model, opt)

    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    mib = sum(t.numel() * t.element_size() for t in model.parameters()) * 3 / 2**20
    saves = []
    for _ in range(3):
        started = time.perf_counter()
        torch.save(state, Path(root) / "blocking.pt")
        with open(Path(root) / "blocking.pt", "rb") as f:
            os.fsync(f.fileno())
        saves.append(time.perf_counter() - started)
    print(
        f"state {mib:.0f} MiB (model + AdamW): torch.save + fsync median {sorted(saves)[1] * 1e3:.0f} ms"
    )

    out = subprocess.run(
        [sys.executable, __file__, "--child", root, str(layers), str(total)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"fresh process resumed at step {result['start']}; losses after resume "
        f"{'match' if result['losses'] == losses[at - 1 :] else 'DIFFER'}; final state "
        f"{'bitwise equal' if result['digest'] == reference else 'DIFFERENT'}"
    )
    assert result["start"] == at + 1
    assert result["losses"] == losses[at + 1 - 2 :], (result["losses"], losses)
    assert result["digest"] == reference


def check_environment() -> None:
    """3. An environment snapshot on a GPU machine: torch's CUDA build and arch list and the
    machine's driver and GPUs through real NVML, then the compatibility verdicts: none against
    its own machine, a warning for a build that lacks this GPU's architecture."""
    from jupyter_gpu_ws.envsnap import capture, compatibility, read_machine

    snapshot = capture(sys.executable)
    machine = read_machine()
    torch_info, python = snapshot["torch"], snapshot["python"]
    print(
        f"snapshot: {len(snapshot['packages'])} packages, torch {torch_info.get('version')} CUDA "
        f"{torch_info.get('cuda')} archs {','.join(torch_info.get('arch_list') or [])}"
    )
    assert machine and machine.get("gpus"), machine
    gpu = machine["gpus"][0]
    print(
        f"machine: driver {machine.get('driver_version')}, CUDA driver {machine.get('cuda_driver_version')}, "
        f"{len(machine['gpus'])} GPU(s): {gpu}"
    )
    own = compatibility(snapshot, machine, python)
    for verdict in own:
        print(f"  own machine: {verdict.level}: {verdict.message}")
    assert not [v for v in own if v.level in ("warn", "error")], own
    old = dict(snapshot, torch=dict(torch_info, arch_list=["sm_50", "sm_60", "sm_70"]))
    verdicts = compatibility(old, machine, python)
    for verdict in verdicts:
        print(f"  a build without this GPU's architecture: {verdict.level}: {verdict.message}")
    assert [v for v in verdicts if v.level in ("warn", "error")], verdicts


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    import torch

    if DEVICE == "cpu":
        check_checkpoint(layers=2)
    else:
        print(
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}"
        )
        check_nvml()
        check_checkpoint()
        check_environment()
    print("GPU CHECK PASSED")


if __name__ == "__main__":
    main()
