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
