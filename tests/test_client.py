"""The command line's way to the running server (client.py): a URL given as Jupyter prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpu_ws.client import running_server


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
