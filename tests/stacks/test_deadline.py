"""stacks.deadline: one deadline for a whole piece of work, however slowly it makes progress."""

from __future__ import annotations

import threading
import time

import pytest

from stacks.deadline import DeadlineExceeded, within


def test_the_result_comes_back() -> None:
    assert within(1.0, lambda: 42) == 42


def test_the_work_s_own_error_comes_back_as_it_was() -> None:
    def fail() -> None:
        raise KeyError("nodes")

    with pytest.raises(KeyError, match="nodes"):
        within(1.0, fail)


def test_work_that_keeps_going_is_cut_at_the_deadline() -> None:
    stop = threading.Event()
    started = time.monotonic()
    try:
        with pytest.raises(DeadlineExceeded, match="within 0.2s"):
            within(0.2, lambda: stop.wait(5))
    finally:
        stop.set()
    assert time.monotonic() - started < 1


def test_no_time_left_means_no_work() -> None:
    ran = []
    with pytest.raises(DeadlineExceeded):
        within(0, lambda: ran.append(1))
    assert ran == []
