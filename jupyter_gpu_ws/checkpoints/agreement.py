"""Every rank of a distributed run saves at the same step: one round through the process group's
key-value store, started by rank 0 only on a step where a request is pending.

A request (from the server, rank 0's `every_seconds` clock, a SIGTERM on any rank) reaches rank
0, which may be a step or two ahead of or behind the others. A collective in the training
thread cannot settle the step: a rank blocked in it while another rank runs on into the next
gradient all-reduce deadlocks both. So the round is answered by a thread on each other rank:

1. rank 0, at its step `i`, writes round `n`;
2. each other rank's thread (polling the store every 50 ms, never the training loop) first
   marks its loop to wait at its next `step()`, then reports the last step its loop reached,
   `s`: the loop will wait at step `s + 1` at the latest;
3. rank 0 takes the target `T = max(i, every s + 1)`, so no rank has passed `T`, and writes it;
4. each rank saves when its loop reaches `T` (a rank that waited at `T` saves at once).

Steps without a request cost the loop nothing beyond an attribute check; rank 0 waits only for
the other ranks' threads (a few milliseconds), the others only for rank 0's answer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
ROUND_TIMEOUT = 60.0
ABORTED = -1  # the target of a round rank 0 gave up


class AgreementError(Exception):
    """A round could not be completed (a rank stopped answering): nothing is saved."""


class StepAgreement:
    """One rank's side of the rounds. `store` is the process group's store (or any c10d store all
    ranks share); each thread uses its own clone of it."""

    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        current_step: Callable[[], int],
        on_round: Callable[[int], None],
        on_ask: Callable[[], None],
        timeout: float = ROUND_TIMEOUT,
    ) -> None:
        self.store = store.clone()
        self.rank, self.world_size = rank, world_size
        self.timeout = timeout
        self._current_step = current_step
        self._on_round = on_round  # another rank: "wait at your next step()"
        self._on_ask = on_ask  # rank 0: another rank asked for a checkpoint
        self._round = 0
        self._answers: dict[int, tuple[int, dict[str, Any]]] = {}
        self._answered = threading.Condition()
        self._ask = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if world_size > 1:
            self._thread = threading.Thread(
                target=self._watch, args=(store.clone(),), name="gpuws-agreement", daemon=True
            )
            self._thread.start()

    # -- rank 0 ----------------------------------------------------------------------------------

    def agree(self, step: int, info: dict[str, Any]) -> int:
        """The step every rank saves at, for a request pending at rank 0's step `step`."""
        if self.world_size == 1:
            return step
        self._round += 1
        n = self._round
        self.store.set(f"r{n}", json.dumps(info))
        keys = [f"r{n}/at{r}" for r in range(1, self.world_size)]
        try:
            self.store.wait(keys, timedelta(seconds=self.timeout))
        except Exception as err:
            self.store.set(f"r{n}/T", str(ABORTED))  # release the ranks that did answer
            raise AgreementError(
                f"ranks did not answer within {self.timeout:.0f} s ({_first_line(err)})"
            ) from None
        reached = [int(self.store.get(k)) for k in keys]
        target = max([step] + [s + 1 for s in reached])
        self.store.set(f"r{n}/T", str(target))
        if n > 1:
            # Every rank's thread read round n-1's target before it could answer round n.
            for key in [
                f"r{n - 1}",
                f"r{n - 1}/T",
                *(f"r{n - 1}/at{r}" for r in range(1, self.world_size)),
            ]:
                try:
                    self.store.delete_key(key)
                except Exception:
                    pass
        return target

    # -- the other ranks -------------------------------------------------------------------------

    def answer(self, n: int, timeout: float | None = None) -> tuple[int, dict[str, Any]]:
        """Round `n`'s target and what rank 0 sent with it (the training thread waits here)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._answered:
            while n not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    raise AgreementError(
                        f"rank 0 did not say at which step to save within {self.timeout:.0f} s"
                    )
                self._answered.wait(min(left, 1.0))
            target, info = self._answers.pop(n)
        if target == ABORTED:
            raise AgreementError("rank 0 gave up the round: another rank did not answer")
        return target, info

    def ask(self) -> None:
        """Ask rank 0 for a checkpoint (thread- and signal-safe: the watcher thread sends it)."""
        self._ask.set()

    def close(self) -> None:
        """Stop the watcher and wait for it: a daemon thread still inside a store call when the
        interpreter finalizes is unwound through C++ and aborts the process ("terminate called
        without an active exception"), so it must be out of the store before the exit."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(POLL_SECONDS * 2 + 5)

    def _watch(self, store: Any) -> None:
        n = 1
        seen_asks = 0
        while not self._stop.wait(POLL_SECONDS):
            try:
                if self.rank == 0:
                    asks = store.add("ask", 0)
                    if asks > seen_asks:
                        seen_asks = asks
                        self._on_ask()
                    continue
                if self._ask.is_set():
                    self._ask.clear()
                    store.add("ask", 1)
                if not store.check([f"r{n}"]):
                    continue
                info = json.loads(store.get(f"r{n}"))
                # The loop is told to wait before its step is read: it waits at most one step later.
                self._on_round(n)
                store.set(f"r{n}/at{self.rank}", str(self._current_step()))
                try:
                    store.wait([f"r{n}/T"], timedelta(seconds=self.timeout))
                    target = int(store.get(f"r{n}/T"))
                except Exception:
                    if self._stop.is_set():
                        return
                    target = ABORTED  # rank 0 is gone or stuck: the loop goes on without this round
                with self._answered:
                    self._answers[n] = (target, info)
                    self._answered.notify_all()
                n += 1
            except Exception as err:  # the store went away: the run is ending
                if not self._stop.is_set():
                    log.debug("gpuws: the checkpoint agreement stopped: %s", err)
                return


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
