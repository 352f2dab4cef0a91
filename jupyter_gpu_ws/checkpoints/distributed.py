"""`track`, `step`, `checkpoint` and `resume` on every rank of a torch.distributed run, through
torch.distributed.checkpoint (DCP).

- Saving: every rank, at the same step, takes its state in DCP's form (dcpfiles.state_of) and
  hands it to `dcp.async_save` with a stager kept from one checkpoint to the next (its CPU
  buffers are reused), on a gloo group of our own (so its collectives never interleave with the
  training's). The loop stalls for the copy alone. In the background each rank then writes its
  RNG states and plain values (`rank-<r>.pt`), fsyncs and checksums its files, and reports to
  rank 0; rank 0 writes the manifest (world size, mesh, every rank's files and checksums) and
  renames the folder into place only when every rank reported success. An incomplete set stays
  a hidden temporary folder: never the newest checkpoint.
- Which step: a policy of `every_steps` is the same on every rank; anything else (a request
  from the server, rank 0's `every_seconds` clock, SIGTERM on any rank) goes through one
  agreement round (agreement.py).
- Resuming: rank 0 asks the server for the store's newest checkpoint, every rank checks a share
  of the candidate's checksums, DCP loads it resharded to this world size and layout, and each
  rank gets back its own RNG states (a rank the checkpoint did not have keeps its own, and
  says so).
- SIGTERM (torchrun passes it on to every rank): every rank saves at its next step, waits for
  the checkpoint to be complete, and then ends as SIGTERM would have ended it (termination.py,
  as a single process does; a rank asks rank 0 for the step through the agreement).
"""

from __future__ import annotations

import atexit
import copy
import json
import logging
import os
import shutil
import socket
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from . import dcpfiles, termination
from .agreement import AgreementError, StepAgreement
from .files import (
    TMP_PREFIX,
    CheckpointError,
    CheckpointInfo,
    apply_retention,
    checksum,
    commit,
    complete_checkpoints,
    default_run_name,
    fsync_file,
    info_of,
    verify,
)
from .formats import capture_rng, restore_rng
from .fromstore import NONE, bring_newest
from .process_agent import start_for
from .tracker import (
    METRICS,
    Pending,
    Tracker,
    current_tracker,
    default_tracker,
    healthy_first,
    say_health,
    unreadable,
    use_tracker,
)

log = logging.getLogger(__name__)

# At exit, a checkpoint still being written is waited for this long.
EXIT_WAIT = 300.0


def running() -> bool:
    """Whether this process is a rank of an initialised torch.distributed process group."""
    import sys

    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


class DistributedTracker(Tracker):
    """The tracker of one rank. All ranks call the same functions in the same order (SPMD)."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = 0
        self.world_size = 1
        self.run_id: str | None = None
        self.mesh: dict[str, Any] = {}
        self.phase = (
            "idle"  # this rank's part of the checkpoint: staging, writing, written, done, error
        )
        self.group: Any = None
        self.agreement: StepAgreement | None = None
        self._owner: dict[str, str] = {}
        self._leader_pid = os.getpid()
        self._stager: Any = None
        self._saves = 0
        # Rounds rank 0 started, as the agreement thread saw them and as the loop joined them (one
        # writer each, so no round is lost between the two threads): the loop waits for the
        # target of each new one at its next step().
        self._rounds_seen = 0
        self._rounds_joined = 0
        self._targets: list[int] = []  # agreed steps still ahead
        self.agent: Any = None

    # -- set-up (a collective: every rank calls track) -------------------------------------------

    def track(
        self,
        name: str | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = None,
        root: str | None = None,
        total_steps: int | None = None,
        tensorboard: bool | None = None,
        **objects: Any,
    ) -> DistributedTracker:
        super().track(
            name,
            every_steps=every_steps,
            every_seconds=every_seconds,
            keep_last=keep_last,
            root=root,
            total_steps=total_steps,
            tensorboard=tensorboard,
            **objects,
        )
        self._owner = dcpfiles.owners(self.objects)
        if self.group is None:
            self._set_up()
        if self.rank != 0:
            self._next_time = float("inf")  # rank 0's clock decides for every rank
        self._changed()
        return self

    def _set_up(self) -> None:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _get_default_store

        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        # DCP's collectives run in its background thread: a group of their own keeps them apart
        # from the training's (and async_save needs a CPU backend, which gloo is).
        self.group = dist.new_group(backend="gloo")
        mine = {
            "run": self.run,
            "objects": sorted(self.objects),
            "every_steps": self.policy.every_steps,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "run_id": uuid.uuid4().hex[:16],
        }
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self.group)
        first = everyone[0]
        for rank, other in enumerate(everyone):
            for key, what in (
                ("run", "run name"),
                ("objects", "tracked objects"),
                ("every_steps", "every_steps"),
            ):
                if other[key] != first[key]:
                    raise CheckpointError(
                        f"gpuws.track: rank {rank} has {what} {other[key]!r}, rank 0 {first[key]!r}: every rank "
                        "must track the same run with the same objects and policy"
                    )
        self.run_id, self._leader_pid = first["run_id"], first["pid"]
        self.mesh = describe_mesh(self.objects, self.world_size)
        store = dist.PrefixStore(f"gpuws/{self.run_id}/", _get_default_store())
        self.agreement = StepAgreement(
            store,
            self.rank,
            self.world_size,
            lambda: self.step_value,
            on_round=self._on_round,
            on_ask=lambda: Tracker.request(self),
        )
        atexit.register(self._at_exit)
        self.agent = start_for(self)

    # -- the safe point --------------------------------------------------------------------------

    def progress(
        self, total: int | None = None, name: str | None = None, tensorboard: bool | None = None
    ) -> DistributedTracker:
        """As a single process's; the TensorBoard event files are written by rank 0 alone."""
        if tensorboard and _rank() != 0:
            tensorboard = None
        super().progress(total, name, tensorboard)
        return self

    def step(self, i: int, loss: Any = None, scalars: dict[str, Any] | None = None) -> None:
        """Call once per iteration on every rank, after optimizer.step(): saves here when due.
        Rank 0 records the step's values (the ranks' losses differ only by their batches)."""
        if self.rank == 0:
            self._record((i, time.monotonic(), loss, scalars))
        self.step_value = i
        if self._rounds_seen != self._rounds_joined:
            self._join_rounds()
        every = self.policy.every_steps
        if (self._targets and i >= self._targets[0]) or (every and i % every == 0 and i > 0):
            while self._targets and self._targets[0] <= i:
                self._targets.pop(0)
            self._save(i)
        elif self._pending is not None or self._next_time <= time.monotonic():
            if self.rank == 0 and not self._targets:
                self._start_round(i)
        else:
            return
        termination.end_if_saved(self)

    def request(self, request_id: str | None = None) -> None:
        """Ask for a checkpoint at the next safe point (thread-safe): on rank 0 it starts a round at
        its next step; another rank passes the request on to rank 0."""
        if self.rank == 0 or self.agreement is None:
            super().request(request_id)
        else:
            self.agreement.ask()

    def _start_round(self, i: int) -> None:
        """Rank 0, with a request pending: agree with every rank on the step to save at."""
        if self._pending is None:
            self._pending = Pending()  # the every_seconds clock
        assert self.agreement is not None
        try:
            target = self.agreement.agree(i, {"request_id": self._pending.request_id})
        except AgreementError as err:
            self.last_error = f"Checkpoint at step {i} not taken: {err}"
            log.error("gpuws: %s", self.last_error)
            self._pending = None
            self._changed()
            return
        if target <= i:
            self._save(i)
        else:
            self._targets.append(target)

    def _on_round(self, n: int) -> None:
        self._rounds_seen = (
            n  # the agreement thread: the loop waits for the target at its next step()
        )

    def _join_rounds(self) -> None:
        assert self.agreement is not None
        while self._rounds_joined < self._rounds_seen:
            self._rounds_joined += 1
            try:
                target, _ = self.agreement.answer(self._rounds_joined)
            except AgreementError as err:
                self.last_error = f"Checkpoint not taken: {err}"
                log.error("gpuws: %s", self.last_error)
                self._changed()
                continue
            self._targets = sorted({*self._targets, target})

    # -- saving ----------------------------------------------------------------------------------

    def _save(self, step: int, explicit: bool = False) -> None:
        """Every rank's part of one checkpoint. Never raises, asked for by the user or not (every
        rank must reach the same steps): a failure is `last_error`, and a request's answer."""
        import torch
        import torch.distributed.checkpoint as dcp

        with self._lock:
            pending, self._pending = self._pending, None
        # Every rank saves at this step, whatever its previous write is doing: wait for it.
        self._write_done.wait()
        self.last_save_started = time.monotonic()
        self._set_phase("staging")
        started = time.perf_counter()
        self.training.drain()  # the curve in the checkpoint ends at its step (as in one process)
        tmp = self.run_path / f"{TMP_PREFIX}{self._leader_pid}-{step:09d}-{self._saves}"
        self._saves += 1
        try:
            # Made before the save starts (DCP would make it in its thread): a kill from here on
            # leaves this hidden folder, never a checkpoint.
            tmp.mkdir(parents=True, exist_ok=True)
            state = dcpfiles.state_of(self.objects, self._owner)
            own = {
                "rng": capture_rng(torch),
                "values": {
                    name: copy.deepcopy(obj)
                    for name, obj in self.objects.items()
                    if dcpfiles.is_plain(obj)
                },
            }
            writer = dcp.FileSystemWriter(
                str(tmp), single_file_per_rank=True, sync_files=True, overwrite=True
            )
            future = dcp.async_save(
                state,
                storage_writer=writer,
                process_group=self.group,
                async_stager=self._reused_stager(),
            )
        except Exception as err:
            self._failed(pending, f"Checkpoint at step {step} failed: {dcpfiles._first_line(err)}")
            log.error("gpuws: %s", self.last_error, exc_info=True)
            self._set_phase("error")
            return
        stall = time.perf_counter() - started
        if self.policy.every_seconds and self.rank == 0:
            self._next_time = time.monotonic() + self.policy.every_seconds
        self._write_done.clear()
        self._set_phase("writing")
        self._writer = threading.Thread(
            target=self._write_dcp,
            args=(future, tmp, own, step, pending, stall),
            name="gpuws-checkpoint",
            daemon=True,
        )
        self._writer.start()

    def _reused_stager(self) -> Any:
        """One stager for the whole run: DCP keeps its CPU copy of each tensor's storage and copies
        into it again at the next checkpoint (pinned, and copied without blocking, on CUDA).

        Kept open across checkpoints: torch 2.11's DefaultStager closes the StateDictStager inside
        it after every staging, which empties its storage cache and its deepcopy table, so every
        checkpoint after the first failed (KeyError: <class 'type'>; seen on an H200). Its close()
        and the inner one are made no-ops: the buffers are meant to live as long as the run."""
        if self._stager is None:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=self.cuda,
                    use_shared_memory=False,
                    use_async_staging=False,
                    use_non_blocking_copy=self.cuda,
                )
            )
            stager.close = lambda: None  # type: ignore[method-assign]  # kept open: see above
            inner = getattr(stager, "_state_dict_stager", None)
            if inner is not None:
                inner.close = lambda: None
            self._stager = stager
        return self._stager

    def _write_dcp(
        self,
        future: Any,
        tmp: Path,
        own: dict[str, Any],
        step: int,
        pending: Pending | None,
        stall: float,
    ) -> None:
        import torch
        import torch.distributed as dist

        started = time.perf_counter()
        report: dict[str, Any] = {
            "rank": self.rank,
            "step": step,
            "host": socket.gethostname(),
            "error": None,
            "files": {},
            "bytes": 0,
            "stall_seconds": stall,
        }
        try:
            future.result()
            with open(tmp / dcpfiles.rank_file(self.rank), "wb") as f:
                torch.save(own, f)
                f.flush()
                os.fsync(f.fileno())
            names = dcpfiles.rank_shards(os.listdir(tmp), self.rank) + [
                dcpfiles.rank_file(self.rank)
            ]
            if self.rank == 0:
                names.append(dcpfiles.METADATA)
            for name in names:
                fsync_file(tmp / name)  # DCP syncs its files too; ours and the index, certainly
                size = (tmp / name).stat().st_size
                report["files"][name] = {"size": size, "xxh3": checksum(tmp / name)}
                report["bytes"] += size
        except Exception as err:
            report["error"] = dcpfiles._first_line(err)
        self._set_phase("written")
        try:
            reports: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
            dist.gather_object(report, reports, dst=0, group=self.group)
            # Every rank's holds rank 0's outcome once broadcast
            result: list[Any] = [
                self._commit(tmp, step, reports or [], pending) if self.rank == 0 else None
            ]
            dist.broadcast_object_list(result, src=0, group=self.group)
            outcome = result[0]
        except Exception as err:
            outcome = {
                "error": f"the ranks could not finish it together: {dcpfiles._first_line(err)}"
            }
        if outcome.get("path"):
            self.last = CheckpointInfo(
                Path(outcome["path"]),
                step,
                outcome["time"],
                outcome["bytes"],
                sorted(self.objects),
                pending.request_id if pending else None,
            )
            self.last_bytes_per_rank = outcome["bytes_per_rank"]
            self.last_seconds = stall + time.perf_counter() - started
            self.last_error = None
            self._set_phase("done", notify=False)
        else:
            self.last_error = f"Checkpoint at step {step} failed: {outcome['error']}"
            log.error("gpuws: %s", self.last_error)
            self._set_phase("error", notify=False)
        self._write_done.set()
        self._changed()

    def _commit(
        self, tmp: Path, step: int, reports: list[dict[str, Any]], pending: Pending | None
    ) -> dict[str, Any]:
        """Rank 0, once every rank reported: the curves and the loss's health (as a single
        process writes them), the manifest, the rename, retention."""
        import torch

        failed = [f"rank {r['rank']}: {r['error']}" for r in reports if r["error"]]
        failed += [
            f"rank {r['rank']} saved step {r['step']}, rank 0 step {step}"
            for r in reports
            if r["step"] != step
        ]
        if failed:
            shutil.rmtree(tmp, ignore_errors=True)
            return {"error": "; ".join(failed)}
        try:
            files = {name: meta for r in reports for name, meta in r["files"].items()}
            metrics = self.training.checkpoint_metrics(step)
            with open(tmp / METRICS, "w", encoding="utf-8") as f:
                json.dump(metrics, f, separators=(",", ":"), allow_nan=False)
                f.flush()
                os.fsync(f.fileno())
            files[METRICS] = {
                "size": (tmp / METRICS).stat().st_size,
                "xxh3": checksum(tmp / METRICS),
            }
            fields = {
                "kind": dcpfiles.KIND,
                "run": self.run,
                "request_id": pending.request_id if pending else None,
                "objects": sorted(self.objects),
                "world_size": self.world_size,
                "mesh": self.mesh,
                "ranks": [
                    {
                        "rank": r["rank"],
                        "step": r["step"],
                        "host": r["host"],
                        "files": sorted(r["files"]),
                        "bytes": r["bytes"],
                        "stall_seconds": r["stall_seconds"],
                    }
                    for r in reports
                ],
                "files": files,
                "bytes": sum(r["bytes"] for r in reports) + files[METRICS]["size"],
                "stall_seconds": max(r["stall_seconds"] for r in reports),
                "torch": torch.__version__,
                "health": metrics["health"],
                "suspect": metrics["suspect"],
                "total_steps": metrics["total"],
                "wandb": metrics["wandb"],
            }
            info = commit(tmp, step, fields)
            apply_retention(self.run_path, self.policy.keep_last)
        except Exception as err:
            shutil.rmtree(tmp, ignore_errors=True)
            return {"error": f"rank 0 could not write the manifest: {dcpfiles._first_line(err)}"}
        return {
            "path": str(info.path),
            "time": info.time,
            "bytes": info.bytes,
            "bytes_per_rank": [r["bytes"] for r in reports],
        }

    def _set_phase(self, phase: str, notify: bool = True) -> None:
        self.phase = phase
        if notify:
            self._changed()

    # -- resuming --------------------------------------------------------------------------------

    def resume(self, timeout: float = 600.0) -> int:
        """Load the newest complete checkpoint on every rank (resharded by DCP to this world size),
        restore each rank's RNG states, and return the step to continue from.

        Rank 0 asks the server for the store's newest checkpoint (as a kernel does), the other
        ranks wait for its answer: one question per run, and every rank fails alike."""
        import torch

        if not self.objects:
            raise CheckpointError(
                "Nothing is tracked: call gpuws.track(model=..., optimizer=...) first"
            )
        self._write_done.wait()
        asked: tuple[str, str] | None = None
        if self.rank == 0:
            try:
                asked = ("ok", bring_newest(self.run_path, self.run or default_run_name(), timeout))
            except CheckpointError as err:
                asked = ("error", str(err))
        asked = self._from_rank0(asked)
        if asked[0] == "error":
            raise CheckpointError(asked[1])
        unusable: list[tuple[Path, str]] = []
        candidates = self._from_rank0(
            [(str(p), m) for p, m in complete_checkpoints(self.run_path, unusable)]
            if self.rank == 0
            else None
        )
        for path, reason in sorted(
            unusable, reverse=True
        ):  # rank 0's alone: the others list nothing
            warnings.warn(f"gpuws: skipping checkpoint {path.name}: {reason}", stacklevel=2)
        chosen = None
        healthy, suspect = healthy_first(
            [(Path(folder), manifest) for folder, manifest in candidates]
        )
        for path, manifest in healthy + suspect:
            problem = self._verify_together(path, manifest)
            if problem:
                if self.rank == 0:
                    warnings.warn(
                        f"gpuws: skipping checkpoint {path.name}: {problem}", stacklevel=2
                    )
                continue
            chosen = path, manifest
            break
        if chosen is None:
            if self.rank == 0:
                where = "in the store" if asked[1] == NONE else "here"
                print(
                    f"gpuws: no checkpoint of {self.run} {where}: every rank starts from 0",
                    flush=True,
                )
            return 0
        path, manifest = chosen
        if self.rank == 0:
            say_health(manifest, suspect, 3)  # the warning points at the caller of resume()
        if manifest.get("kind") != dcpfiles.KIND:
            raise CheckpointError(
                f"Checkpoint {path.name} was saved by a single process, not through torch.distributed.checkpoint: "
                "resume it in one process (a notebook, or without torch.distributed), then save through DCP"
            )
        dcpfiles.load(self.objects, self._owner, path, manifest, self.group)
        self._restore_own(torch, path, manifest)
        self.last = info_of(path, manifest)
        self.last_bytes_per_rank = [r.get("bytes", 0) for r in manifest.get("ranks", [])]
        self.step_value = int(manifest["step"])
        if (
            self.rank == 0
        ):  # the one that records the curves and the W&B run, and says what was done
            self._continue_run(path, manifest)
            self._say_resumed()
        self._changed()
        return self.step_value + 1

    def _from_rank0(self, value: Any) -> Any:
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def _verify_together(self, path: Path, manifest: dict[str, Any]) -> str | None:
        """Each rank checks the checksums of a share of the files; the first problem any found."""
        import torch.distributed as dist

        names = sorted(manifest.get("files", {}))
        try:
            problem = (
                verify(path, manifest, names[self.rank :: self.world_size])
                if names
                else "it lists no files"
            )
            if problem is None and self.rank == 0 and manifest.get("kind") == dcpfiles.KIND:
                dcpfiles.read_metadata(
                    path, manifest
                )  # refused when it holds anything but DCP's records
        except Exception as err:
            problem = unreadable(err)
        found: list[Any] = [None] * self.world_size
        dist.all_gather_object(found, problem, group=self.group)
        return next((p for p in found if p), None)

    def _restore_own(self, torch: Any, path: Path, manifest: dict[str, Any]) -> None:
        """This rank's RNG states and plain values; a rank the checkpoint did not have keeps its
        RNG states and takes rank 0's plain values."""
        saved_on = int(manifest.get("world_size", 1))
        if self.rank < saved_on:
            own = dcpfiles.read_rank_file(path, manifest, self.rank)
            restore_rng(torch, own["rng"])
        else:
            own = dcpfiles.read_rank_file(path, manifest, 0)
            print(
                f"gpuws: rank {self.rank} is new (checkpoint {path.name} was saved on {saved_on} "
                f"rank{'s' * (saved_on != 1)}): its random states stay as this process seeded them; its plain "
                "values are rank 0's",
                flush=True,
            )
        dcpfiles.restore_values(self.objects, self.restored, own.get("values", {}), path)

    # -- reporting -------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if out["last"] is not None:
            out["last"]["bytes_per_rank"] = getattr(self, "last_bytes_per_rank", None)
        out["distributed"] = {
            "run_id": self.run_id,
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": _int_env("LOCAL_RANK"),
            "host": socket.gethostname(),
            "mesh": self.mesh,
            "phase": self.phase,
            "terminating": termination.terminating(),
        }
        return out

    # -- SIGTERM and exit ------------------------------------------------------------------------

    saves_alone = False  # every rank saves at the same step: never one rank outside the loop

    @property
    def sigterm_label(self) -> str:
        return f" on rank {self.rank}"

    def ask_on_sigterm(self) -> None:
        """From the SIGTERM handler: rank 0 saves at its next step; another rank asks rank 0,
        which agrees a step with every rank (signal-safe: it only sets an event)."""
        if self.rank == 0 or self.agreement is None:
            super().ask_on_sigterm()
        else:
            self.agreement.ask()

    def _at_exit(self) -> None:
        """The script ends: a checkpoint still being written is finished first."""
        if not self._write_done.wait(EXIT_WAIT):
            log.error("gpuws: the last checkpoint was still being written at exit")
        if self.agreement is not None:
            self.agreement.close()
        if self.agent is not None:
            self.agent.close()


def tracker_to_track() -> Tracker:
    """The tracker `gpuws.track()` uses: once torch.distributed runs in this process, one that
    saves through torch.distributed.checkpoint on every rank (DistributedTracker), taking over what
    the plain one knew (the agent's hook, what it tracked)."""
    previous = current_tracker()
    if running() and not isinstance(previous, DistributedTracker):
        tracker = DistributedTracker()
        if previous is not None:
            tracker.on_change = previous.on_change
            tracker.objects.update(previous.objects)
            tracker.run, tracker.root, tracker.policy = (
                previous.run,
                previous.root,
                previous.policy,
            )
            tracker.training = previous.training  # the run's total, curves and stream so far
        use_tracker(tracker)
    return default_tracker()


def describe_mesh(objects: dict[str, Any], world_size: int) -> dict[str, Any]:
    """How the tracked models are spread over the ranks (the device mesh of their DTensors, or a
    replica on each rank), for the manifest and the panel."""
    import torch

    for obj in objects.values():
        if not isinstance(obj, torch.nn.Module):
            continue
        for param in obj.parameters():
            mesh = getattr(param, "device_mesh", None)
            if mesh is not None:  # a DTensor: FSDP2 (fully_shard) or tensor parallel
                return {
                    "parallelism": "sharded",
                    "shape": list(mesh.mesh.shape),
                    "dim_names": list(mesh.mesh_dim_names or []),
                    "device_type": mesh.device_type,
                    "placements": [str(p) for p in getattr(param, "placements", ())],
                }
            break
        if isinstance(obj, torch.nn.parallel.DistributedDataParallel):
            return {
                "parallelism": "replicated",
                "wrapper": "DistributedDataParallel",
                "shape": [world_size],
            }
    return {"parallelism": "replicated", "shape": [world_size]}


def _rank() -> int:
    """This process's rank, before the tracker has set up its group (0 outside torch.distributed)."""
    import torch.distributed as dist

    return dist.get_rank() if running() else 0


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None
