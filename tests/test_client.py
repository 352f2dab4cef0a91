"""The command line's way to the running server (client.py): a URL given as Jupyter prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpu_ws.client import ServerUnreachable, running_server


@pytest.mark.parametrize(
    "given",
    [
        "http://127.0.0.1:19888/?token=t0k",
        "http://127.0.0.1:19888/lab?token=t0k",
        "http://127.0.0.1:19888/tree?token=t0k",
    ],
)
def test_a_server_url_as_jupyter_prints_it_gives_its_base_and_its_token(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    assert running_server(str(tmp_path), given) == ("http://127.0.0.1:19888/", "t0k")


def test_a_server_url_under_a_base_path_keeps_it(tmp_path: Path) -> None:
    url, _ = running_server(str(tmp_path), "http://hub.example/user/ana/lab?token=x")
    assert url == "http://hub.example/user/ana/"


def test_with_several_servers_the_one_whose_folder_holds_this_one_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import os

    runtime = tmp_path / "runtime"
    runtime.mkdir()
    work, nested, other = tmp_path / "work", tmp_path / "work" / "inner", tmp_path / "other"
    for folder in (nested / "sub", other):
        folder.mkdir(parents=True)
    # Server files as Jupyter writes them; their pids run (this process and its parent).
    for port, root, pid in ((19801, work, os.getpid()), (19802, other, os.getppid())):
        (runtime / f"jpserver-{pid}.json").write_text(
            json.dumps(
                {
                    "url": f"http://127.0.0.1:{port}/",
                    "token": f"t{port}",
                    "pid": pid,
                    "root_dir": str(root),
                }
            )
        )
    monkeypatch.chdir(nested / "sub")
    assert running_server(str(runtime)) == ("http://127.0.0.1:19801/", "t19801")
    monkeypatch.chdir(other)
    assert running_server(str(runtime)) == ("http://127.0.0.1:19802/", "t19802")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ServerUnreachable, match="none of them in this folder"):
        running_server(str(runtime))
