"""The words and figures users read, in one place for `%gpuws`, `jupyter gpuws` and the server's notices.

The words themselves are in vocabulary.json, which the panel and the status bar read too
(src/vocabulary.ts follows the same rules for sizes, ages and durations), so "runtime limit",
"synced 4 min ago" and "33.5 KiB" read the same wherever they appear.
"""

from __future__ import annotations

import json
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

WORDS: dict[str, Any] = json.loads(Path(__file__).with_name("vocabulary.json").read_text("utf-8"))
UNITS: dict[str, Any] = WORDS["units"]
DOCS_URL: str = WORDS["docs"]


def fill(template: str, **values: Any) -> str:
    """A vocabulary template with its {names} filled in."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", str(value))
    return template


def _fixed(value: float, decimals: int) -> str:
    # Half away from zero on the exact value, as JavaScript's toFixed does in the panel, so a
    # size reads the same in a notebook as in the sidebar (Python's format would round 1.25 to 1.2).
    quantum = Decimal(1).scaleb(-decimals)
    return str(Decimal(value).quantize(quantum, rounding=ROUND_HALF_UP))


def _scaled(n: float) -> tuple[float, int]:
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(UNITS["bytes"]) - 1:
        value /= 1024
        unit += 1
    return value, unit


def size(n: float | None) -> str:
    """Bytes as people read them: "17 B", "33.5 KiB", "15.0 GiB", "160 MiB"; "—" when unknown."""
    if n is None:
        return "—"
    value, unit = _scaled(n)
    decimals = 0 if unit == 0 or abs(value) >= 100 else 1
    return f"{_fixed(value, decimals)} {UNITS['bytes'][unit]}"


def usage(used: float | None, total: float | None) -> str:
    """Used of total in the total's unit: "39.9/80 GiB", "0.4/9.5 GiB"."""
    if used is None or total is None:
        return f"{size(used)} / {size(total)}"
    top, unit = _scaled(total)
    scale = 1024**unit
    part = used / scale
    used_text = _fixed(part, 0 if unit == 0 or part >= 100 else 1)
    total_text = _fixed(top, 0 if unit == 0 or top >= 100 else 1)
    if total_text.endswith(".0"):
        total_text = total_text[:-2]
    return f"{used_text}/{total_text} {UNITS['bytes'][unit]}"


def percent(value: float | None) -> str:
    """ "47 %", or "—" when unknown."""
    return "—" if value is None else fill(UNITS["percent"], value=_fixed(value, 0))


def plural(noun: str) -> str:
    return WORDS["plurals"].get(noun, noun + "s")


def count(n: int, noun: str) -> str:
    """ "1 file", "2 files", "1 conflict copy", "3 conflict copies", "1,204 wheels"."""
    return f"{n:,} {noun if n == 1 else plural(noun)}"


def span(seconds: float) -> str:
    """How long ago, without "ago": "12 s", "4 min", "3 h", "2 d"."""
    s = max(0, round(seconds))
    if s < 90:
        return f"{s} {UNITS['second']}"
    if s < 5400:
        return f"{round(s / 60)} {UNITS['minute']}"
    if s < 36 * 3600:
        return f"{round(s / 3600)} {UNITS['hour']}"
    return f"{round(s / 86400)} {UNITS['day']}"


def age(when: float, now: float | None = None) -> str:
    """An epoch time as an age: "12 s ago", "4 min ago"."""
    return fill(UNITS["ago"], age=span((time.time() if now is None else now) - when))


def duration(seconds: float) -> str:
    """A length of time: "40 s", "12 min", "2 h 5 min"."""
    s = max(0, round(seconds))
    if s < 90:
        return f"{s} {UNITS['second']}"
    hours, minutes = s // 3600, round((s % 3600) / 60)
    return (
        f"{hours} {UNITS['hour']} {minutes} {UNITS['minute']}"
        if hours
        else f"{minutes} {UNITS['minute']}"
    )


def deadline_source(source: str | None) -> str:
    """What ends the runtime, in words: "runtime limit", "GCP preemption"."""
    if not source:
        return ""
    return str(WORDS["deadline_sources"].get(source, source))


def time_left(seconds: float) -> str:
    """ "2 h 05 left", "24 min left", "40 s left"."""
    s = max(0, int(seconds))
    hours, minutes = s // 3600, (s % 3600) // 60
    if hours:
        text = f"{hours} {UNITS['hour']} {minutes:02d}"
    elif minutes:
        text = f"{minutes} {UNITS['minute']}"
    else:
        text = f"{s} {UNITS['second']}"
    return fill(WORDS["runtime"]["left"], time=text)


def sync_word(status: dict[str, Any], now: float | None = None) -> tuple[str, str]:
    """The sync in a few words, and its level (ok, pending, warning, error, none): the words of
    the status bar and the panel's header."""
    sync = WORDS["sync"]
    state = status.get("state")
    if state == "error":
        return (sync["store_down"] if status.get("store_down") else sync["error"]), "error"
    if state in ("read-only", "taking-over"):
        return sync[state], "warning"
    if status.get("lease_error"):
        # Still writing while the lease lasts, but its renewal fails: not "synced" beside it.
        return sync["lease_unrenewed"], "warning"
    if status.get("pending_files"):
        return fill(sync["pending"], count=status["pending_files"]), "pending"
    last = status.get("last_sync")
    if status.get("store_same_disk") and last:
        return sync["local_only"], "warning"
    if last and not status.get("progress"):
        return fill(sync["synced"], age=age(last, now)), "ok"
    if status.get("progress") or state == "syncing":
        return sync["syncing"], "none"
    if state in sync:
        return sync[state], "none"
    return sync["never"] if state == "idle" else str(state or ""), "none"


def _names(items: list[str]) -> str:
    return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")


def persist_summary(
    state: str, errors: list[str], result: dict[str, Any], same_disk: bool, synced: bool
) -> dict[str, Any]:
    """A finished persist in one coherent result, the words the panel, `%gpuws persist` and
    `jupyter gpuws persist` all show: a headline ("All saved" only when the files are somewhere
    that outlives this machine), what was done, what failed and why, what to look at.

    `synced`: the upload ran to its end. `text` is the whole line; `short` leaves out what the
    store holds and the advice for a store on this disk (the panel shows both beside it);
    `level` is ok, warning or error."""
    words = WORDS["persist"]
    done: list[str] = []
    documents = result.get("documents") or {}
    if documents.get("saved"):
        done.append(
            fill(words["documents_saved"], documents=count(len(documents["saved"]), "document"))
        )
    checkpoints = [c for c in result.get("checkpoints") or [] if c.get("state") == "done"]
    if checkpoints:
        done.append(
            fill(words["checkpoints_taken"], checkpoints=count(len(checkpoints), "checkpoint"))
        )
    if result.get("uploaded"):
        # What reached the store since the persist began, the background passes' share included.
        done.append(
            fill(
                words["uploaded"],
                files=count(result["uploaded"], "file"),
                size=size(result.get("bytes_uploaded") or 0),
            )
        )
    elif synced and "uploaded" in result:
        # Nothing needed sending: "0 files" would read as if nothing had reached the store.
        done.append(words["up_to_date"])
    if result.get("found_in_store"):
        done.append(fill(words["found_in_store"], files=count(result["found_in_store"], "file")))
    left_behind = [str(p).split(":")[0] for p in result.get("left_behind") or []]
    if left_behind:
        done.append(
            f"{count(len(left_behind), 'file')} left behind, too large for the time left "
            f"({_names(left_behind)})"
        )
    problems = [str(p).split(":")[0] for p in result.get("problems") or []]
    if problems:
        done.append(f"{count(len(problems), 'file')} cannot be synced ({_names(problems)})")
    stored_part = ""
    stored = result.get("stored")
    if stored:
        stored_part = fill(
            words["in_store"],
            files=count(stored.get("files", 0), "file"),
            size=size(stored.get("bytes")),
        )
        runs = [f"{c['run']} at step {c['step']}" for c in stored.get("checkpoints") or []]
        if runs:
            stored_part += ", " + ", ".join(runs)
    warnings = list(result.get("warnings") or [])
    unanswered = list(documents.get("unanswered") or [])
    if unanswered:
        warnings.append(
            fill(
                words["unanswered"],
                pages=count(len(unanswered), "browser page"),
                names=_names(unanswered),
            )
        )
    advice = words["local_advice"] if same_disk and synced else None
    if state == "cancelled":
        headline, level = words["cancelled"], "warning"
    elif state == "done":
        headline = (
            words["this_disk"]
            if same_disk
            else words["persisted"]
            if unanswered
            else words["all_saved"]
        )
        level = "warning" if same_disk or warnings else "ok"
    elif synced:
        headline, level = words["files_this_disk" if same_disk else "files_saved"], "error"
    else:
        headline, level = words["failed"], "error"

    def line(whole: bool) -> str:
        what = ", ".join(done + ([stored_part] if whole and stored_part else []))
        reasons = "; ".join(errors) if state != "cancelled" else ""
        if what:
            sentences = [f"{headline}: {what}"] + (
                [fill(words["failed_list"], reasons=reasons)] if reasons else []
            )
        else:  # nothing done: the reasons are the whole story
            sentences = [f"{headline}: {reasons}" if reasons else headline]
        sentences += warnings
        if advice and whole:
            sentences.append(advice)
        return " ".join(s if s.endswith((".", "…")) else s + "." for s in sentences)

    return {
        "level": level,
        "headline": headline,
        "saved_elsewhere": synced and not same_disk,
        "done": done,
        "stored": stored_part or None,
        "errors": list(errors),
        "warnings": warnings,
        "advice": advice,
        "text": line(True),
        "short": line(False),
    }
