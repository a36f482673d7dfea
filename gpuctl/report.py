"""The review of a change in three formats: text (terminal and logs), JSON (tools), Markdown (a GitHub comment).

Each shows the fleet summary first, then the diff: resources under one header per component, property paths
named by their list keys, multi-line values as line diffs, and the key fields of what is created.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from components.labels import GPU_RESOURCE
from gpuctl.diff import SYMBOLS, Change, PlanDiff, Step, object_name
from gpuctl.summary import DRIFT, FleetSummary, KernelChange, PoolChange, PoolState

COLOURS = {"create": "green", "update": "yellow", "replace": "magenta", "delete": "red"}
FORMATS = ("text", "json", "markdown")
COMMENT_LIMIT = 65536  # GitHub's limit on a comment body, in characters
MERMAID_NODES = 50
# Rows a comment's pool and tenant tables show at most; the rest are counted and left to the JSON review.
TABLE_ROWS = 100
FULL_REVIEW = ("the whole review is in this run's `gpuctl-preview-<stack>` JSON artifact "
               "(`gpuctl preview --json-file`)")
LONG_VALUE = 160  # a single-line value longer than this shows a window around its first difference
# Fields shown under a create, where present: what it runs, where, and how big.
KEY_FIELDS = (
    "spec.repository", "spec.image", "spec.version", "spec.usePrecompiled", "spec.nodeSelector", "spec.replicas",
    "spec.minReplicas", "spec.maxReplicas", "spec.hard", "spec.template.spec.providerSpec.value.instanceType",
    "spec.template.spec.providerSpec.value.ami.id", "spec.template.spec.nodeSelector", "chart", "version",
    "instanceType", "imageId", "desiredCapacity", "minSize", "maxSize", "value",
)
BASE64_FIELDS = ("userData",)  # base64 text the provider sends as is: shown decoded, as a line diff


@dataclass
class Review:
    """Everything one review shows."""

    stack: str
    base: str | None
    diff: PlanDiff
    summary: FleetSummary
    violations: list[Any] | None = None  # check.Violation; None when policies did not run (`gpuctl diff`)
    resources: int = 0
    preflight: str | None = None
    kept: list[str] = field(default_factory=list)
    new_images: dict[str, str] = field(default_factory=dict)
    command: str = "preview"  # the gpuctl command that made it, for the comment's heading
    policies: int | None = None  # how many policies ran, when the pack config disabled some
    new_stack: str | None = None  # the stack file the base does not hold: everything is new there


# -- values ------------------------------------------------------------------------------------------------------


def _json(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value, sort_keys=True)


def value_pair(old: Any, new: Any) -> tuple[str, str]:
    """Both values as JSON; long ones cut to a window around their first difference, so they never look equal."""
    before, after = _json(old), _json(new)
    if max(len(before), len(after)) <= LONG_VALUE:
        return before, after
    start = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
    lo = max(0, start - 40)

    def window(text: str) -> str:
        piece = text[lo:lo + LONG_VALUE - 40]
        return f"{'...' if lo else ''}{piece}{'...' if lo + LONG_VALUE - 40 < len(text) else ''}"

    return window(before), window(after)


def _decoded(change: Change) -> tuple[Any, Any]:
    """A base64 field's values decoded to text where they are base64 of UTF-8 text."""
    if change.path.split(".")[-1] not in BASE64_FIELDS:
        return change.old, change.new

    def decode(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return value

    return decode(change.old), decode(change.new)


def line_diff(old: Any, new: Any) -> list[str] | None:
    """The changed lines (with one line of context) of a multi-line string value; None for other values."""
    if not any(isinstance(value, str) and "\n" in value for value in (old, new)):
        return None
    before = old.splitlines() if isinstance(old, str) else []
    after = new.splitlines() if isinstance(new, str) else []
    lines = []
    for line in list(difflib.unified_diff(before, after, n=1, lineterm=""))[2:]:
        lines.append(line if not line.startswith("@@") else "...")
    return lines


def change_lines(change: Change) -> list[str]:
    """One change, as lines: `path: old => new`, or `path:` and its line diff."""
    old, new = _decoded(change)
    lines = line_diff(old, new)
    if lines is not None:
        return [f"{change.named}:"] + [f"    {line}" for line in lines]
    before, after = value_pair(old, new)
    return [f"{change.named}: {before} => {after}"]


def _at(inputs: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(inputs, dict) or part not in inputs:
            return None
        inputs = inputs[part]
    return inputs


def _images(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(named path, image) of every container image in the inputs."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key == "image" and isinstance(item, str) and ("/" in item or ":" in item):
                found.append((where, item))
            else:
                found += _images(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            name = item.get("name") if isinstance(item, dict) else None
            found += _images(item, f"{path}[{name if isinstance(name, str) else index}]")
    return found


def key_fields(resource: dict[str, Any]) -> list[str]:
    """The lines shown under a create: images, node selectors and sizes."""
    inputs = resource["inputs"]
    lines = [f"{path}: {_json(value)}" for path, value in ((p, _at(inputs, p)) for p in KEY_FIELDS)
             if value is not None and not (path == "value" and resource["type"].startswith("aws:"))]
    lines += [f"{path}: {image}" for path, image in _images(inputs) if path not in KEY_FIELDS]
    return lines


# -- the diff, as text -------------------------------------------------------------------------------------------


def _ancestors(diff: PlanDiff, urn: str | None) -> list[str]:
    chain = []
    while urn in diff.parents:
        chain.append(urn)
        urn = diff.parents[urn]["parent"]
    return chain[::-1]


def display_order(diff: PlanDiff) -> list[tuple[list[str], Step]]:
    """Steps with their component chains, grouped so each component's steps are together (its header shows
    once; a component that is itself created or deleted is its own header), components in the order their
    first step applies, steps in apply order within a component."""
    chains = [_ancestors(diff, step.resource["parent"]) for step in diff.steps]
    components = {urn for chain in chains for urn in chain}
    groups = [chain + [step.resource["urn"]] if step.resource["urn"] in components else chain
              for chain, step in zip(chains, diff.steps)]
    first: dict[str, int] = {}
    for index, group in enumerate(groups):
        for urn in group:
            first.setdefault(urn, index)
    order = sorted(range(len(diff.steps)), key=lambda i: ([first[urn] for urn in groups[i]],
                                                          len(groups[i]) == len(chains[i]), i))
    return [(chains[i], diff.steps[i]) for i in order]


def resource_title(step: Step) -> str:
    name = object_name(step.resource)
    return f"{step.resource['type']}  {step.resource['name']}" + (f"  ({name})" if name and name != step.resource[
        "name"] else "")


def diff_lines(diff: PlanDiff) -> list[tuple[str, str]]:
    """(op or "", line) for the diff: component headers, resources, their changes, and the change summary."""
    out: list[tuple[str, str]] = []
    shown: list[str] = []
    for chain, step in display_order(diff):
        common = next((i for i, (a, b) in enumerate(zip(chain, shown)) if a != b), min(len(chain), len(shown)))
        for depth, urn in enumerate(chain[common:], start=common):
            component = diff.parents[urn]
            out.append(("", f"    {'  ' * depth}{component['type']}  {component['name']}"))
        shown = chain + [step.resource["urn"]]  # a component step heads its own children
        indent = "  " * len(chain)
        out.append((step.op, f"{SYMBOLS[step.op]:<4}{indent}{resource_title(step)}  {step.op}"
                    + ("  (retained: dropped from the stack's state, left in place)" if step.retained else "")))
        if step.op == "create":
            out += [(step.op, f"    {indent}    {line}") for line in key_fields(step.resource)]
        for change in step.changes:
            mark = "+-" if change.path in step.replace_reasons else "~"
            first, *rest = change_lines(change)
            out.append((step.op, f"    {indent}    {mark} {first}"))
            out += [(step.op, f"    {indent}      {line}") for line in rest]
    summary = diff.summary()
    out.append(("", "Resources:"))
    for op, verb in (("create", "to create"), ("update", "to update"), ("replace", "to replace"),
                     ("delete", "to delete")):
        if summary[op]:
            out.append((op, f"    {SYMBOLS[op]} {summary[op]} {verb}"))
    changes = len(diff.steps)
    out.append(("", f"    {changes} change{'s' if changes != 1 else ''}. {summary['same']} unchanged"
                if changes else f"    {summary['same']} unchanged"))
    return out


def print_diff(diff: PlanDiff, console: Console) -> None:
    for op, line in diff_lines(diff):
        console.print(f"[{COLOURS[op]}]{escape(line)}[/{COLOURS[op]}]" if op else escape(line))


# -- the summary, as rows ----------------------------------------------------------------------------------------


def _arrow(before: Any, after: Any, absent: str = "-") -> str:
    before = absent if before is None else before
    after = absent if after is None else after
    return str(after) if before == after else f"{before} -> {after}"


def _os_kernel(state: PoolState | None, release: str | None) -> str:
    if state is None:
        return None
    if state.kernel:
        return f"{state.os} {state.kernel}"
    return f"release {release}" if release else "release kernel"


def pool_row(pool: PoolChange, summary: FleetSummary) -> dict[str, str]:
    before, after = pool.before, pool.after
    either = after or before
    return {
        "pool": pool.name + (" (new)" if before is None else " (removed)" if after is None else ""),
        "instance": _arrow(before and before.instance_type, after and after.instance_type),
        "nodes": _arrow(before and _nodes(before), after and _nodes(after), "0"),
        "GPUs": _arrow(before and _pool_gpus(before), after and _pool_gpus(after), "0"),
        "OS / kernel": _arrow(_os_kernel(before, summary.release_before), _os_kernel(after, summary.release_after)),
        "roll": pool.roll,
    } if either else {}


def _nodes(pool: PoolState) -> str | int:
    """A pool's nodes; a Karpenter pool's as it has them now and its limit (its GPUs are counted at the limit)."""
    if pool.roll.get("method") == DRIFT:
        return f"{pool.nodes} now, limit {pool.max_nodes} (Karpenter)"
    return pool.nodes


def _pool_gpus(pool: PoolState) -> str:
    return f"{_gpus_shared(pool)} at the limit" if pool.roll.get("method") == DRIFT else _gpus_shared(pool)


def _gpus_shared(pool: PoolState) -> str:
    if pool.partitioning is not None:  # the kinds it advertises, unless whole GPUs (as many as it has)
        if set(pool.kinds) <= {GPU_RESOURCE}:
            return str(pool.gpus)
        return f"{pool.gpus} ({pool.partitioning}: {', '.join(f'{n} {kind}' for kind, n in pool.kinds.items())})"
    return f"{pool.gpus} shared x{pool.sharing}" if (pool.sharing or 1) > 1 else str(pool.gpus)


def kernel_row(kernel: KernelChange) -> dict[str, str]:
    return {"kernel": kernel.key, "driver": kernel.change, "image": kernel.image or "-",
            "preflight": kernel.preflight, "pools": _arrow(", ".join(kernel.pools_before) or None,
                                                          ", ".join(kernel.pools_after) or None),
            "note": kernel.note}


ALSO = ("group", "memory", "pods")  # what else of a tenant a change may touch, shown only when it does


def tenant_rows(summary: FleetSummary) -> tuple[list[dict[str, str]], int]:
    """Changed tenants, and how many are unchanged."""
    rows, same = [], 0
    for tenant in summary.tenants:
        sharing = [(tenant.tenancy_before, tenant.tenancy_after), (tenant.guaranteed_before, tenant.guaranteed_after),
                   (tenant.borrowable_before, tenant.borrowable_after)]
        also = [f"{name} {_arrow(before, after)}" for name in ALSO
                if (before := getattr(tenant, f"{name}_before")) != (after := getattr(tenant, f"{name}_after"))
                and before is not None and after is not None]
        if tenant.gpus_before == tenant.gpus_after and tenant.priority_before == tenant.priority_after and all(
                before == after for before, after in sharing) and not also \
                and tenant.slices_before == tenant.slices_after:
            same += 1
            continue
        state = "added" if tenant.gpus_before is None else "removed" if tenant.gpus_after is None else "changed"
        rows.append({"tenant": tenant.name, "namespace": tenant.namespace, "change": state,
                     "GPU quota": _arrow(_grants(tenant.gpus_before, tenant.slices_before),
                                         _grants(tenant.gpus_after, tenant.slices_after)),
                     "priority class": _arrow(tenant.priority_before, tenant.priority_after),
                     "tenancy": _arrow(tenant.tenancy_before, tenant.tenancy_after),
                     "guaranteed GPUs": _arrow(tenant.guaranteed_before, tenant.guaranteed_after),
                     "may borrow": _arrow(tenant.borrowable_before, tenant.borrowable_after),
                     "also": ", ".join(also)})
    if not any(row["also"] for row in rows):  # the column only when a change has something to say in it
        for row in rows:
            del row["also"]
    return rows, same


def _grants(gpus: int | None, slices: dict[str, int]) -> str | int | None:
    """Whole GPUs, and the other kinds given beside them (shares, MIG slices)."""
    if gpus is None or not slices:
        return gpus
    return ", ".join([f"{gpus}", *(f"{n} {kind}" for kind, n in slices.items())])


def capacity_rows(summary: FleetSummary) -> list[dict[str, str]]:
    capacity = summary.capacity
    rows = [{"": "GPUs in the pools", "value": _arrow(capacity.gpus_before, capacity.gpus_after)},
            {"": "sum of tenant GPU quotas", "value": _arrow(capacity.quota_before, capacity.quota_after)}]
    if (capacity.schedulable_before, capacity.schedulable_after) != (capacity.gpus_before, capacity.gpus_after):
        rows.append({"": "whole GPUs advertised (nvidia.com/gpu)",
                     "value": _arrow(capacity.schedulable_before, capacity.schedulable_after)})
    after = capacity.schedulable_after
    rows.append({"": "quota / schedulable GPUs", "value": f"{capacity.quota_after} / {after}"
                 + (" (over capacity)" if capacity.quota_after > after else "")})
    for kind, (quota, advertised) in capacity.kinds_after.items():
        rows.append({"": f"quota / advertised {kind}", "value": f"{quota} / {advertised}"
                     + (" (over capacity)" if quota > advertised else "")})
    for name, (quota, devices) in capacity.classes_after.items():
        rows.append({"": f"quota / devices of DeviceClass {name}", "value": f"{quota} / {devices}"
                     + (" (over capacity)" if quota > devices else "")})
    return rows


# -- text --------------------------------------------------------------------------------------------------------


def summary_lines(summary: FleetSummary) -> list[str]:
    lines = ["Fleet:"]
    if summary.release_before != summary.release_after and summary.release_after:
        lines.append(f"  OpenShift release: {_arrow(summary.release_before, summary.release_after)}")
    for pool in summary.pools:
        row = pool_row(pool, summary)
        lines.append(f"  pool {row['pool']}: {row['instance']}, nodes {row['nodes']}, GPUs {row['GPUs']}, "
                     f"{row['OS / kernel']}")
        lines.append(f"    roll: {row['roll']}")
    if summary.upgrade:
        lines.append("OpenShift upgrade, driver by driver:")
        lines += [f"  {line}" for line in summary.upgrade]
    lines.append("Kernels and drivers:")
    for kernel in summary.kernels:
        row = kernel_row(kernel)
        lines.append(f"  {row['kernel']}: driver {row['driver']}, image {row['image']}, preflight {row['preflight']}"
                     f", pools {row['pools']}" + (f"; {row['note']}" if row["note"] else ""))
    rows, same = tenant_rows(summary)
    lines.append("Tenants:" + ("" if rows else f" {same} unchanged"))
    for row in rows:
        lines.append(f"  {row['tenant']} (namespace {row['namespace']}): {row['change']}, GPU quota "
                     f"{row['GPU quota']}, {row['priority class']}; tenancy {row['tenancy']}, guaranteed GPUs "
                     f"{row['guaranteed GPUs']}, may borrow {row['may borrow']}"
                     + (f"; {row['also']}" if row.get("also") else ""))
    if rows and same:
        lines.append(f"  {same} unchanged")
    if summary.retirements:
        lines.append("Retired:")
        lines += [f"  {line}" for line in summary.retirements]
    lines.append("Capacity:")
    lines += [f"  {row['']}: {row['value']}" for row in capacity_rows(summary)]
    lines.append("Destructive:" + ("" if summary.destructive else " nothing"))
    for item in summary.destructive:
        lines.append(f"  ! {item.what}: takes away {item.takes_away}" + (f"; {item.engine}" if item.engine else ""))
    if summary.unknowns:
        lines.append("Depends on live state not read:")
        lines += [f"  ? {line}" for line in summary.unknowns]
    if summary.engine_notes:
        lines.append("Where pulumi up may differ:")
        lines += [f"  * {line}" for line in summary.engine_notes]
    return lines


def print_text(review: Review, console: Console) -> None:
    """The terminal and log view: summary, diff, driver notes, policies, preflight."""
    from gpuctl import check

    base = f"against {review.base}" if review.base else "as a new deployment"
    if review.new_stack:
        base += f" ({review.new_stack} is not there: a new stack)"
    console.print(f"Previewing stack {escape(review.stack)} {escape(base)}:")
    for line in summary_lines(review.summary):
        console.print(escape(line), style="bold red" if line.startswith("  !") else None)
    console.print("Changes:")
    print_diff(review.diff, console)
    for key, image in review.new_images.items():
        console.print(escape(f"new driver image for {key}: {image}"))
    for line in review.kept:
        console.print(escape(line))
    if review.violations is not None:
        console.print("Policies:")
        check.print_report(review.violations, review.resources, console, review.policies)
    if review.preflight is not None:
        console.print(escape(f"Driver image preflight: {review.preflight}"))


# -- JSON --------------------------------------------------------------------------------------------------------


def to_json(review: Review) -> dict[str, Any]:
    document = {**review.diff.to_json(), "summary": review.summary.to_json()}
    if review.new_stack:
        document["newStack"] = review.new_stack
    if review.violations is not None:
        document["policyViolations"] = [asdict(v) for v in review.violations]
    if review.preflight is not None:
        document.update(preflight=review.preflight, keptDrivers=[
            kernel.key for kernel in review.summary.kernels if kernel.change == "kept"],
            newDriverImages=review.new_images)
    return document


# -- Markdown ----------------------------------------------------------------------------------------------------


def _cell(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;") or " "


def table(rows: list[dict[str, str]]) -> list[str]:
    if not rows:
        return []
    columns = list(rows[0])
    return ([f"| {' | '.join(_cell(column) for column in columns)} |", f"|{'---|' * len(columns)}"]
            + [f"| {' | '.join(_cell(row[column]) for column in columns)} |" for row in rows])


def _cut(lines: list[str], what: str, rows: int = TABLE_ROWS) -> list[str]:
    """A table (header, rule, rows) cut to `rows` rows, with a count of the rest and where to find them."""
    if len(lines) <= rows + 2:
        return lines
    return [*lines[:rows + 2], "", f"... {len(lines) - rows - 2} more {what} not shown; {FULL_REVIEW}"]


def _cut_list(lines: list[str], what: str, rows: int = TABLE_ROWS) -> list[str]:
    """A bullet list cut to `rows` items, with a count of the rest and where to find them."""
    if len(lines) <= rows:
        return lines
    return [*lines[:rows], f"- ... {len(lines) - rows} more {what} not shown; {FULL_REVIEW}"]


def _mermaid_label(step: Step) -> str:
    kind = step.resource["type"].rsplit(":", 1)[-1]
    name = object_name(step.resource) or step.resource["name"]
    return f"{SYMBOLS[step.op]} {kind} {name}".replace('"', "#quot;")


def apply_edges(diff: PlanDiff, shown: set[str]) -> list[tuple[str, str]]:
    """(before, after) URN pairs among the shown steps: a dependency, reached through unchanged resources too.
    Deletes run the other way round: dependents go first."""
    ops = {step.resource["urn"]: step.op for step in diff.steps}
    edges = set()
    for urn in shown:
        seen, frontier = set(), list(diff.parents[urn]["dependencies"])
        while frontier:
            dependency = frontier.pop()
            if dependency in seen or dependency not in diff.parents:
                continue
            seen.add(dependency)
            if dependency in shown:
                edges.add((urn, dependency) if ops[urn] == "delete" and ops[dependency] == "delete"
                          else (dependency, urn))
            else:
                frontier += diff.parents[dependency]["dependencies"]
    return sorted(edges)


def mermaid(diff: PlanDiff, limit: int = MERMAID_NODES) -> list[str]:
    """A flowchart of the changed resources in apply order, at most `limit` of them."""
    steps = diff.steps[:limit]
    ids = {step.resource["urn"]: f"s{index}" for index, step in enumerate(steps)}
    lines = ["flowchart TD"]
    lines += [f'  {ids[step.resource["urn"]]}["{_mermaid_label(step)}"]:::{step.op}' for step in steps]
    lines += [f"  {ids[a]} --> {ids[b]}" for a, b in apply_edges(diff, set(ids))]
    if len(diff.steps) > limit:
        lines.append(f'  more["+{len(diff.steps) - limit} more"]')
    lines += ["  classDef create fill:#dafbe1,stroke:#1a7f37", "  classDef update fill:#fff8c5,stroke:#9a6700",
              "  classDef replace fill:#fbefff,stroke:#8250df", "  classDef delete fill:#ffebe9,stroke:#cf222e"]
    return lines


def _policy_lines(review: Review) -> list[str]:
    from gpuctl import check

    if review.violations is None:
        return []
    if not review.violations:
        line = check.passed_line(review.policies, review.resources)
        return ["#### Policies", "", f"{line[0].upper()}{line[1:]}.", ""]
    rows = [{"level": v.level, "policy": v.policy, "resource": v.name or "(stack)", "message": v.message}
            for v in review.violations]
    counts = ", ".join(f"{count} {level}" for level, count in check.level_counts(review.violations).items())
    return ["#### Policies", "", f"**{counts} violation(s)**" if check.has_mandatory(review.violations)
            else f"{counts} violation(s)", "", *table(rows), ""]


def to_markdown(review: Review, limit: int = COMMENT_LIMIT) -> str:
    """A GitHub comment: the summary as tables, the destructive list in bold, policies, the apply order as a
    Mermaid flowchart, and the full diff in a collapsible block, cut (with a note) to fit `limit` characters."""
    summary = review.summary
    base = f"against `{review.base}`" if review.base else "as a new deployment"
    if review.new_stack:
        base += f" (`{review.new_stack}` is not there: a new stack)"
    head = [f"### `gpuctl {review.command}`: stack `{review.stack}` {base}", ""]
    if summary.destructive:
        head += ["#### Destructive", ""]
        head += _cut_list([f"- **{_cell(item.what)}**: takes away {_cell(item.takes_away)}"
                           + (f" — {_cell(item.engine)}" if item.engine else "") for item in summary.destructive],
                          "destructive steps")
        head.append("")
    if summary.release_before != summary.release_after and summary.release_after:
        head += [f"OpenShift release: {_arrow(summary.release_before, summary.release_after)}", ""]
    if summary.upgrade:
        head += ["#### OpenShift upgrade, driver by driver", "", *[f"- {_cell(line)}" for line in summary.upgrade], ""]
    head += ["#### Pools", "", *_cut(table([pool_row(pool, summary) for pool in summary.pools]), "pools"), ""]
    head += ["#### Kernels and drivers", "", *_cut(table([kernel_row(kernel) for kernel in summary.kernels]),
                                                     "kernels"), ""]
    rows, same = tenant_rows(summary)
    head += ["#### Tenants", "", *_cut(table(rows), "changed tenants"), *([""] if rows else []),
             *([f"{same} tenant{'s' if same != 1 else ''} unchanged.", ""] if same else [])]
    if summary.retirements:
        head += ["#### Retired", "", *_cut_list([f"- {_cell(line)}" for line in summary.retirements],
                                                "retired pools and tenants"), ""]
    head += ["#### Capacity", "", *table(capacity_rows(summary)), ""]
    if summary.unknowns:
        head += ["#### Depends on live cluster state not read", "",
                 *_cut_list([f"- {_cell(line)}" for line in summary.unknowns], "items"), ""]
    if summary.engine_notes:
        head += ["#### Where `pulumi up` may differ", "",
                 *_cut_list([f"- {_cell(line)}" for line in summary.engine_notes], "items"), ""]
    head += _policy_lines(review)
    if review.preflight is not None:
        head += [f"Driver image preflight: {_cell(review.preflight)}", ""]
    if review.diff.steps:
        head += ["#### Apply order", "", "```mermaid", *mermaid(review.diff), "```", ""]
    counts = review.diff.summary()
    title = ", ".join(f"{counts[op]} to {op}" for op in SYMBOLS if counts[op]) or "no changes"
    opening = ["<details>", f"<summary>Full diff: {title}, {counts['same']} unchanged</summary>", "", "```diff"]
    closing = ["```", "", "</details>", ""]
    text_head = "\n".join(head) + "\n"
    if len(text_head) > limit // 2:  # long lines in every list: the summary keeps at most half the comment
        text_head = text_head[:limit // 2].rsplit("\n", 1)[0] + f"\n\n... the summary is cut here; {FULL_REVIEW}\n\n"
    text_head += "\n".join(opening) + "\n"
    text_tail = "\n".join(closing)
    body = [line for _, line in diff_lines(review.diff)]
    room = limit - len(text_head) - len(text_tail) - 1000  # room for a line the workflow adds
    kept, used = [], 0
    for line in body:
        if used + len(line) + 1 > room:
            break
        kept.append(line.replace("```", "``\u200b`"))
        used += len(line) + 1
    if len(kept) < len(body):
        kept.append(f"... {len(body) - len(kept)} more lines cut to fit a comment; "
                    "run `gpuctl preview --format text` or see the job log for the whole diff")
    return text_head + "\n".join(kept) + "\n" + text_tail
