"""The whole stack configuration as strict pydantic models, and the one place that reads Pulumi config."""

from __future__ import annotations

import difflib
import json
import re
from typing import Annotated, Any, Literal

import pulumi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from components import labels
from stacks.catalog import INSTANCE_TYPES, NODE_OSES, InstanceType

PROJECT = "gpu-platform"
# From 1.30: tenant pods are fenced by a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.30).
SUPPORTED_KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(30, 38))
RESERVED_NAMESPACES = re.compile(r"^(default|kube-.*|openshift.*|gpu-system|node-feature-discovery)$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# Sane upper bounds: far above any real pool or quota, low enough to catch a stray digit.
MAX_POOL_NODES = 1000
MAX_TENANT_GPUS = 100_000
_CPU = r"^([1-9]\d{0,5}|[1-9]\d{0,8}m)$"  # whole cores or millicores
_MEMORY = r"^[1-9]\d{0,6}(Mi|Gi|Ti)$"


class ConfigError(ValueError):
    """A stack configuration mistake, already phrased as one line naming the field and the fix."""


def _dns_label(max_length: int):
    def check(value: str) -> str:
        if len(value) > max_length or not _DNS_LABEL.match(value):
            raise ValueError(
                f"{value!r} must be a DNS-1123 label: lowercase letters, digits and '-', "
                f"starting and ending with a letter or digit, at most {max_length} characters"
            )
        return value

    return AfterValidator(check)


class StrictModel(BaseModel):
    """Base for every config model: camelCase keys as in the stack files, unknown keys rejected, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class DiscoveryConfig(StrictModel):
    """Live read of the kernels running on the cluster's GPU nodes (NFD labels), through a kubeconfig."""

    enabled: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    timeout_seconds: float = Field(default=10.0, gt=0, le=120)


class ClusterConfig(StrictModel):
    """The cluster the platform lands on."""

    name: Annotated[str, _dns_label(40)]
    flavor: Literal["openshift", "kubernetes"]
    kubernetes_version: str
    region: str = Field(default="us-east-1", pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
    infrastructure_id: str | None = Field(default=None, description="OpenShift infrastructure name (MachineSet prefix)")
    subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = ()
    security_group_ids: tuple[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")], ...] = ()
    instance_profile: str | None = None
    discovery: DiscoveryConfig = DiscoveryConfig()
    monitoring_namespaces: tuple[Annotated[str, _dns_label(63)], ...] | None = Field(
        default=None, description="namespaces whose Prometheus may scrape tenants; default by flavor")

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
        if self.kubernetes_version not in SUPPORTED_KUBERNETES_VERSIONS:
            raise ValueError(
                f"kubernetesVersion {self.kubernetes_version!r} is not supported; use one of "
                f"{SUPPORTED_KUBERNETES_VERSIONS[0]}..{SUPPORTED_KUBERNETES_VERSIONS[-1]} as \"1.NN\" (tenant pods are "
                "fenced by a ValidatingAdmissionPolicy, GA in 1.30)"
            )
        if self.flavor == "openshift" and not self.infrastructure_id:
            raise ValueError("infrastructureId is required on OpenShift (oc get infrastructure cluster -o jsonpath='{.status.infrastructureName}')")
        if self.flavor == "kubernetes" and not (self.subnet_ids and self.security_group_ids and self.instance_profile):
            raise ValueError("subnetIds, securityGroupIds and instanceProfile are required on Kubernetes (Auto Scaling Group pools)")
        return self


class NodePoolConfig(StrictModel):
    """A pool of identical GPU nodes booting one image, hence one kernel."""

    name: Annotated[str, _dns_label(30)]
    instance_type: str
    replicas: int = Field(ge=0, le=MAX_POOL_NODES)
    min_replicas: int = Field(default=0, ge=0, le=MAX_POOL_NODES)
    max_replicas: int | None = Field(default=None, ge=0, le=MAX_POOL_NODES)
    os: str
    kernel: str
    image: str = Field(pattern=r"^ami-[0-9a-f]{8,17}$")
    availability_zone: str | None = None
    root_volume_gib: int = Field(default=200, ge=50, le=16384)

    @model_validator(mode="after")
    def _check(self) -> NodePoolConfig:
        if self.instance_type not in INSTANCE_TYPES:
            close = difflib.get_close_matches(self.instance_type, INSTANCE_TYPES, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(INSTANCE_TYPES))}"
            raise ValueError(f"instanceType {self.instance_type!r} is not a known GPU instance type; {hint}")
        node_os = NODE_OSES.get(self.os)
        if node_os is None:
            raise ValueError(f"os {self.os!r} is not supported; use one of {', '.join(NODE_OSES)}")
        if not node_os.kernel_pattern.match(self.kernel):
            raise ValueError(
                f"kernel {self.kernel!r} is not a {self.os} kernel release (uname -r), e.g. {node_os.kernel_example!r}"
            )
        if self.max_replicas is not None and not self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError("replicas must lie within minReplicas..maxReplicas")
        if self.min_replicas > self.replicas:
            raise ValueError("minReplicas must not exceed replicas")
        return self

    @property
    def instance(self) -> InstanceType:
        return INSTANCE_TYPES[self.instance_type]

    @property
    def gpu_capacity(self) -> int:
        return self.replicas * self.instance.gpus

    @property
    def autoscaler_max(self) -> int:
        return self.replicas if self.max_replicas is None else self.max_replicas

    def zone(self, cluster: ClusterConfig) -> str:
        """The availability zone of the pool's machines: the one set, or the region's first."""
        return self.availability_zone or f"{cluster.region}a"

    def machine_set_name(self, cluster: ClusterConfig) -> str:
        """OpenShift MachineSet name; its machines carry it as a label value, so it has at most 63 characters."""
        return f"{cluster.infrastructure_id}-gpu-{self.name}-{self.zone(cluster)}"


class DriverConfig(StrictModel):
    """The NVIDIA data-center driver: branch and version, and the registry holding its precompiled images."""

    branch: str = Field(default="580", pattern=r"^\d{3}$")
    version: str = Field(default="580.95.05", pattern=r"^\d{3}\.\d+(\.\d+)?$")
    repository: str = Field(default=labels.NVIDIA_REGISTRY, pattern=r"^[a-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)*$")

    @model_validator(mode="after")
    def _check(self) -> DriverConfig:
        if not self.version.startswith(f"{self.branch}."):
            raise ValueError(f"version {self.version!r} is not on branch {self.branch!r}; set both together")
        return self


class TenantConfig(StrictModel):
    """A team with its own namespace and a GPU quota."""

    name: Annotated[str, _dns_label(50)]
    gpus: int = Field(ge=0, le=MAX_TENANT_GPUS)
    priority_class: Literal["gpu-high", "gpu-low"] = labels.LOW_PRIORITY_CLASS
    group: str | None = Field(default=None, min_length=1)
    retired: bool = Field(default=False, description="unprotect the namespace so a later change may remove it")
    cpu: str = Field(default="64", pattern=_CPU, description="quota on the sum of CPU requests")
    memory: str = Field(default="256Gi", pattern=_MEMORY, description="quota on the sum of memory requests")
    pods: int = Field(default=200, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check(self) -> TenantConfig:
        if RESERVED_NAMESPACES.match(self.name):
            raise ValueError(f"name {self.name!r} is a system namespace; choose a team name")
        return self

    @property
    def rbac_group(self) -> str:
        return self.group or self.name


class DevicePluginConfig(StrictModel):
    """Device plugin options."""

    time_slicing_replicas: int | None = Field(default=None, ge=2, le=64)


def _image(default: str):
    return Field(default=default, pattern=r"^[a-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)+(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$")


class ImagesConfig(StrictModel):
    """Images of the node agents, pinned to NVIDIA's and NFD's current releases."""

    nfd: str = _image(labels.IMAGES["nfd"])
    toolkit: str = _image(labels.IMAGES["toolkit"])
    device_plugin: str = _image(labels.IMAGES["devicePlugin"])
    dcgm_exporter: str = _image(labels.IMAGES["dcgmExporter"])
    validator: str = _image(labels.IMAGES["validator"])
    cuda_sample: str = _image(labels.IMAGES["cudaSample"])


def _docker_config_json(secret: SecretStr) -> SecretStr:
    """A `.dockerconfigjson` document: {"auths": {registry: {"auth": ...} | {"username", "password"}}}."""
    try:
        document = json.loads(secret.get_secret_value())
    except ValueError:
        document = None
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict) or not auths or not all(
            isinstance(entry, dict) and ("auth" in entry or {"username", "password"} <= set(entry))
            for entry in auths.values()):
        # The value is never shown: it is a credential.
        raise ValueError('is not a .dockerconfigjson document ({"auths": {"<registry>": {"auth": "<base64>"}}}); '
                         "set it from the file: pulumi config set --secret registryPullSecret < config.json")
    return secret


class StackConfig(StrictModel):
    """Everything one environment declares."""

    cluster: ClusterConfig
    node_pools: tuple[NodePoolConfig, ...] = Field(min_length=1)
    driver: DriverConfig = DriverConfig()
    tenants: tuple[TenantConfig, ...] = ()
    device_plugin: DevicePluginConfig = DevicePluginConfig()
    images: ImagesConfig = ImagesConfig()
    registry_pull_secret: Annotated[SecretStr, AfterValidator(_docker_config_json)] | None = None
    preflight: bool = True

    @model_validator(mode="after")
    def _check(self) -> StackConfig:
        for field, items in (("nodePools", self.node_pools), ("tenants", self.tenants)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{field}: name {item.name!r} appears twice; names must be unique")
                seen.add(item.name)
        for pool in self.node_pools:
            if NODE_OSES[pool.os].openshift != (self.cluster.flavor == "openshift"):
                raise ValueError(
                    f"nodePools: pool {pool.name!r} runs {pool.os}, which does not fit a {self.cluster.flavor} cluster"
                )
            if self.cluster.flavor == "openshift" and len(name := pool.machine_set_name(self.cluster)) > 63:
                raise ValueError(
                    f"nodePools: pool {pool.name!r} makes the MachineSet name {name!r} {len(name)} characters long, "
                    "over the 63 of a label value; shorten the pool name"
                )
        return self

    @property
    def gpu_capacity(self) -> int:
        return sum(pool.gpu_capacity for pool in self.node_pools)


CONFIG_KEYS = {to_camel(name): name for name in StackConfig.model_fields}
SECRET_KEYS = frozenset({"registryPullSecret"})


def parse_stack_config(values: dict[str, Any]) -> StackConfig:
    """Validate the project's config values (camelCase key -> value); raise ConfigError naming the field."""
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], CONFIG_KEYS, n=1)
        hint = f"did you mean {PROJECT}:{close[0]}?" if close else f"known keys: {', '.join(CONFIG_KEYS)}"
        raise ConfigError(f"{PROJECT}:{unknown[0]}: unknown config key; {hint}")
    try:
        return StackConfig.model_validate(values)
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None


def _dotted(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _describe(error: ValidationError) -> str:
    """One line for the most useful error: a misspelt key first (it explains a missing one), then the rest."""
    errors = sorted(error.errors(), key=lambda item: item["type"] != "extra_forbidden")
    first = errors[0]
    message = first["msg"].removeprefix("Value error, ")
    if first["loc"] and first["loc"][0] in SECRET_KEYS:
        # A credential: say what is wrong without showing any of it.
        fix = message if first["type"] == "value_error" else "must be the text of a .dockerconfigjson document"
        return f"{PROJECT}:{first['loc'][0]}: {fix}"
    if first["type"] == "extra_forbidden":
        missing = [item["loc"][-1] for item in errors
                   if item["type"] == "missing" and item["loc"][:-1] == first["loc"][:-1]]
        close = difflib.get_close_matches(str(first["loc"][-1]), [str(name) for name in missing], n=1)
        message = f"unknown key; did you mean {close[0]!r}?" if close else "unknown key; remove it or check its spelling"
    elif first["type"] == "missing":
        message = "is required"
    elif first["type"] == "string_type":
        message = f"must be text, not {first['input']!r}; quote it in the stack file"
    elif first["type"] in ("int_parsing", "int_type", "int_from_float", "float_parsing", "float_type"):
        message = f"must be a number, not {first['input']!r}; write digits only"
    elif first["type"] in ("greater_than_equal", "greater_than"):
        message = f"{first['input']!r} is too small; use at least {next(iter(first['ctx'].values()))}"
    elif first["type"] in ("less_than_equal", "less_than"):
        message = f"{first['input']!r} is too large; use at most {next(iter(first['ctx'].values()))}"
    elif first["type"] == "string_pattern_mismatch":
        message = f"{first['input']!r} is not in the expected format; see this key in the README"
    path = _dotted(first["loc"])
    return f"{PROJECT}:{path}: {message}" if path else f"{PROJECT}: {message}"


def load_stack_config() -> StackConfig:
    """Read every `gpu-platform:*` key from the Pulumi runtime config once and validate it."""
    prefix = f"{PROJECT}:"
    raw = pulumi.runtime.config.CONFIG.get()
    values: dict[str, Any] = {}
    for full_key, value in raw.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key.removeprefix(prefix)
        if key in SECRET_KEYS and not pulumi.runtime.is_config_secret(full_key):
            raise ConfigError(f"{full_key}: must be a secret; set it with `pulumi config set --secret {key}`")
        # A secret stays the text the user set (a JSON document is not decoded, so no error can echo it).
        values[key] = value if key in SECRET_KEYS else _decode(value)
    return parse_stack_config(values)


def _decode(value: Any) -> Any:
    """Structured stack values reach the program as JSON text; scalars stay as they are."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value
