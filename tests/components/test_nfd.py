"""NfdStack: Node Feature Discovery labels GPU nodes with their PCI vendor, kernel and OS release."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import Plan

NAMESPACE = "node-feature-discovery"
NFD_GROUP = "nfd.k8s-sigs.io"


def pod(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    return plan.manifest(kind, name, NAMESPACE)["spec"]["template"]["spec"]


def worker_config(plan: Plan) -> dict[str, Any]:
    return yaml.safe_load(plan.manifest("ConfigMap", "nfd-worker-conf", NAMESPACE)["data"]["nfd-worker.conf"])


def rbac_rules(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """Rules of NFD's ClusterRoles and Roles, by account name (cluster and namespaced rules together)."""
    rules: dict[str, list[dict[str, Any]]] = {}
    for name in ("nfd-master", "nfd-worker", "nfd-gc"):
        for kind, namespace in (("ClusterRole", None), ("Role", NAMESPACE)):
            found = [r["inputs"] for r in plan.of_type(f"kubernetes:rbac.authorization.k8s.io/v1:{kind}")
                     if r["inputs"]["metadata"]["name"] == name
                     and r["inputs"]["metadata"].get("namespace") == namespace]
            for role in found:
                rules.setdefault(name, []).extend(role["rules"])
    return rules


def verbs(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {verb for rule in rules if group in rule["apiGroups"] and resource in rule["resources"]
            for verb in rule["verbs"]}


def test_namespace_allows_privileged_pods(dev_plan: Plan) -> None:
    namespace = dev_plan.manifest("Namespace", NAMESPACE)

    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize(("kind", "name"), [("Deployment", "nfd-master"), ("DaemonSet", "nfd-worker"),
                                            ("Deployment", "nfd-gc")])
def test_nfd_components_run_the_nfd_image(prod_plan: Plan, kind: str, name: str) -> None:
    spec = pod(prod_plan, kind, name)

    assert spec["serviceAccountName"] == name
    [container] = spec["containers"]
    assert container["image"] == "registry.k8s.io/nfd/node-feature-discovery:v0.18.2"
    assert container["command"] == [name]


def test_master_elects_a_leader(prod_plan: Plan) -> None:
    [container] = pod(prod_plan, "Deployment", "nfd-master")["containers"]

    assert "-enable-leader-election" in container["args"]


def test_worker_runs_on_tainted_gpu_nodes_too(dev_plan: Plan) -> None:
    spec = pod(dev_plan, "DaemonSet", "nfd-worker")

    assert any(t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" and t.get("effect") in (None, "NoSchedule")
               for t in spec["tolerations"])
    assert "nodeSelector" not in spec or not spec["nodeSelector"]  # every node, not only labelled ones
    assert spec["priorityClassName"] == "system-node-critical"


def test_worker_labels_pci_devices_by_vendor(dev_plan: Plan) -> None:
    """Vendor-only PCI labels give `feature.node.kubernetes.io/pci-10de.present` on NVIDIA GPU nodes."""
    config = worker_config(dev_plan)

    assert {"pci", "kernel", "system"} <= set(config["core"]["labelSources"])
    pci = config["sources"]["pci"]
    assert pci["deviceLabelFields"] == ["vendor"]
    # NVIDIA data-center GPUs are 3D controllers (class 0302); 03 covers every display class.
    assert any("0302".startswith(cls) for cls in pci["deviceClassWhitelist"])


def test_worker_reads_its_config_from_the_config_map(dev_plan: Plan) -> None:
    spec = pod(dev_plan, "DaemonSet", "nfd-worker")
    [container] = spec["containers"]
    [config_arg] = [a for a in container["args"] if a.startswith("-config=")]
    config_path = config_arg.removeprefix("-config=")
    volume = next(v for v in spec["volumes"] if v.get("configMap", {}).get("name") == "nfd-worker-conf")
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])

    assert config_path == f"{mount['mountPath']}/nfd-worker.conf"


@pytest.mark.parametrize(("host_path", "mount_path"), [
    ("/sys", "/host-sys"),                         # PCI devices: pci-10de.present
    ("/boot", "/host-boot"),                       # kernel config
    ("/etc/os-release", "/host-etc/os-release"),   # system-os_release.ID / VERSION_ID
    ("/usr/lib", "/host-usr/lib"),
    ("/lib", "/host-lib"),
])
def test_worker_sees_the_host_where_nfd_looks(dev_plan: Plan, host_path: str, mount_path: str) -> None:
    """NFD's released images read the host under the `/host-` prefix (e.g. /host-sys, /host-etc/os-release)."""
    spec = pod(dev_plan, "DaemonSet", "nfd-worker")
    [container] = spec["containers"]
    volume = next(v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == host_path)
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])

    assert mount["mountPath"] == mount_path
    assert mount.get("readOnly") is True


def test_worker_cannot_escalate(dev_plan: Plan) -> None:
    [container] = pod(dev_plan, "DaemonSet", "nfd-worker")["containers"]

    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"].get("privileged") is not True


def test_rbac_has_no_wildcards(prod_plan: Plan) -> None:
    for name, rules in rbac_rules(prod_plan).items():
        for rule in rules:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{name}: {rule}"


def test_rbac_grants_only_what_nfd_needs(prod_plan: Plan) -> None:
    rules = rbac_rules(prod_plan)

    # nfd-master writes node labels; it never creates or deletes nodes.
    assert verbs(rules["nfd-master"], "", "nodes") <= {"get", "list", "watch", "patch", "update"}
    assert {"patch", "update"} & verbs(rules["nfd-master"], "", "nodes")
    assert verbs(rules["nfd-master"], NFD_GROUP, "nodefeaturerules") <= {"get", "list", "watch"}
    assert verbs(rules["nfd-master"], NFD_GROUP, "nodefeatures") <= {"get", "list", "watch"}
    # nfd-worker publishes its own NodeFeature object and never touches nodes.
    assert verbs(rules["nfd-worker"], NFD_GROUP, "nodefeatures") <= {"create", "get", "update"}
    assert "create" in verbs(rules["nfd-worker"], NFD_GROUP, "nodefeatures")
    assert verbs(rules["nfd-worker"], "", "nodes") == set()
    # nfd-gc deletes NodeFeature objects of nodes that are gone, and only reads nodes.
    assert "delete" in verbs(rules["nfd-gc"], NFD_GROUP, "nodefeatures")
    assert verbs(rules["nfd-gc"], "", "nodes") <= {"get", "list", "watch"}
    every_verb = {verb for account in rules.values() for rule in account for verb in rule["verbs"]}
    assert not every_verb & {"escalate", "bind", "impersonate", "deletecollection"}


def test_worker_rbac_is_namespaced(prod_plan: Plan) -> None:
    cluster_roles = {r["inputs"]["metadata"]["name"] for r in
                     prod_plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")}

    assert "nfd-worker" not in cluster_roles


@pytest.mark.parametrize(("kind", "name"), [("ClusterRoleBinding", "nfd-master"), ("ClusterRoleBinding", "nfd-gc"),
                                            ("RoleBinding", "nfd-worker")])
def test_bindings_name_their_service_account(prod_plan: Plan, kind: str, name: str) -> None:
    binding = prod_plan.manifest(kind, name)

    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == name


def test_nvidia_gpu_rule_matches_vendor_10de(prod_plan: Plan) -> None:
    rule = prod_plan.manifest("NodeFeatureRule", "nvidia-gpu")

    assert rule["apiVersion"] == f"{NFD_GROUP}/v1alpha1"
    [entry] = rule["spec"]["rules"]
    [match] = [m for m in entry["matchFeatures"] if m["feature"] == "pci.device"]
    assert match["matchExpressions"]["vendor"] == {"op": "In", "value": ["10de"]}
    assert entry["labels"]


@pytest.mark.parametrize(("plural", "scope"), [("nodefeatures", "Namespaced"), ("nodefeaturerules", "Cluster"),
                                               ("nodefeaturegroups", "Namespaced")])
def test_nfd_crds_are_installed(prod_plan: Plan, plural: str, scope: str) -> None:
    crd = prod_plan.manifest("CustomResourceDefinition", f"{plural}.{NFD_GROUP}")

    assert crd["spec"]["group"] == NFD_GROUP
    assert crd["spec"]["names"]["plural"] == plural
    assert crd["spec"]["scope"] == scope


def test_rule_waits_for_its_crd(prod_plan: Plan) -> None:
    rule = prod_plan.object("NodeFeatureRule", "nvidia-gpu")
    crd = prod_plan.object("CustomResourceDefinition", f"nodefeaturerules.{NFD_GROUP}")

    assert crd["urn"] in rule["dependencies"]


def test_worker_may_run_privileged_on_openshift_only(dev_plan: Plan, prod_plan: Plan) -> None:
    scc = dev_plan.manifest("RoleBinding", "gpu-platform-privileged-scc", NAMESPACE)

    assert scc["roleRef"]["name"] == "system:openshift:scc:privileged"
    assert {"kind": "ServiceAccount", "name": "nfd-worker", "namespace": NAMESPACE} in scc["subjects"]
    assert not [r for r in prod_plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
                if r["inputs"]["roleRef"]["name"].startswith("system:openshift:scc:")]
