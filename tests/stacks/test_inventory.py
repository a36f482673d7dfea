"""stacks.inventory: the GPU nodes of a `kubectl get nodes -o json` answer and the kernels they run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet.catalog import OPENSHIFT_RELEASES
from fleet.kernels import KernelTarget, ObservedNode
from stacks.config import ConfigError
from stacks import inventory
from stacks.inventory import parse_node_list

UBUNTU = "6.8.0-1021-aws"
RHCOS = "5.14.0-427.87.1.el9_4.x86_64"
OTHER_RHCOS = "5.14.0-427.65.1.el9_4.x86_64"


def node(name: str, kernel: str | None = RHCOS, os_id: str = "rhcos", version: str = "4.18",
         gpu: str | None = "true") -> dict[str, Any]:
    """A node of `kubectl get nodes -o json`, labelled the way NFD labels it."""
    node_labels = {"kubernetes.io/hostname": name}
    if gpu is not None:
        node_labels["feature.node.kubernetes.io/pci-10de.present"] = gpu
    if kernel is not None:
        node_labels["feature.node.kubernetes.io/kernel-version.full"] = kernel
    node_labels["feature.node.kubernetes.io/system-os_release.ID"] = os_id
    node_labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] = version
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels}}


def node_list(*items: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


# -- parse_node_list ----------------------------------------------------------------------------------------------


def test_node_list_keeps_gpu_nodes_only() -> None:
    document = node_list(
        node("gpu-b", kernel=OTHER_RHCOS),
        node("cpu-1", gpu=None),
        node("cpu-2", gpu="false"),
        node("gpu-a"),
    )

    observed = parse_node_list(document, "nodes.json")

    assert observed == [
        ObservedNode("gpu-b", KernelTarget("rhcos4.18", OTHER_RHCOS)),
        ObservedNode("gpu-a", KernelTarget("rhcos4.18", RHCOS)),
    ]


def test_node_os_comes_from_nfd_os_release_labels() -> None:
    document = node_list(node("u1", kernel=UBUNTU, os_id="ubuntu", version="22.04"),
                         node("u2", kernel=UBUNTU, os_id="ubuntu", version="24.04"))

    observed = parse_node_list(document, "nodes.json")

    assert [n.target for n in observed] == [KernelTarget("ubuntu22.04", UBUNTU), KernelTarget("ubuntu24.04", UBUNTU)]


@pytest.mark.parametrize(("minor", "kernel", "os_name"), [
    ("4.18", RHCOS, "rhcos4.18"),
    ("4.19", "5.14.0-570.28.1.el9_6.x86_64", "rhel9"), ("4.20", "5.14.0-570.49.1.el9_6.aarch64", "rhel9"),
    ("4.21", "5.14.0-570.49.1.el9_6.x86_64", "rhel9"), ("4.22", "5.14.0-687.35.1.el9_8.x86_64", "rhel9")])
def test_nodes_of_each_supported_openshift_release_are_read_as_the_operator_keys_them(
        minor: str, kernel: str, os_name: str) -> None:
    labelled = node("gpu-a", kernel=kernel)
    labelled["metadata"]["labels"].update(OPENSHIFT_RELEASES[minor].nfd_labels())

    [observed] = parse_node_list(node_list(labelled), "nodes.json")

    assert observed == ObservedNode("gpu-a", KernelTarget(os_name, kernel))


def test_a_node_list_written_for_the_cache_reads_back_the_same_nodes() -> None:
    nodes = [ObservedNode("gpu-a", KernelTarget("rhel9", "5.14.0-570.28.1.el9_6.x86_64")),
             ObservedNode("gpu-b", KernelTarget("rhcos4.18", RHCOS))]

    assert parse_node_list(inventory.node_list(nodes), "nodes.json") == nodes


def test_cpu_nodes_need_no_nfd_labels() -> None:
    bare = {"metadata": {"name": "cpu-1"}}
    assert parse_node_list(node_list(bare), "nodes.json") == []


@pytest.mark.parametrize("document", [
    [],
    {"kind": "NodeList"},
    {"items": "nodes"},
    "nodes",
    None,
])
def test_malformed_node_list_is_one_clear_line(document: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_node_list(document, "nodes.json")

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("nodes.json: not a node list")
    assert "kubectl get nodes -o json" in message


@pytest.mark.parametrize("item", [{"metadata": {}}, {"kind": "Node"}, "node-1", {"metadata": {"name": 7}}])
def test_item_without_a_name_is_named_by_index(item: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_node_list(node_list(node("gpu-a"), item), "nodes.json")

    assert str(caught.value).startswith("nodes.json: items[1] has no metadata.name")


def test_gpu_node_without_kernel_label_asks_about_nfd() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_node_list(node_list(node("gpu-a", kernel=None)), "nodes.json")

    message = str(caught.value)
    assert "gpu-a" in message and "feature.node.kubernetes.io/kernel-version.full" in message and "NFD" in message


@pytest.mark.parametrize(("os_id", "version"), [("centos", "7"), ("ubuntu", "20.04"), ("rhcos", "4.16")])
def test_unknown_os_names_the_node_and_the_supported_ones(os_id: str, version: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_node_list(node_list(node("gpu-a", os_id=os_id, version=version)), "nodes.json")

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("nodes.json: GPU node gpu-a runs")
    assert f"{os_id} {version}" in message
    assert "ubuntu22.04" in message and "rhcos4.18" in message


def test_a_pod_list_is_not_taken_for_no_gpu_nodes() -> None:
    pods = {"apiVersion": "v1", "kind": "PodList", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}

    with pytest.raises(ConfigError, match=r"^nodes.json: not a node list \(a PodList, expected a v1 NodeList\)"):
        parse_node_list(pods, "nodes.json")
    with pytest.raises(ConfigError, match=r"items\[0\] is a Pod, not a Kubernetes Node"):
        parse_node_list(node_list({"kind": "Pod", "metadata": {"name": "p"}}), "nodes.json")


@pytest.mark.parametrize(("node_labels", "expected"), [
    (["feature.node.kubernetes.io/pci-10de.present=true"], "labels must be a mapping"),
    ({"feature.node.kubernetes.io/kernel-version.full": "6.8.0-1021-aws;rm -rf /"},
     "not a valid Kubernetes label value"),
    ({"example.com/count": 3}, "not a valid Kubernetes label value"),
])
def test_node_labels_must_be_kubernetes_label_values(node_labels: Any, expected: str) -> None:
    item = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": node_labels}}

    with pytest.raises(ConfigError, match=expected):
        parse_node_list(node_list(item), "nodes.json")


def test_a_kernel_that_does_not_parse_for_its_os_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"gpu-1: kernel '6.8.0-1021-aws' is not a rhcos4.18 kernel"):
        parse_node_list(node_list(node("gpu-1", kernel=UBUNTU)), "nodes.json")


def test_a_label_value_with_a_trailing_newline_is_refused() -> None:
    """`$` would match before the newline: the node would need a driver of its own, for a kernel no node runs."""
    document = node_list(node("gpu-1", kernel=UBUNTU, os_id="ubuntu", version="22.04"),
                         node("gpu-2", kernel=f"{UBUNTU}\n", os_id="ubuntu", version="22.04"))

    with pytest.raises(ConfigError) as caught:
        parse_node_list(document, "nodes.json")

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("nodes.json: node gpu-2: label feature.node.kubernetes.io/kernel-version.full has "
                              "'6.8.0-1021-aws\\n', not a valid Kubernetes label value")


def test_a_node_named_twice_is_refused() -> None:
    """Two answers pasted together, or an edited file: which kernel that node runs is no longer clear."""
    document = node_list(node("gpu-a"), node("gpu-b"), node("gpu-a", kernel=OTHER_RHCOS))

    with pytest.raises(ConfigError) as raised:
        parse_node_list(document, "nodes.json")

    assert str(raised.value) == ("nodes.json: items[2] and items[0] are both node 'gpu-a'; a node list names each "
                                 "node once, so pass one `kubectl get nodes -o json` answer")


def test_a_node_list_of_observed_nodes_reads_back_as_them_in_name_order() -> None:
    # gpuctl preview writes the live nodes this way for its base render: the same nodes, the same bytes (its cache key).
    nodes = [ObservedNode("gpu-b", KernelTarget("rhcos4.18", "5.14.0-427.87.1.el9_4.x86_64")),
             ObservedNode("gpu-a", KernelTarget("ubuntu22.04", "6.8.0-1021-aws"))]
    document = inventory.node_list(nodes)
    assert parse_node_list(document, "test") == sorted(nodes, key=lambda node: node.name)
    assert json.dumps(inventory.node_list(list(reversed(nodes)))) == json.dumps(document)
