"""A thin layer over the Kubernetes Python client: server-side apply, users by impersonation, bounded waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import config as kube_config
from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ApiException, ResourceNotFoundError

FIELD_MANAGER = "gpu-platform-e2e"
T = TypeVar("T")


class Kube:
    """One identity on the cluster: the admin, or a user the admin impersonates (with one group)."""

    def __init__(self, kubeconfig: Path, *, user: str | None = None, group: str | None = None):
        api = kube_config.new_client_from_config(str(kubeconfig))
        if user:
            api.set_default_header("Impersonate-User", user)
        if group:
            api.set_default_header("Impersonate-Group", group)
        self.api: ApiClient = api
        self.dynamic = DynamicClient(api)

    def resource(self, api_version: str, kind: str) -> Any:
        try:
            return self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            self.dynamic.resources.invalidate_cache()  # a CRD installed since discovery last ran
            return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply, as `kubectl apply --server-side --force-conflicts` does: a field the schema does not
        declare is an error (fieldValidation=Strict), not silently pruned."""
        resource = self.resource(obj["apiVersion"], obj["kind"])
        result = resource.server_side_apply(body=obj, namespace=obj["metadata"].get("namespace"),
                                            field_manager=FIELD_MANAGER, force_conflicts=True,
                                            dry_run="All" if dry_run else None,
                                            query_params=[("fieldValidation", "Strict")])
        return result.to_dict()

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        resource = self.resource(obj["apiVersion"], obj["kind"])
        return resource.create(body=obj, namespace=obj["metadata"].get("namespace")).to_dict()

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict]:
        return self.resource(api_version, kind).get(namespace=namespace).to_dict()["items"]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete at once (no grace period), dependents in the background."""
        self.resource(api_version, kind).delete(name=name, namespace=namespace, grace_period_seconds=0,
                                                propagation_policy="Background")

    def can(self, verb: str, resource: str, namespace: str, group: str = "", subresource: str = "") -> bool:
        """SelfSubjectAccessReview: may this identity do `verb` on `resource` in `namespace`?"""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                  "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "group": group,
                                                  "namespace": namespace, "subresource": subresource}}}
        return bool(self.create(review)["status"]["allowed"])

    def close(self) -> None:
        self.api.close()


def apply_crds(admin: Kube, crds: list[dict[str, Any]], timeout: float = 60) -> None:
    """Apply CustomResourceDefinitions and wait until the API server serves each (Established)."""
    for crd in crds:
        admin.apply(crd)
    for crd in crds:
        name = crd["metadata"]["name"]
        wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in ((admin.get(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", name) or {}).get("status") or {}).get(
                "conditions") or []), f"CRD {name} established", timeout=timeout)


def service_account_kubeconfig(admin: Kube, kubeconfig: Path, folder: Path, identity: str) -> Path:
    """A kubeconfig by which a controller works as its own service account `identity`
    (system:serviceaccount:NAMESPACE:NAME; the admin of `kubeconfig` impersonates it), so the API server and the
    stack's policies see that identity as in a cluster. Stand-in: the account is bound to cluster-admin here, for the
    ClusterRole its chart (or operator) grants, which is not applied."""
    namespace, account = identity.split(":")[2:]
    admin.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": f"{account}-stand-in"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    config = yaml.safe_load(kubeconfig.read_text())
    for user in config["users"]:
        user["user"].update({"as": identity, "as-groups": [
            "system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def api_message(error: ApiException) -> str:
    """The message of the API server's Status in an error response."""
    status = yaml.safe_load(error.body) if error.body else None
    return str(status.get("message", error.body)) if isinstance(status, dict) else str(error)


def refusal(call: Callable[[], Any]) -> str:
    """The API server's message for a request it refuses; fails the test if it is accepted."""
    try:
        call()
    except ApiException as error:
        if error.status in (400, 403, 409, 422):
            return api_message(error)
        raise
    raise AssertionError("the API server accepted a request it should refuse")


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 60, interval: float = 0.5) -> T:
    """Poll `probe` until it returns something truthy, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(interval)


def stays(probe: Callable[[], bool], seconds: float, interval: float = 1.0) -> bool:
    """Whether `probe` holds at every look for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not probe():
            return False
        time.sleep(interval)
    return True
