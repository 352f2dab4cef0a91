"""A store's failure in one line a user can act on: its cause and the fix, never the store
library's own text (its XML, its escaped URLs, its debug dump), which stays in `detail` for the
log and the panel's "Details".

`fault_of(text, …)` reads what obstore says (its message and its "Debug source", which holds the
HTTP status, the error code of the store's XML and the TLS verdict) and names the fault:
`bucket-missing`, `credentials`, `access-denied`, `certificate`, `host-not-found`, `refused`,
`timeout`, `full`, `busy`, `connection`. None where it knows no better: the caller keeps its own words.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from .redact import redact

__all__ = [
    "CREDENTIALS",
    "Fault",
    "connection_fault",
    "fault_of",
    "first_line",
    "recall",
    "remember",
]


@dataclass(frozen=True)
class Fault:
    kind: str
    line: str  # the cause and the fix, one line, for every place a user reads
    detail: str  # the library's first line (secrets taken out), for the log and "Details"


# Where each cloud takes its credentials and CA certificates from, as its users know them.
CREDENTIALS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)",
    "azure": "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or a SAS token)",
    "gcs": "GOOGLE_APPLICATION_CREDENTIALS",
}
_CA = {
    "s3": "AWS_CA_BUNDLE or the store option ca_bundle",
}
_CONTAINER = {"azure": "container"}

# An XML error code of S3 (and S3-compatible stores) or Azure.
_CODE = re.compile(r"<Code>\s*([A-Za-z]+)\s*</Code>")
_STATUS = re.compile(r"status(?: code)?:? (\d{3})", re.IGNORECASE)
_HOST = re.compile(r"\b(https?)://([^/\s?#,)]+)")


def first_line(text: str) -> str:
    """The library's first line, its escaped URL read back, its secrets taken out, the store's
    XML answer replaced by the error code it holds."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = re.sub(r":?\s*<\?xml.*$", "", line)
    code = _CODE.search(text)
    if code:
        line = f"{line} ({code.group(1)})"
    return redact(unquote(line.replace("%%", "%")))


def fault_of(text: str, description: str, cloud: str) -> Fault | None:
    """The fault `text` (an obstore error's whole text) tells of, on the store `description`
    (its URL: `s3://bucket/prefix`) of `cloud` ("s3", "azure", "gcs")."""
    # Words are looked for outside URLs: a key named certificate.pem is no TLS verdict.
    lowered = _HOST.sub(" ", re.sub(r"https?://\S+", " ", text)).lower()
    host_match = _HOST.search(text)
    host = host_match.group(2) if host_match else "its endpoint"
    where = urlsplit(description)
    bucket = where.netloc or "?"
    place = f"{bucket}/{where.path.strip('/')}".rstrip("/")
    container = _CONTAINER.get(cloud, "bucket")
    credentials = CREDENTIALS.get(cloud, "the store's credentials")
    code_match = _CODE.search(text)
    code = code_match.group(1) if code_match else ""
    status_match = _STATUS.search(text)
    status = int(status_match.group(1)) if status_match else None
    detail = first_line(text)

    def fault(kind: str, line: str) -> Fault:
        return Fault(kind, line, detail)

    # TLS first: its verdict is buried under "error sending request".
    if "causedasendentity" in lowered:
        return fault(
            "certificate",
            f"The store's certificate at {host} is a CA certificate used as the server's own "
            "(as `openssl req -x509` makes by default), which TLS refuses: give the server a "
            "certificate of its own (CA:FALSE) signed by that CA",
        )
    if "notvalidforname" in lowered or "certificate is not valid for" in lowered:
        return fault(
            "certificate",
            f"The store's certificate is not for the name {host}: reach it by a name the "
            "certificate holds, or give the server a certificate for this one",
        )
    if "expired" in lowered and "certificate" in lowered:
        return fault("certificate", f"The store's certificate at {host} has expired: renew it")
    if "invalidcertificate" in lowered or "unknownissuer" in lowered or "certificate" in lowered:
        return fault(
            "certificate",
            f"The store's certificate at {host} is signed by a CA this machine does not trust: "
            f"give that CA's certificate in {_CA.get(cloud, 'the store option ca_bundle')}",
        )
    if "dns error" in lowered or "failed to lookup address" in lowered:
        return fault(
            "host-not-found",
            f"The store's host {host.rsplit(':', 1)[0]} was not found (DNS): check the "
            "endpoint's name and this machine's network",
        )
    if "connection refused" in lowered:
        return fault(
            "refused",
            f"The store at {host} refused the connection: is it running, and on that port?",
        )
    if code in ("NoSuchBucket", "ContainerNotFound") or (
        status == 404 and "bucket" in lowered and "does not exist" in lowered
    ):
        return fault(
            "bucket-missing",
            f"The {container} {bucket} does not exist at {host}: create it, or correct the "
            "store URL",
        )
    if (
        code
        in (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AuthenticationFailed",
            "InvalidClientTokenId",
            "ExpiredToken",
            "InvalidToken",
        )
        or status == 401
    ):
        return fault(
            "credentials",
            f"The store at {host} refused the credentials ({code or status}): check {credentials}",
        )
    if code == "AuthorizationFailure":  # Azure (and Azurite) for a key that signs wrongly, too
        return fault(
            "credentials",
            f"The store at {host} refused the request ({code}): check {credentials}, and that "
            f"they may use {place}",
        )
    if status == 403 and not code:
        # No reason given: the answer to a HEAD has no body, and S3 answers a wrong secret and
        # a key without the right there with the same bare 403. Both are named, the credentials
        # first (the usual cause): naming only the access would send a user with a mistyped
        # secret to change the store's policy.
        return fault(
            "credentials",
            f"The store at {host} refused the credentials or their use of {place} (403, no "
            f"reason given): check {credentials}, and that they may list, read, write and "
            "delete under it",
        )
    if code in ("AccessDenied", "AuthorizationPermissionMismatch") or (status == 403):
        return fault(
            "access-denied",
            f"The credentials may not use {place} ({code or status}): allow them to list, read, "
            f"write and delete under it, or choose a prefix they may use",
        )
    if (
        code in ("QuotaExceeded", "XMinioStorageFull", "InsufficientStorage")
        or status == 507
        or "no space left" in lowered
    ):
        return fault("full", "The store is full: free space in it or raise its quota")
    if code in ("SlowDown", "ServerBusy", "ServiceUnavailable") or status in (500, 502, 503, 504):
        return fault(
            "busy",
            f"The store at {host} answers {status or code} (busy or failing): the sync retries by "
            "itself",
        )
    if "kind: timeout" in lowered or "timed out" in lowered or "operation timed out" in lowered:
        return fault("timeout", f"The store at {host} did not answer: the sync retries by itself")
    if (
        "kind: connect" in lowered
        or "connection reset" in lowered
        or "error sending request" in lowered
    ):
        return fault(
            "connection",
            f"The connection to the store at {host} broke before it answered (reset or closed): "
            "the sync retries by itself",
        )
    return None


# The faults met lately, by their line: whatever carries the line on (a pass's error, the
# lease's, a section's) finds its kind and the store's own words here.
_PORT_ON = re.compile(r"port (\d+) on (\S+)")


def connection_fault(err: BaseException, where: str) -> Fault | None:
    """The fault of a store reached over a plain connection (SFTP, SMB, FTP through fsspec),
    from the exception itself: refused, host not found, timed out, reset. `where`: the store's
    host (or `host:port`) as its URL names it."""
    import socket

    text = first_line(str(err) or type(err).__name__)
    lowered = text.lower()
    found = _PORT_ON.search(text)  # paramiko: "Unable to connect to port 22 on 10.0.0.5"
    if found:
        where = f"{found.group(2)}:{found.group(1)}"
    if isinstance(err, socket.gaierror) or "name or service not known" in lowered:
        return Fault(
            "host-not-found",
            f"The store's host {where.rsplit(':', 1)[0]} was not found (DNS): check the "
            "store URL's host and this machine's network",
            text,
        )
    if isinstance(err, ConnectionRefusedError) or found or "connection refused" in lowered:
        return Fault(
            "refused",
            f"The store at {where} refused the connection: is it running, and on that port?",
            text,
        )
    if isinstance(err, TimeoutError) or "timed out" in lowered:
        return Fault(
            "timeout", f"The store at {where} did not answer: the sync retries by itself", text
        )
    if isinstance(err, (ConnectionResetError, ConnectionAbortedError, EOFError)) or (
        "connection reset" in lowered or "connection lost" in lowered
    ):
        return Fault(
            "connection",
            f"The connection to the store at {where} broke before it answered (reset or "
            "closed): the sync retries by itself",
            text,
        )
    return None


_MET: OrderedDict[str, Fault] = OrderedDict()
_MET_LOCK = threading.Lock()
MET_KEPT = 32


def remember(fault: Fault) -> None:
    with _MET_LOCK:
        _MET[fault.line] = fault
        _MET.move_to_end(fault.line)
        while len(_MET) > MET_KEPT:
            _MET.popitem(last=False)


def recall(text: str | None) -> Fault | None:
    """The fault whose line `text` is or holds ("a.txt: <line>", "Sync failed: <line>")."""
    if not text:
        return None
    with _MET_LOCK:
        found = _MET.get(text)
        if found is None:
            found = next((f for line, f in reversed(_MET.items()) if line in text), None)
    return found
