"""What `%gpuws status` and `%gpuws gpu` show: GPUs, runtime, sync and checkpoints as HTML tables
in JupyterLab's own colours, each with a plain-text twin for terminals and plain front ends.

Rendering only: the magic asks the server, these functions turn its answers into a display
bundle. Every text that comes from outside (GPU and notebook names, errors) is escaped.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any

from .store.names import shown
from .vocabulary import (
    WORDS,
    age,
    count,
    deadline_source,
    duration,
    percent,
    size,
    sync_word,
    time_left,
    usage,
)

# JupyterLab's theme variables, with fallbacks for front ends that do not define them.
FONT = "font-family: var(--jp-ui-font-family, sans-serif); font-size: var(--jp-ui-font-size1, 13px)"
TEXT = "color: var(--jp-ui-font-color1, inherit)"
SUBTLE = "color: var(--jp-ui-font-color2, #757575)"
LEVEL_COLOURS = {
    "ok": "var(--jp-success-color1, #388e3c)",
    "pending": "var(--jp-warn-color1, #f57c00)",
    "warning": "var(--jp-warn-color1, #f57c00)",
    "error": "var(--jp-error-color1, #d32f2f)",
}
CELL = "padding: 2px 10px 2px 0; text-align: left; vertical-align: top; border: none; white-space: nowrap"
HEAD = f"{CELL}; font-weight: 600; border-bottom: 1px solid var(--jp-border-color2, #e0e0e0)"
TITLE = "margin: 8px 0 2px; font-weight: 600; font-size: var(--jp-ui-font-size1, 13px)"


@dataclass
class Table:
    """A titled table; `numeric` columns are right-aligned in both renderings."""

    title: str
    header: list[str]
    rows: list[list[str]]
    numeric: set[int] = field(default_factory=set)


@dataclass
class Line:
    """A titled line of text with a level that colours it (ok, pending, warning, error, none)."""

    title: str
    text: str
    level: str = "none"


Part = Table | Line


def gpu_parts(metrics: dict[str, Any]) -> list[Part]:
    gpus = metrics.get("gpus") or []
    if not gpus:
        return [Line("GPUs", f"No GPU: {metrics.get('gpu_error') or 'none found'}", "none")]
    rows = []
    for g in gpus:
        processes = [*g.get("processes", []), *_mig_processes(g)]
        shown = [_user(p) for p in processes if p.get("visible", True)]
        hidden = len(processes) - len(shown)
        if hidden:  # the host's PIDs, seen from a container: the panel's words
            shown.append(f"{count(hidden, 'process')} not visible from this container")
        users = ", ".join(shown) or "—"
        temp = "—" if g.get("temperature") is None else f"{g['temperature']} °C"
        rows.append(
            [
                f"GPU {g['index']}",
                g["name"].removeprefix("NVIDIA "),
                percent(g.get("utilization")),
                usage(g.get("memory_used"), g.get("memory_total")),
                temp,
                users,
            ]
        )
    return [
        Table(
            "GPUs",
            ["GPU", "name", "utilisation", "memory", "temperature", "used by"],
            rows,
            {2, 3, 4},
        )
    ]


def _mig_processes(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for m in gpu.get("mig") or [] for p in m.get("processes") or []]


def _user(process: dict[str, Any]) -> str:
    if process.get("notebook"):
        return str(process["notebook"]).rsplit("/", 1)[-1]
    if process.get("kernel_id"):
        return f"kernel {str(process['kernel_id'])[:8]}"
    return f"PID {process['pid']}"


def runtime_part(runtime: dict[str, Any]) -> Line:
    remaining = runtime.get("remaining")
    if remaining is None:
        return Line(
            "Runtime",
            f"{WORDS['runtime']['no_end']}: running for {duration(runtime.get('elapsed') or 0)}",
        )
    level = "error" if remaining <= 120 else "warning" if remaining <= 600 else "ok"
    return Line(
        "Runtime", f"{time_left(remaining)} ({deadline_source(runtime.get('source'))})", level
    )


def sync_part(sync: dict[str, Any], now: float) -> Line:
    word, level = sync_word(sync, now)
    parts = [word]
    if sync.get("pending_files"):
        parts.append(
            f"{count(sync['pending_files'], 'file')}, {size(sync.get('pending_bytes'))} pending"
        )
    if sync.get("synced_files"):
        parts.append(
            f"{count(sync['synced_files'], 'file')}, {size(sync.get('store_bytes'))} in the store"
        )
    text = " · ".join(parts)
    if sync.get("store"):
        text += f" ({sync['store']}/{sync.get('workspace', '')})"
    if sync.get("last_error"):
        text += f": {sync['last_error']}"
    return Line("Sync", text, level)


def checkpoint_part(checkpoints: dict[str, Any], now: float) -> Part:
    kernels = checkpoints.get("kernels") or []
    if not kernels:
        return Line(
            "Checkpoints",
            "No notebook tracks training state yet: "
            "gpuws.track(model=model, optimizer=opt) in the notebook",
        )
    words = WORDS["checkpoint"]
    rows = []
    for k in kernels:
        last = k.get("last") or {}
        name = str(k.get("notebook") or k.get("run") or k["kernel_id"][:8]).rsplit("/", 1)[-1]
        tracks = ", ".join(k.get("objects") or {}) or "—"
        if not last:
            rows.append([name, tracks, "—", "—", words["none"], ""])
            continue
        where = {True: words["in_store"], False: words["not_in_store"]}.get(
            last.get("synced"), words["local_only"]
        )
        rows.append(
            [
                name,
                tracks,
                f"{last.get('step', '—')}",
                size(last.get("bytes")),
                age(last["time"], now),
                where,
            ]
        )
    return Table(
        "Checkpoints", ["notebook", "tracks", "step", "size", "taken", "where"], rows, {2, 3}
    )


def training_parts(training: dict[str, Any]) -> list[Part]:
    """Each tracked run's step, pace, ETA and verdict, then its open anomalies with advice."""
    runs = training.get("runs") or []
    if not runs:
        return []
    rows, anomalies = [], []
    for run in runs:
        done, total = run.get("done_steps"), run.get("total")
        step = "—" if done is None else (f"{done:,}/{total:,}" if total else f"{done:,}")
        rate = f"{run['rate']:.3g}" if run.get("rate") else "—"
        # A finished run has no ETA (its verdict says it is done), as in the panel.
        finished = run.get("state") == "done" or (run.get("verdict") or {}).get("state") == "done"
        eta = "—" if run.get("eta") is None or finished else duration(run["eta"])
        verdict = (run.get("verdict") or {}).get("message") or ""
        rows.append([str(run["run"]), str(run.get("state", "")), step, rate, eta, verdict])
        for anomaly in run.get("anomalies") or []:
            level = "error" if anomaly.get("level") == "error" else "warning"
            anomalies.append(
                Line(
                    f"{run['run']}",
                    f"{anomaly['message']} {anomaly.get('advice', '')}".strip(),
                    level,
                )
            )
    return [
        Table(
            "Training",
            ["training run", "state", "step", "steps/s", "ETA", "verdict"],
            rows,
            {2, 3, 4},
        ),
        *anomalies,
    ]


def jobs_parts(jobs: dict[str, Any]) -> list[Part]:
    """Each job (docs/jobs.md) with its state, step and ETA, and why it is where it is."""
    listed = jobs.get("jobs") or []
    if not listed:
        return []
    rows = []
    for job in listed:
        step = (
            "—"
            if job.get("step") is None
            else (
                f"{job['step']:,}/{job['total_steps']:,}"
                if job.get("total_steps")
                else f"{job['step']:,}"
            )
        )
        live = job.get("state") in ("running", "relaunched")
        eta = duration(job["eta_seconds"]) if live and job.get("eta_seconds") is not None else "—"
        why = "; ".join(
            str(t)
            for t in (job.get("reason"), job.get("relaunch"), job.get("verdict") if live else None)
            if t
        )
        # A job's name and reasons may come from the store (anyone's who writes it): escaped
        # for the terminal's text as for the HTML.
        rows.append(
            [shown(f"{job['name']} ({job['id']})"), str(job["state"]), step, eta, shown(why)]
        )
    problem = [Line("Jobs", shown(str(jobs["error"])), "error")] if jobs.get("error") else []
    return [Table("Jobs", ["job", "state", "step", "ETA", "why"], rows, {2, 3}), *problem]


def status_parts(
    metrics: dict[str, Any],
    runtime: dict[str, Any],
    sync: dict[str, Any],
    checkpoints: dict[str, Any],
    now: float | None = None,
    training: dict[str, Any] | None = None,
    jobs: dict[str, Any] | None = None,
) -> list[Part]:
    now = time.time() if now is None else now
    return [
        *gpu_parts(metrics),
        runtime_part(runtime),
        sync_part(sync, now),
        checkpoint_part(checkpoints, now),
        *training_parts(training or {}),
        *jobs_parts(jobs or {}),
    ]


# -- rendering ---------------------------------------------------------------------------------


def as_text(parts: list[Part]) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, Line):
            out.append(f"{part.title + ':':<13}{part.text}")
            continue
        out.append(f"{part.title}:")
        rows = [part.header, *part.rows]
        widths = [max(len(row[i]) for row in rows) for i in range(len(part.header))]
        for row in rows:
            cells = [
                cell.rjust(w) if i in part.numeric else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=False))
            ]
            out.append(("  " + "  ".join(cells)).rstrip())
    return "\n".join(out)


def as_html(parts: list[Part]) -> str:
    out = [f'<div class="gpuws-status" style="{FONT}; {TEXT}">']
    for part in parts:
        if isinstance(part, Line):
            colour = LEVEL_COLOURS.get(part.level)
            style = f' style="color: {colour}"' if colour else ""
            out.append(
                f'<div style="margin: 4px 0"><b>{_e(part.title)}</b> '
                f"<span{style}>{_e(part.text)}</span></div>"
            )
            continue
        out.append(f'<div style="{TITLE}">{_e(part.title)}</div>')
        out.append('<table style="border-collapse: collapse; margin: 0 0 6px; border: none">')
        out.append(
            "<thead><tr>"
            + "".join(
                f'<th style="{HEAD}{"; text-align: right" if i in part.numeric else ""}">{_e(h)}</th>'
                for i, h in enumerate(part.header)
            )
            + "</tr></thead><tbody>"
        )
        for row in part.rows:
            out.append(
                "<tr>"
                + "".join(
                    f'<td style="{CELL}{"; text-align: right; font-variant-numeric: tabular-nums" if i in part.numeric else ""}'
                    f'{"; " + SUBTLE if cell in ("—", "") else ""}">{_e(cell)}</td>'
                    for i, cell in enumerate(row)
                )
                + "</tr>"
            )
        out.append("</tbody></table>")
    out.append("</div>")
    return "\n".join(out)


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


def bundle(parts: list[Part]) -> dict[str, str]:
    """A display bundle: the HTML for JupyterLab, the text for everything else."""
    return {"text/plain": as_text(parts), "text/html": as_html(parts)}
