"""Which tenants a render registers: gpuctl renders a large stack's preview in several processes, one part each, or
only the tenants a change touches."""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass(frozen=True)
class TenantInputs:
    """Everything a tenant's resources are registered from: each of its components (resource name and args) and
    the platform's resources they wait for. With the program's code, these decide every resource of the tenant's."""

    name: str
    components: tuple[tuple[str, Any], ...]
    after: tuple[pulumi.Resource, ...]

    @property
    def roots(self) -> list[str]:
        """The names of the tenant's components, the platform's children its other resources descend from."""
        return [name for name, _ in self.components]

    @functools.cached_property
    def digest(self) -> str | None:
        """A digest of the inputs, or None when one of them has no value to take a digest of (an Output, an object
        of another kind): such a tenant is always registered."""
        try:
            canonical = _canonical([self.components, self.after])
        except TypeError:
            return None
        return hashlib.sha256(json.dumps(canonical, separators=(",", ":")).encode()).hexdigest()


def _canonical(value: Any) -> Any:
    """`value` as JSON that tells apart every two values a component could register differently from: types, order
    and all. A resource is its type and name (unique in the stack, so its URN and its records' dependencies)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return [type(value).__name__, value]
    if isinstance(value, enum.Enum):
        return [type(value).__qualname__, _canonical(value.value)]
    if isinstance(value, pulumi.Resource):
        return ["resource", value._type, value._name]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__qualname__, [[field.name, _canonical(getattr(value, field.name))]
                                           for field in dataclasses.fields(value)]]
    if isinstance(value, dict):
        return ["dict", [[_canonical(key), _canonical(item)] for key, item in value.items()]]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_canonical(item) for item in value]]
    raise TypeError(f"no digest of a {type(value).__qualname__}")


@dataclass(frozen=True)
class Part:
    """Part `index` of `count` processes that register one platform together: each registers everything that is
    not a tenant's, and the tenants at positions index, index + count, and so on; their plans together are the
    whole platform's."""

    index: int
    count: int

    def registers(self, position: int, tenant: TenantInputs) -> bool:
        return position % self.count == self.index


@dataclass(frozen=True)
class Changed:
    """Everything that is not a tenant's, and the tenants whose inputs differ from those of an earlier render of the
    same code (`digests`: tenant -> the digest of its inputs there): that render's plan holds the others' resources
    as this one would register them."""

    digests: Mapping[str, str]

    def registers(self, position: int, tenant: TenantInputs) -> bool:
        return tenant.digest is None or self.digests.get(tenant.name) != tenant.digest


Selection = Part | Changed  # which tenants a render registers (None: all of them)
