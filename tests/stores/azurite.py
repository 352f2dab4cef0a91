"""A real Azure Blob service for the tests: Azurite (npm `azurite`, installed into
tests/stores/node_modules by `npm ci` there) bound to loopback, with its data in a temp folder.

Only the blob service runs (`azurite-blob`): the queue and table services are not needed.
`--disableTelemetry` keeps it from reporting usage over the network and `--skipApiVersionCheck`
lets clients newer than this Azurite talk to it. `--loose` (ignore headers it does not implement)
is left off: obstore does not need it, and without it a header Azurite would silently ignore is
refused instead, so a test cannot pass on a feature the emulator never applied.
"""

from __future__ import annotations

from pathlib import Path

from tests.loopback import HOST, LoopbackProcess, ServerStartError, free_ports

PACKAGE_DIR = Path(__file__).parent
AZURITE_BLOB = PACKAGE_DIR / "node_modules" / ".bin" / "azurite-blob"

# Azurite's one built-in account. Both values are published in Azure's documentation (they are
# the same for every Azurite everywhere), so they are no secret.
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class AzuriteServer:
    """One `azurite-blob` process with one container; `start()` returns once the container exists.

    How obstore reaches it (obstore 0.12, `obstore.store.AzureStore`), either way:

    - emulator mode, the environment of `env()`: `AZURE_STORAGE_USE_EMULATOR=true` with
      `AZURITE_BLOB_STORAGE_URL=http://127.0.0.1:PORT` (object_store's own variable for where
      Azurite listens; without it, 127.0.0.1:10000), the account name and key, and
      `AZURE_CONTAINER_NAME`; emulator mode allows plain HTTP by itself. `AzureStore()` or
      `AzureStore.from_url("az://CONTAINER")` then needs no arguments.
    - explicitly: `AzureStore(container, account_name=..., account_key=..., endpoint=self.endpoint,
      client_options={"allow_http": True})` (endpoint `http://127.0.0.1:PORT/devstoreaccount1`:
      Azurite takes the account from the first path segment).
    """

    def __init__(self, data_dir: Path, container: str) -> None:
        self.data_dir = Path(data_dir)
        self.container = container
        self.port = 0
        self._process = LoopbackProcess("Azurite", self.data_dir / "azurite.log")

    @property
    def blob_url(self) -> str:
        """Where the blob service listens (what `AZURITE_BLOB_STORAGE_URL` names)."""
        return f"http://{HOST}:{self.port}"

    @property
    def endpoint(self) -> str:
        """The account's blob endpoint, for clients given an explicit endpoint."""
        return f"{self.blob_url}/{ACCOUNT_NAME}"

    @property
    def connection_string(self) -> str:
        """For the Azure SDKs (`BlobServiceClient.from_connection_string`)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.endpoint};"
        )

    def env(self) -> dict[str, str]:
        """What a client process needs to reach this server through obstore's emulator mode."""
        return {
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURITE_BLOB_STORAGE_URL": self.blob_url,
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT_NAME,
            "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
            "AZURE_CONTAINER_NAME": self.container,
            "AZURE_STORAGE_CONNECTION_STRING": self.connection_string,
        }

    def start(self, timeout: float = 60.0) -> None:
        if not AZURITE_BLOB.exists():
            raise ServerStartError(
                f"Azurite is not installed ({AZURITE_BLOB} is missing): "
                f"run `npm ci` in {PACKAGE_DIR} (scripts/test.sh does)"
            )
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        if not self.port:  # the same port again after a stop, so clients find it where they look
            self.port = free_ports(1)[0]
        self._process.start(
            [
                str(AZURITE_BLOB),
                "--blobHost",
                HOST,
                "--blobPort",
                str(self.port),
                "--location",
                str(self.data_dir / "data"),
                "--skipApiVersionCheck",
                "--disableTelemetry",
            ],
            cwd=self.data_dir,
        )
        self._process.wait_until_ready(self._create_container, timeout)

    def _create_container(self) -> None:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        client = BlobServiceClient.from_connection_string(
            self.connection_string, retry_total=0, connection_timeout=2, read_timeout=5
        )
        try:
            client.create_container(self.container)
        except ResourceExistsError:  # a restart over the same data folder
            pass

    def log_tail(self, lines: int = 30) -> str:
        return self._process.log_tail(lines)

    def stop(self, grace: float = 15.0) -> None:
        self._process.stop(grace)
