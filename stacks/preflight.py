"""Driver image preflight: every driver image the inventory needs exists in its registry.

Asks each registry with the OCI distribution API (a manifest HEAD), using the anonymous bearer-token flow
that public registries such as nvcr.io and Docker Hub require, before anything is deployed.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message

from components.images import DOCKER_HUB, ImageName
from stacks.config import PROJECT, ConfigError
from stacks.deadline import DeadlineExceeded, within
from fleet.kernels import KernelTarget

MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_DIGEST = re.compile(r"^sha(256:[0-9a-f]{64}|512:[0-9a-f]{128})$")
MAX_REDIRECTS = 3
MAX_BODY = 64 * 1024  # a token answer is a few kilobytes; anything larger is not one
_DOCKER_HUB_API = "registry-1.docker.io"
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class PreflightError(ConfigError):
    """A driver image is missing, or its registry could not be asked; one line naming the images and the fix.

    `missing` and `unverified` name the images found missing and those whose registry could not be asked.
    """

    def __init__(self, message: str, missing: frozenset[str] = frozenset(),
                 unverified: frozenset[str] = frozenset()) -> None:
        super().__init__(message)
        self.missing, self.unverified = missing, unverified


class RegistryUnreachable(PreflightError):
    """A registry could not be asked (down, timing out, erroring): the images are unverified, not missing."""


@dataclass(frozen=True)
class ImageReference:
    """A tagged image split the way the distribution API addresses it."""

    registry: str
    repository: str
    tag: str

    @classmethod
    def parse(cls, image: str) -> ImageReference:
        """Split `registry/repository:tag`; Docker Hub names are asked of Docker Hub's API host."""
        name = ImageName.parse(image)
        if not name.tag:
            raise PreflightError(f"driver image {image!r} has no tag; expected <registry>/<repository>:<tag>")
        return cls(_DOCKER_HUB_API if name.registry == DOCKER_HUB else name.registry, name.repository, name.tag)

    @property
    def manifest_url(self) -> str:
        return f"{registry_url(self.registry)}/v2/{self.repository}/manifests/{self.tag}"


def registry_url(registry: str) -> str:
    """Base URL of a registry's API: HTTPS, except plain HTTP for a registry on the loopback interface."""
    scheme = "http" if urllib.parse.urlsplit(f"//{registry}").hostname in _LOOPBACK_HOSTS else "https"
    return f"{scheme}://{registry}"


def check_driver_images(images: Mapping[KernelTarget, str], *, timeout: float = 10.0) -> None:
    """Check that every driver image exists in its registry; each distinct image is asked once.

    An image exists only when its registry answers with a manifest media type and a digest; anything else (an
    HTML page from a proxy, a truncated or slow answer, a redirect to another origin) leaves it unverified.

    Args:
        images: the driver image each (os, kernel) needs.
        timeout: seconds the whole check may take, however many requests and however slow the answers.

    Raises:
        PreflightError: images are missing (all of them named, with their kernels), or a registry could not be
            reached or answered with an error.
    """
    kernels: dict[str, list[KernelTarget]] = defaultdict(list)
    for target, image in sorted(images.items()):
        kernels[image].append(target)
    registry = _RegistryClient(timeout)
    missing, unreachable, absent, unverified_images = [], [], set(), set()
    for image, targets in kernels.items():
        try:  # every image is asked: one registry's outage must not hide another image's absence
            reason = registry.absence(image, ImageReference.parse(image))
        except RegistryUnreachable as error:
            unreachable.append(error)
            unverified_images.add(image)
            continue
        if reason:
            missing.append((f"{image} for {_kernels(targets)}", reason))
            absent.add(image)
    found = {"missing": frozenset(absent), "unverified": frozenset(unverified_images)}
    unverified = f" ({len(unreachable)} more not verified: {unreachable[0]})" if missing and unreachable else ""
    if len(missing) == 1:
        [(what, reason)] = missing
        raise PreflightError(
            f"driver image {what} is not in its registry ({reason}); {_FIX}{unverified}", **found
        )
    if missing:
        named = "; ".join(f"{what} ({reason})" for what, reason in missing)
        raise PreflightError(
            f"driver images are not in their registries: {named}; {_FIX}{unverified}", **found
        )
    if unreachable:
        raise unreachable[0]


_FIX = (f"pick a kernel and {PROJECT}:driver version NVIDIA publishes images for, or push them to the repository "
        f"in {PROJECT}:driver.repository")


def _kernels(targets: list[KernelTarget]) -> str:
    named = ", ".join(f"{target.kernel} ({target.os})" for target in targets)
    return f"kernel {named}" if len(targets) == 1 else f"kernels {named}"


class _RegistryClient:
    """Manifest HEADs with anonymous bearer tokens, reused across images of the same repository."""

    def __init__(self, timeout: float):
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._opener = urllib.request.build_opener(_Redirects())
        self._tokens: dict[str, str | None] = {}

    def absence(self, image: str, reference: ImageReference) -> str | None:
        """None when the image's manifest exists, otherwise why it counts as missing."""
        status, headers = self._head(image, reference, token=None)
        if status == 401:
            challenge = _bearer_challenge(headers.get("WWW-Authenticate", ""))
            if challenge is not None:
                token = self._token(image, reference, challenge)
                if token is None:
                    return "anonymous pull denied: missing or private"
                status, headers = self._head(image, reference, token)
        if 200 <= status < 300:
            media_type = headers.get_content_type() if headers.get("Content-Type") else "no media type"
            if media_type in MANIFEST_MEDIA_TYPES and _DIGEST.fullmatch(headers.get("Docker-Content-Digest", "")):
                return None
            raise RegistryUnreachable(_unreachable(reference.registry, image, (
                f"it answered HTTP {status} with {media_type} and "
                f"{'a digest' if headers.get('Docker-Content-Digest') else 'no digest'}, not an image manifest")))
        if status == 404:
            return "manifest unknown"
        if status in (401, 403):
            return "anonymous pull denied: missing or private"
        raise RegistryUnreachable(_unreachable(reference.registry, image, f"it answered HTTP {status}"))

    def _head(self, image: str, reference: ImageReference, token: str | None) -> tuple[int, Message]:
        headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(reference.manifest_url, headers=headers, method="HEAD")
        status, response_headers, _ = self._send(request, reference.registry, image)
        return status, response_headers

    def _token(self, image: str, reference: ImageReference, challenge: Mapping[str, str]) -> str | None:
        """An anonymous pull token from the challenge's realm; None when the realm refuses one."""
        query = {
            "service": challenge.get("service", ""),
            "scope": challenge.get("scope") or f"repository:{reference.repository}:pull",
        }
        realm = challenge["realm"]
        separator = "&" if "?" in realm else "?"
        url = f"{realm}{separator}{urllib.parse.urlencode({k: v for k, v in query.items() if v})}"
        if url not in self._tokens:
            self._tokens[url] = self._fetch_token(url, image)
        return self._tokens[url]

    def _fetch_token(self, url: str, image: str) -> str | None:
        host = urllib.parse.urlsplit(url).netloc
        if not _allowed(url):
            raise RegistryUnreachable(_unreachable(host, image, f"its token realm {url} is not HTTPS"))
        status, _, body = self._send(urllib.request.Request(url), host, image)
        if status in (401, 403):
            return None
        if status != 200:
            raise RegistryUnreachable(_unreachable(host, image, f"its token service answered HTTP {status}"))
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        token = (answer.get("token") or answer.get("access_token")) if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryUnreachable(_unreachable(host, image, "its token service answered without a token"))
        return token

    def _send(self, request: urllib.request.Request, host: str, image: str) -> tuple[int, Message, bytes]:
        """Status, headers and capped body of one request, within what is left of the whole check's deadline."""
        remaining = self._deadline - time.monotonic()
        try:
            return within(remaining, lambda: self._exchange(request, remaining))
        except DeadlineExceeded:
            raise RegistryUnreachable(_unreachable(host, image, f"no complete answer within {self._timeout:g}s")) \
                from None
        except urllib.error.URLError as error:
            raise RegistryUnreachable(_unreachable(host, image, _problem(error.reason, self._timeout))) from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise RegistryUnreachable(_unreachable(host, image, _problem(error, self._timeout))) from None

    def _exchange(self, request: urllib.request.Request, timeout: float) -> tuple[int, Message, bytes]:
        """One request and its body, capped; error statuses are answers, not exceptions."""
        try:
            with self._opener.open(request, timeout=timeout) as response:
                body = response.read(MAX_BODY + 1)
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.headers, b""
        if len(body) > MAX_BODY:
            raise ValueError(f"an answer over {MAX_BODY // 1024} KiB")
        return response.status, response.headers, body


class _Redirects(urllib.request.HTTPRedirectHandler):
    """At most MAX_REDIRECTS hops within the same origin, and a HEAD stays a HEAD.

    A registry answers manifest requests itself; a redirect elsewhere is not followed, so a bearer token never
    reaches another origin (urllib would copy it there, and turn the HEAD into a GET that downloads a body).
    """

    max_redirections = MAX_REDIRECTS

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            raise urllib.error.URLError(f"it redirected to another origin ({_origin(new.full_url)[1]})")
        if new is not None:
            new.method = req.get_method()
        return new


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def _allowed(url: str) -> bool:
    """HTTPS anywhere; plain HTTP only on the loopback interface (a local registry)."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS)


def _bearer_challenge(header: str) -> dict[str, str] | None:
    """The parameters of a `Bearer realm="...",service="...",scope="..."` challenge, or None for other schemes."""
    scheme, _, params = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    values = dict(_CHALLENGE_PARAM.findall(params))
    return values if "realm" in values else None


def _problem(reason: object, timeout: float) -> str:
    if isinstance(reason, TimeoutError):  # the socket's timeout is what is left of the deadline: the same event
        return f"no complete answer within {timeout:g}s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return " ".join(str(reason).split()) or type(reason).__name__


def _unreachable(host: str, image: str, problem: str) -> str:
    return (
        f"registry {host} could not be reached to check driver image {image}: {problem}; "
        "retry when it answers, or skip the driver image preflight with --offline (gpuctl) "
        f"or {PROJECT}:preflight false"
    )
