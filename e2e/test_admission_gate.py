"""The admission gate, against the real API server: its own script, run as its own service account, waits while the
tenant policies are not in force and ends once each refuses its probe; and under the real engine no tenant is bound
before the gate's Job completes.

Stand-in: kwok runs no container, so the script the stack's gate Job would run in its pod (curl's branch: the host has
no `oc`) runs here as a process, with the token the API server issues to the gate's service account and the plane's
CA, where a pod would find them. The first test uses the queue example (every tenant policy, the queue policy
included); the engine test onprem (a Kubernetes stack the engine can run: no AWS resources).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from kubernetes.client import CoreV1Api

from components.admission_gate import ACCOUNT, GATE_NAMESPACE, PROBE_NAMESPACE
from e2e.cluster import KWOK_STAGES, ControlPlane
from e2e.conftest import CRDS, install_crds, prepare_cluster
from e2e.engine import Engine, missing_tools
from e2e.kube import Kube, refusal, wait_for
from e2e.stack import Stack
from e2e.standins import StandInCharts
from e2e.test_engine_lifecycle import CHARTS, PULL_SECRETS
from e2e.test_engine_stacks import project_copy
from tests.conftest import ROOT

QUEUE_EXAMPLE = ROOT / "examples/Pulumi.queue.yaml"
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
WAITING_SECONDS = 8  # how long the gate must keep waiting with no policy in force (it asks every 2 s)
IN_FORCE_SECONDS = 60  # what the gate may take once the policies exist (the API server loads them within seconds)
RUNNING = tuple(stage for stage in KWOK_STAGES if stage != "pod/fast/pod-complete.yaml")  # kwok completes no pod


def gate_objects(stack: Stack) -> list[dict]:
    """The gate's namespaces, quota, service account and RBAC (not its Job: kwok would only mark it complete)."""
    return [obj for obj in stack.objects() if obj["kind"] != "Job" and (
        obj["metadata"].get("namespace") in (GATE_NAMESPACE, PROBE_NAMESPACE)
        or (obj["kind"] == "Namespace" and obj["metadata"]["name"] in (GATE_NAMESPACE, PROBE_NAMESPACE)))]


@pytest.fixture(scope="module")
def gate(tools, tmp_path_factory) -> Iterator[tuple[Stack, ControlPlane, Kube]]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is not beside the project here")
    stack = Stack.from_config("queue", yaml.safe_load(QUEUE_EXAMPLE.read_text())["config"])
    with ControlPlane.start(tmp_path_factory.mktemp("cluster-gate")) as plane:
        admin = Kube(plane.kubeconfig)
        install_crds(admin)
        for obj in gate_objects(stack):
            admin.apply(obj)
        wait_for(lambda: (admin.get("v1", "ResourceQuota", "nothing", PROBE_NAMESPACE) or {}).get(
            "status", {}).get("hard"), "the probe namespace's quota enforced", timeout=60)
        wait_for(lambda: admin.get("v1", "ServiceAccount", "default", PROBE_NAMESPACE), "the default account", 30)
        yield stack, plane, admin
        admin.close()


def account_dir(plane: ControlPlane, admin: Kube, folder: Path) -> Path:
    """What the gate's pod would find at /var/run/secrets/kubernetes.io/serviceaccount: a token the API server
    issued to the gate's service account, and the cluster's CA."""
    review = CoreV1Api(admin.api).create_namespaced_service_account_token(
        ACCOUNT, GATE_NAMESPACE, {"spec": {"expirationSeconds": 3600}})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(review.status.token)
    (folder / "ca.crt").write_bytes((plane.folder / "pki" / "ca.crt").read_bytes())
    return folder


def gate_job(stack: Stack) -> dict:
    [job] = [obj for obj in stack.objects() if obj["kind"] == "Job" and obj["metadata"]["namespace"] == GATE_NAMESPACE]
    return job


@contextmanager
def gate_running(stack: Stack, plane: ControlPlane, admin: Kube, folder: Path) -> Iterator[subprocess.Popen]:
    """The gate Job's script, started as its pod would run it (a stand-in: see the module's docstring), and killed
    at the end of the block if it is still running."""
    container = gate_job(stack)["spec"]["template"]["spec"]["containers"][0]
    env = {"PATH": os.environ["PATH"], "APISERVER": plane.server, "ACCOUNT_DIR": str(account_dir(plane, admin, folder)),
           **{e["name"]: e["value"] for e in container["env"]}}
    process = subprocess.Popen(["/bin/sh", "-c", container["command"][2]], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def gate_ends(process: subprocess.Popen, stack: Stack) -> None:
    """The gate's script ends, 0, within IN_FORCE_SECONDS, having seen each probed policy in force."""
    output, _ = process.communicate(timeout=IN_FORCE_SECONDS)
    assert process.returncode == 0, output
    for policy in probed_policies(stack):
        assert f"{policy} is in force" in output, output


def probed_policies(stack: Stack) -> list[str]:
    script = gate_job(stack)["spec"]["template"]["spec"]["containers"][0]["command"][2]
    return [line.split()[1] for line in script.splitlines() if line.startswith("refused_by ")]


def test_the_gate_waits_until_every_tenant_policy_refuses_and_its_account_creates_nothing(gate, tmp_path) -> None:
    stack, plane, admin = gate
    image = gate_job(stack)["spec"]["template"]["spec"]["containers"][0]["image"]
    policies = [obj for obj in stack.objects() if obj["kind"] in POLICY_KINDS
                and obj["metadata"]["name"].startswith("gpu-platform-tenant")]
    probed = probed_policies(stack)
    assert probed and {p["metadata"]["name"] for p in policies} == set(probed)

    with gate_running(stack, plane, admin, tmp_path / "account") as gate_process:
        time.sleep(WAITING_SECONDS)
        assert gate_process.poll() is None, gate_process.communicate()[0]  # no policy yet: still waiting

        # The gate's account: a real create is refused by the probe namespace's quota, and it may read nothing.
        as_gate = Kube(plane.kubeconfig, user=f"system:serviceaccount:{GATE_NAMESPACE}:{ACCOUNT}",
                       group="system:serviceaccounts")
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "real", "namespace": PROBE_NAMESPACE},
                "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "c", "image": image, "securityContext": {
                             "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
        assert "exceeded quota" in refusal(lambda: as_gate.create(body))
        # ... a Secret too (it may create Secrets for its token probe): the quota holds every kind it may create at 0.
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "real", "namespace": PROBE_NAMESPACE},
                  "stringData": {"stash": "anything"}}
        assert "exceeded quota" in refusal(lambda: as_gate.create(secret))
        assert not as_gate.can("create", "configmaps", PROBE_NAMESPACE)
        assert not as_gate.can("get", "pods", PROBE_NAMESPACE)
        assert not as_gate.can("create", "pods", "default")
        as_gate.close()

        applied_at = time.monotonic()
        for policy in policies:
            admin.apply(policy)
        gate_ends(gate_process, stack)
        took = time.monotonic() - applied_at
    print(f"gate ended {took:.1f} s after the policies were applied")


def test_under_the_engine_no_tenant_is_bound_before_the_gate_has_seen_the_policies_refuse(tools, tmp_path) -> None:
    """`pulumi up` of onprem (the real engine and Kubernetes provider): while the gate's pod runs, the policies exist
    but no tenant's RoleBinding does; the gate's script is run for that pod (stand-in, as above) and the pod marked
    succeeded only once it ends; then `up` binds every tenant and completes. kwok here leaves pods running (no stage
    completes them), so the Job completes only when this test says so."""
    missing = missing_tools()
    if missing:
        pytest.fail(f"{', '.join(missing)} not built: run `make e2e` (it builds them first)", pytrace=False)
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is not beside the project here")
    stack = Stack.render("onprem")
    members = [(tenant.name, f"{tenant.name}-members") for tenant in stack.config.tenants]
    with ControlPlane.start(tmp_path / "cluster", stages=RUNNING) as plane:
        admin = prepare_cluster(stack, plane)
        charts = StandInCharts(tmp_path / "charts", CHARTS)
        try:
            engine = Engine.prepare(project_copy(tmp_path / "project"), tmp_path / "engine", plane.kubeconfig)
            engine.init("onprem", secrets={"gpu-platform:registryPullSecret": PULL_SECRETS[0]})
            engine.run("config", "set", "--path", "gpu-platform:preflight", "false")
            engine.run("config", "set", "--path", "gpu-platform:charts.mirror", charts.url)
            with ThreadPoolExecutor(1) as pool:
                up = pool.submit(engine.up, policy_pack=ROOT / "policy")
                job = gate_job(stack)["metadata"]["name"]
                pod = wait_for(lambda: next((p for p in admin.list("v1", "Pod", GATE_NAMESPACE)
                                             if p["metadata"]["labels"].get("job-name") == job
                                             and p["status"].get("phase") == "Running"), None),
                               "the gate's pod running", timeout=300)
                assert all(admin.get("admissionregistration.k8s.io/v1", kind, name) for kind in POLICY_KINDS
                           for name in probed_policies(stack))
                try:
                    with gate_running(stack, plane, admin, tmp_path / "account") as gate_process:
                        gate_ends(gate_process, stack)
                    time.sleep(WAITING_SECONDS)  # the engine had every chance to go on without the Job
                    bound = [name for namespace, name in members
                             if admin.get("rbac.authorization.k8s.io/v1", "RoleBinding", name, namespace)]
                finally:  # the pod ends however the test does, so `up` is not left waiting for the Job
                    CoreV1Api(admin.api).patch_namespaced_pod_status(pod["metadata"]["name"], GATE_NAMESPACE, {
                        "status": {"phase": "Succeeded", "containerStatuses": [{
                            "name": "gate", "image": pod["spec"]["containers"][0]["image"], "imageID": "",
                            "ready": False, "restartCount": 0,
                            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}})
                up.result(timeout=600)
                assert bound == [], "bound before the gate's Job completed"
            assert all(admin.get("rbac.authorization.k8s.io/v1", "RoleBinding", name, namespace)
                       for namespace, name in members)
        finally:
            charts.close()
