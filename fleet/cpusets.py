"""Linux cpuset lists ("0-1,48-49"), as the kubelet's reserved CPUs and a PerformanceProfile's CPUs are written."""

from __future__ import annotations

from collections.abc import Iterable


def parse_cpuset(text: str) -> set[int]:
    """The CPU ids of a cpuset list: "0-1,48-49" -> {0, 1, 48, 49}; ValueError for a range that runs backwards."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        if int(first) > int(last or first):
            raise ValueError(f"range {part} runs backwards; write {last}-{first}")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def format_cpuset(cpus: Iterable[int]) -> str:
    """CPU ids as a cpuset list of ranges: [2, 3, 4, 7] -> "2-4,7"."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in ranges)
