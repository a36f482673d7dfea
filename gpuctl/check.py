"""`gpuctl check DIR`: the policy pack's own policy objects, run on a rendered plan as the engine would run them."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jsonschema
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import proxy
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError
from rich.console import Console
from rich.text import Text

from gpuctl.cli import OK, VIOLATION, console, load_plan, read_json
from gpuctl.runtime import UNKNOWN
from policy.index import index
from policy.rules import POLICIES, applies_to
from stacks.config import ConfigError

REPORTED_LEVELS = (EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY)
STYLES = {EnforcementLevel.MANDATORY.value: "bold red", EnforcementLevel.ADVISORY.value: "bold yellow"}


@dataclass(frozen=True)
class Violation:
    """One policy violation; `urn` and `name` are None when it concerns the stack as a whole."""

    policy: str
    level: str
    urn: str | None
    name: str | None
    message: str


@dataclass(frozen=True)
class _Setting:
    """A policy's enforcement level and config properties for one run."""

    level: EnforcementLevel
    config: dict[str, Any]


def policy_settings(config: Mapping[str, Any]) -> dict[str, _Setting]:
    """Each policy's enforcement level and properties under a pack config, in `--policy-pack-config` form:
    `{"all": LEVEL, "<policy>": LEVEL | {"enforcementLevel": LEVEL, "<property>": value}}`."""
    if not isinstance(config, Mapping):
        raise ConfigError("policy config: must be a JSON object keyed by policy name")
    known = {policy.name for policy in POLICIES}
    unknown = sorted(set(config) - known - {"all"})
    if unknown:
        raise ConfigError(f"policy config: {unknown[0]!r} is not a policy of the pack; "
                          f"known: {', '.join(sorted(known))}")
    default_level, extra = _entry("all", config.get("all", {}))
    if extra:
        raise ConfigError(f"policy config: all: takes only an enforcementLevel, not {', '.join(sorted(extra))}")
    settings = {}
    for policy in POLICIES:
        level, properties = _entry(policy.name, config.get(policy.name, {}))
        schema = policy.config_schema
        try:
            jsonschema.validate(properties, {"type": "object", "additionalProperties": False,
                                             "properties": schema.properties if schema else {},
                                             "required": (schema.required or []) if schema else []})
        except jsonschema.ValidationError as error:
            where = ".".join(str(part) for part in error.absolute_path)
            raise ConfigError(f"policy config: {policy.name}{'.' + where if where else ''}: {error.message}") from None
        level = level or default_level or policy.enforcement_level or EnforcementLevel.ADVISORY  # the SDK's default
        settings[policy.name] = _Setting(level, properties)
    return settings


def _entry(name: str, value: Any) -> tuple[EnforcementLevel | None, dict[str, Any]]:
    """(enforcement level, properties) of one config entry."""
    if isinstance(value, str):
        value = {"enforcementLevel": value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"policy config: {name}: must be an enforcement level or an object")
    properties = dict(value)
    level = properties.pop("enforcementLevel", None)
    if level is None:
        return None, properties
    try:
        return EnforcementLevel(level), properties
    except ValueError:
        levels = ", ".join(level.value for level in EnforcementLevel)
        raise ConfigError(f"policy config: {name}: enforcementLevel {level!r} is not one of {levels}") from None


_MISSING = object()


def _proxied(value: Any, path: list[str]) -> Any:
    """A plan value as pulumi_policy's `unknown_checking_proxy` holds it: mappings and lists proxied (here on
    first read), the plan's "[unknown]" marker as the SDK's unknown sentinel, other values as they are."""
    if isinstance(value, dict):
        return _DictProxy(value, path)
    if isinstance(value, list):
        return _ListProxy(value, path)
    return UNKNOWN_STRING_VALUE if value == UNKNOWN else value


class _DictProxy(proxy._DictProxy):
    """The SDK's unknown-checking mapping over a plan mapping, wrapping each value when it is first read: reads
    return, and raise, what the SDK's proxy of the whole inputs returns and raises, without copying them all."""

    def __init__(self, target: dict[str, Any], path: list[str]) -> None:
        self._target, self._path, self._read = target, path, {}

    def __getitem__(self, key: Any) -> Any:
        value = self._read.get(key, _MISSING)
        if value is _MISSING:
            value = self._read[key] = _proxied(self._target[key], [*self._path, str(key)])
        return proxy._raise_if_unknown(key, value, self._path)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._target[key] = value
        self._read[key] = value

    def __len__(self) -> int:
        return len(self._target)

    def __iter__(self):
        return iter(self._target)


class _ListProxy(proxy._ListProxy):
    """The SDK's unknown-checking sequence over a plan list, wrapping each element when it is first read."""

    def __init__(self, target: list[Any], path: list[str]) -> None:
        self._target, self._path, self._read = target, path, {}

    def _element(self, position: int) -> Any:
        value = self._read.get(position, _MISSING)
        if value is _MISSING:
            value = self._read[position] = _proxied(self._target[position], [*self._path, str(position)])
        return value

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):  # the SDK slices its list of proxied elements
            return proxy._raise_if_unknown(key, [self._element(i) for i in range(len(self._target))[key]], self._path)
        position = key + len(self._target) if isinstance(key, int) and key < 0 else key
        self._target[key]  # noqa: B018 - IndexError / TypeError as the SDK's list raises them
        return proxy._raise_if_unknown(key, self._element(position), self._path)

    def __len__(self) -> int:
        return len(self._target)


def policy_resources(plan: Mapping[str, Any]) -> list[PolicyResource]:
    """The plan's resources as the engine hands them to stack policies: linked parents and dependencies."""
    try:
        records = list(plan["resources"])
        resources = {}
        for record in records:
            options = record.get("options", {})
            opts = PolicyResourceOptions(
                protect=bool(options.get("protect")), ignore_changes=list(options.get("ignoreChanges", [])),
                delete_before_replace=options.get("deleteBeforeReplace"), aliases=[],
                custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[], parent=record["parent"])
            props = _DictProxy(dict(record["inputs"]), [])
            resources[record["urn"]] = PolicyResource(record["type"], props, record["urn"], record["name"], opts,
                                                      None, None, [], {})
        for record in records:
            resource = resources[record["urn"]]
            resource.parent = resources.get(record["parent"])
            resource.dependencies = [resources[urn] for urn in record["dependencies"] if urn in resources]
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"plan.json: not a rendered plan ({type(error).__name__}: {error}); "
                          "render it with `python -m gpuctl render`") from None
    return list(resources.values())


def check_plan(plan: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> list[Violation]:
    """Run every enabled policy of the pack on a rendered plan, as the engine runs it on a preview."""
    settings = policy_settings({} if config is None else config)
    resources = policy_resources(plan)
    names = {resource.urn: resource.name for resource in resources}
    violations: list[Violation] = []

    def validate(policy: ResourceValidationPolicy | StackValidationPolicy,
            args: ResourceValidationArgs | StackValidationArgs, level: EnforcementLevel, urn: str | None) -> None:
        def report(message: str, reported_urn: str | None = None) -> None:
            where = urn or reported_urn or None  # a resource policy's violation is always its resource's
            violations.append(Violation(policy.name, level.value, where, names.get(where or ""), message))

        try:
            policy.validate(args, report)
        except UnknownValueError as error:  # as the engine does: an advisory note, not a verdict
            violations.append(Violation(policy.name, EnforcementLevel.ADVISORY.value, urn, names.get(urn or ""),
                                        f"cannot be checked on this plan: {error.message}"))

    for policy in POLICIES:
        setting = settings[policy.name]
        if setting.level == EnforcementLevel.DISABLED:
            continue
        level = EnforcementLevel.MANDATORY if setting.level == EnforcementLevel.REMEDIATE else setting.level
        if isinstance(policy, ResourceValidationPolicy):
            # only the resources of the types it reads: for the others its validation returns at once
            for resource in index(resources).selected(applies_to(policy)):
                validate(policy, ResourceValidationArgs(resource.resource_type, resource.props, resource.urn,
                                                   resource.name, resource.opts, None, dict(setting.config)),
                    level, resource.urn)
        else:
            validate(policy, StackValidationArgs(resources, dict(setting.config)), level, None)
    return violations


def level_counts(violations: list[Violation]) -> dict[str, int]:
    """Violations per reported enforcement level."""
    return {level.value: sum(v.level == level.value for v in violations) for level in REPORTED_LEVELS}


def policies_run(config: Mapping[str, Any] | None) -> int:
    """How many policies a pack config leaves enabled."""
    settings = policy_settings({} if config is None else config)
    return sum(setting.level != EnforcementLevel.DISABLED for setting in settings.values())


def print_report(violations: list[Violation], resources: int, console: Console, policies: int | None = None) -> None:
    """`policy  resource  message` lines, grouped by enforcement level, then a one-line summary (`policies`: how
    many ran, when the pack config disabled some)."""
    for level in REPORTED_LEVELS:
        group = [v for v in violations if v.level == level.value]
        if not group:
            continue
        console.print(Text(f"{level.value} ({len(group)})", style=STYLES[level.value]))
        for violation in group:
            console.print(Text.assemble((violation.policy, "bold"), "  ", (violation.name or "(stack)", "cyan"),
                                        "  ", violation.message), soft_wrap=True)
    if violations:
        console.print(", ".join(f"{count} {level}" for level, count in level_counts(violations).items())
                      + " violation(s)")
    else:
        console.print(passed_line(policies, resources))


def passed_line(policies: int | None, resources: int) -> str:
    """What a clean run says: how many policies passed (`policies` ran; None: all), and how many were disabled."""
    ran = len(POLICIES) if policies is None else policies
    if ran == 0:
        return "no policy ran: the pack config disables every one"
    disabled = f" ({len(POLICIES) - ran} disabled by the pack config)" if ran < len(POLICIES) else ""
    return f"{ran} policies passed on {resources} resources{disabled}"


def read_policy_config(path: str | None) -> Any:
    """The policy pack config file (JSON, as `--policy-pack-config` takes), or None when not given."""
    return read_json(Path(path), "pass a policy pack config file") if path else None


def has_mandatory(violations: list[Violation]) -> bool:
    return any(v.level == EnforcementLevel.MANDATORY.value for v in violations)


def run(args: argparse.Namespace) -> int:
    plan = load_plan(args.dir)
    config = read_policy_config(args.policy_config)
    violations = check_plan(plan, config)
    if args.json:
        print(json.dumps({"stack": plan.get("stack"), "violations": [asdict(v) for v in violations],
                          **level_counts(violations)}, indent=2))
    else:
        print_report(violations, len(plan["resources"]), console(soft_wrap=False), policies_run(config))
    return VIOLATION if has_mandatory(violations) else OK


def register(commands) -> None:
    parser = commands.add_parser("check", help="run the policy pack on a rendered DIR/plan.json")
    parser.add_argument("dir", metavar="DIR", help="a directory written by `gpuctl render`")
    parser.add_argument("--json", action="store_true", help="violations as JSON")
    parser.add_argument("--policy-config", metavar="FILE",
                        help="policy pack config (JSON, as for `pulumi preview --policy-pack-config`)")
    parser.set_defaults(run=run)
