"""A cache of base-revision plans for `gpuctl preview --base`, keyed by the content of what a render reads.

The folder is the user's cache folder ($GPUCTL_CACHE_DIR, else $XDG_CACHE_HOME/gpuctl, else ~/.cache/gpuctl),
not the repository: an entry is keyed by git object ids, so it holds for every clone of the project, and the
folder can be deleted at any time (the next preview renders the base again).

An entry is untrusted input until it proves that this user's gpuctl wrote it: it carries an HMAC-SHA256 of its
key and content under a secret (`.key`, 32 random bytes) that gpuctl creates in the folder, readable by this user
only. An entry is read only as a regular file of bounded size, never through a link; one whose HMAC does not
check out, or a secret that is not this user's own and private, is ignored (the base renders again).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from gpuctl.cli import PULL_SECRET_ENV, RenderedPlan
from gpuctl.inputs import MAX_INPUT_BYTES
from stacks.config import ConfigError

FORMAT = "gpuctl-base-plan/2"
SECRET = ".key"
SECRET_BYTES = 32
# What no render reads: a change to these alone keeps the entry.
UNREAD = frozenset({".ci", ".github", "docs", "e2e", "tests"})


def folder() -> Path:
    """Where entries live: $GPUCTL_CACHE_DIR, else the user's cache folder (XDG: a relative $XDG_CACHE_HOME is
    ignored)."""
    if os.environ.get("GPUCTL_CACHE_DIR"):
        return Path(os.environ["GPUCTL_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "gpuctl" / "base-plans"


def check_folder() -> None:
    """Refuse a relative $GPUCTL_CACHE_DIR: it names a folder inside whatever folder gpuctl runs in, the checkout."""
    value = os.environ.get("GPUCTL_CACHE_DIR", "")
    if value and not os.path.isabs(value):
        raise ConfigError(f"GPUCTL_CACHE_DIR {value}: is a relative path, which would put the cache in the folder "
                          "gpuctl runs in (the checkout); set an absolute path, or pass --no-cache")


def read_by_render(name: str, stack: str) -> bool:
    """Whether a render of `stack` reads the checkout's top-level entry `name`: not docs, tests or CI files, top-level
    Markdown, or other stacks' files."""
    return not (name in UNREAD or name.endswith(".md") or (name.startswith("Pulumi.") and name.endswith(".yaml")
                                                           and name not in ("Pulumi.yaml", f"Pulumi.{stack}.yaml")))


def key(tree_entries: str, stack: str, observed: bytes | None, stack_file: str | None = None) -> str:
    """The entry's key: the base tree's entries a render reads (git object ids: content hashes, so the stack file,
    the code and the lock file are all in them), the stack and its file's path (`--config-file`), the node
    inventory, and what this interpreter brings (its version and every installed distribution: the base renders
    with this environment's packages)."""
    digest = hashlib.sha256(FORMAT.encode())
    for line in sorted(tree_entries.splitlines()):
        name = line.split("\t", 1)[-1]
        if not read_by_render(name, stack):
            continue
        digest.update(line.encode() + b"\n")
    digest.update(f"\0stack={stack}\0file={stack_file}\0python={sys.version}\0".encode())
    digest.update(hashlib.sha256(observed).digest() if observed is not None else b"no inventory")
    digest.update(hashlib.sha256(os.environ.get(PULL_SECRET_ENV, "").strip().encode()).digest())
    # Each distribution's metadata parsed once (`dist.version` would parse it again).
    for name, version in sorted({(meta["Name"] or "", meta["Version"] or "")
                                 for meta in (dist.metadata for dist in metadata.distributions())}):
        digest.update(f"\0{name}=={version}".encode())
    return digest.hexdigest()


def _regular(path: Path, limit: int) -> tuple[bytes, os.stat_result] | None:
    """The content of `path` if it is a regular file (not a link, pipe or device) of at most `limit` bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # missing, unreadable, or a link (ELOOP)
        return None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode) or status.st_size > limit:
        os.close(descriptor)
        return None
    with os.fdopen(descriptor, "rb") as file:
        try:
            data = file.read(limit + 1)
        except OSError:
            return None
    return (data, status) if len(data) <= limit else None


def _secret(create: bool) -> bytes | None:
    """This user's secret for the folder, made on first use; None when it is missing, or is not this user's own
    file readable by no one else (then it proves nothing, and the cache is not used)."""
    path = folder() / SECRET
    if create and not os.path.lexists(path):
        try:
            folder().mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor, staged = tempfile.mkstemp(prefix=".key-", dir=folder())  # mode 0600
            try:
                with os.fdopen(descriptor, "wb") as file:
                    file.write(secrets.token_bytes(SECRET_BYTES))
                os.link(staged, path)  # all at once, and never over another process's secret
            finally:
                os.unlink(staged)
        except OSError:
            pass
    found = _regular(path, SECRET_BYTES)
    if found is None:
        return None
    data, status = found
    if len(data) != SECRET_BYTES or status.st_uid != os.getuid() or status.st_mode & 0o077:
        return None
    return data


def _seal(secret: bytes, entry_key: str) -> hmac.HMAC:
    """The HMAC of an entry's content, begun with its format and key."""
    return hmac.new(secret, f"{FORMAT}\0{entry_key}\0".encode(), hashlib.sha256)


def read(entry_key: str) -> dict[str, Any] | None:
    """The plan stored under `entry_key`, or None when there is none or it does not prove where it came from."""
    secret = _secret(create=False)
    found = _regular(folder() / f"{entry_key}.json", MAX_INPUT_BYTES) if secret else None
    if found is None:
        return None
    try:
        header, content = found[0].split(b"\n", 1)
        seal = _seal(secret, entry_key)
        seal.update(content)
        if json.loads(header) != {"format": FORMAT, "key": entry_key, "hmac": seal.hexdigest()}:
            return None
        # A fleet's plan is tens of MB: orjson reads it a fifth faster than the standard library (an integer past 64
        # bits, which it refuses, renders the base again).
        plan = orjson.loads(content)
        RenderedPlan.model_validate(plan)
        return plan
    except (ValueError, RecursionError):  # truncated, or not the shape of a plan: render again
        return None


def write(entry_key: str, plan_json: Path) -> None:
    """Store the plan.json at `plan_json` under `entry_key`, all at once; a cache that cannot be written is
    skipped (the preview does not need it)."""
    try:
        secret = _secret(create=True)
        if secret is None:
            return
        with open(plan_json, "rb") as plan:
            seal = hashlib.file_digest(plan, lambda: _seal(secret, entry_key))
        header = json.dumps({"format": FORMAT, "key": entry_key, "hmac": seal.hexdigest()})
        descriptor, staged = tempfile.mkstemp(prefix=".entry-", dir=folder())
        try:
            with os.fdopen(descriptor, "wb") as entry, open(plan_json, "rb") as plan:
                entry.write(header.encode() + b"\n")
                shutil.copyfileobj(plan, entry)
            os.replace(staged, folder() / f"{entry_key}.json")
        finally:
            if os.path.exists(staged):
                os.unlink(staged)
    except OSError:
        pass
