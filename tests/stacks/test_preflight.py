"""Driver image preflight against a stand-in OCI registry on 127.0.0.1: present, missing, auth, down."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from fleet.kernels import DriverRelease, KernelTarget
from stacks.preflight import (
    MANIFEST_MEDIA_TYPES,
    ImageReference,
    PreflightError,
    RegistryUnreachable,
    check_driver_images,
    registry_url,
)
from tests.loopback import closed_port, serving

OLD = KernelTarget("ubuntu22.04", "6.8.0-1021-aws")
NEW = KernelTarget("ubuntu22.04", "6.8.0-1024-aws")
RHCOS = KernelTarget("rhcos4.18", "5.14.0-427.65.1.el9_4.x86_64")
ISSUED = "anonymous-pull-token"


class StandInRegistry:
    """Answers manifest HEADs like a distribution registry; optionally behind an anonymous bearer-token realm."""

    def __init__(self) -> None:
        self.manifests: set[str] = set()
        self.down: set[str] = set()  # manifest paths answered 503, as a registry's failing backend would
        self.mode = "open"
        self.heads: list[tuple[str, dict[str, str]]] = []
        self.token_queries: list[dict[str, list[str]]] = []
        self.release = threading.Event()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                registry.heads.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                registry.head(self)

            def do_GET(self) -> None:
                registry.token(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"

    def image(self, target: KernelTarget, *, present: bool) -> str:
        image = DriverRelease(f"{self.host}/nvidia", "580", "580.95.05", precompiled=True).image(target)
        if present:
            reference = ImageReference.parse(image)
            self.manifests.add(f"/v2/{reference.repository}/manifests/{reference.tag}")
        return image

    def head(self, request: BaseHTTPRequestHandler) -> None:
        if self.mode == "hang":
            self.release.wait(5)
            return
        if self.mode == "broken":
            return self.reply(request, 500)
        if request.path in self.down:
            return self.reply(request, 503)
        if self.mode in ("auth", "plain-realm") and request.headers.get("Authorization") != f"Bearer {ISSUED}":
            repository = request.path.removeprefix("/v2/").rpartition("/manifests/")[0]
            realm = f"http://{self.host}/token" if self.mode == "auth" else "http://auth.registry.example/token"
            challenge = f'Bearer realm="{realm}",service="stand-in",scope="repository:{repository}:pull"'
            return self.reply(request, 401, {"WWW-Authenticate": challenge})
        if request.path in self.manifests:
            return self.reply(request, 200, {"Content-Type": MANIFEST_MEDIA_TYPES[0],
                                             "Docker-Content-Digest": "sha256:" + "0" * 64})
        self.reply(request, 404)

    def token(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        if url.path != "/token":
            return self.reply(request, 404)
        self.token_queries.append(parse_qs(url.query))
        body = f'{{"token": "{ISSUED}", "expires_in": 300}}'.encode()
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    @staticmethod
    def reply(request: BaseHTTPRequestHandler, code: int, headers: dict[str, str] | None = None) -> None:
        request.send_response(code)
        for key, value in (headers or {}).items():
            request.send_header(key, value)
        request.send_header("Content-Length", "0")
        request.end_headers()


@pytest.fixture
def registry() -> Iterator[StandInRegistry]:
    with serving(StandInRegistry()) as stand_in:
        yield stand_in



def test_present_images_pass(registry: StandInRegistry) -> None:
    images = {OLD: registry.image(OLD, present=True), RHCOS: registry.image(RHCOS, present=True)}

    check_driver_images(images, timeout=1)

    assert sorted(path for path, _ in registry.heads) == [
        "/v2/nvidia/driver/manifests/580-5.14.0-427.65.1.el9_4.x86_64-rhcos4.18",
        "/v2/nvidia/driver/manifests/580-6.8.0-1021-aws-ubuntu22.04",
    ]
    accepted = registry.heads[0][1]["accept"].split(", ")
    assert set(accepted) == set(MANIFEST_MEDIA_TYPES)


def test_each_distinct_image_is_asked_once(registry: StandInRegistry) -> None:
    image = registry.image(OLD, present=True)

    check_driver_images({OLD: image, KernelTarget("ubuntu24.04", OLD.kernel): image}, timeout=1)

    assert len(registry.heads) == 1


def test_a_built_driver_image_is_asked_once_for_all_kernels_of_its_os(registry: StandInRegistry) -> None:
    """Built on the node (OpenShift's Driver Toolkit): one `<version>-<os>` image serves every kernel of that OS."""
    release = DriverRelease(f"{registry.host}/nvidia", "580", "580.95.05", precompiled=False)
    other = KernelTarget(RHCOS.os, "5.14.0-427.87.1.el9_4.x86_64")
    image = release.image(RHCOS)
    registry.manifests.add("/v2/nvidia/driver/manifests/580.95.05-rhcos4.18")

    check_driver_images({RHCOS: image, other: release.image(other)}, timeout=1)

    assert [path for path, _ in registry.heads] == ["/v2/nvidia/driver/manifests/580.95.05-rhcos4.18"]


def test_missing_image_names_image_and_kernel(registry: StandInRegistry) -> None:
    present, missing = registry.image(OLD, present=True), registry.image(NEW, present=False)

    with pytest.raises(PreflightError) as raised:
        check_driver_images({OLD: present, NEW: missing}, timeout=1)

    message = str(raised.value)
    assert message.startswith(f"driver image {missing} for kernel 6.8.0-1024-aws (ubuntu22.04) is not in its registry")
    assert "pick a kernel and gpu-platform:driver version NVIDIA publishes images for" in message
    assert present not in message
    assert "\n" not in message


def test_every_missing_image_is_named(registry: StandInRegistry) -> None:
    images = {target: registry.image(target, present=False) for target in (OLD, NEW, RHCOS)}

    with pytest.raises(PreflightError, match="driver images are not in their registries") as raised:
        check_driver_images(images, timeout=1)

    assert all(image in str(raised.value) for image in images.values())
    assert all(target.kernel in str(raised.value) for target in images)


def test_anonymous_token_flow(registry: StandInRegistry) -> None:
    registry.mode = "auth"
    images = {OLD: registry.image(OLD, present=True), NEW: registry.image(NEW, present=True)}

    check_driver_images(images, timeout=1)

    assert registry.token_queries == [{"service": ["stand-in"], "scope": ["repository:nvidia/driver:pull"]}]
    authorizations = [headers.get("authorization") for _, headers in registry.heads]
    assert authorizations.count(f"Bearer {ISSUED}") == 2  # both images, one token for the repository


def test_missing_image_behind_token_flow(registry: StandInRegistry) -> None:
    registry.mode = "auth"
    missing = registry.image(NEW, present=False)

    with pytest.raises(PreflightError, match=f"driver image {missing} for kernel {NEW.kernel}"):
        check_driver_images({NEW: missing}, timeout=1)

    assert registry.heads[-1][1]["authorization"] == f"Bearer {ISSUED}"


def test_token_realm_must_be_https(registry: StandInRegistry) -> None:
    registry.mode = "plain-realm"

    with pytest.raises(PreflightError, match="its token realm http://auth.registry.example/token.* is not HTTPS"):
        check_driver_images({OLD: registry.image(OLD, present=True)}, timeout=1)

    assert not registry.token_queries


@pytest.mark.parametrize(("mode", "problem"), [
    ("broken", "it answered HTTP 500"),
    ("hang", "no complete answer within 0.3s"),
])
def test_failing_registry(registry: StandInRegistry, mode: str, problem: str) -> None:
    registry.mode = mode
    started = time.monotonic()

    with pytest.raises(PreflightError) as raised:
        check_driver_images({OLD: registry.image(OLD, present=True)}, timeout=0.3)

    message = str(raised.value)
    assert f"registry {registry.host} could not be reached" in message
    assert problem in message
    assert "--offline" in message
    assert time.monotonic() - started < 4  # a hung registry holds each request 5 s


def test_registry_down() -> None:
    host = f"127.0.0.1:{closed_port()}"

    with pytest.raises(PreflightError, match=rf"registry {host} could not be reached .*refused.*--offline"):
        check_driver_images({OLD: DriverRelease(f"{host}/nvidia", "580", "580.95.05", precompiled=True).image(OLD)}, timeout=1)


@pytest.mark.parametrize(("image", "reference"), [
    ("nvcr.io/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04",
     ImageReference("nvcr.io", "nvidia/driver", "580-6.8.0-1021-aws-ubuntu22.04")),
    ("localhost:5000/driver:580", ImageReference("localhost:5000", "driver", "580")),
    ("nvidia/driver:580", ImageReference("registry-1.docker.io", "nvidia/driver", "580")),
    ("docker.io/library/driver:580", ImageReference("registry-1.docker.io", "library/driver", "580")),
])
def test_image_reference(image: str, reference: ImageReference) -> None:
    assert ImageReference.parse(image) == reference


def test_plain_http_only_on_loopback() -> None:
    assert registry_url("nvcr.io") == "https://nvcr.io"
    assert registry_url("registry.example.com:5000") == "https://registry.example.com:5000"
    assert registry_url("127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert registry_url("localhost:5000") == "http://localhost:5000"


# -- answers that must not count as "the image exists" -------------------------------------------------------------


class FaultyRegistry:
    """A registry on 127.0.0.1 that answers every manifest HEAD with one kind of fault, written raw to the socket."""

    def __init__(self, fault: str, elsewhere: str = "") -> None:
        self.fault, self.elsewhere = fault, elsewhere
        self.release = threading.Event()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                registry.requests.append((self.command, self.path, dict(self.headers.items())))
                registry.answer(self)

            do_GET = do_HEAD

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        raw = request.wfile
        if self.fault == "html":
            raw.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 0\r\n\r\n")
        elif self.fault == "wrong-media-type":
            raw.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDocker-Content-Digest: sha256:"
                      + b"0" * 64 + b"\r\nContent-Length: 0\r\n\r\n")
        elif self.fault == "no-digest":
            raw.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + MANIFEST_MEDIA_TYPES[1].encode()
                      + b"\r\nContent-Length: 0\r\n\r\n")
        elif self.fault == "truncated":
            raw.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.ima")
        elif self.fault == "redirect":
            raw.write(f"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{self.elsewhere}/v2/x/manifests/y\r\n"
                      "Content-Length: 0\r\n\r\n".encode())
        elif self.fault == "manifest":
            raw.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + MANIFEST_MEDIA_TYPES[1].encode()
                      + b"\r\nDocker-Content-Digest: sha256:" + b"0" * 64 + b"\r\nContent-Length: 0\r\n\r\n")
        elif self.fault == "slow-drip":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n":
                if self.release.wait(0.1):
                    return
                raw.write(bytes([byte]))
                raw.flush()
        raw.flush()
        request.close_connection = True


@pytest.mark.parametrize(("fault", "problem"), [
    ("html", "with text/html and no digest, not an image manifest"),
    ("wrong-media-type", "with application/json and a digest, not an image manifest"),
    ("no-digest", "and no digest, not an image manifest"),
    ("truncated", ""),
    ("slow-drip", "no complete answer within 1s"),
])
def test_an_answer_that_is_not_a_manifest_leaves_the_image_unverified(fault: str, problem: str) -> None:
    with serving(FaultyRegistry(fault)) as registry:
        image = f"{registry.host}/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04"
        started = time.monotonic()
        with pytest.raises(RegistryUnreachable) as raised:
            check_driver_images({OLD: image}, timeout=1.0)
        elapsed = time.monotonic() - started

    assert f"registry {registry.host} could not be reached to check driver image {image}" in str(raised.value)
    assert problem in str(raised.value)
    # A byte every 0.1 s never trips a per-read timeout: without the whole-check deadline this takes 8 s.
    assert elapsed < 3, "the deadline bounds the whole check, not each read"


def test_a_redirect_to_another_origin_is_not_followed_and_carries_no_token() -> None:
    with serving(FaultyRegistry("manifest")) as elsewhere, \
            serving(FaultyRegistry("redirect", elsewhere=elsewhere.host)) as registry:
        image = f"{registry.host}/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04"
        with pytest.raises(RegistryUnreachable) as raised:
            check_driver_images({OLD: image}, timeout=2.0)

    assert "it redirected to another origin" in str(raised.value)
    assert elsewhere.requests == [], "nothing, and no bearer token, went to the other origin"
    assert [method for method, _, _ in registry.requests] == ["HEAD"]


def test_a_genuine_manifest_answer_counts_as_present() -> None:
    with serving(FaultyRegistry("manifest")) as registry:
        check_driver_images({OLD: f"{registry.host}/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04"}, timeout=2.0)
    assert [method for method, _, _ in registry.requests] == ["HEAD"]


def test_a_missing_image_is_reported_missing_whatever_another_registry_answers(registry: StandInRegistry) -> None:
    """One image's 503, asked first, must not turn another's 404 into "not verified"."""
    failing = registry.image(OLD, present=False)
    reference = ImageReference.parse(failing)
    registry.down.add(f"/v2/{reference.repository}/manifests/{reference.tag}")
    absent = registry.image(NEW, present=False)

    with pytest.raises(PreflightError) as raised:
        check_driver_images({OLD: failing, NEW: absent}, timeout=2)

    assert not isinstance(raised.value, RegistryUnreachable), str(raised.value)
    assert raised.value.missing == {absent} and raised.value.unverified == {failing}
    assert f"driver image {absent} for kernel {NEW.kernel}" in str(raised.value) and "HTTP 503" in str(raised.value)
