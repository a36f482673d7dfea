"""A part of the tenants: gpuctl renders a large stack's preview in several processes, one part each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

Tenant = TypeVar("Tenant")


@dataclass(frozen=True)
class Part:
    """Part `index` of `count` processes that register one platform together: each registers everything that is
    not a tenant's, and the tenants at positions index, index + count, and so on; their plans together are the
    whole platform's."""

    index: int
    count: int

    def tenants(self, tenants: Sequence[Tenant]) -> Sequence[Tenant]:
        return tenants[self.index::self.count]
