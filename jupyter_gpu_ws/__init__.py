"""jupyter_gpu_ws: make an ephemeral GPU runtime feel like a persistent workstation."""

from __future__ import annotations

from typing import Any

try:
    from ._version import __version__
except ImportError:  # a source checkout that was never built
    import warnings

    warnings.warn("Importing 'jupyter_gpu_ws' outside a proper installation.", stacklevel=2)
    __version__ = "dev"


# The kernel API: `import jupyter_gpu_ws as gpuws`. torch is imported on first `track`; `step`,
# `log` and `progress` (the tracker's module) on first use, then kept here as plain functions (step
# is the hot path): the command line and the server, which import this package, never need them.
_TRACKER_FUNCTIONS = ("step", "log", "progress")


def track(name: str | None = None, **objects: Any) -> Any:
    """Track training state: `gpuws.track(model=m, optimizer=opt, scheduler=s, scaler=sc, epoch=0)`.

    Anything with state_dict()/load_state_dict(), or plain values. RNG states (Python, NumPy,
    torch CPU and CUDA) and the step are always saved. `name` keys the checkpoints (default:
    the notebook's path); `every_steps`, `every_seconds` and `keep_last` set the policy;
    `total_steps=N` gives the ETA against the runtime's deadline; `tensorboard=True` also
    writes the scalars as TensorBoard event files in the run's folder.

    Under torch.distributed (torchrun), every rank calls the same functions: state goes through
    torch.distributed.checkpoint, and a checkpoint resumes on any number of ranks.
    """
    from .checkpoints.distributed import tracker_to_track

    return tracker_to_track().track(name, **objects)


def checkpoint(wait: bool = False) -> Any:
    """Save now; with `wait=True`, return the checkpoint once its files are complete."""
    from .checkpoints.tracker import default_tracker

    return default_tracker().checkpoint(wait=wait)


def resume(timeout: float = 600.0) -> int:
    """Load the newest complete checkpoint into the tracked objects; the step to continue from.

    Waits (up to `timeout` s) for a restore that is bringing the run's checkpoints, and fetches
    the store's newest; raises if the store cannot be read; 0 only when there is no checkpoint,
    and then it says so.
    """
    from .checkpoints.tracker import default_tracker

    return default_tracker().resume(timeout)


def __getattr__(name: str) -> Any:
    """`gpuws.step`, `gpuws.log` and `gpuws.progress` (then kept as this module's own), and
    `gpuws.LightningCallback` and `gpuws.TrainerCallback`, imported (with their framework) on use."""
    if name in _TRACKER_FUNCTIONS:
        from .checkpoints import tracker

        function = getattr(tracker, name)
        globals()[name] = function  # from now on a plain attribute: no call comes here again
        return function
    if name == "LightningCallback":
        from .checkpoints.callbacks import lightning_callback_class

        return lightning_callback_class()
    if name == "TrainerCallback":
        from .checkpoints.callbacks import trainer_callback_class

        return trainer_callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ip: Any) -> None:
    """`%load_ext jupyter_gpu_ws`: the `%gpuws` magic, and the checkpoint agent in a kernel."""
    from .magics import load

    load(ip)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter_gpu_ws"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import GpuWorkspaceApp

    return [{"module": "jupyter_gpu_ws", "app": GpuWorkspaceApp}]
