"""The kernels section: each kernel's driver before and after, and its image's preflight."""

from __future__ import annotations

from typing import Any

from gpuctl.summary.model import NOT_VERIFIED, SKIPPED, KernelChange, PoolState
from gpuctl.summary.plans import _kernel_key, _outputs
from gpuctl.upgrade import served_by, shared


def _kernel_pools(states: dict[str, PoolState], plan: dict[str, Any]) -> dict[str, list[str]]:
    booted: dict[str, list[str]] = {}
    for name, state in states.items():
        key = _kernel_key(state, plan)
        if key:
            booted.setdefault(key, []).append(name)
    return booted


def _kernels(old: dict[str, Any], new: dict[str, Any], old_pools: dict[str, PoolState],
             new_pools: dict[str, PoolState], preflight: dict[str, str], offline: bool) -> list[KernelChange]:
    before, after = _outputs(old), _outputs(new)
    images_before, images_after = before.get("driverImages") or {}, after.get("driverImages") or {}
    kept = set(after.get("keptKernels") or [])
    booted_before, booted_after = _kernel_pools(old_pools, old), _kernel_pools(new_pools, new)
    rows = []
    for key in sorted(set(before.get("kernels") or []) | set(after.get("kernels") or [])):
        image = images_after.get(key) or images_before.get(key)
        status = preflight.get(images_after.get(key, ""), SKIPPED if offline else NOT_VERIFIED) \
            if key in images_after else "-"
        leaving = [pool for pool in booted_before.get(key, []) if pool not in booted_after.get(key, [])]
        note = ""
        if key not in images_before:
            change = "new"
            note = "declared before any pool rolls onto it"
        elif key not in images_after:
            change = "removed"
            note = "no pool boots it and " + ("--observed-nodes" if offline else "live discovery") + \
                " shows no node on it"
        elif key in kept:
            change = "kept"
            note = ("no pool boots it any more; kept until a node inventory (live discovery at deploy, or "
                    "--observed-nodes) shows no node on it")
        else:
            change = "image changed" if images_before[key] != images_after[key] else "unchanged"
            was, now = branch(images_before[key]), branch(images_after[key])
            if was and now and now < was:
                note = f"driver branch {was} -> {now}: a downgrade"
        driver = served_by(new if key in images_after else old, key)
        if change in ("new", "kept", "removed") and driver and served_by(old, key) == served_by(new, key) and (
                shared(new, key) or shared(old, key)):
            # One driver for every kernel of the OS (built on each node): a kernel joining or leaving changes none.
            change, leaving = "unchanged", []
            note = (f"{'new to the stack' if key not in images_before else 'no pool boots it any more'}; its nodes "
                    f"are served by {driver}, which selects every {key.split('/', 1)[0]} node whatever its kernel "
                    "and stays: no driver change")
        if key in images_after and key not in kept and key not in after.get("declaredKernels", [key]):
            note = "nodes run it, but the stack declares it nowhere (cluster.kernel on OpenShift, a pool's kernel on " \
                   "Kubernetes)"
        if leaving and key in images_after:
            still = [pool for pool in booted_after.get(key, [])]
            note = "; ".join(filter(None, [note, f"{', '.join(leaving)} nodes run it until they roll; "
                                           "the driver stays while any node runs it"
                                           + (f" ({', '.join(still)} still boot{'s' if len(still) == 1 else ''} it)"
                                              if still else "")]))
        rows.append(KernelChange(key, change, image, status, booted_before.get(key, []), booted_after.get(key, []),
                                 note))
    return rows


def branch(image: str | None) -> int | None:
    """The driver branch of an NVIDIA driver image: the tag's leading number (580-6.8.0-1021-aws-ubuntu22.04,
    580.95.05-ubuntu22.04)."""
    tag = (image or "").rpartition(":")[2]
    digits = tag[:len(tag) - len(tag.lstrip("0123456789"))]
    return int(digits) if digits else None


def _downgrades(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(os/kernel, branch before, branch after) of each driver that moves to an older branch."""
    before, after = _outputs(old).get("driverImages") or {}, _outputs(new).get("driverImages") or {}
    moves = [(key, branch(before[key]), branch(image)) for key, image in sorted(after.items()) if key in before]
    return [(key, was, now) for key, was, now in moves if was and now and now < was]
