"""The browser pages connected to this server, asked to save their open documents before a
persist: a notebook's unsaved edits live only in the page that shows it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

# Server → page: save every document with unsaved changes, answer within `timeout` seconds.
SAVE_REQUEST = "save-documents"
# Page → server: what it saved, and what it could not save with the reason.
SAVE_ANSWER = "documents-saved"
# Server → page: the page's message was not understood (it stays connected).
ERROR = "error"

# A page answers a little before the server stops waiting, so that what it could not save in
# time reaches the server as a failure with its reason rather than as silence.
PAGE_SHARE_OF_BOUND = 0.8
# Limits on an answer: a page holds a few documents, not thousands.
MAX_DOCUMENTS = 1000
MAX_PATH = 4096
MAX_ERROR = 1000


class BrowserPage(Protocol):
    """One connected page, as the websocket handler presents it."""

    name: str

    def send(self, message: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass
class DocumentsReport:
    """What the pages saved before a persist (`result.documents` of the persist job)."""

    saved: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)  # {"path", "error"}
    browsers: int = 0  # pages asked
    unanswered: list[str] = field(default_factory=list)  # names of the pages that did not answer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """In the user's words, for the job's step."""
        if not self.browsers:
            return "no browser page is connected"
        parts = [_count(len(self.saved), "document") + " saved"]
        if self.failed:
            parts.append(
                f"{len(self.failed)} not saved ({', '.join(f['path'] for f in self.failed[:3])}"
                f"{' …' if len(self.failed) > 3 else ''})"
            )
        asked = _count(self.browsers, "browser page")
        if self.unanswered:
            parts.append(
                f"{len(self.unanswered)} of {asked} did not answer ({', '.join(self.unanswered[:3])}"
                f"{' …' if len(self.unanswered) > 3 else ''})"
            )
        else:
            parts.append(f"{asked} asked")
        return "; ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class AnswerError(ValueError):
    """A page's message that does not follow the protocol."""


@dataclass
class _Answer:
    request_id: str
    saved: list[str]
    failed: list[dict[str, str]]


def parse_answer(message: Any) -> _Answer:
    """A page's answer, checked field by field; anything else is an AnswerError saying why."""
    if not isinstance(message, dict) or message.get("type") != SAVE_ANSWER:
        raise AnswerError(
            f'Expected {{"type": "{SAVE_ANSWER}", "request_id": …, "saved": […], "failed": […]}}'
        )
    request_id = message.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise AnswerError('"request_id" is the id of the request being answered (a string)')
    saved = message.get("saved", [])
    if not isinstance(saved, list) or not all(_is_path(p) for p in saved):
        raise AnswerError(
            f'"saved" is a list of document paths (strings of at most {MAX_PATH} characters)'
        )
    failed = message.get("failed", [])
    if not isinstance(failed, list) or not all(
        isinstance(f, dict) and _is_path(f.get("path")) and isinstance(f.get("error"), str)
        for f in failed
    ):
        raise AnswerError('"failed" is a list of {"path": "<document path>", "error": "<why>"}')
    if len(saved) + len(failed) > MAX_DOCUMENTS:
        raise AnswerError(f"An answer lists at most {MAX_DOCUMENTS} documents")
    return _Answer(
        request_id,
        list(saved),
        [{"path": f["path"], "error": f["error"][:MAX_ERROR] or "unknown error"} for f in failed],
    )


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_PATH


class BrowserPages:
    """Every connected page, and the save requests waiting for their answers.

    Used on the server's event loop only (the websocket handlers and `save_documents` run there),
    so it needs no lock.
    """

    def __init__(self) -> None:
        self.pages: set[BrowserPage] = set()
        # request id → the pages asked and not yet heard from, each with its future answer
        self._waiting: dict[str, dict[BrowserPage, asyncio.Future[_Answer | None]]] = {}

    def connect(self, page: BrowserPage) -> None:
        self.pages.add(page)

    def disconnect(self, page: BrowserPage) -> None:
        """A page that goes away while asked will not answer: stop waiting for it."""
        self.pages.discard(page)
        for futures in self._waiting.values():
            future = futures.get(page)
            if future is not None and not future.done():
                future.set_result(None)

    def answer(self, page: BrowserPage, message: Any) -> None:
        """A message from a page. Raises AnswerError for one that breaks the protocol; an answer
        to a request that is no longer waited for (it came after the bound) is dropped."""
        answer = parse_answer(message)
        future = self._waiting.get(answer.request_id, {}).get(page)
        if future is None or future.done():
            log.debug(
                "GPU workspace: a late or unexpected answer from %s to %s",
                page.name,
                answer.request_id,
            )
            return
        future.set_result(answer)

    async def save_documents(self, timeout: float) -> DocumentsReport:
        """Ask every connected page to save its open documents and wait up to `timeout` seconds
        for all of them; a page that does not answer in time is named in the report."""
        pages = list(self.pages)
        report = DocumentsReport(browsers=len(pages))
        if not pages:
            return report
        request_id = uuid.uuid4().hex[:12]
        loop = asyncio.get_running_loop()
        futures: dict[BrowserPage, asyncio.Future[_Answer | None]] = {
            page: loop.create_future() for page in pages
        }
        self._waiting[request_id] = futures
        request = {
            "type": SAVE_REQUEST,
            "request_id": request_id,
            "timeout": round(timeout * PAGE_SHARE_OF_BOUND, 3),
        }
        try:
            for page in pages:
                try:
                    page.send(request)
                except Exception as err:  # a page closing as it is asked: it cannot answer
                    log.debug("GPU workspace: cannot ask %s to save: %s", page.name, err)
                    if not futures[page].done():
                        futures[page].set_result(None)
            await asyncio.wait(futures.values(), timeout=timeout)
        finally:
            del self._waiting[request_id]
        saved: set[str] = set()
        for page, future in futures.items():
            answer = future.result() if future.done() else None
            if answer is None:
                report.unanswered.append(page.name)
                continue
            saved.update(answer.saved)
            report.failed.extend(answer.failed)
        report.saved = sorted(saved)
        report.unanswered.sort()
        return report
