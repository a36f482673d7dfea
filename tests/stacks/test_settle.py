"""The program under the Pulumi CLI waits for its outputs all at once, before the SDK's own final wait."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.fleet import fleet_config
from gpuctl import runtime
from stacks import program


def final_wait_visits(monkeypatch, tenants: int) -> tuple[int, int]:
    """Run the CLI's entry point (`stacks.program.run`) under the mock runtime without gpuctl's own wait, and
    count the outputs every `asyncio.wait` was handed; with the resources registered."""
    config = fleet_config(tenants=tenants, pools=2, kernels=2)
    config["gpu-platform:cluster"]["discovery"] = {"enabled": False}
    config["gpu-platform:preflight"] = False  # no registry here
    waited, real_wait = [], asyncio.wait

    async def counting_wait(tasks, *args, **kwargs):
        waited.append(len(tasks))
        return await real_wait(tasks, *args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", counting_wait)
    monkeypatch.setattr(runtime, "_settled", lambda run: run)  # only what the program itself waits for
    plan = runtime.run_program("fleet", config, [], program.run)
    return sum(waited), len(plan["resources"])


@pytest.mark.parametrize("tenants", [40, 120])
def test_the_final_wait_visits_each_output_a_bounded_number_of_times(tenants: int, monkeypatch) -> None:
    visits, resources = final_wait_visits(monkeypatch, tenants)

    assert resources > 8 * tenants
    assert visits <= 10 * resources


def test_without_it_the_sdks_own_wait_visits_each_output_over_and_over(monkeypatch) -> None:
    async def nothing() -> None:
        return None

    monkeypatch.setattr(program, "settled", nothing)
    visits, resources = final_wait_visits(monkeypatch, 120)

    assert visits > 50 * resources
