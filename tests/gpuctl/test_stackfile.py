"""Stack files read as the Pulumi CLI reads them (Go yaml.v3): numbers, dates, merge keys, aliases, `secure:` values,
and a --config-file that is no stack file; every refusal is one ConfigError line."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.stackfile import MAX_EXPANDED_VALUES, load_stack_file
from stacks.config import ConfigError
from tests.conftest import ROOT

SHIPPED = (ROOT / "Pulumi.dev.yaml").read_text()


def load_text(tmp_path: Path, text: str, **options: Any):
    path = tmp_path / "Pulumi.probe.yaml"
    path.write_text(text)
    return load_stack_file(path, "probe", **options)


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and message.startswith(str(tmp_path / "Pulumi.probe.yaml")), message
    return message


def probe(tmp_path: Path, scalar: str) -> Any:
    """What the program receives for `scalar` written unquoted inside a structured value."""
    return load_text(tmp_path, f"config:\n  gpu-platform:probe:\n    value: {scalar}\n").config[
        "gpu-platform:probe"]["value"]


# -- aliases --------------------------------------------------------------------------------------------------------


def billion_laughs(levels: int = 9) -> str:
    lines = ["config:", "  gpu-platform:cluster:", "    l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]" for level in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def run_gpuctl(*args: str) -> subprocess.CompletedProcess:
    """gpuctl in 1 GiB of memory: a stack file that expands without bound fails fast instead of taking the machine."""
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, preexec_fn=limit_memory)


def test_anchors_that_expand_to_billions_of_values_are_one_line_exit_2(tmp_path) -> None:
    stack = tmp_path / "Pulumi.laughs.yaml"
    stack.write_text(billion_laughs())
    out = tmp_path / "out"

    result = run_gpuctl("render", "--config-file", str(stack), "--offline", "--out", str(out))

    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == (f"error: {stack}: anchors/aliases expand to more than {MAX_EXPANDED_VALUES:,} values; "
                             "write the values out\n")
    assert result.stdout == "" and not out.exists()


def test_ordinary_anchors_and_aliases_still_load(tmp_path) -> None:
    shared = SHIPPED.replace("      instanceType: g4dn.xlarge\n", "      instanceType: &type g4dn.xlarge\n", 1)
    shared = shared.replace("      instanceType: p4d.24xlarge\n", "      instanceType: *type\n", 1)
    expected = SHIPPED.replace("instanceType: p4d.24xlarge", "instanceType: g4dn.xlarge", 1)

    assert load_text(tmp_path, shared).config == load_text(tmp_path, expected).config
    assert len(probe(tmp_path, "&row [a, b]\n    rows: [*row, *row]")) == 2


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path) -> None:
    message = refusal(tmp_path, "config:\n  gpu-platform:probe: &self [*self]\n")

    assert "alias" in message and "write the values out" in message


# -- numbers and dates as yaml.v3 reads them ------------------------------------------------------------------------


@pytest.mark.parametrize(("scalar", "expected"), [
    ("1:30", "1:30"),       # no base 60: text
    ("0o20", 16),           # YAML 1.2 octal
    ("0x1F", 31),
    ("+.5", 0.5),
    ("1e3", 1000),          # a float, written back out as 1000 by the CLI and so read as an int
    ("2.0", 2),
    ("2.5", 2.5),
    ("1e6", 1e6),           # written back out as 1e+06: stays a float
    ("1e400", "1e400"),     # out of float range: text
    ("010", 8),             # yaml.v3 keeps YAML 1.1 octal
    ("1_000", 1000),        # yaml.v3 drops underscores
    ("yes", "yes"),
    ("5.14.0-427", "5.14.0-427"),
])
def test_numbers_are_read_as_the_pulumi_cli_reads_them(tmp_path, scalar: str, expected: Any) -> None:
    value = probe(tmp_path, scalar)

    assert (value, type(value)) == (expected, type(expected))


def test_an_unquoted_date_is_refused_with_the_quoted_form(tmp_path) -> None:
    text = SHIPPED.replace("group: vision-team", "group: 2024-01-01", 1)
    line = text.splitlines().index("      group: 2024-01-01") + 1

    message = refusal(tmp_path, text)

    assert f"line {line}: " in message and "as a date" in message and 'quote it: "2024-01-01"' in message


@pytest.mark.parametrize("scalar", ['"2024-01-01"', "2024-13-01", "!!str 2024-01-01"])
def test_quoted_dates_and_impossible_dates_stay_text(tmp_path, scalar: str) -> None:
    assert probe(tmp_path, scalar) == scalar.removeprefix("!!str ").strip('"')


@pytest.mark.parametrize("tagged", ["!!binary aGVsbG8=", "!!set {a}"])
def test_values_the_engine_cannot_pass_on_are_refused(tmp_path, tagged: str) -> None:
    assert "line 3 is not valid YAML" in refusal(tmp_path, f"config:\n  gpu-platform:probe:\n    value: {tagged}\n")


# -- merge keys -----------------------------------------------------------------------------------------------------


def test_a_merge_key_loads_as_the_keys_it_merges(tmp_path) -> None:
    merged = SHIPPED.replace('    branch: "580"\n', '    <<: {branch: "580"}\n', 1)

    assert merged != SHIPPED
    assert load_text(tmp_path, merged).config == load_stack_file(ROOT / "Pulumi.dev.yaml", "dev").config


def test_written_keys_override_merged_ones_and_earlier_merges_win(tmp_path) -> None:
    value = probe(tmp_path, "{<<: [{a: 1, b: 1}, {a: 2, b: 2, c: 2}], b: 3}")

    assert value == {"a": 1, "b": 3, "c": 2}


@pytest.mark.parametrize(("mapping", "key", "line"), [
    ("    a: 1\n    a: 2\n", "'a'", 4),
    ("    <<: {a: 1}\n    <<: {b: 2}\n", "'<<'", 4),
    ("    base: &base {a: 1, a: 2}\n    copy: {<<: *base}\n", "'a'", 3),
])
def test_a_key_written_twice_is_still_refused(tmp_path, mapping: str, key: str, line: int) -> None:
    message = refusal(tmp_path, f"config:\n  gpu-platform:probe:\n{mapping}")

    assert f"line {line}: key {key} appears twice; keep one of them" in message


def test_merges_of_merges_stay_as_small_as_the_mapping_they_build(tmp_path) -> None:
    lines = ["  gpu-platform:probe:", "    m0: &m0 {k0: 0}"]
    lines += [f"    m{n}: &m{n} {{<<: [{', '.join([f'*m{n - 1}'] * 9)}], k{n}: {n}}}" for n in range(1, 30)]
    stack = tmp_path / "Pulumi.merges.yaml"
    stack.write_text(SHIPPED.replace("config:\n", "config:\n" + "\n".join(lines) + "\n", 1))

    result = run_gpuctl("render", "--config-file", str(stack), "--offline", "--out", str(tmp_path / "out"))

    # Read in full (29 levels of 9 merges each), the file reaches the config check, which names the unknown key.
    assert result.returncode == 2 and result.stderr.startswith("error: gpu-platform:probe: unknown config key")
    assert len(result.stderr.splitlines()) == 1, result.stderr[-2000:]


# -- secure values --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("secure", ["''", "'   '", "['not-shown']", "{value: not-shown}", "42", "null"])
def test_a_secure_value_must_be_ciphertext(tmp_path, secure: str) -> None:
    text = SHIPPED.replace("config:\n", f"config:\n  gpu-platform:registryPullSecret: {{secure: {secure}}}\n", 1)

    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text)

    message = str(caught.value)
    assert message.startswith("gpu-platform:registryPullSecret: secure:") and len(message.splitlines()) == 1
    assert message.endswith("re-run `pulumi config set --secret registryPullSecret`")
    assert "not-shown" not in message and "42" not in message


# -- where the stack file is ----------------------------------------------------------------------------------------


def test_a_config_file_that_is_a_folder_says_so(tmp_path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_stack_file(tmp_path, config_file=True)

    assert str(caught.value) == (f"--config-file {tmp_path}: is a folder, not a stack file; "
                                 "pass the Pulumi.<stack>.yaml file")


def test_a_missing_config_file_does_not_ask_for_config_file(tmp_path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_stack_file(tmp_path / "Pulumi.qa.yaml", config_file=True)

    assert str(caught.value) == f"--config-file {tmp_path / 'Pulumi.qa.yaml'}: no such file; " \
                                "pass the Pulumi.<stack>.yaml file"


def test_a_missing_stack_file_found_from_the_stack_name_keeps_its_message(tmp_path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_stack_file(tmp_path / "Pulumi.qa.yaml", "qa")

    assert str(caught.value) == f"{tmp_path / 'Pulumi.qa.yaml'}: no such stack file; create it or pass --config-file"


def test_values_nested_deeper_than_python_reads_are_one_line(tmp_path) -> None:
    message = refusal(tmp_path, f"config:\n  gpu-platform:probe: {'[' * 5000}{']' * 5000}\n")

    assert "nest too deeply" in message


# -- what is actually wrong with a file that is not a stack file -----------------------------------------------------


def test_a_misspelt_config_key_is_named(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    document["confg"] = document.pop("config")
    path = tmp_path / "Pulumi.qa.yaml"
    path.write_text(yaml.safe_dump(document))

    with pytest.raises(ConfigError) as caught:
        load_stack_file(path)

    assert str(caught.value) == f"{path}: unknown top-level key 'confg'; did you mean 'config'?"


def test_the_project_file_passed_as_a_stack_file_is_named_as_such() -> None:
    with pytest.raises(ConfigError) as caught:
        load_stack_file(ROOT / "Pulumi.yaml", config_file=True)

    assert str(caught.value) == (f"{ROOT / 'Pulumi.yaml'}: is the project file (Pulumi.yaml: name, runtime), not a "
                                 "stack file; pass a Pulumi.<stack>.yaml, whose config: holds the stack's settings")


def test_a_ciphertext_inside_a_value_is_never_echoed(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    document["config"]["gpu-platform:cluster"]["name"] = {"secure": "v1:Q2lwaGVydGV4dE9mVGhlTmFtZQ=="}
    path = tmp_path / "Pulumi.qa.yaml"
    path.write_text(yaml.safe_dump(document))

    with pytest.raises(ConfigError) as caught:
        load_stack_file(path)

    assert "Q2lwaGVy" not in str(caught.value)
    assert str(caught.value) == ("gpu-platform:cluster.name: is encrypted (secure:), which gpuctl cannot decrypt "
                                 "offline; only gpu-platform:registryPullSecret is a secret, so write this value in "
                                 "plain text")
