"""`gpuctl render`: the program under the mock runtime -> plan.json and one YAML manifest per Kubernetes object."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import orjson
import yaml

import argparse
import sys
from collections.abc import Callable

from gpuctl import interrupts, schemas
from gpuctl.inputs import read_input
from gpuctl.cli import OK, VIOLATION, add_stack_arguments, observed_nodes, stack_file
from gpuctl.runtime import render_plan
from stacks.config import ConfigError
from fleet.kernels import KernelTarget
from stacks.preflight import RegistryUnreachable, check_driver_images

KUBERNETES_TYPE = re.compile(r"^kubernetes:(?P<group>[^:]+):(?P<kind>[^:]+)$")
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"  # a release of a chart, not an object the API server stores
# libyaml's emitter where PyYAML has it; keys this short are simple keys to both (PyYAML under 128 characters,
# libyaml up to 128).
CSafeDumper = getattr(yaml, "CSafeDumper", None)
KEY_LENGTH = 60


def preflight(plan: dict[str, Any], offline: bool) -> str:
    """Check the plan's driver images in their registries; return what happened, for the user.

    A missing image stops the command (exit 2). A registry that cannot be reached leaves the images
    unverified: a review tool says so and goes on; `pulumi up` itself refuses in that case.
    """
    if offline:
        return "skipped (--offline)"
    images = {KernelTarget(*key.split("/", 1)): image for key, image in plan["outputs"]["driverImages"].items()}
    try:
        check_driver_images(images)
    except RegistryUnreachable as error:
        return f"not verified: {error}"
    return f"passed ({len(set(images.values()))} driver images found)"


def manifests(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Kubernetes object of the plan, as it would be sent to the API server."""
    return list(each_manifest(plan))


def each_manifest(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The objects of `manifests`, one at a time: each is made when it is needed and can go once written."""
    for resource in plan["resources"]:
        if resource["custom"] and KUBERNETES_TYPE.match(resource["type"]) and resource["type"] != HELM_RELEASE:
            inputs = resource["inputs"]
            head = {key: inputs[key] for key in ("apiVersion", "kind", "metadata") if key in inputs}
            yield {**head, **inputs}


def stream_plan(plan: dict[str, Any], stream: TextIO) -> None:
    """The plan as compact JSON, written one resource at a time (no copy of the whole document in memory)."""
    stream.write('{"project": %s, "stack": %s, "resources": [' % (json.dumps(plan["project"]),
                                                                    json.dumps(plan["stack"])))
    for index, resource in enumerate(plan["resources"]):
        stream.write(("," if index else "") + json.dumps(resource))
    stream.write('], "outputs": %s, "tenantInputs": %s}' % (json.dumps(plan["outputs"]),
                                                          json.dumps(plan["tenantInputs"])))


INDENTED = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
_RESOURCES = b'\n  "resources": []'  # the top-level key, and only it, follows a line break and two spaces


def _indented(value: Any) -> bytes:
    """`json.dumps(value, indent=2, sort_keys=True)`, encoded by orjson: in C what the standard library does in
    Python once it indents. The text is the same, but that characters past `~` are UTF-8, not escapes, and a float
    may take a shorter form (1e-7); an integer past 64 bits, which orjson refuses, takes the standard library."""
    try:
        return orjson.dumps(value, option=INDENTED)
    except orjson.JSONEncodeError:
        return json.dumps(value, indent=2, sort_keys=True).encode()


def write_plan(plan: dict[str, Any], stream: BinaryIO) -> None:
    """plan.json as `json.dump(plan, stream, indent=2, sort_keys=True)` writes it, one resource encoded at a time."""
    head, tail = _indented({**plan, "resources": []}).split(_RESOURCES)
    stream.write(head + _RESOURCES[:-1])
    for index, resource in enumerate(plan["resources"]):
        stream.write(b"%s\n    %s" % (b"," if index else b"", _indented(resource).replace(b"\n", b"\n    ")))
    stream.write((b"\n  ]" if plan["resources"] else b"]") + tail + b"\n")


def manifest_filename(manifest: dict[str, Any]) -> str:
    meta = manifest.get("metadata", {})
    parts = [manifest["kind"], meta.get("namespace", ""), meta["name"]]
    return "-".join(part for part in parts if part).lower().replace(":", "-") + ".yaml"


def schema_errors(objects: Iterable[dict[str, Any]], kubernetes_version: str) -> list[str]:
    """Validate core objects against the official OpenAPI schema of this Kubernetes version (CRDs are skipped)."""
    version = f"{kubernetes_version}.0"
    errors = []
    for manifest in objects:
        error = schemas.first_error(manifest, version)
        if error is not None:
            path = ".".join(str(part) for part in error.path)
            errors.append(f"{manifest['kind']}/{manifest['metadata']['name']}: {path}: {error.message}")
    return errors


MARKER = ".gpuctl-render"


def check_out(out: Path) -> Path:
    """The folder `render --out` may write: new, empty, or an earlier render; anything else is a ConfigError."""
    fix = "pass a new or empty folder, or one an earlier `gpuctl render` wrote"
    target = out.resolve()
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a folder; {fix}")
    if target.is_dir() and any(target.iterdir()):
        if not (target / MARKER).is_file():
            raise ConfigError(f"--out {out}: holds files that no render wrote, refusing to replace them; {fix}")
        foreign = _not_rendered(target)
        if foreign is not None:
            held, move = foreign
            raise ConfigError(f"--out {out}: holds {held}, refusing to replace it; {move}, or {fix}")
    parent = next((folder for folder in target.parents if folder.exists()), None)
    writable = parent is not None and os.access(parent, os.W_OK | os.X_OK)
    if not writable or (target.is_dir() and not os.access(target, os.W_OK)):
        raise ConfigError(f"--out {out}: not writable; {fix} in a writable place")
    return target


MARKER_HEAD = "written by gpuctl render; the folder is replaced as a whole; it wrote these files:"
_WRITTEN = re.compile(r"plan\.json|manifests/[^/]+\.yaml")


def _not_rendered(render: Path) -> tuple[str, str] | None:
    """What in an earlier render no render wrote, and how to clear it; None when the folder may be replaced.

    The marker must list what the render wrote, and nothing else may be in the folder. A marker without the list
    (empty, or of an older gpuctl) vouches for nothing: a user's file may sit beside what that render wrote.
    """
    try:
        lines = read_input(render / MARKER, str(render / MARKER), "").splitlines()
    except ConfigError:
        lines = []
    listed = set(lines[1:])
    if lines[:1] != [MARKER_HEAD] or not all(_WRITTEN.fullmatch(name) for name in listed):
        return (f"a {MARKER} marker that does not list the files a render wrote (empty, or of an older gpuctl)",
                "move out what you keep and delete the folder")
    for path in sorted(render.rglob("*")):
        name = path.relative_to(render).as_posix()
        if name in (MARKER, "manifests") and not path.is_symlink() and (name == MARKER) == path.is_file():
            continue
        if name not in listed or path.is_symlink() or not path.is_file():
            return f"{name}, which no render wrote", "move it out"
    return None


def dump_yaml(manifest: dict[str, Any]) -> str:
    """The manifest as PyYAML's safe_dump writes it; through libyaml when that is byte for byte the same.

    libyaml writes double-quoted strings (what holds a line break or a character that is not printable ASCII)
    with other escapes where it folds them, and empty or long keys differently, so only manifests whose strings
    are all printable ASCII, and whose keys short and non-empty, take the fast path. Printable ASCII is plain or
    single-quoted, which both fold alike at any length: a quota's wait conditions (one long annotation) no
    longer send every tenant's quotas through the pure-Python dumper.
    """
    fast = CSafeDumper is not None and _plain(manifest)
    return yaml.dump(manifest, Dumper=CSafeDumper if fast else yaml.SafeDumper, sort_keys=False)


def _plain(value: Any) -> bool:
    if isinstance(value, str):
        return not value or (value.isascii() and value.isprintable())
    if isinstance(value, dict):
        return all(isinstance(key, str) and 0 < len(key) <= KEY_LENGTH and _plain(key) and _plain(item)
                   for key, item in value.items())
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return True


def write_render(plan: dict[str, Any], out: Path, announce: Callable[[int], None] = lambda count: None) -> int:
    """Write plan.json and manifests/ to `out` at once: a failed or interrupted render leaves `out` as it was.

    `announce(count)` reports the render before the folder is swapped in, so an output that cannot take the report
    (a full disk, a closed stdout) stops the render with nothing written.
    """
    target = check_out(out)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.render-", dir=target.parent))
    except OSError as error:
        raise ConfigError(f"--out {out}: {error.strerror}; pass a folder in a writable place") from None
    with interrupts.scratch(staged) as staging:
        retired = staging.with_name(staging.name + "-old")
        try:
            with open(staging / "plan.json", "wb") as stream:  # streamed: the text is never whole in memory
                write_plan(plan, stream)
            (staging / "manifests").mkdir()
            written = ["plan.json"]
            for manifest in each_manifest(plan):
                written.append(f"manifests/{manifest_filename(manifest)}")
                (staging / written[-1]).write_text(dump_yaml(manifest))
            (staging / MARKER).write_text("\n".join([MARKER_HEAD, *written]) + "\n")
        except OSError as error:
            raise ConfigError(f"--out {out}: {error.strerror}; the previous content is unchanged") from None
        announce(len(written) - 1)
        with interrupts.shielded():
            try:
                if target.exists():
                    target.rename(retired)
                staging.rename(target)
            except OSError as error:
                raise ConfigError(f"--out {out}: {error.strerror}; the previous content is unchanged") from None
            finally:
                if retired.exists() and not target.exists():
                    retired.rename(target)
                shutil.rmtree(retired, ignore_errors=True)
    return len(written) - 1


def run(args: argparse.Namespace) -> int:
    check_out(Path(args.out))
    plan = render_plan(stack_file(args), observed_nodes(args.observed_nodes), online=not args.offline)
    checked = preflight(plan, args.offline)
    errors = schema_errors(each_manifest(plan), plan["outputs"]["kubernetesVersion"])
    if errors:
        for error in errors:
            print(f"schema: {error}", file=sys.stderr)
        return VIOLATION

    def announce(count: int) -> None:
        print(f"rendered stack {plan['stack']}: {len(plan['resources'])} resources, {count} manifests -> {args.out}")
        print(f"driver image preflight: {checked}", flush=True)

    write_render(plan, Path(args.out), announce)
    return OK


def register(commands) -> None:
    parser = commands.add_parser("render", help="render a stack to DIR/plan.json and DIR/manifests/")
    add_stack_arguments(parser)
    parser.add_argument("--out", required=True, help="output folder: new, empty or an earlier render (replaced as a whole; anything else is refused)")
    parser.add_argument("--offline", action="store_true",
                        help="no network: skip the driver image preflight and live node discovery")
    parser.set_defaults(run=run)
