"""The Jupyter Server extension: configuration traits, wiring of the services, start and stop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jupyter_core.utils import ensure_async
from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from .checkpoints import protocol
from .checkpoints.catalog import distributed_runs, run_checkpoints
from .checkpoints.coordinator import CheckpointCoordinator
from .checkpoints.files import run_dir
from .checkpoints.protocol import RUNTIME_DIR_ENV, SERVER_ID_ENV
from .client import SERVER_PID_ENV
from .defaults import (
    default_state_dir,
    default_store_url,
    derive_workspace_name,
    is_embedded_store,
    legacy_workspace_name,
    local_store_path,
)
from .documents import BrowserPages
from .environment import EnvironmentSettings, EnvironmentSupervisor
from .handlers import handlers as api_handlers
from .jobs import JobRunner
from .lifecycle import LifecycleSettings, RuntimeSupervisor
from .monitor import AlertPolicy, AlertTracker, KernelRef, NvmlReader, Sampler, SystemReader
from .monitor.attribution import KernelReport, reports_from_registration
from .monitor.own_use import TEST_DOUBLE_ENV
from .runtime import parse_deadline, parse_duration
from .runtime.hub import check_store_template, expand_store_url, template_base
from .store import Store, open_backend
from .store.crypto import Encryption
from .store.crypto.keys import read_passphrase
from .store.presence import holds_things
from .store.redact import redact
from .store.workspaces import list_workspaces, remembered_choice, require_workspace
from .sync import StoreConfigError, SyncSettings
from .sync.supervisor import SyncSupervisor
from .training.anomalies import AnomalyPolicy
from .training.progress import DeadlineView
from .training.watch import TrainingWatch, WatchSettings
from .userjobs.record import JobRecord
from .userjobs.service import JobService
from .userjobs_handlers import handlers as job_handlers

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Settings = TypeVar("Settings", bound="DataclassInstance")


class GpuWorkspace(Configurable):
    """Every setting of jupyter_gpu_ws, read as `c.GpuWorkspace.<name>`.

    `GpuWorkspaceApp` inherits these traits, so `c.GpuWorkspace.x` and `--GpuWorkspace.x=…`
    configure the running extension.
    """

    store_url = Unicode(
        help="""URL of the persistent store: s3://bucket/prefix, gs://…, az://… (through obstore), any
        other fsspec URL (sftp://…), or an absolute path (a local folder).
        Environment variable GPUWS_STORE. Default: a local folder in Jupyter's data directory.""",
    ).tag(config=True)

    create_store = Bool(
        False,
        help="""Make a missing store folder even where the folder it goes in is empty or missing (what an
        unmounted drive looks like). Without it, a missing store folder is made only where its parent holds other
        things (the embedded default always is), and never where this machine synced the workspace before: that
        store is unavailable until it is back (a drive that dropped), or until Take over starts it anew.""",
    ).tag(config=True)

    workdir = Unicode(
        "",
        help="The directory that is mirrored to the store. Default: the server's root directory.",
    ).tag(config=True)

    workspace = Unicode(
        "",
        help="Name of this workspace inside the store. Default: derived from the user and work directory.",
    ).tag(config=True)

    sample_interval = Float(
        1.0, help="Seconds between two samples of the GPU and system monitor."
    ).tag(config=True)

    history_seconds = Float(
        300.0, help="Seconds of monitor samples kept in memory for the history and sparklines."
    ).tag(config=True)

    nvml_test_double = Unicode(
        "",
        help="""Path to a JSON file describing simulated GPUs. When set, the monitor reads this
        NVML test double (jupyter_gpu_ws.monitor.fake_nvml) instead of the NVIDIA driver.
        For tests and demonstrations only.""",
    ).tag(config=True)

    gpu_idle_percent = Float(5.0, help="A GPU below this utilisation % counts as idle.").tag(
        config=True
    )

    gpu_idle_alert_minutes = Float(
        10.0,
        help="Alert when a GPU on which a kernel holds memory has been idle this many minutes.",
    ).tag(config=True)

    gpu_memory_alert = Float(
        0.95, help="Alert when a GPU's memory is fuller than this fraction."
    ).tag(config=True)

    disk_alert = Float(
        0.90, help="Alert when the work directory's disk is fuller than this fraction."
    ).tag(config=True)

    storage_options = Dict(
        help="""Options for the store: obstore's names for S3, GCS and Azure (endpoint, region, …) or the
        fsspec names users know (endpoint_url, key, secret, anon, proxy, ca_bundle, …); an unknown one is
        refused. For another fsspec URL, its file system's options (e.g. {"username": …} for sftp).
        Credentials belong in the environment or the provider's own files, not here.""",
    ).tag(config=True)

    sync_enabled = Bool(True, help="Mirror the work directory to the store.").tag(config=True)

    encrypt = Bool(
        False,
        help="""Encrypt every file, version, checkpoint and environment snapshot in the store with
        AES-256-GCM before upload (docs/sync.md). The passphrase comes from key_file or the
        environment variable named by passphrase_env; it is never stored in clear.""",
    ).tag(config=True)

    passphrase_env = Unicode(
        "GPUWS_PASSPHRASE",
        help="The environment variable that holds the passphrase of an encrypted store.",
    ).tag(config=True)

    key_file = Unicode(
        None,
        allow_none=True,
        help="A local file whose first line is the passphrase (instead of passphrase_env).",
    ).tag(config=True)

    encrypt_names = Bool(
        False,
        help="""With encrypt: also encrypt each file and folder name (AES-SIV), so the store's listing
        shows nothing but sizes and the tree's shape. Chosen when the workspace is first encrypted.""",
    ).tag(config=True)

    restore_on_start = Bool(
        True, help="When the server starts, bring back the files the work directory lacks."
    ).tag(config=True)

    quota_bytes = Int(
        None, allow_none=True, help="Store quota in bytes: warn at 90 %, refuse uploads past it."
    ).tag(config=True)

    max_file_size = Int(
        None, allow_none=True, help="Files larger than this (bytes) are not mirrored."
    ).tag(config=True)

    sync_concurrency = Int(8, help="Transfers in parallel.").tag(config=True)

    bandwidth_limit = Int(
        None, allow_none=True, help="Upload cap in bytes per second, all transfers together."
    ).tag(config=True)

    max_delete_fraction = Float(
        0.5, help="A pass that would remove more than this share of the store stops with an error."
    ).tag(config=True)

    keep_versions = Int(10, help="Previous versions kept per file.").tag(config=True)

    version_max_age_days = Float(30.0, help="Previous versions older than this are removed.").tag(
        config=True
    )

    rescan_interval = Float(
        300.0, help="Seconds between full rescans, the backstop for missed file-system events."
    ).tag(config=True)

    sync_debounce = Float(
        0.05, help="Seconds a change must settle (no further writes) before it is uploaded."
    ).tag(config=True)

    sync_settle = Float(
        2.0,
        help="""Seconds a file still being written (open for writing, or changing) must stay unchanged before
        it is uploaded; a file closed after writing goes at once. Previous versions of a file are kept at most
        once per this interval.""",
    ).tag(config=True)

    lease_ttl = Float(
        20.0,
        help="""Seconds the workspace lease lives without a heartbeat (renewed every quarter of it).
        A runtime that finds the lease held takes it over by itself once its heartbeat is older
        than this: after a crash, a successor writes within about this long.""",
    ).tag(config=True)

    checkpoint_timeout = Float(
        60.0,
        help="Persist waits this long for tracked kernels to finish their checkpoints before syncing.",
    ).tag(config=True)

    document_save_timeout = Float(
        5.0,
        help="""Seconds a persist waits for the connected browser pages to save their open
        documents with unsaved changes (the emergency persist waits at most 2 s). 0: do not ask.""",
    ).tag(config=True)

    max_runtime = Unicode(
        "",
        help="""How long this runtime may live from the server's start ("12h", "90m", "1h30m" or
        seconds). Empty: no limit from this source.""",
    ).tag(config=True)

    deadline = Unicode(
        "",
        help="""When this runtime ends, absolute (ISO 8601, naive means UTC, or epoch seconds).
        Also environment variable GPUWS_DEADLINE; a file named by GPUWS_DEADLINE_FILE may give
        or move the deadline at any time. The earliest of all sources wins.""",
    ).tag(config=True)

    persist_lead_time = Float(
        600.0, help="Seconds before the deadline at which everything is persisted."
    ).tag(config=True)

    warning_lead_times = List(
        Float(),
        [1800.0, 600.0, 120.0],
        help="Seconds before the deadline at which the user is warned.",
    ).tag(config=True)

    grace_period = Float(
        25.0,
        help="Seconds the emergency persist (SIGTERM, a preemption notice) may take before the server exits.",
    ).tag(config=True)

    termination_grace_period = Float(
        None,
        allow_none=True,
        help="""Seconds the platform gives this server between the start of
        its termination and the kill: under Kubernetes the pod's grace, which KubeSpawner sets from
        c.KubeSpawner.delete_grace_period (1 s by default!). Environment variable GPUWS_GRACE_PERIOD
        (the chart sets it). The emergency persist fits inside it, and the Runtime section warns
        when it is shorter than the measured emergency persist.""",
    ).tag(config=True)

    hub_max_age = Unicode(
        "",
        help="""JupyterHub's idle culler's --max-age ("8h", seconds): the server is stopped that
        long after it started. Environment variable GPUWS_HUB_MAX_AGE. A deadline source.""",
    ).tag(config=True)

    hub_cull_timeout = Unicode(
        "",
        help="""JupyterHub's idle culler's --timeout ("1h", seconds): the server is stopped
        after that long without activity as the hub sees it. Environment variable
        GPUWS_HUB_CULL_TIMEOUT. A deadline source, with a warning hub_cull_warning ahead.""",
    ).tag(config=True)

    hub_cull_warning = Float(
        600.0,
        help="Seconds before the hub's idle cull at which the user is always warned (with Persist now).",
    ).tag(config=True)

    hub_keep_alive = Bool(
        False,
        help="""Report activity to JupyterHub while a tracked run is stepping or a notebook's
        GPU is busy, so the idle culler does not stop a training that prints nothing. Off by
        default: it overrides the admin's idle policy. Environment variable GPUWS_HUB_KEEP_ALIVE=1.""",
    ).tag(config=True)

    hub_poll_interval = Float(
        60.0,
        help="Seconds between two reads of this server's start and last activity from the hub API.",
    ).tag(config=True)

    preemption_clouds = List(
        Unicode(),
        [],
        help="""Clouds whose preemption notices are polled: any of "aws" (spot
        instance-action), "gcp" (preempted), "azure" (Scheduled Events Preempt).""",
    ).tag(config=True)

    preemption_poll_interval = Float(
        5.0, help="Seconds between two polls of the metadata servers."
    ).tag(config=True)

    aws_metadata_url = Unicode(
        "", help="Base address of the AWS instance metadata service (default: the link-local one)."
    ).tag(config=True)

    gcp_metadata_url = Unicode(
        "", help="Base address of the GCP metadata server (default: the link-local one)."
    ).tag(config=True)

    azure_metadata_url = Unicode(
        "",
        help="Base address of the Azure instance metadata service (default: the link-local one).",
    ).tag(config=True)

    git_versioning = Bool(
        False,
        help="""At each persist, commit code, notebooks and configuration of the work
        directory's Git repository (never data or checkpoints).""",
    ).tag(config=True)

    git_init = Bool(
        False,
        help="With git_versioning, create a repository in the work directory when there is none.",
    ).tag(config=True)

    git_include = List(
        Unicode(),
        [],
        help="Patterns of the files Git versioning commits (default: code, notebooks, configuration).",
    ).tag(config=True)

    git_max_file_size = Int(2**20, help="Files larger than this (bytes) are never committed.").tag(
        config=True
    )

    git_remote = Unicode(
        "", help="A remote name or URL to push to after each commit (the user's own credentials)."
    ).tag(config=True)

    git_branch = Unicode(
        "", help="The remote branch to push to (default: the current branch's name)."
    ).tag(config=True)

    env_python = Unicode(
        "",
        help="""The Python whose environment is snapshotted and restored. Default: the
        default kernel's interpreter.""",
    ).tag(config=True)

    env_snapshot_on_persist = Bool(
        True,
        help="Take an environment snapshot at each persist (a new one only when something changed).",
    ).tag(config=True)

    env_keep_all_wheels = Bool(
        False,
        help="Keep a wheel of every package in the store, so a restore needs no package index at all.",
    ).tag(config=True)

    training_stall_factor = Float(
        10.0,
        help="""A tracked run whose kernel is busy counts as stalled after this many times its
        usual step time without a step (and at least training_stall_seconds).""",
    ).tag(config=True)

    training_stall_seconds = Float(
        120.0, help="The shortest pause without a step that counts as a stalled loop (seconds)."
    ).tag(config=True)

    training_input_bound_percent = Float(
        50.0,
        help="""A run whose notebook's GPUs are busy less than this (%) on average while it steps
        is input-bound (its data does not arrive fast enough).""",
    ).tag(config=True)

    training_input_bound_seconds = Float(
        120.0,
        help="How long the GPUs must stay under training_input_bound_percent before it is said.",
    ).tag(config=True)

    relaunch_jobs = Bool(
        True,
        help="""Relaunch, once the restore at start is done, every job (`jupyter gpuws run`) that the
        last runtime stopped at its end; its resume() continues from its checkpoint. Off: such jobs wait
        for a restart by hand (docs/jobs.md).""",
    ).tag(config=True)

    relaunch_restores_environment = Bool(
        False,
        help="""Before relaunching the last runtime's jobs, restore the difference between this
        environment and the workspace's latest snapshot (as the Environment section's restore does: wheels
        from the store or the index, nothing built from sources) and relaunch once it is done. Off: the jobs
        relaunch on the environment there is, and say so when it differs (docs/jobs.md).""",
    ).tag(config=True)

    relaunch_window = Float(
        24 * 3600.0,
        help="""Seconds after its last record an interrupted job still relaunches by itself. A job
        interrupted longer ago, or a copy of its record put back into the store from longer ago,
        waits for your approval (docs/security.md, Jobs).""",
    ).tag(config=True)

    job_stop_grace = Float(
        10.0,
        help="Seconds a job has to end after SIGTERM (when stopped or at the runtime's end) before SIGKILL.",
    ).tag(config=True)

    state_dir = Unicode(
        help="Local folder for the record of what was synced (not in the work directory)."
    ).tag(config=True)

    @default("termination_grace_period")
    def _default_termination_grace(self) -> float | None:
        value = os.environ.get("GPUWS_GRACE_PERIOD", "").strip()
        if not value:
            return None
        try:
            seconds = parse_duration(value)
            if seconds < 1:
                raise ValueError("a grace under 1 s leaves no time to persist")
            return seconds
        except ValueError as err:
            logging.getLogger(__name__).error("GPU workspace: GPUWS_GRACE_PERIOD ignored: %s", err)
            return None

    @default("hub_max_age")
    def _default_hub_max_age(self) -> str:
        return os.environ.get("GPUWS_HUB_MAX_AGE", "").strip()

    @default("hub_cull_timeout")
    def _default_hub_cull_timeout(self) -> str:
        return os.environ.get("GPUWS_HUB_CULL_TIMEOUT", "").strip()

    @default("hub_keep_alive")
    def _default_hub_keep_alive(self) -> bool:
        return os.environ.get("GPUWS_HUB_KEEP_ALIVE", "").strip().lower() in (
            "1",
            "true",
            "yes",
            "on",
        )

    @validate("store_url")
    def _check_store_template(self, proposal: Any) -> str:
        try:
            check_store_template(proposal["value"])
        except ValueError as err:
            raise TraitError(str(err)) from None
        return proposal["value"]

    @validate("hub_cull_warning")
    def _check_cull_warning(self, proposal: Any) -> float:
        if not 0 <= proposal["value"] <= 7 * 24 * 3600:
            raise TraitError("hub_cull_warning must be between 0 seconds and a week")
        return proposal["value"]

    @validate("termination_grace_period")
    def _check_termination_grace(self, proposal: Any) -> float | None:
        if proposal["value"] is not None and not 1 <= proposal["value"] <= 7 * 24 * 3600:
            raise TraitError("termination_grace_period must be between 1 second and a week")
        return proposal["value"]

    @validate("hub_poll_interval")
    def _check_hub_poll(self, proposal: Any) -> float:
        if not 1 <= proposal["value"] <= 3600:
            raise TraitError("hub_poll_interval must be between 1 and 3600 seconds")
        return proposal["value"]

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return default_state_dir()

    @default("store_url")
    def _default_store_url(self) -> str:
        return default_store_url()

    @validate("sample_interval")
    def _check_interval(self, proposal: Any) -> float:
        if not 0.05 <= proposal["value"] <= 3600:
            raise TraitError("sample_interval must be between 0.05 and 3600 seconds")
        return proposal["value"]

    @validate("history_seconds")
    def _check_history(self, proposal: Any) -> float:
        if not 0 < proposal["value"] <= 7 * 24 * 3600:
            raise TraitError("history_seconds must be positive and at most a week")
        return proposal["value"]

    @validate("max_runtime", "persist_lead_time", "hub_max_age", "hub_cull_timeout")
    def _check_duration(self, proposal: Any) -> Any:
        if proposal["value"] not in ("", None):
            try:
                parse_duration(proposal["value"])
            except ValueError as err:
                raise TraitError(f"{proposal['trait'].name}: {err}") from None
        return proposal["value"]

    @validate("deadline")
    def _check_deadline(self, proposal: Any) -> str:
        if proposal["value"]:
            try:
                parse_deadline(proposal["value"])
            except ValueError as err:
                raise TraitError(f"deadline: {err}") from None
        return proposal["value"]

    @validate("preemption_clouds")
    def _check_clouds(self, proposal: Any) -> list[str]:
        unknown = sorted(set(proposal["value"]) - {"aws", "gcp", "azure"})
        if unknown:
            raise TraitError(
                f"preemption_clouds: unknown {', '.join(unknown)} (use aws, gcp, azure)"
            )
        return proposal["value"]

    @validate("sync_settle")
    def _check_settle(self, proposal: Any) -> float:
        if not 0 <= proposal["value"] <= 3600:
            raise TraitError("sync_settle must be between 0 and 3600 seconds")
        return proposal["value"]

    @validate("lease_ttl")
    def _check_lease_ttl(self, proposal: Any) -> float:
        if not 2 <= proposal["value"] <= 3600:
            raise TraitError("lease_ttl must be between 2 and 3600 seconds")
        return proposal["value"]

    @validate("grace_period")
    def _check_grace(self, proposal: Any) -> float:
        if not 1 <= proposal["value"] <= 3600:
            raise TraitError("grace_period must be between 1 and 3600 seconds")
        return proposal["value"]

    @validate("document_save_timeout")
    def _check_document_save_timeout(self, proposal: Any) -> float:
        if not 0 <= proposal["value"] <= 600:
            raise TraitError("document_save_timeout must be between 0 and 600 seconds")
        return proposal["value"]

    @validate("training_stall_factor", "training_stall_seconds", "training_input_bound_seconds")
    def _check_training_positive(self, proposal: Any) -> float:
        if not 0 < proposal["value"] <= 7 * 24 * 3600:
            raise TraitError(f"{proposal['trait'].name} must be positive (and at most a week)")
        return proposal["value"]

    @validate("training_input_bound_percent")
    def _check_training_percent(self, proposal: Any) -> float:
        if not 0 <= proposal["value"] <= 100:
            raise TraitError("training_input_bound_percent is between 0 and 100")
        return proposal["value"]

    @validate("gpu_memory_alert", "disk_alert")
    def _check_fraction(self, proposal: Any) -> float:
        if not 0 < proposal["value"] <= 1:
            raise TraitError(f"{proposal['trait'].name} is a fraction between 0 and 1")
        return proposal["value"]


# The parent of every module's logger in the package (`log = logging.getLogger(__name__)`).
PACKAGE_LOG = logging.getLogger(__package__ or "jupyter_gpu_ws")


def log_like_the_server(server_log: logging.Logger, level: int) -> None:
    """The package's modules (the job manager, the sync, the monitor, …) write their lines through
    the server's own handlers at its level: with the time and level like the server's lines, and
    INFO kept. Without a handler of their own, Python's last resort wrote WARNING and above only,
    bare. The lines still reach the root logger too, where a host (pytest's capture) listens."""
    PACKAGE_LOG.handlers = list(server_log.handlers)
    PACKAGE_LOG.setLevel(level)


class GpuWorkspaceApp(ExtensionApp, GpuWorkspace):
    """Starts the monitor with the server and stops it with the server."""

    name = "jupyter_gpu_ws"
    description = __doc__
    load_other_extensions = True

    def initialize_settings(self) -> None:
        log_like_the_server(self.serverapp.log, self.serverapp.log_level)
        # A per-user store under JupyterHub: s3://bucket/{username}/{servername}.
        self._store_template_base = template_base(self.store_url)
        self.store_url = expand_store_url(self.store_url)
        if not self.workdir:
            self.workdir = os.path.abspath(os.path.expanduser(self.serverapp.root_dir))
        # A workspace named in the configuration, or chosen in the panel on this machine, is used
        # as it is; otherwise the default name, or the one an earlier version derived if only
        # that one exists in the store (decided when the sync starts, off the event loop).
        self.legacy_workspace: str | None = None
        if not self.workspace:
            self.workspace = remembered_choice(self.state_dir, self.workdir) or ""
        if not self.workspace:
            self.workspace = derive_workspace_name(self.workdir)
            self.legacy_workspace = legacy_workspace_name(self.workdir)
        disks = {"workdir": self.workdir}
        store_path = local_store_path(self.store_url)
        if store_path:
            disks["store"] = store_path
        self.kernel_index: dict[int, KernelRef] = {}
        self.kernel_reports: list[KernelReport] = []
        self.sampler = Sampler(
            self._make_gpu_reader(),
            SystemReader(disks),
            interval=self.sample_interval,
            history_seconds=self.history_seconds,
            kernels=lambda: self.kernel_index,
            kernel_reports=lambda: self.kernel_reports,
            alerts=AlertTracker(
                AlertPolicy(
                    gpu_idle_percent=self.gpu_idle_percent,
                    gpu_idle_seconds=self.gpu_idle_alert_minutes * 60,
                    gpu_memory_fraction=self.gpu_memory_alert,
                    disk_fraction=self.disk_alert,
                )
            ),
        )
        self.stream_clients: set[Any] = set()
        self.sampler.subscribe(self._on_sample)
        self.sampler.start()
        self._kernel_poll = PeriodicCallback(
            self.refresh_kernel_index, max(2000, self.sample_interval * 1000)
        )
        self._kernel_poll.start()
        self.checkpoints = CheckpointCoordinator(
            self.serverapp.kernel_manager, self.serverapp.runtime_dir, self.kernel_notebooks
        )
        # Kernels started from here learn where the work directory is (checkpoints go there)
        # and which server they belong to (their agents register in its folder). Always this
        # server's own: one started from another server's terminal inherits that one's.
        os.environ["GPUWS_WORKDIR"] = self.workdir
        os.environ[SERVER_ID_ENV] = self.checkpoints.server_id
        os.environ[SERVER_PID_ENV] = str(os.getpid())
        if self.nvml_test_double:
            # Its kernels then read their own GPU use from the same simulated GPUs.
            os.environ[TEST_DOUBLE_ENV] = os.path.abspath(self.nvml_test_double)
        # A torchrun rank started from one of our terminals registers in our runtime folder.
        os.environ[RUNTIME_DIR_ENV] = self.serverapp.runtime_dir
        self.jobs = JobRunner()
        self.pages = BrowserPages()
        self.sync = SyncSupervisor(self, self.log)
        if self.sync_enabled:
            self.sync.start()
        else:
            self.sync.state = "disabled"
        self.environment = EnvironmentSupervisor(
            self.plain_settings(EnvironmentSettings), self.serverapp, self.sync, self.jobs, self.log
        )
        self.userjobs = JobService(
            self,
            {
                "GPUWS_WORKDIR": self.workdir,
                SERVER_ID_ENV: self.checkpoints.server_id,
                RUNTIME_DIR_ENV: self.serverapp.runtime_dir,
                SERVER_PID_ENV: str(os.getpid()),
            },
        )
        self.runtime = RuntimeSupervisor(
            self.plain_settings(LifecycleSettings),
            server=self.serverapp,
            sync=self.sync,
            checkpoints=self.checkpoints,
            sampler=self.sampler,
            jobs=self.jobs,
            pages=self.pages,
            environment=self.environment,
            userjobs=self.userjobs,
            run_async=self.run_async,
            log=self.log,
        )
        self.runtime.start()
        self.training = TrainingWatch(
            WatchSettings(
                policy=AnomalyPolicy(
                    stall_factor=self.training_stall_factor,
                    stall_seconds=self.training_stall_seconds,
                    input_bound_percent=self.training_input_bound_percent,
                    input_bound_seconds=self.training_input_bound_seconds,
                    memory_fraction=self.gpu_memory_alert,
                )
            ),
            streams=self.training_streams,
            kernel_busy=self.kernel_busy,
            deadline=self.training_deadline,
            checkpoints_root=Path(self.workdir) / ".gpuws" / "checkpoints",
        )
        self.sampler.subscribe(self.training.on_sample)
        self.userjobs.start()
        self._training_ticking = False
        self._training_poll = PeriodicCallback(self._training_tick, 1000)
        self._training_poll.start()
        self.log.info(
            "GPU workspace: workdir %s, store %s, workspace %s",
            self.workdir,
            redact(self.store_url),
            self.workspace,
        )

    def training_streams(self) -> dict[str, Path]:
        """Kernel id → its training stream, for the kernels this server runs (protocol.py)."""
        streams = {}
        for kernel_id in list(self.serverapp.kernel_manager.list_kernel_ids()):
            for folder in (self.checkpoints.agents_dir, self.checkpoints.root):
                path = protocol.training_file(folder, kernel_id)
                if path.exists():
                    streams[kernel_id] = path
                    break
        # The jobs' runs (userjobs/): their processes' streams beside their registrations.
        for path in self.checkpoints.agents_dir.glob(
            f"{protocol.PROCESS_PREFIX}*{protocol.TRAINING_SUFFIX}"
        ):
            streams[path.name[: -len(protocol.TRAINING_SUFFIX)]] = path
        return streams

    def kernel_busy(self, kernel_id: str) -> bool:
        """Whether the kernel runs a cell, as Jupyter Server knows from its status messages."""
        if kernel_id.startswith(protocol.PROCESS_PREFIX):
            return True  # a job's process: registered while its loop runs
        try:
            return self.serverapp.kernel_manager.get_kernel(kernel_id).execution_state == "busy"
        except KeyError:
            return False

    def training_deadline(self) -> DeadlineView | None:
        clock = self.runtime.clock
        deadline = clock.earliest()
        if deadline is None:
            return None
        return DeadlineView(
            deadline.at,
            deadline.source,
            clock.next_persist(deadline),
            clock.settings.persist_lead_time,
        )

    async def _training_tick(self) -> None:
        if self._training_ticking:
            return  # the last look has not finished: a slow disk, not a reason to pile up
        self._training_ticking = True
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.training.tick)
        except Exception:
            self.log.exception("GPU workspace: reading the training streams failed")
        finally:
            self._training_ticking = False

    def _make_gpu_reader(self) -> NvmlReader:
        if self.nvml_test_double:
            from .monitor.fake_nvml import FakeNvml

            self.log.warning("GPU workspace: reading simulated GPUs from %s", self.nvml_test_double)
            return NvmlReader(FakeNvml(self.nvml_test_double))
        return NvmlReader()

    def initialize_handlers(self) -> None:
        self.handlers.extend(api_handlers(self))
        self.handlers.extend(job_handlers(self))

    async def kernel_notebooks(self) -> dict[str, str]:
        """Kernel id → the path of the notebook (or console) session using it."""
        notebooks: dict[str, str] = {}
        try:
            for session in await ensure_async(self.serverapp.session_manager.list_sessions()):
                kernel = session.get("kernel") or {}
                if kernel.get("id"):
                    notebooks[kernel["id"]] = session.get("path")
        except Exception as err:  # the session database is best effort here
            self.log.debug("GPU workspace: sessions unavailable: %s", err)
        return notebooks

    def is_synced(self, path: str | None) -> bool | None:
        """Whether a checkpoint folder has reached the store (its manifest, written last, has)."""
        service = self.sync.service
        if service is None or not path:
            return None
        manifest = os.path.join(path, "manifest.json")
        rel = os.path.relpath(manifest, self.workdir).replace(os.sep, "/")
        if rel.startswith(".."):
            return None
        record = service.engine.index.get(rel)
        try:
            st = os.stat(manifest)
        except OSError:
            return False
        return record is not None and (record.size, record.mtime_ns) == (st.st_size, st.st_mtime_ns)

    def distributed_runs(self) -> list[dict[str, Any]]:
        """The runs that are processes of their own (blocking: registrations and manifests are
        read): the live ones, registered by their ranks (torchrun) or by a job's process, those
        the work directory holds DCP checkpoints of, and the jobs' runs not running now; each
        with its checkpoints (size per rank, whether in the store), a job's with the job's name,
        a DCP run's with whether it loads here."""
        live = self.checkpoints.runs()
        gpus = (self.sampler.latest or {}).get("gpus") or []
        root = Path(self.workdir) / ".gpuws" / "checkpoints"
        elsewhere = [
            (run["root"], run["run"]) for run in live if run.get("root") and run.get("run")
        ]
        saved = distributed_runs(root, elsewhere, gpus)
        jobs = self.userjobs.manager.records()
        names = {record.id: record.name for record in jobs}
        out = []
        for run in live:
            folder = (
                str(run_dir(run["root"], run["run"]))
                if run.get("root") and run.get("run")
                else None
            )
            found = saved.pop(folder, None) if folder else None
            if found is None and folder and run["kind"] == "process":
                # A job's plain process saves without DCP: its checkpoints are the folder's own
                # (those restored from the store too), not only the one it took since it started.
                found = {"checkpoints": run_checkpoints(Path(folder))}
            out.append(
                {
                    **run,
                    "job_name": names.get(run.get("job") or ""),
                    "live": True,
                    "folder": folder,
                    "checkpoints": (found or {}).get("checkpoints", []),
                    "resumable": (found or {}).get("resumable"),
                }
            )
        for found in saved.values():
            out.append({"run_id": None, "kind": "torchrun", "live": False, **found})
        out.extend(_idle_job_runs(jobs, root, out))
        for run in out:
            for checkpoint in run["checkpoints"]:
                checkpoint["synced"] = self.is_synced(checkpoint["path"])
        return out

    def workspaces(self) -> dict[str, Any]:
        """The store's workspaces and the one in use (blocking: the store is listed)."""
        backend = self._store_backend()
        try:
            found = list_workspaces(backend)
        finally:
            backend.close()
        current = next((w for w in found if w.name == self.workspace), None)
        return {
            "store": backend.description,
            "current": self.workspace,
            "current_files": current.files if current else 0,
            "workspaces": [w.to_dict() for w in found],
        }

    def use_workspace(self, name: str) -> dict[str, Any]:
        """Switch to another existing workspace of the store (blocking)."""
        backend = self._store_backend()
        try:
            Store(backend, name)  # a valid name
            require_workspace(backend, name)
        finally:
            backend.close()
        self.sync.use_workspace(name, self.state_dir, self.workdir)
        self.log.info("GPU workspace: this work directory now uses the workspace %s", name)
        return self.workspaces()

    def _store_backend(self) -> Any:
        return open_backend(self.store_url, dict(self.storage_options))

    def run_async(self, coroutine: Any, timeout: float | None = None) -> Any:
        """Run a coroutine on the server's event loop from a worker thread; wait for it."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.serverapp.io_loop.asyncio_loop)
        return future.result(timeout)

    async def refresh_kernel_index(self) -> None:
        """Which kernel runs as which PID, which notebook uses it, and what GPU memory each
        kernel's agent reports holding (in a container, NVML's PIDs cannot be mapped).

        Only needed while there is a GPU, so a GPU-less server skips the work.
        """
        latest = self.sampler.latest
        if latest is None or not latest["gpus"]:
            return
        server = self.serverapp
        notebooks = await self.kernel_notebooks()
        index: dict[int, KernelRef] = {}
        refs: dict[str, KernelRef] = {}
        km = server.kernel_manager
        for kernel_id in list(km.list_kernel_ids()):
            try:
                kernel = km.get_kernel(kernel_id)
            except KeyError:
                continue
            pid = getattr(getattr(kernel, "provisioner", None), "pid", None)
            ref = KernelRef(kernel_id, kernel.kernel_name, notebooks.get(kernel_id))
            refs[kernel_id] = ref
            if pid:
                index[int(pid)] = ref
        self.kernel_index = index
        reports: list[KernelReport] = []
        for kernel_id, registration in self.checkpoints.agent_states().items():
            if kernel_id in refs:
                reports.extend(reports_from_registration(refs[kernel_id], registration))
        self.kernel_reports = reports

    def _on_sample(self, sample: dict[str, Any], text: str) -> None:
        # Called on the sampler thread: hop onto the event loop to write to websockets.
        if self.stream_clients:
            self.io_loop.add_callback(self._broadcast, text)

    def _broadcast(self, text: str) -> None:
        for client in list(self.stream_clients):
            client.send_sample(text)

    @property
    def io_loop(self) -> Any:
        return self.serverapp.io_loop

    def plain_settings(self, cls: type[Settings]) -> Settings:
        """A supervisor's frozen settings: each field the value of the trait of its name (a
        list as a tuple), read now, so the supervisor never reads the app."""
        values = {}
        for f in dataclasses.fields(cls):
            value = getattr(self, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)

    def sync_settings(self) -> SyncSettings:
        return SyncSettings(
            workdir=self.workdir,
            store_url=self.store_url,
            workspace=self.workspace,
            state_dir=self.state_dir,
            storage_options=dict(self.storage_options),
            concurrency=self.sync_concurrency,
            max_file_size=self.max_file_size,
            bandwidth_limit=self.bandwidth_limit,
            quota_bytes=self.quota_bytes,
            max_delete_fraction=self.max_delete_fraction,
            keep_versions=self.keep_versions,
            version_max_age=self.version_max_age_days * 86400,
            lease_ttl=self.lease_ttl,
            encryption=self.encryption(),
            create_store=self._may_create_store(),
            settle_interval=self.sync_settle,
        )

    def _may_create_store(self) -> bool:
        """Whether a missing store folder may be made on its first use: the embedded default,
        the user's create_store, or a user's store under the folder an admin's template names
        (`/srv/stores/{username}`: that folder there, or where it would go holds other things)."""
        base = getattr(self, "_store_template_base", None)
        vouched = base is not None and (
            os.path.isdir(base) or holds_things(os.path.dirname(base) or "/")
        )
        return self.create_store or is_embedded_store(self.store_url) or vouched

    def encryption(self) -> Encryption | None:
        """The encryption setting, with its passphrase; None for a plain store."""
        if not self.encrypt:
            return None
        passphrase = read_passphrase(self.key_file, self.passphrase_env)
        if not passphrase:
            raise StoreConfigError(
                f"Encryption is on but no passphrase is given: set ${self.passphrase_env} "
                "or c.GpuWorkspace.key_file"
            )
        return Encryption(passphrase, self.encrypt_names)

    async def stop_extension(self) -> None:
        # The jobs stop at a checkpoint and are recorded interrupted before the sync's last pass.
        self.userjobs.stop()
        await self.userjobs.interrupt_async(checkpoint=True)
        self._training_poll.stop()
        self.runtime.stop()
        self.environment.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.sync.stop)
        self._kernel_poll.stop()
        for client in list(self.stream_clients):
            client.close()
        for page in list(self.pages.pages):
            page.close()
        await asyncio.get_running_loop().run_in_executor(None, self.sampler.stop)
        self.checkpoints.close()
        PACKAGE_LOG.handlers = []  # the server's handlers go with it (a test starts the next one)


def _idle_job_runs(
    jobs: list[JobRecord], root: Path, listed: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The runs of jobs (newest first) whose process is not running here now, ended or waiting
    for its relaunch, each under its newest job, with the checkpoints its folder holds; a run
    already listed (live, or as a DCP run's folder) is left out."""
    folders = {run.get("folder") for run in listed}
    running = {run.get("job") for run in listed if run.get("live")}
    out = []
    for record in jobs:
        # "." and ".." (from the store) name no run: run_dir would give them "default"'s folder.
        folder = run_dir(root, record.run) if record.run and record.run.strip(".") else None
        # The run's name comes from the store: only a folder of the checkpoints root is read.
        if folder is None or folder.parent != root or folder.name in (".", ".."):
            continue
        if record.id in running or str(folder) in folders:
            continue
        folders.add(str(folder))
        out.append(
            {
                "run_id": None,
                "kind": "process",
                "run": record.run,
                "job": record.id,
                "job_name": record.name,
                "live": False,
                "folder": str(folder),
                "checkpoints": run_checkpoints(folder),
                "resumable": None,
            }
        )
    return out
