"""`jupyter gpuws run|jobs` and `%gpuws run|jobs`: what to run, asked of the running server.

jupyter gpuws run [--name NAME] [--resume RUN] [--retries N] [--gpus K] -- COMMAND …
jupyter gpuws run [--resume RUN] NOTEBOOK.ipynb
jupyter gpuws jobs [--log ID [--lines N] [--follow]] [--bring-home ID]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, NoReturn

from ..store.names import shown
from ..vocabulary import age, count, duration, size
from .record import ACTIVE

USAGE = (
    "run [--name NAME] [--resume RUN] [--retries N] [--gpus K] -- COMMAND … | run NOTEBOOK.ipynb"
)

Ask = Callable[..., Any]  # (path, method="GET", body=None) → the server's JSON answer

# How long `jobs --log ID --follow` waits before it asks again when the job wrote nothing new.
FOLLOW_INTERVAL = 0.5


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        default=None,
        help="the job's name, and its new run's (default: the script's or notebook's; the run's "
        "is that and the end of the job's id, e.g. train.py-89ab)",
    )
    parser.add_argument(
        "--resume",
        default=None,
        metavar="RUN",
        help="continue this run from its newest checkpoint (a run of the work directory, as the "
        "Training section names it) instead of starting a new one; --name then names the job only",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=None,
        metavar="N",
        help="run again up to N times after a failure that retrying can change (default 0; "
        "with --export k8s, the Job's backoffLimit, default 3)",
    )
    parser.add_argument(
        "--gpus", type=int, default=None, metavar="K", help="the GPUs the job sees (the first K)"
    )
    parser.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND … | NOTEBOOK.ipynb",
        help="the command after --, or a notebook (run headless, its outputs in NAME.job.ipynb)",
    )


def run_request(args: argparse.Namespace, here: str, workdir: str | None) -> dict[str, Any]:
    """The POST body: a notebook alone, else the command; the job's folder is the one this is
    run in, where that is inside the server's work directory. ValueError says what is wrong."""
    target = list(args.target)
    if target[:1] == ["--"]:
        target = target[1:]
    if not target:
        raise ValueError(f"nothing to run: {USAGE}")
    body: dict[str, Any] = {"retries": args.retries or 0}
    if args.name:
        body["name"] = args.name
    if args.resume:
        body["resume"] = args.resume
    if args.gpus is not None:
        body["gpus"] = args.gpus
    cwd = ""
    if workdir:
        rel = os.path.relpath(os.path.realpath(here), os.path.realpath(workdir))
        cwd = "" if rel == "." or rel.startswith("..") else rel
    if len(target) == 1 and target[0].endswith(".ipynb"):
        notebook = (
            os.path.join(cwd, target[0]) if cwd and not os.path.isabs(target[0]) else target[0]
        )
        if os.path.isabs(notebook) and workdir:
            notebook = os.path.relpath(notebook, workdir)
        body["notebook"] = notebook
    else:
        body["command"], body["cwd"] = target, cwd
    return body


def started_lines(job: dict[str, Any], follow: str) -> list[str]:
    return [
        f"{job['id']}",
        shown(
            f"started {job['name']} as job {job['id']} ({job['state']}); follow it with {follow}"
        ),
        shown(run_line(job)),
    ]


def run_line(job: dict[str, Any]) -> str:
    """Which run a job just asked for starts or continues, as the server knew it then."""
    if job.get("resumed_step") is not None:
        return f"resumes run {job['run']!r} at step {job['resumed_step']:,}"
    return f"run {job['run']!r} (new)"


def job_line(job: dict[str, Any]) -> str:
    """One job in a line: name, id, state, step (of total), ETA and the reason (as the server or
    the store says them: escape it before it reaches a terminal)."""
    parts = [f"{job['name']} ({job['id']})", job["state"]]
    if job.get("step") is not None:
        parts.append(
            f"step {job['step']:,}" + (f"/{job['total_steps']:,}" if job.get("total_steps") else "")
        )
    if job.get("eta_seconds") is not None and job["state"] in ("running", "relaunched"):
        parts.append(f"ETA {duration(job['eta_seconds'])}")
    if job.get("reason"):
        parts.append(str(job["reason"]))
    if job.get("relaunch"):
        parts.append(str(job["relaunch"]))
    return ": ".join(parts[:2]) + (" · " + " · ".join(parts[2:]) if parts[2:] else "")


def approval_lines(approval: dict[str, Any]) -> list[str]:
    """What approving a job runs (the API's `approval`), below its line: the command, its folder,
    the notebook, and its code's files changed since the record was signed."""
    lines = [
        f"  runs: {shlex.join(approval['command'])}",
        f"  in: {approval['cwd'] or '(the work directory)'}",
    ]
    if approval.get("notebook"):
        lines.append(f"  notebook: {approval['notebook']}")
    changed, more = approval.get("changed") or [], approval.get("changed_more") or 0
    if changed or more:
        lines.append("  changed since it was signed:")
        lines += [f"    {c['path']} ({c['change']})" for c in changed]
        if more:
            lines.append(f"    and {more:,} more")
    return lines


def listing_lines(listing: dict[str, Any]) -> list[str]:
    """Each job in a line, and below one that waits for approval what approving it runs: every
    text from the store escaped (a name is anyone's who writes the store: a terminal's escape
    sequence in it would recolour or rewrite the screen, a direction override reorder it)."""
    lines: list[str] = []
    for job in listing.get("jobs") or []:
        lines.append(job_line(job))
        if job.get("approval"):
            lines += approval_lines(job["approval"])
    if not lines:
        lines.append("No jobs: jupyter gpuws run -- python train.py (or %gpuws run …) starts one.")
    lines += elsewhere_lines(listing.get("elsewhere") or {})
    if listing.get("error"):  # the store's records, or the server's look at its jobs, failing
        lines.append(f"Problem: {listing['error']}")
    for bad in listing.get("bad_records") or []:  # each on its own: the others are listed above
        lines.append(f"Not used: the job record {bad.get('file')}: {bad.get('reason')}")
    return [shown(line) for line in lines]


def elsewhere_line(job: dict[str, Any]) -> str:
    """A job run elsewhere in a line: name, id, where, state, step, its outputs, when last heard
    of (the store's time of its record)."""
    state = job["state"]
    if state == "ended" and job.get("returncode") is not None:
        state = f"ended with exit status {job['returncode']}"
    parts = [f"{job['name']} ({job['id']}, elsewhere)", state]
    if job.get("host"):
        parts.append(f"on {job['host']}")
    if job.get("step") is not None:
        parts.append(f"step {job['step']:,}")
    parts.append(f"{count(job['outputs_count'], 'output')} ({size(job['outputs_bytes'])})")
    if job.get("updated"):
        parts.append(f"last heard of {age(job['updated'])}")
    if job.get("error"):
        parts.append(str(job["error"]))
    return ": ".join(parts[:2]) + " · " + " · ".join(parts[2:])


def elsewhere_lines(elsewhere: dict[str, Any]) -> list[str]:
    """The jobs run elsewhere (GET /gpuws/api/jobs's `elsewhere`), each with how to bring it home."""
    lines: list[str] = []
    for job in elsewhere.get("jobs") or []:
        lines.append(elsewhere_line(job))
        lines.append(f"  bring it home: jupyter gpuws jobs --bring-home {job['id']}")
    if elsewhere.get("more"):
        lines.append(f"and {count(elsewhere['more'], 'more job')} run elsewhere, not listed")
    for problem in elsewhere.get("problems") or []:
        lines.append(
            f"Not used: the job run elsewhere {problem.get('id')}: {problem.get('reason')}"
        )
    if elsewhere.get("error"):
        lines.append(f"Problem: {elsewhere['error']}")
    return lines


def bring_home_lines(answer: dict[str, Any]) -> list[str]:
    """What bringing a job home did: each file brought, replaced, kept beside, skipped."""
    counts = answer["counts"]
    lines = [
        f"{answer['id']}: {count(counts['brought'], 'file')} brought, {counts['replaced']:,} replaced "
        f"(as the job began from them), {counts['beside']:,} beside yours (changed here since), "
        f"{counts['same']:,} already here"
    ]
    lines += [f"  brought: {path}" for path in answer["brought"]]
    lines += [f"  replaced: {path}" for path in answer["replaced"]]
    lines += [
        f"  kept yours: {item['path']}; the job's is {item['beside']}" for item in answer["beside"]
    ]
    lines += [f"  not brought: {item['path']}: {item['reason']}" for item in answer["skipped"]]
    lines += [f"  error: {error}" for error in answer["errors"]]
    if answer.get("files_more"):
        lines.append("  more files than were looked at: bring it home again for the rest")
    return [shown(line) for line in lines]


class _MagicParser(argparse.ArgumentParser):
    """In a kernel an error is one line and the usage once, never argparse's own print and exit
    (which it does for a missing argument whatever exit_on_error says)."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def magic_run(line: str, ask: Ask) -> list[str]:
    """`%gpuws run …` in a kernel: the same arguments as `jupyter gpuws run`."""
    parser = _MagicParser(prog="%gpuws run", add_help=False, exit_on_error=False)
    add_run_arguments(parser)
    try:
        args = parser.parse_args(shlex.split(line))
        sync = ask("gpuws/api/sync")
        body = run_request(args, os.getcwd(), sync.get("workdir"))
    except (argparse.ArgumentError, ValueError) as err:
        return [f"gpuws: {err}", f"usage: %gpuws {USAGE}"]
    job = ask("gpuws/api/jobs", "POST", body)
    return started_lines(job, "%gpuws jobs, or the panel's Jobs section")[1:]


def cli_run(args: argparse.Namespace, ask: Ask) -> int:
    sync = ask("gpuws/api/sync")
    try:
        body = run_request(args, os.getcwd(), sync.get("workdir"))
    except ValueError as err:
        print(f"jupyter gpuws: error: {err}", file=sys.stderr)
        return 2
    job = ask("gpuws/api/jobs", "POST", body)
    first, *rest = started_lines(job, f"jupyter gpuws jobs --log {job['id']} --follow")
    print(first)
    for line in rest:
        print(line, file=sys.stderr)
    return 0


def cli_log(job_id: str, lines: int, follow: bool, ask: Ask) -> int:
    """`jupyter gpuws jobs --log ID`: the job's last `lines` lines; with `follow`, then what it
    writes, as it writes it, until it ends (a retry's wait goes on following) or Ctrl-C. Every
    line escaped before it reaches the terminal (the log is in the work directory, which the
    store fills)."""
    where = f"gpuws/api/jobs/{urllib.parse.quote(job_id, safe='')}"
    text = ask(f"{where}/log?lines={lines}")
    open_line = _write_log(text, False)
    if not follow:
        _end_line(open_line)
        return 0
    try:
        while True:
            job = ask(where)  # before the read: what the job wrote before it ended is read next
            text = ask(f"{where}/log?lines=0&after={urllib.parse.quote(text['next'])}")
            open_line = _write_log(text, open_line)
            if text["lines"]:
                continue  # there may be more at once (an answer holds about 1 MiB)
            if job["state"] not in ACTIVE:
                _end_line(open_line)
                print(shown(job_line(job)), file=sys.stderr)
                return 0
            time.sleep(FOLLOW_INTERVAL)
    except KeyboardInterrupt:
        _end_line(open_line)
        return 130


def _write_log(text: dict[str, Any], open_line: bool) -> bool:
    """Lines of a job's log as they are: an open last line is continued by the next answer.
    Returns whether what is written so far ends in the middle of a line."""
    if not text["lines"]:
        return open_line
    sys.stdout.write("\n".join(shown(line) for line in text["lines"]))
    if not text["open"]:
        sys.stdout.write("\n")
    sys.stdout.flush()
    return bool(text["open"])


def _end_line(open_line: bool) -> None:
    """The terminal's next line starts on a line of its own."""
    if open_line:
        sys.stdout.write("\n")
        sys.stdout.flush()  # before a line on stderr, which is not buffered
