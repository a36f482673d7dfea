"""Every shipped stack and example renders byte for byte as recorded: a digest of its manifests and plan.json.

A refactoring must leave every render as it was. When a render changes on purpose, record the new digests with
`.venv/bin/python -m tests.test_render_digests` and commit tests/render_digests.json with the change, so the review
sees which stacks it changes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from gpuctl.render import render_plan, write_render
from gpuctl.stackfile import load_stack_file
from tests.conftest import ROOT

RECORDED = Path(__file__).with_name("render_digests.json")
STACK_FILES = sorted([*ROOT.glob("Pulumi.*.yaml"), *(ROOT / "examples").glob("Pulumi.*.yaml")])
UPDATE = "if the change is on purpose, run `.venv/bin/python -m tests.test_render_digests` and commit the digests"


def render_digest(stack_file: Path, into: Path) -> str:
    """sha256 over the render `gpuctl render --config-file` writes: each file's path and bytes, sorted by path."""
    write_render(render_plan(load_stack_file(stack_file)), into)
    digest = hashlib.sha256()
    for path in sorted(p for p in into.rglob("*") if p.is_file() and (p.name == "plan.json" or p.suffix == ".yaml")):
        digest.update(f"{path.relative_to(into).as_posix()}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def key(stack_file: Path) -> str:
    return stack_file.relative_to(ROOT).as_posix()


def test_every_stack_file_has_a_recorded_digest() -> None:
    assert sorted(json.loads(RECORDED.read_text())) == [key(path) for path in STACK_FILES], UPDATE


@pytest.mark.parametrize("stack_file", STACK_FILES, ids=key)
def test_the_render_is_as_recorded(stack_file: Path, tmp_path: Path) -> None:
    recorded = json.loads(RECORDED.read_text()).get(key(stack_file))
    assert render_digest(stack_file, tmp_path / "render") == recorded, f"{key(stack_file)} renders differently; {UPDATE}"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        digests = {key(path): render_digest(path, Path(scratch) / path.stem) for path in STACK_FILES}
    RECORDED.write_text(json.dumps(digests, indent=2, sort_keys=True) + "\n")
    print(f"recorded {len(digests)} digests in {RECORDED.relative_to(ROOT)}", file=sys.stderr)
