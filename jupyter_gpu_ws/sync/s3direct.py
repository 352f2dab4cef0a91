"""Small files to S3 in one signed PUT each, without botocore's per-request pipeline.

Through s3fs every request passes botocore's machinery (parameter validation, endpoint rules,
event hooks, user agent, signing): about 1.6 ms of CPU a request, which for thousands of small
files costs more than the network does. A PUT of a small file needs only an AWS Signature
Version 4 and one request on a kept-alive connection, so that is all this module does.

It is used only where that is the whole story: a plain `s3fs.S3FileSystem` with signed
requests, no extra request arguments (encryption, requester pays), no proxy. Where to send is
asked of botocore itself once (a presigned URL gives the endpoint and the addressing style);
the signing region and the credentials are the client's own, and a refusal that names the
bucket's own region is signed again for it. Any answer but a verified success makes `put`
return False, and the caller sends the file through s3fs, whose errors and retries are the
ones the user sees.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import logging
import os
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote, urlsplit

log = logging.getLogger(__name__)

PROBE_KEY = "gpuws-probe"
ALGORITHM = "AWS4-HMAC-SHA256"
# Frozen credentials are asked for again after this long (refreshable ones renew themselves).
CREDENTIALS_TTL = 300.0
# Kept-alive connections held between requests (the engine's workers take one each).
MAX_IDLE = 32
# After this many refusals in a row the shortcut rests this many seconds (s3fs sends meanwhile).
FAILURES_TO_PAUSE = 5
PAUSE = 600


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None


def signing_key(secret: str, day: str, region: str, service: str = "s3") -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def authorization(method: str, path: str, headers: dict[str, str], payload_hash: str, amz_date: str,
                  region: str, creds: Credentials, key: bytes | None = None) -> str:
    """The Authorization header of a request with no query string. `path` is sent as it is
    (already percent-encoded); every header in `headers` (host included) is signed."""
    names = sorted(name.lower() for name in headers)
    lowered = {name.lower(): " ".join(str(value).split()) for name, value in headers.items()}
    canonical = "\n".join([
        method, path, "",
        "".join(f"{name}:{lowered[name]}\n" for name in names),
        ";".join(names), payload_hash,
    ])
    day = amz_date[:8]
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = key or signing_key(creds.secret_key, day, region)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{ALGORITHM} Credential={creds.access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"


class DirectPut:
    """PUTs of whole small objects into one bucket, from many threads at once."""

    def __init__(self, scheme: str, netloc: str, prefix: str, region: str,
                 credentials: Callable[[], Credentials], ssl_context: ssl.SSLContext | None = None,
                 timeout: float = 60.0) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.prefix = prefix  # the encoded path before the object key: "/bucket/" or "/"
        self.region = region
        self._fetch_credentials = credentials
        self._credentials: tuple[float, Credentials] | None = None
        self._keys: dict[tuple[str, str], bytes] = {}
        self._ssl = ssl_context
        self._timeout = timeout
        self._lock = threading.Lock()
        self._idle: list[http.client.HTTPConnection] = []
        self._closed = False
        self.sent = 0  # objects stored this way, for the curious and for the tests
        self.requests = 0
        self._failures = 0  # refusals in a row
        self._paused_until = 0.0

    def credentials(self) -> Credentials:
        held = self._credentials
        if held is None or time.monotonic() - held[0] > CREDENTIALS_TTL:
            held = (time.monotonic(), self._fetch_credentials())
            self._credentials = held
        return held[1]

    def forget_credentials(self) -> None:
        self._credentials = None

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection (True: it has been used before) or a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        host = self.netloc.rpartition("@")[2]
        if self.scheme == "https":
            return http.client.HTTPSConnection(host, timeout=self._timeout, context=self._ssl), False
        return http.client.HTTPConnection(host, timeout=self._timeout), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def put(self, key: str, data: bytes, md5: bytes) -> bool:
        """Store `data` as `key` (relative to the bucket). True only when the store answered
        200 with the MD5 of `data` as the object's ETag; False for anything else.

        A store that names the bucket's region in a refusal (`x-amz-bucket-region`) is asked
        again in that region. After FAILURES_TO_PAUSE refusals in a row the shortcut rests for
        PAUSE seconds (False at once): each refusal costs a request before s3fs sends the file.
        """
        if time.monotonic() < self._paused_until:
            return False
        for _ in range(2):
            status, region = self._send(key, data, md5)
            if status == 200:
                self.sent += 1
                self._failures = 0
                return True
            if region and region != self.region and status in (301, 400):
                self.region = region  # signed for the wrong region: once more, in the bucket's
                continue
            break
        self._failures += 1
        if self._failures >= FAILURES_TO_PAUSE:
            self._failures = 0
            self._paused_until = time.monotonic() + PAUSE
            log.info("S3: small files go through s3fs for %d s: the direct PUT was refused %d times in a row "
                     "(last answer: %s)", PAUSE, FAILURES_TO_PAUSE, status)
        return False

    def _send(self, key: str, data: bytes, md5: bytes) -> tuple[int | None, str | None]:
        """One signed PUT: (200 only if the ETag is the MD5 sent, else the status, or None for no
        answer; the region the store says the bucket is in, if it says)."""
        creds = self.credentials()
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        cache = (creds.secret_key, amz_date[:8], self.region)
        signing = self._keys.get(cache)
        if signing is None:
            signing = signing_key(creds.secret_key, amz_date[:8], self.region)
            self._keys = {cache: signing}
        # Over TLS the body is protected in transit and by Content-MD5; in the clear it is signed.
        payload = "UNSIGNED-PAYLOAD" if self.scheme == "https" else hashlib.sha256(data).hexdigest()
        headers = {
            "host": self.netloc,
            "content-md5": base64.b64encode(md5).decode(),
            "x-amz-content-sha256": payload,
            "x-amz-date": amz_date,
        }
        if creds.token:
            headers["x-amz-security-token"] = creds.token
        path = self.prefix + quote(key, safe="/~")
        headers["authorization"] = authorization("PUT", path, headers, payload, amz_date, self.region, creds, signing)
        headers["content-length"] = str(len(data))
        while True:
            conn, reused = self._connection()
            self.requests += 1
            try:
                conn.request("PUT", path, body=data, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                if reused:
                    continue  # a kept-alive connection the server had closed: try a fresh one
                return None, None
            if response.will_close:
                conn.close()
            else:
                self._release(conn)
            if response.status == 403:
                self.forget_credentials()  # maybe renewed since: ask again next time
            if response.status == 200 and (response.getheader("ETag") or "").strip('"') != md5.hex():
                return 502, None  # stored something else than was sent: not a success
            return response.status, response.getheader("x-amz-bucket-region")

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()


def for_s3fs(fs: Any, bucket: str) -> DirectPut | None:
    """A DirectPut for `bucket` with the endpoint, signing region and credentials of the s3fs
    file system `fs`, or None where this shortcut does not apply."""
    try:
        import s3fs
        from fsspec.asyn import sync
    except ImportError:
        return None
    if type(fs) is not s3fs.S3FileSystem or fs.anon or fs.s3_additional_kwargs or fs.req_kw:
        return None
    try:
        client = sync(fs.loop, fs.set_session)
        url = sync(fs.loop, client.generate_presigned_url, "put_object",
                   Params={"Bucket": bucket, "Key": PROBE_KEY}, ExpiresIn=60)
        held = client._get_credentials()  # botocore's own: the same chain s3fs signs with
    except Exception:  # noqa: BLE001 - no shortcut: everything goes through s3fs as before
        return None
    if held is None:
        return None
    config = getattr(client.meta, "config", None)
    if getattr(config, "signature_version", None) not in (None, "s3v4", "v4"):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.path.endswith("/" + PROBE_KEY):
        return None
    if _proxied(parts.scheme, parts.hostname or ""):
        return None
    region = client.meta.region_name or "us-east-1"

    def credentials() -> Credentials:
        frozen = held.get_frozen_credentials()
        if hasattr(frozen, "__await__"):
            frozen = sync(fs.loop, _awaited, frozen)
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    try:
        credentials()
        context = _ssl_context(fs.client_kwargs.get("verify")) if parts.scheme == "https" else None
    except Exception:  # noqa: BLE001
        return None
    timeout = float(getattr(config, "read_timeout", None) or 60)
    return DirectPut(parts.scheme, parts.netloc, parts.path[:-len(PROBE_KEY)], region, credentials, context,
                     timeout)


async def _awaited(value: Any) -> Any:
    return await value


def _proxied(scheme: str, host: str) -> bool:
    """True when the environment sends requests to this host through a proxy (botocore would)."""
    proxies = urllib.request.getproxies()
    return scheme in proxies and not urllib.request.proxy_bypass(host)


def _ssl_context(verify: Any) -> ssl.SSLContext:
    """TLS as botocore would do it: `verify` False, a CA bundle path, or the default bundle."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    bundle = os.environ.get("AWS_CA_BUNDLE")
    if not bundle:
        from botocore.httpsession import get_cert_path

        bundle = get_cert_path(True)
    return ssl.create_default_context(cafile=bundle)
