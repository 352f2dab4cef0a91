"""What every Git command of the product runs with, so that no command named in a repository's own
configuration (which a store restores with the work directory) is ever executed.

The rule (docs/runtime.md, "What runs, what never runs"):

- Every command gets configuration overrides of the command scope, which outranks the system,
  global, repository and included files: no hooks, no fsmonitor, no filter driver, no pager or
  editor, no transport at all for the commands that work on the local repository (so no lazy
  fetch of a partial clone, no ssh, credential helper, proxy or upload-pack command), and no
  commit signing unless the user's own (system or global) configuration asks for it.
- The overrides travel as GIT_CONFIG_COUNT / GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n rather than
  `-c key=value`: `-c` splits at the first "=", and a filter driver named `a=b` would slip past.
- A push runs from a temporary repository that has no configuration of its own and borrows the
  objects (see `gitrepo.py`): the repository's config never steers it; the user's system and
  global configuration and environment (credential helpers, SSH, insteadOf) do. A push to a
  repository on this machine runs that repository's receive-pack with its hooks and checkout
  turned off too (`LOCKED_RECEIVE_PACK`).

Verified against git 2.39 (tests/runtime/test_gitsafety.py): an empty value is not always "off"
(an empty `diff.external` or textconv is a command that fails to start), so each key has the
value that really turns it off, and what cannot be turned off this way is never reached: the
product makes no patch output (`--no-ext-diff --no-textconv` where it diffs), no merge, no
checkout.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Without a git executable, GitPython refuses to import at all; "quiet" lets the server start
# and each Git call fail with GitCommandNotFound, which the Git tier reports like any failure.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
import git

# Always, for every command.
NEUTRAL: tuple[tuple[str, str], ...] = (
    # `/dev/null/<hook>` is never an executable file: no hook runs, neither the repository's
    # nor one under a hooksPath that its config (or an included file) names.
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    # Only on a terminal, which GitPython never gives git; ":" is git's own "no editor".
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    # The transport that runs a shell command named in a URL (`ext::sh -c …`).
    ("protocol.ext.allow", "never"),
    # A submodule's own config has its own filter drivers, which are not listed here: its
    # status is never asked for (`git status --ignore-submodules=all` as well).
    ("diff.ignoreSubmodules", "all"),
    ("submodule.recurse", "false"),
)

# For the commands that work on the local repository: no transport may start, so no lazy fetch
# of a partial clone (`extensions.partialClone` runs `git fetch` with the remote's uploadpack
# command, its ssh command, credential helpers and proxies), no remote helper.
OFFLINE: tuple[tuple[str, str], ...] = (("protocol.allow", "never"),)

# Keys naming a program, and signing (which runs one): the user's own system or global value,
# else git's default; never the repository's.
TRUSTED_OR_DEFAULT: Mapping[str, str] = {
    "commit.gpgsign": "false",
    "gpg.program": "gpg",
    "gpg.openpgp.program": "gpg",
    "gpg.x509.program": "gpgsm",
    "gpg.ssh.program": "ssh-keygen",
    "gpg.ssh.defaultkeycommand": "",  # empty: "no command" (signing then needs user.signingKey)
}

# The parts of a filter driver that name a program; `required` false, so a driver with no
# program left does not fail the command.
FILTER_OFF: tuple[tuple[str, str], ...] = (
    ("clean", ""),
    ("smudge", ""),
    ("process", ""),
    ("required", "false"),
)

TRUSTED_SCOPES = frozenset({"system", "global"})

# receive-pack in a repository on this machine (a push to a path or file:// URL) reads that
# repository's config and runs its hooks; git does not pass our overrides on to it
# (GIT_CONFIG_* are dropped for another local repository), so they go on its command line.
# `refuse` instead of a configured `updateInstead`: no checkout (filters, fsmonitor) there;
# `true` as the alternate-refs command: none are listed, nothing of that config runs.
LOCKED_RECEIVE_PACK = (
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c receive.denyCurrentBranch=refuse "
    "-c receive.denyDeleteCurrent=refuse -c core.alternateRefsCommand=true -c receive.autogc=false "
    "-c protocol.ext.allow=never receive-pack"
)


@dataclass(frozen=True)
class ConfigEntry:
    scope: str  # system, global, local, worktree, command
    key: str  # section and variable lower-case, subsection as written
    value: str | None  # None: a key without "=" (boolean true)


def parse_config_list(text: str) -> list[ConfigEntry]:
    """The output of `git config -z --list --show-scope`: `scope NUL key LF value NUL` per entry."""
    fields = text.split("\0")
    entries = []
    for scope, item in zip(fields[0::2], fields[1::2], strict=False):
        key, newline, value = item.partition("\n")
        entries.append(ConfigEntry(scope, key, value if newline else None))
    return entries


def _subsection(key: str, section: str) -> tuple[str, str] | None:
    """('name', 'variable') of `section.name.variable`; None for other keys."""
    if not key.lower().startswith(section + "."):
        return None
    middle, dot, variable = key[len(section) + 1 :].rpartition(".")
    return (middle, variable.lower()) if dot else None


def overrides(entries: Iterable[ConfigEntry], offline: bool = True) -> list[tuple[str, str]]:
    """The command-scope values that turn off everything `entries` could make git run.

    Filter drivers are per name: every driver defined at any level (a repository's attributes
    may select any of them) has its programs emptied. The user's own filters (git-lfs) are
    off too; files whose attributes name a filter are left out of the commit instead
    (`gitrepo.py`), so nothing is committed unfiltered.
    """
    entries = list(entries)
    result = list(NEUTRAL) + (list(OFFLINE) if offline else [])
    for driver in sorted(filter_drivers(entries)):
        result += [(f"filter.{driver}.{variable}", value) for variable, value in FILTER_OFF]
    trusted: dict[str, str] = {}
    for entry in entries:  # later entries win, as in git: system, then global
        key = entry.key.lower()
        if entry.scope in TRUSTED_SCOPES and key in TRUSTED_OR_DEFAULT and entry.value is not None:
            trusted[key] = entry.value
    result += [(key, trusted.get(key, default)) for key, default in TRUSTED_OR_DEFAULT.items()]
    return result


def filter_drivers(entries: Iterable[ConfigEntry]) -> frozenset[str]:
    """The names of the filter drivers `entries` define (`filter.<name>.<anything>`)."""
    return frozenset(
        found[0] for e in entries if (found := _subsection(e.key, "filter")) and found[0]
    )


def environment(
    pairs: Iterable[tuple[str, str]], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """GIT_CONFIG_* variables for `pairs`, after any the user's environment already has."""
    base = os.environ if base is None else base
    try:
        start = int(base.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        start = 0
    env: dict[str, str] = {}
    count = start
    for key, value in pairs:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    return env


def read_config(runner: git.Git) -> list[ConfigEntry]:
    """Every configuration entry git sees for `runner`'s directory, includes followed."""
    # `git config --list` itself runs nothing from the config; it runs offline regardless.
    out = runner.config(
        "-z",
        "--list",
        "--show-scope",
        env=environment(NEUTRAL + OFFLINE),
        strip_newline_in_stdout=False,
    )
    return parse_config_list(out)


def protect(runner: git.Git, offline: bool = True) -> frozenset[str]:
    """Make every later command of `runner` (a Repo's `.git`, or a `git.Git`) run safely;
    returns the filter drivers it turned off.

    The drivers are listed now, so call this right before the commands (the Git tier opens
    the repository afresh for each status and commit, and never while a restore writes into
    the work directory).
    """
    entries = read_config(runner)
    runner.update_environment(**environment(overrides(entries, offline)))
    return filter_drivers(entries)


def static_environment(offline: bool = True) -> dict[str, str]:
    """The overrides that need no look at a repository (for `git init`, before there is one)."""
    return environment(overrides([], offline))


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")


def is_local_url(url: str) -> bool:
    """Whether git reaches `url` as a repository on this machine (a path or file://), by git's
    own rule: a scheme URL is local only as file://; otherwise a ':' before any '/' makes it
    scp-like ssh (host:path), and anything else is a path."""
    if url.startswith("file://"):
        return True
    if _SCHEME.match(url) or _HELPER.match(url):  # `<transport>::<address>`: a remote helper
        return False
    colon, slash = url.find(":"), url.find("/")
    return colon < 0 or (0 <= slash < colon)
