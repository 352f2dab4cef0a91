"""`%gpuws status|checkpoint|resume|persist|gpu|env` in a notebook (after `%load_ext jupyter_gpu_ws`)."""

from __future__ import annotations

import time
from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class

from .client import ServerUnreachable, call


def _mib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f} MiB"


@magics_class
class GpuwsMagics(Magics):
    @line_magic
    def gpuws(self, line: str) -> None:
        """%gpuws status | checkpoint | resume | persist | gpu | env"""
        command = (line.strip().split() or ["status"])[0]
        handler = getattr(self, f"_{command}", None)
        if handler is None:
            print("usage: %gpuws status | checkpoint | resume | persist | gpu | env")
            return
        try:
            handler()
        except ServerUnreachable as err:
            print(f"gpuws: {err}")

    def _checkpoint(self) -> None:
        from .checkpoints.tracker import default_tracker

        info = default_tracker().checkpoint(wait=True)
        if info is not None:
            print(f"Checkpoint at step {info.step}: {_mib(info.bytes)} in {info.path}")

    def _resume(self) -> None:
        from .checkpoints.tracker import default_tracker

        step = default_tracker().resume()
        print(f"Resumed: continue from step {step}" if step else "No checkpoint yet: start from step 0")

    def _gpu(self) -> None:
        metrics = call("gpuws/api/metrics")
        if not metrics["gpus"]:
            print(f"No GPU: {metrics['gpu_error']}")
        print(f"{'GPU':<4} {'name':<28} {'util':>5} {'memory':>22} {'temp':>5}  used by")
        for g in metrics["gpus"]:
            shown = [p for p in g["processes"] if p.get("visible", True)]
            hidden = len(g["processes"]) - len(shown)
            users = [p.get("notebook") or f"pid {p['pid']}" for p in shown]
            if hidden:  # the host's PIDs, seen from a container
                users.append(f"{hidden} not visible from this container")
            users = ", ".join(users) or "—"
            util = "—" if g["utilization"] is None else f"{g['utilization']}%"
            print(f"{g['index']:<4} {g['name'][:28]:<28} {util:>5} "
                  f"{_mib(g['memory_used']):>10} / {_mib(g['memory_total']):>9} "
                  f"{g['temperature'] or '—':>4}°  {users}")

    def _status(self) -> None:
        self._gpu()
        sync = call("gpuws/api/sync")
        age = f", last sync {time.time() - sync['last_sync']:.0f} s ago" if sync.get("last_sync") else ""
        print(f"\nSync: {sync['state']}, {sync['pending_files']} files ({_mib(sync['pending_bytes'])}) pending{age}")
        if sync.get("last_error"):
            print(f"  error: {sync['last_error']}")
        checkpoints = call("gpuws/api/checkpoints")
        print(f"\n{'notebook':<36} {'tracks':<30} {'step':>6} {'size':>12}  age")
        for k in checkpoints["kernels"]:
            last = k.get("last") or {}
            age = f"{time.time() - last['time']:.0f} s" if last.get("time") else "—"
            tracks = ", ".join(k.get("objects", {})) or "—"
            print(f"{(k.get('notebook') or k['kernel_id'][:8])[:36]:<36} {tracks[:30]:<30} "
                  f"{last.get('step', '—'):>6} {_mib(last.get('bytes')):>12}  {age}")
        training = call("gpuws/api/training")
        if training["runs"]:
            print("\n" + training_report(training))

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
        while job["state"] == "running":
            # This cell is a safe point too: the pipeline's request to this very kernel is
            # honoured here, or it would wait for a step() that this cell never reaches.
            if tracker.pending is not None and tracker.objects:
                tracker.checkpoint(wait=True)
            p = job["progress"]
            print(f"\rPersisting: {p['files_done']}/{p['files_total']} files, "
                  f"{_mib(p['bytes_done'])} of {_mib(p['bytes_total'])}   ", end="", flush=True)
            time.sleep(0.5)
            job = call(f"gpuws/api/persist/{job['id']}")
        print()
        documents = job["result"].get("documents") or {}
        if job["state"] == "done":
            # Not "all saved" when a browser page did not say whether it saved its documents.
            print(f"{'Persisted' if documents.get('unanswered') else 'All saved'}: "
                  f"{job['result'].get('uploaded', 0)} files uploaded "
                  f"({_mib(job['result'].get('bytes_uploaded', 0))}).")
        else:
            print(f"Persist {job['state']}: {'; '.join(job['errors'])}")
        step = next((s for s in job["steps"] if s["name"] == "documents"), None)
        if step is not None and step["detail"]:
            print(f"Open documents: {step['detail']}.")


def training_report(training: dict[str, Any]) -> str:
    """Each tracked run's step, pace, ETA and verdict, and its open anomalies, as `%gpuws status`
    prints them."""
    from .training.progress import duration

    lines = [f"{'training run':<36} {'state':<8} {'step':>17} {'steps/s':>8} {'ETA':>12}  verdict"]
    for run in training["runs"]:
        done, total = run.get("done_steps"), run.get("total")
        step = "—" if done is None else (f"{done:,}/{total:,}" if total else f"{done:,}")
        rate = "—" if not run.get("rate") else f"{run['rate']:.3g}"
        eta = "—" if run.get("eta") is None else duration(run["eta"])
        verdict = (run.get("verdict") or {}).get("message") or ""
        lines.append(f"{run['run'][:36]:<36} {run['state']:<8} {step:>17} {rate:>8} {eta:>12}  {verdict}")
        for anomaly in run.get("anomalies") or []:
            lines.append(f"  {anomaly['level'].upper()}: {anomaly['message']}")
            lines.append(f"    {anomaly['advice']}")
    return "\n".join(lines)


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
        lines.append("No snapshot in the store yet: Persist now or POST /gpuws/api/env/snapshots takes one.")
    else:
        taken = time.strftime("%Y-%m-%d %H:%M", time.localtime(latest["captured_at"]))
        if state == "matches":
            lines.append(f"Matches the snapshot of {taken} ({latest['packages']} packages).")
        else:
            d = env["diff"]
            lines.append(f"Differs from the snapshot of {taken}:")
            lines += [f"  + {a['name']} {a['version']}" for a in d["added"]]
            lines += [f"  - {r['name']} {r['version']}" for r in d["removed"]]
            lines += [f"  ~ {c['name']} {c['from_version']} -> {c['to_version']}" for c in d["changed"]]
    for verdict in env.get("compatibility", []):
        if verdict["level"] in ("warn", "error"):
            lines.append(f"{verdict['level'].upper()}: {verdict['message']}")
    return "\n".join(lines)


def load(ip: Any) -> None:
    ip.register_magics(GpuwsMagics)
    if getattr(ip, "kernel", None) is not None:
        from .checkpoints.agent import start

        start(ip)
