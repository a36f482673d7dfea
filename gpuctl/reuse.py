"""The head of `gpuctl preview` from its base: only the tenants a change touches render again.

A tenant's resources are decided by the program's code and the tenant's inputs (its components' args and the
platform resources they wait for, `stacks/part.py`). When the working tree's code is the base commit's and a
tenant's inputs have the digest they had in the base's plan, the base's records of that tenant are the ones the head
would register. The head then renders everything that is not a tenant's, and the tenants whose inputs changed, and
takes the others from the base's plan. Any doubt (code changed, a base plan without digests, records that do not fit
together) renders the whole head, as before.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

from gpuctl.basecache import read_by_render
from gpuctl.cli import ROOT
from stacks.part import Changed

PLATFORM_TYPE = "gpu-platform:index:GpuPlatform"


def same_program(commit: str, stack: str, stack_path: str | None, root: Path = ROOT) -> bool:
    """Whether every file a render of `stack` reads (`basecache.read_by_render`) is in the working tree at `root` as
    it is at `commit`, the stack's own file aside (its content reaches the program as config), with no file added."""
    changed = subprocess.run(["git", "diff", "--name-only", "-z", "--no-ext-diff", commit, "--"], cwd=root,
                             capture_output=True, text=True)
    added = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=root,
                           capture_output=True, text=True)
    if changed.returncode != 0 or added.returncode != 0:
        return False
    return not [path for path in (changed.stdout + added.stdout).split("\0")
                if path and path != stack_path and read_by_render(path.split("/", 1)[0], stack)]


def changed_tenants(base: dict[str, Any]) -> Changed | None:
    """The head's tenants to render: those whose inputs differ from the base's; None for a base plan without digests
    (an earlier gpuctl's)."""
    inputs = base.get("tenantInputs")
    if not isinstance(inputs, dict):
        return None
    return Changed({name: entry["digest"] for name, entry in inputs.items() if entry.get("digest")})


def _tenants_records(plan: dict[str, Any]) -> dict[str, str]:
    """URN -> tenant, for every record of a tenant's: its components (the platform's children named in
    `tenantInputs`) and what descends from them."""
    platforms = [record["urn"] for record in plan["resources"] if record["type"] == PLATFORM_TYPE]
    root_of = {root: tenant for tenant, entry in plan["tenantInputs"].items() for root in entry["resources"]}
    children = defaultdict(list)
    for record in plan["resources"]:
        children[record["parent"]].append(record)
    owners: dict[str, str] = {}
    stack = [(record, root_of[record["name"]]) for platform in platforms for record in children[platform]
             if record["name"] in root_of]
    while stack:
        record, tenant = stack.pop()
        owners[record["urn"]] = tenant
        stack.extend((child, tenant) for child in children[record["urn"]])
    return owners


def splice(base: dict[str, Any], head: dict[str, Any]) -> dict[str, Any] | None:
    """The head's whole plan: its own records, and the base's records of each tenant whose inputs it did not render
    again; None when they do not fit together (a tenant in both or in neither, a reference to a resource in
    neither)."""
    before = base["tenantInputs"]
    kept = {name for name, entry in head["tenantInputs"].items()
            if entry["digest"] and before.get(name, {}).get("digest") == entry["digest"]}
    base_owners, head_owners = _tenants_records(base), _tenants_records(head)
    if kept & set(head_owners.values()):
        return None
    taken = [record for record in base["resources"] if base_owners.get(record["urn"]) in kept]
    roots = {(base_owners[record["urn"]], record["name"]) for record in taken
             if record["parent"] not in base_owners}
    if roots != {(name, root) for name in kept for root in head["tenantInputs"][name]["resources"]}:
        return None
    resources = [*head["resources"], *taken]
    urns = {record["urn"] for record in resources}
    if len(urns) != len(resources):
        return None
    for record in taken:
        provider = (record["provider"] or "").rsplit("::", 1)[0]
        if not set(record["dependencies"]) <= urns or record["parent"] not in urns or (provider and provider not in urns):
            return None
    return {**head, "resources": sorted(resources, key=lambda record: record["urn"])}
