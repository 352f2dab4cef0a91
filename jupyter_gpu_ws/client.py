"""The kernel's way to the Jupyter Server that started it (for `%gpuws` and `gpuws.resume()`):
its URL and token from the runtime folder, and one JSON request."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .checkpoints import protocol

# The server exports its process id to the kernels it starts (app.py), so a kernel finds its
# own server even when several run on the machine.
SERVER_PID_ENV = "GPUWS_SERVER_PID"


class ServerUnreachable(Exception):
    """No server to ask, or it answered with an error (the message says which)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def find_server() -> tuple[str, str]:
    """The Jupyter Server that started this kernel (or the shell of this process: a `torchrun`
    rank launched from a Jupyter terminal): its URL and token, from its runtime file."""
    _, runtime = protocol.kernel_identity()
    server_pid = os.environ.get(SERVER_PID_ENV)
    if runtime is None:
        if not server_pid:
            raise ServerUnreachable("This Python does not run in a Jupyter kernel")
        # Not a kernel: only the server that exported its pid to this process's environment.
        folder = protocol.runtime_folder()
        runtime, candidates = folder, [folder / f"jpserver-{server_pid}.json"]
    else:
        candidates = [runtime / f"jpserver-{pid}.json" for pid in (server_pid, os.getppid()) if pid]
        if server_pid:
            # A kernel whose connection file is not in its server's runtime folder (a notebook
            # job's kernel: nbclient puts it in /tmp) finds its server where the server says.
            candidates.append(protocol.runtime_folder() / f"jpserver-{server_pid}.json")
        others = list(runtime.glob("jpserver-*.json"))
        if len(others) == 1:
            candidates += others  # one server on the machine: that one
    for path in candidates:
        try:
            info = json.loads(Path(path).read_text())
            return info["url"].rstrip("/") + "/", info.get("token", "")
        except (OSError, ValueError, KeyError):
            continue
    raise ServerUnreachable(
        "No Jupyter Server found for this kernel (is it running under Jupyter?)"
    )


def call(path: str, method: str = "GET", body: Any = None, timeout: float = 30) -> Any:
    url, token = find_server()
    return request(url, token, path, method, body, timeout)


def running_server(runtime_dir: str | None = None, url: str | None = None) -> tuple[str, str]:
    """The running Jupyter Server to ask (for `jupyter gpuws persist` in a terminal or a
    Kubernetes preStop hook): its URL and token, from the runtime folder's server files.

    `url` picks one of several; a single server is used as it is. Under JupyterHub the file's
    token is the server's own API token; `JUPYTERHUB_API_TOKEN` or `JUPYTER_TOKEN` stand in
    where a file has none.
    """
    folder, servers = _runtime_folder(runtime_dir), running_servers(runtime_dir)
    if url:
        # As Jupyter prints it: http://127.0.0.1:8888/lab?token=… (the token taken, the rest left).
        parts = urllib.parse.urlsplit(url)
        given = urllib.parse.parse_qs(parts.query).get("token", [""])[0]
        path = parts.path.rstrip("/")
        path = path.removesuffix("/lab").removesuffix("/tree")
        wanted = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", "")) + "/"
        servers = [s for s in servers if s[0] == wanted] or [(wanted, _token({}))]
        if given:
            servers = [(s[0], given) for s in servers]
    if not servers:
        raise ServerUnreachable(f"No running Jupyter Server found in {folder}")
    if len(servers) > 1 and not url:
        # The one whose folder holds the current one (the deepest, where they nest): run in a
        # work directory, the command means that directory's server, as `status` does.
        here = _server_of(os.getcwd(), _server_files(Path(folder)))
        if here is not None:
            return here
        raise ServerUnreachable(
            "Several Jupyter Servers run here ("
            + ", ".join(s[0] for s in servers)
            + "), none of them in this folder: run the command in a server's work directory, "
            "or name one with --server URL"
        )
    if len(servers) > 1:
        raise ServerUnreachable(
            "Several Jupyter Servers run here ("
            + ", ".join(s[0] for s in servers)
            + "): name one with --server URL"
        )
    return servers[0]


def _server_of(folder: str, infos: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The server (URL, token) whose root folder holds `folder`, the deepest where they nest;
    None where none does, or two share the deepest."""
    real = os.path.realpath(folder)
    best: list[tuple[int, dict[str, Any]]] = []
    for info in infos:
        root = info.get("root_dir")
        if not isinstance(root, str) or not root:
            continue
        root = os.path.realpath(root)
        if real == root or real.startswith(root.rstrip("/") + "/"):
            best.append((len(root), info))
    if not best:
        return None
    best.sort(key=lambda item: -item[0])
    if len(best) > 1 and best[0][0] == best[1][0]:
        return None
    info = best[0][1]
    return info["url"].rstrip("/") + "/", _token(info)


def running_servers(runtime_dir: str | None = None) -> list[tuple[str, str]]:
    """Every Jupyter Server running here, as its URL and token (see running_server)."""
    return [
        (info["url"].rstrip("/") + "/", _token(info))
        for info in _server_files(Path(_runtime_folder(runtime_dir)))
    ]


def _runtime_folder(runtime_dir: str | None) -> str:
    from jupyter_core.paths import jupyter_runtime_dir

    return runtime_dir or jupyter_runtime_dir()


def _token(info: dict[str, Any]) -> str:
    return (
        info.get("token")
        or os.environ.get("JUPYTERHUB_API_TOKEN")
        or os.environ.get("JUPYTER_TOKEN", "")
    )


def _server_files(folder: Path) -> list[dict[str, Any]]:
    """The server files whose process runs. Unlike `jupyter server list`, a file whose pid is not
    running here is left alone: it may be a server's in another PID namespace sharing the folder."""
    import psutil

    found = []
    for path in sorted(folder.glob("jpserver-*.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being written, or not ours to read
        if (
            isinstance(info, dict)
            and isinstance(info.get("pid"), int)
            and psutil.pid_exists(info["pid"])
            and isinstance(info.get("url"), str)
        ):
            found.append(info)
    return found


def request(
    url: str, token: str, path: str, method: str = "GET", body: Any = None, timeout: float = 30
) -> Any:
    """One JSON request to a Jupyter Server; ServerUnreachable with the server's message."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        try:
            return json.loads(text or b"null")
        except ValueError:
            raise ServerUnreachable(
                f"{url} answered {path} with a page, not the extension's JSON: is that the "
                "Jupyter Server's base URL (as `jupyter server list` prints it)?"
            ) from None
    except urllib.error.HTTPError as err:
        try:
            message = json.loads(err.read()).get("message")
        except Exception:
            message = None
        raise ServerUnreachable(said(err.code, message or err.reason), err.code) from None
    except OSError as err:
        raise ServerUnreachable(f"Cannot reach the Jupyter Server: {err}") from None


def said(status: int, message: str) -> str:
    """The server's refusal as a user reads it: its own message, without the HTTP code; where the
    message alone does not say who refused (a login, a permission, the server's own fault), a few
    plain words before it."""
    if status == 401:
        return f"not logged in to the server (its token?): {message}"
    if status == 403:
        return f"the server refused access (a token it does not take, or no permission): {message}"
    if status >= 500:
        return f"the server failed: {message}"
    return message
