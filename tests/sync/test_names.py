"""Any name Linux allows is synced and restored byte for byte, or is that one file's problem.

Names are made as bytes (os.open on bytes paths), as a program that writes any bytes would, and
compared as bytes (os.listdir on a bytes path) after a round trip through the store onto a new
machine: another work directory and another state folder.
"""

from __future__ import annotations

import errno
import itertools
import os
import random
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest

from jupyter_gpu_ws.store.crypto import Encryption
from jupyter_gpu_ws.store.names import ESCAPE, decode, encode, refused_by_store, shown
from jupyter_gpu_ws.sync import SyncEngine
from jupyter_gpu_ws.sync.index import Record, SyncIndex
from jupyter_gpu_ws.sync.service import SyncService
from tests.sync.test_s3 import bucket_keys
from tests.waiting import until

try:
    from hypothesis import given, settings, strategies
except ImportError:  # the property test then runs as a seeded random loop
    given = None

Make = Callable[..., SyncEngine]
MARK = ESCAPE.encode()  # the escape mark's own bytes (U+201B in UTF-8)
PASSPHRASE = "correct horse battery staple"


def every_high_byte() -> list[bytes]:
    """One name per byte from 0x80 to 0xFF: none of them is UTF-8 on its own."""
    return [b"f-" + bytes([b]) + b".txt" for b in range(0x80, 0x100)]


def awkward_names() -> list[bytes]:
    """Newlines, tabs, an escape sequence written literally, a folder whose name is not UTF-8, and
    what URLs and globs give a meaning to (an S3 key is sent in a URL, fsspec globs some paths)."""
    return [
        b"line\nbreak.txt",
        b"\n",
        b"tab\there.txt",
        b"esc\x1bape",
        MARK + b"41.txt",
        MARK + MARK + b".txt",
        MARK + b"E9.txt",
        b"caf\xc3\xa9.txt",
        b"\xff\xfe/inside\xe9.txt",
        b"deep\xe9/er\n/most\x80.bin",
        b"plain.txt",
        b"plus+and space %41.txt",
        b"glob*[1]?.txt",
        b"query?a=1&b=#frag",
        b"ctl\x01\x7f.txt",
    ]


def make_files(root: Path, names: list[bytes]) -> dict[bytes, bytes]:
    """Each name (a path relative to `root`) as a file holding its own name: path → content."""
    made = {}
    base = os.fsencode(root)
    for name in names:
        path = base + b"/" + name
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"content of " + name)
        os.close(fd)
        made[name] = b"content of " + name
    return made


def files_as_bytes(root: Path) -> dict[bytes, bytes]:
    """Every file under `root`, by its path in bytes, as os.listdir on bytes paths finds them."""
    out = {}
    base = os.fsencode(root)
    pending = [b""]
    while pending:
        folder = pending.pop()
        for name in os.listdir(base + b"/" + folder if folder else base):
            rel = folder + b"/" + name if folder else name
            path = base + b"/" + rel
            if os.path.isdir(path):
                pending.append(rel)
            else:
                with open(path, "rb") as f:
                    out[rel] = f.read()
    return out


def saved(engine: SyncEngine) -> None:
    """The status says everything is in the store: nothing pending, no problem, no error."""
    status = engine.status()
    assert status["state"] == "idle", status["last_error"]
    assert (status["pending_files"], status["problem_files"], status["last_error"]) == (0, 0, None)


# -- the codec ------------------------------------------------------------------------------------


def test_every_byte_from_0x80_to_0xff_becomes_an_escape_and_comes_back() -> None:
    for name in every_high_byte():
        rel = os.fsdecode(name)
        key = encode(rel)
        assert key == f"f-{ESCAPE}{name[2]:02X}.txt"
        key.encode("utf-8")  # valid UTF-8: SQLite, S3 and JSON take it
        assert os.fsencode(decode(key)) == name


def test_every_neighbour_of_a_literal_escape_mark_comes_back() -> None:
    pieces = [
        b"",
        MARK,
        b"\xe9",
        b"\x80",
        b"\xff",
        b"E9",
        b"80",
        b"7F",
        b"e9",
        b"8",
        b"F",
        b"FF",
        b"8G",
        b"x",
        b"/",
        b"\xc3\xa9",
        b"\xe2\x80",
    ]
    for parts in itertools.product(pieces, repeat=3):
        for name in (MARK.join(parts), b"".join(parts) + MARK):
            key = encode(os.fsdecode(name))
            key.encode("utf-8")
            assert os.fsencode(decode(key)) == name, (name, key)


def test_names_without_escape_sequences_are_their_own_key_text() -> None:
    # Stores and records written before the codec read the same.
    for rel in [
        "notebooks/train.ipynb",
        "caf\u00e9/\u00fcber.txt",
        "\u65e5\u672c/\u8a9e",
        f"{ESCAPE}41.txt",
        f"{ESCAPE}e9.txt",
        f"a{ESCAPE}",
    ]:
        assert encode(rel) == rel
        assert decode(rel) == rel


def test_control_characters_are_escaped_as_object_stores_refuse_them_in_a_key() -> None:
    for rel, key in [
        ("line\nbreak", f"line{ESCAPE}0Abreak"),
        ("tab\there", f"tab{ESCAPE}09here"),
        ("del\x7f", f"del{ESCAPE}7F"),
        (f"{ESCAPE}7F", f"{ESCAPE}{ESCAPE}7F"),
    ]:
        assert encode(rel) == key and decode(key) == rel


def test_a_folder_and_its_files_keep_their_key_text_apart() -> None:
    # The record finds a folder's files by a range of key text: "folder/" then anything.
    folders = [b"d", b"d\xe9", b"d" + MARK, b"\xff" + MARK]
    for folder, name in itertools.product(folders, [b"x", MARK + b"E9", b"\xe9"]):
        whole = encode(os.fsdecode(folder + b"/" + name))
        assert whole == encode(os.fsdecode(folder)) + "/" + encode(os.fsdecode(name))


def round_trips(name: bytes) -> None:
    rel = os.fsdecode(name)
    key = encode(rel)
    key.encode("utf-8")
    assert decode(key) == rel
    assert os.fsencode(decode(key)) == name


if given is not None:
    # Bytes weighted towards what makes escapes: the mark's bytes, hex digits, bytes >= 0x80.
    _alphabet = strategies.sampled_from(
        [
            MARK,
            b"\xe2",
            b"\x80",
            b"\x9b",
            b"\xe9",
            b"\xff",
            b"8",
            b"E",
            b"F",
            b"0",
            b"a",
            b"/",
            b"\n",
            b"\xc3\xa9",
        ]
    ) | strategies.binary(min_size=1, max_size=1)

    @settings(max_examples=3000, deadline=None)
    @given(strategies.lists(_alphabet, max_size=16).map(b"".join))
    def test_any_byte_string_comes_back_from_its_key_text(name: bytes) -> None:
        round_trips(name)
else:

    def test_any_byte_string_comes_back_from_its_key_text() -> None:
        rng = random.Random(20261201)
        alphabet = [bytes([b]) for b in range(256)] + [MARK] * 16 + [b"E9", b"8", b"F"]
        for _ in range(20000):
            round_trips(b"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 16))))


def test_shown_names_are_for_people_and_always_encodable() -> None:
    assert shown(os.fsdecode(b"f-\xe9.txt")) == "f-\\xe9.txt"
    assert shown("line\nbreak\tand\x1bescape\x7f") == "line\\nbreak\\tand\\x1bescape\\x7f"
    assert shown("caf\u00e9 \u201b41.txt") == "caf\u00e9 \u201b41.txt"
    assert shown("\ud800") == "\\ud800"  # text that never was a name does not raise either
    # Marks and overrides of the text's direction: "evil\u202egnp.py" would show as "evilyp.png".
    assert shown("evil\u202egnp.py") == "evil\\u202egnp.py"
    assert shown("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069") == (
        "\\u061c\\u200e\\u200f\\u202a\\u202b\\u202c\\u202d\\u2066\\u2067\\u2068\\u2069"
    )
    assert shown("\x9b31m C1") == "\\x9b31m C1"
    for name in every_high_byte() + awkward_names():
        shown(os.fsdecode(name)).encode("utf-8")


def test_a_store_refusing_a_name_is_told_apart_from_a_store_failing() -> None:
    assert refused_by_store(
        OSError(errno.EILSEQ, "Invalid or incomplete multibyte or wide character", "x")
    )
    assert refused_by_store(OSError(errno.ENAMETOOLONG, "File name too long", "x"))
    assert refused_by_store(OSError(errno.EINVAL, "Invalid argument", "/store/ws/files/a:b"))
    assert (
        refused_by_store(OSError(errno.EINVAL, "Invalid argument")) is None
    )  # a read or write, not a name
    assert refused_by_store(OSError(errno.EIO, "Input/output error", "x")) is None


# -- the local record -----------------------------------------------------------------------------


def test_the_record_keeps_any_name_as_valid_utf8_and_finds_a_folders_files(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    index = SyncIndex(str(db))
    rels = [os.fsdecode(name) for name in every_high_byte() + awkward_names()]
    index.put_many((Record(rel, 1, 2, None, 0.0) for rel in rels), unflushed=True)
    assert set(index.all()) == set(rels)
    assert all(index.get(rel) == Record(rel, 1, 2, None, 0.0) for rel in rels)
    assert index.paths_under(os.fsdecode(b"\xff\xfe")) == [os.fsdecode(b"\xff\xfe/inside\xe9.txt")]
    assert index.paths_under(os.fsdecode(b"deep\xe9")) == [
        os.fsdecode(b"deep\xe9/er\n/most\x80.bin")
    ]
    assert sorted(index.forget_unflushed()) == sorted(rels)
    assert index.all() == {}
    index.put_many(Record(rel, 1, 2, None, 0.0) for rel in rels)
    index.close()
    with sqlite3.connect(db) as conn:
        conn.text_factory = bytes
        stored = [row[0] for row in conn.execute("SELECT path FROM files")]
    assert sorted(raw.decode("utf-8") for raw in stored) == sorted(encode(rel) for rel in rels)


# -- the engine, through both kinds of store ------------------------------------------------------


@pytest.fixture(params=["folder", "s3"])
def store_url(request: pytest.FixtureRequest, store_dir: Path) -> str:
    """A local folder, and a real S3 server (SeaweedFS)."""
    return str(store_dir) if request.param == "folder" else request.getfixturevalue("s3_url")


def store_names(store_url: str, store_dir: Path, request: pytest.FixtureRequest) -> set[str]:
    """The mirror's keys as the store lists them (relative to <workspace>/files/)."""
    if not store_url.startswith("s3://"):
        root = store_dir / "ws" / "files"
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    head = "ws/files/"
    return {
        k[len(head) :]
        for k in bucket_keys(request.getfixturevalue("s3_env"), store_url)
        if k.startswith(head)
    }


def test_every_name_reaches_the_store_and_comes_back_byte_for_byte_on_a_new_machine(
    workdir: Path,
    tmp_path: Path,
    store_dir: Path,
    store_url: str,
    make_engine: Make,
    request: pytest.FixtureRequest,
) -> None:
    written = make_files(workdir, every_high_byte() + awkward_names())
    engine = make_engine(workdir, store_url=store_url)
    report = engine.sync()
    assert (report.errors, report.problems) == ([], [])
    assert {os.fsencode(rel) for rel in report.uploaded} == set(written)
    saved(engine)
    # In the store under key text, valid UTF-8, one key per file the user wrote.
    assert store_names(store_url, store_dir, request) == {
        encode(os.fsdecode(name)) for name in written
    }

    engine.close()  # the first machine is gone, its lease given back

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    new_machine = make_engine(fresh, store_url=store_url, state="state2")
    restored = new_machine.restore()
    assert restored.errors == []
    assert files_as_bytes(fresh) == written
    report = new_machine.sync()
    # Recorded by the restore under the same names: nothing is sent back.
    assert (report.uploaded, report.errors, report.problems) == ([], [], [])


def test_a_changed_and_a_deleted_non_utf8_name_keep_versions(
    workdir: Path, make_engine: Make
) -> None:
    make_files(workdir, [b"model\xe9.txt", b"gone\xff/notes\n.txt", b"stays.txt"])
    engine = make_engine(workdir)
    engine.sync()
    with open(os.fsencode(workdir) + b"/model\xe9.txt", "ab") as f:
        f.write(b" and more")
    os.unlink(os.fsencode(workdir) + b"/gone\xff/notes\n.txt")
    os.rmdir(os.fsencode(workdir) + b"/gone\xff")
    report = engine.sync()
    assert report.uploaded == [os.fsdecode(b"model\xe9.txt")]
    assert report.deleted == [os.fsdecode(b"gone\xff/notes\n.txt")]
    assert [v["path"] for v in engine.versions(os.fsdecode(b"model\xe9.txt"))] == [
        os.fsdecode(b"model\xe9.txt")
    ]
    assert len(engine.versions(os.fsdecode(b"gone\xff/notes\n.txt"))) == 1
    saved(engine)


def test_a_name_too_long_for_the_store_is_that_files_problem_and_the_rest_goes(
    workdir: Path, store_url: str, make_engine: Make
) -> None:
    # 250 bytes are a name here; as key text (5 bytes each) they are too long for the store's
    # disk, and longer than an S3 key may be (1,024 bytes).
    long_name = b"\xff" * 250
    make_files(workdir, [long_name, b"next.txt", b"n\xe9xt.txt"])
    engine = make_engine(workdir, store_url=store_url)
    report = engine.sync()
    assert report.errors == []
    assert sorted(report.uploaded) == sorted(
        [os.fsdecode(b"next.txt"), os.fsdecode(b"n\xe9xt.txt")]
    )
    [problem] = report.problems
    assert problem.startswith(os.fsdecode(long_name)) and "too long for the store" in problem
    problems = engine.pending_list()["problems"]
    assert [p["path"] for p in problems] == [os.fsdecode(long_name)]
    status = engine.status()
    assert (status["state"], status["problem_files"], status["pending_files"]) == ("idle", 1, 0)


@pytest.mark.parametrize("watcher", ["auto", "watchfiles"])
def test_the_service_keeps_uploading_after_a_non_utf8_name_appears(
    watcher: str, workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    service = SyncService(
        make_engine(workdir), debounce=0.02, rescan_interval=3600, watcher=watcher
    )
    service.start()
    mirror = os.fsencode(store_dir / "ws" / "files")
    try:
        make_files(workdir, [b"first\xe9\n.txt"])
        until(
            lambda: os.path.exists(
                mirror + b"/" + os.fsencode(encode(os.fsdecode(b"first\xe9\n.txt")))
            )
        )
        make_files(workdir, [b"written after.txt", b"and\xff/after.txt"])
        until(
            lambda: (
                os.path.exists(mirror + b"/written after.txt")
                and os.path.exists(mirror + "/and‛FF/after.txt".encode())
            )
        )
        # Nothing pending comes a moment before the pass ends (its records, its flush).
        until(
            lambda: (
                service.engine.pending() == (0, 0) and service.engine.status()["state"] == "idle"
            )
        )
        saved(service.engine)
    finally:
        service.stop()


@pytest.mark.parametrize("refusal", [errno.EILSEQ, errno.EINVAL], ids=["EILSEQ", "EINVAL"])
def test_a_name_the_stores_file_system_refuses_is_that_files_problem(
    refusal: int, workdir: Path, store_dir: Path, make_engine: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mounted store that takes only some names (an SMB share refusing ':', a FUSE mount of a
    # bucket): its rename into place fails for that name alone.
    real_replace = os.replace

    def picky_replace(src: str, dst: str) -> None:
        if ":" in os.path.basename(dst):
            raise OSError(refusal, os.strerror(refusal), src, None, dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", picky_replace)
    make_files(workdir, [b"run:1.log", b"f-\xe9.txt", b"notes.txt"])
    engine = make_engine(workdir)
    report = engine.sync()
    assert report.errors == []
    assert sorted(report.uploaded) == sorted([os.fsdecode(b"f-\xe9.txt"), "notes.txt"])
    assert [p.split(": ", 1)[0] for p in report.problems] == ["run:1.log"]
    assert "does not take this name" in report.problems[0]
    assert [p["path"] for p in engine.pending_list()["problems"]] == ["run:1.log"]
    status = engine.status()
    assert (status["state"], status["problem_files"], status["last_error"]) == ("idle", 1, None)
    assert not any(
        name.startswith(".~") for name in os.listdir(store_dir / "ws" / "files")
    )  # no temporary left


def test_a_restore_lists_the_store_names_that_cannot_be_files_here_and_brings_the_rest(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    # Keys another program wrote into the store (an object store takes them all): a NUL byte,
    # parts that lead out of the work directory or are empty, a part longer than a name may be.
    fs = fsspec.filesystem("memory")
    root = f"/names-{uuid.uuid4().hex[:8]}"
    hostile = {
        "a\0b.txt": "NUL byte",
        "../escape.txt": "not a path inside",
        "dir//twice.txt": "not a path inside",
        "./here.txt": "not a path inside",
        "x" * 300 + "/f.txt": "File name too long",
    }
    fine = {
        "good.txt": b"good",
        f"caf{ESCAPE}E9.txt": b"latin-1",
        "glob*[1]?.txt": b"glob",
        "ctl\x01.txt": b"ctl",
    }
    for key in hostile:
        fs.pipe_file(f"{root}/ws/files/{key}", b"hostile")
    for key, body in fine.items():
        fs.pipe_file(f"{root}/ws/files/{key}", body)
    try:
        report = make_engine(workdir, store_url=f"memory://{root}").restore()
    finally:
        fs.rm(root, recursive=True)
    assert files_as_bytes(workdir) == {os.fsencode(decode(key)): body for key, body in fine.items()}
    assert sorted(os.listdir(tmp_path)) == sorted(
        [workdir.name, "state"]
    )  # nothing written beside the work directory
    reasons = dict(error.split(": ", 1) for error in report.errors)
    assert set(reasons) == set(hostile)
    assert all(why in reasons[key] for key, why in hostile.items())


@pytest.mark.parametrize("sealed", [False, True], ids=["plain-names", "encrypted-names"])
def test_every_name_round_trips_through_an_encrypted_store(
    sealed: bool, workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    written = make_files(workdir, every_high_byte() + awkward_names())
    engine = make_engine(workdir, encryption=Encryption(PASSPHRASE, sealed))
    report = engine.sync()
    assert (report.errors, report.problems) == ([], [])
    saved(engine)
    engine.close()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    restored = make_engine(fresh, state="state2", encryption=Encryption(PASSPHRASE)).restore()
    assert restored.errors == []
    assert files_as_bytes(fresh) == written


def test_a_tampered_object_names_its_file_as_people_read_it(
    workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make
) -> None:
    make_files(workdir, [b"secret\xe9\n.txt"])
    make_engine(workdir, encryption=Encryption(PASSPHRASE)).sync()
    stored = store_dir / "ws" / "files" / encode(os.fsdecode(b"secret\xe9\n.txt"))
    data = bytearray(stored.read_bytes())
    data[-1] ^= 1
    stored.write_bytes(bytes(data))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    report = make_engine(fresh, state="state2", encryption=Encryption(PASSPHRASE)).restore()
    [error] = report.errors
    assert "secret\\xe9\\n.txt in the store failed authentication" in error
    assert os.listdir(fresh) == []


def test_a_work_directory_whose_own_name_is_not_utf8_syncs_and_restores(
    tmp_path: Path, make_engine: Make
) -> None:
    from jupyter_gpu_ws.defaults import legacy_workspace_name

    workdir = Path(os.fsdecode(os.fsencode(tmp_path) + b"/proj\xe9"))
    workdir.mkdir()
    written = make_files(workdir, [b"notes.txt", b"f-\xe9.txt"])
    engine = make_engine(workdir)
    report = engine.sync()
    assert (sorted(os.fsencode(rel) for rel in report.uploaded), report.errors) == (
        sorted(written),
        [],
    )
    saved(engine)
    engine.close()
    assert legacy_workspace_name(str(workdir)).endswith(
        tuple("0123456789abcdef")
    )  # a name, not an error
    fresh = Path(os.fsdecode(os.fsencode(tmp_path) + b"/fresh\xff"))
    fresh.mkdir()
    assert make_engine(fresh, state="state2").restore().errors == []
    assert files_as_bytes(fresh) == written
