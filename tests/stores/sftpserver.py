"""An SFTP server for the tests: asyncssh on a loopback port, serving one temp folder as its
root, in a thread of the test process with an event loop of its own.

It offers SFTP and nothing else (no shell, no command, no SCP, no forwarding), to one user with
a password. Its host key is made at start, so clients pin it instead of trusting whatever key a
port presents: `known_hosts` is written for OpenSSH-style clients, and `storage_options()`
gives fsspec's paramiko-based `sftp` file system a host-key policy that accepts this key only.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from pathlib import Path
from typing import Any

import asyncssh
import paramiko

from tests.loopback import HOST, ServerStartError

USERNAME = "gpuws"


class PinnedHostKey(paramiko.MissingHostKeyPolicy):
    """Accept the one host key given (base64 of its public blob), refuse any other."""

    def __init__(self, key_base64: str) -> None:
        self.key_base64 = key_base64

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if key.get_base64() != self.key_base64:
            raise paramiko.SSHException(
                f"{hostname} presented a host key that is not the test server's"
            )


class _PasswordOnly(asyncssh.SSHServer):
    def __init__(self, password: str) -> None:
        self._password = password

    def begin_auth(self, username: str) -> bool:
        return True  # every user must authenticate

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        return username == USERNAME and secrets.compare_digest(password, self._password)


class SFTPServer:
    """`start()` returns once the server listens; `root` is what clients see as `/`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.root = self.data_dir / "root"
        self.known_hosts = self.data_dir / "known_hosts"
        self.username = USERNAME
        self.password = secrets.token_urlsafe(16)
        self.port = 0
        self._host_key = asyncssh.generate_private_key("ssh-ed25519")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncssh.SSHAcceptor | None = None

    @property
    def url(self) -> str:
        """The root as an fsspec URL (the password travels in `storage_options()`, not here)."""
        return f"sftp://{self.username}@{HOST}:{self.port}/"

    @property
    def host_key_base64(self) -> str:
        return self._host_key.export_public_key("openssh").decode().split()[1]

    def storage_options(self) -> dict[str, Any]:
        """Keyword arguments for `fsspec.filesystem("sftp", **...)` (paramiko's `connect`)."""
        return {
            "host": HOST,
            "port": self.port,
            "username": self.username,
            "password": self.password,
            "look_for_keys": False,
            "allow_agent": False,  # this password, not the user's own keys
            "host_key_policy": PinnedHostKey(self.host_key_base64),
        }

    def env(self) -> dict[str, str]:
        """No client reads SFTP settings from standard environment variables: use `url` and
        `storage_options()`."""
        return {}

    def log_tail(self, lines: int = 30) -> str:
        return "(the SFTP server runs in the test process: its errors are the test's own)"

    def start(self, timeout: float = 10.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        async def listen() -> None:
            self._server = await asyncssh.listen(
                HOST,
                self.port,  # 0 the first time: the system picks, then the same port again
                server_host_keys=[self._host_key],
                server_factory=lambda: _PasswordOnly(self.password),
                sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=str(self.root).encode()),
                allow_scp=False,
                agent_forwarding=False,
                x11_forwarding=False,
            )
            self.port = self._server.sockets[0].getsockname()[1]

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(listen())
            except BaseException as err:
                failure.append(err)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="sftp-test-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise ServerStartError(f"The SFTP server did not listen within {timeout:.0f} s")
        if failure:
            raise ServerStartError(
                f"The SFTP server could not listen on {HOST}: {failure[0]}"
            ) from failure[0]
        self.known_hosts.write_text(f"[{HOST}]:{self.port} ssh-ed25519 {self.host_key_base64}\n")

    def stop(self, grace: float = 15.0) -> None:
        """Closes the server and its sessions (in this process: `grace` is for the others)."""
        loop, thread, server = self._loop, self._thread, self._server
        self._loop = self._thread = self._server = None
        if loop is None or thread is None or not thread.is_alive():
            return

        async def close() -> None:
            if server is not None:
                server.close()
                await server.wait_closed()
            # Sessions of clients that never hung up: end them here, not at garbage collection.
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        thread.join(10)
