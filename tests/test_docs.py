"""Every command in README.md and docs/*.md runs as written, and every example parses.

The fenced code blocks are read with markdown-it, so a new page needs no change here. The convention
(docs/README.md): a ```sh block is run, each command must exit 0 or the code its trailing `# exit N` names;
a command that .ci/run runs (make test, make e2e) is CI's own, and is checked to be there rather than run again
(running it here would run this test inside itself). A ```text output block shows what the sh block before it
prints: its lines must appear in that output, in order ("..." for lines left out). ```text, ```mermaid and
```markdown blocks are not run;
```json blocks must parse; ```yaml blocks must parse, and one with a top-level `config:` is a stack file that
must pass stacks/config/ as `gpuctl render` reads it.

Each page's sh blocks run in order, as a reader follows the page, in the page's own copy of the checkout (its
tracked and untracked files, mtimes kept, with this checkout's .venv and the copy's own code first on the path),
committed in a fresh git repository whose `origin/main` is that commit: an edit a block makes to a stack file
never reaches the checkout, and `--base origin/main` compares with the checkout as it is. The venv is not on
PATH, as for a newcomer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

from gpuctl.stackfile import load_stack_file
from stacks.config import PROJECT, ConfigError, parse_stack_config
from tests.conftest import ROOT

RUN, NOT_RUN = "sh", {"text", "mermaid", "markdown", "json", "yaml"}
OUTPUT = "text output"  # what the sh block before it prints, "..." for lines left out
TIMEOUT = 300  # seconds a block may take
EXPECTED = re.compile(r"#\s*exit\s+(\d+)\s*$")
HEREDOC = re.compile(r"<<-?\s*'?([A-Za-z_]+)'?")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks() -> list[Block]:
    found = []
    for page in pages():
        for token in MarkdownIt().parse(page.read_text()):
            if token.type == "fence":
                found.append(Block(str(page.relative_to(ROOT)), token.map[0] + 1, token.info.strip(), token.content))
    return found


def commands(script: str) -> list[tuple[str, int]]:
    """A block's commands (continued lines and here-documents joined) with the exit code each must give."""
    result, lines = [], script.splitlines()
    while lines:
        command = lines.pop(0)
        if not command.strip() or command.lstrip().startswith("#"):
            continue
        while command.endswith("\\") and lines:
            command += "\n" + lines.pop(0)
        last = command.splitlines()[-1]  # where a `# exit N` stands: after the command, before any here-document
        if heredoc := HEREDOC.search(command):
            while lines and (command := command + "\n" + lines.pop(0)).splitlines()[-1] != heredoc[1]:
                pass
        expected = EXPECTED.search(last)
        result.append((command, int(expected[1]) if expected else 0))
    return result


def ci_commands() -> set[str]:
    """What .ci/run runs (make test, make e2e): CI runs these on every change."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return {line.strip() for line in lines if line.strip().startswith("make ")}


def bare(command: str) -> str:
    return command.split("#", 1)[0].strip()


ALL = blocks()
SH = [block for block in ALL if block.lang == RUN]


def test_every_block_says_whether_it_runs() -> None:
    unlabelled = [f"{block.id} ```{block.lang}" for block in ALL if block.lang not in {RUN, OUTPUT, *NOT_RUN}]
    assert not unlabelled, f"label each block sh (run by this test) or one of {sorted(NOT_RUN)}: {unlabelled}"


def test_pages_link_every_page() -> None:
    """Each page under docs/ is reachable from the README or docs/README.md."""
    index = (ROOT / "README.md").read_text() + (ROOT / "docs" / "README.md").read_text()
    missing = [page.name for page in (ROOT / "docs").glob("*.md")
               if page.name != "README.md" and f"{page.name})" not in index]
    assert not missing, f"link these pages from docs/README.md: {missing}"


def test_readme_reads_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail to a page under docs/"
    long = [number for number, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, f"README.md lines over 120 characters: {long}"


def test_commands_ci_runs_are_in_ci() -> None:
    """The make targets the docs give as CI's are the ones .ci/run runs: CI runs them, not this test."""
    documented = {bare(command) for block in SH for command, _ in commands(block.text)}
    ci = ci_commands()
    assert ci <= documented, f"document what CI runs in a ```sh block: {sorted(ci - documented)}"


@pytest.mark.parametrize("block", [block for block in ALL if block.lang == "json"], ids=lambda block: block.id)
def test_json_example_parses(block: Block) -> None:
    json.loads(block.text)


def validate_stack_file(text: str, folder: Path) -> None:
    """A stack-file example (top-level `config:`) through the reader and validator `gpuctl render` uses."""
    path = folder / "Pulumi.example.yaml"
    path.write_text(text)
    config = load_stack_file(path).config
    parse_stack_config({key.removeprefix(f"{PROJECT}:"): value for key, value in config.items()
                        if key.startswith(f"{PROJECT}:")})


@pytest.mark.parametrize("block", [block for block in ALL if block.lang == "yaml"], ids=lambda block: block.id)
def test_yaml_example_parses_and_stack_files_validate(block: Block, tmp_path: Path) -> None:
    document = yaml.safe_load(block.text)
    if isinstance(document, dict) and "config" in document:
        validate_stack_file(block.text, tmp_path)


def test_a_stack_file_example_missing_a_required_field_fails(tmp_path: Path) -> None:
    """The check above can fail: a profile without reservedCpus (required) is refused, naming it."""
    example = next(block.text for block in ALL if block.lang == "yaml" and block.text.startswith("config:"))
    broken = example.replace("      image: ami-0a6c2d1e5f3b7c9d1\n",
                             "      image: ami-0a6c2d1e5f3b7c9d1\n      profile: {hugepages: {1Gi: 1}}\n")
    assert broken != example
    with pytest.raises(ConfigError, match=r"nodePools\[0\]\.profile\.reservedCpus: is required"):
        validate_stack_file(broken, tmp_path)


def test_commands_join_continuations_and_here_documents() -> None:
    script = "# a comment\ncat > a.json <<'EOF'\n{\"a\": 1}\nEOF\nls \\\n  -l   # exit 2\n\ntrue\n"
    assert commands(script) == [("cat > a.json <<'EOF'\n{\"a\": 1}\nEOF", 0), ("ls \\\n  -l   # exit 2", 2),
                                ("true", 0)]


@pytest.mark.parametrize(("text", "code"), [("true\nfalse\ntrue\n", 99), ("false   # exit 1\ntrue\n", 0),
                                            ("true   # exit 1\n", 99), ("make test\n", 0)])
def test_a_command_that_exits_otherwise_than_documented_fails_its_block(text: str, code: int) -> None:
    """Each command's code is checked, not only the last one's; a command CI runs is left to CI."""
    script = script_of(Block("docs/example.md", 1, RUN, text))
    assert subprocess.run(["bash", "-c", script], capture_output=True).returncode == code


@pytest.fixture(scope="module")
def checkout_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


def copy_of_checkout(files: list[str], into: Path) -> Path:
    for name in files:
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, into / name)  # mtimes kept: make sees the shared .venv up to date
    git = ["git", "-c", "user.name=docs", "-c", "user.email=docs@example.invalid", "-c", "init.defaultBranch=main",
           "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "the checkout"],
                 ["update-ref", "refs/remotes/origin/main", "HEAD"]):
        subprocess.run([*git, *args], cwd=into, check=True, capture_output=True)
    (into / ".venv").symlink_to(ROOT / ".venv")  # after the commit: the venv is not part of the checkout
    return into


def newcomer_env(copy: Path) -> dict[str, str]:
    venv_bin = str(Path(sys.prefix) / "bin")
    path = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry != venv_bin]
    env = {key: value for key, value in os.environ.items() if key not in {"VIRTUAL_ENV", "PYTHONPATH", "MAKEFLAGS",
                                                                          "MAKELEVEL", "MFLAGS"}}
    return {**env, "PATH": os.pathsep.join(path), "PYTHONPATH": str(copy), "NO_COLOR": "1", "TERM": "dumb"}


def script_of(block: Block) -> str:
    """The block as a bash script that stops at the first command whose exit code is not the expected one."""
    ci, steps = ci_commands(), []
    for command, expected in commands(block.text):
        if bare(command) in ci:
            continue
        shown = command.splitlines()[0].replace("'", "'\\''")
        steps.append(f"{command}\nrc=$?; if [ $rc -ne {expected} ]; then "
                     f"echo '{block.id}: `{shown}` exited '$rc', expected {expected}' >&2; exit 99; fi")
    return "set -o pipefail\n" + "\n".join(steps) + "\n"


def outputs_after(block: Block) -> list[Block]:
    """The `text output` blocks that follow a sh block on its page, up to the next sh block."""
    page = [other for other in ALL if other.page == block.page and other.line > block.line]
    shown = []
    for other in page:
        if other.lang == RUN:
            break
        if other.lang == OUTPUT:
            shown.append(other)
    return shown


def missing_lines(example: str, printed: str) -> list[str]:
    """The example's lines ("..." skips any) that the output does not print, in this order."""
    printed_lines, at, missing = [line.rstrip() for line in printed.splitlines()], 0, []
    for line in (line.rstrip() for line in example.splitlines()):
        if line == "...":
            continue
        try:
            at = printed_lines.index(line, at) + 1
        except ValueError:
            missing.append(line)
    return missing


def test_output_examples_are_compared_in_order() -> None:
    assert missing_lines("a\n...\nc\n", "a\nb\nc\n") == []
    assert missing_lines("c\n...\na\n", "a\nb\nc\n") == ["a"]
    assert missing_lines("a\nx\n", "a\nb\n") == ["x"]


@pytest.mark.parametrize("page", sorted({block.page for block in SH}))
def test_commands_run_as_documented(page: str, checkout_files: list[str], tmp_path: Path) -> None:
    """A page's sh blocks run in order in one copy, as a reader follows the page: a block may use what an earlier
    one made (a render) or changed (a stack file)."""
    copy = copy_of_checkout(checkout_files, tmp_path / "checkout")
    env = newcomer_env(copy)
    stale = subprocess.run(["make", "-q", ".venv/bin/pytest"], cwd=copy, capture_output=True, env=env)
    assert stale.returncode == 0, "the .venv is older than requirements.lock or pyproject.toml: run make setup"
    for block in (block for block in SH if block.page == page):
        try:
            result = subprocess.run(["bash", "-c", script_of(block)], cwd=copy, env=env, capture_output=True,
                                    text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{block.id}: still running after {TIMEOUT} s")
        assert result.returncode == 0, f"{result.stderr[-3000:]}\n--- stdout ---\n{result.stdout[-3000:]}"
        for example in outputs_after(block):
            missing = missing_lines(example.text, result.stdout)
            assert not missing, f"{example.id}: {block.id} no longer prints {missing[:3]}; update the example"
