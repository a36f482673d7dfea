"""Kueue's controller manager, built from its Go module (e2e/tools/kueue), run against the local control plane.

It runs with the configuration the chart is given (`components.kueue.configuration()`), or for an OpenShift stack
the one the Red Hat build's operator would write from the stack's `Kueue` instance, changed only in where it runs:
webhooks served on 127.0.0.1 with a certificate from the plane's CA, no leader election, no metrics. Its CRDs and
webhook configurations are Kueue's own, read from its module (config/components), keeping only the webhooks of
Kueue's kinds and of the one integration the platform enables (batch/job), as the chart keeps them.

Stand-ins: the API server reaches the webhooks by URL (https://127.0.0.1:PORT/...), where the chart points them at
the in-cluster Service `kueue-webhook-service` and Kueue manages its own certificate. With its own certificate
management off, Kueue v0.19.2 also reads a metrics certificate from the fixed path /etc/kueue/metrics/certs
(cmd/kueue/main.go), even with metrics off: it runs in a private mount namespace (unshare) where a tmpfs over /etc
holds that certificate, so nothing is written outside the test's folder. Its visibility API server (the feature gate
VisibilityOnDemand, on by default: pkg/features/kube_features.go) reads its certificate from the fixed folder
/visibility (pkg/visibility/server.go, certDir): Kueue runs chrooted into a private root made of the host's folders
(bind mounts) plus that one. The API server reaches it through the APIService of Kueue's config/components/visibility
(insecureSkipTLSVerify, as the chart sets it without cert-manager), routed to the endpoints of a Service without
selector: the host's own non-loopback address (an endpoint may not be a loopback one), a stand-in for the chart's
`kueue-visibility-server` Service in front of Kueue's pod.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from components import labels
from components.kueue import FAIR_SHARING, configuration
from e2e.cluster import TOOLS, ControlPlane, free_port
from e2e.kube import Kube, apply_crds, service_account_kubeconfig, wait_for

WEBHOOK_GROUPS = {"kueue.x-k8s.io", "batch"}  # Kueue's kinds, and batch/job: the frameworks the platform enables
CLUSTER_SCOPED = {"clusterqueues", "resourceflavors", "cohorts"}  # the kinds whose webhooks see no namespace
# Stand-in: the five minutes both builds wait for an admitted job's pods, shortened (kwok's pods are ready within
# seconds of being scheduled, well within this).
PODS_READY_SECONDS = 30


def module() -> Path:
    """Kueue's module in the Go module cache, where the tool build put it."""
    result = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue"], cwd=TOOLS / "kueue",
                            capture_output=True, text=True, check=True, timeout=120,
                            env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"})
    return Path(result.stdout.strip())


def crds(source: Path) -> list[dict[str, Any]]:
    bases = source / "config" / "components" / "crd" / "bases"
    return [yaml.safe_load(path.read_text()) for path in sorted(bases.glob("*.yaml"))]


def webhook_configurations(source: Path, url: str, ca: bytes, managed_only: bool = False) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, each webhook pointed at `url` + its path, trusting `ca`. `managed_only`: as
    the Red Hat build's operator registers them, every webhook but those of cluster-scoped kinds only for namespaces
    labelled kueue.openshift.io/managed=true (openshift/kueue-operator release-1.4, pkg/webhook/pod_webhook.go)."""
    documents = list(yaml.safe_load_all((source / "config/components/webhook/manifests.yaml").read_text()))
    for document in documents:
        document["metadata"]["name"] = f"kueue-{document['metadata']['name']}"
        kept = []
        for webhook in document["webhooks"]:
            if {group for rule in webhook["rules"] for group in rule["apiGroups"]} <= WEBHOOK_GROUPS:
                path = webhook["clientConfig"]["service"]["path"]
                webhook["clientConfig"] = {"url": f"{url}{path}", "caBundle": base64.b64encode(ca).decode()}
                resources = {resource for rule in webhook["rules"] for resource in rule["resources"]}
                if managed_only and not resources <= CLUSTER_SCOPED:
                    selector = webhook.setdefault("namespaceSelector", {})
                    selector.setdefault("matchExpressions", []).insert(0, {
                        "key": labels.KUEUE_MANAGED_LABEL, "operator": "In", "values": ["true"]})
                kept.append(webhook)
        document["webhooks"] = kept
    return documents


def serving_certificate(pki: Path, folder: Path) -> None:
    """tls.crt and tls.key for 127.0.0.1, signed by the plane's CA, where controller-runtime looks for them."""
    folder.mkdir(parents=True)
    run = {"cwd": folder, "check": True, "capture_output": True, "timeout": 60}
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=kueue-webhook"], **run)
    (folder / "san.ext").write_text("extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")
    subprocess.run(["openssl", "x509", "-req", "-in", "tls.csr", "-CA", str(pki / "ca.crt"), "-CAkey",
                    str(pki / "ca.key"), "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "san.ext"],
                   **run)


def as_red_hat_operator_configures(instance: dict[str, Any]) -> dict[str, Any]:
    """Kueue's configuration as the Red Hat build's operator writes it from the stack's `Kueue` instance
    (openshift/kueue-operator release-1.4, pkg/configmap/configmap.go), for the settings the stack uses: a stand-in
    for that operator, which cannot run here. It sets no quota check strategy, so undeclared resources block."""
    config = instance["spec"]["config"]
    frameworks = {"BatchJob": "batch/job"}
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "integrations": {"frameworks": [frameworks[name] for name in config["integrations"]["frameworks"]]},
        "managedJobsNamespaceSelector": {"matchLabels": {labels.KUEUE_MANAGED_LABEL: "true"}},
        "manageJobsWithoutQueueName": config["workloadManagement"]["labelPolicy"] == "None",
        # FairSharing: the strategies the chart is given too (Kueue's documented defaults, buildFairSharing).
        **({"fairSharing": FAIR_SHARING} if config["preemption"]["preemptionPolicy"] == "FairSharing" else {}),
        # gangScheduling ByWorkload: a fixed five minutes, admission blocked only if Sequential (buildWaitForPodsReady).
        **({"waitForPodsReady": {"timeout": "5m", "blockAdmission": config["gangScheduling"]["byWorkload"][
            "admission"] == "Sequential"}} if config.get("gangScheduling", {}).get("policy") == "ByWorkload" else {}),
    }


def local_configuration(base: dict[str, Any], webhook_port: int, health_port: int, cert_dir: Path,
                        visibility: tuple[str, int],
                        pods_ready_seconds: int | None = PODS_READY_SECONDS) -> dict[str, Any]:
    """A configuration with only where Kueue serves changed (its visibility server at `visibility`, an address and
    port), and the time an admitted job's pods have to become ready shortened to `pods_ready_seconds` so a scenario
    sees the eviction (None: the configured time, for pods that wait for a node to be provisioned)."""
    ready = {"waitForPodsReady": {**base["waitForPodsReady"], "timeout": f"{pods_ready_seconds}s"}} if \
        "waitForPodsReady" in base and pods_ready_seconds is not None else {}
    return {**base, **ready,
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "visibilityServer": {"bindAddress": visibility[0], "bindPort": visibility[1]}}


VISIBILITY_SERVICE = "kueue-visibility-server"  # the chart's (release kueue: templates/visibility/service.yaml)
# Kueue in a root of its own: the host's top folders bound in, a tmpfs /etc holding the metrics certificate, and
# /visibility holding the visibility server's ($0: the certificates' folder, $1: the new root).
PRIVATE_ROOT = """set -e
certs=$0 root=$1; shift
mount -t tmpfs tmpfs "$root"
for d in /*; do
  n=${d#/}
  if [ -L "$d" ]; then cp -P "$d" "$root/$n"; elif [ -d "$d" ]; then mkdir "$root/$n"; mount --rbind "$d" "$root/$n"; fi
done
mount -t tmpfs tmpfs "$root/etc"
mkdir -p "$root/etc/kueue/metrics/certs" "$root/visibility"
cp "$certs/tls.crt" "$certs/tls.key" "$root/etc/kueue/metrics/certs"
cp "$certs/tls.crt" "$certs/tls.key" "$root/visibility"
exec chroot "$root" "$@"
"""


def host_address() -> str | None:
    """The host's first non-loopback, non-link-local IPv4 address (`hostname -I`), where the API server can reach
    Kueue's visibility server through an endpoint; None if it has none."""
    result = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10)
    for word in result.stdout.split():
        address = ipaddress.ip_address(word)
        if address.version == 4 and not (address.is_loopback or address.is_link_local):
            return word
    return None


def register_visibility(source: Path, admin: Kube, address: str, port: int) -> None:
    """Kueue's APIService (v1beta2) pointed at a Service without selector whose endpoint is Kueue's visibility
    server; waits until the API server reports it Available."""
    namespace = labels.KUEUE_NAMESPACE
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    admin.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": VISIBILITY_SERVICE, "namespace": namespace},
                 "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}})
    admin.apply({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": VISIBILITY_SERVICE,
                                                                      "namespace": namespace},
                 "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port}]}]})
    service = yaml.safe_load((source / "config/components/visibility/apiservice_v1beta2.yaml").read_text())
    service["spec"]["service"] = {"name": VISIBILITY_SERVICE, "namespace": namespace}
    admin.apply(service)
    wait_for(lambda: any(c["type"] == "Available" and c["status"] == "True" for c in (admin.get(
        "apiregistration.k8s.io/v1", "APIService", service["metadata"]["name"]) or {}).get("status", {}).get(
            "conditions", [])), "Kueue's visibility API available", timeout=90)


def start(plane: ControlPlane, admin: Kube, red_hat_instance: dict[str, Any] | None = None,
          pods_ready_seconds: int | None = PODS_READY_SECONDS, device_classes: tuple[str, ...] = ()) -> None:
    """Install Kueue's CRDs, run its controller manager (stopped with the plane) and register its webhooks, as the
    chart does (counting the devices of `device_classes` in allocation mode dra), or as the Red Hat build's operator
    does from its `Kueue` instance."""
    source = module()
    apply_crds(admin, crds(source))
    folder = plane.folder / "kueue"
    serving_certificate(plane.folder / "pki", folder / "certs")
    kubeconfig = service_account_kubeconfig(admin, plane.kubeconfig, folder,
                                            labels.KUEUE_CONTROLLERS[1 if red_hat_instance else 0])
    webhook_port, health_port, visibility_port = free_port(), free_port(), free_port()
    address = host_address()
    if address is None:
        raise RuntimeError("this host has no non-loopback IPv4 address: the API server cannot reach Kueue's "
                           "visibility server through an endpoint (endpoints may not be loopback addresses)")
    config = folder / "config.yaml"
    base = as_red_hat_operator_configures(red_hat_instance) if red_hat_instance else configuration(device_classes)
    config.write_text(yaml.safe_dump(local_configuration(base, webhook_port, health_port, folder / "certs",
                                                         (address, visibility_port), pods_ready_seconds)))
    (folder / "root").mkdir()
    plane.spawn("kueue", "--config", str(config), "--kubeconfig", str(kubeconfig), wrapper=(
        "unshare", "--user", "--map-root-user", "--mount", "sh", "-c", PRIVATE_ROOT, str(folder / "certs"),
        str(folder / "root")))
    plane.wait_ready(f"http://127.0.0.1:{health_port}/readyz", lambda body: body.strip() == b"ok")
    register_visibility(source, admin, address, visibility_port)
    ca = (plane.folder / "pki" / "ca.crt").read_bytes()
    for document in webhook_configurations(source, f"https://127.0.0.1:{webhook_port}", ca,
                                           managed_only=red_hat_instance is not None):
        admin.apply(document)
