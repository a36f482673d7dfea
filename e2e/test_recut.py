"""Re-cutting GPUs on live OpenShift nodes, under `pulumi up` against the real control plane: each MIG change of
dev's A100 pool (two nodes, tenants' jobs running on both) is deployed by the real engine with the policy pack, and
the re-cut roll's own script (components/machine_labels.py) then drains, relabels and waits for every node in turn,
as the Job's service account, through the real eviction API, PodDisruptionBudgets and scheduler.

Stand-ins (e2e/recut.py, each named so there): the machine API (Machines and nodelink), NVIDIA's MIG manager with
the device plugin's advertising (after mig-parted v0.15.0 reconfigure.go Run: `failed` while a GPU pod is bound to
the node), and the Job's pod (kwok runs no container: its script runs here as a process, with `oc` a shim over
kubectl). Pods are kwok's: nothing runs in them. kwok's pod-complete stage is off, so tenants' jobs keep running;
the platform's own Jobs that `up` waits for (OLM's approvers, the admission gate) are completed as that stage would,
and OLM is the stand-in of e2e/standins.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import labels
from components.machine_labels import MACHINE_API_NAMESPACE
from e2e.cluster import KWOK_STAGES, ControlPlane
from e2e.conftest import CRDS, Applied, prepare_cluster
from e2e.kube import Kube, stays, wait_for
from e2e.engine import Engine
from e2e.recut import BindingWatch, CompleteJobPods, RollJobRunner, StandInMachineApi, StandInMigManager, gpu_pods_on
from e2e.stack import Stack
from e2e.standins import StandInOlm
from e2e.test_engine_lifecycle import PULL_SECRETS
from e2e.test_engine_stacks import project_copy
from fleet.partitioning import MIG_DISABLED, is_gpu_resource
from tests.conftest import ROOT

PROJECT = "gpu-platform"
POOL = "a100-training"
RUNNING = tuple(stage for stage in KWOK_STAGES if stage != "pod/fast/pod-complete.yaml")  # jobs keep running
PAUSE = "registry.k8s.io/pause:3.10"
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
SETTLE_SECONDS = 60
MERGE = "application/merge-patch+json"
ROLL_SECONDS = 120  # two nodes: each drained, re-cut and seen `success` (the script looks every 5 s)
# The PodDisruptionBudget test shortens the roll's drain timeout from the Job's 600 s (the one change to the Job's
# environment here): the budget allows no eviction, so the drain would otherwise wait the whole 600 s to fail.
HELD_DRAIN_SECONDS = 10

# dev's A100 pool with two nodes and a MIG layout, and what each tenant is given of it, per change. Each step is
# what the user means, the pool's partitioning, and each tenant's grants of the pool's kind.
A100_EACH = {"vision": 8, "nlp-research": 4}
STEPS: list[tuple[str, dict[str, Any], str, dict[str, int]]] = [
    ("the layout as deployed", {"migLayout": "all-1g.5gb"}, "1g.5gb", {"vision": 28, "nlp-research": 14}),
    ("a MIG layout change", {"migLayout": "all-3g.20gb"}, "3g.20gb", A100_EACH),
    ("the pool's own layout", {"migLayout": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}, "2g.10gb", A100_EACH),
    ("its own layout edited", {"migLayout": {"2g.10gb": 3}}, "2g.10gb", {"vision": 12, "nlp-research": 6}),
    ("the layout removed", {}, "", {"vision": 4, "nlp-research": 1}),
]
# The change a tenant's PodDisruptionBudget then holds: a layout not asked before (so a Job of a new name).
HELD = ("a layout change held by a budget", {"migLayout": "all-2g.10gb"}, "2g.10gb", A100_EACH)


def config_for(partitioning: dict[str, Any], profile: str, grants: dict[str, int]) -> dict[str, Any]:
    """dev's stack file `config:` with the A100 pool at two nodes cut as `partitioning`, each tenant given `grants`
    of `profile` (whole GPUs when there is none)."""
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"])
    pool = next(p for p in config[f"{PROJECT}:nodePools"] if p["name"] == POOL)
    pool.update(replicas=2, maxReplicas=2, **partitioning)
    for tenant in config[f"{PROJECT}:tenants"]:
        tenant.pop("gpus", None)
        tenant.pop("migSlices", None)
        tenant.update({"migSlices": {profile: grants[tenant["name"]]}} if profile else {"gpus": grants[tenant["name"]]})
    return config


@dataclass
class Recut:
    """The deployed stack (its render, for look-ups), its engine, and the stand-ins acting on its cluster."""

    applied: Applied
    engine: Engine
    stack_file: Path
    machines: StandInMachineApi
    mig: StandInMigManager
    runner: RollJobRunner
    watch: BindingWatch
    step: int = 0

    @property
    def admin(self) -> Kube:
        return self.applied.admin

    @property
    def stack(self) -> Stack:
        return self.applied.stack

    def nodes(self) -> list[str]:
        return sorted(self.mig.gpus)

    def node(self, name: str) -> dict[str, Any]:
        return self.admin.get("v1", "Node", name)

    def apply(self, config: dict[str, Any]) -> str:
        """`pulumi up` of the stack file with `config`; returns the name of the pool's re-cut Job."""
        self.applied.stack = Stack.from_config("dev", config)
        document = yaml.safe_load(self.stack_file.read_text())
        document["config"].update(config)
        self.stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
        self.engine.up(policy_pack=ROOT / "policy")
        [job] = [obj["metadata"]["name"] for obj in self.stack.objects() if obj["kind"] == "Job"
                 and obj["metadata"]["namespace"] == MACHINE_API_NAMESPACE
                 and obj["metadata"]["name"].startswith(machine_set(self.stack))]
        return job

    def finished(self, job: str) -> dict[str, Any]:
        """The Job once the Job controller has seen its pod end: its conditions by type."""
        def probe() -> dict[str, Any] | None:
            for part in (self.machines, self.mig, self.runner, self.watch):
                if part.loop.error:  # a stand-in that stopped: say why at once
                    raise part.loop.error
            found = self.admin.get("batch/v1", "Job", job, MACHINE_API_NAMESPACE) or {}
            conditions = {c["type"]: c for c in (found.get("status") or {}).get("conditions") or []
                          if c["status"] == "True"}
            return conditions if {"Complete", "Failed"} & set(conditions) else None
        try:
            return wait_for(probe, f"the re-cut Job {job} finished", timeout=ROLL_SECONDS)
        except TimeoutError as error:
            log = self.runner.log(job)
            raise TimeoutError(f"{error}; its output:\n{log.read_text() if log.exists() else '(none)'}") from None

    def tenant_jobs(self, name: str, resource: str, parallelism: int = 2, tenants: list[Any] | None = None
                    ) -> list[str]:
        """Each tenant's (or these tenants') Job of `parallelism` pods asking one `resource` each on the pool, created
        as the tenant; returns the nodes its pods run on once all are Running."""
        tenants = self.stack.tenants() if tenants is None else tenants
        selector = self.stack.pool_selector(POOL)
        for tenant in tenants:
            user = self.applied.user(f"{tenant.name}-member", tenant.rbac_group)
            user.create(job(name, tenant.name, resource, selector, parallelism))
        return wait_for(lambda: self._running(name, parallelism, tenants), f"tenants' job {name} running",
                        timeout=SETTLE_SECONDS)

    def _running(self, name: str, parallelism: int, tenants: list[Any]) -> list[str] | None:
        nodes = []
        for tenant in tenants:
            pods = [p for p in self.admin.list("v1", "Pod", tenant.name)
                    if (p["metadata"].get("labels") or {}).get("job-name") == name
                    and p["status"].get("phase") == "Running"]
            if len(pods) < parallelism:
                return None
            nodes += [p["spec"]["nodeName"] for p in pods]
        return nodes


def machine_set(stack: Stack) -> str:
    """The name of the A100 pool's MachineSet."""
    [name] = [obj["metadata"]["name"] for obj in stack.objects() if obj["kind"] == "MachineSet"
              and obj["spec"]["template"]["spec"]["metadata"]["labels"].get(labels.POOL_LABEL) == POOL]
    return name


def job(name: str, namespace: str, resource: str, selector: dict[str, str], parallelism: int) -> dict[str, Any]:
    """A tenant's Job of pause pods, each asking one `resource`, on the pool `selector` names."""
    container = {"name": "main", "image": PAUSE, "securityContext": dict(RESTRICTED_CONTAINER),
                 "resources": {"limits": {resource: "1"}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 100, "template": {
                "spec": {"restartPolicy": "Never", "nodeSelector": dict(selector),
                         "tolerations": [dict(labels.GPU_TOLERATION)], "securityContext": dict(RESTRICTED_POD),
                         "containers": [container]}}}}


def resource_of(profile: str) -> str:
    return f"nvidia.com/mig-{profile}" if profile else labels.GPU_RESOURCE


@pytest.fixture(scope="module")
def recut(tools, tmp_path_factory) -> Iterator[Recut]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is not beside the project here: the stack's custom resources need their CRDs")
    folder = tmp_path_factory.mktemp("recut")
    what, partitioning, profile, grants = STEPS[0]
    config = config_for(partitioning, profile, grants)
    stack = Stack.from_config("dev", config)
    a100 = next(p for p in stack.config.node_pools if p.name == POOL)
    pools = {pool.name: [n["metadata"]["name"] for n in stack.nodes()
                         if n["metadata"]["labels"].get(labels.POOL_LABEL) == pool.name]
             for pool in stack.config.node_pools}
    gpus = {n: (a100.instance.gpu_model, a100.instance.gpus, a100.partitioning.devices(a100.instance.gpu_model))
            for n in pools[POOL]}
    with ControlPlane.start(folder / "cluster", stages=RUNNING) as plane:
        admin = prepare_cluster(stack, plane)
        applied = Applied(stack, plane, admin)
        parts: list[Any] = []
        try:
            project = project_copy(folder / "project")
            engine = Engine.prepare(project, folder / "engine", plane.kubeconfig)
            engine.init("dev", secrets={f"{PROJECT}:registryPullSecret": PULL_SECRETS[0]})
            engine.run("config", "set", "--path", f"{PROJECT}:preflight", "false")  # no registry answers here
            parts.append(StandInOlm(plane.kubeconfig))
            parts.append(CompleteJobPods(plane.kubeconfig, {MACHINE_API_NAMESPACE, *(t.name for t in stack.tenants())}))
            parts.append(StandInMachineApi(plane.kubeconfig, pools))
            parts.append(StandInMigManager(plane.kubeconfig, gpus))
            parts.append(RollJobRunner(plane.folder, plane.server, plane.kubeconfig, folder / "jobs"))
            parts.append(BindingWatch(plane.kubeconfig))
            state = Recut(applied, engine, project / "Pulumi.dev.yaml", *parts[-4:])
            name = state.apply(config)
            # The first roll only labels the machines: every node already has the cut asked.
            assert "Complete" in state.finished(name), state.runner.run_of(name)
            yield state
        finally:
            errors = []
            for part in reversed(parts):
                try:
                    part.close()
                except Exception as error:  # noqa: BLE001 (every stand-in stops; the first error is raised)
                    errors.append(error)
            for client in [admin, *applied.users.values()]:
                client.close()
            if errors:
                raise errors[0]


def advertised(node: dict[str, Any]) -> dict[str, str]:
    return {name: value for name, value in node["status"]["capacity"].items() if is_gpu_resource(name)}


@pytest.mark.parametrize("step", range(1, len(STEPS)), ids=[what for what, *_ in STEPS[1:]])
def test_a_re_cut_drains_each_node_first_reaches_every_node_and_says_so(recut: Recut, step: int) -> None:
    """Tenants' jobs run on both nodes of the old cut; the change is applied; the roll's Job completes, every node
    carries the new layout with `success`, advertises exactly the kinds and counts the pool now gives (which the
    tenants' quotas count), no GPU pod was bound to a node while its cut changed, and a tenant's job of the new kind
    runs there."""
    assert recut.step == step - 1, "the steps run in order, on one cluster"
    _, _, old_profile, _ = STEPS[step - 1]
    what, partitioning, profile, grants = STEPS[step]
    before = recut.tenant_jobs(f"before-{step}", resource_of(old_profile))
    assert set(before) == set(recut.nodes()), f"{what}: the tenants' jobs run on every node of the pool"

    started = time.monotonic()
    name = recut.apply(config_for(partitioning, profile, grants))
    conditions = recut.finished(name)
    run = recut.runner.run_of(name)
    took = time.monotonic() - started
    assert "Complete" in conditions and run.code == 0, (what, run.output if run else None)

    pool = next(p for p in recut.stack.config.node_pools if p.name == POOL)
    layout = pool.partitioning.mig_layout or MIG_DISABLED
    wanted = {resource: str(count) for resource, count in pool.advertised_per_node.items()}
    for node_name in recut.nodes():
        node = recut.node(node_name)
        node_labels = node["metadata"]["labels"]
        assert (node_labels[labels.MIG_CONFIG_LABEL], node_labels[labels.MIG_CONFIG_STATE_LABEL]) == \
            (layout, "success"), what
        assert not node["spec"].get("unschedulable"), f"{what}: {node_name} left cordoned"
        assert advertised(node) == wanted, what
        assert f"node {node_name}: re-cut " in run.output and f"node {node_name}: re-cut to {layout}" in run.output
    # What the nodes advertise is what the tenants' quotas count: each kind by name, at the grants.
    for tenant in recut.stack.tenants():
        hard = recut.admin.get("v1", "ResourceQuota", "gpu-quota", tenant.name)["spec"]["hard"]
        assert all(f"requests.{resource}" in hard for resource in wanted), (what, hard)
        assert hard[f"requests.{resource_of(profile)}"] == str(grants[tenant.name]), (what, hard)

    cuts = [cut for cut in recut.mig.cuts if cut.began >= started]
    assert sorted(cut.node for cut in cuts) == recut.nodes(), f"{what}: each node cut once"
    assert recut.mig.refusals == [], what
    assert recut.watch.overlapping(cuts) == [], f"{what}: a GPU pod was bound to a node while its cut changed"
    # A tenant's job of the new kind runs on the pool.
    assert set(recut.tenant_jobs(f"after-{step}", resource_of(profile), parallelism=1)) <= set(recut.nodes())
    for tenant in recut.stack.tenants():
        for name_ in (f"before-{step}", f"after-{step}"):
            recut.admin.delete("batch/v1", "Job", name_, tenant.name)
    wait_for(lambda: not any(gpu_pods_on(recut.admin, n) for n in recut.nodes()), "the tenants' pods gone",
             timeout=SETTLE_SECONDS)
    recut.step = step
    print(f"{what}: rolled {len(cuts)} nodes in {took:.1f} s")


def test_a_cut_changed_under_a_running_job_fails_on_its_node_and_keeps_the_cut(recut: Recut) -> None:
    """Why the roll drains first: a machine relabelled by hand while a tenant's job runs on its node reaches the node
    (nodelink), and the MIG manager cannot destroy instances in use: the node reports `failed` and keeps advertising
    its old cut. Labelled back, it reports `success` with nothing changed."""
    assert recut.step == len(STEPS) - 1, "after the re-cuts, on the same cluster"
    _, _, profile, _ = STEPS[-1]
    tenant = recut.stack.tenants()[0]
    [node_name] = recut.tenant_jobs("busy", resource_of(profile), parallelism=1, tenants=[tenant])
    node = recut.node(node_name)
    layout, kept = node["metadata"]["labels"][labels.MIG_CONFIG_LABEL], advertised(node)
    machine = next(m for m in recut.admin.list("machine.openshift.io/v1beta1", "Machine", MACHINE_API_NAMESPACE)
                   if m["status"]["nodeRef"]["name"] == node_name)
    machines = recut.admin.resource("machine.openshift.io/v1beta1", "Machine")

    def relabel(value: str) -> None:
        machines.patch(name=machine["metadata"]["name"], namespace=MACHINE_API_NAMESPACE, content_type=MERGE,
                       body={"spec": {"metadata": {"labels": {labels.MIG_CONFIG_LABEL: value}}}})

    def state() -> tuple[str, str]:
        found = recut.node(node_name)["metadata"]["labels"]
        return found[labels.MIG_CONFIG_LABEL], found.get(labels.MIG_CONFIG_STATE_LABEL, "")

    relabel("all-1g.5gb")
    try:
        wait_for(lambda: state() == ("all-1g.5gb", "failed"), "the MIG manager's refusal", timeout=SETTLE_SECONDS)
        assert [(n, pods) for n, _, pods in recut.mig.refusals] == [(node_name, [f"{tenant.name}/{p}" for p in [
            p["metadata"]["name"] for p in recut.admin.list("v1", "Pod", tenant.name)
            if p["spec"].get("nodeName") == node_name]])]
        assert advertised(recut.node(node_name)) == kept
    finally:
        relabel(layout)
    wait_for(lambda: state() == (layout, "success"), "the old cut reported again", timeout=SETTLE_SECONDS)
    assert advertised(recut.node(node_name)) == kept
    recut.admin.delete("batch/v1", "Job", "busy", tenant.name)
    wait_for(lambda: not gpu_pods_on(recut.admin, node_name), "the busy job's pod gone", timeout=SETTLE_SECONDS)
    recut.mig.refusals.clear()


def test_a_pod_disruption_budget_holds_the_roll_at_its_node_and_the_job_says_where(recut: Recut) -> None:
    """A tenant's job guarded by a PodDisruptionBudget that allows no eviction: the roll re-cuts the nodes before its
    node, stops there (the Job fails, its output names the node and the budget), leaves that node cordoned with its
    old cut and its job running, and touches no node after it."""
    assert recut.step == len(STEPS) - 1, "after the re-cuts, on the same cluster"
    _, _, old_profile, _ = STEPS[-1]
    tenant = recut.stack.tenants()[0]
    user = recut.applied.user(f"{tenant.name}-member", tenant.rbac_group)
    user.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                 "metadata": {"name": "guarded", "namespace": tenant.name},
                 "spec": {"minAvailable": 1, "selector": {"matchLabels": {"job-name": "guarded"}}}})
    [held] = recut.tenant_jobs("guarded", resource_of(old_profile), parallelism=1, tenants=[tenant])
    order = recut.nodes()  # the roll takes the machines in name order, and each machine is named after its node
    before = {n: recut.node(n)["metadata"]["labels"][labels.MIG_CONFIG_LABEL] for n in order}

    recut.runner.env["DRAIN_TIMEOUT"] = str(HELD_DRAIN_SECONDS)
    what, partitioning, profile, grants = HELD
    name = recut.apply(config_for(partitioning, profile, grants))
    conditions = recut.finished(name)
    run = recut.runner.run_of(name)
    assert "Failed" in conditions and run.code == 1, run.output if run else None
    assert f"node {held}: not drained in {HELD_DRAIN_SECONDS}s (a PodDisruptionBudget" in run.output, run.output
    assert "Cannot evict pod as it would violate the pod's disruption budget" in run.output, run.output
    assert f"{tenant.name}/guarded-" in run.output or f'pods/"guarded-' in run.output, run.output
    node = recut.node(held)
    assert node["spec"].get("unschedulable") and node["metadata"]["labels"][labels.MIG_CONFIG_LABEL] == before[held]
    assert recut._running("guarded", 1, [tenant]) == [held], "the guarded job runs on"
    for other in order[order.index(held) + 1:]:
        assert recut.node(other)["metadata"]["labels"][labels.MIG_CONFIG_LABEL] == before[other]
        assert not recut.node(other)["spec"].get("unschedulable")
    for earlier in order[:order.index(held)]:
        assert recut.node(earlier)["metadata"]["labels"][labels.MIG_CONFIG_STATE_LABEL] == "success"
    assert recut.mig.refusals == []
    assert stays(lambda: recut.node(held)["metadata"]["labels"][labels.MIG_CONFIG_LABEL] == before[held], 3)
