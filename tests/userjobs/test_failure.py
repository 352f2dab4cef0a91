"""Why an attempt ended (userjobs/failure.py): real processes that end each way, their output read
through a job log as the server reads it, each classified in the user's words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpu_ws.userjobs.failure import CANNOT_CHANGE, Outcome, classify, oom_kills
from jupyter_gpu_ws.userjobs.joblog import JobLog


def _attempt(tmp_path: Path, command: list[str], lines: int = 20) -> tuple[int, list[str]]:
    """Run `command` in tmp_path as the server runs a job: its output through a JobLog."""
    log = JobLog(tmp_path / "logs" / "job.log")
    job = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert job.stdout is not None
    log.follow(job.stdout)
    returncode = job.wait(timeout=120)
    log.close()
    return returncode, log.tail(lines)


def _script(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    (tmp_path / "train.py").write_text(text)
    return _attempt(tmp_path, [sys.executable, "train.py"])


def test_a_script_that_exits_0_finished(tmp_path: Path) -> None:
    assert classify(*_script(tmp_path, "print('done')\n"), step=100) == Outcome(
        "finished", None, False
    )


def test_a_syntax_error_names_file_and_line_and_is_not_retried(tmp_path: Path) -> None:
    outcome = classify(*_script(tmp_path, "import os\n\nprint('start')\nx = = 1\n"))
    assert outcome == Outcome(
        "failed", f"SyntaxError in train.py line 4: invalid syntax — {CANNOT_CHANGE}", False
    )


def test_an_indentation_error_is_not_retried(tmp_path: Path) -> None:
    outcome = classify(*_script(tmp_path, "def f():\nreturn 1\n"))
    assert outcome.retryable is False
    assert outcome.reason is not None and outcome.reason.startswith(
        "IndentationError in train.py line 2: "
    )


def test_a_missing_module_names_the_import_and_is_not_retried(tmp_path: Path) -> None:
    outcome = classify(*_script(tmp_path, "import json\nimport no_such_module_for_gpuws\n"))
    assert outcome == Outcome(
        "failed",
        f"ModuleNotFoundError in train.py line 2: No module named 'no_such_module_for_gpuws' — {CANNOT_CHANGE}",
        False,
    )


def test_a_missing_script_is_not_retried(tmp_path: Path) -> None:
    outcome = classify(*_attempt(tmp_path, [sys.executable, "tarin.py"]))
    assert outcome == Outcome(
        "failed", f"tarin.py cannot be opened: it does not exist — {CANNOT_CHANGE}", False
    )


def test_a_missing_data_file_is_not_retried(tmp_path: Path) -> None:
    outcome = classify(*_script(tmp_path, "print('loading')\nopen('data/train.csv')\n"))
    assert outcome.retryable is False
    assert outcome.reason == (
        f"FileNotFoundError in train.py line 2: [Errno 2] No such file or directory: "
        f"'data/train.csv' — {CANNOT_CHANGE}"
    )


def test_a_command_that_does_not_exist_is_not_retried(tmp_path: Path) -> None:
    returncode, tail = _attempt(tmp_path, ["sh", "-c", "no_such_command_for_gpuws --epochs 3"])
    outcome = classify(returncode, tail)
    assert returncode == 127 and outcome.retryable is False
    assert outcome.reason is not None and "no_such_command_for_gpuws" in outcome.reason
    assert outcome.reason.endswith(CANNOT_CHANGE)


def test_a_command_that_is_not_executable_is_not_retried(tmp_path: Path) -> None:
    (tmp_path / "train.sh").write_text("echo hi\n")
    returncode, tail = _attempt(tmp_path, ["sh", "-c", "./train.sh"])
    assert returncode == 126
    assert classify(returncode, tail) == Outcome(
        "failed",
        f"the command cannot be run: it is not executable (exit code 126) — {CANNOT_CHANGE}",
        False,
    )


def test_cuda_out_of_memory_is_retried_and_says_at_which_step(tmp_path: Path) -> None:
    outcome = classify(
        *_script(
            tmp_path,
            (
                "import torch\nprint('step 4120')\n"
                "raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
            ),
        ),
        step=4120,
    )
    assert outcome == Outcome("failed", "CUDA out of memory at step 4,120", True)


TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", "1"]


def test_a_syntax_error_under_torchrun_is_the_ranks_not_torchruns(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import os\nprint('rank', os.environ['RANK'])\nx = = 1\n")
    outcome = classify(*_attempt(tmp_path, [*TORCHRUN, "train.py"], lines=60))
    assert outcome == Outcome(
        "failed", f"SyntaxError in train.py line 3: invalid syntax — {CANNOT_CHANGE}", False
    )


def test_a_rank_killed_by_a_signal_under_torchrun_says_which(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    returncode, tail = _attempt(tmp_path, [*TORCHRUN, "train.py"], lines=60)
    assert returncode == 1
    assert classify(returncode, tail) == Outcome("failed", "killed by SIGSEGV", True)


def test_a_process_killed_by_a_signal_says_which(tmp_path: Path) -> None:
    outcome = classify(
        *_script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    )
    assert outcome == Outcome("failed", "killed by SIGSEGV", True)


def test_a_signal_through_a_shell_says_which(tmp_path: Path) -> None:
    returncode, tail = _attempt(
        tmp_path, ["sh", "-c", f"{sys.executable} -c 'import os; os.kill(os.getpid(), 9)'"]
    )
    assert returncode == 137
    assert classify(returncode, tail) == Outcome("failed", "killed by SIGKILL", True)


def test_a_kill_9_is_the_oom_killer_when_the_cgroups_count_grew(tmp_path: Path) -> None:
    returncode, tail = _script(
        tmp_path, "import os\nprint('allocating')\nos.kill(os.getpid(), 9)\n"
    )
    assert classify(returncode, tail, oom_killed=True) == Outcome(
        "failed", "killed by the kernel's OOM killer", True
    )
    assert classify(returncode, tail, oom_killed=False) == Outcome(
        "failed", "killed by SIGKILL", True
    )


def test_any_other_exit_code_is_retried_and_names_it(tmp_path: Path) -> None:
    assert classify(*_script(tmp_path, "import sys\nprint('bye')\nsys.exit(3)\n")) == Outcome(
        "failed", "exit code 3", True
    )


def test_an_exception_is_retried_and_named_at_the_users_own_line(tmp_path: Path) -> None:
    outcome = classify(*_script(tmp_path, "import json\n\njson.loads('{')\n"))
    assert outcome.retryable is True
    assert outcome.reason == (
        "JSONDecodeError in train.py line 3: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1) (exit code 1)"
    )


def test_an_interrupted_attempt_is_interrupted_at_its_step(tmp_path: Path) -> None:
    returncode, tail = _script(
        tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"
    )
    assert classify(returncode, tail, step=4120, interrupted=True) == Outcome(
        "interrupted", "interrupted at step 4,120", True
    )


def test_a_loss_that_was_not_finite_is_retried_and_says_at_which_step(tmp_path: Path) -> None:
    returncode, tail = _script(
        tmp_path, "import os, signal\nprint('loss nan')\nos.kill(os.getpid(), signal.SIGTERM)\n"
    )
    assert classify(returncode, tail, step=12500, nan_loss=True) == Outcome(
        "failed", "the loss was not finite at step 12,500", True
    )


def test_a_line_that_says_retrying_cannot_change_it_is_taken_as_it_is() -> None:
    line = f"nb.ipynb is not valid JSON — {CANNOT_CHANGE}"
    assert classify(2, ["loading", line]) == Outcome("failed", line, False)


def test_the_oom_kill_count_is_read_from_the_processs_own_cgroup_v2(tmp_path: Path) -> None:
    (tmp_path / "user.slice" / "job").mkdir(parents=True)
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
    (tmp_path / "user.slice" / "job" / "memory.events").write_text(
        "low 0\nhigh 0\nmax 2\noom 3\noom_kill 3\noom_group_kill 0\n"
    )
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("0::/user.slice/job\n")
    assert oom_kills(tmp_path, cgroup) == 3


def test_the_oom_kill_count_is_read_from_cgroup_v1(tmp_path: Path) -> None:
    (tmp_path / "memory" / "docker" / "abc").mkdir(parents=True)
    (tmp_path / "memory" / "docker" / "abc" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"
    )
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    assert oom_kills(tmp_path, cgroup) == 7


def test_the_oom_kill_count_is_unknown_where_nothing_says_it(tmp_path: Path) -> None:
    (tmp_path / "cgroup").write_text("0::/\n")
    (tmp_path / "memory.events").write_text("low 0\n")  # a kernel before oom_kill was counted
    assert oom_kills(tmp_path, tmp_path / "cgroup") is None
    assert oom_kills(tmp_path / "absent", tmp_path / "absent" / "cgroup") is None


def test_a_real_kill_9_does_not_grow_the_oom_kill_count(tmp_path: Path) -> None:
    before = oom_kills()
    if before is None:
        pytest.skip("this machine's cgroup does not count OOM kills")
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(job.pid, 9)
    assert job.wait(timeout=30) == -9
    assert oom_kills() == before


def test_a_notebook_job_whose_cell_cannot_import_is_not_retried(tmp_path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("print('loading')"),
        nbformat.v4.new_code_cell("import no_such_module_for_gpuws"),
    ]
    nbformat.write(nb, tmp_path / "train.ipynb")
    outcome = classify(
        *_attempt(
            tmp_path, [sys.executable, "-m", "jupyter_gpu_ws.userjobs.notebook", "train.ipynb"]
        )
    )
    assert outcome == Outcome(
        "failed",
        f"ModuleNotFoundError: No module named 'no_such_module_for_gpuws' — {CANNOT_CHANGE}",
        False,
    )


def test_a_notebook_job_given_no_notebook_is_not_retried(tmp_path: Path) -> None:
    (tmp_path / "train.ipynb").write_text("not json")
    returncode, tail = _attempt(
        tmp_path, [sys.executable, "-m", "jupyter_gpu_ws.userjobs.notebook", "train.ipynb"]
    )
    assert returncode == 2
    outcome = classify(returncode, tail)
    assert outcome.retryable is False and outcome.reason is not None
    assert outcome.reason.startswith("train.ipynb is not valid JSON")
