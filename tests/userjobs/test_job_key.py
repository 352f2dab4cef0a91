"""The job key is a key or nothing (trust.job_key): made whole or not at all, and anything that
is not a key (empty, short, not a regular file, readable by others) refused in one line that
says how to fix it, never used to sign or to check a record."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from jupyter_gpu_ws.userjobs import trust
from tests.fusefs import MountedDrive, mounted_drive  # noqa: F401 - a fixture

GOOD = "0123456789abcdef" * 4


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the key file goes, no key in the environment."""
    monkeypatch.delenv(trust.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = tmp_path / "config" / "jupyter_gpu_ws" / "job-key"
    path.parent.mkdir(parents=True)
    return path


def refusal() -> str:
    with pytest.raises(trust.JobKeyError) as caught:
        trust.job_key()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_new_key_is_made_whole_readable_by_its_owner_alone(key_file: Path) -> None:
    key = trust.job_key()
    assert len(key) == 64 and key_file.read_bytes().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert trust.job_key() == key
    assert [p.name for p in key_file.parent.iterdir()] == ["job-key"]  # no temporary file left


@pytest.mark.parametrize(
    ("value", "words"), [("", "is empty"), ("   ", "is empty"), ("short", "is 5 characters long")]
)
def test_an_environment_key_that_is_not_one_is_refused(
    key_file: Path, monkeypatch: pytest.MonkeyPatch, value: str, words: str
) -> None:
    monkeypatch.setenv(trust.KEY_ENV, value)
    message = refusal()
    assert message.startswith(f"{trust.KEY_ENV} {words}") and "at least 32" in message
    assert "secrets.token_hex(32)" in message  # how to make one
    assert not key_file.exists()  # not a reason to make a file instead


def test_an_environment_key_comes_before_the_file(
    key_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(trust.KEY_ENV, GOOD)
    assert trust.job_key() == GOOD.encode()
    assert not key_file.exists()


def _make(kind: str, path: Path, tmp_path: Path) -> None:
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "short":
        path.write_bytes(b"x" * 31 + b"\n")
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nothing-here")
    elif kind == "looping":
        path.symlink_to(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "readable":
        path.write_text(GOOD)
        path.chmod(0o644)
    elif kind == "huge":
        path.write_bytes(b"k" * 5000)
    if kind in ("empty", "short", "huge"):
        path.chmod(0o600)


@pytest.mark.parametrize(
    ("kind", "words", "fix"),
    [
        ("empty", "is empty; a job key is at least 32", "remove it"),
        ("short", "holds 31 bytes; a job key is at least 32", "remove it"),
        ("dangling", "is a symbolic link to nothing", "remove it"),
        ("looping", "is a symbolic link that loops", "remove it"),
        ("folder", "is a folder, not a file", "remove it"),
        ("device", "is a device, not a file", "remove it"),
        ("fifo", "is a named pipe (FIFO), not a file", "remove it"),
        ("socket", "cannot be read", "remove it"),
        ("readable", "can be read by others (mode 644)", "chmod 600"),
        ("huge", "is larger than 4096 bytes", "remove it"),
    ],
)
def test_a_key_file_that_is_not_a_key_is_refused_in_one_line_with_the_fix(
    key_file: Path, tmp_path: Path, kind: str, words: str, fix: str
) -> None:
    _make(kind, key_file, tmp_path)
    message = refusal()
    assert message.startswith(f"The job key {key_file} {words}"), message
    assert fix in message
    if fix == "remove it":
        assert trust.KEY_ENV in message
    if kind in ("empty", "short", "readable", "huge"):
        assert key_file.is_file()  # refused, never replaced behind the user's back


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_key_file_of_another_user_is_refused(key_file: Path) -> None:
    key_file.write_text(GOOD)
    key_file.chmod(0o600)
    os.chown(key_file, 65534, 65534)
    assert "belongs to another user" in refusal()


def test_a_key_made_on_a_full_disk_is_an_error_then_a_whole_key_once_there_is_room(
    mounted_drive: MountedDrive,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(trust.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", mounted_drive.mountpoint)
    mounted_drive.set_delays(metadata=0, open=0, data=0)
    path = Path(mounted_drive.mountpoint) / "jupyter_gpu_ws" / "job-key"
    # The disk's blocks ran out: an empty file can still be made, its bytes cannot be written.
    mounted_drive.fault("no-blocks")
    message = refusal()
    assert message.startswith(f"Cannot make the job key {path}: No space left on device")
    assert trust.KEY_ENV in message
    assert not path.exists()  # never an empty key that a later call would sign with
    assert refusal() == message  # and again, not a key made of nothing the second time
    mounted_drive.heal()
    key = trust.job_key()
    assert len(key) == 64 and path.read_bytes().strip() == key
    assert sorted(p.name for p in path.parent.iterdir()) == ["job-key"]
