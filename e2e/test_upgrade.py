"""An OpenShift upgrade walked node by node under the real engine, against the real API server: 4.18 -> 4.19 -> 4.20.

dev is deployed on 4.18 by `pulumi up` (the engine of e2e/engine.py on a project copy and a control plane of its own,
as e2e/test_engine_lifecycle.py starts it: live discovery reads the kwok nodes, a stand-in for OLM resolves the
Subscriptions). Its kwok GPU nodes carry the labels NFD gives 4.18 nodes (fleet.catalog, OpenShiftRelease.nfd_labels).
Each release change is an edit of the stack file deployed by `pulumi up`; the Machine Config Operator's reboot of a node
into the new release is a stand-in: the node is relabelled as NFD relabels it, one node, then the rest, and the stack is
deployed again after each. Every deploy is previewed first by gpuctl (against the engine's exported state) and by the
engine, which must plan the same URNs with the same operation each. At every step the API server evaluates each
NVIDIADriver's nodeSelector as a label selector: each GPU node must be selected by exactly one, the one the step
expects, and the cluster holds the NVIDIADrivers the step expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components import labels
from e2e.cluster import ControlPlane
from e2e.conftest import CRDS, Applied, apply_stack, prepare_cluster
from e2e.kube import Kube
from e2e.stack import Stack
from e2e.test_engine_lifecycle import PROJECT, Edit, Lifecycle, started
from fleet.catalog import OPENSHIFT_RELEASES
from tests.conftest import ROOT

DRIVER_API = ("nvidia.com/v1alpha1", "NVIDIADriver")
DRIVER_TYPE = "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"
RHCOS_DRIVER, RHEL_DRIVER = "nvidia-driver-rhcos4-18", "nvidia-driver-rhel9"
# The releases walked to from dev's own (4.18.24, RHEL 9.4), each with a kernel of its RHEL minor (4.19 and 4.20: RHEL
# 9.6) and the NFD operator of the release (as `oc get packagemanifest nfd` names it there).
RELEASES = {"4.19": ("4.19.10", "5.14.0-570.28.1.el9_6.x86_64", "nfd.4.19.0-202509240837"),
            "4.20": ("4.20.8", "5.14.0-570.49.1.el9_6.x86_64", "nfd.4.20.0-202607290013")}
OLD_KERNEL = "rhcos4.18/5.14.0-427.87.1.el9_4.x86_64"  # dev's kernel row (Pulumi.dev.yaml)


def on_release(minor: str) -> Edit:
    """The edit of dev's stack file that declares an OpenShift release: `cluster.release`, its kernel, its NFD CSV."""
    release, kernel, nfd_csv = RELEASES[minor]

    def edit(config: dict[str, Any]) -> None:
        config[f"{PROJECT}:cluster"].update(release=release, kernel=kernel, nfdOperatorCsv=nfd_csv)
    return edit


def unchanged(config: dict[str, Any]) -> None:
    """No edit: the stack deployed again as it is (the deploy after nodes rebooted)."""


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


def leaving(review: dict[str, Any]) -> list[str]:
    """What gpuctl's review says goes: each driver it lists as destructive, and each kernel row removed, with why."""
    summary = review["summary"]
    return [f"{item['what']}: {item['takes_away']}" for item in summary["destructive"]
            if item["what"].startswith("driver ")] + \
        [f"{row['key']}: removed, {row['note']}" for row in summary["kernels"] if row["change"] == "removed"]


def driver_steps(planned: dict[str, str]) -> dict[str, str]:
    """The NVIDIADrivers a plan changes: resource name -> operation."""
    return {urn.rsplit("::", 1)[-1]: op for urn, op in planned.items()
            if urn.split("::")[2].split("$")[-1] == DRIVER_TYPE and op != "same"}


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Lifecycle]:
    """dev on 4.18, previewed by gpuctl and the engine alike (every resource created), deployed by `pulumi up` with the
    policy pack; its GPU nodes labelled as NFD labels 4.18 nodes."""
    with started("dev", tmp_path) as life:
        assert set(life.compare("dev on 4.18, a new stack", base=False).values()) == {"create"}
        life.engine.up(policy_pack=ROOT / "policy")
        life.commit("dev on 4.18")
        yield life


def test_every_gpu_node_is_served_by_exactly_one_driver_at_every_step_of_an_upgrade(dev: Lifecycle) -> None:
    admin = dev.admin
    nodes = gpu_nodes(admin)
    assert len(nodes) >= 2
    first, rest = nodes[0], nodes[1:]
    steps: list[tuple[str, dict[str, list[str]], list[str], dict[str, list[str]], list[str]]] = []

    def expect(step: str, served: dict[str, str], drivers: list[str]) -> None:
        """What the API server says now, and what the step expects: each GPU node's drivers, and the drivers."""
        held = sorted(driver["metadata"]["name"] for driver in admin.list(*DRIVER_API))
        steps.append((step, owners(admin), held, {node: [driver] for node, driver in served.items()}, drivers))

    def deploy(what: str, edit: Edit, steps_expected: bool) -> tuple[dict[str, str], list[str]]:
        """The edit, gpuctl's preview and the engine's agreeing op by op, then `pulumi up`: the NVIDIADrivers the plan
        changes, and what gpuctl's review says goes. (Anything `up` left undone would show in the next deploy's
        comparison; after the last, it is checked.)"""
        dev.edit(edit)
        planned = dev.compare(what, steps_expected=steps_expected)
        dev.engine.up(policy_pack=ROOT / "policy")
        dev.commit(what)
        return driver_steps(planned), leaving(dev.review)

    everyone = dict.fromkeys
    both = [RHCOS_DRIVER, RHEL_DRIVER]
    expect("4.18 deployed", everyone(nodes, RHCOS_DRIVER), [RHCOS_DRIVER])
    # 4.19 declared: its driver is created before any node reboots, and selects none yet; the 4.18 driver stays.
    assert deploy("4.19 declared", on_release("4.19"), True) == ({"driver-rhel9": "create"}, [])
    assert dev.review["summary"]["upgrade"][-1] == (
        f"after it: every GPU node is served by {RHEL_DRIVER}; {RHCOS_DRIVER} stays while nodes run rhcos4.18; it goes "
        "in the first deploy whose inventory shows none")
    expect("4.19 deployed, no node rebooted yet", everyone(nodes, RHCOS_DRIVER), both)
    reboot_into(admin, first, "4.19")
    expect(f"{first} rebooted into 4.19", {**everyone(rest, RHCOS_DRIVER), first: RHEL_DRIVER}, both)
    # Deployed again mid-upgrade: nodes still run 4.18 (live discovery), so its driver stays; nothing changes.
    assert deploy("deployed mid-upgrade", unchanged, False) == ({}, [])
    expect("deployed mid-upgrade", {**everyone(rest, RHCOS_DRIVER), first: RHEL_DRIVER}, both)
    for node in rest:
        reboot_into(admin, node, "4.19")
    expect("every node on 4.19, not deployed yet", everyone(nodes, RHEL_DRIVER), both)
    # The first deploy whose inventory shows no 4.18 node deletes its driver, and only that; gpuctl says why.
    assert deploy("deployed after the upgrade", unchanged, True) == ({"driver-rhcos4-18": "delete"}, [
        f"driver {RHCOS_DRIVER} deleted: the GPU driver of every node on rhcos4.18 (every kernel)",
        f"{OLD_KERNEL}: removed, no pool boots it and live discovery shows no node on it"])
    expect("deployed after the upgrade", everyone(nodes, RHEL_DRIVER), [RHEL_DRIVER])
    # 4.20 nodes are rhel9 to the operator too: no driver changes, and the review says so.
    assert deploy("4.20 declared", on_release("4.20"), True) == ({}, [])
    assert dev.review["summary"]["upgrade"][0].startswith("OpenShift 4.19.10 -> 4.20.8 (a minor upgrade): no driver "
                                                          "changes")
    reboot_into(admin, first, "4.20")
    expect(f"4.20 deployed, {first} rebooted into it", everyone(nodes, RHEL_DRIVER), [RHEL_DRIVER])
    for node in rest:
        reboot_into(admin, node, "4.20")
    assert deploy("every node on 4.20, deployed", unchanged, False) == ({}, [])
    dev.deployed("every node on 4.20, deployed")
    expect("every node on 4.20, deployed", everyone(nodes, RHEL_DRIVER), [RHEL_DRIVER])

    assert [(step, found, held) for step, found, held, _, _ in steps] == \
        [(step, served, drivers) for step, _, _, served, drivers in steps]


def test_the_4_20_example_applies_and_its_nodes_each_get_one_driver(tools, tmp_path_factory) -> None:
    """examples/Pulumi.openshift-4-20.yaml against its own control plane: every object accepted, and each of its
    GPU nodes (labelled as NFD labels 4.20 nodes) selected by nvidia-driver-rhel9 alone."""
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is not beside the project here")
    import yaml

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
