"""The one path by which SIGINT, SIGTERM and SIGHUP end gpuctl: promptly, in one line, leaving an earlier render
intact and no scratch folder behind.

The handler prints the line, then unwinds the main thread (KeyboardInterrupt for SIGINT, SystemExit for the others)
so scratch folders are removed on the way out. Code the signal lands in may turn it into an error of its own or
wait on work that will never finish (the SDK's runtime does both), so the exit code comes from the signal, anything
printed after the line is dropped, and a watchdog ends the process after GRACE_SECONDS whatever the unwinding does.
A second signal ends it at once. A `shielded()` block (the swap of a render folder) runs to its end first.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GRACE_SECONDS = 3.0
# SIGHUP: the terminal gpuctl ran in was closed; its default action would end the process with no word and leave
# the scratch folders of a preview behind.
SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}


class _State:
    def __init__(self) -> None:
        self.received: int | None = None
        self.pending: int | None = None
        self.shield = 0
        self.scratch: list[Path] = []
        self.watchdog: threading.Timer | None = None
        self.stderr = None
        self.previous: dict[int, object] = {}


_state = _State()


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP through this module (main thread only, as Python requires)."""
    _state.__init__()
    _state.previous = {signum: signal.signal(signum, _handle) for signum in SIGNALS}


def received() -> int | None:
    """The signal that is ending this run, if any."""
    return _state.received


def exit_code() -> int:
    return 128 + (_state.received or 0)


def settle() -> None:
    """The run has unwound: stop the watchdog, give stderr and the signal handlers back (a caller in the same
    process, a test, goes on)."""
    for signum, handler in _state.previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]
    if _state.watchdog is not None:
        _state.watchdog.cancel()
    if _state.stderr is not None:
        sys.stderr = _state.stderr
    _state.watchdog = _state.stderr = None


@contextmanager
def scratch(path: Path) -> Iterator[Path]:
    """`path`, removed when the block ends, and by the watchdog should the unwinding never reach that end."""
    _state.scratch.append(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        _state.scratch.remove(path)


@contextmanager
def shielded() -> Iterator[None]:
    """A block a signal does not cut short: one that arrives meanwhile takes effect when the block ends."""
    _state.shield += 1
    try:
        yield
    finally:
        _state.shield -= 1
        if not _state.shield and _state.pending is not None:
            signum, _state.pending = _state.pending, None
            _act(signum)


def _handle(signum: int, frame: object) -> None:
    if _state.received is not None:
        _exit(signum)
    if _state.shield:
        _state.pending = signum
        return
    _act(signum)


def _act(signum: int) -> None:
    _state.received = signum
    try:
        print(f"error: {SIGNALS[signum]}; nothing was changed", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    _state.stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115 - replaced until settle()
    _state.watchdog = threading.Timer(GRACE_SECONDS, _exit, (signum,))
    _state.watchdog.daemon = True
    _state.watchdog.start()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    sys.exit(128 + signum)


def _exit(signum: int) -> None:
    """End the process now: scratch folders removed, buffered output dropped (it may be what blocks)."""
    for path in list(_state.scratch):
        shutil.rmtree(path, ignore_errors=True)
    os._exit(128 + signum)
