"""The DRA example (examples/Pulumi.dra.yaml) under the real engine: `pulumi up` deploys it as gpuctl previews it, then
a switch of allocation mode, reviewed as the destructive change it is, deployed, and nothing left to change.

Stand-ins as for the engine lifecycle (e2e/test_engine_lifecycle.py): charts from a Helm repository on 127.0.0.1; and
the GPUCluster CRD (e2e/dra.py), which is neither among the reference CRDs nor served by the Go module proxy.
"""

from __future__ import annotations

from pathlib import Path

from e2e.dra import GPU_CLUSTER_CRD
from e2e.kube import apply_crds
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

        planned = life.change("allocation mode back to the device plugin",
                              lambda config: config.update({f"{PROJECT}:allocationMode": "devicePlugin"}))
        ops = {urn.rsplit("::", 1)[-1]: op for urn, op in planned.items()}
        assert ops["dra-gpu-cluster"] == "delete" and ops["cluster-policy-cluster-policy"] == "create", ops
        destructive = {item["what"]: item["takes_away"] for item in life.review["summary"]["destructive"]}
        assert "allocation mode dra -> devicePlugin" in destructive, destructive
        assert "DRA driver" in destructive["allocation mode dra -> devicePlugin"]
        assert life.admin.get("nvidia.com/v1alpha1", "GPUCluster", "gpu-cluster") is None
