"""gpuctl: render, check and diff the GPU platform offline (no Pulumi CLI, credentials or cluster)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpuctl.render import render_plan, schema_errors, manifests, write_render
from gpuctl.stackfile import load_stack_file, stack_file_path
from stacks.config import ConfigError
from stacks.inventory import parse_node_list

ROOT = Path(__file__).resolve().parent.parent
BAD_INPUT, VIOLATION = 2, 1


class UsageError(ConfigError):
    """Bad command-line arguments."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def _stack_file(args: argparse.Namespace):
    if args.config_file:
        return load_stack_file(Path(args.config_file), args.stack)
    return load_stack_file(stack_file_path(ROOT, args.stack), args.stack)


def _observed(path: str | None):
    if path is None:
        return None
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"--observed-nodes {path}: {error.strerror}; pass a `kubectl get nodes -o json` file")
    except json.JSONDecodeError as error:
        raise ConfigError(f"--observed-nodes {path}: not JSON ({error.msg} at line {error.lineno})") from None
    return parse_node_list(document, path)


def cmd_render(args: argparse.Namespace) -> int:
    stack_file = _stack_file(args)
    plan = render_plan(stack_file, _observed(args.observed_nodes))
    errors = schema_errors(manifests(plan), plan["outputs"]["kubernetesVersion"])
    if errors:
        for error in errors:
            print(f"schema: {error}", file=sys.stderr)
        return VIOLATION
    count = write_render(plan, Path(args.out))
    print(f"rendered stack {plan['stack']}: {len(plan['resources'])} resources, {count} manifests -> {args.out}")
    return 0


def parser() -> argparse.ArgumentParser:
    root = _Parser(prog="gpuctl", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, parser_class=_Parser)
    render = commands.add_parser("render", help="render a stack to plan.json and manifests/")
    source = render.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="stack name: reads Pulumi.<stack>.yaml")
    source.add_argument("--config-file", help="a stack file at any path")
    render.add_argument("--observed-nodes", help="`kubectl get nodes -o json` output: kernels running now")
    render.add_argument("--out", required=True, help="output directory")
    render.set_defaults(run=cmd_render)
    return root


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        return args.run(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
