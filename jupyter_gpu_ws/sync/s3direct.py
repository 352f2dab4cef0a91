"""Small files to and from S3 in one signed request each, without botocore's per-request pipeline.

Through s3fs every request passes botocore's machinery (parameter validation, endpoint rules,
event hooks, user agent, signing): about 1.6 ms of CPU a request, which for thousands of small
files costs more than the network does (and, measured for a restore, about 2 ms per GET). A PUT
of a small file, or a GET of an object or of a range of it, needs only an AWS Signature Version
4 and one request on a kept-alive connection, so that is all this module does (the connection
and its lean reading of answers: sync/http1.py).

It is used only where that is the whole story: a plain `s3fs.S3FileSystem` with signed
requests, no extra request arguments (encryption, requester pays), no proxy. Where to send is
asked of botocore itself once (a presigned URL gives the endpoint and the addressing style);
the signing region and the credentials are the client's own, and a refusal that names the
bucket's own region is signed again for it. Any answer but a verified success makes `put`
return False (and `get` None), and the caller sends or fetches through s3fs, whose errors and
retries are the ones the user sees.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import queue
import ssl
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, TypeVar
from urllib.parse import quote, unquote_plus, urlsplit
from xml.etree import ElementTree

from ..diskio import pwrite_all
from .backend import md5_of
from . import getmany
from .http1 import Answer, Connection, ProtocolError, request

log = logging.getLogger(__name__)

Got = TypeVar("Got", int, bytes)

PROBE_KEY = "gpuws-probe"
ALGORITHM = "AWS4-HMAC-SHA256"
# Frozen credentials are asked for again after this long (refreshable ones renew themselves).
CREDENTIALS_TTL = 300.0
# Kept-alive connections held between requests (the engine's workers take one each).
MAX_IDLE = 32
# Idle connections the GET client keeps (a restore has many requests in flight).
GET_MAX_IDLE = 256
# A GET body up to this size is read whole; a larger one goes from the socket to the file
# RECEIVE bytes at a time, each written while it is still in the CPU's cache (with a megabyte
# at a time, a restore spent three times the kernel time of s5cmd copying out of memory), and
# progress is told every PROGRESS_EVERY bytes.
SMALL_BODY = 1 << 20
RECEIVE = 64 << 10
PROGRESS_EVERY = 1 << 20
SPARE_BUFFERS = 64
# A listing goes folder by folder, this many at once, after entering lone folders this deep.
LIST_IN_FLIGHT = 8
LIST_DEPTH = 3
LIST_PAGE = 1000  # objects a page (S3's most)
# The most an error answer's body or a listing page may hold (a page of 1,000 keys is ~300 KB).
ERROR_BODY = 1 << 20
PAGE_BODY = 64 << 20
# The SHA-256 of an empty body: what a GET signs as its payload.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
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
                  region: str, creds: Credentials, key: bytes | None = None, query: str = "") -> str:
    """The Authorization header of a request. `path` is sent as it is (already percent-encoded),
    and so is `query`, which must be canonical (see `canonical_query`); every header in
    `headers` (host included) is signed."""
    names = sorted(name.lower() for name in headers)
    lowered = {name.lower(): " ".join(str(value).split()) for name, value in headers.items()}
    canonical = "\n".join([
        method, path, query,
        "".join(f"{name}:{lowered[name]}\n" for name in names),
        ";".join(names), payload_hash,
    ])
    day = amz_date[:8]
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = key or signing_key(creds.secret_key, day, region)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{ALGORITHM} Credential={creds.access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"


def canonical_query(params: dict[str, str]) -> str:
    """A query string as SigV4 signs it (names sorted, names and values percent-encoded the
    RFC 3986 way), which is also what the request then sends."""
    return "&".join(f"{quote(name, safe='-_.~')}={quote(value, safe='-_.~')}"
                    for name, value in sorted(params.items()))


class DirectS3:
    """Signed requests to one bucket on kept-alive connections, from many threads at once."""

    method = "request"  # what the subclass sends, for the log

    def __init__(self, scheme: str, netloc: str, prefix: str, region: str,
                 credentials: Callable[[], Credentials], ssl_context: ssl.SSLContext | None = None,
                 timeout: float = 60.0, max_idle: int = MAX_IDLE, connect_timeout: float | None = None) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.prefix = prefix  # the encoded path before the object key: "/bucket/" or "/"
        self.region = region
        self._fetch_credentials = credentials
        self._credentials: tuple[float, Credentials] | None = None
        self._keys: dict[tuple[str, str], bytes] = {}
        self._ssl = ssl_context
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: list[Connection] = []
        self._closed = False
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

    def _connection(self) -> tuple[Connection, bool]:
        """An idle kept-alive connection (True: it has been used before) or a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        host = self.netloc.rpartition("@")[2]
        return Connection(host, self._ssl if self.scheme == "https" else None, self._timeout,
                          self._connect_timeout), False

    def _release(self, conn: Connection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def _done(self, conn: Connection, answer: Answer) -> None:
        """An answer read whole: its connection serves again unless the server closes it."""
        if answer.will_close:
            conn.close()
        else:
            self._release(conn)

    def _signed(self, method: str, key: str, payload: str, headers: dict[str, str],
                query: str = "") -> tuple[str, dict[str, str]]:
        """The request path of `key` (with `query`, canonical) and `headers` with the date,
        credentials and signature added."""
        creds = self.credentials()
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        cache = (creds.secret_key, amz_date[:8], self.region)
        signing = self._keys.get(cache)
        if signing is None:
            signing = signing_key(creds.secret_key, amz_date[:8], self.region)
            self._keys = {cache: signing}
        headers = {"host": self.netloc, **headers, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        if creds.token:
            headers["x-amz-security-token"] = creds.token
        path = self.prefix + quote(key, safe="/~")
        headers["authorization"] = authorization(method, path, headers, payload, amz_date, self.region, creds, signing,
                                                 query)
        return (f"{path}?{query}" if query else path), headers

    def resting(self) -> bool:
        """Whether the shortcut rests after refusals in a row (the caller uses s3fs meanwhile)."""
        return time.monotonic() < self._paused_until

    def _accepted(self) -> None:
        self._failures = 0

    def _refused(self, status: int | None) -> None:
        """One more refusal in a row; after FAILURES_TO_PAUSE the shortcut rests for PAUSE
        seconds: each refusal costs a request before s3fs does the work."""
        self._failures += 1
        if self._failures >= FAILURES_TO_PAUSE:
            self._failures = 0
            self._paused_until = time.monotonic() + PAUSE
            log.info("S3: %ss go through s3fs for %d s: the direct %s was refused %d times in a row "
                     "(last answer: %s)", self.method, PAUSE, self.method, FAILURES_TO_PAUSE, status)

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()


class DirectPut(DirectS3):
    """PUTs of whole small objects into one bucket, from many threads at once."""

    method = "PUT"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = 0  # objects stored this way, for the curious and for the tests

    def put(self, key: str, data: bytes, md5: bytes) -> bool:
        """Store `data` as `key` (relative to the bucket). True only when the store answered
        200 with the MD5 of `data` as the object's ETag; False for anything else.

        A store that names the bucket's region in a refusal (`x-amz-bucket-region`) is asked
        again in that region. After FAILURES_TO_PAUSE refusals in a row the shortcut rests for
        PAUSE seconds (False at once): each refusal costs a request before s3fs sends the file.
        """
        if self.resting():
            return False
        for _ in range(2):
            status, region = self._send(key, data, md5)
            if status == 200:
                self.sent += 1
                self._accepted()
                return True
            if region and region != self.region and status in (301, 400):
                self.region = region  # signed for the wrong region: once more, in the bucket's
                continue
            break
        self._refused(status)
        return False

    def _send(self, key: str, data: bytes, md5: bytes) -> tuple[int | None, str | None]:
        """One signed PUT: (200 only if the ETag is the MD5 sent, else the status, or None for no
        answer; the region the store says the bucket is in, if it says)."""
        # Over TLS the body is protected in transit and by Content-MD5; in the clear it is signed.
        payload = "UNSIGNED-PAYLOAD" if self.scheme == "https" else hashlib.sha256(data).hexdigest()
        path, headers = self._signed("PUT", key, payload, {"content-md5": base64.b64encode(md5).decode()})
        headers["content-length"] = str(len(data))
        while True:
            conn, reused = self._connection()
            self.requests += 1
            try:
                conn.send("PUT", path, headers, data)
                answer = conn.answer()
                conn.read_body(answer, ERROR_BODY)
            except OSError:
                conn.close()
                if reused:
                    continue  # a kept-alive connection the server had closed: try a fresh one
                return None, None
            self._done(conn, answer)
            if answer.status == 403:
                self.forget_credentials()  # maybe renewed since: ask again next time
            if answer.status == 200 and (answer.header("etag") or "").strip('"') != md5.hex():
                return 502, None  # stored something else than was sent: not a success
            return answer.status, answer.header("x-amz-bucket-region")


class ChangedInStoreError(Exception):
    """The object is not the one asked for any more (If-Match failed): it changed meanwhile."""


class _TooLarge(Exception):
    """An object larger than the caller reads into memory."""


class ChecksumMismatchError(Exception):
    """The bytes received do not have the MD5 the store gave as the object's ETag."""


class DirectGet(DirectS3):
    """GETs of whole objects or of ranges, written straight into a file at their offsets."""

    method = "GET"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fetched = 0  # objects or ranges fetched this way, for the curious and for the tests
        # Idle connections in a queue that takes and gives without a Python lock: a restore's
        # many workers would otherwise queue on the pool's lock for every request.
        self._spare: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self._max_idle = max(self._max_idle, GET_MAX_IDLE)

    def _connection(self) -> tuple[Connection, bool]:
        try:
            return self._spare.get_nowait(), True
        except queue.Empty:
            return super()._connection()[0], False

    def _release(self, conn: Connection) -> None:
        if self._closed or self._spare.qsize() >= self._max_idle:
            conn.close()
        else:
            self._spare.put(conn)

    def close(self) -> None:
        super().close()
        while True:
            try:
                self._spare.get_nowait().close()
            except queue.Empty:
                return

    def list(self, prefix: str) -> list[tuple[str, int, float | None, str | None]] | None:
        """(key, size, mtime, ETag) of every object whose key starts with `prefix` (relative to
        the bucket), sorted by key; None where the shortcut gave no good answer (the caller
        lists through s3fs).

        ListObjectsV2 pages of 1,000, parsed with the C XML parser (through s3fs, botocore spends
        about 0.1 ms of CPU per object listed). A page waits for the one before it (its
        continuation token), so a large tree is listed folder by folder, several at once: first
        the prefix's own objects and folders (a listing with a delimiter; a lone folder is
        entered, down to LIST_DEPTH levels), then every folder whole, LIST_IN_FLIGHT at a time
        (20,000 objects in 50 folders: 1.3 s one page after the other on SeaweedFS)."""
        if self.resting():
            return None
        out: list[tuple[str, int, float | None, str | None]] = []
        folders = [prefix]
        for _ in range(LIST_DEPTH):
            found: list[str] = []
            level = folders[0]
            if self._pages(level, out, found) is None:
                return None
            # Folders inside the one listed, each once: a store that names others gives no good answer.
            folders = list(dict.fromkeys(found))
            if any(not folder.startswith(level) or len(folder) <= len(level) for folder in folders):
                self._refused(502)
                return None
            if len(folders) != 1 or out:
                break
        if folders:
            workers = min(LIST_IN_FLIGHT, len(folders))
            with ThreadPoolExecutor(workers, thread_name_prefix="gpuws-list") as pool:
                listed = list(pool.map(self._folder, folders))
            if any(part is None for part in listed):
                return None
            for part in listed:
                out.extend(part or ())
        out.sort(key=lambda item: item[0])
        self._accepted()
        return out

    def _folder(self, prefix: str) -> list[tuple[str, int, float | None, str | None]] | None:
        out: list[tuple[str, int, float | None, str | None]] = []
        return out if self._pages(prefix, out) is not None else None

    def _pages(self, prefix: str, out: list[tuple[str, int, float | None, str | None]],
               folders: list[str] | None = None) -> bool | None:
        """Every page of the objects under `prefix` into `out`; with `folders`, a listing with
        the delimiter "/": only the objects right under `prefix`, and its folders' prefixes
        into `folders`. True, or None where the store gave no good answer."""
        token: str | None = None
        while True:
            params = {"list-type": "2", "prefix": prefix, "encoding-type": "url", "max-keys": str(LIST_PAGE)}
            if folders is not None:
                params["delimiter"] = "/"
            if token:
                params["continuation-token"] = token
            path, headers = self._signed("GET", "", EMPTY_SHA256, {}, canonical_query(params))
            page = self._page(path, headers)
            if page is None:
                return None
            try:
                token = _parse_listing(page, out, folders)
            except (ElementTree.ParseError, ValueError):
                self._refused(502)
                return None
            if token is None:
                return True

    def _page(self, path: str, headers: dict[str, str]) -> bytes | None:
        try:
            result = self._small(path, headers, PAGE_BODY)
        except _TooLarge:
            result = (None, None)
        if isinstance(result, tuple):
            self._refused(result[0])
            return None
        return result

    def read(self, key: str, limit: int | None = None) -> bytes | None:
        """The whole object `key` (relative to the bucket), read into memory; None where the
        shortcut gave no good answer or the object is larger than `limit` (the caller reads
        through s3fs). FileNotFoundError: no such object."""
        most = PAGE_BODY if limit is None else limit
        try:
            return self._ask(key, {}, lambda path, headers: self._small(path, headers, most))
        except _TooLarge:
            return None  # not a refusal: s3fs reads it

    def get(self, key: str, fd: int, offset: int = 0, length: int | None = None, etag: str | None = None,
            progress: Callable[[int], None] | None = None) -> int | None:
        """Write `key` (relative to the bucket) into the file `fd`: the whole object from offset
        0, or, with `length`, its bytes offset..offset+length-1 at the same offsets. Returns how
        many bytes were written, or None where the shortcut gave no good answer (a refusal, a
        broken connection, an answer it does not understand): the caller then uses s3fs.

        `etag`: the object's ETag from the listing, sent as If-Match, so that the ranges of one
        file all come from the same object. A whole object whose ETag is an MD5 (a single PUT)
        is checked against it. FileNotFoundError: no such object (deleted meanwhile);
        ChangedInStoreError: not the object `etag` names any more; ChecksumMismatchError: the
        bytes do not match their MD5. `progress` is called with each chunk's size as it lands,
        and may raise to stop the transfer.
        """
        extra: dict[str, str] = {}
        if length is not None:
            extra["range"] = f"bytes={offset}-{offset + length - 1}"
        extra.update(if_match(etag))
        return self._ask(key, extra, lambda path, headers: self._fetch(path, headers, fd, offset, length, progress))

    def _ask(self, key: str, extra: dict[str, str],
             send: Callable[[str, dict[str, str]], Got | tuple[int | None, str | None]]) -> Got | None:
        """`send` the signed GET of `key` with the headers `extra`: what it got, or None for a
        refusal (any other answer, or none). Sent once more, signed for the bucket's own region,
        where the store names it. FileNotFoundError: 404; ChangedInStoreError: 412."""
        if self.resting():
            return None
        for _ in range(2):
            path, headers = self._signed("GET", key, EMPTY_SHA256, extra)
            result = send(path, headers)
            if not isinstance(result, tuple):
                self.fetched += 1
                self._accepted()
                return result
            status, region = result
            if status == 404:
                raise FileNotFoundError(key)
            if status == 412:
                raise ChangedInStoreError(key)
            if region and region != self.region and status in (301, 400):
                self.region = region
                continue
            break
        self._refused(status)
        return None

    def _small(self, path: str, headers: dict[str, str], limit: int) -> bytes | tuple[int | None, str | None]:
        """One signed GET read whole: the body of a 200, else (the status, or None for no
        answer; the region the store names, if it does). _TooLarge: a body over `limit`."""
        got = self._answer(path, headers)
        if got is None:
            return None, None
        conn, answer = got
        if answer.status == 200 and answer.length is not None and answer.length > limit:
            conn.close()
            raise _TooLarge()
        try:
            body = conn.read_body(answer, limit if answer.status == 200 else ERROR_BODY)
        except OSError:
            conn.close()
            return None, None
        self._done(conn, answer)
        if answer.status == 200:
            return body
        if answer.status == 403:
            self.forget_credentials()
        return answer.status, answer.header("x-amz-bucket-region")

    def _answer(self, path: str, headers: dict[str, str]) -> tuple[Connection, Answer] | None:
        """The head of the answer to one signed GET, on a kept-alive connection (a fresh one
        where the server had closed it), or None for none (a failed connection, a header that
        cannot be sent: an ETag with a line break)."""
        while True:
            conn, reused = self._connection()
            self.requests += 1
            try:
                conn.send("GET", path, headers)
                return conn, conn.answer()
            except OSError:
                conn.close()
                if reused:
                    continue  # a kept-alive connection the server had closed: try a fresh one
                return None
            except ValueError:
                self._release(conn)
                return None

    def get_many(self, items: list[getmany.Wanted], landed: Callable[[getmany.Wanted, bytes], None],
                 in_flight: int, stop: Callable[[], bool] | None = None) -> list[getmany.Wanted]:
        """Many whole small objects from this thread, `in_flight` at once (sync/getmany.py):
        `landed(item, body)` for each that came; the others are returned."""
        return getmany.get_many(self, items, landed, in_flight, stop)

    def request_for(self, key: str, etag: str | None) -> bytes:
        """The signed GET of the whole object `key`, If-Match `etag`, as sent."""
        path, headers = self._signed("GET", key, EMPTY_SHA256, if_match(etag))
        return request("GET", path, headers)

    def _fetch(self, path: str, headers: dict[str, str], fd: int, offset: int, length: int | None,
               progress: Callable[[int], None] | None) -> int | tuple[int | None, str | None]:
        """One signed GET: the bytes written, or (the status, or None for no answer; the region
        the store names, if it does)."""
        got = self._answer(path, headers)
        if got is None:
            return None, None
        conn, answer = got
        try:
            ok = answer.status == 206 if length is not None else answer.status == 200
            if length is not None and answer.status == 200 and offset == 0:
                ok = answer.length == length  # a store that ignores Range for the whole file
            if not ok:
                conn.read_body(answer, ERROR_BODY)
                if answer.status == 403:
                    self.forget_credentials()
                status = answer.status if answer.status != 200 else 502
                self._done(conn, answer)
                return status, answer.header("x-amz-bucket-region")
            expected = answer.length
            if expected is None or (length is not None and expected != length):
                raise ProtocolError("an object's answer without its size, or of another size than asked")
            md5 = None
            tag = md5_of(answer.header("etag"))
            if length is None and tag is not None:
                md5 = hashlib.md5()
            written = _body_into(conn, answer, fd, offset, md5, progress)
        except OSError:
            conn.close()
            return None, None
        except BaseException:
            conn.close()  # stopped mid-body (progress raised): the connection is not reusable
            raise
        if answer.will_close or written != expected:
            conn.close()  # closed by the server, or cut short: no use for another request
        else:
            self._release(conn)
        if written != expected:
            return None, None
        if md5 is not None and md5.hexdigest() != tag:
            raise ChecksumMismatchError(path)
        return written


def if_match(etag: str | None) -> dict[str, str]:
    """The If-Match header for the listing's `etag` (quoted as sent), or none without one."""
    return {"if-match": etag if etag.startswith('"') else f'"{etag}"'} if etag else {}


_S3 = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def _parse_listing(page: bytes, out: list[tuple[str, int, float | None, str | None]],
                   folders: list[str] | None = None) -> str | None:
    """Add a ListObjectsV2 page's objects to `out` (and, with `folders`, its common prefixes to
    it); the continuation token, or None at the end."""
    root = ElementTree.fromstring(page)
    ns = _S3 if root.tag.startswith(_S3) else ""
    if root.tag != f"{ns}ListBucketResult":
        raise ValueError(f"not a listing: {root.tag}")
    encoded = (root.findtext(f"{ns}EncodingType") or "").lower() == "url"
    for item in root.iter(f"{ns}Contents"):
        key = item.findtext(f"{ns}Key") or ""
        if encoded:
            key = unquote_plus(key)
        modified = item.findtext(f"{ns}LastModified")
        mtime = datetime.fromisoformat(modified.replace("Z", "+00:00")).timestamp() if modified else None
        etag = (item.findtext(f"{ns}ETag") or "").strip('"') or None
        out.append((key, int(item.findtext(f"{ns}Size") or 0), mtime, etag))
    if folders is not None:
        for item in root.iter(f"{ns}CommonPrefixes"):
            folder = item.findtext(f"{ns}Prefix") or ""
            folders.append(unquote_plus(folder) if encoded else folder)
    truncated = (root.findtext(f"{ns}IsTruncated") or "").lower() == "true"
    token = root.findtext(f"{ns}NextContinuationToken")
    if truncated and not token:
        raise ValueError("a truncated listing without a continuation token")
    return token if truncated else None


# Receive buffers, reused: a transfer takes one and gives it back (allocating a megabyte per
# chunk costs page faults); at most SPARE_BUFFERS are kept between transfers.
_buffers: queue.SimpleQueue[memoryview] = queue.SimpleQueue()


def _body_into(conn: Connection, answer: Answer, fd: int, offset: int, md5: Any,
               progress: Callable[[int], None] | None) -> int:
    """Write the answer's body (answer.length bytes) into `fd` from `offset`: a small body
    whole; a larger one as it arrives, the bytes received with the head first, then straight
    from the socket into the file where the kernel can (Connection.splice_into: one copy, none
    through this process), else through a small reused buffer, one read of the socket per
    chunk. Progress is told every PROGRESS_EVERY bytes or so."""
    left = answer.length or 0
    if left <= SMALL_BODY:
        data = conn.read_body(answer, SMALL_BODY)
        if md5 is not None:
            md5.update(data)
        pwrite_all(fd, memoryview(data), offset)
        if progress is not None and data:
            progress(len(data))
        return len(data)
    try:
        buffer = _buffers.get_nowait()
    except queue.Empty:
        buffer = memoryview(bytearray(RECEIVE))
    try:
        written = 0
        untold = 0
        direct = md5 is None  # a body whose MD5 is checked on the way passes through here
        while written < left:
            if direct and not conn.held():
                if progress is not None and untold:
                    progress(untold)
                    untold = 0
                moved, direct = conn.splice_into(fd, offset + written, left - written, progress, PROGRESS_EVERY)
                written += moved
                if direct:
                    break  # all of it, or the connection closed before its end
                continue
            n = conn.readinto(buffer[:min(len(buffer), left - written)])
            if not n:
                break
            chunk = buffer[:n]
            if md5 is not None:
                md5.update(chunk)
            pwrite_all(fd, chunk, offset + written)
            written += n
            untold += n
            if progress is not None and untold >= PROGRESS_EVERY:
                progress(untold)
                untold = 0
        if progress is not None and untold:
            progress(untold)
        return written
    finally:
        if _buffers.qsize() < SPARE_BUFFERS:
            _buffers.put(buffer)


Client = TypeVar("Client", bound=DirectS3)


def for_s3fs(fs: Any, bucket: str, kind: type[Client] = DirectPut) -> Client | None:  # type: ignore[assignment]
    """A DirectPut (or `kind`: DirectGet) for `bucket` with the endpoint, signing region and
    credentials of the s3fs file system `fs`, or None where this shortcut does not apply."""
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
    connect = float(getattr(config, "connect_timeout", None) or timeout)
    return kind(parts.scheme, parts.netloc, parts.path[:-len(PROBE_KEY)], region, credentials, context, timeout,
                connect_timeout=connect)


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
