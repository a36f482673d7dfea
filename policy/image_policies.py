"""Policies of images: no latest tags, and only allowed registries."""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_policy import ReportViolation, ResourceValidationArgs

from components.images import ImageName
from policy.operand_policies import no_latest_operand_images, operand_reference, operand_sections
from policy.reading import DEFAULT_REGISTRIES, containers, describe, pod_spec


def no_latest_images(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for container in containers(pod_spec(args.resource_type, args.props) or {}):
        image = str(container.get("image"))
        name = ImageName.parse(image)
        if name.tag == "latest" or not (name.tag or name.digest):
            why = "the :latest tag" if name.tag == "latest" else "no tag"
            report(f"container {container.get('name')} of {describe(args.resource_type, args.props)} runs {image} "
                   f"with {why}, which changes under a running cluster; pin a version tag or an @sha256 digest", None)
    no_latest_operand_images(args, report)


def _registry_allowed(image: ImageName, allowed: Sequence[str]) -> bool:
    repository = f"{image.registry}/{image.repository}"
    return any(image.registry == entry or repository.startswith(f"{entry}/") for entry in allowed)


def allowed_registries(args: ResourceValidationArgs, report: ReportViolation) -> None:
    allowed = [str(entry).rstrip("/") for entry in args.get_config().get("allowedRegistries", DEFAULT_REGISTRIES)]
    for container in containers(pod_spec(args.resource_type, args.props) or {}):
        image = str(container.get("image"))
        name = ImageName.parse(image)
        if not _registry_allowed(name, allowed):
            report(f"container {container.get('name')} of {describe(args.resource_type, args.props)} pulls {image} "
                   f"from {name.registry}, which is not allowed ({', '.join(allowed)}); mirror the image into an "
                   "allowed registry or add the registry to allowedRegistries in the pack config", None)
    for path, section in operand_sections(args.resource_type, args.props):
        if not (section.get("repository") or section.get("image")):
            continue  # the operator's default image for its release
        reference = operand_reference(section)
        name = ImageName.parse(reference)
        if not _registry_allowed(name, allowed):
            field = f"{path}.repository" if section.get("repository") else f"{path}.image"
            report(f"{describe(args.resource_type, args.props)} section {path} pulls {reference} from "
                   f"{name.registry}, which is not allowed ({', '.join(allowed)}); point {field} at an allowed "
                   "registry (mirror the image there) or add the registry to allowedRegistries in the pack config",
                   None)
