"""A cache of base-revision plans for `gpuctl preview --base`, keyed by the content of what a render reads.

The folder is the user's cache folder ($GPUCTL_CACHE_DIR, else $XDG_CACHE_HOME/gpuctl, else ~/.cache/gpuctl),
not the repository: an entry is keyed by git object ids, so it holds for every clone of the project, and the
folder can be deleted at any time (the next preview renders the base again). An entry is trusted only when its
key and the SHA-256 of its content match; anything else is ignored and replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from gpuctl.cli import PULL_SECRET_ENV, RenderedPlan

FORMAT = "gpuctl-base-plan/1"
# What no render reads: a change to these alone keeps the entry.
UNREAD = frozenset({".ci", ".github", "docs", "e2e", "tests"})


def folder() -> Path:
    """Where entries live: $GPUCTL_CACHE_DIR, else the user's cache folder (XDG)."""
    if os.environ.get("GPUCTL_CACHE_DIR"):
        return Path(os.environ["GPUCTL_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuctl" / "base-plans"


def key(tree_entries: str, stack: str, observed: bytes | None) -> str:
    """The entry's key: the base tree's entries a render reads (git object ids: content hashes, so the stack file,
    the code and the lock file are all in them), the stack, the node inventory, and what this interpreter brings
    (its version and every installed distribution: the base renders with this environment's packages)."""
    digest = hashlib.sha256(FORMAT.encode())
    for line in sorted(tree_entries.splitlines()):
        name = line.split("\t", 1)[-1]
        if name in UNREAD or name.endswith(".md") or (name.startswith("Pulumi.") and name.endswith(".yaml")
                                                      and name not in ("Pulumi.yaml", f"Pulumi.{stack}.yaml")):
            continue
        digest.update(line.encode() + b"\n")
    digest.update(f"\0stack={stack}\0python={sys.version}\0".encode())
    digest.update(hashlib.sha256(observed).digest() if observed is not None else b"no inventory")
    digest.update(hashlib.sha256(os.environ.get(PULL_SECRET_ENV, "").strip().encode()).digest())
    for name, version in sorted({(dist.metadata["Name"] or "", dist.version) for dist in metadata.distributions()}):
        digest.update(f"\0{name}=={version}".encode())
    return digest.hexdigest()


def read(entry_key: str) -> dict[str, Any] | None:
    """The plan stored under `entry_key`, or None when there is none or it does not check out."""
    try:
        with open(folder() / f"{entry_key}.json", "rb") as entry:
            header = json.loads(entry.readline())
            content = entry.read()
        if header != {"format": FORMAT, "key": entry_key, "sha256": hashlib.sha256(content).hexdigest()}:
            return None
        plan = json.loads(content)
        RenderedPlan.model_validate(plan)
        return plan
    except (OSError, ValueError):  # missing, unreadable, truncated or not the shape of a plan: render again
        return None


def write(entry_key: str, plan_json: Path) -> None:
    """Store the plan.json at `plan_json` under `entry_key`, all at once; a cache that cannot be written is
    skipped (the preview does not need it)."""
    try:
        with open(plan_json, "rb") as plan:
            digest = hashlib.file_digest(plan, "sha256").hexdigest()
        header = json.dumps({"format": FORMAT, "key": entry_key, "sha256": digest})
        folder().mkdir(parents=True, exist_ok=True)
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
