"""Kubernetes OpenAPI validation with one compiled validator per (kind, apiVersion, Kubernetes version).

kubernetes_validate.validate re-reads and re-parses the schema files on every call; a fleet render validates
thousands of objects of a dozen kinds, so the schemas are loaded once from the same files and kept.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import jsonschema
from kubernetes_validate.utils import all_versions, major_minor, schema_contents
from referencing import Registry, Resource


@functools.cache
def _schema_dir(kubernetes_version: str) -> str:
    """The strict schema folder kubernetes_validate uses for this version (the newest not newer than it)."""
    wanted = major_minor(kubernetes_version)
    version = [known for known in all_versions() if major_minor(known) <= wanted][-1]
    return f"kubernetes-json-schema/v{version}-local-strict"


@functools.cache
def _definitions(schema_dir: str) -> Resource:
    return Resource.from_contents(schema_contents(f"{schema_dir}/_definitions.json", schema_dir))


@functools.cache
def validator(kind: str, api_version: str, kubernetes_version: str) -> jsonschema.Validator | None:
    """The validator for this kind, or None when the schemas do not know it (custom resources)."""
    schema_dir = _schema_dir(kubernetes_version)
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = schema_contents(f"{schema_dir}/{kind.lower()}-{group_version}.json", kubernetes_version)
    except FileNotFoundError:
        return None
    registry = _definitions(schema_dir) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def first_error(manifest: dict[str, Any], kubernetes_version: str) -> jsonschema.ValidationError | None:
    """The first schema violation of this object, as kubernetes_validate.validate(strict=True) reports it.

    Objects of one shape share their verdict (see `shape`): once one is valid, the others are not walked again.
    An invalid shape is validated every time, so each object still gets its own first error.
    """
    kind, api_version = manifest["kind"], manifest["apiVersion"]
    found = validator(kind, api_version, kubernetes_version)
    if found is None:
        return None
    enums = _enum_strings(_schema_dir(kubernetes_version), kind, api_version)
    key = None if enums is None else (kind, api_version, kubernetes_version, shape(manifest, enums))
    if key is not None and key in _VALID:
        return None
    error = next(found.iter_errors(manifest), None)
    if error is None and key is not None:
        _VALID.add(key)
    return error


# Keywords of the Kubernetes schemas under which a string's verdict depends only on its being a string and on
# whether it is one of the enum values: no pattern, length, const or uniqueness. `format` is not asserted.
_SHAPE_KEYWORDS = frozenset({"$ref", "$defs", "$schema", "$id", "description", "type", "properties",
                             "additionalProperties", "items", "required", "enum", "format", "oneOf", "anyOf",
                             "allOf"})
_SUBSCHEMA_MAPS = frozenset({"properties", "$defs", "definitions"})
_VALID: set[tuple[str, str, str, str]] = set()
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"(:)?')


def _walk_enums(schema: Any, enums: set[str]) -> bool:
    """Collect the JSON text of every enum value into `enums`; False if a keyword outside _SHAPE_KEYWORDS is used."""
    if isinstance(schema, list):
        return all(_walk_enums(item, enums) for item in schema)
    if not isinstance(schema, dict):
        return True
    for keyword, value in schema.items():
        if keyword.startswith("x-kubernetes-") or keyword in ("description", "format", "$schema", "$id"):
            continue
        if keyword not in _SHAPE_KEYWORDS:
            return False
        if keyword == "enum":
            if not all(isinstance(item, str) for item in value):
                return False
            enums.update(json.dumps(item) for item in value)
        elif keyword in _SUBSCHEMA_MAPS:
            if not all(_walk_enums(item, enums) for item in value.values()):
                return False
        elif keyword not in ("type", "required", "$ref") and not _walk_enums(value, enums):
            return False
    return True


@functools.cache
def _definition_enums(schema_dir: str) -> frozenset[str] | None:
    enums: set[str] = set()
    return frozenset(enums) if _walk_enums(schema_contents(f"{schema_dir}/_definitions.json", schema_dir), enums) \
        else None


@functools.cache
def _enum_strings(schema_dir: str, kind: str, api_version: str) -> frozenset[str] | None:
    """The enum values this kind's schemas compare strings with, or None if its verdicts depend on more."""
    shared = _definition_enums(schema_dir)
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    own: set[str] = set()
    schema = schema_contents(f"{schema_dir}/{kind.lower()}-{group_version}.json", schema_dir)
    return None if shared is None or not _walk_enums(schema, own) else shared | own


def shape(manifest: dict[str, Any], enums: frozenset[str]) -> str:
    """The object as JSON with every string value that is not one of `enums` replaced by a bare S.

    Under the keywords the Kubernetes schemas use, two objects of one shape are both valid or both invalid:
    keys, numbers, booleans, nesting and list lengths are kept, and a replaced string was neither an enum
    value nor (S being no JSON string) confused with one.
    """
    return _STRING.sub(lambda match: match[0] if match[1] or match[0] in enums else "S",
                       json.dumps(manifest, separators=(",", ":")))
