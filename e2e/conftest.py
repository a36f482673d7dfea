"""Fixtures of the end-to-end suite: one real control plane per shipped stack, the stack applied to it.

Every stack gets a fresh cluster (its cluster-scoped objects would collide with another stack's): CRDs installed from
`../shared/reference/crds`, the namespaces the cluster already has, kwok nodes shaped like the stack's pools, then the
stack's manifests applied in dependency order with server-side apply, a server dry run first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.dynamic.exceptions import ApiException

from components.admission_gate import CURL_IMAGE, PROBE_NAMESPACE, tenant_probes
from e2e.cluster import BIN, ControlPlane, missing_tools
from e2e.kube import Kube, api_message, apply_crds, wait_for
from e2e.stack import Stack
from tests.conftest import ROOT

CRDS = ROOT.parent / "shared" / "reference" / "crds"
# The longest file first. `--dist loadfile` hands each worker the next file of its queue, and xdist's own queue puts
# the files with the most tests first: this one, two stacks' whole lives under the engine (20 minutes and more), has
# two tests, so it started last and ran alone for 20 minutes after the other worker had finished. `make e2e` keeps the
# collection order (`--no-loadscope-reorder`), which this hook makes: this file, then the others by their number of
# tests, as xdist would.
LONGEST_FIRST = ("test_engine_lifecycle.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order files are handed out in: the longest first, then the most tests first; tests keep their order."""
    tests = Counter(item.path for item in items)
    items.sort(key=lambda item: (item.path.name not in LONGEST_FIRST, -tests[item.path]))


# Stand-ins for what the cluster has before the stack: the RuntimeClasses the GPU Operator creates, and on OpenShift
# the priority class OpenShift ships for user workloads.
NVIDIA_RUNTIME_CLASSES = [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                           "handler": name} for name in ("nvidia", "nvidia-cdi", "nvidia-legacy")]
OPENSHIFT_PRIORITY_CLASS = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": "openshift-user-critical"}, "value": 1000000000}
# ... and the binding by which OpenShift lets every user request projects (as OpenShift's API server creates it).
OPENSHIFT_SELF_PROVISIONERS = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "self-provisioners", "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "self-provisioner"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated:oauth"}]}
# The project's stacks, and the example of every partitioning a pool can have (examples/Pulumi.partitioned.yaml).
STACKS = [*sorted(path.name.split(".")[1] for path in ROOT.glob("Pulumi.*.yaml")), "partitioned"]


@dataclass
class Applied:
    """A stack applied to its own control plane, with what the API server said about each object."""

    stack: Stack
    plane: ControlPlane
    admin: Kube
    rejected: dict[str, str] = field(default_factory=dict)  # object -> the API server's message
    live: dict[str, dict[str, Any]] = field(default_factory=dict)  # object -> as stored after the apply
    users: dict[tuple[str, str], Kube] = field(default_factory=dict)

    def user(self, name: str, group: str) -> Kube:
        """The client of a user in `group`, as the admin impersonates them."""
        if (name, group) not in self.users:
            self.users[name, group] = Kube(self.plane.kubeconfig, user=name, group=group)
        return self.users[name, group]


def object_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return "/".join(part for part in (obj["kind"], meta.get("namespace"), meta["name"]) if part)


def install_crds(admin: Kube) -> None:
    apply_crds(admin, [doc for path in sorted(CRDS.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
                       if doc])


def apply_stack(applied: Applied, leave_out: frozenset[str] = frozenset(),
                stand_in: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
    """Server dry run of each object but those keyed in `leave_out`, then the real apply, in dependency order;
    refusals are recorded, not raised. `stand_in` swaps an object for its stand-in (or returns it unchanged)."""
    for obj in applied.stack.objects():
        key = object_key(obj)
        if key in leave_out:
            continue
        obj = stand_in(obj) if stand_in else obj
        try:
            applied.admin.apply(obj, dry_run=True)
            applied.live[key] = applied.admin.apply(obj)
        except ApiException as error:
            applied.rejected[key] = api_message(error)
    policies_in_force(applied)


def policies_in_force(applied: Applied) -> None:
    """Wait as `pulumi up` does before it binds any tenant (the admission gate, components/admission_gate.py): until
    each tenant policy that was applied refuses its probe, a dry run in the probe namespace. The API server loads a
    policy asynchronously, later under load: a test's first request could otherwise come before it."""
    bound = {obj["metadata"]["name"] for obj in applied.live.values()
             if obj["kind"] == "ValidatingAdmissionPolicyBinding"}
    if PROBE_NAMESPACE not in {obj["metadata"]["name"] for obj in applied.live.values() if obj["kind"] == "Namespace"}:
        return
    config = applied.stack.config
    for probe in tenant_probes(CURL_IMAGE, queue=config.tenancy.mode == "queue", dra=config.allocation_mode == "dra"):
        if probe.policy not in bound:
            continue
        resource = applied.admin.resource(probe.body["apiVersion"], probe.body["kind"])

        def refused() -> bool:
            try:
                resource.create(body=probe.body, namespace=PROBE_NAMESPACE, dry_run="All")
            except ApiException as error:
                return f"ValidatingAdmissionPolicy '{probe.policy}'" in api_message(error)
            return False
        wait_for(refused, f"{probe.policy} in force", timeout=60)


def prepare_cluster(stack: Stack, plane: ControlPlane, nodes: list[dict[str, Any]] | None = None) -> Kube:
    """The cluster as it is before the stack: CRDs, the namespaces and objects it already has (stand-ins), and kwok
    `nodes` (by default nodes shaped like the stack's pools), all Ready. Returns the admin's client."""
    admin = Kube(plane.kubeconfig)
    install_crds(admin)
    for namespace in stack.missing_namespaces():
        admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for stand_in in NVIDIA_RUNTIME_CLASSES:
        admin.apply(stand_in)
    for stand_in in [OPENSHIFT_PRIORITY_CLASS, OPENSHIFT_SELF_PROVISIONERS] if stack.openshift else []:
        admin.create(stand_in)  # created, not applied: another field manager owns it, as on OpenShift
    nodes = stack.nodes() if nodes is None else nodes
    for node in nodes:
        admin.create(node)
    wait_for(lambda: all(node_ready(admin.get("v1", "Node", n["metadata"]["name"])) for n in nodes),
             "every kwok node Ready", timeout=60)
    return admin


@pytest.fixture(scope="session")
def tools() -> Path:
    missing = missing_tools()
    if missing:
        pytest.fail(f"{', '.join(missing)} not built in {BIN}: run `make e2e` (it builds them first) or "
                    "`e2e/tools/build.sh`", pytrace=False)
    return BIN


@pytest.fixture(scope="session", params=STACKS)
def applied(request, tools, tmp_path_factory) -> Iterator[Applied]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is not beside the project here: the stacks' custom resources need their CRDs")
    stack = Stack.render(request.param)
    with ControlPlane.start(tmp_path_factory.mktemp(f"cluster-{request.param}")) as plane:
        admin = prepare_cluster(stack, plane)
        applied = Applied(stack, plane, admin)
        apply_stack(applied)
        tenants_ready(stack, admin)
        yield applied
        for client in [admin, *applied.users.values()]:
            client.close()


def tenants_ready(stack: Stack, admin: Kube) -> None:
    """Wait for what `pulumi up` waits for before binding a tenant's members (pulumi.com/waitFor on each quota): the
    controller manager has written each quota's status, which is all the quota admission enforces; and for the
    default ServiceAccount of every namespace (pods need it)."""
    for obj in [obj for obj in stack.objects() if obj["kind"] == "ResourceQuota"]:
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        wait_for(lambda: (admin.get("v1", "ResourceQuota", name, namespace) or {}).get("status", {}).get("hard"),
                 f"quota {namespace}/{name} enforced", timeout=60)
    for namespace in [obj["metadata"]["name"] for obj in stack.objects() if obj["kind"] == "Namespace"]:
        wait_for(lambda: admin.get("v1", "ServiceAccount", "default", namespace), f"{namespace}/default", 30)


def node_ready(node: dict[str, Any] | None) -> bool:
    conditions = (node or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
