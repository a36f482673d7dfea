"""Kubernetes OpenAPI validation with one compiled validator per (kind, apiVersion, Kubernetes version).

kubernetes_validate.validate re-reads and re-parses the schema files on every call; a fleet render validates
thousands of objects of a dozen kinds, so the schemas are loaded once from the same files and kept.
"""

from __future__ import annotations

import functools
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
    """The first schema violation of this object, as kubernetes_validate.validate(strict=True) reports it."""
    found = validator(manifest["kind"], manifest["apiVersion"], kubernetes_version)
    if found is None:
        return None
    return next(found.iter_errors(manifest), None)
