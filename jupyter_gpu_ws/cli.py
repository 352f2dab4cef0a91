"""`jupyter gpuws …`: the sync engine and environment snapshots from a terminal or a script, without a server.

    jupyter gpuws sync    [--workdir DIR] [--store URL] [--workspace NAME] [--once]
    jupyter gpuws restore [--workdir DIR] [--store URL] [--workspace NAME]
    jupyter gpuws restore --job ID …; sync --job ID [--every S] … -- COMMAND …   (a job run elsewhere:
      its own area of the workspace, never the runtime's lease; userjobs/elsewhere.py)
    jupyter gpuws status  [--workdir DIR] [--store URL] [--workspace NAME]
    jupyter gpuws env snapshot|diff|restore|list [--store URL] [--workspace NAME] [--python PATH] [--offline]
    jupyter gpuws env export --format dockerfile|requirements|conda [--snapshot ID] [--to FILE] [--store URL]
    jupyter gpuws workspaces [--store URL] [--json]
    jupyter gpuws decrypt [--store URL] [--workspace NAME] --to DIR [PATH …]   (an encrypted store, no server)
    jupyter gpuws key add|change|remove [KEY_ID] [--store URL] [--workspace NAME]
      (sync, restore, status, decrypt, key: --encrypt, --key-file FILE or $GPUWS_PASSPHRASE, else a prompt)
    jupyter gpuws persist [--timeout S] [--no-wait] [--server URL] [--runtime-dir DIR]   (asks the running server)
    jupyter gpuws checkpoint export RUN [--step N] --to FILE [--only NAME] [--workdir DIR]
    jupyter gpuws run [--name NAME] [--retries N] [--gpus K] -- COMMAND … | run NOTEBOOK.ipynb   (a job of the server)
    jupyter gpuws jobs [--log ID [--lines N] [--follow]] [--bring-home ID]   (the running server's jobs, those run elsewhere; a job's log; bring one home)

What the flags leave out comes from the work directory this folder is in: the running server's
settings, else what this machine synced (workspace_rule.py); each command says on stderr the
store and workspace it resolved. A command that reads makes nothing: no store, no workspace.
Errors: one clear line on stderr and a non-zero exit. File names are printed as names.shown()
writes them (a byte that is not UTF-8 as \\xe9, a newline as \\n), whatever the locale.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from . import envsnap, strictjson
from .defaults import (
    default_state_dir,
    default_store_url,
    derive_workspace_name,
    is_embedded_store,
    legacy_workspace_name,
)
from .envsnap.wheels import stored_wheels
from .store import Store, open_backend
from .store.backend import Backend
from .store.crypto import Encryption, protect
from .store.crypto import keys as crypto_keys
from .store.names import shown
from .store.presence import check_store
from .store.redact import redact
from .store.workspaces import (
    describe,
    list_workspaces,
    require_store,
    require_workspace,
    resolve_workspace,
)
from .sync import Progress, SyncEngine, SyncError, SyncSettings
from .sync.service import SyncService
from .vocabulary import age, count, size
from .workspace_rule import Needs, NoWorkspaceHereError, known_folder, resolve

# Parallel transfers when no --concurrency says otherwise (the server's sync_concurrency default).
DEFAULT_CONCURRENCY = 8


def _size(text: str) -> int:
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    text = text.strip().lower().rstrip("ib").rstrip("b")
    unit = text[-1] if text and text[-1] in units else ""
    try:
        return int(float(text[: len(text) - len(unit)] if unit else text) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 500M, 10G)") from None


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


DESCRIPTION = (
    "GPU workspace from a terminal or a script. Inside a work directory a command means its "
    "workspace (the running server's settings, else what this machine synced there); flags say "
    "otherwise. With a server running there, status, persist, run and jobs ask it. Each command "
    "says on stderr the store and workspace it resolved; an error is one line on stderr and a "
    "non-zero exit. `jupyter gpuws COMMAND --help` says more of each."
)
STORE_HELP = (
    "the store: s3://, gs://, az:// (obstore), another fsspec URL, or an absolute path "
    "(default: the work directory's; with --workdir or --workspace, $GPUWS_STORE or a local folder)"
)
WORKSPACE_HELP = (
    "workspace name in the store (default: the work directory's, else derived from user and folder)"
)
OPTION_HELP = (
    "an option for the store, repeatable, e.g. endpoint_url=http://127.0.0.1:8333 (obstore's names or "
    "fsspec's; an unknown one is refused)"
)


def _store_url(args: argparse.Namespace) -> str:
    """--store, else $GPUWS_STORE or the local default; {username} and {servername} filled in
    as the server fills them (JupyterHub's user and server name, else the local user)."""
    from .runtime.hub import expand_store_url

    return expand_store_url(args.store or default_store_url())


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < 10**7:
        raise argparse.ArgumentTypeError(f"seconds must be positive: {text!r}")
    return value


class CommandParser(argparse.ArgumentParser):
    """A command's parser: an argument it does not know is refused with this command's usage
    (argparse leaves that to the top level, whose usage names no command's options)."""

    def parse_known_args(
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jupyter gpuws", description=DESCRIPTION)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
    )

    def where(p: argparse.ArgumentParser) -> None:
        """The options that say which work directory and workspace: every sync command has them."""
        p.add_argument(
            "--workdir",
            default=None,
            help="the work directory (mirrored to the store; default: the one this folder is in)",
        )
        p.add_argument("--store", default=None, help=STORE_HELP)
        p.add_argument("--workspace", default=None, help=WORKSPACE_HELP)
        p.add_argument(
            "--state-dir",
            default=None,
            help="folder of the local record of what was synced (default: the running server's, else "
            "in the Jupyter data folder)",
        )
        p.add_argument(
            "--storage-option",
            action="append",
            type=_option,
            default=[],
            metavar="KEY=VALUE",
            help=OPTION_HELP,
        )
        crypt_args(p)
        p.add_argument(
            "--encrypt",
            action="store_true",
            help="the workspace is (or becomes) encrypted with AES-256-GCM, keyed by a passphrase",
        )
        p.add_argument(
            "--encrypt-names",
            action="store_true",
            help="with --encrypt on a new workspace: encrypt file and folder names too",
        )

    def crypt_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--key-file",
            default=None,
            metavar="FILE",
            help="a file whose first line is the passphrase (default: $GPUWS_PASSPHRASE, else a prompt)",
        )

    def job_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--job",
            default=None,
            metavar="ID",
            help="a job run away from the runtime (a cluster's pod, another machine): restore "
            "marks its start and brings its own files too; sync runs its command and sends what it "
            "creates or changes to its own area of the workspace, never needing the runtime's lease",
        )

    def concurrency(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument(
            "--concurrency", type=int, default=8, metavar="N", help=f"{what} at once (default: 8)"
        )

    sync = commands.add_parser(
        "sync",
        help="mirror the work directory to the store (continuously, or --once)",
        description="Mirror the work directory to the store: continuously until Ctrl-C, "
        "or one full pass with --once.",
    )
    where(sync)
    concurrency(sync, "files uploaded")
    sync.add_argument(
        "--bandwidth-limit",
        type=_size,
        default=None,
        metavar="SIZE",
        help="upload at most this many bytes per second, e.g. 20M (default: no limit)",
    )
    sync.add_argument(
        "--quota",
        type=_size,
        default=None,
        metavar="SIZE",
        help="refuse uploads that would take the store past this size, e.g. 100G (default: none)",
    )
    sync.add_argument(
        "--take-over",
        action="store_true",
        help="take the workspace over from the runtime that writes it (writing starts once its "
        "lease has run out)",
    )
    sync.add_argument("--once", action="store_true", help="one full pass, then exit")
    job_args(sync)
    sync.add_argument(
        "--name", default=None, help="with --job: the job's name (default: its script's)"
    )
    sync.add_argument(
        "--every",
        type=_seconds,
        default=None,
        metavar="S",
        help="with --job: seconds between two sends of the job's files while it runs (default 60)",
    )
    sync.add_argument(
        "job_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND …",
        help="with --job: the command to run as the job; its files go to the job's own area of the "
        "workspace while it runs and when it ends",
    )
    sync.add_argument(
        "--create-store",
        action="store_true",
        help="make the store folder if it is missing, even where the folder it goes in is empty (an "
        "unmounted drive looks so); never where this machine synced the workspace before",
    )
    restore = commands.add_parser(
        "restore",
        help="bring back what the work directory lacks",
        description="Bring back the files the work directory lacks from the store. "
        "Nothing here is overwritten or deleted: where both sides differ, "
        "the store's copy is kept beside yours as a conflict copy.",
    )
    where(restore)
    concurrency(restore, "files downloaded")
    job_args(restore)
    status = commands.add_parser(
        "status",
        help="the workspace in the store and what is pending here",
        description="The workspace in the store, the last sync from this folder, what "
        "is pending here, and which runtime writes it. Reads only.",
    )
    where(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    workspaces = commands.add_parser(
        "workspaces",
        help="the workspaces in a store: files, size, last write",
        description="The workspaces in a store, with their files, size and last write.",
    )
    workspaces.add_argument("--store", default=None, help=STORE_HELP)
    workspaces.add_argument(
        "--storage-option",
        action="append",
        type=_option,
        default=[],
        metavar="KEY=VALUE",
        help=OPTION_HELP,
    )
    workspaces.add_argument("--json", action="store_true", help="machine-readable output")
    decrypt = commands.add_parser(
        "decrypt", help="decrypt files of an encrypted workspace into a folder, no server"
    )
    decrypt.add_argument("--store", default=None, help=STORE_HELP)
    decrypt.add_argument(
        "--workspace", default=None, help="the encrypted workspace (default: the work directory's)"
    )
    decrypt.add_argument(
        "--to",
        required=True,
        metavar="DIR",
        help="where the decrypted files go (never over a file)",
    )
    decrypt.add_argument(
        "paths", nargs="*", metavar="PATH", help="files or folders of the workspace (default: all)"
    )
    decrypt.add_argument(
        "--storage-option",
        action="append",
        type=_option,
        default=[],
        metavar="KEY=VALUE",
        help=OPTION_HELP,
    )
    crypt_args(decrypt)
    key = commands.add_parser(
        "key", help="passphrases of an encrypted workspace (no data is re-encrypted)"
    )
    key.add_argument("action", choices=["add", "change", "remove"])
    key.add_argument("key_id", nargs="?", help="with remove: the key file to remove")
    key.add_argument("--store", default=None, help=STORE_HELP)
    key.add_argument(
        "--workspace", default=None, help="the encrypted workspace (default: the work directory's)"
    )
    key.add_argument(
        "--storage-option",
        action="append",
        type=_option,
        default=[],
        metavar="KEY=VALUE",
        help=OPTION_HELP,
    )
    crypt_args(key)
    key.add_argument(
        "--new-key-file",
        default=None,
        metavar="FILE",
        help="add, change: the new passphrase's file (default: $GPUWS_NEW_PASSPHRASE, else a prompt)",
    )
    add_env_commands(commands)
    add_checkpoint_commands(commands)
    return parser


def _passphrase(
    key_file: str | None,
    env: str = "GPUWS_PASSPHRASE",
    what: str = "Passphrase",
    confirm: bool = False,
) -> str:
    """From the key file or the environment; else asked on a terminal (never echoed)."""
    passphrase = crypto_keys.read_passphrase(key_file, env)
    if passphrase:
        return passphrase
    if not sys.stdin.isatty():
        raise SyncError(f"No passphrase: give --key-file or set ${env}")
    import getpass

    passphrase = getpass.getpass(f"{what}: ")
    if confirm and getpass.getpass(f"{what} again: ") != passphrase:
        raise SyncError("The two passphrases differ")
    return passphrase


def _encryption(args: argparse.Namespace) -> Encryption | None:
    if not getattr(args, "encrypt", False):
        return None
    return Encryption(_passphrase(args.key_file), True if args.encrypt_names else None)


def add_checkpoint_commands(commands: Any) -> None:
    checkpoint = commands.add_parser("checkpoint", help="checkpoints of training runs")
    checkpoint_commands = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    export = checkpoint_commands.add_parser(
        "export",
        help="write a checkpoint as one torch.save file (whole tensors, for inference elsewhere)",
    )
    export.add_argument(
        "run",
        help="the run, as gpuws.track named it (a script's or notebook's name), or its "
        "folder, or one checkpoint folder",
    )
    export.add_argument("--to", required=True, metavar="FILE", help="the torch.save file to write")
    export.add_argument(
        "--step", type=int, default=None, help="the checkpoint of this step (default: the newest)"
    )
    export.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="NAME",
        help="keep only this tracked object (repeat for more), e.g. --only model",
    )
    export.add_argument(
        "--workdir",
        default=None,
        help="the work directory whose .gpuws/checkpoints holds the run "
        "(default: the one this folder is in, else this folder)",
    )
    export.add_argument(
        "--root", default=None, help="the checkpoints folder (default: WORKDIR/.gpuws/checkpoints)"
    )


def add_env_commands(commands: Any) -> None:
    persist = commands.add_parser(
        "persist",
        help="ask the running Jupyter Server to persist everything (a Kubernetes preStop hook)",
    )
    waiting = persist.add_mutually_exclusive_group()
    waiting.add_argument(
        "--wait",
        action="store_true",
        help="wait until the persist has finished, showing its progress; exit 0 once persisted "
        "(the default)",
    )
    waiting.add_argument(
        "--no-wait",
        action="store_true",
        help="print the persist's id (and how to follow it) and return at once",
    )
    persist.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="give up waiting after S seconds (non-zero exit); default: wait as long as it runs",
    )
    persist.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help="the server's URL, where several run (default: the one in the runtime folder)",
    )
    persist.add_argument(
        "--runtime-dir", default=None, help="Jupyter's runtime folder (default: jupyter's own)"
    )
    from .userjobs.commands import add_run_arguments

    run = commands.add_parser(
        "run",
        help="run a command or notebook as a job of the running server: it outlives "
        "this terminal, and is relaunched from its checkpoint on the next runtime",
    )
    add_run_arguments(run)
    from .userjobs.k8s import add_k8s_arguments

    add_k8s_arguments(run)
    run.add_argument("--store", default=None, help="with --export k8s: " + STORE_HELP)
    run.add_argument("--workspace", default=None, help="with --export k8s: " + WORKSPACE_HELP)
    run.add_argument(
        "--encrypt",
        action="store_true",
        help="with --export k8s: the workspace is encrypted (the Secret holds GPUWS_PASSPHRASE)",
    )
    jobs = commands.add_parser(
        "jobs",
        help="the running server's jobs: state, step, ETA, reason; and those run elsewhere",
        description="The running server's jobs, and the jobs run elsewhere (a cluster's pod "
        "from `run --export k8s`) that it finds in the store, with what they produced.",
    )
    jobs.add_argument("--log", default=None, metavar="ID", help="print this job's log instead")
    jobs.add_argument(
        "--lines", type=int, default=100, metavar="N", help="with --log: its last N lines (100)"
    )
    jobs.add_argument(
        "--follow",
        action="store_true",
        help="with --log: then print what the job writes, until it ends or Ctrl-C",
    )
    jobs.add_argument(
        "--bring-home",
        default=None,
        metavar="ID",
        help="copy a job run elsewhere's outputs and checkpoints into the work directory; a file "
        "changed here since the job began is kept, the job's version put beside it",
    )
    for p in (run, jobs):
        p.add_argument(
            "--server", default=None, metavar="URL", help="which server, where several run here"
        )
        p.add_argument(
            "--runtime-dir", default=None, help="Jupyter's runtime folder (default: jupyter's own)"
        )
    env = commands.add_parser(
        "env",
        help="snapshots of the Python environment: take, compare, restore, list",
        description="Snapshots of a Python environment in the store: take one, compare "
        "the environment with one, restore one, list them.",
    )
    env_commands = env.add_subparsers(dest="env_command", required=True, metavar="ACTION")

    def env_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", default=None, help=STORE_HELP)
        p.add_argument("--workspace", default=None, help=WORKSPACE_HELP)
        p.add_argument(
            "--workdir",
            default=None,
            help="the work directory whose workspace is meant (default: the one this folder is in)",
        )
        p.add_argument(
            "--storage-option",
            action="append",
            type=_option,
            default=[],
            metavar="KEY=VALUE",
            help=OPTION_HELP,
        )
        p.add_argument(
            "--python",
            default=sys.executable,
            help="the interpreter whose environment is meant (default: this one, the kernels' Python)",
        )
        p.add_argument("--json", action="store_true", help="machine-readable output")

    snapshot = env_commands.add_parser(
        "snapshot", help="record the environment in the store (if it changed)"
    )
    env_args(snapshot)
    snapshot.add_argument(
        "--keep-all-wheels",
        action="store_true",
        help="keep a wheel of every package in the store, so that a restore needs no index",
    )
    snapshot.add_argument(
        "--apt", action="store_true", help="also record the Debian packages installed by hand"
    )
    snapshot.add_argument("--conda", action="store_true", help="also record conda's package list")
    snapshot.add_argument(
        "--create-store",
        action="store_true",
        help="make the store folder if it is missing, even where the folder it goes in is empty",
    )
    diff = env_commands.add_parser(
        "diff", help="how the environment differs from a snapshot, and GPU compatibility"
    )
    env_args(diff)
    diff.add_argument(
        "--snapshot",
        default=None,
        metavar="ID",
        help="the snapshot to compare with (default: latest)",
    )
    restore = env_commands.add_parser("restore", help="install what differs from a snapshot")
    env_args(restore)
    restore.add_argument(
        "--snapshot", default=None, metavar="ID", help="the snapshot to restore (default: latest)"
    )
    restore.add_argument(
        "--offline", action="store_true", help="only the store's wheels, never an index"
    )
    restore.add_argument(
        "--uninstall", action="store_true", help="also remove packages the snapshot does not have"
    )
    restore.add_argument(
        "--allow-sources",
        action="store_true",
        help="fetch and build packages whose origin is a VCS commit or a URL (their build code "
        "runs here); without it such a restore is refused, naming them",
    )
    restore.add_argument(
        "--installer",
        choices=["auto", "uv", "pip"],
        default="auto",
        help="uv (the default when installed) or pip",
    )
    restore.add_argument("--verbose", "-v", action="store_true", help="show the installer's output")
    listing = env_commands.add_parser("list", help="the snapshots in the store")
    env_args(listing)
    export = env_commands.add_parser(
        "export",
        help="a snapshot as a Dockerfile, a requirements file or a conda environment.yml",
        description="Write a snapshot as a recipe that rebuilds the environment elsewhere: a Dockerfile (a base "
        "image matching its torch's CUDA build, every pinned package, this extension), a requirements "
        "file, or a conda environment.yml. The wheels the store keeps of packages no index has are "
        "written in wheels/ beside it.",
    )
    export.add_argument(
        "--format", required=True, choices=list(envsnap.FORMATS), help="the recipe to write"
    )
    export.add_argument(
        "--snapshot", default=None, metavar="ID", help="the snapshot to export (default: latest)"
    )
    export.add_argument(
        "--to",
        default=None,
        metavar="FILE",
        help="the file to write, or a folder for it (the wheels and the Dockerfile's requirements "
        "go beside it); default: the recipe on stdout, without its wheels",
    )
    export.add_argument(
        "--name", default=None, help="conda: the environment's name (default: the workspace's)"
    )
    for flag, value in (("--store", STORE_HELP), ("--workspace", WORKSPACE_HELP)):
        export.add_argument(flag, default=None, help=value)
    export.add_argument(
        "--workdir",
        default=None,
        help="the work directory whose workspace is meant (default: the one this folder is in)",
    )
    export.add_argument(
        "--storage-option",
        action="append",
        type=_option,
        default=[],
        metavar="KEY=VALUE",
        help=OPTION_HELP,
    )


def open_workspace(args: argparse.Namespace, must_exist: bool) -> tuple[Backend, str]:
    """The store, opened, and the workspace: the one named, else this work directory's default
    (or the name an earlier version derived, where only that one is in the store). Both are said
    on stderr. `must_exist`: a workspace the store does not hold is one clear error naming those
    it does (a mistyped or defaulted name must not read as "0 files restored")."""
    backend = open_backend(
        _store_url(args),
        dict(args.storage_option),
        max_concurrency=getattr(args, "concurrency", DEFAULT_CONCURRENCY),
    )
    if args.workspace:
        name = args.workspace
    else:
        workdir = os.path.abspath(os.path.expanduser(args.workdir))
        name, _ = resolve_workspace(
            backend, derive_workspace_name(workdir), legacy_workspace_name(workdir)
        )
    Store(backend, name)  # a valid name, or a clear error
    print(
        f"store: {redact(backend.description)}  workspace: {name}{_whence(args)}", file=sys.stderr
    )
    if must_exist:
        require_store(backend)
        require_workspace(backend, name)
    return backend, name


def _whence(args: argparse.Namespace) -> str:
    """Where what the flags left out came from, for the line that says what was resolved."""
    return f"  ({args.resolved_from})" if getattr(args, "resolved_from", None) else ""


def make_engine(
    args: argparse.Namespace,
    take_lease: bool = True,
    must_exist: bool = False,
    make_workdir: bool = False,
) -> SyncEngine:
    backend, workspace = open_workspace(args, must_exist)
    if make_workdir:  # restore into a new folder: made only once the workspace is known to be there
        os.makedirs(os.path.abspath(os.path.expanduser(args.workdir)), exist_ok=True)
    settings = SyncSettings(
        workdir=os.path.abspath(os.path.expanduser(args.workdir)),
        store_url=_store_url(args),
        workspace=workspace,
        state_dir=args.state_dir or default_state_dir(),
        storage_options=dict(args.storage_option),
        concurrency=getattr(args, "concurrency", DEFAULT_CONCURRENCY),
        bandwidth_limit=getattr(args, "bandwidth_limit", None),
        quota_bytes=getattr(args, "quota", None),
        encryption=_encryption(args),
        create_store=getattr(args, "create_store", False) or is_embedded_store(_store_url(args)),
    )
    engine = SyncEngine(settings, backend=backend)
    if take_lease:
        engine.open(take_over=getattr(args, "take_over", False))
    return engine


class ProgressBar:
    """One line on stderr redrawn in place, only when stderr is a terminal."""

    def __init__(self, progress: Progress, stream: Any = sys.stderr) -> None:
        self.progress = progress
        self.stream = stream
        self.enabled = stream.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join()
            self._draw()
            self.stream.write("\n")

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._draw()

    def _draw(self) -> None:
        p = self.progress.snapshot()
        total = max(p["bytes_total"], 1)
        share = (
            min(p["bytes_done"] / total, 1.0)
            if p["bytes_total"]
            else (1.0 if p["phase"] == "done" else 0.0)
        )
        bar = "#" * int(share * 30)
        self.stream.write(
            f"\r{p['phase']:<9} [{bar:<30}] {share:4.0%}  {p['files_done']}/{count(p['files_total'], 'file')}  "
            f"{size(p['bytes_done'])} of {size(p['bytes_total'])}   "
        )
        self.stream.flush()


def with_cancel(run: Callable[[Progress, threading.Event], Any]) -> Any:
    """Run with a progress bar; Ctrl-C cancels cleanly (what is done stays done)."""
    progress, cancel = Progress(), threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        with ProgressBar(progress):
            return run(progress, cancel)
    finally:
        signal.signal(signal.SIGINT, previous)


def cmd_sync(args: argparse.Namespace) -> int:
    command = args.job_command[1:] if args.job_command[:1] == ["--"] else args.job_command
    if args.job:
        return cmd_sync_job(args, command)
    if command:
        raise SyncError("A command after -- is run only as a job: give --job ID")
    engine = make_engine(args)
    try:
        if engine.read_only:
            raise SyncError(engine.read_only_reason or "read-only")
        if args.once:
            report = with_cancel(lambda progress, cancel: engine.sync(None, progress, cancel))
            print(
                f"{count(len(report.uploaded), 'file')} uploaded ({size(report.bytes_uploaded)}), "
                f"{len(report.deleted):,} removed, {report.unchanged:,} unchanged"
            )
            for path in report.skipped:
                print(f"skipped (over the size limit): {shown(path)}")
            for problem in (
                report.problems
            ):  # "path: reason": not in the store, and not retried until it changes
                print(f"jupyter gpuws: error: not synced: {shown(problem)}", file=sys.stderr)
            for error in report.errors:
                print(f"jupyter gpuws: error: {shown(error)}", file=sys.stderr)
            return 1 if report.errors or report.problems else 0
        service = SyncService(engine)
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        service.start()
        print(
            f"Syncing {engine.workdir} to {engine.backend.description}/{engine.store.workspace} "
            "(Ctrl-C to stop)",
            file=sys.stderr,
        )
        while not stop.wait(1.0):
            pass
        service.stop()
        if engine.last_error is not None:
            print(f"jupyter gpuws: error: {shown(engine.last_error)}", file=sys.stderr)
            return 1
        return 0
    finally:
        engine.close()


def cmd_restore(args: argparse.Namespace) -> int:
    engine = make_engine(
        args, take_lease=False, must_exist=True, make_workdir=True
    )  # reading needs no lease
    try:
        if args.job:
            from .userjobs.elsewhere import restore_for_job

            area = job_area(args, engine, baseline=None)
            try:
                reports = with_cancel(
                    lambda progress, cancel: restore_for_job(engine, area, progress, cancel)
                )
            finally:
                area.close()
        else:
            reports = (with_cancel(lambda progress, cancel: engine.restore(progress, cancel)),)
        errors = []
        labels = ("the job's own files: ", "the workspace: ") if args.job else ("",)
        for label, report in zip(labels, reports, strict=True):
            print(
                f"{label}{count(len(report.restored), 'file')} restored ({size(report.bytes_restored)}), "
                f"{report.already_present:,} already here, {count(len(report.conflicts), 'conflict copy')} kept"
            )
            for path in report.conflicts:
                print(f"conflict copy: {shown(path)}")
            errors += report.errors
        # What the store holds and the restore did not bring, each with why (links leading out,
        # compiled Python, an environment, the store's own links and special files).
        left_out = {**engine.backend.skipped, **engine.left_out}
        for key, why in sorted(left_out.items()):
            print(f"not restored: {shown(key)}: {why}")
        for error in errors:
            print(f"jupyter gpuws: error: {shown(error)}", file=sys.stderr)
        return 1 if errors else 0
    finally:
        engine.close()


def job_area(args: argparse.Namespace, workspace: SyncEngine, baseline: str | None) -> SyncEngine:
    """The engine of the job's own area of the workspace (userjobs/elsewhere.py)."""
    from .userjobs.elsewhere import area_settings

    try:
        settings = area_settings(workspace.settings, args.job, baseline)
    except ValueError as err:
        raise SyncError(str(err)) from None
    return SyncEngine(settings)


def cmd_sync_job(args: argparse.Namespace, command: list[str]) -> int:
    """`sync --job ID -- COMMAND …`: the command run here as the job, what it creates or
    changes sent to the job's own area while it runs and when it ends; its exit status."""
    from .userjobs.elsewhere import EVERY, run_job
    from .userjobs.k8s import default_name

    if not command:
        raise SyncError(
            "Nothing to run: give the job's command after -- (sync --job ID -- python train.py)"
        )
    workspace = make_engine(args, take_lease=False, must_exist=True)
    try:
        if not workspace.index.count_and_bytes()[0]:
            raise SyncError(
                f"Nothing of the workspace was restored into {workspace.workdir} with this state folder: "
                f"restore it first (jupyter gpuws restore --job {args.job} …), so that only what the job "
                "creates or changes is sent"
            )
        baseline = workspace.index.db_path
        workdir, name = workspace.workdir, workspace.settings.workspace
    finally:
        workspace.close()
    area = job_area(args, workspace, baseline)
    here = os.path.relpath(os.getcwd(), workdir)
    record = {
        "id": args.job,
        "name": args.name or default_name(command),
        "host": socket.gethostname(),
        "command": command,
        "cwd": "" if here == "." or here.startswith("..") else here,
        "workspace": name,
    }
    return run_job(area, command, record, args.every or EVERY)


def _serving(workdir: str | None) -> tuple[str, str, dict[str, Any]] | None:
    """The running server whose work directory is `workdir` (its URL, token and sync status),
    or None where none runs here for it."""
    if not workdir:
        return None
    from .client import ServerUnreachable, request, running_servers

    for url, token in running_servers(None):
        try:
            sync = request(url, token, "gpuws/api/sync", timeout=10)
        except (ServerUnreachable, ValueError):
            continue
        if isinstance(sync, dict) and isinstance(sync.get("workdir"), str):
            if os.path.realpath(sync["workdir"]) == os.path.realpath(workdir):
                return url, token, sync
    return None


def _print_server_status(url: str, token: str, sync: dict[str, Any]) -> None:
    """`status` as the running server sees its work directory: no store credentials needed (the
    server has them), and the state its panel shows, faults included."""
    from .client import ServerUnreachable, request
    from .userjobs.commands import listing_lines

    now = time.time()
    print(f"store:     {sync.get('store') or '?'}/{sync.get('workspace') or '?'}")
    print(f"server:    {url} ({sync.get('state')})")
    if sync.get("last_error"):
        print(f"problem:   {sync['last_error']}")
    if sync.get("starting"):
        print(f"           {sync['starting']}")
    print(
        f"in store:  {count(int(sync.get('synced_files') or 0), 'file')} from here, "
        f"{size(int(sync.get('store_bytes') or 0))}"
    )
    last = sync.get("last_sync")
    print(f"last sync: {_when(last, now) if last else 'never from this folder'}")
    if sync.get("store_same_disk"):
        print(
            "           not saved elsewhere: the store is on this machine's own disk, "
            "so it goes with the machine"
        )
    print(
        f"pending:   {count(int(sync.get('pending_files') or 0), 'file')} "
        f"({size(int(sync.get('pending_bytes') or 0))})"
    )
    if sync.get("problem_files"):
        # The files that cannot be synced, each with why (a link pointing outside, a name the
        # store refuses, an unreadable folder): never left out of the status in silence.
        try:
            pending = request(url, token, "gpuws/api/sync/pending?limit=20", timeout=10)
        except (ServerUnreachable, ValueError):
            pending = {}
        problems = pending.get("problems") if isinstance(pending, dict) else None
        print(f"not synced: {count(int(sync['problem_files']), 'file')} cannot be synced:")
        for problem in problems or []:
            print(f"  {shown(str(problem.get('path')))}: {shown(str(problem.get('reason')))}")
        if problems and int(sync["problem_files"]) > len(problems):
            print(f"  … and {int(sync['problem_files']) - len(problems):,} more")
    holder = sync.get("lease") or {}
    if sync.get("lease_writing"):
        print("writer:    this server")
    elif holder:
        print(f"writer:    {holder.get('user')}@{holder.get('host')} (pid {holder.get('pid')})")
    try:
        jobs = request(url, token, "gpuws/api/jobs", timeout=10)
    except (ServerUnreachable, ValueError):
        return
    lines = listing_lines(jobs) if isinstance(jobs, dict) and jobs.get("jobs") else []
    if lines:
        print("jobs:")
        for line in lines:
            print(f"  {shown(line)}")


def cmd_status(args: argparse.Namespace) -> int:
    serving = _serving(args.workdir)
    if serving is not None:
        sync = serving[2]
        print(
            f"store: {sync.get('store') or '?'}  workspace: {sync.get('workspace') or '?'}"
            f"{_whence(args)}",
            file=sys.stderr,
        )
        if args.json:
            _print_json(serving[2])
        else:
            _print_server_status(*serving)
        return 0
    engine = make_engine(
        args, take_lease=False, must_exist=True
    )  # looking must not stop a runtime from writing
    try:
        changed, deleted, unchanged, _ = engine.plan()
        status = engine.status()
        # The last complete pass from this folder, from its record: a status taken by another
        # process than the one that synced still knows it.
        last = engine.index.last_pass()
        summary = describe(engine.backend, engine.store.workspace)
        try:
            holder = engine.lease.current()
            lease_problem = None
        except SyncError as err:
            holder, lease_problem = None, str(err)
        status.update(
            pending_files=len(changed) + len(deleted),
            pending_bytes=sum(f.size for f in changed),
            last_sync=last,
            lease=asdict(holder) if holder else None,
            store_last_write=summary.last_write,
            store_last_writer=summary.host,
        )
        if args.json:
            _print_json(status)
            return 0
        now = time.time()
        print(f"store:     {status['store']}/{status['workspace']}")
        print(
            f"in store:  {count(status['synced_files'], 'file')} from here, {size(status['store_bytes'])}"
        )
        print(f"last sync: {_when(last, now) if last else 'never from this folder'}")
        if status.get("store_same_disk"):
            # As the panel says it: "saved" there goes with this machine.
            print(
                "           not saved elsewhere: the store is on this machine's own disk, "
                "so it goes with the machine"
            )
        if summary.last_write and (last is None or summary.last_write > last + 1):
            by = (
                f" by {summary.host}" + (f":{summary.folder}" if summary.folder else "")
                if summary.host
                else ""
            )
            print(f"store written {_when(summary.last_write, now)}{by}")
        print(
            f"pending:   {count(len(changed), 'file')} to upload ({size(status['pending_bytes'])}), "
            f"{count(len(deleted), 'file')} to remove"
        )
        if lease_problem:
            print(f"writer:    {lease_problem}")
        elif holder is None:
            print("writer:    none (no runtime holds the lease)")
        else:
            if holder.expires > now:
                print(f"writer:    {holder.who()}, lease renewed {age(holder.heartbeat, now)}")
            elif holder.heartbeat >= holder.expires:  # given back at its end
                print(
                    f"writer:    none now ({holder.who()} released the lease {age(holder.expires, now)})"
                )
            else:
                print(
                    f"writer:    none now ({holder.who()} stopped renewing the lease, "
                    f"which ran out {age(holder.expires, now)})"
                )
        _print_jobs(engine.store)
        return 0
    finally:
        engine.close()


def _when(epoch: float, now: float) -> str:
    """ "4 min ago (2026-12-01 10:04:31)"."""
    return f"{age(epoch, now)} ({time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(epoch))})"


def env_store(args: argparse.Namespace, must_exist: bool = True, first_use: bool = False) -> Store:
    backend, workspace = open_workspace(args, must_exist)
    if first_use:  # a store folder is begun only where it may be (store/presence.py)
        check_store(
            backend,
            workspace,
            0,
            False,
            getattr(args, "create_store", False) or is_embedded_store(_store_url(args)),
        )
    # An encrypted workspace: its snapshots are encrypted too (the passphrase as for sync).
    encryption = None
    if crypto_keys.read_marker(backend, workspace) is not None:
        encryption = Encryption(_passphrase(None))
    return Store(protect(backend, workspace, encryption), workspace)


def _crypt_store(args: argparse.Namespace) -> tuple[Backend, str]:
    backend = open_backend(_store_url(args), dict(args.storage_option))
    Store(backend, args.workspace)  # a valid name
    print(
        f"store: {redact(backend.description)}  workspace: {args.workspace}{_whence(args)}",
        file=sys.stderr,
    )
    require_store(backend)
    if crypto_keys.read_marker(backend, args.workspace) is None:
        raise SyncError(f"The workspace {args.workspace!r} in the store is not encrypted")
    return backend, args.workspace


def cmd_decrypt(args: argparse.Namespace) -> int:
    """Each file of the workspace (or under the PATHs given), decrypted and authenticated into
    --to; a file already there is left alone, a file that fails authentication is not written."""
    backend, workspace = _crypt_store(args)
    store = Store(protect(backend, workspace, Encryption(_passphrase(args.key_file))), workspace)
    target = os.path.abspath(os.path.expanduser(args.to))
    wanted = [p.strip("/") for p in args.paths]
    files = store.list_files()
    chosen = sorted(
        rel
        for rel in files
        if not wanted or any(rel == w or rel.startswith(w + "/") for w in wanted)
    )
    if wanted and not chosen:
        raise SyncError(f"No file of the workspace matches {', '.join(wanted)}")
    failed = done = 0
    for rel in chosen:
        parts = rel.split("/")
        if any(part in ("", ".", "..") for part in parts):
            print(f"jupyter gpuws: error: {shown(rel)}: not a safe path; skipped", file=sys.stderr)
            failed += 1
            continue
        dest = os.path.join(target, *parts)
        if os.path.lexists(dest):
            print(
                f"jupyter gpuws: error: {shown(rel)}: {shown(dest)} exists; left alone",
                file=sys.stderr,
            )
            failed += 1
            continue
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            store.backend.get(store.file_key(rel), dest)
            os.chmod(dest, 0o644)  # data, never a program, whatever the store says
            done += 1
        except (SyncError, OSError) as err:
            print(f"jupyter gpuws: error: {shown(rel)}: {shown(str(err))}", file=sys.stderr)
            failed += 1
    print(f"{done} files decrypted into {target}" + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0


def cmd_key(args: argparse.Namespace) -> int:
    backend, workspace = _crypt_store(args)
    current = _passphrase(args.key_file, what="Current passphrase")
    if args.action == "remove":
        if not args.key_id:
            raise SyncError(
                f"Name the key file to remove: one of {', '.join(crypto_keys.key_ids(backend, workspace))}"
            )
        _, used = crypto_keys.unlock(backend, workspace, current)  # only a key holder removes keys
        crypto_keys.remove(backend, workspace, args.key_id)
        print(
            f"key {args.key_id} removed"
            + (" (it was the one given)" if used == args.key_id else "")
        )
        return 0
    new = _passphrase(args.new_key_file, "GPUWS_NEW_PASSPHRASE", "New passphrase", confirm=True)
    if args.action == "add":
        master, _ = crypto_keys.unlock(backend, workspace, current)
        print(f"key {crypto_keys.add(backend, workspace, master, new)} added")
    else:
        print(
            f"passphrase changed: key {crypto_keys.change(backend, workspace, current, new)} replaces the old one"
        )
    return 0


def cmd_workspaces(args: argparse.Namespace) -> int:
    backend = open_backend(_store_url(args), dict(args.storage_option))
    print(f"store: {redact(backend.description)}{_whence(args)}", file=sys.stderr)
    require_store(backend)  # a mistyped URL is not an empty store
    found = list_workspaces(backend)
    if args.json:
        _print_json([w.to_dict() for w in found])
        return 0
    if not found:
        print(f"No workspaces in {redact(backend.description)}")
        return 0
    rows = [("workspace", "files", "size", "last write", "by")]
    for w in found:
        when = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(w.last_write))
            if w.last_write
            else "unknown"
        )
        rows.append(
            (
                shown(w.name),
                f"{w.files:,}{'+' if w.more else ''}",
                size(w.bytes),
                when,
                f"{w.host or '?'}:{w.folder}" if w.folder else (w.host or ""),
            )
        )
    _print_table(rows)
    return 0


def _print_json(value: Any) -> None:
    print(strictjson.dumps(value, indent=1))  # no NaN or Infinity, no text that is not Unicode


def cmd_env_snapshot(args: argparse.Namespace) -> int:
    snapshot = envsnap.capture(
        args.python, apt=args.apt, conda=args.conda
    )  # a bad interpreter: nothing made
    store = env_store(
        args, must_exist=False, first_use=True
    )  # a first snapshot makes the workspace
    result = envsnap.save_snapshot(store, snapshot, keep_all_wheels=args.keep_all_wheels)
    if args.json:
        _print_json(result.to_dict())
        return 0
    if result.new:
        print(
            f"New snapshot {result.id}: {count(len(snapshot['packages']), 'package')}, "
            f"{count(len(result.wheels_added), 'wheel')} added to the store"
        )
    else:
        print(
            f"No change since snapshot {result.id}"
            + (
                f" ({count(len(result.wheels_added), 'wheel')} added to the store)"
                if result.wheels_added
                else ""
            )
        )
    for item in result.not_reproducible:
        print(
            f"jupyter gpuws: warning: {item['name']} cannot be restored: {item['message']}",
            file=sys.stderr,
        )
    return 0


def cmd_env_diff(args: argparse.Namespace) -> int:
    store = env_store(args)
    snapshot = envsnap.load_snapshot(store, args.snapshot)
    current = envsnap.capture(args.python)
    changes = envsnap.diff(current, snapshot)
    verdicts = envsnap.compatibility(snapshot, current.get("machine"), current["python"])
    if args.json:
        _print_json(
            {
                "snapshot": snapshot["id"],
                "diff": changes.to_dict(),
                "compatibility": [v.to_dict() for v in verdicts],
            }
        )
        return 0
    if changes.matches:
        print(f"Matches the snapshot {snapshot['id']} ({count(changes.same, 'package')})")
    else:
        print(
            f"Differs from the snapshot {snapshot['id']} ({count(changes.same, 'package')} the same):"
        )
    for item in changes.added:
        print(f"  + {item['name']} {item['version']}")
    for item in changes.removed:
        print(f"  - {item['name']} {item['version']}")
    for change in changes.changed:
        print(f"  ~ {change.name} {change.from_version} -> {change.to_version}")
    for verdict in verdicts:
        print(f"{verdict.level}: {verdict.message}")
    return 0


def cmd_env_restore(args: argparse.Namespace) -> int:
    store = env_store(args)
    snapshot = envsnap.load_snapshot(store, args.snapshot)
    cancel = threading.Event()
    previous = signal.signal(
        signal.SIGINT, lambda *_: cancel.set()
    )  # stop between packages, cleanly

    def progress(done: int, total: int, current: str) -> None:
        if current and sys.stderr.isatty():
            print(f"[{done}/{total}] {current}", file=sys.stderr)

    def log(line: str) -> None:
        if args.verbose:
            print(line, file=sys.stderr)

    if args.allow_sources:
        for source in envsnap.restore_sources(snapshot, store, args.python, args.offline):
            print(
                f"Fetching and building {source['name']} {source['version']} from {source['source']}",
                file=sys.stderr,
            )
    try:
        report = envsnap.restore(
            snapshot,
            store,
            args.python,
            offline=args.offline,
            uninstall=args.uninstall,
            progress=progress,
            cancel=cancel,
            log=log,
            installer=args.installer,
            allow_sources=args.allow_sources,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    if args.json:
        _print_json(report.to_dict())
    else:
        print(
            f"{count(len(report.installed), 'package')} installed, {len(report.skipped):,} already right, "
            f"{len(report.removed):,} removed, {len(report.failed):,} failed (with {report.installer})"
        )
        if report.cancelled:
            print(f"Cancelled: {count(len(report.pending), 'package')} not installed")
    for item in report.failed:
        print(f"jupyter gpuws: error: {item['name']}: {item['message']}", file=sys.stderr)
    if report.installed or report.removed:
        print(
            "Restart the kernels that use this environment to load what changed.", file=sys.stderr
        )
    return 0 if report.ok else 1


def cmd_persist(args: argparse.Namespace) -> int:
    """Ask the running server for a persist (POST /gpuws/api/persist) and, unless --no-wait,
    follow the job, showing its progress, until it ends: 0 once everything is persisted, 1 with
    one line when it failed or ran out of time (the server's own persist goes on; a SIGTERM
    after it only finishes the rest)."""
    from .client import ServerUnreachable, request, running_server

    started = time.monotonic()
    try:
        url, token = running_server(args.runtime_dir, args.server)
        sync = request(url, token, "gpuws/api/sync", timeout=10)
        print(
            f"server {url}, store {sync.get('store') or '?'}, workspace {sync.get('workspace') or '?'}",
            file=sys.stderr,
        )
        job = request(url, token, "gpuws/api/persist", "POST", {}, timeout=30)
        if args.no_wait:
            print(job["id"])
            print(
                f"Started persist {job['id']}: follow it in the panel's Sync section, or "
                f"GET {url}gpuws/api/persist/{job['id']}",
                file=sys.stderr,
            )
            return 0
        said = ""
        while job.get("state") == "running":
            position = _persist_position(job)
            if position != said:  # its progress, a line each time it moves
                print(f"  {position}", file=sys.stderr, flush=True)
                said = position
            if args.timeout is not None and time.monotonic() - started >= args.timeout:
                print(
                    f"jupyter gpuws: error: persist {job['id']} not finished after {args.timeout:g} s "
                    f"({_persist_position(job)})",
                    file=sys.stderr,
                )
                return 1
            time.sleep(0.5)
            job = request(url, token, f"gpuws/api/persist/{job['id']}", timeout=10)
    except ServerUnreachable as err:
        print(f"jupyter gpuws: error: {err}", file=sys.stderr)
        return 1
    # The server's one wording of the outcome, as the panel and %gpuws persist say it: "All
    # saved" only for a store that outlives this machine.
    summary = (job.get("result") or {}).get("summary") or {}
    if job.get("state") != "done":
        reasons = "; ".join(job.get("errors") or []) or job.get("state", "unknown state")
        line = summary.get("text") or f"persist {job.get('state')}: {reasons}"
        print(f"jupyter gpuws: error: {line}", file=sys.stderr)
        return 1
    print(
        f"{summary.get('text') or 'Persisted.'} ({time.monotonic() - started:.1f} s)",
        file=sys.stderr,
    )
    return 0


def _persist_position(job: dict[str, Any]) -> str:
    """Where a running persist is: the step it waits on (documents, checkpoints, environment,
    git, sync) in the words the panel shows ("Uploading 3 of 12 files")."""
    if job.get("activity"):
        return str(job["activity"])
    running = next(
        (step for step in job.get("steps") or [] if step.get("state") == "running"), None
    )
    done = job.get("progress") or {}
    files = f"{done.get('files_done', 0)} of {done.get('files_total', 0)} files"
    if running is None or running.get("name") == "sync":
        return f"syncing: {files}"
    return f"still at the {running.get('name')} step" + (
        f": {running['detail']}" if running.get("detail") else ""
    )


def cmd_env_list(args: argparse.Namespace) -> int:
    store = env_store(args)
    snapshots = envsnap.list_snapshots(store)
    if args.json:
        _print_json([info.to_dict() for info in snapshots])
        return 0
    if not snapshots:
        print(f"No snapshots in {store.backend.description}/{store.workspace}")
        return 0
    try:
        latest = envsnap.load_snapshot(store)["id"]  # what latest.json names, if it is usable
    except envsnap.EnvError:
        latest = None
    rows = [("snapshot", "taken", "Python", "torch", "packages", "")]
    for info in reversed(snapshots):  # newest first, as people look for the latest
        mark = "latest" if info.id == latest else ""
        try:
            snapshot = envsnap.load_snapshot(store, info.id)
        except envsnap.EnvError as err:
            rows.append((info.id, "", "", "", "", f"unreadable: {err}"))
            continue
        python = (snapshot.get("python") or {}).get("version") or "?"
        torch = (snapshot.get("torch") or {}).get("version") or "—"
        taken = time.strftime("%Y-%m-%d %H:%M", time.localtime(snapshot["captured_at"]))
        rows.append(
            (
                info.id,
                taken,
                str(python),
                str(torch),
                f"{len(snapshot.get('packages') or []):,}",
                mark,
            )
        )
    _print_table(rows)
    return 0


def _print_table(rows: list[tuple[str, ...]]) -> None:
    """Rows in columns, the first row the header; numbers stay readable without a pager."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip()
        )


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .checkpoints.dcpfiles import export
    from .checkpoints.files import find_checkpoint

    workdir = args.workdir
    if not (
        workdir or args.root or Path(args.run).is_dir()
    ):  # a run's name: in the work directory this folder is in
        known = known_folder(os.getcwd(), exact=False)
        workdir = known.workdir if known else None
    root = args.root or os.path.join(
        os.path.abspath(os.path.expanduser(workdir or ".")), ".gpuws", "checkpoints"
    )
    folder, manifest = find_checkpoint(root, args.run, args.step)
    ranks = int(manifest.get("world_size") or 1)
    print(
        f"checkpoint: {folder} (step {manifest['step']}, saved by {ranks} rank{'s' * (ranks != 1)})",
        file=sys.stderr,
    )
    to = Path(os.path.expanduser(args.to))
    state = export(folder, manifest, to, args.only)
    print(f"{to}: {', '.join(state)} ({size(to.stat().st_size)})")
    return 0


def cmd_env_export(args: argparse.Namespace) -> int:
    """The recipe on stdout or at --to. A snapshot that is missing or that the recipe cannot
    hold (a malformed one from the store, a name a shell would read) is bad input: exit 2."""
    from . import __version__

    store = env_store(args)
    try:
        snapshot = envsnap.load_snapshot(store, args.snapshot)
        name = args.name or re.sub(r"[^A-Za-z0-9._-]+", "-", store.workspace).strip("-") or "gpuws"
        result = envsnap.export_snapshot(
            snapshot, args.format, stored_wheels(store), name=name, extension_version=__version__
        )
        for warning in result.warnings:
            print(f"jupyter gpuws: warning: {shown(warning)}", file=sys.stderr)
        written = envsnap.write_export(result, store, args.to) if args.to is not None else []
    except (envsnap.SnapshotNotFoundError, envsnap.UnsafeSnapshotError, envsnap.ExportError) as err:
        print(f"jupyter gpuws: error: {shown(str(err))}", file=sys.stderr)
        return 2
    if written:
        print(
            f"{shown(str(written[-1]))}: {result.format} of snapshot {snapshot['id']}"
            + (
                f", with {count(len(result.wheels), 'wheel')} in {shown(str(written[-1].parent / 'wheels'))}"
                if result.wheels
                else ""
            )
        )
        return 0
    sys.stdout.write(result.files[result.main])
    left = [name for name in result.files if name != result.main] + (
        [f"{count(len(result.wheels), 'wheel')} of the store"] if result.wheels else []
    )
    if left:
        print(
            f"jupyter gpuws: warning: not written: {' and '.join(left)} (give --to FOLDER to write them beside it)",
            file=sys.stderr,
        )
    return 0


def _print_jobs(store: Any) -> None:
    """The workspace's jobs as their records in the store say (no server needed)."""
    from .userjobs.commands import job_line
    from .userjobs.record import RecordError, from_json, stored_records

    lines = []
    for name, data, problem in stored_records(store):
        try:
            if problem:
                raise RecordError(problem)
            lines.append(job_line(from_json(data).to_json()))
        except RecordError as err:
            lines.append(f"{name}: not a job record ({err})")
    if lines:
        print("jobs:")
        for line in lines:
            print(f"  {shown(line)}")


# How long `jobs --bring-home` waits for the server's answer: the job's checkpoints come with it.
BRING_HOME_WAIT = 3600.0


def cmd_jobs(args: argparse.Namespace) -> int:
    """`run` and `jobs` ask the running server (the jobs are its children); without one, one line
    and exit 2: what to do is start it, or name it."""
    from urllib.parse import quote

    from .client import ServerUnreachable, request, running_server
    from .userjobs.commands import bring_home_lines, cli_log, cli_run, listing_lines

    if args.command == "run" and args.export == "k8s":
        return cmd_run_export(args)
    if args.command == "jobs" and args.log is None and args.follow:
        print("jupyter gpuws: error: --follow follows a job's log: --log ID", file=sys.stderr)
        return 2
    try:
        url, token = running_server(args.runtime_dir, args.server)
    except ServerUnreachable as err:
        print(
            f"jupyter gpuws: error: {err}: a job runs in a Jupyter Server with this extension; start one "
            "(jupyter lab) or name it with --server URL",
            file=sys.stderr,
        )
        return 2

    def ask(path: str, method: str = "GET", body: Any = None, timeout: float = 30) -> Any:
        return request(url, token, path, method, body, timeout=timeout)

    try:
        if args.command == "run":
            return cli_run(args, ask)
        if args.log is not None:
            return cli_log(args.log, args.lines, args.follow, ask)
        if args.bring_home:
            home = f"gpuws/api/jobs/elsewhere/{quote(args.bring_home, safe='')}/bring-home"
            answer = ask(home, "POST", {}, timeout=BRING_HOME_WAIT)
            for line in bring_home_lines(answer):
                print(line)
            return 1 if answer["errors"] else 0
        for line in listing_lines(ask("gpuws/api/jobs")):
            print(line)
        return 0
    except ServerUnreachable as err:
        print(f"jupyter gpuws: error: {err}", file=sys.stderr)
        return 2 if err.status == 400 else 1


def cmd_run_export(args: argparse.Namespace) -> int:
    """`run … --export k8s`: the job as a Kubernetes Job on stdout, run nowhere here. Its store
    and workspace are the flags', else the running server's (and the job's folder, this one
    where it is inside the server's work directory)."""
    from .client import ServerUnreachable, request, running_server
    from .userjobs.commands import run_request
    from .userjobs.k8s import ManifestError, export_k8s

    workdir = None
    if not (args.store and args.workspace):
        try:
            url, token = running_server(args.runtime_dir, args.server)
            sync = request(url, token, "gpuws/api/sync", timeout=30)
        except ServerUnreachable as err:
            print(
                f"jupyter gpuws: error: {err}: --export k8s needs the store and workspace the job resumes "
                "from: give --store URL --workspace NAME, or run it where the server runs",
                file=sys.stderr,
            )
            return 2
        args.store = args.store or sync.get("store_url")
        args.workspace = args.workspace or sync.get("workspace")
        workdir = sync.get("workdir")
    try:
        body = run_request(args, os.getcwd(), workdir)
        argv = body.get("command") or [
            "python",
            "-m",
            "jupyter_gpu_ws.userjobs.notebook",
            body["notebook"],
        ]
        args.cwd = body.get("cwd", "")
        sys.stdout.write(export_k8s(argv, args))
    except (ManifestError, ValueError) as err:
        print(f"jupyter gpuws: error: {shown(str(err))}", file=sys.stderr)
        return 2
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    commands = {
        "snapshot": cmd_env_snapshot,
        "diff": cmd_env_diff,
        "restore": cmd_env_restore,
        "list": cmd_env_list,
        "export": cmd_env_export,
    }
    return commands[args.env_command](args)


# What each command cannot do without; `persist` asks the server, `checkpoint` reads a folder.
NEEDS: dict[str, Needs] = {
    "sync": "workdir",
    "restore": "workdir",
    "status": "workdir",
    "env": "workspace",
    "decrypt": "workspace",
    "key": "workspace",
    "workspaces": "store",
}


def apply_workspace_rule(args: argparse.Namespace, needs: Needs) -> None:
    """The work directory, store and workspace the command means, by the one rule
    (workspace_rule.py), put in its arguments in place of the flags it was given."""
    found = resolve(
        needs,
        getattr(args, "workdir", None),
        args.store,
        getattr(args, "workspace", None),
        getattr(args, "state_dir", None),
    )
    args.workdir, args.store, args.workspace = found.workdir, found.store_url, found.workspace
    args.state_dir, args.resolved_from = found.state_dir, found.source


def main(argv: list[str] | None = None) -> int:
    # The engine's log lines are the server's; here every error is said once, on stderr, by the
    # command (a library that configures the root logger must not repeat it).
    quiet = logging.getLogger("jupyter_gpu_ws")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    # Whatever the locale (LC_ALL=C with UTF-8 mode off gives ASCII), what cannot be written is
    # escaped, never a UnicodeEncodeError after the work is done.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    commands = {
        "sync": cmd_sync,
        "restore": cmd_restore,
        "status": cmd_status,
        "env": cmd_env,
        "workspaces": cmd_workspaces,
        "persist": cmd_persist,
        "checkpoint": cmd_checkpoint,
        "decrypt": cmd_decrypt,
        "key": cmd_key,
        "run": cmd_jobs,
        "jobs": cmd_jobs,
    }
    from .checkpoints.files import CheckpointError

    try:
        if args.command in NEEDS:
            apply_workspace_rule(args, NEEDS[args.command])
        code = commands[args.command](args)
        sys.stdout.flush()  # here, so that a reader that went away is noticed below
        return code
    except BrokenPipeError:
        return _reader_gone()
    except NoWorkspaceHereError as err:  # what to pass: a usage error, as argparse's are
        print(f"jupyter gpuws: error: {shown(str(err))}", file=sys.stderr)
        return 2
    except (SyncError, envsnap.EnvError, CheckpointError) as err:
        print(f"jupyter gpuws: error: {shown(str(err))}", file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 - whatever happens, one line, never a traceback
        text = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(
            f"jupyter gpuws: error: {type(err).__name__}{': ' + shown(text) if text else ''}",
            file=sys.stderr,
        )
        return 1


def _reader_gone() -> int:
    """The reader of our output closed it (`| head`): stop quietly, as other Unix tools do.
    What is still buffered goes nowhere, so exiting does not fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
