"""components.efa: prod's H100 pool with `fabric: efa`: interfaces, placement group, autoscaler tag, device plugin."""

from __future__ import annotations

from components import labels
from components.efa import EFA_DEVICE_PLUGIN_CHART, efa_network_interfaces
from tests.conftest import Plan


def test_launch_template_carries_one_efa_per_network_card(prod_plan: Plan) -> None:
    template = prod_plan.named("pool-h100-training-launch-template")["inputs"]
    interfaces = template["networkInterfaces"]
    assert len(interfaces) == 32  # p5.48xlarge
    assert interfaces[0] == {"deviceIndex": 0, "networkCardIndex": 0, "interfaceType": "efa",
                             "securityGroups": ["sg-0d4e5f60718293a4b"], "deleteOnTermination": "true"}
    assert {(i["deviceIndex"], i["networkCardIndex"]) for i in interfaces[1:]} == {(1, card) for card in range(1, 32)}
    assert "vpcSecurityGroupIds" not in template  # EC2 refuses both
    plain = prod_plan.named("pool-a10g-batch-launch-template")["inputs"]
    assert "networkInterfaces" not in plain and plain["vpcSecurityGroupIds"] == ["sg-0d4e5f60718293a4b"]


def test_pool_launches_in_its_placement_group_and_subnet(prod_plan: Plan) -> None:
    group = prod_plan.named("efa-h100-training-placement")["inputs"]
    assert group == {"name": "prod-gpu-gpu-h100-training", "strategy": "cluster"}
    asg = prod_plan.named("pool-h100-training-asg")
    assert asg["inputs"]["placementGroup"] == "prod-gpu-gpu-h100-training"
    assert asg["inputs"]["vpcZoneIdentifiers"] == ["subnet-0a1b2c3d4e5f60718"]
    assert prod_plan.depends_on(asg, "efa-h100-training-placement")
    tags = {tag["key"]: tag["value"] for tag in asg["inputs"]["tags"]}
    assert tags[labels.CA_RESOURCE_TAG.format(resource="vpc.amazonaws.com/efa")] == "32"
    plain = {tag["key"] for tag in prod_plan.named("pool-a10g-batch-asg")["inputs"]["tags"]}
    assert not any("efa" in key for key in plain)


def test_device_plugin_is_a_pinned_release_on_gpu_nodes(prod_plan: Plan) -> None:
    release = prod_plan.named("efa-device-plugin")["inputs"]
    # A chart version aws/eks-charts published (its Chart.yaml spells it with the "v").
    assert (release["chart"], release["version"], release["namespace"]) == (
        "aws-efa-k8s-device-plugin", "v0.5.20", "kube-system") == (
        EFA_DEVICE_PLUGIN_CHART.chart, EFA_DEVICE_PLUGIN_CHART.version, "kube-system")
    assert release["repositoryOpts"] == {"repo": "https://aws.github.io/eks-charts"}
    # The chart's only placement values: `tolerations` (beside its own CriticalAddonsOnly) and `nodeSelector`.
    assert set(release["values"]) == {"tolerations", "nodeSelector"}
    assert release["values"]["tolerations"] == [labels.GPU_TOLERATION]
    assert release["values"]["nodeSelector"] == {labels.NVIDIA_PCI_LABEL: "true"}


def test_no_fabric_no_efa(dev_plan: Plan) -> None:
    assert not any("efa" in r["name"] for r in dev_plan.resources)
    assert efa_network_interfaces(0, ("sg-1",)) == []
