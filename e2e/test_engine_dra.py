"""The DRA example (examples/Pulumi.dra.yaml) under the real engine: `pulumi up` deploys it as gpuctl previews it, then
a switch of allocation mode, reviewed as the destructive change it is, deployed while a tenant's pod holds a device,
and nothing left to change.

Stand-ins as for the engine lifecycle (e2e/test_engine_lifecycle.py): charts from a Helm repository on 127.0.0.1; the
GPUCluster CRD and the ResourceSlices NVIDIA's DRA driver would publish (e2e/dra.py). No GPU Operator runs, so what the
switch does on a node (the DRA driver kept while a pod holds a claim) is not shown here; what the cluster does is.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e.dra import GPU_CLUSTER_CRD, resource_slices
from e2e.kube import Kube, apply_crds, refusal
from e2e.stack import Stack
from e2e.test_dra import RESOURCE, WHOLE, allocated, pod, running, template
from e2e.test_engine_lifecycle import PROJECT, started
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "Pulumi.dra.yaml"


def test_the_dra_example_deploys_and_a_mode_switch_is_destructive(tmp_path: Path) -> None:
    with started("dra", tmp_path, example=EXAMPLE) as life:
        apply_crds(life.admin, [GPU_CLUSTER_CRD])
        assert set(life.compare("a new stack", base=False).values()) == {"create"}
        life.engine.up(policy_pack=ROOT / "policy")
        life.deployed("a new stack")
        assert life.admin.get("nvidia.com/v1alpha1", "GPUCluster", "gpu-cluster")
        assert life.admin.get("resource.k8s.io/v1", "DeviceClass", "gpu.gpu-platform.io")
        stack = Stack.from_config("dra", yaml.safe_load(EXAMPLE.read_text())["config"])
        for slice_ in resource_slices(stack):
            life.admin.create(slice_)
        tenant = next(tenant for tenant in stack.config.tenants if tenant.name == "training")
        training = Kube(life.engine.kubeconfig, user="training-member", group=tenant.rbac_group)
        training.create(template("one", "training", WHOLE))
        training.create(pod("holding", "training", template_name="one"))
        running(training, "holding", "training")
        devices = allocated(training, "training", "holding")
        assert len(devices) == 1

        planned = life.change("allocation mode back to the device plugin",
                              lambda config: config.update({f"{PROJECT}:allocationMode": "devicePlugin"}))
        ops = {urn.rsplit("::", 1)[-1]: op for urn, op in planned.items()}
        assert ops["dra-gpu-cluster"] == "delete" and ops["cluster-policy-cluster-policy"] == "create", ops
        destructive = {item["what"]: item["takes_away"] for item in life.review["summary"]["destructive"]}
        assert "allocation mode dra -> devicePlugin" in destructive, destructive
        assert "DRA driver" in destructive["allocation mode dra -> devicePlugin"]
        assert life.admin.get("nvidia.com/v1alpha1", "GPUCluster", "gpu-cluster") is None

        # As the line says: the running pod keeps its device, claims no longer allocate (a new one is refused), and
        # the tenant can no longer touch its claims or templates.
        line = destructive["allocation mode dra -> devicePlugin"]
        assert "pods holding devices keep them until they end" in line and "claim templates stay" in line
        assert training.get("v1", "Pod", "holding", "training")["status"]["phase"] == "Running"
        assert allocated(life.admin, "training", "holding") == devices
        assert life.admin.get(RESOURCE, "DeviceClass", WHOLE) is None
        another = pod("another", "training", template_name="one")
        another["spec"]["tolerations"] = []  # else refused first as a pod on GPU nodes without nvidia.com/gpu
        assert "resource claims (DRA) are not offered" in refusal(lambda: training.create(another))
        assert "forbidden" in refusal(lambda: training.delete(RESOURCE, "ResourceClaimTemplate", "one", "training"))
        training.close()
