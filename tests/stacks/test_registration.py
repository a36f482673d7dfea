"""stacks.registration: the program registers without the SDK's stack traces and debug lines, only where the SDK's
source is the one read."""

from __future__ import annotations

import pulumi
import pytest
from pulumi import log
from pulumi.runtime import resource

from stacks import registration

SDK_GET_STACK_TRACE = resource._get_stack_trace if resource._get_stack_trace is not registration._no_stack_trace \
    else None
SDK_LOG_DEBUG = log.debug if log.debug is not registration._no_debug_line else None


@pytest.fixture
def sdk_as_shipped(monkeypatch) -> None:
    """The SDK's own functions for the test, whatever an earlier render replaced (monkeypatch restores the rest)."""
    if SDK_GET_STACK_TRACE is None or SDK_LOG_DEBUG is None:
        pytest.skip("the SDK's own functions were replaced before this module")
    monkeypatch.setattr(resource, "_get_stack_trace", SDK_GET_STACK_TRACE)
    monkeypatch.setattr(log, "debug", SDK_LOG_DEBUG)
    monkeypatch.delenv(registration.SDK_DEBUG_ENV, raising=False)


def test_the_locked_sdk_registers_without_stack_traces_or_debug_lines(sdk_as_shipped) -> None:
    # Fails after an SDK upgrade changes `_get_stack_trace` or `log.debug`: read the new ones (is the trace still
    # only a source position for the state? is a debug line still one call to the engine?), then update the hashes.
    assert registration.lean_registrations()
    assert resource._get_stack_trace is registration._no_stack_trace
    assert log.debug is registration._no_debug_line


def test_a_debug_line_no_longer_reaches_the_engine(sdk_as_shipped, monkeypatch) -> None:
    sent = []
    monkeypatch.setattr(log, "get_engine", lambda: type("Engine", (), {"Log": staticmethod(sent.append)})())
    log.debug("resource registration prepared")
    assert len(sent) == 1
    registration.lean_registrations()
    log.debug("resource registration prepared")
    pulumi.log.warn("a warning still does")
    assert [request.message for request in sent] == ["resource registration prepared", "a warning still does"]


def test_sdk_debug_keeps_both(sdk_as_shipped, monkeypatch) -> None:
    monkeypatch.setenv(registration.SDK_DEBUG_ENV, "true")
    assert not registration.lean_registrations()
    assert resource._get_stack_trace is SDK_GET_STACK_TRACE
    assert log.debug is SDK_LOG_DEBUG


def test_an_sdk_whose_source_differs_keeps_its_own(sdk_as_shipped, monkeypatch) -> None:
    def debug(msg, resource=None, stream_id=None, ephemeral=None):  # as if an upgrade had changed it
        return None

    monkeypatch.setattr(log, "debug", debug)
    assert not registration.no_debug_lines()
    assert log.debug is debug
    assert registration.no_stack_traces()  # the other is still the one read
