"""Server programs run for the tests on loopback only: free ports on 127.0.0.1, and a child
process whose output is kept in a log, ready when a check says so, stopped by SIGTERM, and gone
when the test process dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


class ServerStartError(RuntimeError):
    """A test server could not be found or did not start: the message says why and shows its log."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for a TLS endpoint: the server's certificate and key, and the CA a client trusts."""

    cert_file: Path
    key_file: Path
    ca_file: Path


def free_ports(count: int, also_free_at: int = 0) -> list[int]:
    """`count` distinct ports free on loopback; with `also_free_at`, port + offset is free too
    (SeaweedFS derives gRPC ports as HTTP port + 10000 in places it does not let us set)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            sock.bind((HOST, 0))
            held.append(sock)
            port = sock.getsockname()[1]
            if also_free_at:
                if port + also_free_at > 65535:
                    continue
                other = socket.socket()
                try:
                    other.bind((HOST, port + also_free_at))
                except OSError:
                    other.close()
                    continue
                held.append(other)
            ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def closed_port() -> int:
    """A loopback port nobody listens on (right now)."""
    return free_ports(1)[0]


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, even by SIGKILL, so no
    server outlives its tests (Linux; elsewhere the fixture's teardown is all there is)."""
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class LoopbackProcess:
    """A child process whose stdout and stderr go to `log_path`; failures raise `error`."""

    def __init__(
        self, name: str, log_path: Path, error: type[ServerStartError] = ServerStartError
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.error = error
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        log = open(self.log_path, "wb")
        try:
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError as err:
            raise self.error(f"Cannot run {args[0]}: {err}") from err
        finally:
            log.close()

    def wait_until_ready(self, ready: Callable[[], object], timeout: float) -> None:
        """Until `ready()` returns without raising; `error` (and the process stopped) if
        the process exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise self.error(
                        f"{self.name} exited with status {self.process.returncode} at start:\n"
                        f"{self.log_tail()}"
                    )
                try:
                    ready()
                    return
                except Exception as err:  # not listening yet, or not set up yet
                    last = err
                    time.sleep(0.1)
            raise self.error(
                f"{self.name} was not ready within {timeout:.0f} s (last error: {last}):\n"
                f"{self.log_tail()}"
            )
        except BaseException:
            self.stop()
            raise

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds. A server started again on the same data
        (a store that comes back) needs the whole grace to save what it holds; one whose data is
        thrown away after can have little (SeaweedFS restarted on its data sometimes never ends
        on SIGTERM: a test's teardown waited 15 s for it)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
