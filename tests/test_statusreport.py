"""What `%gpuws status` prints about training runs, from the server's answers."""

from __future__ import annotations

from jupyter_gpu_ws.statusreport import Table, training_parts


def run(**fields: object) -> dict[str, object]:
    base = {
        "run": "train.ipynb",
        "state": "running",
        "done_steps": 120,
        "total": 200,
        "rate": 40.0,
        "eta": 2.0,
        "verdict": {"state": "no-deadline", "message": "ETA 2 s; this runtime has no deadline"},
        "anomalies": [],
    }
    return {**base, **fields}


def test_a_finished_run_has_no_eta_as_in_the_panel() -> None:
    done = run(
        state="done",
        done_steps=200,
        eta=0.0,
        verdict={"state": "done", "message": "All 200 steps done"},
    )
    [table] = training_parts({"runs": [done, run(run="other.ipynb")]})
    assert isinstance(table, Table)
    [finished, going] = table.rows
    assert finished[2:] == ["200/200", "40", "—", "All 200 steps done"]
    assert going[4] == "2 s"
