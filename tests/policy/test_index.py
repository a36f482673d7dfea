"""The policy run stays linear in the stack's size: resources are grouped once, not rescanned per tenant."""

from __future__ import annotations

import pytest
from pulumi_policy import ResourceValidationArgs

from components import labels
from gpuctl import check


BUILD = check.policy_resources


class CountingList(list):
    """A resource list that counts how many resources every pass over it visits."""

    visited = 0

    def __iter__(self):
        CountingList.visited += len(self)
        return super().__iter__()


def tenant_records(tenants: int) -> list[dict]:
    records = []
    for index in range(tenants):
        name = f"team-{index}"
        records.append({"type": "kubernetes:core/v1:Namespace", "name": name, "inputs": {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {labels.TENANT_LABEL: name}}}})
        records.append({"type": "kubernetes:core/v1:ResourceQuota", "name": f"{name}-quota", "inputs": {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": name},
            "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}})
    for record in records:
        record.update(urn=f"urn:pulumi:bench::gpu-platform::{record['type']}::{record['name']}", custom=True,
                      parent=None, dependencies=[], options={})
    return records


def visits_per_resource(tenants: int, monkeypatch: pytest.MonkeyPatch) -> tuple[float, list]:
    monkeypatch.setattr(check, "policy_resources", lambda plan: CountingList(BUILD(plan)))
    CountingList.visited = 0
    violations = check.check_plan({"resources": tenant_records(tenants)})
    return CountingList.visited / (2 * tenants), violations


def test_every_policy_visits_each_resource_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    small, _ = visits_per_resource(20, monkeypatch)
    large, large_violations = visits_per_resource(2000, monkeypatch)
    # before the index: 77 at 20 tenants, 6019 at 2000; before the selection by type: 20 (about a pass per policy);
    # now the index's two groupings and the names of the report
    assert large == small <= 3
    # the tenants' GPUs exceed the (absent) pools' capacity: the quota policy still sees every quota
    assert any("2000" in violation.message for violation in large_violations)


def test_resource_policies_get_arguments_only_for_the_types_they_read(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    monkeypatch.setattr(check, "ResourceValidationArgs",
                        lambda *args: built.append(args[0]) or ResourceValidationArgs(*args))
    check.check_plan({"resources": tenant_records(500)})
    # only tenant-pod-security reads Namespaces and no resource policy reads ResourceQuotas: one each, not 9 x 1000
    assert built == ["kubernetes:core/v1:Namespace"] * 500


def test_nested_inputs_are_proxied_only_where_a_policy_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    proxied = []
    proxy = check._proxied
    monkeypatch.setattr(check, "_proxied", lambda value, path: proxied.append(path) or proxy(value, path))
    records = tenant_records(100)
    for record in records:  # a payload no policy reads
        record["inputs"]["data"] = {f"key-{index}": [{"value": index}] for index in range(50)}
    check.check_plan({"resources": records})
    assert not [path for path in proxied if path[0] == "data"]
