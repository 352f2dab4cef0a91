"""Server configuration for the browser tests (Galata).

GPUWS_UI_TEST_GPUS=1 selects the NVML test double with the GPUs in fake-gpus.json, copied to
a scratch file (GPUWS_UI_GPUS_FILE, default <tmp>/gpuws-ui-gpus.json) that the tests and the
kernels change; otherwise the real NVML binding runs, which on a machine without a GPU
reports none.

GPUWS_UI_TEST_RELEASE=1 is the server that release.spec.ts releases (port 8890): a test stops
it, so it has folders of its own and no other test uses it.

GPUWS_UI_TEST_FIRST_HOUR=1 is a newcomer's first server (port 8893), which first-hour.spec.ts
walks through the README's first hour: nothing tracked yet, a store on another disk.

GPUWS_UI_TEST_JOBS=1 is the server of a newcomer's jobs (port 8894), which newcomer-jobs.spec.ts
starts itself, kills with kill -9 and starts again on the same folders (GPUWS_UI_TEST_AGAIN=1: the
same machine's server started anew, which keeps its work directory, state and store).

GPUWS_UI_TEST_FAULTS=1 is the server of the store's faults (port 8895), which faults.spec.ts
starts itself and stops: its store is S3 behind a proxy that fails on demand (tests/faultstore.py),
reached through the environment that spec gives it (GPUWS_STORE, AWS_*).

GPUWS_UI_TEST_LAYOUT=1 is the server of the panel's pictures without a GPU (port 8892), which
panel-layout.spec.ts compares with its reviewed ones: no other test uses it, so the panel holds
only what that spec puts there, whatever ran before. Its store is encrypted.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821
c.ServerApp.allow_root = True  # noqa: F821
c.LabApp.extension_manager = "readonly"  # noqa: F821
c.GpuWorkspace.sample_interval = 0.5  # noqa: F821

# A fresh work directory and store for each server, at paths the tests know
# (<tmp>/gpuws-ui[-gpus|-release]-root, and -store there or in /dev/shm, below), so a test can
# write files as a user's program would.
_release = bool(os.environ.get("GPUWS_UI_TEST_RELEASE"))
_fresh = bool(os.environ.get("GPUWS_UI_TEST_FRESH"))
_layout = bool(os.environ.get("GPUWS_UI_TEST_LAYOUT"))
_first_hour = bool(os.environ.get("GPUWS_UI_TEST_FIRST_HOUR"))
_jobs = bool(os.environ.get("GPUWS_UI_TEST_JOBS"))
_faults = bool(os.environ.get("GPUWS_UI_TEST_FAULTS"))
_again = bool(os.environ.get("GPUWS_UI_TEST_AGAIN"))
if _release:
    _name = "gpuws-ui-release"
elif _fresh:
    _name = "gpuws-ui-fresh"
elif _layout:
    _name = "gpuws-ui-layout"
elif _first_hour:
    _name = "gpuws-ui-first-hour"
elif _jobs:
    _name = "gpuws-ui-jobs"
elif _faults:
    _name = "gpuws-ui-faults"
elif os.environ.get("GPUWS_UI_TEST_GPUS"):
    _name = "gpuws-ui-gpus"
else:
    _name = "gpuws-ui"
_tmp = Path(tempfile.gettempdir())
# The store of the plain and release servers is on another file system than the work directory
# (/dev/shm, where there is one), as a mounted drive would be: the panel says "All saved" only
# then. The GPU server's store stays beside its work directory, on the same disk, as the
# embedded default is, and the panel says that it is not saved anywhere else.
_shm = Path("/dev/shm")
_other_disk = _shm if _shm.is_dir() and _shm.stat().st_dev != _tmp.stat().st_dev else _tmp
_store_base = _tmp if os.environ.get("GPUWS_UI_TEST_GPUS") else _other_disk
if not _again:
    for _part in ("root", "state", "env"):
        shutil.rmtree(_tmp / f"{_name}-{_part}", ignore_errors=True)
    shutil.rmtree(_store_base / f"{_name}-store", ignore_errors=True)
    # A new store, made as a user makes one: its folder is never made by the sync where the
    # folder it goes in may be an empty mount point (/dev/shm may well be empty).
    (_store_base / f"{_name}-store").mkdir()
    (_tmp / f"{_name}-root").mkdir()
c.ServerApp.root_dir = str(_tmp / f"{_name}-root")  # noqa: F821
c.GpuWorkspace.store_url = str(_store_base / f"{_name}-store")  # noqa: F821
c.GpuWorkspace.state_dir = str(_tmp / f"{_name}-state")  # noqa: F821
c.GpuWorkspace.workspace = "ui-tests"  # noqa: F821
if _fresh:
    # GPUWS_UI_TEST_FRESH=1 (port 8891): a fresh machine. Its workspace has the default name
    # (new, empty) while the store holds the user's work under another name, as after moving
    # the project folder: the panel offers that one.
    c.GpuWorkspace.workspace = ""  # noqa: F821
    _elsewhere = _store_base / f"{_name}-store" / "someone-project" / "files"
    _elsewhere.mkdir(parents=True)
    (_elsewhere / "notes-from-yesterday.md").write_text("written on another machine\n")
# Changes wait 4 s to settle and uploads are capped, so pending work and progress stay visible.
c.GpuWorkspace.sync_debounce = 4.0  # noqa: F821
c.GpuWorkspace.bandwidth_limit = 40 * 2**20  # noqa: F821
# A small environment of its own (pip and setuptools), so the Environment section and the
# snapshot at each persist see something a test can change (<tmp>/gpuws-ui[-gpus]-env). The
# release server's is empty: its persist still snapshots an environment, and it starts without
# the seconds that installing pip takes.
_venv_options = ["--without-pip"] if _release or _jobs or _faults else []
if not _again:
    subprocess.run(
        [sys.executable, "-m", "venv", *_venv_options, str(_tmp / f"{_name}-env")], check=True
    )
c.GpuWorkspace.env_python = str(_tmp / f"{_name}-env" / "bin" / "python")  # noqa: F821

if _jobs:
    # Jobs' files reach the store at once, and a job stopped for the runtime's end has 5 s.
    c.GpuWorkspace.sync_debounce = 0.2  # noqa: F821
    c.GpuWorkspace.job_stop_grace = 5.0  # noqa: F821

if _layout:
    # The layout server's store is encrypted: the Sync section says so, and the store holds
    # ciphertext only (panel-layout.spec.ts reads it).
    c.GpuWorkspace.encrypt = True  # noqa: F821
    os.environ["GPUWS_PASSPHRASE"] = "the layout server's passphrase"
    # The layout server's runtime has no known end, until a test writes a deadline into this file
    # (panel-layout.spec.ts: a 40-minute runtime); missing means no deadline from it.
    _deadline_file = _tmp / "gpuws-ui-layout-deadline"
    _deadline_file.unlink(missing_ok=True)
    os.environ["GPUWS_DEADLINE_FILE"] = str(_deadline_file)
    # The environment's installers ask this package index, on loopback: nothing listens there
    # unless a test serves one (panel-layout.spec.ts holds a restore there to show it running).
    os.environ["UV_INDEX_URL"] = os.environ["PIP_INDEX_URL"] = "http://127.0.0.1:8899/simple/"

if os.environ.get("GPUWS_UI_TEST_GPUS"):
    scratch = Path(
        os.environ.setdefault(
            "GPUWS_UI_GPUS_FILE", str(Path(tempfile.gettempdir()) / "gpuws-ui-gpus.json")
        )
    )
    shutil.copy(Path(__file__).with_name("fake-gpus.json"), scratch)
    c.GpuWorkspace.nvml_test_double = str(scratch)  # noqa: F821
    # A 25-minute runtime: the 30-minute warning is due at once, the countdown is visible.
    c.GpuWorkspace.max_runtime = "25m"  # noqa: F821
    # Its automatic persist a minute before the end, after any run of the suite: with the
    # default lead (10 min) it came 15 min after the start, during a slow run, and the
    # Runtime section then says "Automatic persist done" where runtime.spec reads the countdown.
    c.GpuWorkspace.persist_lead_time = 60.0  # noqa: F821
    # A GCP preemption watch whose metadata server cannot be reached (nothing listens on port
    # 1): the Runtime section says it cannot read the notices.
    c.GpuWorkspace.preemption_clouds = ["gcp"]  # noqa: F821
    c.GpuWorkspace.gcp_metadata_url = "http://127.0.0.1:1"  # noqa: F821
    c.GpuWorkspace.preemption_poll_interval = 1.0  # noqa: F821

if _release:
    # Changes wait 10 minutes to settle, so the file the test writes (larger than an immediate
    # upload takes) stays pending until the release's persist uploads it.
    c.GpuWorkspace.sync_debounce = 600.0  # noqa: F821

if _faults:
    # The store is the S3 bucket behind the fault proxy, which the spec names.
    c.GpuWorkspace.store_url = os.environ["GPUWS_STORE"]  # noqa: F821
    # A change goes at once, so the store is asked the moment the spec writes a file.
    c.GpuWorkspace.sync_debounce = 0.05  # noqa: F821
    # The lease is renewed every second (a quarter of it): a store refusing its conditional
    # writes is met within a second of the fault, with no file written.
    c.GpuWorkspace.lease_ttl = 4.0  # noqa: F821
    # A countdown that moves every second: the panel holds it still once the server is gone.
    c.GpuWorkspace.max_runtime = "25m"  # noqa: F821
    c.GpuWorkspace.persist_lead_time = 60.0  # noqa: F821
