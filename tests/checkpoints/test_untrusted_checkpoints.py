"""A checkpoint folder from the store is read only from plain, regular files inside it: one whose
manifest names another file, a device, a FIFO or a symbolic link, states a wrong size, or whose
state names a bogus dtype or place, is skipped by `resume()` for the one before it (bitwise) and
refused by `jupyter gpuws checkpoint export` in one line; nothing blocks (real files, FIFOs,
symbolic links, /dev/zero, real torch and torchrun), nor does resume()'s wait for the server."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch

from jupyter_gpu_ws.checkpoints.files import (
    MANIFEST,
    CheckpointError,
    CheckpointInfo,
    checksum,
    complete_checkpoints,
)
from jupyter_gpu_ws.checkpoints.tracker import Tracker
from jupyter_gpu_ws.cli import main

from .torchrun import differences, load, run

# Every risky call here returns in well under a second; a regression that blocks (reads /dev/zero,
# waits on a FIFO's writer) fails after this long instead of hanging the suite.
DEADLINE = 30.0


def within(call: Callable[[], Any], seconds: float = DEADLINE) -> tuple[Any, list[str]]:
    """`call()`'s result and the warnings it gave, or a test failure if it has not returned in time."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                outcome["result"] = call()
            outcome["warnings"] = [str(w.message) for w in caught]
        except BaseException as err:  # noqa: BLE001 - handed back to the test's thread
            outcome["error"] = err

    thread = threading.Thread(target=target, daemon=True)  # a blocked read cannot hold up the exit
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"did not return within {seconds:.0f} s: it blocks", pytrace=False)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"], outcome["warnings"]


def model_and_optimizer(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train(
    model: torch.nn.Module, opt: torch.optim.Optimizer, tracker: Tracker, start: int, stop: int
) -> None:
    for i in range(start, stop):
        x = torch.randn(16, 8)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        tracker.step(i)


@dataclass
class Saved:
    root: Path
    good: CheckpointInfo
    bad: CheckpointInfo  # the newer one, which each test damages
    weights: list[torch.Tensor]  # the model's parameters at the good one
    outside: Path  # a file outside the run's folder, which a manifest may try to name

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.bad.path / MANIFEST).read_text())

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        (self.bad.path / MANIFEST).write_text(json.dumps(manifest))

    def list_as(self, name: str, size: int | None = None, source: Path | None = None) -> None:
        """The manifest lists `name` with `size` (default: what stat says, as someone writing the
        store would make it look right) and, where it can be read, its checksum."""
        manifest = self.manifest()
        size = os.stat(self.bad.path / name).st_size if size is None else size
        digest = checksum(source) if source is not None else "0" * 32
        manifest["files"][name] = {"size": size, "xxh3": digest}
        self.write_manifest(manifest)


@pytest.fixture
def saved(tmp_path: Path) -> Saved:
    """Two checkpoints of one run: a good one at step 2 and a newer one at step 5."""
    root = tmp_path / "ck"
    model, opt = model_and_optimizer()
    tracker = Tracker().track("run", model=model, optimizer=opt, root=str(root), keep_last=5)
    train(model, opt, tracker, 0, 3)
    good = tracker.checkpoint(wait=True)
    weights = [p.detach().clone() for p in model.parameters()]
    train(model, opt, tracker, 3, 6)
    bad = tracker.checkpoint(wait=True)
    assert good is not None and bad is not None
    outside = tmp_path / "outside.bin"
    outside.write_bytes((bad.path / "rng.pt").read_bytes())  # a file that would pass for rng.pt
    return Saved(root, good, bad, weights, outside)


def resume_falls_back(saved: Saved, reason: str) -> None:
    """A new process resumes: the damaged checkpoint is skipped, saying why, for the good one."""
    model, opt = model_and_optimizer(seed=123)
    tracker = Tracker().track("run", model=model, optimizer=opt, root=str(saved.root))
    start, said = within(tracker.resume)
    assert start == saved.good.step + 1
    assert all(torch.equal(a, b) for a, b in zip(saved.weights, model.parameters(), strict=True))
    assert any(f"skipping checkpoint {saved.bad.path.name}: {reason}" in line for line in said), (
        said
    )


def export_refuses(
    saved: Saved, reason: str, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """The export of the damaged checkpoint ends with one line naming it and the reason."""
    to = tmp_path / "model.pt"
    code, _ = within(lambda: main(["checkpoint", "export", str(saved.bad.path), "--to", str(to)]))
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1 and last.startswith("jupyter gpuws: error:")
    assert f"{saved.bad.path.name}: {reason}" in last, last
    assert not to.exists()


def unusable(saved: Saved, reason: str, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    resume_falls_back(saved, reason)
    export_refuses(saved, reason, capsys, tmp_path)


# -- what a manifest names -------------------------------------------------------------------


def test_a_manifest_naming_dev_zero_is_refused_without_reading_it(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    saved.list_as(
        "/dev/zero", size=0
    )  # /dev/zero's stated size: a reader that trusts it never ends
    reason = "the manifest names '/dev/zero', which is outside its folder"
    unusable(saved, reason, capsys, tmp_path)


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_a_manifest_naming_a_file_outside_its_folder_is_refused(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path, how: str
) -> None:
    # ../../../outside.bin from the checkpoint folder (ck/run/ckpt-…), or its absolute path: a
    # real file, with its real size and checksum in the manifest.
    name = "../../../outside.bin" if how == "relative" else str(saved.outside)
    assert (saved.bad.path / name).resolve() == saved.outside
    manifest = saved.manifest()
    manifest["files"][name] = manifest["files"].pop("rng.pt")
    saved.write_manifest(manifest)
    reason = f"the manifest names {name!r}, which is outside its folder"
    unusable(saved, reason, capsys, tmp_path)


def test_a_file_the_manifest_does_not_list_is_never_read(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    manifest = saved.manifest()
    del manifest["files"]["rng.pt"]  # on disk, intact, but not in the manifest
    saved.write_manifest(manifest)
    unusable(saved, "the manifest does not list rng.pt", capsys, tmp_path)


# -- what a listed file is -------------------------------------------------------------------


def test_a_fifo_in_place_of_a_file_is_never_opened_for_a_writer(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    (saved.bad.path / "tensors.bin").unlink()
    os.mkfifo(saved.bad.path / "tensors.bin")  # nobody ever writes to it
    saved.list_as("tensors.bin")  # 0 bytes, as stat says of a FIFO
    reason = "tensors.bin is a named pipe (FIFO), never read"
    unusable(saved, reason, capsys, tmp_path)


@pytest.mark.parametrize("target", ["inside", "outside", "dev-zero"])
def test_a_symbolic_link_in_place_of_a_file_is_never_followed(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path, target: str
) -> None:
    rng = saved.bad.path / "rng.pt"
    copy = saved.bad.path / "rng-copy.pt"
    shutil.copyfile(rng, copy)
    rng.unlink()
    # To an identical file beside it or outside (same size and checksum: only the link is wrong),
    # or to /dev/zero with the size stat gives it.
    rng.symlink_to(
        {"inside": copy.name, "outside": str(saved.outside), "dev-zero": "/dev/zero"}[target]
    )
    if target == "dev-zero":
        saved.list_as("rng.pt")
    reason = "rng.pt is a symbolic link, never followed"
    unusable(saved, reason, capsys, tmp_path)


def test_a_device_in_place_of_a_file_is_never_opened(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    state = saved.bad.path / "state.pt"
    state.unlink()
    try:
        os.mknod(state, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    saved.list_as("state.pt")
    reason = "state.pt is a device, never read"
    unusable(saved, reason, capsys, tmp_path)


def test_a_file_of_another_size_than_the_manifest_states_is_refused(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    stated = saved.manifest()["files"]["rng.pt"]["size"]
    with open(saved.bad.path / "rng.pt", "r+b") as f:
        f.truncate(5)
    reason = f"rng.pt has 5 bytes, the manifest says {stated}"
    unusable(saved, reason, capsys, tmp_path)


def test_a_huge_stated_size_is_refused_at_once(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    actual = (saved.bad.path / "tensors.bin").stat().st_size
    saved.list_as("tensors.bin", size=2**50)
    reason = f"tensors.bin has {actual} bytes, the manifest says {2**50}"
    unusable(saved, reason, capsys, tmp_path)


# -- the manifest and the folder themselves --------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-large"])
def test_a_manifest_that_is_not_a_small_regular_file_is_skipped_with_its_reason(
    saved: Saved, capsys: pytest.CaptureFixture, tmp_path: Path, kind: str
) -> None:
    manifest = saved.bad.path / MANIFEST
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
        reason = "manifest.json is a named pipe (FIFO), never read"
    elif kind == "dev-zero":
        manifest.symlink_to("/dev/zero")
        reason = "manifest.json is a symbolic link, never followed"
    else:
        manifest.write_bytes(b" " * (5 * 2**20) + b"{}")
        reason = (
            f"manifest.json has {5 * 2**20 + 2} bytes, more than a manifest of a checkpoint has"
        )
    unusable(saved, reason, capsys, tmp_path)
    # The run named as track() named it: the export says why its newest is passed over, and takes
    # the one before it.
    code, _ = within(
        lambda: main(
            [
                "checkpoint",
                "export",
                "run",
                "--root",
                str(saved.root),
                "--to",
                str(tmp_path / "good.pt"),
            ]
        )
    )
    assert code == 0 and f"step {saved.good.step}" in capsys.readouterr().err


def test_a_checkpoint_folder_that_is_a_symbolic_link_is_not_a_checkpoint(saved: Saved) -> None:
    # A copy of the newer checkpoint kept elsewhere, linked into the run's folder under a newer name.
    elsewhere = saved.root.parent / "elsewhere"
    shutil.copytree(saved.bad.path, elsewhere)
    shutil.rmtree(saved.bad.path)
    link = saved.good.path.parent / "ckpt-000000009-20991231T000000Z"
    link.symlink_to(elsewhere, target_is_directory=True)
    assert [p for p, _ in complete_checkpoints(saved.good.path.parent)] == [saved.good.path]
    model, opt = model_and_optimizer(seed=123)
    tracker = Tracker().track("run", model=model, optimizer=opt, root=str(saved.root))
    start, _ = within(tracker.resume)
    assert start == saved.good.step + 1
    assert all(torch.equal(a, b) for a, b in zip(saved.weights, model.parameters(), strict=True))


def copy_of_run_as(source: Path, target: Path, name: str) -> None:
    """A copy of a run's folder whose manifests call the run `name`."""
    shutil.copytree(source, target)
    for folder, manifest in complete_checkpoints(target):
        (folder / MANIFEST).write_text(json.dumps({**manifest, "run": name}))


def test_the_servers_training_view_reads_no_checkpoint_through_a_link_or_from_a_fifo(
    saved: Saved, tmp_path: Path
) -> None:
    from jupyter_gpu_ws.training.anomalies import AnomalyPolicy
    from jupyter_gpu_ws.training.watch import TrainingWatch, WatchSettings

    # A run folder that is a link to one elsewhere: not one of the runs here.
    copy_of_run_as(saved.good.path.parent, tmp_path / "elsewhere", "linked-run")
    (saved.root / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    metrics = saved.bad.path / "metrics.json"
    metrics.unlink()
    os.mkfifo(metrics)  # nobody writes to it
    saved.list_as("metrics.json")
    watch = TrainingWatch(
        WatchSettings(policy=AnomalyPolicy()),
        streams=dict,
        kernel_busy=lambda k: False,
        deadline=lambda: None,
        checkpoints_root=saved.root,
    )
    within(watch.tick)
    assert set(watch.runs) == {"run"}
    assert watch.runs["run"].from_checkpoint == str(
        saved.bad.path
    )  # its manifest is fine; its curves are not read


# -- what state.pt says of the tensors -------------------------------------------------------


def rewrite_skeleton(saved: Saved, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the first tensor's entry in state.pt, and the manifest to match (as someone writing
    the store could): only the entry itself is wrong."""
    path = saved.bad.path / "state.pt"
    skeleton = torch.load(path, weights_only=True)
    change(skeleton["model"]["0.weight"])
    torch.save(skeleton, path)
    manifest = saved.manifest()
    manifest["files"]["state.pt"] = {"size": path.stat().st_size, "xxh3": checksum(path)}
    saved.write_manifest(manifest)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda e: e.update(dtype="__class__"),
            "state.pt names the dtype '__class__', which is not a torch dtype",
        ),
        (
            lambda e: e.update(dtype="float1024"),
            "state.pt names the dtype 'float1024', which is not a torch dtype",
        ),
        (lambda e: e.update(offset=2**40), "state.pt places a tensor at 1099511627776"),
        (lambda e: e.update(offset=-8), "state.pt places a tensor at -8"),
        (
            lambda e: e.update(shape=[2**31, 2**31]),
            "state.pt gives a float32 tensor of shape [2147483648, 2147483648]",
        ),
        (lambda e: e.update(shape="16x8"), "state.pt gives a tensor the shape '16x8'"),
    ],
    ids=[
        "not-a-dtype",
        "no-such-dtype",
        "past-the-end",
        "negative-offset",
        "shape-larger-than-bytes",
        "shape-not-a-list",
    ],
)
def test_a_tensor_entry_with_a_bogus_dtype_place_or_shape_makes_the_checkpoint_unusable(
    saved: Saved,
    capsys: pytest.CaptureFixture,
    tmp_path: Path,
    change: Callable[[dict[str, Any]], None],
    reason: str,
) -> None:
    rewrite_skeleton(saved, change)
    unusable(saved, reason, capsys, tmp_path)


# -- through DCP -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_by_torchrun(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torchrun run (one rank, DDP) checkpointed through DCP at steps 4 and 8, with the whole
    state written beside each checkpoint for comparison."""
    base = tmp_path_factory.mktemp("dcp")
    run(
        1,
        "--parallel",
        "ddp",
        "--every",
        "4",
        "--steps",
        "10",
        "--dump-full",
        "--root",
        str(base / "ck"),
        "--out",
        str(base / "out"),
        log=base / "log",
    )
    return base


@pytest.fixture
def dcp_copy(tmp_path: Path, saved_by_torchrun: Path) -> tuple[Path, Path]:
    """A copy of the run's checkpoints (root, newest checkpoint folder), for one test to damage."""
    root = tmp_path / "ck"
    shutil.copytree(saved_by_torchrun / "ck", root)
    newest, manifest = complete_checkpoints(root / "dist-run")[-1]
    assert manifest["step"] == 8 and manifest["kind"] == "dcp"
    return root, newest


def relist(folder: Path, name: str) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][name] = {
        "size": (folder / name).stat().st_size,
        "xxh3": checksum(folder / name),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))


def index_naming(folder: Path, place: Callable[[Any], None]) -> None:
    """DCP's index with every place changed by `place`, and the manifest rewritten to match."""
    with open(folder / ".metadata", "rb") as f:
        metadata = pickle.load(f)  # our own test's file, written by torchrun just now
    for info in metadata.storage_data.values():
        place(info)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    relist(folder, ".metadata")


def resume_in_one_process(root: Path) -> tuple[int, list[str], dict[str, Any]]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from .distributed_run import build

    model = build("plain", 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.5)
    tracker = Tracker().track(
        "dist-run",
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        progress={},
        root=str(root),
    )
    start, said = within(tracker.resume)
    model_state, optim_state = get_state_dict(model, optimizer)
    return start, said, {"model": model_state, "optimizer": optim_state}


def dcp_damages() -> list[Any]:
    def outside(info: Any) -> None:
        info.relative_path = "../../../outside.distcp"

    def past_the_end(info: Any) -> None:
        info.offset += 2**40

    def fifo(folder: Path) -> None:
        (folder / "__0_0.distcp").unlink()
        os.mkfifo(folder / "__0_0.distcp")
        relist_size(folder, "__0_0.distcp", 0)

    def symlink(folder: Path) -> None:
        (folder / "rank-0.pt").unlink()
        (folder / "rank-0.pt").symlink_to("/dev/zero")
        relist_size(folder, "rank-0.pt", 0)

    return [
        pytest.param(
            lambda folder: index_naming(folder, outside),
            ".metadata names '../../../outside.distcp', which is outside its folder",
            id="index-outside",
        ),
        pytest.param(
            lambda folder: index_naming(folder, past_the_end),
            ".metadata places data at",
            id="index-past-end",
        ),
        pytest.param(fifo, "__0_0.distcp is a named pipe (FIFO), never read", id="shard-fifo"),
        pytest.param(symlink, "rank-0.pt is a symbolic link, never followed", id="rank-file-link"),
    ]


def relist_size(folder: Path, name: str, size: int) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][name]["size"] = size
    (folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(("damage", "reason"), dcp_damages())
def test_a_dcp_checkpoint_naming_other_files_falls_back_in_one_process_and_export_refuses(
    saved_by_torchrun: Path,
    dcp_copy: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    damage: Callable[[Path], None],
    reason: str,
) -> None:
    root, newest = dcp_copy
    (tmp_path / "outside.distcp").write_bytes((newest / "__0_0.distcp").read_bytes())
    damage(newest)
    start, said, state = resume_in_one_process(root)
    assert start == 5  # the checkpoint of step 4, bitwise
    saved = load(saved_by_torchrun / "out" / "full-4.pt")
    assert differences(saved["model"], state["model"]) == []
    assert differences(saved["optimizer"], state["optimizer"]) == []
    assert any(f"skipping checkpoint {newest.name}: {reason}" in line for line in said), said
    to = tmp_path / "model.pt"
    code, _ = within(lambda: main(["checkpoint", "export", str(newest), "--to", str(to)]))
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        code == 1
        and last.startswith("jupyter gpuws: error:")
        and reason in last
        and newest.name in last
    ), last
    assert not to.exists()


def test_the_servers_list_of_distributed_runs_leaves_out_a_run_folder_that_is_a_link(
    dcp_copy: tuple[Path, Path], tmp_path: Path
) -> None:
    from jupyter_gpu_ws.checkpoints.catalog import distributed_runs

    root, _ = dcp_copy
    copy_of_run_as(root / "dist-run", tmp_path / "elsewhere", "linked-run")
    (root / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    runs, _ = within(lambda: distributed_runs(root))
    assert [run["run"] for run in runs.values()] == ["dist-run"]


def test_a_distributed_resume_skips_a_dcp_checkpoint_with_a_fifo_for_the_one_before(
    saved_by_torchrun: Path, dcp_copy: tuple[Path, Path], tmp_path: Path
) -> None:
    root, newest = dcp_copy
    (newest / "__0_0.distcp").unlink()
    os.mkfifo(newest / "__0_0.distcp")
    relist_size(newest, "__0_0.distcp", 0)
    text = run(
        1,
        "--parallel",
        "ddp",
        "--every",
        "4",
        "--steps",
        "6",
        "--root",
        str(root),
        "--out",
        str(tmp_path / "out"),
        log=tmp_path / "log",
        timeout=120,
    )
    assert (
        f"skipping checkpoint {newest.name}: __0_0.distcp is a named pipe (FIFO), never read"
        in text
    )
    assert "rank 0 of 1 starts at step 5" in text
    resumed = load(tmp_path / "out" / "resumed.pt")
    saved = load(saved_by_torchrun / "out" / "full-4.pt")
    assert differences(saved["model"], resumed["model"]) == []
    assert differences(saved["optimizer"], resumed["optimizer"]) == []


# -- the way to the server -------------------------------------------------------------------


class StillRunning(BaseHTTPRequestHandler):
    """Every answer about the fetch job: still running (a server whose fetch hangs)."""

    def answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"id": "job", "state": "running", "result": {}, "errors": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *args: Any) -> None:
        pass


def test_a_server_whose_fetch_never_ends_makes_resume_raise_instead_of_waiting_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.checkpoints import fromstore
    from jupyter_gpu_ws.checkpoints.protocol import RUNTIME_DIR_ENV
    from jupyter_gpu_ws.client import SERVER_PID_ENV

    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), StillRunning
    )  # a real HTTP server, found as a kernel finds its own
    threading.Thread(target=server.serve_forever, daemon=True).start()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / f"jpserver-{os.getpid()}.json").write_text(
        json.dumps({"url": f"http://127.0.0.1:{server.server_address[1]}/", "token": "t"})
    )
    monkeypatch.setenv("GPUWS_WORKDIR", str(tmp_path))
    monkeypatch.setenv(SERVER_PID_ENV, str(os.getpid()))
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(runtime))
    monkeypatch.setattr(fromstore, "SERVER_GRACE", 1.0)
    try:
        with pytest.raises(
            CheckpointError, match="the server did not finish bringing run's checkpoint within 2 s"
        ):
            within(
                lambda: fromstore.bring_newest(
                    tmp_path / ".gpuws" / "checkpoints" / "run", "run", timeout=1.0
                )
            )
    finally:
        server.shutdown()
