"""Records what makes up a Python environment (packages, their origins, torch's CUDA build) and the machine's GPUs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from .errors import InterpreterError

FORMAT = 1
# The probe prints its result after this marker: importing torch or a sitecustomize may print
# to stdout first, and those lines must not be taken for the result.
MARKER = "@@gpuws-env@@"

# Runs inside the TARGET interpreter, which may be older than ours: plain 3.8 syntax, standard
# library only.
PROBE = r"""
import importlib.metadata as md, json, platform, re, sys, sysconfig

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def origin(dist):
    text = dist.read_text("direct_url.json")
    if not text:
        return {"kind": "index"}
    try:
        info = json.loads(text)
    except ValueError:
        return {"kind": "unknown"}
    url = info.get("url", "")
    if "vcs_info" in info:
        vcs = info["vcs_info"]
        return {"kind": "vcs", "url": url, "vcs": vcs.get("vcs"), "commit": vcs.get("commit_id"),
                "requested_revision": vcs.get("requested_revision")}
    if "archive_info" in info:
        archive = info["archive_info"]
        hashes = archive.get("hashes") or {}
        digest = ("sha256=" + hashes["sha256"]) if "sha256" in hashes else archive.get("hash")
        return {"kind": "archive", "url": url, "hash": digest}
    if "dir_info" in info:
        return {"kind": "editable" if info["dir_info"].get("editable") else "dir", "url": url}
    return {"kind": "url", "url": url}

packages, seen = [], set()
for dist in md.distributions():
    name = dist.metadata["Name"]
    if not name or norm(name) in seen:
        continue  # the first on sys.path is the one an import sees
    seen.add(norm(name))
    installer = (dist.read_text("INSTALLER") or "").strip() or None
    path = getattr(dist, "_path", None)
    packages.append({"name": norm(name), "version": dist.version, "installer": installer,
                     "requested": dist.read_text("REQUESTED") is not None, "origin": origin(dist),
                     "location": str(path) if path is not None else None})
packages.sort(key=lambda p: p["name"])

torch = None
if WANT_TORCH and "torch" in seen:
    torch = {}
    try:
        import torch as t
        torch["version"] = t.__version__
        torch["cuda"] = getattr(t.version, "cuda", None)
        torch["hip"] = getattr(t.version, "hip", None)
        try:
            torch["cudnn"] = t.backends.cudnn.version()
        except Exception:
            torch["cudnn"] = None
        torch["arch_list"] = list(t.cuda.get_arch_list())
    except Exception as err:
        torch["error"] = "%s: %s" % (type(err).__name__, err)

result = {
    "python": {"implementation": sys.implementation.name, "version": platform.python_version(),
               "executable": sys.executable, "prefix": sys.prefix,
               "site": sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})},
    "platform": {"system": platform.system(), "machine": platform.machine(), "release": platform.release(),
                 "libc": "-".join(platform.libc_ver()).strip("-") or None},
    "packages": packages,
    "torch": torch,
}
print("\n" + MARKER + json.dumps(result))
"""


def resolve_python(python: str) -> str:
    """The interpreter's full path, or a clear error when there is none by that name."""
    found = shutil.which(python) if os.sep not in python else python
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise InterpreterError(
            f"Python interpreter not found: {python!r} (give the path to a python executable)"
        )
    # Absolute, since the probe runs elsewhere; not resolved, since a venv's python is a link
    # whose own path is what makes it the venv's.
    return os.path.abspath(found)


def probe_environment(
    python: str, include_torch: bool = True, timeout: float = 600, nice: int = 0
) -> dict[str, Any]:
    """Runs PROBE in `python`: its version, platform, distributions and (optionally) torch.
    `nice`: how much lower the probe's CPU priority is than this process's (the server's own
    check, in the background: a relaunched job starting beside it comes first)."""
    python = resolve_python(python)
    script = PROBE.replace("WANT_TORCH", "True" if include_torch else "False").replace(
        "MARKER", repr(MARKER)
    )
    # A neutral working directory: with -c the current folder is first on sys.path, and a
    # project folder could shadow what is installed; so could any user's file in a shared /tmp,
    # and run as this user: the folder is a new, empty one of this process. The environment is
    # kept as the kernel sees it (PYTHONPATH, user site), so -I is not used.
    try:
        with tempfile.TemporaryDirectory(prefix="gpuws-probe-") as empty:
            with subprocess.Popen(
                [python, "-c", script],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=empty,
            ) as process:
                if nice:
                    # Set from here, once it runs (no preexec_fn in a threaded server): it has
                    # done nothing heavy yet.
                    with contextlib.suppress(OSError):
                        priority = os.getpriority(os.PRIO_PROCESS, 0)
                        os.setpriority(os.PRIO_PROCESS, process.pid, min(19, priority + nice))
                try:
                    stdout, stderr = process.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
                    raise
            done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    except OSError as err:
        raise InterpreterError(f"Cannot run {python}: {err.strerror or err}") from None
    except subprocess.TimeoutExpired:
        raise InterpreterError(
            f"{python} did not list its packages within {timeout:.0f} s"
        ) from None
    _, marker, payload = done.stdout.rpartition(MARKER)
    if done.returncode != 0 or not marker:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InterpreterError(f"{python} could not list its packages: {last}")
    return json.loads(payload)


def read_machine(nvml: Any = None) -> dict[str, Any] | None:
    """The NVIDIA driver and each GPU's name and compute capability; None where NVML does not work."""
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
    except Exception:  # no library, no driver, no permission: a machine without usable GPUs
        return None
    try:
        driver = nvml.nvmlSystemGetDriverVersion()
        cuda = _optional(nvml.nvmlSystemGetCudaDriverVersion)
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            capability = _optional(nvml.nvmlDeviceGetCudaComputeCapability, handle)
            gpus.append(
                {
                    "name": _text(name),
                    "compute_capability": f"{capability[0]}.{capability[1]}"
                    if capability
                    else None,
                }
            )
        return {
            "driver_version": _text(driver),
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}"
            if isinstance(cuda, int)
            else None,
            "gpus": gpus,
        }
    except Exception:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _optional(query: Any, *args: Any) -> Any:
    try:
        return query(*args)
    except Exception:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def apt_manual() -> list[str] | None:
    """Debian packages installed by hand, or None where there is no apt-mark."""
    return _command_lines(["apt-mark", "showmanual"])


def conda_packages(prefix: str) -> list[dict[str, str]] | None:
    """conda's view of the environment at `prefix`, or None where conda is absent or refuses."""
    conda = shutil.which("conda")
    if not conda:
        return None
    try:
        done = subprocess.run(
            [conda, "list", "--json", "--prefix", prefix],
            capture_output=True,
            text=True,
            timeout=120,
        )
        listed = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(listed, list):
        return None
    return [
        {"name": p.get("name"), "version": p.get("version"), "channel": p.get("channel")}
        for p in listed
    ]


def _command_lines(command: list[str]) -> list[str] | None:
    if not shutil.which(command[0]):
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sorted(done.stdout.split()) if done.returncode == 0 else None


def capture(
    python: str = sys.executable,
    *,
    include_torch: bool = True,
    machine: bool = True,
    apt: bool = False,
    conda: bool = False,
    nvml: Any = None,
    nice: int = 0,
) -> dict[str, Any]:
    """A snapshot of `python`'s environment (and this machine's GPUs), identified by `hash`.

    The probe runs in the target interpreter, so `python` may be any other environment.
    Importing torch is slow (seconds); `include_torch=False` skips it where only the package
    list is needed (restore's plan).
    """
    snapshot: dict[str, Any] = {"format": FORMAT, "captured_at": time.time()}
    snapshot.update(probe_environment(python, include_torch, nice=nice))
    if machine:
        snapshot["machine"] = read_machine(nvml)
    if apt:
        snapshot["apt"] = apt_manual()
    if conda:
        snapshot["conda"] = conda_packages(snapshot["python"]["prefix"])
    snapshot["hash"] = content_hash(snapshot)
    return snapshot


def content_hash(snapshot: dict[str, Any]) -> str:
    """sha256 over what defines the environment, canonical JSON.

    Left out: times, paths (the same environment lives at another prefix after a restore), the
    machine (the same environment on another GPU is not a new one) and package origins (a
    package restored from a kept wheel records another origin than the folder it was first
    built from, yet it is the same package at the same version).
    """
    python = snapshot.get("python") or {}
    platform = snapshot.get("platform") or {}
    torch = snapshot.get("torch") or {}
    defining = {
        "python": [python.get("implementation"), python.get("version")],
        "platform": [platform.get("system"), platform.get("machine")],
        "packages": sorted((p["name"], p["version"]) for p in snapshot.get("packages", [])),
        "torch": {key: torch.get(key) for key in ("version", "cuda", "hip", "cudnn", "arch_list")},
        "apt": snapshot.get("apt"),
        "conda": snapshot.get("conda"),
    }
    canonical = json.dumps(defining, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def packages_by_name(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The snapshot's packages keyed by normalized name."""
    return {p["name"]: p for p in snapshot.get("packages", [])}
