"""Policies of NVIDIA's driver and operands: pinned to kernels and versions, tolerating the GPU taint, and
handing out GPUs only through the device plugin."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from components import labels
from components.images import ImageName
from policy.reading import (CLUSTER_POLICY, DRIVER_BRANCH, GPU_TAINT_TEXT, NVIDIA_DRIVER, OPERAND_IMAGE_RESOURCES,
                            OPERAND_TOLERATIONS, describe, dig, items, tolerates)


def driver_pinned_to_kernel(args: ResourceValidationArgs, report: ReportViolation) -> None:
    # The operator names a precompiled driver <repository>/<image>:<version>-<kernel>-<os> and refuses digests
    # there (gpu-operator api/nvidia/v1alpha1/nvidiadriver_types.go, GetPrecompiledImagePath).
    if args.resource_type != NVIDIA_DRIVER:
        return
    name = describe(args.resource_type, args.props)
    spec = dig(args.props, "spec")
    kernel = dig(spec, "nodeSelector", labels.KERNEL_LABEL)
    if dig(spec, "usePrecompiled") is True and not kernel:
        report(f"{name} runs a precompiled driver but is not pinned to a kernel, so the operator runs it on nodes of "
               f"any kernel; set spec.nodeSelector {labels.KERNEL_LABEL}: <kernel>, one NVIDIADriver per kernel", None)
    # The OS as the operator keys it: VERSION_ID, or for RHEL its major alone (gpu-operator v26.7.0
    # internal/state/nodepool.go, getOSTag and getNodePools).
    release = [dig(spec, "nodeSelector", labels.OS_ID_LABEL), dig(spec, "nodeSelector", labels.OS_VERSION_LABEL)
               or dig(spec, "nodeSelector", labels.OS_VERSION_MAJOR_LABEL)]
    if not all(release):
        report(f"{name} is not pinned to an OS release, so the operator may run it on nodes of another OS; set "
               f"spec.nodeSelector {labels.OS_ID_LABEL} and {labels.OS_VERSION_LABEL} (for RHEL "
               f"{labels.OS_VERSION_MAJOR_LABEL})", None)
    version = str(dig(spec, "version") or "")
    image = str(dig(spec, "image") or "")
    if dig(spec, "usePrecompiled") is True and not DRIVER_BRANCH.fullmatch(version):
        shown = repr(version) if version else "not set"
        report(f"{name} uses precompiled drivers, whose tag the operator builds as <version>-<kernel>-<os> (digests "
               f"are refused), but spec.version is {shown}; set spec.version to the driver branch (digits only, "
               'e.g. "580")', None)
    tag = ImageName.parse(image).tag if ":" in image.rsplit("/", 1)[-1] else None
    if kernel and tag is not None and not re.search(rf"(^|-){re.escape(str(kernel))}(-|$)", tag):
        report(f"{name} runs on kernel {kernel} but spec.image {image} is tagged for another; drop the tag from "
               f"spec.image (the operator derives it from spec.version) or tag it <branch>-{kernel}-<os>", None)


def operands_tolerate_gpu_taint(args: ResourceValidationArgs, report: ReportViolation) -> None:
    path = OPERAND_TOLERATIONS.get(args.resource_type)
    if path is None:
        return
    if not any(isinstance(t, Mapping) and tolerates(t, labels.GPU_TAINT) for t in items(dig(args.props, *path))):
        report(f"{describe(args.resource_type, args.props)} does not tolerate the taint {GPU_TAINT_TEXT} in "
               f"{'.'.join(path)}, so the operator's pods never land on the tainted GPU nodes; add the toleration "
               f"{{key: {labels.GPU_TAINT['key']}, operator: Exists, effect: {labels.GPU_TAINT['effect']}}}", None)


# NVIDIA's configuration for shared clusters: the container toolkit takes the device list only from the device
# plugin (volume mounts or CDI), never from an unprivileged container's NVIDIA_VISIBLE_DEVICES.
HARDENED_TOOLKIT_ENV = {"ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
                        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true"}
DEVICE_LIST_STRATEGIES = frozenset({"volume-mounts", "cdi-annotations", "cdi-cri"})


def _env(spec: Any) -> dict[str, str]:
    return {str(entry.get("name")): str(entry.get("value")) for entry in items(dig(spec, "env"))
            if isinstance(entry, Mapping)}


def gpu_access_through_device_plugin(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != CLUSTER_POLICY:
        return
    name = describe(args.resource_type, args.props)
    toolkit = _env(dig(args.props, "spec", "toolkit"))
    wrong = [f"{key}={value}" for key, value in HARDENED_TOOLKIT_ENV.items() if toolkit.get(key) != value]
    strategy = _env(dig(args.props, "spec", "devicePlugin")).get("DEVICE_LIST_STRATEGY", "")
    if not strategy or not set(strategy.split(",")) <= DEVICE_LIST_STRATEGIES:
        wrong.append("devicePlugin DEVICE_LIST_STRATEGY=volume-mounts (or CDI)")
    if wrong:
        report(f"{name} lets any container that sets NVIDIA_VISIBLE_DEVICES reach every GPU of its node, outside "
               f"the GPU quota; set {', '.join(wrong)}", None)


_OPERAND_FIELDS = ("repository", "image", "version")


def operand_sections(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The image-carrying sections of a ClusterPolicy or NVIDIADriver, as (dotted path, section).

    An NVIDIADriver's spec is always one (its driver needs a version even where the operator defaults the image);
    other sections count when they set a repository or an image.
    """
    if resource_type not in OPERAND_IMAGE_RESOURCES:
        return []
    spec = dig(props, "spec")
    if not isinstance(spec, Mapping):
        return [("spec", {})] if resource_type == NVIDIA_DRIVER else []
    found: list[tuple[str, Mapping[str, Any]]] = []

    def walk(section: Mapping[str, Any], path: str) -> None:
        if (resource_type == NVIDIA_DRIVER and path == "spec") or section.get("repository") or section.get("image"):
            found.append((path, section))
        for key, value in section.items():
            if isinstance(value, Mapping):
                walk(value, f"{path}.{key}")

    walk(spec, "spec")
    return found


def operand_reference(section: Mapping[str, Any]) -> str:
    """The reference the operator joins from a section: `<repository>/<image>:<version>`, `@<version>` for a
    `sha256:` digest, or the image alone when neither repository nor version is set (the reverse of
    components.images.operand_image). An NVIDIADriver's real tag adds `-<kernel>-<os>` or `-<os>`."""
    repository, image, version = (str(section.get(field) or "") for field in _OPERAND_FIELDS)
    if not repository and not version:
        return image
    base = f"{repository.rstrip('/')}/{image}" if repository else image
    if not version:
        return base
    return f"{base}{'@' if version.startswith('sha256:') else ':'}{version}"


def _driver_tag(spec: Mapping[str, Any], version: str) -> str:
    """The tag the operator pulls for an NVIDIADriver whose spec.version is `version`."""
    selector = dig(spec, "nodeSelector") or {}
    os_id = selector.get(labels.OS_ID_LABEL)
    # RHEL is selected by its major alone, and tagged by it (gpu-operator v26.7.0 internal/state/nodepool.go, getOSTag).
    os_version = selector.get(labels.OS_VERSION_LABEL) or selector.get(labels.OS_VERSION_MAJOR_LABEL)
    node_os = f"{os_id}{os_version}" if os_id and os_version else "<os>"
    if dig(spec, "usePrecompiled") is True:
        return f"{version}-{selector.get(labels.KERNEL_LABEL) or '<kernel>'}-{node_os}"
    return f"{version}-{node_os}"


def no_latest_operand_images(args: ResourceValidationArgs, report: ReportViolation) -> None:
    sections = operand_sections(args.resource_type, args.props)
    name = describe(args.resource_type, args.props) if sections else ""
    for path, section in sections:
        version = str(section.get("version") or "")
        if path == "spec" and args.resource_type == NVIDIA_DRIVER:
            if version and version != "latest":
                continue
            shown = (f"spec.version latest, so the operator pulls {section.get('repository') or '<repository>'}/"
                     f"{section.get('image') or 'driver'}:{_driver_tag(section, 'latest')}" if version
                     else "no spec.version")
            report(f"{name} sets {shown}, and a driver without a pinned version changes under a running cluster; "
                   'set spec.version to the driver branch (precompiled, e.g. "580") or the full driver version '
                   '(e.g. "580.95.05")', None)
            continue
        reference = operand_reference(section)
        image = ImageName.parse(reference)
        if image.digest or (image.tag and image.tag != "latest"):
            continue
        why = "the :latest tag" if image.tag == "latest" else "no version"
        report(f"{name} section {path} runs {reference} with {why}, which changes under a running cluster; set "
               f"{path}.version to a release tag or a sha256: digest", None)
