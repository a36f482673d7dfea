"""The one way gpuctl reads a file the user names: a regular file only, bounded in size, as UTF-8 text."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from stacks.config import ConfigError

# Stack files, node lists, policy configs and rendered plans of 10,000 resources stay well below this.
MAX_INPUT_BYTES = 256 << 20
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def read_input(path: Path, where: str, fix: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of the regular file at `path`, or a ConfigError line `<where>: <problem>; <fix>`.

    A named pipe or a device is refused before anything is read from it (a pipe with no writer would block, and
    /dev/zero never ends), and a file over `limit` bytes is refused after reading one byte past the limit.
    """
    try:
        # O_NONBLOCK: opening a named pipe with no writer returns at once instead of waiting for one.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file; {fix}") from None
    except OSError as error:
        raise ConfigError(f"{where}: {error.strerror or 'cannot be opened'}; {fix}") from None
    # Checked on the descriptor before it becomes a file object: os.fdopen refuses a folder with its own error.
    mode = os.fstat(descriptor).st_mode
    kind = next((name for test, name in _KINDS if test(mode)), None)
    if kind or not stat.S_ISREG(mode):
        os.close(descriptor)
        raise ConfigError(f"{where}: is {kind or 'not a regular file'}, not a regular file; {fix}")
    with os.fdopen(descriptor, "rb") as file:
        try:
            data = file.read(limit + 1)
        except OSError as error:
            raise ConfigError(f"{where}: {error.strerror or 'cannot be read'}; {fix}") from None
    if len(data) > limit:
        raise ConfigError(f"{where}: larger than {limit >> 20} MiB; {fix}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{where}: byte {error.start} is not UTF-8 text; {fix}") from None
