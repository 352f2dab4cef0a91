"""The Git tier of a persist: commit the work directory's code, notebooks and configuration, then push."""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pathspec

from ..store.redact import redact as redact_secrets
from . import gitsafety
from .gitsafety import git

if TYPE_CHECKING:
    from ..jobs import Job, Step

log = logging.getLogger(__name__)

MIB = 2**20

# Code, notebooks and configuration: small text a person wrote.
DEFAULT_INCLUDE = (
    "*.py",
    "*.ipynb",
    "*.md",
    "*.txt",
    "*.toml",
    "*.yaml",
    "*.yml",
    "*.json",
    "*.cfg",
    "*.ini",
    "*.sh",
    "requirements*.txt",
    "Dockerfile",
    "Makefile",
    ".gitignore",
)

# Never data, weights or checkpoints, even when a pattern above would take them: they belong
# to the sync tier, and a repository that swallows them once stays heavy forever.
DEFAULT_EXCLUDE = (
    ".gpuws/",
    ".ipynb_checkpoints/",
    "__pycache__/",
    ".venv/",
    "venv/",
    "node_modules/",
    "data/",
    "datasets/",
    "checkpoints/",
    "wandb/",
    "mlruns/",
    "lightning_logs/",
    "*.pt",
    "*.pth",
    "*.bin",
    "*.safetensors",
    "*.ckpt",
    "*.onnx",
    "*.h5",
    "*.npy",
    "*.npz",
    "*.pkl",
    "*.parquet",
    "*.arrow",
)

# Written into a repository we create, so the user's own `git add .` stays clean too.
NEW_REPO_GITIGNORE = ".gpuws/\n.ipynb_checkpoints/\n__pycache__/\n*.pt\n*.safetensors\n*.ckpt\n"

# Never wait for a password prompt nobody can see; read-only commands take no index lock, so
# they do not collide with the user's own git in a terminal.
_QUIET_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_LITERAL_PATHSPECS": "1"}
_READ_ENV = {**_QUIET_ENV, "GIT_OPTIONAL_LOCKS": "0"}
_IN_PROGRESS = {
    "MERGE_HEAD": "merge",
    "CHERRY_PICK_HEAD": "cherry-pick",
    "REVERT_HEAD": "revert",
    "rebase-merge": "rebase",
    "rebase-apply": "rebase",
}
_CHUNK = 200  # paths per git command, well under any argument-length limit
# How long a persist's commit waits for a restore that is writing into the work directory.
RESTORE_WAIT = 30.0
RESTORING = "a restore is writing the work directory: Git waits until it ends"


@dataclass
class GitSettings:
    """The Git part of the app's configuration, as plain values."""

    workdir: str
    enabled: bool = True
    init: bool = False  # create a repository in the work directory when there is none
    include: Sequence[str] = DEFAULT_INCLUDE
    exclude: Sequence[str] = DEFAULT_EXCLUDE
    max_file_size: int = MIB
    remote: str | None = None  # a remote's name or URL; None: no push
    branch: str | None = None  # the remote branch; None: the current branch's name
    author_name: str = "jupyter-gpuws"  # used only where git knows no user.name / user.email
    author_email: str = "gpuws@localhost"
    push_timeout: float = 60.0


@dataclass
class CommitResult:
    """What one persist did to the repository."""

    sha: str | None = None
    message: str | None = None
    files: list[str] = field(default_factory=list)
    too_large: list[str] = field(default_factory=list)
    filtered: list[str] = field(default_factory=list)  # their attributes name a filter driver
    pushed: bool | None = None  # None: no push was attempted
    error: str | None = None

    def summary(self) -> str:
        parts = [
            f"committed {self.sha[:8]}: {len(self.files)} files"
            if self.sha
            else "nothing to commit"
        ]
        if self.too_large:
            parts.append(f"{len(self.too_large)} files over the size limit left out")
        if self.filtered:
            parts.append(f"{len(self.filtered)} files with a filter driver left out")
        if self.pushed is not None:
            parts.append("pushed" if self.pushed else "push failed")
        if self.error:
            parts.append(self.error)
        return "; ".join(parts)


@dataclass
class Pending:
    """What the next commit would take, relative to the repository root."""

    add: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    too_large: list[str] = field(default_factory=list)
    # Their attributes name a filter driver (git-lfs, say). Filters never run for the
    # product's commands (gitsafety.py), and committing such a file unfiltered would put in
    # history what the filter exists to keep out; the user commits them.
    filtered: list[str] = field(default_factory=list)


class GitError(Exception):
    """Git refused or failed; the message is one line, without credentials."""


def redact(text: str) -> str:
    """Remove user:password (or a token) from URLs in git's messages before anyone sees them."""
    return redact_secrets(text, whole=True)


def _one_line(err: Exception) -> str:
    if isinstance(err, git.GitCommandNotFound):
        return "git is not installed: no git executable on PATH"
    if isinstance(err, git.GitCommandError):
        text = (err.stderr or err.stdout or str(err)).strip().strip("'").strip()
        text = re.sub(r"^stderr:\s*", "", text)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        text = (
            " / ".join(lines[-3:])
            if lines
            else f"git {err.command[1] if len(err.command) > 1 else ''} failed"
        )
    else:
        text = str(err)
    return redact(text)


class GitVersioning:
    """Commits on each persist and reports the repository's state for the sidebar.

    One instance per server. `commit()` runs on the persist job's thread; `status()` runs git
    too, so the server calls both off the event loop. Every git command runs with the
    overrides of `gitsafety` (nothing the repository's config names is executed), and none
    while `restore_lock` is held: a restore may be writing `.git/` meanwhile, and the filter
    drivers are listed right before the commands.
    """

    def __init__(
        self,
        settings: GitSettings,
        clock: Callable[[], float] = time.time,
        restore_lock: threading.Lock | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.restore_lock = restore_lock
        self.workdir = os.path.realpath(settings.workdir)
        self._include = pathspec.GitIgnoreSpec.from_lines(settings.include)
        self._exclude = pathspec.GitIgnoreSpec.from_lines(settings.exclude)
        self._lock = threading.Lock()
        self.last_error: str | None = None
        self.last_result: CommitResult | None = None
        self.last_status: dict[str, Any] | None = None
        self._committing = (
            False  # commit() holds the restore lock (status must not say "restoring")
        )
        self.push_state: dict[str, Any] = {
            "state": "never" if settings.remote else "disabled",
            "time": None,
        }

    # --- the repository ---------------------------------------------------------------------

    def open(self, create: bool = False) -> git.Repo | None:
        """The repository holding the work directory; a new one only if `create` and enabled.

        Its git commands carry the overrides of `gitsafety`, listed from its config now.
        """
        opened = self._open(create)
        return opened[0] if opened else None

    def _open(self, create: bool = False) -> tuple[git.Repo, frozenset[str]] | None:
        """The repository and the filter drivers its config defines (turned off for it)."""
        try:
            # GitPython reads the repository's files here and starts no git.
            repo = git.Repo(self.workdir, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            if not (create and self.settings.init):
                return None
            repo = self._init()
        drivers = gitsafety.protect(repo.git)
        return repo, drivers

    def _init(self) -> git.Repo:
        runner = git.Git(self.workdir)
        runner.update_environment(**gitsafety.static_environment())
        runner.init("-q", "--initial-branch=main", env=_QUIET_ENV)
        repo = git.Repo(self.workdir)
        gitignore = os.path.join(self.workdir, ".gitignore")
        if not os.path.exists(gitignore):
            with open(gitignore, "w", encoding="utf-8") as f:
                f.write(NEW_REPO_GITIGNORE)
        log.info("GPU workspace: created a Git repository in %s", self.workdir)
        return repo

    def wanted(self, rel: str) -> bool:
        """Whether a path (relative to the work directory, '/' separators) is versioned."""
        return self._include.match_file(rel) and not self._exclude.match_file(rel)

    def pending(self, repo: git.Repo, filters: frozenset[str] = frozenset()) -> Pending:
        """Changes under the work directory that the next commit takes.

        `git status` lists them, which honours the repository's .gitignore files, its
        info/exclude and the user's global excludes; our patterns and size limit then narrow
        the list. A tracked file deleted from disk is removed from the repository. Files whose
        attributes select one of `filters` (the drivers the config defines) are left out.
        """
        root = os.path.realpath(repo.working_dir)
        scope = os.path.relpath(self.workdir, root)
        out = repo.git.status(
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=all",
            "--",
            scope,
            env=_READ_ENV,
            strip_newline_in_stdout=False,
        )
        pending = Pending()
        for entry in out.split("\0"):
            if len(entry) < 4 or entry.endswith("/"):  # "?? sub/" is a nested repository
                continue
            code, path = entry[:2], entry[3:]
            full = os.path.join(root, path)
            rel = os.path.relpath(full, self.workdir).replace(os.sep, "/")
            if "D" in code and not os.path.lexists(full):
                pending.remove.append(path)
            elif not self.wanted(rel):
                continue
            elif _size(full) > self.settings.max_file_size:
                pending.too_large.append(path)
            else:
                pending.add.append(path)
        if filters and pending.add:
            filtered = set(_filtered(repo, pending.add, filters))
            pending.filtered = [p for p in pending.add if p in filtered]
            pending.add = [p for p in pending.add if p not in filtered]
        return pending

    # --- a persist ---------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Stage what changed, commit it, push if a remote is configured. Never raises."""
        if not self.settings.enabled:
            return CommitResult()
        with self._lock:
            result = CommitResult()
            restore = self.restore_lock
            if restore is not None and not restore.acquire(timeout=RESTORE_WAIT):
                result.error = f"{RESTORING}; not committed now (the next persist commits)"
            else:
                self._committing = True
                try:
                    opened = self._open(create=True)
                    if opened is None:
                        result.error = (
                            f"no Git repository at {self.workdir} (enable git init to create one)"
                        )
                    else:
                        with opened[0]:  # ends GitPython's cat-file processes when done
                            self._commit(*opened, result)
                            if self.settings.remote and (
                                result.sha or self.push_state["state"] != "pushed"
                            ):
                                self._push(opened[0], result)
                except (git.GitError, GitError, OSError) as err:
                    result.error = _one_line(err)
                finally:
                    self._committing = False
                    if restore is not None:
                        restore.release()
            self.last_error = result.error
            self.last_result = result
            if result.error:
                log.warning("GPU workspace: git: %s", result.error)
            return result

    def _commit(self, repo: git.Repo, filters: frozenset[str], result: CommitResult) -> None:
        busy = [
            what
            for name, what in _IN_PROGRESS.items()
            if os.path.exists(os.path.join(repo.git_dir, name))
        ]
        if busy:
            # Committing now would conclude the user's merge or rebase for them.
            raise GitError(
                f"the repository is in the middle of a {busy[0]}; not committing until it is finished"
            )
        pending = self.pending(repo, filters)
        result.too_large = pending.too_large
        result.filtered = pending.filtered
        for chunk in _chunks(pending.add):
            repo.git.add("--", *chunk, env=_QUIET_ENV)
        for chunk in _chunks(pending.remove):
            repo.git.rm("--cached", "--quiet", "--ignore-unmatch", "--", *chunk, env=_QUIET_ENV)
        staged = [
            p
            for p in repo.git.diff(
                "--cached",
                "--name-only",
                "-z",
                "--no-ext-diff",
                "--no-textconv",
                "--ignore-submodules=all",
                env=_QUIET_ENV,
            ).split("\0")
            if p
        ]
        if not staged:
            return
        result.files = staged
        result.message = self._message(staged)
        # Hooks are the user's checks for their own commits; an automatic persist before the
        # runtime ends must not be stopped by a linter.
        repo.git.commit(
            "--no-verify", "-q", "-m", result.message, env={**_QUIET_ENV, **self._author_env(repo)}
        )
        result.sha = repo.head.commit.hexsha

    def _message(self, files: list[str]) -> str:
        when = datetime.fromtimestamp(self.clock(), timezone.utc).strftime("%Y-%m-%d %H:%M")
        noun = "file" if len(files) == 1 else "files"
        body = "\n".join(files[:50]) + (
            f"\n… and {len(files) - 50} more" if len(files) > 50 else ""
        )
        return f"gpuws: persist {when} UTC — {len(files)} {noun} changed\n\n{body}\n"

    def _author_env(self, repo: git.Repo) -> dict[str, str]:
        """The configured author only where git has no identity: the user's config is not touched."""
        env: dict[str, str] = {}
        for key, value, names in (
            ("user.name", self.settings.author_name, ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")),
            ("user.email", self.settings.author_email, ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")),
        ):
            if _git_config(repo, key) is None and not any(os.environ.get(n) for n in names):
                env.update(dict.fromkeys(names, value))
        return env

    def _push(self, repo: git.Repo, result: CommitResult) -> None:
        """Push with the user's own credentials (environment, credential helper, SSH agent).

        From a temporary repository with no configuration of its own that borrows this one's
        objects: only the system and global configuration and the environment steer the push
        (credential helpers, SSH, proxies, insteadOf), never the repository's config, which a
        store restores. A configured remote's URLs are read from it: that decides where the
        commits go (which the store holds anyway), not what runs.
        """
        remote = str(self.settings.remote)
        branch = self.settings.branch or _current_branch(repo)
        if not repo.head.is_valid():
            return
        try:
            if branch is None:
                raise GitError("HEAD is detached: set the Git branch to push to")
            ref = _valid_ref(repo, f"refs/heads/{branch}")
            sha = repo.head.commit.hexsha
            urls, named = _push_urls(repo, remote)
            for url in urls:
                _push_isolated(repo, url, sha, ref, self.settings.push_timeout)
            if named:  # what `git push` updates too; the sidebar's ahead/behind reads it
                repo.git.update_ref(
                    _valid_ref(repo, f"refs/remotes/{remote}/{branch}"), sha, env=_QUIET_ENV
                )
        except (git.GitError, GitError) as err:
            # The commit stays; the next persist tries the push again.
            result.pushed = False
            result.error = f"push to {redact(str(remote))} failed: {_one_line(err)}"
            self.push_state = {"state": "failed", "time": self.clock(), "error": result.error}
            return
        result.pushed = True
        self.push_state = {"state": "pushed", "time": self.clock(), "branch": branch}

    # --- the sidebar -------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Branch, last commit, uncommitted files, push state and the last error."""
        state: dict[str, Any] = {
            "enabled": self.settings.enabled,
            "repository": None,
            "branch": None,
            "last_commit": None,
            "uncommitted": None,
            "too_large": None,
            "filtered": None,
            "remote": redact(self.settings.remote) if self.settings.remote else None,
            "push": {**self.push_state, "ahead": None, "behind": None},
            "last_persist": asdict(self.last_result) if self.last_result else None,
            "last_error": self.last_error,
            "waiting": None,
        }
        if not self.settings.enabled:
            return state
        restore = self.restore_lock
        if restore is not None and not restore.acquire(blocking=False):
            if self._committing:  # our own persist holds it: its commit shows at the next look
                return self.last_status or state
            return {**(self.last_status or state), "waiting": RESTORING}
        try:
            opened = self._open()
            if opened is not None:
                with opened[0]:
                    self._describe(*opened, state)
        except (git.GitError, OSError, ValueError) as err:
            state["last_error"] = _one_line(err)
        finally:
            if restore is not None:
                restore.release()
        self.last_status = state
        return state

    def _describe(self, repo: git.Repo, filters: frozenset[str], state: dict[str, Any]) -> None:
        state["repository"] = repo.working_tree_dir
        state["branch"] = _current_branch(repo)
        pending = self.pending(repo, filters)
        state["uncommitted"] = len(pending.add) + len(pending.remove)
        state["too_large"] = len(pending.too_large)
        state["filtered"] = len(pending.filtered)
        if repo.head.is_valid():
            head = repo.head.commit
            state["last_commit"] = {
                "sha": head.hexsha,
                "message": head.summary,
                "time": float(head.committed_date),
            }
            state["push"].update(self._ahead_behind(repo, state["branch"]))

    def _ahead_behind(self, repo: git.Repo, current: str | None) -> dict[str, int]:
        """Against the remote-tracking branch, when the remote is a named remote (no network)."""
        branch = self.settings.branch or current
        remote = self.settings.remote
        if not remote or not branch or remote not in [r.name for r in repo.remotes]:
            return {}
        ref = f"refs/remotes/{remote}/{branch}"
        try:
            counts = repo.git.rev_list("--left-right", "--count", f"HEAD...{ref}", env=_READ_ENV)
        except git.GitCommandError:
            return {}  # never pushed or fetched: no tracking branch yet
        ahead, behind = (int(n) for n in counts.split())
        return {"ahead": ahead, "behind": behind}


def git_step(versioning: GitVersioning) -> Callable[[Job, Step], None]:
    """The persist pipeline's Git step: commit (and push); problems are reported in the job."""

    def run(job: Job, step: Step) -> None:
        result = versioning.commit()
        job.result["git"] = asdict(result)
        step.detail = result.summary()
        if result.error:
            # Report, and let the sync go on: the files reach the store either way.
            job.errors.append(f"git: {result.error}")

    return run


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _git_config(repo: git.Repo, key: str) -> str | None:
    # Asking git itself honours GIT_CONFIG_GLOBAL, includes and every level, as a commit would.
    try:
        return repo.git.config("--get", key, env=_READ_ENV) or None
    except git.GitCommandError:
        return None


def _filtered(repo: git.Repo, paths: list[str], drivers: frozenset[str]) -> list[str]:
    """Those of `paths` whose `filter` attribute names one of `drivers` (`git check-attr` reads
    the attributes, and runs nothing)."""
    found = []
    for chunk in _chunks(paths):
        out = repo.git.check_attr(
            "-z", "filter", "--", *chunk, env=_READ_ENV, strip_newline_in_stdout=False
        )
        fields = out.split("\0")
        for path, _, value in zip(fields[0::3], fields[1::3], fields[2::3], strict=False):
            if value in drivers:
                found.append(path)
    return found


def _valid_ref(repo: git.Repo, ref: str) -> str:
    """`ref` if git takes it for a reference name (a branch read from HEAD is the store's)."""
    try:
        repo.git.check_ref_format(ref, env=_READ_ENV)
    except git.GitCommandError:
        raise GitError(f"not a valid Git reference name: {ref[:200]!r}") from None
    return ref


def _push_urls(repo: git.Repo, remote: str) -> tuple[list[str], bool]:
    """Where a push to `remote` goes: a configured remote's push URLs (else its URLs), all of
    them as git does; or `remote` itself, a URL or path. And whether it is a configured remote."""
    if "/" in remote or remote in (
        "",
        ".",
        "..",
    ):  # git's rule: never a remote's name, so a URL or path
        return [remote], False
    for variable in ("pushurl", "url"):
        try:
            out = repo.git.config("--get-all", f"remote.{remote}.{variable}", env=_READ_ENV)
        except git.GitCommandError:  # exit status 1: not set
            continue
        urls = [url for url in out.splitlines() if url]
        if urls:
            return urls, True
    return [remote], False


def _push_isolated(repo: git.Repo, url: str, sha: str, ref: str, timeout: float) -> None:
    """`git push <url> <sha>:<ref>` from a bare repository made for it, with no configuration,
    hooks or templates, whose objects are this repository's (alternates)."""
    with tempfile.TemporaryDirectory(prefix="gpuws-push-") as scratch:
        runner = git.Git(repo.working_tree_dir)  # relative paths in URLs mean what they meant
        runner.update_environment(**gitsafety.static_environment(offline=False))
        runner.init("-q", "--bare", "--template=", scratch, env=_QUIET_ENV)
        common = os.path.realpath(repo.common_dir)
        with open(
            os.path.join(scratch, "objects", "info", "alternates"), "w", encoding="utf-8"
        ) as f:
            f.write(os.path.join(common, "objects") + "\n")
        if os.path.isfile(
            os.path.join(common, "shallow")
        ):  # a shallow clone: where its history stops
            shutil.copyfile(os.path.join(common, "shallow"), os.path.join(scratch, "shallow"))
        runner.update_environment(GIT_DIR=scratch)
        gitsafety.protect(
            runner, offline=False
        )  # the user's system and global values, nothing else
        locked = (
            ["--receive-pack", gitsafety.LOCKED_RECEIVE_PACK] if gitsafety.is_local_url(url) else []
        )
        runner.push(*locked, "--", url, f"{sha}:{ref}", env=_QUIET_ENV, kill_after_timeout=timeout)


def _current_branch(repo: git.Repo) -> str | None:
    try:
        return repo.active_branch.name
    except TypeError:  # detached HEAD
        return None
