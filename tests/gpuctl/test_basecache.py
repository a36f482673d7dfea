"""The base plan cache: keyed by what a render reads, trusted only when an entry proves this user's gpuctl wrote
it, and read as untrusted input (a regular file of bounded size, never through a link)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
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


def forged(entry: Path, content: bytes, secret: bytes) -> None:
    """Write `content` into `entry` with a header that checks out under `secret`."""
    key_ = entry.stem
    seal = hmac.new(secret, f"{basecache.FORMAT}\0{key_}\0".encode() + content, hashlib.sha256).hexdigest()
    entry.write_bytes(json.dumps({"format": basecache.FORMAT, "key": key_, "hmac": seal}).encode() + b"\n" + content)


def test_an_entry_edited_with_its_seal_recomputed_without_the_users_secret_is_not_trusted(tmp_path: Path) -> None:
    """Who can write the folder but not read the secret cannot make a preview hide a change."""
    entry = store(tmp_path, key(), PLAN)
    edited = json.dumps({**PLAN, "outputs": {"kernels": ["ubuntu22.04/6.9"]}}).encode()

    forged(entry, edited, os.urandom(basecache.SECRET_BYTES))
    assert basecache.read(key()) is None
    forged(entry, edited, (basecache.folder() / basecache.SECRET).read_bytes())  # the secret itself proves it
    assert basecache.read(key())["outputs"]["kernels"] == ["ubuntu22.04/6.9"]


def test_the_secret_is_made_once_readable_by_this_user_only(tmp_path: Path) -> None:
    store(tmp_path, key(), PLAN)
    secret = basecache.folder() / basecache.SECRET
    first = secret.read_bytes()
    store(tmp_path, key(stack="dev"), PLAN)

    assert secret.stat().st_mode & 0o777 == 0o600 and secret.read_bytes() == first and len(first) == 32


@pytest.mark.parametrize("weakness", ["readable by others", "a link", "another user's"])
def test_a_secret_others_could_know_or_set_keeps_the_cache_unused(tmp_path: Path, weakness: str) -> None:
    store(tmp_path, key(), PLAN)
    secret = basecache.folder() / basecache.SECRET
    if weakness == "readable by others":
        secret.chmod(0o644)
    elif weakness == "a link":
        (tmp_path / "elsewhere").write_bytes(secret.read_bytes())
        secret.unlink()
        secret.symlink_to(tmp_path / "elsewhere")
    else:
        if os.getuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(secret, 65534, 65534)

    assert basecache.read(key()) is None
    store(tmp_path, key(stack="dev"), PLAN)  # nor is it written over: it is not this user's to replace
    assert basecache.read(key(stack="dev")) is None


@pytest.mark.parametrize("kind", ["named pipe", "link to /dev/zero", "link to a good entry", "folder", "too large"])
def test_an_entry_that_is_not_a_regular_file_is_ignored_at_once(tmp_path: Path, monkeypatch, kind: str) -> None:
    """A pipe with no writer would block the preview, /dev/zero would fill memory: neither is read."""
    entry = store(tmp_path, key(), PLAN)
    if kind == "named pipe":
        entry.unlink()
        os.mkfifo(entry)
    elif kind == "link to /dev/zero":
        entry.unlink()
        entry.symlink_to("/dev/zero")
    elif kind == "link to a good entry":
        entry.rename(tmp_path / "good.json")
        entry.symlink_to(tmp_path / "good.json")
    elif kind == "folder":
        entry.unlink()
        entry.mkdir()
    else:
        monkeypatch.setattr(basecache, "MAX_INPUT_BYTES", len(entry.read_bytes()) - 1)

    result: list = []
    reader = threading.Thread(target=lambda: result.append(basecache.read(key())), daemon=True)
    reader.start()
    reader.join(timeout=10)

    assert result == [None], "the read blocked or returned a plan"


def test_a_relative_cache_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """GPUCTL_CACHE_DIR=rel-cache would write into the folder gpuctl runs in: the checkout."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    before = set(ROOT.iterdir())
    result = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "onprem", "--base", "HEAD",
                             "--offline"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "GPUCTL_CACHE_DIR": "rel-cache"})

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: GPUCTL_CACHE_DIR rel-cache: is a relative path")
    assert set(ROOT.iterdir()) == before


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path: Path) -> None:
    """As the XDG Base Directory specification says of a relative path."""
    monkeypatch.delenv("GPUCTL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "rel-cache")
    assert basecache.folder() == Path.home() / ".cache" / "gpuctl" / "base-plans"
