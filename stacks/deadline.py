"""One deadline for a whole exchange with a server, not one per socket read."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The work did not finish in time."""


class Deadline:
    """A moment `seconds` from now that several steps share: each gets what the ones before it left."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._ends = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self._ends - time.monotonic())


def within(seconds: float, work: Callable[[], T]) -> T:
    """Run `work` in a daemon thread; return its result or re-raise its error, or raise DeadlineExceeded.

    Socket timeouts bound each read, so a server that sends one byte at a time outlives any of them. Waiting for
    the thread keeps the deadline; a thread still blocked then is abandoned and ends when its socket does.
    """
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as error:  # noqa: BLE001 - handed back to the caller's thread as it was
            outcome.append((False, error))

    if seconds > 0:
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(seconds)
    if not outcome:
        raise DeadlineExceeded(f"no complete answer within {seconds:g}s")
    finished, value = outcome[0]
    if finished:
        return value  # type: ignore[return-value]
    raise value  # type: ignore[misc]
