"""`gpuctl diff`: two rendered plans, their diff and fleet summary (data from gpuctl.diff and gpuctl.summary),
reported by gpuctl.report."""

from __future__ import annotations

import argparse
import json

from gpuctl import report, summary
from gpuctl.cli import OK, add_format_arguments, console, load_plan, observed_nodes, output_format_of
from gpuctl.diff import diff_plans, refuse_driver_removal


def run(args: argparse.Namespace) -> int:
    old, new = load_plan(args.old), load_plan(args.new)
    diff = diff_plans(old, new)
    refuse_driver_removal(diff, new, observed_nodes(args.observed_nodes) or [])
    review = report.Review(new.get("stack", ""), str(args.old), diff,
                           summary.summarize(old, new, diff, offline=args.observed_nodes is None), command="diff")
    output_format = output_format_of(args)
    if output_format == "json":
        print(json.dumps(report.to_json(review), indent=2))
    elif output_format == "markdown":
        print(report.to_markdown(review), end="")
    else:
        report.print_diff(diff, console()) if args.diff_only else report.print_text(review, console())
    return OK


def register(commands) -> None:
    parser = commands.add_parser("diff", help="what would change between two rendered plans")
    parser.add_argument("old", metavar="OLD_DIR")
    parser.add_argument("new", metavar="NEW_DIR")
    add_format_arguments(parser)
    parser.add_argument("--diff-only", action="store_true", help="text: the resource diff without the fleet summary")
    parser.add_argument("--observed-nodes", help="refuse to delete the driver of a kernel these nodes still run")
    parser.set_defaults(run=run)
