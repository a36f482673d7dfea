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


def uncached_error(manifest: dict, version: str) -> str | None:
    found = schemas.validator(manifest["kind"], manifest["apiVersion"], version)
    error = None if found is None else next(found.iter_errors(manifest), None)
    return None if error is None else f"{'.'.join(map(str, error.path))}: {error.message}"


def cached_error(manifest: dict, version: str) -> str | None:
    error = schemas.first_error(manifest, version)
    return None if error is None else f"{'.'.join(map(str, error.path))}: {error.message}"


def variants(value, enum_value: str, depth: int = 0):
    """Copies of `value` with one leaf changed: a string to an int, to an enum value, to another string."""
    if isinstance(value, dict):
        for key, item in value.items():
            if depth == 0 and key in ("kind", "apiVersion"):
                continue  # these pick the schema
            for changed in variants(item, enum_value, depth + 1):
                yield {**value, key: changed}
        yield {**value, "unknownField": "x"}
    elif isinstance(value, list):
        for index, item in enumerate(value):
            for changed in variants(item, enum_value, depth + 1):
                yield [*value[:index], changed, *value[index + 1:]]
        yield [*value, value[0]] if value else ["x"]
    elif isinstance(value, str):
        yield from (7, enum_value, value + "-other", "")
    else:
        yield "seven"


def test_objects_of_one_shape_keep_each_its_own_first_error(prod_plan) -> None:
    """Valid objects of one shape are walked once; any change a schema could reject still gets its own error."""
    version = f"{prod_plan.outputs['kubernetesVersion']}.0"
    manifests = [resource["inputs"] for resource in prod_plan.resources if resource["custom"]
                 and resource["type"].startswith("kubernetes:") and schemas.validator(
                     resource["inputs"].get("kind", ""), resource["inputs"].get("apiVersion", ""), version)]
    assert len(manifests) >= 10
    for manifest in manifests:
        assert cached_error(manifest, version) is None  # each valid shape is now known
    checked = errors = 0
    for manifest in manifests:
        for enum_value in ("v1", "Namespace", "apps/v1"):  # values of the schemas' enums
            for changed in variants(manifest, enum_value):
                expected = uncached_error(changed, version)
                assert cached_error(changed, version) == expected, changed
                checked, errors = checked + 1, errors + (expected is not None)
    assert errors > checked // 4  # the variants do reach rejected shapes


def test_tenants_of_one_shape_validate_once() -> None:
    schemas._VALID.clear()
    tenants = [{"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "gpu-quota", "namespace": f"team-{index}", "labels": {"team": f"t{index}"}},
                "spec": {"hard": {"requests.nvidia.com/gpu": str(index)}}} for index in range(50)]
    assert schema_errors(tenants, "1.31") == []
    assert len(schemas._VALID) == 1
    bad = {**tenants[0], "spec": {"hard": {"requests.nvidia.com/gpu": True}}}
    assert schema_errors([bad], "1.31") == ["ResourceQuota/gpu-quota: spec.hard.requests.nvidia.com/gpu: "
                                            "True is not valid under any of the given schemas"]


def test_a_shape_keeps_keys_numbers_and_enum_values() -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"k": "v"}},
                "spec": {"priority": 3, "hostNetwork": False, "containers": [{"name": "c", "args": ["x", "y"]}]}}
    assert schemas.shape(manifest, frozenset({'"v1"', '"Pod"'})) == (
        '{"apiVersion":"v1","kind":"Pod","metadata":{"name":S,"labels":{"k":S}},'
        '"spec":{"priority":3,"hostNetwork":false,"containers":[{"name":S,"args":[S,S]}]}}')
    assert schemas.shape({"a": 'say "hi":'}, frozenset()) == '{"a":S}'
