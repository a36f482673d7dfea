"""stacks.registration: the program registers without the SDK's stack traces and debug lines, and keeps no outputs of
the objects it never reads, only where the SDK's source is the one read."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi import log
from pulumi.runtime import resource, rpc

from components import kinds
from gpuctl import runtime
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


SDK_TRANSFER_PROPERTIES = registration._sdk_transfer_properties
SDK_RESOLVE_OUTPUTS = registration._sdk_resolve_outputs


def test_the_locked_sdk_keeps_no_outputs_of_an_unread_object(monkeypatch) -> None:
    # Fails after an SDK upgrade changes `transfer_properties` or `resolve_outputs`: read the new ones (does a URN
    # still resolve apart from the output properties? is resolving no property still a no-op?), then update the hashes.
    monkeypatch.setattr(rpc, "transfer_properties", SDK_TRANSFER_PROPERTIES)
    monkeypatch.setattr(rpc, "resolve_outputs", SDK_RESOLVE_OUTPUTS)

    assert registration.unread_outputs()
    assert rpc.transfer_properties is registration._transfer_properties
    assert rpc.resolve_outputs is registration._resolve_outputs


def registered(build) -> dict:
    """What the objects `build()` returns resolve to under the mock runtime: each output it reads, by name."""
    seen = {}

    def program() -> None:
        for name, output in build().items():
            output.apply(lambda value, name=name: seen.__setitem__(name, value))

    runtime.run_program("dev", {}, [], program)
    return seen


def test_an_object_a_kind_registers_has_its_urn_and_no_other_output() -> None:
    objects = {}

    def build() -> dict:
        objects["quota"] = kinds.RESOURCE_QUOTA("team-a-quota", pulumi.ResourceOptions(),
                                                metadata={"name": "gpu", "namespace": "team-a"},
                                                spec={"hard": {"requests.nvidia.com/gpu": "2"}})
        objects["map"] = k8s.core.v1.ConfigMap("team-a-map", metadata={"name": "m"}, data={"a": "b"})
        return {"quota urn": objects["quota"].urn, "map data": objects["map"].data}

    seen = registered(build)

    assert seen["quota urn"].endswith("::team-a-quota")
    assert seen["map data"] == {"a": "b"}  # a typed class keeps its outputs
    with pytest.raises(AttributeError):
        objects["quota"].spec  # noqa: B018 (the read is the test)


def test_an_sdk_whose_source_differs_resolves_every_output(monkeypatch) -> None:
    def transfer_properties(res, props, custom):  # as if an upgrade had changed it
        return SDK_TRANSFER_PROPERTIES(res, props, custom)

    monkeypatch.setattr(rpc, "transfer_properties", transfer_properties)
    monkeypatch.setattr(runtime, "unread_outputs", lambda: registration.unread_outputs() and False)

    seen = registered(lambda: {"spec": kinds.RESOURCE_QUOTA("q", pulumi.ResourceOptions(), metadata={"name": "q"},
                                                            spec={"hard": {"pods": "1"}}).spec})

    assert rpc.transfer_properties is transfer_properties
    assert seen["spec"] == {"hard": {"pods": "1"}}


def test_a_failed_registration_of_an_unread_object_still_fails_the_program(monkeypatch) -> None:
    register = runtime.RecordingMonitor.RegisterResource

    def refusing(monitor, request):
        if request.name == "team-a-quota":
            raise RuntimeError("the engine refused team-a-quota")
        return register(monitor, request)

    monkeypatch.setattr(runtime.RecordingMonitor, "RegisterResource", refusing)

    with pytest.raises(Exception, match="team-a-quota"):
        registered(lambda: {"urn": kinds.RESOURCE_QUOTA("team-a-quota", pulumi.ResourceOptions(),
                                                        metadata={"name": "q"}).urn})
    monkeypatch.undo()
    assert registered(lambda: {"urn": kinds.RESOURCE_QUOTA("team-a-quota", pulumi.ResourceOptions(),
                                                           metadata={"name": "q"}).urn})  # the next run is clean
