"""Small HTTP stand-ins on 127.0.0.1 for tests of code that talks to servers (bounded, never off-host)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from typing import Protocol


class StandIn(Protocol):
    server: ThreadingHTTPServer
    release: threading.Event  # set at teardown so handlers that hang on purpose return at once


@contextmanager
def serving(stand_in: StandIn) -> Iterator[StandIn]:
    """Serve the stand-in in a background thread for the duration of the block."""
    thread = threading.Thread(target=stand_in.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        stand_in.release.set()
        stand_in.server.shutdown()
        stand_in.server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
