"""JupyterHub awareness without a hub: detection, store templates, the hub's deadlines and the
warning before an idle cull."""

from __future__ import annotations

import pytest

from jupyter_gpu_ws.runtime import HubLimits, RuntimeClock, RuntimeSettings
from jupyter_gpu_ws.runtime.hub import HubEnvironment, Platform, escape_name, expand_store_url

HUB_ENV = {
    "JUPYTERHUB_USER": "alice",
    "JUPYTERHUB_SERVER_NAME": "gpu",
    "JUPYTERHUB_API_URL": "http://hub/hub/api",
    "JUPYTERHUB_API_TOKEN": "secret",
    "JUPYTERHUB_ACTIVITY_URL": "http://hub/hub/api/users/alice/activity",
}


def test_jupyterhub_and_kubespawner_are_detected_from_the_environment() -> None:
    assert Platform.detect({}).hub is None and not Platform.detect({}).kubespawner
    platform = Platform.detect({**HUB_ENV, "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert platform.hub == HubEnvironment(
        "alice", "gpu", "http://hub/hub/api", "http://hub/hub/api/users/alice/activity", "secret"
    )
    assert platform.kubespawner
    assert "secret" not in repr(platform.hub)  # the token never reaches a log line


def test_a_store_template_takes_the_hubs_user_and_server_name() -> None:
    assert (
        expand_store_url("s3://bucket/{username}/{servername}", HUB_ENV) == "s3://bucket/alice/gpu"
    )
    assert (
        expand_store_url("s3://bucket/{username}", {**HUB_ENV, "JUPYTERHUB_SERVER_NAME": ""})
        == "s3://bucket/alice"
    )
    assert expand_store_url("s3://bucket/plain", HUB_ENV) == "s3://bucket/plain"


def test_the_default_servers_empty_name_leaves_no_empty_segment() -> None:
    default = {**HUB_ENV, "JUPYTERHUB_SERVER_NAME": ""}
    assert expand_store_url("s3://bucket/{username}/{servername}", default) == "s3://bucket/alice"
    assert expand_store_url("s3://bucket/{servername}/{username}", default) == "s3://bucket/alice"
    assert expand_store_url("/stores/{username}/{servername}/", default) == "/stores/alice"


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "x:y", "é"])
def test_a_name_never_climbs_out_of_its_prefix(name: str) -> None:
    escaped = escape_name(name)
    assert "/" not in escaped and escaped not in (".", "..") and ".." not in escaped


def test_different_names_give_different_prefixes() -> None:
    names = ["a.b", "a-b", "a/b", "a-2fb", "..", "-2e-2e"]
    assert len({escape_name(n) for n in names}) == len(names)


def test_an_unknown_template_field_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown field \{user\}"):
        expand_store_url("s3://bucket/{user}", HUB_ENV)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_hubs_limits_are_deadline_sources_with_their_detail() -> None:
    clock = RuntimeClock(RuntimeSettings(), clock=Clock(1000.0), start=900.0)
    clock.update_hub(HubLimits(max_age=3600, cull_timeout=600, started=500.0, last_activity=950.0))
    sources = {d.source: d for d in clock.deadlines()}
    assert (
        sources["hub:max_age"].at == 4100.0 and "from the hub" not in sources["hub:max_age"].detail
    )
    assert sources["hub:idle_cull"].at == 1550.0
    assert clock.earliest().source == "hub:idle_cull"


def test_the_idle_cull_is_warned_of_once_even_behind_an_earlier_deadline() -> None:
    now = Clock(1000.0)
    settings = RuntimeSettings(
        max_runtime=1500.0, warning_leads=(60.0,), persist_lead_time=30.0, cull_warning_lead=600.0
    )
    clock = RuntimeClock(settings, clock=now, start=900.0)  # ends at 2400
    clock.update_hub(HubLimits(cull_timeout=1800, last_activity=1000.0))  # cull at 2800
    assert clock.poll() == []
    now.now = 2250.0  # 550 s before the cull, 150 s before the earlier end
    (warning,) = clock.poll()
    assert (warning.kind, warning.source, warning.lead) == ("warning", "hub:idle_cull", 600.0)
    now.now = 2260.0
    assert clock.poll() == []  # once
    # Activity moves the cull later: the warning is armed again for the new one.
    clock.update_hub(HubLimits(cull_timeout=1800, last_activity=2260.0))  # cull at 4060
    now.now = 3500.0
    events = clock.poll()
    assert [(e.source, e.lead) for e in events if e.source == "hub:idle_cull"] == [
        ("hub:idle_cull", 600.0)
    ]
