"""Container image references, split the way registries and `docker pull` read them."""

from __future__ import annotations

from dataclasses import dataclass

DOCKER_HUB = "docker.io"


@dataclass(frozen=True)
class ImageName:
    """`registry/repository[:tag][@digest]`; a name without a registry host is on Docker Hub."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, image: str) -> ImageName:
        name, _, digest = image.partition("@")
        head, slash, rest = name.partition("/")
        if not slash or not ("." in head or ":" in head or head == "localhost"):
            head, rest = DOCKER_HUB, (name if slash else f"library/{name}")
        repository, _, tag = rest.partition(":")
        return cls(head, repository, tag or None, digest or None)


def operand_image(image: str) -> dict[str, str]:
    """An image as the GPU Operator's resources name it: repository, image, and version (a tag, or `sha256:...`)."""
    name = ImageName.parse(image)
    repository, _, base = name.repository.rpartition("/")
    return {"repository": "/".join(part for part in (name.registry, repository) if part), "image": base,
            "version": name.digest or name.tag}
