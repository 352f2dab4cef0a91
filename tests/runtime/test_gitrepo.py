"""The Git tier of a persist, in real repositories under tmp_path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import git
import pytest

from jupyter_gpu_ws.jobs import Job, Step
from jupyter_gpu_ws.runtime.gitrepo import GitSettings, GitVersioning, git_step, redact

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.fixture(autouse=True)
def no_user_git_config(tmp_path_factory, monkeypatch):
    """Tests see neither the machine's nor the user's git configuration."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ):
        monkeypatch.delenv(name, raising=False)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def _write(path: Path, text: str = "x", size: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if size is None:
        path.write_text(text)
    else:
        path.write_bytes(b"0" * size)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    return work


def _versioning(work: Path, **settings) -> GitVersioning:
    return GitVersioning(GitSettings(workdir=str(work), **settings), clock=lambda: T0)


def _tracked(work: Path) -> set[str]:
    return set(_git(work, "ls-files").split())


def test_persist_commits_code_notebooks_and_configuration(work):
    _write(work / "train.py", "print(1)")
    _write(work / "analysis.ipynb", "{}")
    _write(work / "conf" / "run.yaml", "lr: 1")
    _write(work / "requirements.txt", "torch")
    result = _versioning(work).commit()
    assert result.error is None and result.sha is not None
    assert _tracked(work) == {"train.py", "analysis.ipynb", "conf/run.yaml", "requirements.txt"}
    assert _git(work, "rev-parse", "HEAD").strip() == result.sha


def test_commit_message_says_when_and_how_much(work):
    for name in ("a.py", "b.py", "c.md"):
        _write(work / name)
    result = _versioning(work).commit()
    subject = _git(work, "log", "-1", "--format=%s")
    assert subject.strip() == "gpuws: persist 2027-01-15 08:00 UTC — 3 files changed"
    assert result.message is not None and "a.py" in result.message


def test_data_checkpoints_and_weights_are_never_committed(work):
    _write(work / "train.py")
    _write(
        work
        / ".gpuws"
        / "checkpoints"
        / "run"
        / "ckpt-000000001-20270115T080000Z"
        / "manifest.json",
        "{}",
    )
    _write(work / "data" / "labels.json", "[]")
    _write(work / "model.safetensors")
    _write(work / "weights.pt")
    _write(work / "shard.bin")
    _write(work / "last.ckpt")
    _write(work / "table.csv", "a,b")  # not code or configuration
    _versioning(work).commit()
    assert _tracked(work) == {"train.py"}


def test_files_over_the_size_limit_are_left_out_and_reported(work):
    _write(work / "small.json", size=1000)
    _write(work / "big.json", size=2000)
    result = _versioning(work, max_file_size=1500).commit()
    assert _tracked(work) == {"small.json"}
    assert result.too_large == ["big.json"]
    assert "1 files over the size limit" in result.summary()


def test_the_repositorys_own_gitignore_is_respected(work):
    _write(work / ".gitignore", "secret.py\nscratch/\n")
    _write(work / "secret.py")
    _write(work / "scratch" / "notes.md")
    _write(work / "main.py")
    _versioning(work).commit()
    assert _tracked(work) == {".gitignore", "main.py"}


def test_a_second_persist_without_changes_makes_no_commit(work):
    _write(work / "train.py")
    versioning = _versioning(work)
    first = versioning.commit()
    second = versioning.commit()
    assert first.sha is not None and second.sha is None and second.error is None
    assert _git(work, "rev-list", "--count", "HEAD").strip() == "1"
    assert second.summary() == "nothing to commit"


def test_changes_and_deletions_are_committed_on_the_next_persist(work):
    _write(work / "a.py", "1")
    _write(work / "b.py", "1")
    versioning = _versioning(work)
    versioning.commit()
    _write(work / "a.py", "2")
    (work / "b.py").unlink()
    result = versioning.commit()
    assert sorted(result.files) == ["a.py", "b.py"]
    assert _tracked(work) == {"a.py"}
    assert _git(work, "show", "HEAD:a.py") == "2"


def test_only_the_work_directory_is_committed_when_the_repository_is_above_it(tmp_path):
    _git(tmp_path, "init", "-q", "-b", "main")
    _write(tmp_path / "outside.py")
    _write(tmp_path / "project" / "inside.py")
    _versioning(tmp_path / "project").commit()
    assert _tracked(tmp_path) == {"project/inside.py"}


def test_the_configured_author_is_used_only_where_git_has_none(work):
    _write(work / "a.py")
    _versioning(work, author_name="robot", author_email="robot@example.org").commit()
    assert _git(work, "log", "-1", "--format=%an <%ae>").strip() == "robot <robot@example.org>"
    assert not (Path(str(work)) / ".git" / "config").read_text().count("robot")  # config untouched
    _git(work, "config", "user.name", "Ada")
    _git(work, "config", "user.email", "ada@example.org")
    _write(work / "b.py")
    _versioning(work, author_name="robot", author_email="robot@example.org").commit()
    assert _git(work, "log", "-1", "--format=%an <%ae>").strip() == "Ada <ada@example.org>"


def test_no_repository_and_init_disabled_reports_and_creates_nothing(tmp_path):
    _write(tmp_path / "a.py")
    result = _versioning(tmp_path).commit()
    assert result.sha is None and "no Git repository" in (result.error or "")
    assert not (tmp_path / ".git").exists()


def test_init_when_enabled_creates_a_repository_and_commits(tmp_path):
    _write(tmp_path / "a.py")
    _write(tmp_path / ".gpuws" / "checkpoints" / "x" / "state.pt")
    result = _versioning(tmp_path, init=True).commit()
    assert (tmp_path / ".git").is_dir() and result.sha is not None
    assert _tracked(tmp_path) == {".gitignore", "a.py"}
    assert ".gpuws/" in (tmp_path / ".gitignore").read_text()


def test_init_keeps_an_existing_gitignore(tmp_path):
    _write(tmp_path / ".gitignore", "mine\n")
    _versioning(tmp_path, init=True).commit()
    assert (tmp_path / ".gitignore").read_text() == "mine\n"


def test_disabled_does_nothing(work):
    _write(work / "a.py")
    result = _versioning(work, enabled=False).commit()
    assert result.sha is None and result.error is None and _tracked(work) == set()


def test_no_commit_in_the_middle_of_a_merge(work):
    _write(work / "a.py")
    (work / ".git" / "MERGE_HEAD").write_text("0" * 40)
    result = _versioning(work).commit()
    assert result.sha is None and "middle of a merge" in (result.error or "")
    assert _tracked(work) == set()


def test_pushes_to_a_local_bare_repository(work, tmp_path):
    bare = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    _git(work, "remote", "add", "origin", str(bare))
    _write(work / "a.py")
    versioning = _versioning(work, remote="origin")
    result = versioning.commit()
    assert result.pushed is True and result.error is None
    assert _git(bare, "rev-parse", "refs/heads/main").strip() == result.sha
    status = versioning.status()
    assert status["push"]["state"] == "pushed"
    assert (status["push"]["ahead"], status["push"]["behind"]) == (0, 0)


def test_push_to_a_url_and_a_configured_branch(work, tmp_path):
    bare = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    _write(work / "a.py")
    result = _versioning(work, remote=str(bare), branch="gpuws").commit()
    assert result.pushed is True
    assert _git(bare, "rev-parse", "refs/heads/gpuws").strip() == result.sha


def test_a_failed_push_is_reported_and_the_commit_stays(work, tmp_path):
    _write(work / "a.py")
    versioning = _versioning(work, remote=str(tmp_path / "no-such-remote.git"))
    result = versioning.commit()
    assert result.sha is not None and _git(work, "rev-parse", "HEAD").strip() == result.sha
    assert result.pushed is False
    assert result.error is not None and result.error.startswith("push to ")
    status = versioning.status()
    assert status["push"]["state"] == "failed" and status["last_error"] == result.error


def test_a_failed_push_is_tried_again_on_the_next_persist(work, tmp_path):
    bare = tmp_path / "remote.git"
    _write(work / "a.py")
    versioning = _versioning(work, remote=str(bare))
    assert versioning.commit().pushed is False
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    result = versioning.commit()  # nothing new to commit, but the earlier commit still goes out
    assert result.sha is None and result.pushed is True
    assert (
        _git(bare, "rev-parse", "refs/heads/main").strip()
        == _git(work, "rev-parse", "HEAD").strip()
    )


def test_credentials_in_a_remote_url_are_never_shown():
    assert redact("fatal: unable to access 'https://ada:ghp_secret@github.com/a/b.git/'") == (
        "fatal: unable to access 'https://***@github.com/a/b.git/'"
    )


def test_status_for_the_sidebar(work):
    _write(work / "a.py")
    versioning = _versioning(work)
    versioning.commit()
    _write(work / "b.py")
    _write(work / "a.py", "changed")
    _write(work / "weights.pt")
    status = versioning.status()
    assert status["branch"] == "main"
    assert status["last_commit"]["message"].startswith("gpuws: persist")
    assert status["last_commit"]["sha"] == _git(work, "rev-parse", "HEAD").strip()
    assert status["uncommitted"] == 2
    assert status["push"]["state"] == "disabled" and status["last_error"] is None


def test_status_without_a_repository(tmp_path):
    status = _versioning(tmp_path).status()
    assert status["repository"] is None and status["last_commit"] is None


def test_git_step_reports_in_the_persist_job(work, tmp_path):
    _write(work / "a.py")
    job, step = Job("j1", "persist", [Step("git")]), Step("git")
    git_step(_versioning(work, remote=str(tmp_path / "missing.git")))(job, step)
    assert job.result["git"]["sha"] == _git(work, "rev-parse", "HEAD").strip()
    assert (
        step.detail is not None
        and step.detail.startswith("committed ")
        and "push failed" in step.detail
    )
    assert len(job.errors) == 1 and job.errors[0].startswith("git: push to ")


def test_history_survives_a_fresh_clone(work, tmp_path):
    """After a reset and restore, `git log` shows the history: what was pushed comes back."""
    bare = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    versioning = _versioning(work, remote=str(bare))
    for n in range(3):
        _write(work / "train.py", str(n))
        versioning.commit()
    clone = git.Repo.clone_from(str(bare), tmp_path / "restored")
    assert len(list(clone.iter_commits())) == 3


def test_without_a_git_executable_the_persist_reports_instead_of_crashing(work, tmp_path):
    """A machine without git: the module still imports, and commit() names the problem."""
    _write(work / "a.py")
    script = (
        "from jupyter_gpu_ws.runtime.gitrepo import GitSettings, GitVersioning\n"
        f"result = GitVersioning(GitSettings(workdir={str(work)!r})).commit()\n"
        "print('ERROR:', result.error)\n"
    )
    env = {
        "PATH": str(tmp_path / "empty-bin"),
        "PYTHONPATH": str(Path(__file__).parents[2]),
        "HOME": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ERROR: git is not installed: no git executable on PATH"
    assert _tracked(work) == set()


def test_git_waits_while_a_restore_writes_the_work_directory(work, monkeypatch):
    """A restore may be writing .git/ (its config among it): no git command runs meanwhile."""
    import threading

    import jupyter_gpu_ws.runtime.gitrepo as gitrepo

    monkeypatch.setattr(gitrepo, "RESTORE_WAIT", 0.05)
    restoring = threading.Lock()
    _write(work / "a.py")
    versioning = GitVersioning(
        GitSettings(workdir=str(work)), clock=lambda: T0, restore_lock=restoring
    )
    before = versioning.status()
    assert before["uncommitted"] == 1 and before["waiting"] is None
    with restoring:
        _write(work / "b.py")
        during = versioning.status()
        result = versioning.commit()
    assert during["waiting"] and during["uncommitted"] == 1  # the last status, not a new one
    assert result.sha is None and "restore is writing the work directory" in (result.error or "")
    assert _tracked(work) == set()
    assert versioning.commit().sha is not None and _tracked(work) == {"a.py", "b.py"}


def test_pushes_from_a_shallow_clone(tmp_path):
    """The push runs from a repository of its own that borrows the objects; a shallow clone's
    history stops where its `shallow` file says, which that repository must know too."""
    bare = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    _git(tmp_path, "clone", "-q", str(bare), str(seed))
    for n in range(3):
        _write(seed / "train.py", str(n))
        _git(seed, "add", "train.py")
        _git(seed, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", f"c{n}")
    _git(seed, "push", "-q", "origin", "HEAD:main")
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{bare}", str(shallow))
    _write(shallow / "train.py", "3")
    result = _versioning(shallow, remote="origin").commit()
    assert result.pushed is True, result.error
    assert _git(bare, "rev-parse", "refs/heads/main").strip() == result.sha
