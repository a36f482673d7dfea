"""The admission gate, against the real API server: its own script, run as its own service account, waits while the
tenant policies are not in force and ends once each refuses its probe.

Stand-in: kwok runs no container, so the script the stack's gate Job would run in its pod (curl's branch: the host has
no `oc`) runs here as a process, with the token the API server issues to the gate's service account and the plane's
CA, where a pod would find them. The queue example is used: it has every tenant policy, the queue policy included.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes.client import CoreV1Api

from components.admission_gate import ACCOUNT, GATE_NAMESPACE, PROBE_NAMESPACE
from e2e.cluster import ControlPlane
from e2e.conftest import CRDS, install_crds
from e2e.kube import Kube, refusal, wait_for
from e2e.stack import Stack
from tests.conftest import ROOT

QUEUE_EXAMPLE = ROOT / "examples/Pulumi.queue.yaml"
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
WAITING_SECONDS = 8  # how long the gate must keep waiting with no policy in force (it asks every 2 s)
IN_FORCE_SECONDS = 60  # what the gate may take once the policies exist (the API server loads them within seconds)


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


def test_the_gate_waits_until_every_tenant_policy_refuses_and_its_account_creates_nothing(gate, tmp_path) -> None:
    stack, plane, admin = gate
    [job] = [obj for obj in stack.objects() if obj["kind"] == "Job"
             and obj["metadata"]["namespace"] == GATE_NAMESPACE]
    container = job["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][2]
    env = {"PATH": os.environ["PATH"], "APISERVER": plane.server,
           "ACCOUNT_DIR": str(account_dir(plane, admin, tmp_path / "account")),
           **{e["name"]: e["value"] for e in container["env"]}}
    policies = [obj for obj in stack.objects() if obj["kind"] in POLICY_KINDS
                and obj["metadata"]["name"].startswith("gpu-platform-tenant")]
    probed = [line.split()[1] for line in script.splitlines() if line.startswith("refused_by ")]
    assert probed and {p["metadata"]["name"] for p in policies} == set(probed)

    gate_process = subprocess.Popen(["/bin/sh", "-c", script], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(WAITING_SECONDS)
        assert gate_process.poll() is None, gate_process.communicate()[0]  # no policy yet: still waiting

        # The gate's account: a real create is refused by the probe namespace's quota, and it may read nothing.
        as_gate = Kube(plane.kubeconfig, user=f"system:serviceaccount:{GATE_NAMESPACE}:{ACCOUNT}",
                       group="system:serviceaccounts")
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "real", "namespace": PROBE_NAMESPACE},
                "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "c", "image": container["image"], "securityContext": {
                             "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
        assert "exceeded quota" in refusal(lambda: as_gate.create(body))
        assert not as_gate.can("get", "pods", PROBE_NAMESPACE)
        assert not as_gate.can("create", "pods", "default")
        as_gate.close()

        applied_at = time.monotonic()
        for policy in policies:
            admin.apply(policy)
        output, _ = gate_process.communicate(timeout=IN_FORCE_SECONDS)
        took = time.monotonic() - applied_at
    finally:
        if gate_process.poll() is None:
            gate_process.kill()
            gate_process.wait()

    assert gate_process.returncode == 0, output
    for policy in probed:
        assert f"{policy} is in force" in output, output
    print(f"gate ended {took:.1f} s after the policies were applied")
