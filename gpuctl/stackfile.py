"""Reads a stack file the way the Pulumi CLI hands it to the program: namespaced keys, secrets kept secret."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stacks.config import PROJECT, ConfigError

# Offline, encrypted values cannot be decrypted; the program sees this placeholder, marked secret.
ENCRYPTED = "[encrypted]"


@dataclass(frozen=True)
class StackFile:
    """A stack's name, its config as the engine passes it (full keys), and which keys are secret."""

    stack: str
    config: dict[str, Any]
    secret_keys: list[str]


def stack_file_path(root: Path, stack: str) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def load_stack_file(path: Path, stack: str | None = None) -> StackFile:
    """Load `Pulumi.<stack>.yaml` (or any file of that shape); raise ConfigError with a one-line reason."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such stack file; create it or pass --config-file")
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} is not valid YAML; fix the indentation or quoting there") from None
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with a 'config:' mapping, as `pulumi config set` writes")
    name = stack or path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")
    return stack_file_from_config(name, document.get("config") or {})


def stack_file_from_config(stack: str, values: Mapping[str, Any]) -> StackFile:
    """A `config:` mapping as the engine hands it to the program: full keys, `secure:` values kept secret."""
    config: dict[str, Any] = {}
    secret_keys: list[str] = []
    for key, value in values.items():
        full_key = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            value = ENCRYPTED
            secret_keys.append(full_key)
        config[full_key] = value
    return StackFile(stack, config, secret_keys)
