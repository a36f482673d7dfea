"""Reading the stack's config: from the Pulumi runtime or a stack file, validated once."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

import pulumi
from pydantic import ValidationError

from stacks.config.fields import PROJECT, ConfigError, capped
from stacks.config.messages import describe
from stacks.config.stack import CONFIG_KEYS, SECRET_KEYS, StackConfig


def parse_stack_config(values: dict[str, Any]) -> StackConfig:
    """Validate the project's config values (camelCase key -> value); raise ConfigError naming the field."""
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], CONFIG_KEYS, n=1)
        hint = f"did you mean {PROJECT}:{close[0]}?" if close else f"known keys: {', '.join(CONFIG_KEYS)}"
        raise ConfigError(f"{PROJECT}:{unknown[0]}: unknown config key; {hint}")
    try:
        return StackConfig.model_validate(values)
    except ValidationError as error:
        raise ConfigError(capped(describe(error))) from None


def load_stack_config() -> StackConfig:
    """Read every `gpu-platform:*` key from the Pulumi runtime config once and validate it."""
    raw = pulumi.runtime.config.CONFIG.get()
    for full_key in raw:
        key = full_key.removeprefix(f"{PROJECT}:")
        if key == full_key:
            continue
        if key in SECRET_KEYS and not pulumi.runtime.is_config_secret(full_key):
            raise ConfigError(f"{full_key}: must be a secret; set it with `pulumi config set --secret {key}`")
        if key not in SECRET_KEYS and pulumi.runtime.is_config_secret(full_key):  # e.g. a `secure:` nested in it
            raise ConfigError(f"{full_key}: holds a `secure:` value, but the program keeps no field of it secret, so "
                              "it would show in plain text in resources and outputs; only registryPullSecret takes "
                              "a secret: remove the `secure:` value")
    return config_from_stack_file(raw)


def config_from_stack_file(values: Mapping[str, Any]) -> StackConfig:
    """The project's config values (full keys, as a stack file or the engine holds them) validated as the program
    reads them: structured values and `true`/`false` arrive as text under the engine (`pulumi config set preflight
    false`); a secret stays the text the user set (a JSON document is not decoded, so no error can echo it)."""
    prefix = f"{PROJECT}:"
    return parse_stack_config({key.removeprefix(prefix): value if key.removeprefix(prefix) in SECRET_KEYS
                               else _decode(value) for key, value in values.items() if key.startswith(prefix)})


def _decode(value: Any) -> Any:
    """Structured stack values reach the program as JSON text, and a top-level `true` or `false` as that text;
    other scalars stay as they are."""
    if value in ("true", "false"):
        return value == "true"
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value
