"""`%gpuws status|checkpoint|resume|persist|gpu|env|run|jobs` in a notebook (after `%load_ext jupyter_gpu_ws`)."""

from __future__ import annotations

import time
from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class

from .checkpoints.files import CheckpointError
from .client import ServerUnreachable, call
from .statusreport import bundle, gpu_parts, status_parts
from .store.names import shown
from .vocabulary import count, size

MAGIC_USAGE = "status | checkpoint | resume | persist | gpu | env | run … | jobs"


@magics_class
class GpuwsMagics(Magics):
    @line_magic
    def gpuws(self, line: str) -> None:
        """%gpuws status | checkpoint | resume | persist | gpu | env | run … | jobs"""
        command, _, rest = line.strip().partition(" ")
        command = command or "status"
        handler = getattr(self, f"_{command}", None)
        if handler is None:
            print(f"gpuws: no command {command!r}")
            print(f"usage: %gpuws {MAGIC_USAGE}")
            return
        try:
            if command == "run":
                self._run(rest)
            else:
                handler()
        except (ServerUnreachable, CheckpointError) as err:
            # An expected failure (no server, nothing tracked, a checkpoint that cannot be
            # written or read) is one line naming its cause and what to do; anything else raises.
            text = str(err).strip()
            print(f"gpuws: {text.splitlines()[0] if text else type(err).__name__}")

    def _checkpoint(self) -> None:
        from .checkpoints.tracker import default_tracker

        info = default_tracker().checkpoint(wait=True)
        if info is not None:
            print(f"Checkpoint at step {info.step}: {size(info.bytes)} in {shown(str(info.path))}")

    def _resume(self) -> None:
        from .checkpoints.tracker import default_tracker

        default_tracker().resume()  # it says what it did: resumed from which checkpoint, or from 0 and why

    def _run(self, rest: str) -> None:
        """A command or notebook as a job of the server (`jupyter gpuws run`'s arguments)."""
        from .userjobs.commands import magic_run

        for text in magic_run(rest, call):
            print(text)

    def _jobs(self) -> None:
        from .userjobs.commands import listing_lines

        print("\n".join(listing_lines(call("gpuws/api/jobs"))))

    def _gpu(self) -> None:
        from IPython.display import display

        display(bundle(gpu_parts(call("gpuws/api/metrics"))), raw=True)

    def _status(self) -> None:
        from IPython.display import display

        parts = status_parts(
            call("gpuws/api/metrics"),
            call("gpuws/api/runtime"),
            call("gpuws/api/sync"),
            call("gpuws/api/checkpoints"),
            training=call("gpuws/api/training"),
            jobs=call("gpuws/api/jobs"),
        )
        display(bundle(parts), raw=True)

    def _env(self) -> None:
        env = call("gpuws/api/env")
        for _ in range(120):  # the first look reads the environment (imports torch: seconds)
            if env["state"] != "capturing":
                break
            time.sleep(0.5)
            env = call("gpuws/api/env")
        print(env_report(env))

    def _persist(self) -> None:
        from .checkpoints.tracker import default_tracker

        tracker = default_tracker()
        job = call("gpuws/api/persist", "POST", {})
        tried: set[str | None] = set()
        shown_now = ""
        while job["state"] == "running":
            # This cell is a safe point too: the pipeline's request to this very kernel is
            # honoured here, or it would wait for a step() that this cell never reaches. Once
            # per request: a failure is the kernel's answer, which the persist's result reports.
            pending = tracker.pending
            if pending is not None and tracker.objects and pending.request_id not in tried:
                tried.add(pending.request_id)
                try:
                    tracker.checkpoint(wait=True)
                except Exception:  # noqa: BLE001 - reported through the persist, with the cause
                    pass
            shown_now = f"{job.get('activity') or 'Persisting'}{' ' * 20}"
            print(f"\r{shown_now}", end="", flush=True)
            time.sleep(0.5)
            job = call(f"gpuws/api/persist/{job['id']}")
        if shown_now:
            print(
                f"\r{' ' * len(shown_now)}\r", end=""
            )  # the progress line gives way to the outcome
        summary = job["result"].get("summary") or {}
        # The server's one wording of the outcome, as the panel and `jupyter gpuws persist` say it.
        print(summary.get("text") or f"Persist {job['state']}: {'; '.join(job['errors'])}")
        step = next((s for s in job["steps"] if s["name"] == "documents"), None)
        if step is not None and step["detail"]:
            print(f"Open documents: {step['detail']}.")


def env_report(env: dict[str, Any]) -> str:
    """The environment against its latest snapshot, as `%gpuws env` prints it."""
    lines = [f"Python: {env['python']}"]
    latest = env.get("latest")
    state = env["state"]
    if state == "error":
        lines.append(f"Cannot read the environment: {env.get('error')}")
    elif state == "capturing":
        lines.append("Still reading the environment; try again in a moment.")
    elif latest is None:
        lines.append(
            "No snapshot in the store yet: Persist now or POST /gpuws/api/env/snapshots takes one."
        )
    else:
        taken = time.strftime("%Y-%m-%d %H:%M", time.localtime(latest["captured_at"]))
        if state == "matches":
            lines.append(
                f"Matches the snapshot of {taken} ({count(latest['packages'], 'package')})."
            )
        else:
            d = env["diff"]
            lines.append(f"Differs from the snapshot of {taken}:")
            lines += [f"  + {a['name']} {a['version']}" for a in d["added"]]
            lines += [f"  - {r['name']} {r['version']}" for r in d["removed"]]
            lines += [
                f"  ~ {c['name']} {c['from_version']} -> {c['to_version']}" for c in d["changed"]
            ]
    for verdict in env.get("compatibility", []):
        if verdict["level"] in ("warn", "error"):
            lines.append(f"{verdict['level'].upper()}: {verdict['message']}")
    return "\n".join(lines)


def load(ip: Any) -> None:
    ip.register_magics(GpuwsMagics)
    if getattr(ip, "kernel", None) is not None:
        from .checkpoints.agent import start

        start(ip)
