"""Reads a stack file the way the Pulumi CLI hands it to the program: namespaced keys, secrets kept secret."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stacks.config import PROJECT, ConfigError

# Config namespaces a stack file may use: this project's and those of the providers and engine it runs with.
NAMESPACES = (PROJECT, "aws", "kubernetes", "pulumi")

# Offline, encrypted values cannot be decrypted; the program sees a placeholder of the right shape, marked secret
# (the render masks every secret anyway).
ENCRYPTED = "[encrypted]"
ENCRYPTED_SHAPES = {f"{PROJECT}:registryPullSecret": '{"auths": {"encrypted.invalid": {"auth": "ZW5jcnlwdGVk"}}}'}


@dataclass(frozen=True)
class StackFile:
    """A stack's name, its config as the engine passes it (full keys), and which keys are secret."""

    stack: str
    config: dict[str, Any]
    secret_keys: list[str]


class StrictLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI (YAML 1.2) reads it: only true/false are booleans, and no key appears twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class DuplicateKey(Exception):
    def __init__(self, key: Any, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                   list("tTfF"))


def stack_file_path(root: Path, stack: str) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def load_stack_file(path: Path, stack: str | None = None) -> StackFile:
    """Load `Pulumi.<stack>.yaml` (or any file of that shape); raise ConfigError with a one-line reason."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such stack file; create it or pass --config-file")
    try:
        document = yaml.load(path.read_bytes().decode("utf-8"), Loader=StrictLoader) or {}
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: byte {error.start} is not UTF-8; save the file as UTF-8") from None
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror}; make the stack file readable") from None
    except DuplicateKey as error:
        raise ConfigError(f"{path}: line {error.line}: key {error.key!r} appears twice; keep one of them") from None
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
        full_key = key if ":" in str(key) else f"{PROJECT}:{key}"
        namespace = full_key.split(":", 1)[0]
        if namespace not in NAMESPACES:
            close = difflib.get_close_matches(namespace, NAMESPACES, n=1)
            hint = f"did you mean {close[0]}:{full_key.split(':', 1)[1]}?" if close else (
                f"use one of {', '.join(NAMESPACES)}")
            raise ConfigError(f"{full_key}: unknown config namespace {namespace!r}; {hint}")
        if isinstance(value, dict) and set(value) == {"secure"}:
            value = ENCRYPTED_SHAPES.get(full_key, ENCRYPTED)
            secret_keys.append(full_key)
        config[full_key] = value
    return StackFile(stack, config, secret_keys)
