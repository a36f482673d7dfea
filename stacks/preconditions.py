"""Preconditions: the CustomResourceDefinitions this stack uses but does not install, checked on the live cluster.

The GPU Operator's and NFD's CRDs come with their Helm release or OLM install, and every custom resource of
theirs waits for that install in the graph. The CRDs below belong to the cluster (OpenShift's OLM and Machine API)
or to an operator the cluster runs (the Prometheus Operator): nothing in the stack can wait for them, so before
anything is registered the program reads each one once, within one deadline, and names what is missing and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from stacks.config import PROJECT, ConfigError, DiscoveryConfig, StackConfig
from stacks.deadline import Deadline
from stacks.discovery import ClusterRead, ask_cluster, get


OLM_FIX = ("OLM is part of OpenShift 4: check that the kubeconfig reaches an OpenShift cluster, or set "
           f"{PROJECT}:cluster.flavor: kubernetes")
MACHINE_API_FIX = ("GPU pools on OpenShift are MachineSets: the cluster needs the Machine API and the cluster "
                   "autoscaler operator (an installer-provisioned cluster on AWS has both)")
TUNING_FIX = ("the Machine Config Operator and the Node Tuning Operator run on every OpenShift 4 cluster unless its "
              "NodeTuning capability is disabled: enable it, or remove profile from the pools")
MULTUS_FIX = ("install Multus (its NetworkAttachmentDefinition CRD; built into OpenShift unless the cluster network "
              "sets disableMultiNetwork), or remove networks from the tenants")
CERT_MANAGER_FIX = (f"install cert-manager (the cert-manager Operator for Red Hat OpenShift), or set {PROJECT}:"
                    "tenancy.certManager: install to let the stack install it")
KARPENTER_FIX = ("Karpenter pools need Karpenter v1 running on the cluster (its karpenter.sh and karpenter.k8s.aws "
                 "CRDs; install it with its Helm chart or use EKS Auto Mode), or make those pools Auto Scaling Groups "
                 "by removing karpenter from them")
PROMETHEUS_FIX = (f"install the Prometheus Operator (its CRDs), or set {PROJECT}:monitoring.prometheusOperator: "
                  "false to deploy without the GPU alerts and the exporter's ServiceMonitor")


@dataclass(frozen=True)
class Precondition:
    """A CRD the stack's objects need and nothing in the stack installs; `group` and `kind` of its objects."""

    name: str  # <plural>.<group>, the CRD's metadata.name
    kind: str
    fix: str

    @property
    def group(self) -> str:
        return self.name.split(".", 1)[1]


OLM = (Precondition("subscriptions.operators.coreos.com", "Subscription", OLM_FIX),
       Precondition("operatorgroups.operators.coreos.com", "OperatorGroup", OLM_FIX))
MACHINE_API = (Precondition("machinesets.machine.openshift.io", "MachineSet", MACHINE_API_FIX),
               Precondition("machineautoscalers.autoscaling.openshift.io", "MachineAutoscaler", MACHINE_API_FIX),
               Precondition("clusterautoscalers.autoscaling.openshift.io", "ClusterAutoscaler", MACHINE_API_FIX))
NODE_TUNING = (Precondition("machineconfigpools.machineconfiguration.openshift.io", "MachineConfigPool", TUNING_FIX),
               Precondition("performanceprofiles.performance.openshift.io", "PerformanceProfile", TUNING_FIX),
               Precondition("tuneds.tuned.openshift.io", "Tuned", TUNING_FIX))
CERT_MANAGER = (Precondition("issuers.cert-manager.io", "Issuer", CERT_MANAGER_FIX),
                Precondition("certificates.cert-manager.io", "Certificate", CERT_MANAGER_FIX))
KARPENTER = (Precondition("nodepools.karpenter.sh", "NodePool", KARPENTER_FIX),
             Precondition("ec2nodeclasses.karpenter.k8s.aws", "EC2NodeClass", KARPENTER_FIX))
MULTUS = (Precondition("network-attachment-definitions.k8s.cni.cncf.io", "NetworkAttachmentDefinition", MULTUS_FIX),)
PROMETHEUS_OPERATOR = (Precondition("prometheusrules.monitoring.coreos.com", "PrometheusRule", PROMETHEUS_FIX),
                       Precondition("servicemonitors.monitoring.coreos.com", "ServiceMonitor", PROMETHEUS_FIX))


# The largest CRDs (the GPU Operator's ClusterPolicy) are about a megabyte of JSON.
MAX_CRD_BYTES = 16 << 20


class PreconditionError(ConfigError):
    """A CRD the stack needs is missing, or the check could not read the cluster; one line with the fix."""


def required_crds(config: StackConfig) -> tuple[Precondition, ...]:
    """The CRDs this config's objects need that the stack does not install.

    OpenShift: OLM's (Subscription, OperatorGroup) and the Machine API's (MachineSet, MachineAutoscaler,
    ClusterAutoscaler); with node profiles, the Machine Config and Node Tuning Operators' (MachineConfigPool,
    PerformanceProfile, Tuned); in queue mode with `tenancy.certManager: existing`, cert-manager's (Issuer,
    Certificate), which the Red Hat build of Kueue uses. Karpenter pools: Karpenter's NodePool and EC2NodeClass (the
    cluster runs Karpenter; the stack declares pools only). Tenant networks: Multus's NetworkAttachmentDefinition. With
    `monitoring.prometheusOperator`: PrometheusRule (the GPU alerts) and ServiceMonitor (the GPU Operator creates
    the DCGM exporter's from the ClusterPolicy).
    """
    needed: tuple[Precondition, ...] = ()
    if config.cluster.flavor == "openshift":
        needed += OLM + MACHINE_API
        if any(getattr(pool, "profile", None) for pool in config.node_pools):
            needed += NODE_TUNING
        if config.tenancy.cert_manager == "existing":  # a setting of queue mode on OpenShift only
            needed += CERT_MANAGER
    if any(getattr(pool, "karpenter", None) for pool in config.node_pools):
        needed += KARPENTER
    if any(getattr(tenant, "networks", ()) for tenant in config.tenants):
        needed += MULTUS
    if config.prometheus_operator:
        needed += PROMETHEUS_OPERATOR
    return needed


def check_crds(discovery: DiscoveryConfig, needed: tuple[Precondition, ...], deadline: Deadline | None = None) -> None:
    """GET each CRD once from the cluster the kubeconfig reaches, all before `deadline` (default: `timeoutSeconds`
    from now).

    Raises:
        PreconditionError: a CRD is missing (every missing one is named, with its fix), or the cluster could not
            be read (unreachable, no answer in time, credentials, rights, server error).
    """
    if not needed:
        return
    missing, server = ask_cluster(discovery, lambda api, timeout: _missing(api, needed, timeout), PreconditionError,
                                  ClusterRead(answer="the CRD check ", doing="reading CRDs",
                                              rights="get customresourcedefinitions",
                                              grant="bind it a ClusterRole with get on "
                                                    "customresourcedefinitions.apiextensions.k8s.io"), deadline)
    if missing:
        fixes = list(dict.fromkeys(precondition.fix for precondition in missing))
        names = ", ".join(f"{p.name} ({p.kind})" for p in missing)
        raise PreconditionError(f"the cluster at {server} lacks the CRDs {names}, which this stack uses but does "
                                f"not install; {'; '.join(fixes)}")


def _missing(api: client.ApiClient, needed: tuple[Precondition, ...], timeout: float) -> list[Precondition]:
    missing = []
    for precondition in needed:
        try:
            response = get(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", timeout,
                           path_params={"name": precondition.name})
        except ApiException as error:
            if error.status != 404:
                raise
            missing.append(precondition)
            continue
        try:
            body = response.read(MAX_CRD_BYTES + 1)
        finally:
            response.release_conn()
        if not _is_crd(body, precondition):
            # A proxy's sign-in page or a catch-all answers 200 too: only the CRD itself shows it is there.
            raise PreconditionError(
                f"the API server at {api.configuration.host} answered the CRD check for {precondition.name} with "
                "something that is not that CustomResourceDefinition; check that the kubeconfig's server URL points "
                "at the Kubernetes API, not at a proxy or sign-in page")
    return missing


def _is_crd(body: bytes, precondition: Precondition) -> bool:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return (isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition"
            and isinstance(document.get("metadata"), dict) and document["metadata"].get("name") == precondition.name)
