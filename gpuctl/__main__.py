"""gpuctl: render, check and diff the GPU platform offline (no Pulumi CLI, credentials or cluster)."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from gpuctl import __version__, interrupts, standby


def main(argv: list[str] | None = None) -> int:
    # First, before the commands load (a second or more): a signal during the imports ends the run as one later.
    interrupts.install()
    try:
        if argv is None:  # the command line's run, not a caller's in this process
            standby.start(sys.argv[1:])
        try:
            parser = _parser()
        except BaseException:
            if interrupts.received() is None:
                raise
            return interrupts.exit_code()
        return _run(parser, argv)
    finally:
        standby.stop()
        interrupts.settle()


def _parser() -> Any:
    """The command line, with every subcommand loaded."""
    from gpuctl import check, diff_command, preview, render
    from gpuctl.cli import Parser, add_epilogs

    parser = Parser(prog="gpuctl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpuctl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in (render, check, diff_command, preview):
        command.register(commands)
    add_epilogs(commands)
    return parser


def _run(parser: Any, argv: list[str] | None) -> int:
    from gpuctl.cli import BAD_INPUT, refuse_another_checkout
    from stacks.config import ConfigError, capped

    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help and --version print, then exit
            code = done.code if isinstance(done.code, int) else 0
        else:
            refuse_another_checkout()
            code = args.run(args)
        sys.stdout.flush()  # an output that cannot take the report fails here, not after a success code
    except ConfigError as error:
        print(f"error: {capped(printable(str(error)))}", file=sys.stderr)
        code = BAD_INPUT
    except OutputError as error:
        print(f"error: {error}", file=sys.stderr)
        code = BAD_INPUT
    except (RecursionError, MemoryError):
        if interrupts.received() is None:
            print("error: an input is nested too deeply or too large to read; write it with fewer levels or less "
                  "data", file=sys.stderr)
        code = BAD_INPUT
    except BaseException:
        if interrupts.received() is None:
            raise
    return interrupts.exit_code() if interrupts.received() is not None else code


def printable(message: str) -> str:
    """The message on one line: control characters from the input (a key named "\\r") shown escaped."""
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode() for char in message)


def one_shot_collector() -> None:
    """No cycle collection for a one-shot run: the imports are frozen out of it and it is switched off.

    A render builds objects that live until it exits, and the collector kept walking them: at 10,000 resources
    it took a quarter of the run even with raised thresholds (40 s, of which 10 s collecting). Off, the run
    keeps its cyclic garbage: peak RSS 927 -> 1,104 MB at 10,000 resources.
    """
    gc.freeze()
    gc.disable()


class OutputError(Exception):
    """Standard output cannot take what gpuctl writes (closed, or its disk is full)."""


class _Stdout:
    """sys.stdout, whose failures other than a closed pipe become one OutputError line instead of a traceback."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guard(lambda stream: stream.write(text))

    def flush(self) -> None:
        self._guard(lambda stream: stream.flush())

    def _guard(self, use: Callable[[TextIO], Any]) -> Any:
        if self._stream is None:
            raise OutputError("standard output is closed; run gpuctl with its output open (a file or a pipe)")
        try:
            return use(self._stream)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(f"standard output: {error.strerror or 'cannot be written'}; free space where it goes "
                              "or send it elsewhere (nothing was written)") from None

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def guard_stdout() -> None:
    """Route sys.stdout through _Stdout; a closed descriptor 1 is held by /dev/null so no file opened later takes
    it (what gpuctl prints must never land in a file it writes)."""
    stream = sys.stdout
    if stream is None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = _Stdout(stream)  # type: ignore[assignment]


def run() -> None:
    """The `gpuctl` console command (and `python -m gpuctl`)."""
    one_shot_collector()
    guard_stdout()
    try:
        code = main()
    except BrokenPipeError:
        # The reader went away (`gpuctl diff ... | head`): stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        code = 141  # 128 + SIGPIPE, what a shell reports for such a pipe
    # Everything is said: threads the run abandoned (a stalled registry or cluster read, a runtime interrupted
    # mid-wait) must not hold the exit, so the process ends here rather than waiting for them.
    _flush_quietly()
    os._exit(code)


def _flush_quietly() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, OutputError, ValueError):
            pass


if __name__ == "__main__":
    run()
