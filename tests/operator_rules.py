"""The GPU Operator's own rules, transcribed from NVIDIA gpu-operator v26.7.0 for tests to judge the program by.

Written from the operator's source, not from the program: a test derives what the operator would do with a node's
NFD labels and an NVIDIADriver's spec, and compares it with what the program declares and the preflight checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
OS_MAJOR = "feature.node.kubernetes.io/system-os_release.VERSION_ID.major"
KERNEL = "feature.node.kubernetes.io/kernel-version.full"


def os_tag(labels: Mapping[str, str]) -> str:
    """internal/state/nodepool.go, getOSTag: ID and VERSION_ID, only the major for ol, rocky and rhel."""
    os_id, version = labels[OS_ID], labels[OS_VERSION]
    return f"{os_id}{version.split('.')[0] if os_id in ('ol', 'rocky', 'rhel') else version}"


def selects(driver: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the NVIDIADriver's nodeSelector matches the node (internal/validator/validator.go,
    getNVIDIADriverSelectedNodes: the selector as a label set)."""
    return all(labels.get(key) == value for key, value in (driver["spec"].get("nodeSelector") or {}).items())


def owners(drivers: Iterable[Mapping[str, Any]], labels: Mapping[str, str]) -> list[str]:
    """The names of the non-default NVIDIADrivers selecting the node: the validator (nodeSelectorValidator.Validate)
    refuses them all when there is more than one."""
    return sorted(driver["metadata"]["name"] for driver in drivers
                  if not driver["spec"].get("default") and selects(driver, labels))


def image(driver: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """The driver image the operator runs on the node (internal/state/driver.go, getDriverImagePath; the tags of
    api/nvidia/v1alpha1/nvidiadriver_types.go, GetPrecompiledImagePath and GetImagePath)."""
    spec = driver["spec"]
    base = f"{spec['repository']}/{spec['image']}:{spec['version']}"
    if spec.get("usePrecompiled"):
        return f"{base}-{labels[KERNEL]}-{os_tag(labels)}"
    return f"{base}-{os_tag(labels)}"
