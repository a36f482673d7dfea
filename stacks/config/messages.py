"""Pydantic's validation errors turned into one line that names the field and the fix."""

from __future__ import annotations

import difflib
import re
from typing import Any, get_args

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from stacks.config.cluster import ClusterConfig
from stacks.config.fields import CPU, MEMORY, PROJECT, StrictModel, _shown
from stacks.config.images import ChartsConfig, ImagesConfig
from stacks.config.karpenter import DURATION
from stacks.config.node_profiles import CPUSET, SYSCTL_VALUE
from stacks.config.pools import NodePoolConfig
from stacks.config.stack import SECRET_KEYS, StackConfig


# The fix of each format a config value must have, by its pattern.
PATTERN_FIXES = {
    ClusterConfig.model_fields["release"].metadata[0].pattern: "write the release as 4.<minor>.<patch>, as "
    "`oc get clusterversion` prints it, e.g. 4.18.24",
    ClusterConfig.model_fields["nfd_operator_csv"].metadata[0].pattern: "write the CSV name as nfd.4.<minor>.<patch>-"
    "<12-digit build>, as the packagemanifest's currentCSV prints it",
    ClusterConfig.model_fields["region"].metadata[0].pattern: "write an AWS region code, e.g. us-east-1",
    r"^subnet-[0-9a-f]{8,17}$": "write a subnet ID, subnet- and 8 or 17 hex digits (aws ec2 describe-subnets)",
    r"^sg-[0-9a-f]{8,17}$": "write a security group ID, sg- and 8 or 17 hex digits (aws ec2 describe-security-groups)",
    r"^[A-Za-z0-9_+=,.@-]{1,128}$": "write the instance profile's name (not its ARN): at most 128 letters, digits "
    "and _+=,.@-",
    r"^[A-Za-z0-9_+=,.@-]{1,64}$": "write the IAM role's name (not its ARN): at most 64 letters, digits and _+=,.@-",
    CPUSET: "write a cpuset list of CPU numbers and ranges, e.g. 0-1,48-49",
    SYSCTL_VALUE: "write the plain value sysctl -w takes: numbers or words with single spaces between them, no "
    "quotes or shell characters",
    r"^ami-[0-9a-f]{8,17}$": "write an AMI ID, ami- and 8 or 17 hex digits (aws ec2 describe-images)",
    NodePoolConfig.model_fields["availability_zone"].metadata[0].pattern: "write an availability zone name of the "
    "cluster's region, e.g. us-east-1a",
    r"^[0-9]{3}$": "write the driver branch as its 3 digits, e.g. 580",
    r"^[0-9]{3}\.[0-9]+(\.[0-9]+)?$": "write the driver version as NVIDIA numbers it, e.g. 580.95.05",
    r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$": "write a registry host and repository path in lower case, without "
    "a tag, e.g. nvcr.io/nvidia",
    r"^([1-9][0-9]{0,3}|[1-9][0-9]?%|100%)$": "write a node count (1-9999) or a percentage (1%-100%), e.g. 25%",
    r"^[a-zA-Z0-9._-]{1,15}$": "write the host interface name as `ip link` shows it (at most 15 characters), e.g. ens5",
    r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$": "write the resource name the SR-IOV device plugin advertises for the VFs, "
    "<domain>/<name>",
    CPU: "write whole cores (e.g. 64) or millicores (e.g. 500m)",
    DURATION: "write a duration in hours, minutes and seconds, e.g. 10m or 720h, or Never",
    r"^((100|[0-9]{1,2})%|[0-9]+)$": "write a number of nodes (e.g. 1) or a percentage of them (e.g. 10%), quoted",
    r"^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]$": "write an availability zone name, e.g. us-east-1a",
    MEMORY: "write a size in Mi, Gi or Ti, e.g. 256Gi",
    ChartsConfig.model_fields["mirror"].metadata[0].pattern: "write a Helm repository URL (https://charts.example."
    "com/stable) or an OCI path (oci://registry.example.com/charts), without credentials or a query",
    ImagesConfig.model_fields["nfd"].metadata[0].pattern: "write <registry>/<repository>:<tag> or "
    "<registry>/<repository>@sha256:<digest>, e.g. registry.k8s.io/nfd/node-feature-discovery:v0.17.3",
}


def _dotted(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker of a mapping's key, after the key itself
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


# The tag pydantic puts in an error's location for each member of a union (`str`, `dict[str,constrained-int]`):
# not a key of the stack file.
_UNION_TAG = re.compile(r"str|int|float|bool|none|[a-z-]+\[.*\]")
_KINDS = {"string_type": "text", "dict_type": "a mapping", "int_type": "a number", "list_type": "a list",
          "tuple_type": "a list", "bool_type": "true or false", "float_type": "a number"}


def _untagged(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(part for part in loc if not (isinstance(part, str) and _UNION_TAG.fullmatch(part)))


def _model_in(annotation: Any) -> type[StrictModel] | None:
    """The config model an annotation holds, itself or as the items of a tuple (`tuple[TenantConfig, ...] | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, StrictModel):
        return annotation
    return next((model for arg in get_args(annotation) if (model := _model_in(arg)) is not None), None)


def _field_at(loc: tuple[Any, ...]) -> FieldInfo | None:
    """The config field an error location names (list indexes step into the items); None past a mapping's keys."""
    model, field = StackConfig, None
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {info.alias or name: info for name, info in model.model_fields.items()} if model else {}
        if (field := fields.get(part)) is None:
            return None
        model = _model_in(field.annotation)
    return field


def _model_at(loc: tuple[Any, ...]) -> type[StrictModel] | None:
    """The config model of the mapping at `loc` (or of each item of a list there); None if it is not one."""
    if not loc:
        return StackConfig
    field = _field_at(loc)
    return _model_in(field.annotation) if field else None


def _keys_of(loc: tuple[Any, ...]) -> list[str]:
    """Every key the mapping at `loc` (or each item of a list there) takes."""
    model = _model_at(loc)
    return [info.alias or name for name, info in model.model_fields.items()] if model else []


def _shape(loc: tuple[Any, ...]) -> str:
    """The keys an entry at `loc` (or each item of a list there) needs, as " {name, gpus}"; empty if not a mapping."""
    model = _model_at(loc) if loc else None
    if model is None:
        return ""
    keys = getattr(model, "usual_keys", None) or [info.alias or name for name, info in model.model_fields.items()
                                                    if info.is_required()]
    return " {" + ", ".join(keys) + "}"


def describe(error: ValidationError) -> str:
    """One line for the most useful error: a misspelt key first (it explains a missing one), then the rest."""
    # Of a union's members (migLayout: a layout's name or a mapping), the one that came furthest names the problem.
    errors = sorted(error.errors(), key=lambda item: (item["type"] != "extra_forbidden",
                                                      -len(item["loc"]) if _untagged(item["loc"]) != item["loc"] else 0))
    first = errors[0]
    message = first["msg"].removeprefix("Value error, ")
    loc, kind, shown = _untagged(first["loc"]), first["type"], _shown(first["input"])
    alternatives = [_KINDS.get(item["type"]) for item in errors if _untagged(item["loc"]) == loc]
    if len(alternatives) > 1 and all(alternatives):
        return f"{PROJECT}:{_dotted(loc)}: must be {' or '.join(dict.fromkeys(alternatives))}, not {shown}"
    if loc and loc[0] in SECRET_KEYS:
        # A credential: say what is wrong without showing any of it.
        fix = message if kind == "value_error" else "must be the text of a .dockerconfigjson document"
        return f"{PROJECT}:{loc[0]}: {fix}"
    if kind == "field_error":
        loc = (*loc, *first["ctx"]["loc"])
    elif kind == "extra_forbidden":
        missing = [item["loc"][-1] for item in errors if item["type"] == "missing" and item["loc"][:-1] == loc[:-1]]
        close = (difflib.get_close_matches(str(loc[-1]), [str(name) for name in missing], n=1)
                 or difflib.get_close_matches(str(loc[-1]), _keys_of(loc[:-1]), n=1))
        message = f"unknown key; did you mean {close[0]!r}?" if close else "unknown key; remove it or check its spelling"
    elif kind == "missing":
        message = "is required"
    elif kind == "string_type":
        message = f"must be text, not {shown}; quote it in the stack file"
    elif kind in ("int_parsing", "int_type", "int_from_float", "float_parsing", "float_type"):
        message = f"must be a number, not {shown}; write digits only"
    elif kind in ("bool_type", "bool_parsing"):
        message = f"must be true or false, not {shown}; write true or false, unquoted"
    elif kind in ("greater_than_equal", "greater_than"):
        message = f"{shown} is too small; use at least {next(iter(first['ctx'].values()))}"
    elif kind in ("less_than_equal", "less_than"):
        message = f"{shown} is too large; use at most {next(iter(first['ctx'].values()))}"
    elif kind == "string_pattern_mismatch":
        message = f"{shown} is not in the expected format; {PATTERN_FIXES[first['ctx']['pattern']]}"
    elif kind in ("tuple_type", "list_type"):
        field, shape = _field_at(loc), _shape(loc)
        message = f"must be a list{f' of{shape} entries' if shape else ''}, not {shown}"
        message += "; write [] for none" if field and not field.is_required() else "; write one `- ` item per line"
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = f"must be a mapping{_shape(loc)}, not {shown}"
        item = bool(loc) and isinstance(loc[-1], int)
        message += "; fill the item in or remove it" if item else "; write its keys below it"
    elif kind == "too_short":
        count = first["ctx"]["min_length"]
        shape = _shape(loc)
        message = (f"must list at least {count} item{'s' if count > 1 else ''}; "
                   f"add {'one' if count == 1 else 'more'}{f' with{shape}' if shape else ''}")
    path = _dotted(loc)
    return f"{PROJECT}:{path}: {message}" if path else f"{PROJECT}: {message}"
