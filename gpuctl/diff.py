"""The diff of two rendered plans, as data: what `pulumi preview --diff` would show (gpuctl.report prints it;
the `gpuctl diff` command is gpuctl.diff_command)."""

from __future__ import annotations

import bisect
import difflib
import json
import re
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from typing import Any

from components import labels
from gpuctl.replacements import replace_reasons
from gpuctl.runtime import with_engine_urns
from stacks.config import ConfigError
from fleet.catalog import NODE_OSES
from fleet.kernels import ObservedNode

SYMBOLS = {"create": "+", "update": "~", "replace": "+-", "delete": "-"}
NVIDIA_DRIVER = "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"
PROVIDER_REPLACED = "provider (replaced)"  # the replace reason of a resource whose provider is replaced


@dataclass(frozen=True)
class Change:
    """One property that differs: its dotted path (list indices, as the engine and the replace rules name it),
    the same path with list elements named by their key (`env[DRIVER_VERSION]`), and both values (absent is None)."""

    path: str
    old: Any
    new: Any
    label: str = ""

    @property
    def named(self) -> str:
        return self.label or self.path

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.named, "old": self.old, "new": self.new}


@dataclass
class Step:
    """What the engine would do to one resource."""

    op: str
    resource: dict[str, Any]
    changes: list[Change] = field(default_factory=list)
    replace_reasons: list[str] = field(default_factory=list)

    old: dict[str, Any] | None = None  # the resource as the base plan has it (None for a create)

    @property
    def new(self) -> dict[str, Any] | None:
        """The resource as the head plan has it (None for a delete)."""
        return None if self.op == "delete" else self.resource

    @property
    def retained(self) -> bool:
        """A delete the engine only drops from the stack's state (retainOnDelete): the object stays."""
        return self.op == "delete" and bool((self.old or self.resource).get("options", {}).get("retainOnDelete"))

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "urn": self.resource["urn"], "type": self.resource["type"],
                "name": self.resource["name"], "object": object_name(self.resource),
                "diffs": [change.path for change in self.changes],
                "detailedDiff": [change.to_json() for change in self.changes],
                "replaceReasons": self.replace_reasons,
                "retainOnDelete": self.retained,
                "old": self.old["inputs"] if self.old else None,
                "new": self.new["inputs"] if self.new else None}


@dataclass
class PlanDiff:
    """Steps in the order the engine would run them, and how many resources stay the same."""

    steps: list[Step]
    same: int
    parents: dict[str, dict[str, Any]]

    def summary(self) -> dict[str, int]:
        counts = {op: 0 for op in SYMBOLS}
        for step in self.steps:
            counts[step.op] += 1
        return {**counts, "same": self.same}

    def to_json(self) -> dict[str, Any]:
        return {"steps": [step.to_json() for step in self.steps], "changeSummary": self.summary()}


def dotted(path: list[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# The field that names an element of a list, the first it has of: containers, env, volumes and ports by name, tags
# and tolerations by key, the autoscaler's GPU limits by type, alerting and recording rules by alert or record. A
# text, number or boolean names itself. Used only when every element of the list, before and after, has a distinct
# name.
ELEMENT_KEYS = ("name", "key", "resourceType", "deviceName", "mountPath", "apiGroup", "type", "alert", "record")


def _element_name(element: Any) -> str | None:
    if isinstance(element, dict):
        return next((element[key] for key in ELEMENT_KEYS if isinstance(element.get(key), str) and element[key]), None)
    return None if isinstance(element, (list, type(None))) else json.dumps(element)


def _names(items: list[Any]) -> list[str] | None:
    """The name of each element of `items`, when each has one and no two share it."""
    names = [_element_name(item) for item in items]
    return names if None not in names and len(set(names)) == len(names) else None  # type: ignore[return-value]


def _match(old: list[Any], new: list[Any]) -> tuple[list[tuple[int, int]], list[str], list[str]]:
    """The elements of `old` and `new` that are one element before and after (pairs of indexes, in new order), and
    how each element of both lists is named: by their names where they all have one, else as the longest runs of
    equal elements line up (difflib), the elements between two runs paired in order (changed in place), by index."""
    old_names, new_names = _names(old), _names(new)
    if old_names is not None and new_names is not None:
        before = {name: index for index, name in enumerate(old_names)}
        return ([(before[name], index) for index, name in enumerate(new_names) if name in before],
                [name.strip('"') for name in old_names], [name.strip('"') for name in new_names])
    matcher = difflib.SequenceMatcher(None, [json.dumps(item, sort_keys=True) for item in old],
                                      [json.dumps(item, sort_keys=True) for item in new], autojunk=False)
    pairs = [pair for _, i1, i2, j1, j2 in matcher.get_opcodes() for pair in zip(range(i1, i2), range(j1, j2))]
    return pairs, [str(i) for i in range(len(old))], [str(j) for j in range(len(new))]


def _moved(pairs: list[tuple[int, int]]) -> set[int]:
    """The new indexes of the paired elements (in new order) that moved: all but the longest run that kept its
    order, so an element added or removed before others does not move them."""
    tails: list[int] = []  # tails[k]: the pair ending the best run of length k + 1
    ends: list[int] = []  # ends[k]: that pair's old index
    previous: list[int | None] = []
    for number, (old_index, _) in enumerate(pairs):
        rank = bisect.bisect_left(ends, old_index)
        previous.append(tails[rank - 1] if rank else None)
        tails[rank:rank + 1], ends[rank:rank + 1] = [number], [old_index]
    kept, number = set(), tails[-1] if tails else None
    while number is not None:
        kept.add(pairs[number][1])
        number = previous[number]
    return {new_index for _, new_index in pairs} - kept


def _walk(old: Any, new: Any, parts: list[Any], label: str, changes: list[tuple[list[Any], Change]]) -> None:
    """Append (parts, Change) for each difference between `old` and `new` (found at `parts`, named `label`): values
    compared with their types, maps key by key, lists element by element as `_match` pairs them (so an element added
    before others does not read as each of them changed), elements that changed place as moves."""
    def add(path: list[Any], before: Any, after: Any, name: str) -> None:
        changes.append((path, Change(dotted(path), before, after, name)))

    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(key for key in new if key not in old)]:
            name = f"{label}.{key}" if label else str(key)
            if key in old and key in new:
                _walk(old[key], new[key], [*parts, key], name, changes)
            else:
                add([*parts, key], old.get(key), new.get(key), name)
    elif isinstance(old, list) and isinstance(new, list):
        pairs, old_names, new_names = _match(old, new)
        moved = _moved(pairs)
        for old_index, index in pairs:
            name = f"{label}[{new_names[index]}]"
            if index in moved:
                add([*parts, index], f"position {old_index}", f"position {index}", f"{name} (moved)")
            _walk(old[old_index], new[index], [*parts, index], name, changes)
        for index in sorted(set(range(len(new))) - {j for _, j in pairs}):
            add([*parts, index], None, new[index], f"{label}[{new_names[index]}]")
        for index in sorted(set(range(len(old))) - {i for i, _ in pairs}):
            add([*parts, index], old[index], None, f"{label}[{old_names[index]}]")
    elif not _same(old, new):
        add(parts, old, new, label)


def object_name(resource: dict[str, Any]) -> str:
    """The name the cluster or the cloud knows: `namespace/name` of a Kubernetes object, a Helm release's
    `namespace/name`, an AWS resource's `name`; empty when the inputs name nothing."""
    inputs = resource.get("inputs") or {}
    meta = inputs.get("metadata") if isinstance(inputs.get("metadata"), dict) else None
    if meta and meta.get("name"):
        return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])
    name = inputs.get("name")
    if isinstance(name, str) and name:
        return f"{inputs['namespace']}/{name}" if isinstance(inputs.get("namespace"), str) else name
    return ""


# A Pulumi property path (ignoreChanges, replaceOnChanges): `a.b[0]`, `a["key.with.dots"]`, `a[*].b`.
_PATH_PART = re.compile(r'\.?([A-Za-z_$][\w$-]*)|\["((?:[^"\\]|\\.)*)"\]|\[(\d+|\*)\]')


def property_path(text: str) -> list[Any]:
    """The parts of a Pulumi property path: names, map keys and list indexes (`*` for any)."""
    parts: list[Any] = []
    for match in _PATH_PART.finditer(text):
        name, key, index = match.groups()
        parts.append(name if name is not None else key if key is not None else
                     index if index == "*" else int(index))
    return parts


def _covers(ignored: str, parts: list[Any]) -> bool:
    """Whether the property path `ignored` is `parts` or one of its parents."""
    prefix = property_path(ignored)
    return len(prefix) <= len(parts) and all(p == "*" or p == part for p, part in zip(prefix, parts))


def _same(old: Any, new: Any) -> bool:
    """Equal values of equal types all the way down."""
    if old is new:  # a record the head took from the base's plan (gpuctl/reuse.py)
        return True
    if type(old) is not type(new):
        return False
    if isinstance(old, dict):
        return old.keys() == new.keys() and all(_same(value, new[key]) for key, value in old.items())
    if isinstance(old, list):
        return len(old) == len(new) and all(map(_same, old, new))
    return old == new


def property_changes(old: Any, new: Any, ignore: list[str] = ()) -> list[Change]:
    """Each property that differs between two resources' inputs, but those `ignore` (property paths) covers."""
    found: list[tuple[list[Any], Change]] = []
    _walk(old, new, [], "", found)
    return sorted((change for parts, change in found if not any(_covers(ignored, parts) for ignored in ignore)),
                  key=lambda change: change.path)


def _replace_reasons(resource: dict[str, Any], changes: list[Change]) -> list[str]:
    return replace_reasons(resource["type"], resource["inputs"], [change.path for change in changes],
                           extra=resource["options"]["replaceOnChanges"])


def _order(plan: dict[str, Any]) -> list[str]:
    """URNs in the order the engine registers them: parents and dependencies first."""
    graph = TopologicalSorter()
    for resource in plan["resources"]:
        provider = [resource["provider"].rsplit("::", 1)[0]] if resource.get("provider") else []
        graph.add(resource["urn"], *resource["dependencies"], *([resource["parent"]] if resource["parent"] else []),
                  *provider)
    return [urn for urn in graph.static_order()]


def _key(urn: str) -> str:
    """A URN without its stack name, so renders of one stack from different files line up."""
    return urn.split("::", 1)[-1]


def diff_plans(old: dict[str, Any], new: dict[str, Any]) -> PlanDiff:
    """Compare two plans of the same stack resource by resource (by URN; a base rendered before gpuctl made the
    engine's URNs is read with them)."""
    old, new = with_engine_urns(old), with_engine_urns(new)
    old_by_urn = {resource["urn"]: resource for resource in old["resources"]}
    new_by_urn = {resource["urn"]: resource for resource in new["resources"]}
    old_by_key = {_key(urn): resource for urn, resource in old_by_urn.items()}
    new_keys = {_key(urn) for urn in new_by_urn}
    steps, same = [], 0
    replaced_providers: set[str] = set()  # "<urn>::<id>" references of providers being replaced
    for urn in _order(new):
        resource = new_by_urn.get(urn)
        if resource is None:
            continue
        before = old_by_key.get(_key(urn))
        if before is None:
            steps.append(Step("create", resource))
            continue
        if resource.get("provider") in replaced_providers:
            # The engine replaces every resource of a replaced provider: its new provider creates it anew.
            changes = property_changes(before["inputs"], resource["inputs"], resource["options"]["ignoreChanges"])
            steps.append(Step("replace", resource, changes, [PROVIDER_REPLACED], before))
            continue
        if _same(before["inputs"], resource["inputs"]):  # most of a fleet: no deep comparison needed
            same += 1
            continue
        changes = property_changes(before["inputs"], resource["inputs"], resource["options"]["ignoreChanges"])
        if not changes:
            same += 1
            continue
        reasons = _replace_reasons(resource, changes)
        steps.append(Step("replace" if reasons else "update", resource, changes, reasons, before))
        if reasons and resource["type"].startswith("pulumi:providers:"):
            replaced_providers.add(f"{urn}::{resource['name']}")
    # Deletes run last, dependents before what they depend on.
    if any(_key(urn) not in new_keys for urn in old_by_urn):  # ordering the old graph costs: only when needed
        steps += [Step("delete", old_by_urn[urn], old=old_by_urn[urn]) for urn in reversed(_order(old)) if urn in old_by_urn
                  and _key(urn) not in new_keys]
    return PlanDiff(steps, same, {**old_by_urn, **new_by_urn})


def refused_by_the_engine(diff: PlanDiff) -> list[Step]:
    """Steps `pulumi up` refuses: deleting or replacing a protected resource (the engine fails the update there)."""
    return [step for step in diff.steps if step.op in ("delete", "replace")
            and (step.old or step.resource).get("options", {}).get("protect")]


def refuse_driver_removal(diff: PlanDiff, new: dict[str, Any], observed: list[ObservedNode]) -> None:
    """Refuse a change that deletes the driver of a kernel (or, keyed by OS release, of an OS release) some node
    still runs and no driver of the new plan serves, naming those nodes. (Toggling precompiled drivers on OpenShift
    trades a release's driver for its kernels' drivers, or back: the nodes keep one, and the engine goes ahead.)"""
    serving = [scope for r in new.get("resources", []) if r["type"] == NVIDIA_DRIVER and (scope := _driver_scope(r))]
    for step in diff.steps:
        removed = _driver_scope(step.resource) if step.op == "delete" and step.resource["type"] == NVIDIA_DRIVER \
            else None
        if removed is None:
            continue
        node_os, kernel = removed
        nodes = [node.name for node in observed
                 if _serves(removed, node) and not any(_serves(scope, node) for scope in serving)]
        if nodes:
            fix = ("let the Machine Config Operator finish rolling those nodes to the new release first"
                   if node_os in NODE_OSES and NODE_OSES[node_os].openshift
                   else "roll those nodes to the new image first, or keep a pool on that kernel")
            what = f"kernel {kernel} ({node_os})" if kernel else f"{node_os} (every kernel)"
            raise ConfigError(
                f"refused: this change deletes driver {step.resource['inputs']['metadata']['name']} for {what}, "
                f"which nodes still run: {', '.join(sorted(nodes))}; {fix}")


def _driver_scope(driver: dict[str, Any]) -> tuple[str, str | None] | None:
    """The OS release and kernel (None: every kernel of it) whose nodes an NVIDIADriver of the program serves."""
    annotations = driver["inputs"].get("metadata", {}).get("annotations", {})
    if labels.OS_ANNOTATION not in annotations:
        return None
    return annotations[labels.OS_ANNOTATION], annotations.get(labels.KERNEL_ANNOTATION)


def _serves(scope: tuple[str, str | None], node: ObservedNode) -> bool:
    return node.target.os == scope[0] and scope[1] in (None, node.target.kernel)
