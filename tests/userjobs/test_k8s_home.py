"""A cluster Job brings its results home: the commands of the manifest `run --export k8s` prints,
run as its pod would run them (another folder, another HOME and host name, the Secret's variables)
against a live runtime on the same SeaweedFS S3 store, which goes on writing its own files; the
pod's checkpoints and outputs reach the store while it runs and when it ends, the runtime lists
it, and `jupyter gpuws jobs --bring-home` puts them in the work directory without overwriting a
file changed there meanwhile. The listing of areas anyone can write, and the rules of bringing
home, are tested on a local store below."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_gpu_ws.store.crypto import Encryption
from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from jupyter_gpu_ws.userjobs import bringhome
from jupyter_gpu_ws.userjobs.bringhome import MAX_RECORD_BYTES, JobsElsewhere, NoSuchJobElsewhere
from jupyter_gpu_ws.userjobs.elsewhere import (
    RECORD,
    area_settings,
    area_url,
    restore_for_job,
    run_job,
)
from jupyter_gpu_ws.userjobs.k8s import STATE_DIR, WORKDIR
from tests.servers import ServerProcess, server_process
from tests.sync.conftest import S3_BUCKET, s3_server  # noqa: F401 - the session's S3 server
from tests.sync.s3server import S3Server
from tests.waiting import until

# The job: a model tracked as the run "train", a checkpoint and a progress file at step 9, where
# it waits (outside the work directory: $HOME/go) until the test has seen them reach the
# runtime, then the rest of its steps, a last checkpoint and its outputs: a file of the workspace
# it changes (results.csv), one the user changes meanwhile too (notes.md), and a new one.
JOB = """\
import pathlib, time
import torch
import jupyter_gpu_ws as gpuws

model = torch.nn.Linear(4, 2)
gpuws.track("train", model=model)
start = gpuws.resume()
for step in range(start, 30):
    gpuws.step(step)
    if step == 9:
        gpuws.checkpoint(wait=True)
        pathlib.Path("progress.txt").write_text("10 of 30 steps")
        while not (pathlib.Path.home() / "go").exists():
            time.sleep(0.1)
gpuws.checkpoint(wait=True)
pathlib.Path("results.csv").write_text("step,loss\\n29,0.1\\n")
pathlib.Path("notes.md").write_text("the job's notes\\n")
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/metrics.json").write_text('{"loss": 0.1}')
"""
RESUME = (
    "import torch, jupyter_gpu_ws as gpuws\n"
    "gpuws.track('train', model=torch.nn.Linear(4, 2))\n"
    "print('resumes at', gpuws.resume())\n"
)
POD_HOST = "train-pod-7f9c4"


def secret_values(text: str, given: dict[str, str]) -> dict[str, str]:
    """The Secret as a user makes it from the manifest's template: its uncommented variables,
    what is left to fill in ("…") filled from `given` (the credentials)."""
    lines = text.split("\n")
    start = lines.index("# apiVersion: v1")
    end = lines.index("#", start)
    data = yaml.safe_load("\n".join(line[2:] for line in lines[start:end]))["stringData"]
    return {name: given[name] if value == "…" else value for name, value in data.items()}


class Pod:
    """The manifest's containers run here as the pod runs them: in their own folders (the pod's
    /work and state moved into `folder`), with their own HOME and host name, and only the
    variables the manifest and the Secret give them."""

    def __init__(self, folder: Path, manifest: dict[str, Any], secret: dict[str, str]) -> None:
        self.folder = folder
        self.work = folder / "work"
        self.home = folder / "home"
        for path in (self.work, self.home):
            path.mkdir(parents=True)
        spec = manifest["spec"]["template"]["spec"]
        self.restore = self.here(spec["initContainers"][0]["command"])
        job = spec["containers"][0]
        self.job = self.here(job["command"])
        # Sent every second, not every minute: what the test waits for comes sooner.
        self.job[self.job.index("--") : self.job.index("--")] = ["--every", "1"]
        self.cwd = self.here([job["workingDir"]])[0]
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            **{e["name"]: self.here([e["value"]])[0] for e in job["env"]},
            **secret,
        }
        if os.environ.get("PYTHONPATH"):  # this checkout's code, as the image would have it
            self.env["PYTHONPATH"] = os.environ["PYTHONPATH"]

    def here(self, words: list[str]) -> list[str]:
        moved = {WORKDIR: str(self.work), STATE_DIR: str(self.folder / "state")}
        return [
            next(
                (new + word[len(old) :] for old, new in moved.items() if word.startswith(old)), word
            )
            for word in words
        ]

    def run(self, command: list[str], **options: Any) -> subprocess.Popen[str]:
        hostname = ["unshare", "-u", "sh", "-c", 'hostname "$0" && exec "$@"', POD_HOST]
        return subprocess.Popen(
            [*hostname, *command],
            cwd=self.cwd if command is self.job else self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            **options,
        )


@pytest.fixture
def s3_runtime(
    s3_server: S3Server,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[ServerProcess, S3Server, str]]:
    """A live runtime on the S3 store, its work directory holding a training script and two
    files the job will change, all synced."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    url = f"s3://{S3_BUCKET}/k8s-home-{uuid.uuid4().hex[:8]}"
    config = {"store_url": url, "sync_debounce": 0.05, "lease_ttl": 5.0}
    with server_process(tmp_path / "runtime", tmp_path / "jupyter-runtime", config) as server:
        (server.root / "train.py").write_text(JOB)
        (server.root / "results.csv").write_text("step,loss\n")
        (server.root / "notes.md").write_text("my notes\n")
        until(
            lambda: (
                {"train.py", "results.csv", "notes.md"} <= stored(s3_server, url, "files")
                and (sync := server.api("/gpuws/api/sync"))["state"] == "idle"
                and not sync.get("pending_files")
            ),
            60,
            "the runtime's files in the store",
        )
        # The store's times are whole seconds: a job that began in the second its files were
        # written could not tell them older than its start, and would keep them as changed.
        newest = max(stored_times(s3_server, url, "files").values())
        client, probe = s3_server.client(), f"{url.split('/', 3)[3]}/clock-probe"

        def store_clock_past_them() -> bool:
            client.put_object(Bucket=S3_BUCKET, Key=probe, Body=b"")
            return bool(client.head_object(Bucket=S3_BUCKET, Key=probe)["LastModified"] > newest)

        until(store_clock_past_them, 10, "the store's clock a second past the files", 0.05)
        yield server, s3_server, url


def stored_times(s3: S3Server, url: str, under: str) -> dict[str, Any]:
    """The paths under the workspace's `under` folder in the S3 store, with their times."""
    prefix = f"{url.split('/', 3)[3]}/test-ws/{under}/"
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix)
    return {
        item["Key"][len(prefix) :]: item["LastModified"]
        for page in pages
        for item in page.get("Contents", [])
    }


def stored(s3: S3Server, url: str, under: str) -> set[str]:
    """The paths under the workspace's `under` folder in the S3 store."""
    return set(stored_times(s3, url, under))


def listed(server: ServerProcess, job_id: str) -> dict[str, Any] | None:
    """The job as the runtime lists it (GET /gpuws/api/jobs), while the runtime still writes
    the workspace itself: its own lease was never needed by the pod."""
    sync = server.api("/gpuws/api/sync")
    assert sync["read_only_reason"] is None, sync
    elsewhere = server.api("/gpuws/api/jobs")["elsewhere"]
    return next((job for job in elsewhere["jobs"] if job["id"] == job_id), None)


class RuntimeWrites:
    """The runtime's own writing meanwhile: a file of its work directory every 0.2 s."""

    def __init__(self, root: Path) -> None:
        self.root = root / "own"
        self.root.mkdir()
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        while not self._stop.wait(0.2):
            (self.root / f"{self.written}.txt").write_text(str(time.time()))
            self.written += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.written


def test_the_manifests_commands_against_a_live_runtime_on_s3_bring_the_pods_checkpoints_and_outputs_home(
    s3_runtime: tuple[ServerProcess, S3Server, str], tmp_path: Path
) -> None:
    server, s3, url = s3_runtime
    export = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", "run", "--export", "k8s", "--image", "t:1"]
        + ["--name", "train", "--store", url, "--workspace", "test-ws", "--", "python", "train.py"],
        capture_output=True,
        text=True,
        check=True,
        cwd=server.root,
    )
    manifest = yaml.safe_load(export.stdout)
    job_id = manifest["metadata"]["annotations"]["gpuws/job-id"]
    secret = secret_values(export.stdout, s3.env())
    # The template names the endpoint, left for the user: this machine's is its own loopback.
    assert f"(here it is {s3.endpoint}, this machine's own, which no pod reaches)" in export.stdout
    assert secret["AWS_ENDPOINT_URL"] == s3.endpoint  # as the user fills it in (pods here share it)
    pod = Pod(tmp_path / "pod", manifest, secret)
    writes = RuntimeWrites(server.root)
    try:
        restore = pod.run(pod.restore)
        out, _ = restore.communicate(timeout=300)
        assert restore.returncode == 0, out
        assert (pod.work / "train.py").read_text() == JOB
        # The user changes a file after the job began: the job's version of it must not win.
        (server.root / "notes.md").write_text("my notes, changed while the job ran\n")
        job = pod.run(pod.job)
        try:
            running = until(
                lambda: (
                    (found := listed(server, job_id))
                    and found["state"] == "running"
                    and found["step"] == 9
                    and "progress.txt" in [o["path"] for o in found["outputs"]]
                    and found
                ),
                120,
                "the running job, its first checkpoint and its progress, listed by the runtime",
            )
            assert running["host"] == POD_HOST and running["command"] == ["python", "train.py"]
            assert "train.py" not in [o["path"] for o in running["outputs"]]  # what it began from
            (pod.home / "go").touch()
            out, _ = job.communicate(timeout=300)
        finally:
            job.kill()
        assert job.returncode == 0, out
        ended = until(
            lambda: (found := listed(server, job_id)) and found["state"] == "ended" and found,
            60,
            "the ended job, listed by the runtime",
        )
        assert ended["returncode"] == 0 and ended["step"] == 29
        assert {"results.csv", "notes.md", "out/metrics.json", "progress.txt"} <= {
            o["path"] for o in ended["outputs"]
        }
        assert ended["checkpoints"][0]["run"] == ".gpuws/checkpoints/train"
        area = stored(s3, url, f".gpuws/elsewhere/{job_id}/files")
        assert "out/metrics.json" in area and "train.py" not in area
        # The runtime went on writing its own files meanwhile, and they reached its store.
        last = writes.stop() - 1
        until(
            lambda: f"own/{last}.txt" in stored(s3, url, "files"),
            60,
            "the runtime's own last file in its store",
        )
    finally:
        writes.stop()

    jobs = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", "jobs", "--runtime-dir", str(server.runtime)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"train ({job_id}, elsewhere): ended with exit status 0 · on {POD_HOST} · step 29" in (
        jobs.stdout
    )
    home = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", "jobs", "--bring-home", job_id]
        + ["--runtime-dir", str(server.runtime)],
        capture_output=True,
        text=True,
        cwd=server.root,
    )
    assert home.returncode == 0, home.stderr
    beside = f"notes.from-{job_id}.md"
    assert f"kept yours: notes.md; the job's is {beside}" in home.stdout
    assert "replaced: results.csv" in home.stdout and "brought: out/metrics.json" in home.stdout
    assert (server.root / "notes.md").read_text() == "my notes, changed while the job ran\n"
    assert (server.root / beside).read_text() == "the job's notes\n"
    assert (server.root / "results.csv").read_text() == "step,loss\n29,0.1\n"
    assert (server.root / "out" / "metrics.json").read_text() == '{"loss": 0.1}'
    # The job's run resumes from the runtime's work directory, at the job's last step.
    resumed = subprocess.run(
        [sys.executable, "-c", RESUME],
        capture_output=True,
        text=True,
        cwd=server.root,
        env={**os.environ, "GPUWS_WORKDIR": str(server.root)},
        timeout=300,
    )
    assert "resumes at 30" in resumed.stdout, resumed.stdout + resumed.stderr


# -- on a local store: the rules, quickly ---------------------------------------------------------

JOB_ID = "j-00000000abcd"
PASSPHRASE = "correct horse battery staple"


@pytest.fixture(params=["plain", "encrypted"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SyncEngine]:
    """The runtime's engine over a local store, its work directory synced; the workspace plain,
    or encrypted (the job's area then is too, with the same passphrase)."""
    root = tmp_path / "runtime"
    root.mkdir()
    for name, text in {
        "a.txt": "a",
        "b.txt": "b",
        "c.txt": "c",
        "keep.txt": "k",
        "keep.py": "the user's own",
    }.items():
        (root / name).write_text(text)
    engine = SyncEngine(
        SyncSettings(
            workdir=str(root),
            store_url=str(tmp_path / "store"),
            workspace="ws",
            state_dir=str(tmp_path / "runtime-state"),
            create_store=True,
            encryption=Encryption(PASSPHRASE) if request.param == "encrypted" else None,
        )
    )
    engine.open()
    engine.sync()
    yield engine
    engine.close()


def run_elsewhere(tmp_path: Path, workspace: SyncEngine, script: str) -> int:
    """A job run by hand on "another machine" (another folder and state): restored with its
    start marked, then run, its files sent to its area."""
    encrypted = workspace.settings.encryption is not None
    settings = SyncSettings(
        workdir=str(tmp_path / "elsewhere"),
        store_url=workspace.settings.store_url,
        workspace="ws",
        state_dir=str(tmp_path / "elsewhere-state"),
        encryption=Encryption(PASSPHRASE) if encrypted else None,
    )
    Path(settings.workdir).mkdir()
    there = SyncEngine(settings)
    area = SyncEngine(area_settings(settings, JOB_ID, None))
    try:
        restore_for_job(there, area)
    finally:
        area.close()
        baseline = there.index.db_path
        there.close()
    engine = SyncEngine(area_settings(settings, JOB_ID, baseline))
    record = {"id": JOB_ID, "name": "by hand", "command": ["python", "-c", "…"]}
    return run_job(engine, [sys.executable, "-c", script], record, every=60, cwd=settings.workdir)


def test_bringing_home_keeps_every_file_changed_here_since_the_job_began_and_brings_only_complete_checkpoints(
    workspace: SyncEngine, tmp_path: Path
) -> None:
    root = Path(workspace.workdir)
    job = (
        "import os, pathlib\n"
        "for name in ('a.txt', 'b.txt', 'c.txt', 'new.txt', 'twin.txt', 'same.txt'):\n"
        "    pathlib.Path(name).write_text('job ' + name)\n"
        "done = pathlib.Path('.gpuws/checkpoints/r/ckpt-000000005-20260101T000000Z')\n"
        "done.mkdir(parents=True); (done / 'x.bin').write_text('x')\n"
        '(done / \'manifest.json\').write_text(\'{"files": {"x.bin": {"size": 1}}}\')\n'
        "half = pathlib.Path('.gpuws/checkpoints/r/ckpt-000000006-20260101T000001Z')\n"
        "half.mkdir(parents=True); (half / 'x.bin').write_text('half')\n"
        # A manifest alone, listing a file the area does not hold: no checkpoint.
        "lone = pathlib.Path('.gpuws/checkpoints/r/ckpt-000000007-20260101T000002Z')\n"
        "lone.mkdir(parents=True)\n"
        '(lone / \'manifest.json\').write_text(\'{"files": {"model.pt": {"size": 9}}}\')\n'
        "pathlib.Path('clear\\x1b[2J.txt').write_text('an escape in its name')\n"
        "pathlib.Path('sub').mkdir(); pathlib.Path('sub/out.txt').write_text('job out')\n"
    )
    assert run_elsewhere(tmp_path, workspace, job) == 0
    (root / "c.txt").write_text("c changed here and synced")
    workspace.sync()
    (root / "b.txt").write_text("b changed here, not synced yet")
    (root / "twin.txt").write_text("made here meanwhile")
    (root / "same.txt").write_text("job same.txt")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "sub").symlink_to(outside)  # a folder here that leads out of the work directory

    area = Path(area_url(workspace.settings.store_url, "ws")) / JOB_ID
    if workspace.settings.encryption is not None:  # the area is sealed as the workspace is
        assert not any(b"job new.txt" in f.read_bytes() for f in area.rglob("*") if f.is_file())
    else:  # planted by someone who can write the store: a link in the job's files
        (area / "files" / "planted.txt").symlink_to(tmp_path / "secret")
        # and bytecode, which Python would load in place of the script's source
        (area / "files" / "__pycache__").mkdir()
        (area / "files" / "__pycache__" / "job.cpython-311.pyc").write_bytes(b"\x00" * 16)
        (area / "files" / "lib.pyc").write_bytes(b"\x00" * 16)
        # and code a later run would execute, in place of the user's own (unchanged) script
        for rel in ("keep.py", "torch.py", ".gpuwsignore", ".git/hooks/pre-commit"):
            (area / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
            (area / "files" / rel).write_text("planted")

    answer = JobsElsewhere(lambda: workspace).bring_home(JOB_ID)

    assert answer["replaced"] == ["a.txt"]  # as the job began from it: the job's version
    assert (root / "a.txt").read_text() == "job a.txt"
    assert {item["path"] for item in answer["beside"]} == {"b.txt", "c.txt", "twin.txt"}
    for name, mine in (
        ("b.txt", "b changed here, not synced yet"),
        ("c.txt", "c changed here and synced"),
        ("twin.txt", "made here meanwhile"),
    ):
        assert (root / name).read_text() == mine
        beside = root / f"{name[:-4]}.from-{JOB_ID}.txt"
        assert beside.read_text() == f"job {name}"
    assert (root / "new.txt").read_text() == "job new.txt"
    assert (root / "keep.txt").read_text() == "k"  # the job never wrote it: not its output
    assert answer["counts"]["same"] == 1
    run = ".gpuws/checkpoints/r"
    assert (root / run / "ckpt-000000005-20260101T000000Z" / "manifest.json").exists()
    assert not (root / run / "ckpt-000000006-20260101T000001Z").exists()
    skipped = {item["path"]: item["reason"] for item in answer["skipped"]}
    assert "not complete" in skipped[f"{run}/ckpt-000000006-20260101T000001Z/x.bin"]
    assert "leads out of the work directory" in skipped["sub/out.txt"]
    assert list(outside.iterdir()) == []
    lone = f"{run}/ckpt-000000007-20260101T000002Z/manifest.json"
    assert skipped[lone] == "model.pt, which its manifest.json lists, is not in the store"
    assert not (root / run / "ckpt-000000007-20260101T000002Z").exists()
    assert skipped["clear\\x1b[2J.txt"] == "its name has control characters"
    assert not (root / "clear\x1b[2J.txt").exists()
    if workspace.settings.encryption is None:
        assert "never followed" in skipped["planted.txt"]
        assert not (root / "planted.txt").exists()
        for rel in ("__pycache__/job.cpython-311.pyc", "lib.pyc"):
            assert skipped[rel].startswith("compiled Python: this runtime compiles its own")
            assert not (root / rel).exists()
        assert skipped["keep.py"].startswith("code, which bringing home never brings")
        assert (root / "keep.py").read_text() == "the user's own"
        assert skipped["torch.py"].startswith("code, which bringing home never brings")
        for rel in (".gpuwsignore", ".git/hooks/pre-commit"):
            assert skipped[rel].startswith("a hidden file, which bringing home never brings")
        assert not any((root / rel).exists() for rel in ("torch.py", ".git", ".gpuwsignore"))


def test_before_any_job_ran_elsewhere_none_is_listed_and_bringing_one_home_is_no_such_job(
    workspace: SyncEngine,
) -> None:
    elsewhere = JobsElsewhere(lambda: workspace)
    elsewhere.look()
    assert elsewhere.view() == {"jobs": [], "more": 0, "problems": [], "error": None}
    with pytest.raises(NoSuchJobElsewhere, match="No job j-00000000abcd has run elsewhere"):
        elsewhere.bring_home(JOB_ID)


@pytest.mark.parametrize("workspace", ["plain"], indirect=True)
def test_the_listing_of_areas_anyone_can_write_is_bounded_and_lists_what_cannot_be_read(
    workspace: SyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_elsewhere(tmp_path, workspace, "open('out.txt', 'w').write('x')") == 0
    areas = Path(area_url(workspace.settings.store_url, "ws"))
    (areas / "not-a-job\x1b[31m").mkdir()
    for job_id, record in {
        "j-0000000000b1": b"x" * (MAX_RECORD_BYTES + 1),
        "j-0000000000b2": b"{not json",
        "j-0000000000b3": json.dumps({"name": "\u202egnp.py", "state": "rm -rf /"}).encode(),
    }.items():
        (areas / job_id / ".gpuws").mkdir(parents=True)
        (areas / job_id / ".gpuws" / RECORD).write_bytes(record)
    linked = areas / "j-0000000000b4" / ".gpuws"
    linked.mkdir(parents=True)
    (linked / RECORD).symlink_to(areas / "j-0000000000b3" / ".gpuws" / RECORD)
    fifo = areas / "j-0000000000b5" / ".gpuws"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / RECORD)  # read, it would hold the look for ever
    (areas / "j-0000000000b6").symlink_to(areas / JOB_ID)  # a job's area, somewhere else
    # A manifest alone, with a high step, in the real job's area: no checkpoint, no step.
    planted = areas / JOB_ID / "files/.gpuws/checkpoints/r/ckpt-000099999-20260101T000000Z"
    planted.mkdir(parents=True)
    (planted / "manifest.json").write_text('{"step": 99999, "files": {"x.bin": {"size": 1}}}')
    elsewhere = JobsElsewhere(lambda: workspace)
    elsewhere.look()
    view = elsewhere.view()
    jobs = {job["id"]: job for job in view["jobs"]}
    assert jobs[JOB_ID]["state"] == "ended" and jobs[JOB_ID]["name"] == "by hand"
    assert [o["path"] for o in jobs[JOB_ID]["outputs"]] == ["out.txt"]
    assert jobs[JOB_ID]["step"] is None and jobs[JOB_ID]["checkpoints"] == []
    # A name that would turn the text around is shown escaped; a state no job writes is none.
    assert jobs["j-0000000000b3"]["name"] == "\\u202egnp.py"
    assert jobs["j-0000000000b3"]["state"] == "starting"
    problems = {p["id"]: p["reason"] for p in view["problems"]}
    assert "larger than 64 KiB" in problems["j-0000000000b1"]
    assert "j-0000000000b2" in problems
    assert problems["not-a-job\\x1b[31m"] == "not a job's id: not looked at"
    # A link or a FIFO where a record goes: a problem named with why, never a job "starting".
    assert problems["j-0000000000b4"].endswith("symbolic link, which is never followed")
    assert problems["j-0000000000b5"] == "its record is a named pipe (FIFO), which is never read"
    assert problems["j-0000000000b6"] == "a symbolic link, which is never followed: not looked at"
    assert view["error"] is None and view["more"] == 0
    # However many areas there are, a look reads MAX_JOBS of them and counts the others.
    monkeypatch.setattr(bringhome, "MAX_JOBS", 2)
    elsewhere.look()
    view = elsewhere.view()
    assert len(view["jobs"]) + len(view["problems"]) == 2 and view["more"] == 6
    (areas / "j-0000000000b6").unlink()  # gone from the store: no longer listed
    monkeypatch.setattr(bringhome, "MAX_JOBS", 20)
    elsewhere.look()
    assert "j-0000000000b6" not in {p["id"] for p in elsewhere.view()["problems"]}


@pytest.mark.parametrize("workspace", ["encrypted"], indirect=True)
def test_a_plain_area_in_an_encrypted_workspace_is_listed_as_not_read_and_left_as_it_is(
    workspace: SyncEngine,
) -> None:
    planted = Path(area_url(workspace.settings.store_url, "ws")) / "j-0000000000c1" / ".gpuws"
    planted.mkdir(parents=True)
    (planted / RECORD).write_text('{"name": "planted", "state": "running"}')
    elsewhere = JobsElsewhere(lambda: workspace)
    elsewhere.look()
    view = elsewhere.view()
    assert view["jobs"] == []
    assert view["problems"] == [
        {
            "id": "j-0000000000c1",
            "reason": "its area is not encrypted as the workspace is: not read",
        }
    ]
    assert [p.name for p in planted.iterdir()] == [RECORD]  # no key made there by looking
