"""Every policy of the pack, passing and violated, on real renders (mutated config, or a mutated plan)."""

from __future__ import annotations

import ast
import base64
import copy
import select
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from components import labels
from gpuctl.check import Violation, check_plan
from policy.rules import DEFAULT_OVERCOMMIT, DEFAULT_REGISTRIES, POD_SECURITY_ENFORCE, POLICIES
from tests.conftest import ROOT, Plan, render_stack, stack_config

Document = dict[str, Any]
SHIPPED = sorted(path.name.split(".")[1] for path in ROOT.glob("Pulumi.*.yaml"))


# Plan surgery -----------------------------------------------------------------------------------------------


def resource(doc: Document, name: str) -> dict[str, Any]:
    """The one custom resource of a plan with this logical name (a component may share it)."""
    [match] = [r for r in doc["resources"] if r["name"] == name and r["custom"]]
    return match


def inputs(doc: Document, name: str) -> dict[str, Any]:
    return resource(doc, name)["inputs"]


def pod(doc: Document, name: str) -> dict[str, Any]:
    """The pod template spec of a workload."""
    return inputs(doc, name)["spec"]["template"]["spec"]


def remove(doc: Document, name: str) -> None:
    doc["resources"].remove(resource(doc, name))


def add(doc: Document, type_: str, name: str, manifest: dict[str, Any]) -> None:
    """Add a resource the program never makes (a hand-written one, as a reviewer might meet)."""
    doc["resources"].append({"urn": f"urn:pulumi:test::gpu-platform::{type_}::{name}", "type": type_, "name": name,
                             "custom": True, "parent": None, "dependencies": [], "inputs": manifest, "options": {}})


def user_data(script: str) -> str:
    return base64.b64encode(script.encode()).decode()


ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
DRIVER_42 = "driver-rhcos4-16-5-14-0-427-42-1-el9-4-x86-64"
DRIVER_1019 = "driver-ubuntu22-04-6-8-0-1019-aws"
WILDCARD_RULES = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]


def wildcard_role(doc: Document, namespace: str) -> dict[str, Any]:
    add(doc, ROLE, f"{namespace}-anything", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                             "metadata": {"name": "anything", "namespace": namespace},
                                             "rules": WILDCARD_RULES})
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "anything"}


def bind_wildcard_in_gpu_system(doc: Document) -> None:
    ref = wildcard_role(doc, labels.GPU_SYSTEM_NAMESPACE)
    add(doc, ROLE_BINDING, "agents-anything", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "agents-anything", "namespace": labels.GPU_SYSTEM_NAMESPACE}, "roleRef": ref,
        "subjects": [{"kind": "ServiceAccount", "name": "nvidia-driver", "namespace": labels.GPU_SYSTEM_NAMESPACE}]})


def bind_tenant_cluster_wide(doc: Document) -> None:
    add(doc, CLUSTER_ROLE_BINDING, "vision-admin", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "vision-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "vision-team"}]})


def host_path_in_tenant(doc: Document) -> None:
    gc = copy.deepcopy(inputs(doc, "nfd-nfd-gc"))
    gc["metadata"]["namespace"] = "vision"
    gc["spec"]["template"]["spec"]["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
    add(doc, "kubernetes:apps/v1:Deployment", "vision-gc", gc)


def drop_asg_taint_tag(doc: Document) -> None:
    group = inputs(doc, "pool-a10g-batch-asg")
    group["tags"] = [tag for tag in group["tags"] if "/taint/" not in tag["key"]]


def namespace_labels(doc: Document, name: str) -> dict[str, str]:
    return inputs(doc, name)["metadata"]["labels"]


def pod_taints(doc: Document) -> list[dict[str, Any]]:
    return pod(doc, "pool-t4-inference")["taints"]


def cluster_policy(doc: Document, toolkit_env: dict[str, str], plugin_env: dict[str, str]) -> None:
    """A ClusterPolicy with these toolkit and device-plugin environment variables."""
    env = lambda values: [{"name": key, "value": value} for key, value in values.items()]  # noqa: E731
    add(doc, "kubernetes:nvidia.com/v1:ClusterPolicy", "operands", {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "operands"},
        "spec": {"toolkit": {"enabled": True, "env": env(toolkit_env)},
                 "devicePlugin": {"enabled": True, "env": env(plugin_env)}}})


HARDENED = {"ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
            "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true"}


# (id, policy, stack, plan mutation, violated?, the resource the violation names, None for the stack)
Case = tuple[str, str, str, Callable[[Document], None], bool, str | None]
CASES: list[Case] = [
    ("machineset-extra-taint", "gpu-pool-tainted", "dev", lambda d: pod_taints(d).append(
        {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}), False, None),
    ("machineset-untainted", "gpu-pool-tainted", "dev", lambda d: pod_taints(d).clear(), True, "pool-t4-inference"),
    ("kubelet-taint-with-value", "gpu-pool-tainted", "prod", lambda d: inputs(d, "pool-a10g-batch-launch-template")
     .update(userData=user_data("#!/bin/bash\nbootstrap --kubelet-extra-args "
                                "'--register-with-taints=example.com/x=y:NoExecute,nvidia.com/gpu=present:NoSchedule'"
                                "\n")), False, None),
    ("asg-without-taint-tag", "gpu-pool-tainted", "prod", drop_asg_taint_tag, True, "pool-a10g-batch-asg"),
    ("launch-template-without-kubelet-taint", "gpu-pool-tainted", "prod",
     lambda d: inputs(d, "pool-h100-training-launch-template").update(userData=user_data("#!/bin/bash\nbootstrap\n")),
     True, "pool-h100-training-asg"),

    ("scoped-quota-alongside", "tenant-gpu-quota", "dev", lambda d: None, False, None),
    ("no-gpu-quota", "tenant-gpu-quota", "dev", lambda d: remove(d, "tenant-vision-gpu-quota"), True,
     "tenant-vision-namespace"),
    ("only-a-scoped-gpu-quota", "tenant-gpu-quota", "dev", lambda d: remove(d, "tenant-nlp-research-gpu-quota"), True,
     "tenant-nlp-research-namespace"),
    ("fractional-gpu-quota", "tenant-gpu-quota", "dev",
     lambda d: inputs(d, "tenant-vision-gpu-quota")["spec"]["hard"].update({labels.GPU_QUOTA_KEY: "1500m"}), True,
     "tenant-vision-namespace"),

    ("quota-equals-capacity", "gpu-quota-within-capacity", "dev", lambda d: None, False, None),
    ("quota-above-capacity", "gpu-quota-within-capacity", "prod",
     lambda d: inputs(d, "tenant-analytics-gpu-quota")["spec"]["hard"].update({labels.GPU_QUOTA_KEY: "17"}), True,
     None),

    ("toleration-from-runtime-class", "gpu-pods-tolerate-taint", "dev",
     lambda d: pod(d, "device-plugin-validation").pop("tolerations"), False, None),
    ("no-toleration", "gpu-pods-tolerate-taint", "dev",
     lambda d: [pod(d, "device-plugin-validation").pop(key) for key in ("tolerations", "runtimeClassName")], True,
     "device-plugin-validation"),
    ("runtime-class-not-in-stack", "gpu-pods-tolerate-taint", "prod",
     lambda d: [pod(d, "device-plugin-validation").pop("tolerations"), remove(d, "device-plugin-runtime-class")],
     True, "device-plugin-validation"),

    ("driver-digest-and-tag", "driver-pinned-to-kernel", "prod",
     lambda d: pod(d, DRIVER_1019)["containers"][0].update(
         image=f"nvcr.io/nvidia/driver:580-6.8.0-1019-aws-ubuntu22.04@sha256:{'0' * 64}"), False, None),
    ("driver-image-for-another-kernel", "driver-pinned-to-kernel", "prod",
     lambda d: pod(d, DRIVER_1019)["containers"][0].update(
         image="nvcr.io/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04"), True, DRIVER_1019),
    ("driver-not-pinned", "driver-pinned-to-kernel", "dev",
     lambda d: pod(d, DRIVER_42)["nodeSelector"].pop(labels.KERNEL_LABEL), True, DRIVER_42),

    ("hardened-cluster-policy", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, HARDENED, {"DEVICE_LIST_STRATEGY": "volume-mounts"}), False, None),
    ("cdi-cluster-policy", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, HARDENED, {"DEVICE_LIST_STRATEGY": "cdi-annotations,cdi-cri"}), False, None),
    ("toolkit-accepts-visible-devices", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, {**HARDENED, "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "true"},
                              {"DEVICE_LIST_STRATEGY": "volume-mounts"}), True, "operands"),
    ("device-list-by-envvar", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, HARDENED, {"DEVICE_LIST_STRATEGY": "envvar"}), True, "operands"),
    ("cluster-policy-defaults", "gpu-access-only-through-device-plugin", "dev",
     lambda d: cluster_policy(d, {}, {}), True, "operands"),

    ("digest-pinned-image", "no-latest-images", "dev", lambda d: pod(d, "nfd-nfd-gc")["containers"][0].update(
        image=f"registry.k8s.io/nfd/node-feature-discovery@sha256:{'0' * 64}"), False, None),
    ("latest-image", "no-latest-images", "dev", lambda d: pod(d, "nfd-nfd-gc")["containers"][0].update(
        image="registry.k8s.io/nfd/node-feature-discovery:latest"), True, "nfd-nfd-gc"),
    ("untagged-init-image", "no-latest-images", "dev", lambda d: pod(d, "device-plugin-toolkit")["initContainers"][0]
     .update(image="nvcr.io/nvidia/cloud-native/gpu-operator-validator"), True, "device-plugin-toolkit"),

    ("registry-path-prefix", "allowed-image-registries", "dev", lambda d: pod(d, "nfd-nfd-gc")["containers"][0].update(
        image="nvcr.io/mirror/nfd:v0.18.2"), False, None),
    ("docker-hub-image", "allowed-image-registries", "dev", lambda d: pod(d, "nfd-nfd-gc")["containers"][0].update(
        image="busybox:1.36"), True, "nfd-nfd-gc"),

    ("host-access-in-gpu-system", "host-access-only-in-gpu-system", "dev", lambda d: None, False, None),
    ("privileged-driver-in-tenant", "host-access-only-in-gpu-system", "prod",
     lambda d: inputs(d, DRIVER_1019)["metadata"].update(namespace="search-ranking"), True, DRIVER_1019),
    ("host-path-in-tenant", "host-access-only-in-gpu-system", "dev", host_path_in_tenant, True, "vision-gc"),

    ("restricted-tenant", "tenant-pod-security", "dev", lambda d: namespace_labels(d, "tenant-vision-namespace")
     .update({POD_SECURITY_ENFORCE: "restricted"}), False, None),
    ("privileged-tenant", "tenant-pod-security", "dev", lambda d: namespace_labels(d, "tenant-vision-namespace")
     .update({POD_SECURITY_ENFORCE: "privileged"}), True, "tenant-vision-namespace"),
    ("tenant-without-pod-security", "tenant-pod-security", "prod",
     lambda d: namespace_labels(d, "tenant-analytics-namespace").pop(POD_SECURITY_ENFORCE), True,
     "tenant-analytics-namespace"),

    ("wildcard-role-for-agents", "tenant-rbac-least-privilege", "dev", bind_wildcard_in_gpu_system, False, None),
    ("tenant-cluster-admin", "tenant-rbac-least-privilege", "dev", lambda d: inputs(d, "tenant-vision-edit")[
        "roleRef"].update(name="cluster-admin"), True, "tenant-vision-edit"),
    ("tenant-wildcard-role", "tenant-rbac-least-privilege", "dev",
     lambda d: inputs(d, "tenant-vision-edit").update(roleRef=wildcard_role(d, "vision")), True, "tenant-vision-edit"),
    ("tenant-group-cluster-admin", "tenant-rbac-least-privilege", "dev", bind_tenant_cluster_wide, True,
     "vision-admin"),

    ("system-priority-blocked", "tenant-no-system-priority", "prod", lambda d: None, False, None),
    ("system-priority-open", "tenant-no-system-priority", "prod",
     lambda d: remove(d, "tenant-llm-training-system-priority"), True, "tenant-llm-training-namespace"),
    ("one-system-class-open", "tenant-no-system-priority", "dev", lambda d: inputs(d, "tenant-vision-system-priority")[
        "spec"]["scopeSelector"]["matchExpressions"][0].update(values=[labels.NODE_CRITICAL_PRIORITY]), True,
     "tenant-vision-namespace"),
]


def of(violations: list[Violation], policy: str) -> list[Violation]:
    return [v for v in violations if v.policy == policy]


@pytest.fixture
def fresh(dev_plan: Plan, prod_plan: Plan) -> Callable[[str], Document]:
    """A mutable copy of a shipped stack's plan."""
    plans = {"dev": dev_plan, "prod": prod_plan}
    return lambda stack: copy.deepcopy(plans[stack].document)


@pytest.fixture(scope="module")
def shipped_plans(dev_plan: Plan, prod_plan: Plan) -> dict[str, Plan]:
    rendered = {"dev": dev_plan, "prod": prod_plan}
    return {stack: rendered.get(stack) or render_stack(stack) for stack in SHIPPED}


@pytest.fixture(scope="module")
def misconfigured() -> Plan:
    """dev with one GPU more promised than the pools hold, a :latest toolkit and a device plugin from ghcr.io."""
    config = stack_config("dev")
    config["gpu-platform:tenants"][0]["gpus"] += 1
    config["gpu-platform:images"] = {"toolkit": "nvcr.io/nvidia/k8s/container-toolkit:latest",
                                     "devicePlugin": "ghcr.io/nvidia/k8s-device-plugin:v0.18.0"}
    return render_stack("dev", config)


@pytest.mark.parametrize("stack", SHIPPED)
def test_shipped_stack_passes_every_policy(shipped_plans: dict[str, Plan], stack: str) -> None:
    assert check_plan(shipped_plans[stack].document) == []


@pytest.mark.parametrize(("policy", "stack", "mutate", "violated", "where"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_policy(fresh: Callable[[str], Document], policy: str, stack: str, mutate: Callable[[Document], None],
                violated: bool, where: str | None) -> None:
    doc = fresh(stack)
    mutate(doc)
    found = of(check_plan(doc), policy)
    if not violated:
        assert found == []
        return
    assert [v.name for v in found] == [where]
    assert found[0].urn == (resource(doc, where)["urn"] if where else None)


def test_every_policy_has_a_passing_and_a_violating_case() -> None:
    covered = {(case[1], case[4]) for case in CASES}
    assert {(policy.name, outcome) for policy in POLICIES for outcome in (False, True)} <= covered


def test_quota_message_gives_quota_capacity_and_tenants(misconfigured: Plan) -> None:
    [violation] = of(check_plan(misconfigured.document), "gpu-quota-within-capacity")
    assert violation.level == "mandatory" and violation.urn is None
    for fact in ("add up to 11 GPUs", "vision 7", "nlp-research 4", "hold 10", "at most 10 may be promised"):
        assert fact in violation.message


def test_overcommit_knob_admits_the_extra_gpu(misconfigured: Plan) -> None:
    config = {"gpu-quota-within-capacity": {"maxOvercommit": 1.1}}
    assert of(check_plan(misconfigured.document, config), "gpu-quota-within-capacity") == []


def test_latest_image_from_config_is_named(misconfigured: Plan) -> None:
    [violation] = of(check_plan(misconfigured.document), "no-latest-images")
    assert violation.name == "device-plugin-toolkit"
    assert "container-toolkit:latest" in violation.message and "pin a version tag" in violation.message


def test_registry_from_config_is_refused_unless_allowed(misconfigured: Plan) -> None:
    refused = of(check_plan(misconfigured.document), "allowed-image-registries")
    assert "device-plugin-device-plugin" in {v.name for v in refused}
    assert all("ghcr.io" in v.message for v in refused)
    config = {"allowed-image-registries": {"allowedRegistries": [*DEFAULT_REGISTRIES, "ghcr.io"]}}
    assert of(check_plan(misconfigured.document, config), "allowed-image-registries") == []


def test_knobs_default_as_documented() -> None:
    schemas = {policy.name: policy.config_schema.properties for policy in POLICIES if policy.config_schema}
    assert schemas["gpu-quota-within-capacity"]["maxOvercommit"]["default"] == DEFAULT_OVERCOMMIT == 1.0
    assert schemas["allowed-image-registries"]["allowedRegistries"]["default"] == ["nvcr.io", "registry.k8s.io"]


def test_importing_the_rules_starts_no_server() -> None:
    result = subprocess.run([sys.executable, "-c", "import policy.rules"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout) == (0, "")


def test_pack_entry_point_is_imported_by_nothing() -> None:
    for path in ROOT.rglob("*.py"):
        if ".venv" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                       [f"{node.module}.{alias.name}" for alias in node.names] if isinstance(node, ast.ImportFrom)
                       else [])
            assert not any(m.startswith("policy.__main__") for m in modules), f"{path} imports policy/__main__.py"


def test_pack_serves_when_run_as_the_cli_runs_it() -> None:
    """The CLI's Python policy host runs the directory as a script; the pack then prints its port and serves."""
    pack = subprocess.Popen([sys.executable, "-m", "pulumi.policy", "127.0.0.1:0", "policy"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([pack.stdout], [], [], 60)
        port = pack.stdout.readline().strip() if ready else ""
    finally:
        pack.kill()
        pack.communicate()
    assert port.isdigit(), "the pack did not start serving"


def test_pack_layout_and_pins() -> None:
    project = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert project["runtime"]["name"] == "python" and project["description"]
    assert (ROOT / "policy" / project["runtime"]["options"]["virtualenv"]).resolve() == ROOT / ".venv"
    lock = {line.split("==")[0]: line for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line}
    pins = (ROOT / "policy" / "requirements.txt").read_text().split()
    assert pins == [lock["pulumi"], lock["pulumi-policy"]]
