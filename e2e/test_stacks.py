"""Every shipped stack, applied to a real API server: accepted as rendered, and stable when applied again."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.conftest import Applied, object_key
from e2e.kube import refusal, wait_for
from e2e.stack import dependency_order
from stacks.byo_nodes import ByoNodesError, check_byo_nodes, read_byo_nodes
from stacks.config import DiscoveryConfig

# What the API server and controllers own on an object; a re-apply that changes only these changed nothing of ours.
SERVER_OWNED = ("status",)
SERVER_OWNED_METADATA = ("resourceVersion", "managedFields", "generation", "uid", "creationTimestamp")


def test_the_api_server_accepts_every_object(applied: Applied) -> None:
    """Server dry run then apply, every object in plan order, with strict field validation: 0 rejections."""
    assert applied.live, "nothing was applied"
    assert not applied.rejected, "\n".join(f"{key}: {text}" for key, text in applied.rejected.items())


def test_every_object_in_a_namespace_depends_on_it(applied: Applied) -> None:
    """The engine creates a resource only after those it depends on: every object the stack puts in a namespace
    it creates depends on that Namespace (directly or through another dependency), or `pulumi up` could create it
    first and be refused."""
    plan = applied.stack.plan
    namespaces = {r["inputs"]["metadata"]["name"]: r["urn"] for r in plan.of_type("kubernetes:core/v1:Namespace")}
    closure: dict[str, set[str]] = {}
    for resource in dependency_order(plan.resources):
        closure[resource["urn"]] = set(resource["dependencies"]).union(
            *(closure.get(urn, set()) for urn in resource["dependencies"]))
    missing = [r["urn"] for r in plan.resources if r["type"].startswith("kubernetes:")
               and r["inputs"].get("metadata", {}).get("namespace") in namespaces
               and namespaces[r["inputs"]["metadata"]["namespace"]] not in closure[r["urn"]]]
    assert missing == []


def _ours(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_OWNED_METADATA}
    return {**{k: v for k, v in obj.items() if k not in SERVER_OWNED}, "metadata": meta}


def test_applying_again_changes_nothing(applied: Applied) -> None:
    """A second apply of the same manifests writes nothing: no field the API server defaults differs from what
    the stack renders (which would show as drift on every `pulumi up`)."""
    changed = {}
    for obj in applied.stack.objects():
        key = object_key(obj)
        before = applied.admin.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                                   obj["metadata"].get("namespace"))
        after = applied.admin.apply(obj)
        if before["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"] \
                and _ours(before) != _ours(after):  # a controller writing status meanwhile is not drift
            changed[key] = {"before": _ours(before), "after": _ours(after)}
    assert changed == {}


def test_custom_resources_keep_every_field_the_stack_sets(applied: Applied) -> None:
    """What the API server stored holds every field of the rendered spec (no pruning, no defaulting over it)."""
    lost = {}
    for obj in applied.stack.objects():
        stored = applied.live[object_key(obj)]
        for section in ("spec", "data", "rules", "roleRef", "subjects", "value"):
            if section in obj and not _contains(stored.get(section), obj[section]):
                lost[object_key(obj)] = section
    assert lost == {}


def _contains(stored: Any, rendered: Any) -> bool:
    # The API server omits empty lists, maps and strings (omitempty): an env var's empty value, for one.
    if rendered in ([], {}, "") and stored is None:
        return True
    if isinstance(rendered, dict):
        return isinstance(stored, dict) and all(_contains(stored.get(k), v) for k, v in rendered.items())
    if isinstance(rendered, list):
        return isinstance(stored, list) and len(stored) == len(rendered) and all(
            _contains(s, r) for s, r in zip(stored, rendered))
    return stored == rendered


def test_admission_policies_type_check_against_the_api_servers_schemas(applied: Applied) -> None:
    """The API server type-checks each ValidatingAdmissionPolicy's CEL against the kinds it matches; a warning means
    an expression that can fail or never hold at run time."""
    for obj in applied.stack.objects():
        if obj["kind"] != "ValidatingAdmissionPolicy":
            continue

        def checked() -> dict | None:
            policy = applied.admin.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
            status = policy.get("status") or {}
            return status if status.get("observedGeneration") == policy["metadata"]["generation"] else None

        status = wait_for(checked, f"{obj['metadata']['name']} type-checked", timeout=30)
        assert (status.get("typeChecking") or {}).get("expressionWarnings", []) == [], obj["metadata"]["name"]


def test_bring_your_own_nodes_are_checked_on_the_real_api_server(applied: Applied) -> None:
    pools = [pool for pool in applied.stack.config.node_pools if pool.bring_your_own is not None]
    if not pools:
        pytest.skip(f"{applied.stack.name} has no bring-your-own pool")
    discovery = DiscoveryConfig(kubeconfig=str(applied.plane.kubeconfig))
    # The stand-in nodes are set up as the owner is told to: tainted, labelled, as many as declared.
    assert check_byo_nodes(pools, read_byo_nodes(discovery, pools)) == []
    name = f"{pools[0].name}-0"
    nodes = applied.admin.resource("v1", "Node")
    taints = applied.admin.get("v1", "Node", name)["spec"]["taints"]
    merge = "application/merge-patch+json"
    nodes.patch(name=name, body={"spec": {"taints": None}}, content_type=merge)
    try:
        with pytest.raises(ByoNodesError, match=f"pool '{pools[0].name}' nodes {name} lack the GPU taint"):
            check_byo_nodes(pools, read_byo_nodes(discovery, pools))
    finally:
        nodes.patch(name=name, body={"spec": {"taints": taints}}, content_type=merge)


def test_the_api_server_refuses_changing_a_drivers_immutable_fields_in_place(applied: Applied) -> None:
    # Why the program replaces an NVIDIADriver whose usePrecompiled changes (components/driver.py IMMUTABLE).
    [driver] = [obj for obj in applied.stack.objects() if obj["kind"] == "NVIDIADriver"][:1]
    toggled = {**driver, "spec": {**driver["spec"], "usePrecompiled": not driver["spec"]["usePrecompiled"]}}
    assert "usePrecompiled is an immutable field" in refusal(lambda: applied.admin.apply(toggled, dry_run=True))
