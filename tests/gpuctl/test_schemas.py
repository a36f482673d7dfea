"""Cached schema validation: the same verdicts as kubernetes_validate, with each schema compiled once."""

from __future__ import annotations

import kubernetes_validate
import pytest

from gpuctl import schemas
from gpuctl.render import schema_errors

GOOD = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok", "namespace": "gpu"},
        "data": {"key": "value"}}
BAD = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"}, "data": {"key": 1}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "typo"},
     "spec": {"selector": {}, "template": {"spec": {"containerz": []}}}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"},
     "rules": [{"verbs": "get"}]},
]


def reference_error(manifest: dict, version: str) -> str | None:
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return None
    except kubernetes_validate.ValidationError as error:
        return f"{'.'.join(map(str, error.path))}: {error.message}"
    return None


@pytest.mark.parametrize("version", ["1.29.0", "1.31.0"])
@pytest.mark.parametrize("manifest", [GOOD, *BAD], ids=lambda m: m["metadata"]["name"])
def test_same_first_error_as_kubernetes_validate(manifest: dict, version: str) -> None:
    error = schemas.first_error(manifest, version)
    mine = None if error is None else f"{'.'.join(map(str, error.path))}: {error.message}"
    assert mine == reference_error(manifest, version)


def test_custom_resources_are_skipped() -> None:
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"x": 1}}
    assert schema_errors([policy], "1.31") == []


def test_each_kind_is_compiled_once_however_many_objects() -> None:
    schemas.validator.cache_clear()
    objects = [{**GOOD, "metadata": {"name": f"cm-{index}", "namespace": "gpu"}} for index in range(200)]
    assert schema_errors(objects + BAD, "1.31") != []
    assert schemas.validator.cache_info().misses == 3  # ConfigMap, Deployment, ClusterRole
