"""Why a job's attempt ended, in the user's words, and whether running it again can change that."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path, PurePath

# The end of every reason that a retry cannot change; a job's own output may end with it too (the
# notebook runner's line for a notebook it cannot read), and is then taken as it is.
CANNOT_CHANGE = "fix it and restart the job; retrying cannot change it"

# Errors that say the code or its files are wrong, not the run: the same code fails the same way.
_PERMANENT = {
    "SyntaxError",
    "IndentationError",
    "TabError",
    "ModuleNotFoundError",
    "ImportError",
    "FileNotFoundError",
}

# "ValueError: bad lr", "torch.OutOfMemoryError: CUDA out of memory.", "KeyboardInterrupt": the
# last line of a Python traceback (or the notebook runner's ename: evalue).
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))(?::\s*(.*))?$"
)
_FRAME = re.compile(r'^\s*File "(.+)", line (\d+)')
_CANT_OPEN = re.compile(r"can't open file '(.+?)'")
# torchrun's own error when a rank failed: it says which rank, not why; the rank's error is before.
_WRAPPERS = {"ChildFailedError"}
_RANK_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_LIBRARY = re.compile(r"[/\\](?:site-packages|dist-packages|lib[/\\]python\d[\d.]*)[/\\]|^<frozen ")


@dataclass
class Outcome:
    """How one attempt of a job ended: what the job record and its reason line show."""

    state: str  # "finished" | "failed" | "interrupted"
    reason: str | None
    retryable: bool


def classify(
    returncode: int | None,
    log_tail: list[str],
    *,
    step: int | None = None,
    interrupted: bool = False,
    nan_loss: bool = False,
    oom_killed: bool = False,
    nan_stopped: bool = False,
    nan_step: int | None = None,
) -> Outcome:
    """How an attempt ended: `returncode` as Popen gives it (negative for a signal; None when the
    command could not start), the last lines of its log, the step it had reached, and what the
    server knows beyond the process: it interrupted it for a checkpoint, the training view saw a
    loss that was not finite (from `nan_step`), the server stopped it for that (`nan_stopped`:
    whatever its exit code), the cgroup's OOM-kill count grew while it ran."""
    at_step = "" if step is None else f" at step {step:,}"
    not_finite = Outcome(
        "failed",
        "the loss was not finite" + (at_step if nan_step is None else f" at step {nan_step:,}"),
        True,
    )
    if interrupted:
        return Outcome("interrupted", f"interrupted{at_step}", True)
    if nan_stopped:
        return not_finite
    if returncode == 0:
        return Outcome("finished", None, False)
    if oom_killed:
        return Outcome("failed", "killed by the kernel's OOM killer", True)
    lines = [line.rstrip() for line in log_tail if line.strip()]
    if any("CUDA out of memory" in line or "OutOfMemoryError" in line for line in lines):
        return Outcome("failed", f"CUDA out of memory{at_step}", True)
    if nan_loss:
        return not_finite
    if lines and lines[-1].endswith(CANNOT_CHANGE):
        return Outcome("failed", lines[-1], False)
    permanent = _permanent(returncode, lines)
    if permanent:
        return Outcome("failed", f"{permanent} — {CANNOT_CHANGE}", False)
    killed_by = _signal_name(returncode) or _signal_name(_rank_exit(lines))
    if killed_by:
        return Outcome("failed", f"killed by {killed_by}", True)
    code = "no exit code" if returncode is None else f"exit code {returncode}"
    error = _exception(lines)
    return Outcome("failed", f"{_said(error)} ({code})" if error else code, True)


def _permanent(returncode: int | None, lines: list[str]) -> str | None:
    """What makes the failure one a retry cannot change, in words, or None."""
    error = _exception(lines)
    if error and error[0] in _PERMANENT:
        return _said(error)
    for line in reversed(lines):
        opened = _CANT_OPEN.search(line)
        if opened:
            return f"{PurePath(opened.group(1)).name} cannot be opened: it does not exist"
    if returncode == 127:
        said = next((line for line in reversed(lines) if "not found" in line), None)
        return said or "the command was not found (exit code 127)"
    if returncode == 126:
        return "the command cannot be run: it is not executable (exit code 126)"
    return None


def _exception(lines: list[str]) -> tuple[str, str, str] | None:
    """The last exception in the tail: its name, its message, and " in train.py line 4" from the
    innermost frame in the user's own files (a library's frame says less about what to fix)."""
    for index in range(len(lines) - 1, -1, -1):
        match = _EXCEPTION.match(lines[index])
        if not match or match.group(1) in _WRAPPERS:
            continue
        frames = []
        for line in reversed(lines[:index]):
            frame = _FRAME.match(line)
            if frame:
                frames.append((frame.group(1), int(frame.group(2))))
            elif line.startswith("Traceback ") or _EXCEPTION.match(line):
                break  # the traceback before belongs to another exception
        own = [f for f in frames if not _LIBRARY.search(f[0])] or frames
        where = f" in {PurePath(own[0][0]).name} line {own[0][1]:,}" if own else ""
        return match.group(1), (match.group(2) or "").strip(), where
    return None


def _said(error: tuple[str, str, str]) -> str:
    """ "ValueError in train.py line 9: bad lr"."""
    name, message, where = error
    return f"{name}{where}{': ' + message if message else ''}"


def _rank_exit(lines: list[str]) -> int | None:
    """The exit code of the rank that failed first, from torchrun's summary ("exitcode  : -11")."""
    for line in lines:
        found = _RANK_EXIT.match(line)
        if found:
            return int(found.group(1))
    return None


def _signal_name(returncode: int | None) -> str | None:
    # A shell in between reports a signal as 128 + its number (137 for SIGKILL).
    number = (
        -returncode
        if returncode is not None and returncode < 0
        else (returncode - 128 if returncode is not None and 128 < returncode < 128 + 65 else None)
    )
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}" if returncode is not None and returncode < 0 else None


def oom_kills(
    root: Path = Path("/sys/fs/cgroup"), cgroup_file: Path = Path("/proc/self/cgroup")
) -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's cgroup: `oom_kill`
    in cgroup v2's memory.events, or in v1's memory.oom_control; None where neither can be read.
    A job is a child of the server, in the same cgroup: the count growing while it ran is how a
    SIGKILL is told from the OOM killer's."""
    v2_path = v1_path = ""
    try:
        for line in cgroup_file.read_text().splitlines():
            hierarchy, controllers, path = line.split(":", 2)
            if hierarchy == "0" and not controllers:
                v2_path = path
            elif "memory" in controllers.split(","):
                v1_path = path
    except (OSError, ValueError):
        pass
    candidates = [
        root / v2_path.lstrip("/") / "memory.events",
        root / "memory.events",
        root / "memory" / v1_path.lstrip("/") / "memory.oom_control",
        root / "memory" / "memory.oom_control",
    ]
    for candidate in candidates:
        try:
            text = candidate.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None
