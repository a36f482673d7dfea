"""The one way gpuctl writes a file the user names: a new file, or one an earlier run of the same option wrote;
never a file gpuctl did not make (a stack file, a plan, anything git tracks), a link, a pipe or a device."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from gpuctl.inputs import read_input
from stacks.config import ConfigError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a link"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def check_output_file(path: Path, where: str, ours: Callable[[str], bool], fix: str) -> Path:
    """`path` made absolute when gpuctl may write it, else a ConfigError line `<where>: <problem>; <fix>`.

    `ours(text)` says whether an existing file's text is what this option writes (then it may be replaced).
    """
    target = Path(os.path.abspath(path))
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise ConfigError(f"{where}: {error.strerror or 'cannot be read'}; {fix}") from None
    if mode is not None:
        kind = next((name for test, name in _KINDS if test(mode)), None)
        if kind or not stat.S_ISREG(mode):
            raise ConfigError(f"{where}: is {kind or 'not a regular file'}, refusing to write there; {fix}")
        if _tracked(target):
            raise ConfigError(f"{where}: is a file git tracks, refusing to replace it; {fix}")
        try:
            made_here = ours(read_input(target, where, fix))
        except ConfigError:
            made_here = False
        if not made_here:
            raise ConfigError(f"{where}: holds a file gpuctl did not write, refusing to replace it; {fix}")
    if not target.parent.is_dir() or not os.access(target.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: its folder does not exist or is not writable; {fix}")
    return target


def write_output_file(path: Path, text: str, where: str, ours: Callable[[str], bool], fix: str) -> None:
    """Write `text` to `path` as a whole (a new file renamed into place), once `check_output_file` allows it."""
    target = check_output_file(path, where, ours, fix)
    try:
        descriptor, staged = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as error:
        raise ConfigError(f"{where}: {error.strerror or 'cannot be written'}; {fix}") from None
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
        os.chmod(staged, 0o666 & ~_umask())
        os.replace(staged, target)
    except OSError as error:
        raise ConfigError(f"{where}: {error.strerror or 'cannot be written'}; {fix}") from None
    finally:
        if os.path.exists(staged):
            os.unlink(staged)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tracked(path: Path) -> bool:
    """Whether the git checkout holding `path` (if any) tracks it."""
    try:
        found = subprocess.run(["git", "ls-files", "--error-unmatch", "--", path.name], cwd=path.parent,
                               capture_output=True)
    except OSError:  # no git: nothing is tracked
        return False
    return found.returncode == 0
