"""fleet.catalog: the GPU instance types, the node OSes with drivers, and the OpenShift -> Kubernetes minors."""

from __future__ import annotations

import pytest

from fleet.catalog import INSTANCE_TYPES, KUBERNETES_OSES, NODE_OSES, OPENSHIFT_KUBERNETES, OS_BY_RELEASE


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


def test_node_oses_are_ubuntu_and_supported_rhcos() -> None:
    assert set(NODE_OSES) == {"ubuntu22.04", "ubuntu24.04", "rhcos4.18", "rhcos4.19", "rhcos4.20"}


def test_kubernetes_oses_are_the_non_openshift_ones() -> None:
    assert KUBERNETES_OSES == ("ubuntu22.04", "ubuntu24.04")
    assert not any(NODE_OSES[name].openshift for name in KUBERNETES_OSES)
    assert all(NODE_OSES[f"rhcos{minor}"].openshift for minor in OPENSHIFT_KUBERNETES)


def test_every_openshift_minor_has_its_rhcos_and_a_kubernetes_minor() -> None:
    assert OPENSHIFT_KUBERNETES == {"4.18": "1.31", "4.19": "1.32", "4.20": "1.33"}
    for minor in OPENSHIFT_KUBERNETES:
        assert f"rhcos{minor}" in NODE_OSES


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
    ("rhcos4.20", "5.14.0-570.49.1.el9_6.aarch64", True),
    ("rhcos4.18", "5.14.0-427.87.1.el9_4", False),
    ("rhcos4.19", "5.14.0-427.50.1.el8.x86_64", False),
    # Each OpenShift release ships the kernel of one RHEL 9 minor: 4.18 RHEL 9.4, 4.19 and 4.20 RHEL 9.6.
    ("rhcos4.18", "5.14.0-570.28.1.el9_6.x86_64", False),
    ("rhcos4.19", "5.14.0-427.87.1.el9_4.x86_64", False),
    ("rhcos4.19", "5.14.0-570.28.1.el9_6.x86_64", True),
    ("rhcos4.18", "6.8.0-1021-aws", False),
])
def test_kernel_patterns_tell_the_oses_apart(name: str, kernel: str, valid: bool) -> None:
    assert NODE_OSES[name].is_kernel(kernel) is valid


@pytest.mark.parametrize(("release", "name"), [
    (("ubuntu", "22.04"), "ubuntu22.04"), (("ubuntu", "24.04"), "ubuntu24.04"), (("rhcos", "4.18"), "rhcos4.18"),
    (("rhcos", "4.20"), "rhcos4.20"),
])
def test_nfd_os_release_labels_map_to_an_os(release: tuple[str, str], name: str) -> None:
    assert OS_BY_RELEASE[release] == name
    assert (NODE_OSES[name].os_release_id, NODE_OSES[name].os_release_version) == release


def test_unsupported_os_releases_have_no_os() -> None:
    assert ("rhcos", "4.16") not in OS_BY_RELEASE
    assert ("ubuntu", "20.04") not in OS_BY_RELEASE
    assert len(OS_BY_RELEASE) == len(NODE_OSES)
