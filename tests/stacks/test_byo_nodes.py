"""Bring-your-own pools' nodes, as the live check reads and judges them (against a stand-in API server here, and the
real one in e2e/test_stacks.py)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from components import labels
from stacks.byo_nodes import TAINT, ByoNodesError, LiveNode, check_byo_nodes, read_byo_nodes, selector
from stacks.config import parse_stack_config
from tests.conftest import config_values
from tests.stacks.test_discovery import api, discovery, kubeconfig  # noqa: F401 - the stand-in API server fixture

POOLS = parse_stack_config(config_values("onprem")).node_pools  # dgx-a100 (2 nodes), l40s-inference (4, shared)


def node(name: str, pool: str, *, tainted: bool = True, config: str | None = None) -> LiveNode:
    node_labels = {"example.com/gpu-pool": pool}
    if config:
        node_labels[labels.DEVICE_PLUGIN_CONFIG_LABEL] = config
    return LiveNode(name, node_labels, frozenset({TAINT} if tainted else {"other:NoExecute"}))


def as_declared() -> dict[str, list[LiveNode]]:
    return {"dgx-a100": [node(f"dgx-{i}", "dgx-a100") for i in range(2)],
            "l40s-inference": [node(f"l40s-{i}", "l40s-inference", config="l40s-inference") for i in range(4)]}


def test_nodes_as_declared_pass_without_warnings() -> None:
    assert check_byo_nodes(POOLS, as_declared()) == []


def test_an_untainted_node_is_refused_with_the_command_that_taints_it() -> None:
    nodes = as_declared()
    nodes["dgx-a100"][1] = node("dgx-1", "dgx-a100", tainted=False)
    with pytest.raises(ByoNodesError) as refused:
        check_byo_nodes(POOLS, nodes)
    assert str(refused.value) == (
        "gpu-platform:nodePools: pool 'dgx-a100' nodes dgx-1 lack the GPU taint nvidia.com/gpu:NoSchedule, so any "
        "pod could run there; taint them: kubectl taint nodes dgx-1 nvidia.com/gpu:NoSchedule")


def test_a_shared_pools_node_must_select_the_pools_device_plugin_config() -> None:
    nodes = as_declared()
    nodes["l40s-inference"][2] = node("l40s-2", "l40s-inference")
    with pytest.raises(ByoNodesError, match=r"nodes l40s-2 do not carry nvidia.com/device-plugin.config=l40s-inference; label them: "
                                            r"kubectl label nodes l40s-2 --overwrite "
                                            r"nvidia.com/device-plugin.config=l40s-inference$"):
        check_byo_nodes(POOLS, nodes)


def with_labels(base: LiveNode, **extra: str) -> LiveNode:
    return LiveNode(base.name, {**base.labels, **extra}, base.taints)


@pytest.mark.parametrize(("key", "value", "fix"), [
    (labels.MIG_CONFIG_LABEL, "all-1g.10gb", "kubectl label nodes dgx-1 --overwrite nvidia.com/mig.config=all-disabled"),
    (labels.DEVICE_PLUGIN_CONFIG_LABEL, "l40s-inference", "kubectl label nodes dgx-1 nvidia.com/device-plugin.config-"),
])
def test_a_whole_gpu_node_still_cut_or_shared_is_refused_with_the_command_that_clears_it(key: str, value: str,
                                                                                        fix: str) -> None:
    """A node left with a MIG layout or another pool's sharing advertises slices or shares while the stack counts
    whole GPUs."""
    nodes = as_declared()
    nodes["dgx-a100"][1] = with_labels(nodes["dgx-a100"][1], **{key: value})
    with pytest.raises(ByoNodesError) as refused:
        check_byo_nodes(POOLS, nodes)
    assert f"carry {key}={value}, so they advertise what the pool does not count; relabel them: {fix}" in \
        str(refused.value)


def test_mig_off_and_the_pools_own_config_are_whole_gpus() -> None:
    nodes = as_declared()
    nodes["dgx-a100"] = [with_labels(n, **{labels.MIG_CONFIG_LABEL: "all-disabled",
                                           labels.DEVICE_PLUGIN_CONFIG_LABEL: "dgx-a100",
                                           labels.GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}) for n in nodes["dgx-a100"]]
    assert check_byo_nodes(POOLS, nodes) == []


def test_a_node_of_another_gpu_is_refused() -> None:
    nodes = as_declared()
    nodes["dgx-a100"][0] = with_labels(nodes["dgx-a100"][0], **{labels.GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB"})
    with pytest.raises(ByoNodesError, match=r"pool 'dgx-a100' declares NVIDIA-A100-SXM4-80GB but nodes dgx-0 report "
                                            r"nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB; set bringYourOwn.gpuModel"):
        check_byo_nodes(POOLS, nodes)


def test_a_node_two_pools_select_is_refused() -> None:
    nodes = as_declared()
    nodes["l40s-inference"].append(nodes["dgx-a100"][0])
    with pytest.raises(ByoNodesError, match="node dgx-0 is selected by pools 'dgx-a100' and 'l40s-inference'"):
        check_byo_nodes(POOLS, nodes)


def test_a_pool_with_fewer_or_more_nodes_than_declared_is_a_warning() -> None:
    nodes = as_declared()
    nodes["dgx-a100"].pop()
    nodes["l40s-inference"].append(node("l40s-9", "l40s-inference", config="l40s-inference"))
    assert check_byo_nodes(POOLS, nodes) == [
        "pool 'dgx-a100' declares 2 nodes but 1 match example.com/gpu-pool=dgx-a100; quotas and policies count 2",
        "pool 'l40s-inference' declares 4 nodes but 5 match example.com/gpu-pool=l40s-inference; quotas and "
        "policies count 4"]


def test_the_selector_is_the_pools_labels() -> None:
    assert selector(POOLS[0]) == "example.com/gpu-pool=dgx-a100"


def test_each_pool_is_read_by_its_selector_with_its_taints(api, tmp_path) -> None:
    """Against the stand-in API server: the node list as the API server sends it, one request per pool."""
    api.nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx-0", "labels": {
        "example.com/gpu-pool": "dgx-a100"}}, "spec": {"taints": [
            {"key": labels.GPU_TAINT["key"], "effect": labels.GPU_TAINT["effect"]},
            {"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]}}]
    nodes = read_byo_nodes(discovery(kubeconfig(tmp_path / "config", {"c": api.url}, "c")), POOLS)
    assert nodes == {"dgx-a100": [LiveNode("dgx-0", {"example.com/gpu-pool": "dgx-a100"},
                                           frozenset({TAINT, "maintenance=soon:NoSchedule"}))],
                     "l40s-inference": []}
    assert sorted(parse_qs(urlsplit(path).query)["labelSelector"][0] for path, _ in api.requests) == sorted(
        selector(pool) for pool in POOLS if pool.bring_your_own)


@pytest.mark.parametrize("item", [{"metadata": {"name": 7}}, {"metadata": {}}, "node",
                                  {"metadata": {"name": "n", "labels": {"a": 1}}},
                                  {"metadata": {"name": "n"}, "spec": {"taints": [{"effect": "NoSchedule"}]}}])
def test_an_item_that_is_not_a_node_is_one_line(api, tmp_path, item) -> None:
    api.nodes = [{"metadata": {"name": "dgx-0", "labels": {"example.com/gpu-pool": "dgx-a100"}}}]
    api.answer_items = [item]
    with pytest.raises(ByoNodesError, match="with an item that is not a v1 Node; check that the kubeconfig's server"):
        read_byo_nodes(discovery(kubeconfig(tmp_path / "config", {"c": api.url}, "c")), POOLS)
