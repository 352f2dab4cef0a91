"""Secrets kept out of what anyone reads: a password in a URL's user-info (`sftp://bob:pw@host`)
and secret query parameters (a SAS token's `sig`, a presigned URL's `X-Amz-Signature`,
`token=`, `key=`…) are replaced by `***` in any text, wherever a URL is shown or logged."""

from __future__ import annotations

import re

__all__ = ["HIDDEN", "is_redacted", "redact"]

HIDDEN = "***"

# scheme://user:password@ (the user is kept: "wrong user" is worth seeing); with `whole`, any
# user-info (a token given as the user name, as git remotes take it).
_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://)([^/@\s:?#]*):([^/@\s?#]*)@", re.IGNORECASE)
_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/@\s?#]+@", re.IGNORECASE)
# A query parameter whose name says it carries a secret (Azure SAS, AWS presigned, OAuth…).
_QUERY = re.compile(
    r"([?&](?:sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|"
    r"[a-z_-]*(?:token|secret|password|passwd|key))=)[^&#\s'\"]+",
    re.IGNORECASE,
)


def redact(text: str, whole: bool = False) -> str:
    """`text` with the secrets of every URL in it replaced by ***."""
    if "://" not in text and "=" not in text:
        return text
    if whole:
        text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    else:
        text = _PASSWORD.sub(rf"\1\2:{HIDDEN}@", text)
    return _QUERY.sub(rf"\1{HIDDEN}", text)


def is_redacted(url: str) -> bool:
    """Whether `url` has had a secret taken out by redact(): it cannot open anything."""
    return f"{HIDDEN}@" in url or f"={HIDDEN}" in url
