"""Reads a stack file the way the Pulumi CLI hands it to the program: namespaced keys, secrets kept secret."""

from __future__ import annotations

import base64
import datetime
import json
import difflib
import errno
import math
import re
import stat
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuctl.inputs import read_input
from stacks.config import PROJECT, ConfigError

# Config namespaces a stack file may use: this project's and those of the providers and engine it runs with.
NAMESPACES = (PROJECT, "aws", "kubernetes", "pulumi")

# The top-level keys of a stack file, as the Pulumi CLI reads one (ProjectStack in pulumi/sdk/go/common/workspace/
# project.go).
STACK_FILE_KEYS = frozenset({"config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment"})

# Offline, encrypted values cannot be decrypted; the program sees a placeholder of the right shape, marked secret
# (the render masks every secret anyway).
ENCRYPTED = "[encrypted]"
# A placeholder the program accepts, holding the ciphertext so that a new one (a rotation) fingerprints differently
# in the preview; a value encrypted again unchanged shows as changed too.
ENCRYPTED_SHAPES = {f"{PROJECT}:registryPullSecret":
                    lambda ciphertext: json.dumps({"auths": {"encrypted.invalid": {
                        "auth": base64.b64encode(f"encrypted:{ciphertext}".encode()).decode()}}})}


@dataclass(frozen=True)
class StackFile:
    """A stack's name, its config as the engine passes it (full keys), and which keys are secret."""

    stack: str
    config: dict[str, Any]
    secret_keys: list[str]


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML as the Pulumi CLI reads it (Go yaml.v3, then its config round trip): only true/false are booleans,
    numbers and dates follow yaml.v3, no key appears twice, and `<<` merges mappings. libyaml parses where PyYAML
    has it (eight times faster on a stack of a thousand tenants); these rules hold either way."""

    def resolve(self, kind: type, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            if go_timestamp(value):
                return TIMESTAMP_TAG
            number = go_number(value)
            if number is not None:
                return FLOAT_TAG if isinstance(number, float) else INT_TAG
        return super().resolve(kind, value, implicit)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        number = go_number(self.construct_scalar(node))
        if not isinstance(number, int):
            raise yaml.constructor.ConstructorError(None, None, "expected an integer", node.start_mark)
        return number

    def construct_yaml_float(self, node: yaml.ScalarNode) -> int | float:
        number = go_number(self.construct_scalar(node))
        if number is None:
            raise yaml.constructor.ConstructorError(None, None, "expected a number", node.start_mark)
        return round_tripped(float(number))

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> None:
        raise UnquotedDate(self.construct_scalar(node), node.start_mark.line + 1)

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Refuse a key written twice, merge `<<` mappings in (written keys, then earlier merges, win), and keep one
        entry per key so merges of merges stay as small as the mappings they build."""
        seen = set()
        for key_node, _ in node.value:
            key = "<<" if key_node.tag == MERGE_TAG else self.construct_object(key_node)
            if isinstance(key, Hashable):
                if key in seen:
                    raise DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
        super().flatten_mapping(node)
        position: dict[Any, int] = {}  # a key keeps its first place and takes its last value, as a dict would
        pairs: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            key = self.construct_object(key_node)
            if isinstance(key, Hashable) and key in position:
                pairs[position[key]] = (pairs[position[key]][0], value_node)
                continue
            if isinstance(key, Hashable):
                position[key] = len(pairs)
            pairs.append((key_node, value_node))
        node.value = pairs


class DuplicateKey(Exception):
    def __init__(self, key: Any, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


class UnquotedDate(Exception):
    def __init__(self, text: str, line: int):
        super().__init__(text, line)
        self.text, self.line = text, line


class Cycle(Exception):
    """An alias inside the value its anchor names."""


class TooDeep(Exception):
    """Values nested more than MAX_DEPTH levels."""


INT_TAG, FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
TIMESTAMP_TAG, MERGE_TAG = "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge"

# yaml.v3 resolves null and `<<` as PyYAML does; booleans, numbers and dates StrictLoader resolves itself. Tags whose
# PyYAML values are no JSON (!!binary, !!set, !!omap, !!pairs) are refused: one line, not a traceback at render.
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag in ("tag:yaml.org,2002:null", MERGE_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                   list("tTfF"))
StrictLoader.yaml_constructors = {
    tag: construct for tag, construct in yaml.SafeLoader.yaml_constructors.items()
    if tag not in {f"tag:yaml.org,2002:{name}" for name in ("binary", "set", "omap", "pairs")}}
StrictLoader.add_constructor(INT_TAG, StrictLoader.construct_yaml_int)
StrictLoader.add_constructor(FLOAT_TAG, StrictLoader.construct_yaml_float)
StrictLoader.add_constructor(TIMESTAMP_TAG, StrictLoader.construct_yaml_timestamp)

# Go yaml.v3 (resolve.go): Go integer syntax with `_` dropped (0x, 0o, 0b and 1.1-style 010 octal), int64 or
# uint64; then this float syntax; a text starting with "." is a float if Go parses it. Base 60 (1:30) is text.
GO_INT = re.compile(r"(?P<sign>[-+]?)(?:0[xX](?P<hex>[0-9a-fA-F]+)|0[oO](?P<oct>[0-7]+)|0[bB](?P<bin>[01]+)"
                    r"|(?P<octal>0[0-7]*)|(?P<dec>[1-9][0-9]*))")
GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
GO_SPECIAL_FLOATS = {**{text: math.nan for text in (".nan", ".NaN", ".NAN")},
                     **{sign + inf: (-math.inf if sign == "-" else math.inf)
                        for sign in ("", "+", "-") for inf in (".inf", ".Inf", ".INF")}}
# yaml.v3 parseTimestamp: these layouts, read by Go's time.Parse (one- or two-digit fields, checked ranges).
GO_TIMESTAMP = re.compile(r"(?P<year>[0-9]{4})-(?P<month>[0-9]{1,2})-(?P<day>[0-9]{1,2})"
                          r"(?:[Tt](?P<t>[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2})(?:[.,][0-9]+)?(?:Z|[-+][0-9]{2}:[0-9]{2})"
                          r"| (?P<space>[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2})(?:[.,][0-9]+)?)?")


def go_number(text: str) -> int | float | None:
    """The number Go yaml.v3 reads from a plain scalar, or None where it reads text."""
    if text in GO_SPECIAL_FLOATS:
        return GO_SPECIAL_FLOATS[text]
    if text[:1] not in tuple("+-.0123456789"):
        return None
    plain = text if text.startswith(".") else text.replace("_", "")
    match = GO_INT.fullmatch(plain)
    if match:
        digits, base = next((match[name], base) for name, base in (("hex", 16), ("oct", 8), ("bin", 2),
                                                                     ("octal", 8), ("dec", 10)) if match[name])
        number = -int(digits, base) if match["sign"] == "-" else int(digits, base)
        if -2 ** 63 <= number < 2 ** 63 or (not match["sign"] and number < 2 ** 64):
            return number
    if GO_FLOAT.fullmatch(plain) and not math.isinf(float(plain)):
        return float(plain)
    return None


def round_tripped(number: float) -> int | float:
    """The CLI writes the stack back out and reads it again: a whole float under 1e6 prints as "%g" digits
    ("2", not "2.0"), which it then reads as an int."""
    return int(number) if number.is_integer() and abs(number) < 1e6 else number


def go_timestamp(text: str) -> bool:
    """Whether Go yaml.v3 reads this plain scalar as a date (the CLI then passes on a different text)."""
    match = GO_TIMESTAMP.fullmatch(text)
    if not match:
        return False
    hour, minute, second = (int(part) for part in (match["t"] or match["space"] or "0:0:0").split(":"))
    try:
        datetime.datetime(int(match["year"]), int(match["month"]), int(match["day"]), hour, minute, second)
    except ValueError:
        return False
    return True


# Aliases load as shared values, but the engine writes every value out: a few lines of anchors can stand for
# billions of values. yaml.v3 refuses excessive aliasing too.
MAX_EXPANDED_VALUES = 1_000_000
# Values nested deeper than this would exhaust Python's recursion in what reads them after (a few calls a level).
MAX_DEPTH = 200


def expanded_size(document: Any) -> int:
    """How many values the document holds with every alias written out, each container visited once; TooDeep
    when containers nest more than MAX_DEPTH levels."""
    sizes: dict[int, int] = {}
    children: dict[int, list[Any]] = {}  # of the containers being counted: the path from the document down
    pending = [document]
    while pending:
        value = pending[-1]
        if not isinstance(value, (dict, list)) or id(value) in sizes:
            pending.pop()
        elif id(value) not in children:
            if len(children) == MAX_DEPTH:
                raise TooDeep()
            children[id(value)] = list(value.values() if isinstance(value, dict) else value)
            for child in children[id(value)]:
                if id(child) in children:
                    raise Cycle()
                if isinstance(child, (dict, list)) and id(child) not in sizes:
                    pending.append(child)
        else:
            pending.pop()
            sizes[id(value)] = 1 + sum(sizes.get(id(child), 1) for child in children.pop(id(value)))
    return sizes.get(id(document), 1)


TOO_DEEP = "{path}: values nest too deeply to read; write the document with fewer levels"


def stack_file_path(root: Path, stack: str) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def load_stack_file(path: Path, stack: str | None = None, *, config_file: bool = False) -> StackFile:
    """Load `Pulumi.<stack>.yaml` (or any file of that shape); raise ConfigError with a one-line reason.

    `config_file`: the path came from --config-file, so errors name that option.
    """
    if stack is not None and not STACK_NAME.fullmatch(stack):
        raise ConfigError(f"--stack {stack!r}: {NOT_A_STACK_NAME}; pass the <stack> of a Pulumi.<stack>.yaml file")
    check_is_stack_file(path, config_file)
    text = read_input(path, str(path), "save the file as UTF-8, readable by you")
    try:
        document = yaml.load(text, Loader=StrictLoader) or {}
    except DuplicateKey as error:
        raise ConfigError(f"{path}: line {error.line}: key {error.key!r} appears twice; keep one of them") from None
    except UnquotedDate as error:
        raise ConfigError(f"{path}: line {error.line}: the Pulumi CLI reads {error.text} as a date and passes on "
                          f"another text; quote it: \"{error.text}\"") from None
    except RecursionError:
        raise ConfigError(TOO_DEEP.format(path=path)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} is not valid YAML; fix the indentation or quoting there") from None
    try:
        too_large = expanded_size(document) > MAX_EXPANDED_VALUES
    except Cycle:
        raise ConfigError(f"{path}: an alias (*name) stands inside the value its anchor names; "
                          "write the values out") from None
    except TooDeep:
        raise ConfigError(TOO_DEEP.format(path=path)) from None
    if too_large:
        raise ConfigError(f"{path}: anchors/aliases expand to more than {MAX_EXPANDED_VALUES:,} values; "
                          "write the values out")
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with a 'config:' mapping, as `pulumi config set` writes")
    if {"name", "runtime"} <= set(document):
        raise ConfigError(f"{path}: is the project file (Pulumi.yaml: name, runtime), not a stack file; pass a "
                          "Pulumi.<stack>.yaml, whose config: holds the stack's settings")
    unknown = sorted(str(key) for key in set(document) - STACK_FILE_KEYS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(STACK_FILE_KEYS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"a stack file holds {', '.join(sorted(STACK_FILE_KEYS))}"
        raise ConfigError(f"{path}: unknown top-level key {unknown[0]!r}; {hint}")
    name = stack if stack is not None else path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")
    if not STACK_NAME.fullmatch(name):
        raise ConfigError(f"{'--config-file ' if config_file else ''}{path}: the stack name {name!r} (from the file "
                          f"name) {NOT_A_STACK_NAME}; rename the file Pulumi.<stack>.yaml")
    return stack_file_from_config(name, document.get("config") or {})


# The stack names the Pulumi CLI accepts (pkg/backend/diy/backend.go, validateStackName).
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")

NOT_A_STACK_NAME = "is not a stack name Pulumi accepts (1 to 100 letters, digits, '-', '_' or '.')"


def check_is_stack_file(path: Path, config_file: bool) -> None:
    """A regular file at `path`, or a ConfigError naming --config-file when the path came from it."""
    where = f"--config-file {path}" if config_file else str(path)
    fix = "pass the Pulumi.<stack>.yaml file" if config_file else "put the stack file there or pass --config-file"
    try:
        mode = path.stat().st_mode
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise ConfigError(f"{where}: {error.strerror}; make the stack file readable") from None
        if config_file:
            raise ConfigError(f"{where}: no such file; {fix}") from None
        raise ConfigError(f"{where}: no such stack file; create it or pass --config-file") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{where}: is a folder, not a stack file; {fix}")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{where}: is not a regular file; {fix}")


def _encrypted_inside(value: Any, path: str = "") -> str | None:
    """Where a `secure:` value sits inside a structured value (".name", "[0].key"), or None."""
    if isinstance(value, dict) and set(value) == {"secure"} and path:
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _encrypted_inside(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        if found is not None:
            return found
    return None


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
            if not isinstance(value["secure"], str) or not value["secure"].strip():
                short_key = full_key.removeprefix(f"{PROJECT}:")
                raise ConfigError(f"{full_key}: secure: must be the ciphertext `pulumi config set --secret` writes; "
                                  f"re-run `pulumi config set --secret {short_key}`")
            value = ENCRYPTED_SHAPES[full_key](value["secure"]) if full_key in ENCRYPTED_SHAPES else ENCRYPTED
            secret_keys.append(full_key)
        elif (path := _encrypted_inside(value)) is not None:
            # The ciphertext is never shown: naming where it is says enough.
            raise ConfigError(f"{full_key}{path}: is encrypted (secure:), which gpuctl cannot decrypt offline; only "
                              f"{PROJECT}:registryPullSecret is a secret, so write this value in plain text")
        config[full_key] = value
    return StackFile(stack, config, secret_keys)
