"""The stack's resources grouped by Kubernetes kind and namespace, built once per policy run.

Stack policies that look up "the X of namespace N" for every tenant would rescan the whole stack per tenant;
`index(resources)` groups it in one pass and is shared by every policy handed the same resource list.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pulumi_policy import PolicyResource


def _kind(resource_type: str) -> str:
    return resource_type.rsplit(":", 1)[-1] if resource_type.startswith("kubernetes:") else ""


T = TypeVar("T")


class ResourceIndex:
    """Resources by type and by kind ('' for other providers); by namespace within a kind, grouped on first use;
    the resources of the types a predicate accepts, in stack order, selected once per predicate."""

    def __init__(self, resources: Sequence[PolicyResource]) -> None:
        self.resources = resources
        self._types: dict[str, list[PolicyResource]] = defaultdict(list)
        for resource in resources:
            self._types[resource.resource_type].append(resource)
        self._kinds: dict[str, list[PolicyResource]] = defaultdict(list)
        for resource in resources:
            self._kinds[_kind(resource.resource_type)].append(resource)
        self._namespaces: dict[str, dict[str | None, list[PolicyResource]]] = {}
        self._selected: dict[Callable[[str], bool], list[PolicyResource]] = {}
        self._derived: dict[str, Any] = {}

    def of_type(self, resource_type: str) -> list[PolicyResource]:
        return self._types.get(resource_type, [])

    def selected(self, applies: Callable[[str], bool]) -> list[PolicyResource]:
        """The resources whose type `applies` accepts, in stack order (the predicate sees each type once)."""
        if applies not in self._selected:
            types = [resource_type for resource_type in self._types if applies(resource_type)]
            if len(types) <= 1:
                self._selected[applies] = self.of_type(types[0]) if types else []
            else:
                wanted = set(types)
                self._selected[applies] = [r for r in self.resources if r.resource_type in wanted]
        return self._selected[applies]

    def derived(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()`, once per index: a value several policies derive from the same resources."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def of_kind(self, kind: str) -> list[PolicyResource]:
        return self._kinds.get(kind, [])

    def in_namespace(self, kind: str, namespace: str) -> list[PolicyResource]:
        if kind not in self._namespaces:
            grouped = self._namespaces[kind] = defaultdict(list)
            for resource in self.of_kind(kind):
                metadata = resource.props.get("metadata")
                grouped[metadata.get("namespace") if isinstance(metadata, Mapping) else None].append(resource)
        return self._namespaces[kind].get(namespace, [])


_last: ResourceIndex | None = None


def index(resources: Sequence[PolicyResource]) -> ResourceIndex:
    """The index of this resource list; the policies of one run share it (the run hands them the same list)."""
    global _last
    if _last is None or _last.resources is not resources:
        _last = ResourceIndex(resources)
    return _last
