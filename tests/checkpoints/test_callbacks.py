"""The Lightning and Hugging Face Trainer callbacks: exact resume, requests, lazy import (real libraries, CPU).

Every exact-resume test trains N steps straight, then N steps as a run that checkpoints at step K,
goes on a little and stops (the "crash"), followed by a new model, trainer and tracker, with
another seed (so other weights and RNG), that resumes and trains to N. The data is shuffled, the
dataset adds noise from the global RNG and the model has dropout, so the data order, the position
in the epoch and every RNG state must come back for the parameters to match bit for bit. CPU
kernels are deterministic for these ops, so the comparison is torch.equal, not allclose.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from jupyter_gpu_ws.checkpoints.files import complete_checkpoints
from jupyter_gpu_ws.checkpoints.tracker import Tracker

N = 16  # steps; 40 samples in batches of 8 make 5 batches an epoch
# Where the checkpoint lands: in the first epoch, in the middle of a later one, at an epoch's end.
RESUME_AT = [
    pytest.param(3, id="epoch0-mid"),
    pytest.param(8, id="epoch1-mid"),
    pytest.param(10, id="epoch-end"),
]

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)


def saved(tracker: Tracker) -> list[tuple[int, str | None]]:
    tracker.wait()
    return [(m["step"], m["request_id"]) for _, m in complete_checkpoints(tracker.run_path)]


def same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pairs = list(zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    return len(pairs) == len(a.state_dict()) and all(torch.equal(x, y) for x, y in pairs)


class NoisyRegression(Dataset):
    """40 fixed samples; each fetch adds noise drawn from the global torch RNG."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(40, 8, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.01 * torch.randn(8), self.y[i]


# -- PyTorch Lightning -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pl() -> Any:
    return pytest.importorskip("lightning.pytorch")


def lightning_fit(
    pl: Any,
    seed: int,
    max_steps: int,
    callbacks: list[Any],
    request: tuple[Tracker, int, str] | None = None,
) -> tuple[Any, Any]:
    """Train a small regressor (AdamW, a per-step StepLR, dropout) with Lightning."""

    class Regressor(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(8, 16),
                torch.nn.ReLU(),
                torch.nn.Dropout(0.2),
                torch.nn.Linear(16, 1),
            )

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if request is not None and self.global_step == request[1]:
                request[0].request(request[2])  # as the comm handler does, in the middle of a step
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.AdamW(self.parameters(), lr=0.01)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        def train_dataloader(self) -> DataLoader:
            return DataLoader(NoisyRegression(), batch_size=8, shuffle=True)

    torch.manual_seed(seed)
    model = Regressor()
    trainer = pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(model)
    return model, trainer


@pytest.fixture(scope="module")
def lightning_straight(pl: Any) -> torch.nn.Module:
    """N steps without gpuws (the same for every resume point)."""
    return lightning_fit(pl, 0, N, [])[0]


@pytest.mark.parametrize("k", RESUME_AT)
def test_lightning_resume_continues_bitwise(
    pl: Any, lightning_straight: Any, tmp_path: Path, k: int
) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsCallback

    first = Tracker()
    lightning_fit(
        pl, 0, k + 2, [GpuwsCallback("run", every_steps=k, root=str(tmp_path), tracker=first)]
    )
    assert saved(first) == [(k, None)]

    callback = GpuwsCallback("run", root=str(tmp_path), tracker=Tracker())
    resumed, trainer = lightning_fit(pl, 123, N, [callback])
    assert callback.resumed_step == k and trainer.global_step == N
    assert same_parameters(lightning_straight, resumed)


def test_lightning_request_is_honoured_at_the_next_step(pl: Any, tmp_path: Path) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsCallback

    tracker = Tracker()
    callback = GpuwsCallback(
        "req", root=str(tmp_path), tracker=tracker
    )  # no policy: only the request saves
    lightning_fit(pl, 0, 8, [callback], request=(tracker, 4, "from-server"))
    assert saved(tracker) == [(5, "from-server")]


def test_lightning_without_checkpoints_starts_fresh(pl: Any, tmp_path: Path) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsCallback

    straight, _ = lightning_fit(pl, 0, 6, [])
    callback = GpuwsCallback("fresh", root=str(tmp_path), tracker=Tracker())
    model, _ = lightning_fit(pl, 0, 6, [callback])
    assert callback.resumed_step is None and same_parameters(straight, model)


def test_lightning_feeds_the_training_view_its_loss_metrics_and_total(
    pl: Any, tmp_path: Path
) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsCallback

    tracker = Tracker()
    _, trainer = lightning_fit(
        pl, 0, 6, [GpuwsCallback("seen", root=str(tmp_path), tracker=tracker)]
    )
    tracker.training.flush()
    assert tracker.training.total == 6 and tracker.training.last_step == 5  # 6 steps done
    losses = tracker.training.history.points("loss")
    assert losses and all(v is not None and v > 0 for _, _, v in losses)


# -- Hugging Face Trainer ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf() -> Any:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    transformers.logging.set_verbosity_error()
    return transformers


def hf_train(
    hf: Any,
    seed: int,
    out: Path,
    callbacks: list[Any],
    stop_at: int | None = None,
    resume: str | None = None,
    logging_steps: int | None = None,
) -> tuple[Any, Any]:
    """Train a one-layer GPT-2 (built from a config: nothing downloaded; dropout on) with Trainer:
    AdamW with a linear warm-up and decay over N steps."""

    class Stop(hf.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if stop_at is not None and state.global_step >= stop_at:
                control.should_training_stop = True

    g = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": ids, "labels": ids} for ids in torch.randint(0, 32, (40, 12), generator=g)
    ]
    torch.manual_seed(seed)
    model = hf.GPT2LMHeadModel(
        hf.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    )
    args = hf.TrainingArguments(
        output_dir=str(out),
        max_steps=N,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        warmup_steps=2,
        lr_scheduler_type="linear",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        logging_strategy="steps" if logging_steps else "no",
        logging_steps=logging_steps or 500,
        seed=0,
        disable_tqdm=True,
    )
    trainer = hf.Trainer(model=model, args=args, train_dataset=data, callbacks=[*callbacks, Stop()])
    trainer.train(resume_from_checkpoint=resume)
    return model, trainer


@pytest.fixture(scope="module")
def trainer_straight(hf: Any, tmp_path_factory: pytest.TempPathFactory) -> torch.nn.Module:
    """N steps without gpuws (the same for every resume point)."""
    return hf_train(hf, 0, tmp_path_factory.mktemp("straight"), [])[0]


@pytest.mark.parametrize("k", RESUME_AT)
def test_trainer_resume_continues_bitwise(
    hf: Any, trainer_straight: Any, tmp_path: Path, k: int
) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsTrainerCallback

    first = Tracker()
    hf_train(
        hf,
        0,
        tmp_path / "out",
        [GpuwsTrainerCallback("run", every_steps=k, root=str(tmp_path / "ckpt"), tracker=first)],
        stop_at=k + 2,
    )
    assert saved(first) == [(k, None)]

    callback = GpuwsTrainerCallback("run", root=str(tmp_path / "ckpt"), tracker=Tracker())
    folder = callback.resume_from_checkpoint()
    assert folder is not None and callback.resumed_step == k
    resumed, trainer = hf_train(hf, 123, tmp_path / "out", [callback], resume=folder)
    assert trainer.state.global_step == N
    assert same_parameters(trainer_straight, resumed)


def test_trainer_resume_folder_is_a_trainer_checkpoint_and_is_removed(
    hf: Any, tmp_path: Path
) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsTrainerCallback

    first = Tracker()
    hf_train(
        hf,
        0,
        tmp_path / "out",
        [GpuwsTrainerCallback("run", every_steps=4, root=str(tmp_path / "ckpt"), tracker=first)],
        stop_at=4,
    )
    callback = GpuwsTrainerCallback("run", root=str(tmp_path / "ckpt"), tracker=Tracker())
    folder = Path(callback.resume_from_checkpoint())
    assert {
        "pytorch_model.bin",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
    } <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == 4
    hf_train(hf, 0, tmp_path / "out", [callback], stop_at=5, resume=str(folder))
    assert not folder.exists()


def test_trainer_request_is_honoured_at_the_next_step(hf: Any, tmp_path: Path) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsTrainerCallback

    tracker = Tracker()

    class Server(hf.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 4:
                tracker.request("from-server")  # during the fifth step

    callback = GpuwsTrainerCallback("req", root=str(tmp_path / "ckpt"), tracker=tracker)
    hf_train(hf, 0, tmp_path / "out", [callback, Server()], stop_at=8)
    assert saved(tracker) == [(5, "from-server")]


def test_trainer_feeds_the_training_view_its_logs_and_total(hf: Any, tmp_path: Path) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsTrainerCallback

    tracker = Tracker()
    hf_train(
        hf,
        0,
        tmp_path / "out",
        [GpuwsTrainerCallback("seen", root=str(tmp_path / "ckpt"), tracker=tracker)],
        logging_steps=2,
    )
    tracker.training.flush()
    assert tracker.training.total == N and tracker.training.last_step == N - 1
    assert [p[0] for p in tracker.training.history.points("loss")][-1] == N - 1
    assert "learning_rate" in tracker.training.history.series


def test_trainer_without_checkpoints_resumes_nothing(hf: Any, tmp_path: Path) -> None:
    from jupyter_gpu_ws.checkpoints.callbacks import GpuwsTrainerCallback

    callback = GpuwsTrainerCallback("none", root=str(tmp_path), tracker=Tracker())
    assert callback.resume_from_checkpoint() is None and callback.resumed_step is None


# -- the package stays light -------------------------------------------------------------------


def test_importing_the_package_imports_no_framework() -> None:
    code = (
        "import sys, jupyter_gpu_ws, jupyter_gpu_ws.checkpoints.callbacks; "
        "print(sorted({'torch', 'lightning', 'pytorch_lightning', 'transformers'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_package_attributes_are_the_callback_classes(pl: Any, hf: Any) -> None:
    import jupyter_gpu_ws as gpuws
    from jupyter_gpu_ws.checkpoints import callbacks

    assert (
        issubclass(gpuws.LightningCallback, pl.Callback)
        and gpuws.LightningCallback is callbacks.GpuwsCallback
    )
    assert issubclass(gpuws.TrainerCallback, hf.TrainerCallback)
    assert gpuws.TrainerCallback is callbacks.GpuwsTrainerCallback


def test_a_missing_framework_gives_a_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu_ws.checkpoints import callbacks

    monkeypatch.setattr(callbacks, "_classes", {})
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    with pytest.raises(ImportError, match="pip install lightning"):
        callbacks.lightning_callback_class()
