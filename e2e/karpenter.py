"""Karpenter's core controllers (provisioning, its scheduler simulation, NodePool limits, disruption: drift,
consolidation, budgets), built from its Go module (e2e/tools/karpenter, sigs.k8s.io/karpenter v1.15.0, package
sigs.k8s.io/karpenter/kwok), run on the host against the local control plane.

Karpenter's kwok cloud provider stands in for its AWS one, and it is the only part that does:
- **stand-in node class**: a `KWOKNodeClass` (karpenter.kwok.sh/v1alpha1) takes the place of each pool's
  `EC2NodeClass` in the NodePool's `nodeClassRef`; no AMI, subnet or role is resolved. A node-class change never
  drifts a node here (the kwok provider's `IsDrifted` answers nothing, kwok/cloudprovider/cloudprovider.go); only a
  change of the NodePool template does.
- **stand-in instance types**: generated from the project's catalog (`fleet.catalog.INSTANCE_TYPES`), not from
  EC2's: each type's vCPUs, memory, and its GPUs under the name the device plugin advertises them by for the pool's
  partitioning (`fleet.partitioning`), with stand-in prices and zones.
- **stand-in capacity**: the provider creates each Node with its NodeClaim's requests as capacity (`toNode`), not
  the instance type's, so a node's CPU, memory and GPUs count what its first pods asked for; GPU limits count right
  only where pods fill a node's GPUs.
Its Nodes carry the annotation kwok.x-k8s.io/node=fake, so the plane's kwok makes them Ready and runs their pods.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import TOOLS, ControlPlane, Process, free_port
from e2e.kube import Kube, apply_crds, service_account_kubeconfig
from fleet.catalog import INSTANCE_TYPES
from fleet.partitioning import Partitioning

MODULE = "sigs.k8s.io/karpenter"
# Where the chart runs it on EKS (Karpenter's getting-started guide installs it in kube-system as `karpenter`).
IDENTITY = "system:serviceaccount:kube-system:karpenter"
NODE_CLASS_GROUP, NODE_CLASS_KIND = "karpenter.kwok.sh", "KWOKNodeClass"
NODE_CLASS_API = f"{NODE_CLASS_GROUP}/v1alpha1"
NODEPOOL_API, NODECLAIM_API = "karpenter.sh/v1", "karpenter.sh/v1"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
# Stand-in zone, where no NodePool names its zones (the module's own instance_types.json offers test-zone-a..d).
DEFAULT_ZONES = ("test-zone-a",)
CAPACITY_TYPES = ("on-demand", "spot")


def version() -> str:
    """The Karpenter release e2e/tools/karpenter/go.mod pins."""
    match = re.search(rf"^\s*{re.escape(MODULE)} (v\S+)", (TOOLS / "karpenter" / "go.mod").read_text(), re.MULTILINE)
    if not match:
        raise LookupError(f"e2e/tools/karpenter/go.mod requires no {MODULE}")
    return match.group(1)


def module() -> Path:
    """Karpenter's module in the Go module cache, where the tool build put it. (Read by path: `go list -m` in its
    folder would need the newer toolchain that only the build uses.)"""
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True, timeout=60,
                           env={**os.environ, "GOTOOLCHAIN": "local"}).stdout.strip()
    return Path(cache) / f"{MODULE}@{version()}"


def crds(source: Path, installed: Iterable[str]) -> list[dict[str, Any]]:
    """The module's CRDs (pkg/apis/crds: NodePool, NodeClaim, NodeOverlay, CapacityBuffer; kwok/apis/crds:
    KWOKNodeClass) that are not `installed` already. The reference CRDs of karpenter.sh are those Karpenter's AWS
    provider installs (the same schema plus its rules on karpenter.k8s.aws labels): kept, as on EKS."""
    have = set(installed)
    documents = [yaml.safe_load(path.read_text()) for folder in ("pkg/apis/crds", "kwok/apis/crds")
                 for path in sorted((source / folder).glob("*.yaml"))]
    return [crd for crd in documents if crd["metadata"]["name"] not in have]


def instance_types(partitioning: Mapping[str, Partitioning], zones: Iterable[str] = DEFAULT_ZONES,
                   ) -> list[dict[str, Any]]:
    """Stand-in instance types for the kwok provider, from the project's catalog: each named type with its vCPUs,
    memory and what its GPUs are advertised as under `partitioning` (type -> how its pool cuts them), offered
    on-demand and spot in `zones`. The format is the module's embedded kwok/cloudprovider/instance_types.json
    (read at v1.15.0; parsed by kwok/cloudprovider/helpers.go, InstanceTypeOptions and KWOKOffering: offerings are
    Price, Available and node-selector Requirements on karpenter.sh/capacity-type and topology.kubernetes.io/zone).
    Stand-in prices: a GPU 1.0 an hour, a vCPU 0.01, spot at 40%: bigger types cost more, as on EC2."""
    types = []
    for name, cut in sorted(partitioning.items()):
        instance = INSTANCE_TYPES[name]
        price = instance.gpus + instance.vcpus * 0.01
        types.append({
            "name": name, "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": str(instance.vcpus), "memory": f"{instance.memory_mib}Mi", "pods": "110",
                          **{resource: str(count) for resource, count in
                             cut.advertised(instance.gpu_model, instance.gpus).items()}},
            "offerings": [{"Price": round(price * (0.4 if capacity == "spot" else 1.0), 4), "Available": True,
                           "Requirements": [
                               {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity]},
                               {"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}
                          for capacity in CAPACITY_TYPES for zone in zones],
        })
    return types


def with_stand_in_node_class(nodepool: dict[str, Any]) -> dict[str, Any]:
    """The NodePool with its EC2NodeClass reference swapped for a KWOKNodeClass of the same name (the stand-in)."""
    spec = nodepool["spec"]["template"]["spec"]
    ref = {"group": NODE_CLASS_GROUP, "kind": NODE_CLASS_KIND, "name": spec["nodeClassRef"]["name"]}
    return {**nodepool, "spec": {**nodepool["spec"], "template": {
        **nodepool["spec"]["template"], "spec": {**spec, "nodeClassRef": ref}}}}


def stand_in(obj: dict[str, Any]) -> dict[str, Any]:
    """A stack's object as applied here: a NodePool with the stand-in node class, anything else as it is."""
    return with_stand_in_node_class(obj) if obj["kind"] == "NodePool" else obj


def zones(nodepools: Iterable[dict[str, Any]]) -> list[str]:
    """The zones the NodePools' requirements name (the stand-in zone too where one names none): where the stand-in
    instance types are offered."""
    found: set[str] = set()
    for nodepool in nodepools:
        named = [requirement["values"] for requirement in nodepool["spec"]["template"]["spec"]["requirements"]
                 if requirement["key"] == ZONE_LABEL and requirement["operator"] == "In"]
        for values in named or [DEFAULT_ZONES]:
            found.update(values)
    return sorted(found)


def node_class(name: str) -> dict[str, Any]:
    """The stand-in for a pool's EC2NodeClass: a KWOKNodeClass, which resolves nothing."""
    return {"apiVersion": NODE_CLASS_API, "kind": NODE_CLASS_KIND, "metadata": {"name": name}, "spec": {}}


def start(plane: ControlPlane, admin: Kube, types: list[dict[str, Any]]) -> Process:
    """Install the Karpenter CRDs the cluster lacks, and run Karpenter (stopped with the plane) as its own service
    account, offering `types`, without leader election. It registers no webhook (its operator, pkg/operator, starts
    none), and serves metrics and health on free ports of every interface (":PORT", pkg/operator/operator.go: it
    takes a port, not an address)."""
    installed = [crd["metadata"]["name"] for crd in admin.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")]
    apply_crds(admin, crds(module(), installed))
    folder = plane.folder / "karpenter"
    kubeconfig = service_account_kubeconfig(admin, plane.kubeconfig, folder, IDENTITY)
    types_file = folder / "instance_types.json"
    types_file.write_text(json.dumps(types, indent=1))
    health = free_port()
    process = plane.spawn("karpenter-kwok", env={
        "KUBECONFIG": str(kubeconfig), "DISABLE_LEADER_ELECTION": "true", "METRICS_PORT": str(free_port()),
        "HEALTH_PROBE_PORT": str(health), "INSTANCE_TYPES_FILE_PATH": str(types_file), "LOG_LEVEL": "debug"})
    plane.wait_ready(f"http://127.0.0.1:{health}/readyz", lambda body: body.strip() == b"ok")
    return process
