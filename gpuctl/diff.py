"""`gpuctl diff`: what `pulumi preview --diff` would show between two rendered plans."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from typing import Any

from deepdiff import DeepDiff
from deepdiff.helper import NotPresent
from rich.console import Console
from rich.markup import escape

from components import labels
from gpuctl.cli import OK, load_plan, observed_nodes
from gpuctl.replacements import replace_reasons
from stacks.config import ConfigError
from fleet.catalog import NODE_OSES
from fleet.kernels import KernelTarget, ObservedNode

SYMBOLS = {"create": "+", "update": "~", "replace": "+-", "delete": "-"}
COLOURS = {"create": "green", "update": "yellow", "replace": "magenta", "delete": "red"}
NVIDIA_DRIVER = "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"


@dataclass(frozen=True)
class Change:
    """One property that differs: its dotted path and both values (absent values are None)."""

    path: str
    old: Any
    new: Any


@dataclass
class Step:
    """What the engine would do to one resource."""

    op: str
    resource: dict[str, Any]
    changes: list[Change] = field(default_factory=list)
    replace_reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "urn": self.resource["urn"], "type": self.resource["type"],
                "name": self.resource["name"], "diffs": [change.path for change in self.changes],
                "replaceReasons": self.replace_reasons}


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


def _covers(prefix: str, path: str) -> bool:
    return path == prefix or path.startswith((f"{prefix}.", f"{prefix}["))


def _same(old: Any, new: Any) -> bool:
    """Equal values of equal types all the way down: what DeepDiff would report no change for."""
    if type(old) is not type(new):
        return False
    if isinstance(old, dict):
        return old.keys() == new.keys() and all(_same(value, new[key]) for key, value in old.items())
    if isinstance(old, list):
        return len(old) == len(new) and all(map(_same, old, new))
    return old == new


def _changes(old: dict[str, Any], new: dict[str, Any], ignore: list[str]) -> list[Change]:
    changes = []
    for items in DeepDiff(old, new, view="tree").values():
        for item in items:
            path = dotted(item.path(output_format="list"))
            if any(_covers(ignored, path) for ignored in ignore):
                continue
            changes.append(Change(path, None if isinstance(item.t1, NotPresent) else item.t1,
                                  None if isinstance(item.t2, NotPresent) else item.t2))
    return sorted(changes, key=lambda change: change.path)


def _replace_reasons(resource: dict[str, Any], changes: list[Change]) -> list[str]:
    return replace_reasons(resource["type"], resource["inputs"], [change.path for change in changes],
                           extra=resource["options"]["replaceOnChanges"])


def _order(plan: dict[str, Any]) -> list[str]:
    """URNs in the order the engine registers them: parents and dependencies first."""
    graph = TopologicalSorter()
    for resource in plan["resources"]:
        graph.add(resource["urn"], *resource["dependencies"], *([resource["parent"]] if resource["parent"] else []))
    return [urn for urn in graph.static_order()]


def _key(urn: str) -> str:
    """A URN without its stack name, so renders of one stack from different files line up."""
    return urn.split("::", 1)[-1]


def diff_plans(old: dict[str, Any], new: dict[str, Any]) -> PlanDiff:
    """Compare two plans of the same stack resource by resource (by URN)."""
    old_by_urn = {resource["urn"]: resource for resource in old["resources"]}
    new_by_urn = {resource["urn"]: resource for resource in new["resources"]}
    old_by_key = {_key(urn): resource for urn, resource in old_by_urn.items()}
    new_keys = {_key(urn) for urn in new_by_urn}
    steps, same = [], 0
    for urn in _order(new):
        resource = new_by_urn.get(urn)
        if resource is None:
            continue
        before = old_by_key.get(_key(urn))
        if before is None:
            steps.append(Step("create", resource))
            continue
        if _same(before["inputs"], resource["inputs"]):  # most of a fleet: no deep comparison needed
            same += 1
            continue
        changes = _changes(before["inputs"], resource["inputs"], resource["options"]["ignoreChanges"])
        if not changes:
            same += 1
            continue
        reasons = _replace_reasons(resource, changes)
        steps.append(Step("replace" if reasons else "update", resource, changes, reasons))
    # Deletes run last, dependents before what they depend on.
    if any(_key(urn) not in new_keys for urn in old_by_urn):  # ordering the old graph costs: only when needed
        steps += [Step("delete", old_by_urn[urn]) for urn in reversed(_order(old)) if urn in old_by_urn
                  and _key(urn) not in new_keys]
    return PlanDiff(steps, same, {**old_by_urn, **new_by_urn})


def refuse_driver_removal(diff: PlanDiff, observed: list[ObservedNode]) -> None:
    """Refuse a change that deletes the driver of a kernel some node still runs, naming those nodes."""
    running: dict[KernelTarget, list[str]] = {}
    for node in observed:
        running.setdefault(node.target, []).append(node.name)
    for step in diff.steps:
        annotations = step.resource["inputs"].get("metadata", {}).get("annotations", {})
        if step.op != "delete" or step.resource["type"] != NVIDIA_DRIVER or labels.KERNEL_ANNOTATION not in annotations:
            continue
        target = KernelTarget(annotations[labels.OS_ANNOTATION], annotations[labels.KERNEL_ANNOTATION])
        nodes = running.get(target)
        if nodes:
            fix = ("let the Machine Config Operator finish rolling those nodes to the new release first"
                   if target.os in NODE_OSES and NODE_OSES[target.os].openshift
                   else "roll those nodes to the new image first, or keep a pool on that kernel")
            raise ConfigError(
                f"refused: this change deletes driver {step.resource['inputs']['metadata']['name']} for kernel "
                f"{target.kernel} ({target.os}), which nodes still run: {', '.join(sorted(nodes))}; {fix}")


def _value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if value is not None else "(absent)"
    return text if len(text) <= 120 else f"{text[:117]}..."


def print_diff(diff: PlanDiff, console: Console) -> None:
    """The human view: changed resources under their components, property changes, and a summary."""

    def ancestors(urn: str | None) -> list[str]:
        chain = []
        while urn in diff.parents:
            chain.append(urn)
            urn = diff.parents[urn]["parent"]
        return chain[::-1]

    shown: list[str] = []
    for step in diff.steps:
        chain = ancestors(step.resource["parent"])
        common = next((i for i, (a, b) in enumerate(zip(chain, shown)) if a != b), min(len(chain), len(shown)))
        for depth, urn in enumerate(chain[common:], start=common):
            component = diff.parents[urn]
            console.print(f"    {'  ' * depth}{escape(component['type'])}  {escape(component['name'])}")
        shown = chain
        symbol, colour, indent = SYMBOLS[step.op], COLOURS[step.op], "  " * len(chain)
        console.print(f"[{colour}]{symbol:<4}{indent}{escape(step.resource['type'])}  "
                      f"{escape(step.resource['name'])}  {step.op}[/{colour}]")
        for change in step.changes:
            mark = "+-" if change.path in step.replace_reasons else "~"
            console.print(f"[{colour}]    {indent}    {mark} {escape(change.path)}: {escape(_value(change.old))} => "
                          f"{escape(_value(change.new))}[/{colour}]")
    summary = diff.summary()
    console.print("Resources:")
    for op, verb in (("create", "to create"), ("update", "to update"), ("replace", "to replace"),
                     ("delete", "to delete")):
        if summary[op]:
            console.print(f"    [{COLOURS[op]}]{SYMBOLS[op]} {summary[op]} {verb}[/{COLOURS[op]}]")
    changes = len(diff.steps)
    console.print(f"    {changes} change{'s' if changes != 1 else ''}. {summary['same']} unchanged"
                  if changes else f"    {summary['same']} unchanged")


def console() -> Console:
    """Colour on a terminal, plain text in CI and pipes."""
    return Console(highlight=False, soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    old, new = load_plan(args.old), load_plan(args.new)
    diff = diff_plans(old, new)
    refuse_driver_removal(diff, observed_nodes(args.observed_nodes) or [])
    if args.json:
        print(json.dumps(diff.to_json(), indent=2))
    else:
        print_diff(diff, console())
    return OK


def register(commands) -> None:
    parser = commands.add_parser("diff", help="what would change between two rendered plans")
    parser.add_argument("old", metavar="OLD_DIR")
    parser.add_argument("new", metavar="NEW_DIR")
    parser.add_argument("--json", action="store_true", help="steps and changeSummary, as `pulumi preview --json`")
    parser.add_argument("--observed-nodes", help="refuse to delete the driver of a kernel these nodes still run")
    parser.set_defaults(run=run)


