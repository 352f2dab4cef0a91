"""Deadline sources, the earliest of them, warnings and the automatic persist, on a fake clock."""

from __future__ import annotations

import os

import pytest

from jupyter_gpu_ws.runtime.deadline import (
    IdleInputs,
    KernelActivity,
    RuntimeClock,
    RuntimeSettings,
    parse_deadline,
    parse_duration,
)

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("12h", 43200),
        ("90m", 5400),
        ("3600", 3600),
        ("1h30m", 5400),
        ("45s", 45),
        ("2d", 172800),
        ("1.5h", 5400),
        (" 1H 30M ", 5400),
        (120, 120),
        ("0", 0),
    ],
)
def test_durations_are_read_in_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "12x", "h", "1h-30m", "-5", "nan", "twelve hours"])
def test_unreadable_durations_raise_a_clear_error(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_deadline_in_iso_8601_with_a_zone():
    assert parse_deadline("2027-01-15T10:00:00+02:00") == T0


def test_deadline_with_z_suffix():
    assert parse_deadline("2027-01-15T08:00:00Z") == T0


def test_deadline_without_a_zone_is_utc():
    assert parse_deadline("2027-01-15T08:00:00") == T0
    assert parse_deadline("2027-01-15 08:00") == T0


def test_deadline_as_epoch_seconds():
    assert parse_deadline("1800000000") == T0
    assert parse_deadline(T0) == T0


def test_unreadable_deadline_raises_a_clear_error():
    with pytest.raises(ValueError, match="cannot read deadline 'tomorrow'"):
        parse_deadline("tomorrow")


def test_settings_name_the_setting_that_cannot_be_read():
    with pytest.raises(ValueError, match="^max_runtime: "):
        RuntimeSettings.from_config(max_runtime="soon", environ={})
    with pytest.raises(ValueError, match="^GPUWS_DEADLINE: "):
        RuntimeSettings.from_config(environ={"GPUWS_DEADLINE": "never"})


def test_no_source_means_no_deadline():
    clock = RuntimeClock(RuntimeSettings.from_config(environ={}), FakeClock())
    state = clock.state()
    assert (
        state["deadline"] is None and state["remaining"] is None and state["next_persist"] is None
    )
    assert clock.poll() == []


def test_max_runtime_counts_from_server_start():
    time = FakeClock()
    clock = RuntimeClock(RuntimeSettings.from_config(max_runtime="12h", environ={}), time)
    time.now += 3600
    state = clock.state()
    assert state["start"] == T0
    assert state["deadline"] == T0 + 12 * 3600
    assert state["source"] == "max_runtime"
    assert state["remaining"] == 11 * 3600
    assert state["elapsed"] == 3600


def test_configured_deadline():
    clock = RuntimeClock(
        RuntimeSettings.from_config(deadline="2027-01-15T09:00:00Z", environ={}), FakeClock()
    )
    assert (clock.state()["deadline"], clock.state()["source"]) == (T0 + 3600, "deadline")


def test_environment_deadline():
    settings = RuntimeSettings.from_config(environ={"GPUWS_DEADLINE": str(T0 + 600)})
    state = RuntimeClock(settings, FakeClock()).state()
    assert (state["deadline"], state["source"], state["remaining"]) == (
        T0 + 600,
        "GPUWS_DEADLINE",
        600,
    )


def test_configured_deadline_wins_over_the_environment():
    settings = RuntimeSettings.from_config(
        deadline=T0 + 7200, environ={"GPUWS_DEADLINE": str(T0 + 600)}
    )
    assert RuntimeClock(settings, FakeClock()).state()["source"] == "deadline"


def test_the_earliest_source_wins_and_is_reported(tmp_path):
    path = tmp_path / "deadline"
    path.write_text(str(T0 + 1800))
    settings = RuntimeSettings.from_config(
        max_runtime="1h", deadline=T0 + 7200, environ={"GPUWS_DEADLINE_FILE": str(path)}
    )
    clock = RuntimeClock(settings, FakeClock())
    state = clock.state()
    assert (state["deadline"], state["source"]) == (T0 + 1800, "deadline_file")
    assert [s["source"] for s in state["sources"]] == ["deadline_file", "max_runtime", "deadline"]


def test_deadline_file_is_reread_when_it_changes(tmp_path):
    path = tmp_path / "deadline"
    path.write_text("2027-01-15T10:00:00Z\n")
    clock = RuntimeClock(RuntimeSettings(deadline_file=str(path)), FakeClock())
    assert clock.state()["deadline"] == T0 + 7200
    path.write_text("2027-01-15T09:00:00Z\n")
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse-grained file system
    assert clock.state()["deadline"] == T0 + 3600


def test_deadline_file_appearing_and_disappearing_at_run_time(tmp_path):
    path = tmp_path / "deadline"
    clock = RuntimeClock(RuntimeSettings(deadline_file=str(path)), FakeClock())
    assert clock.state()["deadline"] is None
    path.write_text(str(T0 + 60))
    assert clock.state()["deadline"] == T0 + 60
    path.unlink()
    assert clock.state()["deadline"] is None


def test_malformed_deadline_file_is_reported_not_fatal(tmp_path):
    path = tmp_path / "deadline"
    path.write_text("next tuesday")
    clock = RuntimeClock(RuntimeSettings(max_runtime=3600, deadline_file=str(path)), FakeClock())
    state = clock.state()
    assert state["source"] == "max_runtime"
    assert len(state["errors"]) == 1 and "next tuesday" in state["errors"][0]
    path.write_text(str(T0 + 60))
    os.utime(path, ns=(2, 2))
    state = clock.state()
    assert (state["source"], state["errors"]) == ("deadline_file", [])


def test_idle_shutdown_without_kernels_follows_the_last_activity():
    time = FakeClock()
    clock = RuntimeClock(RuntimeSettings(max_runtime=86400), time)
    clock.update_idle(IdleInputs(server_last_activity=T0 - 300, shutdown_no_activity_timeout=3600))
    state = clock.state()
    assert state["idle_seconds"] == 300
    assert state["idle_deadline"] == T0 + 3300
    assert (state["deadline"], state["source"]) == (T0 + 3300, "idle_shutdown")


def test_idle_shutdown_waits_for_the_culler_to_stop_every_kernel():
    inputs = IdleInputs(
        server_last_activity=T0 - 100,
        shutdown_no_activity_timeout=600,
        cull_idle_timeout=1800,
        kernels=(KernelActivity("a", T0 - 100), KernelActivity("b", T0 - 50)),
    )
    assert inputs.kernel_cull_times() == {"a": T0 + 1700, "b": T0 + 1750}
    assert inputs.shutdown_at() == T0 + 1750


def test_kernels_the_culler_spares_keep_the_server_alive():
    busy = KernelActivity("a", T0 - 100, busy=True)
    connected = KernelActivity("b", T0 - 100, connections=1)
    for kernel in (busy, connected):
        inputs = IdleInputs(
            T0 - 100, shutdown_no_activity_timeout=600, cull_idle_timeout=1800, kernels=(kernel,)
        )
        assert inputs.kernel_cull_times() == {kernel.kernel_id: None}
        assert inputs.shutdown_at() is None
    inputs = IdleInputs(
        T0 - 100,
        600,
        cull_idle_timeout=1800,
        cull_busy=True,
        cull_connected=True,
        kernels=(busy, connected),
    )
    assert inputs.shutdown_at() == T0 + 1700


def test_a_kernel_running_code_is_no_idleness_and_kernel_activity_counts():
    clock = RuntimeClock(RuntimeSettings(), FakeClock())
    training = KernelActivity("a", T0 - 120, busy=True)  # a cell started two minutes ago
    clock.update_idle(IdleInputs(server_last_activity=T0 - 300, kernels=(training,)))
    assert clock.state()["idle_seconds"] == 0
    done = KernelActivity("a", T0 - 20)  # its last output 20 s ago: idle since then
    clock.update_idle(IdleInputs(server_last_activity=T0 - 300, kernels=(done,)))
    assert clock.state()["idle_seconds"] == 20


def test_no_culling_settings_no_idle_deadline():
    clock = RuntimeClock(RuntimeSettings(), FakeClock())
    clock.update_idle(IdleInputs(server_last_activity=T0 - 10))
    state = clock.state()
    assert (
        state["idle_seconds"] == 10 and state["idle_deadline"] is None and state["deadline"] is None
    )


def test_preemption_notice_becomes_the_deadline():
    clock = RuntimeClock(RuntimeSettings(max_runtime=3600), FakeClock())
    clock.record_preemption("aws", "terminate", T0, T0 + 120)
    state = clock.state()
    assert (state["deadline"], state["source"]) == (T0 + 120, "preemption:aws")
    assert state["preemption"]["cloud"] == "aws"


def test_next_persist_is_the_lead_time_before_the_deadline():
    settings = RuntimeSettings.from_config(max_runtime="2h", persist_lead_time="15m", environ={})
    assert RuntimeClock(settings, FakeClock()).state()["next_persist"] == T0 + 7200 - 900


def test_each_warning_is_announced_once_when_its_lead_time_is_crossed():
    time = FakeClock()
    clock = RuntimeClock(RuntimeSettings(max_runtime=3600, persist_lead_time=0), time)
    heard = []
    clock.subscribe(heard.append)
    announced = []
    for minute in range(61):
        time.now = T0 + minute * 60
        announced += [(minute, e.lead) for e in clock.poll() if e.kind == "warning"]
    assert announced == [(30, 1800), (50, 600), (58, 120)]
    assert [e.lead for e in heard if e.kind == "warning"] == [1800, 600, 120]


def test_several_lead_times_crossed_at_once_announce_only_the_nearest():
    clock = RuntimeClock(RuntimeSettings(max_runtime=300, persist_lead_time=0), FakeClock())
    events = clock.poll()
    assert [(e.kind, e.lead) for e in events] == [("warning", 600)]
    assert clock.poll() == []


def test_automatic_persist_is_due_once_at_the_lead_time():
    time = FakeClock()
    clock = RuntimeClock(
        RuntimeSettings(max_runtime=60, persist_lead_time=40, warning_leads=()), time
    )
    assert clock.poll() == []
    time.now = T0 + 19
    assert clock.poll() == []
    time.now = T0 + 20
    [event] = clock.poll()
    assert (event.kind, event.deadline, event.source, event.remaining) == (
        "persist",
        T0 + 60,
        "max_runtime",
        40,
    )
    time.now = T0 + 30
    assert clock.poll() == []


def test_a_later_deadline_arms_the_warnings_and_the_persist_again(tmp_path):
    path = tmp_path / "deadline"
    path.write_text(str(T0 + 500))
    time = FakeClock()
    clock = RuntimeClock(RuntimeSettings(deadline_file=str(path), persist_lead_time=600), time)
    assert sorted(e.kind for e in clock.poll()) == ["persist", "warning"]
    path.write_text(str(T0 + 4000))  # the platform granted another hour
    os.utime(path, ns=(3, 3))
    assert clock.poll() == []
    time.now = T0 + 4000 - 1800
    assert [(e.kind, e.lead) for e in clock.poll()] == [("warning", 1800)]
    time.now = T0 + 4000 - 600
    assert sorted((e.kind, e.lead) for e in clock.poll()) == [("persist", 600), ("warning", 600)]


def test_a_failing_listener_does_not_stop_the_others():
    clock = RuntimeClock(RuntimeSettings(max_runtime=60), FakeClock())
    heard = []
    clock.subscribe(lambda event: 1 / 0)
    clock.subscribe(heard.append)
    assert len(clock.poll()) == 2
    assert len(heard) == 2


def test_state_reports_every_field_of_the_rest_answer():
    state = RuntimeClock(RuntimeSettings(max_runtime=60), FakeClock()).state()
    assert {
        "start",
        "deadline",
        "remaining",
        "source",
        "idle_seconds",
        "idle_deadline",
        "preemption",
        "next_persist",
    } <= set(state)
