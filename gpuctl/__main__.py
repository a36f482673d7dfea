"""gpuctl: render, check and diff the GPU platform offline (no Pulumi CLI, credentials or cluster)."""

from __future__ import annotations

import gc
import signal
import sys

from gpuctl import __version__, check, diff, preview, render
from gpuctl.cli import BAD_INPUT, Parser
from stacks.config import ConfigError

COMMANDS = [render, check, diff, preview]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="gpuctl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpuctl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.register(commands)
    # SIGTERM unwinds like Ctrl-C, so every temporary folder and git worktree is removed on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        args = parser.parse_args(argv)
        return args.run(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("error: interrupted; nothing was changed", file=sys.stderr)
        return 128 + signal.SIGINT


def run() -> None:
    """The `gpuctl` console command (and `python -m gpuctl`)."""
    # A one-shot run builds many long-lived objects and frees little: keep the collector off the imported
    # modules and let it run rarely (a 2,177-resource render: 9.2 s -> 6.2 s, peak RSS 231 -> 233 MB).
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    sys.exit(main())


if __name__ == "__main__":
    run()
