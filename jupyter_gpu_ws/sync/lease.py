"""One runtime writes a workspace at a time: a lease in the store with holder, heartbeat, expiry.

Written as JSON at `.gpuws/lease.json`, then read back to confirm, since not every store offers
a compare-and-swap. A runtime that finds a live lease held by another stays read-only; an
expired lease (its holder vanished with its runtime) may be taken over explicitly, or is taken
at start when nobody else has renewed it.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

from .errors import LeaseHeldError
from .store import Store

LEASE_NAME = "lease.json"


@dataclass
class LeaseInfo:
    holder: str
    host: str
    pid: int
    user: str
    acquired: float
    heartbeat: float
    expires: float

    def describe(self, now: float) -> str:
        left = self.expires - now
        state = f"expires in {left:.0f} s" if left > 0 else f"expired {-left:.0f} s ago"
        return f"{self.user}@{self.host} (pid {self.pid}), {state}"


class Lease:
    def __init__(self, store: Store, ttl: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self.holder = uuid.uuid4().hex
        self.held = False

    def current(self) -> LeaseInfo | None:
        data: Any = self.store.read_json(LEASE_NAME)
        if not isinstance(data, dict):
            return None
        try:
            return LeaseInfo(**data)
        except TypeError:
            return None  # an unreadable lease is no lease

    def acquire(self, take_over: bool = False) -> LeaseInfo:
        """Take the lease if free, ours, or expired; else raise LeaseHeldError.

        `take_over` is the user's explicit word: still refused while the other lease is live.
        """
        now = self.clock()
        existing = self.current()
        if existing and existing.holder != self.holder and existing.expires > now and not _dead_here(existing):
            hint = "" if take_over else "; it can be taken over once it expires"
            raise LeaseHeldError(
                f"Another runtime is writing this workspace: {existing.describe(now)}. "
                f"This one is read-only{hint}."
            )
        info = self._write(now, acquired=now if not self.held else None)
        time.sleep(0.05)  # let a concurrent writer's lease land, then check who won
        confirmed = self.current()
        if confirmed is None or confirmed.holder != self.holder:
            self.held = False
            other = confirmed.describe(self.clock()) if confirmed else "unknown"
            raise LeaseHeldError(f"Another runtime took the lease at the same time: {other}. This one is read-only.")
        self.held = True
        return info

    def renew(self) -> LeaseInfo:
        """Heartbeat; raises LeaseHeldError if another runtime took the lease meanwhile."""
        existing = self.current()
        if existing and existing.holder != self.holder:
            self.held = False
            raise LeaseHeldError(
                f"Another runtime took over this workspace: {existing.describe(self.clock())}. This one is read-only."
            )
        return self._write(self.clock(), acquired=existing.acquired if existing else None)

    def release(self) -> None:
        if not self.held:
            return
        existing = self.current()
        if existing and existing.holder == self.holder:
            now = self.clock()
            existing.heartbeat = now
            existing.expires = now  # expired at once: the next runtime need not wait
            self.store.write_json(LEASE_NAME, asdict(existing))
        self.held = False

    def _write(self, now: float, acquired: float | None) -> LeaseInfo:
        try:
            user = getpass.getuser()
        except Exception:
            user = "unknown"
        info = LeaseInfo(
            holder=self.holder,
            host=socket.gethostname(),
            pid=os.getpid(),
            user=user,
            acquired=acquired if acquired is not None else now,
            heartbeat=now,
            expires=now + self.ttl,
        )
        self.store.write_json(LEASE_NAME, asdict(info))
        return info


def _dead_here(lease: LeaseInfo) -> bool:
    """A lease held by a process of this machine that no longer exists (a crashed server
    restarted on the same machine) need not be waited for."""
    if lease.host != socket.gethostname() or lease.pid == os.getpid():
        return False
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
