"""The cluster's settings: flavor, version and release, discovery of what it already runs, Karpenter's cluster
settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, Strict, StrictBool, model_validator

from components import labels
from fleet.catalog import OPENSHIFT_KUBERNETES, OPENSHIFT_RELEASES
from fleet.kernels import KernelTarget
from stacks.config.fields import (MAX_LABEL_VALUE, SUPPORTED_KUBERNETES_VERSIONS, StrictModel, check_kernel, dns_label,
                                  trusted_namespace)


class DiscoveryConfig(StrictModel):
    """Live read of the kernels running on the cluster's GPU nodes (NFD labels), through a kubeconfig.

    On by default: under `pulumi up` it is the evidence that lets a driver go when no node runs its kernel.
    """

    enabled: StrictBool = True
    kubeconfig: str | None = None
    context: str | None = None
    timeout_seconds: Annotated[float, Strict()] = Field(default=10.0, gt=0, le=120)


_TAGS = dict[Annotated[str, Field(min_length=1, max_length=128)], Annotated[str, Field(min_length=1, max_length=256)]]


class KarpenterClusterConfig(StrictModel):
    """Kubernetes on AWS: what every Karpenter pool's EC2NodeClass shares. Karpenter itself is the cluster's."""

    node_role: str = Field(pattern=r"^[A-Za-z0-9_+=,.@-]{1,64}$",
                           description="IAM role of the nodes Karpenter launches (its instance profile is Karpenter's)")
    subnet_tags: _TAGS | None = Field(default=None, max_length=20, description=(
        "tags that select the subnets nodes launch in; default karpenter.sh/discovery: <cluster name>"))
    security_group_tags: _TAGS | None = Field(default=None, max_length=20, description=(
        "tags that select the nodes' security groups; default karpenter.sh/discovery: <cluster name>"))


class ClusterConfig(StrictModel):
    """The cluster the platform lands on."""

    name: Annotated[str, dns_label(40)]
    flavor: Literal["openshift", "kubernetes"]
    kubernetes_version: str | None = None
    release: str | None = Field(default=None, pattern=r"^4\.[0-9]+\.[0-9]+$",
                                description="OpenShift release, e.g. 4.18.21")
    kernel: str | None = Field(default=None, description="OpenShift: the RHCOS kernel the release ships (uname -r)")
    nfd_operator_csv: str | None = Field(default=None, pattern=r"^nfd\.4\.[0-9]+\.[0-9]+-[0-9]{12}$",
                                         description="OpenShift: the NFD operator CSV to pin (default per release)")
    region: str = Field(default="us-east-1", pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
    infrastructure_id: Annotated[str, dns_label(MAX_LABEL_VALUE)] | None = Field(
        default=None, description="OpenShift infrastructure name (MachineSet prefix, and its machines' label value)")
    kubeconfig: str | None = Field(default=None, min_length=1,
                                   description="kubeconfig path of the provider and discovery; default $KUBECONFIG "
                                               "or ~/.kube/config")
    context: str | None = Field(default=None, min_length=1, description="its context; default its current context")
    subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = ()
    security_group_ids: tuple[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")], ...] = ()
    instance_profile: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_+=,.@-]{1,128}$",
                                         description="Kubernetes: IAM instance profile name of the nodes")
    node_termination_handler_role: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_+=,.@-]{1,64}$",
        description="Kubernetes: IAM role of the nodes the node termination handler runs on; gets its policy")
    discovery: DiscoveryConfig = DiscoveryConfig()
    karpenter: KarpenterClusterConfig | None = Field(
        default=None, description="Kubernetes on AWS: the node role and selectors of the Karpenter pools")
    monitoring_namespaces: tuple[Annotated[str, dns_label(63)], ...] | None = Field(
        default=None, description="namespaces whose Prometheus may scrape tenants; default by flavor")
    project_self_provisioning: StrictBool = Field(
        default=False, description="OpenShift: let every user create projects (namespaces outside the tenants' "
                                   "quotas); off by default on GPU clusters")
    trusted_namespaces: tuple[Annotated[str, dns_label(63), AfterValidator(trusted_namespace)], ...] = Field(
        default=(), description="namespaces of cluster add-ons whose node agents tolerate every taint (logging, "
                                "security); the GPU guard leaves them out as it does kube-system")

    @property
    def scrapers(self) -> tuple[str, ...]:
        """Namespaces allowed into tenant namespaces to scrape metrics: OpenShift's two monitoring stacks, or one."""
        if self.monitoring_namespaces is not None:
            return self.monitoring_namespaces
        if self.flavor == "openshift":
            return ("openshift-monitoring", "openshift-user-workload-monitoring")
        return ("monitoring",)

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        self._one_kubeconfig()
        if self.flavor == "openshift":
            self._check_openshift()
        else:
            if self.release or self.kernel:
                raise ValueError("release and kernel belong to OpenShift clusters; on Kubernetes each pool declares "
                                 "the kernel its image boots")
            if self.karpenter is not None and self.flavor == "kubernetes":
                tags = {"karpenter.sh/discovery": self.name}
                object.__setattr__(self, "karpenter", self.karpenter.model_copy(update={
                    "subnet_tags": self.karpenter.subnet_tags or tags,
                    "security_group_tags": self.karpenter.security_group_tags or tags}))
            if "project_self_provisioning" in self.model_fields_set:
                raise ValueError("projectSelfProvisioning applies to OpenShift (its self-provisioner role); on "
                                 "Kubernetes who may create namespaces is your RBAC's: remove it")
        if self.kubernetes_version is None:
            raise ValueError("kubernetesVersion is required on Kubernetes, as \"1.NN\"")
        if self.kubernetes_version not in SUPPORTED_KUBERNETES_VERSIONS:
            raise ValueError(
                f"kubernetesVersion {self.kubernetes_version!r} is not supported; use one of "
                f"{SUPPORTED_KUBERNETES_VERSIONS[0]}..{SUPPORTED_KUBERNETES_VERSIONS[-1]} as \"1.NN\" (tenant pods are "
                "fenced by a ValidatingAdmissionPolicy, GA in 1.30)"
            )
        return self

    def _one_kubeconfig(self) -> None:
        """The Kubernetes provider and live discovery reach the same cluster: cluster.kubeconfig and context, or
        (as older stack files set them) cluster.discovery's, copied to both."""
        for field in ("kubeconfig", "context"):
            own, discovery = getattr(self, field), getattr(self.discovery, field)
            if own and discovery and own != discovery:
                raise ValueError(f"{field} is set twice, {own!r} here and {discovery!r} in discovery; the provider and "
                                 f"discovery must reach the same cluster: keep cluster.{field} only")
            object.__setattr__(self, field, own or discovery)
        object.__setattr__(self, "discovery", self.discovery.model_copy(
            update={"kubeconfig": self.kubeconfig, "context": self.context}))

    def _check_openshift(self) -> None:
        if self.karpenter is not None:
            raise ValueError("karpenter applies to Kubernetes on AWS; OpenShift pools are MachineSets, scaled by the "
                             "cluster autoscaler: remove it")
        if self.node_termination_handler_role:
            raise ValueError("nodeTerminationHandlerRole applies to Kubernetes (Auto Scaling Group pools); OpenShift "
                             "drains machines itself: remove it")
        if not self.infrastructure_id:
            raise ValueError("infrastructureId is required on OpenShift "
                             "(oc get infrastructure cluster -o jsonpath='{.status.infrastructureName}')")
        if not self.release or not self.kernel:
            raise ValueError("release and kernel are required on OpenShift: the release (oc get clusterversion) and "
                             "the RHCOS kernel it ships (uname -r on a node), which every node runs")
        if self.minor not in OPENSHIFT_RELEASES:
            raise ValueError(f"release {self.release!r} is not supported; use OpenShift "
                             f"{', '.join(OPENSHIFT_RELEASES)}")
        openshift = OPENSHIFT_RELEASES[self.minor]
        if len(self.kernel) <= MAX_LABEL_VALUE and not openshift.is_kernel(self.kernel):
            raise ValueError(f"kernel {self.kernel!r} is not an RHCOS kernel release (uname -r) of OpenShift "
                             f"{self.minor}, whose RHCOS is built on RHEL 9.{openshift.rhel_minor} "
                             f"(el9_{openshift.rhel_minor} kernels, e.g. {openshift.kernel_example!r}); write what "
                             "uname -r prints on one of its nodes")
        check_kernel(self.kernel, self.node_os, "an RHCOS")
        if self.nfd_operator_csv is None and self.minor not in labels.NFD_OLM_CSVS:
            raise ValueError(f"nfdOperatorCsv is required for OpenShift {self.minor}: the NFD operator version to pin, "
                             "as `oc get packagemanifest nfd -n openshift-marketplace -o jsonpath="
                             "'{.status.channels[?(@.name==\"stable\")].currentCSV}'` prints it")
        expected = OPENSHIFT_KUBERNETES[self.minor]
        if self.kubernetes_version is None:
            object.__setattr__(self, "kubernetes_version", expected)
        elif self.kubernetes_version != expected:
            raise ValueError(f"kubernetesVersion {self.kubernetes_version!r} does not match OpenShift {self.minor}, "
                             f"which runs Kubernetes {expected}; set {expected!r} or leave it out")

    @property
    def minor(self) -> str:
        """OpenShift: the release's minor, 4.NN."""
        return self.release.rsplit(".", 1)[0]

    @property
    def nfd_csv(self) -> str:
        """OpenShift: the pinned NFD operator CSV."""
        return self.nfd_operator_csv or labels.NFD_OLM_CSVS[self.minor]

    @property
    def node_os(self) -> str:
        """OpenShift: the node OS of the release as the GPU Operator keys it (rhcos4.18; rhel9 from 4.19)."""
        return OPENSHIFT_RELEASES[self.minor].node_os

    @property
    def kernel_target(self) -> KernelTarget | None:
        """OpenShift: the kernel every node runs once the Machine Config Operator has rolled the release."""
        return KernelTarget(self.node_os, self.kernel) if self.flavor == "openshift" else None
