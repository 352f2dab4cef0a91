"""Preemption notices from a fake metadata server on 127.0.0.1 that speaks each cloud's protocol."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jupyter_gpu_ws.runtime.deadline import parse_deadline
from jupyter_gpu_ws.runtime.preemption import (
    AwsSpotCheck,
    AzureScheduledEventsCheck,
    GcpPreemptedCheck,
    PreemptionWatcher,
    make_checks,
)
from tests.waiting import until

INTERVAL = 0.2
AWS_ACTION = {"action": "terminate", "time": "2027-01-15T08:02:00Z"}
AZURE_EVENT = {
    "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
    "EventType": "Preempt",
    "ResourceType": "VirtualMachine",
    "Resources": ["vm1"],
    "EventStatus": "Scheduled",
    "NotBefore": "Fri, 15 Jan 2027 08:01:30 GMT",
}


class FakeMetadata:
    """What the fake server answers; set `preempted` to serve every cloud's notice."""

    def __init__(self) -> None:
        self.preempted = False
        self.requests: list[tuple[str, str, dict[str, str]]] = []


def _handler(meta: FakeMetadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: str = "") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            meta.requests.append(("PUT", self.path, dict(self.headers)))
            if self.path == "/latest/api/token" and self.headers.get(
                "X-aws-ec2-metadata-token-ttl-seconds"
            ):
                self._answer(200, "token-123")
            else:
                self._answer(400)

        def do_GET(self) -> None:
            meta.requests.append(("GET", self.path, dict(self.headers)))
            if self.path == "/latest/meta-data/spot/instance-action":
                if self.headers.get("X-aws-ec2-metadata-token") != "token-123":
                    self._answer(401)
                elif meta.preempted:
                    self._answer(200, json.dumps(AWS_ACTION))
                else:
                    self._answer(404)
            elif self.path == "/computeMetadata/v1/instance/preempted":
                if self.headers.get("Metadata-Flavor") != "Google":
                    self._answer(403)
                else:
                    self._answer(200, "TRUE" if meta.preempted else "FALSE")
            elif self.path == "/metadata/scheduledevents?api-version=2020-07-01":
                if self.headers.get("Metadata") != "true":
                    self._answer(400)
                else:
                    events = [AZURE_EVENT] if meta.preempted else []
                    self._answer(200, json.dumps({"DocumentIncarnation": 1, "Events": events}))
            else:
                self._answer(404)

    return Handler


@pytest.fixture
def metadata() -> Iterator[tuple[FakeMetadata, str]]:
    meta = FakeMetadata()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(meta))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield meta, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _gets(meta: FakeMetadata) -> int:
    return sum(1 for method, _, _ in meta.requests if method == "GET")


def _free_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there


CHECKS = {
    "aws": lambda url: AwsSpotCheck(url, timeout=1),
    "gcp": lambda url: GcpPreemptedCheck(url, timeout=1),
    "azure": lambda url: AzureScheduledEventsCheck(url, timeout=1),
}


@pytest.mark.parametrize("cloud", sorted(CHECKS))
def test_no_notice_means_no_preemption(metadata, cloud):
    _, url = metadata
    assert CHECKS[cloud](url)() is None


def test_aws_uses_an_imdsv2_token_and_reads_the_action_time(metadata):
    meta, url = metadata
    meta.preempted = True
    notice = AwsSpotCheck(url, timeout=1)()
    assert notice is not None and notice.cloud == "aws"
    assert notice.detail == "spot terminate"
    assert notice.deadline == parse_deadline("2027-01-15T08:02:00Z")
    assert [(m, p) for m, p, _ in meta.requests] == [
        ("PUT", "/latest/api/token"),
        ("GET", "/latest/meta-data/spot/instance-action"),
    ]


def test_aws_token_is_reused_between_polls(metadata):
    meta, url = metadata
    check = AwsSpotCheck(url, timeout=1)
    check(), check()
    assert [m for m, _, _ in meta.requests] == ["PUT", "GET", "GET"]


def test_gcp_notice_reads_true(metadata):
    meta, url = metadata
    meta.preempted = True
    notice = GcpPreemptedCheck(url, timeout=1)()
    assert notice is not None and notice.cloud == "gcp"
    assert notice.deadline is not None and notice.deadline > notice.noticed


def test_azure_preempt_event_with_its_not_before_time(metadata):
    meta, url = metadata
    meta.preempted = True
    notice = AzureScheduledEventsCheck(url, timeout=1)()
    assert notice is not None and notice.cloud == "azure"
    assert AZURE_EVENT["EventId"] in notice.detail
    assert notice.deadline == parse_deadline("2027-01-15T08:01:30Z")


@pytest.mark.parametrize("cloud", sorted(CHECKS))
def test_watcher_reports_a_notice_within_two_poll_intervals_once(metadata, cloud):
    meta, url = metadata
    heard: list[Any] = []
    arrived = threading.Event()

    def on_notice(notice: Any) -> None:
        heard.append(notice)
        arrived.set()

    watcher = PreemptionWatcher([CHECKS[cloud](url)], on_notice, interval=INTERVAL)
    watcher.start()
    try:
        assert not arrived.wait(2 * INTERVAL)  # polling, but no notice yet
        gets_before = _gets(meta)
        meta.preempted = True
        assert arrived.wait(30)
        watcher.stop(5)
        # "Within two poll intervals", counted in polls rather than seconds so a loaded test
        # machine cannot make it flaky: at most two requests after the notice appeared.
        assert _gets(meta) - gets_before <= 2
        assert len(heard) == 1 and heard[0].cloud == cloud
        assert watcher.state()["notice"]["cloud"] == cloud
    finally:
        watcher.stop(5)


def test_watcher_without_a_notice_never_calls_back(metadata):
    meta, url = metadata
    heard: list[Any] = []
    checks = make_checks(
        aws=True, gcp=True, azure=True, aws_url=url, gcp_url=url, azure_url=url, timeout=1
    )
    watcher = PreemptionWatcher(checks, heard.append, interval=INTERVAL / 4)
    watcher.start()
    try:
        until(lambda: _gets(meta) >= 9, 30, "every cloud asked a few times")
    finally:
        watcher.stop(5)
    assert heard == [] and watcher.notice is None and watcher.errors == {}


def test_unreachable_metadata_server_is_reported_not_fatal(caplog):
    heard: list[Any] = []
    url = _free_port_url()
    watcher = PreemptionWatcher(
        make_checks(
            aws=True, gcp=True, azure=True, aws_url=url, gcp_url=url, azure_url=url, timeout=0.5
        ),
        heard.append,
        interval=INTERVAL,
    )
    with caplog.at_level("WARNING", logger="jupyter_gpu_ws.runtime.preemption"):
        for _ in range(3):
            assert watcher.poll_once() is None
    assert sorted(watcher.errors) == ["aws", "azure", "gcp"]
    for error in watcher.errors.values():  # one plain line a user can act on, naming the address
        assert error.startswith(url) and "cannot be reached: " in error and "urlopen" not in error
    assert len(caplog.records) == 3  # one line per cloud, not one per poll
    assert heard == []


def test_watcher_thread_stops_when_asked(metadata):
    _, url = metadata
    watcher = PreemptionWatcher(
        [GcpPreemptedCheck(url, timeout=1)], lambda n: None, interval=INTERVAL
    )
    watcher.start()
    watcher.stop(5)
    assert watcher._thread is not None and not watcher._thread.is_alive()


def test_only_the_enabled_clouds_are_watched():
    assert [c.cloud for c in make_checks(gcp=True, azure=True)] == ["gcp", "azure"]
    assert make_checks() == []
