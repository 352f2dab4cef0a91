"""What the HTTP and websocket handlers reach through the app, as a protocol, so that they need
not import the app (which imports them to register them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .checkpoints.coordinator import CheckpointCoordinator
    from .documents import BrowserPages
    from .environment import EnvironmentSupervisor
    from .jobs import JobRunner
    from .lifecycle import RuntimeSupervisor
    from .monitor import Sampler
    from .sync.supervisor import SyncSupervisor
    from .training.watch import TrainingWatch
    from .userjobs.service import JobService


class Services(Protocol):
    """The running extension (app.py's GpuWorkspaceApp) as its handlers see it."""

    checkpoints: CheckpointCoordinator
    environment: EnvironmentSupervisor
    jobs: JobRunner
    pages: BrowserPages
    runtime: RuntimeSupervisor
    sampler: Sampler
    sync: SyncSupervisor
    training: TrainingWatch
    userjobs: JobService
    # The metrics websockets open now; the sampler's thread broadcasts to them.
    stream_clients: set[Any]

    # Where this server syncs from and to (the workspace may change: use_workspace).
    @property
    def workdir(self) -> str: ...
    @property
    def store_url(self) -> str: ...
    @property
    def state_dir(self) -> str: ...
    @property
    def workspace(self) -> str: ...

    async def kernel_notebooks(self) -> dict[str, str]: ...
    def is_synced(self, path: str | None) -> bool | None: ...
    def distributed_runs(self) -> list[dict[str, Any]]: ...
    def workspaces(self) -> dict[str, Any]: ...
    def use_workspace(self, name: str) -> dict[str, Any]: ...
