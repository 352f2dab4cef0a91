"""The encrypted store: round trips, tampering, keys and names, over real local and S3 stores."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from jupyter_gpu_ws.store.crypto import Encryption, WrongKeyError, keys
from jupyter_gpu_ws.store.crypto import format as fmt
from jupyter_gpu_ws.sync import StoreConfigError, SyncEngine, open_backend
from tests.sync.conftest import tree_files, write

PASSPHRASE = "correct horse battery staple"


@pytest.fixture
def crypt_engine(make_engine: Callable[..., SyncEngine]) -> Callable[..., SyncEngine]:
    def make(
        workdir: Path, passphrase: str = PASSPHRASE, names: bool = False, **options: Any
    ) -> SyncEngine:
        return make_engine(workdir, encryption=Encryption(passphrase, names), **options)

    return make


def stored_objects(store_dir: Path, under: str = "ws/files") -> dict[str, bytes]:
    return tree_files(store_dir / under)


# -- the format -------------------------------------------------------------------------------


def test_aes_gcm_matches_the_nist_vector() -> None:
    # NIST's GCM specification, test case 16 (AES-256, 96-bit IV, with associated data).
    key = bytes.fromhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
    plain = bytes.fromhex(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532f"
        "cf0e2449a6b525b16aedf5aa0de657ba637b39"
    )
    sealed = AESGCM(key).encrypt(
        bytes.fromhex("cafebabefacedbaddecaf888"),
        plain,
        bytes.fromhex("feedfacedeadbeeffeedfacedeadbeefabaddad2"),
    )
    assert sealed.hex() == (
        "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b0"
        "8b1056828838c5f61e6393ba7a0abcc9f662"
        "76fc6ece0f4e1768cddf8853bb2d551b"
    )


def test_the_stored_format_does_not_drift() -> None:
    # A fixed master key, salt and nonce prefix: the bytes of format 1, as committed.
    header = fmt.Header(bytes(range(100, 116)), bytes(range(200, 207)))
    stored = fmt.encrypt_bytes(bytes(range(32)), b"file:notes/a.txt", b"gpuws known answer", header)
    assert stored.hex() == (
        "4757534501146465666768696a6b6c6d6e6f70717273c8c9cacbcccdce03294d7c76fd3df39fcd26f3"
        "61298a9c5a24030e2f90b9c756700ea4b78dfac209b1"
    )
    assert fmt.decrypt_bytes(bytes(range(32)), b"file:notes/a.txt", stored) == b"gpuws known answer"


@pytest.mark.parametrize(
    "size", [0, 1, fmt.SEGMENT - 1, fmt.SEGMENT, fmt.SEGMENT + 1, 3 * fmt.SEGMENT]
)
def test_stored_and_plain_sizes_map_both_ways(size: int) -> None:
    stored = fmt.encrypt_bytes(os.urandom(32), b"x", os.urandom(size))
    assert len(stored) == fmt.encrypted_size(size)
    assert fmt.plain_size(len(stored)) == size


@pytest.mark.parametrize(
    "size", [0, 1, fmt.SEGMENT - 1, fmt.SEGMENT, fmt.SEGMENT + 1, 3 * fmt.SEGMENT + 5]
)
def test_a_file_encrypted_from_descriptor_to_descriptor_is_the_same_object(
    tmp_path: Path, size: int
) -> None:
    # The large-file path (positional reads and writes, straight into the store's temporary
    # file) writes byte for byte what the small-object path writes, and reports each range.
    master, header, plain = os.urandom(32), fmt.Header.new(), os.urandom(size)
    (tmp_path / "src").write_bytes(plain)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT)
    ranges: list[tuple[int, int]] = []
    seen: list[int] = []
    try:
        read = fmt.encrypt_file(
            master,
            b"file:a",
            src,
            dst,
            size,
            seen.append,
            lambda at, n: ranges.append((at, n)),
            header,
        )
    finally:
        os.close(src)
        os.close(dst)
    stored = (tmp_path / "dst").read_bytes()
    assert read == size and sum(seen) == size
    assert stored == fmt.encrypt_bytes(master, b"file:a", plain, header)
    assert ranges[0][0] == 0 and all(
        a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:], strict=False)
    )
    assert ranges[-1][0] + ranges[-1][1] == len(stored)  # every stored byte reported, in order
    assert fmt.decrypt_bytes(master, b"file:a", stored) == plain


@pytest.mark.parametrize("change", ["shorter", "longer"])
def test_a_file_that_changes_size_while_encrypted_is_not_taken_for_the_file(
    tmp_path: Path, change: str
) -> None:
    size = 3 * fmt.SEGMENT
    (tmp_path / "src").write_bytes(os.urandom(size))
    with open(tmp_path / "src", "r+b") as f:
        if change == "shorter":
            f.truncate(size - fmt.SEGMENT - 10)
        else:
            f.seek(0, os.SEEK_END)
            f.write(b"more")
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT)
    try:
        read = fmt.encrypt_file(
            os.urandom(32), b"file:a", src, dst, size
        )  # the size measured before
    finally:
        os.close(src)
        os.close(dst)
    assert read != size


# -- round trips ------------------------------------------------------------------------------


def test_files_round_trip_encrypted_through_a_local_store(
    tmp_path: Path, workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    small = b"secret notebook " * 100
    large = os.urandom(3 * fmt.SEGMENT + 12345)
    write(workdir, "notes/secret.ipynb", small)
    write(workdir, "data/big.bin", large)
    write(workdir, "empty.txt", b"")
    engine = crypt_engine(workdir)
    assert engine.sync().ok
    stored = stored_objects(store_dir)
    assert set(stored) == {
        "notes/secret.ipynb",
        "data/big.bin",
        "empty.txt",
    }  # names plain by default
    assert b"secret notebook" not in stored["notes/secret.ipynb"]
    assert stored["data/big.bin"][:4] == fmt.MAGIC and large[:4096] not in stored["data/big.bin"]
    assert engine.status()["encryption"] == {"cipher": "AES-256-GCM", "names": False}
    engine.close()

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    other = crypt_engine(fresh, state="state2")
    report = other.restore()
    assert not report.errors, report
    assert tree_files(fresh) == {
        "notes/secret.ipynb": small,
        "data/big.bin": large,
        "empty.txt": b"",
    }


def test_a_local_store_gets_the_encrypted_file_straight_not_through_a_scratch_copy(
    tmp_path: Path, workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    # The scratch folder does not exist: a put that went through a scratch copy would fail.
    large = os.urandom(2 * fmt.SEGMENT + 3)
    write(workdir, "data/big.bin", large)
    engine = crypt_engine(workdir)
    engine.backend.scratch = str(tmp_path / "no-such-folder")
    assert engine.sync().ok
    stored = stored_objects(store_dir)["data/big.bin"]
    assert len(stored) == fmt.encrypted_size(len(large))
    assert fmt.decrypt_bytes(engine.backend._master, b"file:data/big.bin", stored) == large
    assert not [
        p for p in store_dir.rglob("*") if p.name.endswith(".gpuws-part")
    ]  # no temporary name left
    engine.close()


def test_a_file_changed_during_an_encrypted_put_to_a_local_store_is_never_made_visible(
    tmp_path: Path, workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    from jupyter_gpu_ws.store.backend import SourceChangedError

    write(workdir, "data/big.bin", os.urandom(2 * fmt.SEGMENT))
    engine = crypt_engine(workdir)
    path = str(workdir / "data/big.bin")

    def check_misses_it() -> bool:  # only the size read back can tell
        return True

    original = fmt.encrypt_file

    def encrypt_then_grow(*args: Any, **kwargs: Any) -> int:
        with open(path, "ab") as f:
            f.write(b"appended meanwhile")
        return original(*args, **kwargs)

    fmt.encrypt_file = encrypt_then_grow  # type: ignore[assignment]
    try:
        with pytest.raises(SourceChangedError):
            engine.backend.put(path, "ws/files/data/big.bin", None, check_misses_it)
    finally:
        fmt.encrypt_file = original  # type: ignore[assignment]
    assert not (store_dir / "ws/files/data/big.bin").exists()
    assert not [p for p in store_dir.rglob("*") if p.name.endswith(".gpuws-part")]
    engine.close()


def test_a_large_file_restores_in_parts_through_an_s3_store(
    tmp_path: Path, workdir: Path, s3_url: str, crypt_engine: Callable[..., SyncEngine]
) -> None:
    from jupyter_gpu_ws.sync.restore import PARTS_FROM

    large = os.urandom(PARTS_FROM + 3 * fmt.SEGMENT + 7)  # multipart upload, ranged parts back
    write(workdir, "model.pt", large)
    write(workdir, "train.py", "print('hi')\n")
    engine = crypt_engine(workdir, store_url=s3_url)
    assert engine.sync().ok
    listing = {f.key: f for f in engine.backend.inner.list("ws/files")}
    assert listing["ws/files/model.pt"].size == fmt.encrypted_size(len(large))
    engine.close()

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    report = crypt_engine(fresh, store_url=s3_url, state="state2").restore()
    assert not report.errors, report
    assert (fresh / "model.pt").read_bytes() == large
    assert (fresh / "train.py").read_text() == "print('hi')\n"


def test_versions_and_conflict_copies_are_encrypted(
    tmp_path: Path, workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    write(workdir, "a.txt", "first secret")
    engine = crypt_engine(workdir)
    assert engine.sync().ok
    write(workdir, "a.txt", "second secret")
    assert engine.sync().ok
    kept = tree_files(store_dir / "ws/.gpuws/versions")
    assert len(kept) == 1 and b"secret" not in next(iter(kept.values()))
    [version] = engine.versions("a.txt")
    assert version["size"] == len("first secret")
    target = engine.restore_version("a.txt", version["version"])
    assert (workdir / target).read_text() == "first secret"
    engine.close()

    # A fresh machine with its own a.txt: the store's copy lands beside it, decrypted.
    fresh = tmp_path / "fresh"
    write(fresh, "a.txt", "local edit")
    report = crypt_engine(fresh, state="state2").restore()
    [conflict] = report.conflicts
    assert (fresh / conflict).read_text() == "second secret"
    assert (fresh / "a.txt").read_text() == "local edit"


# -- tampering --------------------------------------------------------------------------------


def _sync_two(workdir: Path, crypt_engine: Callable[..., SyncEngine]) -> None:
    write(workdir, "big.bin", os.urandom(3 * fmt.SEGMENT))
    write(workdir, "other.bin", os.urandom(3 * fmt.SEGMENT))
    engine = crypt_engine(workdir)
    assert engine.sync().ok
    engine.close()


def _flip(data: bytes) -> bytes:
    at = fmt.HEADER + fmt.SEGMENT // 2
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def _truncate(data: bytes) -> bytes:
    return data[: fmt.HEADER + 2 * (fmt.SEGMENT + fmt.TAG)]  # cut at a segment boundary


def _reorder(data: bytes) -> bytes:
    seg = fmt.SEGMENT + fmt.TAG
    head, s0, s1, rest = (
        data[: fmt.HEADER],
        data[fmt.HEADER : fmt.HEADER + seg],
        data[fmt.HEADER + seg : fmt.HEADER + 2 * seg],
        data[fmt.HEADER + 2 * seg :],
    )
    return head + s1 + s0 + rest


@pytest.mark.parametrize("tamper", ["flip", "truncate", "reorder", "swap"])
def test_a_tampered_object_is_an_error_naming_the_file_and_nothing_is_written(
    tamper: str,
    tmp_path: Path,
    workdir: Path,
    store_dir: Path,
    crypt_engine: Callable[..., SyncEngine],
) -> None:
    _sync_two(workdir, crypt_engine)
    target = store_dir / "ws/files/big.bin"
    data = target.read_bytes()
    if tamper == "swap":
        data = (
            store_dir / "ws/files/other.bin"
        ).read_bytes()  # a whole valid object of another file
    else:
        data = {"flip": _flip, "truncate": _truncate, "reorder": _reorder}[tamper](data)
    target.write_bytes(data)

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    report = crypt_engine(fresh, state="state2").restore()
    assert any("big.bin" in e and "failed authentication" in e for e in report.errors), (
        report.errors
    )
    assert not (fresh / "big.bin").exists()
    assert [p for p in os.listdir(fresh) if p != ".gpuws"] == ["other.bin"]


# -- keys -------------------------------------------------------------------------------------


def test_a_wrong_passphrase_is_one_error_and_changes_nothing(
    tmp_path: Path, workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    write(workdir, "a.txt", "x")
    crypt_engine(workdir).close()  # the engine syncs nothing until asked
    engine = crypt_engine(workdir)
    assert engine.sync().ok
    engine.close()
    before = tree_files(store_dir)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with pytest.raises(WrongKeyError, match="Wrong passphrase"):
        crypt_engine(fresh, passphrase="not it", state="state2")
    assert tree_files(store_dir) == before
    assert os.listdir(fresh) == []


def test_a_passphrase_change_keeps_every_object_readable(
    tmp_path: Path, workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    write(workdir, "a.txt", "one")
    write(workdir, "b/c.txt", "two")
    engine = crypt_engine(workdir)
    assert engine.sync().ok
    engine.close()
    objects = stored_objects(store_dir)
    backend = open_backend(str(store_dir))
    keys.change(backend, "ws", PASSPHRASE, "a new passphrase")
    assert stored_objects(store_dir) == objects  # no data rewritten
    with pytest.raises(WrongKeyError):
        keys.unlock(backend, "ws", PASSPHRASE)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    report = crypt_engine(fresh, passphrase="a new passphrase", state="state2").restore()
    assert not report.errors
    assert tree_files(fresh) == {"a.txt": b"one", "b/c.txt": b"two"}


def test_an_encrypted_workspace_refuses_a_plain_writer_and_a_plain_one_an_encrypted_writer(
    workdir: Path,
    store_dir: Path,
    make_engine: Callable[..., SyncEngine],
    crypt_engine: Callable[..., SyncEngine],
) -> None:
    write(workdir, "a.txt", "x")
    assert crypt_engine(workdir, workspace="secret").sync().ok
    with pytest.raises(StoreConfigError, match="is encrypted"):
        make_engine(workdir, workspace="secret", state="s2")
    assert make_engine(workdir, workspace="plain", state="s3").sync().ok
    with pytest.raises(StoreConfigError, match="holds unencrypted files"):
        crypt_engine(workdir, workspace="plain", state="s4")


def test_key_files_hold_no_key_in_clear(
    workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    engine = crypt_engine(workdir)
    master = engine.backend._master
    engine.close()
    for data in tree_files(store_dir / "ws/.gpuws").values():
        assert (
            master not in data
            and master.hex().encode() not in data
            and PASSPHRASE.encode() not in data
        )


# -- names ------------------------------------------------------------------------------------


def test_encrypted_names_leave_no_plaintext_segment_in_the_listing(
    tmp_path: Path, workdir: Path, store_dir: Path, crypt_engine: Callable[..., SyncEngine]
) -> None:
    write(workdir, "projects/secret-plan/notes.md", "a")
    write(workdir, "projects/secret-plan/model.pt", "b")
    engine = crypt_engine(workdir, names=True)
    assert engine.sync().ok
    write(workdir, "projects/secret-plan/notes.md", "a2")
    assert engine.sync().ok  # keeps a version under a sealed name
    engine.close()
    stored = [p for p in tree_files(store_dir / "ws").keys()]
    for word in ("projects", "secret", "plan", "notes", "model"):
        assert not any(word in p for p in stored), stored
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    report = crypt_engine(fresh, names=True, state="state2").restore()
    assert not report.errors
    assert tree_files(fresh) == {
        "projects/secret-plan/notes.md": b"a2",
        "projects/secret-plan/model.pt": b"b",
    }


def _fills_the_disk(
    master: bytes, binding: bytes, src: int, dst: int, size: int, *args: Any, **kwargs: Any
) -> int:
    os.write(dst, b"\0" * 4096)  # some of the ciphertext lands, then the disk is full
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_full_disk_under_encryption_is_a_clear_error_nothing_is_half_written_and_it_heals(
    workdir: Path, store_dir: Path, s3_url: str, crypt_engine: Callable[..., SyncEngine], store: str
) -> None:
    # To a local folder the file is encrypted straight into the store's disk; to S3 into a
    # scratch copy on this machine's disk. Either disk filling up is said as such.
    large = os.urandom(2 * fmt.SEGMENT + 5)
    write(workdir, "data/big.bin", large)
    write(workdir, "notes.md", b"my notes")
    engine = crypt_engine(workdir, **({"store_url": s3_url} if store == "s3" else {}))
    original, fmt.encrypt_file = fmt.encrypt_file, _fills_the_disk  # type: ignore[assignment]
    try:
        report = engine.sync()
    finally:
        fmt.encrypt_file = original
    said = (
        "The store's disk is full"
        if store == "local"
        else "This machine's disk is full: no room in"
    )
    assert report.errors and said in report.errors[0] and report.uploaded == []
    assert engine.status()["state"] == "error" and said in (engine.status()["last_error"] or "")
    assert engine.pending()[0] == 2
    first = engine.pending_list(5)["files"][0]
    assert first["state"] == "failing" and said in first["error"]
    assert (
        engine.index.get("notes.md") is None and engine.index.get("data/big.bin") is None
    )  # nothing recorded
    if store == "local":
        assert not stored_objects(store_dir)  # no object, and no temporary name left behind
        assert not [p for p in store_dir.rglob("*") if p.name.endswith(".gpuws-part")]
    else:
        assert not engine.store.list_files()

    assert engine.sync().ok  # the disk has room again: the next pass sends both
    assert engine.pending() == (0, 0)
    got = workdir.parent / "fresh"
    got.mkdir()
    other = crypt_engine(
        got, state="state-fresh", **({"store_url": s3_url} if store == "s3" else {})
    )
    assert not other.restore().errors
    assert tree_files(got) == {"data/big.bin": large, "notes.md": b"my notes"}
