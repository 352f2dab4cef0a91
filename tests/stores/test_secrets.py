"""A password in the store URL is never shown: not in GET /gpuws/api/sync, not in the server's
log, not in an error naming the store (issue 46)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpu_ws.store import open_backend
from jupyter_gpu_ws.store.errors import StoreConfigError
from jupyter_gpu_ws.store.redact import is_redacted, redact
from tests.servers import server_process
from tests.stores.sftpserver import HOST, SFTPServer
from tests.waiting import until


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("sftp://bob:s3cret@host:22/data", "sftp://bob:***@host:22/data"),
        ("sftp://bob@host/data", "sftp://bob@host/data"),  # a user name alone is no secret
        ("open 'smb://me:pa:ss@nas/share' failed", "open 'smb://me:***@nas/share' failed"),
        (
            "az://c/p?sv=2024-01-01&sig=AbC%2Bd&se=2030",
            "az://c/p?sv=2024-01-01&sig=***&se=2030",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA&X-Amz-Signature=ff00",
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***",
        ),
        ("s3://bucket/prefix", "s3://bucket/prefix"),
        ("/home/me/store", "/home/me/store"),
        ("https://x/?access_token=abc&page=2", "https://x/?access_token=***&page=2"),
    ],
)
def test_redact_hides_passwords_and_secret_parameters_and_keeps_the_rest(
    text: str, shown: str
) -> None:
    assert redact(text) == shown
    assert is_redacted(redact(text)) == (text != shown)


def test_git_remotes_lose_their_whole_user_info() -> None:
    from jupyter_gpu_ws.runtime.gitrepo import redact as git_redact

    assert (
        git_redact("https://ghp_token123@github.com/me/r.git") == "https://***@github.com/me/r.git"
    )


def test_an_error_opening_a_store_never_names_its_password() -> None:
    with pytest.raises(StoreConfigError) as caught:
        open_backend("nosuchscheme://bob:hunter2@host/store")
    assert "hunter2" not in str(caught.value)
    assert "bob:***@host" in str(caught.value)


def test_the_store_password_is_in_no_answer_and_no_log(
    sftp_server: SFTPServer, tmp_path: Path
) -> None:
    url = f"sftp://{sftp_server.username}:{sftp_server.password}@{HOST}:{sftp_server.port}/"
    config = {
        "store_url": url + tmp_path.name,
        "storage_options": {"look_for_keys": False, "allow_agent": False},
        "sync_debounce": 0.02,
    }
    with server_process(tmp_path / "a", tmp_path / "runtime", config) as server:
        (server.root / "notes.txt").write_text("kept")
        # The store is really the SFTP server, reached with the password in the URL.
        stored = sftp_server.root / tmp_path.name / "test-ws" / "files" / "notes.txt"
        until(stored.exists, 30, "the file on the SFTP server")
        answer = server.api("/gpuws/api/sync")
        assert answer["store_url"].startswith(f"sftp://{sftp_server.username}:***@{HOST}:")
        assert sftp_server.password not in json.dumps(answer)
        logged = server.log.read_text(errors="replace")
        assert "GPU workspace: workdir" in logged  # the start-up line, which names the store
        assert sftp_server.password not in logged
        # A command in another terminal finds the whole URL in the server's own record.
        listed = subprocess.run(
            [str(Path(sys.executable).with_name("jupyter-gpuws")), "workspaces"],
            capture_output=True,
            text=True,
            cwd=server.root,
            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(server.runtime)},
            timeout=120,
        )
        assert listed.returncode == 0, listed.stderr
        assert "test-ws" in listed.stdout
        assert sftp_server.password not in listed.stdout + listed.stderr
