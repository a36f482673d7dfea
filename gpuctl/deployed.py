"""The deployed state as a preview's base: `pulumi stack export` says which resources exist and what the stack's
outputs were at the last deploy, which a re-render of the base commit (with today's nodes) cannot know."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.kernels import KernelTarget
from gpuctl.cli import read_json
from stacks.config import ConfigError

ROOT_STACK = "pulumi:pulumi:Stack"
_FIX = "write it with `pulumi stack export --stack <stack> --file FILE`"
# What the preview reads of each resource of an export, and the shape the engine writes it in (None: may be absent).
_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "urn": ((str,), "text (a URN)"), "type": ((str,), "text (a resource type)"),
    "custom": ((bool, type(None)), "true or false"), "protect": ((bool, type(None)), "true or false"),
    "parent": ((str, type(None)), "text (a URN)"), "provider": ((str, type(None)), "text (a provider reference)"),
    "dependencies": ((list, type(None)), "a list of URNs"), "inputs": ((dict, type(None)), "an object"),
    "outputs": ((dict, type(None)), "an object")}


def read_state(path: str) -> list[dict[str, Any]]:
    """The resources of a `pulumi stack export` file, read as every input is (a regular file of bounded size);
    one line naming the option, the place in the export and the fix when it is not one."""
    where = f"--base-state {path}"
    document = read_json(Path(path), _FIX, label=where)
    deployment = document.get("deployment") if isinstance(document, dict) else None
    if not isinstance(deployment, dict):
        raise ConfigError(f"{where}: not a stack export (no deployment.resources); {_FIX}")
    resources = deployment.get("resources") or []
    if not isinstance(resources, list):
        raise ConfigError(f"{where}: not a stack export (deployment.resources is not a list); {_FIX}")
    for index, resource in enumerate(resources):
        at = f"deployment.resources[{index}]"
        if not isinstance(resource, dict):
            raise ConfigError(f"{where}: not a stack export ({at} is not an object); {_FIX}")
        for name, (types, shape) in _FIELDS.items():
            value = resource.get(name)
            if not isinstance(value, types) or (name in ("urn", "type") and not value):
                raise ConfigError(f"{where}: not a stack export ({at}.{name} is not {shape}); {_FIX}")
        if not all(isinstance(urn, str) for urn in resource.get("dependencies") or ()):
            raise ConfigError(f"{where}: not a stack export ({at}.dependencies is not a list of URNs); {_FIX}")
    return resources


def kernels(resources: list[dict[str, Any]], path: str) -> list[KernelTarget]:
    """The kernels that had a driver at the last deploy (the root stack's `kernels` output): the program keeps each
    of them under the engine while nodes may still run it, so the head renders with them as its previous kernels."""
    for index, resource in enumerate(resources):
        if resource["type"] != ROOT_STACK:
            continue
        recorded = (resource.get("outputs") or {}).get("kernels", [])
        if not isinstance(recorded, list) or not all(isinstance(key, str) and "/" in key for key in recorded):
            raise ConfigError(f"--base-state {path}: not a stack export (deployment.resources[{index}].outputs.kernels "
                              f"is not a list of os/kernel); {_FIX}")
        return [KernelTarget(*key.split("/", 1)) for key in recorded]
    return []


def as_deployed(rendered: dict[str, Any], resources: list[dict[str, Any]], stack: str) -> dict[str, Any]:
    """The base plan as deployed: the resources the state holds, with the inputs of the base commit's render where
    it has them (the state's own inputs otherwise), and the stack outputs of the last deploy.

    Raises:
        ConfigError: the state is another stack's.
    """
    prefix = f"urn:pulumi:{stack}::{rendered.get('project', '')}::"
    ours = [r for r in resources if r["type"] != ROOT_STACK and not r["type"].startswith("pulumi:providers:")]
    if ours and not all(r["urn"].startswith(prefix) for r in ours):
        other = next(r["urn"] for r in ours if not r["urn"].startswith(prefix))
        raise ConfigError(f"--base-state: the export holds {other}, not a resource of stack {stack}; export the "
                          f"stack you preview (`pulumi stack export --stack {stack}`)")
    deployed = {r["urn"] for r in ours}
    kept = [r for r in rendered["resources"] if r["urn"] in deployed or r["type"].startswith("pulumi:providers:")]
    known = {r["urn"] for r in kept}
    added = [_resource(r, known | deployed) for r in ours if r["urn"] not in known]
    root = next((r for r in resources if r["type"] == ROOT_STACK), {})
    outputs = {**rendered.get("outputs", {}), **(root.get("outputs") or {})}
    return {**rendered, "resources": kept + added, "outputs": outputs}


def _resource(state: dict[str, Any], present: set[str]) -> dict[str, Any]:
    """A resource of the state in the plan's shape (plan.json, DESIGN.md)."""
    parent = state.get("parent")
    return {"urn": state["urn"], "type": state["type"], "name": state["urn"].rsplit("::", 1)[-1],
            "custom": bool(state.get("custom")), "parent": parent if parent in present else None,
            "dependencies": [urn for urn in state.get("dependencies") or [] if urn in present],
            "provider": state.get("provider"), "inputs": state.get("inputs") or {},
            "options": {"replaceOnChanges": [], "deleteBeforeReplace": False, "protect": bool(state.get("protect")),
                        "ignoreChanges": []}}
