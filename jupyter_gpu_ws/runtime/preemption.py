"""Watches the cloud's metadata server for a spot / preemption notice and reports it once."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from .deadline import parse_deadline

log = logging.getLogger(__name__)

AWS_URL = "http://169.254.169.254"
GCP_URL = "http://metadata.google.internal"
AZURE_URL = "http://169.254.169.254"

# GCP gives about 30 s between the notice and the stop and does not say when; Azure Spot at
# least 30 s. Used when the notice carries no time of its own.
DEFAULT_NOTICE_SECONDS = 30.0

# Metadata servers are link-local: never go through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class PreemptionNotice:
    """A cloud said this machine will be taken away."""

    cloud: str  # "aws", "gcp" or "azure"
    detail: str
    noticed: float
    deadline: float | None  # when the machine goes, if the cloud says


def _request(method: str, url: str, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    """(status, body); 404 is an answer, not an error. Other failures raise OSError."""
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return 404, ""
        raise OSError(f"{method} {url}: HTTP {err.code}") from None
    except urllib.error.URLError as err:  # refused, no route, a name that does not resolve
        reason = getattr(err.reason, "strerror", None) or str(err.reason)
        raise OSError(f"{url.split('?')[0]} cannot be reached: {reason}") from None
    except TimeoutError:
        raise OSError(f"{url.split('?')[0]} did not answer within {timeout:g} s") from None


class MetadataCheck:
    """One cloud's check: its metadata server's base address and a bounded timeout per request."""

    cloud = ""
    default_url = ""

    def __init__(self, base_url: str | None = None, timeout: float = 2.0) -> None:
        self.base_url = (base_url or self.default_url).rstrip("/")
        self.timeout = timeout

    def __call__(self) -> PreemptionNotice | None:
        raise NotImplementedError


class AwsSpotCheck(MetadataCheck):
    """AWS spot `instance-action` through IMDSv2: a session token first, then the notice."""

    cloud = "aws"
    default_url = AWS_URL
    TOKEN_TTL = 21600

    def __init__(self, base_url: str | None = None, timeout: float = 2.0) -> None:
        super().__init__(base_url, timeout)
        self._token: str | None = None
        self._token_expires = 0.0

    def __call__(self) -> PreemptionNotice | None:
        token = self._session_token()
        try:
            status, body = _request(
                "GET",
                f"{self.base_url}/latest/meta-data/spot/instance-action",
                {"X-aws-ec2-metadata-token": token},
                self.timeout,
            )
        except OSError:
            self._token = None  # perhaps refused (401): a fresh token on the next poll
            raise
        if status == 404:
            return None
        action = json.loads(body)
        deadline = parse_deadline(action["time"]) if action.get("time") else None
        return PreemptionNotice(
            self.cloud, f"spot {action.get('action', 'interruption')}", time.time(), deadline
        )

    def _session_token(self) -> str:
        # The token lives six hours: one PUT per session, not one per poll.
        if self._token is None or time.monotonic() >= self._token_expires:
            _, self._token = _request(
                "PUT",
                f"{self.base_url}/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": str(self.TOKEN_TTL)},
                self.timeout,
            )
            self._token_expires = time.monotonic() + self.TOKEN_TTL - 60
        return self._token


class GcpPreemptedCheck(MetadataCheck):
    """GCP: `instance/preempted` answers TRUE once the machine is being preempted."""

    cloud = "gcp"
    default_url = GCP_URL

    def __call__(self) -> PreemptionNotice | None:
        status, body = _request(
            "GET",
            f"{self.base_url}/computeMetadata/v1/instance/preempted",
            {"Metadata-Flavor": "Google"},
            self.timeout,
        )
        if status == 404 or body.strip().upper() != "TRUE":
            return None
        now = time.time()
        return PreemptionNotice(self.cloud, "instance preempted", now, now + DEFAULT_NOTICE_SECONDS)


class AzureScheduledEventsCheck(MetadataCheck):
    """Azure Scheduled Events: an event of type Preempt (Spot eviction)."""

    cloud = "azure"
    default_url = AZURE_URL

    def __call__(self) -> PreemptionNotice | None:
        status, body = _request(
            "GET",
            f"{self.base_url}/metadata/scheduledevents?api-version=2020-07-01",
            {"Metadata": "true"},
            self.timeout,
        )
        if status == 404:
            return None
        for event in json.loads(body).get("Events", []):
            if event.get("EventType") == "Preempt":
                now = time.time()
                return PreemptionNotice(
                    self.cloud,
                    f"scheduled event {event.get('EventId', '')}".strip(),
                    now,
                    _azure_time(event.get("NotBefore")) or now + DEFAULT_NOTICE_SECONDS,
                )
        return None


def _azure_time(text: str | None) -> float | None:
    """NotBefore is an RFC 1123 date ("Mon, 19 Sep 2016 18:29:47 GMT"), or empty."""
    if not text:
        return None
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


PreemptionCheck = Callable[[], "PreemptionNotice | None"]  # a MetadataCheck, or a test's function


class PreemptionWatcher:
    """Polls each enabled check every `interval` seconds on one thread; stoppable.

    `on_notice` is called once, on the watcher's thread, with the first notice; then the
    watcher stops (the machine is going away, there is nothing more to learn). A cloud whose
    metadata server cannot be reached is logged once and then polled quietly.
    """

    def __init__(
        self,
        checks: list[PreemptionCheck],
        on_notice: Callable[[PreemptionNotice], None],
        interval: float = 5.0,
    ) -> None:
        self.checks = list(checks)
        self.on_notice = on_notice
        self.interval = interval
        self.notice: PreemptionNotice | None = None
        self.errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.checks and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpuws-preemption", daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def state(self) -> dict[str, object]:
        notice = self.notice
        return {
            "watching": [getattr(check, "cloud", "?") for check in self.checks],
            "notice": vars(notice) if notice else None,
            "errors": dict(self.errors),
        }

    def poll_once(self) -> PreemptionNotice | None:
        """Ask every check once; the first notice wins."""
        for check in self.checks:
            cloud = getattr(check, "cloud", repr(check))
            try:
                notice = check()
            except (
                OSError,
                ValueError,
                KeyError,
            ) as err:  # no metadata server, or a strange answer
                if cloud not in self.errors:
                    log.warning("GPU workspace: cannot read %s preemption notices: %s", cloud, err)
                self.errors[cloud] = str(err)
                continue
            self.errors.pop(cloud, None)
            if notice is not None:
                return notice
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            notice = self.poll_once()
            if notice is not None:
                self.notice = notice
                log.warning("GPU workspace: %s preemption notice: %s", notice.cloud, notice.detail)
                try:
                    self.on_notice(notice)
                except Exception:
                    log.exception("GPU workspace: preemption handler failed")
                return
            self._stop.wait(self.interval)


def make_checks(
    aws: bool = False,
    gcp: bool = False,
    azure: bool = False,
    aws_url: str | None = None,
    gcp_url: str | None = None,
    azure_url: str | None = None,
    timeout: float = 2.0,
) -> list[PreemptionCheck]:
    """The checks the configuration enables, each with its base address."""
    checks: list[PreemptionCheck] = []
    if aws:
        checks.append(AwsSpotCheck(aws_url, timeout))
    if gcp:
        checks.append(GcpPreemptedCheck(gcp_url, timeout))
    if azure:
        checks.append(AzureScheduledEventsCheck(azure_url, timeout))
    return checks
