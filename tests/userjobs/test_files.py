"""The files a job request names (userjobs/files.py): read only when a regular file within its
bound, never followed through a link at its end, never waited on."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_gpu_ws.userjobs.files import MAX_NOTEBOOK_BYTES, RefusedFile, read_regular


def test_a_regular_file_within_the_bound_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "nb.ipynb").write_bytes(b"x" * 1000)
    assert read_regular(tmp_path / "nb.ipynb", "nb", 1000) == b"x" * 1000


def test_a_file_over_the_bound_is_refused_with_its_size(tmp_path: Path) -> None:
    (tmp_path / "nb.ipynb").write_bytes(b"x" * 1001)
    with pytest.raises(RefusedFile, match=r"^nb has 1001 B, more than 1000 B$"):
        read_regular(tmp_path / "nb.ipynb", "nb", 1000)


def test_the_notebooks_bound_is_64_mib() -> None:
    assert MAX_NOTEBOOK_BYTES == 64 * 2**20


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (os.mkfifo, "is a named pipe (FIFO), not a file"),
        (lambda path: path.symlink_to("/dev/zero"), "is a symbolic link, not a file"),
        (lambda path: path.mkdir(), "is a folder, not a file"),
    ],
    ids=["fifo", "link", "folder"],
)
def test_anything_but_a_regular_file_is_refused_by_its_kind_without_opening_it(
    tmp_path: Path, make: Callable[[Path], object], words: str
) -> None:
    path = tmp_path / "nb.ipynb"
    make(path)
    with pytest.raises(RefusedFile, match=f"^nb {re.escape(words)}$"):
        read_regular(path, "nb", MAX_NOTEBOOK_BYTES)


def test_nothing_there_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing.ipynb", "nb", MAX_NOTEBOOK_BYTES)
