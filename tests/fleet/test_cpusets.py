"""cpuset lists, as reserved and isolated CPUs are written in kubelet flags and PerformanceProfiles."""

from __future__ import annotations

import pytest

from fleet.cpusets import format_cpuset, parse_cpuset


@pytest.mark.parametrize(("text", "cpus"), [
    ("0", {0}), ("0-1,48-49", {0, 1, 48, 49}), ("2-4,7", {2, 3, 4, 7}), ("5,3", {3, 5})])
def test_a_cpuset_list_parses_to_its_cpus_and_back_to_ranges(text: str, cpus: set[int]) -> None:
    assert parse_cpuset(text) == cpus
    assert format_cpuset(cpus) == ",".join(sorted(text.split(","), key=lambda part: int(part.split("-")[0])))


def test_isolated_cpus_are_every_cpu_but_the_reserved_as_ranges() -> None:
    reserved = parse_cpuset("0-1,48-49")
    assert format_cpuset(cpu for cpu in range(96) if cpu not in reserved) == "2-47,50-95"


@pytest.mark.parametrize(("text", "backwards"), [("5-1", "range 5-1 runs backwards; write 1-5"),
                                                 ("0-1,48-49,10-2", "range 10-2 runs backwards; write 2-10")])
def test_a_range_that_runs_backwards_is_refused(text: str, backwards: str) -> None:
    with pytest.raises(ValueError, match=f"^{backwards}$"):
        parse_cpuset(text)
