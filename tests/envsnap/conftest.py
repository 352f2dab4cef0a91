"""Real virtual environments for the environment snapshot tests, made once and copied per test.

A venv copied with its links keeps working for `python -m …` (its prefix comes from where its
python lies), which is all these tests and the code under test use.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jupyter_gpu_ws.envsnap import SaveResult, capture, save_snapshot
from jupyter_gpu_ws.store import Store, open_backend

PINNED = {"six": "1.16.0", "idna": "3.7"}
LOCAL = ("local-pkg", "0.3.1")
EDITABLE = ("edit-pkg", "1.0")

T = TypeVar("T")


def run(*command: str | Path) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    return done.stdout


def python_of(venv: Path) -> str:
    return str(venv / "bin" / "python")


def make_project(root: Path, name: str, version: str) -> Path:
    """A one-module setuptools project, as a user's own code would be."""
    module = name.replace("-", "")
    (root / "src" / module).mkdir(parents=True)
    (root / "src" / module / "__init__.py").write_text(f"VALUE = {version!r}\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
    )
    return root


def versions(python: str) -> dict[str, str]:
    return {
        p["name"]: p["version"]
        for p in capture(python, include_torch=False, machine=False)["packages"]
    }


def store_at(path: Path) -> Store:
    """The workspace `ws` in a local-folder store at `path`, made as a new store is."""
    path.mkdir(parents=True, exist_ok=True)
    return Store(open_backend(str(path)), "ws")


def made_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """What `make(folder)` makes and returns, made once for the whole run however many test
    processes (pytest-xdist) ask: the first makes it in a folder all of them share, under a
    lock; the others wait for it and read what it returned. Pip installs are most of the CPU
    these fixtures cost, and each process used to make its own."""
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / f"made-once-{name}"
    answer = shared / f"made-once-{name}.pickle"
    with open(shared / f"made-once-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not answer.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a maker that failed half-way
            folder.mkdir()
            answer.write_bytes(pickle.dumps(make(folder)))
        return pickle.loads(answer.read_bytes())


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare venv (pip and setuptools only), made once: `python -m venv` takes seconds."""

    def make(folder: Path) -> Path:
        run(sys.executable, "-m", "venv", folder / "venv")
        return folder / "venv"

    return made_once(tmp_path_factory, "base-venv", make)


@pytest.fixture
def new_venv(base_venv: Path, tmp_path: Path) -> Callable[[str], str]:
    """A fresh copy of the bare venv: its python."""

    def make(name: str = "fresh") -> str:
        shutil.copytree(base_venv, tmp_path / name, symlinks=True)
        return python_of(tmp_path / name)

    return make


@pytest.fixture(scope="session")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    def make(root: Path) -> dict[str, Path]:
        return {
            LOCAL[0]: make_project(root / "local", *LOCAL),
            EDITABLE[0]: make_project(root / "edit", *EDITABLE),
        }

    return made_once(tmp_path_factory, "projects", make)


@pytest.fixture(scope="session")
def source_venv(
    base_venv: Path, projects: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The environment a user built: two pinned packages from PyPI, one from a local folder,
    one editable. Never changed by a test: copy it (`copy_venv`) to change it."""

    def make(folder: Path) -> Path:
        venv = folder / "venv"
        shutil.copytree(base_venv, venv, symlinks=True)
        python = python_of(venv)
        run(
            python,
            "-m",
            "pip",
            "install",
            "-q",
            *(f"{n}=={v}" for n, v in PINNED.items()),
            projects[LOCAL[0]],
        )
        run(python, "-m", "pip", "install", "-q", "-e", projects[EDITABLE[0]])
        return venv

    return made_once(tmp_path_factory, "source-venv", make)


@pytest.fixture
def source_python(source_venv: Path) -> str:
    return python_of(source_venv)


@pytest.fixture
def copy_venv(tmp_path: Path) -> Callable[[Path, str], str]:
    def copy(venv: Path, name: str = "copy") -> str:
        shutil.copytree(venv, tmp_path / name, symlinks=True)
        return python_of(tmp_path / name)

    return copy


@pytest.fixture(scope="session")
def snapshot_store(
    source_venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, SaveResult]:
    """The source environment snapshotted with every wheel kept, in a local-folder store.
    Tests that change the store copy its folder first (`store_copy`)."""

    def make(root: Path) -> tuple[Path, SaveResult]:
        snapshot = capture(python_of(source_venv))
        return root, save_snapshot(store_at(root), snapshot, keep_all_wheels=True)

    return made_once(tmp_path_factory, "snapshot-store", make)


@pytest.fixture
def store_copy(snapshot_store: tuple[Path, SaveResult], tmp_path: Path) -> Store:
    shutil.copytree(snapshot_store[0], tmp_path / "store")
    return store_at(tmp_path / "store")


@pytest.fixture
def no_index(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to make any attempt to reach an index fail: what installs then came from the store."""

    def block() -> None:
        dead = "http://127.0.0.1:9/simple"
        for name in ("PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX"):
            monkeypatch.setenv(name, dead)
        for name in (
            "PIP_EXTRA_INDEX_URL",
            "UV_EXTRA_INDEX_URL",
            "PIP_FIND_LINKS",
            "UV_FIND_LINKS",
        ):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)

    return block


def packages(snapshot: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["version"] for p in snapshot["packages"]}


class FileServer(ThreadingHTTPServer):
    """A web server on 127.0.0.1 serving one folder, and logging every request it gets: an
    "attacker's index", or the place a URL origin points to."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.requests: list[str] = []
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(folder), **kwargs)

            def do_GET(self) -> None:
                server.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[FileServer]:
    folder = tmp_path / "served"
    folder.mkdir()
    server = FileServer(folder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def serve_wheel_of(store: Store, name: str, server: FileServer) -> dict[str, Any]:
    """Move `name`'s wheel out of the store onto `server`: the package's origin becomes that URL
    (an archive, as PEP 610 records one), and no wheel of it is kept."""
    wheels = Path(store.backend.root) / store.workspace / ".gpuws" / "wheels"  # type: ignore[attr-defined]
    [wheel] = [w for w in wheels.iterdir() if w.name.startswith(name.replace("-", "_") + "-")]
    target = server.folder / wheel.name
    shutil.move(str(wheel), target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    return {"kind": "archive", "url": f"{server.url}/{wheel.name}", "hash": f"sha256={digest}"}
