"""Nothing that a repository's own configuration names is run by the Git tier: real git, real
repositories set up the way a hostile store would restore them.

Each set-up is first shown to run its command under plain git on this machine (so each case
proves an attack on this git, not a typo), then the Git tier's status, commit and push run on a
fresh copy of it and must run nothing.
"""

from __future__ import annotations

import base64
import os
import shlex
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jupyter_gpu_ws.runtime.gitrepo import GitSettings, GitVersioning
from jupyter_gpu_ws.runtime.gitsafety import ConfigEntry, is_local_url, overrides, parse_config_list
from tests.runtime.test_gitrepo import _git, _write, no_user_git_config  # noqa: F401  (an autouse fixture)


class Ran:
    """Marker files: a hostile command, if it runs, leaves one named after itself."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()

    def command(self, name: str) -> str:
        return f"touch {shlex.quote(str(self.folder / name))}"

    def script(self, name: str) -> str:
        """An executable that leaves the marker (a program already on the machine, say)."""
        path = self.folder.parent / f"{name}-program"
        path.write_text(f"#!/bin/sh\n{self.command(name)}\nexit 1\n")
        path.chmod(0o755)
        return str(path)

    def names(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())

    def clear(self) -> None:
        for p in self.folder.iterdir():
            p.unlink()


@pytest.fixture
def ran(tmp_path: Path) -> Ran:
    return Ran(tmp_path / "ran")


def _config(repo: Path, key: str, value: str) -> None:
    _git(repo, "config", "--add", key, value)


def _hook(folder: Path, name: str, ran: Ran) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{ran.command(name)}\n")
    path.chmod(0o755)


def _plain(repo: Path, *args: str) -> None:
    """Plain git as the user would run it; whether it fails does not matter, what it ran does."""
    subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=60, check=False)


def _bare(path: Path) -> Path:
    subprocess.run(
        ["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True, capture_output=True
    )
    return path


def _work(root: Path) -> Path:
    """A repository with one commit and an uncommitted change, and a bare remote beside it."""
    work = root / "work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    _git(work, "config", "user.name", "Ada")
    _git(work, "config", "user.email", "ada@example.org")
    _write(work / "train.py", "print(1)\n")
    _git(work, "add", "train.py")
    _git(work, "commit", "-q", "-m", "first")
    _git(work, "remote", "add", "origin", str(_bare(root / "remote.git")))
    _write(work / "train.py", "print(2)\n")
    _write(work / "new.py", "print(3)\n")
    return work


# Each attack: set up `work` (under `root`) as a store would leave it; return plain git's command
# that runs the hostile command.
Attack = Callable[[Path, Path, Ran], Callable[[], None]]


def fsmonitor(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    _config(work, "core.fsmonitor", ran.command("fsmonitor"))
    return lambda: _plain(work, "status")


def clean_filter(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    _config(work, "filter.evil.clean", ran.command("clean") + "; cat")
    _config(work, "filter.evil.smudge", ran.command("smudge") + "; cat")
    _write(work / ".gitattributes", "*.py filter=evil\n")
    return lambda: _plain(work, "add", "train.py", "new.py")


def process_filter(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    _config(work, "filter.evil.process", ran.command("process"))
    _write(work / ".gitattributes", "*.py filter=evil\n")
    return lambda: _plain(work, "add", "train.py", "new.py")


def filter_named_with_an_equals_sign(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    # `git -c filter.a=b.clean=` would set `filter.a` to `b.clean=`: this one must not slip by.
    _config(work, "filter.a=b.clean", ran.command("equals-clean") + "; cat")
    _write(work / ".gitattributes", "*.py filter=a=b\n")
    return lambda: _plain(work, "add", "train.py", "new.py")


def filter_from_an_included_file(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    _write(
        work / "settings" / "git.cfg",
        f'[filter "inc"]\n\tclean = {ran.command("include-clean")}; cat\n',
    )
    _config(work, "include.path", "../settings/git.cfg")
    _write(work / ".gitattributes", "*.py filter=inc\n")
    return lambda: _plain(work, "add", "train.py", "new.py")


def filter_from_a_conditional_include(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    _write(
        work / "settings" / "git.cfg",
        f'[filter "cond"]\n\tclean = {ran.command("includeif-clean")}; cat\n',
    )
    _config(work, "includeIf.gitdir:**.path", "../settings/git.cfg")
    _write(work / ".git" / "info" / "attributes", "*.py filter=cond\n")
    return lambda: _plain(work, "add", "train.py", "new.py")


HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-index-change",
    "reference-transaction",
    "pre-push",
    "pre-auto-gc",
    "post-checkout",
)


def hooks(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    for name in HOOKS:
        _hook(work / ".git" / "hooks", name, ran)
    return lambda: _plain(work, "commit", "--no-verify", "-q", "-am", "by hand")


def hooks_path(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    for name in HOOKS:
        _hook(work / ".githooks", name, ran)
    _config(work, "core.hooksPath", ".githooks")
    return lambda: _plain(work, "commit", "--no-verify", "-q", "-am", "by hand")


def signing_program(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    _config(work, "commit.gpgSign", "true")
    _config(work, "gpg.program", ran.script("gpg"))
    return lambda: _plain(work, "commit", "-q", "-am", "by hand")


def lazy_fetch_of_a_partial_clone(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    # A partial clone whose HEAD names a commit it lacks: reading it fetches from the promisor
    # remote, with that remote's upload-pack command.
    _config(work, "core.repositoryFormatVersion", "1")
    _config(work, "extensions.partialClone", "lender")
    _config(work, "remote.lender.url", str(root / "remote.git"))
    _config(work, "remote.lender.uploadpack", ran.command("uploadpack") + "; git-upload-pack")
    (work / ".git" / "refs" / "heads" / "main").write_text("1" * 40 + "\n")
    return lambda: _plain(work, "status")


def remote_commands(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    _config(work, "remote.origin.receivepack", ran.command("receivepack") + "; git-receive-pack")
    _config(work, "remote.origin.uploadpack", ran.command("uploadpack") + "; git-upload-pack")
    _config(work, "credential.helper", "!" + ran.command("credential"))
    _config(work, "core.sshCommand", ran.command("ssh"))
    _config(work, "core.askPass", ran.script("askpass"))
    _hook(work / ".git" / "hooks", "pre-push", ran)
    return lambda: _plain(work, "push", "origin", "HEAD:refs/heads/main")


def ext_url_through_insteadof(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    marker = str(ran.folder / "ext")
    _git(work, "remote", "set-url", "origin", "https://example.invalid/repo.git")
    _config(work, f"url.ext::sh -c touch% {marker}% #.insteadOf", "https://example.invalid/")
    _config(work, "protocol.ext.allow", "always")
    return lambda: _plain(work, "push", "origin", "HEAD:refs/heads/main")


def destination_repository_on_this_machine(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    # The remote is a repository the store restored beside the work: its config and hooks would
    # run in its receive-pack.
    dest = _bare(work / "mirror.git")
    for name in ("pre-receive", "update", "post-receive", "post-update", "reference-transaction"):
        _hook(dest / "hooks", name, ran)
    _config(dest, "core.alternateRefsCommand", ran.command("alternate-refs"))
    _config(dest, "core.fsmonitor", ran.command("dest-fsmonitor"))
    (dest / "objects" / "info" / "alternates").write_text(
        str(root / "remote.git" / "objects") + "\n"
    )
    _git(work, "remote", "set-url", "origin", str(dest))
    return lambda: _plain(work, "push", "origin", "HEAD:refs/heads/main")


def submodule_config(root: Path, work: Path, ran: Ran) -> Callable[[], None]:
    inner = root / "inner"
    inner.mkdir()
    _git(inner, "init", "-q", "-b", "main")
    _write(inner / "lib.py", "x = 1\n")
    _git(inner, "add", "lib.py")
    _git(inner, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "lib")
    _git(work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "sub")
    _git(work, "commit", "-q", "-m", "submodule")
    sub = work / "sub"
    _config(sub, "core.fsmonitor", ran.command("sub-fsmonitor"))
    _config(sub, "filter.subevil.clean", ran.command("sub-clean") + "; cat")
    _write(sub / ".gitattributes", "*.py filter=subevil\n")
    _write(sub / "lib.py", "x = 2\n")
    return lambda: _plain(work, "status")


ATTACKS: dict[str, Attack] = {
    f.__name__: f
    for f in (
        fsmonitor,
        clean_filter,
        process_filter,
        filter_named_with_an_equals_sign,
        filter_from_an_included_file,
        filter_from_a_conditional_include,
        hooks,
        hooks_path,
        signing_program,
        lazy_fetch_of_a_partial_clone,
        remote_commands,
        ext_url_through_insteadof,
        destination_repository_on_this_machine,
        submodule_config,
    )
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_git_tier_runs_nothing_the_repository_names(
    attack: str, tmp_path: Path, ran: Ran
) -> None:
    proof = tmp_path / "proof"
    ATTACKS[attack](proof, _work(proof), ran)()
    assert ran.names(), f"plain git ran nothing for {attack}: the set-up proves no attack"
    ran.clear()

    root = tmp_path / "product"
    work = _work(root)
    ATTACKS[attack](root, work, ran)
    versioning = GitVersioning(GitSettings(workdir=str(work), remote="origin"))
    versioning.status()
    result = versioning.commit()
    versioning.status()
    assert ran.names() == [], result


def test_a_hostile_repository_still_commits_and_pushes(tmp_path: Path, ran: Ran) -> None:
    """With hooks, fsmonitor, signing and remote commands all configured, the commit is made,
    unsigned, and reaches the remote through its plain receive-pack."""
    work = _work(tmp_path)
    for attack in (fsmonitor, hooks, signing_program, remote_commands):
        attack(tmp_path, work, ran)
    versioning = GitVersioning(GitSettings(workdir=str(work), remote="origin"))
    result = versioning.commit()
    assert result.error is None and result.pushed is True and ran.names() == []
    assert sorted(result.files) == ["new.py", "train.py"]
    assert _git(tmp_path / "remote.git", "rev-parse", "refs/heads/main").strip() == result.sha
    assert _git(work, "cat-file", "commit", "HEAD").count("gpgsig") == 0
    assert (
        versioning.status()["push"]["ahead"] == 0
    )  # the tracking ref moved as `git push` moves it


def test_files_whose_attributes_name_a_filter_are_left_out_not_committed_unfiltered(
    tmp_path: Path, ran: Ran
) -> None:
    work = _work(tmp_path)
    clean_filter(tmp_path, work, ran)
    _write(work / ".gitattributes", "train.py filter=evil\n")
    result = GitVersioning(GitSettings(workdir=str(work))).commit()
    assert (
        result.filtered == ["train.py"]
        and "1 files with a filter driver left out" in result.summary()
    )
    assert result.files == ["new.py"]
    assert _git(work, "show", "HEAD:train.py") == "print(1)\n"  # still the first commit's
    assert ran.names() == []


def test_a_push_to_a_repository_on_this_machine_still_works(tmp_path: Path, ran: Ran) -> None:
    work = _work(tmp_path)
    destination_repository_on_this_machine(tmp_path, work, ran)
    result = GitVersioning(GitSettings(workdir=str(work), remote="origin")).commit()
    assert result.pushed is True and ran.names() == []
    assert _git(work / "mirror.git", "rev-parse", "refs/heads/main").strip() == result.sha


class _Recorder(ThreadingHTTPServer):
    def __init__(
        self, answer: Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str]]]
    ) -> None:
        self.requests: list[tuple[str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.requests.append((self.path, self.headers.get("Authorization")))
                code, headers = answer(self)
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def http_servers() -> Iterator[tuple[_Recorder, _Recorder]]:
    """A Git host asking for credentials (401 until it gets some, then 404), and a proxy."""

    def host(handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, str]]:
        if handler.headers.get("Authorization"):
            return 404, {}
        return 401, {"WWW-Authenticate": 'Basic realm="git"'}

    servers = (_Recorder(host), _Recorder(lambda handler: (502, {})))
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_push_over_http_uses_the_users_credentials_and_not_the_repositorys_http_settings(
    tmp_path: Path,
    ran: Ran,
    http_servers: tuple[_Recorder, _Recorder],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The repository's config would send the push through its proxy with its credential
    helper; the user's global helper is the one asked, and the push goes straight to the host."""
    host, proxy = http_servers
    for name in (
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    global_config = Path(os.environ["GIT_CONFIG_GLOBAL"])
    global_config.write_text(
        '[credential]\n\thelper = "!f() { echo username=ada; echo password=s3cret; }; f"\n'
    )
    work = _work(tmp_path)
    url = f"{host.url}/repo.git"
    _git(work, "remote", "set-url", "origin", url)
    _config(work, f"http.{host.url}/.proxy", proxy.url)
    _config(work, f"credential.{host.url}.helper", "!" + ran.command("repository-credential"))
    _config(work, "credential.helper", "")  # would drop the user's helper from the list

    result = GitVersioning(GitSettings(workdir=str(work), remote="origin")).commit()
    assert result.pushed is False  # the host answers 404 once it has credentials
    assert proxy.requests == [] and ran.names() == []
    expected = "Basic " + base64.b64encode(b"ada:s3cret").decode()
    assert any(
        path.startswith("/repo.git/info/refs") and auth == expected for path, auth in host.requests
    )


def test_restored_hooks_made_executable_by_hand_still_do_not_run_for_a_persist(
    tmp_path: Path, ran: Ran
) -> None:
    work = _work(tmp_path)
    hooks(tmp_path, work, ran)
    for hook in (work / ".git" / "hooks").iterdir():
        assert hook.stat().st_mode & stat.S_IXUSR  # executable: git itself would run them
    result = GitVersioning(GitSettings(workdir=str(work))).commit()
    assert result.sha is not None and ran.names() == []


def test_the_filter_drivers_of_every_level_are_listed_from_gits_own_listing() -> None:
    listing = (
        "system\0filter.lfs.clean\ngit-lfs clean -- %f\0global\0user.name\nAda\0"
        "local\0filter.A=b.c.process\nevil\0local\0filter.bare.required\0"
        "global\0gpg.program\n/usr/bin/gpg2\0local\0gpg.program\nevil\0"
    )
    entries = parse_config_list(listing)
    assert entries[3] == ConfigEntry("local", "filter.bare.required", None)
    pairs = overrides(entries)
    for driver in ("lfs", "A=b.c", "bare"):
        assert (f"filter.{driver}.clean", "") in pairs and (
            f"filter.{driver}.required",
            "false",
        ) in pairs
    # Programs: the user's own (global) value, never the repository's.
    assert ("gpg.program", "/usr/bin/gpg2") in pairs and ("gpg.program", "evil") not in pairs
    assert ("protocol.allow", "never") in pairs and ("protocol.allow", "never") not in overrides(
        entries, False
    )


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("/srv/repo.git", True),
        ("../repo.git", True),
        ("file:///srv/repo.git", True),
        ("/a::b", True),
        ("./host:path", True),
        ("git@github.com:a/b.git", False),
        ("ssh://host/repo", False),
        ("https://host/repo", False),
        ("ext::sh -c x", False),
        ("codecommit::eu-west-1://r", False),
    ],
)
def test_which_urls_git_reaches_as_a_repository_on_this_machine(url: str, local: bool) -> None:
    assert is_local_url(url) is local


def test_a_url_setting_is_pushed_to_as_given_even_if_the_config_has_a_remote_of_that_name(
    tmp_path: Path, ran: Ran
) -> None:
    """As git: a name with '/' is a URL or path, never looked up among the configured remotes."""
    work = _work(tmp_path)
    mine, theirs = _bare(tmp_path / "mine.git"), _bare(tmp_path / "theirs.git")
    _config(work, f"remote.{mine}.url", str(theirs))
    result = GitVersioning(GitSettings(workdir=str(work), remote=str(mine))).commit()
    assert result.pushed is True
    assert _git(mine, "rev-parse", "refs/heads/main").strip() == result.sha
    assert _git(theirs, "for-each-ref").strip() == ""
