"""stacks.inventory: kernel targets, their names and images, and the kernels observed on live GPU nodes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from stacks.config import ConfigError, parse_stack_config
from fleet.kernels import KernelInventory, KernelTarget, ObservedNode
from stacks.inventory import parse_node_list
from tests.conftest import config_values

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
UBUNTU = "6.8.0-1021-aws"
RHCOS = "5.14.0-427.50.1.el9_4.x86_64"


def node(name: str, kernel: str | None = RHCOS, os_id: str = "rhcos", version: str = "4.16",
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


# -- slug ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("os", "kernel"), [
    ("ubuntu22.04", UBUNTU),
    ("ubuntu24.04", "6.8.0-1019-nvidia"),
    ("rhcos4.16", RHCOS),
    ("rhcos4.18", "5.14.0-284.104.1.el9_2.aarch64"),
    ("ubuntu22.04", "6.8.0-1021-aws" + "-custom" * 12),
    ("rhcos4.16", "5.14.0-427.50.1.el9_4.X86_64+DEBUG"),
])
def test_slug_is_a_short_dns_label(os: str, kernel: str) -> None:
    slug = KernelTarget(os, kernel).slug

    assert DNS_LABEL.match(slug), slug
    assert len(slug) <= 40
    # Names derived from it stay within a DNS-1123 label too.
    assert len(f"nvidia-driver-{slug}") <= 63
    assert len(f"driver-validation-{slug}") <= 63


def test_slug_is_readable_for_real_kernels() -> None:
    assert KernelTarget("ubuntu22.04", UBUNTU).slug == "ubuntu22-04-6-8-0-1021-aws"
    assert KernelTarget("rhcos4.16", RHCOS).slug == "rhcos4-16-5-14-0-427-50-1-el9-4-x86-64"


def test_slug_is_stable_across_processes_and_releases() -> None:
    """Driver DaemonSet names derive from it: the same (os, kernel) must always give the same slug (a changed
    slug would replace every driver DaemonSet), so it cannot depend on Python's per-process string hash."""
    long_kernel = "6.8.0-1021-aws" + "-custom" * 12

    assert KernelTarget("ubuntu22.04", long_kernel).slug == "ubuntu22-04-6-8-0-1021-aws-cust-7b2bfcde"


def test_slug_is_distinct_for_distinct_targets() -> None:
    targets = {
        KernelTarget("ubuntu22.04", UBUNTU), KernelTarget("ubuntu24.04", UBUNTU),
        KernelTarget("ubuntu22.04", "6.8.0-1019-aws"), KernelTarget("ubuntu22.04", "6.8.0-1021-nvidia"),
        KernelTarget("rhcos4.16", RHCOS), KernelTarget("rhcos4.17", RHCOS),
        KernelTarget("rhcos4.16", "5.14.0-427.42.1.el9_4.x86_64"),
        KernelTarget("rhcos4.16", "5.14.0-427.50.1.el9_4.aarch64"),
    }
    long_base = "6.8.0-1021-aws" + "-custom" * 12
    targets |= {KernelTarget("ubuntu22.04", f"{long_base}-{n}") for n in range(20)}

    slugs = {target.slug for target in targets}

    assert len(slugs) == len(targets)


def test_very_long_kernels_are_hashed() -> None:
    """Two long kernels that differ only at the end keep the readable start and differ by their hash."""
    base = "6.8.0-1021-aws" + "-custom" * 12
    first, second = KernelTarget("ubuntu22.04", f"{base}-1"), KernelTarget("ubuntu22.04", f"{base}-2")

    assert first.slug != second.slug
    assert first.slug.startswith("ubuntu22-04-6-8-0-1021-aws")
    assert re.search(r"-[0-9a-f]{8}$", first.slug)
    assert first.slug[:-9] == second.slug[:-9]


# -- driver image -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("os", "kernel", "image"), [
    ("ubuntu22.04", UBUNTU, "nvcr.io/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04"),
    ("ubuntu24.04", "6.8.0-1019-nvidia", "nvcr.io/nvidia/driver:580-6.8.0-1019-nvidia-ubuntu24.04"),
    ("rhcos4.16", RHCOS, "nvcr.io/nvidia/driver:580-5.14.0-427.50.1.el9_4.x86_64-rhcos4.16"),
])
def test_driver_image_uses_nvidias_precompiled_tag_form(os: str, kernel: str, image: str) -> None:
    assert KernelTarget(os, kernel).driver_image("nvcr.io/nvidia", "580") == image


def test_driver_image_follows_repository_and_branch() -> None:
    image = KernelTarget("ubuntu22.04", UBUNTU).driver_image("registry.example.com:5000/mirror/nvidia", "570")

    assert image == "registry.example.com:5000/mirror/nvidia/driver:570-6.8.0-1021-aws-ubuntu22.04"


# -- parse_node_list ----------------------------------------------------------------------------------------------


def test_node_list_keeps_gpu_nodes_only() -> None:
    document = node_list(
        node("gpu-b", kernel="5.14.0-427.42.1.el9_4.x86_64"),
        node("cpu-1", gpu=None),
        node("cpu-2", gpu="false"),
        node("gpu-a"),
    )

    observed = parse_node_list(document, "nodes.json")

    assert observed == [
        ObservedNode("gpu-b", KernelTarget("rhcos4.16", "5.14.0-427.42.1.el9_4.x86_64")),
        ObservedNode("gpu-a", KernelTarget("rhcos4.16", RHCOS)),
    ]


def test_node_os_comes_from_nfd_os_release_labels() -> None:
    document = node_list(node("u1", kernel=UBUNTU, os_id="ubuntu", version="22.04"),
                         node("u2", kernel=UBUNTU, os_id="ubuntu", version="24.04"))

    observed = parse_node_list(document, "nodes.json")

    assert [n.target for n in observed] == [KernelTarget("ubuntu22.04", UBUNTU), KernelTarget("ubuntu24.04", UBUNTU)]


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


@pytest.mark.parametrize(("os_id", "version"), [("centos", "7"), ("ubuntu", "20.04"), ("rhcos", "4.12")])
def test_unknown_os_names_the_node_and_the_supported_ones(os_id: str, version: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_node_list(node_list(node("gpu-a", os_id=os_id, version=version)), "nodes.json")

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("nodes.json: GPU node gpu-a runs")
    assert f"{os_id} {version}" in message
    assert "ubuntu22.04" in message and "rhcos4.16" in message


# -- KernelInventory ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_config():
    return parse_stack_config(config_values("dev"))


def test_inventory_without_observation_is_the_declared_kernels(dev_config) -> None:
    inventory = KernelInventory.build(dev_config)

    assert set(inventory.targets) == {KernelTarget("rhcos4.16", RHCOS),
                                      KernelTarget("rhcos4.16", "5.14.0-427.42.1.el9_4.x86_64")}
    assert inventory.observed is False
    assert all(inventory.running(target) == () for target in inventory.targets)


def test_inventory_is_declared_union_observed(dev_config) -> None:
    old = KernelTarget("rhcos4.16", "5.14.0-427.40.1.el9_4.x86_64")
    observed = [ObservedNode("gpu-2", old), ObservedNode("gpu-1", old),
                ObservedNode("gpu-3", KernelTarget("rhcos4.16", RHCOS))]

    inventory = KernelInventory.build(dev_config, observed)

    declared = {KernelTarget(p.os, p.kernel) for p in dev_config.node_pools}
    assert set(inventory.targets) == declared | {old}
    assert len(inventory.targets) == 3  # no duplicates for a kernel both declared and observed
    assert inventory.targets == tuple(sorted(inventory.targets))
    assert inventory.running(old) == ("gpu-1", "gpu-2")
    assert inventory.running(KernelTarget("rhcos4.16", RHCOS)) == ("gpu-3",)
    assert inventory.running(KernelTarget("rhcos4.16", "5.14.0-427.42.1.el9_4.x86_64")) == ()
    assert inventory.observed is True


def test_empty_observation_still_counts_as_observed(dev_config) -> None:
    inventory = KernelInventory.build(dev_config, [])

    assert inventory.observed is True
    assert len(inventory.targets) == 2


def test_pools_sharing_a_kernel_share_a_target() -> None:
    config = parse_stack_config(config_values("prod"))

    inventory = KernelInventory.build(config)

    assert inventory.targets == (KernelTarget("ubuntu22.04", "6.8.0-1019-aws"), KernelTarget("ubuntu22.04", UBUNTU))


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
    with pytest.raises(ConfigError, match=r"gpu-1: kernel '6.8.0-1021-aws' is not a rhcos4.16 kernel"):
        parse_node_list(node_list(node("gpu-1", kernel=UBUNTU)), "nodes.json")
