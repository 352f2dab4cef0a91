"""Environment restore speed, side by side with what a user would do instead.

    python bench/env_bench.py [--rounds 3] [--tmp DIR]

A 20-package environment (small packages from PyPI, pinned to what the index resolves today)
is built once and snapshotted with every wheel kept in a local-folder store. Then, each round,
into a fresh venv (copied from a bare one, untimed):
- `restore` offline from the store's wheels, with uv and with pip as the installer;
- `pip install -r requirements.txt` from the index, pip's HTTP cache warm (as on a machine that
  installed these before) and cold (`--no-cache-dir`, as on a fresh runtime).
The restore's time includes all of its work: listing the target, fetching wheels from the
store, installing. Prints a Markdown table with medians and ratios; no assertions (the
machines are noisy, and the index is on the network).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_gpu_ws.envsnap import capture, load_snapshot, restore, save_snapshot  # noqa: E402
from jupyter_gpu_ws.store import Store, open_backend  # noqa: E402

PACKAGES = [
    "six",
    "idna",
    "certifi",
    "charset-normalizer",
    "urllib3",
    "requests",
    "packaging",
    "pyparsing",
    "attrs",
    "click",
    "itsdangerous",
    "markupsafe",
    "jinja2",
    "werkzeug",
    "flask",
    "blinker",
    "tomli",
    "typing-extensions",
    "zipp",
    "iniconfig",
]
BASE = {"pip", "setuptools"}  # what `python -m venv` puts in every venv


def run(*command: str) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tmp", default=None, help="where the venvs and the store go (default: the system's)"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuws-env-bench-", dir=args.tmp))
    try:
        bench(root, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench(root: Path, rounds: int) -> None:
    base = root / "base"
    run(sys.executable, "-m", "venv", str(base))
    source = root / "source"
    shutil.copytree(base, source, symlinks=True)
    run(str(source / "bin" / "python"), "-m", "pip", "install", "-q", *PACKAGES)
    store = Store(open_backend(str(root / "store")), "bench")
    saved = save_snapshot(store, capture(str(source / "bin" / "python")), keep_all_wheels=True)
    snapshot = load_snapshot(store, saved.id)
    pins = [f"{p['name']}=={p['version']}" for p in snapshot["packages"] if p["name"] not in BASE]
    requirements = root / "requirements.txt"
    requirements.write_text("\n".join(pins) + "\n")

    def fresh(name: str) -> str:
        target = root / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target, symlinks=True)
        return str(target / "bin" / "python")

    def restore_with(installer: str) -> Callable[[], object]:
        def action() -> None:
            report = restore(snapshot, store, python, offline=True, installer=installer)  # type: ignore[arg-type]
            if not report.ok or len(report.installed) != len(pins):
                raise SystemExit(f"restore with {installer} failed: {report.to_dict()}")

        return action

    def pip_install(*extra: str) -> Callable[[], object]:
        return lambda: run(python, "-m", "pip", "install", "-q", *extra, "-r", str(requirements))

    methods: dict[str, Callable[[], Callable[[], object]]] = {
        "gpuws restore, offline from the store (uv)": lambda: restore_with("uv"),
        "gpuws restore, offline from the store (pip)": lambda: restore_with("pip"),
        "pip install -r requirements.txt, index, warm pip cache": lambda: pip_install(),
        "pip install -r requirements.txt, index, --no-cache-dir": lambda: pip_install(
            "--no-cache-dir"
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(rounds):
        for name, make in methods.items():
            python = fresh("target")
            times[name].append(timed(make()))
    medians = {name: statistics.median(values) for name, values in times.items()}
    ours = medians["gpuws restore, offline from the store (uv)"]
    print(
        f"Environment restore: {len(pins)} packages into a fresh venv, median of {rounds} rounds "
        f"({platform.python_implementation()} {platform.python_version()}, {platform.machine()})\n"
    )
    print("| method | median s | all rounds s | vs restore (uv) |")
    print("|---|---:|---|---:|")
    for name, value in medians.items():
        rounds_text = ", ".join(f"{t:.2f}" for t in times[name])
        print(f"| {name} | {value:.2f} | {rounds_text} | {value / ours:.1f}x |")


if __name__ == "__main__":
    main()
