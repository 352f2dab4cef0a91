"""Every answer is JSON a strict parser reads: no NaN or Infinity, no text that is not Unicode."""

from __future__ import annotations

import json
import math
import os
from pathlib import PurePosixPath
from typing import Any

from jupyter_gpu_ws import strictjson


def refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def test_non_finite_numbers_become_null_wherever_they_are() -> None:
    value = {
        "expires": math.inf,
        "deep": [{"loss": math.nan}, (1.5, -math.inf)],
        math.nan: "key",
        2: "two",
    }
    text = strictjson.dumps(value)
    assert json.loads(text, parse_constant=refuse) == {
        "expires": None,
        "deep": [{"loss": None}, [1.5, None]],
        "null": "key",
        "2": "two",
    }


def test_a_name_that_is_not_utf8_is_written_as_people_read_it() -> None:
    name = os.fsdecode(b"caf\xe9\n.txt")
    text = strictjson.dumps({"files": [{"path": name}], name: 1}, indent=1)
    text.encode("utf-8")
    assert json.loads(text) == {"files": [{"path": "caf\\xe9\\n.txt"}], "caf\\xe9\\n.txt": 1}
    assert (
        strictjson.plain("line\nbreak caf\u00e9") == "line\nbreak caf\u00e9"
    )  # Unicode text stays as it is


def test_other_objects_are_written_as_their_text() -> None:
    assert strictjson.plain({"path": PurePosixPath("/a/b"), "ok": True, "none": None}) == {
        "path": "/a/b",
        "ok": True,
        "none": None,
    }
