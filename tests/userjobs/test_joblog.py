"""A job's log (userjobs/joblog.py): bounded and rotated however fast the job prints, its tail the
newest lines, whatever bytes the job wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpu_ws.userjobs.joblog import LINE_LIMIT, JobLog
from tests.waiting import until


def _job(code: str, **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs
    )  # type: ignore[call-overload, no-any-return]


def _run(log: JobLog, code: str) -> int:
    job = _job(code)
    assert job.stdout is not None
    log.follow(job.stdout)
    returncode = job.wait(timeout=120)
    log.close()
    return returncode


FLOOD = """
import sys, time
out = sys.stdout
end = time.monotonic() + 3
n = 0
while time.monotonic() < end:
    out.write("".join(f"line {i} of a job that prints as fast as it can\\n" for i in range(n, n + 1000)))
    n += 1000
out.write(f"printed {n} lines\\n")
"""


def test_a_job_printing_as_fast_as_it_can_keeps_the_log_within_its_files(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log", max_bytes=256 * 2**10, keep=2)
    assert _run(log, FLOOD) == 0
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["job.log", "job.log.1", "job.log.2"]  # the oldest dropped
    assert all(f.stat().st_size <= 256 * 2**10 for f in files)
    assert sum(f.stat().st_size for f in files) <= 256 * 2**10 * 3


def test_the_tail_is_the_newest_lines_of_a_job_that_printed_without_pause(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log", max_bytes=256 * 2**10, keep=2)
    _run(log, FLOOD)
    tail = log.tail(5)
    printed = int(tail[-1].split()[1])
    assert printed >= 1000  # the pipe was drained to its end: the job's last line is there
    assert tail[:-1] == [
        f"line {i} of a job that prints as fast as it can" for i in range(printed - 4, printed)
    ]


def test_the_tail_reaches_across_a_rotation_into_the_older_file(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log", max_bytes=100, keep=2)
    _run(log, "for i in range(25): print(f'line {i:02d}')")  # 8 bytes a line: 12 to a file
    assert (
        tmp_path / "job.log"
    ).read_text() == "line 24\n"  # the newest file holds what came after the last rotation
    assert log.tail(6) == [f"line {i:02d}" for i in range(19, 25)]
    assert log.tail(100) == [f"line {i:02d}" for i in range(25)]


def test_bytes_that_are_not_utf8_come_back_replaced(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    _run(log, "import sys; sys.stdout.buffer.write(b'loss \\xff\\xfe 0.5\\nstep 2 \\xc3\\n')")
    assert log.tail(2) == ["loss \ufffd\ufffd 0.5", "step 2 \ufffd"]


def test_a_line_without_its_newline_is_in_the_tail_while_the_job_runs(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    job = _job(
        "import sys; print('epoch 1'); sys.stdout.write('step 40/100'); sys.stdout.flush(); sys.stdin.read()",
        stdin=subprocess.PIPE,
    )
    assert job.stdout is not None and job.stdin is not None
    log.follow(job.stdout)
    try:
        until(lambda: log.tail(2) == ["epoch 1", "step 40/100"])
    finally:
        job.stdin.close()
        job.wait(timeout=30)
        log.close()


def test_a_very_long_line_is_cut_with_a_marker_and_the_next_line_is_whole(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    _run(log, "print('x' * 300_000); print('after')")
    cut, after = log.tail(2)
    assert cut.startswith("x" * LINE_LIMIT) and cut.endswith("line cut at 64 KiB]")
    assert after == "after"
    assert (tmp_path / "job.log").stat().st_size < LINE_LIMIT + 100


def test_a_second_attempt_appends_to_the_first_ones_log(tmp_path: Path) -> None:
    _run(JobLog(tmp_path / "job.log"), "print('attempt 1')")
    log = JobLog(tmp_path / "job.log")
    _run(log, "print('attempt 2')")
    assert log.tail() == ["attempt 1", "attempt 2"]


def test_a_note_is_a_line_of_its_own_after_a_line_the_last_attempt_left_open(
    tmp_path: Path,
) -> None:
    _run(JobLog(tmp_path / "job.log"), "print('killed mid-line', end='', flush=True)")
    log = JobLog(tmp_path / "job.log")
    log.note("gpuws: attempt 2, on machine-b, 2026-12-07 12:00:00 UTC")
    _run(log, "print('attempt 2')")
    assert log.tail() == [
        "killed mid-line",
        "\u2500\u2500 gpuws: attempt 2, on machine-b, 2026-12-07 12:00:00 UTC \u2500\u2500",
        "attempt 2",
    ]


def test_the_tail_of_a_log_nothing_was_written_to_is_empty(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    _run(log, "pass")
    assert log.tail() == []


def test_stdout_and_stderr_followed_apart_both_reach_the_log_in_whole_lines(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    job = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-c",
            (  # -u: one write a line, as a job that flushes
                "import sys\n"
                "for i in range(20000):\n"
                "    sys.stdout.write(f'out {i}\\n'); sys.stderr.write(f'err {i}\\n')\n"
                "print('out end'); print('err end', file=sys.stderr)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert job.stdout is not None and job.stderr is not None
    log.follow(job.stdout)
    log.follow(job.stderr)
    assert job.wait(timeout=120) == 0
    log.close()
    lines = log.tail(100_000)
    expected = {f"{stream} {i}" for stream in ("out", "err") for i in [*range(20000), "end"]}
    assert (
        len(lines) == len(expected) and set(lines) == expected
    )  # none lost, none mixed with another


def test_a_line_left_open_on_stdout_is_not_mixed_with_a_line_on_stderr(tmp_path: Path) -> None:
    tail = in_lockstep(
        tmp_path,
        "sys.stdout.write('epoch 1: 50%'); sys.stdin.readline()\n"
        "sys.stderr.write('warning: slow\\n'); sys.stdin.readline()\n"
        "sys.stdout.write(' 100%\\n')\n",
        [["epoch 1: 50%"], ["epoch 1: 50%", "warning: slow"]],
    )
    assert tail == ["epoch 1: 50%", "warning: slow", " 100%"]


def test_the_newline_that_ends_a_line_already_ended_for_the_other_stream_adds_no_empty_line(
    tmp_path: Path,
) -> None:
    """print() writes its text and its newline apart: stderr may write between the two."""
    tail = in_lockstep(
        tmp_path,
        "sys.stdout.write('out end'); sys.stdin.readline()\n"
        "sys.stderr.write('err end\\n'); sys.stdin.readline()\n"
        "sys.stdout.write('\\n'); sys.stdout.write('last\\n')\n",
        [["out end"], ["out end", "err end"]],
    )
    assert tail == ["out end", "err end", "last"]


def test_a_named_pipe_or_a_link_at_a_log_files_name_reads_as_no_more_log_at_once(
    tmp_path: Path,
) -> None:
    log = JobLog(tmp_path / "log", max_bytes=40, keep=2)
    _run(log, "print('a' * 30); print('b' * 30)")  # rotated once: log.1 holds the first line
    (tmp_path / "log").unlink()
    os.mkfifo(tmp_path / "log")  # a reader opening it without O_NONBLOCK would wait for a writer
    assert log.tail(5) == []
    (tmp_path / "log").unlink()
    (tmp_path / "log").symlink_to(tmp_path / "log.1")
    assert log.tail(5) == []


def in_lockstep(tmp_path: Path, script: str, seen: list[list[str]]) -> list[str]:
    """The log of `script` (stdout and stderr, each followed), let on one step at a time: before
    each step the log must read as `seen` says. Its tail once the script has ended."""
    log = JobLog(tmp_path / "job.log")
    job = subprocess.Popen(
        [sys.executable, "-u", "-c", "import sys\n" + script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert job.stdin is not None and job.stdout is not None and job.stderr is not None
    log.follow(job.stdout)
    log.follow(job.stderr)
    try:
        for lines in seen:
            until(lambda lines=lines: log.tail() == lines)
            job.stdin.write(b"\n")
            job.stdin.flush()
        assert job.wait(timeout=60) == 0
    finally:
        job.kill()
        log.close()
    return log.tail()


def _printed(log: JobLog, first: int, last: int) -> None:
    """Lines `first`..`last` written into `log` as a job's output would be (8 bytes each)."""
    for i in range(first, last + 1):
        log._write(f"line {i:02d}\n".encode(), "stdout")


def test_what_was_written_since_an_answer_follows_on_from_it_across_rotations(
    tmp_path: Path,
) -> None:
    log = JobLog(tmp_path / "job.log", max_bytes=100, keep=2)  # 12 lines to a file
    _printed(log, 0, 4)
    first = log.tail_text(3)
    assert (first.lines, first.open) == (["line 02", "line 03", "line 04"], False)
    _printed(log, 5, 30)  # two rotations: the answer's file is now job.log.2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.log", "job.log.1", "job.log.2"]
    since = log.since(first.next)
    assert since.lines == [f"line {i:02d}" for i in range(5, 31)] and not since.open
    assert log.since(since.next).lines == []
    _printed(log, 31, 31)
    assert log.since(since.next).lines == ["line 31"]


def test_a_line_not_ended_yet_is_open_and_the_next_answer_continues_it(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    log._write(b"epoch 1: 50%", "stdout")
    first = log.tail_text(10)
    assert (first.lines, first.open) == (["epoch 1: 50%"], True)
    log._write(b" 100%\nepoch 2\n", "stdout")
    since = log.since(first.next)
    assert (since.lines, since.open) == ([" 100%", "epoch 2"], False)


def test_a_large_backlog_comes_in_pieces_cut_at_line_ends(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    _printed(log, 0, 99)
    got: list[str] = []
    cursor = ""
    while piece := log.since(cursor, max_bytes=60):  # 7 lines and a half per answer
        assert not piece.open
        got += piece.lines
        cursor = piece.next
        if not piece.lines:
            break
    assert got == [f"line {i:02d}" for i in range(100)]


def test_output_rotated_away_before_it_was_asked_for_is_said(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log", max_bytes=100, keep=1)
    _printed(log, 0, 0)
    cursor = log.tail_text(1).next
    _printed(log, 1, 40)  # the answer's file rotated out of the two kept
    since = log.since(cursor)
    assert since.lines[0] == "[\u2026 output rotated away before it was read]"
    assert since.lines[1:] == [f"line {i:02d}" for i in range(24, 41)]  # the oldest kept on


def test_a_place_in_the_log_that_is_none_is_refused(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job.log")
    _printed(log, 0, 0)
    with pytest.raises(ValueError, match="not a place in a job's log"):
        log.since("12")
