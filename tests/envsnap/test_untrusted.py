"""A snapshot from a store written by someone else: nothing in it becomes an installer option, and
nothing is fetched and built from a VCS or URL source without the user's `allow_sources`.

Real restores into real virtual environments; the "attacker's index" and the URL origin are web
servers on 127.0.0.1 that log every request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.envsnap import (
    SourcesNotAllowedError,
    UnsafeSnapshotError,
    capture,
    diff,
    load_snapshot,
    restore,
    save_snapshot,
    validate_snapshot,
)
from jupyter_gpu_ws.envsnap.lock import requirement
from jupyter_gpu_ws.envsnap.snapshots import ENV, LATEST
from jupyter_gpu_ws.envsnap.validate import safe_text
from jupyter_gpu_ws.store import Store
from tests.envsnap.conftest import LOCAL, FileServer, serve_wheel_of, versions

Block = Callable[[], None]


def _with(snapshot: dict[str, Any], *extra: dict[str, Any]) -> dict[str, Any]:
    return {**snapshot, "packages": [*snapshot["packages"], *extra]}


def _injections(index: str) -> dict[str, dict[str, Any]]:
    """Entries that would put `--index-url=<index>` (or another option) on the installer's line."""
    return {
        "name is an option": {"name": f"--index-url={index}/simple", "version": "1.0"},
        "name carries a second line": {
            "name": f"six\n--index-url={index}/simple",
            "version": "1.0",
        },
        "version carries an option": {"name": "idna", "version": f"3.6 --index-url={index}/simple"},
        "URL carries an option": {
            "name": "idna",
            "version": "3.6",
            "origin": {
                "kind": "url",
                "url": f"https://example.org/idna.whl --index-url={index}/simple",
            },
        },
        "commit is an option": {
            "name": "idna",
            "version": "3.6",
            "origin": {
                "kind": "vcs",
                "vcs": "git",
                "url": "https://example.org/idna",
                "commit": f"--upload-pack={index}",
            },
        },
    }


@pytest.mark.parametrize("case", list(_injections("http://x")))
def test_an_injected_option_is_refused_and_nothing_is_installed(
    case: str,
    store_copy: Store,
    new_venv: Any,
    file_server: FileServer,
    no_index: Block,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_index()
    # uv ranks UV_DEFAULT_INDEX above an --index-url option; on a user's machine it is unset, and
    # an injected --index-url would win (as it does here on the base commit, which asks it).
    monkeypatch.delenv("UV_DEFAULT_INDEX")
    python = new_venv()
    before = versions(python)
    hostile = _injections(file_server.url)[case]
    snapshot = load_snapshot(store_copy)
    snapshot["packages"] = [p for p in snapshot["packages"] if p["name"] != "idna"] + [hostile]
    if (
        hostile["name"] != "idna"
    ):  # idna at a version the store has no wheel of: asked of "the index"
        snapshot["packages"].append({"name": "idna", "version": "3.6"})
    with pytest.raises(UnsafeSnapshotError) as err:
        restore(snapshot, store_copy, python, offline=False)
    assert "package #" in str(err.value) and "is refused" in str(err.value)
    assert "\n" not in str(err.value)  # the hostile text is escaped in the message
    assert file_server.requests == []  # the attacker's index was never asked
    assert versions(python) == before  # nothing at all was installed, not even six from the store


def test_a_url_origin_is_refused_without_allow_sources_naming_it(
    store_copy: Store, new_venv: Any, file_server: FileServer, no_index: Block
) -> None:
    no_index()
    snapshot = load_snapshot(store_copy)
    origin = serve_wheel_of(store_copy, LOCAL[0], file_server)
    for package in snapshot["packages"]:
        if package["name"] == LOCAL[0]:
            package["origin"] = origin
    python = new_venv()
    before = versions(python)
    with pytest.raises(SourcesNotAllowedError) as err:
        restore(snapshot, store_copy, python, offline=False)
    assert err.value.sources == [
        {
            "name": LOCAL[0],
            "version": LOCAL[1],
            "kind": "archive",
            "source": f"{origin['url']}#{origin['hash']}",
        }
    ]
    assert (
        LOCAL[0] in str(err.value) and origin["url"] in str(err.value) and "allow" in str(err.value)
    )
    assert file_server.requests == [] and versions(python) == before

    report = restore(snapshot, store_copy, python, offline=False, allow_sources=True)
    assert report.ok and report.sources == err.value.sources
    assert LOCAL[0] in report.installed and versions(python)[LOCAL[0]] == LOCAL[1]
    assert set(file_server.requests) == {
        f"/{origin['url'].rpartition('/')[2]}"
    }  # fetched from there


def test_a_vcs_origin_with_a_kept_wheel_needs_no_allowing(
    store_copy: Store, new_venv: Any, no_index: Block
) -> None:
    no_index()
    snapshot = load_snapshot(store_copy)
    for package in snapshot["packages"]:
        if package["name"] == LOCAL[0]:
            package["origin"] = {
                "kind": "vcs",
                "vcs": "git",
                "url": "https://example.org/local-pkg",
                "commit": "0123456789abcdef0123456789abcdef01234567",
            }
    report = restore(snapshot, store_copy, new_venv(), offline=False)
    assert report.ok and report.sources == [] and LOCAL[0] in report.installed


def test_a_hostile_latest_snapshot_is_refused_where_it_is_read(store_copy: Store) -> None:
    """`load_snapshot` checks what it reads, so diff, the panel and restore all refuse it."""
    root = Path(store_copy.backend.root) / store_copy.workspace / ".gpuws"  # type: ignore[attr-defined]
    latest = json.loads((root / LATEST).read_text())
    path = root / ENV / f"{latest['id']}.json"
    snapshot = json.loads(path.read_text())
    snapshot["packages"].append({"name": "\x1b]0;owned\x07" + "x" * 5000, "version": "1.0"})
    path.write_text(json.dumps(snapshot))
    with pytest.raises(UnsafeSnapshotError) as err:
        load_snapshot(store_copy)
    message = str(err.value)
    assert (
        latest["id"] in message
        and "\x1b" not in message
        and "\\x1b" in message
        and len(message) < 400
    )
    (root / LATEST).write_text('["not", "a", "pointer"]')
    with pytest.raises(UnsafeSnapshotError, match="does not name a snapshot"):
        load_snapshot(store_copy)
    (root / LATEST).write_text("{not json")
    with pytest.raises(UnsafeSnapshotError, match="not JSON"):
        load_snapshot(store_copy)


def test_a_new_snapshot_replaces_a_refused_latest_one_whatever_hash_it_claims(
    store_copy: Store, source_python: str
) -> None:
    root = Path(store_copy.backend.root) / store_copy.workspace / ".gpuws"  # type: ignore[attr-defined]
    current = capture(source_python, include_torch=False, machine=False)
    latest = json.loads((root / LATEST).read_text())
    path = root / ENV / f"{latest['id']}.json"
    # Their snapshot claims this environment's hash, so it would pass for "unchanged".
    hostile = {**json.loads(path.read_text()), "hash": current["hash"]}
    hostile["packages"].append({"name": "--index-url=http://127.0.0.1:9/simple", "version": "1.0"})
    path.write_text(json.dumps(hostile))
    (root / LATEST).write_text(json.dumps({"id": latest["id"], "hash": current["hash"]}))
    result = save_snapshot(store_copy, current)
    assert result.new and result.id != latest["id"]
    assert load_snapshot(store_copy)["id"] == result.id


def test_the_snapshots_own_id_field_is_never_trusted(store_copy: Store) -> None:
    root = Path(store_copy.backend.root) / store_copy.workspace / ".gpuws"  # type: ignore[attr-defined]
    latest = json.loads((root / LATEST).read_text())
    path = root / ENV / f"{latest['id']}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "id": "\x1b[2J" * 100}))
    assert load_snapshot(store_copy)["id"] == latest["id"]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"name": "Six", "version": "1.0"}, "normalized package name"),
        ({"name": "six_x", "version": "1.0"}, "normalized package name"),
        ({"name": "a" * 300, "version": "1.0"}, "normalized package name"),
        ({"name": "six", "version": "1.0\n"}, "PEP 440"),
        ({"name": "six", "version": "latest"}, "PEP 440"),
        ({"name": "six", "version": 1.0}, "PEP 440"),
        (
            {"name": "six", "version": "1.0", "origin": {"kind": "dir", "url": "file:///tmp/a b"}},
            "without spaces",
        ),
        (
            {
                "name": "six",
                "version": "1.0",
                "origin": {"kind": "url", "url": "ftp://example.org/six.whl"},
            },
            "URL of",
        ),
        (
            {
                "name": "six",
                "version": "1.0",
                "origin": {
                    "kind": "vcs",
                    "vcs": "cvs",
                    "url": "https://example.org/six",
                    "commit": "abc123",
                },
            },
            "version control",
        ),
        (
            {
                "name": "six",
                "version": "1.0",
                "origin": {
                    "kind": "archive",
                    "url": "https://example.org/six.whl",
                    "hash": "sha256=x --no-deps",
                },
            },
            "hash",
        ),
        ({"name": "six", "version": "1.0", "origin": {"kind": "plugin"}}, "origin kind"),
        ({"name": "six", "version": "1.0", "origin": "index"}, "not a record"),
    ],
)
def test_entries_no_installer_wrote_are_refused_with_a_reason(
    entry: dict[str, Any], reason: str
) -> None:
    with pytest.raises(UnsafeSnapshotError, match=reason):
        validate_snapshot({"packages": [entry]})


@pytest.mark.parametrize(
    "snapshot",
    [
        [],
        {"packages": "six"},
        {"packages": [{"name": "six", "version": "1.0"}] * 2},
        {"packages": [], "torch": {"version": "2.0", "arch_list": ["sm_80\x1b[2J"]}},
        {"packages": [], "python": {"version": "3.11" + "\u202e"}},
        {"packages": [], "captured_at": "yesterday"},
        {"packages": [], "wheels": {"six": "../../etc/passwd"}},
    ],
)
def test_malformed_snapshots_are_refused(snapshot: Any) -> None:
    with pytest.raises(UnsafeSnapshotError):
        validate_snapshot(snapshot)


def test_what_capture_records_passes(source_python: str) -> None:
    """Every origin kind that capture writes (index, local folder, editable) is accepted."""
    snapshot = capture(source_python, include_torch=False, machine=False)
    assert validate_snapshot(snapshot) is snapshot
    assert {(p.get("origin") or {}).get("kind") for p in snapshot["packages"]} >= {
        "index",
        "dir",
        "editable",
    }


def test_accepted_vcs_and_url_origins_make_one_requirement() -> None:
    vcs = {
        "name": "lib",
        "version": "1.0",
        "origin": {
            "kind": "vcs",
            "vcs": "git",
            "url": "ssh://git@host/lib.git",
            "commit": "0123456789abcdef0123456789abcdef01234567",
        },
    }
    url = {
        "name": "lib",
        "version": "1.0",
        "origin": {
            "kind": "archive",
            "url": "https://host/lib-1.0.tar.gz",
            "hash": "sha256=" + "ab" * 32,
        },
    }
    for package in (vcs, url):
        validate_snapshot({"packages": [package]})
    assert (
        requirement(vcs)
        == "lib @ git+ssh://git@host/lib.git@0123456789abcdef0123456789abcdef01234567"
    )


def test_a_diff_of_a_checked_snapshot_shows_only_checked_names(source_python: str) -> None:
    current = capture(source_python, include_torch=False, machine=False)
    snapshot = validate_snapshot(
        _with({"packages": []}, {"name": "zz-long-" + "x" * 150, "version": "1.0"})
    )
    changes = diff(current, snapshot)
    assert [item["name"] for item in changes.removed] == ["zz-long-" + "x" * 150]


def test_safe_text_escapes_and_cuts() -> None:
    assert safe_text("a\nb\x1b[2J\u202e") == "a\\nb\\x1b[2J\\u202e"
    assert safe_text("x" * 100, 10) == "x" * 9 + "…"
