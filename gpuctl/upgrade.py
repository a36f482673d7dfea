"""Which NVIDIADriver serves which nodes, before, during and after an OpenShift release change, in plain words."""

from __future__ import annotations

from typing import Any

from components import labels
from gpuctl.diff import NVIDIA_DRIVER, object_name
from stacks.config import PROJECT, ConfigError


def _outputs(plan: dict[str, Any]) -> dict[str, Any]:
    return plan.get("outputs") or {}


def served_by(plan: dict[str, Any], key: str) -> str | None:
    """The name of the NVIDIADriver of `plan` that serves nodes on `os/kernel`: its kernel's, or its OS's (a driver
    the operator builds on each node selects every kernel of the OS), None when the plan has none."""
    node_os, _, kernel = key.partition("/")
    for resource in plan.get("resources", []):
        if resource["type"] != NVIDIA_DRIVER:
            continue
        annotations = (resource["inputs"].get("metadata") or {}).get("annotations") or {}
        if annotations.get(labels.OS_ANNOTATION) == node_os and annotations.get(labels.KERNEL_ANNOTATION,
                                                                                kernel) == kernel:
            return object_name(resource)
    return None


def shared(plan: dict[str, Any], key: str) -> bool:
    """Whether the driver serving `key` also serves a kernel the plan declares (another one): it stays whatever
    happens to `key`, so keeping or adding `key` changes no driver."""
    name = served_by(plan, key)
    return name is not None and any(
        served_by(plan, other) == name for other in _outputs(plan).get("declaredKernels", []) if other != key)


def _declared(plan: dict[str, Any]) -> str | None:
    declared = _outputs(plan).get("declaredKernels") or []
    return declared[0] if len(declared) == 1 else None


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def refuse_release_change(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse an OpenShift release change the cluster cannot take in one step: a downgrade (OpenShift has none), or
    a jump over a minor release. An EUS-to-EUS upgrade (4.18 -> 4.20) still steps the cluster through the release
    between, whose nodes' kernel needs its own driver: that release is deployed first, as a change of its own."""
    before, after = _outputs(old).get("release"), _outputs(new).get("release")
    if not before or not after or before == after:
        return
    was, will = _version(before), _version(after)
    where = f"{PROJECT}:cluster.release"
    if will < was:
        raise ConfigError(f"{where}: {before} -> {after} is a downgrade, which OpenShift does not do; keep {before} "
                          "or move forward")
    if will[1] > was[1] + 1:
        between = f"{will[0]}.{was[1] + 1}"
        raise ConfigError(f"{where}: {before} -> {after} skips {between}: the cluster (an EUS-to-EUS upgrade "
                          f"included) steps through {between}, and its nodes need {between}'s driver on the way; "
                          f"deploy {between}.<patch> (with its kernel) first, then {after}")


def release_stages(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Plain lines on an OpenShift release change: which driver serves the nodes before the cluster upgrade, while
    the Machine Config Operator reboots them, and after; empty when the release does not change."""
    before, after = _outputs(old).get("release"), _outputs(new).get("release")
    old_key, new_key = _declared(old), _declared(new)
    if not before or not after or before == after or not old_key or not new_key:
        return []
    old_driver, new_driver = served_by(old, old_key), served_by(new, new_key)
    old_os, new_os = old_key.split("/", 1)[0], new_key.split("/", 1)[0]
    kind = "a z-stream" if before.rsplit(".", 1)[0] == after.rsplit(".", 1)[0] else "a minor upgrade"
    if old_driver == new_driver:
        why = (f"both releases' nodes are {new_os} to the GPU Operator, and {new_driver} selects every {new_os} node "
               "whatever its kernel (the operator builds the driver on each node)")
        return [f"OpenShift {before} -> {after} ({kind}): no driver changes: {why}",
                f"before, during and after the cluster upgrade every GPU node is served by {new_driver}"]
    new_names = {object_name(r) for r in new.get("resources", []) if r["type"] == NVIDIA_DRIVER}
    kept = old_key in (_outputs(new).get("keptKernels") or [])
    # The nodes the old driver selects: its OS's, whatever their kernel, or its kernel's alone.
    old_nodes = old_os if served_by(old, f"{old_os}/") == old_driver else old_key
    if old_driver in new_names:
        leaving = (f"{old_driver} is kept for lack of a node inventory; it goes in the first deploy whose inventory "
                   f"(live discovery) shows no node on {old_nodes}" if kept else
                   f"{old_driver} stays while nodes run {old_nodes}; it goes in the first deploy whose inventory "
                   "shows none")
    else:
        leaving = f"{old_driver} is deleted by this change: the node inventory shows no node on {old_nodes}"
    return [
        f"OpenShift {before} -> {after} ({kind}): {new_driver} is declared by this deploy, before the cluster "
        f"upgrade starts; it selects no node until one runs {new_key}",
        f"before the cluster upgrade: every GPU node runs {before} ({old_os}) and is served by {old_driver}",
        f"during it: the Machine Config Operator reboots the nodes a few at a time; each rebooted node runs {after} "
        f"({new_key}) and is served by {new_driver}, each other node still by {old_driver}",
        f"after it: every GPU node is served by {new_driver}; {leaving}",
    ]
