"""What a job's record vouches for (userjobs/manifest.py): the code files of the whole work
directory, whatever the sync mirrors, and every file the command names; and a running job's
record written again so that relaunch_window counts from its runtime's end."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from jupyter_gpu_ws.userjobs import manifest
from jupyter_gpu_ws.userjobs.manager import JobManager, JobSettings
from tests.waiting import until


def code_of(root: Path, command: list[str]) -> dict[str, str]:
    taken = manifest.take(root, manifest.walk(root), manifest.named_files(command, "", root))
    assert taken.files is not None
    return taken.files


def test_compiled_modules_build_files_and_option_values_are_code(tmp_path: Path) -> None:
    for name in ("x.py", "json.pyc", "Makefile", "rules.mk", "cfg1.yaml", "cfg2.yaml", "d.csv"):
        (tmp_path / name).write_text(name)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.cpython-311.pyc").write_text("never loaded: not listed")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("")
    (tmp_path / ".venv" / "site.py").write_text("an environment: never restored")
    command = ["python", "x.py", "--a=cfg1.yaml", "--b", "cfg2.yaml"]
    assert sorted(code_of(tmp_path, command)) == [
        "Makefile",
        "cfg1.yaml",
        "cfg2.yaml",
        "json.pyc",
        "rules.mk",
        "x.py",
    ]


def test_a_change_to_any_of_them_is_named(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("a")
    before = manifest.take(tmp_path, manifest.walk(tmp_path), frozenset())
    (tmp_path / "x.py").write_text("b")
    (tmp_path / "json.pyc").write_bytes(b"\x00")
    after = manifest.take(tmp_path, manifest.walk(tmp_path), frozenset())
    assert manifest.changes(before, after) == ([("json.pyc", "added"), ("x.py", "changed")], 0)


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobManager:
    monkeypatch.setenv("GPUWS_JOB_KEY", "a-test-key-that-is-long-enough-0123456789")
    work = tmp_path / "work"
    work.mkdir()
    return JobManager(
        JobSettings(
            workdir=work,
            workspace="ws",
            host="here",
            runtime_id="r-1",
            state_dir=tmp_path / "state",
            relaunch_window=4.0,
            stop_grace=1.0,
        )
    )


def test_a_running_jobs_record_is_written_again_so_the_window_counts_from_the_end(
    manager: JobManager,
) -> None:
    job = manager.submit([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        until(lambda: manager.running(), 30, "the job running")
        first, seq = job.updated, job.seq
        assert manager.renew() == []  # written a moment ago
        job.updated = time.time() - 2  # its last write two seconds ago: past a quarter of 4 s
        assert manager.renew() == [job.id]
        assert job.updated > first and job.seq == seq + 1
    finally:
        manager.interrupt_all(grace=1.0)
