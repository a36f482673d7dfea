"""The base plan cache: keyed by what a render reads, trusted only when an entry checks out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuctl import basecache

TREE = {  # `git ls-tree <commit>`: mode, type, object id (a hash of the content) and name
    "Pulumi.yaml": "100644 blob 1111111111111111111111111111111111111111",
    "Pulumi.prod.yaml": "100644 blob 2222222222222222222222222222222222222222",
    "Pulumi.dev.yaml": "100644 blob 3333333333333333333333333333333333333333",
    "requirements.lock": "100644 blob 4444444444444444444444444444444444444444",
    "components": "040000 tree 5555555555555555555555555555555555555555",
    "stacks": "040000 tree 6666666666666666666666666666666666666666",
    "docs": "040000 tree 7777777777777777777777777777777777777777",
    "tests": "040000 tree 8888888888888888888888888888888888888888",
    "README.md": "100644 blob 9999999999999999999999999999999999999999",
}
PLAN = {"project": "gpu-platform", "stack": "prod", "resources": [], "outputs": {"kernels": ["ubuntu22.04/6.8"]}}


def ls_tree(**changed: str) -> str:
    return "\n".join(f"{changed.get(name.replace('.', '_'), line)}\t{name}" for name, line in TREE.items())


def key(tree: str = "", stack: str = "prod", observed: bytes | None = None) -> str:
    return basecache.key(tree or ls_tree(), stack, observed)


@pytest.mark.parametrize("name", ["Pulumi_prod_yaml", "Pulumi_yaml", "requirements_lock", "components", "stacks"])
def test_a_change_to_what_the_render_reads_is_a_new_key(name: str) -> None:
    assert key(ls_tree(**{name: "100644 blob " + "a" * 40})) != key()


@pytest.mark.parametrize("name", ["Pulumi_dev_yaml", "docs", "tests", "README_md"])
def test_a_change_to_what_no_render_reads_keeps_the_key(name: str) -> None:
    assert key(ls_tree(**{name: "100644 blob " + "a" * 40})) == key()


def test_the_stack_and_the_node_inventory_are_part_of_the_key() -> None:
    assert len({key(), key(stack="dev"), key(observed=b"{}"), key(observed=b'{"items": []}')}) == 4


def store(tmp_path: Path, entry: str, plan: dict) -> Path:
    rendered = tmp_path / "plan.json"
    rendered.write_text(json.dumps(plan))
    basecache.write(entry, rendered)
    return basecache.folder() / f"{entry}.json"


def test_an_entry_is_read_back_only_under_its_own_key(tmp_path: Path) -> None:
    store(tmp_path, key(), PLAN)

    assert basecache.read(key()) == PLAN
    assert basecache.read(key(stack="dev")) is None


@pytest.mark.parametrize("damage", ["truncated", "edited", "moved", "not a plan", "not json"])
def test_a_damaged_entry_is_not_trusted(tmp_path: Path, damage: str) -> None:
    entry = store(tmp_path, key(), {"project": "gpu-platform"} if damage == "not a plan" else PLAN)
    header, content = entry.read_bytes().split(b"\n", 1)
    if damage == "truncated":
        entry.write_bytes(header + b"\n" + content[:-5])
    elif damage == "edited":
        entry.write_bytes(header + b"\n" + content.replace(b"6.8", b"6.9"))
    elif damage == "moved":  # a valid entry under another key's name
        entry.rename(entry.with_name(f"{key(stack='dev')}.json"))
        assert basecache.read(key(stack="dev")) is None
    elif damage == "not json":
        entry.write_bytes(b"\x00garbage\n" + content)

    assert basecache.read(key()) is None


def test_the_folder_is_the_users_cache_unless_set(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUCTL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert basecache.folder() == tmp_path / "gpuctl" / "base-plans"
    monkeypatch.setenv("GPUCTL_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert basecache.folder() == tmp_path / "elsewhere"


def test_a_cache_that_cannot_be_written_is_skipped(monkeypatch, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("GPUCTL_CACHE_DIR", str(tmp_path / "file" / "cache"))
    store(tmp_path, key(), PLAN)

    assert basecache.read(key()) is None
