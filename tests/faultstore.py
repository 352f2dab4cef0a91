"""A store that fails on demand, for a browser test: SeaweedFS with one bucket behind the fault
proxy (tests/faultproxy.py), run until SIGTERM.

    python -m tests.faultstore --ready FILE [--folder DIR]

Once both answer it writes FILE (JSON): the proxy's URL, its control URL, the store URL and the
environment a Jupyter server needs to reach the store through the proxy (keys, region, the
endpoint, and AWS_CA_BUNDLE: the proxy's CA, and the self-signed CA certificate a user would
have added to trust it, so that mode fails for the certificate's shape, not its issuer).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import threading
from pathlib import Path

from tests.faultproxy import FaultProxy
from tests.loopback import die_with_parent
from tests.stores.certs import make_ca_used_as_server_certificate, make_loopback_certificates
from tests.sync.s3server import S3Server

BUCKET = "gpuws-faults"
ACCESS_KEY = "gpuws-faults-key"
SECRET_KEY = "gpuws-faults-secret-0123456789"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready", required=True, help="the JSON file written once all answer")
    parser.add_argument("--folder", help="where SeaweedFS keeps its data (default: a temp folder)")
    args = parser.parse_args()
    die_with_parent()  # the spec that started this may be killed: SeaweedFS goes with it
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())

    folder = Path(args.folder or tempfile.mkdtemp(prefix="gpuws-faultstore-"))
    folder.mkdir(parents=True, exist_ok=True)
    trusted = make_loopback_certificates(folder / "trusted")
    untrusted = make_loopback_certificates(folder / "untrusted")
    self_signed = make_ca_used_as_server_certificate(folder / "self-signed")
    bundle = folder / "ca-bundle.pem"
    bundle.write_bytes(trusted.ca_file.read_bytes() + self_signed.ca_file.read_bytes())

    server = S3Server(folder / "seaweedfs", ACCESS_KEY, SECRET_KEY)
    (folder / "seaweedfs").mkdir(exist_ok=True)
    server.start()
    proxy = FaultProxy(server.port, trusted, untrusted, self_signed)
    try:
        server.create_bucket(BUCKET)
        env = {
            **server.env(),
            "AWS_ENDPOINT_URL": proxy.url,
            "AWS_CA_BUNDLE": str(bundle),
        }
        ready = {
            "proxy": proxy.url,
            "control": proxy.control_url,
            "store": f"s3://{BUCKET}/faults",
            "env": env,
            "pid": os.getpid(),
        }
        partial = Path(f"{args.ready}.partial")
        partial.write_text(json.dumps(ready, indent=1))
        partial.replace(args.ready)  # whole or not there: the spec reads it once it exists
        stop.wait()
    finally:
        proxy.close()
        server.stop(grace=2)  # its data goes with it


if __name__ == "__main__":
    main()
