"""Stand-ins for what re-cuts an OpenShift GPU node and this machine cannot run: the machine API (Machines and its
nodelink controller), NVIDIA's MIG manager with the device plugin's advertising, and the re-cut Job's pod. Each
acts on the real API server, polling it, and behaves as the program it stands in for does, failures included.

- `StandInMachineApi`: a Machine per node of each MachineSet (what the machine controller creates), and nodelink:
  each Machine's `spec.metadata.labels` and `spec.taints` copied onto its node, added or overwritten, never removed
  (machine-api-operator pkg/controller/nodelink/nodelink.go processNode and addTaintsToNode).
- `StandInMigManager`: NVIDIA's MIG manager, after mig-parted v0.15.0. It acts when a node's `nvidia.com/mig.config`
  changes (cmd/nvidia-mig-manager/main.go ContinuouslySyncMigConfigChanges, UpdateFunc) and when it restarts on a
  new configuration (the operator rolls it when the ClusterPolicy names another ConfigMap; main.go start reads the
  label anew), then runs pkg/mig/reconfigure/reconfigure.go Run: `failed` for a layout its configuration does not
  hold (validateMigConfig); `success` untouched when the GPUs already have that cut (isConfigAlreadyApplied);
  otherwise `pending`, then the cut, which fails while any GPU instance is in use (pkg/mig/config/config.go
  ClearMigConfig: a compute or GPU instance with a live process cannot be destroyed, NVML in use): here, while a pod
  holding a GPU or slice is bound to the node, and the node reports `failed` (Run, applyMigConfig); else the device
  plugin's new resources (status.capacity and allocatable, fleet/partitioning.py's table) and `success`.
- `RollJobRunner`: kwok runs no container, so the re-cut Job's script (components/machine_labels.py ROLL_SCRIPT) is
  run here as a process, for each pod of such a Job once it is Running, with that Job's environment, as the Job's
  service account (a token the API server issues to it: its RBAC is the stack's, nothing more), and with `oc` a shim
  over kubectl: `oc adm cordon|uncordon|drain|taint` are kubectl's own commands of those names (oc vendors them),
  the rest the same verbs. Then the pod is marked as the kubelet would: Succeeded or Failed with its exit code, and
  what it printed kept as its log.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import CoreV1Api
from kubernetes.dynamic.exceptions import ApiException
from urllib3.exceptions import HTTPError

from components import labels
from components.machine_labels import MACHINE_API_NAMESPACE
from components.mig_config import CONFIG_KEY
from fleet.partitioning import MIG_DISABLED, MIG_LAYOUTS, PCI_DEVICE_IDS, Partitioning, is_gpu_resource
from e2e.cluster import BIN
from e2e.kube import Kube, apply_crds

MERGE = "application/merge-patch+json"
POLL_SECONDS = 0.3
MACHINESET_LABEL = "machine.openshift.io/cluster-api-machineset"
# The Machine kind (openshift/api machine/v1beta1 types_machine.go: spec.metadata, spec.taints, status.nodeRef), a
# stand-in CRD: the reference CRDs hold the MachineSet only. Fields beyond those are kept as they come.
MACHINE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "machines.machine.openshift.io"},
    "spec": {"group": "machine.openshift.io", "scope": "Namespaced",
             "names": {"plural": "machines", "singular": "machine", "kind": "Machine", "listKind": "MachineList"},
             "versions": [{"name": "v1beta1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


class _Loop:
    """A daemon thread calling `step` every POLL_SECONDS until closed; an error of the API is retried next time,
    any other is kept and raised by `close`."""

    def __init__(self, name: str, step: Callable[[], None]):
        self.error: BaseException | None = None
        self.stopped = threading.Event()
        self._step = step
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(POLL_SECONDS):
            try:
                self._step()
            except (ApiException, HTTPError, OSError):
                continue
            except BaseException as error:  # noqa: BLE001 (kept for the test to see)
                self.error = error
                return

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)
        if self.error:
            raise self.error


class StandInMachineApi:
    """Machines for the nodes of each MachineSet, and nodelink copying their labels and taints to the nodes."""

    def __init__(self, kubeconfig: Path, pools: Mapping[str, list[str]]):
        """`pools`: a pool (its label on a MachineSet's template) -> its nodes. Each MachineSet, once it exists, gets
        a Machine per node made from its template (as the MachineSet controller makes them) whose status names the
        node."""
        self.kube = Kube(kubeconfig)
        self.pools = pools
        apply_crds(self.kube, [MACHINE_CRD])
        self.loop = _Loop("nodelink", self._sync)

    def _create_machines(self) -> None:
        api = self.kube.resource("machine.openshift.io/v1beta1", "Machine")
        have = {m["metadata"]["name"] for m in self.kube.list("machine.openshift.io/v1beta1", "Machine",
                                                               MACHINE_API_NAMESPACE)}
        for machine_set in self.kube.list("machine.openshift.io/v1beta1", "MachineSet", MACHINE_API_NAMESPACE):
            template = machine_set["spec"]["template"]
            pool = template["spec"]["metadata"]["labels"].get(labels.POOL_LABEL)
            for node in self.pools.get(pool, []):
                name = f"{machine_set['metadata']['name']}-{node.rsplit('-', 1)[-1]}"
                if name in have:
                    continue
                api.create(namespace=MACHINE_API_NAMESPACE, body={
                    "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                    "metadata": {"name": name, "namespace": MACHINE_API_NAMESPACE,
                                 "labels": template["metadata"]["labels"]},
                    "spec": {"metadata": template["spec"]["metadata"], "taints": template["spec"].get("taints", []),
                             "providerSpec": template["spec"]["providerSpec"]}})
                api.status.patch(name=name, namespace=MACHINE_API_NAMESPACE, content_type=MERGE,
                                 body={"status": {"nodeRef": {"kind": "Node", "name": node}}})

    def _sync(self) -> None:
        self._create_machines()
        nodes = self.kube.resource("v1", "Node")
        for machine in self.kube.list("machine.openshift.io/v1beta1", "Machine", MACHINE_API_NAMESPACE):
            node_name = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
            node = self.kube.get("v1", "Node", node_name) if node_name else None
            if not node:
                continue
            wanted = (machine["spec"].get("metadata") or {}).get("labels") or {}
            have = node["metadata"].get("labels") or {}
            taints = list(node["spec"].get("taints") or [])
            for taint in machine["spec"].get("taints") or []:  # addTaintsToNode: by key and effect, never removed
                same = [t for t in taints if (t["key"], t["effect"]) == (taint["key"], taint["effect"])]
                if not same:
                    taints.append(taint)
                elif same[0].get("value") != taint.get("value"):
                    taints[taints.index(same[0])] = taint
            body: dict[str, Any] = {}
            if any(have.get(key) != value for key, value in wanted.items()):
                body["metadata"] = {"labels": wanted}
            if taints != list(node["spec"].get("taints") or []):
                body["spec"] = {"taints": taints}
            if body:
                nodes.patch(name=node_name, body=body, content_type=MERGE)

    def close(self) -> None:
        self.loop.close()
        self.kube.close()


@dataclass
class Cut:
    """One re-cut the MIG manager made: the node, the layout, and when it began (`pending`) and ended."""

    node: str
    layout: str
    began: float
    ended: float


@dataclass
class _Gpus:
    model: str
    count: int
    devices: dict[str, int]  # the MIG devices one GPU has now ({} with MIG off): what mig-parted's assert compares
    label: str | None = None  # the label value last acted on
    config: str | None = None  # the configuration it was acted on with


class StandInMigManager:
    """The MIG manager of each GPU node given here (see the module docstring); `cuts` and `refusals` record what it
    did, for the test to hold against the pods' bindings."""

    def __init__(self, kubeconfig: Path, nodes: Mapping[str, tuple[str, int, dict[str, int]]]):
        """`nodes`: name -> (GPU model, GPUs, the MIG devices of one GPU now, {} with MIG off)."""
        self.kube = Kube(kubeconfig)
        self.gpus = {name: _Gpus(model, count, dict(devices)) for name, (model, count, devices) in nodes.items()}
        self.cuts: list[Cut] = []
        self.refusals: list[tuple[str, str, list[str]]] = []  # node, layout, the GPU pods bound to it
        self.loop = _Loop("mig-manager", self._sync)

    def _configuration(self) -> tuple[str, dict[str, dict[str, dict[str, int]]]] | None:
        """The configuration the ClusterPolicy gives the MIG manager: its name, and per layout per GPU model the
        devices of one GPU. Without a ConfigMap named, the operator's default-mig-parted-config (the table
        fleet/partitioning.py reads from it). None without a ClusterPolicy: no operator deploys the MIG manager."""
        policies = self.kube.list("nvidia.com/v1", "ClusterPolicy")
        if not policies:
            return None
        [policy] = policies
        name = policy["spec"]["migManager"].get("config", {}).get("name")
        if not name:
            layouts: dict[str, dict[str, dict[str, int]]] = {MIG_DISABLED: {model: {} for model in MIG_LAYOUTS}}
            for model, by_name in MIG_LAYOUTS.items():
                for layout, devices in by_name.items():
                    layouts.setdefault(layout, {})[model] = dict(devices)
            return "default-mig-parted-config", layouts
        [config_map] = [c for c in self.kube.list("v1", "ConfigMap") if c["metadata"]["name"] == name]
        document = yaml.safe_load(config_map["data"][CONFIG_KEY])
        found: dict[str, dict[str, dict[str, int]]] = {}
        for layout, entries in document["mig-configs"].items():
            for entry in entries:
                models = [m for m, pci in PCI_DEVICE_IDS.items() if pci in entry.get("device-filter", [pci])]
                for model in models:
                    found.setdefault(layout, {})[model] = dict(entry.get("mig-devices") or {}) \
                        if entry.get("mig-enabled") else {}
        return name, found

    def _sync(self) -> None:
        configuration = self._configuration()
        if configuration is None:
            return
        config_name, layouts = configuration
        for name, gpus in self.gpus.items():
            node = self.kube.get("v1", "Node", name)
            layout = (node["metadata"].get("labels") or {}).get(labels.MIG_CONFIG_LABEL)
            if (layout, config_name) == (gpus.label, gpus.config):
                continue
            gpus.label, gpus.config = layout, config_name
            self._run(node, gpus, layout, layouts)

    def _label(self, node: str, state: str) -> None:
        self.kube.resource("v1", "Node").patch(name=node, content_type=MERGE, body={"metadata": {"labels": {
            labels.MIG_CONFIG_STATE_LABEL: state}}})

    def _run(self, node: dict[str, Any], gpus: _Gpus, layout: str | None,
             layouts: dict[str, dict[str, dict[str, int]]]) -> None:
        """reconfigure.go Run, for `layout` on this node."""
        name = node["metadata"]["name"]
        wanted = layouts.get(layout or "", {}).get(gpus.model)
        if wanted is None:  # validateMigConfig: `assert --valid-config` finds no such layout for this GPU
            self._label(name, "failed")
            return
        if wanted == gpus.devices:  # isConfigAlreadyApplied
            self._label(name, "success")
            return
        began = time.monotonic()
        self._label(name, "pending")
        in_use = gpu_pods_on(self.kube, name)
        if in_use:  # applyMigConfig: ClearMigConfig cannot destroy an instance in use
            self.refusals.append((name, layout or "", in_use))
            self._label(name, "failed")
            return
        gpus.devices = dict(wanted)
        partitioning = Partitioning(mig_layout=layout, mig_devices=tuple(sorted(wanted.items()))) if wanted \
            else Partitioning()
        advertised = {resource: str(count) for resource, count in
                      partitioning.advertised(gpus.model, gpus.count).items()}
        gone = {resource: None for resource in node["status"].get("capacity", {})
                if is_gpu_resource(resource) and resource not in advertised}
        resources = {**gone, **advertised}
        CoreV1Api(self.kube.api).patch_node_status(name, {"status": {"capacity": resources,
                                                                      "allocatable": resources}})
        self.cuts.append(Cut(name, layout or "", began, time.monotonic()))
        self._label(name, "success")

    def close(self) -> None:
        self.loop.close()
        self.kube.close()


def gpu_pods_on(kube: Kube, node: str) -> list[str]:
    """The pods bound to `node` that hold a GPU or a slice of one and have not ended."""
    found = []
    for pod in CoreV1Api(kube.api).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        asked = [name for c in pod.spec.containers for name in {**((c.resources and c.resources.limits) or {}),
                                                                 **((c.resources and c.resources.requests) or {})}]
        if any(is_gpu_resource(name) for name in asked):
            found.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return found


@dataclass
class Binding:
    """A GPU pod seen bound to a node, from when it was first seen there until it was seen gone (or now)."""

    pod: str
    node: str
    seen: float
    gone: float | None = None


class BindingWatch:
    """Every GPU pod's binding to a node over time, watched from the API server independently of the stand-ins."""

    def __init__(self, kubeconfig: Path):
        self.kube = Kube(kubeconfig)
        self.bindings: dict[str, Binding] = {}
        self.loop = _Loop("binding-watch", self._sync)

    def _sync(self) -> None:
        now, live = time.monotonic(), set()
        for pod in CoreV1Api(self.kube.api).list_pod_for_all_namespaces().items:
            key = f"{pod.metadata.namespace}/{pod.metadata.name}/{pod.metadata.uid}"
            asked = [name for c in pod.spec.containers for name in ((c.resources and c.resources.limits) or {})]
            if pod.spec.node_name and any(is_gpu_resource(n) for n in asked) \
                    and pod.status.phase not in ("Succeeded", "Failed"):
                live.add(key)
                self.bindings.setdefault(key, Binding(key, pod.spec.node_name, now))
        for key, binding in self.bindings.items():
            if binding.gone is None and key not in live:
                binding.gone = now

    def overlapping(self, cuts: list[Cut]) -> list[tuple[str, str]]:
        """(pod, cut) pairs where a GPU pod was bound to a node while its cut changed."""
        return [(b.pod, f"{c.node} -> {c.layout}") for c in cuts for b in self.bindings.values()
                if b.node == c.node and b.seen <= c.ended and (b.gone is None or b.gone >= c.began)]

    def close(self) -> None:
        self.loop.close()
        self.kube.close()


KUBECTL = BIN / "kubectl"  # built with the control plane from k8s.io/kubernetes (e2e/tools/k8s)
OC_SHIM = """#!/bin/sh
# oc, as far as the re-cut roll uses it: its `adm` commands are kubectl's own (oc vendors kubectl's drain and
# cordon), every other verb is kubectl's of the same name.
if [ "$1" = adm ]; then shift; fi
exec "$KUBECTL" "$@"
"""


@dataclass
class RollRun:
    """One run of a re-cut Job's script: the Job, its exit code and what it printed (stdout and stderr, as
    `oc logs` shows them)."""

    job: str
    code: int
    output: str


@dataclass
class RollJobRunner:
    """Runs the script of each re-cut Job's pod (see the module docstring). `env` overrides the Job's environment
    (a shorter drain timeout, said so by the test that sets it)."""

    plane_folder: Path
    server: str
    kubeconfig: Path
    folder: Path
    env: dict[str, str] = field(default_factory=dict)
    runs: list[RollRun] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kube = Kube(self.kubeconfig)
        (self.folder / "bin").mkdir(parents=True, exist_ok=True)
        shim = self.folder / "bin" / "oc"
        shim.write_text(OC_SHIM)
        shim.chmod(0o755)
        self.done: set[str] = set()
        self.loop = _Loop("roll-jobs", self._sync)

    def _sync(self) -> None:
        for pod in self.kube.list("v1", "Pod", MACHINE_API_NAMESPACE):
            job = (pod["metadata"].get("labels") or {}).get("job-name")
            if not job or pod["metadata"]["uid"] in self.done or pod["status"].get("phase") != "Running":
                continue
            self.done.add(pod["metadata"]["uid"])
            self._run(pod, self.kube.get("batch/v1", "Job", job, MACHINE_API_NAMESPACE))

    def _account_kubeconfig(self, account: str) -> Path:
        """A kubeconfig holding a token the API server issued to `account` (what its pod would mount)."""
        token = CoreV1Api(self.kube.api).create_namespaced_service_account_token(
            account, MACHINE_API_NAMESPACE, {"spec": {"expirationSeconds": 3600}}).status.token
        path = self.folder / f"{account}.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "job",
            "clusters": [{"name": "e2e", "cluster": {"server": self.server, "certificate-authority": str(
                self.plane_folder / "pki" / "ca.crt")}}],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": "job", "context": {"cluster": "e2e", "user": account,
                                                     "namespace": MACHINE_API_NAMESPACE}}]}))
        return path

    def _run(self, pod: dict[str, Any], job: dict[str, Any]) -> None:
        spec = job["spec"]["template"]["spec"]
        [container] = spec["containers"]
        env = {"PATH": f"{self.folder / 'bin'}{os.pathsep}{os.environ['PATH']}", "HOME": str(self.folder),
               "KUBECTL": str(KUBECTL),
               "KUBECONFIG": str(self._account_kubeconfig(spec["serviceAccountName"])),
               **{item["name"]: item.get("value", "") for item in container.get("env", [])}, **self.env}
        log = self.log(job["metadata"]["name"])
        with log.open("w") as out:
            code = subprocess.run(container["command"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=int(job["spec"]["activeDeadlineSeconds"])).returncode
        self.runs.append(RollRun(job["metadata"]["name"], code, log.read_text()))
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        CoreV1Api(self.kube.api).patch_namespaced_pod_status(pod["metadata"]["name"], MACHINE_API_NAMESPACE, {
            "status": {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [{
                "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                "restartCount": 0, "state": {"terminated": terminated}}]}})

    def log(self, job: str) -> Path:
        """Where the script of `job` writes what it prints, as it prints it."""
        return self.folder / f"{job}.log"

    def run_of(self, job: str) -> RollRun | None:
        """The last run of `job`'s script."""
        return next((run for run in reversed(self.runs) if run.job == job), None)

    def close(self) -> None:
        self.loop.close()
        self.kube.close()



class CompleteJobPods:
    """kwok's pod-complete stage (off on this plane, so that tenants' jobs and the re-cut Job's pod keep running) for
    the Job pods of every namespace but `spared`: each Running one marked Succeeded, as kwok would."""

    def __init__(self, kubeconfig: Path, spared: set[str]):
        self.kube = Kube(kubeconfig)
        self.spared = spared
        self.loop = _Loop("complete-job-pods", self._sync)

    def _sync(self) -> None:
        core = CoreV1Api(self.kube.api)
        for pod in core.list_pod_for_all_namespaces(label_selector="job-name").items:
            if pod.metadata.namespace in self.spared or pod.status.phase != "Running":
                continue
            container = pod.spec.containers[0]
            core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": {
                "phase": "Succeeded", "containerStatuses": [{
                    "name": container.name, "image": container.image, "imageID": "", "ready": False,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}})

    def close(self) -> None:
        self.loop.close()
        self.kube.close()
