"""gpuctl: render, check and diff the GPU platform offline (no Pulumi CLI, credentials or cluster)."""

from __future__ import annotations

import gc
import sys

from gpuctl import check, diff, preview, render
from gpuctl.cli import BAD_INPUT, Parser
from stacks.config import ConfigError

COMMANDS = [render, check, diff, preview]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="gpuctl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.register(commands)
    try:
        args = parser.parse_args(argv)
        return args.run(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT


if __name__ == "__main__":
    # A one-shot run builds many long-lived objects and frees little: keep the collector off the imported
    # modules and let it run rarely (a 2,177-resource render: 9.2 s -> 6.2 s, peak RSS 231 -> 233 MB).
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    sys.exit(main())
