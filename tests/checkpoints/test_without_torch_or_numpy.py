"""Checkpoints with what `pip install .` gives: plain values without torch (or NumPy), and a
torch model whose missing NumPy is named in one line (each in a process where importing them fails)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.checkpoints import plainstate
from jupyter_gpu_ws.checkpoints.files import CheckpointError
from tests.kernels import Notebook

REPO = Path(__file__).resolve().parents[2]

# Put first on the path of a child process: its `import torch` (or numpy) fails as on a machine
# where they were never installed.
BLOCKER = """
import os, sys

class NotInstalled:
    names = set(os.environ["GPUWS_TEST_NOT_INSTALLED"].split(","))

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def run_without(tmp_path: Path, missing: str, code: str) -> subprocess.CompletedProcess[str]:
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {
        **os.environ,
        "GPUWS_TEST_NOT_INSTALLED": missing,
        "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


def test_plain_values_are_saved_and_resumed_without_torch_or_numpy(tmp_path: Path) -> None:
    done = run_without(
        tmp_path,
        "torch,numpy",
        """
        import random, sys
        import jupyter_gpu_ws as gpuws

        state = {"lr": 0.1, "seen": [1, 2], "shape": (3, 4), 7: "seven"}
        gpuws.track("plain", state=state, epoch=3, root="ckpts")
        for i in range(5):
            random.random()
            gpuws.step(i)
        gpuws.checkpoint(wait=True)
        expected_next = random.random()
        state.clear()
        print(gpuws.resume())
        print(state, gpuws.checkpoints.tracker.default_tracker().restored)
        print(random.random() == expected_next, "torch" in sys.modules, "numpy" in sys.modules)
    """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == [
        "5",
        "{'lr': 0.1, 'seen': [1, 2], 'shape': (3, 4), 7: 'seven'} {'epoch': 3}",
        "True False False",
    ]


def test_a_torch_model_without_numpy_fails_in_one_line_saying_what_to_install(
    tmp_path: Path,
) -> None:
    done = run_without(
        tmp_path,
        "numpy",
        """
        import os, torch
        import jupyter_gpu_ws as gpuws
        from jupyter_gpu_ws.checkpoints.files import CheckpointError

        gpuws.track("model", model=torch.nn.Linear(2, 2), root="ckpts")
        try:
            gpuws.checkpoint(wait=True)
        except CheckpointError as err:
            print(err)
        print(os.listdir("ckpts/model"))
    """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [
        "Checkpoint at step 0 failed: saving tensors needs NumPy, which torch hands their bytes over through: "
        "pip install numpy",
        "[]",
    ]  # nothing half-written left behind


def test_a_checkpoint_of_torch_state_read_without_torch_says_to_install_it(tmp_path: Path) -> None:
    import torch

    from jupyter_gpu_ws.checkpoints.tracker import Tracker

    tracker = Tracker()
    tracker.track("model", model=torch.nn.Linear(2, 2), root=str(tmp_path / "ckpts"))
    tracker.checkpoint(wait=True)
    done = run_without(
        tmp_path,
        "torch",
        """
        import warnings
        from pathlib import Path
        from jupyter_gpu_ws.checkpoints.files import CheckpointError, complete_checkpoints
        from jupyter_gpu_ws.checkpoints.formats import read_checkpoint

        [(path, manifest)] = complete_checkpoints(Path("ckpts/model"))
        try:
            read_checkpoint(path, manifest)
        except CheckpointError as err:
            print(str(err).replace(path.name, "NAME"))
    """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "Checkpoint NAME holds torch state: loading it needs torch, which is not installed here: pip install torch"
    )


def test_numpy_is_installed_with_the_package() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.split(">")[0].split("=")[0].strip() == "numpy" for d in dependencies)


def test_a_plain_state_keeps_its_tuples_keys_and_non_finite_numbers() -> None:
    state = {
        "a": (1, (2.5, None)),
        "b": {1: "one", (2, 3): [True]},
        "c": float("inf"),
        "d": {"__gpuws_tuple__": "a user's key that looks like a tag"},
    }
    assert plainstate.loads(plainstate.dumps(state)) == state


def test_a_value_json_cannot_hold_is_named_in_one_line() -> None:
    with pytest.raises(
        CheckpointError,
        match=r"^state\['tags'\] is a set, which a checkpoint without torch "
        r"cannot keep: .*pip install torch$",
    ):
        plainstate.dumps({"state": {"tags": {"x"}}})


@pytest.mark.parametrize(
    "data", [b"[1]", b'{"a": {"__gpuws_items__": [[[1], 2]]}}', b"{" * 100_000, b"\xff"]
)
def test_a_plain_state_from_the_store_that_is_not_one_is_refused(data: bytes) -> None:
    with pytest.raises(CheckpointError, match="not a checkpoint's plain state"):
        plainstate.loads(data)


async def test_a_notebook_without_torch_checkpoints_and_resumes_plain_values(
    jp_fetch: Any, gpuws_app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernels this server starts inherit the blocker: torch and numpy are not installed for them.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    monkeypatch.setenv("GPUWS_TEST_NOT_INSTALLED", "torch,numpy")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])
    )
    track = (
        "%load_ext jupyter_gpu_ws\nimport jupyter_gpu_ws as gpuws\nstate = {'lr': 0.1, 'best': None}\n"
        "gpuws.track(state=state, epoch=3)\n"
    )
    async with Notebook(jp_fetch, gpuws_app, "plain.ipynb") as nb:
        await nb.run(track + "state['best'] = 0.5\nfor i in range(4):\n    gpuws.step(i)")
        assert (await nb.run("%gpuws checkpoint")).startswith("Checkpoint at step 3:")
    async with Notebook(
        jp_fetch, gpuws_app, "plain.ipynb"
    ) as nb:  # a new kernel: Restart, then resume
        await nb.run(track)
        said = await nb.run("%gpuws resume")
        out = await nb.run(
            "import sys\nprint(state, gpuws.track().restored, 'torch' in sys.modules)"
        )
    assert (
        said.startswith("gpuws: resumed 'plain.ipynb' at step 3 from the checkpoint of ")
        and "Traceback" not in said
    )
    assert out == "{'lr': 0.1, 'best': 0.5} {'epoch': 3} False\n"
