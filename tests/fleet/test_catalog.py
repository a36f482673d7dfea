"""fleet.catalog: the GPU instance types, the node OSes with drivers, and what each OpenShift minor's nodes run."""

from __future__ import annotations

import pytest

from fleet.catalog import (INSTANCE_TYPES, KUBERNETES_OSES, NODE_OSES, OPENSHIFT_KUBERNETES, OPENSHIFT_RELEASES,
                           node_os_of)


@pytest.mark.parametrize(("instance_type", "model", "gpus"), [
    ("g4dn.xlarge", "Tesla-T4", 1), ("g4dn.12xlarge", "Tesla-T4", 4), ("g5.48xlarge", "NVIDIA-A10G", 8),
    ("g6.xlarge", "NVIDIA-L4", 1), ("p4d.24xlarge", "NVIDIA-A100-SXM4-40GB", 8),
    ("p5.48xlarge", "NVIDIA-H100-80GB-HBM3", 8),
])
def test_instance_types_carry_their_gpus(instance_type: str, model: str, gpus: int) -> None:
    instance = INSTANCE_TYPES[instance_type]

    assert (instance.gpu_model, instance.gpus) == (model, gpus)


def test_every_instance_type_has_a_shape_to_scale_from_zero() -> None:
    for name, instance in INSTANCE_TYPES.items():
        assert instance.gpus >= 1 and instance.gpu_memory_gib > 0, name
        assert instance.vcpus > 0 and instance.memory_mib >= 1024, name


def test_node_oses_are_ubuntu_and_the_openshift_node_oses_as_the_operator_keys_them() -> None:
    assert set(NODE_OSES) == {"ubuntu22.04", "ubuntu24.04", "rhcos4.18", "rhel9"}


def test_kubernetes_oses_are_the_non_openshift_ones() -> None:
    assert KUBERNETES_OSES == ("ubuntu22.04", "ubuntu24.04")
    assert not any(NODE_OSES[name].openshift for name in KUBERNETES_OSES)
    assert all(NODE_OSES[release.node_os].openshift for release in OPENSHIFT_RELEASES.values())


def test_every_supported_openshift_minor_has_its_node_os_and_a_kubernetes_minor() -> None:
    assert OPENSHIFT_KUBERNETES == {"4.18": "1.31", "4.19": "1.32", "4.20": "1.33", "4.21": "1.34", "4.22": "1.35"}
    assert {minor: release.node_os for minor, release in OPENSHIFT_RELEASES.items()} == {
        "4.18": "rhcos4.18", "4.19": "rhel9", "4.20": "rhel9", "4.21": "rhel9", "4.22": "rhel9"}
    assert {minor: release.version_id for minor, release in OPENSHIFT_RELEASES.items()} == {
        "4.18": "4.18", "4.19": "9.6", "4.20": "9.6", "4.21": "9.6", "4.22": "9.8"}
    for release in OPENSHIFT_RELEASES.values():
        assert release.is_kernel(release.kernel_example)
        assert NODE_OSES[release.node_os].is_kernel(release.kernel_example)


@pytest.mark.parametrize("name", list(NODE_OSES))
def test_tag_suffix_is_the_os_name_and_the_example_kernel_matches(name: str) -> None:
    node_os = NODE_OSES[name]

    assert node_os.tag_suffix == name
    assert node_os.is_kernel(node_os.kernel_example)


@pytest.mark.parametrize(("name", "kernel", "valid"), [
    ("ubuntu22.04", "6.8.0-1021-aws", True),
    ("ubuntu24.04", "6.8.0-1019-nvidia", True),
    ("ubuntu22.04", "6.8.0-45-generic", True),
    ("ubuntu22.04", "6.8.0-1021", False),
    ("ubuntu22.04", "6.8.0-aws", False),
    ("ubuntu22.04", "6.8.0-1021-aws ", False),
    ("ubuntu22.04", "6.8.0-1021-aws\n", False),
    ("rhcos4.18", "5.14.0-427.87.1.el9_4.x86_64\n", False),
    ("ubuntu24.04", "5.14.0-427.87.1.el9_4.x86_64", False),
    ("rhcos4.18", "5.14.0-427.87.1.el9_4.x86_64", True),
    ("rhel9", "5.14.0-570.49.1.el9_6.aarch64", True),
    ("rhcos4.18", "5.14.0-427.87.1.el9_4", False),
    ("rhel9", "5.14.0-427.50.1.el8.x86_64", False),
    # 4.18 ships RHEL 9.4 kernels; 4.19 to 4.21 RHEL 9.6, 4.22 RHEL 9.8: rhel9 takes the minors of 4.19 to 4.22.
    ("rhcos4.18", "5.14.0-570.28.1.el9_6.x86_64", False),
    ("rhel9", "5.14.0-427.87.1.el9_4.x86_64", False),
    ("rhel9", "5.14.0-570.28.1.el9_6.x86_64", True),
    ("rhel9", "5.14.0-687.35.1.el9_8.x86_64", True),
    ("rhcos4.18", "6.8.0-1021-aws", False),
])
def test_kernel_patterns_tell_the_oses_apart(name: str, kernel: str, valid: bool) -> None:
    assert NODE_OSES[name].is_kernel(kernel) is valid


@pytest.mark.parametrize(("minor", "kernel", "valid"), [
    ("4.18", "5.14.0-427.87.1.el9_4.x86_64", True), ("4.19", "5.14.0-570.28.1.el9_6.x86_64", True),
    ("4.20", "5.14.0-687.35.1.el9_8.x86_64", False), ("4.22", "5.14.0-570.49.1.el9_6.x86_64", False),
    ("4.22", "5.14.0-687.35.1.el9_8.x86_64", True),
])
def test_each_release_takes_the_kernels_of_its_rhel_minor(minor: str, kernel: str, valid: bool) -> None:
    assert OPENSHIFT_RELEASES[minor].is_kernel(kernel) is valid


@pytest.mark.parametrize(("release", "name"), [
    (("ubuntu", "22.04"), "ubuntu22.04"), (("ubuntu", "24.04"), "ubuntu24.04"), (("rhcos", "4.18"), "rhcos4.18"),
    (("rhel", "9.6"), "rhel9"), (("rhel", "9.8"), "rhel9"),
])
def test_nfd_os_release_labels_map_to_an_os(release: tuple[str, str], name: str) -> None:
    assert node_os_of(*release) == name


@pytest.mark.parametrize("release", [("rhcos", "4.16"), ("rhcos", "4.19"), ("ubuntu", "20.04"), ("rhel", "8.10"),
                                     ("rhel", None), (None, "9.6")])
def test_unsupported_os_releases_have_no_os(release: tuple[str | None, str | None]) -> None:
    assert node_os_of(*release) is None
