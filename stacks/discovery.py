"""Live discovery: the cluster's GPU nodes and the kernels NFD saw on them, read through a kubeconfig."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from components import labels
from fleet.kernels import ObservedNode
from stacks.config import PROJECT, ConfigError, DiscoveryConfig
from stacks.deadline import Deadline, DeadlineExceeded, within
from stacks.inventory import parse_node_list

GPU_NODE_SELECTOR = f"{labels.NVIDIA_PCI_LABEL}=true"
_TIMEOUT_KEY = f"{PROJECT}:cluster.discovery.timeoutSeconds"
_KUBECONFIG_KEY = f"{PROJECT}:cluster.kubeconfig"
# A GPU node is a few kilobytes of JSON: this cap is thousands of nodes, and stops an endless answer.
MAX_NODE_LIST_BYTES = 64 << 20
T = TypeVar("T")


class DiscoveryError(ConfigError):
    """The live read of the GPU nodes failed; one line saying what failed, where, and the fix."""


def read_live_nodes(discovery: DiscoveryConfig, deadline: Deadline | None = None) -> list[ObservedNode]:
    """Read the GPU nodes from the cluster the kubeconfig (and context) reaches, in one request bounded as a whole
    by `deadline` (default: `timeoutSeconds` from now; not per read) and in size.

    Raises:
        DiscoveryError: the kubeconfig, the connection, the credentials or the answer failed; never returns a
            partial list.
    """
    body, server = ask_cluster(discovery, lambda api, timeout: read_nodes(api, timeout, GPU_NODE_SELECTOR),
                               DiscoveryError, ClusterRead(answer="", doing="listing GPU nodes", rights="list nodes",
                                                           grant="bind it a ClusterRole with get and list on nodes"),
                               deadline)
    document = node_list(body, server, DiscoveryError)
    try:
        return parse_node_list(document, f"nodes at {server}")
    except ConfigError as error:
        raise DiscoveryError(str(error)) from None


def node_list(body: bytes, server: str, error: type[ConfigError]) -> dict:
    """The body of a node list read (`read_nodes`) as a v1 NodeList, or `error` naming what came instead."""
    if len(body) > MAX_NODE_LIST_BYTES:
        raise error(
            f"the API server at {server} answered the node list with over {MAX_NODE_LIST_BYTES >> 20} MiB; "
            "check that the kubeconfig's server URL points at the Kubernetes API"
        )
    try:
        document = json.loads(body)
    except ValueError:
        raise error(
            f"the API server at {server} answered the node list with something that is not JSON; "
            "check that the kubeconfig's server URL points at the Kubernetes API"
        ) from None
    if not isinstance(document, dict) or document.get("kind") != "NodeList" or \
            not isinstance(document.get("items") or [], list):
        raise error(
            f"the API server at {server} answered the node list with something that is not a v1 NodeList; "
            "check that the kubeconfig's server URL points at the Kubernetes API"
        )
    return document


@dataclass(frozen=True)
class ClusterRead:
    """One read of the cluster, in the words its errors use: what was asked, and the rights it needs."""

    answer: str  # what did not come in time, e.g. "the CRD check " ("" for the node list)
    doing: str  # "listing GPU nodes"
    rights: str  # "list nodes"
    grant: str  # how to give them


def ask_cluster(discovery: DiscoveryConfig, request: Callable[[client.ApiClient, float], T],
                error: type[ConfigError], read: ClusterRead, deadline: Deadline | None = None) -> tuple[T, str]:
    """Run `request` against the cluster the kubeconfig reaches; return its answer and the API server's address, or
    raise `error` with one line naming the failure and the fix.

    Everything happens before `deadline` (default: `timeoutSeconds` from now): loading the kubeconfig, which runs
    its credential plugin (`aws eks get-token`, say), as much as the request itself.
    """
    deadline = deadline or Deadline(discovery.timeout_seconds)
    server: list[str] = []

    def ask() -> T:
        api = _api_client(discovery)
        server.append(api.configuration.host)
        with api:
            return request(api, max(deadline.remaining(), 0.001))

    try:
        return within(deadline.remaining(), ask), server[0]
    except DeadlineExceeded:
        if not server:
            raise error(
                f"loading the kubeconfig did not finish within {deadline.seconds:g}s (its credential plugin, such as "
                f"`aws eks get-token`, did not answer); run that command by hand to see why, or raise {_TIMEOUT_KEY}"
            ) from None
        raise error(
            f"the API server at {server[0]} did not answer {read.answer}within {deadline.seconds:g}s; "
            f"check the network path to the cluster, or raise {_TIMEOUT_KEY}"
        ) from None
    except ApiException as refused:
        raise error(_refusal(refused, server[0], read)) from None
    except urllib3.exceptions.HTTPError as failed:
        raise error(_connection_failure(failed, server[0], discovery, read)) from None


def get(api: client.ApiClient, path: str, timeout: float, path_params: dict[str, str] | None = None,
        query: dict[str, str] | None = None) -> urllib3.BaseHTTPResponse:
    """GET `path` as the client's generated API classes send it (bearer token auth, JSON), the answer unread; a
    status outside 2xx raised as their ApiException, as kubernetes/client/api_client.py
    `ApiClient._call_with_legacy_options` raises it for `_preload_content=False`. Without those classes: the first use
    of one loads the models of its whole API group (CoreV1Api: 250 pydantic classes, 0.6 s), which a raw read never
    uses."""
    request = api.param_serialize("GET", path, path_params=path_params, query_params=list((query or {}).items()),
                                  header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
    response = api.call_api(*request, _request_timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response


def read_nodes(api: client.ApiClient, timeout: float, selector: str) -> bytes:
    """The raw body of the list of the nodes `selector` selects, read in chunks and cut one byte past the cap."""
    response = get(api, "/api/v1/nodes", timeout, query={"labelSelector": selector})
    body = bytearray()
    try:
        for chunk in response.stream(1 << 16, decode_content=True):
            body += chunk
            if len(body) > MAX_NODE_LIST_BYTES:
                break
    finally:
        response.release_conn()
    return bytes(body)


def _api_client(discovery: DiscoveryConfig) -> client.ApiClient:
    """An API client for the configured kubeconfig and context, or the default kubeconfig's current context."""
    where = f"kubeconfig {discovery.kubeconfig}" if discovery.kubeconfig else "the default kubeconfig"
    if discovery.context:
        where += f" (context {discovery.context})"
    if discovery.kubeconfig and not Path(discovery.kubeconfig).expanduser().is_file():
        # A named pipe or a device is refused too, before anything reads it.
        problem = "is not a regular file" if Path(discovery.kubeconfig).expanduser().exists() else "does not exist"
        raise DiscoveryError(f"{where} {problem}; set {_KUBECONFIG_KEY} to the path of a kubeconfig file")
    configuration = client.Configuration()
    configuration.retries = False  # one attempt, so timeoutSeconds bounds the whole read
    try:
        with _PluginErrors() as plugin:
            api = config.new_client_from_config(
                config_file=discovery.kubeconfig,
                context=discovery.context,
                persist_config=False,
                client_configuration=configuration,
            )
    except (config.ConfigException, OSError, ValueError, yaml.YAMLError) as error:
        raise DiscoveryError(
            f"could not load {where}: {_one_line(error)}; "
            f"set {_KUBECONFIG_KEY} (and context) to a kubeconfig that reaches the cluster"
        ) from None
    if plugin.messages:
        raise DiscoveryError(
            f"the credential plugin of {where} failed ({_one_line(plugin.messages[0])}); run its command by hand "
            "to see why, and fix it or the kubeconfig's users[].user.exec"
        )
    return api


class _PluginErrors(logging.Handler):
    """What the Kubernetes client logs, and does not raise, when a kubeconfig's credential plugin fails (it would
    go on without credentials): kept to be raised as one line, not printed as a second one. Kubernetes client
    kube_config.py, KubeConfigLoader._load_from_exec_plugin: `except Exception as e: logging.error(str(e))`."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []
        self._alone = False

    def __enter__(self) -> _PluginErrors:
        root = logging.getLogger()
        self._alone = not root.handlers  # else logging.error() would add a handler printing to stderr for good
        root.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if record.module in ("kube_config", "exec_provider"):
            self.messages.append(record.getMessage())
        elif self._alone and logging.lastResort is not None:  # anything else is printed as it would have been
            logging.lastResort.handle(record)


def _refusal(error: ApiException, server: str, read: ClusterRead) -> str:
    """Explain a refused request: rejected credentials, missing rights, TLS, server errors."""
    if error.status == 401:
        return (
            f"the API server at {server} rejected the kubeconfig's credentials (401 Unauthorized) when {read.doing}; "
            "log in again or refresh the token in the kubeconfig"
        )
    if error.status == 403:
        return (
            f"the API server at {server} forbids the kubeconfig's user to {read.rights} (403 Forbidden); "
            f"{read.grant}, or use a context that has one"
        )
    if not error.status:
        return (
            f"TLS with the API server at {server} failed ({_one_line(error.reason)}); "
            "check the kubeconfig's certificate-authority data and server name"
        )
    return (
        f"the API server at {server} answered {error.status} {error.reason} when {read.doing}; "
        "retry when the cluster is healthy"
    )


def _connection_failure(error: urllib3.exceptions.HTTPError, server: str, discovery: DiscoveryConfig,
                        read: ClusterRead) -> str:
    """Explain a request that got no answer: no connection, no answer in time, a dropped connection."""
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2, so it is told apart first.
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        cause = error.__cause__
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else "no connection"
        return (
            f"could not reach the API server at {server} ({reason}); "
            "check the kubeconfig's server URL and the network path to the cluster (VPN, firewall)"
        )
    if isinstance(error, urllib3.exceptions.TimeoutError):  # its timeout is what is left of the deadline
        return (
            f"the API server at {server} did not answer {read.answer}within {discovery.timeout_seconds:g}s; "
            f"check the network path to the cluster, or raise {_TIMEOUT_KEY}"
        )
    return (
        f"the connection to the API server at {server} failed ({_one_line(error)}); "
        "check the kubeconfig's server URL and the network path to the cluster"
    )


def _one_line(value: object) -> str:
    return " ".join(str(value).split())
