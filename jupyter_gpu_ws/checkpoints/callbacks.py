"""Callbacks that checkpoint PyTorch Lightning and Hugging Face Trainer runs with gpuws.

    trainer = lightning.Trainer(..., callbacks=[gpuws.LightningCallback("my-run", every_steps=500)])
    trainer.fit(model, data)             # resumes by itself from the run's newest gpuws checkpoint

    callback = gpuws.TrainerCallback("my-run", every_steps=500)
    trainer = transformers.Trainer(..., callbacks=[callback])
    trainer.train(resume_from_checkpoint=callback.resume_from_checkpoint())   # None: a fresh start

Both track the training state with the gpuws tracker (the kernel's default one unless `tracker=`
is given) and call its safe point after every optimizer step, so a checkpoint asked for from the
server (`Tracker.request`), or due by the `every_steps` / `every_seconds` policy, is taken at the
end of the next step. Both feed the training view the numbers `gpuws.step(i, loss=…)` would: the
step, the loss and the logged metrics (Lightning's `callback_metrics`, Trainer's logs), and the
total number of steps (`max_steps`, or Lightning's estimate of the stepping batches). Nothing here imports Lightning, transformers or torch until a callback class
is asked for.

Lightning: an exact resume
--------------------------
`on_fit_start` runs after the strategy has set up the optimizers and LR schedulers and just before
the point where Lightning restores a `ckpt_path` checkpoint (`restore_training_state`), so the
callback restores what that path restores, through the same public objects: the LightningModule's
state_dict, the optimizers (through the strategy), the LR schedulers, the precision plugin (its
AMP scaler), the states of stateful callbacks, and the fit loop's progress (`fit_loop.load_state_dict`,
which gives the global step and epoch and puts the loops into Lightning's own "restarting" mode, as
for a checkpoint saved in `on_train_batch_end`). It also restores the RNG states, which a Lightning
checkpoint does not hold. Feeding Lightning's `ckpt_path` from our files would need the user to pass
the path to `fit()` and would still lose the RNG and the data position, so the callback does it itself.

Lightning does not put a plain DataLoader back at its position in the epoch (it warns "resuming
from a checkpoint that ended before the epoch ended ... not resumable"): the resumed epoch would
start its data over. So the callback records, with each checkpoint, how many batches of the
current epoch were consumed and the RNG state the epoch's DataLoader iterator was made from. On a
mid-epoch resume it sets the RNG to that epoch state before Lightning makes the iterator (the same
shuffle order and worker seeds), draws the consumed batches again in `on_train_start` (dataset-side
randomness repeats too), and then puts back the RNG state of the checkpoint. A dataloader with
state_dict()/load_state_dict() (e.g. torchdata's StatefulDataLoader) is left to Lightning, which
keeps its state in the loop's state. Skipping touches Lightning's data fetcher
(`trainer.fit_loop._data_fetcher`), a private attribute: the versions in the `test` extra are the
ones this is tested with. Limits: hooks that draw random numbers between an epoch's start and its
first batch (other than through the data), `reload_dataloaders_every_n_epochs`, a `training_step`
that takes the dataloader iterator, and Lightning's own `on_save_checkpoint` / `on_load_checkpoint`
hooks (not called) are outside the exactness this gives; checkpoints are per process.

Hugging Face Trainer: an exact resume
-------------------------------------
`Trainer.train(resume_from_checkpoint=...)` already resumes exactly: it loads the weights, the
optimizer, scheduler and scaler, the TrainerState (global step, epoch, log history), skips the
batches the interrupted epoch had consumed and then restores the RNG states. A callback cannot
start that (`on_train_begin` comes after the epoch and step to start from are decided), so
`resume_from_checkpoint()` writes the run's newest complete gpuws checkpoint out as a Trainer
checkpoint folder (pytorch_model.bin, optimizer.pt, scheduler.pt, scaler.pt, rng_state.pth,
trainer_state.json) in a temporary folder, removed once training has loaded it, and returns its
path. The checkpoint is taken in `on_step_end`, the state Trainer's own checkpoints hold; when an
evaluation is due at that step it waits for `on_evaluate`, as Trainer's own save does, so the RNG
the evaluation's DataLoader draws from is saved after it. Single-process training only.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from ..training.recorder import continue_wandb
from .files import CheckpointError, default_run_name, info_of, run_dir
from .formats import _tuples, capture_rng, restore_rng
from .fromstore import bring_newest
from .tracker import (
    Tracker,
    default_tracker,
    newest_checkpoint,
    read_metrics,
)

__all__ = [
    "GpuwsCallback",  # noqa: F822 (made on first use by the module's __getattr__)
    "GpuwsTrainerCallback",  # noqa: F822 (the same)
    "lightning_callback_class",
    "trainer_callback_class",
]


class _Policy:
    """The run name, the tracker and the save policy: shared by both callbacks."""

    def __init__(
        self,
        name: str | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = None,
        root: str | None = None,
        tracker: Tracker | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.keep_last = keep_last
        self.root = root
        self._tracker = tracker

    @property
    def tracker(self) -> Tracker:
        return self._tracker if self._tracker is not None else default_tracker()

    def _track(self, **objects: Any) -> Tracker:
        return self.tracker.track(
            self.name,
            every_steps=self.every_steps,
            every_seconds=self.every_seconds,
            keep_last=self.keep_last,
            root=self.root,
            **objects,
        )


# -- PyTorch Lightning -------------------------------------------------------------------------


class _LightningHooks(_Policy):
    """Checkpoint a Lightning `fit` with gpuws, and resume it exactly from the newest checkpoint.

    `GpuwsCallback(name=None, *, every_steps=None, every_seconds=None, keep_last=None, root=None,
    resume=True, tracker=None)`: `name` keys the checkpoints (default: the notebook's path);
    with `resume=False` the fit starts from scratch even if checkpoints exist. After a resume,
    `resumed_step` is the global step training continued from (None for a fresh start).
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = None,
        root: str | None = None,
        resume: bool = True,
        tracker: Tracker | None = None,
    ) -> None:
        super().__init__(
            name,
            every_steps=every_steps,
            every_seconds=every_seconds,
            keep_last=keep_last,
            root=root,
            tracker=tracker,
        )
        self.resume = resume
        self.resumed_step: int | None = None
        self._position = _DataPosition()
        self._last_step = -1
        self._fast_forward: tuple[int, dict[str, Any]] | None = None
        self._first_epoch: int | None = None
        self._stateful_data = False
        self._deferred: int | None = None
        self._resumed_epoch = -1

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        import torch

        tracker = self._track(
            model=pl_module,
            optimizers=_Optimizers(trainer),
            lr_schedulers=_Schedulers(trainer),
            precision=trainer.precision_plugin,
            loops=_FitLoop(trainer),
            callbacks=_CallbackStates(trainer, self),
            data_position=self._position,
        )
        self.resumed_step = None
        self._fast_forward = None
        self._position.skip = 0
        if self.resume and tracker.resume():  # also restores the RNG states of the checkpoint
            self.resumed_step = trainer.global_step
            self._resumed_epoch = trainer.current_epoch
            if self._position.skip:
                # The resumed epoch's iterator must be made from the RNG its epoch began with;
                # the checkpoint's RNG comes back once the consumed batches are drawn again.
                self._fast_forward = (self._position.skip, capture_rng(torch))
                restore_rng(torch, self._position.epoch_rng)
                # Lightning cannot see that we put the data back in place: its warning is wrong here.
                warnings.filterwarnings(
                    "ignore",
                    message="You're resuming from a checkpoint that ended before "
                    "the epoch ended and your dataloader is not resumable",
                )
        if self._fast_forward is None:
            # Lightning makes the first epoch's iterator right after this hook (the sanity check
            # runs with the RNG isolated): from this state.
            self._position.epoch_rng = capture_rng(torch)
        self._last_step = trainer.global_step
        self._deferred = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        import torch

        total = (
            trainer.max_steps
            if trainer.max_steps and trainer.max_steps > 0
            else trainer.estimated_stepping_batches
        )
        if isinstance(total, (int, float)) and math.isfinite(total) and total >= 1:
            self.tracker.progress(int(total))
        self._first_epoch = trainer.current_epoch
        fetcher = trainer.fit_loop._data_fetcher
        self._stateful_data = fetcher is not None and _stateful(fetcher.combined_loader.flattened)
        if (
            self.resumed_step is not None
            and trainer.current_epoch == self._resumed_epoch
            and trainer.fit_loop.epoch_loop.batch_progress.current.ready
            >= trainer.num_training_batches
        ):
            # Resumed after the closing validation of an epoch: Lightning ends that epoch without
            # a batch and makes the next epoch's iterator anew, so the one it just made must not
            # have drawn from the RNG.
            restore_rng(torch, self._position.epoch_rng)
        if self._fast_forward is not None:
            skip, rng = self._fast_forward
            self._fast_forward = None
            if not self._stateful_data:
                _skip_batches(fetcher, skip)
            restore_rng(torch, rng)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        import torch

        if self._first_epoch is not None and trainer.current_epoch == self._first_epoch:
            self._first_epoch = None  # its iterator was made before on_train_start, from epoch_rng
            return
        self._first_epoch = None
        self._position.epoch_rng = capture_rng(torch)  # Lightning makes this epoch's iterator next

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return  # accumulating gradients: no optimizer step in this batch
        self._last_step = step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        # Step `step - 1` in the loop's own counting (global_step counts the steps done).
        self.tracker.record(
            step - 1, loss, {k: v for k, v in trainer.callback_metrics.items() if k != "loss"}
        )
        last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        self._position.skip = 0 if last or self._stateful_data else batch_idx + 1
        fetcher = trainer.fit_loop._data_fetcher
        if fetcher is not None and trainer.fit_loop.epoch_loop._should_check_val_fx(fetcher):
            # A validation follows this batch, and its DataLoader draws from the RNG: save after it
            # (where ModelCheckpoint saves too); a run resumed from there does not repeat it.
            self._deferred = step
            return
        self.tracker.safe_point(step)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._deferred is not None and not trainer.sanity_checking:
            step, self._deferred = self._deferred, None
            self.tracker.safe_point(step)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self.tracker.wait()  # fit returns with its last checkpoint complete on disk

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.tracker.wait()


class _DataPosition:
    """Where the epoch's data stands: the RNG its iterator was made from and the batches consumed."""

    def __init__(self) -> None:
        self.epoch_rng: dict[str, Any] = {}
        self.skip = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_rng": self.epoch_rng, "skip": self.skip}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch_rng = state["epoch_rng"]
        self.skip = int(state["skip"])


class _Optimizers:
    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def state_dict(self) -> list[Any]:
        return [self.trainer.strategy.optimizer_state(opt) for opt in self.trainer.optimizers]

    def load_state_dict(self, states: list[Any]) -> None:
        if len(states) != len(self.trainer.optimizers):
            raise ValueError(
                f"{len(states)} optimizer states for {len(self.trainer.optimizers)} optimizers"
            )
        self.trainer.strategy.load_optimizer_state_dict({"optimizer_states": states})


class _Schedulers:
    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def state_dict(self) -> list[Any]:
        return [config.scheduler.state_dict() for config in self.trainer.lr_scheduler_configs]

    def load_state_dict(self, states: list[Any]) -> None:
        configs = self.trainer.lr_scheduler_configs
        if len(states) != len(configs):
            raise ValueError(f"{len(states)} LR scheduler states for {len(configs)} LR schedulers")
        for config, state in zip(configs, states, strict=False):
            config.scheduler.load_state_dict(state)


class _FitLoop:
    """The fit loop's progress: global step, epoch, batch counters (Lightning's own loop state)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return self.trainer.fit_loop.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trainer.fit_loop.load_state_dict(state)


class _CallbackStates:
    """The state_dict()s of the trainer's other callbacks (ModelCheckpoint, EarlyStopping, ...)."""

    def __init__(self, trainer: Any, own: Any) -> None:
        self.trainer = trainer
        self.own = own

    def _callbacks(self) -> list[Any]:
        return [cb for cb in self.trainer.callbacks if cb is not self.own]

    def state_dict(self) -> dict[str, Any]:
        states = {}
        for cb in self._callbacks():
            state = cb.state_dict()
            if state:
                states[cb.state_key] = state
        return states

    def load_state_dict(self, states: dict[str, Any]) -> None:
        for cb in self._callbacks():
            if cb.state_key in states:
                cb.load_state_dict(states[cb.state_key])


def _stateful(loaders: list[Any]) -> bool:
    return bool(loaders) and all(
        callable(getattr(dl, "state_dict", None)) and callable(getattr(dl, "load_state_dict", None))
        for dl in loaders
    )


def _skip_batches(fetcher: Any, skip: int) -> None:
    """Draw the `skip` batches the epoch had consumed from the fresh iterator, so that the fetcher
    (and any batches it prefetched) stands where it stood when the checkpoint was taken."""
    source = fetcher.iterator
    queue = getattr(fetcher, "batches", None)
    held = list(queue) if queue else []
    if queue:
        queue.clear()
    prefetched = len(held)
    try:
        for _ in range(skip):
            if held:
                held.pop(0)
            else:
                next(source)
    except StopIteration:
        raise CheckpointError(
            f"The training data has fewer than the {skip} batches this epoch had consumed when the "
            "checkpoint was taken: it cannot resume at the same place"
        ) from None
    while len(held) < prefetched:
        try:
            held.append(next(source))
        except StopIteration:
            fetcher.done = not held
            break
    if queue is not None:
        queue.extend(held)


# -- Hugging Face Trainer ----------------------------------------------------------------------


class _TrainerHooks(_Policy):
    """Checkpoint a Hugging Face `Trainer` with gpuws; resume exactly through `resume_from_checkpoint()`.

    `GpuwsTrainerCallback(name=None, *, every_steps=None, every_seconds=None, keep_last=None,
    root=None, tracker=None)`; then `trainer.train(resume_from_checkpoint=cb.resume_from_checkpoint())`.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = None,
        root: str | None = None,
        tracker: Tracker | None = None,
    ) -> None:
        super().__init__(
            name,
            every_steps=every_steps,
            every_seconds=every_seconds,
            keep_last=keep_last,
            root=root,
            tracker=tracker,
        )
        self.resumed_step: int | None = None
        self._resume_dir: Path | None = None
        self._resumed_info: Any = None
        self._resumed_manifest: Any = None
        self._tracking = False
        self._deferred: int | None = None

    @property
    def run_path(self) -> Path:
        tracker = self.tracker
        return run_dir(self.root or tracker.root, self.name or tracker.run or default_run_name())

    def resume_from_checkpoint(self) -> str | None:
        """The run's newest complete gpuws checkpoint, written out as a Trainer checkpoint folder
        for `trainer.train(resume_from_checkpoint=...)`; None when the run has no checkpoint."""
        import torch

        self._remove_resume_dir()
        # As gpuws.resume(): the store's newest checkpoint first (waiting for a restore).
        bring_newest(self.run_path, self.name or self.tracker.run or default_run_name(), 600.0)
        found = newest_checkpoint(self.run_path, stacklevel=4)
        if found is None:
            self.resumed_step = None
            return None
        path, manifest, state, rng = found
        self._resumed_manifest = (path, manifest)
        missing = [
            name
            for name in ("model", "optimizer", "lr_scheduler", "trainer_state")
            if name not in state
        ]
        if missing:
            raise CheckpointError(
                f"Checkpoint {path.name} was not written by GpuwsTrainerCallback: "
                f"it has no {', '.join(missing)}"
            )
        folder = Path(tempfile.mkdtemp(prefix=f"gpuws-resume-{int(manifest['step'])}-"))
        torch.save(state["model"], folder / "pytorch_model.bin")
        torch.save(state["optimizer"], folder / "optimizer.pt")
        torch.save(state["lr_scheduler"], folder / "scheduler.pt")
        if "scaler" in state:
            torch.save(state["scaler"], folder / "scaler.pt")
        torch.save(_trainer_rng(torch, rng), folder / "rng_state.pth")
        (folder / "trainer_state.json").write_text(state["trainer_state"]["json"], encoding="utf-8")
        self._resume_dir = folder
        self._resumed_info = info_of(path, manifest)
        self.resumed_step = int(json.loads(state["trainer_state"]["json"])["global_step"])
        return str(folder)

    def on_train_begin(
        self,
        args: Any,
        state: Any,
        control: Any,
        model: Any = None,
        optimizer: Any = None,
        lr_scheduler: Any = None,
        **kwargs: Any,
    ) -> None:
        objects: dict[str, Any] = {
            "model": model,
            "optimizer": optimizer,
            "lr_scheduler": lr_scheduler,
            "trainer_state": _TrainerState(state),
        }
        scaler = getattr(
            optimizer, "scaler", None
        )  # accelerate's AcceleratedOptimizer holds the AMP scaler
        if scaler is not None:
            objects["scaler"] = scaler
        tracker = self._track(**objects)
        tracker.step_value = state.global_step
        if state.max_steps and state.max_steps > 0:
            tracker.progress(int(state.max_steps))
        if self._resumed_info is not None and self._resume_dir is not None:
            tracker.last = self._resumed_info
            path, manifest = self._resumed_manifest
            # The curves go on from there.
            tracker.training.resumed(int(manifest["step"]), read_metrics(path, manifest))
            note = continue_wandb(manifest.get("wandb"))
            if note:
                print(note, flush=True)
        self._tracking = True
        self._deferred = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Trainer has loaded the resume folder (the RNG last, before the first step) by now.
        self._remove_resume_dir()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._tracking:
            return
        self.tracker.record(state.global_step - 1)
        if control.should_evaluate:
            self._deferred = state.global_step  # the evaluation draws from the RNG: save after it
            return
        self.tracker.safe_point(state.global_step)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Trainer's logs (loss, learning rate, grad norm, eval scores) feed the training view."""
        if not self._tracking or not logs or "train_runtime" in logs:  # not the closing summary
            return
        values = {
            k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self.tracker.record(state.global_step - 1, values.pop("loss", None), values)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._deferred is not None:
            step, self._deferred = self._deferred, None
            self.tracker.safe_point(step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._deferred is not None:  # an evaluation was due but did not report back
            step, self._deferred = self._deferred, None
            self.tracker.safe_point(step)
        self._tracking = False
        self._remove_resume_dir()
        self._resumed_info = None
        self.tracker.wait()  # train returns with its last checkpoint complete on disk

    def _remove_resume_dir(self) -> None:
        if self._resume_dir is not None:
            shutil.rmtree(self._resume_dir, ignore_errors=True)
            self._resume_dir = None


class _TrainerState:
    """TrainerState as the JSON Trainer writes to trainer_state.json."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def state_dict(self) -> dict[str, str]:
        return {
            "json": json.dumps(
                dataclasses.asdict(self.state), indent=2, sort_keys=True, default=_plain
            )
            + "\n"
        }

    def load_state_dict(self, value: dict[str, str]) -> None:
        for key, item in json.loads(value["json"]).items():
            setattr(self.state, key, item)


def _plain(value: Any) -> Any:
    """numpy and torch scalars in the log history, as JSON numbers."""
    try:
        return value.item()
    except (AttributeError, ValueError):
        return str(value)


def _trainer_rng(torch: Any, rng: dict[str, Any]) -> dict[str, Any]:
    """Our rng.pt in the layout of Trainer's rng_state.pth (single process)."""
    out: dict[str, Any] = {"python": _tuples(rng["python"]), "cpu": rng["torch"]}
    if "numpy" in rng:
        n = rng["numpy"]
        out["numpy"] = (
            n["kind"],
            n["keys"].numpy().astype("uint32"),
            n["pos"],
            n["has_gauss"],
            n["gauss"],
        )
    else:
        import numpy as np

        out["numpy"] = np.random.get_state()
    if "cuda" in rng and rng["cuda"]:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        out["cuda"] = rng["cuda"][min(index, len(rng["cuda"]) - 1)]
    return out


# -- the classes, made on first use -------------------------------------------------------------

_LIGHTNING_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_classes: dict[str, type] = {}


def lightning_callback_class(package: str | None = None) -> type:
    """The Lightning callback class, a subclass of `<package>.Callback`. By default for
    `lightning.pytorch`, else `pytorch_lightning`; pass `"pytorch_lightning"` to use the standalone
    package's Trainer when both are installed."""
    candidates = (package,) if package else _LIGHTNING_PACKAGES
    for name in candidates:
        if name in _classes:
            return _classes[name]
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cls = type(
            "GpuwsCallback",
            (_LightningHooks, module.Callback),
            {
                "__module__": __name__,
                "__qualname__": "GpuwsCallback",
                "__doc__": _LightningHooks.__doc__,
            },
        )
        _classes[name] = cls
        return cls
    raise ImportError(
        "gpuws.LightningCallback needs PyTorch Lightning, which is not installed: "
        "`pip install lightning` (or `pip install pytorch-lightning`)"
    )


def trainer_callback_class() -> type:
    """The Hugging Face Trainer callback class, a subclass of `transformers.TrainerCallback`."""
    if "transformers" not in _classes:
        try:
            from transformers import TrainerCallback
        except ImportError as err:
            raise ImportError(
                "gpuws.TrainerCallback needs Hugging Face transformers, which is not installed "
                f"or does not import ({err}): `pip install transformers accelerate`"
            ) from err
        _classes["transformers"] = type(
            "GpuwsTrainerCallback",
            (_TrainerHooks, TrainerCallback),
            {
                "__module__": __name__,
                "__qualname__": "GpuwsTrainerCallback",
                "__doc__": _TrainerHooks.__doc__,
            },
        )
    return _classes["transformers"]


def __getattr__(name: str) -> Any:
    if name == "GpuwsCallback":
        return lightning_callback_class()
    if name == "GpuwsTrainerCallback":
        return trainer_callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
