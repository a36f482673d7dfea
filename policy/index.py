"""The stack's resources grouped by Kubernetes kind and namespace, built once per policy run.

Stack policies that look up "the X of namespace N" for every tenant would rescan the whole stack per tenant;
`index(resources)` groups it in one pass and is shared by every policy handed the same resource list.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from pulumi_policy import PolicyResource


def _kind(resource_type: str) -> str:
    return resource_type.rsplit(":", 1)[-1] if resource_type.startswith("kubernetes:") else ""


class ResourceIndex:
    """Resources by kind ('' for other providers); by namespace within a kind, grouped on first use."""

    def __init__(self, resources: Sequence[PolicyResource]) -> None:
        self.resources = resources
        self._kinds: dict[str, list[PolicyResource]] = defaultdict(list)
        for resource in resources:
            self._kinds[_kind(resource.resource_type)].append(resource)
        self._namespaces: dict[str, dict[str | None, list[PolicyResource]]] = {}

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
