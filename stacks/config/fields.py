"""What every part of the stack file shares: ConfigError, the strict base model, and the field types and
validators of names, labels, sizes and kernels."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Strict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from components import labels
from fleet.catalog import NODE_OSES


PROJECT = "gpu-platform"
# From 1.30: tenant pods are fenced by a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.30).
SUPPORTED_KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(30, 38))
# Namespaces of the cluster itself and of the operators the platform installs (either flavor's); tenants take none.
# Queue mode adds Kueue's (the chart's kueue-system; on OpenShift openshift-kueue-operator) and cert-manager's (the
# cert-manager Operator's namespace, and cert-manager, which that operator creates for its operands).
QUEUE_NAMESPACES = (labels.KUEUE_NAMESPACE, labels.CERT_MANAGER_OLM.namespace, "cert-manager")
RESERVED_NAMESPACES = re.compile("|".join(["default", "kube-.*", "openshift.*", "gpu-system",
                                           *map(re.escape, (*labels.SYSTEM_NAMESPACES, *QUEUE_NAMESPACES,
                                                            *labels.ADMISSION_GATE_NAMESPACES))]))
PLATFORM_LABEL_PREFIX = "gpu-platform.io/"  # the platform's own labels (tenant, priority class, pool, ...)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL_VALUE = 63  # characters of a Kubernetes label value


# Sane upper bounds: far above any real pool or quota, low enough to catch a stray digit.
MAX_POOL_NODES = 1000
MAX_TENANT_GPUS = 100_000
CPU = r"^([1-9][0-9]{0,5}|[1-9][0-9]{0,8}m)$"  # whole cores or millicores
MEMORY = r"^[1-9][0-9]{0,6}(Mi|Gi|Ti)$"
MIG_PROFILE = re.compile(r"[1-7]g\.[0-9]+gb(\+me)?")  # a MIG profile of fleet.partitioning.MIG_LAYOUTS


class ConfigError(ValueError):
    """A stack configuration mistake, already phrased as one line naming the field and the fix."""


MAX_ERROR_CHARACTERS = 600  # of one error line: a value quoted whole (30,000 x's) must not bury the field and the fix


def capped(message: str) -> str:
    """`message` cut in the middle to MAX_ERROR_CHARACTERS, keeping its start (the field) and its end (the fix)."""
    if len(message) <= MAX_ERROR_CHARACTERS:
        return message
    cut = f" ... ({len(message) - MAX_ERROR_CHARACTERS:,} characters left out) ... "
    head = (MAX_ERROR_CHARACTERS - len(cut)) * 2 // 3
    return message[:head] + cut + message[-(MAX_ERROR_CHARACTERS - len(cut) - head):]


def _whole(value: Any) -> Any:
    """A whole float as the integer it is: the Pulumi CLI reads an integer past int64 (a stray digit) as 1e+30."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Kubernetes label keys ([prefix/]name) and values, as the API server validates them (ASCII only).
_LABEL_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([a-z0-9.-]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")


def label_key(value: str) -> str:
    if not _LABEL_KEY.fullmatch(value):
        raise ValueError(f"{value!r} is not a label key: [prefix/]name, the name at most 63 letters, digits, '-', '_' "
                         "or '.', starting and ending with a letter or digit (the prefix a DNS name)")
    return value


def label_value(value: str) -> str:
    if value and not re.fullmatch(_LABEL_NAME, value):
        raise ValueError(f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' or '.', starting and "
                         "ending with a letter or digit")
    return value


LabelKey = Annotated[str, AfterValidator(label_key)]
LabelValue = Annotated[str, AfterValidator(label_value)]

# Integers as YAML writes them: never `true` (1), "2" nor 1.5.
Int = Annotated[int, Strict(), BeforeValidator(_whole)]


def dns_label(max_length: int):
    def check(value: str) -> str:
        if len(value) > max_length or not _DNS_LABEL.fullmatch(value):
            raise ValueError(
                f"{value!r} must be a DNS-1123 label: lowercase letters, digits and '-', "
                f"starting and ending with a letter or digit, at most {max_length} characters"
            )
        return value

    return AfterValidator(check)


def tenant_namespace(name: str) -> str:
    if RESERVED_NAMESPACES.fullmatch(name):
        raise ValueError(f"{name!r} is a system namespace (default, kube-*, openshift*, or an operator's: "
                         f"{', '.join((*labels.SYSTEM_NAMESPACES, *QUEUE_NAMESPACES, *labels.ADMISSION_GATE_NAMESPACES))}); "
                         "choose a team name")
    return name


def trusted_namespace(name: str) -> str:
    if name == "default":
        raise ValueError("'default' is where anyone's pods land when they name no namespace: trusting it would let "
                         "them take GPUs outside every quota; run the add-on in a namespace of its own")
    return name


def rule_label(key: str) -> str:
    if key in labels.MANAGED_BY or key.startswith(PLATFORM_LABEL_PREFIX):
        raise ValueError(f"{key!r} is a label the platform sets and relies on; choose another key")
    return key


def tenant_group(group: str) -> str:
    """A group to bind to the tenant's namespace: neither blank, spaced nor with control characters, nor system:*."""
    if not group.strip():
        raise ValueError(f"{group!r} is blank; name the team's group, or leave group out to bind the tenant's name")
    if " " in group or not group.isprintable():
        raise ValueError(f"{group!r} has whitespace or control characters; write the group name exactly as the "
                         "identity provider sends it")
    if group.startswith("system:"):
        raise ValueError(f"{group!r} is a Kubernetes system: group (e.g. every authenticated user), so binding it "
                         "would give its members edit in the tenant namespace; name the team's own group")
    return group


def check_kernel(kernel: str, os_name: str, kind: str) -> None:
    """A kernel release of the OS, short enough to be NFD's kernel label value that drivers select nodes by."""
    if len(kernel) > MAX_LABEL_VALUE:
        raise ValueError(f"kernel {kernel!r} is {len(kernel)} characters long, over the {MAX_LABEL_VALUE} of a label "
                         f"value ({labels.KERNEL_LABEL}), so no node could match it; write the node's uname -r")
    node_os = NODE_OSES[os_name]
    if not node_os.is_kernel(kernel):
        raise ValueError(f"kernel {kernel!r} is not {kind} kernel release (uname -r) of {os_name}, e.g. "
                         f"{node_os.kernel_example!r}; write what uname -r prints on one of its nodes")


def field_error(loc: tuple[str | int, ...], message: str) -> PydanticCustomError:
    """A mistake a model's validator finds in one of its fields, reported at that field (`loc`, from the model)."""
    return PydanticCustomError("field_error", "{message}", {"message": message, "loc": loc})


class StrictModel(BaseModel):
    """Base for every config model: camelCase keys as in the stack files, unknown keys rejected, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


SHOWN_CHARACTERS = 80  # of a value an error quotes: enough to recognise it, never a page of it


def _shown(value: Any) -> str:
    """A value as a stack file writes it: null, true and false as YAML spells them, anything else quoted (cut to
    SHOWN_CHARACTERS)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):  # a URL's user:password is a credential: never shown
        value = re.sub(r"(?<=://)[^/@\s]*@", "***@", value)
    text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else f"{text[:SHOWN_CHARACTERS - 5]}...{text[-2:]}"
