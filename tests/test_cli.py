"""`jupyter gpuws` as a user runs it: a real process, real files, a local-folder store."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sync.conftest import same_trees, write
from tests.waiting import until


def gpuws(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture(autouse=True)
def this_machine_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No server running here and nothing synced before: a command means only what its flags say."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("GPUWS_STORE", raising=False)


@pytest.fixture
def common(tmp_path: Path) -> list[str]:
    return [
        "--store",
        str(tmp_path / "store"),
        "--workspace",
        "ws",
        "--state-dir",
        str(tmp_path / "state"),
    ]


def test_jupyter_finds_the_gpuws_subcommand() -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    result = subprocess.run(
        [str(jupyter), "gpuws", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "restore" in result.stdout


def test_sync_once_then_restore_on_a_fresh_machine(tmp_path: Path, common: list[str]) -> None:
    work = tmp_path / "work"
    for i in range(50):
        write(work, f"src/m{i}.py", f"x = {i}\n")
    write(work, "weights.bin", b"\0" * 300_000)
    result = gpuws("sync", "--workdir", str(work), "--once", *common)
    assert result.returncode == 0, result.stderr
    assert "51 files uploaded" in result.stdout

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    common_fresh = [*common[:-1], str(tmp_path / "state-fresh")]
    result = gpuws("restore", "--workdir", str(fresh), *common_fresh)
    assert result.returncode == 0, result.stderr
    assert "51 files restored" in result.stdout
    assert same_trees(work, fresh)


def test_restore_names_what_it_did_not_bring_and_why(tmp_path: Path, common: list[str]) -> None:
    work = tmp_path / "work"
    write(work, "notes.md", "notes")
    assert gpuws("sync", "--workdir", str(work), "--once", *common).returncode == 0
    files = tmp_path / "store" / "ws" / "files"
    write(files, "evil.rclonelink", "../../outside")  # written by someone else
    write(files, "__pycache__/m.cpython-311.pyc", b"\0")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    result = gpuws("restore", "--workdir", str(fresh), *common[:-1], str(tmp_path / "state-fresh"))
    assert result.returncode == 0, result.stderr
    assert "1 file restored" in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("not restored: ")]
    assert len(lines) == 2, result.stdout
    assert "evil.rclonelink: a symbolic link pointing outside the work directory" in lines[1]
    assert "__pycache__/m.cpython-311.pyc: compiled Python, never restored" in lines[0]


def test_status_shows_what_is_pending(tmp_path: Path, common: list[str]) -> None:
    work = tmp_path / "work"
    write(work, "a.txt", "a")
    gpuws("sync", "--workdir", str(work), "--once", *common)
    write(work, "b.txt", "bb")
    result = gpuws("status", "--workdir", str(work), *common)
    assert result.returncode == 0, result.stderr
    assert (
        "pending:   1 file to upload (2 B)" in result.stdout
        and "in store:  1 file from here, 1 B" in result.stdout
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workdir", "{tmp}/missing", "--store", "{tmp}/store"], "does not exist"),
        (["--workdir", "{tmp}/work", "--store", "nosuchproto://b/x"], "Unknown storage protocol"),
        (["--workdir", "{tmp}/work", "--store", "s3://"], "names no bucket"),
        (
            [
                "--workdir",
                "{tmp}/work",
                "--store",
                "s3://bucket/x",
                "--storage-option",
                "endpoint_url=http://127.0.0.1:9",
                "--storage-option",
                "key=k",
                "--storage-option",
                "secret=s",
            ],
            "store",
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(
    tmp_path: Path, args: list[str], message: str
) -> None:
    write(tmp_path / "work", "keep.txt", "mine")
    args = [a.format(tmp=tmp_path) for a in args]
    result = gpuws("sync", "--once", "--state-dir", str(tmp_path / "state"), *args)
    assert result.returncode == 1
    lines = said(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("jupyter gpuws: error: ") and message in lines[0]
    assert (tmp_path / "work" / "keep.txt").read_text() == "mine"  # nothing changed


def test_usage_errors_exit_2() -> None:
    assert gpuws("sync").returncode == 2


def said(stderr: str) -> list[str]:
    """What a command said on stderr besides the store and workspace it resolved (one line)."""
    lines = stderr.strip().splitlines()
    return [line for line in lines if not line.startswith("store: ")]


def test_workspaces_lists_the_store_and_restore_refuses_one_that_does_not_exist(
    tmp_path: Path,
) -> None:
    write(tmp_path / "work", "a.txt", "aaa")
    assert (
        gpuws(
            "sync",
            "--once",
            "--workdir",
            str(tmp_path / "work"),
            "--store",
            str(tmp_path / "store"),
            "--workspace",
            "alice-work",
            "--state-dir",
            str(tmp_path / "state"),
        ).returncode
        == 0
    )
    listing = gpuws("workspaces", "--store", str(tmp_path / "store"))
    assert listing.returncode == 0 and listing.stderr.strip() == f"store: {tmp_path / 'store'}"
    header, row = listing.stdout.strip().splitlines()
    assert header.split()[:4] == ["workspace", "files", "size", "last"] and row.split()[:4] == [
        "alice-work",
        "1",
        "3",
        "B",
    ]
    as_json = json.loads(gpuws("workspaces", "--store", str(tmp_path / "store"), "--json").stdout)
    assert [(w["name"], w["files"], w["bytes"]) for w in as_json] == [("alice-work", 1, 3)]
    # A fresh machine with a defaulted (or mistyped) name: one line naming what the store holds.
    fresh = tmp_path / "elsewhere"
    fresh.mkdir()
    for command in ("restore", "status"):
        result = gpuws(
            command,
            "--workdir",
            str(fresh),
            "--store",
            str(tmp_path / "store"),
            "--state-dir",
            str(tmp_path / "state2"),
        )
        assert result.returncode == 1, command
        resolved, error = result.stderr.strip().splitlines()
        assert resolved.startswith(f"store: {tmp_path / 'store'}  workspace: ")
        assert (
            error.startswith("jupyter gpuws: error: No workspace")
            and "it holds: alice-work" in error
        )
    assert list(fresh.iterdir()) == []  # nothing restored, nothing written


# -- reading like a tool people know (issue 17) ------------------------------------------------------


def options_of(command: str) -> dict[str, str | None]:
    """The options `jupyter gpuws <command>` offers, with their help."""
    from jupyter_gpu_ws.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {
        a.option_strings[-1]: a.help for a in sub._actions if a.option_strings and a.dest != "help"
    }


def test_the_help_lists_every_command_with_one_line_and_no_file_a_pip_user_lacks() -> None:
    from jupyter_gpu_ws.cli import build_parser

    result = gpuws("--help")
    assert result.returncode == 0
    listed = result.stdout.split("positional arguments")[1]
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"run", "jobs", "persist", "status", "env", "checkpoint"} <= set(commands.choices)
    helps = {c.dest: c.help for c in commands._choices_actions}
    for name in commands.choices:
        assert helps.get(name), f"{name} has no line in --help"
        assert name in listed, name
    assert "docs/" not in result.stdout
    for name in commands.choices:
        assert "docs/" not in gpuws(name, "--help").stdout, name


@pytest.mark.parametrize("command", ["sync", "restore", "status", "workspaces"])
def test_every_option_says_what_it_does(command: str) -> None:
    assert all(options_of(command).values()), options_of(command)


def test_each_command_offers_only_its_own_options() -> None:
    sync_only = {"--quota", "--bandwidth-limit", "--take-over", "--once"}
    assert sync_only <= set(options_of("sync"))
    assert not sync_only & set(options_of("restore"))
    assert not (sync_only | {"--concurrency"}) & set(options_of("status"))
    help_text = gpuws("restore", "--help").stdout
    assert (
        "--quota" not in help_text
        and "--bandwidth-limit" not in help_text
        and "--concurrency N" in help_text
    )


def test_status_says_when_this_folder_last_synced_from_its_record(
    tmp_path: Path, common: list[str]
) -> None:
    work = tmp_path / "work"
    write(work, "a.txt", "a")
    for _ in range(2):  # the second pass has nothing to upload: it still counts as a sync
        assert gpuws("sync", "--workdir", str(work), "--once", *common).returncode == 0
    result = gpuws("status", "--workdir", str(work), *common)
    assert result.returncode == 0, result.stderr
    assert re.search(
        r"^last sync: \d+ s ago \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)$", result.stdout, re.M
    ), result.stdout
    assert "never" not in result.stdout
    # The store is a folder on this machine's disk: said as the panel says it.
    assert "not saved elsewhere: the store is on this machine's own disk" in result.stdout
    assert "writer:    none now (" in result.stdout and "released the lease" in result.stdout
    as_json = json.loads(gpuws("status", "--workdir", str(work), "--json", *common).stdout)
    assert as_json["last_sync"] is not None and as_json["lease"]["user"]


def test_sizes_and_counts_read_naturally(tmp_path: Path, common: list[str]) -> None:
    work = tmp_path / "work"
    write(work, "note.txt", "seventeen bytes!\n")
    result = gpuws("sync", "--workdir", str(work), "--once", *common)
    assert result.stdout.startswith("1 file uploaded (17 B), 0 removed, 0 unchanged"), result.stdout
    status = gpuws("status", "--workdir", str(work), *common).stdout
    assert "in store:  1 file from here, 17 B" in status
    assert "pending:   0 files to upload (0 B), 0 files to remove" in status
    # A fresh machine where the file exists with other content: kept both ways, said in words.
    fresh = tmp_path / "fresh"
    write(fresh, "note.txt", "mine\n")
    result = gpuws("restore", "--workdir", str(fresh), *common[:-1], str(tmp_path / "state-fresh"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "0 files restored (0 B), 0 already here, 1 conflict copy kept"
    ), result.stdout
    assert (fresh / "note.txt").read_text() == "mine\n"


LOGGING_CONFIGURED = (
    "import logging, sys; logging.basicConfig(level=logging.INFO)\n"
    "from jupyter_gpu_ws.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_a_lease_conflict_is_said_once_even_where_logging_is_configured(
    tmp_path: Path, common: list[str]
) -> None:
    work = tmp_path / "work"
    write(work, "a.txt", "a")
    holder = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", "sync", "--workdir", str(work), *common],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lease = tmp_path / "store" / "ws" / ".gpuws" / "lease.json"
        until(lease.exists, 60, "the holder's lease")
        other = tmp_path / "other"
        other.mkdir()
        # Another program in the same process may have set logging up: the error is still said once.
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                LOGGING_CONFIGURED,
                "sync",
                "--once",
                "--workdir",
                str(other),
                *common[:-1],
                str(tmp_path / "state-other"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        holder.send_signal(signal.SIGINT)
        holder.communicate(timeout=60)
    assert result.returncode == 1
    lines = said(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jupyter gpuws: error: Another runtime is writing this workspace")


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(
    tmp_path: Path, common: list[str]
) -> None:
    work = tmp_path / "work"
    for i in range(20):
        write(work, f"f{i}.txt", "x")
    assert gpuws("sync", "--workdir", str(work), "--once", *common).returncode == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` does once it has read enough: before anything is written here
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter_gpu_ws.cli",
                "status",
                "--json",
                "--workdir",
                str(work),
                *common,
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert said(result.stderr) == []  # no traceback, no error line
    assert result.returncode == 128 + signal.SIGPIPE


@pytest.fixture(params=["C", "C-ascii"])
def plain_locale(request: pytest.FixtureRequest) -> dict[str, str]:
    """The environment of a bare container: LC_ALL=C and no PYTHONIOENCODING; with C-ascii also
    Python's UTF-8 mode off, so that stdout is ASCII."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LANGUAGE")
        and not k.startswith("LC_")
    }
    env["LC_ALL"] = "C"
    if request.param == "C-ascii":
        env["PYTHONUTF8"] = "0"
    return env


def gpuws_bytes(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The command with output as bytes, as the terminal gets it."""
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", *args],
        capture_output=True,
        env=env,
        timeout=120,
    )


def test_names_that_are_not_utf8_sync_restore_and_print_in_a_plain_locale(
    tmp_path: Path, common: list[str], plain_locale: dict[str, str]
) -> None:
    from tests.sync.test_names import awkward_names, every_high_byte, files_as_bytes, make_files

    work = tmp_path / "work"
    work.mkdir()
    written = make_files(work, every_high_byte() + awkward_names())
    make_files(work, [b"\xff" * 250])  # as key text too long for the store: that file's problem
    result = gpuws_bytes(plain_locale, "sync", "--workdir", str(work), "--once", *common)
    assert result.returncode == 1  # not everything is in the store, and it says which one
    assert b"Traceback" not in result.stderr and b"UnicodeEncodeError" not in result.stderr
    assert f"{len(written)} files uploaded".encode() in result.stdout
    assert (
        b"jupyter gpuws: error: not synced: " + b"\\xff" * 250 + b": its name is too long"
        in result.stderr
    )
    # The store's folder holds the key text in UTF-8, the same whatever the locale that wrote it.
    stored = os.listdir(os.fsencode(tmp_path / "store" / "ws" / "files"))
    assert "f-\u201bE9.txt".encode() in stored and all(name.decode("utf-8") for name in stored)

    # A fresh machine, where one name is taken by other content and one folder's name by a file.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    make_files(fresh, [b"\xff\xfe"])
    with open(os.fsencode(fresh) + b"/f-\xe9.txt", "wb") as f:
        f.write(b"written here meanwhile")
    state = [*common[:-1], str(tmp_path / "state-fresh")]
    result = gpuws_bytes(plain_locale, "restore", "--workdir", str(fresh), *state)
    assert b"Traceback" not in result.stderr and b"UnicodeEncodeError" not in result.stderr
    assert result.returncode == 1  # the folder that could not be made
    assert re.search(rb"^conflict copy: f-\\xe9\.conflict-\d{8}T\d{6}Z\.txt$", result.stdout, re.M)
    assert (
        b"jupyter gpuws: error: \\xff\\xfe/inside\\xe9.txt: \\xff\\xfe is a file here, where the "
        b"store has a folder" in result.stderr
    )
    here = files_as_bytes(fresh)
    for name, data in written.items():
        if name not in (b"f-\xe9.txt", b"\xff\xfe/inside\xe9.txt"):
            assert here[name] == data, name
    result = gpuws_bytes(plain_locale, "status", "--workdir", str(fresh), "--json", *state)
    assert result.returncode == 0
    json.loads(result.stdout.decode("ascii" if "PYTHONUTF8" in plain_locale else "utf-8"))


def test_the_store_line_of_a_command_hides_the_urls_secrets(tmp_path: Path) -> None:
    # A password and a query token in the store URL: "store: …" on stderr shows neither.
    work = tmp_path / "w"
    work.mkdir()
    result = gpuws(
        "status", "--workdir", str(work), "--store", "gcs://user:secret@b/p?token=secret"
    )
    assert "store: gcs://user:***@b/p?token=***" in result.stderr, result.stderr
    assert "secret" not in result.stdout + result.stderr
