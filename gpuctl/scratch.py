"""Scratch folders under the temporary folder ($TMPDIR): removed at the end whatever ends the run, and a temporary
folder that cannot hold them is bad input named in one line, not a traceback."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuctl import interrupts
from stacks.config import ConfigError

# What a full or read-only temporary folder raises.
FULL = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES}


def problem(error: OSError) -> ConfigError:
    """The one line for a temporary folder that refused a write."""
    return ConfigError(f"the temporary folder {tempfile.gettempdir()}: {error.strerror or 'cannot be written'}; "
                       "free space there, or set TMPDIR to a folder with room (a preview with --base writes the "
                       "base revision and its plan there)")


def full(text: str) -> bool:
    """Whether a child's error output says a write failed for want of space."""
    return any(os.strerror(code) in text for code in (errno.ENOSPC, errno.EDQUOT))


@contextmanager
def folder(prefix: str) -> Iterator[Path]:
    """A new folder under $TMPDIR, removed when the block ends (by the signal watchdog should the unwinding stall).

    A write under it that fails for want of space or permission inside the block is raised as a ConfigError.
    """
    try:
        path = Path(tempfile.mkdtemp(prefix=prefix))
    except OSError as error:
        raise problem(error) from None
    with interrupts.scratch(path):
        try:
            yield path
        except OSError as error:
            if error.errno not in FULL or (error.filename and not str(error.filename).startswith(str(path))):
                raise
            raise problem(error) from None
