"""`jupyter gpuws` with an encrypted store: sync and restore with --encrypt, decrypt, key."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpu_ws.cli import main
from tests.sync.conftest import tree_files, write


@pytest.fixture
def synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    work, store = tmp_path / "work", tmp_path / "store"
    write(work, "notes/plan.md", "the secret plan")
    write(work, "model.bin", b"\x00\x01" * 3_000_000)
    monkeypatch.setenv("GPUWS_PASSPHRASE", "first passphrase")
    assert (
        main(
            [
                "sync",
                "--once",
                "--encrypt",
                "--workdir",
                str(work),
                "--store",
                str(store),
                "--workspace",
                "ws",
                "--state-dir",
                str(tmp_path / "state"),
            ]
        )
        == 0
    )
    assert b"the secret plan" not in (store / "ws/files/notes/plan.md").read_bytes()
    return work, store


def test_decrypt_writes_the_files_without_a_server(
    tmp_path: Path, synced: tuple[Path, Path]
) -> None:
    work, store = synced
    out = tmp_path / "out"
    assert main(["decrypt", "--store", str(store), "--workspace", "ws", "--to", str(out)]) == 0
    assert tree_files(out) == {
        k: v for k, v in tree_files(work).items() if not k.startswith(".gpuws")
    }


def test_decrypt_of_some_paths_only(tmp_path: Path, synced: tuple[Path, Path]) -> None:
    _, store = synced
    out = tmp_path / "out"
    assert (
        main(["decrypt", "--store", str(store), "--workspace", "ws", "--to", str(out), "notes"])
        == 0
    )
    assert tree_files(out) == {"notes/plan.md": b"the secret plan"}


def test_restore_with_a_wrong_passphrase_is_one_line_and_writes_nothing(
    tmp_path: Path,
    synced: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, store = synced
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.setenv("GPUWS_PASSPHRASE", "not it")
    assert (
        main(
            [
                "restore",
                "--encrypt",
                "--workdir",
                str(fresh),
                "--store",
                str(store),
                "--workspace",
                "ws",
                "--state-dir",
                str(tmp_path / "state2"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("jupyter gpuws: error: Wrong passphrase")
    assert "not it" not in "\n".join(err)
    assert list(fresh.iterdir()) == []


def test_restore_without_encrypt_refuses_an_encrypted_workspace(
    tmp_path: Path, synced: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, store = synced
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert (
        main(
            [
                "restore",
                "--workdir",
                str(fresh),
                "--store",
                str(store),
                "--workspace",
                "ws",
                "--state-dir",
                str(tmp_path / "state2"),
            ]
        )
        == 1
    )
    assert "is encrypted" in capsys.readouterr().err
    assert list(fresh.iterdir()) == []


def test_key_change_replaces_the_passphrase(
    tmp_path: Path, synced: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    work, store = synced
    monkeypatch.setenv("GPUWS_NEW_PASSPHRASE", "second passphrase")
    assert main(["key", "change", "--store", str(store), "--workspace", "ws"]) == 0
    out = tmp_path / "out"
    assert (
        main(["decrypt", "--store", str(store), "--workspace", "ws", "--to", str(out)]) == 1
    )  # the old one
    assert not out.exists() or tree_files(out) == {}
    key_file = tmp_path / "pass.txt"
    key_file.write_text("second passphrase\n")
    assert (
        main(
            [
                "decrypt",
                "--store",
                str(store),
                "--workspace",
                "ws",
                "--to",
                str(out),
                "--key-file",
                str(key_file),
            ]
        )
        == 0
    )
    assert tree_files(out)["notes/plan.md"] == b"the secret plan"


def test_key_add_and_remove(
    tmp_path: Path,
    synced: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, store = synced
    monkeypatch.setenv("GPUWS_NEW_PASSPHRASE", "colleague's passphrase")
    assert main(["key", "add", "--store", str(store), "--workspace", "ws"]) == 0
    new_id = capsys.readouterr().out.split()[1]
    ids = [p.stem for p in (store / "ws/.gpuws/keys").iterdir()]
    assert new_id in ids and len(ids) == 2
    old_id = next(i for i in ids if i != new_id)
    assert main(["key", "remove", old_id, "--store", str(store), "--workspace", "ws"]) == 0
    monkeypatch.setenv("GPUWS_PASSPHRASE", "colleague's passphrase")
    assert (
        main(["key", "remove", new_id, "--store", str(store), "--workspace", "ws"]) == 1
    )  # never the last
    out = tmp_path / "out"
    assert (
        main(["decrypt", "--store", str(store), "--workspace", "ws", "--to", str(out), "notes"])
        == 0
    )
