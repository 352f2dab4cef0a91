"""Jobs left unattended (issue 44): a successor relaunches by itself only what the user's key
vouches for, and no record written into the store can stop the others. Real servers on one
store (a local folder, and SeaweedFS's S3), the first killed with kill -9, the store then
written by an attacker before the successor starts."""

from __future__ import annotations

import json
import os
import py_compile
import signal
import sys
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_gpu_ws.userjobs import trust
from jupyter_gpu_ws.userjobs.record import JobRecord
from jupyter_gpu_ws.userjobs.vouching import judge
from tests.servers import ServerProcess, server_process
from tests.sync.conftest import S3_BUCKET, s3_server  # noqa: F401 - the session's S3 server
from tests.sync.s3server import S3Server
from tests.test_successor import kill_everything
from tests.userjobs.test_jobs_api import KEY, NO_CODE
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

# Each attempt says it started, and with how many arguments; then waits to be stopped.
JOB = (
    "import os, sys, time\n"
    "open(f\"started-{os.environ['GPUWS_JOB_ID']}-{len(sys.argv)}\", 'w').close()\n"
    "time.sleep(600)\n"
)
TAMPERED = JOB + "open('pwned', 'w').close()\n"
# A command at the limits openapi.yaml declares: 4096 arguments, 257,934 characters.
AT_THE_LIMIT = ["python", "job.py", *["a" * 63] * 4094]


class Store:
    """The workspace's files and records as an attacker with write access sees them."""

    def __init__(
        self,
        url: str,
        write: Callable[[str, bytes], None],
        read: Callable[[str], bytes],
        folder: Path | None = None,
    ) -> None:
        self.url, self.write, self.read = url, write, read
        self.folder = folder  # the workspace's folder, where the store is a local one


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    if request.param == "local":
        root = tmp_path / "store"

        def write_local(key: str, data: bytes) -> None:
            path = root / "test-ws" / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        return Store(
            str(root),
            write_local,
            lambda key: (root / "test-ws" / key).read_bytes(),
            root / "test-ws",
        )
    s3: S3Server = request.getfixturevalue("s3_server")
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    prefix = f"unattended-{time.monotonic_ns()}"

    def write_s3(key: str, data: bytes) -> None:
        s3.client().put_object(Bucket=S3_BUCKET, Key=f"{prefix}/test-ws/{key}", Body=data)

    def read_s3(key: str) -> bytes:
        client = s3.client()
        try:
            answer = client.get_object(Bucket=S3_BUCKET, Key=f"{prefix}/test-ws/{key}")
        except client.exceptions.NoSuchKey:
            raise FileNotFoundError(key) from None
        return bytes(answer["Body"].read())

    return Store(f"s3://{S3_BUCKET}/{prefix}", write_s3, read_s3)


@pytest.fixture
def config(store: Store) -> dict[str, Any]:
    return {"store_url": store.url, "lease_ttl": 5.0, "sync_debounce": 0.05, "job_stop_grace": 2}


def started(root: Path, job_id: str) -> list[str]:
    return sorted(p.name for p in root.glob(f"started-{job_id}-*"))


def synced(server: ServerProcess) -> bool:
    state = server.api("/gpuws/api/sync")
    return state["state"] == "idle" and not state.get("pending_files")


def planted(job_id: str, updated: float) -> bytes:
    record = JobRecord(
        id=job_id,
        name="planted",
        kind="command",
        command=["python", "-c", "open('ran-planted', 'w')"],
        workspace="test-ws",
        state="interrupted",
        created=updated,
        updated=updated,
        code=NO_CODE,
    )
    trust.sign(record, KEY.encode())
    return json.dumps(record.to_json()).encode()


def killed_runtime(
    tmp_path: Path, config: dict[str, Any], commands: list[list[str]], script: str = JOB
) -> list[str]:
    """A first runtime that starts `commands` as jobs, has every file and record in the store,
    and is killed with kill -9, jobs and all: their ids."""
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config) as a:
        (a.root / ".gpuwsignore").write_text("started-*\n")  # each runtime's own attempts
        (a.root / "job.py").write_text(script)
        (a.root / "helper.py").write_text("HELPED = True\n")
        until(lambda: synced(a), 60, "the script in the store")
        ids = [a.api("/gpuws/api/jobs", "POST", {"command": c})["id"] for c in commands]
        for job_id, command in zip(ids, commands, strict=True):
            until(lambda: started(a.root, job_id), 60, f"{job_id}'s first attempt")
            assert started(a.root, job_id) == [f"started-{job_id}-{len(command) - 1}"]
        until(lambda: synced(a), 60, "everything in the store")
        kill_everything(a)
    return ids


def relaunched(server: ServerProcess, job_id: str) -> list[str]:
    try:
        return until(lambda: started(server.root, job_id), 120, f"the relaunch of {job_id}")
    except AssertionError:
        listing = str(server.api("/gpuws/api/jobs"))[:2000]
        raise AssertionError(f"{listing}\n{server.log.read_text()[-3000:]}") from None


def test_records_that_cannot_be_read_are_listed_by_name_while_the_job_beside_them_relaunches(
    tmp_path: Path, store: Store, config: dict[str, Any]
) -> None:
    [job] = killed_runtime(tmp_path, config, [AT_THE_LIMIT])
    # Records that cannot be read, written by whoever can write the store.
    store.write(".gpuws/jobs/j-00000000dee9.json", b"[" * 100_000 + b"]" * 100_000)
    store.write(".gpuws/jobs/j-0000000b1660.json", b" " * (5 * 2**20))
    nan = json.loads(planted("j-000000000a11", time.time()))
    text = json.dumps(nan).replace('"seq": 0', '"seq": NaN')
    store.write(".gpuws/jobs/j-000000000a11.json", text.encode())
    # One object naming "state" twice: Python would keep the last, other readers the first.
    twice = planted("j-0000000d0b1e", time.time())[:-1] + b', "state": "stopped"}'
    store.write(".gpuws/jobs/j-0000000d0b1e.json", twice)
    unreadable = {
        "j-00000000dee9.json": "not JSON: nested too deeply",
        "j-0000000b1660.json": "larger than 4 MiB",
        "j-000000000a11.json": "not strict JSON: NaN is not a JSON number",
        "j-0000000d0b1e.json": "not strict JSON: the key 'state' is given twice in one object",
    }
    if store.folder is not None:  # where a folder can hold them: a FIFO and a link, never opened
        os.mkfifo(store.folder / ".gpuws/jobs/j-00000000f1f0.json")
        (store.folder / ".gpuws/jobs/j-0000000001c5.json").symlink_to("/etc/passwd")
        unreadable["j-00000000f1f0.json"] = "a named pipe (FIFO), which is never read"
        unreadable["j-0000000001c5.json"] = "a symbolic link, which is never followed"
    with server_process(tmp_path / "b", tmp_path / "runtime-b", config) as b:
        # The job the API took at its limits comes back by itself, every argument with it.
        assert relaunched(b, job) == [f"started-{job}-4095"]
        listing = b.api("/gpuws/api/jobs")
        assert [j["id"] for j in listing["jobs"]] == [job]
        bad = {r["file"]: r["reason"] for r in listing["bad_records"]}
        assert bad == unreadable
        b.api(f"/gpuws/api/jobs/{job}", "DELETE")


def test_a_script_edited_in_the_store_waits_for_approval_naming_the_file(
    tmp_path: Path, store: Store, config: dict[str, Any]
) -> None:
    [job] = killed_runtime(tmp_path, config, [["python", "job.py"]])
    store.write("files/job.py", TAMPERED.encode())  # under the record its key signed
    with server_process(tmp_path / "b", tmp_path / "runtime-b", config) as b:
        held = until(
            lambda: (
                (j := b.api("/gpuws/api/jobs"))["jobs"] and j["jobs"][0]["needs_approval"] and j
            ),
            60,
            "the job held for approval",
        )["jobs"][0]
        assert held["state"] == "interrupted"
        assert "its code changed since your key signed it: job.py (changed)" in held["relaunch"]
        assert held["approval"]["changed"] == [{"path": "job.py", "change": "changed"}]
        assert held["approval"]["command"] == ["python", "job.py"]
        assert b.api("/gpuws/api/jobs")["relaunch"]["pending"] == []
        assert not started(b.root, job) and not (b.root / "pwned").exists()
        # The user looked and approves: it runs, what is there now, signed as theirs.
        b.api(f"/gpuws/api/jobs/{job}/restart", "POST", {})
        assert relaunched(b, job) == [f"started-{job}-1"]
        after = b.api(f"/gpuws/api/jobs/{job}")
        assert after["needs_approval"] is False and after["approval"] is None
        b.api(f"/gpuws/api/jobs/{job}", "DELETE")


@pytest.mark.parametrize("store", ["local"], indirect=True)
def test_bytecode_written_into_the_store_is_never_restored_so_never_loaded(
    tmp_path: Path, store: Store, config: dict[str, Any]
) -> None:
    [job] = killed_runtime(tmp_path, config, [["python", "job.py"]], "import helper, json\n" + JOB)
    # helper.py's bytecode as Python loads it without looking at the source (an unchecked
    # hash), and a module with no source that shadows one the script's folder would find.
    evil = tmp_path / "evil.py"
    evil.write_text("open('pwned', 'w').close()\nHELPED = True\n")
    compiled = tmp_path / "evil.pyc"
    py_compile.compile(
        str(evil),
        str(compiled),
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    planted_files = [f"__pycache__/helper.{sys.implementation.cache_tag}.pyc", "json.pyc"]
    for rel in planted_files:
        store.write(f"files/{rel}", compiled.read_bytes())
    with server_process(tmp_path / "b", tmp_path / "runtime-b", config) as b:
        # The store's copies are not brought: the job's code is what its key signed, and it
        # comes back by itself.
        assert relaunched(b, job) == [f"started-{job}-1"]
        assert not (b.root / "json.pyc").exists()
        here = b.root / planted_files[0]
        assert not here.exists() or here.read_bytes() != compiled.read_bytes()
        assert not (b.root / "pwned").exists()
        assert b.api(f"/gpuws/api/jobs/{job}")["needs_approval"] is False
        # Named in the Sync section, with the store's other entries it does not bring.
        skipped = b.api("/gpuws/api/sync")["store_skipped"]
        for rel in planted_files:
            assert skipped[rel].startswith("compiled Python, never restored")
        b.api(f"/gpuws/api/jobs/{job}", "DELETE")


def copies_running(root: Path) -> list[int]:
    """The job processes (`python job.py`) that run in `root`."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if (process.info["cmdline"] or [])[-1:] == ["job.py"] and process.info["cwd"] == str(root):
            found.append(process.pid)
    return found


@pytest.mark.parametrize("store", ["local"], indirect=True)
def test_a_runtime_stalled_past_its_lease_stops_its_jobs_once_another_relaunched_them(
    tmp_path: Path, store: Store, config: dict[str, Any]
) -> None:
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config) as a:
        (a.root / ".gpuwsignore").write_text("started-*\n")
        (a.root / "job.py").write_text(JOB)
        until(lambda: synced(a), 60, "the script in the store")
        job = a.api("/gpuws/api/jobs", "POST", {"command": ["python", "job.py"]})["id"]
        until(lambda: started(a.root, job), 60, "the job's first attempt")
        until(lambda: synced(a), 60, "everything in the store")
        with server_process(tmp_path / "b", tmp_path / "runtime-b", config) as b:
            # A stalls (a paused machine) past its lease: B takes the workspace over and
            # relaunches the job, while A's copy still runs.
            os.kill(a.proc.pid, signal.SIGSTOP)
            try:
                assert relaunched(b, job) == [f"started-{job}-1"]
                assert copies_running(a.root)
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            # Going on, A finds the lease another's, and stops its copy: one runs, B's.
            until(lambda: not copies_running(a.root), 60, "A's copy of the job stopped")
            assert copies_running(b.root)
            assert a.api("/gpuws/api/sync")["read_only_reason"]
            b.api(f"/gpuws/api/jobs/{job}", "DELETE")


def test_a_stopped_jobs_old_record_put_back_into_the_store_stays_stopped(
    tmp_path: Path, store: Store, config: dict[str, Any]
) -> None:
    with server_process(tmp_path / "a", tmp_path / "runtime", config) as a:
        (a.root / "job.py").write_text(JOB)
        job = a.api("/gpuws/api/jobs", "POST", {"command": ["python", "job.py"]})
        until(lambda: started(a.root, job["id"]), 60, "the job's first attempt")
        record = f".gpuws/jobs/{job['id']}.json"
        running = until(lambda: store.read(record), 30, "the record in the store")
        assert json.loads(running)["state"] == "running"  # a signed copy, taken while it ran
        a.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
        until(lambda: json.loads(store.read(record))["state"] == "stopped", 30, "the stop recorded")
        store.write(record, running)  # put back: it says the job was running
        # The server that stopped it, the workspace's writer, goes by what it knows.
        assert a.api(f"/gpuws/api/jobs/{job['id']}")["state"] == "stopped"
    # A server started again on this machine, the workspace's writer, reads the store: the old
    # copy is older than the newest record of that job it has seen, and is not used.
    with server_process(tmp_path / "a", tmp_path / "runtime", config) as again:
        listing = until(
            lambda: (j := again.api("/gpuws/api/jobs"))["bad_records"] and j, 60, "the records"
        )
        assert "an older copy" in listing["bad_records"][0]["reason"]
        assert job["id"] not in {j["id"] for j in listing["jobs"]}
        assert started(again.root, job["id"]) == [f"started-{job['id']}-1"]  # only the first


def test_a_record_signed_longer_ago_than_the_relaunch_window_waits_for_the_user() -> None:
    now = time.time()
    record = JobRecord(
        id="j-000000000001",
        name="x",
        kind="command",
        command=["python", "-c", "pass"],
        workspace="w",
        state="interrupted",
        updated=now - 2 * 86400,
        code=NO_CODE,
    )
    from jupyter_gpu_ws.userjobs.manifest import CodeManifest, from_json

    here: CodeManifest = from_json(NO_CODE)
    verdict = judge(record, here, 86400, now)
    assert verdict.reason is not None and verdict.reason.startswith(
        "its record was last written 2 days ago"
    )
    assert judge(record, here, 3 * 86400, now).reason is None
    record.code = None  # written before records held their code: the user looks first
    assert "holds no list of the code" in (judge(record, here, 3 * 86400, now).reason or "")


def test_a_runtime_without_a_usable_key_relaunches_nothing_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    jobs = store / "test-ws" / ".gpuws" / "jobs"
    jobs.mkdir(parents=True)
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    (jobs / "j-0000000000ab.json").write_bytes(planted("j-0000000000ab", time.time()))
    monkeypatch.setenv(trust.KEY_ENV, "")  # set, and empty: as a platform secret left blank
    with server_process(tmp_path / "a", tmp_path / "runtime", {"store_url": str(store)}) as a:
        listing = until(lambda: (j := a.api("/gpuws/api/jobs"))["jobs"] and j, 60, "the record")
        [job] = listing["jobs"]
        assert job["needs_approval"] is True and "no usable job key" in job["relaunch"]
        assert listing["error"].startswith("no job runs by itself on this runtime: GPUWS_JOB_KEY")
        # A job cannot be started without a key to sign its record: one line on how to fix it.
        try:
            a.api("/gpuws/api/jobs", "POST", {"command": ["python", "-c", "pass"]})
        except urllib.error.HTTPError as err:
            message = json.loads(err.read())["message"]
            assert err.code == 409  # the server's state, not a fault of its code
            assert "GPUWS_JOB_KEY is empty" in message and "secrets.token_hex" in message
        else:
            raise AssertionError("a job was started without a key")
        assert not (a.root / "ran-planted").exists()


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    with server_process(tmp_path / "a", tmp_path / "runtime", {}) as running:
        (running.root / "job.py").write_text(JOB)
        yield running


def test_a_huge_gpus_or_a_command_past_the_limits_is_a_400_and_the_server_stays_small(
    server: ServerProcess,
) -> None:
    process = psutil.Process(server.proc.pid)
    before = process.memory_info().rss
    refused = [
        ({"command": ["python", "job.py"], "gpus": 10**12}, "gpus"),
        ({"command": ["python", "job.py"], "gpus": 65}, "gpus"),
        ({"command": [*AT_THE_LIMIT, "one-too-many"]}, "1 to 4096 arguments"),
        ({"command": ["python", "job.py", *["b" * 4000] * 66]}, "262144 in all"),
        ({"command": ["python", "job.py", "c" * 4097]}, "4096"),
    ]
    for body, words in refused * 5:
        try:
            server.api("/gpuws/api/jobs", "POST", body)
        except urllib.error.HTTPError as err:
            assert err.code == 400
            assert words in json.loads(err.read())["message"]
        else:
            raise AssertionError(f"accepted: {str(body)[:80]}")
    assert server.api("/gpuws/api/jobs")["jobs"] == []
    # Nothing was built in proportion to a number from a request (a range of 10**12 GPUs).
    assert process.memory_info().rss - before < 64 * 2**20


def test_names_the_store_put_in_the_work_directory_are_told_escaped() -> None:
    from jupyter_gpu_ws.userjobs.manifest import CodeManifest

    now = time.time()
    record = JobRecord(
        id="j-000000000002",
        name="x",
        kind="command",
        command=["python", "x.py"],
        workspace="w",
        state="interrupted",
        updated=now,
        code={"digest": "0" * 64, "count": 0, "files": {}},
    )
    forged = "a\n[E 2026-12-07 15:00:00.000 GpuWorkspaceApp] FORGED\x1b[8m.py"
    here = CodeManifest("1" * 64, 2, {forged: "0" * 32, "gnp\u202e.py": "0" * 32})
    reason = judge(record, here, 86400, now).reason or ""
    # One line, as the log and the panel show it: no line break, escape or direction mark.
    assert reason.isprintable() and "\n" not in reason
    assert "a\\n[E 2026-12-07 15:00:00.000 GpuWorkspaceApp] FORGED\\x1b[8m.py (added)" in reason
    assert "gnp\\u202e.py (added)" in reason
