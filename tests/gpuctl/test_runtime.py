"""gpuctl.runtime: the mock runtime records one root stack per run, so stack outputs are always the program's."""

from __future__ import annotations

import gc

import pulumi
import pytest
from pulumi.output import Unknown
from pulumi.runtime import resource, rpc

from gpuctl import runtime
from stacks import registration
from tests.conftest import render_stack


@pytest.fixture
def stack_registrations(monkeypatch) -> list[str]:
    seen: list[str] = []
    register = runtime.RecordingMonitor.RegisterResource

    def counting(self, request):
        if request.type == "pulumi:pulumi:Stack":
            seen.append(request.name)
        return register(self, request)

    monkeypatch.setattr(runtime.RecordingMonitor, "RegisterResource", counting)
    return seen


def test_each_run_registers_exactly_one_root_stack(stack_registrations) -> None:
    """A second root stack has the same URN; its empty outputs, sent asynchronously, could wipe the real ones."""
    for value in ("first", "second", "third"):
        plan = runtime.run_program("unit", {}, [], lambda value=value: pulumi.export("value", value))

        assert plan["outputs"] == {"value": value}
    assert stack_registrations == ["gpu-platform-unit"] * 3


def test_urns_are_the_engines_whole_parent_type_chain(dev_plan) -> None:
    # `pulumi up --target` takes these URNs: each names every ancestor's type, none for the root stack.
    by_urn = {record["urn"]: record for record in dev_plan.resources}
    [driver] = [r for r in dev_plan.resources if r["type"].endswith(":NVIDIADriver")]
    assert driver["urn"] == ("urn:pulumi:dev::gpu-platform::gpu-platform:index:GpuPlatform$gpu-platform:index:"
                             "DriverStack$kubernetes:nvidia.com/v1alpha1:NVIDIADriver::driver-rhcos4-18")
    for record in dev_plan.resources:
        chain, parent = [record["type"]], by_urn.get(record["parent"])
        while parent is not None:
            chain.insert(0, parent["type"])
            parent = by_urn.get(parent["parent"])
        assert record["urn"] == f"urn:pulumi:dev::gpu-platform::{'$'.join(chain)}::{record['name']}"


def test_a_plan_with_the_mock_runtimes_urns_reads_as_the_same_resources(dev_plan) -> None:
    # A base rendered before gpuctl made the engine's URNs: only the last parent type, and the root stack's.
    def mock_urn(record: dict) -> str:
        parent = record["parent"].split("::")[2].split("$")[-1] if record["parent"] else None
        kind = f"{parent}${record['type']}" if parent else record["type"]
        return f"urn:pulumi:dev::gpu-platform::{kind}::{record['name']}"

    stack_urn = "urn:pulumi:dev::gpu-platform::pulumi:pulumi:Stack::gpu-platform-dev"
    by_urn = {record["urn"]: record for record in dev_plan.resources}
    old_urns = {}

    def old(urn: str | None) -> str | None:
        if urn is None or urn not in by_urn:
            return urn
        record = by_urn[urn]
        old_urns.setdefault(urn, mock_urn({**record, "parent": old(record["parent"])}))
        return old_urns[urn]

    def old_provider(reference: str | None) -> str | None:
        return reference and "::".join([old(reference.rpartition("::")[0]), reference.rpartition("::")[2]])

    old_plan = {**dev_plan.document, "resources": [
        {**r, "urn": old(r["urn"]), "parent": old(r["parent"]), "dependencies": [old(d) for d in r["dependencies"]],
         "provider": old_provider(r["provider"])} for r in dev_plan.resources]}
    assert all(r["parent"] == stack_urn or r["parent"] in old_urns.values() for r in old_plan["resources"])
    # The platform (under the root stack) and every grandchild of it are named differently in the old form.
    assert sum(r["urn"] not in by_urn for r in old_plan["resources"]) > len(by_urn) / 2
    assert runtime.with_engine_urns(old_plan)["resources"] == dev_plan.resources


SDK_CONTAINS_UNKNOWNS = rpc.contains_unknowns if rpc.contains_unknowns is not runtime._acyclic else None


def test_the_locked_sdk_gets_the_acyclic_unknowns_test() -> None:
    # Fails after an SDK upgrade changes its `contains_unknowns`: read the new one, then update the hash.
    assert runtime.acyclic_contains_unknowns()
    assert rpc.contains_unknowns is runtime._acyclic


SDK_GET_STACK_TRACE = resource._get_stack_trace if resource._get_stack_trace is not registration._no_stack_trace else None


@pytest.mark.skipif(SDK_GET_STACK_TRACE is None, reason="the SDK's own function was replaced before this module")
def test_a_plan_is_the_same_without_the_sdks_stack_traces(monkeypatch) -> None:
    """The mock monitor records nothing of where a resource was declared."""
    monkeypatch.setattr(runtime, "no_stack_traces", lambda: False)
    monkeypatch.setattr(resource, "_get_stack_trace", SDK_GET_STACK_TRACE)
    with_traces = render_stack("onprem").document
    monkeypatch.undo()

    assert render_stack("onprem").document == with_traces
    assert resource._get_stack_trace is registration._no_stack_trace


@pytest.mark.skipif(SDK_CONTAINS_UNKNOWNS is None, reason="the SDK's own function was replaced before this module")
def test_the_acyclic_unknowns_test_answers_as_the_sdks() -> None:
    unknown = Unknown()
    looping: list = [1]
    looping.append(looping)
    shared = {"a": 1}

    class Args(dict):  # the SDK's input types are dicts, some with a property named "values"
        values = property(lambda self: None)

    values = [None, 0, "", "x", unknown, [unknown], {"a": unknown}, {"a": [1, {"b": unknown}]},
              {"a": [1, {"b": 2}]}, (unknown,), {unknown}, looping, [looping, unknown], [shared, shared],
              {"k": (1, [unknown])}, pulumi.Output.from_input(1),
              Args(values={"a": unknown}), Args(values=1)]
    for value in values:
        assert runtime._contains_unknowns(value, set()) is SDK_CONTAINS_UNKNOWNS(value), value


def test_a_render_leaves_no_cyclic_garbage_per_output(render) -> None:
    """With the collector off, as in the CLI, every cycle a render makes stays until exit (peak memory)."""
    gc.collect()
    gc.disable()
    try:
        render("prod")
        garbage_functions = 0
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage_functions = sum(type(item).__name__ == "function" for item in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert garbage_functions < 50
