"""What a job waiting for the user's approval shows: the API's `approval` (what restarting it
runs, where, why it waits, its changed files), and the same in `jupyter gpuws jobs`, `%gpuws
jobs` and `%gpuws status`, with every text from the store escaped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.statusreport import as_text, jobs_parts
from jupyter_gpu_ws.userjobs.commands import listing_lines
from jupyter_gpu_ws.userjobs.manager import Job, JobManager, JobSettings
from jupyter_gpu_ws.userjobs.record import JobRecord

# A name as whoever writes the store may put it there: a terminal's escape sequence (red, then
# clear the screen) and a right-to-left override that shows "gnp.py" as "yp.png".
HOSTILE = "\x1b[31mtrain\x1b[2J\u202egnp.py"
HOSTILE_SHOWN = "\\x1b[31mtrain\\x1b[2J\\u202egnp.py"


def foreign(**changes: Any) -> JobRecord:
    record = JobRecord(
        id="j-00000000000a",
        name="planted",
        kind="command",
        command=["python", "train.py", "--lr", "0.1"],
        workspace="ws",
        cwd="sub",
        state="interrupted",
        created=time.time(),
        updated=time.time(),
    )
    for name, value in changes.items():
        setattr(record, name, value)
    return record


def manager(tmp_path: Path) -> JobManager:
    return JobManager(JobSettings(workdir=tmp_path, workspace="ws", host="here", runtime_id="r-1"))


def test_a_job_that_needs_approval_describes_what_approving_it_runs(tmp_path: Path) -> None:
    job = Job(
        foreign(),
        untrusted="not signed",
        changed=[("sub/train.py", "changed"), ("sub/extra.py", "added"), ("sub/old.py", "missing")],
        changed_more=4,
    )
    described = manager(tmp_path).describe(job)
    assert described["needs_approval"] is True
    assert described["approval"] == {
        "reason": "not signed",
        "command": ["python", "train.py", "--lr", "0.1"],
        "cwd": "sub",
        "notebook": None,
        "changed": [
            {"path": "sub/train.py", "change": "changed"},
            {"path": "sub/extra.py", "change": "added"},
            {"path": "sub/old.py", "change": "missing"},
        ],
        "changed_more": 4,
    }


def test_a_job_that_needs_no_approval_has_none(tmp_path: Path) -> None:
    described = manager(tmp_path).describe(Job(foreign()))
    assert described["needs_approval"] is False and described["approval"] is None


def test_both_are_a_user_job_as_openapi_yaml_describes_it(tmp_path: Path) -> None:
    from jupyter_gpu_ws import apischema

    user_job = apischema._validator("#/components/schemas/UserJob")  # the server's own reading
    waiting = Job(
        foreign(), untrusted="not signed", changed=[("sub/a.py", "added")], changed_more=1
    )
    for job in (Job(foreign()), waiting):
        user_job.validate(manager(tmp_path).describe(job))
    moved = Job(foreign(), untrusted="not signed", changed=[("sub/a.py", "moved")])
    assert not user_job.is_valid(manager(tmp_path).describe(moved))  # the schema does say


def listing(**approval: Any) -> dict[str, Any]:
    """GET /gpuws/api/jobs with one job that waits for approval, its texts as the store had them."""
    return {
        "jobs": [
            {
                "id": "j-00000000000a",
                "name": HOSTILE,
                "state": "interrupted",
                "step": None,
                "reason": "its runtime ended without stopping it\x9b",
                "relaunch": "waits for your approval (restart it): started in another workspace (\u2066x)",
                "needs_approval": True,
                "approval": {
                    "reason": "started in another workspace (\u2066x)",
                    "command": ["python", "tr\x1bain.py", "--note", "a b"],
                    "cwd": "sub\u202e",
                    "notebook": None,
                    "changed": [],
                    "changed_more": 0,
                    **approval,
                },
            }
        ],
        "relaunch": {"enabled": True, "pending": []},
        "error": None,
    }


def raw_controls(text: str) -> set[str]:
    """The control characters and direction overrides left in `text` (a newline between lines is
    the listing's own)."""
    return {
        ch
        for ch in text
        if (ord(ch) < 0x20 and ch != "\n")
        or 0x7F <= ord(ch) <= 0x9F
        or ch in "\u061c\u200e\u200f\u2028\u2029"
        or 0x202A <= ord(ch) <= 0x202E
        or 0x2066 <= ord(ch) <= 0x2069
    }


def test_the_terminals_listing_escapes_the_stores_texts_and_shows_what_approving_runs() -> None:
    lines = listing_lines(listing())
    assert lines[0].startswith(f"{HOSTILE_SHOWN} (j-00000000000a): interrupted · ")
    assert "without stopping it\\x9b" in lines[0] and "workspace (\\u2066x)" in lines[0]
    assert lines[1:] == ["  runs: python 'tr\\x1bain.py' --note 'a b'", "  in: sub\\u202e"]
    assert raw_controls("\n".join(lines)) == set()


def test_the_listing_names_the_changed_files_and_how_many_more() -> None:
    changed = [
        {"path": "sub/train.py", "change": "changed"},
        {"path": "sub/new\x1b[1m.py", "change": "added"},
    ]
    lines = listing_lines(listing(changed=changed, changed_more=1203, notebook="nb.ipynb"))
    assert lines[3:] == [
        "  notebook: nb.ipynb",
        "  changed since it was signed:",
        "    sub/train.py (changed)",
        "    sub/new\\x1b[1m.py (added)",
        "    and 1,203 more",
    ]


def test_a_record_in_the_work_directory_shows_it_so() -> None:
    assert listing_lines(listing(cwd=""))[2] == "  in: (the work directory)"


def test_the_magics_job_list_is_the_same_escaped_listing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_gpu_ws import magics

    asked = []

    def call(path: str, *args: Any) -> Any:
        asked.append(path)
        return listing()

    monkeypatch.setattr(magics, "call", call)
    magic: Any = magics.GpuwsMagics(shell=None)  # Any: IPython's decorator types it oddly
    magic.gpuws("jobs")
    printed = capsys.readouterr().out
    assert asked == ["gpuws/api/jobs"]
    assert printed.splitlines() == listing_lines(listing())
    assert HOSTILE_SHOWN in printed and "  runs: python 'tr\\x1bain.py' --note 'a b'" in printed
    assert raw_controls(printed) == set()


def test_the_magics_status_table_escapes_a_jobs_name_and_reasons() -> None:
    text = as_text(jobs_parts(listing()))
    assert HOSTILE_SHOWN in text and "\\u2066x" in text
    assert raw_controls(text) == set()


def test_the_listing_names_each_record_that_cannot_be_used_escaped() -> None:
    data = listing()
    data["bad_records"] = [
        {"file": "j-00000000dee9.json", "reason": "not JSON: nested too deeply"},
        {"file": "\x1b[2Jx.json", "reason": "larger than 4 MiB"},
    ]
    lines = listing_lines(data)
    assert lines[-2:] == [
        "Not used: the job record j-00000000dee9.json: not JSON: nested too deeply",
        "Not used: the job record \\x1b[2Jx.json: larger than 4 MiB",
    ]
