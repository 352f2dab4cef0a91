"""`jupyter gpuws …`: the sync engine from a terminal or a script, without a server.

    jupyter gpuws sync    --workdir DIR --store URL [--workspace NAME] [--once]
    jupyter gpuws restore --workdir DIR --store URL [--workspace NAME]
    jupyter gpuws status  --workdir DIR --store URL [--workspace NAME]

Errors: one clear line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

from .defaults import default_state_dir, default_store_url, derive_workspace_name
from .sync import Progress, SyncEngine, SyncError, SyncSettings
from .sync.service import SyncService


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jupyter gpuws", description="GPU workspace: storage sync from the command line.")
    commands = parser.add_subparsers(dest="command", required=True)

    def store_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--workdir", required=True, help="the directory to mirror")
        p.add_argument("--store", default=None, help="fsspec URL of the store (default: $GPUWS_STORE or a local folder)")
        p.add_argument("--workspace", default=None, help="workspace name in the store (default: derived from user and folder)")
        p.add_argument("--state-dir", default=None, help="where the local record of what was synced lives")
        p.add_argument("--storage-option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                       help="fsspec option for the store, e.g. endpoint_url=http://127.0.0.1:8333")
        p.add_argument("--concurrency", type=int, default=8)
        p.add_argument("--bandwidth-limit", type=_size, default=None, metavar="SIZE", help="bytes per second, e.g. 20M")
        p.add_argument("--quota", type=_size, default=None, metavar="SIZE", help="refuse uploads past this store size")
        p.add_argument("--take-over", action="store_true", help="take over the workspace lease once it has expired")

    sync = commands.add_parser("sync", help="mirror the work directory to the store (continuously, or --once)")
    store_args(sync)
    sync.add_argument("--once", action="store_true", help="one full pass, then exit")
    restore = commands.add_parser("restore", help="bring back what the work directory lacks")
    store_args(restore)
    status = commands.add_parser("status", help="the workspace in the store and what is pending here")
    store_args(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def make_engine(args: argparse.Namespace, take_lease: bool = True) -> SyncEngine:
    workdir = os.path.abspath(os.path.expanduser(args.workdir))
    settings = SyncSettings(
        workdir=workdir,
        store_url=args.store or default_store_url(),
        workspace=args.workspace or derive_workspace_name(workdir),
        state_dir=args.state_dir or default_state_dir(),
        storage_options=dict(args.storage_option),
        concurrency=args.concurrency,
        bandwidth_limit=args.bandwidth_limit,
        quota_bytes=args.quota,
    )
    engine = SyncEngine(settings)
    if take_lease:
        engine.open(take_over=args.take_over)
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
        share = min(p["bytes_done"] / total, 1.0) if p["bytes_total"] else (1.0 if p["phase"] == "done" else 0.0)
        bar = "#" * int(share * 30)
        self.stream.write(
            f"\r{p['phase']:<9} [{bar:<30}] {share:4.0%}  {p['files_done']}/{p['files_total']} files  "
            f"{p['bytes_done'] / 2**20:.1f}/{p['bytes_total'] / 2**20:.1f} MiB "
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
    engine = make_engine(args)
    try:
        if engine.read_only:
            raise SyncError(engine.read_only_reason or "read-only")
        if args.once:
            report = with_cancel(lambda progress, cancel: engine.sync(None, progress, cancel))
            print(f"{len(report.uploaded)} files uploaded ({report.bytes_uploaded / 2**20:.1f} MiB), "
                  f"{len(report.deleted)} removed, {report.unchanged} unchanged")
            for path in report.skipped:
                print(f"skipped (over the size limit): {path}")
            if report.errors:
                for error in report.errors:
                    print(f"jupyter gpuws: error: {error}", file=sys.stderr)
                return 1
            return 0
        service = SyncService(engine)
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        service.start()
        print(f"Syncing {engine.workdir} to {engine.backend.description}/{engine.store.workspace} "
              "(Ctrl-C to stop)", file=sys.stderr)
        while not stop.wait(1.0):
            pass
        service.stop()
        return 0 if engine.last_error is None else 1
    finally:
        engine.close()


def cmd_restore(args: argparse.Namespace) -> int:
    engine = make_engine(args)
    try:
        report = with_cancel(lambda progress, cancel: engine.restore(progress, cancel))
        print(f"{len(report.restored)} files restored ({report.bytes_restored / 2**20:.1f} MiB), "
              f"{report.already_present} already here, {len(report.conflicts)} kept as conflict copies")
        for path in report.conflicts:
            print(f"conflict copy: {path}")
        for error in report.errors:
            print(f"jupyter gpuws: error: {error}", file=sys.stderr)
        return 1 if report.errors else 0
    finally:
        engine.close()


def cmd_status(args: argparse.Namespace) -> int:
    engine = make_engine(args, take_lease=False)  # looking must not stop a runtime from writing
    try:
        changed, deleted, unchanged, _ = engine.plan()
        status = engine.status()
        status.update(pending_files=len(changed) + len(deleted), pending_bytes=sum(f.size for f in changed))
        if args.json:
            print(json.dumps(status, indent=1))
            return 0
        lease = status["lease"]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status["last_sync"])) if status["last_sync"] else "never here"
        print(f"store:     {status['store']}/{status['workspace']}")
        print(f"state:     {status['state']}" + (f" ({status['read_only_reason']})" if status["read_only_reason"] else ""))
        print(f"synced:    {status['synced_files']} files, {status['store_bytes'] / 2**20:.1f} MiB (last sync: {when})")
        print(f"pending:   {len(changed)} to upload ({status['pending_bytes'] / 2**20:.1f} MiB), {len(deleted)} to remove")
        if lease:
            print(f"lease:     {lease['user']}@{lease['host']} pid {lease['pid']}, "
                  f"{'expires' if lease['expires'] > time.time() else 'expired'} "
                  f"{time.strftime('%H:%M:%S', time.localtime(lease['expires']))}")
        return 0
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"sync": cmd_sync, "restore": cmd_restore, "status": cmd_status}
    try:
        return commands[args.command](args)
    except SyncError as err:
        print(f"jupyter gpuws: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
