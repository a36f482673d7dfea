"""gpuctl.runtime: the mock runtime records one root stack per run, so stack outputs are always the program's."""

from __future__ import annotations

import pulumi
import pytest

from gpuctl import runtime


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
