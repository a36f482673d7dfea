"""Live discovery against a stand-in Kubernetes API server on 127.0.0.1, faults included."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from components import labels
from stacks import discovery as discovery_module
from stacks.config import DiscoveryConfig
from stacks.discovery import GPU_NODE_SELECTOR, DiscoveryError, read_live_nodes
from fleet.kernels import KernelTarget, ObservedNode
from tests.loopback import closed_port, serving

TOKEN = "reader-token"
CRD_PREFIX = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
OLD, NEW = "6.8.0-1021-aws", "6.8.0-1024-aws"


def node(name: str, kernel: str | None, gpu: bool = True) -> dict[str, Any]:
    node_labels = {labels.OS_ID_LABEL: "ubuntu", labels.OS_VERSION_LABEL: "22.04"}
    if gpu:
        node_labels[labels.NVIDIA_PCI_LABEL] = "true"
    if kernel:
        node_labels[labels.KERNEL_LABEL] = kernel
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels}}


class StandInApi:
    """Answers `GET /api/v1/nodes` like the Kubernetes API: bearer auth, label selector, v1 NodeList or Status."""

    def __init__(self) -> None:
        self.nodes = [node("gpu-a", OLD), node("gpu-b", NEW), node("gpu-c", NEW), node("cpu-a", OLD, gpu=False)]
        self.crds: set[str] = set()  # CRDs served at /apis/apiextensions.k8s.io/v1/customresourcedefinitions/<name>
        self.fault: str | None = None
        self.answer_items: list[Any] | None = None  # the items of every node list, whatever the selector
        self.delay = 0.0  # seconds before each answer
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.release = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                api.answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        if self.release.wait(self.delay):
            return
        if self.fault == "hang":
            self.release.wait(5)
            return
        if self.fault == "slow-drip":
            request.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            for byte in b'{"kind": "NodeList", "apiVersion": "v1", "items": []}':
                if self.release.wait(0.1):
                    return
                request.wfile.write(bytes([byte]))
                request.wfile.flush()
            return
        if self.fault == "endless":
            request.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            chunk = b" " * (1 << 20)
            while not self.release.is_set():
                try:
                    request.wfile.write(chunk)
                except OSError:
                    return
            return
        if request.headers.get("Authorization") != f"Bearer {TOKEN}" or self.fault == "401":
            return self.status(request, 401, "Unauthorized", "Unauthorized")
        if self.fault == "403":
            forbidden = 'nodes is forbidden: User "reader" cannot list resource "nodes"'
            return self.status(request, 403, "Forbidden", forbidden)
        if self.fault == "500":
            return self.status(request, 500, "InternalError", "etcdserver: request timed out")
        if self.fault == "html":
            return self.send(request, 200, b"<html>sign in</html>", "text/html")
        if self.fault == "not-a-list":
            return self.send(request, 200, b'{"kind": "Status", "apiVersion": "v1"}', "application/json")
        if url.path.startswith(CRD_PREFIX) and url.path[len(CRD_PREFIX):] in self.crds:
            crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": url.path[len(CRD_PREFIX):]}}
            return self.send(request, 200, json.dumps(crd).encode(), "application/json")
        if url.path != "/api/v1/nodes":
            return self.status(request, 404, "NotFound", "the server could not find the requested resource")
        selector = parse_qs(url.query).get("labelSelector", [""])[0]
        key, _, value = selector.partition("=")
        items = self.answer_items if self.answer_items is not None else [
            n for n in self.nodes if not selector or n["metadata"]["labels"].get(key) == value]
        body = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}, "items": items}
        self.send(request, 200, json.dumps(body).encode(), "application/json")

    def status(self, request: BaseHTTPRequestHandler, code: int, reason: str, message: str) -> None:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}
        self.send(request, code, json.dumps(body).encode(), "application/json")

    @staticmethod
    def send(request: BaseHTTPRequestHandler, code: int, body: bytes, content_type: str) -> None:
        request.send_response(code)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)


@pytest.fixture
def api() -> Iterator[StandInApi]:
    with serving(StandInApi()) as stand_in:
        yield stand_in



def kubeconfig(path: Path, servers: dict[str, str], current: str) -> Path:
    """A kubeconfig with one context per server, all using the reader's token."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}} for name, url in servers.items()],
        "users": [{"name": "reader", "user": {"token": TOKEN}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "reader"}} for name in servers],
        "current-context": current,
    }))
    return path


def discovery(path: Path, **fields: Any) -> DiscoveryConfig:
    """Generous time for reads that should succeed (a loaded machine is slow); faults pass a short deadline."""
    return DiscoveryConfig(**{"enabled": True, "kubeconfig": str(path), "timeout_seconds": 5.0, **fields})


def test_reads_kernels_of_gpu_nodes(api: StandInApi, tmp_path: Path) -> None:
    nodes = read_live_nodes(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")))

    assert nodes == [
        ObservedNode("gpu-a", KernelTarget("ubuntu22.04", OLD)),
        ObservedNode("gpu-b", KernelTarget("ubuntu22.04", NEW)),
        ObservedNode("gpu-c", KernelTarget("ubuntu22.04", NEW)),
    ]
    [(path, headers)] = api.requests
    assert urlsplit(path).path == "/api/v1/nodes"
    assert parse_qs(urlsplit(path).query)["labelSelector"] == [GPU_NODE_SELECTOR]
    assert headers["authorization"] == f"Bearer {TOKEN}"


def test_uses_the_configured_context(api: StandInApi, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", {"lab": api.url, "gone": f"http://127.0.0.1:{closed_port()}"}, "gone")

    assert len(read_live_nodes(discovery(path, context="lab"))) == 3


@pytest.mark.parametrize(("fault", "problem"), [
    ("401", "401 Unauthorized"),
    ("403", "403 Forbidden"),
    ("500", "answered 500"),
    ("hang", "did not answer within 0.5s"),
    ("slow-drip", "did not answer within 0.5s"),  # each byte in time, the whole answer not: one deadline
    ("html", "not JSON"),
    ("not-a-list", "not a v1 NodeList"),
])
def test_faults_stop_the_read(api: StandInApi, tmp_path: Path, fault: str, problem: str) -> None:
    api.fault = fault
    started = time.monotonic()

    with pytest.raises(DiscoveryError) as raised:
        read_live_nodes(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab"), timeout_seconds=0.5))

    message = str(raised.value)
    assert problem in message
    assert api.url in message
    assert "\n" not in message
    assert time.monotonic() - started < 4  # one attempt, bounded by the timeout (a hung read takes 5 s)


def test_an_endless_answer_is_cut_at_the_size_cap(api: StandInApi, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(discovery_module, "MAX_NODE_LIST_BYTES", 1 << 20)
    api.fault = "endless"

    with pytest.raises(DiscoveryError, match="answered the node list with over 1 MiB"):
        read_live_nodes(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")))


def test_gpu_node_without_kernel_label_stops_the_read(api: StandInApi, tmp_path: Path) -> None:
    api.nodes[1] = node("gpu-b", None)

    with pytest.raises(DiscoveryError, match=f"nodes at {api.url}: GPU node gpu-b has no {labels.KERNEL_LABEL} label"):
        read_live_nodes(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")))


def test_unreachable_server(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    with pytest.raises(DiscoveryError, match=rf"could not reach the API server at {url} \(Connection refused\)"):
        read_live_nodes(discovery(kubeconfig(tmp_path / "config", {"lab": url}, "lab")))


def test_tls_failure(api: StandInApi, tmp_path: Path) -> None:
    url = api.url.replace("http://", "https://")  # the stand-in speaks plain HTTP, so the handshake fails

    with pytest.raises(DiscoveryError, match=rf"TLS with the API server at {url} failed"):
        read_live_nodes(discovery(kubeconfig(tmp_path / "config", {"lab": url}, "lab")))


def test_missing_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "absent"

    with pytest.raises(DiscoveryError, match=f"kubeconfig {path} does not exist"):
        read_live_nodes(discovery(path))


@pytest.mark.parametrize(("content", "context"), [
    ("clusters: [unclosed", None),
    (yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []}), None),
    (None, "elsewhere"),
])
def test_unusable_kubeconfig(tmp_path: Path, content: str | None, context: str | None) -> None:
    path = tmp_path / "config"
    if content is None:
        kubeconfig(path, {"lab": "http://127.0.0.1:1"}, "lab")
    else:
        path.write_text(content)

    with pytest.raises(DiscoveryError, match=f"could not load kubeconfig {path}") as raised:
        read_live_nodes(discovery(path, context=context))

    assert "\n" not in str(raised.value)


def test_a_stalled_credential_plugin_is_bounded_by_the_deadline(api: StandInApi, tmp_path: Path) -> None:
    """The kubeconfig's exec plugin (`aws eks get-token` on EKS) runs while the kubeconfig loads: the deadline
    covers it too. `sleep` stands in for a plugin that never answers."""
    path = kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")
    document = yaml.safe_load(path.read_text())
    document["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                             "command": "sleep", "args": ["8"], "interactiveMode": "Never"}}
    path.write_text(yaml.safe_dump(document))
    started = time.monotonic()

    with pytest.raises(DiscoveryError) as raised:
        read_live_nodes(discovery(path, timeout_seconds=0.5))

    assert time.monotonic() - started < 4
    assert "credential plugin" in str(raised.value) and "within 0.5s" in str(raised.value)


PLUGINS = {  # what a broken credential plugin prints, and how it ends
    "garbage": "echo 'this is not an ExecCredential'; echo 'and it says so' >&2",
    "failure": "echo 'token expired' >&2; exit 1",
    "no token": """echo '{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", \
"status": {}}'""",
}


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_broken_credential_plugin_is_one_error_and_nothing_else(api: StandInApi, tmp_path: Path, capsys,
                                                                  plugin: str) -> None:
    """The client logs a plugin's failure and goes on without credentials: gpuctl says it once, as its error."""
    script = tmp_path / "plugin"
    script.write_text(f"#!/bin/sh\n{PLUGINS[plugin]}\n")
    script.chmod(0o755)
    path = kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")
    document = yaml.safe_load(path.read_text())
    document["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                             "command": str(script), "interactiveMode": "Never"}}
    path.write_text(yaml.safe_dump(document))

    with pytest.raises(DiscoveryError, match=f"the credential plugin of kubeconfig {path} failed") as raised:
        read_live_nodes(discovery(path))

    assert "\n" not in str(raised.value) and "fix it or the kubeconfig's users[].user.exec" in str(raised.value)
    assert capsys.readouterr() == ("", ""), "the client's own log line is not printed too"
    assert api.requests == [], "no request goes out without the credentials"


def test_the_crd_check_and_the_node_read_share_one_deadline(api: StandInApi, tmp_path: Path) -> None:
    """prod checks 2 CRDs and reads the nodes: 3 answers of 1 s each. Within a 2.5 s deadline each read alone would
    finish; together they must not, or discovery could take twice timeoutSeconds."""
    from gpuctl.render import render_plan
    from gpuctl.stackfile import stack_file_from_config
    from tests.conftest import stack_config

    api.crds = {"prometheusrules.monitoring.coreos.com", "servicemonitors.monitoring.coreos.com"}
    api.delay = 1.0
    config = stack_config("prod")
    config["gpu-platform:cluster"]["discovery"] = {
        "enabled": True, "kubeconfig": str(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")),
        "timeoutSeconds": 2.5}
    started = time.monotonic()

    with pytest.raises(DiscoveryError, match="did not answer within 2.5s"):
        render_plan(stack_file_from_config("prod", config), online=True)

    assert time.monotonic() - started < 5
    assert [urlsplit(path).path for path, _ in api.requests][-1] == "/api/v1/nodes"


def test_a_named_pipe_as_kubeconfig_is_refused_before_it_is_read(tmp_path: Path) -> None:
    pipe = tmp_path / "kubeconfig"
    os.mkfifo(pipe)

    with pytest.raises(DiscoveryError, match="is not a regular file; set gpu-platform:cluster.kubeconfig"):
        read_live_nodes(discovery(pipe, timeout_seconds=0.5))
