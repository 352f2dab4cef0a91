"""Distributed checkpoints through torch.distributed.checkpoint, with real `torchrun` runs on the CPU
(gloo): DDP and FSDP2, policy saves, kill -9, bitwise resume on the same world size, resharding
to another world size, a kill in the middle of an async save, SIGTERM, the checkpoint's files."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import signal
from pathlib import Path

import pytest
import torch

from jupyter_gpu_ws.checkpoints.files import complete_checkpoints
from tests.waiting import until

from .torchrun import Run, differences, load, losses, run

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


def checkpoints(root: Path, name: str = "dist-run") -> list[tuple[Path, dict]]:
    return complete_checkpoints(root / name)


@pytest.fixture(scope="module")
def saved_on_two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An FSDP2 run on 2 ranks, checkpointed by policy at steps 4 and 8, with the whole state
    (gathered from both ranks) written beside each checkpoint for comparison."""
    base = tmp_path_factory.mktemp("two")
    run(
        2,
        "--parallel",
        "fsdp",
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


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_run_killed_with_sigkill_resumes_bitwise_on_the_same_world_size(
    tmp_path: Path, parallel: str
) -> None:
    common = ["--parallel", parallel, "--every", "4", "--steps", "14"]
    run(
        2,
        *common,
        "--root",
        str(tmp_path / "straight"),
        "--out",
        str(tmp_path / "straight-out"),
        log=tmp_path / "straight.log",
    )
    # The same run, killed (every process, SIGKILL) after step 9, then started again.
    run(
        2,
        *common,
        "--kill-at",
        "9",
        "--root",
        str(tmp_path / "ck"),
        "--out",
        str(tmp_path / "out"),
        log=tmp_path / "killed.log",
        expect=None,
    )
    assert not (tmp_path / "out" / "final-0.pt").exists()  # it did not get to the end
    saved = [m["step"] for _, m in checkpoints(tmp_path / "ck")]
    assert saved and max(saved) in (4, 8)
    text = run(
        2,
        *common,
        "--root",
        str(tmp_path / "ck"),
        "--out",
        str(tmp_path / "out"),
        log=tmp_path / "resumed.log",
    )
    start = max(saved) + 1
    assert (
        f"rank 0 of 2 starts at step {start}" in text
        and f"rank 1 of 2 starts at step {start}" in text
    )
    for rank in (0, 1):
        expected, resumed = losses(tmp_path / "straight-out", rank), losses(tmp_path / "out", rank)
        assert [resumed[i] for i in range(start, 14)] == [expected[i] for i in range(start, 14)]
        # Each rank's own state at the end: its shard (or replica), optimizer, every RNG, plain values.
        assert (
            differences(
                load(tmp_path / "straight-out" / f"final-{rank}.pt"),
                load(tmp_path / "out" / f"final-{rank}.pt"),
            )
            == []
        )
    # gpuws.step(i, loss=…) on every rank: rank 0's curve, continuous across the kill and the resume.
    path, manifest = checkpoints(tmp_path / "ck")[-1]
    assert (
        manifest["step"] == 12 and manifest["health"] == "healthy" and manifest["total_steps"] == 14
    )
    curve = json.loads((path / "metrics.json").read_text())["history"]["series"]["loss"]
    assert 8 in [
        p[0] for p in curve
    ]  # the resumed checkpoint's last point: the curve goes on from it
    assert_curve_of_rank_0(curve, losses(tmp_path / "out", 0), last=12)


def test_every_checkpoint_is_taken_when_the_stager_closes_itself_after_staging(
    tmp_path: Path,
) -> None:
    """torch 2.11's DefaultStager closes itself after each staging (its deepcopy table emptied):
    the run's reused stager must survive that, or every checkpoint after the first fails."""
    text = run(
        1,
        "--parallel",
        "ddp",
        "--every",
        "2",
        "--steps",
        "7",
        "--stager-closes-after-staging",
        "--root",
        str(tmp_path / "ck"),
        "--out",
        str(tmp_path / "out"),
        log=tmp_path / "log",
    )
    assert "failed" not in text
    assert [m["step"] for _, m in checkpoints(tmp_path / "ck")] == [2, 4, 6]


def assert_curve_of_rank_0(curve: list, rank0: dict[int, str], last: int) -> None:
    """Each point is the mean of rank 0's losses since the previous point (one point per look
    of the background reader); the curve ends at the checkpoint's step."""
    steps = [p[0] for p in curve]
    assert steps == sorted(set(steps)) and steps[-1] == last
    previous = -1
    for step, _, value in curve:
        window = [float.fromhex(rank0[i]) for i in range(previous + 1, step + 1)]
        assert value == pytest.approx(sum(window) / len(window), rel=1e-5)
        previous = step


def test_the_loss_given_to_step_on_every_rank_goes_into_the_checkpoint_from_rank_0(
    saved_on_two: Path,
) -> None:
    for path, manifest in checkpoints(saved_on_two / "ck"):
        assert (
            manifest["health"] == "healthy"
            and manifest["suspect"] is None
            and manifest["total_steps"] == 10
        )
        metrics = json.loads((path / "metrics.json").read_text())
        assert metrics["step"] == manifest["step"]
        assert_curve_of_rank_0(
            metrics["history"]["series"]["loss"],
            losses(saved_on_two / "out", 0),
            last=manifest["step"],
        )


def test_every_rank_writes_its_files_and_rank_0_lists_them_all_in_the_manifest(
    saved_on_two: Path,
) -> None:
    found = checkpoints(saved_on_two / "ck")
    assert [m["step"] for _, m in found] == [4, 8]
    path, manifest = found[-1]
    assert manifest["kind"] == "dcp" and manifest["world_size"] == 2
    assert manifest["mesh"]["parallelism"] == "sharded" and manifest["mesh"]["shape"] == [2]
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1]
    assert set(manifest["ranks"][0]["files"]) == {".metadata", "__0_0.distcp", "rank-0.pt"}
    assert set(manifest["ranks"][1]["files"]) == {"__1_0.distcp", "rank-1.pt"}
    on_disk = {p.name for p in path.iterdir()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    assert manifest["bytes"] == sum(
        p.stat().st_size for p in path.iterdir() if p.name != "manifest.json"
    )
    # The ranks' files, and rank 0's curves (metrics.json).
    assert (
        manifest["bytes"]
        == sum(r["bytes"] for r in manifest["ranks"]) + (path / "metrics.json").stat().st_size
    )
    assert not [
        p for p in (saved_on_two / "ck" / "dist-run").iterdir() if p.name.startswith(".tmp")
    ]


@pytest.mark.parametrize(
    ("parallel", "saved_on", "resumed_on"), [("fsdp", 2, 1), ("fsdp", 1, 2), ("ddp", 4, 2)]
)
def test_a_checkpoint_resumes_on_another_world_size_with_the_saved_model_and_optimizer(
    tmp_path: Path, saved_on_two: Path, parallel: str, saved_on: int, resumed_on: int
) -> None:
    if (parallel, saved_on) == ("fsdp", 2):
        source = saved_on_two  # saved already, by the module's fixture
    else:
        source = tmp_path / "saved"
        run(
            saved_on,
            "--parallel",
            parallel,
            "--every",
            "4",
            "--steps",
            "10",
            "--dump-full",
            "--root",
            str(source / "ck"),
            "--out",
            str(source / "out"),
            log=tmp_path / "saved.log",
        )
    root = tmp_path / "ck"
    shutil.copytree(source / "ck", root)
    text = run(
        resumed_on,
        "--parallel",
        parallel,
        "--every",
        "4",
        "--steps",
        "10",
        "--root",
        str(root),
        "--out",
        str(tmp_path / "out"),
        log=tmp_path / "resumed.log",
    )
    resumed = load(tmp_path / "out" / "resumed.pt")
    assert resumed["start"] == 9
    assert (
        text.count("gpuws: resumed 'dist-run' at step 8 from the checkpoint of ") == 1
    )  # rank 0 says it, once
    saved = load(source / "out" / "full-8.pt")
    assert differences(saved["model"], resumed["model"]) == []
    assert differences(saved["optimizer"], resumed["optimizer"]) == []
    assert saved["progress"] == resumed["progress"]
    if resumed_on > saved_on:  # the new ranks say what they did about their random states
        assert "rank 1 is new (checkpoint ckpt-000000008" in text and "saved on 1 rank)" in text


def test_a_checkpoint_of_two_ranks_resumes_in_one_process_without_torch_distributed(
    tmp_path: Path, saved_on_two: Path
) -> None:
    """The free tier's single GPU: a notebook resumes what torchrun saved on two ranks."""
    from jupyter_gpu_ws.checkpoints.tracker import Tracker

    from .distributed_run import build

    model = build("plain", 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.5)
    progress: dict = {}
    tracker = Tracker().track(
        "dist-run",
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        progress=progress,
        root=str(saved_on_two / "ck"),
    )
    assert tracker.resume() == 9
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    saved = load(saved_on_two / "out" / "full-8.pt")
    assert differences(saved["model"], model_state) == []
    assert differences(saved["optimizer"], optim_state) == []
    assert progress == saved["progress"] and scheduler.last_epoch == 9


def test_a_kill_during_an_async_save_leaves_the_previous_checkpoint_the_newest(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ck"
    common = [
        "--parallel",
        "ddp",
        "--every",
        "3",
        "--width",
        "256",
        "--root",
        str(root),
        "--out",
        str(tmp_path / "out"),
    ]
    run(
        2, *common, "--steps", "20", "--kill-in-save", "5", log=tmp_path / "killed.log", expect=None
    )
    assert [m["step"] for _, m in checkpoints(root)] == [3]
    # The save at step 5 had started on every rank: its hidden folder is there, never a checkpoint.
    leftovers = [p.name for p in (root / "dist-run").iterdir() if p.name.startswith(".tmp-ckpt-")]
    assert len(leftovers) == 1 and re.search(r"-000000005-\d+$", leftovers[0]), leftovers
    text = run(2, *common, "--steps", "8", log=tmp_path / "resumed.log")
    assert "rank 0 of 2 starts at step 4" in text
    # The next save (step 6) took its place; the dead run's hidden folder is gone.
    assert [m["step"] for _, m in checkpoints(root)] == [3, 6]
    assert not [p for p in (root / "dist-run").iterdir() if p.name.startswith(".tmp-ckpt-")]


def test_on_sigterm_every_rank_saves_the_same_step_and_then_ends(tmp_path: Path) -> None:
    root, out = tmp_path / "ck", tmp_path / "out"
    with Run(
        2,
        "--parallel",
        "ddp",
        "--steps",
        "100000",
        "--sleep",
        "0.02",
        "--root",
        str(root),
        "--out",
        str(out),
        log=tmp_path / "log",
    ) as started:
        until(
            lambda: len(losses(out, 0)) > 5 and len(losses(out, 1)) > 5, 120, "both ranks training"
        )
        started.signal(signal.SIGTERM)  # torchrun passes it on to every rank
        started.wait(60)
        text = started.text()
    assert text.count("SIGTERM on rank") == 2
    [(path, manifest)] = checkpoints(root)
    assert manifest["world_size"] == 2 and [r["rank"] for r in manifest["ranks"]] == [0, 1]
    # Both ranks stopped at the step they saved: nobody trained on past it, nobody saved another step.
    assert max(losses(out, 0)) == max(losses(out, 1)) == manifest["step"]
    assert not (out / "final-0.pt").exists()


def test_a_sigterm_after_the_last_step_ends_the_run_without_waiting_for_a_step(
    tmp_path: Path,
) -> None:
    root, out = tmp_path / "ck", tmp_path / "out"
    with Run(
        2,
        "--parallel",
        "ddp",
        "--steps",
        "3",
        "--linger",
        "600",
        "--root",
        str(root),
        "--out",
        str(out),
        log=tmp_path / "log",
    ) as started:
        until(lambda: started.text().count("lingers") == 2, 120, "both ranks past their loop")
        started.signal(signal.SIGTERM)
        assert (
            started.wait(60) != 0
        )  # within termination.STEP_WAIT (15 s), not the 600 s it lingers for
        text = started.text()
    assert text.count("no step() within 15 s of SIGTERM") == 2
    assert checkpoints(root) == [] and not (out / "final-0.pt").exists()


def test_an_index_that_would_run_code_is_refused_and_nothing_runs(
    tmp_path: Path, saved_on_two: Path
) -> None:
    from jupyter_gpu_ws.checkpoints import dcpfiles
    from jupyter_gpu_ws.checkpoints.tracker import Tracker

    from .distributed_run import build

    root = tmp_path / "ck"
    shutil.copytree(saved_on_two / "ck", root)
    path, manifest = checkpoints(root)[-1]
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):  # what a planted index would do on unpickling
            return (Path.touch, (marker,))

    (path / ".metadata").write_bytes(pickle.dumps(Payload()))
    # The manifest is rewritten to match, as someone writing the store could.
    from jupyter_gpu_ws.checkpoints.files import checksum

    manifest["files"][".metadata"] = {
        "size": (path / ".metadata").stat().st_size,
        "xxh3": checksum(path / ".metadata"),
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        pickle.UnpicklingError, match="pathlib.Path.touch, which a DCP index never holds"
    ):
        dcpfiles.read_metadata(path, manifest)
    model = build("plain", 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tracker = Tracker().track(
        "dist-run",
        model=model,
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.StepLR(optimizer, step_size=7),
        progress={},
        root=str(root),
    )
    with pytest.warns(UserWarning, match="skipping checkpoint ckpt-000000008.*cannot be read"):
        assert tracker.resume() == 5  # the checkpoint before it
    assert not marker.exists()


def test_export_writes_one_plain_torch_save_file_of_the_chosen_checkpoint(
    tmp_path: Path, saved_on_two: Path, capsys: pytest.CaptureFixture
) -> None:
    from jupyter_gpu_ws.cli import main

    from .distributed_run import build

    root = str(saved_on_two / "ck")
    assert (
        main(
            ["checkpoint", "export", "dist-run", "--root", root, "--to", str(tmp_path / "model.pt")]
        )
        == 0
    )
    exported = torch.load(tmp_path / "model.pt", weights_only=True)
    saved = load(saved_on_two / "out" / "full-8.pt")
    assert set(exported) == {"model", "optimizer", "scheduler"}
    assert differences(saved["model"], exported["model"]) == []
    assert differences(saved["optimizer"], exported["optimizer"]) == []
    assert "(step 8, saved by 2 ranks)" in capsys.readouterr().err
    # Another step, the model alone: what inference elsewhere loads.
    assert (
        main(
            [
                "checkpoint",
                "export",
                "dist-run",
                "--root",
                root,
                "--step",
                "4",
                "--only",
                "model",
                "--to",
                str(tmp_path / "four.pt"),
            ]
        )
        == 0
    )
    four = torch.load(tmp_path / "four.pt", weights_only=True)
    assert (
        set(four) == {"model"}
        and differences(load(saved_on_two / "out" / "full-4.pt")["model"], four["model"]) == []
    )
    plain = build("plain", 32)
    plain.load_state_dict(four["model"])  # loads into the plain model, no wrapper prefixes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "No checkpoints of 'nope' in"),
        (["dist-run", "--step", "5"], "No complete checkpoint of step 5 (steps: 4, 8)"),
        (["dist-run", "--only", "weights"], "The checkpoint has no 'weights'"),
    ],
)
def test_export_says_what_is_wrong_in_one_line(
    tmp_path: Path, saved_on_two: Path, capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    from jupyter_gpu_ws.cli import main

    to = tmp_path / "model.pt"
    assert (
        main(["checkpoint", "export", *args, "--root", str(saved_on_two / "ck"), "--to", str(to)])
        == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("jupyter gpuws: error:")
    assert not to.exists()
