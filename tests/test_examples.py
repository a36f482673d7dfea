"""The example stack files under examples/ (the docs point at them): each renders, passes every policy, and its
custom resources are valid against their real CRDs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.dra import quota_key
from gpuctl.check import check_plan
from gpuctl.render import render_plan, write_render
from gpuctl.stackfile import load_stack_file
from tests.conftest import ROOT, Plan
from tests.test_crds import CHECKER, METADATA_ARTEFACT, crd_check

EXAMPLES = sorted((ROOT / "examples").glob("Pulumi.*.yaml"))


@pytest.fixture(scope="module", params=EXAMPLES, ids=[path.name for path in EXAMPLES])
def example(request) -> Plan:
    return Plan(render_plan(load_stack_file(request.param)))


def test_there_is_an_example_of_queue_tenancy() -> None:
    assert ROOT / "examples" / "Pulumi.queue.yaml" in EXAMPLES


def test_the_example_passes_every_policy(example: Plan) -> None:
    assert check_plan(example.document) == []


@pytest.mark.skipif(not CHECKER.is_file(), reason=f"{CHECKER} is not beside the project here")
def test_the_examples_custom_resources_match_their_crds(example: Plan, tmp_path: Path) -> None:
    write_render(example.document, tmp_path / "render")
    report = crd_check(tmp_path / "render" / "manifests")
    assert report["checked"] > 0
    assert [error for error in report["errors"] if not error.endswith(METADATA_ARTEFACT)] == []


def test_the_queue_example_guarantees_what_its_tenants_declare(example: Plan) -> None:
    tenants = example.outputs["tenants"]
    if not all(tenant.get("tenancy") == "queue" for tenant in tenants.values()):
        pytest.skip("not a queue example")
    queues = {queue["metadata"]["name"]: queue["spec"] for queue in example.kind("ClusterQueue")}
    # Allocation mode dra: the queues count each DeviceClass (its quota key), of the kind the class serves.
    classes = {quota_key(name): entry["kind"] for name, entry in example.outputs.get("deviceClasses", {}).items()}
    for name, tenant in tenants.items():
        guaranteed: dict[str, int] = {}
        for group in queues[name]["resourceGroups"]:
            for flavor in group["flavors"]:
                for quota in flavor["resources"]:
                    kind = classes.get(quota["name"], quota["name"])
                    if kind.startswith("nvidia.com/"):
                        guaranteed[kind] = guaranteed.get(kind, 0) + quota["nominalQuota"]
        assert {kind: n for kind, n in guaranteed.items() if n} == {k: n for k, n in tenant["grants"].items() if n}
        # ... within a ceiling of every kind (per class in mode dra): the guarantee and what it may borrow.
        [ceiling] = [quota["spec"]["hard"] for quota in example.kind("ResourceQuota")
                     if quota["metadata"]["name"] == "gpu-quota" and quota["metadata"]["namespace"] == name]
        if classes:
            held = {kind: sum(int(ceiling[key]) for key, of in classes.items() if of == kind) for kind in guaranteed}
        else:
            assert set(ceiling) == {f"requests.{kind}" for kind in guaranteed}
            held = {kind: int(ceiling[f"requests.{kind}"]) for kind in guaranteed}
        assert all(held[kind] == amount + tenant["borrowable"].get(kind, 0) for kind, amount in guaranteed.items())


def test_there_is_an_example_on_a_current_openshift_release_whose_nodes_get_the_rhel9_driver() -> None:
    from fleet.catalog import OPENSHIFT_RELEASES
    from tests import operator_rules

    example = Plan(render_plan(load_stack_file(ROOT / "examples" / "Pulumi.openshift-4-20.yaml")))
    release = OPENSHIFT_RELEASES["4.20"]
    node = {"feature.node.kubernetes.io/pci-10de.present": "true",
            "feature.node.kubernetes.io/kernel-version.full": release.kernel_example, **release.nfd_labels()}

    assert operator_rules.owners(example.kind("NVIDIADriver"), node) == ["nvidia-driver-rhel9"]
    assert list(example.outputs["driverImages"].values()) == ["nvcr.io/nvidia/driver:580.95.05-rhel9"]
