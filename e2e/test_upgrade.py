"""An OpenShift upgrade walked node by node against the real API server: 4.18 -> 4.19 -> 4.20.

kwok nodes carry the labels NFD gives each release's nodes (fleet.catalog, OpenShiftRelease.nfd_labels); the Machine
Config Operator's reboot of a node into the new release is a stand-in: the node is relabelled as NFD would relabel
it. Each deploy renders the dev stack with the GPU nodes read from the API server (the inventory evidence `pulumi
up` reads by live discovery), applies its NVIDIADrivers with server-side apply and deletes the NVIDIADrivers the
render no longer has: a stand-in for what `pulumi up` does to the drivers, whose own runs the engine suites make. At
every step the API server evaluates each NVIDIADriver's nodeSelector as a label selector, and each GPU node must be
selected by exactly one, the one the step expects.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from components import labels
from e2e.cluster import ControlPlane
from e2e.conftest import CRDS, Applied, apply_stack, prepare_cluster
from e2e.kube import Kube
from e2e.stack import Stack
from fleet.catalog import OPENSHIFT_RELEASES
from stacks.inventory import parse_node_list
from tests.conftest import render_stack, stack_config

DRIVER_API = ("nvidia.com/v1alpha1", "NVIDIADriver")
RHCOS_DRIVER, RHEL_DRIVER = "nvidia-driver-rhcos4-18", "nvidia-driver-rhel9"
# The releases walked, each with a kernel of its RHEL minor (4.18: RHEL 9.4; 4.19 and 4.20: RHEL 9.6).
RELEASES = {"4.18": ("4.18.24", "5.14.0-427.87.1.el9_4.x86_64"), "4.19": ("4.19.10", "5.14.0-570.28.1.el9_6.x86_64"),
            "4.20": ("4.20.8", "5.14.0-570.49.1.el9_6.x86_64")}


def release_config(minor: str) -> dict[str, Any]:
    config = stack_config("dev")
    release, kernel = RELEASES[minor]
    config["gpu-platform:cluster"].update(release=release, kernel=kernel)
    if minor != "4.18":  # the NFD operator of the release (as `oc get packagemanifest nfd` names it there)
        config["gpu-platform:cluster"]["nfdOperatorCsv"] = {"4.19": "nfd.4.19.0-202509240837",
                                                            "4.20": "nfd.4.20.0-202607290013"}[minor]
    return config


def gpu_nodes(admin: Kube) -> list[str]:
    return sorted(node["metadata"]["name"] for node in admin.list("v1", "Node")
                  if node["metadata"].get("labels", {}).get(labels.NVIDIA_PCI_LABEL) == "true")


def owners(admin: Kube) -> dict[str, list[str]]:
    """Each GPU node -> the NVIDIADrivers whose nodeSelector the API server matches it with."""
    found: dict[str, list[str]] = {name: [] for name in gpu_nodes(admin)}
    for driver in admin.list(*DRIVER_API):
        selector = ",".join(f"{key}={value}" for key, value in sorted(driver["spec"]["nodeSelector"].items()))
        for node in admin.resource("v1", "Node").get(label_selector=selector).to_dict()["items"]:
            found.setdefault(node["metadata"]["name"], []).append(driver["metadata"]["name"])
    return {name: sorted(drivers) for name, drivers in found.items()}


def reboot_into(admin: Kube, node: str, minor: str) -> None:
    """Stand-in for the Machine Config Operator rebooting a node into a release: NFD relabels it."""
    kernel = RELEASES[minor][1]
    node_labels = {labels.KERNEL_LABEL: kernel, **OPENSHIFT_RELEASES[minor].nfd_labels()}
    admin.resource("v1", "Node").patch(name=node, body={"metadata": {"labels": node_labels}},
                                       content_type="application/merge-patch+json")


def deploy(admin: Kube, minor: str) -> list[str]:
    """Stand-in for what `pulumi up` of dev on `minor` does to the drivers: render with the live GPU nodes as the
    inventory, apply its NVIDIADrivers, delete those the render dropped. Returns the drivers the render has. (The
    engine replaces what else changes with the release, such as the install-plan approver's Job: its own suites.)"""
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"]} for node in admin.list("v1", "Node")]
    observed = parse_node_list({"apiVersion": "v1", "kind": "NodeList", "items": items}, "the API server")
    config = release_config(minor)
    stack = Stack.from_config("dev", config, render_stack("dev", copy.deepcopy(config), observed))
    drivers = [obj for obj in stack.objects() if obj["kind"] == DRIVER_API[1]]
    for obj in drivers:
        admin.apply(obj)
    declared = sorted(obj["metadata"]["name"] for obj in drivers)
    for driver in admin.list(*DRIVER_API):
        if driver["metadata"]["name"] not in declared:
            admin.delete(*DRIVER_API, driver["metadata"]["name"])
    return declared


@pytest.fixture(scope="module")
def cluster(tools, tmp_path_factory) -> Iterator[Kube]:
    """A control plane with dev on 4.18 applied, its GPU nodes labelled as NFD labels 4.18 nodes."""
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is not beside the project here: the NVIDIADriver CRD is needed")
    stack = Stack.render("dev")
    with ControlPlane.start(tmp_path_factory.mktemp("cluster-upgrade")) as plane:
        admin = prepare_cluster(stack, plane)
        applied = Applied(stack, plane, admin)
        apply_stack(applied)
        assert applied.rejected == {}
        yield admin
        admin.close()


def test_every_gpu_node_is_served_by_exactly_one_driver_at_every_step_of_an_upgrade(cluster: Kube) -> None:
    nodes = gpu_nodes(cluster)
    assert len(nodes) >= 2
    first, rest = nodes[0], nodes[1:]
    steps: list[tuple[str, dict[str, list[str]], dict[str, list[str]]]] = []

    def expect(step: str, served: dict[str, str]) -> None:
        steps.append((step, owners(cluster), {node: [driver] for node, driver in served.items()}))

    everyone = dict.fromkeys
    expect("4.18 deployed", everyone(nodes, RHCOS_DRIVER))
    assert deploy(cluster, "4.19") == [RHCOS_DRIVER, RHEL_DRIVER]  # declared before any node reboots
    expect("4.19 declared, no node rebooted yet", everyone(nodes, RHCOS_DRIVER))
    reboot_into(cluster, first, "4.19")
    expect(f"{first} rebooted into 4.19", {**everyone(rest, RHCOS_DRIVER), first: RHEL_DRIVER})
    assert deploy(cluster, "4.19") == [RHCOS_DRIVER, RHEL_DRIVER]  # nodes still run 4.18: its driver stays
    expect("deployed again mid-upgrade", {**everyone(rest, RHCOS_DRIVER), first: RHEL_DRIVER})
    for node in rest:
        reboot_into(cluster, node, "4.19")
    expect("every node on 4.19", everyone(nodes, RHEL_DRIVER))
    assert deploy(cluster, "4.19") == [RHEL_DRIVER]  # the inventory shows no 4.18 node: its driver goes
    expect("deployed after the upgrade", everyone(nodes, RHEL_DRIVER))
    assert deploy(cluster, "4.20") == [RHEL_DRIVER]  # 4.20 nodes are rhel9 too: no driver changes
    reboot_into(cluster, first, "4.20")
    expect(f"4.20 declared, {first} rebooted into it", everyone(nodes, RHEL_DRIVER))
    for node in rest:
        reboot_into(cluster, node, "4.20")
    assert deploy(cluster, "4.20") == [RHEL_DRIVER]
    expect("every node on 4.20, deployed", everyone(nodes, RHEL_DRIVER))

    assert [(step, found) for step, found, _ in steps] == [(step, wanted) for step, _, wanted in steps]


def test_the_4_20_example_applies_and_its_nodes_each_get_one_driver(tools, tmp_path_factory) -> None:
    """examples/Pulumi.openshift-4-20.yaml against its own control plane: every object accepted, and each of its
    GPU nodes (labelled as NFD labels 4.20 nodes) selected by nvidia-driver-rhel9 alone."""
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is not beside the project here")
    import yaml

    from tests.conftest import ROOT

    path = ROOT / "examples" / "Pulumi.openshift-4-20.yaml"
    stack = Stack.from_config("openshift-4-20", yaml.safe_load(path.read_text())["config"])
    with ControlPlane.start(tmp_path_factory.mktemp("cluster-example-4-20")) as plane:
        admin = prepare_cluster(stack, plane)
        applied = Applied(stack, plane, admin)
        apply_stack(applied)
        try:
            assert applied.rejected == {}
            found = owners(admin)
            assert found and found == dict.fromkeys(gpu_nodes(admin), [RHEL_DRIVER])
        finally:
            admin.close()
