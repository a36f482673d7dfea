"""The tenants section: each tenant's grants, sharing, access and networks before and after."""

from __future__ import annotations

from typing import Any

from components.labels import GPU_RESOURCE
from gpuctl.summary.model import COMPUTE_QUOTA, MEMBERS, NETWORK, RESOURCE_QUOTA, ROLE_BINDING, TenantChange
from gpuctl.summary.plans import _outputs


def _sharing(tenant: dict[str, Any] | None) -> tuple[str | None, int | None, int | None]:
    """(tenancy, guaranteed, borrowable) of a tenant's outputs; a plan from before tenancy modes had hard quotas."""
    if not tenant:
        return None, None, None
    if tenant.get("tenancy", "quota") == "quota":
        return "quota", tenant.get("gpus"), 0
    return "queue", _whole(tenant.get("guaranteed")), _whole(tenant.get("borrowable"))


def _whole(value: Any) -> int:
    """Whole GPUs of a guarantee or a borrowable amount: per pool and kind, per kind, or (plans from before the kinds)
    per pool or one number."""
    if isinstance(value, dict):
        return sum(_whole(item) if isinstance(item, dict) else item for key, item in value.items()
                   if isinstance(item, dict) or not key.startswith("nvidia.com/") or key == GPU_RESOURCE)
    return value or 0


def _tenant_access(plan: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Namespace -> its tenant's group (the RoleBinding's Group subjects) and compute quota's memory and pods."""
    found: dict[str, dict[str, str]] = {}
    for resource in plan["resources"]:
        metadata = resource["inputs"].get("metadata") or {}
        entry = found.setdefault(metadata.get("namespace") or "", {})
        if resource["type"] == ROLE_BINDING and resource["name"].endswith(MEMBERS):
            entry["group"] = ", ".join(sorted(subject.get("name", "") for subject in resource["inputs"].get(
                "subjects") or [] if subject.get("kind") == "Group"))
        elif resource["type"] == RESOURCE_QUOTA and metadata.get("name") == COMPUTE_QUOTA:
            hard = (resource["inputs"].get("spec") or {}).get("hard") or {}
            entry.update(memory=hard.get("requests.memory"), pods=hard.get("pods"))
    return found


def _tenants(old: dict[str, Any], new: dict[str, Any]) -> list[TenantChange]:
    before, after = _outputs(old).get("tenants") or {}, _outputs(new).get("tenants") or {}
    access = _tenant_access(old), _tenant_access(new)
    return [TenantChange(name, name, before.get(name, {}).get("gpus"), after.get(name, {}).get("gpus"),
                         before.get(name, {}).get("priorityClass"), after.get(name, {}).get("priorityClass"),
                         *(value for pair in zip(_sharing(before.get(name)), _sharing(after.get(name)))
                           for value in pair), retired=bool(after.get(name, {}).get("retired")),
                         slices_before=_slices(before.get(name)), slices_after=_slices(after.get(name)),
                         **{f"{field}_{which}": access[index].get(name, {}).get(field)
                            for field in ("group", "memory", "pods")
                            for index, which in enumerate(("before", "after"))})
            for name in sorted(set(before) | set(after))]


def _slices(tenant: dict[str, Any] | None) -> dict[str, int]:
    """A tenant's grants of the kinds other than whole GPUs; none in plans from before the kinds."""
    return {kind: amount for kind, amount in ((tenant or {}).get("grants") or {}).items()
            if kind != GPU_RESOURCE and amount}


def _networks(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each tenant network's NetworkAttachmentDefinition, by URN."""
    return {resource["urn"]: resource for resource in plan["resources"] if resource["type"] == NETWORK}
